/* envd.c - E2B's in-sandbox API (envd) on Airlock's exec, process and file
 * operations: Connect RPCs in JSON (unary: plain JSON bodies; server
 * streams: enveloped messages) and envd's HTTP file endpoints.
 *
 * Streams are translated line by line as the node writes them: an exec's
 * NDJSON lines become process.ProcessEvent messages, a watch's lines
 * filesystem.WatchDirResponse messages, each in its own Connect envelope,
 * closed by an end-of-stream message (with the error, if any). The sandbox
 * is the one of the caller's envd token (e2b.c), and every node request
 * carries the token's tenant, so the node's ownership rules hold. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "../../lib/log.h"
#include "e2b-internal.h"

#define LINE_MAX_BYTES (8u << 20)     /* one NDJSON line from the node */
#define KEEPALIVE_MS 30000
#define LIST_MAX_ENTRIES 10000        /* ListDir with depth > 1 ... */
#define LIST_MAX_DIRS 256             /* ... and the directories it lists */

struct envd_ctx {
	struct api *a;
	const struct api_principal *who;
	const char *id;
	struct http_req *req;
	struct http_conn *c;
};

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
static const char *code_of_status(int st)
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

static void write_error_obj(struct buf *b, const char *code, const char *msg)
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
static void rpc_error(struct http_conn *c, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void rpc_error(struct http_conn *c, const char *code, const char *fmt, ...)
{
	char msg[512];
	struct buf b;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	buf_init(&b);
	write_error_obj(&b, code, msg);
	http_respond(c, connect_status(code), "application/json", b.data, b.len, NULL);
	buf_free(&b);
}

static void rpc_node_error(struct http_conn *c, int st, const struct http_resp *r)
{
	_cleanup_free_ char *m = st < 0 ? xstrdup("node unavailable") : e2b_node_message(r);

	rpc_error(c, code_of_status(st), "%s", m);
}

static void rpc_ok(struct http_conn *c, const char *json_text, size_t n)
{
	http_respond(c, 200, "application/json", json_text, n, NULL);
}

/* ---- streams --------------------------------------------------------------- */

enum stream_kind { S_EXEC, S_WATCH };

struct stream {
	struct http_conn *c;
	enum stream_kind kind;
	bool pty;             /* exec with a terminal: output is "pty" data */
	bool skip_start;      /* Connect: the start message was written already */
	bool begun, ended, client_gone, too_long;
	int status;           /* the node's */
	uint64_t last_ms;
	struct buf line;      /* a partial NDJSON line */
	struct buf errbody;   /* the node's error answer */
	const char *root;     /* WatchDir: the watched path */
	const char *pid;      /* Connect: the pid, for the start message */
};

static int stream_send(struct stream *s, uint8_t flags, const struct buf *msg)
{
	struct buf f;
	int r;

	buf_init(&f);
	connect_frame_append(&f, flags, msg->data, msg->len);
	r = http_stream_write(s->c, f.data, f.len);
	buf_free(&f);
	s->last_ms = now_ms();
	if (r < 0)
		s->client_gone = true;
	return r;
}

static int stream_begin(struct stream *s)
{
	if (s->begun)
		return 0;
	s->begun = true;
	if (http_stream_begin(s->c, 200, "application/connect+json", NULL) < 0) {
		s->client_gone = true;
		return -1;
	}
	return 0;
}

/* The end-of-stream message: {} or {"error":{...}}. */
static void stream_finish(struct stream *s, const char *code, const char *msg)
{
	struct buf b;

	if (s->ended || s->client_gone || stream_begin(s) < 0)
		return;
	s->ended = true;
	buf_init(&b);
	if (code) {
		buf_adds(&b, "{\"error\":");
		write_error_obj(&b, code, msg);
		buf_adds(&b, "}");
	} else {
		buf_adds(&b, "{}");
	}
	stream_send(s, CONNECT_FLAG_END, &b);
	buf_free(&b);
}

static const char *signal_status(int64_t sig)
{
	switch (sig) {
	case 9: return "signal: killed";
	case 15: return "signal: terminated";
	case 2: return "signal: interrupt";
	case 1: return "signal: hangup";
	default: return "signal";
	}
}

/* One exec line -> a ProcessEvent message in msg; false: nothing to send. */
static bool exec_event(struct stream *s, const json *l, struct buf *msg)
{
	const char *t = json_get_str(l, "type");
	struct jw w;

	if (!t)
		return false;
	jw_init(&w, msg);
	jw_obj(&w);
	jw_key(&w, "event");
	jw_obj(&w);
	if (!strcmp(t, "start")) {
		if (s->skip_start)
			return false;
		jw_key(&w, "start");
		jw_obj(&w);
		jw_key(&w, "pid");
		jw_int(&w, json_get_int(l, "pid", 0, NULL));
		jw_end(&w);
	} else if (!strcmp(t, "stdout") || !strcmp(t, "stderr")) {
		const char *d = json_get_str(l, "data");
		if (!d)
			return false;
		jw_key(&w, "data");
		jw_obj(&w);
		jw_key(&w, s->pty && !strcmp(t, "stdout") ? "pty" : t);
		jw_str(&w, d);   /* base64 both sides */
		jw_end(&w);
	} else if (!strcmp(t, "exit")) {
		const json *sig = json_get(l, "signal");
		const char *reason = json_get_str(l, "reason");
		jw_key(&w, "end");
		jw_obj(&w);
		if (sig && sig->is_int && sig->i > 0) {
			jw_key(&w, "exitCode");
			jw_int(&w, -1);
			jw_key(&w, "exited");
			jw_bool(&w, false);
			jw_key(&w, "status");
			jw_str(&w, signal_status(sig->i));
		} else {
			int64_t code = json_get_int(l, "exit_code", 0, NULL);
			char st[48];
			snprintf(st, sizeof(st), "exit status %lld", (long long)code);
			jw_key(&w, "exitCode");
			jw_int(&w, code);
			jw_key(&w, "exited");
			jw_bool(&w, true);
			jw_key(&w, "status");
			jw_str(&w, st);
		}
		if (reason) {
			jw_key(&w, "error");
			jw_str(&w, reason);
		}
		jw_end(&w);
	} else {
		return false;   /* dropped: E2B has no such event */
	}
	jw_end(&w);
	jw_end(&w);
	return true;
}

/* The path relative to the watched root, as envd names events. */
static const char *rel_name(const char *root, const char *path)
{
	size_t n = strlen(root);

	while (n > 1 && root[n - 1] == '/')
		n--;
	if (strncmp(path, root, n) == 0 && path[n] == '/')
		return path + n + 1;
	const char *slash = strrchr(path, '/');
	return slash ? slash + 1 : path;
}

static void fs_event(struct buf *msg, const char *name, const char *type)
{
	struct jw w;

	jw_init(&w, msg);
	jw_obj(&w);
	jw_key(&w, "filesystem");
	jw_obj(&w);
	jw_key(&w, "name");
	jw_str(&w, name);
	jw_key(&w, "type");
	jw_str(&w, type);
	jw_end(&w);
	jw_end(&w);
}

/* Airlock's own temporary file of an atomic write (guest agent:
 * ".airlock-tmp-<hex>" beside the target, renamed over it): its events
 * are ours, not the client's; the rename shows as the target's create. */
static bool write_tmp(const char *path)
{
	const char *slash = path ? strrchr(path, '/') : NULL;

	return path && !strncmp(slash ? slash + 1 : path, ".airlock-tmp-", 13);
}

/* One watch line -> WatchDirResponse messages, sent here. */
static void watch_line(struct stream *s, const json *l)
{
	static const struct { const char *ours, *theirs; } types[] = {
		{ "create", "EVENT_TYPE_CREATE" }, { "write", "EVENT_TYPE_WRITE" },
		{ "remove", "EVENT_TYPE_REMOVE" }, { "rename", "EVENT_TYPE_RENAME" },
	};
	const char *t = json_get_str(l, "type"), *path = json_get_str(l, "path");
	struct buf msg;

	if (!t)
		return;
	buf_init(&msg);
	if (!strcmp(t, "start")) {
		buf_adds(&msg, "{\"start\":{}}");
		stream_send(s, 0, &msg);
	} else if (!strcmp(t, "rename") && path) {
		/* envd (fsnotify) reports the old name renamed, the new created */
		const char *from = json_get_str(l, "from");
		if (from && !write_tmp(from)) {
			fs_event(&msg, rel_name(s->root, from), "EVENT_TYPE_RENAME");
			stream_send(s, 0, &msg);
			buf_reset(&msg);
		}
		fs_event(&msg, rel_name(s->root, path), "EVENT_TYPE_CREATE");
		stream_send(s, 0, &msg);
	} else if (path && !write_tmp(path)) {
		for (size_t i = 0; i < ARRAY_SIZE(types); i++)
			if (!strcmp(t, types[i].ours)) {
				fs_event(&msg, rel_name(s->root, path), types[i].theirs);
				stream_send(s, 0, &msg);
			}
	}
	buf_free(&msg);
}

static void stream_line(struct stream *s, const char *p, size_t n)
{
	json *l = json_parse(p, n, NULL);
	struct buf msg;

	if (!l || l->type != JSON_OBJ) {
		json_free(l);
		log_warn("e2b: the node wrote a line that is not a JSON object");
		return;
	}
	if (s->kind == S_WATCH) {
		watch_line(s, l);
	} else {
		buf_init(&msg);
		if (exec_event(s, l, &msg))
			stream_send(s, 0, &msg);
		buf_free(&msg);
		if (!strcmp(json_get_str(l, "type") ? json_get_str(l, "type") : "", "exit"))
			stream_finish(s, NULL, NULL);
	}
	json_free(l);
}

static int on_head(void *arg, const struct http_resp *head)
{
	struct stream *s = arg;

	s->status = head->status;
	if (head->status != 200)
		return 0;   /* the error body follows: on_data keeps it */
	if (stream_begin(s) < 0)
		return 1;
	if (s->skip_start) {
		/* Connect: the SDK waits for a start message first */
		struct buf msg;
		buf_init(&msg);
		buf_printf(&msg, "{\"event\":{\"start\":{\"pid\":%s}}}", s->pid);
		stream_send(s, 0, &msg);
		buf_free(&msg);
	}
	return s->client_gone;
}

static int on_data(void *arg, const void *p, size_t n)
{
	struct stream *s = arg;
	const char *nl;

	if (s->status != 200) {
		if (s->errbody.len + n < 65536)
			buf_add(&s->errbody, p, n);
		return 0;
	}
	buf_add(&s->line, p, n);
	while ((nl = memchr(s->line.data, '\n', s->line.len))) {
		size_t len = (size_t)(nl - s->line.data);
		if (!s->ended)
			stream_line(s, s->line.data, len);
		memmove(s->line.data, nl + 1, s->line.len - len - 1);
		s->line.len -= len + 1;
		s->line.data[s->line.len] = '\0';
		if (s->client_gone)
			return 1;
	}
	if (s->line.len > LINE_MAX_BYTES) {
		s->too_long = true;
		return 1;
	}
	return 0;
}

static int on_idle(void *arg)
{
	struct stream *s = arg;

	if (s->begun && http_conn_peer_closed(s->c)) {
		s->client_gone = true;
		return 1;
	}
	if (s->begun && !s->ended && now_ms() - s->last_ms >= KEEPALIVE_MS) {
		struct buf msg;
		buf_init(&msg);
		buf_adds(&msg, s->kind == S_EXEC ? "{\"event\":{\"keepalive\":{}}}"
						 : "{\"keepalive\":{}}");
		stream_send(s, 0, &msg);
		buf_free(&msg);
	}
	return s->client_gone;
}

/* Run a node request whose answer is a stream, and translate it. */
static void relay_stream(struct envd_ctx *x, struct stream *s, const char *method,
			 const char *target, const char *body)
{
	static const struct http_stream_cbs cbs = {
		.on_head = on_head, .on_data = on_data, .on_idle = on_idle, .idle_ms = 1000,
	};
	_cleanup_free_ char *hdr = xasprintf("X-Airlock-Tenant: %s\r\nX-Airlock-Admin: 0\r\n%s",
					     x->who->tenant,
					     body ? "Content-Type: application/json\r\n" : "");
	err_t err = { 0 };
	int r;

	s->c = x->c;
	s->status = -1;
	s->last_ms = now_ms();
	buf_init(&s->line);
	buf_init(&s->errbody);
	r = http_request_stream(x->a->cfg->node_sock, method, target, hdr, body,
				body ? strlen(body) : 0, &cbs, s, &err);
	if (s->status != 200) {
		struct http_resp fake = { .status = s->status, .body = s->errbody };
		_cleanup_free_ char *m = s->status < 0 ? xstrdup("node unavailable")
						       : e2b_node_message(&fake);
		stream_finish(s, code_of_status(s->status), m);
	} else if (s->too_long) {
		stream_finish(s, "internal", "a line of the node's stream is too long");
	} else if (r < 0 && !s->client_gone) {
		stream_finish(s, "unavailable", "the node's stream broke");
	} else {
		stream_finish(s, NULL, NULL);
	}
	if (s->begun && !s->client_gone)
		http_stream_end(x->c);
	buf_free(&s->line);
	buf_free(&s->errbody);
}

/* ---- helpers ----------------------------------------------------------------- */

/* The user of a call: HTTP Basic "name:" (the SDK's `user` option), else
 * the username query parameter, else root. Into out; false when bad. */
static bool call_user(const struct http_req *req, char *out, size_t cap)
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
static char *resolve_path(const char *p, const char *user)
{
	if (p[0] == '/')
		return xstrdup(p);
	if (!strcmp(user, "root"))
		return xasprintf("/root/%s", p);
	return xasprintf("/home/%s/%s", user, p);
}

static char *files_target(const char *id, const char *op, const char *path, const char *extra)
{
	_cleanup_free_ char *e = e2b_qenc(path);

	return xasprintf("/v1/sandboxes/%s/files%s?path=%s%s", id, op, e, extra ? extra : "");
}

static const char *file_type(const char *t)
{
	if (!t)
		return "FILE_TYPE_UNSPECIFIED";
	if (!strcmp(t, "file"))
		return "FILE_TYPE_FILE";
	if (!strcmp(t, "dir"))
		return "FILE_TYPE_DIRECTORY";
	if (!strcmp(t, "symlink"))
		return "FILE_TYPE_SYMLINK";
	return "FILE_TYPE_UNSPECIFIED";
}

/* EntryInfo from the node's stat or list item (path given apart). */
static void write_entry(struct jw *w, const json *st, const char *path)
{
	const char *t = json_get_str(st, "type"), *mode_s = json_get_str(st, "mode");
	const char *slash = strrchr(path, '/');
	unsigned mode = mode_s ? (unsigned)strtoul(mode_s, NULL, 8) & 07777 : 0;
	char perms[11] = "----------", size[24];
	static const char rwx[] = "rwxrwxrwx";

	perms[0] = t && !strcmp(t, "dir") ? 'd' : t && !strcmp(t, "symlink") ? 'L' : '-';
	for (int i = 0; i < 9; i++)
		if (mode & (0400u >> i))
			perms[i + 1] = rwx[i];
	snprintf(size, sizeof(size), "%lld", (long long)json_get_int(st, "size", 0, NULL));
	jw_obj(w);
	jw_key(w, "name");
	jw_str_lossy(w, slash && slash[1] ? slash + 1 : path);
	jw_key(w, "type");
	jw_str(w, file_type(t));
	jw_key(w, "path");
	jw_str_lossy(w, path);
	jw_key(w, "size");
	jw_str(w, size);   /* int64: a string in protobuf JSON */
	jw_key(w, "mode");
	/* Go's fs.FileMode, as envd reports it: the type bits above the perms */
	jw_uint(w, mode | (t && !strcmp(t, "dir") ? 1u << 31 : 0) |
			   (t && !strcmp(t, "symlink") ? 1u << 27 : 0));
	jw_key(w, "permissions");
	jw_str(w, perms);
	jw_key(w, "owner");
	jw_str(w, "");
	jw_key(w, "group");
	jw_str(w, "");
	if (json_get_str(st, "mtime")) {
		jw_key(w, "modifiedTime");
		jw_str(w, json_get_str(st, "mtime"));
	}
	jw_end(w);
}

/* The node's stat of path: 200 and *out, or the status (answered). */
static int node_stat(struct envd_ctx *x, const char *path, json **out, bool answer)
{
	_cleanup_free_ char *t = files_target(x->id, "/stat", path, NULL);
	struct http_resp r;
	int st = e2b_node(x->a, x->who->tenant, "GET", t, NULL, NULL, 0, &r);

	*out = NULL;
	if (st == 200 && !(*out = json_parse(r.body.data, r.body.len, NULL)))
		st = 500;
	if (st != 200 && answer)
		rpc_node_error(x->c, st, &r);
	http_resp_free(&r);
	return st;
}

/* {"entry": EntryInfo} of path. */
static void answer_entry(struct envd_ctx *x, const char *path)
{
	_cleanup_(json_freep) json *st = NULL;
	struct buf b;
	struct jw w;

	if (node_stat(x, path, &st, true) != 200)
		return;
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "entry");
	write_entry(&w, st, path);
	jw_end(&w);
	rpc_ok(x->c, b.data, b.len);
	buf_free(&b);
}

