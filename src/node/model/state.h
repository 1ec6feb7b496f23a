/* state.h - the sandbox lifecycle: THE one table of states and transitions.
 *
 *   pending → starting → running → stopping → stopped → deleted
 *                        running ⇄ paused;  paused → stopping
 *                        running, paused → rolling_back → running
 *                        running, paused → suspending → suspended
 *                        suspending → running, paused   (the suspend failed)
 *                        suspended → restoring → running
 *                        restoring → suspended          (the restore failed)
 *                        suspended → deleted
 *   any live state → failed (with a reason);  failed → deleted
 *
 * Every change of a sandbox's observed state goes through state_transition(),
 * which checks the table, writes the new observed state (and the error text
 * when entering failed) and appends an `events` row with timestamp and reason.
 * An illegal transition changes nothing and fails with -EBUSY ("conflict"),
 * naming the current state; the HTTP layer answers 409.
 *
 * Where the row cannot follow (its write failed after the jail changed, or
 * the sandbox never got a row, or a transaction rolled back after its
 * transition moved memory), memory alone moves, through state_set(),
 * which checks the same table. The node sets a state without an edge in one
 * place only: a sandbox's start (pending, or its row's state when loaded).
 *
 * Depends only on lib/ and db/, so unit tests link it alone.
 */
#ifndef AIRLOCK_NODE_STATE_H
#define AIRLOCK_NODE_STATE_H

#include <stdbool.h>

#include "../../db/db.h"
#include "../../lib/err.h"

enum sb_state {
	SB_PENDING = 0,
	SB_STARTING,
	SB_RUNNING,
	SB_PAUSED,      /* vCPUs stopped / cgroup frozen; memory and channel kept */
	SB_STOPPING,
	SB_STOPPED,
	SB_FAILED,
	SB_DELETED,
	SB_ROLLING_BACK, /* rollback: jail killed, disk swapped, guest restarting */
	SB_SUSPENDING,  /* paused, artifacts being made and uploaded; still whole here */
	SB_SUSPENDED,   /* only in the object store: no jail, subvolume or slot here */
	SB_RESTORING,   /* artifacts being downloaded, the disk rebuilt, a jail started */
	SB__COUNT
};

const char *state_name(enum sb_state s);
/* Returns -1 for an unknown name. */
int state_parse(const char *name);
/* Is from → to in the table? */
bool state_allowed(enum sb_state from, enum sb_state to);
/* A live state is one that may hold node resources (a jail, a channel). */
bool state_is_live(enum sb_state s);

/* Flags for state_transition. */
#define STATE_IN_TX 1u  /* the caller holds a transaction (db_tx_begin) */

/* Move sandbox `id` from *cur to `to`. Checks the table; on success writes
 * sandboxes.observed (+ error when `to` is failed, + updated_at) and an
 * events row in one transaction (or in the caller's, with STATE_IN_TX), then
 * sets *cur = to. reason is borrowed and may be NULL. db may be NULL, which
 * checks and updates *cur only (used by tests and by in-memory-only paths).
 * Errors: -EBUSY for an illegal transition (*cur unchanged), or the db error. */
int state_transition(struct db *db, const char *id, enum sb_state *cur, enum sb_state to,
		     const char *reason, unsigned flags, err_t *err);

/* The in-memory half of a transition, for when the row cannot follow: the
 * jail did change but the row's write failed (memory stays honest; the next
 * start reconciles the row), or the sandbox has no row at all. Checks the
 * table, plus the edges only memory takes (state.c: a create whose first
 * write rolled back goes pending or starting → deleted). An edge it forbids
 * changes nothing, is logged (id names the sandbox) and fails with -EBUSY;
 * otherwise sets *cur = to and returns 0. */
int state_set(const char *id, enum sb_state *cur, enum sb_state to);

/* Who assigns *cur for state_transition and state_set (NULL: plain
 * `*cur = to`). The node sets it once at start to keep its per-state counts
 * of the sandboxes in its map (sandbox.c), so a create reads how many are
 * live in O(1) instead of visiting every sandbox. */
