/* guestconn-ports.c - port streams: TCP connections the guest agent opens to
 * 127.0.0.1:port inside the sandbox, carried in PORT_* frames with a window
 * of credit in each direction (guestconn.h says how it flows).
 */
#include "guestconn-internal.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/eventfd.h>

/* ---- port streams -------------------------------------------------------- */

/* Acknowledge consumed bytes in batches of a quarter window (or when the
 * buffer runs dry), so a bulk transfer costs few CREDIT frames. */
#define CREDIT_BATCH (PROTO_PORT_WINDOW / 4)

static void stream_wake(struct gstream *st)
{
	uint64_t one = 1;
	(void)!write(st->efd, &one, sizeof(one));
}

void gc_stream_end_locked(struct gstream *st, int err)
{
	if (st->closed)
		return;
	st->closed = true;
	st->err = err;
	stream_wake(st);
}

/* PORT_DATA/CREDIT/SHUT/CLOSE from the guest (untrusted). A stream id we
 * do not know crossed our CLOSE and is dropped. A guest that sends beyond
 * the window we granted, or grants more credit than a window, breaks the
 * protocol: -EBADMSG closes the channel, so it cannot make us buffer. */
int gc_handle_port(struct guestconn *gc, const struct proto_frame *f)
{
	struct proto_port m;
	struct gstream *st;
	int r = 0;

	if (proto_dec_port(f, &m) < 0 || m.type == PT_PORT_OPEN)
		return -EBADMSG;
	pthread_mutex_lock(&gc->mu);
	for (st = gc->streams; st && st->id != m.stream; st = st->next)
		;
	if (!st || st->closed)
		goto out;
	switch (m.type) {
	case PT_PORT_DATA:
		if (st->peer_shut || m.len > PROTO_PORT_WINDOW - st->rx_unacked) {
			r = -EBADMSG;
			break;
		}
		if (st->rx_off && st->rx_off == st->rx.len) {
			buf_reset(&st->rx);
			st->rx_off = 0;
		}
		buf_add(&st->rx, m.data, m.len);
		st->rx_unacked += (uint32_t)m.len;
		stream_wake(st);
		break;
	case PT_PORT_CREDIT:
		if (m.credit > PROTO_PORT_WINDOW - st->send_credit) {
			r = -EBADMSG;
			break;
		}
		st->send_credit += m.credit;
		stream_wake(st);
		break;
	case PT_PORT_SHUT:
		st->peer_shut = true;
		stream_wake(st);
		break;
	case PT_PORT_CLOSE:
		gc_stream_end_locked(st, (int)m.err);
		break;
	}
out:
	pthread_mutex_unlock(&gc->mu);
	return r;
}

static int send_port(struct guestconn *gc, const struct proto_port *m, uint32_t req_id,
		     err_t *err)
{
	_cleanup_(buf_free) struct buf b = { 0 };

	if (proto_enc_port(&b, req_id, m) < 0)
		return err_set(err, EINVAL, "bad port frame");
	return gc_send_bytes(gc, b.data, b.len, err);
}

static void stream_unlink_locked(struct guestconn *gc, struct gstream *st)
{
	for (struct gstream **pp = &gc->streams; *pp; pp = &(*pp)->next) {
		if (*pp == st) {
			*pp = st->next;
			return;
		}
	}
}

static void stream_free(struct gstream *st)
{
	if (st->efd >= 0)
		close(st->efd);
	buf_free(&st->rx);
	free(st);
}

struct gstream *guestconn_port_open(struct guestconn *gc, uint16_t port, err_t *err)
{
	struct gstream *st = xcalloc(1, sizeof(*st));
	struct waiter *w;
	struct buf b;
	int r;

	if (port == 0) {
		free(st);
		err_set(err, EINVAL, "port 0");
		return NULL;
	}
	st->gc = gc;
	st->send_credit = PROTO_PORT_WINDOW;
	buf_init(&st->rx);
	st->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (st->efd < 0) {
		err_sys(err, "eventfd");
		free(st);
		return NULL;
	}
	/* Registered before the request goes out: data right behind the OK
	 * must find its stream. */
	pthread_mutex_lock(&gc->mu);
	do
		st->id = ++gc->next_stream;
	while (st->id == 0);
	st->next = gc->streams;
	gc->streams = st;
	pthread_mutex_unlock(&gc->mu);

