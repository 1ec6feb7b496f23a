/* The lifecycle table and the one function that moves a sandbox along it
 * (state_transition), with its in-memory half (state_set). */
#include "state.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../../lib/log.h"
#include "../../lib/util.h"

static const char *const names[SB__COUNT] = {
	[SB_PENDING] = "pending",   [SB_STARTING] = "starting", [SB_RUNNING] = "running",
	[SB_PAUSED] = "paused",     [SB_STOPPING] = "stopping", [SB_STOPPED] = "stopped",   [SB_FAILED] = "failed",
	[SB_DELETED] = "deleted",   [SB_ROLLING_BACK] = "rolling_back",
	[SB_SUSPENDING] = "suspending", [SB_SUSPENDED] = "suspended", [SB_RESTORING] = "restoring",
};

/* allowed[from][to]. Why each edge exists:
 *   pending→starting    the row is written; the backend is asked to build the jail
 *   starting→running    the guest agent said READY on its channel
 *   running→stopping    a delete (client, timeout) began tearing the jail down
 *   running→paused      pause: the backend froze the jail (ns: cgroup freezer;
 *                       vm: QMP stop). Processes, memory and the guest
 *                       channel stay; nothing in the jail gets CPU
 *   paused→running      resume: asked by the client, or implied by a connect,
 *                       exec, files or process call (the reason says which)
 *   paused→stopping     a delete of a paused sandbox; the backend's destroy
 *                       kills a frozen jail as well as a running one
 *   running→rolling_back, paused→rolling_back
 *                       rollback to a disk snapshot: the backend kills every
 *                       process, swaps the disk for a writable clone of the
 *                       snapshot and starts a fresh guest (same id, limits;
 *                       vm: a fresh QEMU cold-boots the guest kernel); to a
 *                       full snapshot (vm): the same, and the fresh QEMU
 *                       restores the snapshot's memory and device state.
 *                       Also crash recovery: the guest channel closed by
 *                       itself (QEMU or the jail's init died) and the sandbox
 *                       has a snapshot (its latest full one, else its latest
 *                       disk one); the reason says "recovering from ..."
 *   rolling_back→running the new guest said READY
 *   stopping→stopped    the backend destroyed the jail; nothing runs any more
 *   stopped→deleted     the row is retired (kept for idempotency and events)
 *   running→suspending, paused→suspending
 *                       suspend: the jail is paused and its artifacts (disk
 *                       delta; vm: memory pages and device state) are made
 *                       and uploaded; the sandbox stays whole on this node
 *   suspending→running, suspending→paused
 *                       the suspend failed (store unreachable, a step
 *                       refused) or was cut off by a restart with the jail
 *                       still there: back to the state it had before
 *   suspending→suspended every artifact and then the manifest are in the
 *                       store and verified (size + SHA-256); recorded in the
 *                       same transaction as the restorable snapshot's row.
 *                       The jail, subvolume and slot are freed after it
 *   suspended→restoring  restore (resume, or a request that restores
 *                       transparently): download, verify, rebuild, start
 *   restoring→running    the restored guest said READY
 *   restoring→suspended  the restore failed (a bad artifact, no space, ...):
 *                       whatever it built is removed; the objects are kept,
 *                       so a later restore may succeed
 *   suspended→deleted    delete: nothing runs here; the objects are removed
 *   X→failed            for every live X: a step failed; the reason says which
 *   failed→deleted      a failed sandbox was already torn down when it failed
 *                       (or its destroy is retried by the delete), so the
 *                       owner may retire it directly
 * deleted is terminal; failed only leads to deleted. */
static const bool allowed[SB__COUNT][SB__COUNT] = {
	[SB_PENDING] = { [SB_STARTING] = true, [SB_FAILED] = true },
	[SB_STARTING] = { [SB_RUNNING] = true, [SB_FAILED] = true },
	[SB_RUNNING] = { [SB_PAUSED] = true, [SB_STOPPING] = true, [SB_FAILED] = true,
			 [SB_ROLLING_BACK] = true, [SB_SUSPENDING] = true },
	[SB_PAUSED] = { [SB_RUNNING] = true, [SB_STOPPING] = true, [SB_FAILED] = true,
			[SB_ROLLING_BACK] = true, [SB_SUSPENDING] = true },
	[SB_SUSPENDING] = { [SB_RUNNING] = true, [SB_PAUSED] = true, [SB_SUSPENDED] = true,
			    [SB_FAILED] = true },
	[SB_SUSPENDED] = { [SB_RESTORING] = true, [SB_DELETED] = true },
	[SB_RESTORING] = { [SB_RUNNING] = true, [SB_SUSPENDED] = true, [SB_FAILED] = true },
	[SB_ROLLING_BACK] = { [SB_RUNNING] = true, [SB_FAILED] = true },
	[SB_STOPPING] = { [SB_STOPPED] = true, [SB_FAILED] = true },
	[SB_STOPPED] = { [SB_DELETED] = true, [SB_FAILED] = true },
	[SB_FAILED] = { [SB_DELETED] = true },
	[SB_DELETED] = { 0 },
};

