/* jail-mount.c - the jail's mount namespace (runs in init B, before exec).
 *
 * B is inside the jail's user, mount and pid namespaces, still seeing the
 * host's mount tree (a copy, locked). It builds the new root there, then
 * pivots into it and detaches everything of the host:
 *
 *   /            the idmapped rootfs (attached by the parent), nodev nosuid
 *   /proc        fresh procfs of the jail's pid namespace, with what container
 *                runtimes hide hidden: the host's kernel image, timers,
 *                scheduler state and keys read as empty (/dev/null over
 *                them), host hardware dirs as empty read-only tmpfs, and
 *                kernel settings (/proc/sys, irq, bus, fs, sysrq-trigger)
 *                read-only. Those files are not per pid namespace.
 *   /dev         tmpfs with null zero full random urandom tty bound from the
 *                host, devpts (newinstance), ptmx -> pts/ptmx, shm tmpfs
 *   /tmp, /work  whatever the rootfs has (the sandbox's own disk)
 *   /sys         not mounted: it would show host devices
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "jail.h"

#define FAIL(what) (snprintf(msg, cap, "%s: %s", (what), strerror(errno)), -errno)

static int bind_dev(const char *name, char *msg, size_t cap)
{
	char src[64], dst[64];
	int fd;

	snprintf(src, sizeof(src), "/dev/%s", name);
	snprintf(dst, sizeof(dst), "dev/%s", name);
	fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
	if (fd < 0)
		return FAIL(dst);
	close(fd);
	if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
		return FAIL(src);
	return 0;
}

/* Hide or freeze the parts of /proc (mounted at "proc") that show or
 * steer the host rather than the jail. A path this kernel lacks is
 * skipped. */
static int mask_proc(char *msg, size_t cap)
{
	static const char *const empty_files[] = {
		"proc/kcore", "proc/keys", "proc/key-users", "proc/timer_list",
		"proc/sched_debug", "proc/latency_stats", "proc/timer_stats",
	};
	static const char *const empty_dirs[] = { "proc/acpi", "proc/scsi", "proc/asound" };
	static const char *const read_only[] = {
		"proc/sys", "proc/irq", "proc/bus", "proc/fs", "proc/sysrq-trigger",
	};
	const unsigned long ro = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC;

	for (size_t i = 0; i < sizeof(empty_files) / sizeof(empty_files[0]); i++)
		if (access(empty_files[i], F_OK) == 0 &&
		    mount("dev/null", empty_files[i], NULL, MS_BIND, NULL) < 0)
			return FAIL(empty_files[i]);
	for (size_t i = 0; i < sizeof(empty_dirs) / sizeof(empty_dirs[0]); i++)
		if (access(empty_dirs[i], F_OK) == 0 &&
		    mount("tmpfs", empty_dirs[i], "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
			  "size=0") < 0)
			return FAIL(empty_dirs[i]);
	for (size_t i = 0; i < sizeof(read_only) / sizeof(read_only[0]); i++)
		if (access(read_only[i], F_OK) == 0 &&
		    (mount(read_only[i], read_only[i], NULL, MS_BIND | MS_REC, NULL) < 0 ||
		     mount(NULL, read_only[i], NULL, ro, NULL) < 0))
			return FAIL(read_only[i]);
	return 0;
}

int jail_mount_root(int root_fd, char *msg, size_t cap)
{
	static const char *const devs[] = { "null", "zero", "full", "random", "urandom", "tty" };
	static const char *const links[][2] = {
		{ "pts/ptmx", "dev/ptmx" }, { "/proc/self/fd", "dev/fd" },
		{ "/proc/self/fd/0", "dev/stdin" }, { "/proc/self/fd/1", "dev/stdout" },
		{ "/proc/self/fd/2", "dev/stderr" },
	};
	int t;

	/* Nothing we mount may propagate back to the host, and nothing the
	 * host mounts later may appear in here. */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return FAIL("make / private");
	/* root_fd is our (locked) copy of the idmapped mount; pivot_root
	 * refuses a locked new root, so clone it (the clone belongs to this
	 * namespace) and stack the clone on top. */
	t = open_tree(root_fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
	if (t < 0)
		return FAIL("clone idmapped rootfs");
	if (move_mount(t, "", root_fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
		return FAIL("attach idmapped rootfs");
	/* Everything below is relative to the new root. */
	if (fchdir(t) < 0)
		return FAIL("enter rootfs");
	close(t);

	if (mount("tmpfs", "dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=256k") < 0)
		return FAIL("mount /dev");
	for (size_t i = 0; i < sizeof(devs) / sizeof(devs[0]); i++)
		if (bind_dev(devs[i], msg, cap) < 0)
			return -EPERM;
	if (mkdir("dev/pts", 0755) < 0 ||
	    mount("devpts", "dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
		  "newinstance,ptmxmode=0666,mode=0620") < 0)
		return FAIL("mount /dev/pts");
	if (mkdir("dev/shm", 01777) < 0 ||
	    mount("shm", "dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") < 0)
		return FAIL("mount /dev/shm");
	for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++)
		if (symlink(links[i][0], links[i][1]) < 0)
			return FAIL(links[i][1]);
	if (mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		return FAIL("mount /proc");
	if (mask_proc(msg, cap) < 0)
		return -EPERM;

	/* pivot_root(".", ".") stacks the old root on top of the new one;
	 * detaching "." then drops every host mount from this namespace. */
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		return FAIL("pivot_root");
	if (umount2(".", MNT_DETACH) < 0)
		return FAIL("detach old root");
	if (chdir("/") < 0)
		return FAIL("chdir /");
	return 0;
}
