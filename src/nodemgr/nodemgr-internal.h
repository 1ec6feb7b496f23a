/* nodemgr-internal.h - the server's context, shared by its files. */
#ifndef AIRLOCK_NODEMGR_INTERNAL_H
#define AIRLOCK_NODEMGR_INTERNAL_H

#include <linux/filter.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../lib/err.h"
#include "cgroup.h"
#include "../nmclient/nm.h"
#include "nodemgr.h"
#include "../nmclient/wire.h"
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
	/* The same jails by id (jail.c): a verb finds its jail in O(1), not by
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
};

/* server.c: wait for a direct child's exit status (collected by the reaper).
 * -ETIMEDOUT after timeout_ms (< 0 = forever). */
int nm_wait_child(struct nm_server *s, pid_t pid, int *status, int timeout_ms);

/* verbs.c: handle one connection (one request, replies, close). Consumes fd. */
void nm_serve_conn(struct nm_server *s, int fd, uid_t peer_uid);

/* jail.c: the registry of jails (the spawn of one is jail.h). */
/* Insert a busy entry for id with a free uid range (slot). -EEXIST when id
 * is taken, -ENOSPC when no slot is free. */
struct jail *jail_claim(struct nm_server *s, const char *id, err_t *err);
/* The jail of id in s->jails, or NULL. Holds s->lock. */
struct jail *jail_find_locked(struct nm_server *s, const char *id);
/* Remove an entry jail_claim made (closes its fds, frees the slot).
 * jail_unlink_locked: the same, with s->lock held. */
void jail_unclaim(struct nm_server *s, struct jail *j);
void jail_unlink_locked(struct nm_server *s, struct jail *j);
/* DATA/run/nodemgr/<id>.state, the state file of jail id (caller frees). */
char *jail_state_path(struct nm_server *s, const char *id);
/* Field number field (1-based, as in proc(5); 3 or later) of
 * /proc/<pid>/stat, 0 when unreadable. The kernel writes that file; the one
 * part a process sets, its comm, is skipped (fields start after the last
 * ')'). */
uint64_t proc_stat_field(pid_t pid, int field);
/* The process is up: record pid (pidfd, start time), take chan (consumed)
 * as the host end, and hand back a dup in *chan_dup. -ECHILD when the
 * reaper already saw pid exit (the entry stays claimed: the caller cleans). */
int jail_publish(struct nm_server *s, struct jail *j, pid_t pid, int chan, int *chan_dup,
		 err_t *err);
/* Warm pool hand-over: give a claimed (busy) jail the sandbox id (-EEXIST
 * when taken), then, once its QEMU runs the guest, make it a normal live
 * jail and dup its channel (-ECHILD when it died meanwhile). */
int jail_rename(struct nm_server *s, struct jail *j, const char *id, err_t *err);
int jail_activate(struct nm_server *s, struct jail *j, int *chan_dup, err_t *err);
/* Mark the live, non-hidden jail of id busy for a verb. *is_vm (may be
 * NULL) tells its kind. -ENOENT when there is none, -EBUSY when a create,
 * destroy or other verb owns it. jail_release undoes it. */
struct jail *jail_acquire(struct nm_server *s, const char *id, bool *is_vm, err_t *err);
void jail_release(struct nm_server *s, struct jail *j);
/* As jail_acquire, but a dead jail (its init exited) is fine too. */
struct jail *jail_acquire_any(struct nm_server *s, const char *id, bool *is_vm, err_t *err);

/* mgr-sandbox.c */
/* An ns jail's cgroup limits: lim's, the node defaults for those at 0. */
struct cgroup_limits mgr_ns_cgroup_limits(const struct nm_limits *lim);
/* pool_subvol_delete, retried for up to 0.5 s while it is EBUSY (a mount
 * namespace that just died may pin the subvolume a moment). */
int subvol_delete_retry(const char *path, err_t *err);
int mgr_sandbox_create(struct nm_server *s, const struct nm_sandbox_spec *spec, int *chan_dup,
		       pid_t *pid, err_t *err);
/* Start the ns jail of claimed entry j on rootfs (NULL: the sandbox's own,
 * sandboxes/<id>/rootfs) with spec's id, hostname and limits; see mgr-sandbox.c. */
