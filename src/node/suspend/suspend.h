/* suspend.h - the room node/suspend: a sandbox suspended to the object
 * store and restored from it (suspend.c, restore.c), and taken over from
 * another node (move.c). Above the model, node/life and the rooms it moves
 * artifacts, addresses, processes and templates with; the endpoints are
 * ../lifecycle-api.c, the restore on use ../wake/wake.c. */
#ifndef AIRLOCK_NODE_SUSPEND_H
#define AIRLOCK_NODE_SUSPEND_H

#include "../model/model.h"

/* Suspend to the object store (suspend.c), restore from it (restore.c).
 * sandbox_suspend
 * and sandbox_restore fail with -EBUSY naming the state, -EOPNOTSUPP when
 * the backend cannot, -EHOSTUNREACH when the store cannot be used (503),
 * -EBADMSG when an artifact does not match its manifest (the message
 * names it). With c (the request that asked), the answer (200, the
 * sandbox) goes as soon as the sandbox is suspended and restorable, or
 * running again; the rest (a suspend frees the node's jail, subvolume and
 * address; a restore drops its snapshot and objects) follows on the
 * caller's thread. A suspend holds the sandbox's lifecycle until then. */
const char *sandbox_suspend_kind(const struct sandbox *sb);
/* A suspend's why that begins so seals on a revocation: not refused by the
 * tenant's snapshot_mb, which every other suspend counts toward (its
 * objects' bytes; 422 quota_exceeded before any upload when over). */
#define SUSPEND_WHY_REVOKED "key_revoked"
int sandbox_suspend(struct node *n, struct sandbox *sb, const char *why, struct http_conn *c,
		    err_t *err);
int sandbox_restore(struct node *n, struct sandbox *sb, const char *why, struct http_conn *c,
		    err_t *err);
/* The backend's step before a memory snapshot (vm: the guest drops its
 * page cache and zeroes its free pages), on a running sandbox; best
 * effort. Before a suspend, and before the idle pause that the second
 * idle tier will suspend (a paused guest cannot do it). */
void suspend_reclaim(struct node *n, struct sandbox *sb);
/* "suspend", and when suspended "snapshot_id" and "suspended_bytes". */
void suspend_render_locked(struct jw *w, struct sandbox *sb);
/* A loaded row's suspensions row into sb (reconcile). */
void suspend_load(struct node *n, struct sandbox *sb);
/* At start: a suspending row goes back to paused (susp_resume says whether
 * it ran), a restoring one back to suspended. */
void suspend_reconcile(struct node *n, struct sandbox *sb);
/* move.c: take over a suspended sandbox whose row names another node
 * (lost, down, or the request asked for this one): the row's node is
 * swapped to this one (compare-and-set), and it is loaded here, suspended.
 * A new reference, or NULL with err (-ENOENT: no such suspended sandbox of
 * tenant; -EBUSY: another node took it first; -EOPNOTSUPP: this node has
 * no object store or not the sandbox's backend). */
struct sandbox *suspend_claim(struct node *n, const char *id, const char *tenant, err_t *err);
/* Its hooks on the model: the suspension's keys of the JSON. */
extern const struct sandbox_feature suspend_feature;

#endif
