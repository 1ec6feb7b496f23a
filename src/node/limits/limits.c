/* limits.c - limits that bite are events (limits.h).
 *
 * Why a poll, and not a watch of each cgroup's files: v2's memory.events
 * does raise a file-modified notification (inotify) and v1 has eventfds
 * through cgroup.event_control, but the first is v2 only and the second
 * one fd and one registration per sandbox and kind, made by root (nodemgr)
 * and kept across its restarts. One verb for every sandbox every
 * LIMITS_POLL_MS costs, with S sandboxes, 2 to 3 small kernel files and a
 * stat per sandbox in nodemgr and one connection, and a few seconds of
 * latency, which an event about an OOM kill can bear. Sandboxes with
 * nothing to tell are not in the answer.
 *
 * What a tenant controls is how often its sandbox hits a limit (a loop of
 * OOMs, a fork bomb): that only moves counters here. The rows it costs are
 * bounded: one event row per kind per LIMITS_EVENT_MS per sandbox (and the
 * spec row rewritten with it), whatever the rate.
 *
 * Everything here runs on the reaper thread (TIMER_LIMITS and
 * TIMER_CHAN_CLOSED), so one sandbox's counts are never taken by two
 * callers at once; sb->mu guards them against the readers (GET). */
#include "limits.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../db/db.h"
#include "../../lib/log.h"
#include "../../nmclient/nm.h"

/* An OOM kill seen this recently before the init died by SIGKILL is taken
 * to be the init's own (the kernel counts the kill before it signals). */
#define LIMITS_OOM_RECENT_MS 10000

static const char *const kind_names[LIMIT__COUNT] = LIMIT_KIND_NAMES;

const char *limits_kind_name(enum sb_limit_kind k)
{
	return (unsigned)k < LIMIT__COUNT ? kind_names[k] : "unknown";
}

/* ---- the feature: JSON and the row ----------------------------------- */

static void render_locked(struct jw *w, struct sandbox *sb)
{
	char at[ISO_TIME_MAX];

	jw_key(w, "limits_hit");
	jw_obj(w);
	jw_key(w, "oom_kills");
	jw_uint(w, sb->lim.total[LIMIT_OOM_KILL]);
	jw_key(w, "pids_max_hits");
	jw_uint(w, sb->lim.total[LIMIT_PIDS_MAX]);
	jw_key(w, "last_at");
	if (sb->lim.last_at) {
		iso_time(sb->lim.last_at, at);
		jw_str(w, at);
	} else {
		jw_null(w);
	}
	jw_end(w);
}

static uint64_t u64_of(const json *o, const char *key)
{
	bool bad = false;
	int64_t v = json_get_int(o, key, 0, &bad);

	return bad || v < 0 ? 0 : (uint64_t)v;
}

/* The spec row's "limits_hit": {oom_kills, pids_max_hits, last_at_ms, gen,
 * seen_oom, seen_pids}, as report() writes it. What it holds was reported. */
static void load(struct node *n, struct sandbox *sb, const json *spec)
{
	const json *l = spec ? json_get(spec, "limits_hit") : NULL;

	(void)n;
	if (!l || l->type != JSON_OBJ)
		return;
	sb->lim.total[LIMIT_OOM_KILL] = u64_of(l, "oom_kills");
	sb->lim.total[LIMIT_PIDS_MAX] = u64_of(l, "pids_max_hits");
	sb->lim.seen[LIMIT_OOM_KILL] = u64_of(l, "seen_oom");
	sb->lim.seen[LIMIT_PIDS_MAX] = u64_of(l, "seen_pids");
	sb->lim.gen = u64_of(l, "gen");
	sb->lim.last_at = (int64_t)u64_of(l, "last_at_ms");
	memcpy(sb->lim.reported, sb->lim.total, sizeof(sb->lim.reported));
}

void limits_spec_forget(char **spec)
{
	err_t err = { 0 };
	json *j = *spec ? json_parse(*spec, strlen(*spec), &err) : NULL;
	struct buf b;
	struct jw w;

	if (!j || j->type != JSON_OBJ || !json_get(j, "limits_hit")) {
		json_free(j);
		return;
	}
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	for (size_t i = 0; i < j->n; i++) {
		if (!strcmp(j->keys[i], "limits_hit"))
			continue;
		jw_key(&w, j->keys[i]);
		jw_value(&w, j->items[i]);
	}
	jw_end(&w);
	json_free(j);
	free(*spec);
	*spec = buf_steal(&b);
}

const struct sandbox_feature limits_feature = {
	.name = "limits",
	.render_locked = render_locked,
	.load = load,
};

/* ---- counting --------------------------------------------------------- */

/* Take nodemgr's counters h into sb's counts and the node's; due[k]: kind
 * k rose past what its last row said and may have a row now (force: even
 * within LIMITS_EVENT_MS of the last). */
