/* guestconn-system.c - requests about the guest as a whole: its status, a
 * sync of its filesystems, and the reset that clones of one memory snapshot
 * need before they are handed out.
 */
#include "guestconn-internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* ---- status and sync ---------------------------------------------------- */

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

int guestconn_reclaim(struct guestconn *gc, err_t *err)
{
	return gc_simple(gc, PT_RECLAIM, "reclaim", err, fill_none, NULL);
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
