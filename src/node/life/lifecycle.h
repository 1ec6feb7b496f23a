/* lifecycle.h - the room node/life (lifecycle.c): a sandbox's life after
 * its create: pause and the resume step, failure, delete, the TTL, and the
 * node's shutdown. Above the model and the rooms it tears down with
 * (artifacts, net, proc); waking for use (../wake/wake.c), the endpoints
 * (../lifecycle-api.c) and the features that pause, fail or delete are
 * above it. */
#ifndef AIRLOCK_NODE_LIFECYCLE_H
#define AIRLOCK_NODE_LIFECYCLE_H

#include "../model/model.h"

/* Operations on a sandbox after its create (model/state.c
 * decides what is legal; an illegal request fails with -EBUSY naming the
 * current state, an unsupported one with -EOPNOTSUPP). */
int sandbox_pause(struct node *n, struct sandbox *sb, err_t *err);
/* The same with the event's reason (the scheduler: "idle", the TTL: "timeout"). */
int sandbox_pause_why(struct node *n, struct sandbox *sb, const char *why, err_t *err);
/* The backend's pause (to = paused) or resume (to = running), then the
 * move along the table (reason: the event's); sb->mu held, the state
 * checked. wake/wake.c resumes through it. */
int sandbox_lc_step_locked(struct node *n, struct sandbox *sb, enum sb_state to,
			   const char *reason, err_t *err);
/* Tear down and retire (delete) or mark failed. Returns 0 or -errno. */
int sandbox_delete(struct node *n, struct sandbox *sb, const char *reason, err_t *err);
void sandbox_fail(struct node *n, struct sandbox *sb, const char *reason);
/* sb → failed with reason (its row, an events row and sb->error): memory
 * follows even when the row cannot be written. sb is live or stopped. The
 * caller holds sb->mu, or (reconcile) nobody else can reach sb yet. */
void sandbox_mark_failed(struct node *n, struct sandbox *sb, const char *reason);
void sandbox_on_timeout(struct node *n, const char *id);
void sandbox_schedule_timeout(struct node *n, struct sandbox *sb);
void sandbox_stop_all(struct node *n);

#endif
