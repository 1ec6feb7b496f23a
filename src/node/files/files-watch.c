/* files-watch.c - GET /v1/sandboxes/{id}/files/watch?path=&recursive=&max_queue=
 *
 * An NDJSON stream of what changes under a path in the sandbox, from inotify
 * in the guest agent (WATCH_* frames, guestconn/guestconn-watch.c):
 *   {"type":"start","path":"/x","recursive":true}
 *   {"type":"create"|"write"|"remove","path":"/x/a","dir":false}
 *   {"type":"rename","from":"/x/a","path":"/x/b","dir":false}
 *   {"type":"overflow"}       events were lost here (the guest's or our queue)
 * It lasts until the client goes away (WATCH_STOP) or the sandbox's channel
 * ends (stop, delete, rollback, suspend: the teardown ends every watch).
 *
 * Names come from inside the sandbox: any bytes but NUL. They are written
 * with jw_str_lossy (invalid UTF-8 as U+FFFD), so every line is valid JSON.
 * The queue between the channel's reader and this thread holds at most
 * max_queue events (default WATCH_QUEUE, 1..WATCH_QUEUE_MAX): a client that
 * reads slower than the sandbox writes files loses events, marked by an
 * overflow line, and never grows the node's memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include "../http/handler.h"
#include "../wake/wake.h"
#include "files.h"

#define WATCH_QUEUE 4096
#define WATCH_QUEUE_MAX 65536

static const char *kind_name(int k)
{
	switch (k) {
	case GW_CREATE: return "create";
	case GW_WRITE: return "write";
	case GW_REMOVE: return "remove";
	case GW_RENAME: return "rename";
	default: return "overflow";
	}
}

/* root + rel, as an absolute path in the sandbox. Caller owns. */
static char *abs_path(const char *root, const char *rel)
{
	size_t n = strlen(root);

	if (!*rel)
		return xstrdup(root);
	if (n && root[n - 1] == '/')
		return xasprintf("%s%s", root, rel);
	return xasprintf("%s/%s", root, rel);
}

static void line_event(struct buf *out, const char *root, const struct guest_watch_event *ev)
{
	struct jw w;

	jw_init(&w, out);
	jw_obj(&w);
	jw_key(&w, "type");
	jw_str(&w, kind_name(ev->kind));
	if (ev->kind != GW_OVERFLOW) {
		_cleanup_free_ char *p = abs_path(root, ev->kind == GW_RENAME ? ev->path2 : ev->path);
		if (ev->kind == GW_RENAME) {
			_cleanup_free_ char *from = abs_path(root, ev->path);
			jw_key(&w, "from");
			jw_str_lossy(&w, from);
		}
		jw_key(&w, "path");
		jw_str_lossy(&w, p);
		jw_key(&w, "dir");
		jw_bool(&w, ev->dir);
	}
	jw_end(&w);
	buf_addc(out, '\n');
}

static bool parse_bool(const char *s, bool *v)
{
	if (!s)
		return *v = false, true;
	if (strcmp(s, "1") == 0 || strcmp(s, "true") == 0)
		return *v = true, true;
	if (strcmp(s, "0") == 0 || strcmp(s, "false") == 0)
		return *v = false, true;
	return false;
}

#define OUT_MAX (256u * 1024)   /* bytes waiting for a slow client; then the queue fills */

/* Append one chunk of the chunked encoding. */
static void chunk(struct buf *out, const struct buf *lines)
{
	buf_printf(out, "%zx\r\n", lines->len);
	buf_add(out, lines->data, lines->len);
	buf_adds(out, "\r\n");
}

/* Stream over the taken-over connection fd (non-blocking) until the client
 * leaves, the watch ends (the sandbox's teardown ends it: we must never sit
 * in a blocking write then, or a client that stops reading would hold the
 * teardown) or the node stops. */
static void watch_stream(struct node *n, struct guest_watch *w, const char *root, int fd,
			 struct buf *out)
{
	_cleanup_(buf_free) struct buf lines = { 0 };
	size_t off = 0;
	bool ended = false;
	int fl = fcntl(fd, F_GETFL);

