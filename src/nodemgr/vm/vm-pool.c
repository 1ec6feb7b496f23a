/* vm-pool.c - QEMUs parked before anyone asks: the warm pool (a clone of
 * the template's memory snapshot, restored and its guest warmed, then
 * stopped) and the fork standbys (spawned on an empty RAM file, nothing
 * restored), each per template and shape, each topped up by one background
 * refill thread. A take renames the parked jail to the sandbox (entry,
 * subvolume, cgroup, run dir) and runs it. The two pools are described in
 * their sections below.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/log.h"
#include "../../lib/phases.h"
#include "../../lib/util.h"
#include "../../guestproto/proto.h"
#include "../../qmp/qmp.h"
#include "../../pool/pool.h"
#include "../jail/jail.h"
#include "../core/nodemgr-internal.h"
#include "vm-delta.h"
#include "vm-internal.h"

static void warm_key(const struct nm_sandbox_spec *spec, const struct vm_shape *sh, char *out,
		     size_t cap)
{
	snprintf(out, cap, "%s/%u/m%" PRIu32 "-c%" PRIu32, spec->template_name,
		 spec->template_version, sh->mem_mb, sh->cpus);
}

/* ---- the warm pool ------------------------------------------------------
 *
 * Per template and shape, up to cfg->vm_warm_pool QEMUs already spawned,
 * jailed and waiting in -incoming defer, each with its future sandbox
 * subvolume ready at pool/warm/<wid> (a snapshot of the template with the
 * snapshot's disk reflinked in). Taking one is renames only: the subvolume
 * to sandboxes/<id>, the cgroup and the run dir to <id>, the jail entry to
 * <id>; then the device state goes in and the vCPUs start. Warm jails are
 * hidden (not listed or adoptable). One refill thread at a time tops the
 * pool up in the background after each use. Warm QEMUs die with nodemgr
 * like every jail; their subvolumes are removed at the next start. */

/* Under TCG a restored clone starts with an empty translation cache: every
 * guest code path it runs for the first time is translated first, and the
 * first HELLO, RESET and exec of a fresh clone took ~60, ~100 and ~150 ms
 * that way (a warm one: a few ms each). So a pooled clone is restored and
 * run through the same paths before it is parked: HELLO, an exec of `true`
 * and a RESET with throw-away values (its own random seed, hostname "warm",
 * a random machine-id), then QMP `stop`. The real RESET at create replaces
 * all of it before the sandbox is handed out, and the cache survives
 * stop/cont (it belongs to this QEMU process).
 *
 * What comes back is read and thrown away, never parsed (nodemgr does not
 * parse bytes from inside a VM): the guest is done when it has been quiet
 * for WARM_QUIET_MS after answering, or after WARM_MAX_MS. A guest that does
 * not answer at all (a restored port can lose the first bytes) is asked
 * again; one that never answers is parked cold, which is only slower. */
#define WARM_QUIET_MS 120
#define WARM_RESEND_MS 300
#define WARM_MAX_MS 3000
#define VM_POOL_TRIM_MS 500   /* a pool over its least looks this often whether to shrink */
#define WARM_ROUNDS 2      /* the second round runs paths the first one only faulted in:
			    * RESET after one round 40-50 ms, after two ~10 ms */

