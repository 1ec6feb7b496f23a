/* guestconn.c - the node's end of the channel to one airlock-guest.
 *
 * Threads: one reader thread per connection parses every frame the guest
 * sends (untrusted bytes, decoded only through src/proto) and either runs a
 * callback (OUTPUT, EXIT) or completes the waiter of the request whose id the
 * reply carries. Requesters register a waiter, write their frame(s) under
 * write_mu, then sleep on the condvar until done or timed out.
 *
 * Connection states: open -> closed. "closed" is entered once, by the reader
 * (EOF, read error, protocol violation) or by a writer (write error/timeout
 * mid-frame, which corrupts the stream); every pending waiter then fails with
 * ECONNRESET and the reader calls on_closed exactly once. guestconn_close by
 * the owner stops the reader without calling on_closed.
 */
#include "guestconn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>

#include "../proto/proto.h"

#define DEFAULT_TIMEOUT_MS 60000
#define MAX_LIST_BYTES (64u << 20)  /* accumulated LIST payloads per request */

enum waiter_kind { W_SINGLE, W_READ, W_LIST };

struct waiter {
	struct waiter *next;
	uint32_t req_id;
	enum waiter_kind kind;
	uint8_t expect;           /* reply type that means success */
	bool done;
	int err;                  /* positive errno, 0 = success */
	char msg[PROTO_MAX_MSG + 1];
	struct buf payload;       /* reply payload; READ: the data; LIST: all payloads */
	size_t max;               /* READ: byte limit */
};

/* A port stream (see guestconn.h). Every field is under gc->mu; the eventfd
 * tells the thread that drives the stream that something changed. */
struct gstream {
	struct gstream *next;     /* gc->streams */
	struct guestconn *gc;
	uint32_t id;
	int efd;
	struct buf rx;            /* guest -> us, not yet read */
	size_t rx_off;
	uint32_t rx_unacked;      /* received and not yet credited back */
	uint32_t credit_due;      /* of those, already read by our user */
	uint32_t send_credit;     /* bytes we may send the guest */
	bool peer_shut;           /* the guest sent PORT_SHUT */
	bool closed;              /* the guest closed it, or the channel went */
	int err;                  /* positive errno when reset, 0 for a clean close */
};

struct guestconn {
	int fd;
	int wake_fd;              /* eventfd: stop or broken */
	pthread_t reader;
	bool reader_started;
	struct guestconn_cbs cbs;
	void *arg;
	int timeout_ms;
	struct proto_rx rx;

	pthread_mutex_t write_mu; /* one frame at a time on the wire */
	pthread_mutex_t mu;       /* everything below */
	pthread_cond_t cv;
	struct waiter *waiters;
	uint32_t next_id;
	bool closed;
	bool stopping;
	char reason[256];
	struct gstream *streams;
	uint32_t next_stream;
};

/* ---- helpers ------------------------------------------------------------- */

static uint64_t deadline_after(int ms)
{
	return now_ms() + (uint64_t)(ms < 0 ? 0 : ms);
}

static int ms_left(uint64_t deadline)
{
	uint64_t now = now_ms();
	return now >= deadline ? 0 : (int)(deadline - now);
}

/* Set by guestconn_set_timeout from any thread, read by requesters. */
static int gc_timeout_of(struct guestconn *gc)
{
	return __atomic_load_n(&gc->timeout_ms, __ATOMIC_RELAXED);
}

static void wake_reader(struct guestconn *gc)
{
	uint64_t one = 1;
	(void)!write(gc->wake_fd, &one, sizeof(one));
}

static void stream_wake(struct gstream *st)
{
	uint64_t one = 1;
	(void)!write(st->efd, &one, sizeof(one));
}

/* The stream is over (err 0: clean). Caller holds gc->mu. */
static void gc_stream_end_locked(struct gstream *st, int err)
{
	if (st->closed)
		return;
	st->closed = true;
	st->err = err;
	stream_wake(st);
}

/* Enter "closed" (idempotent). Caller holds gc->mu. */
static void gc_mark_closed_locked(struct guestconn *gc, const char *reason)
{
	if (gc->closed)
		return;
	for (struct gstream *st = gc->streams; st; st = st->next)
		gc_stream_end_locked(st, ECONNRESET);
	gc->closed = true;
	snprintf(gc->reason, sizeof(gc->reason), "%s", reason);
	for (struct waiter *w = gc->waiters; w; w = w->next) {
		if (!w->done) {
			w->done = true;
			w->err = ECONNRESET;
			snprintf(w->msg, sizeof(w->msg), "guest channel closed: %s", reason);
		}
	}
	pthread_cond_broadcast(&gc->cv);
}

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

