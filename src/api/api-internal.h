/* api-internal.h - shared between the files of src/api only. */
#ifndef AIRLOCK_API_INTERNAL_H
#define AIRLOCK_API_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "../db/db.h"
#include "../lib/http.h"
#include "../lib/json.h"
#include "../lib/route.h"
#include "api.h"

/* Who is calling: the result of authentication. Plain values, no heap. */
struct api_principal {
	char key_id[64];
	char tenant[64];   /* tenant id */
	bool admin;
};

struct auth_cache;
struct ratelimit;
struct keycap;
struct vault;

/* One per api_run; borrowed by every connection thread. */
struct api {
	const struct api_config *cfg;
	struct db *db;              /* shared; db.c serialises calls */
	struct auth_cache *cache;
	struct ratelimit *rl;       /* NULL when rate limiting is off */
	/* Per client address (IPv6: per /64), for the token checks a client
	 * without any credential can make the api run (port and envd tokens):
	 * taken before the lookup, given back when the token was good. */
	struct ratelimit *tokencheck;
	/* Requests to sandboxes in progress per tenant (api_max_inflight):
	 * each holds a connection thread until it ends, and an exec stream or
	 * a tunnel can last hours, while the server has HTTP_MAX_CONNS for
	 * everyone. NULL: no cap. */
	struct keycap *inflight;
	struct vault *vault;        /* store-only (public key); NULL: no credentials */
	struct cluster *cluster;    /* the nodes table's copy (cluster.c) */
};

/* --- auth.c: keys, hashing, the lookup cache --- */

#define API_KEY_PREFIX "al_"
#define API_KEY_HEX 32                    /* hex chars after the prefix */
#define AUTH_CACHE_TTL_MS 5000            /* other apis' revocations take effect within this */

/* SHA-256 of key as lowercase hex into out (65 bytes with NUL). */
void api_key_hash(const char *key, char out[65]);
/* Does s look like a key we issue ("al_" + 32 lowercase hex)? */
bool api_key_well_formed(const char *s);

struct auth_cache *auth_cache_new(void);
void auth_cache_free(struct auth_cache *c);   /* accepts NULL */
/* Forget every answer: after a key is revoked or a tenant deleted, so the
 * next request with it is looked up (and refused) at once. */
void auth_cache_clear(struct auth_cache *c);

/* Resolve a presented key. Returns 1 and fills *who when valid, 0 when
 * unknown or revoked, -errno on a DB failure. Answers (positive and negative)
 * are cached for AUTH_CACHE_TTL_MS, so the hot path costs one hash and one
 * mutex, not a DB query. key is borrowed. */
int auth_lookup(struct api *a, const char *key, struct api_principal *who, err_t *err);

/* Insert a new key for tenant_id. On success *key_out and *id_out are set
 * (caller owns both); the plain key exists nowhere else afterwards. */
int api_key_create(struct db *db, const char *tenant_id, const char *name, bool admin,
		   char **key_out, char **id_out, err_t *err);

/* --- ratelimit.c: token buckets per key id or per client --- */

/* rate <= 0 returns NULL (no limiting). */
struct ratelimit *ratelimit_new(double rate_per_s, double burst);
/* At most max_buckets buckets (0: no cap), for keys a client chooses
 * (its address): past the cap, idle buckets are dropped and newcomers
 * share one overflow bucket. */
struct ratelimit *ratelimit_new_capped(double rate_per_s, double burst, size_t max_buckets);
void ratelimit_free(struct ratelimit *rl);    /* accepts NULL */
/* Take one token for key_id. Returns true if allowed; otherwise false and
 * *retry_after_s is the whole number of seconds until a token is available. */
bool ratelimit_take(struct ratelimit *rl, const char *key_id, unsigned *retry_after_s);
/* Put back the token a take took (the request it paid for cost nothing). */
void ratelimit_give(struct ratelimit *rl, const char *key_id);
/* The client of a peer ("1.2.3.4:5", "[2001:db8::1]:5", http_req.peer):
 * its IPv4 address, or its IPv6 address's /64 ("2001:db8::/64"). */
void ratelimit_client_key(const char *peer, char *out, size_t n);

/* --- admin.c: endpoints served by the api itself --- */

void api_handle_tenants(struct api *a, struct http_req *req, struct http_conn *c,
			const struct api_principal *who);
void api_handle_keys(struct api *a, struct http_req *req, struct http_conn *c,
		     const struct api_principal *who);

/* api.c: take one of who's tenant's requests in progress for a request to
 * a sandbox; false when it has api_max_inflight already (answered 429).
 * Admin keys are not counted. Give it back when the request ends. */
bool api_inflight_take(struct api *a, struct http_conn *c, const struct api_principal *who);
void api_inflight_give(struct api *a, const struct api_principal *who);