static void warm_guest(int chan, const char *wid, bool net)
{
	char *argv[] = { "true", NULL };
	char *envp[] = { "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			 "HOME=/root", NULL };
	struct proto_hello h = { .version = PROTO_VERSION };
	struct proto_exec x = { .argv = argv, .argc = 1, .env = envp, .envc = 2 };
	struct proto_reset rs = { .entropy_len = 64 };
	struct timespec ts;
	uint64_t t0 = now_ms(), sent = 0, last = 0;
	size_t got = 0, total = 0;
	int round = 0;
	char junk[4096];
	struct buf b;

	clock_gettime(CLOCK_REALTIME, &ts);
	rs.wall_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	random_bytes(rs.entropy, rs.entropy_len);
	snprintf(rs.hostname, sizeof(rs.hostname), "warm");
	/* The fixed vm network the guest has had since the template's boot,
	 * as the real RESET sends it: its check runs warm. */
	if (net) {
		rs.net_addr = PROTO_VM_NET_ADDR;
		rs.net_prefix = PROTO_VM_NET_PREFIX;
		rs.net_gateway = rs.net_dns = PROTO_VM_NET_GATEWAY;
	}
	{
		uint8_t id[PROTO_MACHINE_ID_LEN / 2];
		random_bytes(id, sizeof(id));
		id[0] |= 1;  /* never all zero */
		for (size_t i = 0; i < sizeof(id); i++)
			snprintf(rs.machine_id + 2 * i, 3, "%02x", id[i]);
	}
	buf_init(&b);
	if (proto_enc_hello(&b, 1, &h) < 0 || proto_enc_exec(&b, 2, &x) < 0 ||
	    proto_enc_reset(&b, 3, &rs) < 0) {
		buf_free(&b);
		return;
	}
	explicit_bzero(&rs, sizeof(rs));
	for (;;) {
		uint64_t now = now_ms();
		if (now - t0 >= WARM_MAX_MS)
			break;
		if (got && now - last >= WARM_QUIET_MS) {
			/* This round is answered: the next one, or done. */
			total += got;
			got = 0;
			sent = 0;
			if (++round == WARM_ROUNDS)
				break;
			continue;
		}
		if (!got && now - sent >= WARM_RESEND_MS) {
			if (send(chan, b.data, b.len, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)b.len)
				break;
			sent = now;
		}
		int left = got ? (int)(last + WARM_QUIET_MS - now) : (int)(sent + WARM_RESEND_MS - now);
		struct pollfd pfd = { .fd = chan, .events = POLLIN };
		int r = poll(&pfd, 1, left > 0 ? left : 0);
		if (r < 0 && errno != EINTR)
			break;
		if (r > 0) {
			ssize_t n = recv(chan, junk, sizeof(junk), MSG_DONTWAIT);
			if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
				break;
			if (n > 0) {
				got += (size_t)n;
				last = now_ms();
			}
		}
	}
	buf_free(&b);
	log_debug("warm %s: guest warmed in %llu ms (%d rounds, %zu bytes back)", wid,
		  (unsigned long long)(now_ms() - t0), round, total + got);
}

static void standby_key(const struct nm_sandbox_spec *spec, const struct vm_shape *sh, char *out,
			size_t cap);

/* One parked QEMU for spec's template and shape, hidden and keyed for its
 * pool. Warm (standby false): its disk as the template's memory snapshot
 * saw it, that snapshot restored and the guest warmed, then stopped. A
 * fork standby: the template's disk and an empty RAM file beside the
 * subvolume, nothing restored, at nice 19 (see "fork standbys" below). */
static int park_spawn(struct nm_server *s, const struct nm_sandbox_spec *spec,
		      const struct vm_shape *sh, bool standby, err_t *err)
{
	_cleanup_free_ char *rnd = random_id("warm-", 8);
	_cleanup_free_ char *tmpl = xasprintf("%s/templates/%s/%u", s->pool, spec->template_name,
					      spec->template_version);
	_cleanup_free_ char *cache = vm_cache_dir(s, spec, sh);
	_cleanup_free_ char *src = xasprintf("%s/rootfs.ext4", cache);
	_cleanup_free_ char *wdir = xasprintf("%s/warm", s->pool);
	_cleanup_free_ char *sbx = xasprintf("%s/%s", wdir, rnd);
	/* Both map the template's RAM file of this shape (private, never
	 * written): a fork standby gets the parent's pages written over it
	 * when taken (vm_fork_standby). */
	_cleanup_free_ char *mem = xasprintf("%s/mem", cache);
	_cleanup_free_ char *disk = xasprintf("%s/rootfs.ext4", sbx);
	_cleanup_free_ char *run = xasprintf("%s/%s", s->vm->run, rnd);
	_cleanup_free_ char *boot_log = xasprintf("%s/console.log", cache);
	uint64_t size = (uint64_t)sh->mem_mb << 20, written = 0;
	struct qmp *q = NULL;
	struct jail *j;
	int chan = -1, dup = -1, r;
	pid_t qpid;

	if (!(j = mgr_jail_claim(s, rnd, err)))
		return -err->code;
	j->vm = true;
	j->vm_mem_mb = sh->mem_mb;
	j->vm_devices_only = standby;
	j->hidden = true;
	(standby ? standby_key : warm_key)(spec, sh, j->warm_key, sizeof(j->warm_key));
	uid_t uid = NM_UID_BASE + (uid_t)j->slot * JAIL_ID_RANGE;
	if ((mkdir(wdir, 0700) < 0 && errno != EEXIST)) {
		r = err_sys(err, "mkdir %s", wdir);
		goto fail;
	}
	if ((r = pool_subvol_snapshot(tmpl, sbx, false, err)) < 0)
		goto fail;
	if (!standby && (r = vm_reflink(src, disk, err)) < 0)
		goto fail_subvol;
	if (chown(disk, uid, uid) < 0 || chmod(disk, 0600) < 0) {
		r = err_sys(err, "chown %s", disk);
		goto fail_subvol;
	}
	struct vm_launch l = { .id = rnd, .uid = uid, .disk = disk, .mem = mem, .incoming = true,
			       .devices_only = standby, .background = standby,
			       .boot_log = standby ? NULL : boot_log, .run = run, .sh = *sh };
	if ((r = vm_start(s, &l, sh->cpus * 1000, &qpid, &chan, &q, err)) < 0)
		goto fail_subvol;
	if (standby) {
		if ((r = vm_ram_written(qpid, size, &written, err)) < 0)
			goto fail_started;
		if (written) {
			r = err_set(err, EPROTO, "qemu wrote %" PRIu64 " pages of guest RAM before "
				    "any restore; no fork standby kept", written);
			goto fail_started;
		}
		/* One QMP round trip less when a fork takes it (standby_go). */
		if ((r = vm_restore_caps(q, err)) < 0)
			goto fail_started;
	} else {
		/* Restored, warmed and parked (stopped) before anyone can take
		 * it: a create then only needs `cont`. */
		_cleanup_free_ char *vmstate = xasprintf("%s/vmstate", cache);
		if ((r = vm_restore_state(q, vmstate, err)) < 0)
			goto fail_started;
		warm_guest(chan, rnd, s->cfg->net_prefix && s->cfg->net_prefix[0]);
		if ((r = qmp_exec(q, "stop", NULL, -1, VM_QMP_TIMEOUT_MS, NULL, err)) < 0) {
			err_wrap(err, "park warm vm");
			goto fail_started;
		}
	}
	j->qmp = TAKE_PTR(q);
	r = mgr_jail_publish(s, j, qpid, chan, &dup, err);
	chan = -1;
	if (dup >= 0)
		close(dup);
	if (r < 0)
		goto fail_started;
	return 0;
fail_started: {
	err_t e2 = { 0 };
	qmp_close(q);
	if (chan >= 0)
		close(chan);
	nmnet_detach(s, j);
	cgroup_destroy(&s->cg, rnd, &e2);
	vm_cleanup_run(s, rnd);
}
fail_subvol: {
	err_t e2 = { 0 };
	if (pool_subvol_delete(sbx, &e2) < 0)
		log_warn("parked vm %s cleanup: %s", rnd, e2.msg);
}
fail:
	mgr_jail_unclaim(s, j);
	return r;
}

static int warm_spawn(struct nm_server *s, const struct nm_sandbox_spec *spec,
		      const struct vm_shape *sh, err_t *err)
{
	return park_spawn(s, spec, sh, false, err);
}

/* A pool of parked QEMUs per key: the warm pool (restored, warmed) or the
 * fork standbys (spawned, not restored; see below). */
struct pool_kind {
	const char *name;
	void (*key)(const struct nm_sandbox_spec *spec, const struct vm_shape *sh, char *out,
		    size_t cap);
	int (*spawn)(struct nm_server *s, const struct nm_sandbox_spec *spec,
		     const struct vm_shape *sh, err_t *err);
	/* How many to keep for key now (under s->lock), and the least of
	 * that (the pool shrinks towards it while its refill thread waits). */
	uint32_t (*size)(struct nm_server *s, const char *key);
	uint32_t (*min)(const struct nm_server *s);
	int idx;   /* in nm_vm.refilling */
};

struct refill {
	struct nm_server *s;
	const struct pool_kind *kind;
	struct nm_sandbox_spec spec;
};

static void *refill_main(void *arg)
{
	struct refill *rf = arg;
	struct nm_server *s = rf->s;
	const struct pool_kind *k = rf->kind;
	struct vm_shape sh;
	char key[96];

	vm_shape_of(&rf->spec, &sh);
	k->key(&rf->spec, &sh, key, sizeof(key));
	for (;;) {
		struct jail *surplus = NULL;
		uint32_t n = 0, want;
		err_t err = { 0 };
		bool stop, pending;

		bool gone = mgr_template_superseded(s, rf->spec.template_name,
						    rf->spec.template_version);
		if (gone)   /* deleted or replaced meanwhile: drop what was parked */
			mgr_template_retire_pools(s, rf->spec.template_name,
						  rf->spec.template_version, false);
		pthread_mutex_lock(&s->lock);
		for (struct jail *j = s->jails; j; j = j->next)
			if (j->hidden && j->alive && !strcmp(j->warm_key, key)) {
				n++;
				if (!j->busy)
					surplus = j;
			}
		want = k->size(s, key);
		stop = s->stopping || gone;
		pending = s->vm->pending[k->idx];
		if (!stop && n > want && surplus) {
			/* The demand came down: one parked QEMU less. */
			surplus->busy = true;
			pthread_mutex_unlock(&s->lock);
			log_debug("%s %s: %s over the target of %u, removed", k->name, key,
				  surplus->id, want);
			vm_park_discard(s, surplus);
			continue;
		}
		if (!stop && !pending && n >= want && want > k->min(s)) {
			/* Full, but bigger than its least: wait for the demand
			 * to come down (or a take to make room). */
			struct timespec dl;
			clock_gettime(CLOCK_REALTIME, &dl);
			dl.tv_nsec += VM_POOL_TRIM_MS * 1000000L;
			dl.tv_sec += dl.tv_nsec / 1000000000L;
			dl.tv_nsec %= 1000000000L;
			pthread_cond_timedwait(&s->cond, &s->lock, &dl);
			pthread_mutex_unlock(&s->lock);
			continue;
		}
		if (!s->stopping && (stop || n >= want) && pending) {
			/* This one is done: on to the pool asked for meanwhile. */
			rf->spec = s->vm->pending_spec[k->idx];
			s->vm->pending[k->idx] = false;
			pthread_mutex_unlock(&s->lock);
			vm_shape_of(&rf->spec, &sh);
			k->key(&rf->spec, &sh, key, sizeof(key));
			continue;
		}
		stop = stop || n >= want;
		pthread_mutex_unlock(&s->lock);
		if (stop)
			break;
		if (k->spawn(s, &rf->spec, &sh, &err) < 0) {
			log_warn("%s %s: %s", k->name, key, err.msg);
			break;
		}
	}
	free(rf);
	pthread_mutex_lock(&s->lock);
	s->vm->refilling[k->idx] = false;
	s->vm->pending[k->idx] = false;
	s->nthreads--;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* Top the pool of kind k for spec's template and shape up, in the
 * background (one refill thread per kind at a time; a pool asked for while
 * it runs is its next). */
static void pool_refill(struct nm_server *s, const struct pool_kind *k,
			const struct nm_sandbox_spec *spec)
{
	struct refill *rf;
	pthread_attr_t attr;
	pthread_t th;
	char key[96];
	struct vm_shape sh;

	vm_shape_of(spec, &sh);
	k->key(spec, &sh, key, sizeof(key));
	pthread_mutex_lock(&s->lock);
	if (s->stopping || !k->size(s, key)) {
		pthread_mutex_unlock(&s->lock);
		return;
	}
	if (s->vm->refilling[k->idx]) {
		s->vm->pending_spec[k->idx] = *spec;
		s->vm->pending[k->idx] = true;
		pthread_mutex_unlock(&s->lock);
		return;
	}
	s->vm->refilling[k->idx] = true;
	s->nthreads++;  /* shutdown waits for it like for a verb */
	pthread_mutex_unlock(&s->lock);
	rf = xcalloc(1, sizeof(*rf));
	rf->s = s;
	rf->kind = k;
	rf->spec = *spec;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&th, &attr, refill_main, rf) != 0) {
		free(rf);
		pthread_mutex_lock(&s->lock);
		s->vm->refilling[k->idx] = false;
		s->nthreads--;
		pthread_mutex_unlock(&s->lock);
	}
	pthread_attr_destroy(&attr);
}

