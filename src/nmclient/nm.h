/* nm.h - client of the node manager (`airlockd nodemgr`), the only root process.
 *
 * The node (unprivileged) asks for privileged work through this fixed list of
 * verbs, over a SOCK_SEQPACKET unix socket (root:airlock 0660). Each call opens
 * its own connection, so calls from many threads run concurrently and a long
 * template build never blocks a create. The wire format (wire.h:
 * fixed-size structs, versioned) is private to this client and the server
 * in src/nodemgr, which validates every id, name and path and confines all
 * paths to the pool.
 *
 * Ids: sandbox ids match [a-z0-9-]{1,64}; template names [a-z0-9][a-z0-9._-]{0,63}.
 */
#ifndef AIRLOCK_NM_H
#define AIRLOCK_NM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../lib/err.h"

struct nm_limits {
	uint32_t memory_mb;    /* 0 = node default */
	uint32_t cpu_millis;   /* 1000 = one CPU; 0 = node default */
	uint32_t pids;         /* 0 = node default */
	uint32_t disk_mb;      /* btrfs qgroup limit on the sandbox subvolume; 0 = default */
};

struct nm_sandbox_spec {
	char id[65];
	char template_name[65];
	uint32_t template_version;
	struct nm_limits limits;
	char hostname[65];     /* "" = id */
};

/* Snapshot templates/<name>/<ver> to sandboxes/<id>, apply limits, spawn the
 * jail with airlock-guest as PID 1. On success *chan_fd (caller owns) is the
 * host end of the guest channel, *pid the jail's init as seen by the host
 * and addr (may be NULL) the sandbox's IPv4 address (dotted) on the node's
 * sandbox network, "" when that is off; the gateway knows the sandbox by
 * it. On failure nothing is left behind (subvolume, cgroup, uid range). */
int nm_sandbox_create(const char *sock, const struct nm_sandbox_spec *spec, int *chan_fd,
		      pid_t *pid, char addr[16], err_t *err);
/* A fresh dup of the host end of a live sandbox's channel, and its address
 * as create gives it (after the node restarted). -ENOENT when nodemgr
 * holds no live jail for id. */
int nm_sandbox_adopt(const char *sock, const char *id, int *chan_fd, pid_t *pid, char addr[16],
		     err_t *err);
/* Kill the jail (every process in its cgroup), remove the cgroup, delete the
 * subvolume, release the uid range. Idempotent: 0 when already gone. */
int nm_sandbox_destroy(const char *sock, const char *id, err_t *err);
/* Pause (freeze = true) or resume a live sandbox's jail, keeping its memory
 * and channel. ns: the cgroup freezer, returning once every task is frozen;
 * vm: QMP stop / cont on its QEMU (the vCPUs stop; QEMU's main loop idles).
 * Idempotent. -ENOENT when nodemgr holds no live jail for id, -EBUSY while a
 * create or destroy owns it. */
int nm_sandbox_freeze(const char *sock, const char *id, bool freeze, err_t *err);
/* Disk snapshots (ns and vm; a running vm is QMP-stopped around it). snap and prev
 * match the sandbox id pattern. snapshot_create makes a read-only btrfs
 * snapshot of sandboxes/<id> at snapshots/<id>/<snap> (-EEXIST when taken);
 * *size gets the bytes written since prev (or since the sandbox subvolume
 * was made when prev is "" or gone), -1 when that could not be found.
 * snapshot_delete is idempotent. Destroying a sandbox deletes its
 * snapshots. */
int nm_snapshot_create(const char *sock, const char *id, const char *snap, const char *prev,
		       int64_t *size, err_t *err);
/* A full snapshot of a vm sandbox: its vCPUs stop (unless paused), QEMU
 * writes its whole migration stream (guest RAM and device state) to
 * snapshots/<id>/<snap>.vmstate, the disk is snapshotted as for a disk
 * snapshot, and the vCPUs run again: memory and disk from one point. -EOPNOTSUPP for an ns sandbox. Rollback and fork from such a
 * snapshot restore the VM from it (processes carry on) instead of booting. */
int nm_snapshot_create_full(const char *sock, const char *id, const char *snap,
			    const char *prev, int64_t *size, err_t *err);
/* The memory and device state alone, of a vm whose vCPUs are stopped
 * (paused) since its disk snapshot snap was taken: the two are one point,
 * and the disk can be read (a suspend sends it) while the memory is
 * saved. */
int nm_snapshot_create_memory(const char *sock, const char *id, const char *snap,
			      int64_t *size, err_t *err);
/* The same for a fork's throw-away snapshot of the sandbox spec->id (spec:
 * its own, whole): its memory may be kept as only the pages written since
 * the template's RAM file, which the fork's children restore on a fork
 * standby. Only nm_sandbox_fork reads such a snapshot. */
