/* envd.c - E2B's in-sandbox API (envd) on Airlock's exec, process and file
 * operations: Connect RPCs in JSON (unary: plain JSON bodies; server
 * streams: enveloped messages) and envd's HTTP file endpoints.
 *
 * This file takes the call (e2b_envd), answers Connect errors and sends
 * each RPC to its service: envd-process.c (process.Process), envd-fs.c
 * (filesystem.Filesystem, and GET/POST /files); the streaming ones are
 * translated by envd-stream.c. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "envd-internal.h"

/* ---- Connect errors ------------------------------------------------------ */

static int connect_status(const char *code)
{
	static const struct { const char *code; int status; } map[] = {
		{ "invalid_argument", 400 }, { "failed_precondition", 400 }, { "out_of_range", 400 },
		{ "unauthenticated", 401 }, { "permission_denied", 403 }, { "not_found", 404 },
		{ "already_exists", 409 }, { "aborted", 409 }, { "resource_exhausted", 429 },
		{ "canceled", 499 }, { "unimplemented", 501 }, { "unavailable", 503 },
		{ "deadline_exceeded", 504 },
	};
	for (size_t i = 0; i < ARRAY_SIZE(map); i++)
		if (!strcmp(code, map[i].code))
			return map[i].status;
	return 500;
}

/* The node's HTTP status as a Connect code. */
const char *envd_code_of_status(int st)
{
	switch (st) {
	case 400: return "invalid_argument";
	case 401: return "unauthenticated";
	case 403: return "permission_denied";
	case 404: return "not_found";
	case 409: return "failed_precondition";
	case 413: case 422: case 429: return "resource_exhausted";
	case 501: return "unimplemented";
	case 503: case -1: return "unavailable";
	case 504: return "deadline_exceeded";
	default: return "internal";
	}
}

void envd_write_error_obj(struct buf *b, const char *code, const char *msg)
{
	struct jw w;

	jw_init(&w, b);
	jw_obj(&w);
	jw_key(&w, "code");
	jw_str(&w, code);
	jw_key(&w, "message");
	jw_str(&w, msg);
	jw_end(&w);
}

/* A unary call's error: {"code","message"} with the code's HTTP status. */
void envd_rpc_error(struct http_conn *c, const char *code, const char *fmt, ...)
{
	char msg[512];
	struct buf b;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	buf_init(&b);
	envd_write_error_obj(&b, code, msg);
	http_respond(c, connect_status(code), "application/json", b.data, b.len, NULL);
	buf_free(&b);
}

void envd_rpc_node_error(struct http_conn *c, int st, const struct http_resp *r)
{
	_cleanup_free_ char *m = st < 0 ? xstrdup("node unavailable") : e2b_node_message(r);

	envd_rpc_error(c, envd_code_of_status(st), "%s", m);
}

void envd_rpc_ok(struct http_conn *c, const char *json_text, size_t n)
{
	http_respond(c, 200, "application/json", json_text, n, NULL);
}

/* ---- helpers ----------------------------------------------------------------- */

/* The user of a call: HTTP Basic "name:" (the SDK's `user` option), else
 * the username query parameter, else root. Into out; false when bad. */
bool envd_call_user(const struct http_req *req, char *out, size_t cap)
{
	const char *h = http_req_header(req, "Authorization");
	_cleanup_free_ char *q = http_query_param(req, "username");
	const char *name = NULL;
	struct buf dec;

	buf_init(&dec);
	if (h && !strncasecmp(h, "Basic ", 6) &&
	    base64_decode(h + 6 + strspn(h + 6, " "), strlen(h + 6 + strspn(h + 6, " ")), &dec) == 0 &&
	    dec.len) {
		char *colon = memchr(dec.data, ':', dec.len);
		if (colon)
			*colon = '\0';
		name = dec.data;
	} else if (q && *q) {
		name = q;
	}
	snprintf(out, cap, "%s", name && *name ? name : "root");
	buf_free(&dec);
	for (const char *p = out; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '-'))
			return false;
	return strlen(out) < 32;
}

/* A path as the node takes it: relative ones are under the user's home. */
char *envd_resolve_path(const char *p, const char *user)
{
	if (p[0] == '/')
		return xstrdup(p);
	if (!strcmp(user, "root"))
		return xasprintf("/root/%s", p);
	return xasprintf("/home/%s/%s", user, p);
}

