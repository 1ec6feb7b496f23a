/* snapshot.c - disk snapshots of sandboxes (ns: the rootfs tree; vm: the
 * subvolume holding its rootfs.ext4, with the vCPUs stopped around it):
 *
 *   DATA/pool/snapshots/<id>/<snap>   read-only btrfs snapshot of sandboxes/<id>
 *
 * A snapshot is one BTRFS_IOC_SNAP_CREATE_V2: it shares every extent with the
 * sandbox, so it costs the same whatever the disk size. Every id reaching
 * here passed mgr_valid_sandbox_id (verbs.c); paths are built only from such ids
 * under srv->pool. Rollback, which needs the jail, lives in mgr-sandbox.c.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../lib/fault.h"
#include "../../lib/log.h"
#include "../../lib/phases.h"
#include "../../lib/util.h"
#include "../../pool/pool.h"
#include "../core/nodemgr-internal.h"
#include "../vm/vm-internal.h"
#include "../vm/vm.h"
#include "snapshot.h"

/* The jail of id, marked busy so no destroy or rollback runs meanwhile, or
 * NULL when nodemgr holds no jail (a stopped sandbox's subvolume can still
 * be snapshotted). *rc < 0 when the request must fail (busy). */
static struct jail *hold(struct nm_server *s, const char *id, int *rc, err_t *err)
{
	struct jail *j = mgr_jail_acquire(s, id, NULL, err);

	*rc = 0;
	if (!j) {
		if (err->code == ENOENT) {
			err_clear(err);
			return NULL;
		}
		*rc = -err->code;
		return NULL;
	}
	return j;
}