static uint32_t warm_min(const struct nm_server *s)
{
	return s->cfg->vm_warm_pool;
}

/* key's demand entry, made (reusing the least recently used) if missing.
 * Under s->lock. */
static struct vm_demand *demand_get_locked(struct nm_server *s, const char *key)
{
	struct vm_demand *old = &s->vm->demand[0];

	for (size_t i = 0; i < ARRAY_SIZE(s->vm->demand); i++) {
		struct vm_demand *d = &s->vm->demand[i];
		if (!strcmp(d->key, key))
			return d;
		if (d->used_ms < old->used_ms)
			old = d;
	}
	memset(old, 0, sizeof(*old));
	snprintf(old->key, sizeof(old->key), "%s", key);
	return old;
}

/* Between vm_warm_pool and vm_warm_pool_max, from the key's recent clones.
 * Under s->lock. */
static uint32_t warm_size(struct nm_server *s, const char *key)
{
	if (!s->cfg->vm_warm_pool)   /* 0: the pool off, whatever the max says */
		return 0;
	return mgr_warm_pool_target(&demand_get_locked(s, key)->d, now_ms(),
				    s->cfg->warm_pool_half_life_ms, s->cfg->vm_warm_pool,
				    s->cfg->vm_warm_pool_max);
}

static const struct pool_kind warm_kind = {
	.name = "warm pool", .key = warm_key, .spawn = warm_spawn, .size = warm_size,
	.min = warm_min, .idx = 0,
};