/* The "path" field of a request, resolved; NULL when answered (400). */
static char *req_path(struct envd_ctx *x, const json *msg, const char *field)
{
	const char *p = json_get_str(msg, field);
	char user[64];

	if (!p || !*p) {
		rpc_error(x->c, "invalid_argument", "field `%s` is required", field);
		return NULL;
	}
	if (!call_user(x->req, user, sizeof(user))) {
		rpc_error(x->c, "invalid_argument", "bad user name");
		return NULL;
	}
	return resolve_path(p, user);
}

/* The pid of a ProcessSelector; 0 when answered (tag selectors are not
 * served: Airlock processes have no tags). */
static int64_t selector_pid(struct envd_ctx *x, const json *msg)
{
	const json *sel = json_get(msg, "process");
	bool bad = false;
	int64_t pid;

	if (!sel || sel->type != JSON_OBJ) {
		rpc_error(x->c, "invalid_argument", "field `process` (a selector) is required");
		return 0;
	}
	if (json_get(sel, "tag")) {
		rpc_error(x->c, "unimplemented", "tag selectors are not supported by Airlock");
		return 0;
	}
	pid = json_get_int(sel, "pid", 0, &bad);
	if (bad || pid <= 0 || pid > 0xffffffffLL) {
		rpc_error(x->c, "invalid_argument", "process.pid must be a positive integer");
		return 0;
	}
	return pid;
}

