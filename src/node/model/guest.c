/* guest.c - a new guest comes up for a sandbox (create, fork, rollback,
 * restore, crash recovery): its channel opens, the backend's post-ready
 * step runs, and the move to running is written; and, for vm guests, the
 * turns that bound how many start at once.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../../lib/log.h"
#include "../../lib/phases.h"
#include "model.h"

struct guest_up {
	pid_t jail_pid;
	const char *why;
};

/* The guest said READY: the jail's pid, and starting|rolling_back → running
 * (the reason says which). */
static int write_running(struct node *n, struct sandbox *sb, const void *arg, err_t *err)
{
	const struct guest_up *up = arg;
	struct state_fence f = state_fence();
	int r = db_exec(n->db, err, "UPDATE sandboxes SET jail_pid=? WHERE id=?" STATE_FENCE_SQL,
			"is" STATE_FENCE_TYPES, (int64_t)up->jail_pid, sb->id, STATE_FENCE_ARGS(f));

	if (r >= 0)
		r = state_transition(n->db, sb->id, &sb->state, SB_RUNNING, up->why, STATE_IN_TX,
				     err);
	return r;
}

int sandbox_guest_up(struct node *n, struct sandbox *sb, const struct nm_sandbox_spec *nspec,
		     int chan_fd, pid_t jail_pid, const char *why, const char *what, err_t *err)
{
	return sandbox_guest_up_timed(n, sb, nspec, chan_fd, jail_pid, why, what, NULL, err);
}

int sandbox_guest_up_timed(struct node *n, struct sandbox *sb, const struct nm_sandbox_spec *nspec,
			   int chan_fd, pid_t jail_pid, const char *why, const char *what,
			   struct phases *ph, err_t *err)
{
	struct guest_up up = { .jail_pid = jail_pid, .why = why };
	struct guest_hello hello;
	struct guestconn *gc;
	char addr[sizeof(sb->addr)];
	int r;

	/* The guest always speaks first: HELLO, then READY once it can serve. */
	uint64_t t0 = now_us();
	gc = guestconn_open(chan_fd, &sandbox_guest_cbs, sb, n->cfg->ready_timeout_ms, &hello, err);
	if (!gc)
		return err_wrap(err, "%s", what);
	log_debug("sandbox %s: guest hello in %.2f ms", sb->id, (now_us() - t0) / 1000.0);
	if (ph)
		phases_mark(ph, "hello");
	pthread_mutex_lock(&sb->mu);
	snprintf(addr, sizeof(addr), "%s", sb->addr);
	pthread_mutex_unlock(&sb->mu);
	if (sb->be->post_ready && sb->be->post_ready(&n->bctx, nspec, addr, gc, err) < 0) {
		guestconn_close(gc);
		return err_wrap(err, "%s backend", sb->be->name);
	}
	if (ph)
		phases_mark(ph, "reset");
	/* One transaction: the jail's pid and the move to running. */
	pthread_mutex_lock(&sb->mu);
	if (sb->chan_closed) {
		pthread_mutex_unlock(&sb->mu);
		guestconn_close(gc);
		return err_set(err, EPIPE, "guest channel closed right after READY");
	}
	r = sandbox_tx(n, sb, write_running, &up, err);
	if (r < 0) {
		pthread_mutex_unlock(&sb->mu);
		guestconn_close(gc);
		return r;
	}
	sb->gc = gc;
	pthread_cond_broadcast(&sb->cv);
	pthread_mutex_unlock(&sb->mu);
	if (ph)
		phases_mark(ph, "ready");
	return 0;
}

/* ---- vm start turns ---------------------------------------------------- */

/* vm (BACKEND_CAP_START_TURNS): from starting a guest (a create's jail
 * step, a rollback's or a fork child's backend call) to its READY, at most
 * vmstart_max at once; the rest wait here, before their QEMU starts. Under
 * TCG a guest's first code is translated on the node's CPUs: 32 clones
 * started together on 2 cores each got a sixteenth of a core and some
 * missed ready_timeout_ms (504), where, taken a few at a time, each is
 * quick. The wait is not part of the guest's timeout. True when a turn was
 * taken (give it back with vmstart_leave). */
bool vmstart_enter(struct node *n, const struct sandbox *sb)
{
	if (!backend_can(sb->be, BACKEND_CAP_START_TURNS))
		return false;
	pthread_mutex_lock(&n->vmstart_mu);
	n->vmstart_waiting++;
	while (n->vmstart_busy >= n->vmstart_max)
		pthread_cond_wait(&n->vmstart_cv, &n->vmstart_mu);
	n->vmstart_waiting--;
	n->vmstart_busy++;
	pthread_mutex_unlock(&n->vmstart_mu);
	return true;
}

void vmstart_leave(struct node *n, bool taken)
{
	if (!taken)
		return;
	pthread_mutex_lock(&n->vmstart_mu);
	n->vmstart_busy--;
	pthread_cond_signal(&n->vmstart_cv);
	pthread_mutex_unlock(&n->vmstart_mu);
}
