/* api.c - `airlockd api`: routing, authentication, rate limiting, lifecycle.
 *
 * Order of checks for every request (each step answers and stops on failure):
 *   1. route in the table?     404 not_found, or 405 with Allow (no auth
 *                              needed to learn that; src/lib/routes.def)
 *   2. GET /v1/health          200, unauthenticated (liveness)
 *      GET /v1/openapi.yaml    200, unauthenticated (the built-in spec)
 *      GET /v1/ready           200 or 503, unauthenticated (ready.c)
 *      GET /console[/...]      200, unauthenticated: the web console's static
 *                              files (console.c), which hold no data
 *   3. Authorization: Bearer   401 unauthorized (missing, malformed, unknown, revoked)
 *      (1, 3, 5 and 6 are checked first from the head alone when a body
 *      is announced, before the server reads it: head_check)
 *   4. per-key token bucket    429 rate_limited + Retry-After
 *   5. admin-only route?       403 forbidden
 *   6. body over 1 MiB and not a file write: 413 body_too_large
 *   7. the row's handling (routes.c): serve (admin.c, credentials.c),
 *      forward to the node (forward.c) or relay (portfwd.c)
 * The HTTP server has already refused bodies over max_body (413), so only
 * file writes can reach the node with more than 1 MiB.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "../cred/vault.h"
#include "../lib/json.h"
#include "../lib/reqjson.h"
#include "../lib/log.h"
#include "../lib/keycap.h"
#include "../lib/util.h"
#include "api-internal.h"

#define DEFAULT_MAX_BODY (16u << 20)   /* file writes (PUT .../files) */
#define MAX_JSON_BODY (1u << 20)       /* everything else: docs/API.md */
/* Failed token checks per client (api_token_check_take): a burst that
 * covers a browser opening a page with a stale cookie, then a few a second;
 * guessing a 160-bit token is hopeless anyway, this bounds the database
 * work. The cap bounds the table whatever addresses connect. */
#define TOKEN_CHECK_RATE 5.0
#define TOKEN_CHECK_BURST 60.0
#define TOKEN_CHECK_CLIENTS 16384

/* An error answer with extra headers (http_respond_error has none). */
static void respond_error_hdr(struct http_conn *c, int status, const char *code,
			      const char *msg, const char *extra)
{
	struct buf b;
	struct jw w;

	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	http_write_error(&w, code, msg);
	jw_end(&w);
	http_respond(c, status, "application/json", b.data, b.len, extra);
	buf_free(&b);
}

void api_method_not_allowed(struct http_conn *c, const char *allow)
{
	char extra[96];

	snprintf(extra, sizeof(extra), "Allow: %s\r\n", allow);
	respond_error_hdr(c, 405, "method_not_allowed", "method not allowed", extra);
}

json *api_parse_body(struct http_req *req, struct http_conn *c, const char *const *allowed)
{
	return http_json_object_body(req, c, allowed, 0);
}

/* The decoded path must not walk: no "." or ".." segments and no empty ones
 * in the middle, so what we route on is what the node will route on. */
static bool path_clean(const char *p)
{
	if (p[0] != '/')
		return false;
	while (*p == '/') {
		const char *seg = p + 1, *end = strchr(seg, '/');
		size_t n = end ? (size_t)(end - seg) : strlen(seg);

		if ((n == 0 && end) || (n == 1 && seg[0] == '.') ||
		    (n == 2 && seg[0] == '.' && seg[1] == '.'))
			return false;
		p = seg + n;
	}
	return true;
}

/* Extract the key from "Authorization: Bearer <key>". Borrowed from req. */
static const char *bearer(const struct http_req *req)
{
	const char *h = http_req_header(req, "Authorization");

	if (!h || strncasecmp(h, "Bearer ", 7) != 0)
		return NULL;
	h += 7;
	while (*h == ' ')
		h++;
	return *h ? h : NULL;
}

bool api_inflight_take(struct api *a, struct http_conn *c, const struct api_principal *who)
{
	if (who->admin || keycap_take(a->inflight, who->tenant, strlen(who->tenant)))
		return true;
	respond_error_hdr(c, 429, "too_many_in_progress",
			  "this tenant has api_max_inflight requests to sandboxes in progress",
			  "Retry-After: 1\r\n");
	return false;
}

void api_inflight_give(struct api *a, const struct api_principal *who)
{
	if (!who->admin)
		keycap_give(a->inflight, who->tenant, strlen(who->tenant));
}

