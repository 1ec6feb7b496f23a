/* vm.h - the vm room (QEMU microVMs) as the rooms above it see it;
 * vm-internal.h is what its own files share. */
#ifndef AIRLOCK_NODEMGR_VM_H
#define AIRLOCK_NODEMGR_VM_H

#include "../core/nodemgr-internal.h"

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

/* vm-suspend.c: the memory (zstd of the pages that differ from a base RAM
 * file) and device state (zstd) of a full snapshot, naming the memory's
 * base by content. Export of the memory of a snapshot saved as a stream
 * writes nothing (*size 0). Export diffs against want_base when it is here
 * (NULL or "", or not here: the template's own file of the shape, else
 * zeros) and base_sha gets the SHA-256 of the RAM file the memory is a
 * difference from ("" when from zeros); import's base_sha (NULL or "": the
 * template's own file of the shape) must be here (vm_base_find), as the
 * template's file or in pool/membase. */
int vm_suspend_export(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *snap,
		      uint32_t artifact, int fd, int64_t *size, const char *want_base,
		      char base_sha[65], err_t *err);
int vm_suspend_import(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *snap,
		      uint32_t artifact, int fd, const char *base_sha, err_t *err);
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
/* vm-pool.c: the same for the vm warm pool of key
 * ("<template>/<version>/m<MiB>-c<cpus>"). */
int vm_warm_target_locked(struct nm_server *s, const char *key);

#endif
