/* mgr-sandbox.c - sandbox lifecycle in nodemgr: create (snapshot, limits, jail),
 * adopt, destroy, freeze, rollback, fork, list, and the startup/shutdown
 * sweeps; the jails themselves are in core/registry.c. Its functions are
 * mgr_sandbox_*, apart from the node's sandbox_* (src/node/model/sandbox.c), which
 * ask for them over the socket.
 *
 * Every id reaching here passed mgr_valid_sandbox_id; paths are built only from
 * such ids under srv->pool. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../lib/fault.h"
#include "../lib/log.h"
#include "../qmp/qmp.h"
#include "../lib/util.h"
#include "../pool/pool.h"
#include "jail/jail.h"
#include "core/nodemgr-internal.h"
#include "jail/ns.h"
#include "net/net.h"
#include "snapshot/snapshot.h"
#include "vm/vm.h"
#include "mgr.h"

/* Kill init B (pidfd: no pid-reuse race) and wait until it has exited; a
 * pid namespace's init exits only after every process in it is gone. */
static void kill_init(struct nm_server *s, struct jail *j)
{
	struct pollfd pfd = { .fd = j->pidfd, .events = POLLIN };

	if (j->pidfd < 0)
		return;
	if (syscall(SYS_pidfd_send_signal, j->pidfd, SIGKILL, NULL, 0) < 0 && errno != ESRCH)
		log_warn("kill jail %s: %s", j->id, strerror(errno));
	/* A paused ns jail is frozen, and a frozen task (v1 freezer) only acts
	 * on its SIGKILL once thawed. The kill is already pending, so the thaw
	 * lets nothing else run first. A paused vm is a stopped QEMU, which a
	 * SIGKILL ends as it is. */
	if (!j->vm) {
		err_t e = { 0 };
		if (cgroup_freeze(&s->cg, j->id, false, &e) < 0)
			log_debug("thaw jail %s before kill: %s", j->id, e.msg);
	}
	while (poll(&pfd, 1, 5000) < 0 && errno == EINTR)
		;
}

/* Wait (up to 5 s) until the reaper (server.c) has collected j's init,
 * which kill_init only saw exit: then no zombie of the sandbox is left and
 * the entry holds no pid or channel. Returns whether it is still alive. */
static bool wait_reaped(struct nm_server *s, struct jail *j)
{
	bool alive = true;

	for (int i = 0; i < 5000; i++) {
		pthread_mutex_lock(&s->lock);
		alive = j->alive;
		pthread_mutex_unlock(&s->lock);
		if (!alive)
			break;
		usleep(1000);
	}
	return alive;
}

int mgr_sandbox_create(struct nm_server *s, const struct nm_sandbox_spec *spec, int *chan_dup,
		       pid_t *pid, err_t *err)
{
	const struct nm_limits *lim = &spec->limits;
	uint64_t disk = (uint64_t)(lim->disk_mb ? lim->disk_mb : NM_DEFAULT_DISK_MB) << 20;
	_cleanup_free_ char *tmpl =
		xasprintf("%s/templates/%s/%u", s->pool, spec->template_name, spec->template_version);
	_cleanup_free_ char *sbx = xasprintf("%s/sandboxes/%s", s->pool, spec->id);
	bool made_subvol = false, made_cgroup = false;
	uint64_t t0 = now_us(), t_snap = 0, t_qg = 0;
	struct jail *j;
	int r;

	/* A jail of the warm pool when one waits for this template; every
	 * failure but a taken id falls back to the cold path below. */
	r = jail_nswarm_take(s, spec, chan_dup, pid, err);
	if (r == 0 || r == -EEXIST)
		return r;
	if (r != -EAGAIN)
		log_warn("sandbox %s: warm jail not usable, cold create: %s", spec->id, err->msg);
	*err = (err_t){ 0 };

	/* Claim the id and a uid range. */
	if (!(j = mgr_jail_claim(s, spec->id, err)))
		return -err->code;

	if (pool_is_subvol(tmpl) != 1) {
		r = err_set(err, ENOENT, "template %s/%u not found", spec->template_name,
			    spec->template_version);
		goto fail;
	}
	if (access(sbx, F_OK) == 0) {
		/* A leftover subvolume is the node's data: never overwrite it. */
		r = err_set(err, EEXIST, "subvolume for sandbox %s exists", spec->id);
		goto fail;
	}
	if ((r = pool_subvol_snapshot(tmpl, sbx, false, err)) < 0)
		goto fail;
	made_subvol = true;
	t_snap = now_us();
	FAULT_POINT("nm.create.after_subvol");
	if ((r = pool_qgroup_limit(sbx, disk, err)) < 0)
		goto fail;
	t_qg = now_us();
	made_cgroup = true; /* even a partial create must be removed */
	if ((r = jail_ns_spawn(s, j, spec, NULL, chan_dup, pid, err)) < 0)
		goto fail;
	log_debug("sandbox %s: cold create: claim+snapshot %.2f ms, qgroup %.2f ms, spawn %.2f ms",
		  spec->id, (t_snap - t0) / 1000.0, (t_qg - t_snap) / 1000.0,
		  (now_us() - t_qg) / 1000.0);
	jail_nswarm_refill(s, spec);
	return 0;

fail:
	/* Undo in reverse: processes and cgroup, subvolume, slot. */
	{
		err_t e2 = { 0 };
		if (made_cgroup && cgroup_destroy(&s->cg, spec->id, &e2) < 0)
			log_warn("create %s cleanup: %s", spec->id, e2.msg);
		if (made_subvol && mgr_subvol_delete_retry(sbx, &e2) < 0)
			log_warn("create %s cleanup: %s", spec->id, e2.msg);
	}
	mgr_jail_unclaim(s, j);
	return r;
}