int mgr_sandbox_spawn_ns(struct nm_server *s, struct jail *j, const struct nm_sandbox_spec *spec,
			 const char *rootfs, int *chan_dup, pid_t *pid, err_t *err);
int mgr_sandbox_adopt(struct nm_server *s, const char *id, int *chan_dup, pid_t *pid, err_t *err);
int mgr_sandbox_destroy(struct nm_server *s, const char *id, err_t *err);
/* Pause (freeze) or resume a live jail; dispatches on its kind (ns: cgroup
 * freezer, vm: vm_freeze). Marks the jail busy meanwhile. */
int mgr_sandbox_freeze(struct nm_server *s, const char *id, bool freeze, err_t *err);
/* Roll a live ns jail back to snapshots/<id>/<snap> (see nm.h). */
int mgr_sandbox_rollback(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *snap,
			 int *chan_dup, pid_t *pid, err_t *err);
/* A child sandbox from snapshots/<parent>/<snap> (see nm.h). */
int mgr_sandbox_fork(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *parent,
		     const char *snap, bool vm, int *chan_dup, pid_t *pid, err_t *err);
/* ids: NULL-terminated, caller frees each and the array */
char **mgr_sandbox_list(struct nm_server *s);
/* Reaper hook: pid exited; true when it was a jail init. Called under lock. */
bool mgr_sandbox_reaped_locked(struct nm_server *s, pid_t pid);
/* Startup: kill leftovers of a previous run (state files, cgroups). */
void mgr_sandbox_sweep_leftovers(struct nm_server *s);
/* Shutdown: kill every jail, keep subvolumes. */
void mgr_sandbox_kill_all(struct nm_server *s);

/* snapshot.c: disk snapshots under DATA/pool/snapshots/<id>/ (see nm.h). */
/* full: vm only, memory too: snapshots/<id>/<snap> VM_FULL_SUFFIX holds the
 * migration stream (guest RAM and device state) beside the disk snapshot;
 * or, for a guest whose RAM maps a file, the device state only and
 * <snap> VM_MEM_SUFFIX its RAM file (vm-delta.c). */
#define VM_FULL_SUFFIX ".vmstate"
#define VM_MEM_SUFFIX ".mem"
/* A fork's throw-away full snapshot may hold, instead of VM_MEM_SUFFIX, only
 * the pages written since the template's RAM file (vm_save_fork). */
#define VM_DELTA_SUFFIX ".delta"
/* ... and, instead of the <snap> subvolume, a reflink of the disk image. */
#define VM_DISK_SUFFIX ".disk"
/* The group of every RAM file several QEMUs map private (a template's, a
 * delta snapshot's): root's, mode 0640, so every vm jail gets this
 * supplementary group to read it, and none can write it (QEMU opens it
 * O_RDONLY through src/qemushim/romem.c, bound read-only: vm-qemu.c). */
#define VM_SHARED_GID (NM_UID_BASE - 1)
/* What snapshot_create takes: the disk; the disk and a vm's memory and
 * devices; or (a suspend, which sends the disk while the memory is saved)
 * the memory and devices alone, beside the disk snapshot snap taken before
 * with the vCPUs stopped since. */
enum snap_kind { SNAP_DISK, SNAP_FULL, SNAP_MEMORY };
/* fork_spec (SNAP_FULL only, else NULL): the snapshot is a fork's
 * throw-away one and the sandbox's spec is this: its memory may be saved
 * in the fork form (vm_save_fork). */
int snapshot_create(struct nm_server *s, const char *id, const char *snap, const char *prev,
		    enum snap_kind kind, const struct nm_sandbox_spec *fork_spec, int64_t *size,
		    err_t *err);
int snapshot_delete(struct nm_server *s, const char *id, const char *snap, err_t *err);
/* Delete every snapshot of id and its directory; called by mgr_sandbox_destroy. */
int snapshot_delete_all(struct nm_server *s, const char *id, err_t *err);

/* suspend.c: a suspended sandbox's artifacts into and out of the fd the
 * node passed (see nm.h, nm_suspend_export / nm_suspend_import). */
int suspend_export(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *snap,
		   uint32_t artifact, int fd, int64_t *size, const char *want_base,
		   char base_sha[65], err_t *err);
