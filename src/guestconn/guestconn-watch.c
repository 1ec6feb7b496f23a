/* guestconn-watch.c - file watches: the guest agent's inotify events for a
 * path, carried in WATCH_* frames (proto.h), queued per watch for the one
 * thread that streams them (guestconn.h says how it is driven).
 *
 * The queue is bounded: the reader thread never waits for a slow consumer
 * (it also carries every other frame of the sandbox), so what does not fit
 * is dropped and one overflow entry marks the place.
 */
#include "guestconn-internal.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/eventfd.h>

/* The guest's kinds are ours, value for value. */
_Static_assert((int)GW_CREATE == (int)PW_CREATE && (int)GW_WRITE == (int)PW_WRITE &&
	       (int)GW_REMOVE == (int)PW_REMOVE && (int)GW_RENAME == (int)PW_RENAME &&
	       (int)GW_OVERFLOW == (int)PW_OVERFLOW, "watch kinds");

/* Whatever max_queue says, a watch holds at most this much of names (a
 * guest may send 8 KiB of them per event). */
#define QUEUE_BYTES (4u << 20)

struct guest_watch {
	struct guest_watch *next; /* gc->watches */
	struct guestconn *gc;
	uint32_t id;
	int efd;
	/* Under gc->mu: a ring of cap entries (max_queue + 1: room for the
	 * overflow marker behind a full queue). */
	struct guest_watch_event *q;
	size_t cap, max, head, len;
	size_t bytes;             /* of the paths queued: at most QUEUE_BYTES */
	bool ended;
	int err;
};

void guest_watch_event_free(struct guest_watch_event *ev)
{
	if (!ev)
		return;
	free(ev->path);
	free(ev->path2);
	ev->path = ev->path2 = NULL;
}

static void watch_wake(struct guest_watch *w)
{
	uint64_t one = 1;
	(void)!write(w->efd, &one, sizeof(one));
}

static size_t ev_bytes(const struct guest_watch_event *ev)
{
	return (ev->path ? strlen(ev->path) : 0) + (ev->path2 ? strlen(ev->path2) : 0);
}

static struct guest_watch_event *tail_locked(struct guest_watch *w)
{
	return w->len ? &w->q[(w->head + w->len - 1) % w->cap] : NULL;
}

/* Queue ev (consumed) or, when full, drop it behind one overflow marker. */
static void push_locked(struct guest_watch *w, struct guest_watch_event *ev)
{
	struct guest_watch_event *t = tail_locked(w);

	if (ev->kind == GW_OVERFLOW || w->len >= w->max ||
	    ev_bytes(ev) > QUEUE_BYTES - w->bytes) {
		guest_watch_event_free(ev);
		if (t && t->kind == GW_OVERFLOW)
			return;   /* one marker for a run of losses */
		if (w->len >= w->cap)
			return;   /* cannot happen: cap = max + 1 */
		*ev = (struct guest_watch_event){ .kind = GW_OVERFLOW };
	}
	w->q[(w->head + w->len) % w->cap] = *ev;
	w->len++;
	w->bytes += ev_bytes(ev);
	watch_wake(w);
}

void gc_watches_end_locked(struct guestconn *gc, int err)
{
	for (struct guest_watch *w = gc->watches; w; w = w->next) {
		if (w->ended)
			continue;
		w->ended = true;
		w->err = err;
		watch_wake(w);
	}
}

/* WATCH_EVENT (untrusted): proto_dec_watch checked kind and paths; an id we
 * do not know crossed our STOP and is dropped. */
int gc_handle_watch(struct guestconn *gc, const struct proto_frame *f)
{
	struct proto_watch m;
	struct guest_watch *w;

	if (proto_dec_watch(f, &m) < 0 || m.type != PT_WATCH_EVENT) {
		proto_watch_free(&m);
		return -EBADMSG;
	}
	struct guest_watch_event ev = { .kind = m.kind, .dir = m.dir, .path = m.path,
					.path2 = m.path2 };
	pthread_mutex_lock(&gc->mu);
	for (w = gc->watches; w && w->id != m.id; w = w->next)
		;
	if (w && !w->ended)
		push_locked(w, &ev);
	else
		guest_watch_event_free(&ev);
	pthread_mutex_unlock(&gc->mu);
	return 0;
}

