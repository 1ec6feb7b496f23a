/* cgroup.h - per-sandbox cgroups, v1 or v2 (detected once at startup).
 *
 *   v1: /sys/fs/cgroup/{memory,cpu,pids,freezer}/airlock/<id>
 *   v2: /sys/fs/cgroup/airlock/<id>   (memory, cpu, pids enabled below airlock/)
 *   v2 under a systemd unit with Delegate=yes (cgroup_unit_path):
 *       <unit>/daemons                the unit's own processes (up, its roles)
 *       <unit>/airlock/<id>           the sandboxes, counted and killed with the unit
 * ("airlock" is the parent name nodemgr is given.)
 *
 * A cgroup is never renamed. cgroup v2 refuses rename(2) of a cgroup
 * directory (kernfs has no rename for it: EPERM, also on a hybrid host's
 * bare /sys/fs/cgroup/unified), so a warm jail or QEMU becomes sandbox <id>
 * by cgroup_move: a fresh airlock/<id> with the request's limits, the
 * processes written into it, the warm cgroup removed. On v1, where rename
 * works and costs less on the create's path (docs/DESIGN.md, "Warm takes
 * move processes"), cgroup_move renames. What the warm-up charged on v2
 * (memory, CPU time) stays with the parent, not the sandbox: the kernel
 * moves no charges with a task.
 *
 * Ids reaching this module are validated by the caller ([a-z0-9-]{1,64}). */
#ifndef AIRLOCK_NM_CGROUP_H
#define AIRLOCK_NM_CGROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../../lib/err.h"

struct cgroup_limits {
	uint64_t memory_bytes;  /* 0 = none */
	uint32_t cpu_millis;    /* 1000 = one CPU; 0 = none */
	uint32_t pids;          /* 0 = none */
};

struct cgroups {
	bool v2;
	bool v1_cpuacct;        /* v1: cpuacct is a hierarchy of its own */
	char root[512];         /* /sys/fs/cgroup, or the unit's cgroup under systemd */
	char parent[64];        /* "airlock" */
};

/* Detect the mode and create the parents (parent NULL = "airlock"). */
int cgroup_init(struct cgroups *cg, const char *parent, err_t *err);
const char *cgroup_mode(const struct cgroups *cg);   /* "v1" / "v2" */
/* pids.max of the parent: every sandbox, warm jail and build together.
 * Each sandbox has its own cap (limits.pids), but they all take from the
 * host's kernel.pid_max; max 0 = three quarters of it, so that sandboxes
 * together can never leave the host unable to fork. *out (may be NULL)
 * gets the value written. */
int cgroup_set_parent_pids(const struct cgroups *cg, uint32_t max, uint32_t *out, err_t *err);
/* Create airlock/<id> (in each v1 hierarchy) and write the limits. */
int cgroup_create(const struct cgroups *cg, const char *id, const struct cgroup_limits *l,
		  err_t *err);
/* (Re)write the limits of an existing airlock/<id> (a warm jail taken for a
 * sandbox); the fields left 0 are not touched. */
int cgroup_set_limits(const struct cgroups *cg, const char *id, const struct cgroup_limits *l,
		      err_t *err);
/* Move pid (and later its children) into the sandbox cgroup. */
int cgroup_attach(const struct cgroups *cg, const char *id, pid_t pid, err_t *err);
/* Make the processes of airlock/<from> those of airlock/<to> with limits l,
 * and no airlock/<from> left. v1: each hierarchy renamed, then the nonzero
 * fields of l written (cgroup_set_limits). v2: a new <to> with l (zero
 * fields: none); each pid read from <from>'s cgroup.procs is written to
 * <to>'s, again until a read finds none: a child forked meanwhile is found
 * by the next read, a frozen task moves (and thaws: <to> is not frozen), one
 * that is exiting leaves the list by itself, a zombie is not listed; -EBUSY
 * when <from> still lists a task after ~2 s. On failure both may exist: the
 * caller destroys both. */
int cgroup_move(const struct cgroups *cg, const char *from, const char *to,
		const struct cgroup_limits *l, err_t *err);
/* Freeze (v1 freezer.state FROZEN, v2 cgroup.freeze 1) or thaw airlock/<id>,
 * and wait until the kernel says every task is frozen (or thawed), up to 5 s.
 * A freeze that does not complete (a task stuck in the kernel) is undone and
 * fails with -ETIMEDOUT. Idempotent. */