int vm_warm_target_locked(struct nm_server *s, const char *key)
{
	if (!s->cfg->vm_warm_pool)
		return -1;
	for (size_t i = 0; s->vm && i < ARRAY_SIZE(s->vm->demand); i++)
		if (!strcmp(s->vm->demand[i].key, key))
			return (int)mgr_warm_pool_target(&s->vm->demand[i].d, now_ms(),
							 s->cfg->warm_pool_half_life_ms,
							 s->cfg->vm_warm_pool,
							 s->cfg->vm_warm_pool_max);
	return -1;
}

void vm_warm_refill(struct nm_server *s, const struct nm_sandbox_spec *spec)
{
	pool_refill(s, &warm_kind, spec);
}

/* A parked QEMU of key, marked busy and taken out of its pool (its id in
 * wid), or NULL when none waits. */
static struct jail *pool_pick(struct nm_server *s, const char *key, char wid[65])
{
	struct jail *j;

	pthread_mutex_lock(&s->lock);
	for (j = s->jails; j; j = j->next)
		if (j->hidden && j->alive && !j->busy && !strcmp(j->warm_key, key))
			break;
	if (j) {
		j->busy = true;
		j->warm_key[0] = '\0';
		snprintf(wid, 65, "%s", j->id);
	}
	pthread_mutex_unlock(&s->lock);
	return j;
}