	w = gc_waiter_new(gc, W_SINGLE, PT_OK);
	buf_init(&b);
	struct proto_port m = { .type = PT_PORT_OPEN, .stream = st->id, .port = port };
	if (proto_enc_port(&b, w->req_id, &m) < 0)
		r = err_set(err, EINVAL, "bad port");
	else
		r = gc_roundtrip(gc, w, &b, "open port", err);
	buf_free(&b);
	gc_waiter_free(gc, w);
	if (r < 0) {
		pthread_mutex_lock(&gc->mu);
		stream_unlink_locked(gc, st);
		pthread_mutex_unlock(&gc->mu);
		stream_free(st);
		return NULL;
	}
	return st;
}

int gstream_fd(const struct gstream *s)
{
	return s->efd;
}

void gstream_clear(struct gstream *s)
{
	uint64_t v;
	(void)!read(s->efd, &v, sizeof(v));
}

ssize_t gstream_read(struct gstream *s, void *p, size_t n)
{
	struct guestconn *gc = s->gc;
	uint32_t credit = 0;
	ssize_t r;

	pthread_mutex_lock(&gc->mu);
	size_t have = s->rx.len - s->rx_off;
	if (have) {
		r = (ssize_t)(have < n ? have : n);
		memcpy(p, s->rx.data + s->rx_off, (size_t)r);
		s->rx_off += (size_t)r;
		s->credit_due += (uint32_t)r;
		if (s->rx_off == s->rx.len) {
			buf_reset(&s->rx);
			s->rx_off = 0;
		}
		if (!s->closed && (s->credit_due >= CREDIT_BATCH || s->rx.len == 0)) {
			credit = s->credit_due;
			s->rx_unacked -= credit;
			s->credit_due = 0;
		}
	} else if (s->closed) {
		r = s->err ? -s->err : 0;
	} else {
		r = s->peer_shut ? 0 : -EAGAIN;
	}
	pthread_mutex_unlock(&gc->mu);
	if (credit) {
		struct proto_port m = { .type = PT_PORT_CREDIT, .stream = s->id, .credit = credit };
		err_t err = { 0 };
		if (send_port(gc, &m, 0, &err) < 0)
			return -ECONNRESET;
	}
	return r;
}

ssize_t gstream_write(struct gstream *s, const void *p, size_t n)
{
	struct guestconn *gc = s->gc;
	const uint8_t *c = p;
	size_t sent = 0;

	while (sent < n) {
		pthread_mutex_lock(&gc->mu);
		int e = s->closed ? (s->err ? s->err : EPIPE) : 0;
		size_t take = s->send_credit;
		if (take > n - sent)
			take = n - sent;
		if (take > PROTO_CHUNK)
			take = PROTO_CHUNK;
		s->send_credit -= (uint32_t)take;
		pthread_mutex_unlock(&gc->mu);
		if (e)
			return sent ? (ssize_t)sent : -e;
		if (take == 0)
			break;
		struct proto_port m = { .type = PT_PORT_DATA, .stream = s->id, .data = c + sent,
					.len = take };
		err_t err = { 0 };
		if (send_port(gc, &m, 0, &err) < 0)
			return -ECONNRESET;
		sent += take;
	}
	return (ssize_t)sent;
}

int gstream_shut(struct gstream *s)
{
	struct proto_port m = { .type = PT_PORT_SHUT, .stream = s->id };
	err_t err = { 0 };

	return send_port(s->gc, &m, 0, &err);
}

void gstream_close(struct gstream *s)
{
	struct guestconn *gc;
	bool tell;

	if (!s)
		return;
	gc = s->gc;
	pthread_mutex_lock(&gc->mu);
	tell = !s->closed && !gc->closed;
	stream_unlink_locked(gc, s);
	pthread_mutex_unlock(&gc->mu);
	if (tell) {
		struct proto_port m = { .type = PT_PORT_CLOSE, .stream = s->id };
		err_t err = { 0 };
		(void)send_port(gc, &m, 0, &err);
	}
	stream_free(s);
}

void guestconn_ports_abort(struct guestconn *gc)
{
	if (!gc)
		return;
	pthread_mutex_lock(&gc->mu);
	for (struct gstream *st = gc->streams; st; st = st->next)
		gc_stream_end_locked(st, ECONNRESET);
	pthread_mutex_unlock(&gc->mu);
}