int nm_snapshot_create_fork(const char *sock, const struct nm_sandbox_spec *spec,
			    const char *snap, int64_t *size, err_t *err);
int nm_snapshot_delete(const char *sock, const char *id, const char *snap, err_t *err);
/* Roll a live sandbox (or one whose jail died: crash recovery) back to snapshot snap (vm: QEMU cold-boots the guest
 * on the swapped disk): kill every process of its
 * jail, swap its subvolume atomically for a writable snapshot of snap, and
 * spawn a fresh jail with the same id, limits (spec) and uid range. Returns
 * the new channel like create (the address stays the one create gave). -ENOENT for an unknown sandbox or snapshot
 * (nothing changed). A failure after the kill leaves
 * no jail running (the caller fails and destroys the sandbox). */
int nm_sandbox_rollback(const char *sock, const struct nm_sandbox_spec *spec, const char *snap,
			int *chan_fd, pid_t *pid, err_t *err);
/* Fork: a new sandbox spec->id whose subvolume is a writable btrfs
 * snapshot of snapshots/<parent>/<snap> (copy-on-write: nothing is copied),
 * with a fresh jail of its own (its own slot, uid range and cgroup with
 * spec's limits): ns: a fresh init; vm (vm = true): a fresh QEMU that
 * cold-boots the guest on that disk. Returns the new channel and the
 * child's own address like create. -ENOENT for an unknown snapshot,
 * -EEXIST when spec->id is taken. On failure nothing of the child is
 * left. */
int nm_sandbox_fork(const char *sock, const struct nm_sandbox_spec *spec, const char *parent,
		    const char *snap, bool vm, int *chan_fd, pid_t *pid, char addr[16],
		    err_t *err);
/* Suspend and restore (src/nodemgr/snapshot/export.c). The node opens the
 * artifact's file in its own staging directory and passes fd (borrowed;
 * export: writable, import: readable) with the request. Either may be a
 * pipe instead: an export's the node reads, sealing and hashing the bytes
 * as they come; an import's the node writes as the object arrives, only
 * ever with bytes it already authenticated (src/node/suspend/suspend.c).
 *   NM_ARTIFACT_DISK     export: `btrfs send -p` of snapshots/<id>/<snap>
 *                        against the template of spec (take that snapshot
 *                        first); import: `btrfs receive` of it, which
 *                        rebuilds snapshots/<id>/<snap>; start the sandbox
 *                        with nm_sandbox_fork(spec, parent = id, snap).
 *   NM_ARTIFACT_MEM      vm: zstd of the pages of the full snapshot's RAM
 *                        file that differ from the template's; 0 bytes
 *                        when that snapshot is a stream (no RAM file)
 *   NM_ARTIFACT_VMSTATE  vm: zstd of the full snapshot's device state (or
 *                        stream). Import both after the disk, before fork.
 * export's *size gets the bytes written (-1 into a pipe, but 0 for a
 * memory with no RAM file). import fails with -EEXIST while
 * the sandbox still has its subvolume, and leaves nothing on failure. */
enum nm_artifact { NM_ARTIFACT_DISK = 1, NM_ARTIFACT_MEM, NM_ARTIFACT_VMSTATE };
/* base_sha (may be NULL): export of NM_ARTIFACT_MEM takes the SHA-256 of
 * the RAM file to diff against when nodemgr has it (the one a restore
 * rebuilt the memory on; "": the template's own), and answers the one it
 * used ("" when from zeros);
 * import of it names that base ("" or NULL: the template's own file of the
 * shape, as before bases travelled), which must be here (nm_vm_base_find). */
int nm_suspend_export(const char *sock, const struct nm_sandbox_spec *spec, const char *snap,
		      enum nm_artifact artifact, int fd, int64_t *size, char base_sha[65],
		      err_t *err);
int nm_suspend_import(const char *sock, const struct nm_sandbox_spec *spec, const char *snap,
		      enum nm_artifact artifact, int fd, const char *base_sha, err_t *err);
/* vm memory bases by content (src/nodemgr/vm/vm-base.c), so a vm sandbox's
 * memory can be rebuilt on a node that never booted its template's memory
 * snapshot. find: sha "" answers the digest (out) and size of the
 * template's RAM file for spec's shape; a digest: 0 when that base is here
 * (the template's file or one imported), -ENOENT otherwise. export: zstd
 * of the template's RAM file for spec's shape into fd (*bytes written), its
 * digest and size. import: fd (zstd, from the store: a file, or a pipe
 * the node writes as it downloads) kept as the base sha
 * only if its content has that SHA-256 and is the RAM of spec's shape
 * (-EBADMSG otherwise; never more than that RAM is written). */