/* The client's bucket key, or false for another node's api. */
static bool token_check_client(struct api *a, const struct http_req *req, char *key, size_t n)
{
	char ip[64];
	const char *p = req->peer + (req->peer[0] == '[');
	size_t len = req->peer[0] == '[' ? strcspn(p, "]") : strcspn(p, ":");

	snprintf(ip, sizeof(ip), "%.*s", (int)len, p);
	if (api_cluster_is_peer(a, ip))
		return false;
	ratelimit_client_key(req->peer, key, n);
	return true;
}

bool api_token_check_take(struct api *a, const struct http_req *req, unsigned *retry_after_s)
{
	char key[64];

	return !token_check_client(a, req, key, sizeof(key)) ||
	       ratelimit_take(a->tokencheck, key, retry_after_s);
}

void api_token_check_give(struct api *a, const struct http_req *req)
{
	char key[64];

	if (token_check_client(a, req, key, sizeof(key)))
		ratelimit_give(a->tokencheck, key);
}

/* Steps 3 (the key) of the order above: false when answered (401, 500). */
static bool authenticate(struct api *a, const struct http_req *req, struct http_conn *c,
			 struct api_principal *who)
{
	static const char unauth_hdr[] = "WWW-Authenticate: Bearer\r\n";
	const char *key = bearer(req);
	err_t err = { 0 };
	int r;

	if (!key) {
		respond_error_hdr(c, 401, "unauthorized",
				  "missing API key (Authorization: Bearer <key>)", unauth_hdr);
		return false;
	}
	r = auth_lookup(a, key, who, &err);
	if (r < 0) {
		log_err("auth: %s", err.msg);
		http_respond_error(c, 500, "internal", "cannot check the API key");
		return false;
	}
	if (r == 0) {
		respond_error_hdr(c, 401, "unauthorized", "unknown or revoked API key", unauth_hdr);
		return false;
	}
	http_conn_set_authenticated(c);   /* the long keep-alive (api_run) */
	return true;
}

/* Steps 5 and 6: false when answered (403, 413). body_len: the body's
 * length, or what the head announces when the body is not read yet. */
static bool admit(const struct api_route *r, const struct route_params *p, struct http_conn *c,
		  const struct api_principal *who, uint64_t body_len)
{
	if (r->auth == API_ADMIN && !who->admin) {
		http_respond_error(c, 403, "forbidden", "this endpoint needs an admin key");
		return false;
	}
	if (body_len > MAX_JSON_BODY && !api_route_big_body(r, p)) {
		http_respond_error(c, 413, "body_too_large",
				   "request bodies are limited to %u MiB (16 MiB for file writes)",
				   MAX_JSON_BODY >> 20);
		return false;
	}
	return true;
}

/* Step 1: the row of the table (routes.def) that takes the request; NULL
 * when it has answered 404 or 405. */
static const struct api_route *route(const struct http_req *req, struct http_conn *c,
				     struct route_params *p)
{
	const struct api_route *r;
	char allow[64];

	if (req->target[0] != '/' || !path_clean(req->path)) {
		http_respond_error(c, 404, "not_found", "no such endpoint");
		return NULL;
	}
	r = api_route_find(req->method, req->path, p, allow, sizeof(allow));
	if (!r && !allow[0])
		http_respond_error(c, 404, "not_found", "no such endpoint");
	else if (!r)
		api_method_not_allowed(c, allow);
	return r;
}

/* The request's id for the logs of api, node and nodemgr: the client's
 * X-Request-Id when it is sane (log_request_id_ok: at most 64 of
 * [A-Za-z0-9._-]), else a fresh one; echoed in every answer. Set once per
 * request (the head hook and the handler both ask). */
static void request_id(const struct http_req *req, struct http_conn *c)
{
	const char *given = http_req_header(req, "X-Request-Id");
	char id[LOG_REQUEST_ID_MAX + 1], line[LOG_REQUEST_ID_MAX + 24];

	if (log_request_id()[0])
		return;
	if (given && log_request_id_ok(given))
		snprintf(id, sizeof(id), "%s", given);
	else
		log_new_request_id(id, sizeof(id));
	log_set_request_id(id);
	snprintf(line, sizeof(line), "X-Request-Id: %s\r\n", id);
	http_conn_set_header(c, line);
}

/* The HTTP server's head hook: a request that announces a body is
 * authenticated and admitted before one byte of it is read, so a client
 * without a valid key cannot make the api hold (or wait for) bodies. The
 * handler checks again (the answers are cached) and takes the rate limit. */