/* A unary node call whose success answer is {} to the client. */
static void node_then_empty(struct envd_ctx *x, const char *method, const char *target,
			    const char *body)
{
	struct http_resp r;
	int st = e2b_node(x->a, x->who->tenant, method, target, body ? "application/json" : NULL,
			  body, body ? strlen(body) : 0, &r);

	if (st >= 200 && st < 300)
		rpc_ok(x->c, "{}", 2);
	else
		rpc_node_error(x->c, st, &r);
	http_resp_free(&r);
}

/* ---- process.Process ---------------------------------------------------------- */

/* The shell wrapper for "/bin/bash -l -c CMD" (what commands.run sends):
 * templates without bash (busybox) run the same arguments with /bin/sh. */
static const char BASH_OR_SH[] =
	"if [ -x /bin/bash ]; then exec /bin/bash \"$@\"; fi; exec /bin/sh \"$@\"";

static void process_start(struct envd_ctx *x, const json *msg)
{
	const json *pc = json_get(msg, "process"), *pty = json_get(msg, "pty");
	const json *args = pc ? json_get(pc, "args") : NULL, *envs = pc ? json_get(pc, "envs") : NULL;
	const char *cmd = pc ? json_get_str(pc, "cmd") : NULL, *cwd = pc ? json_get_str(pc, "cwd") : NULL;
	_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s/exec", x->id);
	struct stream s = { .kind = S_EXEC };
	char user[64];
	bool bad = false;
	struct buf b;
	struct jw w;

	if (!cmd || !*cmd || (args && args->type != JSON_ARR) ||
	    (envs && envs->type != JSON_OBJ)) {
		s.c = x->c;
		stream_finish(&s, "invalid_argument",
			      "process.cmd is required; args is a list, envs an object");
		http_stream_end(x->c);
		return;
	}
	if (!call_user(x->req, user, sizeof(user))) {
		s.c = x->c;
		stream_finish(&s, "invalid_argument", "bad user name");
		http_stream_end(x->c);
		return;
	}
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "cmd");
	jw_arr(&w);
	if (!strcmp(cmd, "/bin/bash")) {
		jw_str(&w, "/bin/sh");
		jw_str(&w, "-c");
		jw_str(&w, BASH_OR_SH);
		jw_str(&w, "sh");
	} else {
		jw_str(&w, cmd);
	}
	for (size_t i = 0; args && i < args->n; i++) {
		if (args->items[i]->type != JSON_STR)
			bad = true;
		else
			jw_str(&w, args->items[i]->str);
	}
	jw_end(&w);
	if (envs && envs->n) {
		jw_key(&w, "env");
		jw_value(&w, envs);
	}
	if (cwd && *cwd) {
		jw_key(&w, "cwd");
		jw_str(&w, cwd);
	}
	if (strcmp(user, "root") != 0) {
		jw_key(&w, "user");
		jw_str(&w, user);
	}
	jw_key(&w, "stdin");
	jw_bool(&w, json_get_bool(msg, "stdin", false, &bad));
	if (pty && pty->type == JSON_OBJ) {
		const json *sz = json_get(pty, "size");
		jw_key(&w, "pty");
		jw_obj(&w);
		jw_key(&w, "rows");
		jw_int(&w, sz ? json_get_int(sz, "rows", 24, &bad) : 24);
		jw_key(&w, "cols");
		jw_int(&w, sz ? json_get_int(sz, "cols", 80, &bad) : 80);
		jw_end(&w);
		s.pty = true;
	}
	jw_end(&w);
	if (bad) {
		s.c = x->c;
		stream_finish(&s, "invalid_argument", "a field of the request has the wrong type");
		http_stream_end(x->c);
	} else {
		relay_stream(x, &s, "POST", target, b.data);
	}
	buf_free(&b);
}

