/* snap.h - the room node/snap: disk and full snapshots and rollback
 * (snapshots.c), the scheduler that takes and prunes them and pauses idle
 * sandboxes (schedule.c, schedule.h; retention.c, retention.h), and crash
 * recovery, a rollback the node asks for itself (recover.c). Above the
 * model, node/life, node/suspend, node/wake and the rooms they use. */
#ifndef AIRLOCK_NODE_SNAP_H
#define AIRLOCK_NODE_SNAP_H

#include "../model/model.h"
#include "schedule.h"

/* snapshots.c: .../snapshots (snap NULL: POST create, GET list) and
 * .../snapshots/{snap} (DELETE); POST .../rollback. 501 when the backend
 * has no disk snapshots. */
void handle_snapshots(struct node *n, struct sandbox *sb, const char *snap, struct http_req *req,
		      struct http_conn *c);
void handle_rollback(struct node *n, struct sandbox *sb, struct http_req *req,
		     struct http_conn *c);
/* The one way a snapshot is made (the API and the scheduler): kind "disk"
 * (anything else -EOPNOTSUPP for now), named name (NULL: its id; -EEXIST
 * when taken), stamped with sched_now(); scheduled marks it for retention.
 * Holds lc_busy while the backend works (-EBUSY naming the state unless
 * running or paused). *out_id (may be NULL; caller owns) gets its id. */
int snapshot_take(struct node *n, struct sandbox *sb, const char *name, const char *kind,
		  bool scheduled, char **out_id, err_t *err);
/* The process table kept with snapshot snap_id (NULL: none, as for every
 * disk snapshot). Caller frees. */
char *snapshot_procs(struct node *n, const char *snap_id);
/* Snapshot ref (id or name) of sb: rows holds one row of SNAP_COLS (id
 * first; caller frees), or -ENOENT naming it. */
int snapshot_find(struct node *n, struct sandbox *sb, const char *ref, struct db_rows *rows,
		  err_t *err);
/* Delete snapshot snap_id of sb: the backend's copy, then the row. */
int snapshot_remove(struct node *n, struct sandbox *sb, const char *snap_id, err_t *err);

/* recover.c: the guest channel of a running or paused sandbox closed by
 * itself (cause): roll it back to its latest full, else disk, snapshot.
 * false when it has none (or the backend cannot): the caller fails it. */
bool sandbox_recover(struct node *n, struct sandbox *sb, const char *cause);
/* The reaper's TIMER_CHAN_CLOSED for sandbox id: recover it, else fail it
 * (unless it is starting, deleting, or no longer closed); cause says why
 * the channel closed ("guest channel closed", or what killed the guest). */
void sandbox_on_chan_closed(struct node *n, const char *id, const char *cause);

/* schedule.c's hooks on the model: ends_at and the policy in the JSON, a
 * loaded row's policy. node_start registers it first, then suspend_feature
 * and proc_feature: the order of their keys in a sandbox's JSON. */
extern const struct sandbox_feature sched_feature;

#endif
