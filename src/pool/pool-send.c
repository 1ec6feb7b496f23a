/* pool-send.c - a subvolume as a btrfs send stream against a parent, and
 * back (btrfs-progs' `btrfs send -p` and `btrfs receive`).
 *
 * The stream of `send -p PARENT SNAP` holds only what SNAP changed against
 * PARENT (new and changed extents, metadata, unlinks); `receive` rebuilds
 * SNAP as a new read-only subvolume on a filesystem that holds a subvolume
 * with PARENT's uuid (or received uuid), by snapshotting that and applying
 * the changes. Both ends run as root in nodemgr: send reads a snapshot
 * nodemgr made; receive parses a stream that came back from the object
 * store, so it is confined (receive --chroot) to the one directory it
 * writes in, and stops at its first error.
 */
#include "pool.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/btrfs.h>
#include <sys/ioctl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../lib/util.h"

/* True when btrfs's last line of stderr ends in strerror(ENOSPC): the pool
 * is full, which the caller reports as such (507), not as an internal
 * error. Only the end of a whole line counts: receive's messages name
 * paths from the stream, which are a sandbox's own file names, so a line
 * cut short (its end lost) may end in whatever a tenant named a file; a
 * whole line ends in btrfs's "%m". At worst a tenant turns its own failed
 * restore's 500 into a 507. */
static bool enospc_line(const char *line, bool cut)
{
	static const char tail[] = "No space left on device";
	size_t n = strlen(line), t = sizeof(tail) - 1;

	return !cut && n >= t && strcmp(line + n - t, tail) == 0;
}

/* Run argv with stdin = in_fd (or /dev/null) and stdout = out_fd (or
 * /dev/null); its stderr's last line goes into the error on failure. */
