/* lifecycle.c - a sandbox's life after its create: pause and the resume
 * step (waking a sandbox for use is ../wake/wake.c; the endpoints are
 * ../lifecycle-api.c), failure, delete (DELETE, the TTL, a failed fork),
 * the TTL's timer, and the node's shutdown (a guest channel closing by
 * itself is ../snap/recover.c). model/state.c decides what is legal; each
 * step here does the backend's part and moves the state along the table.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../../lib/fault.h"
#include "../../lib/log.h"
#include "../artifacts/artifacts.h"
#include "../net/network.h"
#include "../proc/proc.h"
#include "lifecycle.h"

/* ---- pause, resume, connect ------------------------------------------- */

/* The lock is dropped around the backend call, with lc_busy keeping other
 * pauses, resumes and deletes out meanwhile (a failure may still happen:
 * then the table refuses the step and the sandbox stays failed). */
int sandbox_lc_step_locked(struct node *n, struct sandbox *sb, enum sb_state to,
			  const char *reason, err_t *err)
{
	const struct backend_ops *be = sb->be;
	uint64_t t0 = now_us();
	int r;

	if (!backend_can(be, BACKEND_CAP_PAUSE) || !be->pause || !be->resume)
		return err_set(err, EOPNOTSUPP, "the %s backend cannot pause a sandbox",
			       sb->backend_name);
	sb->lc_busy = true;
	pthread_mutex_unlock(&sb->mu);
	r = to == SB_PAUSED ? be->pause(&n->bctx, sb->id, err) : be->resume(&n->bctx, sb->id, err);
	pthread_mutex_lock(&sb->mu);
	sb->lc_busy = false;
	pthread_cond_broadcast(&sb->cv);
	if (r < 0)
		return err_wrap(err, "%s sandbox %s", to == SB_PAUSED ? "pause" : "resume", sb->id);
	/* running → paused (pause) or paused → running (resume); a sandbox
	 * that failed meanwhile stays failed (-EBUSY). */
	r = state_transition(n->db, sb->id, &sb->state, to, reason, 0, err);
	if (r < 0 && r != -EBUSY) {
		/* The jail did change; only the row lags. Keep memory honest
		 * (the table allowed the edge: only the write failed). */
		log_err("sandbox %s: %s", sb->id, err->msg);
		state_set(sb->id, &sb->state, to);
		r = 0;
	}
	if (r == 0) {
		/* Paused time does not count against timeout_s: a resume moves
		 * the deadline out, so the TTL is looked at again. */
		sched_on_state_locked(sb, to);
		if (to == SB_RUNNING)
			sandbox_schedule_timeout(n, sb);
	}
	log_debug("sandbox %s: %s in %.2f ms (%s)", sb->id, state_name(to),
		  (now_us() - t0) / 1000.0, reason);
	return r;
}

int sandbox_pause(struct node *n, struct sandbox *sb, err_t *err)
{
	return sandbox_pause_why(n, sb, "paused by client", err);
}

int sandbox_pause_why(struct node *n, struct sandbox *sb, const char *why, err_t *err)
{
	int r;

	pthread_mutex_lock(&sb->mu);
	while (sb->lc_busy)
		pthread_cond_wait(&sb->cv, &sb->mu);
	if (sb->deleting || !state_allowed(sb->state, SB_PAUSED))
		r = err_set(err, EBUSY, "sandbox %s is %s; only a running sandbox can be paused",
			    sb->id, state_name(sb->state));
	else
		r = sandbox_lc_step_locked(n, sb, SB_PAUSED, why, err);
	pthread_mutex_unlock(&sb->mu);
	return r;
}

/* ---- teardown --------------------------------------------------------- */

void sandbox_mark_failed(struct node *n, struct sandbox *sb, const char *reason)
{
	err_t err = { 0 };

	/* live, or stopped → failed: the row says why, and memory follows
	 * even when the row cannot. */
	if (state_transition(n->db, sb->id, &sb->state, SB_FAILED, reason, 0, &err) < 0) {
		log_err("%s", err.msg);
		state_set(sb->id, &sb->state, SB_FAILED);
	}
	free(sb->error);
	sb->error = xstrdup(reason);
}