/* Does process pid have a terminal (its output is then "pty" data)? */
static bool process_has_pty(struct envd_ctx *x, int64_t pid)
{
	_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s/processes?limit=1000", x->id);
	_cleanup_(json_freep) json *j = NULL;
	struct http_resp r;
	bool pty = false;

	if (e2b_node(x->a, x->who->tenant, "GET", target, NULL, NULL, 0, &r) == 200)
		j = json_parse(r.body.data, r.body.len, NULL);
	http_resp_free(&r);
	const json *ps = j ? json_get(j, "processes") : NULL;
	for (size_t i = 0; ps && ps->type == JSON_ARR && i < ps->n; i++)
		if (json_get_int(ps->items[i], "pid", 0, NULL) == pid) {
			const json *p = json_get(ps->items[i], "pty");
			pty = p && (p->type == JSON_OBJ || (p->type == JSON_BOOL && p->b));
		}
	return pty;
}

static void process_connect(struct envd_ctx *x, const json *msg)
{
	const json *sel = json_get(msg, "process");
	bool bad = false;
	int64_t pid = sel && sel->type == JSON_OBJ ? json_get_int(sel, "pid", 0, &bad) : 0;
	struct stream s = { .kind = S_EXEC, .skip_start = true };
	char pids[24];

	if (bad || pid <= 0 || pid > 0xffffffffLL) {
		s.c = x->c;
		stream_finish(&s, "invalid_argument", "process.pid must be a positive integer "
			      "(tag selectors are not supported)");
		http_stream_end(x->c);
		return;
	}
	snprintf(pids, sizeof(pids), "%lld", (long long)pid);
	s.pid = pids;   /* on_head writes the start message with it */
	s.pty = process_has_pty(x, pid);
	_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s/processes/%s/output?offset=0"
						"&follow=1", x->id, pids);
	relay_stream(x, &s, "GET", target, NULL);
}