/* PORT_DATA/CREDIT/SHUT/CLOSE from the guest (untrusted). A stream id we
 * do not know crossed our CLOSE and is dropped. A guest that sends beyond
 * the window we granted, or grants more credit than a window, breaks the
 * protocol: -EBADMSG closes the channel, so it cannot make us buffer. */
static int gc_handle_port(struct guestconn *gc, const struct proto_frame *f)
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

/* Unsolicited frames: output and exit go to the callbacks. */
static int gc_handle_frame(struct guestconn *gc, const struct proto_frame *f)
{
	switch (f->type) {
	case PT_PORT_DATA:
	case PT_PORT_CREDIT:
	case PT_PORT_SHUT:
	case PT_PORT_CLOSE:
		return gc_handle_port(gc, f);
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

static void *gc_reader_main(void *p)
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

/* ---- writing ------------------------------------------------------------- */

/* Write whole frames. A partial frame corrupts the stream, so a failure after
 * the first byte closes the connection. */
static int gc_send_bytes(struct guestconn *gc, const void *p, size_t n, err_t *err)
{
	const char *c = p;
	size_t sent = 0;
	uint64_t deadline = deadline_after(gc_timeout_of(gc));
	int e = 0;

	pthread_mutex_lock(&gc->write_mu);
	pthread_mutex_lock(&gc->mu);
	bool closed = gc->closed;
	pthread_mutex_unlock(&gc->mu);
	if (closed) {
		pthread_mutex_unlock(&gc->write_mu);
		return err_set(err, ECONNRESET, "guest channel is closed");
	}
	while (sent < n) {
		ssize_t w = write(gc->fd, c + sent, n - sent);
		if (w >= 0) {
			sent += (size_t)w;
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN) {
			e = errno;
			break;
		}
		struct pollfd pfd = { .fd = gc->fd, .events = POLLOUT };
		int left = ms_left(deadline);
		if (left == 0 || poll(&pfd, 1, left) == 0) {
			e = ETIMEDOUT;
			break;
		}
	}
	pthread_mutex_unlock(&gc->write_mu);
	if (!e)
		return 0;
	if (sent > 0 || e != ETIMEDOUT) {
		pthread_mutex_lock(&gc->mu);
		gc_mark_closed_locked(gc, e == ETIMEDOUT ? "write timed out" : strerror(e));
		pthread_mutex_unlock(&gc->mu);
		wake_reader(gc);
	}
	errno = e;
	return err_sys(err, "write to guest");
}

static struct waiter *gc_waiter_new(struct guestconn *gc, enum waiter_kind kind, uint8_t expect)
{
	struct waiter *w = xcalloc(1, sizeof(*w));

	w->kind = kind;
	w->expect = expect;
	buf_init(&w->payload);
	pthread_mutex_lock(&gc->mu);
	if (++gc->next_id == 0)
		gc->next_id = 1;   /* 0 marks unsolicited frames */
	w->req_id = gc->next_id;
	w->next = gc->waiters;
	gc->waiters = w;
	if (gc->closed) {
		w->done = true;
		w->err = ECONNRESET;
		snprintf(w->msg, sizeof(w->msg), "guest channel closed: %s", gc->reason);
	}
	pthread_mutex_unlock(&gc->mu);
	return w;
}

static void gc_waiter_free(struct guestconn *gc, struct waiter *w)
{
	pthread_mutex_lock(&gc->mu);
	for (struct waiter **pp = &gc->waiters; *pp; pp = &(*pp)->next) {
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	}
	pthread_mutex_unlock(&gc->mu);
	buf_free(&w->payload);
	free(w);
}

/* Wait for w; on failure fills err (guest errno in err->code). */
static int gc_waiter_wait(struct guestconn *gc, struct waiter *w, const char *what, err_t *err)
{
	struct timespec ts;
	int r = 0, tmo = gc_timeout_of(gc);

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += tmo / 1000;
	ts.tv_nsec += (long)(tmo % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&gc->mu);
	while (!w->done && r != ETIMEDOUT)
		r = pthread_cond_timedwait(&gc->cv, &gc->mu, &ts);
	bool done = w->done;
	pthread_mutex_unlock(&gc->mu);
	if (!done)
		return err_set(err, ETIMEDOUT, "%s: no answer from guest within %d ms", what, tmo);
	if (w->err)
		return err_set(err, w->err, "%s: %s", what, w->msg);
	return 0;
}

/* Send one request frame (built by `build` into b with w's id) and wait. */
static int gc_roundtrip(struct guestconn *gc, struct waiter *w, struct buf *b, const char *what,
			err_t *err)
{
	int r = gc_send_bytes(gc, b->data, b->len, err);
	if (r < 0)
		return err_wrap(err, "%s", what);
	return gc_waiter_wait(gc, w, what, err);
}

/* ---- open / close -------------------------------------------------------- */

static struct guestconn *gc_new(int fd, const struct guestconn_cbs *cbs, void *arg)
{
	struct guestconn *gc = xcalloc(1, sizeof(*gc));
	pthread_condattr_t ca;

	gc->fd = fd;
	gc->wake_fd = -1;
	if (cbs)
		gc->cbs = *cbs;
	gc->arg = arg;
	gc->timeout_ms = DEFAULT_TIMEOUT_MS;
	proto_rx_init(&gc->rx);
	pthread_mutex_init(&gc->write_mu, NULL);
	pthread_mutex_init(&gc->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&gc->cv, &ca);
	pthread_condattr_destroy(&ca);
	return gc;
}

static void gc_free(struct guestconn *gc)
{
	while (gc->waiters) {
		struct waiter *w = gc->waiters;
		gc->waiters = w->next;
		buf_free(&w->payload);
		free(w);
	}
	if (gc->fd >= 0)
		close(gc->fd);
	if (gc->wake_fd >= 0)
		close(gc->wake_fd);
	proto_rx_free(&gc->rx);
	pthread_mutex_destroy(&gc->write_mu);
	pthread_mutex_destroy(&gc->mu);
	pthread_cond_destroy(&gc->cv);
	free(gc);
}

/* Wait for the guest's HELLO and READY. Before the first good frame we
 * tolerate garbage: after a node restart the stream may begin in the middle
 * of a frame the previous node had half read. Output and exits that arrive
 * meanwhile are delivered to the callbacks. */
/* A restored clone can lose the first bytes sent to it; asking again soon
 * (then less often) keeps that from costing a create half a second. */
#define HELLO_RESEND_FIRST_MS 50
#define HELLO_RESEND_MS 500

static int await_hello(struct guestconn *gc, uint32_t our_id, const struct buf *req,
		       int timeout_ms, struct guest_hello *hello, err_t *err)
{
	uint64_t deadline = deadline_after(timeout_ms);
	int every = HELLO_RESEND_FIRST_MS;
	uint64_t resend = deadline_after(every);
	bool have_hello = false;
	uint32_t hello_id = 0;
	struct proto_hello h;

	for (;;) {
		struct proto_frame f;
		int r;

		while ((r = proto_rx_next(&gc->rx, &f)) != 0) {
			if (r < 0)
				continue;   /* garbage before the greeting: skip */
			if (f.type == PT_HELLO && (f.req_id == 0 || f.req_id == our_id)) {
				if (proto_dec_hello(&f, &h) < 0)
					continue;   /* resync noise (see above) */
				if (h.version != PROTO_VERSION)
					return err_set(err, EPROTONOSUPPORT,
						       "guest speaks protocol version %u, we speak %u",
						       h.version, PROTO_VERSION);
				/* Both the unprompted HELLO (fresh guest) and the
				 * answer to ours (adopted guest) will do; the other
				 * one, if it comes, is ignored by the reader. */
				have_hello = true;
				hello_id = f.req_id;
				if (hello) {
					hello->version = h.version;
					snprintf(hello->boot_id, sizeof(hello->boot_id), "%s",
						 h.boot_id);
				}
			} else if (f.type == PT_READY && have_hello && f.req_id == hello_id) {
				return 0;
			} else if (f.type == PT_OUTPUT || f.type == PT_EXIT) {
				/* A "frame" found by scanning may be payload bytes
				 * that happen to look like one: drop what does not
				 * decode instead of failing the adoption. */
				(void)gc_handle_frame(gc, &f);
			}
		}
		int left = ms_left(deadline);
		if (left == 0)
			return err_set(err, ETIMEDOUT, "guest did not say hello within %d ms",
				       timeout_ms);
		/* Still silent: ask again. A virtio-serial guest that did not
		 * notice us connect (a clone restored with its port already
		 * "connected") may have lost the first request; answers to a
		 * repeated one are duplicates the reader ignores. */
		if (!have_hello && ms_left(resend) == 0) {
			/* Ordering keeps this safe: every repeat is in the
			 * stream before any later request, so the guest has
			 * handled them all before it sees real work. */
			if ((r = gc_send_bytes(gc, req->data, req->len, err)) < 0)
				return r;
			every = every * 2 < HELLO_RESEND_MS ? every * 2 : HELLO_RESEND_MS;
			resend = deadline_after(every);
		}
		if (!have_hello && ms_left(resend) < left)
			left = ms_left(resend);
		struct pollfd pfd = { .fd = gc->fd, .events = POLLIN };
		r = poll(&pfd, 1, left);
		if (r < 0 && errno != EINTR)
			return err_sys(err, "poll guest channel");
		if (r <= 0)
			continue;
		ssize_t n = proto_rx_fill(&gc->rx, gc->fd);
		if (n == 0)
			return err_set(err, ECONNRESET, "guest closed the channel before hello");
		if (n < 0 && n != -EAGAIN)
			return err_set(err, (int)-n, "read guest channel: %s", strerror((int)-n));
	}
}

struct guestconn *guestconn_open(int fd, const struct guestconn_cbs *cbs, void *arg,
				 int timeout_ms, struct guest_hello *hello, err_t *err)
{
	struct guestconn *gc;
	struct proto_hello h = { .version = PROTO_VERSION };
	struct buf b;
	int fl, r;

	if (fd < 0) {
		err_set(err, EBADF, "guestconn_open: no channel fd");
		return NULL;
	}
	gc = gc_new(fd, cbs, arg);
	/* Non-blocking so that a guest that stops reading can only time out
	 * our writes, never hang a node thread forever. */
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
	    (gc->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
		err_sys(err, "set up guest channel");
		gc_free(gc);
		return NULL;
	}
	/* Ask for a (re-)announcement first: a guest adopted after a node
	 * restart has said hello long ago. A fresh guest answers twice (its
	 * unprompted HELLO and ours); await_hello takes the first. */
	buf_init(&b);
	/* Request ids start at a random point: replies still queued in the
	 * guest for a previous node (an adopted guest) then cannot be taken
	 * for answers to our requests. */
	random_bytes(&gc->next_id, sizeof(gc->next_id));
	if (gc->next_id == 0)
		gc->next_id = 1;
	uint32_t hello_id = gc->next_id;
	(void)proto_enc_hello(&b, hello_id, &h);
	gc->timeout_ms = timeout_ms > 0 ? timeout_ms : DEFAULT_TIMEOUT_MS;
	r = gc_send_bytes(gc, b.data, b.len, err);
	if (r == 0)
		r = await_hello(gc, hello_id, &b, timeout_ms, hello, err);
	buf_free(&b);
	gc->timeout_ms = DEFAULT_TIMEOUT_MS;
	if (r < 0) {
		gc_free(gc);
		return NULL;
	}
	if ((r = pthread_create(&gc->reader, NULL, gc_reader_main, gc)) != 0) {
		err_set(err, r, "cannot start guest channel reader");
		gc_free(gc);
		return NULL;
	}
	gc->reader_started = true;
	return gc;
}

void guestconn_close(struct guestconn *gc)
{
	if (!gc)
		return;
	pthread_mutex_lock(&gc->mu);
	gc->stopping = true;
	gc_mark_closed_locked(gc, "closed by the node");
	pthread_mutex_unlock(&gc->mu);
	if (gc->reader_started) {
		wake_reader(gc);
		pthread_join(gc->reader, NULL);
	}
	gc_free(gc);
}

bool guestconn_alive(struct guestconn *gc)
{
	bool alive;

	if (!gc)
		return false;
	pthread_mutex_lock(&gc->mu);
	alive = !gc->closed;
	pthread_mutex_unlock(&gc->mu);
	return alive;
}

void guestconn_set_timeout(struct guestconn *gc, int timeout_ms)
{
	__atomic_store_n(&gc->timeout_ms, timeout_ms > 0 ? timeout_ms : DEFAULT_TIMEOUT_MS,
			 __ATOMIC_RELAXED);
}

/* ---- processes ----------------------------------------------------------- */

int guestconn_exec(struct guestconn *gc, const struct exec_spec *spec, uint32_t *pid,
		   err_t *err)
{
	struct proto_exec x = {
		.argv = spec->argv, .env = spec->env, .cwd = (char *)spec->cwd,
		.uid = spec->uid, .gid = spec->gid, .pty = spec->pty,
		.rows = spec->rows, .cols = spec->cols, .stdin_open = spec->stdin_open,
	};
	struct waiter *w = gc_waiter_new(gc, W_SINGLE, PT_EXEC_OK);
	struct buf b;
	int r;

	buf_init(&b);
	r = proto_enc_exec(&b, w->req_id, &x);
	if (r < 0)
		r = err_set(err, -r, "exec: command line too large or empty");
	else
		r = gc_roundtrip(gc, w, &b, "exec", err);
	if (r == 0 && proto_get_u32(w->payload.data, w->payload.len, PTAG_PID, pid) < 0)
		r = err_set(err, EPROTO, "exec: guest answered without a pid");
	buf_free(&b);
	gc_waiter_free(gc, w);
	return r;
}

int guestconn_stdin(struct guestconn *gc, uint32_t pid, const void *p, size_t n, bool eof,
		    err_t *err)
{
	const uint8_t *c = p;

	/* Large writes go as several frames, each acknowledged: the guest
	 * holds the ack back while its queue for the process is full. */
	do {
		size_t chunk = n > PROTO_CHUNK ? PROTO_CHUNK : n;
		bool last = chunk == n;
		struct waiter *w = gc_waiter_new(gc, W_SINGLE, PT_OK);
		struct proto_enc e;
		struct buf b;
		int r;

		buf_init(&b);
		proto_enc_begin(&e, &b, PT_STDIN, 0, w->req_id);
		proto_enc_u32(&e, PTAG_PID, pid);
		proto_enc_bytes(&e, PTAG_DATA, c, chunk);
		if (last && eof)
			proto_enc_u8(&e, PTAG_EOF, 1);
		(void)proto_enc_end(&e);
		r = gc_roundtrip(gc, w, &b, "stdin", err);
		buf_free(&b);
		gc_waiter_free(gc, w);
		if (r < 0)
			return r;
		c += chunk;
		n -= chunk;
	} while (n > 0);
	return 0;
}

/* A request whose reply is OK or ERROR; `fill` adds the fields. */
static int gc_simple(struct guestconn *gc, unsigned type, const char *what, err_t *err,
		     void (*fill)(struct proto_enc *e, const void *ctx), const void *ctx)
{
	struct waiter *w = gc_waiter_new(gc, W_SINGLE, PT_OK);
	struct proto_enc e;
	struct buf b;
	int r;

	buf_init(&b);
	proto_enc_begin(&e, &b, type, 0, w->req_id);
	fill(&e, ctx);
	r = proto_enc_end(&e);
	if (r < 0)
		r = err_set(err, -r, "%s: request too large", what);
	else
		r = gc_roundtrip(gc, w, &b, what, err);
	buf_free(&b);
	gc_waiter_free(gc, w);
	return r;
}

struct req_args { uint32_t a, b; uint16_t c, d; const char *s1, *s2; bool flag; };

static void fill_signal(struct proto_enc *e, const void *ctx)
{
	const struct req_args *v = ctx;
	proto_enc_u32(e, PTAG_PID, v->a);
	proto_enc_u32(e, PTAG_SIGNAL, v->b);
}

int guestconn_signal(struct guestconn *gc, uint32_t pid, int sig, err_t *err)
{
	struct req_args v = { .a = pid, .b = (uint32_t)sig };
	if (sig <= 0)
		return err_set(err, EINVAL, "signal: bad signal %d", sig);
	return gc_simple(gc, PT_SIGNAL, "signal", err, fill_signal, &v);
}

static void fill_resize(struct proto_enc *e, const void *ctx)
{
	const struct req_args *v = ctx;
	proto_enc_u32(e, PTAG_PID, v->a);
	proto_enc_u16(e, PTAG_ROWS, v->c);
	proto_enc_u16(e, PTAG_COLS, v->d);
}

int guestconn_resize(struct guestconn *gc, uint32_t pid, uint16_t rows, uint16_t cols,
		     err_t *err)
{
	struct req_args v = { .a = pid, .c = rows, .d = cols };
	return gc_simple(gc, PT_RESIZE, "resize", err, fill_resize, &v);
}

/* ---- files --------------------------------------------------------------- */

static int check_path(const char *path, const char *what, err_t *err)
{
	if (!path || path[0] != '/' || strlen(path) > PROTO_MAX_PATH)
		return err_set(err, EINVAL, "%s: path must be absolute and at most %d bytes",
			       what, PROTO_MAX_PATH);
	return 0;
}

int guestconn_file_read(struct guestconn *gc, const char *path, size_t max, struct buf *out,
			err_t *err)
{
	struct waiter *w;
	struct proto_enc e;
	struct buf b;
	int r;

	if (check_path(path, "read", err) < 0)
		return -EINVAL;
	w = gc_waiter_new(gc, W_READ, PT_DATA);
	w->max = max;
	buf_init(&b);
	proto_enc_begin(&e, &b, PT_READ, 0, w->req_id);
	proto_enc_str(&e, PTAG_PATH, path);
	proto_enc_u64(&e, PTAG_MAX, max);
	(void)proto_enc_end(&e);
	r = gc_roundtrip(gc, w, &b, path, err);
	if (r == 0)
		buf_add(out, w->payload.data, w->payload.len);
	buf_free(&b);
	gc_waiter_free(gc, w);
	return r;
}

int guestconn_file_write(struct guestconn *gc, const char *path, const void *p, size_t n,
			 uint32_t mode, err_t *err)
{
	const uint8_t *c = p;
	struct waiter *w;
	struct buf b;
	size_t off = 0;
	int r = 0;

	if (check_path(path, "write", err) < 0)
		return -EINVAL;
	w = gc_waiter_new(gc, W_SINGLE, PT_OK);
	buf_init(&b);
	/* Chunks under the same request id; the guest answers once, after the
	 * last one (or early with an ERROR, after which we stop sending). */
	do {
		size_t chunk = n - off > PROTO_CHUNK ? PROTO_CHUNK : n - off;
		bool last = off + chunk == n;
		struct proto_enc e;

		pthread_mutex_lock(&gc->mu);
		bool failed = w->done;
		pthread_mutex_unlock(&gc->mu);
		if (failed)
			break;
		buf_reset(&b);
		proto_enc_begin(&e, &b, PT_WRITE, last ? 0 : PROTO_F_MORE, w->req_id);
		if (off == 0) {
			proto_enc_str(&e, PTAG_PATH, path);
			proto_enc_u32(&e, PTAG_MODE, mode);
		}
		proto_enc_u64(&e, PTAG_OFFSET, off);
		proto_enc_bytes(&e, PTAG_DATA, c + off, chunk);
		(void)proto_enc_end(&e);
		r = gc_send_bytes(gc, b.data, b.len, err);
		off += chunk;
	} while (r == 0 && off < n);
	if (r < 0)
		r = err_wrap(err, "%s", path);
	else
		r = gc_waiter_wait(gc, w, path, err);
	buf_free(&b);
	gc_waiter_free(gc, w);
	return r;
}

static void fill_path(struct proto_enc *e, const void *ctx)
{
	const struct req_args *v = ctx;
	proto_enc_str(e, PTAG_PATH, v->s1);
	if (v->s2)
		proto_enc_str(e, PTAG_PATH2, v->s2);
}

static void stat_from_proto(const struct proto_stat *ps, struct guest_stat *st)
{
	st->type = ps->type;
	st->size = ps->size;
	st->mode = ps->mode;
	st->mtime_ms = ps->mtime_ms;
	st->uid = ps->uid;
	st->gid = ps->gid;
}

int guestconn_stat(struct guestconn *gc, const char *path, struct guest_stat *st, err_t *err)
{
	struct req_args v = { .s1 = path };
	struct proto_stat ps;
	struct waiter *w;
	struct proto_enc e;
	struct buf b;
	int r;

	if (check_path(path, "stat", err) < 0)
		return -EINVAL;
	w = gc_waiter_new(gc, W_SINGLE, PT_STAT_OK);
	buf_init(&b);
	proto_enc_begin(&e, &b, PT_STAT, 0, w->req_id);
	fill_path(&e, &v);
	(void)proto_enc_end(&e);
	r = gc_roundtrip(gc, w, &b, path, err);
	if (r == 0) {
		if (proto_dec_stat_fields(w->payload.data, w->payload.len, &ps) < 0)
			r = err_set(err, EPROTO, "%s: malformed stat from guest", path);
		else
			stat_from_proto(&ps, st);
	}
	buf_free(&b);
	gc_waiter_free(gc, w);
	return r;
}

void guest_dirents_free(struct guest_dirent *d, size_t n)
{
	if (!d)
		return;
	for (size_t i = 0; i < n; i++)
		free(d[i].name);
	free(d);
}

static int dirent_cmp(const void *x, const void *y)
{
	return strcmp(((const struct guest_dirent *)x)->name,
		      ((const struct guest_dirent *)y)->name);
}

/* Decode the accumulated LIST payloads (untrusted). */
static int decode_list(const struct buf *p, struct guest_dirent **ents, size_t *n)
{
	struct proto_iter it;
	struct proto_field fld;
	struct guest_dirent *d = NULL;
	size_t cnt = 0, cap = 0;
	int r;

	proto_iter_init(&it, p->data, p->len);
	while ((r = proto_iter_next(&it, &fld)) > 0) {
		struct proto_stat ps;
		char *name = NULL;
		if (fld.tag != PTAG_DIRENT)
			continue;
		if (proto_dec_stat_fields(fld.val, fld.len, &ps) < 0 ||
		    proto_get_str(fld.val, fld.len, PTAG_NAME, 255, &name) < 0 ||
		    !name[0] || strchr(name, '/')) {
			free(name);
			r = -EBADMSG;
			break;
		}
		if (cnt == cap) {
			cap = cap ? cap * 2 : 32;
			d = xrealloc(d, cap * sizeof(*d));
		}
		d[cnt].name = name;
		stat_from_proto(&ps, &d[cnt].st);
		cnt++;
	}
	if (r < 0) {
		guest_dirents_free(d, cnt);
		return r;
	}
	if (cnt)
		qsort(d, cnt, sizeof(*d), dirent_cmp);
	*ents = d;
	*n = cnt;
	return 0;
}

int guestconn_list(struct guestconn *gc, const char *path, struct guest_dirent **ents,
		   size_t *n, err_t *err)
{
	struct req_args v = { .s1 = path };
	struct waiter *w;
	struct proto_enc e;
	struct buf b;
	int r;

	*ents = NULL;
	*n = 0;
	if (check_path(path, "list", err) < 0)
		return -EINVAL;
	w = gc_waiter_new(gc, W_LIST, PT_LIST_OK);
	buf_init(&b);
	proto_enc_begin(&e, &b, PT_LIST, 0, w->req_id);
	fill_path(&e, &v);
	(void)proto_enc_end(&e);
	r = gc_roundtrip(gc, w, &b, path, err);
	if (r == 0 && decode_list(&w->payload, ents, n) < 0)
		r = err_set(err, EPROTO, "%s: malformed listing from guest", path);
	buf_free(&b);
	gc_waiter_free(gc, w);
	return r;
}

static void fill_path_flag(struct proto_enc *e, const void *ctx)
{
	const struct req_args *v = ctx;
	proto_enc_str(e, PTAG_PATH, v->s1);
	if (v->flag)
		proto_enc_u8(e, (uint16_t)v->a, 1);
}

int guestconn_mkdir(struct guestconn *gc, const char *path, bool parents, err_t *err)
{
	struct req_args v = { .s1 = path, .flag = parents, .a = PTAG_PARENTS };
	if (check_path(path, "mkdir", err) < 0)
		return -EINVAL;
	return gc_simple(gc, PT_MKDIR, path, err, fill_path_flag, &v);
}

int guestconn_remove(struct guestconn *gc, const char *path, bool recursive, err_t *err)
{
	struct req_args v = { .s1 = path, .flag = recursive, .a = PTAG_RECURSIVE };
	if (check_path(path, "remove", err) < 0)
		return -EINVAL;
	return gc_simple(gc, PT_REMOVE, path, err, fill_path_flag, &v);
}

int guestconn_rename(struct guestconn *gc, const char *from, const char *to, err_t *err)
{
	struct req_args v = { .s1 = from, .s2 = to };
	if (check_path(from, "rename", err) < 0 || check_path(to, "rename", err) < 0)
		return -EINVAL;
	return gc_simple(gc, PT_RENAME, from, err, fill_path, &v);
}

int guestconn_status(struct guestconn *gc, struct guest_status *st, err_t *err)
{
	struct proto_status ps;
	struct waiter *w = gc_waiter_new(gc, W_SINGLE, PT_STATUS_OK);
	struct proto_enc e;
	struct buf b;
	int r;

	buf_init(&b);
	proto_enc_begin(&e, &b, PT_STATUS, 0, w->req_id);
	(void)proto_enc_end(&e);
	r = gc_roundtrip(gc, w, &b, "status", err);
	if (r == 0) {
		if (proto_dec_status(&(struct proto_frame){ .payload = (const uint8_t *)w->payload.data,
							   .len = (uint32_t)w->payload.len }, &ps) < 0) {
			r = err_set(err, EPROTO, "status: malformed answer from guest");
		} else {
			st->last_activity_ms = ps.last_activity_ms;
			st->uptime_ms = ps.uptime_ms;
			st->n_procs = ps.n_procs;
			st->cpu_ms = ps.cpu_ms;
		}
	}
	buf_free(&b);
	gc_waiter_free(gc, w);
	return r;
}

static void fill_none(struct proto_enc *e, const void *ctx)
{
}

int guestconn_sync(struct guestconn *gc, err_t *err)
{
	return gc_simple(gc, PT_SYNC, "sync", err, fill_none, NULL);
}

/* ---- clone reset --------------------------------------------------------- */

int guestconn_reset(struct guestconn *gc, const struct guest_reset *rq, err_t *err)
{
	struct proto_reset x;
	struct waiter *w;
	struct buf b;
	int r;

	memset(&x, 0, sizeof(x));
	if (!rq->hostname || strlen(rq->hostname) > PROTO_HOSTNAME_MAX ||
	    (rq->entropy && (rq->entropy_len < PROTO_RESET_ENTROPY_MIN ||
			     rq->entropy_len > PROTO_RESET_ENTROPY_MAX)) ||
	    (rq->machine_id && strlen(rq->machine_id) != PROTO_MACHINE_ID_LEN))
		return err_set(err, EINVAL, "reset: bad hostname, entropy or machine id");
	snprintf(x.hostname, sizeof(x.hostname), "%s", rq->hostname);
	if (rq->machine_id) {
		snprintf(x.machine_id, sizeof(x.machine_id), "%s", rq->machine_id);
	} else {
		uint8_t id[PROTO_MACHINE_ID_LEN / 2];
		random_bytes(id, sizeof(id));
		for (size_t i = 0; i < sizeof(id); i++)
			snprintf(x.machine_id + 2 * i, 3, "%02x", id[i]);
	}
	if (rq->entropy) {
		memcpy(x.entropy, rq->entropy, rq->entropy_len);
		x.entropy_len = rq->entropy_len;
	} else {
		x.entropy_len = 64;
		random_bytes(x.entropy, x.entropy_len);
	}
	x.net_addr = rq->net_addr;
	x.net_prefix = rq->net_prefix;
	x.net_gateway = rq->net_gateway;
	x.net_dns = rq->net_dns;
	w = gc_waiter_new(gc, W_SINGLE, PT_OK);
	buf_init(&b);
	/* The clock is read last, as close to the send as we can. */
	if (rq->wall_ns) {
		x.wall_ns = rq->wall_ns;
	} else if (rq->set_clock) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		x.wall_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	}
	r = proto_enc_reset(&b, w->req_id, &x);
	explicit_bzero(x.entropy, sizeof(x.entropy));
	if (r < 0)
		r = err_set(err, -r, "reset: invalid hostname, machine id or clock");
	else
		r = gc_roundtrip(gc, w, &b, "reset", err);
	if (b.data)
		explicit_bzero(b.data, b.len);
	buf_free(&b);
	gc_waiter_free(gc, w);
	return r;
}

/* ---- port streams -------------------------------------------------------- */

/* Acknowledge consumed bytes in batches of a quarter window (or when the
 * buffer runs dry), so a bulk transfer costs few CREDIT frames. */
#define CREDIT_BATCH (PROTO_PORT_WINDOW / 4)

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

size_t gstream_readable(struct gstream *s)
{
	pthread_mutex_lock(&s->gc->mu);
	size_t n = s->rx.len - s->rx_off;
	pthread_mutex_unlock(&s->gc->mu);
	return n;
}

size_t gstream_credit(struct gstream *s)
{
	pthread_mutex_lock(&s->gc->mu);
	size_t n = s->closed ? 0 : s->send_credit;
	pthread_mutex_unlock(&s->gc->mu);
	return n;
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
