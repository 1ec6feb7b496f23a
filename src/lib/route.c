/* route.c - route patterns (route.h). */
#include <string.h>

#include "route.h"

bool route_match(const char *pat, const char *path, struct route_params *params)
{
	struct route_params got = { 0 };

	while (*pat == '/' && *path == '/') {
		const char *ps = pat + 1, *xs = path + 1;
		size_t pn = strcspn(ps, "/"), xn = strcspn(xs, "/");
		bool param = pn >= 2 && ps[0] == '{' && ps[pn - 1] == '}';
		bool rest = param && pn >= 5 && strncmp(ps + pn - 4, "...}", 4) == 0;

		if (param && (rest || xn > 0) && got.n < ROUTE_MAX_PARAMS) {
			got.p[got.n].name = ps + 1;
			got.p[got.n].name_len = pn - (rest ? 5 : 2);
			got.p[got.n].val = xs;
			got.p[got.n].len = rest ? strlen(xs) : xn;
			got.n++;
		}
		if (rest)
			goto matched;   /* the rest, of any depth */
		if (param) {
			if (xn == 0)
				return false;
		} else if (pn != xn || strncmp(ps, xs, pn) != 0) {
			return false;
		}
		pat = ps + pn;
		path = xs + xn;
	}
	/* "/ports/{port}/{path...}" also takes "/ports/{port}" */
	if (*path == '\0' && strncmp(pat, "/{", 2) == 0 && strstr(pat, "...}") &&
	    !strchr(pat + 1, '/')) {
		if (got.n == ROUTE_MAX_PARAMS)
			goto matched;
		got.p[got.n].name = pat + 2;
		got.p[got.n].name_len = strlen(pat + 2) - 4;
		got.p[got.n].val = path;
		got.p[got.n].len = 0;
		got.n++;
		goto matched;
	}
	if (*pat != '\0' || *path != '\0')
		return false;
matched:
	if (params)
		*params = got;
	return true;
}

const char *route_param(const struct route_params *params, const char *name, size_t *len)
{
	size_t n = strlen(name);

	for (unsigned i = 0; i < params->n; i++) {
		if (params->p[i].name_len == n && strncmp(params->p[i].name, name, n) == 0) {
			if (len)
				*len = params->p[i].len;
			return params->p[i].val;
		}
	}
	return NULL;
}

void route_params_cut(struct route_params *params)
{
	for (unsigned i = 0; i < params->n; i++)
		((char *)params->p[i].val)[params->p[i].len] = '\0';
}
