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
 *
 * This file holds the connection: its state, writing whole frames, opening
 * and closing. The reader thread is in guestconn-reader.c, the request
 * machinery in guestconn-request.c; guestconn-internal.h lists the rest.
 */
#include "guestconn-internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>

#define DEFAULT_TIMEOUT_MS 60000

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

int gc_timeout_of(struct guestconn *gc)
{
	return __atomic_load_n(&gc->timeout_ms, __ATOMIC_RELAXED);
}

static void wake_reader(struct guestconn *gc)
{
	uint64_t one = 1;
	(void)!write(gc->wake_fd, &one, sizeof(one));
}

void gc_mark_closed_locked(struct guestconn *gc, const char *reason)
{
	if (gc->closed)
		return;
	for (struct gstream *st = gc->streams; st; st = st->next)
		gc_stream_end_locked(st, ECONNRESET);
	gc_watches_end_locked(gc, ECONNRESET);
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

/* ---- writing ------------------------------------------------------------- */

int gc_send_bytes(struct guestconn *gc, const void *p, size_t n, err_t *err)
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