static bool observe(struct node *n, struct sandbox *sb, const struct nm_limit_hits *h,
		    uint64_t now, bool force, bool due[LIMIT__COUNT])
{
	const uint64_t raw[LIMIT__COUNT] = { h->oom_kills, h->pids_max };
	bool any = false, rose = false;

	if (!h->gen) {
		/* nodemgr could not read the cgroup (gone): nothing to take */
		memset(due, 0, sizeof(bool) * LIMIT__COUNT);
		return false;
	}
	pthread_mutex_lock(&sb->mu);
	if (h->gen != sb->lim.gen) {
		/* a cgroup made again (rollback, restore, recovery): its
		 * counters start from 0 */
		sb->lim.gen = h->gen;
		memset(sb->lim.seen, 0, sizeof(sb->lim.seen));
	}
	for (int k = 0; k < LIMIT__COUNT; k++) {
		uint64_t d;

		if (raw[k] < sb->lim.seen[k])
			sb->lim.seen[k] = 0;   /* never within one gen; be safe */
		d = raw[k] - sb->lim.seen[k];
		sb->lim.seen[k] = raw[k];
		if (d) {
			sb->lim.total[k] += d;
			sb->lim.hit_ms[k] = now;
			__atomic_add_fetch(&n->limit_hits[k], d, __ATOMIC_RELAXED);
			rose = true;
		}
		due[k] = sb->lim.total[k] > sb->lim.reported[k] &&
			 (force || !sb->lim.event_ms[k] ||
			  now - sb->lim.event_ms[k] >= LIMITS_EVENT_MS);
		any |= due[k];
	}
	if (rose)
		sb->lim.last_at = wall_ms();
	pthread_mutex_unlock(&sb->mu);
	return any;
}

/* The event row's reason for kind k: `d` more since the last row, `total`
 * in all. */
static void reason_of(const struct sandbox *sb, int k, uint64_t d, uint64_t total, char *out,
		      size_t sz)
{
	bool guest = backend_can(sb->be, BACKEND_CAP_GUEST_LIMITS);

	if (k == LIMIT_OOM_KILL && guest)
		snprintf(out, sz,
			 "out of memory: the kernel killed %" PRIu64 " process%s at the memory limit"
			 " (%u MiB); %" PRIu64 " in all",
			 d, d == 1 ? "" : "es", sb->limits.memory_mb, total);
	else if (k == LIMIT_OOM_KILL)
		snprintf(out, sz,
			 "out of memory: the kernel killed the sandbox's QEMU at its memory limit"
			 " (%u MiB and QEMU's own); %" PRIu64 " in all",
			 sb->limits.memory_mb, total);
	else if (guest)
		snprintf(out, sz,
			 "pids limit: %" PRIu64 " fork%s refused at the limit of %u processes;"
			 " %" PRIu64 " in all",
			 d, d == 1 ? "" : "s", sb->limits.pids, total);
	else
		snprintf(out, sz,
			 "pids limit: %" PRIu64 " thread%s of the sandbox's QEMU refused at its"
			 " limit; %" PRIu64 " in all",
			 d, d == 1 ? "" : "s", total);
}

/* The event rows of the kinds due and the counts in the spec row, in one
 * transaction, fenced like every write about a sandbox (state.h). A
 * failure leaves them due: the next poll tries again. */
static void report(struct node *n, struct sandbox *sb, const bool due[LIMIT__COUNT],
		   uint64_t now)
{
	struct sb_limits lim;
	enum sb_state st;
	struct state_fence f = state_fence();
	char reason[256];
	struct buf b;
	struct jw w;
	json *v;
	err_t err = { 0 };
	int r;

	pthread_mutex_lock(&sb->mu);
	lim = sb->lim;
	st = sb->state;
	pthread_mutex_unlock(&sb->mu);
	/* only a sandbox with a row and a jail (not one that is still
	 * pending, or gone) */
	if (!state_is_live(st) || st == SB_PENDING)
		return;
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "oom_kills");
	jw_uint(&w, lim.total[LIMIT_OOM_KILL]);
	jw_key(&w, "pids_max_hits");
	jw_uint(&w, lim.total[LIMIT_PIDS_MAX]);
	jw_key(&w, "last_at_ms");
	jw_int(&w, lim.last_at);
	jw_key(&w, "gen");
	jw_uint(&w, lim.gen);
	jw_key(&w, "seen_oom");
	jw_uint(&w, lim.seen[LIMIT_OOM_KILL]);
	jw_key(&w, "seen_pids");
	jw_uint(&w, lim.seen[LIMIT_PIDS_MAX]);
	jw_end(&w);
	v = json_parse(b.data, b.len, &err);
	buf_free(&b);
	if (!v)
		return;
	r = db_tx_begin(n->db, &err);
	for (int k = 0; r >= 0 && k < LIMIT__COUNT; k++) {
		if (!due[k])
			continue;
		reason_of(sb, k, lim.total[k] - lim.reported[k], lim.total[k], reason,
			  sizeof(reason));
		r = db_exec(n->db, &err,
			    "INSERT INTO events(sandbox_id, at, from_state, to_state, reason, kind,"
			    " count) SELECT ?,?,?,?,?,?,? WHERE " STATE_FENCE_OF_SQL,
			    "sissssi" STATE_FENCE_OF_TYPES, sb->id, wall_ms(), state_name(st),
			    state_name(st), reason, kind_names[k], (int64_t)lim.total[k],
			    STATE_FENCE_OF_ARGS(f, sb->id));
		r = state_fenced(n->db, sb->id, r, &err);
	}
	if (r >= 0)
		r = sandbox_spec_set(n, sb, "limits_hit", v, &err);
	if (r >= 0)
		r = db_tx_commit(n->db, &err);
	else
		db_tx_rollback(n->db);
	json_free(v);
	if (r < 0) {
		log_warn("sandbox %s: limit events: %s", sb->id, err.msg);
		return;
	}
	pthread_mutex_lock(&sb->mu);
	for (int k = 0; k < LIMIT__COUNT; k++)
		if (due[k]) {
			sb->lim.reported[k] = lim.total[k];
			sb->lim.event_ms[k] = now;
		}
	pthread_mutex_unlock(&sb->mu);
	log_info("sandbox %s: limits hit: %" PRIu64 " OOM kills, %" PRIu64 " forks refused", sb->id,
		 lim.total[LIMIT_OOM_KILL], lim.total[LIMIT_PIDS_MAX]);
}

