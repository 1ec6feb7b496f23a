/* export.c - the artifacts of a suspended sandbox, made from and turned
 * back into pool state. nodemgr has no network client: the node opens each
 * artifact's file in its own staging directory and passes the fd with the
 * request (SCM_RIGHTS), so nodemgr never resolves a path the node chose.
 *
 *   export disk   `btrfs send -p templates/<t>/<v> snapshots/<id>/<snap>`
 *                 into the fd: only what the sandbox changed against its
 *                 template (the snapshot must have been taken already)
 *   import disk   `btrfs receive` of the fd under snapshots/<id>/, which
 *                 rebuilds snapshots/<id>/<snap> read-only on the template;
 *                 the node then starts the sandbox from it as a fork of
 *                 itself (nm_sandbox_fork with parent = id)
 *   vm memory and device state: vm-suspend.c
 *
 * A stream that came back from the store is untrusted bytes parsed as
 * root. Either the node checked it against the manifest (size and
 * SHA-256), and the manifest against the digest kept in its database,
 * before asking; or (a sealed artifact, which may come as a pipe) the node
 * opens each chunk (AES-GCM under the suspend's data key, bound to its
 * index, object, snapshot, sandbox and tenant) before it writes the
 * chunk's bytes, so receive only ever reads what this sandbox's suspend
 * wrote, and a stream cut short fails the restore (the node deletes what
 * receive made of it). receive runs confined (--chroot) and stops at its
 * first error. Every id reaching here passed mgr_valid_sandbox_id / valid_spec
 * (verbs.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../lib/log.h"
#include "../../lib/util.h"
#include "../../pool/pool.h"
#include "../core/nodemgr-internal.h"
#include "../vm/vm.h"
#include "snapshot.h"

/* btrfs is nodemgr's child: its exit status comes through the reaper. */
static int wait_child(void *arg, pid_t pid, int *status)
{
	return mgr_wait_child(arg, pid, status, -1);
}

int snap_suspend_export(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *snap,
			uint32_t artifact, int fd, int64_t *size, const char *want_base,
			char base_sha[65], err_t *err)
{
	_cleanup_free_ char *src = xasprintf("%s/snapshots/%s/%s", s->pool, spec->id, snap);
	_cleanup_free_ char *parent = xasprintf("%s/templates/%s/%u", s->pool, spec->template_name,
						spec->template_version);
	uint64_t t0 = now_us();
	struct stat st;
	bool piped;
	int r;

	*size = -1;
	base_sha[0] = '\0';
	if ((r = mgr_artifact_stream_check(fd, true, &piped, err)) < 0)
		return r;
	if (artifact != NM_ARTIFACT_DISK)
		return vm_suspend_export(s, spec, snap, artifact, fd, size, want_base,
					 base_sha, err);
	if (pool_is_subvol(src) != 1)
		return err_set(err, ENOENT, "sandbox %s has no snapshot %s", spec->id, snap);
	if (pool_is_subvol(parent) != 1)
		return err_set(err, ENOENT, "template %s/%u not found", spec->template_name,
			       spec->template_version);
	/* A template built before templates got a received uuid gets it now,
	 * or its streams could not be received (pool_subvol_mark_received). */
	if ((r = mgr_template_ensure_received(parent, err)) < 0)
		return r;
	if (!piped && (ftruncate(fd, 0) < 0 || lseek(fd, 0, SEEK_SET) < 0))
		return err_sys(err, "truncate artifact fd");
	struct pool_waiter w = { wait_child, s };
	if ((r = pool_send(src, parent, fd, &w, err)) < 0)
		return err_wrap(err, "sandbox %s: disk of %s", spec->id, snap);
	if (!piped && fstat(fd, &st) == 0)
		*size = st.st_size;
	log_info("sandbox %s: disk of %s against %s/%u: %lld bytes in %.1f ms", spec->id, snap,
		 spec->template_name, spec->template_version, (long long)*size,
		 (now_us() - t0) / 1000.0);
	return 0;
}

int snap_suspend_import(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *snap,
			uint32_t artifact, int fd, const char *base_sha, err_t *err)
{
	_cleanup_free_ char *dir = xasprintf("%s/snapshots/%s", s->pool, spec->id);
	_cleanup_free_ char *dst = xasprintf("%s/%s", dir, snap);
	_cleanup_free_ char *sbx = xasprintf("%s/sandboxes/%s", s->pool, spec->id);
	uint64_t t0 = now_us();
	err_t e2 = { 0 };
	bool piped;
	int r;

	if ((r = mgr_artifact_stream_check(fd, false, &piped, err)) < 0)
		return r;
	if (access(sbx, F_OK) == 0)
		return err_set(err, EEXIST, "sandbox %s has a subvolume: not suspended here", spec->id);
	if (artifact != NM_ARTIFACT_DISK)
		return vm_suspend_import(s, spec, snap, artifact, fd, base_sha, err);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return err_sys(err, "mkdir %s", dir);
	/* What an earlier, failed restore left. */
	if ((r = pool_subvol_delete(dst, err)) < 0)
		return r;
	if (!piped && lseek(fd, 0, SEEK_SET) < 0)
		return err_sys(err, "rewind artifact fd");
	struct pool_waiter w = { wait_child, s };
	r = pool_receive(dir, fd, &w, err);
	if (r == 0 && pool_is_subvol(dst) != 1)
		r = err_set(err, EPROTO, "the disk stream made no subvolume %s", snap);
	if (r < 0) {
		if (snap_delete_all(s, spec->id, &e2) < 0)
			log_warn("sandbox %s: clean up a failed receive: %s", spec->id, e2.msg);
		return err_wrap(err, "sandbox %s: rebuild the disk of %s", spec->id, snap);
	}
	log_info("sandbox %s: disk of %s received in %.1f ms", spec->id, snap,
		 (now_us() - t0) / 1000.0);
	return 0;
}
