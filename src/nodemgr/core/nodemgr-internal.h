/* nodemgr-internal.h - the server's context and the registry of its jails,
 * shared by every room of nodemgr (the bottom one: it includes none above). */
#ifndef AIRLOCK_NODEMGR_INTERNAL_H
#define AIRLOCK_NODEMGR_INTERNAL_H

#include <linux/filter.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../../lib/err.h"
#include "../../nmclient/nm.h"
#include "../../nmclient/wire.h"
#include "../cgroup/cgroup.h"
#include "config.h"
#include "warmsize.h"

/* Host uid/gid ranges: slot N owns [BASE + N*65536, BASE + (N+1)*65536).
 * 0x40000000 is far above any uid a distribution or LDAS hands out, and
 * 8192 slots end at 0x60000000, below the 32-bit limit. */
#define NM_UID_BASE 0x40000000u
#define NM_MAX_SLOTS 8192
#define NM_JAIL_BUCKETS 4096

/* Node defaults for limits a spec leaves at 0. */
#define NM_DEFAULT_MEMORY_MB 1024
#define NM_DEFAULT_CPU_MILLIS 2000
#define NM_DEFAULT_PIDS 4096
#define NM_DEFAULT_DISK_MB 10240

/* One jail nodemgr started. State transitions, all under srv->lock:
 *   (create) busy ──spawned──► alive ──init reaped──► dead (chan closed)
 *   alive|dead ──destroy──► busy ──► removed from the list
 * A failed create removes the entry it inserted. */
struct jail {
	struct jail *next;
	struct jail **pprev;  /* the pointer to this one in s->jails: O(1) unlink */
	struct jail *hnext;   /* chain of s->by_id[jail_bucket(id)], under s->lock */
	char id[65];
	int slot;
	pid_t pid;            /* init B, host pid; -1 until spawned */
	uint64_t start_time;  /* /proc/<pid>/stat field 22, guards pid reuse */
	int pidfd;            /* -1 when none */
	int chan_fd;          /* host end of the guest channel; -1 once dead */
	bool alive;
	bool busy;            /* a create or destroy owns it */
	bool vm;              /* a QEMU process (vm-*.c), not an ns jail */
	/* Internal jails (vm template boot, vm and ns warm pools): not
	 * listed, not adoptable, not known to the node. warm_key names the
	 * template (and shape) a warm QEMU or ns jail waits for ("" once
	 * taken, or while it is being warmed). */
	bool hidden;
	char warm_key[96];
	struct qmp *qmp;      /* vm: the monitor connection; NULL otherwise */
	uint32_t vm_mem_mb;   /* vm: the guest's RAM (its QEMU's size) */
	bool vm_devices_only; /* vm: restored from a memory-delta snapshot */
	bool from_pool;       /* a warm pool's jail or QEMU taken by a create */
	/* verbs.c sandbox_stats: the last disk use found and when (now_ms),
	 * so that polling a sandbox's metrics scans its subvolume at most
	 * once per STATS_DISK_EVERY_MS */
	uint64_t disk_bytes, disk_at_ms;
	bool disk_scanning;   /* one scan at a time: others take the last value */
	/* The init's wait status once reaped (init_reaped): how the jail
	 * ended, for NM_SANDBOX_LIMITS (an OOM kill of the init is the
	 * sandbox's failure "out of memory"). Cleared when a new init is
	 * published (rollback). */
	bool init_reaped;
	int init_status;
};

/* An exit status the reaper collected that nobody claimed yet. */
struct exited {
	pid_t pid;
	int status;
	uint64_t when_ms;
};

/* nswarm.c: one template's ns warm pool (under srv->lock). */
#define NSWARM_KEYS 32
#define NSWARM_WORKERS 2
struct nswarm_key {
	bool used;
	char name[65];
	uint32_t version;
	struct warm_demand demand;
	uint32_t spawning;      /* warm spawns in flight for it */
	uint64_t used_ms;       /* last create: the oldest entry is reused */
	uint64_t retry_ms;      /* a spawn failed: none before this */
};

struct nm_server {
	const struct nodemgr_config *cfg;
	char *pool;           /* DATA/pool */
	char *run_dir;        /* DATA/run/nodemgr: <id>.state files */
	const char *const *guest_argv;
	struct cgroups cg;
	struct sock_fprog seccomp;

	pthread_mutex_t lock; /* jails, slots, exits, nthreads */
	pthread_cond_t cond;  /* broadcast on every reap and thread exit */
	struct jail *jails;
	/* The same jails by id (registry.c): a verb finds its jail in O(1), not by
	 * walking every jail nodemgr holds. */
	struct jail *by_id[NM_JAIL_BUCKETS];
	uint8_t slots[NM_MAX_SLOTS];
	struct exited *exits;
	size_t nexits, cap_exits;
	int nthreads;
	bool stopping;
	struct nm_vm *vm;     /* vm-internal.h: accel, paths, template locks */
	/* nswarm.c: per template, its recent demand (which sizes its pool,
	 * warmsize.h) and the warm spawns in flight; up to NSWARM_WORKERS
	 * refill threads (counted in nthreads) work through them. */
	struct nswarm_key ns_keys[NSWARM_KEYS];
	int ns_workers;
	/* Discard a parked jail (hidden, claimed by the caller) of each kind:
	 * [0] ns (nswarm.c), [1] vm (vm-pool.c). server.c sets them, so that
	 * mgr_template_retire_pools, down here, calls no room above it. */
	void (*discard_parked[2])(struct nm_server *s, struct jail *j);
};

