/* server.c - nodemgr_run: setup, the socket, a thread per connection, the
 * reaper, shutdown.
 *
 * The main thread owns the listening socket and a signalfd (SIGCHLD,
 * SIGTERM, SIGINT are blocked in every thread). It is also the only place
 * that calls waitpid: nodemgr is a child subreaper, so jail inits (whose
 * middle process exits) and stray grandchildren of builds all come back to
 * it. Exit statuses that are not a jail's go to a small table that threads
 * waiting for their own child (template builds) read via mgr_wait_child.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../lib/log.h"
#include "../lib/util.h"
#include "../pool/pool.h"
#include "jail/jail.h"
#include "core/nodemgr-internal.h"
#include "jail/ns.h"
#include "net/net.h"
#include "templates/templates.h"
#include "vm/vm.h"
#include "mgr.h"
#include "nodemgr.h"

#define EXIT_KEEP_MS 60000
#define SHUTDOWN_WAIT_MS 10000

static const char *const default_guest_argv[] = { "airlock-guest", NULL };

static void reap(struct nm_server *s)
{
	for (;;) {
		int st;
		pid_t pid = waitpid(-1, &st, WNOHANG | __WALL);
		uint64_t now = now_ms();

		if (pid <= 0)
			return;
		pthread_mutex_lock(&s->lock);
		if (!mgr_sandbox_reaped_locked(s, pid, st)) {
			/* Drop statuses nobody claimed in a minute (middle
			 * children, orphans): the table stays small. */
			for (size_t i = 0; i < s->nexits;)
				if (now - s->exits[i].when_ms > EXIT_KEEP_MS)
					s->exits[i] = s->exits[--s->nexits];
				else
					i++;
			if (s->nexits == s->cap_exits) {
				s->cap_exits = s->cap_exits ? s->cap_exits * 2 : 32;
				s->exits = xrealloc(s->exits, s->cap_exits * sizeof(*s->exits));
			}
			s->exits[s->nexits++] = (struct exited){ pid, st, now };
		}
		pthread_cond_broadcast(&s->cond);
		pthread_mutex_unlock(&s->lock);
	}
}

struct conn {
	struct nm_server *s;
	int fd;
	uid_t uid;
};

static void *conn_thread(void *arg)
{
	struct conn *c = arg;
	struct nm_server *s = c->s;

	mgr_serve_conn(s, c->fd, c->uid);
	free(c);
	pthread_mutex_lock(&s->lock);
	s->nthreads--;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

static void accept_one(struct nm_server *s, int lfd)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	pthread_attr_t attr;
	pthread_t th;
	struct conn *c;
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

	if (fd < 0)
		return;
	/* Only root and the node's uid may ask for privileged work. */
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
	    (cred.uid != 0 && cred.uid != s->cfg->client_uid)) {
		log_warn("refusing connection from uid %d", (int)cred.uid);
		close(fd);
		return;
	}
	c = xmalloc(sizeof(*c));
	*c = (struct conn){ s, fd, cred.uid };
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_mutex_lock(&s->lock);
	s->nthreads++;
	pthread_mutex_unlock(&s->lock);
	if (pthread_create(&th, &attr, conn_thread, c) != 0) {
		log_err("pthread_create failed");
		close(fd);
		free(c);
		pthread_mutex_lock(&s->lock);
		s->nthreads--;
		pthread_mutex_unlock(&s->lock);
	}
	pthread_attr_destroy(&attr);
}

static int listen_on(const struct nodemgr_config *cfg, err_t *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(cfg->sock_path) >= sizeof(sa.sun_path))
		return err_set(err, ENAMETOOLONG, "socket path too long");
	strcpy(sa.sun_path, cfg->sock_path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return err_sys(err, "socket");
	unlink(cfg->sock_path);
	/* Permissions are set before listen(): nobody can connect earlier. */
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    chown(cfg->sock_path, 0, cfg->client_gid) < 0 || chmod(cfg->sock_path, 0660) < 0 ||
	    listen(fd, 128) < 0) {
		int r = err_sys(err, "listen on %s", cfg->sock_path);
		close(fd);
		return r;
	}
	return fd;
}

