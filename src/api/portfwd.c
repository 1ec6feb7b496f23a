/* portfwd.c - the api's part of port forwarding: the raw relay to the node,
 * host-routed URLs ({port}-{id}.<ports_domain>) and their access tokens.
 *
 * Proxied requests, WebSocket upgrades and tunnels are not answered by the
 * api: it writes the request to the node (client headers minus our
 * credentials, plus the identity headers only the api may set), takes the
 * client's connection over and relays bytes both ways until both ended. So
 * streamed answers, a 101 and whatever follows it pass through unchanged,
 * and the node's JSON errors (404 for another tenant, 502 for a closed port)
 * reach the client as they were written.
 *
 * Access tokens: `POST /v1/sandboxes/{id}/port-tokens {"port","ttl_s"?}`
 * (owner only) returns a random token, stored as its SHA-256 with the
 * tenant, sandbox, port, expiry and the API key that asked for it. It
 * works only while that key is not revoked: the check joins api_keys,
 * so a revocation on any api of a cluster holds at the next request (no
 * cache in between). It opens exactly that port of exactly
 * that sandbox under its host-routed name, and nothing else: the API itself
 * never accepts it. A browser presents it once as `?airlock_token=` and is
 * redirected to the same URL without it, with a cookie scoped to that host;
 * programs send `X-Airlock-Port-Token`. An API key of the owner works too.
 */
#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "../lib/log.h"
#include "../lib/relay.h"
#include "../lib/util.h"
#include "api-internal.h"

#define TOKEN_PREFIX "alp_"
#define TOKEN_HEX 40
#define TOKEN_TTL_DEFAULT_S 3600
#define TOKEN_TTL_MAX_S (7 * 86400)
#define TOKEN_COOKIE "airlock_port_token"
#define TOKEN_QUERY "airlock_token"

/* Does an Authorization value carry one of our API keys, however it is
 * spelled: the scheme in any case, then any run of spaces and tabs (the
 * api's own parser skips spaces; being broader here only drops more), then
 * the key's prefix in any case. Untrusted input. */
static bool authorization_has_api_key(const char *v)
{
	v += strspn(v, " \t");
	if (strncasecmp(v, "Bearer", 6) != 0 || (v[6] != ' ' && v[6] != '\t'))
		return false;
	v += 6;
	v += strspn(v, " \t");
	return strncasecmp(v, API_KEY_PREFIX, sizeof(API_KEY_PREFIX) - 1) == 0;
}

/* Client request headers that never reach the node (and so the sandbox):
 * our credentials, framing we redo, and identity only we may set. */
static bool dropped_header(const struct http_header *h, bool host_routed, const char *conn)
{
	const char *name = h->name;

	/* Hop-by-hop by the client's own Connection list: we do not pass that
	 * list on (see below), so its headers are dropped here. Upgrade stays:
	 * the node needs it, and drops it towards the service itself. */
	if (conn && strcasecmp(name, "Upgrade") != 0 && http_has_token(conn, name))
		return true;

	/* Under the API path Authorization is always our key. Under a
	 * host-routed name it may be the service's own (basic auth, its
	 * tokens): only an API key of ours is kept from it. */
	if (strcasecmp(name, "Authorization") == 0)
		return !host_routed || authorization_has_api_key(h->value);
	/* Forwarded (RFC 7239) would contradict the X-Forwarded-* we set. */
	return strcasecmp(name, "Host") == 0 || strcasecmp(name, "Connection") == 0 ||
	       strcasecmp(name, "Forwarded") == 0 ||
	       strcasecmp(name, "Content-Length") == 0 ||
	       strcasecmp(name, "Transfer-Encoding") == 0 ||
	       strncasecmp(name, "X-Airlock-", 10) == 0 ||
	       strncasecmp(name, "X-Forwarded-", 12) == 0;
}

/* The Cookie header without our token cookie; NULL when nothing is left.
 * Caller owns. */
char *ports_cookie_without_token(const char *v)
{
	struct buf b;

	buf_init(&b);
	while (*v) {
		v += strspn(v, " ;");
		size_t n = strcspn(v, ";");
		if (n && !(strncmp(v, TOKEN_COOKIE "=", sizeof(TOKEN_COOKIE)) == 0))
			buf_printf(&b, "%s%.*s", b.len ? "; " : "", (int)n, v);
		v += n;
	}
	if (!b.len) {
		buf_free(&b);
		return NULL;
	}
	return buf_steal(&b);
}

