/* envd-stream.c - envd's server streams (envd-internal.h): a node answer
 * that streams NDJSON, translated line by line as the node writes it. An
 * exec's lines become process.ProcessEvent messages, a watch's
 * filesystem.WatchDirResponse messages, each in its own Connect envelope
 * (e2b-wire.h), closed by an end-of-stream message (with the error, if
 * any). A line longer than LINE_MAX_BYTES ends the stream; the client gets
 * a keepalive when the node is quiet. */
#include <stdio.h>
#include <string.h>

#include "../../lib/log.h"
#include "envd-internal.h"

#define LINE_MAX_BYTES (8u << 20)     /* one NDJSON line from the node */
#define KEEPALIVE_MS 30000

static int stream_send(struct envd_stream *s, uint8_t flags, const struct buf *msg)
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

static int stream_begin(struct envd_stream *s)
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
static void stream_finish(struct envd_stream *s, const char *code, const char *msg)
{
	struct buf b;

	if (s->ended || s->client_gone || stream_begin(s) < 0)
		return;
	s->ended = true;
	buf_init(&b);
	if (code) {
		buf_adds(&b, "{\"error\":");
		envd_write_error_obj(&b, code, msg);
		buf_adds(&b, "}");
	} else {
		buf_adds(&b, "{}");
	}
	stream_send(s, CONNECT_FLAG_END, &b);
	buf_free(&b);
}

void envd_stream_refuse(struct http_conn *c, const char *code, const char *msg)
{
	struct envd_stream s = { .c = c };

	stream_finish(&s, code, msg);
	http_stream_end(c);
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
static bool exec_event(struct envd_stream *s, const json *l, struct buf *msg)
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
static void watch_line(struct envd_stream *s, const json *l)
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

static void stream_line(struct envd_stream *s, const char *p, size_t n)
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
	struct envd_stream *s = arg;

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
	struct envd_stream *s = arg;
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
	struct envd_stream *s = arg;

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
void envd_relay_stream(struct envd_ctx *x, struct envd_stream *s, const char *method,
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
		stream_finish(s, envd_code_of_status(s->status), m);
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