static void process_list(struct envd_ctx *x)
{
	_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s/processes?limit=1000", x->id);
	_cleanup_(json_freep) json *j = NULL;
	struct http_resp r;
	struct buf b;
	struct jw w;
	int st = e2b_node(x->a, x->who->tenant, "GET", target, NULL, NULL, 0, &r);

	if (st != 200) {
		rpc_node_error(x->c, st, &r);
		http_resp_free(&r);
		return;
	}
	j = json_parse(r.body.data, r.body.len, NULL);
	http_resp_free(&r);
	const json *ps = j ? json_get(j, "processes") : NULL;
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "processes");
	jw_arr(&w);
	for (size_t i = 0; ps && ps->type == JSON_ARR && i < ps->n; i++) {
		const json *p = ps->items[i], *cmd = json_get(p, "cmd");
		if (!json_get_bool(p, "running", false, NULL))
			continue;
		jw_obj(&w);
		jw_key(&w, "config");
		jw_obj(&w);
		jw_key(&w, "cmd");
		jw_str(&w, cmd && cmd->n && cmd->items[0]->type == JSON_STR ? cmd->items[0]->str : "");
		jw_key(&w, "args");
		jw_arr(&w);
		for (size_t k = 1; cmd && cmd->type == JSON_ARR && k < cmd->n; k++)
			if (cmd->items[k]->type == JSON_STR)
				jw_str(&w, cmd->items[k]->str);
		jw_end(&w);
		jw_key(&w, "envs");
		jw_raw(&w, "{}");
		jw_end(&w);
		jw_key(&w, "pid");
		jw_int(&w, json_get_int(p, "pid", 0, NULL));
		jw_end(&w);
	}
	jw_end(&w);
	jw_end(&w);
	rpc_ok(x->c, b.data, b.len);
	buf_free(&b);
}

