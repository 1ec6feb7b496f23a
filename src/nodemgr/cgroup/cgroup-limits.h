/* cgroup-limits.h - how often a sandbox's cgroup hit its limits: the
 * counters the kernel keeps per cgroup, read for the node's limit events.
 *
 *   v2: memory.events  oom_kill (processes the OOM killer ended), oom (times
 *                      the cgroup ran out of memory), max (charges that hit
 *                      memory.max and had to reclaim)
 *       pids.events    max (forks refused at pids.max)
 *   v1: memory.oom_control  oom_kill (kernel 4.13+), under_oom (now)
 *       memory.failcnt      charges that hit the limit (as v2's max), plus
 *       memory.memsw.failcnt  those of memory+swap (charged first)
 *       pids.events         max
 *
 * Every counter only grows for the life of the cgroup; gen (the inode of
 * its directory, the memory one on v1) changes when the cgroup is made
 * again (a rollback or restore), so a reader can tell a reset from a drop.
 * The kernel writes these files; nothing in them comes from the sandbox
 * but how often it hit a limit. */
#ifndef AIRLOCK_NM_CGROUP_LIMITS_H
#define AIRLOCK_NM_CGROUP_LIMITS_H

#include <stdbool.h>
#include <stdint.h>

#include "cgroup.h"

struct cgroup_hits {
	uint64_t oom_kill;   /* processes the kernel's OOM killer ended */
	uint64_t oom;        /* v2: times it ran out of memory; v1: 0 */
	uint64_t mem_max;    /* v2 memory.events max; v1 the failcnts (which 6.18
			      * leaves at 0 once memsw is limited) */
	uint64_t pids_max;   /* forks refused at pids.max; 0 without pids.events */
	uint64_t gen;        /* inode of the cgroup's (v1: memory) directory */
	bool under_oom;      /* v1: the cgroup is out of memory now */
};

/* The readers, on one cgroup's directory (v2) or its memory and pids
 * directories (v1): the unit test feeds them fixture files laid out as the
 * kernel does. -ENOENT (err says which) when the memory file is missing:
 * the cgroup is gone. A missing pids.events reads as 0. */
int cgroup_hits_v2_dir(const char *dir, struct cgroup_hits *out, err_t *err);
int cgroup_hits_v1_dirs(const char *memory_dir, const char *pids_dir, struct cgroup_hits *out,
			err_t *err);
/* The same for airlock/<id> (id validated by the caller). */
int cgroup_hits(const struct cgroups *cg, const char *id, struct cgroup_hits *out, err_t *err);

#endif