int nm_vm_base_find(const char *sock, const struct nm_sandbox_spec *spec, const char *sha,
		    char out[65], uint64_t *size, err_t *err);
int nm_vm_base_export(const char *sock, const struct nm_sandbox_spec *spec, int fd, char sha[65],
		      uint64_t *size, int64_t *bytes, err_t *err);
int nm_vm_base_import(const char *sock, const struct nm_sandbox_spec *spec, const char *sha,
		      int fd, err_t *err);
/* Ids of every sandbox nodemgr knows: a live jail or a leftover subvolume.
 * *ids is a NULL-terminated array the caller frees (each string, then array). */
int nm_sandbox_list(const char *sock, char ***ids, err_t *err);

struct nm_template_spec {
	char name[65];
	uint32_t version;
	/* kind: "debian" (arg = suite, e.g. "bookworm"), "busybox" (arg unused),
	 * "dir" (arg = host directory), "tar" (arg = host tar file), "oci"
	 * (arg = host image: docker-save tar, OCI layout directory or tar). */
	char kind[16];
	char arg[1024];
	char packages[1024];   /* comma-separated extra packages, debian only */
};
/* Build templates/<name>/<ver>/rootfs and make the subvolume read-only. Each
 * progress line from the builder is passed to progress (may be NULL). On
 * failure the half-built subvolume is removed. When cancel_fd (>= 0) becomes
 * readable the build is stopped and removed, and this fails with
 * ECANCELED. */
int nm_template_build(const char *sock, const struct nm_template_spec *spec, int cancel_fd,
		      void (*progress)(void *arg, const char *line), void *arg, err_t *err);
int nm_template_delete(const char *sock, const char *name, uint32_t version, err_t *err);
/* The image defaults a build from an image recorded with the template
 * (templates/<name>/<version>/image.json, written by airlock-oci: JSON text,
 * at most NM_TEMPLATE_CONFIG_MAX bytes), in *json_text (caller owns); NULL
 * when the template has none. */
#define NM_TEMPLATE_CONFIG_MAX (256u * 1024)
int nm_template_config(const char *sock, const char *name, uint32_t version, char **json_text,
		       err_t *err);
/* Moving a template between nodes through the object store
 * (src/nodemgr/templates/template-xfer.c). A template's identity is the received
 * uuid of its subvolume, as 36-char text (lower-case 8-4-4-4-12): a build
 * gives a template its own uuid as received uuid, and a receive gives the
 * copy the uuid of the stream it came from, so every node's copy of one
 * build has the same identity, and a sandbox's disk stream (sent against
 * the template, NM_ARTIFACT_DISK) names its parent by it.
 *
 * Export: the full `btrfs send` of templates/<name>/<version> (read-only,
 * finished) into fd (borrowed; a regular file opened for writing, which is
 * truncated first). *size gets the bytes written, uuid the identity. */
int nm_template_export(const char *sock, const char *name, uint32_t version, int fd,
		       char uuid[37], int64_t *size, err_t *err);
/* The newest finished local version of template name whose identity
 * (received uuid, else uuid) is uuid; -ENOENT when this pool has none. */
int nm_template_find(const char *sock, const char *name, const char *uuid, uint32_t *version,
		     err_t *err);
/* `btrfs receive` of the stream in fd (borrowed; a regular file opened for
 * reading, read from offset 0) as a new version of name:
 * templates/<name>/<v>, v = max(every numeric version of name in the pool,
 * min_version - 1) + 1, read-only, with the stream's uuid as received
 * uuid. A stream that does not make exactly one subvolume (from scratch:
 * not a snapshot of another), or whose received uuid is not uuid, is
 * refused with -EPROTO; a stream btrfs cannot apply fails with its error
 * (-EIO). On failure nothing is left. *version gets v. */
int nm_template_import(const char *sock, const char *name, const char *uuid,
		       uint32_t min_version, int fd, uint32_t *version, err_t *err);
/* Template versions present in the pool, as "name/version" strings;
 * NULL-terminated array the caller frees. */
int nm_template_list(const char *sock, char ***out, err_t *err);

struct nm_node_info {
	uint64_t mem_total_mb;
	uint32_t cpus;
	uint64_t pool_free_mb, pool_total_mb;
	char cgroup_mode[8];   /* "v1" or "v2" */
	char vm_accel[8];      /* "kvm", "tcg", or "" when the vm backend is off */
	char vm_reason[160];   /* why that acceleration was chosen */
};
int nm_node_info(const char *sock, struct nm_node_info *out, err_t *err);
/* nodemgr runs the host checks (src/doctor) and returns the report as JSON
 * text (*json_text: caller owns); default_backend decides its "ok". */
