/* nswarm.c - the ns warm pool: jails spawned before anyone asks.
 *
 * An ns create costs a btrfs snapshot, a jail spawn (mounts, namespaces),
 * a veth and the guest's first exec, which is slower than the later ones
 * (its code and the template's binaries are faulted in then). Per template,
 * a pool of jails waits with all of that done, as many as its recent
 * creates ask for (between cfg->ns_warm_pool and cfg->ns_warm_pool_max;
 * see "sizing and refill" below):
 *
 *   pool/warm/<wid>         a writable snapshot of the template (no quota yet)
 *   cgroup airlock/<wid>    with the node defaults as limits
 *   jail                    spawned on it, hostname <wid>, veth + address of
 *                           its slot, one exec of `true` run; what the guest
 *                           sent meanwhile (its unprompted HELLO/READY, the
 *                           exec's EXEC_OK and EXIT) read and dropped here,
 *                           unparsed (jail-ns.c, warm_guest)
 *   entry                   hidden (not listed, adoptable or destroyable by
 *                           the node), warm_key "ns:<template>/<version>"
 *
 * The id is assigned at take, not ahead: the node picks it in the request.
 * A take renames what carries the id (entry, subvolume to sandboxes/<id>,
 * the state file), moves the jail's processes into a new cgroup
 * airlock/<id> with the request's limits (cgroup_move: v2 cannot rename a
 * cgroup), writes the qgroup limit and sets the hostname from inside the jail's UTS
 * namespace. The channel then has nothing unread in it, so the node's
 * HELLO gets the same HELLO + READY answer as from a cold jail (at most an
 * EXIT that crossed the warm-up's last read is left, which the node skips:
 * a pid it never started). The slot, and with it the uid range, the veth
 * name and the address, stays the jail's: they are per slot, not per id. Whatever the sandbox does later
 * starts after the take, so nothing of the warm-up outlives it but the
 * guest's pid counter (the first exec is not pid 2).
 *
 * Refill threads (up to NSWARM_WORKERS, side by side) top the pools up
 * after each take or cold create, off the create path. Warm jails die with nodemgr like every jail
 * and their subvolumes are removed at shutdown (mgr_sandbox_kill_all); the
 * startup sweeps remove what a crashed run left (cgroups and state files in
 * mgr_sandbox_sweep_leftovers, pool/warm/warm-* in vm-pool.c's vm_warm_sweep). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../../lib/log.h"
#include "../../lib/util.h"
#include "../../pool/pool.h"
#include "../core/nodemgr-internal.h"
#include "../net/net.h"
#include "jail.h"
#include "ns.h"

static void ns_key(const struct nm_sandbox_spec *spec, char *out, size_t cap)
{
	snprintf(out, cap, "ns:%s/%u", spec->template_name, spec->template_version);
}

void jail_nswarm_remove_subvol(struct nm_server *s, const char *wid)
{
	_cleanup_free_ char *p = xasprintf("%s/warm/%s", s->pool, wid);
	err_t e = { 0 };

	if (access(p, F_OK) < 0 || mgr_subvol_delete_retry(p, &e) == 0)
		return;
	log_warn("warm %s: delete subvolume: %s", wid, e.msg);
}

/* One more waiting jail for spec's template. */
static int warm_spawn(struct nm_server *s, const struct nm_sandbox_spec *tspec, err_t *err)
{
	_cleanup_free_ char *wid = random_id("warm-", 8);
	_cleanup_free_ char *tmpl = xasprintf("%s/templates/%s/%u", s->pool, tspec->template_name,
					      tspec->template_version);
	_cleanup_free_ char *wdir = xasprintf("%s/warm", s->pool);
	_cleanup_free_ char *sbx = xasprintf("%s/%s", wdir, wid);
	_cleanup_free_ char *rootfs = xasprintf("%s/rootfs", sbx);
	struct nm_sandbox_spec ws = { .template_version = tspec->template_version };
	uint64_t t0 = now_us();
	struct jail *j;
	int dup = -1, r;
	pid_t pid;

	snprintf(ws.id, sizeof(ws.id), "%s", wid);
	snprintf(ws.template_name, sizeof(ws.template_name), "%s", tspec->template_name);
	if (!(j = mgr_jail_claim(s, wid, err)))
		return -err->code;
	j->hidden = true;
	ns_key(&ws, j->warm_key, sizeof(j->warm_key));  /* busy: not takeable yet */
	if (pool_is_subvol(tmpl) != 1) {
		r = err_set(err, ENOENT, "template %s/%u not found", ws.template_name,
			    ws.template_version);
		goto fail;
	}
	if (mkdir(wdir, 0700) < 0 && errno != EEXIST) {
		r = err_sys(err, "mkdir %s", wdir);
		goto fail;
	}
	if ((r = pool_subvol_snapshot(tmpl, sbx, false, err)) < 0)
		goto fail;
	if ((r = jail_ns_spawn(s, j, &ws, rootfs, &dup, &pid, err)) < 0)
		goto fail_subvol;
	if (dup >= 0)
		close(dup);
	log_debug("warm %s: ns jail pid %d ready for %s in %.1f ms", wid, (int)pid, j->warm_key,
		  (now_us() - t0) / 1000.0);
	return 0;
fail_subvol: {
	err_t e2 = { 0 };
	nmnet_detach(s, j);
	if (cgroup_destroy(&s->cg, wid, &e2) < 0)
		log_warn("warm %s cleanup: %s", wid, e2.msg);
	jail_nswarm_remove_subvol(s, wid);
}
fail:
	mgr_jail_unclaim(s, j);
	return r;
}

