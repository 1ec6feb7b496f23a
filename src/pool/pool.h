/* pool.h - the btrfs storage pool under DATA/pool.
 *
 *   DATA/pool/templates/<name>/<ver>/   read-only subvolume (rootfs/ inside)
 *   DATA/pool/sandboxes/<id>/           writable snapshot of a template
 *   DATA/pool/snapshots/<id>/<snap>/    read-only snapshots of a sandbox
 *
 * When DATA is itself on btrfs, DATA/pool is a plain directory there. Otherwise
 * DATA/pool.img is a sparse file holding a btrfs filesystem, loop-mounted (with
 * autoclear, so the umount frees the loop device) at DATA/pool.
 *
 * Subvolume work uses btrfs ioctls directly: no process is started on the hot
 * path. All paths given to these helpers are trusted (built by the node manager
 * from validated ids); none of them comes from inside a sandbox.
 */
#ifndef AIRLOCK_POOL_H
#define AIRLOCK_POOL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../lib/err.h"

/* Make DATA/pool a mounted btrfs pool with templates/, sandboxes/ and
 * snapshots/, quotas enabled, and private mount propagation. Idempotent: an
 * already mounted pool is kept; an existing pool.img is mounted again (after a
 * reboot). *mounted_by_us (may be NULL) tells whether this call mounted it. */
int pool_ensure(const char *data_dir, uint64_t size_mb, bool *mounted_by_us, err_t *err);
/* Unmount DATA/pool if it is a loop mount of DATA/pool.img. 0 when not mounted. */
int pool_release(const char *data_dir, err_t *err);

/* Create an empty subvolume at path (its parent must exist). */
int pool_subvol_create(const char *path, err_t *err);
/* Snapshot subvolume src to dst (dst must not exist; its parent must). */
int pool_subvol_snapshot(const char *src, const char *dst, bool readonly, err_t *err);
/* Delete the subvolume at path; 0 when it does not exist. A read-only
 * subvolume is made writable first. */
int pool_subvol_delete(const char *path, err_t *err);
int pool_subvol_set_readonly(const char *path, bool readonly, err_t *err);
/* 1 when path is a btrfs subvolume root, 0 when not, -errno on failure. */
int pool_is_subvol(const char *path);
/* Limit the exclusive bytes of the subvolume at path (btrfs qgroup). A no-op
 * when quotas are not enabled on the filesystem (returns 0). */
int pool_qgroup_limit(const char *path, uint64_t bytes, err_t *err);
/* Enable quotas on the filesystem holding path (idempotent). Tries simple
 * quotas first (cheap on snapshot), then full qgroups. */
int pool_quota_enable(const char *path, err_t *err);
/* The transaction id that created the subvolume at path (its otransid). */
int pool_subvol_otransid(const char *path, uint64_t *transid, err_t *err);
/* Bytes of file data in the subvolume at path written after transaction
 * `since` (regular and inline extents whose generation is newer), found by
 * BTRFS_IOC_TREE_SEARCH restricted to tree blocks newer than `since`, so the
 * cost follows what changed, not the subvolume's size. Deletions do not
 * count. Needs CAP_SYS_ADMIN. */
int pool_changed_bytes(const char *path, uint64_t since, uint64_t *bytes, err_t *err);
/* pool-send.c. Write `btrfs send -p parent snap` to out_fd: the changes
 * of the read-only subvolume snap against the read-only subvolume parent
 * (an ancestor of snap by snapshot); parent NULL: `btrfs send snap`, the
 * whole subvolume (a template moving to another node). The child btrfs is waited for with w
 * (NULL: waitpid), for a caller whose reaper thread takes every exit
 * status (nodemgr). */
struct pool_waiter {
	int (*wait)(void *arg, pid_t pid, int *status);  /* 0 or -errno */
	void *arg;
};
int pool_send(const char *snap, const char *parent, int out_fd, const struct pool_waiter *w,
	      err_t *err);
/* Apply a send stream read from in_fd under the directory dir (`btrfs
 * receive --chroot`): the stream's subvolume appears there, read-only.
 * The stream is untrusted; receive is confined to dir. */
int pool_receive(const char *dir, int in_fd, const struct pool_waiter *w, err_t *err);
/* The same for a stream that must make its subvolume from nothing (a
 * template from another node): the mount root receive resolves a
 * snapshot's parent and a clone's source under is dir too (`-m dir`), so
 * such a stream cannot reach any subvolume outside dir (--chroot alone
 * confines the paths receive writes, not those it reads: it looks parents
 * and clone sources up by uuid in the whole filesystem and opens them from
 * the real mount root). */
int pool_receive_new(const char *dir, int in_fd, const struct pool_waiter *w, err_t *err);
/* Give the writable subvolume at path its own uuid as "received uuid" (and
 * its ctransid as stransid), as if it had come from a receive. A stream
 * sent with it as parent then names it by that uuid for its clones, which
 * `btrfs receive` (btrfs-progs 6.2) looks up by received uuid only: without
 * it, a stream that clones from the parent (a vm disk image) cannot be
 * received. Mark before making it read-only (the kernel refuses after). */
int pool_subvol_mark_received(const char *path, err_t *err);
/* The same for a read-only subvolume that has no received uuid yet (made
 * writable for the moment it takes, then read-only again); 0 when it has
 * one. The caller serialises calls on one path. */
int pool_subvol_ensure_received(const char *path, err_t *err);
/* The identities of the subvolume at path, as 36-char text (lower-case
 * hex, 8-4-4-4-12; "" for an all-zero uuid): its own uuid, its received
 * uuid (set by `btrfs receive` or pool_subvol_mark_received) and its parent
 * uuid (set when it was made as a snapshot of another); and whether it is
 * read-only. */
struct pool_subvol_ids {
	char uuid[37], received_uuid[37], parent_uuid[37];
	bool readonly;
};
int pool_subvol_ids(const char *path, struct pool_subvol_ids *out, err_t *err);
/* Total and free bytes of the filesystem holding path. */
int pool_usage(const char *path, uint64_t *total, uint64_t *free_bytes, err_t *err);

/* The byte ranges [start, end) of files a and b (from offset 0 to size)
 * that are the same extent on disk, at the same offset in both: a
 * reflink's ranges that neither file wrote since, whose bytes are equal
 * without reading them. Told by FIEMAP; a range whose address the kernel
 * gives only approximately (delalloc, compressed, inline, ...) is never
 * counted as shared. Sorted, disjoint; *out is malloc'd (NULL when none).
 * 0, or -errno (e.g. -EOPNOTSUPP off btrfs): then nothing is known shared. */
struct pool_span {
	uint64_t start, end;
};
int pool_shared_spans(int a, int b, uint64_t size, struct pool_span **out, size_t *n,
		      err_t *err);
/* The byte ranges of files a and b (from offset 0 to size) that are a hole
 * in both, so read as zeros in both without reading them. Told by
 * SEEK_HOLE / SEEK_DATA, which on btrfs count a page written but not yet
 * on disk as data; neither file may be written meanwhile. Sorted,
 * disjoint, as pool_shared_spans. */
int pool_hole_spans(int a, int b, uint64_t size, struct pool_span **out, size_t *n,
		    err_t *err);

#endif
