/* Crash recovery at startup: make the rows, the node manager's jails and
 * the pool agree again before serving.
 *
 *   desired=deleted (or observed stopping)  finish the delete
 *   observed running                        adopt the live jail and reopen its
 *                                           channel (the guest resyncs); if
 *                                           that fails: destroy, failed
 *                                           "lost after restart: <why>"
 *   observed pending / starting             the create was cut off: destroy,
 *                                           failed "interrupted by a node restart"
 *   observed rolling_back                   the rollback was cut off: adopt the
 *                                           jail there is now (the old one or
 *                                           the snapshot's), running; failed
 *                                           only when there is none
 *   observed suspending                     the suspend was cut off before its
 *                                           row became restorable: adopted like
 *                                           a paused one (and resumed if it ran),
 *                                           its partial upload deleted
 *   observed restoring                      destroy what was built, back to
 *                                           suspended (the objects stay)
 *   observed suspended                      kept (nothing runs here)
 *   observed stopped / failed               kept as they are (nothing runs)
 *   jails/subvolumes with no live row       destroyed (leak cleanup)
 *
 * Each step is idempotent, so a crash during reconcile is handled by the
 * next start.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../lib/log.h"
#include "node-internal.h"

/* How long adopt waits for a jail the node manager is busy with: 30 s. */
#define ADOPT_BUSY_TRIES 300

/* The node manager's destroy, waiting while it says EBUSY: it is still at
 * a create or rollback the node asked for before it died, and would finish
 * it after a refused destroy - a failed sandbox with a running jail. */
static int destroy_waiting(struct node *n, const struct backend_ops *be, const char *id, err_t *err)
{
	int r;

	for (int i = 0; (r = be ? be->destroy(&n->bctx, id, err)
				: nm_sandbox_destroy(n->cfg->nm_sock, id, err)) == -EBUSY &&
			 i < ADOPT_BUSY_TRIES; i++) {
		*err = (err_t){ 0 };
		usleep(100 * 1000);
	}
	return r;
}

static void destroy_quiet(struct node *n, struct sandbox *sb)
{
	err_t err = { 0 };

	if (sb->be && destroy_waiting(n, sb->be, sb->id, &err) < 0)
		log_warn("sandbox %s: destroy: %s", sb->id, err.msg);
}

static void adopt(struct node *n, struct sandbox *sb)
{
	struct guest_hello hello;
	struct guestconn *gc;
	char reason[600], addr[16] = "";
	err_t err = { 0 };
	pid_t pid = 0;
	int fd = -1, r;

	if (!sb->be) {
		snprintf(reason, sizeof(reason), "lost after restart: unknown backend `%s`",
			 sb->backend_name);
		sandbox_mark_failed(n, sb, reason);
		return;
	}
	/* A paused jail cannot say HELLO: thaw it first, and say so in the
	 * lifecycle (paused -> running); it is paused again once adopted. The
	 * node manager may still be at work on it (the memory snapshot of a
	 * suspend cut off by the node's death): EBUSY until it is done. */
	bool was_paused = sb->state == SB_PAUSED;
	if (was_paused) {
		for (int i = 0; sb->be->resume &&
				(r = sb->be->resume(&n->bctx, sb->id, &err)) == -EBUSY &&
				i < ADOPT_BUSY_TRIES; i++) {
			err = (err_t){ 0 };
			usleep(100 * 1000);
		}
		if (!sb->be->resume || r < 0 ||
		    state_transition(n->db, sb->id, &sb->state, SB_RUNNING,
				     REASON_READOPT_RESUME, 0, &err) < 0) {
			snprintf(reason, sizeof(reason), "lost after restart: resume: %s",
				 sb->be->resume ? err.msg : "backend cannot resume");
			destroy_quiet(n, sb);
			sandbox_mark_failed(n, sb, reason);
			return;
		}
	}
	/* The node manager may still be at work on this jail (a rollback or
	 * create it was asked for just before the node died): it says EBUSY
	 * until it is done, and then hands over the jail it ended with. */
	for (int i = 0; (r = sb->be->adopt(&n->bctx, sb->id, &fd, &pid, addr, &err)) == -EBUSY &&
			 i < ADOPT_BUSY_TRIES; i++) {
		err = (err_t){ 0 };
		usleep(100 * 1000);
	}
	if (r < 0) {
		snprintf(reason, sizeof(reason), "lost after restart: %s", err.msg);
		destroy_quiet(n, sb);
		sandbox_mark_failed(n, sb, reason);
		return;
	}
	gc = guestconn_open(fd, &sandbox_guest_cbs, sb, n->cfg->ready_timeout_ms, &hello, &err);
	if (!gc) {
		snprintf(reason, sizeof(reason), "lost after restart: guest agent: %s", err.msg);
		destroy_quiet(n, sb);
		sandbox_mark_failed(n, sb, reason);
		return;
	}
	pthread_mutex_lock(&sb->mu);
	sb->gc = gc;
	pthread_mutex_unlock(&sb->mu);
	if (state_event(n->db, sb->id, SB_RUNNING, "re-adopted after restart", &err) < 0)
		log_warn("%s", err.msg);
	if (sandbox_net_push(n, sb, addr, &err) < 0)
		log_warn("sandbox %s: %s", sb->id, err.msg);
	/* Paused by a client, idle or its timeout: it stays paused. */
	if (was_paused && sandbox_pause_why(n, sb, REASON_READOPT_PAUSE, &err) < 0)
		log_warn("sandbox %s: %s (left running)", sb->id, err.msg);
	log_info("sandbox %s re-adopted (jail pid %d)", sb->id, (int)pid);
}