	if (fl >= 0)
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	for (;;) {
		struct guest_watch_event ev;
		int r = 0;

		/* Clear first, then look: nothing that arrives after is missed. */
		guest_watch_clear(w);
		while (!ended && out->len - off < OUT_MAX && (r = guest_watch_next(w, &ev)) > 0) {
			line_event(&lines, root, &ev);
			guest_watch_event_free(&ev);
			if (lines.len >= NODE_CHUNK) {
				chunk(out, &lines);
				buf_reset(&lines);
			}
		}
		if (lines.len) {
			chunk(out, &lines);
			buf_reset(&lines);
		}
		/* A client that is behind does not read the queue, but must
		 * still see the end (the teardown waits for us). */
		if (r < 0 || node_stopping(n) || (out->len - off >= OUT_MAX && guest_watch_ended(w)))
			ended = true;
		if (ended && off == out->len) {
			buf_adds(out, "0\r\n\r\n");
			(void)!send(fd, out->data + off, out->len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
			return;
		}
		while (off < out->len) {
			ssize_t k = send(fd, out->data + off, out->len - off, MSG_NOSIGNAL);
			if (k < 0 && errno == EINTR)
				continue;
			if (k < 0 && errno == EAGAIN)
				break;
			if (k <= 0)
				return;   /* the client went away */
			off += (size_t)k;
		}
		if (off == out->len) {
			buf_reset(out);
			off = 0;
		}
		if (ended)
			return;   /* a client that does not read gets no more */
		struct pollfd pf[2] = {
			{ .fd = guest_watch_fd(w), .events = POLLIN },
			{ .fd = fd, .events = POLLIN | (off < out->len ? POLLOUT : 0) },
		};
		if (out->len - off >= OUT_MAX)
			pf[0].fd = -1;   /* the queue fills (and overflows) meanwhile */
		if (poll(pf, 2, 1000) < 0 && errno != EINTR)
			return;
		if (pf[1].revents & (POLLHUP | POLLERR))
			return;
		if (pf[1].revents & POLLIN) {
			char junk[256];
			ssize_t k = recv(fd, junk, sizeof(junk), 0);
			if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR))
				return;   /* EOF: the client is gone */
		}
	}
}

void handle_files_watch(struct node *n, struct sandbox *sb, struct http_req *req,
			struct http_conn *c)
{
	_cleanup_free_ char *path = http_query_param(req, "path");
	_cleanup_free_ char *rec = http_query_param(req, "recursive");
	_cleanup_free_ char *mq = http_query_param(req, "max_queue");
	struct guest_watch *w;
	struct guestconn *gc;
	size_t max_queue = WATCH_QUEUE;
	err_t err = { 0 };
	bool recursive;

	if (!path || path[0] != '/' || strlen(path) > 4096) {
		http_respond_error(c, 400, "invalid_field", "`path` must be an absolute path");
		return;
	}
	if (!parse_bool(rec, &recursive)) {
		http_respond_error(c, 400, "invalid_field", "`recursive` must be true or false");
		return;
	}
	if (mq) {
		char *end;
		unsigned long v = strtoul(mq, &end, 10);
		if (!*mq || *end || mq[0] == '-' || v < 1 || v > WATCH_QUEUE_MAX) {
			http_respond_error(c, 400, "invalid_field", "`max_queue` must be 1..%u",
					   WATCH_QUEUE_MAX);
			return;
		}
		max_queue = v;
	}
	/* A paused sandbox is resumed first, as for every files call. */
	if (!(gc = sandbox_gc_use(n, sb, "resumed for files", &err))) {
		sandbox_respond_err(c, sb, &err);
		return;
	}
	if (!(w = guestconn_watch_start(gc, path, recursive, max_queue, &err))) {
		sandbox_gc_put(sb);
		if (err.code == ENOSPC || err.code == EMFILE)
			http_respond_error(c, 422, "limit_exceeded", "%s", err.msg);
		else
			node_respond_err(c, &err);
		return;
	}
	/* A client watching keeps the sandbox from being paused as idle, as
	 * one following a process's output does. */
	pthread_mutex_lock(&sb->mu);
	sb->sched.streams++;
	pthread_mutex_unlock(&sb->mu);
	{
		_cleanup_(buf_free) struct buf pending = { 0 };
		_cleanup_(buf_free) struct buf out = { 0 };
		_cleanup_(buf_free) struct buf b = { 0 };
		struct jw j;
		int fd = http_conn_takeover(c, &pending);

		buf_adds(&out, "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
			       "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
		jw_init(&j, &b);
		jw_obj(&j);
		jw_key(&j, "type");
		jw_str(&j, "start");
		jw_key(&j, "path");
		jw_str_lossy(&j, path);
		jw_key(&j, "recursive");
		jw_bool(&j, recursive);
		jw_end(&j);
		buf_addc(&b, '\n');
		chunk(&out, &b);
		watch_stream(n, w, path, fd, &out);
	}
	guest_watch_stop(w);
	pthread_mutex_lock(&sb->mu);
	sb->sched.streams--;
	pthread_mutex_unlock(&sb->mu);
	sched_touch(sb);
	sandbox_gc_put(sb);
}