char *envd_files_target(const char *id, const char *op, const char *path, const char *extra)
{
	_cleanup_free_ char *e = e2b_qenc(path);

	return xasprintf("/v1/sandboxes/%s/files%s?path=%s%s", id, op, e, extra ? extra : "");
}

/* The "path" field of a request, resolved; NULL when answered (400). */
char *envd_req_path(struct envd_ctx *x, const json *msg, const char *field)
{
	const char *p = json_get_str(msg, field);
	char user[64];

	if (!p || !*p) {
		envd_rpc_error(x->c, "invalid_argument", "field `%s` is required", field);
		return NULL;
	}
	if (!envd_call_user(x->req, user, sizeof(user))) {
		envd_rpc_error(x->c, "invalid_argument", "bad user name");
		return NULL;
	}
	return envd_resolve_path(p, user);
}

/* A unary node call whose success answer is {} to the client. */
void envd_node_then_empty(struct envd_ctx *x, const char *method, const char *target,
			  const char *body)
{
	struct http_resp r;
	int st = e2b_node(x->a, x->who->tenant, method, target, body ? "application/json" : NULL,
			  body, body ? strlen(body) : 0, &r);

	if (st >= 200 && st < 300)
		envd_rpc_ok(x->c, "{}", 2);
	else
		envd_rpc_node_error(x->c, st, &r);
	http_resp_free(&r);
}

/* ---- dispatch ------------------------------------------------------------------ */

static bool is_stream_rpc(const char *m)
{
	return !strcmp(m, "process.Process/Start") || !strcmp(m, "process.Process/Connect") ||
	       !strcmp(m, "filesystem.Filesystem/WatchDir");
}

static void rpc(struct envd_ctx *x, const char *m)
{
	const char *ct = http_req_header(x->req, "Content-Type");
	bool streaming = is_stream_rpc(m);
	const char *js = x->req->body;
	size_t jn = x->req->body_len;
	_cleanup_(json_freep) json *msg = NULL;
	err_t err = { 0 };

	if (strcmp(x->req->method, "POST") != 0) {
		envd_rpc_error(x->c, "unimplemented", "Connect calls are POST");
		return;
	}
	if (!ct || strncasecmp(ct, streaming ? "application/connect+json" : "application/json",
			       streaming ? 24 : 16) != 0) {
		envd_rpc_error(x->c, "unimplemented", "Content-Type must be %s (JSON; binary protobuf "
			       "is not served)", streaming ? "application/connect+json" : "application/json");
		return;
	}
	if (streaming && connect_unwrap_request(x->req->body, x->req->body_len, &js, &jn, &err) < 0) {
		envd_rpc_error(x->c, "invalid_argument", "%s", err.msg);
		return;
	}
	msg = json_parse(js, jn, &err);
	if (!msg || msg->type != JSON_OBJ) {
		envd_rpc_error(x->c, "invalid_argument", "the message is not a JSON object%s%s",
			       msg ? "" : ": ", msg ? "" : err.msg);
		return;
	}
	if (!strcmp(m, "process.Process/Start"))
		envd_process_start(x, msg);
	else if (!strcmp(m, "process.Process/Connect"))
		envd_process_connect(x, msg);
	else if (!strcmp(m, "process.Process/List"))
		envd_process_list(x);
	else if (!strcmp(m, "process.Process/SendInput"))
		envd_process_input(x, msg, false);
	else if (!strcmp(m, "process.Process/CloseStdin"))
		envd_process_input(x, msg, true);
	else if (!strcmp(m, "process.Process/SendSignal"))
		envd_process_signal(x, msg);
	else if (!strcmp(m, "process.Process/Update"))
		envd_process_update(x, msg);
	else if (!strcmp(m, "filesystem.Filesystem/Stat")) {
		_cleanup_free_ char *p = envd_req_path(x, msg, "path");
		if (p)
			envd_answer_entry(x, p);
	} else if (!strcmp(m, "filesystem.Filesystem/ListDir"))
		envd_fs_list(x, msg);
	else if (!strcmp(m, "filesystem.Filesystem/MakeDir"))
		envd_fs_mkdir(x, msg);
	else if (!strcmp(m, "filesystem.Filesystem/Move"))
		envd_fs_move(x, msg);
	else if (!strcmp(m, "filesystem.Filesystem/Remove"))
		envd_fs_remove(x, msg);
	else if (!strcmp(m, "filesystem.Filesystem/WatchDir"))
		envd_fs_watch(x, msg);
	else
		envd_rpc_error(x->c, "unimplemented", "%s is not served by Airlock (docs/E2B.md)", m);
}