/* Make the parked QEMU j (id wid, from pool_pick) sandbox spec->id: the
 * jail entry, subvolume and run dir renamed, its processes moved into a
 * new cgroup airlock/<id> (cgroup_move), then go(j, arg) runs
 * it and the entry goes live. On failure all of it is gone. */
static int pool_adopt(struct nm_server *s, struct jail *j, const char *wid,
		      const struct nm_sandbox_spec *spec,
		      int (*go)(struct nm_server *s, struct jail *j, void *arg, err_t *err),
		      void *arg, int *chan_dup, pid_t *pid, err_t *err)
{
	int r;
	_cleanup_free_ char *wsbx = xasprintf("%s/warm/%s", s->pool, wid);
	_cleanup_free_ char *sbx = xasprintf("%s/sandboxes/%s", s->pool, spec->id);
	_cleanup_free_ char *wrun = xasprintf("%s/%s", s->vm->run, wid);
	_cleanup_free_ char *run = xasprintf("%s/%s", s->vm->run, spec->id);
	uint64_t dmb = spec->limits.disk_mb ? spec->limits.disk_mb : NM_DEFAULT_DISK_MB;
	bool renamed = false, moved = false, cg_moved = false;
	struct vm_shape sh;
	struct cgroup_limits cl;

	if (access(sbx, F_OK) == 0) {
		r = err_set(err, EEXIST, "subvolume for sandbox %s exists", spec->id);
		goto fail;
	}
	if ((r = mgr_jail_rename(s, j, spec->id, err)) < 0)
		goto fail;
	renamed = true;
	if (rename(wsbx, sbx) < 0) {
		r = err_sys(err, "rename %s", wsbx);
		goto fail;
	}
	moved = true;
	if ((r = pool_qgroup_limit(sbx, dmb << 20, err)) < 0)
		goto fail;
	cg_moved = true;  /* from here airlock/<id> may exist beside airlock/<wid> */
	/* as vm_start gave the parked QEMU: a take matches its shape and
	 * vCPUs (vm_warm_take's key, vm_fork_standby's check) */
	vm_shape_of(spec, &sh);
	cl = vm_cgroup_limits(&sh, 0);
	if ((r = cgroup_move(&s->cg, wid, spec->id, &cl, err)) < 0)
		goto fail;
	vm_cleanup_run(s, spec->id);
	if (rename(wrun, run) < 0) {
		r = err_sys(err, "rename %s", wrun);
		goto fail;
	}
	if ((r = go(s, j, arg, err)) < 0 || (r = mgr_jail_activate(s, j, chan_dup, err)) < 0)
		goto fail;
	*pid = j->pid;
	return 0;
fail: {
	err_t e2 = { 0 };
	nmnet_detach(s, j);
	if (j->pidfd >= 0)
		syscall(SYS_pidfd_send_signal, j->pidfd, SIGKILL, NULL, 0);
	cgroup_destroy(&s->cg, wid, &e2);
	if (cg_moved)
		cgroup_destroy(&s->cg, spec->id, &e2);
	if (pool_subvol_delete(moved ? sbx : wsbx, &e2) < 0)
		log_warn("warm %s cleanup: %s", wid, e2.msg);
	vm_cleanup_run(s, wid);
	if (renamed)
		vm_cleanup_run(s, spec->id);
}
	mgr_jail_unclaim(s, j);
	return r;
}