int suspend_import(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *snap,
		   uint32_t artifact, int fd, const char *base_sha, err_t *err);
/* Is fd, passed by the node, a regular file open for writing (write) or
 * for reading? */
int artifact_fd_check(int fd, bool write, err_t *err);
/* An artifact to export (write) or import: a regular file, or a pipe
 * (*piped, when not NULL: which). An export's pipe is read by the node,
 * which seals and hashes the bytes as they come. An import's is written by
 * the node as the object arrives; what may come that way: a sealed disk
 * stream, every chunk authenticated before the node writes its bytes
 * (suspend.c); a memory base, kept only if what it decompresses to has
 * the digest asked for (vm-base.c). */
int artifact_stream_check(int fd, bool write, bool *piped, err_t *err);
/* pool_subvol_ensure_received on the template at path, one at a time. */
int template_ensure_received(const char *path, err_t *err);
/* template-xfer.c: a template into and out of a btrfs send stream in the fd
 * the node passed, and a template found by identity (nm.h,
 * nm_template_export / _find / _import). */
int template_export(struct nm_server *s, const char *name, uint32_t version, int fd,
		    char uuid[37], int64_t *size, err_t *err);
int template_find(struct nm_server *s, const char *name, const char *uuid, uint32_t *version,
		  err_t *err);
int template_import(struct nm_server *s, const char *name, const char *uuid,
		    uint32_t min_version, int fd, uint32_t *version, err_t *err);
/* At start: remove what imports a crash cut off left
 * (templates/<name>/.recv-*). */
void template_import_sweep(struct nm_server *s);
/* vm-suspend.c: the memory (zstd of the pages that differ from the
 * template's RAM file) and device state (zstd) of a full snapshot. Export
 * of the memory of a snapshot saved as a stream writes nothing (*size 0). */
int vm_suspend_export(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *snap,
		      uint32_t artifact, int fd, int64_t *size, err_t *err);
int vm_suspend_import(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *snap,
		      uint32_t artifact, int fd, err_t *err);
/* The same, naming the memory's base by content: export diffs against
 * want_base when it is here (NULL or "", or not here: the template's own
 * file of the shape, else zeros) and base_sha gets the SHA-256 of the RAM
 * file the memory is a difference from ("" when from zeros); import's
 * base_sha (NULL or "": the template's own file of the shape) must be here
 * (vm_base_find), as the template's file or in pool/membase. */
int vm_suspend_export_base(struct nm_server *s, const struct nm_sandbox_spec *spec,
			   const char *snap, uint32_t artifact, int fd, int64_t *size,
			   const char *want_base, char base_sha[65], err_t *err);
int vm_suspend_import_base(struct nm_server *s, const struct nm_sandbox_spec *spec,
			   const char *snap, uint32_t artifact, int fd, const char *base_sha,
			   err_t *err);
/* vm-base.c: memory bases by content (nm.h, nm_vm_base_*). */
bool vm_base_sha_ok(const char *s);
/* SHA-256 of the RAM file at path, open as fd: kept beside it in
 * <path>.sha256 (with its inode, size and mtime), computed when stale. */
int vm_base_digest(const char *path, int fd, char sha[65], err_t *err);
/* The file of the base sha (NULL or "": the template's own RAM file for
 * spec's shape): *path (caller frees), or -ENOENT. */
int vm_base_path(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *sha,
		 char **path, err_t *err);
int vm_base_find(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *sha,
		 char out[65], uint64_t *size, err_t *err);
int vm_base_export(struct nm_server *s, const struct nm_sandbox_spec *spec, int fd,
		   char sha[65], uint64_t *size, int64_t *bytes, err_t *err);
int vm_base_import(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *sha,
		   int fd, err_t *err);
/* At start: remove what an import cut off left (membase/.in-*). */
void vm_base_sweep(struct nm_server *s);

/* vm-verbs.c, vm-state.c, vm-pool.c, vm-console.c (vm-internal.h says
 * which holds what): the QEMU microVM jail. Verbs as in nm.h (nm_vm_*). */
int vm_init(struct nm_server *s, err_t *err);
void vm_free(struct nm_server *s);
int vm_create(struct nm_server *s, const struct nm_sandbox_spec *spec, uint32_t mode,
	      int *chan_dup, pid_t *pid, err_t *err);