int snap_create(struct nm_server *s, const char *id, const char *snap, const char *prev,
		enum snap_kind kind, const struct nm_sandbox_spec *fork_spec, int64_t *size,
		err_t *err)
{
	bool full = kind != SNAP_DISK, memory_only = kind == SNAP_MEMORY;
	_cleanup_free_ char *state =
		xasprintf("%s/snapshots/%s/%s" VM_FULL_SUFFIX, s->pool, id, snap);
	_cleanup_free_ char *mem = xasprintf("%s/snapshots/%s/%s" VM_MEM_SUFFIX, s->pool, id, snap);
	_cleanup_free_ char *delta =
		xasprintf("%s/snapshots/%s/%s" VM_DELTA_SUFFIX, s->pool, id, snap);
	_cleanup_free_ char *fdisk =
		xasprintf("%s/snapshots/%s/%s" VM_DISK_SUFFIX, s->pool, id, snap);
	_cleanup_free_ char *sdisk = xasprintf("%s/sandboxes/%s/rootfs.ext4", s->pool, id);
	bool fork_form = false;
	_cleanup_free_ char *sbx = xasprintf("%s/sandboxes/%s", s->pool, id);
	_cleanup_free_ char *dir = xasprintf("%s/snapshots/%s", s->pool, id);
	_cleanup_free_ char *dst = xasprintf("%s/%s", dir, snap);
	_cleanup_free_ char *prev_path = prev[0] ? xasprintf("%s/%s", dir, prev) : NULL;
	uint64_t t0 = now_us(), t1, since = 0, bytes = 0, mem_bytes = 0;
	struct phases ph;
	char steps[400];
	struct jail *j;
	err_t e2 = { 0 };
	bool stopped = false;
	int r;

	*size = -1;
	phases_start(&ph);
	j = hold(s, id, &r, err);
	if (r < 0)
		return r;
	phases_mark(&ph, "hold");
	if (full && !j) {
		r = err_set(err, ENOENT, "sandbox %s has no running vm", id);
		goto out;
	}
	if (full && !j->vm) {
		r = err_set(err, EOPNOTSUPP, "full snapshots need a vm sandbox (the ns backend "
			    "has no memory checkpoint)");
		goto out;
	}
	/* vm: the guest synced (the node asked it to); with its vCPUs stopped
	 * the image holds no half-written request while btrfs snapshots it. */
	if (j && j->vm && (r = vm_hold_still(s, j, &stopped, err)) < 0)
		goto out;
	FAULT_POINT("nm.snapshot.after_hold");
	phases_mark(&ph, "stop");
	if (pool_is_subvol(sbx) != 1) {
		r = err_set(err, ENOENT, "sandbox %s has no subvolume", id);
		goto out;
	}
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		r = err_sys(err, "mkdir %s", dir);
		goto out;
	}
	if (!memory_only && access(dst, F_OK) == 0) {
		r = err_set(err, EEXIST, "sandbox %s already has a snapshot %s", id, snap);
		goto out;
	}
	/* the memory alone: beside its disk snapshot, once */
	if (memory_only && pool_is_subvol(dst) != 1) {
		r = err_set(err, ENOENT, "sandbox %s has no disk snapshot %s", id, snap);
		goto out;
	}
	if (memory_only && (access(state, F_OK) == 0 || access(mem, F_OK) == 0)) {
		r = err_set(err, EEXIST, "snapshot %s of sandbox %s has its memory already", snap,
			    id);
		goto out;
	}
	/* Full: memory and device state go to <snap>.vmstate (and <snap>.mem)
	 * beside the disk snapshot, both while the vCPUs are stopped: one
	 * point. Not inside the subvolume: the btrfs snapshot would first
	 * write back the whole freshly written memory (measured: about half
	 * of a full snapshot's time), while beside it it stays in the page
	 * cache. */
	r = -ENOTSUP;
	if (full && fork_spec) {
		r = vm_save_fork(s, j, fork_spec, state, delta, &mem_bytes, err);
		fork_form = r == 0;
		if (r < 0) {
			/* Not possible (-ENOTSUP), or it failed (memory kept
			 * moving): the whole RAM file as for any full snapshot. */
			log_debug("snapshot %s/%s: not in the fork form: %s", id, snap, err->msg);
			err_clear(err);
			r = -ENOTSUP;
		}
	}
	if (full && r == -ENOTSUP && (r = vm_save_full(s, j, state, mem, &mem_bytes, err)) < 0) {
		unlink(state);
		unlink(mem);
		goto out;
	}
	phases_mark(&ph, "memory");
	/* The fork form's disk is a reflink of the image alone: all a fork
	 * standby takes from the snapshot (vm_fork_standby), without the
	 * transaction commit of a subvolume snapshot (13-100 ms here). */
	if (memory_only)
		r = 0;   /* its disk was taken before, with the vCPUs stopped since */
	else if (fork_form)
		r = vm_reflink(sdisk, fdisk, err);
	else
		r = pool_subvol_snapshot(sbx, dst, true, err);
	if (r == 0)
		FAULT_POINT("nm.snapshot.after_subvol");
	phases_mark(&ph, "disk");
	if (r < 0 && full) {
		unlink(state);
		unlink(mem);
		unlink(delta);
	}
	if (stopped && vm_freeze(s, j, false, &e2) < 0)
		log_warn("snapshot %s/%s: resume: %s", id, snap, e2.msg);
	stopped = false;
	phases_mark(&ph, "cont");
	if (r < 0)
		goto out;
	t1 = now_us();
	if (fork_form || memory_only) {
		/* A fork's: nobody keeps it; the memory alone: its disk was
		 * counted with its snapshot. What it takes is the memory and
		 * devices. */
		struct stat st;
		*size = (int64_t)mem_bytes + (stat(state, &st) == 0 ? st.st_blocks * 512 : 0);
		goto done;
	}
	/* The delta: data written since the previous snapshot was taken (or
	 * since the sandbox subvolume was made). Not counted against the
	 * snapshot's success: a failure only leaves the size unknown. */
	if (pool_subvol_otransid(prev_path && pool_is_subvol(prev_path) == 1 ? prev_path : sbx,
				 &since, &e2) == 0 &&
	    pool_changed_bytes(dst, since, &bytes, &e2) == 0)
		*size = (int64_t)bytes;
	else
		log_warn("snapshot %s/%s: size of the delta unknown: %s", id, snap, e2.msg);
	/* A full one's memory written (new data each time) and the device
	 * state beside a memory file (a stream's size is mem_bytes already)
	 * are always known: the node counts them against the sandbox's disk
	 * quota, these files being outside its subvolume. */
	if (full) {
		struct stat st;

		*size = (*size < 0 ? 0 : *size) + (int64_t)mem_bytes;
		if ((access(mem, F_OK) == 0 || access(delta, F_OK) == 0) && stat(state, &st) == 0)
			*size += (int64_t)st.st_blocks * 512;   /* what it takes on disk */
	}
