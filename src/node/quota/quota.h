/* quota.h - the room node/quota (quota-check.c): the node's maxima per
 * sandbox and the tenants' quotas, checked before a sandbox, a snapshot or a
 * suspend is admitted. */
#ifndef AIRLOCK_NODE_QUOTA_H
#define AIRLOCK_NODE_QUOTA_H

#include "../model/model.h"

/* Limits over the node's maxima per sandbox (config max_sandbox_*): -1
 * with msg naming the limit and the maximum; else 0. */
int quota_check_limits(const struct node *n, const struct nm_limits *l, char *msg, size_t sz);
/* May tenant hold one more sandbox with limits l? 0, or -EDQUOT naming the
 * quota. Counts the rows: call it in the transaction that inserts the row. */
int quota_admit_sandbox(struct node *n, const char *tenant, const struct nm_limits *l,
			err_t *err);
/* May sb hold one more snapshot (scheduled: the scheduler's)? size < 0
 * before it is taken, else its size (its row not in yet). Checks
 * max_snapshots, full snapshots' bytes against sb's disk_mb, and the
 * tenant's snapshots and snapshot_mb. 0, or -EDQUOT naming the limit. */
int quota_admit_snapshot(struct node *n, struct sandbox *sb, bool scheduled, bool full,
			 int64_t size, err_t *err);
/* May sb be suspended into the object store with `bytes` there (0: not
 * known yet, counted as 1: refused once the tenant's snapshot_mb is used
 * up)? Counts toward snapshot_mb what the tenant holds, without what this
 * sandbox holds now (its suspend drops it). 0, or -EDQUOT naming it; call it
 * inside the transaction that writes the suspensions row. */
int quota_admit_suspend(struct node *n, struct sandbox *sb, uint64_t bytes, err_t *err);

#endif