/* Wait until no create is in flight and no other teardown owns sb.
 * Called and returns with sb->mu held. */
static void wait_settled_locked(struct sandbox *sb)
{
	while (sb->state == SB_PENDING || sb->state == SB_STARTING || sb->deleting || sb->lc_busy)
		pthread_cond_wait(&sb->cv, &sb->mu);
}

void sandbox_fail(struct node *n, struct sandbox *sb, const char *reason)
{
	struct guestconn *gc;
	err_t err = { 0 };

	pthread_mutex_lock(&sb->mu);
	if (sb->deleting || !state_is_live(sb->state)) {
		pthread_mutex_unlock(&sb->mu);
		return;
	}
	sb->deleting = true;
	sandbox_mark_failed(n, sb, reason);
	procs_mark_lost(sb, "the sandbox failed");
	pthread_mutex_unlock(&sb->mu);

	if (sb->be && sb->be->destroy(&n->bctx, sb->id, &err) < 0)
		log_err("sandbox %s: destroy after failure: %s", sb->id, err.msg);

	pthread_mutex_lock(&sb->mu);
	gc = sandbox_gc_take_locked(sb);
	pthread_mutex_unlock(&sb->mu);
	guestconn_close(gc);

	pthread_mutex_lock(&sb->mu);
	sb->deleting = false;
	pthread_cond_broadcast(&sb->cv);
	pthread_mutex_unlock(&sb->mu);
	log_warn("sandbox %s failed: %s", sb->id, reason);
}

/* sandbox_delete's first write: desired=deleted and, for a running or
 * paused sandbox, running|paused → stopping (arg: the reason). */
static int write_delete_intent(struct node *n, struct sandbox *sb, const void *arg, err_t *err)
{
	struct state_fence f = state_fence();
	int r = db_exec(n->db, err,
			"UPDATE sandboxes SET desired='deleted', gen=gen+1 WHERE id=?" STATE_FENCE_SQL,
			"s" STATE_FENCE_TYPES, sb->id, STATE_FENCE_ARGS(f));

	/* Fenced: a stale process must not mark deleted a row that moved to
	 * another node (its new owner would retire it). */
	if (r == 0 && f.epoch)
		return err_set(err, ESTALE, "sandbox %s: not this node's to delete any more",
			       sb->id);

	if (r >= 0 && (sb->state == SB_RUNNING || sb->state == SB_PAUSED))
		r = state_transition(n->db, sb->id, &sb->state, SB_STOPPING, arg, STATE_IN_TX,
				     err);
	return r;
}

/* sandbox_delete's last write, once the jail is destroyed: stopping →
 * stopped, then → deleted (arg: the reason), and the snapshot rows. */
static int write_retired(struct node *n, struct sandbox *sb, const void *arg, err_t *err)
{
	struct state_fence f = state_fence();
	int r = 0;

	if (sb->state == SB_STOPPING)
		r = state_transition(n->db, sb->id, &sb->state, SB_STOPPED, "jail destroyed",
				     STATE_IN_TX, err);
	if (r == 0)
		r = state_transition(n->db, sb->id, &sb->state, SB_DELETED, arg, STATE_IN_TX, err);
	/* The backend's destroy removed the snapshots with the disk. */
	if (r == 0)
		r = db_exec(n->db, err,
			    "DELETE FROM snapshots WHERE sandbox_id=? AND " STATE_FENCE_OF_SQL,
			    "s" STATE_FENCE_OF_TYPES, sb->id, STATE_FENCE_OF_ARGS(f, sb->id));
	if (r >= 0)
		r = state_fenced(n->db, sb->id, r, err);
	/* Its data keys go with it: a suspend that failed while the database
	 * was out of reach could not forget its key, and nothing else would.
	 * A suspended one's objects are deleted after this commits. */
	if (r >= 0)
		r = db_exec(n->db, err,
			    "DELETE FROM data_keys WHERE sandbox_id=? AND " STATE_FENCE_OF_SQL,
			    "s" STATE_FENCE_OF_TYPES, sb->id, STATE_FENCE_OF_ARGS(f, sb->id));
	if (r >= 0)
		r = state_fenced(n->db, sb->id, r, err);
	if (r >= 0)
		r = db_exec(n->db, err,
			    "DELETE FROM suspensions WHERE sandbox_id=? AND " STATE_FENCE_OF_SQL,
			    "s" STATE_FENCE_OF_TYPES, sb->id, STATE_FENCE_OF_ARGS(f, sb->id));
	if (r >= 0)
		r = state_fenced(n->db, sb->id, r, err);
	return r < 0 ? r : 0;
}