static int run_fds(char *const argv[], int in_fd, int out_fd, const struct pool_waiter *w,
		   err_t *err)
{
	char msg[512] = "", cur[512];
	size_t len = 0;
	bool cut = false, msg_cut = false;   /* the line was longer than cur */
	int ep[2], st;
	pid_t pid;

	if (pipe2(ep, O_CLOEXEC) < 0)
		return err_sys(err, "pipe");
	pid = fork();
	if (pid < 0) {
		close(ep[0]);
		close(ep[1]);
		return err_sys(err, "fork");
	}
	if (pid == 0) {
		int nul = open("/dev/null", O_RDWR);
		if (dup2(in_fd >= 0 ? in_fd : nul, 0) < 0 || dup2(out_fd >= 0 ? out_fd : nul, 1) < 0 ||
		    dup2(ep[1], 2) < 0)
			_exit(126);
		syscall(SYS_close_range, 3U, ~0U, 0);
		signal(SIGPIPE, SIG_DFL);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(ep[1]);
	for (;;) {
		char tmp[512];
		ssize_t n = read(ep[0], tmp, sizeof(tmp));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		/* keep the last non-empty line */
		for (ssize_t i = 0; i < n; i++) {
			if (tmp[i] == '\n') {
				if (len) {
					cur[len] = '\0';
					memcpy(msg, cur, len + 1);
					msg_cut = cut;
				}
				len = 0;
				cut = false;
			} else if (len + 1 < sizeof(cur)) {
				cur[len++] = tmp[i];
			} else {
				cut = true;
			}
		}
	}
	if (len) {
		cur[len] = '\0';
		memcpy(msg, cur, len + 1);
		msg_cut = cut;
	}
	close(ep[0]);
	if (w) {
		int r = w->wait(w->arg, pid, &st);
		if (r < 0) {
			errno = -r;
			return err_sys(err, "wait for %s", argv[0]);
		}
	} else {
		while (waitpid(pid, &st, 0) < 0)
			if (errno != EINTR)
				return err_sys(err, "waitpid %s", argv[0]);
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return err_set(err, enospc_line(msg, msg_cut) ? ENOSPC : EIO,
			       "%s %s failed (status %d): %s", argv[0], argv[2], st,
			       msg[0] ? msg : "no message");
	return 0;
}

int pool_send(const char *snap, const char *parent, int out_fd, const struct pool_waiter *w,
	      err_t *err)
{
	char *argv[] = { "btrfs", "-q", "send", "-p", (char *)parent, (char *)snap, NULL };
	char *full[] = { "btrfs", "-q", "send", (char *)snap, NULL };

	return run_fds(parent ? argv : full, -1, out_fd, w, err);
}

int pool_receive(const char *dir, int in_fd, const struct pool_waiter *w, err_t *err)
{
	/* --chroot: the stream's paths resolve inside dir only; -E 1: stop
	 * at the first error instead of carrying on. */
	char *argv[] = { "btrfs", "-q", "receive", "-E", "1", "--chroot", (char *)dir, NULL };

	return run_fds(argv, in_fd, -1, w, err);
}

int pool_receive_new(const char *dir, int in_fd, const struct pool_waiter *w, err_t *err)
{
	/* -m dir: receive opens its "mount root" before it chroots and looks
	 * up parents and clone sources by their path from the filesystem's
	 * root, relative to it; from dir no such path leads out. */
	char *argv[] = { "btrfs", "-q", "receive", "-E", "1", "--chroot", "-m", (char *)dir,
			 (char *)dir, NULL };

	return run_fds(argv, in_fd, -1, w, err);
}

int pool_subvol_mark_received(const char *path, err_t *err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct btrfs_ioctl_get_subvol_info_args info;
	struct btrfs_ioctl_received_subvol_args rs;

	if (fd < 0)
		return err_sys(err, "open %s", path);
	memset(&info, 0, sizeof(info));
	if (ioctl(fd, BTRFS_IOC_GET_SUBVOL_INFO, &info) < 0)
		return err_sys(err, "subvolume info of %s", path);
	memset(&rs, 0, sizeof(rs));
	memcpy(rs.uuid, info.uuid, sizeof(rs.uuid));
	rs.stransid = info.ctransid;
	if (ioctl(fd, BTRFS_IOC_SET_RECEIVED_SUBVOL, &rs) < 0)
		return err_sys(err, "mark %s received", path);
	return 0;
}

int pool_subvol_ensure_received(const char *path, err_t *err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct btrfs_ioctl_get_subvol_info_args info;
	static const uint8_t zero[BTRFS_UUID_SIZE];
	int r;

	if (fd < 0)
		return err_sys(err, "open %s", path);
	memset(&info, 0, sizeof(info));
	if (ioctl(fd, BTRFS_IOC_GET_SUBVOL_INFO, &info) < 0)
		return err_sys(err, "subvolume info of %s", path);
	if (memcmp(info.received_uuid, zero, sizeof(zero)) != 0)
		return 0;
	/* A template built before templates were marked: writable for the
	 * moment it takes (nothing writes into a template), marked, read-only
	 * again. */
	if ((r = pool_subvol_set_readonly(path, false, err)) < 0)
		return r;
	r = pool_subvol_mark_received(path, err);
	if (pool_subvol_set_readonly(path, true, r < 0 ? &(err_t){ 0 } : err) < 0 && r == 0)
		r = -err->code;
	return r;
}

static void uuid_text(const uint8_t u[BTRFS_UUID_SIZE], char out[37])
{
	static const uint8_t zero[BTRFS_UUID_SIZE];
	char *p = out;

	out[0] = '\0';
	if (memcmp(u, zero, BTRFS_UUID_SIZE) == 0)
		return;
	for (int i = 0; i < BTRFS_UUID_SIZE; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			*p++ = '-';
		p += sprintf(p, "%02x", u[i]);
	}
}

int pool_subvol_ids(const char *path, struct pool_subvol_ids *out, err_t *err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct btrfs_ioctl_get_subvol_info_args info;
	uint64_t flags = 0;

	memset(out, 0, sizeof(*out));
	if (fd < 0)
		return err_sys(err, "open %s", path);
	memset(&info, 0, sizeof(info));
	if (ioctl(fd, BTRFS_IOC_GET_SUBVOL_INFO, &info) < 0)
		return err_sys(err, "subvolume info of %s", path);
	if (ioctl(fd, BTRFS_IOC_SUBVOL_GETFLAGS, &flags) < 0)
		return err_sys(err, "subvolume flags of %s", path);
	uuid_text(info.uuid, out->uuid);
	uuid_text(info.received_uuid, out->received_uuid);
	uuid_text(info.parent_uuid, out->parent_uuid);
	out->readonly = (flags & BTRFS_SUBVOL_RDONLY) != 0;
	return 0;
}