done:
	phases_mark(&ph, "size");
	phases_text(&ph, steps, sizeof(steps));
	log_debug("snapshot %s/%s: %.2f ms, delta %.2f ms (%lld bytes): %s", id, snap,
		  (t1 - t0) / 1000.0, (now_us() - t1) / 1000.0, (long long)*size, steps);
out:
	if (stopped && vm_freeze(s, j, false, &e2) < 0)
		log_warn("snapshot %s/%s: resume: %s", id, snap, e2.msg);
	if (j)
		mgr_jail_release(s, j);
	return r;
}

int snap_delete(struct nm_server *s, const char *id, const char *snap, err_t *err)
{
	_cleanup_free_ char *dst = xasprintf("%s/snapshots/%s/%s", s->pool, id, snap);
	_cleanup_free_ char *state = xasprintf("%s" VM_FULL_SUFFIX, dst);
	_cleanup_free_ char *mem = xasprintf("%s" VM_MEM_SUFFIX, dst);
	_cleanup_free_ char *delta = xasprintf("%s" VM_DELTA_SUFFIX, dst);
	_cleanup_free_ char *disk = xasprintf("%s" VM_DISK_SUFFIX, dst);

	/* Only a read-only subvolume nobody mounts (and a full one's memory
	 * files, which a restore reads through its own fd, and a QEMU that
	 * maps <snap>.mem keeps mapped after the unlink): no jail lock. */
	if (unlink(state) < 0 && errno != ENOENT)
		return err_sys(err, "remove %s", state);
	if (unlink(mem) < 0 && errno != ENOENT)
		return err_sys(err, "remove %s", mem);
	if (unlink(delta) < 0 && errno != ENOENT)
		return err_sys(err, "remove %s", delta);
	if (unlink(disk) < 0 && errno != ENOENT)
		return err_sys(err, "remove %s", disk);
	return pool_subvol_delete(dst, err);   /* none in the fork form: 0 */
}

static bool has_suffix(const char *name, const char *suffix)
{
	size_t nl = strlen(name), sl = strlen(suffix);

	return nl > sl && !strcmp(name + nl - sl, suffix);
}

int snap_delete_all(struct nm_server *s, const char *id, err_t *err)
{
	_cleanup_free_ char *dir = xasprintf("%s/snapshots/%s", s->pool, id);
	struct dirent *de;
	DIR *d = opendir(dir);
	int r = 0;

	if (!d)
		return errno == ENOENT ? 0 : err_sys(err, "open %s", dir);
	while ((de = readdir(d))) {
		_cleanup_free_ char *p = NULL;
		if (has_suffix(de->d_name, VM_FULL_SUFFIX) || has_suffix(de->d_name, VM_MEM_SUFFIX) ||
		    has_suffix(de->d_name, VM_DELTA_SUFFIX) || has_suffix(de->d_name, VM_DISK_SUFFIX)) {
			/* a full snapshot's memory (its subvolume is deleted too) */
			unlinkat(dirfd(d), de->d_name, 0);
			continue;
		}
		if (!mgr_valid_sandbox_id(de->d_name, sizeof(de->d_name)))
			continue;
		p = xasprintf("%s/%s", dir, de->d_name);
		if ((r = pool_subvol_delete(p, err)) < 0)
			break;
	}
	closedir(d);
	if (r == 0 && rmdir(dir) < 0 && errno != ENOENT)
		r = err_sys(err, "rmdir %s", dir);
	return r;
}