/* A warm QEMU's state was restored and its guest warmed at spawn
 * (warm_guest): it only needs its vCPUs. */
static int warm_go(struct nm_server *s, struct jail *j, void *arg, err_t *err)
{
	(void)s;
	(void)arg;
	return qmp_exec(j->qmp, "cont", NULL, -1, VM_QMP_TIMEOUT_MS, NULL, err);
}

/* Make a warm QEMU sandbox id. -EAGAIN when none is waiting. */
int vm_warm_take(struct nm_server *s, const struct nm_sandbox_spec *spec,
		 const struct vm_shape *sh, int *chan_dup, pid_t *pid, err_t *err)
{
	char key[96], wid[65];
	struct jail *j;

	warm_key(spec, sh, key, sizeof(key));
	pthread_mutex_lock(&s->lock);
	{
		struct vm_demand *d = demand_get_locked(s, key);
		uint64_t now = now_ms();
		mgr_warm_demand_note(&d->d, now, s->cfg->warm_pool_half_life_ms);
		d->used_ms = now;
	}
	pthread_mutex_unlock(&s->lock);
	if (!(j = pool_pick(s, key, wid)))
		return -EAGAIN;
	j->from_pool = true;   /* busy: this verb's; freed if the adopt fails */
	return pool_adopt(s, j, wid, spec, warm_go, NULL, chan_dup, pid, err);
}

/* ---- fork standbys -----------------------------------------------------
 *
 * A vm fork child is a new QEMU that restores its parent's memory and
 * device state. Spawning that QEMU (jail, exec, machine init, monitor
 * greeting) was 55-90 ms of a ~250 ms fork here, and with KVM, where the
 * guest's own part is a few ms, it would be most of a fork. So per
 * template and shape up to cfg->vm_fork_pool QEMUs wait already spawned
 * and jailed in -incoming defer, on a subvolume made from the template
 * (pool/warm/<wid>, its disk rootfs.ext4), mapping the template's RAM file
 * of that shape private, as a warm clone does, nothing restored.
 *
 * The fork's snapshot (snap_create for a fork, vm_save_fork) holds the
 * parent's memory as only the pages it wrote since that RAM file: a sparse
 * <snap>.delta, a few MiB. Taking a standby clones the snapshot's disk into
 * its rootfs.ext4 (FICLONE: the destination's extents are replaced and its
 * page cache dropped), writes the delta's pages into the QEMU's RAM through
 * /proc/<pid>/mem (vm_ram_delta_apply: the QEMU gets private copies of exactly
 * those pages and reads the rest from the template's file, as the parent
 * did), renames the standby to the child as the warm pool does, loads the
 * device state and starts the vCPUs. The child is then made like a clone
 * of the template, so its own full snapshots and forks work the same way.
 * (Before, the snapshot held the whole RAM as a reflink of the RAM file
 * with the pages written over it, and the take reflinked that into the
 * standby's own RAM file: two whole-file clones of a file of thousands of
 * extents, 120-335 ms each on this machine under load, most of the fork's
 * own time.) That the QEMU wrote no page of its RAM before the take is
 * checked when it is parked (vm_ram_written: none, else it is not kept), and
 * the delta is applied only over the RAM file it was taken against (its
 * xattr names it). A standby holds nothing of any parent before a fork
 * takes it. It is spawned at nice 19 and its threads set back to 0 when
 * taken: the refill after a fork runs while that fork's child runs its
 * first guest code, and on 2 cores they competed (fork of 1 p50 335-349 ms
 * either way before, 313-319 ms with it). A fork that finds none parked
 * spawns one on the spot (a fork snapshot has no RAM file of its own that
 * a plain restore could map). */

