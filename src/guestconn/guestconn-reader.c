/* guestconn-reader.c - the reader thread of a guest channel.
 *
 * Every byte read here comes from inside the sandbox and is untrusted: frames
 * are cut and decoded only through src/proto (size-limited, fuzzed), and what
 * a reply carries is checked against the request it answers. A frame that
 * breaks the protocol closes the channel (on_closed); that is all a
 * misbehaving guest can do to the node.
 */
#include "guestconn-internal.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define MAX_LIST_BYTES (64u << 20)  /* accumulated LIST payloads per request */

/* ---- helpers ------------------------------------------------------------- */

static struct waiter *find_waiter_locked(struct guestconn *gc, uint32_t id)
{
	for (struct waiter *w = gc->waiters; w; w = w->next)
		if (w->req_id == id && !w->done)
			return w;
	return NULL;
}

static void complete_locked(struct guestconn *gc, struct waiter *w, int err, const char *msg)
{
	w->done = true;
	w->err = err;
	if (msg)
		snprintf(w->msg, sizeof(w->msg), "%s", msg);
	pthread_cond_broadcast(&gc->cv);
}

/* ---- reading ------------------------------------------------------------- */

/* A reply frame for a waiter. Returns 0, or -EBADMSG when the frame is a
 * protocol violation that must close the connection. */
static int handle_reply(struct guestconn *gc, const struct proto_frame *f)
{
	struct proto_error pe;
	struct waiter *w;
	int r = 0;

	pthread_mutex_lock(&gc->mu);
	w = find_waiter_locked(gc, f->req_id);
	if (!w)
		goto out;   /* timed out or already failed: drop */
	if (f->type == PT_ERROR) {
		if ((r = proto_dec_error(f, &pe)) == 0)
			complete_locked(gc, w, (int)pe.err, pe.msg[0] ? pe.msg : strerror((int)pe.err));
		goto out;
	}
	if (f->type != w->expect) {
		complete_locked(gc, w, EPROTO, "unexpected reply type from guest");
		goto out;
	}
	switch (w->kind) {
	case W_SINGLE:
		buf_add(&w->payload, f->payload, f->len);
		complete_locked(gc, w, 0, NULL);
		break;
	case W_READ: {
		/* Untrusted chunk: it must continue exactly where the last one
		 * ended and stay within the limit we asked for. */
		const uint8_t *d = NULL;
		size_t n = 0;
		uint64_t off;
		if (proto_get_u64(f->payload, f->len, PTAG_OFFSET, &off) < 0 ||
		    proto_get_bytes(f->payload, f->len, PTAG_DATA, &d, &n) < 0) {
			r = -EBADMSG;
			break;
		}
		if (off != w->payload.len) {
			complete_locked(gc, w, EPROTO, "file data out of order");
			break;
		}
		if (n > w->max - w->payload.len) {
			complete_locked(gc, w, EFBIG, "file larger than the limit");
			break;
		}
		buf_add(&w->payload, d, n);
		if (!(f->flags & PROTO_F_MORE))
			complete_locked(gc, w, 0, NULL);
		break;
	}
	case W_LIST:
		/* Concatenated field sequences are one field sequence. */
		if (f->len > MAX_LIST_BYTES - w->payload.len) {
			complete_locked(gc, w, E2BIG, "directory listing too large");
			break;
		}
		buf_add(&w->payload, f->payload, f->len);
		if (!(f->flags & PROTO_F_MORE))
			complete_locked(gc, w, 0, NULL);
		break;
	}
out:
	pthread_mutex_unlock(&gc->mu);
	return r;
}

/* Unsolicited frames: output and exit go to the callbacks. */
int gc_handle_frame(struct guestconn *gc, const struct proto_frame *f)
{
	switch (f->type) {
	case PT_PORT_DATA:
	case PT_PORT_CREDIT:
	case PT_PORT_SHUT:
	case PT_PORT_CLOSE:
		return gc_handle_port(gc, f);
	case PT_WATCH_EVENT:
		return gc_handle_watch(gc, f);
	case PT_OUTPUT: {
		struct proto_output o;
		if (proto_dec_output(f, &o) < 0)
			return -EBADMSG;
		if (gc->cbs.on_output)
			gc->cbs.on_output(gc->arg, o.pid, o.fd, o.offset, o.data, o.len);
		return 0;
	}
	case PT_EXIT: {
		struct proto_exit x;
		if (proto_dec_exit(f, &x) < 0)
			return -EBADMSG;
		if (gc->cbs.on_exit)
			gc->cbs.on_exit(gc->arg, x.pid, x.code, x.signal);
		return 0;
	}
	case PT_HELLO:
	case PT_READY:
		/* The answer to a resync HELLO we did not wait for (open took
		 * the unprompted one), or a duplicate: nothing to do. */
		return 0;
	}
	if (f->req_id == 0)
		return 0;   /* unknown unsolicited type: newer guest, ignore */
	return handle_reply(gc, f);
}

void *gc_reader_main(void *p)
{
	struct guestconn *gc = p;
	char reason[256] = "";
	struct proto_frame f;
	int r;

	while (!reason[0]) {
		/* Frames already buffered (left over from open) first. */
		while ((r = proto_rx_next(&gc->rx, &f)) != 0) {
			if (r < 0 || gc_handle_frame(gc, &f) < 0) {
				snprintf(reason, sizeof(reason),
					 "protocol violation from guest (%s frame): %s",
					 r < 0 ? "malformed" : proto_type_name(f.type),
					 strerror(r < 0 ? -r : EBADMSG));
				break;
			}
		}
		if (reason[0])
			break;

		struct pollfd pfd[2] = {
			{ .fd = gc->fd, .events = POLLIN },
			{ .fd = gc->wake_fd, .events = POLLIN },
		};
		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			snprintf(reason, sizeof(reason), "poll: %s", strerror(errno));
			break;
		}
		if (pfd[1].revents) {
			pthread_mutex_lock(&gc->mu);
			bool stop = gc->stopping, closed = gc->closed;
			if (closed)
				snprintf(reason, sizeof(reason), "%s", gc->reason);
			pthread_mutex_unlock(&gc->mu);
			if (stop)
				return NULL;
			if (closed)
				break;
		}
		if (pfd[0].revents) {
			ssize_t n = proto_rx_fill(&gc->rx, gc->fd);
			if (n == 0)
				snprintf(reason, sizeof(reason), "guest closed the channel");
			else if (n < 0 && n != -EAGAIN)
				snprintf(reason, sizeof(reason), "read: %s", strerror((int)-n));
		}
	}
	pthread_mutex_lock(&gc->mu);
	gc_mark_closed_locked(gc, reason);
	bool stop = gc->stopping;
	pthread_mutex_unlock(&gc->mu);
	if (!stop && gc->cbs.on_closed)
		gc->cbs.on_closed(gc->arg, reason);
	return NULL;
}
