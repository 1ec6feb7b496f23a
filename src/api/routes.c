/* routes.c - the public API's routes: one table, checked on every request.
 *
 * The api answers 404 for a path no row matches and 405 (with Allow) for a
 * method no row of that path lists, before anything is served or forwarded.
 * So this table is the whole API as a client can reach it: a handler in the
 * node or here that has no row is unreachable. `airlockd routes` prints it,
 * and tests/e2e/test_openapi.py checks it against docs/openapi.yaml both
 * ways, so the spec cannot miss a route nor list one that is not there.
 *
 * Patterns: literal segments, `{name}` for one non-empty segment, and a last
 * `{path...}` for any number of segments (zero included). Method "*": any. */
#include <stdio.h>
#include <string.h>

#include "../lib/util.h"
#include "api-internal.h"

const struct api_route api_routes[] = {
	{ "GET", "/metrics" },
	{ "GET", "/v1/health" },
	{ "GET", "/v1/ready" },
	{ "GET", "/v1/openapi.yaml" },
	{ "GET", "/console" },
	{ "GET", "/console/{path...}" },
	{ "GET", "/v1/tenants" },
	{ "POST", "/v1/tenants" },
	{ "GET", "/v1/tenants/{tenant}/quota" },
	{ "DELETE", "/v1/tenants/{tenant}" },
	{ "PUT", "/v1/tenants/{tenant}/quota" },
	{ "GET", "/v1/keys" },
	{ "GET", "/v1/tenants/{tenant}/encryption" },
	{ "PUT", "/v1/tenants/{tenant}/encryption" },
	{ "POST", "/v1/tenants/{tenant}/encryption/rotate" },
	{ "POST", "/v1/keys" },
	{ "DELETE", "/v1/keys/{id}" },
	{ "GET", "/v1/nodes" },
	{ "GET", "/v1/node" },
	{ "GET", "/v1/node/doctor" },
	{ "GET", "/v1/credentials" },
	{ "POST", "/v1/credentials" },
	{ "GET", "/v1/credentials/audit" },
	{ "GET", "/v1/credentials/{id}" },
	{ "DELETE", "/v1/credentials/{id}" },
	{ "POST", "/v1/credentials/{id}/rotate" },
	{ "POST", "/v1/credentials/{id}/bind" },
	{ "POST", "/v1/credentials/{id}/unbind" },
	{ "GET", "/v1/templates" },
	{ "POST", "/v1/templates" },
	{ "DELETE", "/v1/templates/{name}" },
	{ "GET", "/v1/sandboxes" },
	{ "POST", "/v1/sandboxes" },
	{ "GET", "/v1/sandboxes/events" },
	{ "GET", "/v1/sandboxes/{id}" },
	{ "DELETE", "/v1/sandboxes/{id}" },
	{ "POST", "/v1/sandboxes/{id}/pause" },
	{ "POST", "/v1/sandboxes/{id}/resume" },
	{ "POST", "/v1/sandboxes/{id}/suspend" },
	{ "POST", "/v1/sandboxes/{id}/restore" },
	{ "POST", "/v1/sandboxes/{id}/connect" },
	{ "POST", "/v1/sandboxes/{id}/timeout" },
	{ "GET", "/v1/sandboxes/{id}/snapshots" },
	{ "POST", "/v1/sandboxes/{id}/snapshots" },
	{ "DELETE", "/v1/sandboxes/{id}/snapshots/{snapshot}" },
	{ "POST", "/v1/sandboxes/{id}/rollback" },
	{ "POST", "/v1/sandboxes/{id}/fork" },
	{ "POST", "/v1/sandboxes/{id}/exec" },
	{ "GET", "/v1/sandboxes/{id}/processes" },
	{ "GET", "/v1/sandboxes/{id}/processes/{pid}/output" },
	{ "POST", "/v1/sandboxes/{id}/processes/{pid}/stdin" },
	{ "POST", "/v1/sandboxes/{id}/processes/{pid}/signal" },
	{ "POST", "/v1/sandboxes/{id}/processes/{pid}/resize" },
	{ "GET", "/v1/sandboxes/{id}/events" },
	{ "GET", "/v1/sandboxes/{id}/metrics" },
	{ "GET", "/v1/sandboxes/{id}/console" },
	{ "GET", "/v1/sandboxes/{id}/files" },
	{ "PUT", "/v1/sandboxes/{id}/files" },
	{ "DELETE", "/v1/sandboxes/{id}/files" },
	{ "GET", "/v1/sandboxes/{id}/files/stat" },
	{ "GET", "/v1/sandboxes/{id}/files/list" },
	{ "GET", "/v1/sandboxes/{id}/files/watch" },
	{ "POST", "/v1/sandboxes/{id}/files/mkdir" },
	{ "POST", "/v1/sandboxes/{id}/files/rename" },
	{ "GET", "/v1/sandboxes/{id}/network" },
	{ "PATCH", "/v1/sandboxes/{id}/network" },
	{ "GET", "/v1/sandboxes/{id}/network/log" },
	{ "*", "/v1/sandboxes/{id}/ports/{port}/{path...}" },
	{ "GET", "/v1/sandboxes/{id}/tunnel/{port}" },
	{ "POST", "/v1/sandboxes/{id}/port-tokens" },
};
const size_t api_n_routes = ARRAY_SIZE(api_routes);