static void process_input(struct envd_ctx *x, const json *msg, bool eof)
{
	int64_t pid = selector_pid(x, msg);
	const json *in = json_get(msg, "input");
	const char *data = in ? json_get_str(in, "stdin") : NULL;
	struct buf dec;

	if (!pid)
		return;
	if (!data && in)
		data = json_get_str(in, "pty");
	if (!eof && !data) {
		rpc_error(x->c, "invalid_argument", "input.stdin or input.pty (base64) is required");
		return;
	}
	buf_init(&dec);
	if (data && base64_decode(data, strlen(data), &dec) < 0) {
		buf_free(&dec);
		rpc_error(x->c, "invalid_argument", "input is not base64");
		return;
	}
	buf_free(&dec);
	_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s/processes/%lld/stdin", x->id,
						(long long)pid);
	struct buf b;
	struct jw w;
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "data");
	jw_str(&w, data ? data : "");
	if (eof) {
		jw_key(&w, "eof");
		jw_bool(&w, true);
	}
	jw_end(&w);
	node_then_empty(x, "POST", target, b.data);
	buf_free(&b);
}

static void process_signal(struct envd_ctx *x, const json *msg)
{
	int64_t pid = selector_pid(x, msg), sig = 0;
	const json *s = json_get(msg, "signal");

	if (!pid)
		return;
	if (s && s->type == JSON_STR && !strcmp(s->str, "SIGNAL_SIGKILL"))
		sig = 9;
	else if (s && s->type == JSON_STR && !strcmp(s->str, "SIGNAL_SIGTERM"))
		sig = 15;
	else if (s && s->is_int && (s->i == 9 || s->i == 15))
		sig = s->i;
	if (!sig) {
		rpc_error(x->c, "invalid_argument", "signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM");
		return;
	}
	_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s/processes/%lld/signal", x->id,
						(long long)pid);
	_cleanup_free_ char *body = xasprintf("{\"signal\":%lld}", (long long)sig);
	node_then_empty(x, "POST", target, body);
}

static void process_update(struct envd_ctx *x, const json *msg)
{
	int64_t pid = selector_pid(x, msg);
	const json *pty = json_get(msg, "pty"), *sz = pty ? json_get(pty, "size") : NULL;
	bool bad = false;

	if (!pid)
		return;
	if (!sz) {
		rpc_ok(x->c, "{}", 2);
		return;
	}
	int64_t rows = json_get_int(sz, "rows", 0, &bad), cols = json_get_int(sz, "cols", 0, &bad);
	if (bad || rows < 1 || cols < 1 || rows > 65535 || cols > 65535) {
		rpc_error(x->c, "invalid_argument", "pty.size rows and cols must be 1..65535");
		return;
	}
	_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s/processes/%lld/resize", x->id,
						(long long)pid);
	_cleanup_free_ char *body = xasprintf("{\"rows\":%lld,\"cols\":%lld}", (long long)rows,
					      (long long)cols);
	node_then_empty(x, "POST", target, body);
}

/* ---- filesystem.Filesystem ----------------------------------------------------- */

/* Entries of dir (depth levels) into w; false when answered (an error). */
static bool list_into(struct envd_ctx *x, struct jw *w, const char *dir, unsigned depth,
		      size_t *count, size_t *dirs, bool top)
{
	_cleanup_free_ char *t = files_target(x->id, "/list", dir, NULL);
	_cleanup_(json_freep) json *j = NULL;
	struct http_resp r;
	int st;

	++*dirs;   /* one node request per directory: bounded per call */
	st = e2b_node(x->a, x->who->tenant, "GET", t, NULL, NULL, 0, &r);
	if (st != 200) {
		if (top) {
			rpc_node_error(x->c, st, &r);
			http_resp_free(&r);
			return false;
		}
		http_resp_free(&r);
		return true;   /* a subdirectory that went away meanwhile */
	}
	j = json_parse(r.body.data, r.body.len, NULL);
	http_resp_free(&r);
	const json *es = j ? json_get(j, "entries") : NULL;
	for (size_t i = 0; es && es->type == JSON_ARR && i < es->n; i++) {
		const char *name = json_get_str(es->items[i], "name");
		if (!name || ++*count > LIST_MAX_ENTRIES)
			continue;
		_cleanup_free_ char *path = xasprintf("%s%s%s", dir,
						      dir[strlen(dir) - 1] == '/' ? "" : "/", name);
		write_entry(w, es->items[i], path);
		const char *t2 = json_get_str(es->items[i], "type");
		if (depth > 1 && t2 && !strcmp(t2, "dir") && *dirs < LIST_MAX_DIRS &&
		    !list_into(x, w, path, depth - 1, count, dirs, false))
			return false;
	}
	return true;
}

static void fs_list(struct envd_ctx *x, const json *msg)
{
	_cleanup_free_ char *path = req_path(x, msg, "path");
	bool bad = false;
	int64_t depth = json_get_int(msg, "depth", 1, &bad);
	size_t count = 0, dirs = 0;
	struct buf b;
	struct jw w;

	if (!path)
		return;
	if (bad || depth < 0 || depth > 64) {
		rpc_error(x->c, "invalid_argument", "depth must be 1..64");
		return;
	}
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "entries");
	jw_arr(&w);
	if (list_into(x, &w, path, depth ? (unsigned)depth : 1, &count, &dirs, true)) {
		jw_end(&w);
		jw_end(&w);
		rpc_ok(x->c, b.data, b.len);
	}
	buf_free(&b);
}