int mgr_sandbox_adopt(struct nm_server *s, const char *id, int *chan_dup, pid_t *pid, err_t *err)
{
	struct jail *j;
	int r = 0;

	pthread_mutex_lock(&s->lock);
	j = mgr_jail_find_locked(s, id);
	if (j && j->busy && !j->hidden) {
		/* being created, rolled back or destroyed: ask again */
		r = err_set(err, EBUSY, "sandbox %s is busy in the node manager", id);
	} else if (!j || j->busy || j->hidden || !j->alive || j->chan_fd < 0) {
		r = err_set(err, ENOENT, "no live jail for sandbox %s", id);
	} else {
		*chan_dup = fcntl(j->chan_fd, F_DUPFD_CLOEXEC, 3);
		*pid = j->pid;
		if (*chan_dup < 0)
			r = err_sys(err, "dup channel");
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

int mgr_sandbox_destroy(struct nm_server *s, const char *id, err_t *err)
{
	_cleanup_free_ char *sbx = xasprintf("%s/sandboxes/%s", s->pool, id);
	_cleanup_free_ char *rb = xasprintf("%s/sandboxes/%s.rb", s->pool, id);
	_cleanup_free_ char *st = mgr_jail_state_path(s, id);
	struct jail *j;
	int r;

	pthread_mutex_lock(&s->lock);
	j = mgr_jail_find_locked(s, id);
	if (j && j->busy) {
		pthread_mutex_unlock(&s->lock);
		return err_set(err, EBUSY, "sandbox %s is being created or destroyed", id);
	}
	if (j)
		j->busy = true;
	pthread_mutex_unlock(&s->lock);

	if (j) {
		/* The veth first, while its namespace lives: deleting it here
		 * keeps its unregistration out of the kernel's asynchronous
		 * namespace cleanup, which would otherwise hold the RTNL lock
		 * against the next create. */
		nmnet_detach(s, j);
		FAULT_POINT("nm.destroy.after_net");
		kill_init(s, j);
		if (wait_reaped(s, j))
			log_warn("sandbox %s: jail init not reaped 5 s after its kill", id);
	}
	/* Also for ids we hold no jail for: a leftover cgroup from an earlier
	 * run, or a half-done destroy. Each step is idempotent. */
	r = cgroup_destroy(&s->cg, id, err);
	if (r == 0)
		r = mgr_subvol_delete_retry(sbx, err);
	/* A rollback's other subvolume (the snapshot's copy before the swap,
	 * the old disk after it), left when a nodemgr died in between. */
	if (r == 0)
		r = mgr_subvol_delete_retry(rb, err);
	if (r == 0)
		FAULT_POINT("nm.destroy.after_subvol");
	if (r == 0)
		r = snap_delete_all(s, id, err);
	if (r == 0) {
		unlink(st);
		vm_cleanup_run(s, id);
	}
	pthread_mutex_lock(&s->lock);
	if (j) {
		if (r == 0)
			mgr_jail_unlink_locked(s, j);
		else
			j->busy = false;
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* Start the vm of a claimed jail j on its subvolume as it is now, which
 * came from snapshots/<owner>/<snap>: restore that snapshot's memory when
 * it is a full one, else a cold boot. */
static int vm_boot_from(struct nm_server *s, struct jail *j, const struct nm_sandbox_spec *spec,
			const char *owner, const char *snap, int *chan_dup, pid_t *pid, err_t *err)
{
	_cleanup_free_ char *state =
		xasprintf("%s/snapshots/%s/%s" VM_FULL_SUFFIX, s->pool, owner, snap);
	_cleanup_free_ char *mem = xasprintf("%s/snapshots/%s/%s" VM_MEM_SUFFIX, s->pool, owner, snap);
	bool full = access(state, F_OK) == 0;

	return vm_boot_in_place(s, j, spec, full ? state : NULL, access(mem, F_OK) == 0 ? mem : NULL,
				chan_dup, pid, err);
}

/* Rollback, in order (j busy throughout, so no freeze, destroy or second
 * rollback runs meanwhile):
 *   1. snapshot snapshots/<id>/<snap> to sandboxes/<id>.rb (writable), with
 *      the disk limit: a failure here changes nothing;
 *   2. kill the jail (its init, so the whole pid namespace) and wait until
 *      the reaper saw it, so the entry holds no pid or channel any more;
 *   3. renameat2(RENAME_EXCHANGE) of sandboxes/<id>.rb and sandboxes/<id>:
 *      one atomic step, no moment without a sandbox subvolume;
 *   4. delete the old subvolume (now at <id>.rb), retrying while the dead
 *      jail's mount namespace still pins it;
 *   5. spawn a fresh jail on the same slot, as create does (vm: a fresh
 *      QEMU cold-boots the guest on the swapped disk).
 * "<id>.rb" never matches the sandbox id pattern, so listings skip it. */
int mgr_sandbox_rollback(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *snap,
			 int *chan_dup, pid_t *pid, err_t *err)
{
	const char *id = spec->id;
	uint64_t disk = (uint64_t)(spec->limits.disk_mb ? spec->limits.disk_mb
							: NM_DEFAULT_DISK_MB) << 20;
	_cleanup_free_ char *sbx = xasprintf("%s/sandboxes/%s", s->pool, id);
	_cleanup_free_ char *tmp = xasprintf("%s/sandboxes/%s.rb", s->pool, id);
	_cleanup_free_ char *src = xasprintf("%s/snapshots/%s/%s", s->pool, id, snap);
	uint64_t t0 = now_us();
	bool is_vm = false;
	struct jail *j;
	err_t e2 = { 0 };
	int r;

	/* A dead jail too: crash recovery rolls back a sandbox whose init
	 * (QEMU) died. */
	if (!(j = mgr_jail_acquire_any(s, id, &is_vm, err)))
		return -err->code;
	if (pool_is_subvol(src) != 1) {
		mgr_jail_release(s, j);
		return err_set(err, ENOENT, "sandbox %s has no snapshot %s", id, snap);
	}
	/* 1 */
	if ((r = mgr_subvol_delete_retry(tmp, err)) < 0 ||
	    (r = pool_subvol_snapshot(src, tmp, false, err)) < 0 ||
	    (r = pool_qgroup_limit(tmp, disk, err)) < 0) {
		if (mgr_subvol_delete_retry(tmp, &e2) < 0)
			log_warn("rollback %s cleanup: %s", id, e2.msg);
		mgr_jail_release(s, j);
		return r;
	}
	/* 2 */
	FAULT_POINT("nm.rollback.after_clone");
	nmnet_detach(s, j);
	kill_init(s, j);
	(void)wait_reaped(s, j);
	pthread_mutex_lock(&s->lock);
	if (j->alive) {
		pthread_mutex_unlock(&s->lock);
		r = err_set(err, ETIMEDOUT, "sandbox %s: jail did not exit", id);
		goto dead;
	}
	if (j->pidfd >= 0)
		close(j->pidfd);
	j->pidfd = -1;
	j->pid = -1;
	pthread_mutex_unlock(&s->lock);
	qmp_close(j->qmp);  /* vm: the dead QEMU's monitor */
	j->qmp = NULL;
	if ((r = cgroup_destroy(&s->cg, id, err)) < 0)
		goto dead;
	/* 3 */
	if (renameat2(AT_FDCWD, tmp, AT_FDCWD, sbx, RENAME_EXCHANGE) < 0) {
		r = err_sys(err, "swap %s and %s", tmp, sbx);
		goto dead;
	}
	FAULT_POINT("nm.rollback.after_swap");
	/* 4: the snapshot is in place; a leftover old subvolume is only space. */
	if (mgr_subvol_delete_retry(tmp, &e2) < 0)
		log_warn("rollback %s: delete old subvolume: %s", id, e2.msg);
	/* 5: vm: a fresh QEMU restores the snapshot's memory when it is a
	 * full one, else boots the guest kernel on the swapped disk */
	if (is_vm)
		r = vm_boot_from(s, j, spec, id, snap, chan_dup, pid, err);
	else
		r = jail_ns_spawn(s, j, spec, NULL, chan_dup, pid, err);
	if (r < 0)
		goto dead;
	log_info("sandbox %s: rolled back to %s in %.1f ms", id, snap, (now_us() - t0) / 1000.0);
	return 0;
dead:
	/* No jail runs any more; the node fails the sandbox and destroys it. */
	if (cgroup_destroy(&s->cg, id, &e2) < 0)
		log_warn("rollback %s cleanup: %s", id, e2.msg);
	mgr_subvol_delete_retry(tmp, &e2);
	mgr_jail_release(s, j);
	return r;
}

int mgr_sandbox_fork(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *parent,
		     const char *snap, bool vm, int *chan_dup, pid_t *pid, err_t *err)
{
	uint64_t disk = (uint64_t)(spec->limits.disk_mb ? spec->limits.disk_mb
							: NM_DEFAULT_DISK_MB) << 20;
	_cleanup_free_ char *src = xasprintf("%s/snapshots/%s/%s", s->pool, parent, snap);
	_cleanup_free_ char *sbx = xasprintf("%s/sandboxes/%s", s->pool, spec->id);
	uint64_t t0 = now_us();
	bool made_subvol = false;
	err_t e2 = { 0 };
	struct jail *j;
	int r;

	if (vm && (r = vm_fork_standby(s, spec, parent, snap, chan_dup, pid, err)) != -EAGAIN) {
		if (r == 0)
			log_info("sandbox %s: forked from %s/%s on a standby qemu in %.1f ms",
				 spec->id, parent, snap, (now_us() - t0) / 1000.0);
		return r;
	}
	if (!(j = mgr_jail_claim(s, spec->id, err)))
		return -err->code;
	if (pool_is_subvol(src) != 1) {
		r = err_set(err, ENOENT, "sandbox %s has no snapshot %s", parent, snap);
		goto fail;
	}
	if (access(sbx, F_OK) == 0) {
		r = err_set(err, EEXIST, "subvolume for sandbox %s exists", spec->id);
		goto fail;
	}
	/* One snapshot of a read-only snapshot: the child shares every extent
	 * with its parent until either writes. */
	if ((r = pool_subvol_snapshot(src, sbx, false, err)) < 0)
		goto fail;
	made_subvol = true;
	FAULT_POINT("nm.fork.after_subvol");
	if ((r = pool_qgroup_limit(sbx, disk, err)) < 0)
		goto fail;
	j->vm = vm;
	if (vm)
		r = vm_boot_from(s, j, spec, parent, snap, chan_dup, pid, err);
	else
		r = jail_ns_spawn(s, j, spec, NULL, chan_dup, pid, err);
	if (r < 0)
		goto fail;
	log_info("sandbox %s: forked from %s/%s in %.1f ms", spec->id, parent, snap,
		 (now_us() - t0) / 1000.0);
	return 0;
fail:
	if (cgroup_destroy(&s->cg, spec->id, &e2) < 0)
		log_warn("fork %s cleanup: %s", spec->id, e2.msg);
	if (made_subvol && mgr_subvol_delete_retry(sbx, &e2) < 0)
		log_warn("fork %s cleanup: %s", spec->id, e2.msg);
	mgr_jail_unclaim(s, j);
	return r;
}

int mgr_sandbox_freeze(struct nm_server *s, const char *id, bool freeze, err_t *err)
{
	struct jail *j;
	int r;

	pthread_mutex_lock(&s->lock);
	j = mgr_jail_find_locked(s, id);
	if (!j || j->hidden || !j->alive) {
		pthread_mutex_unlock(&s->lock);
		return err_set(err, ENOENT, "no live jail for sandbox %s", id);
	}
	if (j->busy) {
		pthread_mutex_unlock(&s->lock);
		return err_set(err, EBUSY, "sandbox %s is being created or destroyed", id);
	}
	j->busy = true;
	pthread_mutex_unlock(&s->lock);

	uint64_t t0 = now_us();
	if (j->vm)
		r = vm_freeze(s, j, freeze, err);
	else
		r = cgroup_freeze(&s->cg, id, freeze, err);
	log_debug("sandbox %s: %s in %.2f ms", id, freeze ? "frozen" : "thawed",
		  (now_us() - t0) / 1000.0);

	pthread_mutex_lock(&s->lock);
	j->busy = false;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return r;
}

static void add_id(char ***v, size_t *n, const char *id)
{
	for (size_t i = 0; i < *n; i++)
		if (!strcmp((*v)[i], id))
			return;
	*v = xrealloc(*v, (*n + 2) * sizeof(**v));
	(*v)[(*n)++] = xstrdup(id);
	(*v)[*n] = NULL;
}

char **mgr_sandbox_list(struct nm_server *s)
{
	_cleanup_free_ char *dir = xasprintf("%s/sandboxes", s->pool);
	char **v = xcalloc(1, sizeof(*v));
	size_t n = 0;
	DIR *d;

	pthread_mutex_lock(&s->lock);
	for (struct jail *j = s->jails; j; j = j->next)
		if (!j->hidden && (!j->busy || j->alive))
			add_id(&v, &n, j->id);
	pthread_mutex_unlock(&s->lock);
	if ((d = opendir(dir))) {
		struct dirent *de;
		while ((de = readdir(d)))
			if (mgr_valid_sandbox_id(de->d_name, sizeof(de->d_name)))
				add_id(&v, &n, de->d_name);
		closedir(d);
	}
	return v;
}

bool mgr_sandbox_reaped_locked(struct nm_server *s, pid_t pid, int status)
{
	for (struct jail *j = s->jails; j; j = j->next) {
		if (j->pid != pid || !j->alive)
			continue;
		/* The guest is gone: the channel is dead; the node sees EOF on
		 * its dup once we drop ours. The subvolume stays until destroy. */
		j->alive = false;
		j->init_reaped = true;
		j->init_status = status;
		if (j->chan_fd >= 0) {
			close(j->chan_fd);
			j->chan_fd = -1;
		}
		log_info("sandbox %s: jail init %d exited", j->id, (int)pid);
		return true;
	}
	return false;
}

static void sweep_one(void *arg, const char *id)
{
	struct nm_server *s = arg;
	err_t e = { 0 };

	if (!mgr_valid_sandbox_id(id, strlen(id) + 1))
		return;
	log_info("sweeping leftover jail cgroup %s", id);
	if (cgroup_destroy(&s->cg, id, &e) < 0)
		log_warn("sweep %s: %s", id, e.msg);
}

void mgr_sandbox_sweep_leftovers(struct nm_server *s)
{
	DIR *d = opendir(s->run_dir);
	struct dirent *de;

	/* Jails of a previous run are not our children and their channels are
	 * lost with that process: kill them. Subvolumes stay for the node. */
	if (d) {
		while ((de = readdir(d))) {
			char id[65];
			size_t n = strlen(de->d_name);
			if (n < 7 || n - 6 >= sizeof(id) || strcmp(de->d_name + n - 6, ".state"))
				continue;
			memcpy(id, de->d_name, n - 6);
			id[n - 6] = '\0';
			if (!mgr_valid_sandbox_id(id, sizeof(id)))
				continue;
			sweep_one(s, id);
			unlinkat(dirfd(d), de->d_name, 0);
		}
		closedir(d);
	}
	cgroup_each(&s->cg, sweep_one, s);
}

void mgr_sandbox_kill_all(struct nm_server *s)
{
	for (;;) {
		struct jail *j;
		err_t e = { 0 };

		pthread_mutex_lock(&s->lock);
		for (j = s->jails; j && j->busy; j = j->next)
			;
		if (j)
			j->busy = true;
		pthread_mutex_unlock(&s->lock);
		if (!j)
			return;
		nmnet_detach(s, j);
		kill_init(s, j);
		if (cgroup_destroy(&s->cg, j->id, &e) < 0)
			log_warn("stop %s: %s", j->id, e.msg);
		/* A waiting ns jail's subvolume is nobody's data. */
		if (!j->vm && j->hidden)
			jail_nswarm_remove_subvol(s, j->id);
		{
			_cleanup_free_ char *st = mgr_jail_state_path(s, j->id);
			unlink(st);
		}
		pthread_mutex_lock(&s->lock);
		mgr_jail_unlink_locked(s, j);
		pthread_mutex_unlock(&s->lock);
	}
}