/* api.c: before looking up a token that arrives without any other
 * credential (a port or envd token): one check from the client's bucket
 * (a->tokencheck); false and *retry_after_s when it has none left (the
 * caller answers 429). After a good token, api_token_check_give puts it
 * back: only failed checks use the client's budget. Another node's api
 * (api_cluster_is_peer) is not counted: it relays many clients' checks. */
bool api_token_check_take(struct api *a, const struct http_req *req, unsigned *retry_after_s);
void api_token_check_give(struct api *a, const struct http_req *req);

/* --- ready.c: GET /v1/ready (no key) --- */

void api_handle_ready(struct api *a, struct http_conn *c);

/* --- credentials.c: /v1/credentials (any key, own tenant only) --- */

void api_handle_credentials(struct api *a, struct http_req *req, struct http_conn *c,
			    const struct api_principal *who);

/* --- cluster.c: several nodes on one database --- */

struct cluster;
struct cluster *cluster_new(void);
void cluster_free(struct cluster *cl);   /* accepts NULL */
/* Write url, where other apis reach this one, into this node's row. */
int api_cluster_announce(struct api *a, const char *url, err_t *err);
/* Where a request to forward goes: 0 this node; 1 another node's api, at
 * url; -1 when it has answered (an unknown or unavailable node). */
int api_cluster_route(struct api *a, struct http_req *req, struct http_conn *c,
		      const struct api_principal *who, char *url, size_t cap);
/* The api of the node that has sandbox id, for a port request relayed
 * raw: as api_cluster_route. */
int api_cluster_peer(struct api *a, struct http_req *req, struct http_conn *c,
		     const struct api_principal *who, const char *id, char *url, size_t cap);
/* GET /v1/sandboxes across every up node; false (nothing answered) when
 * there is one node, or the request came from another api. */
bool api_cluster_list(struct api *a, struct http_req *req, struct http_conn *c,
		      const struct api_principal *who);
/* The api urls of the other up nodes, at most max (a list that fans out:
 * src/compat); 0 outside a cluster or for a request another api sent. */
size_t api_cluster_peer_urls(struct api *a, const struct http_req *req, char (*urls)[200],
			     size_t max);
/* Is ip the host of a node's url in the copy of the nodes table (an api
 * that forwards its clients' requests here)? Never waits for a query: for
 * the accept thread (api_max_conns_per_client does not apply to peers). */
bool api_cluster_is_peer(struct api *a, const char *ip);
/* GET /v1/nodes */
void api_handle_nodes(struct api *a, struct http_req *req, struct http_conn *c);

/* --- forward.c: forwarding to the node --- */

/* Forward to this host's node with another target (the tenant's id in
 * place of a name: /v1/tenants/{t}/encryption). */
void api_forward_to(struct api *a, struct http_req *req, struct http_conn *c,
		    const struct api_principal *who, const char *target);
void api_forward(struct api *a, struct http_req *req, struct http_conn *c,
		 const struct api_principal *who);

/* --- portfwd.c: port forwarding --- */

/* Write the request to the node as `target` (client headers minus our
 * credentials, plus identity), take the client connection over and relay
 * bytes both ways: proxied answers, WebSocket and tunnels pass unchanged. */
void api_forward_raw(struct api *a, struct http_req *req, struct http_conn *c,
		     const struct api_principal *who, const char *target, bool host_routed,
		     const char *sandbox_id);
/* A new port token for port of sandbox_id, valid ttl_s (1..7 days),
 * stored by its digest with who's tenant and key: 0 and *token (caller
 * owns) and *expires (wall ms); -1 when answered (404 for a sandbox who
 * does not own, 500). */
int api_port_token_mint(struct api *a, struct http_conn *c, const struct api_principal *who,
			const char *sandbox_id, int port, int64_t ttl_s, char **token,
			int64_t *expires);
/* POST /v1/sandboxes/{id}/port-tokens */
void api_port_token_create(struct api *a, struct http_req *req, struct http_conn *c,
			   const struct api_principal *who, const char *sandbox_id);
/* A request for {port}-{id}.<ports_domain>: authorises it (token or the
 * owner's key) and relays it. false when Host is not such a name. */
bool api_host_routed(struct api *a, struct http_req *req, struct http_conn *c);
/* The head hook's part of it (no body read yet): -1 when Host is not such a
 * name; 1 when the request carries a valid credential; 0 when it has
 * answered (401 or 500). */
int api_host_routed_head(struct api *a, struct http_req *req, struct http_conn *c);
/* Parsers of client bytes used above (fuzzed: tests/fuzz/fuzz-api-ports.c).
 * "8080-sb-x.<domain>[:port]" -> 8080 and "sb-x" (lowercased, id < idn). */
bool ports_parse_host(const char *host, const char *domain, unsigned *port, char *id,
		      size_t idn);