int sandbox_delete(struct node *n, struct sandbox *sb, const char *reason, err_t *err)
{
	struct guestconn *gc;
	bool had_objects;
	int r;

	pthread_mutex_lock(&sb->mu);
	wait_settled_locked(sb);
	if (sb->state == SB_DELETED) {
		pthread_mutex_unlock(&sb->mu);
		return 0;
	}
	sb->deleting = true;

	/* Record the intent first (desired=deleted), so a crash from here on is
	 * finished by reconcile at the next start. */
	r = sandbox_tx(n, sb, write_delete_intent, reason, err);
	if (r < 0) {
		sb->deleting = false;
		pthread_cond_broadcast(&sb->cv);
		pthread_mutex_unlock(&sb->mu);
		return r;
	}
	procs_mark_lost(sb, "the sandbox was deleted");
	pthread_mutex_unlock(&sb->mu);
	FAULT_POINT("delete.after_intent");

	/* Kill everything first: requests in flight on the channel then fail
	 * fast instead of waiting for their timeouts. */
	if (sb->be) {
		r = sb->be->destroy(&n->bctx, sb->id, err);
		if (r == 0)
			sandbox_net_forget(n, sb);
	} else {
		r = 0;  /* unknown backend: nothing of ours can be running */
	}
	pthread_mutex_lock(&sb->mu);
	gc = sandbox_gc_take_locked(sb);
	pthread_mutex_unlock(&sb->mu);
	guestconn_close(gc);

	pthread_mutex_lock(&sb->mu);
	if (r < 0) {
		char why[600];

		err_wrap(err, "destroy");
		snprintf(why, sizeof(why), "delete failed: %s", err->msg);
		if (sb->state != SB_FAILED)
			sandbox_mark_failed(n, sb, why);
		sb->deleting = false;
		pthread_cond_broadcast(&sb->cv);
		pthread_mutex_unlock(&sb->mu);
		return r;
	}
	FAULT_POINT("delete.after_destroy");
	r = sandbox_tx(n, sb, write_retired, reason, err);
	if (r < 0) {
		/* The jail is gone; only the row lags. desired=deleted is recorded,
		 * so the next start finishes it. Keep the memory state honest:
		 * stopping → stopped in memory. */
		log_err("sandbox %s: %s", sb->id, err->msg);
		if (sb->state == SB_STOPPING)
			state_set(sb->id, &sb->state, SB_STOPPED);
		sb->deleting = false;
		pthread_cond_broadcast(&sb->cv);
		pthread_mutex_unlock(&sb->mu);
		return r;
	}
	had_objects = sb->susp_snap != NULL;
	pthread_cond_broadcast(&sb->cv);
	pthread_mutex_unlock(&sb->mu);
	/* A suspended sandbox's objects in the store (only then: a store that
	 * is down must not slow every delete). */
	if (had_objects && suspend_forget_objects(n, sb, false) < 0)
		art_sweep_deleted(n, sb->id, 1);   /* the store is down: again, later */
	sandbox_map_remove(n, sb);
	log_info("sandbox %s deleted (%s)", sb->id, reason);
	return 0;
}