/* Kill a parked ns jail j (claimed: busy) and remove all of it. */
void jail_nswarm_discard(struct nm_server *s, struct jail *j)
{
	err_t e = { 0 };

	nmnet_detach(s, j);
	if (j->pidfd >= 0)
		syscall(SYS_pidfd_send_signal, j->pidfd, SIGKILL, NULL, 0);
	if (cgroup_destroy(&s->cg, j->id, &e) < 0)
		log_warn("warm %s cleanup: %s", j->id, e.msg);
	jail_nswarm_remove_subvol(s, j->id);
	{
		_cleanup_free_ char *st = xasprintf("%s/%s.state", s->run_dir, j->id);
		unlink(st);
	}
	mgr_jail_unclaim(s, j);
}

/* Remove the waiting jails of key whose init died (none should: nothing
 * runs in them but the agent). */
static void drop_dead(struct nm_server *s, const char *key)
{
	for (;;) {
		struct jail *j;

		pthread_mutex_lock(&s->lock);
		for (j = s->jails; j; j = j->next)
			if (j->hidden && !j->vm && !j->alive && !j->busy &&
			    !strcmp(j->warm_key, key))
				break;
		if (j)
			j->busy = true;
		pthread_mutex_unlock(&s->lock);
		if (!j)
			return;
		log_warn("warm %s: its jail died while waiting; removed", j->id);
		jail_nswarm_discard(s, j);
	}
}

/* ---- sizing and refill ---------------------------------------------------
 *
 * Each template's pool has a target size from its recent creates
 * (warmsize.h), between cfg->ns_warm_pool and cfg->ns_warm_pool_max. Up to
 * NSWARM_WORKERS refill threads (one per core on this kind of host) spawn
 * warm jails side by side until every pool holds its target, the work of
 * one jail (snapshot, jail spawn, first exec) in one thread; a pool over
 * its target (its demand decayed) gives its surplus back. The last thread
 * stays while some target is above its minimum, looking again every
 * NSWARM_TRIM_MS, so the pools shrink back when creates stop. */
#define NSWARM_TRIM_MS 500
#define NSWARM_RETRY_MS 1000

static uint32_t pool_min(const struct nm_server *s)
{
	return s->cfg->ns_warm_pool;
}

/* ns_warm_pool 0 is the pool off, whatever the max says. */
static uint32_t pool_max(const struct nm_server *s)
{
	if (!s->cfg->ns_warm_pool)
		return 0;
	return s->cfg->ns_warm_pool_max > s->cfg->ns_warm_pool ? s->cfg->ns_warm_pool_max
								: s->cfg->ns_warm_pool;
}

static uint32_t key_target(const struct nm_server *s, const struct nswarm_key *k, uint64_t now)
{
	return mgr_warm_pool_target(&k->demand, now, s->cfg->warm_pool_half_life_ms, pool_min(s),
				    pool_max(s));
}

static void key_text(const struct nswarm_key *k, char *out, size_t cap)
{
	snprintf(out, cap, "ns:%s/%u", k->name, k->version);
}

/* The entry of spec's template, made (replacing the least recently used
 * one no spawn works on) when missing; NULL when every entry is busy.
 * Under s->lock. */