/* The request as the client sent it, to the api of the node that has the
 * sandbox (api/placement.c): that api checks the key or token itself. Only
 * framing headers are rewritten. */
static void head_for_peer(struct api *a, struct http_req *req, struct buf *head)
{
	const char *conn = http_req_header(req, "Connection");
	const char *host = http_req_header(req, "Host");

	buf_printf(head, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: %sclose\r\n", req->method,
		   req->target, host ? host : "localhost",
		   conn && http_has_token(conn, "upgrade") ? "Upgrade, " : "");
	for (size_t i = 0; i < req->n_headers; i++) {
		const struct http_header *h = &req->headers[i];
		if (!strcasecmp(h->name, "Host") || !strcasecmp(h->name, "Connection") ||
		    !strcasecmp(h->name, "Content-Length") ||
		    !strcasecmp(h->name, "Transfer-Encoding") ||
		    !strcasecmp(h->name, "X-Airlock-Forwarded") ||
		    (!strcasecmp(h->name, "Upgrade") && !(conn && http_has_token(conn, "upgrade"))))
			continue;
		buf_printf(head, "%s: %s\r\n", h->name, h->value);
	}
	buf_printf(head, "X-Airlock-Forwarded: %s\r\n", a->cfg->node_name);
}

static void forward_raw(struct api *a, struct http_req *req, struct http_conn *c,
			const struct api_principal *who, const char *target, bool host_routed,
			const char *peer)
{
	_cleanup_(buf_free) struct buf head = { 0 };
	_cleanup_(buf_free) struct buf pending = { 0 };
	const char *host = http_req_header(req, "Host");
	char node_host[256];
	err_t err = { 0 };
	int nfd, cfd, r;

	nfd = http_dial(peer ? peer : a->cfg->node_sock, node_host, sizeof(node_host), &err);
	if (nfd < 0) {
		log_warn("%s %s: node unavailable: %s", req->method, req->path, err.msg);
		http_respond_error(c, 503, "unavailable", "node unavailable");
		return;
	}
	if (peer) {
		head_for_peer(a, req, &head);
		goto send;
	}
	/* One request per node connection, always: once we relay raw bytes,
	 * a second request from the client on the same connection would reach
	 * the node without our checks (with identity headers of its own). So
	 * the node closes after an error answer, and the upgrade is the only
	 * Connection token passed on. */
	const char *conn = http_req_header(req, "Connection");
	buf_printf(&head, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: %sclose\r\n", req->method,
		   target, node_host, conn && http_has_token(conn, "upgrade") ? "Upgrade, " : "");
	for (size_t i = 0; i < req->n_headers; i++) {
		const struct http_header *h = &req->headers[i];
		if (dropped_header(h, host_routed, conn))
			continue;
		if (strcasecmp(h->name, "Cookie") == 0) {
			_cleanup_free_ char *rest = ports_cookie_without_token(h->value);
			if (rest)
				buf_printf(&head, "Cookie: %s\r\n", rest);
			continue;
		}
		buf_printf(&head, "%s: %s\r\n", h->name, h->value);
	}
	/* The peer is "ip:port"; X-Forwarded-For wants the address. */
	const char *colon = strrchr(req->peer, ':');
	buf_printf(&head, "X-Forwarded-For: %.*s\r\nX-Forwarded-Proto: http\r\n",
		   colon ? (int)(colon - req->peer) : (int)strlen(req->peer), req->peer);
	if (host)
		buf_printf(&head, "X-Forwarded-Host: %s\r\n", host);
	buf_printf(&head, "X-Airlock-Tenant: %s\r\nX-Airlock-Admin: %d\r\n", who->tenant,
		   who->admin ? 1 : 0);
	if (host_routed)
		buf_adds(&head, "X-Airlock-Host-Routed: 1\r\n");
send:
	buf_printf(&head, "Content-Length: %zu\r\n\r\n", req->body_len);
	buf_add(&head, req->body, req->body_len);
	cfd = http_conn_takeover(c, &pending);
	/* head + body may be many MiB: write it all (SIGPIPE is ignored) */
	r = write_all(nfd, head.data, head.len);
	if (r == 0)
		r = relay_fds(cfd, nfd, pending.data, pending.len, NULL, 0);
	if (r < 0 && r != -ECONNRESET && r != -EPIPE)
		log_debug("%s %s: relay ended: %s", req->method, req->path, strerror(-r));
	close(nfd);
}