int cgroup_freeze(const struct cgroups *cg, const char *id, bool freeze, err_t *err);
/* Kill every process in airlock/<id> and remove it. 0 when it does not exist. */
int cgroup_destroy(const struct cgroups *cg, const char *id, err_t *err);
/* Remove the (now empty) parent directories; best effort, at shutdown.
 * A parent that still holds a jail's cgroup stays. */
void cgroup_release(const struct cgroups *cg);
/* Call fn for each existing airlock/<child> name (the startup sweep). */
int cgroup_each(const struct cgroups *cg, void (*fn)(void *arg, const char *id), void *arg);
/* Remount the host's cgroup2 hierarchy with `favordynmods`, keeping its
 * other options. Without it, moving a task into a fresh cgroup waits for an
 * RCU grace period (5-15 ms measured here) because cgroup_threadgroup_rwsem
 * is a per-cpu rwsem tuned for fast forks; with it, the move costs ~0.1 ms
 * and forks/exits pay a little instead. The semaphore is global, so the
 * cgroup2 mount (unified, or /sys/fs/cgroup on v2) speeds up v1 too.
 * The host's mount is not ours: before the remount, the mount point and the
 * options as found go to the file `record` (nodemgr's run dir), which
 * cgroup_favor_restore reads at a clean stop, or at the next start after a
 * crash when favordynmods is off by then. A record already there (a crash)
 * is kept: it holds what the host had, not what we set.
 * Returns 0 (also when already set), -ENOENT without a cgroup2 mount. */
int cgroup_favor_dynmods(const char *record, err_t *err);
/* Remount as `record` says it was found and remove the record; nothing
 * without one. Best effort (logged). */
void cgroup_favor_restore(const char *record);
/* The first cgroup2 mount in mountinfo text (edited in place): its mount
 * point and its options without rw/ro, "a,b" or "" (both borrowed from
 * text), and the mount's own flags (nosuid, nodev, ... as MS_*), which a
 * remount must pass again or lose. 0, or -ENOENT without one. For the unit
 * test's fixtures. */
int cgroup_mountinfo_cgroup2(char *text, char **mountpoint, char **opts, unsigned long *mflags);
/* The systemd unit this process runs in, when it may host the sandboxes:
 * self_cgroup is /proc/self/cgroup's text, invocation_id the INVOCATION_ID
 * systemd gives a service (NULL: none). The unit is the "0::" line's path
 * (its "/daemons" leaf stripped, where an earlier start moved us), which
 * must name a *.service and be a plain absolute path. 1 with the path in
 * out, else 0. The caller checks that the cgroup is writable. */
int cgroup_unit_path(const char *self_cgroup, const char *invocation_id, char *out, size_t cap);
#define CGROUP_DAEMONS_LEAF "daemons"
/* What airlock/<id> used: CPU time (v1 cpuacct.usage, v2 cpu.stat
 * usage_usec), memory charged now and its peak (v1 max_usage_in_bytes, v2
 * memory.peak when the kernel has it). The kernel writes these files. */
struct cgroup_stats {
	uint64_t cpu_ns, mem_bytes, mem_peak_bytes;
	bool mem_peak_known;
};
int cgroup_stats(const struct cgroups *cg, const char *id, struct cgroup_stats *out, err_t *err);
/* The readers behind cgroup_stats, on one cgroup's directory (v2) or its
 * cpuacct and memory directories (v1): the unit test feeds them fixture
 * files laid out as the kernel does. */
int cgroup_stats_v2_dir(const char *dir, struct cgroup_stats *out, err_t *err);
int cgroup_stats_v1_dirs(const char *cpuacct_dir, const char *memory_dir, struct cgroup_stats *out,
			 err_t *err);
/* cpu.stat usage_usec of a v2 cgroup, in ns; -ENOENT when absent. */
int cgroup_v2_cpu_ns(const char *dir, uint64_t *ns);
/* The first number of text (v1 single-value files; key NULL), or of the line
 * that is exactly `key value` (v2 flat keyed files: "max.imposed" is not
 * "max"); false when absent. The kernel writes these files. */
bool cgroup_keyed_u64(const char *text, const char *key, uint64_t *out);
/* The same, of the file at path (read whole, up to 64 KiB). */
bool cgroup_read_u64(const char *path, const char *key, uint64_t *out);
/* Path of a control file for tests and node_info: caller owns. */
char *cgroup_file(const struct cgroups *cg, const char *ctrl, const char *id, const char *file);

#endif