static struct nswarm_key *key_get_locked(struct nm_server *s, const struct nm_sandbox_spec *spec,
					 uint64_t now)
{
	struct nswarm_key *free_k = NULL;

	for (int i = 0; i < NSWARM_KEYS; i++) {
		struct nswarm_key *k = &s->ns_keys[i];
		if (k->used && k->version == spec->template_version &&
		    !strcmp(k->name, spec->template_name))
			return k;
		if (!k->used) {
			if (!free_k || free_k->used)   /* an empty entry before any reuse */
				free_k = k;
		} else if (!k->spawning && !free_k)
			free_k = k;
		else if (!k->spawning && free_k->used && k->used_ms < free_k->used_ms)
			free_k = k;
	}
	if (!free_k)
		return NULL;
	memset(free_k, 0, sizeof(*free_k));
	free_k->used = true;
	snprintf(free_k->name, sizeof(free_k->name), "%s", spec->template_name);
	free_k->version = spec->template_version;
	free_k->used_ms = now;
	return free_k;
}

/* Parked (alive, untaken) warm jails per key entry, in one pass over the
 * jails. Under s->lock. */
static void count_parked_locked(struct nm_server *s, uint32_t parked[NSWARM_KEYS])
{
	char keys[NSWARM_KEYS][96];

	for (int i = 0; i < NSWARM_KEYS; i++) {
		parked[i] = 0;
		if (s->ns_keys[i].used)
			key_text(&s->ns_keys[i], keys[i], sizeof(keys[i]));
	}
	for (struct jail *j = s->jails; j; j = j->next) {
		if (!j->hidden || j->vm || !j->alive || j->busy || strncmp(j->warm_key, "ns:", 3))
			continue;
		for (int i = 0; i < NSWARM_KEYS; i++)
			if (s->ns_keys[i].used && !strcmp(j->warm_key, keys[i])) {
				parked[i]++;
				break;
			}
	}
}

enum job { JOB_NONE, JOB_SPAWN, JOB_TRIM, JOB_WAIT };

/* The next thing a refill thread does: spawn a jail for the pool furthest
 * under its target (*k counts it in spawning), take a surplus jail of a
 * pool over its target out (*trim, marked busy), wait (some target is still
 * above its minimum and will come down) or nothing. Under s->lock. */
static enum job next_job_locked(struct nm_server *s, struct nswarm_key **kp, struct jail **trim)
{
	uint32_t parked[NSWARM_KEYS];
	uint64_t now = now_ms();
	struct nswarm_key *best = NULL, *over = NULL;
	uint32_t best_gap = 0;
	bool decaying = false;

	count_parked_locked(s, parked);
	for (int i = 0; i < NSWARM_KEYS; i++) {
		struct nswarm_key *k = &s->ns_keys[i];
		uint32_t want, have;
		if (!k->used)
			continue;
		want = key_target(s, k, now);
		have = parked[i] + k->spawning;
		if (want > pool_min(s) || parked[i] > pool_min(s))
			decaying = true;
		if (have < want && now >= k->retry_ms && want - have > best_gap) {
			best = k;
			best_gap = want - have;
		}
		if (parked[i] > want && !over)
			over = k;
	}
	if (best) {
		best->spawning++;
		*kp = best;
		return JOB_SPAWN;
	}
	if (over) {
		char key[96];
		key_text(over, key, sizeof(key));
		for (struct jail *j = s->jails; j; j = j->next)
			if (j->hidden && !j->vm && j->alive && !j->busy && !strcmp(j->warm_key, key)) {
				j->busy = true;
				*trim = j;
				return JOB_TRIM;
			}
	}
	return decaying ? JOB_WAIT : JOB_NONE;
}

/* Spawn one warm jail for k (counted in its spawning). */
static void refill_one(struct nm_server *s, struct nswarm_key *k)
{
	struct nm_sandbox_spec spec = { .template_version = k->version };
	char key[96];
	err_t err = { 0 };
	bool gone;
	int r = 0;

	snprintf(spec.template_name, sizeof(spec.template_name), "%s", k->name);
	key_text(k, key, sizeof(key));
	drop_dead(s, key);
	gone = mgr_template_superseded(s, spec.template_name, spec.template_version);
	if (gone)   /* deleted or replaced meanwhile: drop what was parked */
		mgr_template_retire_pools(s, spec.template_name, spec.template_version, false);
	else if ((r = warm_spawn(s, &spec, &err)) < 0)
		log_warn("warm pool %s: %s", key, err.msg);
	pthread_mutex_lock(&s->lock);
	k->spawning--;
	if (gone && !k->spawning)
		k->used = false;   /* nothing of it is wanted any more */
	else if (r < 0)
		k->retry_ms = now_ms() + NSWARM_RETRY_MS;
	pthread_mutex_unlock(&s->lock);
}