static void standby_key(const struct nm_sandbox_spec *spec, const struct vm_shape *sh, char *out,
			size_t cap)
{
	snprintf(out, cap, "fork:%s/%u/m%" PRIu32 "-c%" PRIu32, spec->template_name,
		 spec->template_version, sh->mem_mb, sh->cpus);
}

static int standby_spawn(struct nm_server *s, const struct nm_sandbox_spec *spec,
			 const struct vm_shape *sh, err_t *err)
{
	return park_spawn(s, spec, sh, true, err);
}

static uint32_t standby_min(const struct nm_server *s)
{
	return s->cfg->vm_fork_pool;
}

static uint32_t standby_size(struct nm_server *s, const char *key)
{
	(void)key;
	return s->cfg->vm_fork_pool;
}

static const struct pool_kind standby_kind = {
	.name = "fork standby", .key = standby_key, .spawn = standby_spawn, .size = standby_size,
	.min = standby_min, .idx = 1,
};

static void standby_refill(struct nm_server *s, const struct nm_sandbox_spec *spec)
{
	pool_refill(s, &standby_kind, spec);
}

/* What a fork puts into a standby: the snapshot's files. */
struct standby_fill {
	const char *disk, *delta, *state;
	uint64_t size;   /* of the guest's RAM */
	struct phases *ph;
};

/* dst (existing, the same size) = src, extents shared. */
static int clone_into(const char *src, const char *dst, err_t *err)
{
	_cleanup_close_ int in = open(src, O_RDONLY | O_CLOEXEC);
	_cleanup_close_ int out = open(dst, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);

	if (in < 0 || out < 0)
		return err_sys(err, "open %s", in < 0 ? src : dst);
	if (ioctl(out, FICLONE, in) < 0)
		return err_sys(err, "reflink %s into %s", src, dst);
	return 0;
}

/* Every thread of pid back to nice 0 (threads it makes later inherit
 * that). */
static int renice_all(pid_t pid, err_t *err)
{
	_cleanup_free_ char *dir = xasprintf("/proc/%d/task", (int)pid);
	DIR *d = opendir(dir);
	struct dirent *de;
	int r = 0;

	if (!d)
		return err_sys(err, "open %s", dir);
	while ((de = readdir(d)))
		if (de->d_name[0] != '.' &&
		    setpriority(PRIO_PROCESS, (id_t)atoi(de->d_name), 0) < 0 && errno != ESRCH)
			r = err_sys(err, "renice qemu %d", (int)pid);
	closedir(d);
	return r;
}

static int standby_go(struct nm_server *s, struct jail *j, void *arg, err_t *err)
{
	struct standby_fill *f = arg;
	_cleanup_free_ char *disk = xasprintf("%s/sandboxes/%s/rootfs.ext4", s->pool, j->id);
	int r;

	phases_mark(f->ph, "adopt");
	if ((r = renice_all(j->pid, err)) < 0)
		return r;
	phases_mark(f->ph, "renice");
	if ((r = clone_into(f->disk, disk, err)) < 0)
		return r;
	phases_mark(f->ph, "disk");
	uint64_t bytes = 0;
	if ((r = vm_ram_delta_apply(j->pid, f->size, f->delta, &bytes, err)) < 0)
		return err_wrap(err, "fork standby %s", j->id);
	phases_mark(f->ph, "mem");
	log_info("sandbox %s: %" PRIu64 " KiB of the parent's pages written into its RAM", j->id,
		 bytes >> 10);
	r = vm_load_state(j->qmp, f->state, err);   /* capabilities set at park time */
	phases_mark(f->ph, "restore");
	return r;
}

/* st_size of path, or -1. */
static off_t size_of(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode) ? st.st_size : -1;
}