static void apply(struct node *n, struct sandbox *sb, const struct nm_limit_hits *h, bool force)
{
	bool due[LIMIT__COUNT];
	uint64_t now = now_ms();

	if (observe(n, sb, h, now, force, due))
		report(n, sb, due, now);
}

static void poll_all(struct node *n)
{
	struct nm_limit_hits *v = NULL;
	size_t cnt = 0;
	err_t err = { 0 };

	if (nm_sandbox_limits(n->cfg->nm_sock, NULL, &v, &cnt, &err) < 0) {
		log_debug("limits: %s", err.msg);
		return;
	}
	for (size_t i = 0; i < cnt && !node_stopping(n); i++) {
		struct sandbox *sb = sandbox_find(n, v[i].id, NULL);

		if (!sb)
			continue;   /* a jail the node does not know (yet) */
		apply(n, sb, &v[i], false);
		sandbox_unref(sb);
	}
	free(v);
}

void limits_start(struct node *n)
{
	reaper_add(n, now_ms() + LIMITS_POLL_MS, TIMER_LIMITS, "", 0);
}

void limits_tick(struct node *n)
{
	poll_all(n);
	if (!node_stopping(n))
		reaper_add(n, now_ms() + LIMITS_POLL_MS, TIMER_LIMITS, "", 0);
}

void limits_why_closed(struct node *n, const char *id, char *why, size_t sz)
{
	struct nm_limit_hits *v = NULL;
	struct sandbox *sb = sandbox_find(n, id, NULL);
	size_t cnt = 0;
	err_t err = { 0 };
	bool oom = false;

	bool closed_alone;

	snprintf(why, sz, "guest channel closed");
	if (!sb)
		return;
	/* only a guest that went by itself (as sandbox_on_chan_closed sees
	 * it): a delete's or a rollback's kill is no news */
	pthread_mutex_lock(&sb->mu);
	closed_alone = (sb->state == SB_RUNNING || sb->state == SB_PAUSED) && !sb->deleting &&
		       sb->chan_closed;
	pthread_mutex_unlock(&sb->mu);
	if (!closed_alone) {
		sandbox_unref(sb);
		return;
	}
	/* The channel can close before nodemgr has reaped the init (its
	 * SIGCHLD comes on its own time): give it up to a second. */
	for (int i = 0; i < 20; i++) {
		free(v);
		v = NULL;
		if (nm_sandbox_limits(n->cfg->nm_sock, id, &v, &cnt, &err) < 0 || cnt != 1 ||
		    v[0].init_gone)
			break;
		usleep(50000);
	}
	if (v && cnt == 1) {
		/* what the kill counted goes out now: the sandbox is about to
		 * fail or be recovered, and its cgroup with it */
		apply(n, sb, &v[0], true);
		pthread_mutex_lock(&sb->mu);
		oom = v[0].init_gone && v[0].init_signal == SIGKILL &&
		      sb->lim.hit_ms[LIMIT_OOM_KILL] &&
		      now_ms() - sb->lim.hit_ms[LIMIT_OOM_KILL] <= LIMITS_OOM_RECENT_MS;
		pthread_mutex_unlock(&sb->mu);
	}
	if (oom)
		snprintf(why, sz,
			 "out of memory: the kernel's OOM killer ended the sandbox's %s"
			 " (memory limit %u MiB)",
			 backend_can(sb->be, BACKEND_CAP_GUEST_LIMITS) ? "guest agent (its init)"
								       : "QEMU",
			 sb->limits.memory_mb);
	free(v);
	sandbox_unref(sb);
}
