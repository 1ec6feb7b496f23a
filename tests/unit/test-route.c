/* test-route: the route patterns (src/lib/route.c) that the api and the
 * node both match src/lib/routes.def with, and the table itself. */
#include <string.h>

#include "../../src/lib/route.h"
#include "../../src/lib/util.h"
#include "check.h"

static bool param_is(const struct route_params *p, const char *name, const char *want)
{
	size_t n;
	const char *v = route_param(p, name, &n);

	return v && n == strlen(want) && strncmp(v, want, n) == 0;
}

static void test_match(void)
{
	struct route_params p;

	CHECK(route_match("/v1/health", "/v1/health", NULL));
	CHECK(!route_match("/v1/health", "/v1/health/", NULL));
	CHECK(!route_match("/v1/health", "/v1/healthz", NULL));
	CHECK(!route_match("/v1/sandboxes/{id}", "/v1/sandboxes/", NULL));
	CHECK(!route_match("/v1/sandboxes/{id}", "/v1/sandboxes", NULL));
	CHECK(route_match("/v1/sandboxes/{id}/processes/{pid}/stdin",
			  "/v1/sandboxes/sb-1/processes/42/stdin", &p));
	CHECK(p.n == 2 && param_is(&p, "id", "sb-1") && param_is(&p, "pid", "42"));
	CHECK(!route_param(&p, "port", NULL));

	/* {path...}: any depth, zero included, and the bare prefix */
	const char *ports = "/v1/sandboxes/{id}/ports/{port}/{path...}";
	CHECK(route_match(ports, "/v1/sandboxes/x/ports/80/a/b", &p));
	CHECK(param_is(&p, "port", "80") && param_is(&p, "path", "a/b"));
	CHECK(route_match(ports, "/v1/sandboxes/x/ports/80/", &p) && param_is(&p, "path", ""));
	CHECK(route_match(ports, "/v1/sandboxes/x/ports/80", &p) && param_is(&p, "path", ""));
	CHECK(!route_match(ports, "/v1/sandboxes/x/ports/", NULL));
	CHECK(route_match("/console/{path...}", "/console/", NULL));
	CHECK(route_match("/console/{path...}", "/console", NULL));

	/* a failed match leaves params alone */
	p.n = 7;
	CHECK(!route_match("/v1/keys/{id}", "/v1/tenants/t", &p) && p.n == 7);

	char path[] = "/v1/sandboxes/sb-9/snapshots/s1";
	CHECK(route_match("/v1/sandboxes/{id}/snapshots/{snapshot}", path, &p));
	route_params_cut(&p);
	CHECK(!strcmp(route_param(&p, "id", NULL), "sb-9"));
	CHECK(!strcmp(route_param(&p, "snapshot", NULL), "s1"));
}

struct row {
	const char *method, *pattern;
	bool public, node;
	const char *flags;
	const char *peers;
};

#define ROUTE(method, pattern, auth, api, node, flags, peers) \
	{ method, pattern, strcmp(#auth, "NODE") != 0, strcmp(#node, "NULL") != 0, #flags, \
	  #peers },
static const struct row rows[] = {
#include "../../src/lib/routes.def"
};
#undef ROUTE

/* Every row is well formed, reachable by someone, and no two take the same
 * method and pattern; a row whose node router finds the sandbox has {id}. */
static void test_table(void)
{
	for (size_t i = 0; i < ARRAY_SIZE(rows); i++) {
		const struct row *r = &rows[i];

		CHECK(r->pattern[0] == '/');
		CHECK(r->public || r->node);
		/* the node's peer check: what the api forwards is the api's to
		 * call; the gateway has one row, and it is not public */
		CHECK(!strcmp(r->peers, "API") || !strcmp(r->peers, "GW") ||
		      !strcmp(r->peers, "ROOT"));
		CHECK(!r->public || !strcmp(r->peers, "API"));
		CHECK(strcmp(r->peers, "GW") || !strcmp(r->pattern, "/internal/network"));
		CHECK(route_match(r->pattern, r->pattern, NULL));
		if (strstr(r->flags, "N_FIND") || strstr(r->flags, "N_CLAIM"))
			CHECK(strncmp(r->pattern, "/v1/sandboxes/{id}", 18) == 0);
		for (size_t j = 0; j < i; j++)
			CHECK(strcmp(rows[j].method, r->method) || strcmp(rows[j].pattern, r->pattern));
	}
}

int main(void)
{
	test_match();
	test_table();
	return check_done("test-route");
}