static void fs_mkdir(struct envd_ctx *x, const json *msg)
{
	_cleanup_free_ char *path = req_path(x, msg, "path");
	_cleanup_(json_freep) json *st = NULL;
	_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s/files/mkdir", x->id);
	struct http_resp r;
	struct buf b;
	struct jw w;

	if (!path)
		return;
	if (node_stat(x, path, &st, false) == 200) {
		rpc_error(x->c, "already_exists", "%s exists", path);
		return;
	}
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "path");
	jw_str(&w, path);
	jw_key(&w, "parents");
	jw_bool(&w, true);
	jw_end(&w);
	int s = e2b_node(x->a, x->who->tenant, "POST", target, "application/json", b.data, b.len,
			 &r);
	buf_free(&b);
	if (s >= 200 && s < 300)
		answer_entry(x, path);
	else
		rpc_node_error(x->c, s, &r);
	http_resp_free(&r);
}

static void fs_move(struct envd_ctx *x, const json *msg)
{
	_cleanup_free_ char *from = req_path(x, msg, "source");
	_cleanup_free_ char *to = from ? req_path(x, msg, "destination") : NULL;
	_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s/files/rename", x->id);
	struct http_resp r;
	struct buf b;
	struct jw w;

	if (!to)
		return;
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "from");
	jw_str(&w, from);
	jw_key(&w, "to");
	jw_str(&w, to);
	jw_end(&w);
	int s = e2b_node(x->a, x->who->tenant, "POST", target, "application/json", b.data, b.len,
			 &r);
	buf_free(&b);
	if (s >= 200 && s < 300)
		answer_entry(x, to);
	else
		rpc_node_error(x->c, s, &r);
	http_resp_free(&r);
}

static void fs_remove(struct envd_ctx *x, const json *msg)
{
	_cleanup_free_ char *path = req_path(x, msg, "path");

	if (!path)
		return;
	_cleanup_free_ char *target = files_target(x->id, "", path, "&recursive=1");
	node_then_empty(x, "DELETE", target, NULL);
}

static void fs_watch(struct envd_ctx *x, const json *msg)
{
	const char *p = json_get_str(msg, "path");
	struct stream s = { .kind = S_WATCH };
	char user[64];
	bool bad = false;
	bool rec = json_get_bool(msg, "recursive", false, &bad);

	if (!p || !*p || bad || !call_user(x->req, user, sizeof(user))) {
		s.c = x->c;
		stream_finish(&s, "invalid_argument", "path is required; recursive is a boolean");
		http_stream_end(x->c);
		return;
	}
	_cleanup_free_ char *path = resolve_path(p, user);
	_cleanup_free_ char *target = files_target(x->id, "/watch", path,
						   rec ? "&recursive=true" : NULL);
	s.root = path;
	relay_stream(x, &s, "GET", target, NULL);
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
		rpc_error(x->c, "unimplemented", "Connect calls are POST");
		return;
	}
	if (!ct || strncasecmp(ct, streaming ? "application/connect+json" : "application/json",
			       streaming ? 24 : 16) != 0) {
		rpc_error(x->c, "unimplemented", "Content-Type must be %s (JSON; binary protobuf "
			  "is not served)", streaming ? "application/connect+json" : "application/json");
		return;
	}
	if (streaming && connect_unwrap_request(x->req->body, x->req->body_len, &js, &jn, &err) < 0) {
		rpc_error(x->c, "invalid_argument", "%s", err.msg);
		return;
	}
	msg = json_parse(js, jn, &err);
	if (!msg || msg->type != JSON_OBJ) {
		rpc_error(x->c, "invalid_argument", "the message is not a JSON object%s%s",
			  msg ? "" : ": ", msg ? "" : err.msg);
		return;
	}
	if (!strcmp(m, "process.Process/Start"))
		process_start(x, msg);
	else if (!strcmp(m, "process.Process/Connect"))
		process_connect(x, msg);
	else if (!strcmp(m, "process.Process/List"))
		process_list(x);
	else if (!strcmp(m, "process.Process/SendInput"))
		process_input(x, msg, false);
	else if (!strcmp(m, "process.Process/CloseStdin"))
		process_input(x, msg, true);
	else if (!strcmp(m, "process.Process/SendSignal"))
		process_signal(x, msg);
	else if (!strcmp(m, "process.Process/Update"))
		process_update(x, msg);
	else if (!strcmp(m, "filesystem.Filesystem/Stat")) {
		_cleanup_free_ char *p = req_path(x, msg, "path");
		if (p)
			answer_entry(x, p);
	} else if (!strcmp(m, "filesystem.Filesystem/ListDir"))
		fs_list(x, msg);
	else if (!strcmp(m, "filesystem.Filesystem/MakeDir"))
		fs_mkdir(x, msg);
	else if (!strcmp(m, "filesystem.Filesystem/Move"))
		fs_move(x, msg);
	else if (!strcmp(m, "filesystem.Filesystem/Remove"))
		fs_remove(x, msg);
	else if (!strcmp(m, "filesystem.Filesystem/WatchDir"))
		fs_watch(x, msg);
	else
		rpc_error(x->c, "unimplemented", "%s is not served by Airlock (docs/E2B.md)", m);
}

