/* guestconn-request.c - requests and their replies. A requester registers
 * a waiter (a fresh request id), writes its frame(s) and sleeps on gc->cv
 * until the reader completes the waiter, the channel closes, or the
 * timeout passes; a reply that comes later is dropped by the reader.
 */
#include "guestconn-internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

/* ---- waiters ------------------------------------------------------------- */

struct waiter *gc_waiter_new(struct guestconn *gc, enum waiter_kind kind, uint8_t expect)
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

void gc_waiter_free(struct guestconn *gc, struct waiter *w)
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

int gc_waiter_wait(struct guestconn *gc, struct waiter *w, const char *what, err_t *err)
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

int gc_roundtrip(struct guestconn *gc, struct waiter *w, struct buf *b, const char *what,
		 err_t *err)
{
	int r = gc_send_bytes(gc, b->data, b->len, err);
	if (r < 0)
		return err_wrap(err, "%s", what);
	return gc_waiter_wait(gc, w, what, err);
}

int gc_simple(struct guestconn *gc, unsigned type, const char *what, err_t *err,
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