/* Compatibility prefixes: other products' APIs, translated onto Airlock's
 * own operations and documented apart (not in docs/openapi.yaml). Each
 * serves every path under it itself (404/405 in that API's own error
 * form). tests/e2e/test_openapi.py accepts exactly these beyond the spec. */
const struct api_compat api_compat[] = {
	{ { "*", "/e2b/{path...}" }, "/e2b", e2b_head_check, e2b_handle },   /* docs/E2B.md */
};
const size_t api_n_compat = ARRAY_SIZE(api_compat);

const struct api_compat *api_compat_of(const char *path)
{
	for (size_t i = 0; i < api_n_compat; i++) {
		size_t n = strlen(api_compat[i].prefix);

		if (strncmp(path, api_compat[i].prefix, n) == 0 && (path[n] == '\0' || path[n] == '/'))
			return &api_compat[i];
	}
	return NULL;
}

/* Does path match pattern? Both start with '/'. */
static bool pattern_match(const char *pat, const char *path)
{
	while (*pat == '/' && *path == '/') {
		const char *ps = pat + 1, *xs = path + 1;
		size_t pn = strcspn(ps, "/"), xn = strcspn(xs, "/");

		if (pn >= 5 && ps[0] == '{' && strncmp(ps + pn - 4, "...}", 4) == 0)
			return true;   /* the rest, of any depth */
		if (ps[0] == '{' && ps[pn - 1] == '}') {
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
	    !strchr(pat + 1, '/'))
		return true;
	return *pat == '\0' && *path == '\0';
}

/* Is method one of the ", "-separated list so far? */
static bool allow_has(const char *allow, const char *method)
{
	size_t n = strlen(method);

	for (const char *p = allow; *p; p += strspn(p, ", ")) {
		size_t k = strcspn(p, ",");

		if (k == n && strncmp(p, method, n) == 0)
			return true;
		p += k;
	}
	return false;
}

int api_route_check(const char *method, const char *path, char *allow, size_t allow_n)
{
	bool path_known = false;
	size_t used = 0;

	if (allow_n)
		allow[0] = '\0';
	for (size_t i = 0; i < api_n_routes; i++) {
		const struct api_route *r = &api_routes[i];

		if (!pattern_match(r->path, path))
			continue;
		path_known = true;
		/* HEAD goes where GET goes; the handler answers it as it does */
		if (!strcmp(r->method, "*") || !strcmp(r->method, method) ||
		    (!strcmp(method, "HEAD") && !strcmp(r->method, "GET")))
			return 1;
		/* two rows may take one path (/console and /console/{path...}) */
		if (allow_n && allow_has(allow, r->method))
			continue;
		if (used + strlen(r->method) + 3 < allow_n)
			used += (size_t)snprintf(allow + used, allow_n - used, "%s%s",
						 used ? ", " : "", r->method);
	}
	return path_known ? -1 : 0;
}

void api_routes_print(FILE *f)
{
	for (size_t i = 0; i < api_n_routes; i++)
		fprintf(f, "%s %s\n", api_routes[i].method, api_routes[i].path);
	for (size_t i = 0; i < api_n_compat; i++)
		fprintf(f, "%s %s\n", api_compat[i].route.method, api_compat[i].route.path);
}