int vm_fork_standby(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *parent,
		    const char *snap, int *chan_dup, pid_t *pid, err_t *err)
{
	_cleanup_free_ char *snapdir = xasprintf("%s/snapshots/%s/%s", s->pool, parent, snap);
	_cleanup_free_ char *disk = xasprintf("%s" VM_DISK_SUFFIX, snapdir);
	_cleanup_free_ char *delta = xasprintf("%s" VM_DELTA_SUFFIX, snapdir);
	_cleanup_free_ char *state = xasprintf("%s" VM_FULL_SUFFIX, snapdir);
	_cleanup_free_ char *tdisk = xasprintf("%s/templates/%s/%u/rootfs.ext4", s->pool,
					       spec->template_name, spec->template_version);
	uint32_t cpu_millis = spec->limits.cpu_millis ? spec->limits.cpu_millis : 1000;
	char key[96], wid[65], steps[400];
	struct vm_shape sh;
	struct phases ph;
	struct jail *j = NULL;
	int r;

	/* Only a snapshot in the fork form (vm_save_fork) goes on a standby;
	 * any other full snapshot is restored by a QEMU of its own. */
	if (size_of(delta) < 0)
		return -EAGAIN;
	phases_start(&ph);
	vm_shape_of(spec, &sh);
	/* vm_save_fork checked all this against the parent's spec, which the
	 * child's is; a mismatch now is a bad request, not a slower path
	 * (there is no RAM file for one). */
	if (!s->vm || !s->vm->usable || cpu_millis != sh.cpus * 1000 || size_of(state) < 0 ||
	    size_of(delta) != (off_t)((uint64_t)sh.mem_mb << 20) || size_of(disk) < 0 ||
	    size_of(disk) != size_of(tdisk))
		return err_set(err, EINVAL, "fork snapshot %s/%s does not fit a %u MiB/%u vCPU "
			       "fork standby", parent, snap, sh.mem_mb, sh.cpus);
	standby_key(spec, &sh, key, sizeof(key));
	for (int tries = 0; !(j = pool_pick(s, key, wid)); tries++) {
		/* None parked (or another fork took the one just made): make
		 * one now. */
		if (tries == 3)
			return err_set(err, EAGAIN, "no fork standby for %s", key);
		if ((r = park_spawn(s, spec, &sh, true, err)) < 0)
			return err_wrap(err, "fork standby");
		phases_mark(&ph, "spawn");
	}
	struct standby_fill f = { .disk = disk, .delta = delta, .state = state,
				  .size = (uint64_t)sh.mem_mb << 20, .ph = &ph };
	phases_mark(&ph, "pick");
	r = pool_adopt(s, j, wid, spec, standby_go, &f, chan_dup, pid, err);
	phases_mark(&ph, "activate");
	standby_refill(s, spec);
	phases_mark(&ph, "refill");
	phases_text(&ph, steps, sizeof(steps));
	log_debug("sandbox %s: standby take: %s", spec->id, steps);
	return r;
}

/* Kill a parked QEMU j (claimed: busy), warm or standby, and remove all
 * of it: its subvolume, a standby's RAM file, cgroup and run dir. */
void vm_park_discard(struct nm_server *s, struct jail *j)
{
	_cleanup_free_ char *sub = xasprintf("%s/warm/%s", s->pool, j->id);
	_cleanup_free_ char *mem = xasprintf("%s/warm/%s.mem", s->pool, j->id);
	err_t e = { 0 };

	nmnet_detach(s, j);
	if (j->pidfd >= 0)
		syscall(SYS_pidfd_send_signal, j->pidfd, SIGKILL, NULL, 0);
	if (cgroup_destroy(&s->cg, j->id, &e) < 0)
		log_warn("warm %s cleanup: %s", j->id, e.msg);
	if (access(sub, F_OK) == 0 && mgr_subvol_delete_retry(sub, &e) < 0)
		log_warn("warm %s: delete subvolume: %s", j->id, e.msg);
	unlink(mem);
	vm_cleanup_run(s, j->id);
	mgr_jail_unclaim(s, j);
}

/* Startup: warm subvolumes and run dirs of a previous run (their QEMUs were
 * killed with their cgroups by the sweep). */
void vm_warm_sweep(struct nm_server *s)
{
	_cleanup_free_ char *wdir = xasprintf("%s/warm", s->pool);
	DIR *d = opendir(wdir);
	struct dirent *de;

	while (d && (de = readdir(d))) {
		if (strncmp(de->d_name, "warm-", 5))
			continue;
		_cleanup_free_ char *p = xasprintf("%s/%s", wdir, de->d_name);
		err_t e = { 0 };
		size_t len = strlen(de->d_name);
		if (len > 4 && !strcmp(de->d_name + len - 4, ".mem")) {
			unlink(p);   /* a fork standby's RAM file */
			continue;
		}
		if (pool_subvol_delete(p, &e) < 0)
			log_warn("sweep %s: %s", p, e.msg);
	}
	if (d)
		closedir(d);
	d = opendir(s->vm->run);
	while (d && (de = readdir(d)))
		if (!strncmp(de->d_name, "warm-", 5) || !strncmp(de->d_name, "tmpl-", 5))
			vm_rm_rf_at(dirfd(d), de->d_name);
	if (d)
		closedir(d);
}