/* Edges a sandbox takes in memory only (state_set), never in a row, so they
 * are not in the table that state_transition writes:
 *   pending→deleted, starting→deleted
 *                       a create or fork whose first transaction (the row's
 *                       insert with pending→starting) rolled back: there is
 *                       no row to retire. The sandbox leaves the map, and
 *                       deleted wakes whoever waits on its create (a repeated
 *                       Idempotency-Key) or would tear it down.
 *   suspended→suspending
 *                       a suspend's last transaction (the restorable row
 *                       and suspending→suspended) rolled back after the
 *                       transition inside it moved memory: the row still
 *                       says suspending, and memory goes back to it; the
 *                       suspend then fails as any other (→ running|paused). */
static const bool unrecorded[SB__COUNT][SB__COUNT] = {
	[SB_PENDING] = { [SB_DELETED] = true },
	[SB_STARTING] = { [SB_DELETED] = true },
	[SB_SUSPENDED] = { [SB_SUSPENDING] = true },
};

const char *state_name(enum sb_state s)
{
	if ((unsigned)s >= SB__COUNT)
		return "unknown";
	return names[s];
}

int state_parse(const char *name)
{
	if (!name)
		return -1;
	for (int i = 0; i < SB__COUNT; i++)
		if (strcmp(names[i], name) == 0)
			return i;
	return -1;
}

bool state_allowed(enum sb_state from, enum sb_state to)
{
	if ((unsigned)from >= SB__COUNT || (unsigned)to >= SB__COUNT)
		return false;
	return allowed[from][to];
}

bool state_is_live(enum sb_state s)
{
	return s == SB_PENDING || s == SB_STARTING || s == SB_RUNNING || s == SB_PAUSED ||
	       s == SB_STOPPING || s == SB_ROLLING_BACK || s == SB_SUSPENDING ||
	       s == SB_RESTORING;
}

/* Written once by state_set_fence at registration, before the threads that
 * make transitions start (the reaper, the server), read by them after. */
static struct {
	char node[128];
	int64_t epoch;
} fence;

void state_set_fence(const char *node, int64_t epoch)
{
	snprintf(fence.node, sizeof(fence.node), "%s", node ? node : "");
	__atomic_store_n(&fence.epoch, epoch, __ATOMIC_RELEASE);
}

struct state_fence state_fence(void)
{
	return (struct state_fence){ .node = fence.node,
				     .epoch = __atomic_load_n(&fence.epoch, __ATOMIC_ACQUIRE) };
}

/* The row's write carries the fence in the same statement, so a node marked
 * lost (or superseded by a newer process under its name) between a check
 * and its write cannot slip one through: the EXISTS is evaluated against
 * the nodes row as the UPDATE sees it, and the api's `lost`
 * (api/placement.c) and a new registration change that row. */
static int record(struct db *db, const char *id, enum sb_state from, enum sb_state to,
		  const char *reason, err_t *err)
{
	int64_t now = wall_ms();
	struct state_fence f = state_fence();
	int64_t epoch = f.epoch;
	int r;

	if (to == SB_FAILED)
		r = db_exec(db, err,
			    "UPDATE sandboxes SET observed=?, error=?, updated_at=? WHERE id=?"
			    STATE_FENCE_SQL,
			    "ssis" STATE_FENCE_TYPES, names[to], reason ? reason : "failed", now, id,
			    STATE_FENCE_ARGS(f));
	else
		r = db_exec(db, err,
			    "UPDATE sandboxes SET observed=?, updated_at=? WHERE id=?" STATE_FENCE_SQL,
			    "sis" STATE_FENCE_TYPES, names[to], now, id, STATE_FENCE_ARGS(f));
	if (r < 0)
		return r;
	if (r == 0 && epoch)
		return err_set(err, ESTALE,
			       "sandbox %s: row not written: it names another node, or node %s"
			       " (epoch %lld) was marked lost or superseded",
			       id, fence.node, (long long)epoch);
	if (r == 0)
		return err_set(err, ENOENT, "sandbox %s has no row", id);
	return db_exec(db, err,
		       "INSERT INTO events(sandbox_id, at, from_state, to_state, reason)"
		       " VALUES(?,?,?,?,?)",
		       "sisss", id, now, names[from], names[to], reason);
}

