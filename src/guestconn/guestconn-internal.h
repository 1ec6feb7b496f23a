/* guestconn-internal.h - shared between the files of the node's side of the
 * guest channel (src/guestconn/guestconn*.c); not a public API, guestconn.h is.
 *
 * The files, one concern each:
 *   guestconn.c          the connection: its state, writing whole frames,
 *                        opening (HELLO, READY) and closing
 *   guestconn-reader.c   the reader thread: every frame the guest sends
 *                        (untrusted) is dispatched there
 *   guestconn-request.c  requests and their replies: waiters, round trips
 *   guestconn-proc.c     processes: exec, stdin, signal, resize
 *   guestconn-files.c    files: read, write, stat, list, mkdir, remove, rename
 *   guestconn-system.c   the guest as a whole: status, sync, the clone reset
 *   guestconn-ports.c    port streams (PORT_* frames, flow control)
 *   guestconn-watch.c    file watches (WATCH_* frames, a bounded queue each)
 *
 * Locking: gc->write_mu keeps frames whole on the wire; gc->mu guards the
 * fields below it in struct guestconn, the waiters and every port stream.
 * write_mu is taken before mu, never the other way round.
 */
#ifndef AIRLOCK_GUESTCONN_INTERNAL_H
#define AIRLOCK_GUESTCONN_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "../guestproto/proto.h"
#include "guestconn.h"

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
	struct guest_watch *watches;
	uint32_t next_watch;
};

/* ---- guestconn.c ---- */

/* Set by guestconn_set_timeout from any thread, read by requesters. */
int gc_timeout_of(struct guestconn *gc);
/* Enter "closed" (idempotent). Caller holds gc->mu. */
void gc_mark_closed_locked(struct guestconn *gc, const char *reason);
/* Write whole frames. A partial frame corrupts the stream, so a failure after
 * the first byte closes the connection. */
int gc_send_bytes(struct guestconn *gc, const void *p, size_t n, err_t *err);

/* ---- guestconn-reader.c ---- */

/* One frame from the guest: output and exit go to the callbacks, replies to
 * their waiters, PORT_* frames to gc_handle_port. Returns 0, or -EBADMSG
 * for a protocol violation, which must close the connection. */
int gc_handle_frame(struct guestconn *gc, const struct proto_frame *f);
/* The reader thread (p: the guestconn), started by guestconn_open once the
 * guest said hello; it ends at guestconn_close or when the channel closes. */
void *gc_reader_main(void *p);

/* ---- guestconn-request.c ---- */

/* A waiter for a new request id, registered with gc (already failed when
 * the channel is closed). Free it with gc_waiter_free. */
struct waiter *gc_waiter_new(struct guestconn *gc, enum waiter_kind kind, uint8_t expect);
void gc_waiter_free(struct guestconn *gc, struct waiter *w);
/* Wait for w; on failure fills err (guest errno in err->code). */
int gc_waiter_wait(struct guestconn *gc, struct waiter *w, const char *what, err_t *err);
/* Send one request frame (built by `build` into b with w's id) and wait. */
int gc_roundtrip(struct guestconn *gc, struct waiter *w, struct buf *b, const char *what,
		 err_t *err);
/* A request whose reply is OK or ERROR; `fill` adds the fields. */
int gc_simple(struct guestconn *gc, unsigned type, const char *what, err_t *err,
	      void (*fill)(struct proto_enc *e, const void *ctx), const void *ctx);
/* What a gc_simple request carries, for its fill function. */
struct req_args { uint32_t a, b; uint16_t c, d; const char *s1, *s2; bool flag; };

/* ---- guestconn-ports.c ---- */

/* The stream is over (err 0: clean). Caller holds gc->mu. */
void gc_stream_end_locked(struct gstream *st, int err);
/* A PORT_DATA, _CREDIT, _SHUT or _CLOSE frame from the guest (what it may
 * carry is checked there). Returns 0, or -EBADMSG to close the channel. */
int gc_handle_port(struct guestconn *gc, const struct proto_frame *f);

/* ---- guestconn-watch.c ---- */

/* Every watch ends (err: ECONNRESET). Caller holds gc->mu. */
void gc_watches_end_locked(struct guestconn *gc, int err);
/* A WATCH_EVENT from the guest (untrusted). Returns 0, or -EBADMSG to
 * close the channel. */
int gc_handle_watch(struct guestconn *gc, const struct proto_frame *f);

#endif