/* registry.c: wait for a direct child's exit status (collected by the reaper).
 * -ETIMEDOUT after timeout_ms (< 0 = forever). */
int mgr_wait_child(struct nm_server *s, pid_t pid, int *status, int timeout_ms);

/* registry.c: the registry of jails (the spawn of one is jail/jail.h). */
/* Insert a busy entry for id with a free uid range (slot). -EEXIST when id
 * is taken, -ENOSPC when no slot is free. */
struct jail *mgr_jail_claim(struct nm_server *s, const char *id, err_t *err);
/* The jail of id in s->jails, or NULL. Holds s->lock. */
struct jail *mgr_jail_find_locked(struct nm_server *s, const char *id);
/* Remove an entry mgr_jail_claim made (closes its fds, frees the slot).
 * mgr_jail_unlink_locked: the same, with s->lock held. */
void mgr_jail_unclaim(struct nm_server *s, struct jail *j);
void mgr_jail_unlink_locked(struct nm_server *s, struct jail *j);
/* DATA/run/nodemgr/<id>.state, the state file of jail id (caller frees). */
char *mgr_jail_state_path(struct nm_server *s, const char *id);
/* Field number field (1-based, as in proc(5); 3 or later) of
 * /proc/<pid>/stat, 0 when unreadable. The kernel writes that file; the one
 * part a process sets, its comm, is skipped (fields start after the last
 * ')'). */
uint64_t mgr_proc_stat_field(pid_t pid, int field);
/* The process is up: record pid (pidfd, start time), take chan (consumed)
 * as the host end, and hand back a dup in *chan_dup. -ECHILD when the
 * reaper already saw pid exit (the entry stays claimed: the caller cleans). */
int mgr_jail_publish(struct nm_server *s, struct jail *j, pid_t pid, int chan, int *chan_dup,
		     err_t *err);
/* Warm pool hand-over: give a claimed (busy) jail the sandbox id (-EEXIST
 * when taken), then, once its QEMU runs the guest, make it a normal live
 * jail and dup its channel (-ECHILD when it died meanwhile). */
int mgr_jail_rename(struct nm_server *s, struct jail *j, const char *id, err_t *err);
int mgr_jail_activate(struct nm_server *s, struct jail *j, int *chan_dup, err_t *err);
/* Mark the live, non-hidden jail of id busy for a verb. *is_vm (may be
 * NULL) tells its kind. -ENOENT when there is none, -EBUSY when a create,
 * destroy or other verb owns it. mgr_jail_release undoes it. */
struct jail *mgr_jail_acquire(struct nm_server *s, const char *id, bool *is_vm, err_t *err);
void mgr_jail_release(struct nm_server *s, struct jail *j);
/* As mgr_jail_acquire, but a dead jail (its init exited) is fine too. */
struct jail *mgr_jail_acquire_any(struct nm_server *s, const char *id, bool *is_vm, err_t *err);

/* pooldir.c */
/* pool_subvol_delete, retried for up to 0.5 s while it is EBUSY (a mount
 * namespace that just died may pin the subvolume a moment). */
int mgr_subvol_delete_retry(const char *path, err_t *err);
/* pool_subvol_ensure_received on the template at path, one at a time. */
int mgr_template_ensure_received(const char *path, err_t *err);
/* Remove the parked jails and QEMUs (ns warm pool, vm warm pool, fork
 * standbys) of template name at version, or (older) at every version
 * below it: a deleted or replaced version is never asked for again. */
void mgr_template_retire_pools(struct nm_server *s, const char *name, uint32_t version,
			       bool older);
/* Is version of template name gone from the pool, or is a newer one there?
 * A refill checks it before each jail it parks. */
bool mgr_template_superseded(struct nm_server *s, const char *name, uint32_t version);

/* artifact.c */
/* Is fd, passed by the node, a regular file open for writing (write) or
 * for reading? */
int mgr_artifact_fd_check(int fd, bool write, err_t *err);
/* An artifact to export (write) or import: a regular file, or a pipe
 * (*piped, when not NULL: which). An export's pipe is read by the node,
 * which seals and hashes the bytes as they come. An import's is written by
 * the node as the object arrives; what may come that way: a sealed disk
 * stream, every chunk authenticated before the node writes its bytes
 * (snapshot/export.c); a memory base, kept only if what it decompresses to
 * has the digest asked for (vm/vm-base.c). */
int mgr_artifact_stream_check(int fd, bool write, bool *piped, err_t *err);

/* validate.c: the patterns from nm.h; strings must be NUL-terminated in cap. */
bool mgr_valid_sandbox_id(const char *s, size_t cap);
bool mgr_valid_template_name(const char *s, size_t cap);
bool mgr_valid_hostname(const char *s, size_t cap);
bool mgr_valid_uuid(const char *s, size_t cap);

#endif