int vm_template_save(struct nm_server *s, const struct nm_sandbox_spec *spec, bool discard,
		     err_t *err);
/* QMP stop (freeze) or cont on the jail's QEMU; the caller holds j busy. */
int vm_freeze(struct nm_server *s, struct jail *j, bool freeze, err_t *err);
/* Cold-boot a fresh QEMU for the claimed (busy) vm jail j on the disk its
 * subvolume holds now (rollback to a disk snapshot: same id, slot, uid).
 * On failure nothing of the new QEMU is left; j stays the caller's. */
int vm_boot_in_place(struct nm_server *s, struct jail *j, const struct nm_sandbox_spec *spec,
		     const char *vmstate, const char *mem, int *chan_dup, pid_t *pid, err_t *err);
/* A vm fork child on a fork standby (vm-pool.c): the child's QEMU already
 * spawned, the snapshot's disk and RAM file cloned in. -EAGAIN when none
 * fits (then one is made in the background for the next fork) or the
 * snapshot is not a memory-file one: the caller spawns as before. */
int vm_fork_standby(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *parent,
		    const char *snap, int *chan_dup, pid_t *pid, err_t *err);
/* Full snapshots: with j's vCPUs stopped (vm_hold_still), save its memory
 * and device state: as the RAM file mem plus the device state in state
 * (vm_save_delta) when its RAM maps a file, else as the whole migration
 * stream in state (mem not made). *bytes: what was written. vm_boot_in_place
 * with vmstate = state (and mem when it exists) restores it. */
int vm_save_full(struct nm_server *s, struct jail *j, const char *state, const char *mem,
		 uint64_t *bytes, err_t *err);
/* vm-delta.c: the RAM-file form only; -ENOTSUP (nothing made) when j's RAM
 * is not a private file mapping of j->vm_mem_mb MiB. dev: the host path of
 * /run/devstate in j's QEMU (its run dir), where QEMU writes the devices. */
int vm_save_delta(struct jail *j, const char *dev, const char *state, const char *mem,
		  uint64_t *bytes, err_t *err);
/* The fork form (vm-delta.c): when j's RAM maps the RAM file of spec's
 * template and shape (spec: the sandbox's own, from the node) and a fork
 * standby fits it (its CPU quota and disk size are a standby's), only the
 * pages j wrote, as the sparse file delta, plus the device state in state:
 * a child's QEMU maps the template's file and gets the pages written into
 * its RAM (vm_fork_standby). -ENOTSUP (nothing made) otherwise. */
int vm_save_fork(struct nm_server *s, struct jail *j, const struct nm_sandbox_spec *spec,
		 const char *state, const char *delta, uint64_t *bytes, err_t *err);
/* Disk snapshots of a vm: stop its vCPUs (QMP stop drains the block layer,
 * so the image is consistent) unless they already are; *stopped says
 * whether the caller must vm_freeze(..., false) afterwards. */
int vm_hold_still(struct nm_server *s, struct jail *j, bool *stopped, err_t *err);
/* Remove DATA/run/vm/<id> (idempotent); called by mgr_sandbox_destroy. */
void vm_cleanup_run(struct nm_server *s, const char *id);
/* vm-pool.c: kill a parked QEMU (claimed by the caller) and remove all of it. */
void vm_park_discard(struct nm_server *s, struct jail *j);
/* *fd: read-only, on the console log of vm jail id (see verbs.c). */
int vm_console_open(struct nm_server *s, const char *id, int *fd, err_t *err);
void vm_node_info(struct nm_server *s, struct nm_node_info *out);
/* vm-accel.c: decide kvm or tcg once (config, host facts, cached probe). */
void vm_accel_detect(struct nm_server *s, char *accel, size_t acap, char *reason,
		     size_t rcap);

/* net.c: the sandbox network (see the comment at its top). init installs
 * this instance's nftables table (replacing a leftover one), fini deletes
 * it; both run the `nft` command outside the server loop. attach gives the
 * live jail j (init pid) its veth, addresses, route
 * (over rtnetlink); detach removes them (idempotent). net_addr: the
 * sandbox address of jail id (ns or vm), its slot's: the same from create
 * to destroy, whether its init runs or not (verbs.c puts it in replies). */
