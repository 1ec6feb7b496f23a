/* jail.c - a jail: spawning one (the parent's side of the handshake, the
 * middle child A and the init B; see the table in jail.h), and the registry
 * of every jail nodemgr holds, ns or vm (struct jail in s->jails, its slot
 * and its state file under DATA/run/nodemgr): claim an id and a slot,
 * publish the started process, hand a warm jail over to a sandbox id, and
 * mark a jail busy for a verb. Every entry changes under s->lock; the state
 * transitions are the ones drawn above struct jail (nodemgr-internal.h). */
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

#include "../lib/log.h"
#include "../lib/util.h"
#include "../nmclient/wire.h"
#include "../qmp/qmp.h"
#include "nodemgr-internal.h"

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

/* ---- the registry: every jail nodemgr holds (struct jail, s->jails) ---- */

static unsigned jail_bucket(const char *id)
{
	unsigned h = 2166136261u;

	for (; *id; id++)
		h = (h ^ (unsigned char)*id) * 16777619u;
	return h % NM_JAIL_BUCKETS;
}

static void by_id_add(struct nm_server *s, struct jail *j)
{
	unsigned b = jail_bucket(j->id);

	j->hnext = s->by_id[b];
	s->by_id[b] = j;
}

static void by_id_del(struct nm_server *s, struct jail *j)
{
	for (struct jail **pp = &s->by_id[jail_bucket(j->id)]; *pp; pp = &(*pp)->hnext)
		if (*pp == j) {
			*pp = j->hnext;
			break;
		}
}

struct jail *jail_find_locked(struct nm_server *s, const char *id)
{
	for (struct jail *j = s->by_id[jail_bucket(id)]; j; j = j->hnext)
		if (!strcmp(j->id, id))
			return j;
	return NULL;
}

void jail_unlink_locked(struct nm_server *s, struct jail *j)
{
	by_id_del(s, j);
	*j->pprev = j->next;
	if (j->next)
		j->next->pprev = j->pprev;
	if (j->slot >= 0)
		s->slots[j->slot] = 0;
	if (j->chan_fd >= 0)
		close(j->chan_fd);
	if (j->pidfd >= 0)
		close(j->pidfd);
	qmp_close(j->qmp);
	free(j);
}

uint64_t proc_stat_field(pid_t pid, int field)
{
	char path[64];
	struct buf b;
	uint64_t t = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	buf_init(&b);
	if (read_file(path, 4096, &b) == 0 && b.data) {
		/* comm may hold spaces and ')': fields start after the last ')'. */
		char *p = strrchr(b.data, ')');
		for (int f = 2; p && *p && f < field; p++)
			if (*p == ' ')
				f++;
		if (p)
			t = strtoull(p, NULL, 10);
	}
	buf_free(&b);
	return t;
}

char *jail_state_path(struct nm_server *s, const char *id)
{
	return xasprintf("%s/%s.state", s->run_dir, id);
}

/* The state file tells a later nodemgr run which cgroup to sweep (and which
 * pid/start time it had). Not fsync'd: after a crash the cgroup sweep finds
 * the same leftovers anyway. */
static void state_write(struct nm_server *s, const struct jail *j)
{
	_cleanup_free_ char *p = jail_state_path(s, j->id);
	_cleanup_free_ char *line = xasprintf("id=%s\nslot=%d\npid=%d\nstart=%" PRIu64 "\n",
					      j->id, j->slot, (int)j->pid, j->start_time);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	if (fd < 0 || write_all(fd, line, strlen(line)) < 0)
		log_warn("write %s: %s", p, strerror(errno));
	if (fd >= 0)
		close(fd);
}

struct jail *jail_claim(struct nm_server *s, const char *id, err_t *err)
{
	struct jail *j;
	int slot = -1;

	pthread_mutex_lock(&s->lock);
	if (jail_find_locked(s, id)) {
		pthread_mutex_unlock(&s->lock);
		err_set(err, EEXIST, "sandbox %s exists", id);
		return NULL;
	}
	for (int i = 0; i < NM_MAX_SLOTS; i++)
		if (!s->slots[i]) {
			slot = i;
			break;
		}
	if (slot < 0) {
		pthread_mutex_unlock(&s->lock);
		err_set(err, ENOSPC, "no free uid range (%d jails)", NM_MAX_SLOTS);
		return NULL;
	}
	j = xcalloc(1, sizeof(*j));
	snprintf(j->id, sizeof(j->id), "%s", id);
	j->slot = slot;
	j->pid = -1;
	j->pidfd = j->chan_fd = -1;
	j->busy = true;
	s->slots[slot] = 1;
	j->next = s->jails;
	j->pprev = &s->jails;
	if (s->jails)
		s->jails->pprev = &j->next;
	s->jails = j;
	by_id_add(s, j);
	pthread_mutex_unlock(&s->lock);
	return j;
}

