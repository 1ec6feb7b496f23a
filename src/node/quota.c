/* quota.c - what one sandbox may ask for, and what a tenant may hold.
 *
 * Two kinds of cap, both answered 422:
 *   - the node's maxima per sandbox (config max_sandbox_*): a create whose
 *     limits ask for more is `invalid_argument`, before anything is taken;
 *   - the tenant's quota (tenant_quotas, set by an admin): `quota_exceeded`.
 * Usage is counted from the rows (src/db/tenant-quota.h), inside the
 * transaction that inserts the new sandbox row, so concurrent creates and
 * forks cannot all pass one check and overshoot.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "../db/tenant-quota.h"
#include "node-internal.h"

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
	int r;

	if ((r = tenant_quota_get(n->db, tenant, &q, err)) < 0 ||
	    (r = tenant_usage_get(n->db, tenant, &use, err)) < 0)
		return r;
	return tenant_quota_check(&q, &use, &add, err);
}
