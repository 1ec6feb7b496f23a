/* jail-userns.c - uid/gid maps and the idmapped rootfs mount (parent side).
 *
 * Each jail gets 65536 host ids starting at host_base; uid 0 inside is
 * host_base outside. The rootfs on disk is owned by host ids 0..65535 (as
 * the template was extracted), so the rootfs is mounted through an idmapping
 * with the jail's user namespace: inside, files appear with their on-disk
 * owners (root is root), and files the jail writes land on disk as 0..65535
 * again. The on-disk ids never depend on which slot a sandbox got, so
 * snapshots move between nodes and slots unchanged.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../../lib/util.h"
#include "jail.h"

static int write_map(pid_t pid, const char *which, uid_t base, err_t *err)
{
	char path[64], line[64];
	int fd, r;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, which);
	snprintf(line, sizeof(line), "0 %u %u\n", (unsigned)base, JAIL_ID_RANGE);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return err_sys(err, "open %s", path);
	r = write_all(fd, line, strlen(line));
	close(fd);
	if (r < 0) {
		errno = -r;
		return err_sys(err, "write %s", path);
	}
	return 0;
}

int jail_write_idmaps(pid_t pid, uid_t base, err_t *err)
{
	/* Written by host root, so setgroups stays allowed in the jail: its
	 * root may drop supplementary groups (apt's sandbox user does). */
	if (write_map(pid, "uid_map", base, err) < 0 || write_map(pid, "gid_map", base, err) < 0)
		return -err->code;
	return 0;
}

int jail_idmapped_attach(const char *rootfs, pid_t pid, const char *target, err_t *err)
{
	char path[64];
	_cleanup_close_ int userns = -1;
	_cleanup_close_ int tree = -1;
	struct mount_attr attr;

	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
	userns = open(path, O_RDONLY | O_CLOEXEC);
	if (userns < 0)
		return err_sys(err, "open %s", path);
	tree = open_tree(AT_FDCWD, rootfs, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
	if (tree < 0)
		return err_sys(err, "open_tree %s", rootfs);
	memset(&attr, 0, sizeof(attr));
	/* nodev: device nodes in a template (mmdebstrap leaves some) are dead
	 * inside; /dev is built from bind mounts. nosuid: no_new_privs makes
	 * set-uid bits inert anyway; say so at the mount too. */
	attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID;
	attr.userns_fd = (uint64_t)userns;
	if (mount_setattr(tree, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0)
		return err_sys(err, "idmap mount of %s", rootfs);
	/* The jail's mount namespace must own the mount it pivots into, and a
	 * detached tree made here belongs to us: attach it (briefly) where the
	 * jail's copy of our namespace will find it. The parent directory is a
	 * private mount, so this never propagates anywhere. */
	if (mkdir(target, 0700) < 0 && errno != EEXIST)
		return err_sys(err, "mkdir %s", target);
	if (move_mount(tree, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) < 0) {
		int r = err_sys(err, "attach idmapped mount at %s", target);
		rmdir(target);
		return r;
	}
	return 0;
}

void jail_idmapped_detach(const char *target)
{
	if (umount2(target, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT)
		return;
	rmdir(target);
}
