/* e2b.c - the E2B-compatible API's entry: routing under /e2b, the two kinds
 * of credentials, and small helpers for control.c and envd.c.
 *
 *   /e2b/...        the control API: X-API-KEY is an Airlock API key, with
 *                   its tenant's rules (another tenant's sandbox is 404)
 *   /e2b/envd/...   envd: X-Access-Token, a per-sandbox token this API gave
 *                   out at create/connect, for the sandbox E2b-Sandbox-Id
 *
 * An envd token is "ale_" + 40 hex, stored as its SHA-256 in port_tokens
 * with port 49983 (envd's) beside the tenant, the sandbox and the API key
 * that asked for it; it lives a day (TOKEN_TTL_MS) and only while that
 * key is not revoked: the check joins api_keys, so a revocation by any
 * api on the database holds at the next request here. The host-routed
 * port proxy accepts only "alp_" tokens, so an envd token opens nothing
 * else, and no API key is accepted on envd paths. Checking one reads the
 * sandbox's envd token rows (at most TOKENS_KEPT live ones, by the index
 * port_tokens_sandbox) and compares every digest in constant time
 * (CRYPTO_memcmp), so the answer's timing says nothing about the stored
 * ones. A check that reaches the database is paid from the client's
 * bucket first (api_token_check_take: per address, IPv6 per /64) and paid
 * back when the token was good, so a client without a token cannot make
 * the api run lookups faster than that budget. */
#include <errno.h>
#include <openssl/crypto.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../../lib/log.h"
#include "e2b-internal.h"

/* A day: long enough for a working session, short enough that a token
 * copied out of a log dies soon. The SDK gets a fresh one from every
 * Sandbox.create and Sandbox.connect (control.c answer_sandbox). */
#define TOKEN_TTL_MS (24LL * 3600 * 1000)
#define TOKENS_KEPT 16          /* per sandbox: each connect makes one */

void e2b_error(struct http_conn *c, int status, const char *fmt, ...)
{
	char msg[512];
	struct buf b;
	struct jw w;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "code");
	jw_int(&w, status);
	jw_key(&w, "message");
	jw_str(&w, msg);
	jw_end(&w);
	http_respond(c, status, "application/json", b.data, b.len, NULL);
	buf_free(&b);
}

char *e2b_qenc(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	struct buf b;

	buf_init(&b);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		    (*p >= '0' && *p <= '9') || strchr("-._~/", *p)) {
			buf_addc(&b, (char)*p);
		} else {
			buf_addc(&b, '%');
			buf_addc(&b, hex[*p >> 4]);
			buf_addc(&b, hex[*p & 15]);
		}
	}
	return buf_steal(&b);
}

int e2b_node(struct api *a, const char *tenant, const char *method, const char *target,
	     const char *content_type, const void *body, size_t len, struct http_resp *out)
{
	_cleanup_free_ char *hdr = NULL;
	err_t err = { 0 };

	hdr = xasprintf("X-Airlock-Tenant: %s\r\nX-Airlock-Admin: 0\r\n%s%s%s", tenant,
			content_type ? "Content-Type: " : "", content_type ? content_type : "",
			content_type ? "\r\n" : "");
	memset(out, 0, sizeof(*out));
	if (http_request(a->cfg->node_sock, method, target, hdr, body, len, out, &err) < 0) {
		log_warn("e2b: %s %s: node unavailable: %s", method, target, err.msg);
		return -1;
	}
	return out->status;
}

char *e2b_node_message(const struct http_resp *r)
{
	json *j = json_parse(r->body.data, r->body.len, NULL);
	const json *e = j ? json_get(j, "error") : NULL;
	const char *m = e ? json_get_str(e, "message") : NULL;
	char *s = xstrdup(m ? m : "the node answered an error");

	json_free(j);
	return s;
}

char *e2b_token_issue(struct api *a, const struct api_principal *who, const char *sandbox_id)
{
	char *token = random_id(E2B_TOKEN_PREFIX, E2B_TOKEN_HEX / 2);
	char hash[65];
	err_t err = { 0 };
	int64_t now = wall_ms();

	api_key_hash(token, hash);
	if (db_exec(a->db, &err,
		    "INSERT INTO port_tokens(hash, tenant_id, sandbox_id, port, expires_at,"
		    " created_at, key_id) VALUES(?, ?, ?, ?, ?, ?, ?)",
		    "sssiiis", hash, who->tenant, sandbox_id, (int64_t)E2B_ENVD_PORT,
		    now + TOKEN_TTL_MS, now, who->key_id) < 0) {
		log_err("e2b: envd token: %s", err.msg);
		free(token);
		return NULL;
	}
	/* Bounded per sandbox, so a check reads a few rows at most. */
	(void)db_exec(a->db, &err,
		      "DELETE FROM port_tokens WHERE sandbox_id = ? AND port = ? AND (expires_at < ?"
		      " OR hash NOT IN (SELECT hash FROM port_tokens WHERE sandbox_id = ? AND"
		      " port = ? ORDER BY created_at DESC LIMIT ?))",
		      "siisii", sandbox_id, (int64_t)E2B_ENVD_PORT, now, sandbox_id,
		      (int64_t)E2B_ENVD_PORT, (int64_t)TOKENS_KEPT);
	return token;
}