/* GET /files?path=P: the file's bytes. */
static void files_read(struct envd_ctx *x)
{
	_cleanup_free_ char *p = http_query_param(x->req, "path"), *path = NULL, *t = NULL;
	char user[64];
	struct http_resp r;

	if (!p || !*p || !call_user(x->req, user, sizeof(user))) {
		e2b_error(x->c, 400, "query parameter path is required");
		return;
	}
	path = resolve_path(p, user);
	t = files_target(x->id, "", path, NULL);
	int st = e2b_node(x->a, x->who->tenant, "GET", t, NULL, NULL, 0, &r);
	if (st == 200) {
		http_respond(x->c, 200, "application/octet-stream", r.body.data, r.body.len, NULL);
	} else if (st < 0) {
		e2b_error(x->c, 503, "node unavailable");
	} else {
		_cleanup_free_ char *m = e2b_node_message(&r);
		e2b_error(x->c, st, "%s", m);
	}
	http_resp_free(&r);
}

/* One file write; false when answered (an error). */
static bool write_one(struct envd_ctx *x, const char *path, const char *data, size_t len,
		      struct jw *w)
{
	_cleanup_free_ char *t = files_target(x->id, "", path, NULL);
	struct http_resp r;
	int st = e2b_node(x->a, x->who->tenant, "PUT", t, "application/octet-stream", data, len,
			  &r);

	if (st < 200 || st >= 300) {
		if (st < 0) {
			e2b_error(x->c, 503, "node unavailable");
		} else {
			_cleanup_free_ char *m = e2b_node_message(&r);
			e2b_error(x->c, st, "%s: %s", path, m);
		}
		http_resp_free(&r);
		return false;
	}
	http_resp_free(&r);
	const char *slash = strrchr(path, '/');
	jw_obj(w);
	jw_key(w, "name");
	jw_str(w, slash ? slash + 1 : path);
	jw_key(w, "type");
	jw_str(w, "file");
	jw_key(w, "path");
	jw_str(w, path);
	jw_end(w);
	return true;
}

/* POST /files: multipart/form-data (one part per file, its name the path
 * unless ?path= names the one file) or application/octet-stream (?path=). */
static void files_write(struct envd_ctx *x)
{
	const char *ct = http_req_header(x->req, "Content-Type");
	const char *ce = http_req_header(x->req, "Content-Encoding");
	_cleanup_free_ char *qp = http_query_param(x->req, "path");
	_cleanup_free_ struct multipart_part *parts = NULL;
	char user[64], boundary[80];
	err_t err = { 0 };
	struct buf b;
	struct jw w;
	int n;

	if (ce && strcasecmp(ce, "identity") != 0) {
		e2b_error(x->c, 400, "Content-Encoding %s is not supported", ce);
		return;
	}
	if (!call_user(x->req, user, sizeof(user))) {
		e2b_error(x->c, 400, "bad user name");
		return;
	}
	buf_init(&b);
	jw_init(&w, &b);
	jw_arr(&w);
	if (ct && !strncasecmp(ct, "application/octet-stream", 24)) {
		if (!qp || !*qp) {
			e2b_error(x->c, 400, "query parameter path is required");
			goto out;
		}
		_cleanup_free_ char *path = resolve_path(qp, user);
		if (!write_one(x, path, x->req->body, x->req->body_len, &w))
			goto out;
	} else {
		if (multipart_boundary(ct, boundary, sizeof(boundary), &err) < 0) {
			e2b_error(x->c, 400, "%s", err.msg);
			goto out;
		}
		parts = xcalloc(MULTIPART_MAX_PARTS, sizeof(*parts));
		n = multipart_parse(x->req->body, x->req->body_len, boundary, parts,
				    MULTIPART_MAX_PARTS, &err);
		if (n < 0) {
			e2b_error(x->c, 400, "%s", err.msg);
			goto out;
		}
		if (n == 0 || (qp && *qp && n > 1)) {
			e2b_error(x->c, 400, "%s", n ? "?path= names one file, but the body has several"
						     : "no file in the body");
			goto out;
		}
		for (int i = 0; i < n; i++) {
			const char *p = qp && *qp ? qp : parts[i].filename;
			if (!*p) {
				e2b_error(x->c, 400, "part %d has no file name and there is no ?path=", i);
				goto out;
			}
			_cleanup_free_ char *path = resolve_path(p, user);
			if (!write_one(x, path, parts[i].data, parts[i].len, &w))
				goto out;
		}
	}
	jw_end(&w);
	http_respond(x->c, 200, "application/json", b.data, b.len, NULL);
out:
	buf_free(&b);
}

void e2b_envd(struct api *a, struct http_req *req, struct http_conn *c,
	      const struct api_principal *who, const char *sandbox_id, const char *rest)
{
	struct envd_ctx x = { .a = a, .who = who, .id = sandbox_id, .req = req, .c = c };

	if (!strcmp(rest, "/health")) {
		if (strcmp(req->method, "GET") != 0)
			e2b_error(c, 405, "method not allowed");
		else
			http_respond(c, 204, NULL, NULL, 0, NULL);
	} else if (!strcmp(rest, "/files")) {
		if (!strcmp(req->method, "GET"))
			files_read(&x);
		else if (!strcmp(req->method, "POST"))
			files_write(&x);
		else
			e2b_error(c, 405, "method not allowed");
	} else if (rest[0] == '/' && strchr(rest + 1, '/') && !strchr(strchr(rest + 1, '/') + 1, '/')) {
		rpc(&x, rest + 1);
	} else {
		e2b_error(c, 404, "no such envd endpoint in Airlock's E2B API: %s", rest);
	}
}