/* A rollback cut off by the restart. The jail the node manager holds now is
 * the old one (it had not swapped the disk yet) or the snapshot's (it had):
 * whole either way, so it is adopted, running, and the client may roll back
 * again. Only when there is no jail to adopt is the sandbox failed. */
static void finish_rollback(struct node *n, struct sandbox *sb)
{
	err_t err = { 0 };

	if (state_transition(n->db, sb->id, &sb->state, SB_RUNNING,
			     "rollback interrupted by a node restart: re-adopting the jail", 0,
			     &err) < 0) {
		log_warn("sandbox %s: %s", sb->id, err.msg);
		destroy_quiet(n, sb);
		sandbox_mark_failed(n, sb, "interrupted by a node restart");
		return;
	}
	adopt(n, sb);
}

static void finish_delete(struct node *n, struct sandbox *sb)
{
	err_t err = { 0 };

	/* running|paused → stopping: the delete was asked for before the
	 * restart (desired=deleted) and is taken up again. */
	if (sb->state == SB_RUNNING || sb->state == SB_PAUSED)
		state_transition(n->db, sb->id, &sb->state, SB_STOPPING, "resume delete after restart",
				 0, &err);
	if (sb->be && destroy_waiting(n, sb->be, sb->id, &err) < 0) {
		char reason[600];
		snprintf(reason, sizeof(reason), "delete failed after restart: %s", err.msg);
		if (sb->state != SB_FAILED)
			sandbox_mark_failed(n, sb, reason);
		return;
	}
	/* stopping → stopped: the jail is destroyed; then → deleted (from
	 * stopped or failed): the row is retired. */
	if (sb->state == SB_STOPPING)
		state_transition(n->db, sb->id, &sb->state, SB_STOPPED, "jail destroyed", 0, &err);
	if (state_transition(n->db, sb->id, &sb->state, SB_DELETED, "delete finished after restart",
			     0, &err) < 0)
		log_err("%s", err.msg);
}

void node_reconcile(struct node *n)
{
	struct db_rows rows;
	char **ids = NULL;
	err_t err = { 0 };
	int kept = 0, adopted = 0;

	/* As templates_reconcile: an SQLite file's rows are all this node's. */
	if (node_db_is_private(n) &&
	    db_exec(n->db, &err,
		    "UPDATE sandboxes SET node=? WHERE node IS DISTINCT FROM ? AND "
		    STATE_FENCE_SELF_SQL,
		    "ss" STATE_FENCE_SELF_TYPES, node_me(n), node_me(n),
		    STATE_FENCE_SELF_ARGS(state_fence())) < 0)
		log_warn("reconcile: %s", err.msg);
	if (db_query(n->db, &rows, &err,
		     "SELECT " SANDBOX_COLS " FROM sandboxes WHERE observed != 'deleted'"
		     " AND (node = ? OR node IS NULL)", "s", node_me(n)) < 0) {
		log_err("reconcile: %s", err.msg);
		return;
	}
	for (int i = 0; i < rows.n_rows; i++) {
		struct sandbox *sb = sandbox_from_row(n, &rows, i);
		const char *desired = db_cell(&rows, i, 5);

		if (!sb)
			continue;
		suspend_load(n, sb);
		/* suspending → paused (adopted below), restoring → suspended */
		suspend_reconcile(n, sb);
		if ((desired && strcmp(desired, "deleted") == 0) || sb->state == SB_STOPPING) {
			finish_delete(n, sb);
		} else if (sb->state == SB_RUNNING || sb->state == SB_PAUSED) {
			adopt(n, sb);
			/* A suspend cut off by the restart found it running. */
			if (sb->susp_resume && sb->state == SB_PAUSED &&
			    sandbox_wake(n, sb, "resumed after an interrupted suspend", &err) < 0)
				log_warn("sandbox %s: %s", sb->id, err.msg);
			sb->susp_resume = false;
			adopted += sb->state == SB_RUNNING;
		} else if (sb->state == SB_ROLLING_BACK) {
			finish_rollback(n, sb);
			adopted += sb->state == SB_RUNNING;
		} else if (sb->state == SB_PENDING || sb->state == SB_STARTING) {
			destroy_quiet(n, sb);
			sandbox_mark_failed(n, sb, "interrupted by a node restart");
		}
		if (sb->state == SB_DELETED) {
			sandbox_unref(sb);
			continue;
		}
		if (sched_ttl_replay(n, sb, &err) < 0)
			log_warn("reconcile: sandbox %s: %s (its TTL counts paused time)", sb->id,
				 err.msg);
		sandbox_map_insert(n, sb);
		sandbox_schedule_timeout(n, sb);
		kept++;
	}
	db_rows_free(&rows);
	log_info("reconcile: %d sandboxes loaded, %d running", kept, adopted);

	/* Leaks: whatever the node manager holds that is not a running sandbox
	 * of ours (a create cut off before its row, a jail of a sandbox that
	 * failed or stopped while the node was down). */
	if (nm_sandbox_list(n->cfg->nm_sock, &ids, &err) < 0) {
		log_warn("reconcile: cannot list the node manager's sandboxes: %s", err.msg);
		return;
	}
	for (char **id = ids; id && *id; id++) {
		struct sandbox *sb = sandbox_find(n, *id, NULL);
		bool live = false;

		if (sb) {
			pthread_mutex_lock(&sb->mu);
			live = sb->state == SB_RUNNING || sb->state == SB_PAUSED;
			pthread_mutex_unlock(&sb->mu);
			sandbox_unref(sb);
		}
		if (!live) {
			err_t e2 = { 0 };
			log_info("reconcile: destroying leftover sandbox %s", *id);
			if (destroy_waiting(n, NULL, *id, &e2) < 0)
				log_warn("reconcile: destroy %s: %s", *id, e2.msg);
		}
		free(*id);
	}
	free(ids);
}
