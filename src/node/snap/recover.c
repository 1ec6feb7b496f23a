/* Crash recovery: when a running or paused sandbox's guest channel closes
 * without anyone asking (kill -9 of its QEMU, its init dying), it comes
 * back from its latest full snapshot (memory and disk: processes carry on),
 * else from its latest disk snapshot with a fresh boot, instead of being
 * failed. With no snapshot at all it fails as before.
 *
 * It is a rollback the node asks for itself: the same backend verb (which
 * accepts a dead jail), the same edges of the state table (running or
 * paused → rolling_back → running, or → failed when it does not work), the
 * same lc_busy. The sandbox records recovered_from {snapshot, kind, at}
 * (lineage table, shown by GET) and the event log says what happened.
 *
 * A guest that dies again within RECOVER_AGAIN_MS of being recovered is
 * failed instead: a snapshot that crashes on restore must not loop.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/log.h"
#include "../life/lifecycle.h"
#include "snap.h"

#define RECOVER_AGAIN_MS 30000

/* The latest full snapshot, else the latest disk one. */
static int pick_snapshot(struct node *n, struct sandbox *sb, char *id, size_t idcap, char *kind,
			 size_t kcap, err_t *err)
{
	struct db_rows rows;
	int r = db_query(n->db, &rows, err,
			 "SELECT id, kind FROM snapshots WHERE sandbox_id=?"
			 " ORDER BY kind='full' DESC, created_at DESC, rowid DESC LIMIT 1",
			 "s", sb->id);

	if (r < 0)
		return r;
	if (rows.n_rows == 0) {
		db_rows_free(&rows);
		return -ENOENT;
	}
	snprintf(id, idcap, "%s", db_cell(&rows, 0, 0));
	snprintf(kind, kcap, "%s", db_cell(&rows, 0, 1));
	db_rows_free(&rows);
	return 0;
}

static void record(struct node *n, struct sandbox *sb, const char *snap, const char *kind,
		   int64_t at)
{
	char iso[ISO_TIME_MAX];
	struct buf b;
	struct jw w;
	err_t err = { 0 };
	struct state_fence f = state_fence();
	int r;

	iso_time(at, iso);
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "snapshot");
	jw_str(&w, snap);
	jw_key(&w, "kind");
	jw_str(&w, kind);
	jw_key(&w, "at");
	jw_str(&w, iso);
	jw_end(&w);
	/* Fenced: a stale process records no recovery (state.h). */
	r = db_exec(n->db, &err,
		    "INSERT INTO lineage(sandbox_id, recovered_from) SELECT ?,? WHERE "
		    STATE_FENCE_OF_SQL
		    " ON CONFLICT(sandbox_id) DO UPDATE SET recovered_from=excluded.recovered_from",
		    "ss" STATE_FENCE_OF_TYPES, sb->id, b.data, STATE_FENCE_OF_ARGS(f, sb->id));
	if (state_fenced(n->db, sb->id, r, &err) < 0)
		log_warn("sandbox %s: record recovery: %s", sb->id, err.msg);
	pthread_mutex_lock(&sb->mu);
	json_free(sb->recovered_from);
	sb->recovered_from = json_parse(b.data, b.len, &err);
	pthread_mutex_unlock(&sb->mu);
	buf_free(&b);
}

bool sandbox_recover(struct node *n, struct sandbox *sb, const char *cause)
{
	char snap[65], kind[16], why[400];
	_cleanup_free_ char *procs = NULL;
	struct nm_sandbox_spec nspec;
	int chan_fd = -1, r;
	pid_t jail_pid = 0;
	uint64_t t0 = now_us();
	err_t err = { 0 };

	if (!sb->be || !sb->be->rollback || !backend_can(sb->be, BACKEND_CAP_DISK_SNAPSHOT))
		return false;
	if (sb->recovered_ms && wall_ms() - sb->recovered_ms < RECOVER_AGAIN_MS) {
		log_warn("sandbox %s: crashed again %lld ms after a recovery; not recovering",
			 sb->id, (long long)(wall_ms() - sb->recovered_ms));
		return false;
	}
	if (pick_snapshot(n, sb, snap, sizeof(snap), kind, sizeof(kind), &err) < 0)
		return false;

	pthread_mutex_lock(&sb->mu);
	while (sb->lc_busy)
		pthread_cond_wait(&sb->cv, &sb->mu);
	snprintf(why, sizeof(why), "%s; recovering from %s snapshot %s", cause, kind, snap);
	/* running|paused → rolling_back, unless someone else owns the sandbox
	 * by now; lc_busy keeps every other lifecycle step out. */
	r = -EBUSY;
	if (!sb->deleting && sb->chan_closed &&
	    (sb->state == SB_RUNNING || sb->state == SB_PAUSED))
		r = state_transition(n->db, sb->id, &sb->state, SB_ROLLING_BACK, why, 0, &err);
	if (r == 0)
		sb->lc_busy = true;
	pthread_mutex_unlock(&sb->mu);
	if (r < 0)
		return r == -EBUSY;  /* someone else owns it now (delete, rollback) */

	sandbox_jail_spec(sb, &nspec);
	r = sb->be->rollback(&n->bctx, &nspec, snap, &chan_fd, &jail_pid, &err);

	/* The dead guest's channel and processes are gone either way; from a
	 * full snapshot, its processes of that moment carry on. */
	procs = r == 0 ? snapshot_procs(n, snap) : NULL;
	sandbox_gc_retire(sb, "the sandbox crashed", procs);

	if (r == 0) {
		snprintf(why, sizeof(why), "recovered from %s snapshot %s after a crash (%s)", kind,
			 snap, cause);
		r = sandbox_guest_up(n, sb, &nspec, TAKE_FD(chan_fd), jail_pid, why,
				     "guest agent after recovery", &err);
	}
	pthread_mutex_lock(&sb->mu);
	sb->lc_busy = false;
	pthread_cond_broadcast(&sb->cv);
	pthread_mutex_unlock(&sb->mu);
	if (r < 0) {
		char reason[700];
		if (chan_fd >= 0)
			close(chan_fd);
		snprintf(reason, sizeof(reason), "%s; recovery from %s snapshot %s failed: %s", cause,
			 kind, snap, err.msg);
		sandbox_fail(n, sb, reason);
		return true;
	}
	sb->recovered_ms = wall_ms();
	record(n, sb, snap, kind, sb->recovered_ms);
	log_info("sandbox %s: recovered from %s snapshot %s in %.1f ms", sb->id, kind, snap,
		 (now_us() - t0) / 1000.0);
	return true;
}

/* The reaper's TIMER_CHAN_CLOSED: a guest channel closed by itself. */
void sandbox_on_chan_closed(struct node *n, const char *id, const char *cause)
{
	struct sandbox *sb = sandbox_find(n, id, NULL);
	bool fail;

	if (!sb)
		return;
	/* While starting, the create handler sees chan_closed itself; while
	 * deleting, the teardown owns the sandbox. */
	pthread_mutex_lock(&sb->mu);
	fail = (sb->state == SB_RUNNING || sb->state == SB_PAUSED) && !sb->deleting &&
	       sb->chan_closed;
	pthread_mutex_unlock(&sb->mu);
	if (fail && !sandbox_recover(n, sb, cause))
		sandbox_fail(n, sb, cause);
	sandbox_unref(sb);
}
