/* snapshot.h - disk and full snapshots of a sandbox (snapshot.c) and the
 * artifacts of a suspended one (export.c). */
#ifndef AIRLOCK_NODEMGR_SNAPSHOT_H
#define AIRLOCK_NODEMGR_SNAPSHOT_H

#include "../core/nodemgr-internal.h"

/* snapshot.c: disk snapshots under DATA/pool/snapshots/<id>/ (see nm.h). */
/* What snap_create takes: the disk; the disk and a vm's memory and
 * devices; or (a suspend, which sends the disk while the memory is saved)
 * the memory and devices alone, beside the disk snapshot snap taken before
 * with the vCPUs stopped since. */
enum snap_kind { SNAP_DISK, SNAP_FULL, SNAP_MEMORY };
/* fork_spec (SNAP_FULL only, else NULL): the snapshot is a fork's
 * throw-away one and the sandbox's spec is this: its memory may be saved
 * in the fork form (vm_save_fork). */
int snap_create(struct nm_server *s, const char *id, const char *snap, const char *prev,
		enum snap_kind kind, const struct nm_sandbox_spec *fork_spec, int64_t *size,
		err_t *err);
int snap_delete(struct nm_server *s, const char *id, const char *snap, err_t *err);
/* Delete every snapshot of id and its directory; called by mgr_sandbox_destroy. */
int snap_delete_all(struct nm_server *s, const char *id, err_t *err);

/* export.c: a suspended sandbox's artifacts into and out of the fd the
 * node passed (see nm.h, nm_suspend_export / nm_suspend_import). */
int snap_suspend_export(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *snap,
			uint32_t artifact, int fd, int64_t *size, const char *want_base,
			char base_sha[65], err_t *err);
int snap_suspend_import(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *snap,
			uint32_t artifact, int fd, const char *base_sha, err_t *err);

#endif
