/* fuzz-route: a request path, as a client sends it, matched against every
 * pattern of the route table (src/lib/routes.def) the way the api and the
 * node match it. A match must hand back values that lie inside the path,
 * are not empty, and (but for a last {path...}) hold no '/'; cutting them
 * in place must leave the same values as strings. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/lib/route.h"

static const char *const patterns[] = {
#define ROUTE(method, pattern, ...) pattern,
#include "../../src/lib/routes.def"
#undef ROUTE
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *path;

	if (size > 4096)
		return 0;
	path = malloc(size + 2);
	path[0] = '/';
	memcpy(path + 1, data, size);
	path[size + 1] = '\0';
	for (size_t i = 0; i < sizeof(patterns) / sizeof(patterns[0]); i++) {
		struct route_params rp;
		size_t plen = strlen(path);

		if (!route_match(patterns[i], path, &rp))
			continue;
		if (rp.n > ROUTE_MAX_PARAMS)
			abort();
		for (unsigned k = 0; k < rp.n; k++) {
			const char *v = rp.p[k].val;
			/* {name...}: the name stops before the dots */
			int rest = strncmp(rp.p[k].name + rp.p[k].name_len, "...}", 4) == 0;

			if (v < path || v + rp.p[k].len > path + plen)
				abort();
			if (!rest && (rp.p[k].len == 0 || memchr(v, '/', rp.p[k].len)))
				abort();
		}
		char *copy = strdup(path);
		struct route_params cp;
		if (!route_match(patterns[i], copy, &cp) || cp.n != rp.n)
			abort();
		route_params_cut(&cp);
		for (unsigned k = 0; k < cp.n; k++)
			if (strlen(cp.p[k].val) != rp.p[k].len ||
			    memcmp(cp.p[k].val, path + (rp.p[k].val - path), rp.p[k].len) != 0)
				abort();
		free(copy);
	}
	free(path);
	return 0;
}