void e2b_tokens_drop(struct api *a, const char *sandbox_id)
{
	err_t err = { 0 };

	(void)db_exec(a->db, &err, "DELETE FROM port_tokens WHERE sandbox_id = ? AND port = ?",
		      "si", sandbox_id, (int64_t)E2B_ENVD_PORT);
}

/* 1 and *who when tok is a live envd token of sandbox_id; 0 when not;
 * -EAGAIN when the client has no checks left (answered 429); -EIO on a DB
 * failure. */
static int token_check(struct api *a, struct http_req *req, struct http_conn *c,
		       const char *tok, const char *sandbox_id, struct api_principal *who)
{
	struct db_rows rows;
	err_t err = { 0 };
	char hash[65];
	unsigned retry = 1;
	int found = -1;

	/* Not shaped like our tokens: no lookup, nothing to pay. */
	if (strncmp(tok, E2B_TOKEN_PREFIX, strlen(E2B_TOKEN_PREFIX)) != 0 ||
	    strlen(tok) != strlen(E2B_TOKEN_PREFIX) + E2B_TOKEN_HEX)
		return 0;
	if (!api_token_check_take(a, req, &retry)) {
		e2b_error(c, 429, "too many failed access token checks from this address; retry in"
			  " %u s", retry);
		return -EAGAIN;
	}
	api_key_hash(tok, hash);
	if (db_query(a->db, &rows, &err,
		     "SELECT t.hash, t.tenant_id FROM port_tokens t JOIN api_keys k"
		     " ON k.id = t.key_id AND k.tenant_id = t.tenant_id AND k.revoked = 0"
		     " WHERE t.sandbox_id = ? AND t.port = ? AND t.expires_at > ?",
		     "sii", sandbox_id, (int64_t)E2B_ENVD_PORT, wall_ms()) < 0) {
		log_err("e2b: envd token: %s", err.msg);
		return -EIO;
	}
	/* every row is compared in full, whichever matches */
	for (int i = 0; i < rows.n_rows; i++) {
		const char *h = db_cell(&rows, i, 0);
		if (h && strlen(h) == 64 && CRYPTO_memcmp(h, hash, 64) == 0 && found < 0)
			found = i;
	}
	if (found >= 0) {
		memset(who, 0, sizeof(*who));
		snprintf(who->tenant, sizeof(who->tenant), "%s", db_cell(&rows, found, 1));
		/* the rate limit's bucket: one per tenant for all its envd calls */
		snprintf(who->key_id, sizeof(who->key_id), "e2b-envd:%.50s", who->tenant);
		api_token_check_give(a, req);
	}
	db_rows_free(&rows);
	return found >= 0;
}

static bool sandbox_id_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 64)
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-' || *s == '_'))
			return false;
	return true;
}

static bool is_envd(const char *path)
{
	static const char pre[] = E2B_PREFIX "/envd";

	return strncmp(path, pre, sizeof(pre) - 1) == 0 &&
	       (path[sizeof(pre) - 1] == '\0' || path[sizeof(pre) - 1] == '/');
}

/* Who is calling, from the credential the path asks for; false when
 * answered (401, 500). Envd answers Connect calls in their own error form. */
static bool e2b_auth(struct api *a, struct http_req *req, struct http_conn *c,
		     struct api_principal *who)
{
	if (is_envd(req->path)) {
		const char *id = http_req_header(req, "E2b-Sandbox-Id");
		const char *tok = http_req_header(req, "X-Access-Token");
		int r;

		/* @e2b/code-interpreter sends its context calls with the
		 * traffic token only, which we hand out equal to the envd
		 * token (control.c answer_sandbox). */
		if (!tok)
			tok = http_req_header(req, "E2B-Traffic-Access-Token");

		if (!id || !sandbox_id_ok(id)) {
			e2b_error(c, 400, "header E2b-Sandbox-Id must name a sandbox (set "
				  "E2B_SANDBOX_URL to <api>/e2b/envd)");
			return false;
		}
		r = tok ? token_check(a, req, c, tok, id, who) : 0;
		if (r == -EAGAIN)
			return false;
		if (r < 0) {
			e2b_error(c, 500, "cannot check the access token");
			return false;
		}
		if (r == 0) {
			e2b_error(c, 401, "missing or invalid X-Access-Token for sandbox %s", id);
			return false;
		}
		return true;
	}
	const char *key = http_req_header(req, "X-API-KEY");
	err_t err = { 0 };
	int r = key ? auth_lookup(a, key, who, &err) : 0;

	if (r < 0) {
		log_err("e2b auth: %s", err.msg);
		e2b_error(c, 500, "cannot check the API key");
		return false;
	}
	if (r == 0) {
		e2b_error(c, 401, "missing, unknown or revoked API key (X-API-KEY: an Airlock key)");
		return false;
	}
	return true;
}

/* The sandbox a control-API path names: /sandboxes/{id}[/...] or
 * /v2/sandboxes/{id}/...; into id, false when none. */
