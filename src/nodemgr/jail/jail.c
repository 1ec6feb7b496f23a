/* jail.c - a jail: spawning one (the parent's side of the handshake, the
 * middle child A and the init B; see the table in jail.h). The registry of
 * every jail nodemgr holds is core/registry.c. */
#include "jail.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../../lib/log.h"
#include "../../lib/util.h"
#include "../../nmclient/wire.h"

#define JAIL_STEP_TIMEOUT_MS 10000

/* One message on the sync socket: 'U' userns ready (A), 'G' go (parent),
 * 'P' init pid (A), 'R' root mounted (B), 'E' error text (A or B). */
struct jmsg {
	uint32_t type;
	int32_t val;
	char text[240];
};

static void jmsg_send(int sync, uint32_t type, int val, int fd, const char *text)
{
	struct jmsg m;

	memset(&m, 0, sizeof(m));
	m.type = type;
	m.val = val;
	if (text)
		snprintf(m.text, sizeof(m.text), "%s", text);
	wire_send(sync, &m, sizeof(m), fd);
}

static __attribute__((noreturn, format(printf, 2, 3))) void child_fail(int sync,
								      const char *fmt, ...)
{
	char text[240];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	jmsg_send(sync, 'E', 0, -1, text);
	_exit(1);
}

/* Init B: PID 1 of the new pid namespace, until it becomes the guest. */
static __attribute__((noreturn)) void jail_init(const struct jail_params *p, int root, int sync)
{
	static const char *const envp[] = {
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root", "AIRLOCK_CHANNEL_FD=3", NULL,
	};
	char msg[200];
	sigset_t all;
	int g, c, null;

	/* Park the fds we need above 10 (CLOEXEC), so 0..3 can be rebuilt. */
	sync = fcntl(sync, F_DUPFD_CLOEXEC, 10);
	g = fcntl(p->guest_fd, F_DUPFD_CLOEXEC, 10);
	c = fcntl(p->chan_fd, F_DUPFD_CLOEXEC, 10);
	if (sync < 0 || g < 0 || c < 0)
		_exit(1);
	if (setsid() < 0)
		child_fail(sync, "setsid: %s", strerror(errno));
	if (jail_mount_root(root, msg, sizeof(msg)) < 0)
		child_fail(sync, "mount: %s", msg);
	close(root);
	/* Our own mounts hold the idmapped tree now: the host may drop its. */
	jmsg_send(sync, 'R', 0, -1, NULL);
	if (jail_net_lo_up(msg, sizeof(msg)) < 0)
		child_fail(sync, "net: %s", msg);
	if (p->resolv_conf) {
		/* Replace (not follow) whatever is there: a distribution's link
		 * to a stub resolver on 127.0.0.x would never leave the jail. */
		int fd;
		unlink("/etc/resolv.conf");
		fd = open("/etc/resolv.conf", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
			  0644);
		if (fd >= 0) {
			(void)!write(fd, p->resolv_conf, strlen(p->resolv_conf));
			close(fd);
		}
	}

	/* fds: 0-2 the jail's /dev/null, 3 the channel, nothing else survives
	 * exec except the guest binary fd (CLOEXEC; execveat still runs it). */
	null = open("/dev/null", O_RDWR);
	if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0 ||
	    dup2(c, 3) < 0)
		child_fail(sync, "fds: %s", strerror(errno));
	if (syscall(SYS_close_range, 4U, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
		child_fail(sync, "close_range: %s", strerror(errno));

	if (jail_drop_caps(msg, sizeof(msg)) < 0)
		child_fail(sync, "caps: %s", msg);
	/* nodemgr blocks and ignores signals for its own loop: the guest
	 * starts with a clean slate. */
	for (int s = 1; s < NSIG; s++)
		signal(s, SIG_DFL);
	sigemptyset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	if (jail_seccomp_apply(p->seccomp) < 0)
		child_fail(sync, "seccomp: %s", strerror(errno));
	syscall(SYS_execveat, g, "", p->argv, envp, AT_EMPTY_PATH);
	child_fail(sync, "exec guest: %s", strerror(errno));
}

/* In A, first: keep fds 0-2 and the three A and B need (sync, the guest
 * binary, the channel, moved to 3, 4, 5) and close every other one of
 * nodemgr's - two per jail it holds. Else B's fork copies them all, B's exec
 * closes them all and A's exit again: three walks, per create, of a table
 * that grows with the sandboxes on the node (bench/density). */
static int drop_inherited_fds(int *sync, struct jail_params *q)
{
	int *keep[3] = { sync, &q->guest_fd, &q->chan_fd }, tmp[3], top = 2;

	for (int i = 0; i < 3; i++)
		if (*keep[i] > top)
			top = *keep[i];
	/* Above all of them first, so that moving one down never lands on
	 * another we still need. */
	for (int i = 0; i < 3; i++)
		if ((tmp[i] = fcntl(*keep[i], F_DUPFD_CLOEXEC, top + 1)) < 0)
			return -1;
	for (int i = 0; i < 3; i++) {
		if (dup3(tmp[i], 3 + i, O_CLOEXEC) < 0)
			return -1;
		*keep[i] = 3 + i;
	}
	return (int)syscall(SYS_close_range, 6U, ~0U, 0U);
}

/* Middle child A: creates the user namespace, waits for the parent to map
 * it, then creates the other namespaces and forks init B into them. */
static __attribute__((noreturn)) void jail_middle(const struct jail_params *params, int sync)
{
	struct jail_params own = *params, *p = &own;
	struct jmsg m;
	int root;
	pid_t b;

	if (drop_inherited_fds(&sync, p) < 0)
		_exit(1);   /* the parent reports the step that did not come */

	/* Still host root: enter mnt_dir now (see jail.h). */
	if (chdir(p->mnt_dir) < 0)
		child_fail(sync, "chdir %s: %s", p->mnt_dir, strerror(errno));
	if (unshare(CLONE_NEWUSER) < 0)
		child_fail(sync, "unshare user: %s", strerror(errno));
	jmsg_send(sync, 'U', 0, -1, NULL);
	if (wire_recv(sync, &m, sizeof(m), NULL) < 0 || m.type != 'G')
		_exit(1); /* the parent gave up and reports why */
	/* The parent already put us in the sandbox cgroup, so the cgroup
	 * namespace is rooted there. */
	if (unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC |
		    CLONE_NEWCGROUP) < 0)
		child_fail(sync, "unshare: %s", strerror(errno));
	/* cwd is now our namespace's copy of mnt_dir; the id is validated. */
	root = open(p->id, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (root < 0)
		child_fail(sync, "open idmapped root: %s", strerror(errno));
	/* Become root of the new namespace (host uid host_base). Raw syscalls:
	 * glibc's set*id would try to signal threads that do not exist here. */
	if (syscall(SYS_setresgid, 0, 0, 0) < 0 || syscall(SYS_setgroups, 0, NULL) < 0 ||
	    syscall(SYS_setresuid, 0, 0, 0) < 0)
		child_fail(sync, "become root in userns: %s", strerror(errno));
	if (sethostname(p->hostname, strlen(p->hostname)) < 0)
		child_fail(sync, "sethostname: %s", strerror(errno));
	b = fork();
	if (b < 0)
		child_fail(sync, "fork init: %s", strerror(errno));
	if (b == 0)
		jail_init(p, root, sync);
	jmsg_send(sync, 'P', b, -1, NULL);
	_exit(0);
}

/* Receive one message within the step timeout. -EPIPE on EOF. */
static int recv_step(int sock, struct jmsg *m, int *fd)
{
	struct pollfd pfd = { .fd = sock, .events = POLLIN };
	int r;

	do
		r = poll(&pfd, 1, JAIL_STEP_TIMEOUT_MS);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	if (r == 0)
		return -ETIMEDOUT;
	r = wire_recv(sock, m, sizeof(*m), fd);
	if (r == 0)
		m->text[sizeof(m->text) - 1] = '\0';
	return r;
}

static int step_error(err_t *err, int r, const struct jmsg *m, const char *step)
{
	if (r == 0 && m->type == 'E')
		return err_set(err, EPERM, "jail: %s", m->text);
	if (r == -ETIMEDOUT)
		return err_set(err, ETIMEDOUT, "jail: timed out waiting for %s", step);
	if (r == 0)
		return err_set(err, EPROTO, "jail: unexpected message during %s", step);
	return err_set(err, -r, "jail: setup process died before %s", step);
}

int jail_spawn(const struct jail_params *p, pid_t *init_pid, err_t *err)
{
	_cleanup_close_ int sock = -1;
	struct jmsg m;
	int sv[2], r;
	pid_t a;

	*init_pid = -1;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return err_sys(err, "socketpair");
	a = fork();
	if (a < 0) {
		r = err_sys(err, "fork");
		close(sv[0]);
		close(sv[1]);
		return r;
	}
	if (a == 0) {
		close(sv[0]);
		jail_middle(p, sv[1]);
	}
	close(sv[1]);
	sock = sv[0];

	if ((r = recv_step(sock, &m, NULL)) < 0 || m.type != 'U')
		return step_error(err, r, &m, "user namespace");
	if (jail_write_idmaps(a, p->host_base, err) < 0 ||
	    cgroup_attach(p->cg, p->id, a, err) < 0)
		return -err->code;
	if (jail_idmapped_attach(p->rootfs, a, p->mnt, err) < 0)
		return -err->code;
	jmsg_send(sock, 'G', 0, -1, NULL);
	/* A reports init's pid ('P') and B its own root mount ('R'). Both write
	 * to this socket after the fork, so they arrive in either order. Only
	 * once B has pivoted into its own clone of the tree may we detach ours:
	 * detaching earlier would propagate into the jail's copy. */
	bool got_pid = false, got_root = false;
	while (!got_pid || !got_root) {
		r = recv_step(sock, &m, NULL);
		if (r == 0 && m.type == 'P' && !got_pid) {
			*init_pid = m.val;
			got_pid = true;
		} else if (r == 0 && m.type == 'R' && !got_root) {
			got_root = true;
		} else {
			jail_idmapped_detach(p->mnt);
			return step_error(err, r, &m, got_pid ? "root mount" : "init pid");
		}
	}
	jail_idmapped_detach(p->mnt);
	/* The sync socket closes in B at exec (CLOEXEC): EOF is success. */
	r = recv_step(sock, &m, NULL);
	if (r == -EPIPE)
		return 0;
	return step_error(err, r, &m, "guest exec");
}