void api_forward_raw(struct api *a, struct http_req *req, struct http_conn *c,
		     const struct api_principal *who, const char *target, bool host_routed,
		     const char *sandbox_id)
{
	char peer[200];
	int r;

	if (!api_inflight_take(a, c, who))
		return;
	r = api_cluster_peer(a, req, c, who, sandbox_id, peer, sizeof(peer));
	if (r >= 0)
		forward_raw(a, req, c, who, target, host_routed, r ? peer : NULL);
	api_inflight_give(a, who);
}

/* ---- tokens ----------------------------------------------------------------- */

int api_port_token_mint(struct api *a, struct http_conn *c, const struct api_principal *who,
			const char *sandbox_id, int port, int64_t ttl_s, char **token,
			int64_t *expires)
{
	struct db_rows rows;
	err_t err = { 0 };
	char hash[65];
	int r;

	/* Only the owner of a live sandbox gets a token; anyone else learns
	 * nothing (404, as everywhere). */
	r = db_query(a->db, &rows, &err,
		     "SELECT 1 FROM sandboxes WHERE id = ? AND tenant_id = ?"
		     " AND observed NOT IN ('deleted')",
		     "ss", sandbox_id, who->tenant);
	if (r < 0) {
		log_err("port token: %s", err.msg);
		http_respond_error(c, 500, "internal", "cannot look up the sandbox");
		return -1;
	}
	bool found = rows.n_rows > 0;
	db_rows_free(&rows);
	if (!found) {
		http_respond_error(c, 404, "not_found", "no sandbox `%s`", sandbox_id);
		return -1;
	}
	*token = random_id(TOKEN_PREFIX, TOKEN_HEX / 2);
	api_key_hash(*token, hash);
	*expires = wall_ms() + ttl_s * 1000;
	r = db_exec(a->db, &err,
		    "INSERT INTO port_tokens(hash, tenant_id, sandbox_id, port, expires_at,"
		    " created_at, key_id) VALUES(?, ?, ?, ?, ?, ?, ?)",
		    "sssiiis", hash, who->tenant, sandbox_id, (int64_t)port, *expires, wall_ms(),
		    who->key_id);
	if (r < 0) {
		log_err("port token: %s", err.msg);
		http_respond_error(c, 500, "internal", "cannot store the token");
		free(*token);
		*token = NULL;
		return -1;
	}
	/* Expired tokens are swept whenever a new one is made. */
	(void)db_exec(a->db, &err, "DELETE FROM port_tokens WHERE expires_at < ?", "i",
		      wall_ms());
	return 0;
}

/* POST /v1/sandboxes/{id}/port-tokens */
void api_port_token_create(struct api *a, struct http_req *req, struct http_conn *c,
			   const struct api_principal *who, const char *sandbox_id)
{
	static const char *const allowed[] = { "port", "ttl_s", NULL };
	_cleanup_free_ char *token = NULL;
	bool bad = false;
	char ts[ISO_TIME_MAX];
	int64_t exp;
	json *body;

	if (strcmp(req->method, "POST") != 0) {
		api_method_not_allowed(c, "POST");
		return;
	}
	if (!(body = api_parse_body(req, c, allowed)))
		return;
	int64_t port = json_get_int(body, "port", 0, &bad);
	int64_t ttl = json_get_int(body, "ttl_s", TOKEN_TTL_DEFAULT_S, &bad);
	json_free(body);
	if (bad || port < 1 || port > 65535) {
		http_respond_error(c, 400, "invalid_field", "field `port` must be 1..65535");
		return;
	}
	if (ttl < 1 || ttl > TOKEN_TTL_MAX_S) {
		http_respond_error(c, 400, "invalid_field", "field `ttl_s` must be 1..%d",
				   TOKEN_TTL_MAX_S);
		return;
	}
	if (api_port_token_mint(a, c, who, sandbox_id, (int)port, ttl, &token, &exp) < 0)
		return;

	struct buf out;
	struct jw w;
	buf_init(&out);
	jw_init(&w, &out);
	jw_obj(&w);
	jw_key(&w, "token");
	jw_str(&w, token);
	jw_key(&w, "sandbox_id");
	jw_str(&w, sandbox_id);
	jw_key(&w, "port");
	jw_int(&w, port);
	jw_key(&w, "expires_at");
	iso_time(exp, ts);
	jw_str(&w, ts);
	jw_key(&w, "host");
	if (a->cfg->ports_domain && *a->cfg->ports_domain) {
		_cleanup_free_ char *h = xasprintf("%d-%s.%s", (int)port, sandbox_id,
						   a->cfg->ports_domain);
		jw_str(&w, h);
	} else {
		jw_null(&w);
	}
	jw_end(&w);
	{
		/* What the token opens; the token itself never goes in a URL path. */
		_cleanup_free_ char *loc = xasprintf("/v1/sandboxes/%s/ports/%d/", sandbox_id,
						     (int)port);
		http_respond_created(c, loc, out.data);
	}
	buf_free(&out);
}