/* DATA/run/nodemgr/mnt holds idmapped rootfs mounts for the moment a jail
 * copies them (see jail.h). Make it its own private mount so those never
 * propagate to peer namespaces, after dropping anything a crashed run left. */
static int mnt_dir_setup(struct nm_server *s, err_t *err)
{
	_cleanup_free_ char *mnt = xasprintf("%s/mnt", s->run_dir);
	DIR *d;

	while (umount2(mnt, MNT_DETACH) == 0)
		;
	/* 0711: the jail's middle process looks up its entry here without
	 * host privileges (see jail.h). */
	if ((mkdir(mnt, 0711) < 0 && errno != EEXIST) || chmod(mnt, 0711) < 0)
		return err_sys(err, "mkdir %s", mnt);
	if ((d = opendir(mnt))) {
		struct dirent *de;
		while ((de = readdir(d)))
			if (de->d_name[0] != '.')
				unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
		closedir(d);
	}
	if (mount(mnt, mnt, NULL, MS_BIND, NULL) < 0 ||
	    mount(NULL, mnt, NULL, MS_PRIVATE, NULL) < 0)
		return err_sys(err, "make %s a private mount", mnt);
	return 0;
}

static void mnt_dir_release(struct nm_server *s)
{
	_cleanup_free_ char *mnt = xasprintf("%s/mnt", s->run_dir);
	umount2(mnt, MNT_DETACH);
}

static void server_free(struct nm_server *s)
{
	vm_free(s);
	free(s->seccomp.filter);
	free(s->exits);
	free(s->pool);
	free(s->run_dir);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->cond);
	free(s);
}

