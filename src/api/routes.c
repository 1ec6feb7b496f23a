/* routes.c - the public API's routes: the api's columns of src/lib/routes.def.
 *
 * The api answers 404 for a path no public row matches and 405 (with Allow)
 * for a method no row of that path lists, before anything is served or
 * forwarded. So the table is the whole API as a client can reach it: a
 * handler in the node or here that has no row is unreachable. `airlockd
 * routes` prints it, and tests/e2e/test_openapi.py checks it against
 * docs/openapi.yaml both ways, so the spec cannot miss a route nor list one
 * that is not there. Below: each row's handling here (the api column), the
 * lookup, and the compatibility prefixes. */
#include <stdio.h>
#include <string.h>

#include "../lib/util.h"
#include "api-internal.h"

/* ---- the api column: what the api does with a row's request ---------- */

/* GET only: HEAD, which the table lets through where GET goes, is 405
 * here (as it always was for health, ready and the admin node routes). */
static bool get_only(const struct http_req *req, struct http_conn *c)
{
	if (strcmp(req->method, "GET") == 0)
		return true;
	api_method_not_allowed(c, "GET");
	return false;
}

static void api_health(struct api *a, struct http_req *req, struct http_conn *c,
		       const struct api_principal *who, const struct route_params *p)
{
	(void)a, (void)who, (void)p;
	if (get_only(req, c))
		http_respond_json(c, 200, "{\"status\":\"ok\"}");
}

static void api_ready(struct api *a, struct http_req *req, struct http_conn *c,
		      const struct api_principal *who, const struct route_params *p)
{
	(void)who, (void)p;
	if (get_only(req, c))
		api_handle_ready(a, c);
}

static void api_spec(struct api *a, struct http_req *req, struct http_conn *c,
		     const struct api_principal *who, const struct route_params *p)
{
	(void)a, (void)req, (void)who, (void)p;
	http_respond(c, 200, "application/yaml", airlock_openapi_yaml, airlock_openapi_yaml_len,
		     NULL);
}

static void api_console(struct api *a, struct http_req *req, struct http_conn *c,
			const struct api_principal *who, const struct route_params *p)
{
	(void)a, (void)who, (void)p;
	api_console_serve(req, c);
}

static void api_tenants(struct api *a, struct http_req *req, struct http_conn *c,
			const struct api_principal *who, const struct route_params *p)
{
	(void)p;
	api_handle_tenants(a, req, c, who);
}

static void api_keys(struct api *a, struct http_req *req, struct http_conn *c,
		     const struct api_principal *who, const struct route_params *p)
{
	(void)p;
	api_handle_keys(a, req, c, who);
}

static void api_credentials(struct api *a, struct http_req *req, struct http_conn *c,
			    const struct api_principal *who, const struct route_params *p)
{
	(void)p;
	api_handle_credentials(a, req, c, who);
}

static void api_nodes(struct api *a, struct http_req *req, struct http_conn *c,
		      const struct api_principal *who, const struct route_params *p)
{
	(void)who, (void)p;
	api_handle_nodes(a, req, c);
}

static void api_fwd(struct api *a, struct http_req *req, struct http_conn *c,
		    const struct api_principal *who, const struct route_params *p)
{
	(void)p;
	api_forward(a, req, c, who);
}

/* PUT .../files: forwarded, with a body up to the server's max_body
 * (api_route_big_body). */
static void api_fwd_upload(struct api *a, struct http_req *req, struct http_conn *c,
			   const struct api_principal *who, const struct route_params *p)
{
	api_fwd(a, req, c, who, p);
}

static void api_fwd_get(struct api *a, struct http_req *req, struct http_conn *c,
			const struct api_principal *who, const struct route_params *p)
{
	(void)p;
	if (get_only(req, c))
		api_forward(a, req, c, who);
}

/* GET /v1/sandboxes: every node's in a cluster. */
static void api_fwd_list(struct api *a, struct http_req *req, struct http_conn *c,
			 const struct api_principal *who, const struct route_params *p)
{
	(void)p;
	if (strcmp(req->method, "GET") != 0 || !api_cluster_list(a, req, c, who))
		api_forward(a, req, c, who);
}