static bool control_sandbox(const char *path, char *id, size_t cap)
{
	const char *p = path + strlen(E2B_PREFIX);
	size_t n;

	if (!strncmp(p, "/v2/", 4))
		p += 3;
	if (strncmp(p, "/sandboxes/", 11) != 0)
		return false;
	p += 11;
	n = strcspn(p, "/");
	if (n == 0 || n >= cap)
		return false;
	memcpy(id, p, n);
	id[n] = '\0';
	return sandbox_id_ok(id);
}

/* A cluster: a request about a sandbox of another node goes, unchanged, to
 * that node's api (api/placement.c finds it; X-Airlock-Forwarded keeps it
 * there), which checks the key or token itself against the same database.
 * true when it has been relayed or answered. */
static bool to_peer(struct api *a, struct http_req *req, struct http_conn *c,
		    const struct api_principal *who, const char *id)
{
	char peer[200];
	int r = api_cluster_peer(a, req, c, who, id, peer, sizeof(peer));

	if (r == 0)
		return false;
	if (r > 0)
		api_forward_raw(a, req, c, who, req->target, false, id);
	return true;
}

/* A request for another port of the sandbox than envd's (E2b-Sandbox-Port:
 * 49999 is @e2b/code-interpreter's code service): relayed raw to that port
 * through the node, as /v1/sandboxes/{id}/ports/{port}/... is, under the
 * envd token already checked for this sandbox (so only its owner's
 * client opens it). Our credentials do not reach the sandbox. false when
 * the request is envd's own. */
static bool service_port(struct api *a, struct http_req *req, struct http_conn *c,
			 const struct api_principal *who)
{
	const char *ps = http_req_header(req, "E2b-Sandbox-Port");
	const char *id = http_req_header(req, "E2b-Sandbox-Id");
	const char *rest = req->target + strlen(E2B_PREFIX "/envd");
	char *end;
	unsigned long port;

	if (!ps || !*ps)
		return false;
	errno = 0;
	port = strtoul(ps, &end, 10);
	if (errno || *end || ps[0] < '1' || ps[0] > '9' || port > 65535) {
		e2b_error(c, 400, "E2b-Sandbox-Port must be a port number");
		return true;
	}
	if (port == E2B_ENVD_PORT)
		return false;
	/* X-Airlock-* is never passed on (portfwd.c): the tokens become such. */
	for (size_t i = 0; i < req->n_headers; i++) {
		struct http_header *h = &req->headers[i];
		if (!strcasecmp(h->name, "X-Access-Token") ||
		    !strcasecmp(h->name, "E2B-Traffic-Access-Token") ||
		    !strcasecmp(h->name, "X-API-KEY")) {
			free(h->name);   /* the request's own copy (http-parse.c) */
			h->name = xstrdup("X-Airlock-Dropped");
		}
	}
	_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s/ports/%lu%s%s", id, port,
						*rest == '/' ? "" : "/", rest);
	api_forward_raw(a, req, c, who, target, false, id);
	return true;
}

void e2b_register(void)
{
	static const struct api_compat e2b = { E2B_PREFIX, e2b_head_check, e2b_handle };

	api_compat_register(&e2b);
}

bool e2b_head_check(struct api *a, struct http_req *req, struct http_conn *c)
{
	struct api_principal who;

	if (!e2b_auth(a, req, c, &who))
		return false;
	/* Only envd's file upload takes more than a JSON body. */
	if (req->body_declared > E2B_MAX_JSON &&
	    !(is_envd(req->path) && !strcmp(req->path, E2B_PREFIX "/envd/files"))) {
		e2b_error(c, 413, "request bodies are limited to 1 MiB here");
		return false;
	}
	return true;
}

void e2b_handle(struct api *a, struct http_req *req, struct http_conn *c)
{
	struct api_principal who;
	unsigned retry = 1;

	if (!e2b_auth(a, req, c, &who))
		return;
	if (!ratelimit_take(a->rl, who.key_id, &retry)) {
		e2b_error(c, 429, "too many requests; retry in %u s", retry);
		return;
	}
	char id[65];
	if (is_envd(req->path) ? to_peer(a, req, c, &who, http_req_header(req, "E2b-Sandbox-Id"))
			       : control_sandbox(req->path, id, sizeof(id)) &&
					 to_peer(a, req, c, &who, id))
		return;
	if (is_envd(req->path) && service_port(a, req, c, &who))
		return;
	if (is_envd(req->path)) {
		const char *rest = req->path + strlen(E2B_PREFIX "/envd");

		if (req->body_len > E2B_MAX_JSON && strcmp(rest, "/files") != 0) {
			e2b_error(c, 413, "request bodies are limited to 1 MiB here");
			return;
		}
		if (!api_inflight_take(a, c, &who))
			return;
		e2b_envd(a, req, c, &who, http_req_header(req, "E2b-Sandbox-Id"), rest);
		api_inflight_give(a, &who);
		return;
	}
	if (req->body_len > E2B_MAX_JSON) {
		e2b_error(c, 413, "request bodies are limited to 1 MiB");
		return;
	}
	e2b_control(a, req, c, &who, req->path + strlen(E2B_PREFIX));
}