/* 1 and *who (and *expires, wall ms) when tok opens port of sandbox_id;
 * 0 otherwise; -EAGAIN when the client has no checks left (answered 429),
 * -EIO on a DB failure.
 *
 * The row is found by the token's digest (the primary key). That lookup's
 * timing depends only on how the digest of what the client sent compares
 * with stored digests; learning a stored digest gives nobody its token (a
 * 160-bit random string behind SHA-256). The digest found is still
 * compared in constant time before it counts. Each check that reaches the
 * database is paid from the client's bucket first (api_token_check_take)
 * and paid back when the token was good. */
static int token_check(struct api *a, struct http_req *req, struct http_conn *c,
		       const char *tok, const char *sandbox_id, unsigned port,
		       struct api_principal *who, int64_t *expires)
{
	struct db_rows rows;
	err_t err = { 0 };
	unsigned retry = 1;
	char hash[65];

	/* Not shaped like our tokens: no lookup, nothing to pay. */
	if (strncmp(tok, TOKEN_PREFIX, sizeof(TOKEN_PREFIX) - 1) != 0 ||
	    strlen(tok) != sizeof(TOKEN_PREFIX) - 1 + TOKEN_HEX)
		return 0;
	if (!api_token_check_take(a, req, &retry)) {
		http_respond_error(c, 429, "rate_limited",
				   "too many failed port token checks from this address; retry in"
				   " %u s", retry);
		return -EAGAIN;
	}
	api_key_hash(tok, hash);
	if (db_query(a->db, &rows, &err,
		     "SELECT t.tenant_id, t.expires_at, t.hash FROM port_tokens t JOIN api_keys k"
		     " ON k.id = t.key_id AND k.tenant_id = t.tenant_id AND k.revoked = 0"
		     " WHERE t.hash = ? AND t.sandbox_id = ? AND t.port = ? AND t.expires_at > ?",
		     "ssii", hash, sandbox_id, (int64_t)port, wall_ms()) < 0) {
		log_err("port token: %s", err.msg);
		return -EIO;
	}
	const char *h = rows.n_rows > 0 ? db_cell(&rows, 0, 2) : NULL;
	int ok = h && strlen(h) == 64 && CRYPTO_memcmp(h, hash, 64) == 0;
	if (ok) {
		memset(who, 0, sizeof(*who));
		snprintf(who->tenant, sizeof(who->tenant), "%s", db_cell(&rows, 0, 0));
		snprintf(who->key_id, sizeof(who->key_id), "port-token");
		*expires = db_cell_int(&rows, 0, 1);
		api_token_check_give(a, req);
	}
	db_rows_free(&rows);
	return ok;
}

/* Value of the nth (from 0) cookie `name` in a Cookie header; caller owns;
 * NULL when there are not that many. */
char *ports_cookie_nth(const char *v, const char *name, unsigned nth)
{
	size_t nl = strlen(name);

	while (v && *v) {
		v += strspn(v, " ;");
		size_t n = strcspn(v, ";");
		if (n > nl && strncmp(v, name, nl) == 0 && v[nl] == '=' && nth-- == 0)
			return xasprintf("%.*s", (int)(n - nl - 1), v + nl + 1);
		v += n;
	}
	return NULL;
}

char *ports_cookie_get(const char *v, const char *name)
{
	return ports_cookie_nth(v, name, 0);
}