static state_setter setter;

void state_set_setter(state_setter fn)
{
	__atomic_store_n(&setter, fn, __ATOMIC_RELEASE);
}

static void assign(enum sb_state *cur, enum sb_state to)
{
	state_setter fn = __atomic_load_n(&setter, __ATOMIC_ACQUIRE);

	if (fn)
		fn(cur, to);
	else
		*cur = to;
}

int state_transition(struct db *db, const char *id, enum sb_state *cur, enum sb_state to,
		     const char *reason, unsigned flags, err_t *err)
{
	enum sb_state from = *cur;
	int r;

	if (!state_allowed(from, to))
		return err_set(err, EBUSY, "sandbox %s is %s; cannot become %s", id,
			       state_name(from), state_name(to));
	if (db) {
		if (flags & STATE_IN_TX) {
			r = record(db, id, from, to, reason, err);
		} else {
			r = db_tx_begin(db, err);
			if (r < 0)
				return r;
			r = record(db, id, from, to, reason, err);
			if (r < 0)
				db_tx_rollback(db);
			else
				r = db_tx_commit(db, err);
		}
		if (r < 0)
			return err_wrap(err, "sandbox %s: %s -> %s", id, state_name(from),
					state_name(to));
	}
	assign(cur, to);
	return 0;
}

static bool unrecorded_allowed(enum sb_state from, enum sb_state to)
{
	return (unsigned)from < SB__COUNT && (unsigned)to < SB__COUNT && unrecorded[from][to];
}

int state_set(const char *id, enum sb_state *cur, enum sb_state to)
{
	enum sb_state from = *cur;

	if (!state_allowed(from, to) && !unrecorded_allowed(from, to)) {
		log_err("sandbox %s is %s; cannot become %s (in memory)", id, state_name(from),
			state_name(to));
		return -EBUSY;
	}
	assign(cur, to);
	return 0;
}

int state_fenced(struct db *db, const char *id, int r, err_t *err)
{
	struct state_fence f = state_fence();
	struct db_rows rows;
	bool holds;

	if (r != 0 || !f.epoch)
		return r;
	if (id)
		r = db_query(db, &rows, err, "SELECT 1 WHERE " STATE_FENCE_OF_SQL,
			     STATE_FENCE_OF_TYPES, STATE_FENCE_OF_ARGS(f, id));
	else
		r = db_query(db, &rows, err, "SELECT 1 WHERE " STATE_FENCE_SELF_SQL,
			     STATE_FENCE_SELF_TYPES, STATE_FENCE_SELF_ARGS(f));
	if (r < 0)
		return r;
	holds = rows.n_rows > 0;
	db_rows_free(&rows);
	if (holds)
		return 0;
	if (!id)
		return err_set(err, ESTALE,
			       "row not written: node %s (epoch %lld) was marked lost or superseded",
			       f.node, (long long)f.epoch);
	return err_set(err, ESTALE,
		       "sandbox %s: row not written: it names another node, or node %s"
		       " (epoch %lld) was marked lost or superseded",
		       id, f.node, (long long)f.epoch);
}

/* Fenced like a state change: a stale process appends no history. */
int state_event(struct db *db, const char *id, enum sb_state s, const char *reason, err_t *err)
{
	struct state_fence f = state_fence();
	int r = db_exec(db, err,
			"INSERT INTO events(sandbox_id, at, from_state, to_state, reason)"
			" SELECT ?,?,?,?,? WHERE " STATE_FENCE_OF_SQL,
			"sisss" STATE_FENCE_OF_TYPES, id, wall_ms(), names[s], names[s], reason,
			STATE_FENCE_OF_ARGS(f, id));

	r = state_fenced(db, id, r, err);
	return r < 0 ? r : 0;
}
