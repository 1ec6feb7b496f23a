/* quota-check.c - what one sandbox may ask for, and what a tenant may hold.
 *
 * Two kinds of cap, both answered 422:
 *   - the node's maxima per sandbox (config max_sandbox_*): a create whose
 *     limits ask for more is `invalid_argument`, before anything is taken;
 *   - the tenant's quota (tenant_quotas, set by an admin) and the node's
 *     max_snapshots per sandbox: `quota_exceeded`.
 * Usage is counted from the rows (src/db/tenant-quota.h), inside the
 * transaction that inserts the new row (a sandbox's, a snapshot's), so
 * concurrent creates and forks cannot all pass one check and overshoot.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "../../db/tenant-quota.h"
#include "quota.h"

int quota_check_limits(const struct node *n, const struct nm_limits *l, char *msg, size_t sz)
{
	const struct node_config *c = n->cfg;

	if (c->max_sandbox_pids && l->pids > c->max_sandbox_pids)
		snprintf(msg, sz, "limits.pids %u is over the node's maximum per sandbox "
			 "(max_sandbox_pids = %u)", l->pids, c->max_sandbox_pids);
	else if (c->max_sandbox_memory_mb && l->memory_mb > c->max_sandbox_memory_mb)
		snprintf(msg, sz, "limits.memory_mb %u is over the node's maximum per sandbox "
			 "(max_sandbox_memory_mb = %u)", l->memory_mb, c->max_sandbox_memory_mb);
	else if (c->max_sandbox_cpus && l->cpu_millis > (uint64_t)c->max_sandbox_cpus * 1000)
		snprintf(msg, sz, "limits.cpus %.3g is over the node's maximum per sandbox "
			 "(max_sandbox_cpus = %u)", l->cpu_millis / 1000.0, c->max_sandbox_cpus);
	else if (c->max_sandbox_disk_mb && l->disk_mb > c->max_sandbox_disk_mb)
		snprintf(msg, sz, "limits.disk_mb %u is over the node's maximum per sandbox "
			 "(max_sandbox_disk_mb = %u)", l->disk_mb, c->max_sandbox_disk_mb);
	else
		return 0;
	return -1;
}

int quota_admit_sandbox(struct node *n, const char *tenant, const struct nm_limits *l,
			err_t *err)
{
	struct tenant_usage use, add = { .sandboxes = 1, .memory_mb = l->memory_mb,
					 .cpu_millis = l->cpu_millis, .disk_mb = l->disk_mb };
	struct tenant_quota q;
	struct db_rows rows;
	bool pg = strcmp(db_driver_name(n->db), "postgres") == 0;
	int r;

	/* The tenant must still exist (DELETE /v1/tenants/{t} may have come
	 * while this request was on its way), and must not go before this
	 * transaction commits: PostgreSQL holds its row (the delete takes it
	 * FOR UPDATE first, api/admin.c); SQLite's transactions are serial. */
	r = db_query(n->db, &rows, err,
		     pg ? "SELECT 1 FROM tenants WHERE id = ? FOR KEY SHARE"
			: "SELECT 1 FROM tenants WHERE id = ?",
		     "s", tenant);
	if (r < 0)
		return r;
	r = rows.n_rows;
	db_rows_free(&rows);
	if (r == 0)
		return err_set(err, EACCES, "tenant `%s` no longer exists", tenant);
	if ((r = tenant_quota_get(n->db, tenant, &q, err)) < 0)
		return r;
	/* No quota on what this create adds: nothing to count (the count is
	 * O(the tenant's sandboxes), bench/density). */
	if (!tenant_quota_binds(&q, &add))
		return 0;
	if ((r = tenant_usage_get(n->db, tenant, &use, err)) < 0)
		return r;
	return tenant_quota_check(&q, &use, &add, err);
}

int quota_admit_snapshot(struct node *n, struct sandbox *sb, bool scheduled, bool full,
			 int64_t size, err_t *err)
{
	struct tenant_usage use, add = { 0 };
	struct tenant_quota q;
	struct db_rows rows;
	uint64_t mine, full_bytes, disk = (uint64_t)sb->limits.disk_mb << 20;
	int r;

	/* This sandbox: its own snapshots of the same origin (a client's, or
	 * the scheduler's: each has max_snapshots), and its full snapshots'
	 * bytes against its disk quota (memory and device state live beside
	 * the subvolume, outside its qgroup). */
	r = db_query(n->db, &rows, err,
		     "SELECT count(CASE WHEN scheduled = ? THEN 1 END),"
		     " COALESCE(SUM(CASE WHEN kind = 'full' THEN size_bytes END), 0)"
		     " FROM snapshots WHERE sandbox_id=?",
		     "is", (int64_t)scheduled, sb->id);
	if (r < 0)
		return r;
	mine = (uint64_t)db_cell_int(&rows, 0, 0);
	full_bytes = (uint64_t)db_cell_int(&rows, 0, 1);
	db_rows_free(&rows);
	/* size < 0: before the snapshot (the check counts it as one more);
	 * else after it, its row not yet in: its own size added. */
	if (n->cfg->max_snapshots && mine + 1 > n->cfg->max_snapshots)
		return err_set(err, EDQUOT,
			       "sandbox %s has %" PRIu64 " %s snapshots: the node's max_snapshots "
			       "is %u per sandbox; delete one first",
			       sb->id, mine, scheduled ? "scheduled" : "client",
			       n->cfg->max_snapshots);
	if (full && disk && full_bytes + (size > 0 ? (uint64_t)size : 1) > disk)
		return err_set(err, EDQUOT,
			       "full snapshots of sandbox %s would hold %" PRIu64 " MiB, over its "
			       "disk quota (limits.disk_mb = %u); delete one first",
			       sb->id, (full_bytes + (size > 0 ? (uint64_t)size : 0)) >> 20,
			       sb->limits.disk_mb);
	add.snapshots = scheduled ? 0 : 1;
	add.snapshot_bytes = size > 0 ? (uint64_t)size : 1;
	if ((r = tenant_quota_get(n->db, sb->tenant, &q, err)) < 0)
		return r;
	if (!tenant_quota_binds(&q, &add))
		return 0;
	if ((r = tenant_usage_get(n->db, sb->tenant, &use, err)) < 0)
		return r;
	return tenant_quota_check(&q, &use, &add, err);
}

int quota_admit_suspend(struct node *n, struct sandbox *sb, uint64_t bytes, err_t *err)
{
	struct tenant_usage use, add = { .snapshot_bytes = bytes ? bytes : 1 };
	struct tenant_quota q;
	uint64_t mine;
	int r;

	if ((r = tenant_quota_get(n->db, sb->tenant, &q, err)) < 0)
		return r;
	if (!tenant_quota_binds(&q, &add))
		return 0;
	if ((r = tenant_usage_get(n->db, sb->tenant, &use, err)) < 0 ||
	    (r = sandbox_stored_bytes(n->db, sb->id, sb->limits.disk_mb, &mine, err)) < 0)
		return r;
	/* What this sandbox holds now goes when it is suspended: its local
	 * snapshots with its subvolume, a stale suspension with the new one. */
	use.snapshot_bytes -= mine < use.snapshot_bytes ? mine : use.snapshot_bytes;
	return tenant_quota_check(&q, &use, &add, err);
}