/* "8080-sb-abc.ports.example.com[:7070]" under domain -> port and id. */
bool ports_parse_host(const char *host, const char *domain, unsigned *port, char *id,
		      size_t idn)
{
	size_t hl = strcspn(host, ":"), dl = strlen(domain);
	unsigned v = 0;
	const char *p = host;

	if (hl <= dl + 1 || host[hl - dl - 1] != '.' ||
	    strncasecmp(host + hl - dl, domain, dl) != 0)
		return false;
	size_t label = hl - dl - 1;      /* "8080-sb-abc" */
	size_t i = 0;
	while (i < label && i < 6 && p[i] >= '0' && p[i] <= '9')
		v = v * 10 + (unsigned)(p[i++] - '0');
	if (i == 0 || i >= label || p[i] != '-' || v == 0 || v > 65535 || p[0] == '0')
		return false;
	size_t n = label - i - 1;
	if (n == 0 || n >= idn)
		return false;
	for (size_t k = 0; k < n; k++) {
		char ch = p[i + 1 + k];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' ||
		      (ch >= 'A' && ch <= 'Z')))
			return false;
	}
	memcpy(id, p + i + 1, n);
	id[n] = '\0';
	/* DNS names are case-insensitive; our ids are lowercase. */
	for (char *q = id; *q; q++)
		if (*q >= 'A' && *q <= 'Z')
			*q = (char)(*q - 'A' + 'a');
	*port = v;
	return true;
}

/* The query string without airlock_token=...; caller owns ("" when empty). */
char *ports_query_without_token(const char *q)
{
	struct buf b;

	buf_init(&b);
	buf_adds(&b, "");
	while (*q) {
		size_t n = strcspn(q, "&");
		if (n && strncmp(q, TOKEN_QUERY "=", sizeof(TOKEN_QUERY)) != 0)
			buf_printf(&b, "%s%.*s", b.len ? "&" : "", (int)n, q);
		q += n;
		if (*q == '&')
			q++;
	}
	return buf_steal(&b);
}

/* Where the redirect that drops ?airlock_token= points: the request's path
 * with the rest of its query (q). Only a path of this host: the target
 * comes from the client, and "//evil.example/" or "/\\evil.example/" (a
 * browser reads a backslash as a slash) would be another site, as would an
 * absolute URL; such a target (or one with a backslash, a space or a
 * control byte anywhere in its path) is sent to "/" instead. q is the
 * query already parsed by the server. Caller owns. */
char *ports_redirect_location(const char *target, const char *q)
{
	size_t pl = strcspn(target, "?");

	if (target[0] != '/' || target[1] == '/' || target[1] == '\\')
		return xstrdup("/");
	for (size_t i = 0; i < pl; i++)   /* the parser refuses these; never in a header */
		if ((unsigned char)target[i] <= 0x20 || target[i] == 0x7f || target[i] == '\\')
			return xstrdup("/");
	return xasprintf("%.*s%s%s", (int)pl, target, *q ? "?" : "", q);
}

/* The token's cookie, as narrow as it can be and still work: no Domain
 * (this host only, not its siblings under ports_domain), Path=/ (the
 * service's paths are at the root), HttpOnly (no script of the service
 * reads it), SameSite=Lax (Strict would drop it on the top-level
 * navigation from a link, the way such a URL is opened; Lax still keeps it
 * off cross-site subrequests and POSTs), Max-Age up to the token's expiry,
 * and Secure when the client came over https (the api's own TLS, or a TLS
 * front that says so in X-Forwarded-Proto; a client claiming it only
 * narrows its own cookie).
 * Caller owns. */
char *ports_token_cookie(const char *token, int64_t max_age_s, bool https)
{
	if (max_age_s < 1)
		max_age_s = 1;
	return xasprintf("%s=%s; Path=/; Max-Age=%lld; HttpOnly; SameSite=Lax%s", TOKEN_COOKIE,
			 token, (long long)max_age_s, https ? "; Secure" : "");
}

static bool forwarded_https(const struct http_req *req)
{
	const char *p = http_req_header(req, "X-Forwarded-Proto");

	return p && strcasecmp(p, "https") == 0;
}

/* The credential of a request for {port}-{id}.<domain>: a port token (in
 * the query, X-Airlock-Port-Token or the cookie; *qtok when in the query,
 * caller owns) or the owner's API key. 1 with *who, 0 (answered 401) or -1
 * (answered 500). */