typedef void (*state_setter)(enum sb_state *cur, enum sb_state to);
void state_set_setter(state_setter fn);

/* The fence on every write a node makes to its sandboxes' rows. Once set,
 * a write lands only while the row names `node` and the nodes table still
 * holds `node` at `epoch` and not lost (the epoch this process registered
 * with, cluster/heartbeat.c). A write that misses changes nothing (0 rows;
 * state_transition then fails with -ESTALE): the sandbox moved to another
 * node, or this process was marked lost or superseded and is about to
 * exit. Set once at registration, before any thread that writes starts;
 * unset (epoch 0: tests, tools) the predicate is true. node is copied. */
void state_set_fence(const char *node, int64_t epoch);
struct state_fence {
	const char *node;    /* borrowed: lives as long as the process */
	int64_t epoch;       /* 0: no fence */
};
struct state_fence state_fence(void);
/* The one text of the fence's test on the nodes row: this node at its
 * epoch, not lost. Its arguments: node, epoch. */
#define STATE_FENCE_NODE_SQL \
	"EXISTS(SELECT 1 FROM nodes WHERE name=? AND generation=? AND state<>'lost')"
/* Append STATE_FENCE_SQL to an UPDATE of sandboxes (after its own WHERE),
 * its types to the statement's, and STATE_FENCE_ARGS(f) to its arguments. */
#define STATE_FENCE_SQL " AND (?=0 OR (node=? AND " STATE_FENCE_NODE_SQL "))"
#define STATE_FENCE_TYPES "issi"
#define STATE_FENCE_ARGS(f) (f).epoch, (f).node, (f).node, (f).epoch
/* The same fence for a row of another table about one sandbox (snapshots,
 * suspensions, events, lineage, data_keys): a condition, true while the
 * sandbox's row names this node and the nodes row holds it at its epoch.
 * An UPDATE or DELETE appends " AND " STATE_FENCE_OF_SQL; an INSERT is
 * written `INSERT ... SELECT ?,?.. WHERE " STATE_FENCE_OF_SQL`, so the
 * check and the write are one statement. Types STATE_FENCE_OF_TYPES,
 * arguments STATE_FENCE_OF_ARGS(f, sandbox_id). Then state_fenced(). */
#define STATE_FENCE_OF_SQL \
	"(?=0 OR EXISTS(SELECT 1 FROM sandboxes WHERE id=? AND node=? AND " STATE_FENCE_NODE_SQL "))"
#define STATE_FENCE_OF_TYPES "isssi"
#define STATE_FENCE_OF_ARGS(f, id) (f).epoch, (id), (f).node, (f).node, (f).epoch
/* The fence for a row that is the node's own rather than a sandbox's (its
 * templates, keyed by node=<me>): true while the nodes row holds this node
 * at its epoch, not lost. Used as STATE_FENCE_OF_SQL is. */
#define STATE_FENCE_SELF_SQL "(?=0 OR " STATE_FENCE_NODE_SQL ")"
#define STATE_FENCE_SELF_TYPES "isi"
#define STATE_FENCE_SELF_ARGS(f) (f).epoch, (f).node, (f).epoch
/* The result of such a write, r what db_exec returned: an error or a count
 * of rows as is; no row while the fence is set is -ESTALE (err says so)
 * when the fence does not hold for sandbox id (id NULL: for the node's own
 * rows), 0 when it does (a DELETE that found nothing to delete). The write
 * itself was already fenced; this only tells a miss from nothing to do, so
 * that callers fail as a state write's miss does. */
int state_fenced(struct db *db, const char *id, int r, err_t *err);

/* Append an events row without changing state (e.g. "re-adopted after
 * restart"). from and to are both `s`. */
int state_event(struct db *db, const char *id, enum sb_state s, const char *reason, err_t *err);

#endif