static void unlink_locked(struct guestconn *gc, struct guest_watch *w)
{
	for (struct guest_watch **pp = &gc->watches; *pp; pp = &(*pp)->next) {
		if (*pp == w) {
			*pp = w->next;
			return;
		}
	}
}

static void watch_free(struct guest_watch *w)
{
	for (size_t i = 0; i < w->len; i++)
		guest_watch_event_free(&w->q[(w->head + i) % w->cap]);
	if (w->efd >= 0)
		close(w->efd);
	free(w->q);
	free(w);
}

struct guest_watch *guestconn_watch_start(struct guestconn *gc, const char *path,
					  bool recursive, size_t max_queue, err_t *err)
{
	struct guest_watch *w;
	struct waiter *wt;
	struct buf b;
	int r;

	if (max_queue == 0) {
		err_set(err, EINVAL, "empty queue");
		return NULL;
	}
	w = xcalloc(1, sizeof(*w));
	w->gc = gc;
	w->max = max_queue;
	w->cap = max_queue + 1;
	w->q = xcalloc(w->cap, sizeof(*w->q));
	w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->efd < 0) {
		err_sys(err, "eventfd");
		watch_free(w);
		return NULL;
	}
	/* Registered before the request goes out: events right behind the OK
	 * must find their watch. */
	pthread_mutex_lock(&gc->mu);
	do
		w->id = ++gc->next_watch;
	while (w->id == 0);
	w->next = gc->watches;
	gc->watches = w;
	pthread_mutex_unlock(&gc->mu);

	wt = gc_waiter_new(gc, W_SINGLE, PT_OK);
	buf_init(&b);
	struct proto_watch m = { .type = PT_WATCH_START, .id = w->id, .path = (char *)path,
				 .recursive = recursive };
	if (proto_enc_watch(&b, wt->req_id, &m) < 0)
		r = err_set(err, EINVAL, "bad path");
	else
		r = gc_roundtrip(gc, wt, &b, "watch", err);
	buf_free(&b);
	gc_waiter_free(gc, wt);
	if (r < 0) {
		pthread_mutex_lock(&gc->mu);
		unlink_locked(gc, w);
		pthread_mutex_unlock(&gc->mu);
		watch_free(w);
		return NULL;
	}
	return w;
}

int guest_watch_fd(const struct guest_watch *w)
{
	return w->efd;
}

void guest_watch_clear(struct guest_watch *w)
{
	uint64_t v;
	(void)!read(w->efd, &v, sizeof(v));
}

int guest_watch_next(struct guest_watch *w, struct guest_watch_event *ev)
{
	struct guestconn *gc = w->gc;
	int r;

	pthread_mutex_lock(&gc->mu);
	if (w->len) {
		*ev = w->q[w->head];
		w->bytes -= ev_bytes(ev);
		memset(&w->q[w->head], 0, sizeof(*ev));
		w->head = (w->head + 1) % w->cap;
		w->len--;
		r = 1;
	} else {
		r = w->ended ? -(w->err ? w->err : ECONNRESET) : 0;
	}
	pthread_mutex_unlock(&gc->mu);
	return r;
}

bool guest_watch_ended(struct guest_watch *w)
{
	pthread_mutex_lock(&w->gc->mu);
	bool e = w->ended;
	pthread_mutex_unlock(&w->gc->mu);
	return e;
}

void guest_watch_stop(struct guest_watch *w)
{
	struct guestconn *gc;
	bool tell;

	if (!w)
		return;
	gc = w->gc;
	pthread_mutex_lock(&gc->mu);
	tell = !w->ended && !gc->closed;
	unlink_locked(gc, w);
	pthread_mutex_unlock(&gc->mu);
	if (tell) {
		_cleanup_(buf_free) struct buf b = { 0 };
		struct proto_watch m = { .type = PT_WATCH_STOP, .id = w->id };
		err_t err = { 0 };
		if (proto_enc_watch(&b, 0, &m) == 0)
			(void)gc_send_bytes(gc, b.data, b.len, &err);
	}
	watch_free(w);
}

void guestconn_watches_abort(struct guestconn *gc)
{
	if (!gc)
		return;
	pthread_mutex_lock(&gc->mu);
	gc_watches_end_locked(gc, ECONNRESET);
	pthread_mutex_unlock(&gc->mu);
}