static bool head_check(void *ctx, struct http_req *req, struct http_conn *c)
{
	struct api *a = ctx;
	const struct api_compat *compat;
	const struct api_route *r;
	struct api_principal who;
	struct route_params p;
	int h;

	request_id(req, c);
	if (!req->body_declared && !req->body_chunked)
		return true;   /* nothing to hold: the handler checks it all */
	if (req->target[0] == '/' && (h = api_host_routed_head(a, req, c)) >= 0)
		return h == 1;
	if (req->target[0] == '/' && path_clean(req->path) && (compat = api_compat_of(req->path)))
		return compat->head(a, req, c);
	if (!(r = route(req, c, &p)))
		return false;
	if (api_route_bodiless(r)) {
		if (strcmp(req->method, "GET") != 0)
			api_method_not_allowed(c, "GET");
		else
			http_respond_error(c, 413, "body_too_large", "this endpoint takes no body");
		return false;
	}
	return authenticate(a, req, c, &who) &&
	       admit(r, &p, c, &who, req->body_chunked ? 0 : req->body_declared);
}

/* Another node's api forwards many clients' requests from one address. */
static bool conn_cap_exempt(void *ctx, const char *ip)
{
	return api_cluster_is_peer(ctx, ip);
}

static void handle(void *ctx, struct http_req *req, struct http_conn *c)
{
	struct api *a = ctx;
	const struct api_route *r;
	struct api_principal who;
	struct route_params p;
	unsigned retry = 1;

	request_id(req, c);
	/* {port}-{id}.<ports_domain>: a sandbox's service, not the API. */
	if (req->target[0] == '/' && api_host_routed(a, req, c))
		return;
	/* /e2b/...: a registered compatibility prefix (routes.c), another
	 * product's API (src/compat), which authenticates by its own rules. */
	if (req->target[0] == '/' && path_clean(req->path)) {
		const struct api_compat *compat = api_compat_of(req->path);

		if (compat) {
			compat->handle(a, req, c);
			return;
		}
	}
	/* The route table is the API: nothing else is served or forwarded, so
	 * docs/openapi.yaml can be checked against it. */
	if (!(r = route(req, c, &p)))
		return;
	if (r->auth == API_OPEN) {
		r->fn(a, req, c, NULL, &p);
		return;
	}
	if (!authenticate(a, req, c, &who))
		return;
	if (!ratelimit_take(a->rl, who.key_id, &retry)) {
		char extra[48];
		snprintf(extra, sizeof(extra), "Retry-After: %u\r\n", retry);
		respond_error_hdr(c, 429, "rate_limited", "too many requests for this API key",
				  extra);
		return;
	}
	if (admit(r, &p, c, &who, req->body_len))
		r->fn(a, req, c, &who, &p);
}

int api_run(const struct api_config *cfg, err_t *err)
{
	struct api a = { .cfg = cfg };
	struct http_server *srv;
	sigset_t set, old;
	int sig = 0, r;

	if (!cfg->listen || !cfg->db_path || !cfg->node_sock)
		return err_set(err, EINVAL, "api: listen, db_path and node_sock are required");

	/* Block before any thread exists so every connection thread inherits
	 * the mask and the signals reach sigwait below. */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, &old);
	signal(SIGPIPE, SIG_IGN);
	raise_fd_limit();

	a.db = db_open(cfg->db_path, err);
	if (!a.db) {
		r = err_wrap(err, "api");
		goto out_mask;
	}
	if (cfg->vault_pub) {
		struct seal_key k;
		if (seal_key_load_public(&k, cfg->vault_pub, err) < 0) {
			r = err_wrap(err, "api");
			goto out;
		}
		a.vault = vault_local_open(a.db, &k);
	}
	a.cache = auth_cache_new();
	a.rl = ratelimit_new(cfg->rate_per_s, cfg->rate_burst);
	a.tokencheck = ratelimit_new_capped(TOKEN_CHECK_RATE, TOKEN_CHECK_BURST,
					    TOKEN_CHECK_CLIENTS);
	a.inflight = keycap_new(cfg->max_inflight);
	a.cluster = cluster_new();

	/* Keep-alive quiet: 120 s for a connection that has shown a valid
	 * key, and for one that has not no more than the head deadline (10 s
	 * by default), as for a new connection's first head: an anonymous
	 * client (health checks, 401s) cannot hold its api_max_conns_per_client
	 * threads by parking connections between cheap requests. */
	int head_ms = cfg->head_timeout_ms > 0 ? cfg->head_timeout_ms : HTTP_HEAD_TIMEOUT_MS;
	struct http_server_opts opts = {
		.max_body = cfg->max_body ? cfg->max_body : DEFAULT_MAX_BODY,
		.head_timeout_ms = head_ms,
		.unauth_idle_timeout_ms = head_ms,
		.max_conns_per_client = cfg->max_conns_per_client,
		.body_budget = cfg->body_budget,
		.head_fn = head_check,
		.exempt_fn = conn_cap_exempt,
		.tls = cfg->tls,
	};
	srv = http_server_start_opts(cfg->listen, &opts, handle, &a, err);
	if (!srv) {
		r = err_wrap(err, "api: listen on %s", cfg->listen);
		goto out;
	}
	if (cfg->addr_file) {
		_cleanup_free_ char *line = xasprintf("%s\n", http_server_addr(srv));
		r = write_file(cfg->addr_file, line, strlen(line), 0644);
		if (r < 0) {
			errno = -r;
			r = err_sys(err, "api: cannot write `%s`", cfg->addr_file);
			http_server_stop(srv);
			goto out;
		}
	}
	log_info("listening on %s, node at %s", http_server_addr(srv), cfg->node_sock);
	if (cfg->node_name) {
		_cleanup_free_ char *url = cfg->advertise_url && *cfg->advertise_url
						   ? xstrdup(cfg->advertise_url)
						   : xasprintf("%s://%s", cfg->tls ? "https" : "http",
							       http_server_addr(srv));
		err_t e2 = { 0 };

		if (api_cluster_announce(&a, url, &e2) < 0)
			log_warn("cluster: %s", e2.msg);
	}

	while (sigwait(&set, &sig) != 0 || (sig != SIGTERM && sig != SIGINT))
		;
	log_info("signal %d: stopping", sig);
	http_server_stop(srv);
	r = 0;