/* ---- the sandbox's state ------------------------------------------------------ */

/* Is the sandbox there to take an envd call? true when running (or on its
 * way: pending, starting, restoring, rolling back); otherwise answered.
 *
 * E2B's proxy answers 502 for a sandbox it cannot route to: one that is
 * gone (killed, timed out) and one that is paused. The SDK reads 502 on
 * GET /health as isRunning() false, on other HTTP calls as TimeoutError,
 * and (as Connect's Unavailable) on RPCs as TimeoutError, or on a stream's
 * start as SandboxNotFoundError. So that is the answer here too, in
 * E2B's form {"code":502,"message"}, for every envd path and method.
 *
 * A paused or suspended sandbox is not resumed by an envd call here, as
 * it would be by Airlock's own exec: an E2B program resumes it with
 * Sandbox.connect, and expects isRunning(), files.exists() and the like
 * to leave it paused (docs/E2B.md). A pause that lands between this check
 * and the node's call is resumed by it, as Airlock's own exec does.
 *
 * Only a caller with a live envd token of this sandbox gets here (e2b.c;
 * kill keeps the tokens until they expire), so the 502 tells nothing to
 * anyone who did not know the sandbox: without one, a sandbox that never
 * existed, a deleted one and another tenant's live one are all 401. */
static bool envd_gate(struct envd_ctx *x)
{
	_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s", x->id);
	_cleanup_(json_freep) json *sb = NULL;
	struct http_resp r;
	const char *st, *e;
	int code = e2b_node(x->a, x->who->tenant, "GET", target, NULL, NULL, 0, &r);

	if (code == 404) {
		http_resp_free(&r);
		e2b_error(x->c, 502, "The sandbox %s was not found: it was killed or its timeout "
			  "ended", x->id);
		return false;
	}
	if (code != 200) {
		if (code < 0) {
			e2b_error(x->c, 503, "node unavailable");
		} else {
			_cleanup_free_ char *m = e2b_node_message(&r);
			e2b_error(x->c, code, "%s", m);
		}
		http_resp_free(&r);
		return false;
	}
	sb = json_parse(r.body.data, r.body.len, NULL);
	http_resp_free(&r);
	st = sb ? json_get_str(sb, "state") : NULL;
	e = e2b_state(st);
	if (e && !strcmp(e, "running"))
		return true;
	if (e)   /* paused, suspending, suspended */
		e2b_error(x->c, 502, "The sandbox %s is %s: Sandbox.connect resumes it", x->id,
			  st);
	else
		e2b_error(x->c, 502, "The sandbox %s is %s", x->id, st ? st : "not running");
	return false;
}

void e2b_envd(struct api *a, struct http_req *req, struct http_conn *c,
	      const struct api_principal *who, const char *sandbox_id, const char *rest)
{
	struct envd_ctx x = { .a = a, .who = who, .id = sandbox_id, .req = req, .c = c };

	if (!envd_gate(&x))
		return;
	if (!strcmp(rest, "/health")) {
		if (strcmp(req->method, "GET") != 0)
			e2b_error(c, 405, "method not allowed");
		else
			http_respond(c, 204, NULL, NULL, 0, NULL);
	} else if (!strcmp(rest, "/files")) {
		if (!strcmp(req->method, "GET"))
			envd_files_read(&x);
		else if (!strcmp(req->method, "POST"))
			envd_files_write(&x);
		else
			e2b_error(c, 405, "method not allowed");
	} else if (rest[0] == '/' && strchr(rest + 1, '/') && !strchr(strchr(rest + 1, '/') + 1, '/')) {
		rpc(&x, rest + 1);
	} else {
		e2b_error(c, 404, "no such envd endpoint in Airlock's E2B API: %s", rest);
	}
}