void sandbox_on_timeout(struct node *n, const char *id)
{
	struct sandbox *sb = sandbox_find(n, id, NULL);
	err_t err = { 0 };
	int64_t deadline;
	bool paused;

	if (!sb)
		return;
	/* Only active time counts: a paused sandbox waits (its resume looks
	 * again), and one that was paused meanwhile has a later deadline. A
	 * timer may also be stale (several are queued over pauses and
	 * resumes); each one just checks. */
	pthread_mutex_lock(&sb->mu);
	deadline = sched_ttl_deadline_locked(sb);
	paused = sb->state == SB_PAUSED || sb->sched.paused_since;
	pthread_mutex_unlock(&sb->mu);
	if (!deadline || paused) {
		sandbox_unref(sb);
		return;
	}
	if (deadline > wall_ms()) {
		pthread_mutex_lock(&sb->mu);
		sandbox_schedule_timeout(n, sb);
		pthread_mutex_unlock(&sb->mu);
	} else if (sb->pol.timeout_pause) {
		pthread_mutex_lock(&sb->mu);
		sb->sched.ttl_paused = true;
		pthread_mutex_unlock(&sb->mu);
		if (sandbox_pause_why(n, sb, "timeout", &err) < 0) {
			pthread_mutex_lock(&sb->mu);
			sb->sched.ttl_paused = false;
			pthread_mutex_unlock(&sb->mu);
			log_err("sandbox %s: pause after timeout: %s", id, err.msg);
		}
	} else if (sandbox_delete(n, sb, "timeout", &err) < 0) {
		log_err("sandbox %s: delete after timeout: %s", id, err.msg);
	}
	sandbox_unref(sb);
}

void sandbox_schedule_timeout(struct node *n, struct sandbox *sb)
{
	int64_t left, deadline;

	/* Called with sb->mu held, or (create, load) before any pause or
	 * resume can touch the bookkeeping. */
	deadline = sched_ttl_deadline_locked(sb);
	if (!deadline)
		return;
	/* The deadline is wall time (it survives restarts, less the paused
	 * time, which is kept in memory only); the reaper sleeps on the
	 * monotonic clock. */
	left = deadline - wall_ms();
	reaper_add(n, now_ms() + (uint64_t)(left > 0 ? left : 0), TIMER_SANDBOX_TIMEOUT, sb->id,
		   0);
}

/* The node stops: running|paused → stopping → stopped, in one write. */
static int write_shutdown(struct node *n, struct sandbox *sb, const void *arg, err_t *err)
{
	int r = state_transition(n->db, sb->id, &sb->state, SB_STOPPING, "node shutdown",
				 STATE_IN_TX, err);

	if (r == 0)
		r = state_transition(n->db, sb->id, &sb->state, SB_STOPPED, "node shutdown",
				     STATE_IN_TX, err);
	return r;
}

void sandbox_stop_all(struct node *n)
{
	for (int b = 0; b < NODE_BUCKETS; b++) {
		for (;;) {
			struct sandbox *sb;
			struct guestconn *gc;
			err_t err = { 0 };

			pthread_mutex_lock(&n->mu);
			sb = n->buckets[b];
			if (sb)
				sandbox_map_unlink_locked(n, sb);
			pthread_mutex_unlock(&n->mu);
			if (!sb)
				break;
			pthread_mutex_lock(&sb->mu);
			/* The node manager kills the jails on its own shutdown;
			 * the rows say they are stopped. */
			if ((sb->state == SB_RUNNING || sb->state == SB_PAUSED) &&
			    sandbox_tx(n, sb, write_shutdown, NULL, &err) < 0)
				log_err("%s", err.msg);
			procs_mark_lost(sb, "the node stopped");
			gc = sandbox_gc_take_locked(sb);
			pthread_mutex_unlock(&sb->mu);
			guestconn_close(gc);
			sandbox_unref(sb);
		}
	}
}