void jail_unclaim(struct nm_server *s, struct jail *j)
{
	pthread_mutex_lock(&s->lock);
	jail_unlink_locked(s, j);
	pthread_mutex_unlock(&s->lock);
}

int jail_publish(struct nm_server *s, struct jail *j, pid_t pid, int chan, int *chan_dup,
		 err_t *err)
{
	pthread_mutex_lock(&s->lock);
	j->pid = pid;
	j->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	j->start_time = proc_stat_field(pid, 22);
	j->chan_fd = chan;
	j->alive = true;
	/* The reaper may have collected the process before we knew its pid. */
	for (size_t i = 0; i < s->nexits; i++)
		if (s->exits[i].pid == pid) {
			s->exits[i] = s->exits[--s->nexits];
			j->alive = false;
			if (j->chan_fd >= 0)
				close(j->chan_fd);
			j->chan_fd = -1;
			break;
		}
	if (!j->alive) {
		pthread_mutex_unlock(&s->lock);
		return err_set(err, ECHILD, "sandbox %s: process exited right after start", j->id);
	}
	*chan_dup = j->chan_fd >= 0 ? fcntl(j->chan_fd, F_DUPFD_CLOEXEC, 3) : -1;
	j->busy = false;
	state_write(s, j);
	pthread_mutex_unlock(&s->lock);
	if (*chan_dup < 0 && j->chan_fd >= 0)
		return err_sys(err, "dup channel");
	return 0;
}

int jail_rename(struct nm_server *s, struct jail *j, const char *id, err_t *err)
{
	_cleanup_free_ char *old_state = NULL;

	pthread_mutex_lock(&s->lock);
	if (jail_find_locked(s, id)) {
		pthread_mutex_unlock(&s->lock);
		return err_set(err, EEXIST, "sandbox %s exists", id);
	}
	old_state = jail_state_path(s, j->id);
	by_id_del(s, j);
	snprintf(j->id, sizeof(j->id), "%s", id);
	by_id_add(s, j);
	pthread_mutex_unlock(&s->lock);
	unlink(old_state);
	return 0;
}

int jail_activate(struct nm_server *s, struct jail *j, int *chan_dup, err_t *err)
{
	int r = 0;

	pthread_mutex_lock(&s->lock);
	if (!j->alive || j->chan_fd < 0) {
		r = err_set(err, ECHILD, "sandbox %s: qemu exited", j->id);
	} else if ((*chan_dup = fcntl(j->chan_fd, F_DUPFD_CLOEXEC, 3)) < 0) {
		r = err_sys(err, "dup channel");
	} else {
		j->hidden = false;
		j->warm_key[0] = '\0';
		j->busy = false;
		state_write(s, j);
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* jail_acquire (live: the init must not have exited) and jail_acquire_any. */
static struct jail *acquire(struct nm_server *s, const char *id, bool live, bool *is_vm,
			    err_t *err)
{
	struct jail *j;

	pthread_mutex_lock(&s->lock);
	j = jail_find_locked(s, id);
	if (!j || j->hidden || (live && !j->alive && !j->busy)) {
		err_set(err, ENOENT, live ? "no live jail for sandbox %s" : "no jail for sandbox %s",
			id);
		j = NULL;
	} else if (j->busy) {
		err_set(err, EBUSY, "sandbox %s is busy (being created, destroyed or changed)", id);
		j = NULL;
	} else {
		j->busy = true;
		if (is_vm)
			*is_vm = j->vm;
	}
	pthread_mutex_unlock(&s->lock);
	return j;
}

struct jail *jail_acquire(struct nm_server *s, const char *id, bool *is_vm, err_t *err)
{
	return acquire(s, id, true, is_vm, err);
}

struct jail *jail_acquire_any(struct nm_server *s, const char *id, bool *is_vm, err_t *err)
{
	return acquire(s, id, false, is_vm, err);
}

void jail_release(struct nm_server *s, struct jail *j)
{
	pthread_mutex_lock(&s->lock);
	j->busy = false;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}
