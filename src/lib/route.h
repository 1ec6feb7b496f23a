/* route.h - match a request path against a route pattern (routes.def).
 *
 * Patterns: literal segments, `{name}` for one non-empty segment, and a last
 * `{path...}` for any number of segments (zero included). The api and the
 * node match the same table with it, so a path means the same to both.
 */
#ifndef AIRLOCK_ROUTE_H
#define AIRLOCK_ROUTE_H

#include <stdbool.h>
#include <stddef.h>

#define ROUTE_MAX_PARAMS 4

/* The path's values of a pattern's {name}s: each points into the path
 * matched, len bytes long (not NUL-terminated: see route_params_cut). */
struct route_params {
	unsigned n;
	struct {
		const char *name;   /* into the pattern, name_len bytes, no braces */
		size_t name_len;
		const char *val;
		size_t len;
	} p[ROUTE_MAX_PARAMS];
};

/* Does path match pattern? Both start with '/'. params (may be NULL) gets
 * the values of the pattern's {name}s; it is filled only on a match. */
bool route_match(const char *pattern, const char *path, struct route_params *params);

/* The value of {name}, or NULL; *len (may be NULL) its length. */
const char *route_param(const struct route_params *params, const char *name, size_t *len);

/* End each value with a NUL in place, so route_param's results are strings.
 * Only for params of a path the caller owns and matches no more: the byte
 * after a value is the path's next '/'. */
void route_params_cut(struct route_params *params);

#endif