static void wait_locked(struct nm_server *s, int ms)
{
	struct timespec dl;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_nsec += (long)ms * 1000000L;
	dl.tv_sec += dl.tv_nsec / 1000000000L;
	dl.tv_nsec %= 1000000000L;
	pthread_cond_timedwait(&s->cond, &s->lock, &dl);
}

static void *refill_main(void *arg)
{
	struct nm_server *s = arg;

	pthread_mutex_lock(&s->lock);
	while (!s->stopping) {
		struct nswarm_key *k = NULL;
		struct jail *trim = NULL;
		enum job job = next_job_locked(s, &k, &trim);

		if (job == JOB_NONE || (job == JOB_WAIT && s->ns_workers > 1))
			break;   /* the last thread stays to shrink the pools */
		if (job == JOB_WAIT) {
			wait_locked(s, NSWARM_TRIM_MS);
			continue;
		}
		pthread_mutex_unlock(&s->lock);
		if (job == JOB_SPAWN) {
			refill_one(s, k);
		} else {
			log_debug("warm %s: over its pool's target, removed", trim->id);
			jail_nswarm_discard(s, trim);
		}
		pthread_mutex_lock(&s->lock);
	}
	s->ns_workers--;
	s->nthreads--;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* Start refill threads for the work there is, up to NSWARM_WORKERS. Under
 * s->lock. */
static void start_workers_locked(struct nm_server *s, uint32_t wanted)
{
	pthread_attr_t attr;
	pthread_t th;

	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	while (!s->stopping && s->ns_workers < NSWARM_WORKERS &&
	       (uint32_t)s->ns_workers < (wanted ? wanted : 1)) {
		if (pthread_create(&th, &attr, refill_main, s) != 0)
			break;
		s->ns_workers++;
		s->nthreads++;  /* shutdown waits for it like for a verb */
	}
	pthread_attr_destroy(&attr);
}

void jail_nswarm_refill(struct nm_server *s, const struct nm_sandbox_spec *spec)
{
	uint32_t parked[NSWARM_KEYS], want;
	struct nswarm_key *k;
	uint64_t now = now_ms();

	if (!pool_max(s))
		return;
	pthread_mutex_lock(&s->lock);
	k = key_get_locked(s, spec, now);
	if (k) {
		count_parked_locked(s, parked);
		want = key_target(s, k, now);
		uint32_t have = parked[k - s->ns_keys] + k->spawning;
		start_workers_locked(s, want > have ? want - have : 1);
	}
	pthread_mutex_unlock(&s->lock);
}

/* A create for spec's template: its pool's demand goes up. */
static void note_demand(struct nm_server *s, const struct nm_sandbox_spec *spec)
{
	uint64_t now = now_ms();
	struct nswarm_key *k;

	pthread_mutex_lock(&s->lock);
	if ((k = key_get_locked(s, spec, now))) {
		mgr_warm_demand_note(&k->demand, now, s->cfg->warm_pool_half_life_ms);
		k->used_ms = now;
	}
	pthread_mutex_unlock(&s->lock);
}

/* The target of spec's pool now (for GET /metrics), or -1 when it has no
 * entry. Under s->lock. */
int jail_nswarm_target_locked(struct nm_server *s, const char *name, uint32_t version)
{
	for (int i = 0; i < NSWARM_KEYS; i++) {
		const struct nswarm_key *k = &s->ns_keys[i];
		if (k->used && k->version == version && !strcmp(k->name, name))
			return (int)key_target(s, k, now_ms());
	}
	return -1;
}

/* sethostname inside the jail's UTS namespace (owned by its user namespace,
 * in which host root has every capability), from this thread only: setns
 * of a UTS namespace changes the calling thread, and we go back at once. */
static int set_hostname(int pidfd, const char *name, err_t *err)
{
	_cleanup_close_ int self = open("/proc/thread-self/ns/uts", O_RDONLY | O_CLOEXEC);
	int r = 0;

	if (self < 0)
		return err_sys(err, "open own uts namespace");
	if (setns(pidfd, CLONE_NEWUTS) < 0)
		return err_sys(err, "enter the jail's uts namespace");
	if (sethostname(name, strlen(name)) < 0)
		r = err_sys(err, "sethostname %s", name);
	if (setns(self, CLONE_NEWUTS) < 0) {
		/* This thread would name the next jails' hosts wrongly. */
		log_err("nswarm: cannot return to nodemgr's uts namespace: %s",
			  strerror(errno));
		abort();
	}
	return r;
}

int jail_nswarm_take(struct nm_server *s, const struct nm_sandbox_spec *spec, int *chan_dup,
		     pid_t *pid, err_t *err)
{
	const struct nm_limits *lim = &spec->limits;
	struct cgroup_limits cl = jail_ns_cgroup_limits(lim);
	uint64_t disk = (uint64_t)(lim->disk_mb ? lim->disk_mb : NM_DEFAULT_DISK_MB) << 20;
	const char *hostname = spec->hostname[0] ? spec->hostname : spec->id;
	_cleanup_free_ char *sbx = xasprintf("%s/sandboxes/%s", s->pool, spec->id);
	_cleanup_free_ char *wsbx = NULL;
	bool renamed = false, moved = false, cg_moved = false;
	uint64_t t0 = now_us();
	char key[96], wid[65];
	struct jail *j;
	int r;

	if (!pool_max(s))
		return -EAGAIN;
	note_demand(s, spec);
	/* A leftover subvolume is the node's data: never overwrite it. */
	if (access(sbx, F_OK) == 0)
		return err_set(err, EEXIST, "subvolume for sandbox %s exists", spec->id);
	ns_key(spec, key, sizeof(key));
	pthread_mutex_lock(&s->lock);
	for (j = s->jails; j; j = j->next)
		if (j->hidden && !j->vm && j->alive && !j->busy && !strcmp(j->warm_key, key))
			break;
	if (j) {
		j->busy = true;
		j->warm_key[0] = '\0';
		snprintf(wid, sizeof(wid), "%s", j->id);
	}
	pthread_mutex_unlock(&s->lock);
	if (!j)
		return -EAGAIN;  /* the cold create refills after it is done */
	wsbx = xasprintf("%s/warm/%s", s->pool, wid);

	if ((r = mgr_jail_rename(s, j, spec->id, err)) < 0) {
		/* The id is taken (by a create racing this one): the jail is
		 * still as good as it was. */
		pthread_mutex_lock(&s->lock);
		ns_key(spec, j->warm_key, sizeof(j->warm_key));
		j->busy = false;
		pthread_mutex_unlock(&s->lock);
		return r;
	}
	renamed = true;
	j->from_pool = true;   /* busy: this verb's; freed if the take fails */
	if (rename(wsbx, sbx) < 0) {
		r = err_sys(err, "rename %s", wsbx);
		goto fail;
	}
	moved = true;
	if ((r = pool_qgroup_limit(sbx, disk, err)) < 0)
		goto fail;
	cg_moved = true;  /* from here airlock/<id> may exist beside airlock/<wid> */
	if ((r = cgroup_move(&s->cg, wid, spec->id, &cl, err)) < 0 ||
	    (r = set_hostname(j->pidfd, hostname, err)) < 0 ||
	    (r = mgr_jail_activate(s, j, chan_dup, err)) < 0)
		goto fail;
	*pid = j->pid;
	log_info("sandbox %s: warm: jail pid %d from the warm pool (%s) in %.1f ms", spec->id,
		 (int)*pid, wid, (now_us() - t0) / 1000.0);
	jail_nswarm_refill(s, spec);
	return 0;
fail:
	log_warn("sandbox %s: take warm %s: %s", spec->id, wid, err->msg);
	{
		err_t e2 = { 0 };
		nmnet_detach(s, j);
		if (j->pidfd >= 0)
			syscall(SYS_pidfd_send_signal, j->pidfd, SIGKILL, NULL, 0);
		if (cgroup_destroy(&s->cg, wid, &e2) < 0 ||
		    (cg_moved && cgroup_destroy(&s->cg, spec->id, &e2) < 0))
			log_warn("warm %s cleanup: %s", wid, e2.msg);
		if (moved) {
			if (mgr_subvol_delete_retry(sbx, &e2) < 0)
				log_warn("warm %s cleanup: %s", wid, e2.msg);
		} else {
			jail_nswarm_remove_subvol(s, wid);
		}
		if (renamed) {
			_cleanup_free_ char *st = xasprintf("%s/%s.state", s->run_dir, spec->id);
			unlink(st);
		}
	}
	mgr_jail_unclaim(s, j);
	jail_nswarm_refill(s, spec);
	return r == -EEXIST ? -EIO : r;
}
