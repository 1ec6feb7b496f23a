/* quota.c - what one sandbox may ask for: the node's maxima per sandbox
 * (config max_sandbox_*). A create whose limits ask for more is 422
 * `invalid_argument`, before anything is taken. */
#include <stdio.h>

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