/* {id} into id[65]; false when it does not fit. Such a request was always
 * forwarded as any other (the node answers it has no such sandbox), not
 * relayed nor served here. */
static bool sandbox_id(const struct route_params *p, char id[65])
{
	size_t n;
	const char *v = route_param(p, "id", &n);

	if (!v || n >= 65)
		return false;
	memcpy(id, v, n);
	id[n] = '\0';
	return true;
}

/* /ports/{port}/... and /tunnel/{port}: relayed raw both ways (portfwd.c). */
static void api_relay(struct api *a, struct http_req *req, struct http_conn *c,
		      const struct api_principal *who, const struct route_params *p)
{
	char id[65];

	if (sandbox_id(p, id))
		api_forward_raw(a, req, c, who, req->target, false, id);
	else
		api_forward(a, req, c, who);
}

static void api_port_tokens(struct api *a, struct http_req *req, struct http_conn *c,
			    const struct api_principal *who, const struct route_params *p)
{
	char id[65];

	if (sandbox_id(p, id))
		api_port_token_create(a, req, c, who, id);
	else
		api_forward(a, req, c, who);
}

static void api_desktop(struct api *a, struct http_req *req, struct http_conn *c,
			const struct api_principal *who, const struct route_params *p)
{
	char id[65];

	if (sandbox_id(p, id))
		api_desktop_stream(a, req, c, who, id);
	else
		api_forward(a, req, c, who);
}

/* ---- the table --------------------------------------------------------- */

static const struct api_route api_routes[] = {
#define ROUTE(method, pattern, auth, api, node, node_flags, peers) \
	{ method, pattern, API_##auth, api },
#include "../lib/routes.def"
#undef ROUTE
};

/* Health, ready and the console: the head hook answers a body (the spec's
 * row is not one: with a body it goes through the key check, as it always
 * did). */
bool api_route_bodiless(const struct api_route *r)
{
	return r->fn == api_health || r->fn == api_ready || r->fn == api_console;
}

bool api_route_big_body(const struct api_route *r, const struct route_params *p)
{
	char id[65];

	return r->fn == api_fwd_upload || (r->fn == api_relay && sandbox_id(p, id));
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

const struct api_route *api_route_find(const char *method, const char *path,
				       struct route_params *params, char *allow, size_t allow_n)
{
	size_t used = 0;

	if (allow_n)
		allow[0] = '\0';
	for (size_t i = 0; i < ARRAY_SIZE(api_routes); i++) {
		const struct api_route *r = &api_routes[i];

		if (r->auth == API_NODE || !route_match(r->path, path, params))
			continue;
		/* HEAD goes where GET goes; the handler answers it as it does */
		if (!strcmp(r->method, "*") || !strcmp(r->method, method) ||
		    (!strcmp(method, "HEAD") && !strcmp(r->method, "GET")))
			return r;
		/* two rows may take one path (/console and /console/{path...}) */
		if (allow_n && allow_has(allow, r->method))
			continue;
		if (used + strlen(r->method) + 3 < allow_n)
			used += (size_t)snprintf(allow + used, allow_n - used, "%s%s",
						 used ? ", " : "", r->method);
	}
	return NULL;
}

/* ---- compatibility prefixes ------------------------------------------- */

/* Filled once at start, before any thread (airlockd's main). */
static const struct api_compat *compat[4];
static size_t n_compat;

void api_compat_register(const struct api_compat *cp)
{
	if (n_compat < ARRAY_SIZE(compat))
		compat[n_compat++] = cp;
}

const struct api_compat *api_compat_of(const char *path)
{
	for (size_t i = 0; i < n_compat; i++) {
		size_t n = strlen(compat[i]->prefix);

		if (strncmp(path, compat[i]->prefix, n) == 0 && (path[n] == '\0' || path[n] == '/'))
			return compat[i];
	}
	return NULL;
}

void api_routes_print(FILE *f)
{
	for (size_t i = 0; i < ARRAY_SIZE(api_routes); i++)
		if (api_routes[i].auth != API_NODE)
			fprintf(f, "%s %s\n", api_routes[i].method, api_routes[i].path);
	for (size_t i = 0; i < n_compat; i++)
		fprintf(f, "* %s/{path...}\n", compat[i]->prefix);
}