/* Cookie header value: our token cookie's value / the header without it
 * (NULL when nothing is left). Query string without airlock_token=, "" when
 * empty. All results caller-owned. */
char *ports_cookie_get(const char *v, const char *name);
/* The nth (from 0) cookie `name`: a host-routed request tries at most
 * PORT_TOKEN_COOKIES_MAX token cookies (portfwd.c says why). */
char *ports_cookie_nth(const char *v, const char *name, unsigned nth);
#define PORT_TOKEN_COOKIES_MAX 4
char *ports_cookie_without_token(const char *v);
/* The redirect after ?airlock_token=: target's path (a path of this host
 * only, else "/") with query q; the token's Set-Cookie value. Caller owns. */
char *ports_redirect_location(const char *target, const char *q);
char *ports_token_cookie(const char *token, int64_t max_age_s, bool https);
char *ports_query_without_token(const char *q);

/* --- desktop.c --- */

/* GET /v1/sandboxes/{id}/desktop/stream: the node starts the stream in the
 * sandbox, then a port token for noVNC's port and its URL. */
void api_desktop_stream(struct api *a, struct http_req *req, struct http_conn *c,
			const struct api_principal *who, const char *sandbox_id);

/* --- api.c: small helpers --- */

/* 405 method_not_allowed with an Allow header ("GET, POST"). */
void api_method_not_allowed(struct http_conn *c, const char *allow);
/* Parse a JSON object body for an admin endpoint. On failure it has already
 * answered (400 invalid_json / bad_request / unknown_field) and returns NULL.
 * allowed is a NULL-terminated list of field names. Caller owns the tree. */
struct json *api_parse_body(struct http_req *req, struct http_conn *c,
			    const char *const *allowed);

/* routes.c: the api's columns of src/lib/routes.def. auth: who may call
 * the route (API_NODE: nobody here, the node's socket only). */
enum api_auth { API_OPEN, API_KEY, API_ADMIN, API_NODE };
typedef void api_route_fn(struct api *a, struct http_req *req, struct http_conn *c,
			  const struct api_principal *who, const struct route_params *p);
struct api_route {
	const char *method;   /* "GET", ..., or "*" */
	const char *path;     /* "/v1/sandboxes/{id}", ".../{path...}" */
	enum api_auth auth;
	api_route_fn *fn;     /* who is NULL for API_OPEN */
};
/* The public row that takes (method, path; HEAD where GET goes), with the
 * path's values in params; else NULL, and allow gets the methods of the
 * path's rows ("GET, POST"), "" when no row takes the path (404). */
const struct api_route *api_route_find(const char *method, const char *path,
				       struct route_params *params, char *allow, size_t allow_n);
/* Does the row take no body (405 for other methods than GET, 413 for a
 * body, from the head)? */
bool api_route_bodiless(const struct api_route *r);
/* May the row's body be over 1 MiB (up to the server's max_body): a file
 * write, or bytes relayed to a sandbox's port. */
bool api_route_big_body(const struct api_route *r, const struct route_params *p);

/* Compatibility prefixes: another product's API under a path prefix,
 * translated onto Airlock's operations by handlers in src/compat/<name>,
 * which include this header and register here at start (the api includes
 * nothing of theirs: docs/INTERNALS.md). Each serves every path under it
 * itself (404/405 in that API's own error form). `airlockd routes` prints
 * them after the table as "* <prefix>/{path...}"; they are not Airlock's
 * API and not in docs/openapi.yaml (tests/e2e/test_openapi.py accepts
 * exactly these beyond the spec). */
struct api_compat {
	const char *prefix;       /* "/e2b": the path is it, or below it */
	/* The head hook's part (a body is announced, not read): true to go on,
	 * false when answered. */
	bool (*head)(struct api *a, struct http_req *req, struct http_conn *c);
	/* Serve the request, authentication included. */
	void (*handle)(struct api *a, struct http_req *req, struct http_conn *c);
};
/* Once at start, before the api serves; cp is borrowed for good. */
void api_compat_register(const struct api_compat *cp);
/* The compat prefix path is under, or NULL. */
const struct api_compat *api_compat_of(const char *path);

/* docs/openapi.yaml as built into the binary (<build>/gen/openapi-spec.c). */
extern const char airlock_openapi_yaml[];
extern const size_t airlock_openapi_yaml_len;

/* console/static as built into the binary (<build>/gen/console-assets.c,
 * scripts/embed-dir.cmake): path relative to console/static, bytes, length. */
struct airlock_asset {
	const char *path;
	const unsigned char *data;
	size_t len;
};
extern const struct airlock_asset airlock_console_assets[];
extern const size_t airlock_console_assets_n;

/* console.c: GET /console and /console/{path...}: the web console's static
 * files, without a key (they hold no data; the page asks for a key). */
void api_console_serve(struct http_req *req, struct http_conn *c);

#endif