int net_init(struct nm_server *s, err_t *err);
void net_fini(struct nm_server *s);
int net_attach(struct nm_server *s, struct jail *j, pid_t pid, err_t *err);
void net_detach(struct nm_server *s, struct jail *j);
/* vm: attach the veth of slot to the QEMU pid's namespace, routed (and
 * translated, net_vm_nat) to the tap that net_vm_tap made there. In the
 * child, before exec: net_vm_tap (an fd, or -1 with errno) and, with the
 * network on, net_vm_nat of the parent's net_vm_nat_rules (caller frees;
 * NULL when off). detach_slot: net_detach by slot. */
int net_attach_vm(struct nm_server *s, int slot, const char *id, pid_t pid, err_t *err);
void net_detach_slot(struct nm_server *s, int slot, const char *id);
int net_vm_tap(void);
char *net_vm_nat_rules(struct nm_server *s, int slot);
int net_vm_nat(const char *rules);
int net_addr(struct nm_server *s, const char *id, char out[16], err_t *err);
/* "nameserver <host end>\n" for slot (caller frees); NULL when off. */
char *net_resolv_conf(struct nm_server *s, int slot);

/* nswarm.c: the ns warm pool (see the comment at its top).
 * take: hand a waiting jail of spec's template over to spec (id, limits,
 * hostname) as a cold create would; -EAGAIN when none waits (or the pool is
 * off), -EEXIST when the id is taken; on any other failure the jail is gone
 * and the caller may create cold. refill: top the template's pool up in the
 * background. warm_guest: run the fresh guest on chan (borrowed) through
 * its first exec (over once init, its agent, reaped it) and read and drop,
 * never parse, every byte it sent meanwhile, so the node's HELLO is the
 * first thing it answers. remove_subvol: delete pool/warm/<wid>
 * (retrying while a dead jail's mount namespace still pins it). */
int nswarm_take(struct nm_server *s, const struct nm_sandbox_spec *spec, int *chan_dup,
		pid_t *pid, err_t *err);
void nswarm_refill(struct nm_server *s, const struct nm_sandbox_spec *spec);
/* The size the pool of template name/version aims at now, or -1 when
 * nswarm knows no such pool. Under s->lock. */
int nswarm_target_locked(struct nm_server *s, const char *name, uint32_t version);
/* vm-pool.c: the same for the vm warm pool of key
 * ("<template>/<version>/m<MiB>-c<cpus>"). */
int vm_warm_target_locked(struct nm_server *s, const char *key);
void nswarm_warm_guest(int chan, pid_t init, const char *wid);
void nswarm_remove_subvol(struct nm_server *s, const char *wid);
/* Kill the parked jail j (claimed by the caller) and remove all of it. */
void nswarm_discard(struct nm_server *s, struct jail *j);

/* template.c */
typedef int (*progress_fn)(void *arg, const char *line);  /* <0: client gone */
/* A hang-up on client_fd (the requester's socket) cancels the build. */
int template_build(struct nm_server *s, const struct nm_template_spec *spec, uid_t peer_uid,
		   int client_fd, progress_fn progress, void *arg, err_t *err);
int template_delete(struct nm_server *s, const char *name, uint32_t version, err_t *err);
/* Remove the parked jails and QEMUs (ns warm pool, vm warm pool, fork
 * standbys) of template name at version, or (older) at every version
 * below it: a deleted or replaced version is never asked for again. */
void template_retire_pools(struct nm_server *s, const char *name, uint32_t version, bool older);
/* Is version of template name gone from the pool, or is a newer one there?
 * A refill checks it before each jail it parks. */
bool template_superseded(struct nm_server *s, const char *name, uint32_t version);
char **template_list(struct nm_server *s);
struct buf;
/* templates/<name>/<version>/image.json into out (empty when there is
 * none); at most NM_TEMPLATE_CONFIG_MAX bytes. */
int template_config(struct nm_server *s, const char *name, uint32_t version, struct buf *out,
		    err_t *err);

/* validate.c: the patterns from nm.h; strings must be NUL-terminated in cap. */
bool valid_sandbox_id(const char *s, size_t cap);
bool valid_template_name(const char *s, size_t cap);
bool valid_hostname(const char *s, size_t cap);
bool valid_uuid(const char *s, size_t cap);

#endif