int nm_doctor(const char *sock, const char *default_backend, char **json_text, err_t *err);
/* What the warm pools hold now: one string per template (and vm shape)
 * with waiting jails, "<kind> <template>/<version>[/<shape>] <count>",
 * kind "ns" or "vm"; NULL-terminated, caller frees. */
int nm_pool_levels(const char *sock, char ***out, err_t *err);
/* Whether the last nm_sandbox_create or nm_vm_create of the calling thread
 * that succeeded was served by a warm pool. */
bool nm_last_from_pool(void);

/* A live sandbox's use, from its cgroup (every process of its jail: the ns
 * guest's, or the QEMU of a vm) and its subvolume. */
struct nm_sandbox_stats {
	uint64_t cpu_ns;          /* CPU time, user + system */
	uint64_t mem_bytes;       /* memory charged now (page cache included) */
	uint64_t mem_peak_bytes;  /* the most it was charged; 0 when unknown */
	uint64_t disk_bytes;      /* file data written since the subvolume was made */
	uint32_t mem_peak_known, _pad;
};
/* -ENOENT when nodemgr holds no live sandbox id. */
int nm_sandbox_stats(const char *sock, const char *id, struct nm_sandbox_stats *out,
		     err_t *err);

/* How often a sandbox hit its limits, from its cgroup's counters
 * (src/nodemgr/cgroup/cgroup-limits.h; the QEMU's for a vm), and whether
 * its jail's init (ns: the guest agent; vm: QEMU) is gone and how. Each
 * counter only grows while gen stays the same; a new gen is a cgroup made
 * again (rollback, restore), whose counters start from 0. */
struct nm_limit_hits {
	char id[65];
	uint64_t gen;
	uint64_t oom_kills;    /* processes the kernel's OOM killer ended */
	uint64_t pids_max;     /* forks refused at the pids limit */
	bool init_gone;        /* the jail's init was reaped */
	int init_signal;       /* the signal that ended it; 0: it exited, or runs */
};
/* id NULL: every sandbox with a jail that hit a limit at least once or whose
 * init is gone (sandboxes with nothing to tell are left out, so the answer
 * stays small with many); id: that one sandbox, even with nothing (-ENOENT
 * when nodemgr holds no jail for it). *out (caller frees) gets *n entries. */
int nm_sandbox_limits(const char *sock, const char *id, struct nm_limit_hits **out, size_t *n,
		      err_t *err);

/* Does nodemgr answer a request within timeout_ms? 0, or -errno
 * (-ETIMEDOUT when it accepted but did not answer: stalled). */
int nm_ping(const char *sock, int timeout_ms, err_t *err);

/* The vm backend (src/nodemgr/vm/): each sandbox is a jailed QEMU microVM.
 * Guest RAM is spec->limits.memory_mb, vCPUs ceil(cpu_millis / 1000).
 *   NM_VM_COLD      boot the guest kernel with the sandbox's rootfs.ext4.
 *   NM_VM_CLONE     restore the template's memory snapshot for this RAM/vCPU
 *                   shape (MAP_PRIVATE of its RAM file + device state);
 *                   -ENODATA when the template has no snapshot for it yet.
 *   NM_VM_TEMPLATE  boot the template itself (spec->id unused) with its RAM
 *                   in a shared file, to be saved by nm_vm_template_save once
 *                   the caller saw READY and synced the guest's disk. Only
 *                   one template boot per template and shape at a time.
 * Destroy and adopt are nm_sandbox_destroy / nm_sandbox_adopt. */
enum nm_vm_mode { NM_VM_COLD = 1, NM_VM_CLONE = 2, NM_VM_TEMPLATE = 3 };
/* *chan_fd, *pid and addr (may be NULL; "" for NM_VM_TEMPLATE) as for
 * nm_sandbox_create. */
int nm_vm_create(const char *sock, const struct nm_sandbox_spec *spec, uint32_t mode,
		 int *chan_fd, pid_t *pid, char addr[16], err_t *err);
/* Pause the template VM booted by NM_VM_TEMPLATE, save its device state next
 * to its RAM file, and stop it. Clones can be made from then on. With
 * discard, only stop it and remove what it left (a boot that went wrong). */
int nm_vm_template_save(const char *sock, const struct nm_sandbox_spec *spec, bool discard,
			err_t *err);

/* A read-only fd (caller owns) on the vm sandbox's serial console log
 * (DATA/run/vm/<id>/console.log, written by its QEMU). -ENOENT when
 * nodemgr holds no vm jail for id. */
int nm_vm_console(const char *sock, const char *id, int *fd, err_t *err);

#endif