out:
	ratelimit_free(a.rl);
	ratelimit_free(a.tokencheck);
	keycap_free(a.inflight);
	cluster_free(a.cluster);
	auth_cache_free(a.cache);
	vault_close(a.vault);
	db_close(a.db);
out_mask:
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return r;
}

int api_bootstrap(const char *db_path, const char *cli_json_path, const char *url, err_t *err)
{
	_cleanup_free_ char *key = NULL, *key_id = NULL, *tenant = NULL;
	struct db_rows rows;
	struct db *db;
	struct buf out;
	struct jw w;
	bool have_file;
	int r;

	db = db_open(db_path, err);
	if (!db)
		return err_wrap(err, "bootstrap");
	have_file = access(cli_json_path, F_OK) == 0;
	r = db_query(db, &rows, err, "SELECT count(*) FROM api_keys WHERE admin = 1 AND revoked = 0",
		     NULL);
	if (r < 0)
		goto out;
	r = 0;
	if (db_cell_int(&rows, 0, 0) > 0 && have_file) {
		db_rows_free(&rows);
		goto out;   /* already bootstrapped: change nothing */
	}
	db_rows_free(&rows);

	/* The "admin" tenant holds the operator's keys. */
	for (int attempt = 0; attempt < 2 && !tenant; attempt++) {
		r = db_query(db, &rows, err, "SELECT id FROM tenants WHERE name = 'admin'", NULL);
		if (r < 0)
			goto out;
		if (rows.n_rows > 0) {
			tenant = xstrdup(db_cell(&rows, 0, 0));
			db_rows_free(&rows);
			break;
		}
		db_rows_free(&rows);
		_cleanup_free_ char *id = random_id("ten_", 8);
		r = db_exec(db, err, "INSERT INTO tenants(id, name, created_at) VALUES(?, 'admin', ?)",
			    "si", id, wall_ms());
		if (r >= 0)
			tenant = TAKE_PTR(id);
		else if (r != -EEXIST)   /* EEXIST: another process won; read it back */
			goto out;
	}
	if (!tenant) {
		r = err_set(err, EIO, "bootstrap: cannot create tenant admin");
		goto out;
	}
	r = api_key_create(db, tenant, "cli", true, &key, &key_id, err);
	if (r < 0)
		goto out;

	buf_init(&out);
	jw_init(&w, &out);
	jw_obj(&w);
	jw_key(&w, "url");
	jw_str(&w, url);
	jw_key(&w, "api_key");
	jw_str(&w, key);
	jw_end(&w);
	buf_addc(&out, '\n');
	r = write_file(cli_json_path, out.data, out.len, 0600);
	buf_free(&out);
	if (r == 0 && chmod(cli_json_path, 0600) < 0)
		r = -errno;
	if (r < 0) {
		errno = -r;
		r = err_sys(err, "bootstrap: cannot write `%s`", cli_json_path);
		goto out;
	}
	log_info("bootstrap: admin key %s written to %s", key_id, cli_json_path);
out:
	db_close(db);
	return r;
}