int nodemgr_run(const struct nodemgr_config *cfg, err_t *err)
{
	struct nm_server *s = xcalloc(1, sizeof(*s));
	sigset_t mask, old;
	struct sigaction ign = { .sa_handler = SIG_IGN }, oldpipe;
	int sfd = -1, lfd = -1, r;
	bool mounted = false;
	_cleanup_free_ char *mount_record = NULL;
	pthread_condattr_t ca;

	s->cfg = cfg;
	/* Two descriptors per jail (its channel and pidfd), plus a create's
	 * own: the soft limit of 1024 stopped creates at about 500 sandboxes
	 * (EMFILE, bench/density). Jails and QEMUs inherit it; their hard
	 * limit, the bound a tenant could raise to anyway, is unchanged. */
	raise_fd_limit();
	pthread_mutex_init(&s->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_cond_init(&s->cond, &ca);
	pthread_condattr_destroy(&ca);
	s->pool = xasprintf("%s/pool", cfg->data_dir);
	s->run_dir = xasprintf("%s/run/nodemgr", cfg->data_dir);
	s->guest_argv = cfg->guest_argv ? cfg->guest_argv : default_guest_argv;
	s->discard_parked[0] = jail_nswarm_discard;
	s->discard_parked[1] = vm_park_discard;

	if ((r = mkdir_p(s->run_dir, 0700)) < 0) {
		errno = -r;
		r = err_sys(err, "mkdir %s", s->run_dir);
		server_free(s);
		return r;
	}
	if (mnt_dir_setup(s, err) < 0 ||
	    pool_ensure(cfg->data_dir, cfg->pool_size_mb, &mounted, err) < 0 ||
	    cgroup_init(&s->cg, cfg->cgroup_parent, err) < 0 || jail_seccomp_build(&s->seccomp, err) < 0) {
		r = -err->code;
		mnt_dir_release(s);
		server_free(s);
		return r;
	}
	{
		uint32_t all = 0;

		/* A failure is no reason not to run: each sandbox still has
		 * its own cap, and the log says the sum has none. */
		if (cgroup_set_parent_pids(&s->cg, cfg->max_pids_all_sandboxes, &all, err) < 0) {
			log_warn("cgroup: no cap on the pids of all sandboxes: %s", err->msg);
			err_clear(err);
		} else {
			log_info("cgroup: all sandboxes together: at most %u pids", all);
		}
	}
	if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0) {
		r = err_sys(err, "PR_SET_CHILD_SUBREAPER");
		server_free(s);
		return r;
	}
	mount_record = xasprintf("%s/cgroup2-options", s->run_dir);
	if (cfg->cgroup_favordynmods) {
		err_t e2 = { 0 };
		if (cgroup_favor_dynmods(mount_record, &e2) < 0)
			log_warn("cgroup favordynmods: %s (creates will be slower)",
				 e2.code == ENOENT ? "no cgroup2 mount" : e2.msg);
	} else {
		cgroup_favor_restore(mount_record);  /* a crashed run's, now turned off */
	}
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	pthread_sigmask(SIG_BLOCK, &mask, &old);
	sigaction(SIGPIPE, &ign, &oldpipe);
	sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0) {
		r = err_sys(err, "signalfd");
		goto out;
	}
	reap(s);
	mgr_sandbox_sweep_leftovers(s);
	tmpl_import_sweep(s);
	vm_base_sweep(s);
	if ((r = vm_init(s, err)) < 0)
		goto out;
	if ((r = nmnet_init(s, err)) < 0)
		goto out;
	if ((lfd = listen_on(cfg, err)) < 0) {
		r = lfd;
		goto out;
	}
	log_info("nodemgr: listening on %s (pool %s, cgroup %s)", cfg->sock_path, s->pool,
		 cgroup_mode(&s->cg));

	for (bool stop = false; !stop;) {
		struct pollfd pfd[2] = { { .fd = lfd, .events = POLLIN },
					 { .fd = sfd, .events = POLLIN } };
		struct signalfd_siginfo si;

		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			r = err_sys(err, "poll");
			goto out;
		}
		while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
			if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT)
				stop = true;
		reap(s);
		if (!stop && (pfd[0].revents & POLLIN))
			accept_one(s, lfd);
	}
	log_info("nodemgr: stopping");
	close(lfd);
	lfd = -1;
	unlink(cfg->sock_path);
	pthread_mutex_lock(&s->lock);
	s->stopping = true;
	pthread_mutex_unlock(&s->lock);

	/* Let in-flight verbs finish (reaping for them meanwhile), then kill
	 * every jail; subvolumes stay for the node to decide. */
	for (uint64_t dl = now_ms() + SHUTDOWN_WAIT_MS;;) {
		struct pollfd pfd = { .fd = sfd, .events = POLLIN };
		struct signalfd_siginfo si;
		int n;

		pthread_mutex_lock(&s->lock);
		n = s->nthreads;
		pthread_mutex_unlock(&s->lock);
		if (n == 0 || now_ms() > dl)
			break;
		poll(&pfd, 1, 50);
		while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
			;
		reap(s);
	}
	mgr_sandbox_kill_all(s);
	reap(s);
	nmnet_fini(s);
	cgroup_release(&s->cg);
	r = 0;
out:
	/* Any exit but a crash puts the host's cgroup2 options back. */
	if (mount_record)
		cgroup_favor_restore(mount_record);
	if (lfd >= 0)
		close(lfd);
	if (sfd >= 0)
		close(sfd);
	mnt_dir_release(s);
	sigaction(SIGPIPE, &oldpipe, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_mutex_lock(&s->lock);
	r = s->nthreads ? (log_warn("nodemgr: %d verbs still running at exit", s->nthreads), r) : r;
	bool busy = s->nthreads > 0;
	pthread_mutex_unlock(&s->lock);
	if (!busy)
		server_free(s); /* else the threads still use it: leak on purpose */
	return r;
}