static int host_routed_auth(struct api *a, struct http_req *req, struct http_conn *c,
			    const char *id, unsigned port, struct api_principal *who,
			    int64_t *expires, char **qtok)
{
	struct api_principal key_who;
	int ok = 0;

	*qtok = http_query_param(req, TOKEN_QUERY);
	const char *cookies = http_req_header(req, "Cookie");
	_cleanup_free_ char *ctok = ports_cookie_get(cookies, TOKEN_COOKIE);
	const char *htok = http_req_header(req, "X-Airlock-Port-Token");
	const char *tok = *qtok ? *qtok : htok ? htok : ctok;

	const char *auth = http_req_header(req, "Authorization");
	if (tok) {
		ok = token_check(a, req, c, tok, id, port, who, expires);
		/* The browser sends every airlock_port_token cookie in scope, in
		 * an order of its own: another sandbox's page can plant one for
		 * the whole ports_domain with script (a shared site; docs/API.md).
		 * So a cookie that fails is not the last word: the next few are
		 * tried, each charged to the client's budget like any check. */
		for (unsigned i = 1; tok == ctok && ok == 0 && i < PORT_TOKEN_COOKIES_MAX; i++) {
			_cleanup_free_ char *next = ports_cookie_nth(cookies, TOKEN_COOKIE, i);
			if (!next)
				break;
			ok = token_check(a, req, c, next, id, port, who, expires);
		}
		if (ok == -EAGAIN)
			return 0;
	} else if (auth && strncasecmp(auth, "Bearer ", 7) == 0) {
		err_t err = { 0 };
		const char *k = auth + 7;
		while (*k == ' ')
			k++;
		/* the owner's API key; the node checks tenancy */
		if (api_key_well_formed(k) && auth_lookup(a, k, &key_who, &err) == 1)
			ok = 1, *who = key_who;
	}
	if (ok < 0) {
		http_respond_error(c, 500, "internal", "cannot check the token");
		return -1;
	}
	if (!ok)
		http_respond_error(c, 401, "unauthorized",
				   "this port needs an access token (POST /v1/sandboxes/%s/"
				   "port-tokens), as ?%s=, the %s cookie or X-Airlock-Port-Token",
				   id, TOKEN_QUERY, TOKEN_COOKIE);
	return ok;
}

int api_host_routed_head(struct api *a, struct http_req *req, struct http_conn *c)
{
	const char *domain = a->cfg->ports_domain;
	const char *host = http_req_header(req, "Host");
	struct api_principal who;
	int64_t expires = 0;
	unsigned port;
	char id[65];

	if (!domain || !*domain || !host || !ports_parse_host(host, domain, &port, id, sizeof(id)))
		return -1;
	_cleanup_free_ char *qtok = NULL;
	return host_routed_auth(a, req, c, id, port, &who, &expires, &qtok) == 1;
}

bool api_host_routed(struct api *a, struct http_req *req, struct http_conn *c)
{
	const char *domain = a->cfg->ports_domain;
	const char *host = http_req_header(req, "Host");
	struct api_principal who;
	int64_t expires = 0;
	unsigned port;
	char id[65];

	if (!domain || !*domain || !host || !ports_parse_host(host, domain, &port, id, sizeof(id)))
		return false;
	_cleanup_free_ char *qtok = NULL;
	if (host_routed_auth(a, req, c, id, port, &who, &expires, &qtok) != 1)
		return true;
	_cleanup_free_ char *q = ports_query_without_token(req->query);
	if (qtok) {
		/* Once in the URL, then a cookie for this host only: the token
		 * leaves the address bar, history and the service's logs. */
		_cleanup_free_ char *location = ports_redirect_location(req->target, q);
		_cleanup_free_ char *cookie = ports_token_cookie(
			qtok, (expires - wall_ms()) / 1000, a->cfg->tls || forwarded_https(req));
		_cleanup_free_ char *extra = xasprintf("Location: %s\r\nSet-Cookie: %s\r\n",
						       location, cookie);
		http_respond(c, 302, "text/plain", "", 0, extra);
		return true;
	}
	const char *path_end = strchr(req->target, '?');
	size_t pl = path_end ? (size_t)(path_end - req->target) : strlen(req->target);
	_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s/ports/%u%.*s%s%s", id, port,
						(int)pl, req->target, *q ? "?" : "", q);
	api_forward_raw(a, req, c, &who, target, true, id);
	return true;
}
