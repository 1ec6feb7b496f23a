/* The snapshot scheduler, retention pruning, idle auto-pause and the TTL's
 * active-time accounting (see schedule.h for the policy and the clock).
 *
 * A pass walks every sandbox (refs taken under node->mu, then no node lock
 * held) and, for one sandbox:
 *   1. running, and a decision is due (idle timeout reached, or a snapshot
 *      interval passed): ask the guest for STATUS. A sample that differs
 *      from the previous one is activity (guest requests, output, process
 *      CPU, process count); so is a client request through the node
 *      (sched_touch) and an open output stream.
 *   2. idle for idle_timeout_s (and no stream open): pause, reason "idle".
 *   3. disk_interval_s passed: a scheduled disk snapshot, unless the guest
 *      sample equals the one taken with the previous scheduled snapshot
 *      (nothing ran, nothing was asked of the agent: the disk cannot have
 *      changed). Either way the next look is one interval later.
 *   4. full_interval_s passed and the backend has full snapshots: the same
 *      with kind "full" (today no backend has them: skipped).
 *   5. running or paused: prune scheduled snapshots by the retention tiers.
 * Paused sandboxes are neither polled nor snapshotted: nothing in them runs.
 *
 * Why the agent's sample and not the btrfs generation: the generation
 * moves only at transaction commit (up to 30 s after a write) and also on
 * atime updates of reads, so it both misses fresh writes and reports reads.
 * Anything that writes the disk runs a process (CPU) or asks the agent
 * (files API), which the sample sees.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/log.h"
#include "../http/handler.h"
#include "../life/lifecycle.h"
#include "../suspend/suspend.h"
#include "snap.h"

#define TICK_MS 1000
/* Retention works in hours and days: looking once a minute (or after a
 * snapshot) is plenty, and spares a query per sandbox per second. */
#define PRUNE_EVERY_MS (60 * 1000)

/* ---- policy ----------------------------------------------------------- */

void sched_policy_defaults(const struct node *n, struct sb_policy *pol)
{
	const struct node_config *c = n->cfg;

	memset(pol, 0, sizeof(*pol));
	pol->disk_interval_s = c->snapshot_disk_interval_s;
	pol->full_interval_s = c->snapshot_full_interval_s;
	pol->retention.keep_all_s = c->snapshot_keep_all_s;
	pol->retention.keep_hourly_s = c->snapshot_keep_hourly_s;
	pol->retention.keep_daily_s = c->snapshot_keep_daily_s;
	pol->idle_timeout_s = c->idle_timeout_s;
}

#define POLICY_MAX_S (10u * 365 * 86400)

static const char *bad(char *msg, size_t sz, const char *fmt, const char *key)
{
	snprintf(msg, sz, fmt, key);
	return "invalid_field";
}

static const char *get_secs(const json *obj, const char *key, uint32_t *out, char *msg, size_t sz)
{
	const json *v = json_get(obj, key);

	if (!v)
		return NULL;
	if (v->type != JSON_NUM || !v->is_int || v->i < 0 || v->i > POLICY_MAX_S)
		return bad(msg, sz, "`%s` must be a non-negative integer (seconds)", key);
	*out = (uint32_t)v->i;
	return NULL;
}

const char *sched_policy_parse(const json *body, struct sb_policy *pol, char *msg, size_t sz)
{
	static const char *const snap_keys[] = { "disk_interval_s", "full_interval_s",
						 "retention", NULL };
	static const char *const ret_keys[] = { "keep_all_s", "keep_hourly_s", "keep_daily_s",
						NULL };
	const json *v, *r;
	const char *code;
	err_t err = { 0 };

	if ((v = json_get(body, "snapshots"))) {
		if (v->type != JSON_OBJ)
			return bad(msg, sz, "`%s` must be an object", "snapshots");
		if (json_check_keys(v, snap_keys, &err) < 0) {
			snprintf(msg, sz, "snapshots: %s", err.msg);
			return "unknown_field";
		}
		if ((code = get_secs(v, "disk_interval_s", &pol->disk_interval_s, msg, sz)) ||
		    (code = get_secs(v, "full_interval_s", &pol->full_interval_s, msg, sz)))
			return code;
		if ((r = json_get(v, "retention"))) {
			if (r->type != JSON_OBJ)
				return bad(msg, sz, "`%s` must be an object", "snapshots.retention");
			if (json_check_keys(r, ret_keys, &err) < 0) {
				snprintf(msg, sz, "snapshots.retention: %s", err.msg);
				return "unknown_field";
			}
			if ((code = get_secs(r, "keep_all_s", &pol->retention.keep_all_s, msg, sz)) ||
			    (code = get_secs(r, "keep_hourly_s", &pol->retention.keep_hourly_s, msg,
					     sz)) ||
			    (code = get_secs(r, "keep_daily_s", &pol->retention.keep_daily_s, msg,
					     sz)))
				return code;
		}
	}
	if ((code = get_secs(body, "idle_timeout_s", &pol->idle_timeout_s, msg, sz)))
		return code;
	if ((v = json_get(body, "on_timeout"))) {
		if (v->type != JSON_STR || (strcmp(v->str, "delete") && strcmp(v->str, "pause")))
			return bad(msg, sz, "`%s` must be \"delete\" or \"pause\"", "on_timeout");
		pol->timeout_pause = strcmp(v->str, "pause") == 0;
	}
	return NULL;
}

void sched_policy_render(struct jw *w, const struct sb_policy *pol)
{
	jw_key(w, "snapshots");
	jw_obj(w);
	jw_key(w, "disk_interval_s");
	jw_uint(w, pol->disk_interval_s);
	jw_key(w, "full_interval_s");
	jw_uint(w, pol->full_interval_s);
	jw_key(w, "retention");
	jw_obj(w);
	jw_key(w, "keep_all_s");
	jw_uint(w, pol->retention.keep_all_s);
	jw_key(w, "keep_hourly_s");
	jw_uint(w, pol->retention.keep_hourly_s);
	jw_key(w, "keep_daily_s");
	jw_uint(w, pol->retention.keep_daily_s);
	jw_end(w);
	jw_end(w);
	jw_key(w, "idle_timeout_s");
	jw_uint(w, pol->idle_timeout_s);
	jw_key(w, "on_timeout");
	jw_str(w, pol->timeout_pause ? "pause" : "delete");
}

void sched_policy_load(const json *spec, struct sb_policy *pol)
{
	char msg[200];
	struct sb_policy p = *pol;

	/* Our own row: a bad value (impossible unless edited) keeps the
	 * defaults rather than failing the load. */
	if (!sched_policy_parse(spec, &p, msg, sizeof(msg)))
		*pol = p;
	else
		log_warn("stored sandbox policy ignored: %s", msg);
}

/* ---- clock, activity, pause accounting --------------------------------- */

static bool same_sample(const struct sb_activity *a, const struct sb_activity *b)
{
	return a->last_activity_ms == b->last_activity_ms && a->cpu_ms == b->cpu_ms &&
	       a->n_procs == b->n_procs;
}

/* Ask the guest; 0 and *out filled, or -1 (not running, or the guest did
 * not answer: no decision is made on a missing sample). */
static int sample(struct sandbox *sb, struct sb_activity *out)
{
	struct guestconn *gc = sandbox_gc_get(sb);
	struct guest_status st;
	err_t err = { 0 };
	int r;

	if (!gc)
		return -1;
	r = guestconn_status(gc, &st, &err);
	sandbox_gc_put(sb);
	if (r < 0) {
		log_warn("sandbox %s: status: %s", sb->id, err.msg);
		return -1;
	}
	out->last_activity_ms = st.last_activity_ms;
	out->cpu_ms = st.cpu_ms;
	out->n_procs = st.n_procs;
	return 0;
}

/* ---- snapshots ---------------------------------------------------------- */

/* The newest snapshot time of sb (any origin) in the sched clock, or 0. */
static int64_t last_snapshot_at(struct node *n, struct sandbox *sb, const char *kind)
{
	struct db_rows rows;
	err_t err = { 0 };
	int64_t at = 0;

	if (db_query(n->db, &rows, &err,
		     "SELECT max(created_at) FROM snapshots WHERE sandbox_id=? AND kind=?", "ss",
		     sb->id, kind) < 0) {
		log_warn("sandbox %s: %s", sb->id, err.msg);
		return 0;
	}
	if (rows.n_rows && db_cell(&rows, 0, 0))
		at = db_cell_int(&rows, 0, 0);
	db_rows_free(&rows);
	return at;
}

/* Prune sb's scheduled snapshots by its retention tiers. A client's own
 * snapshots are never pruned: they were asked for by name or by hand and
 * stay until deleted. */
static void prune(struct node *n, struct sandbox *sb, int64_t now)
{
	struct retention_item *items;
	struct db_rows rows;
	err_t err = { 0 };
	size_t k;

	if (db_query(n->db, &rows, &err,
		     "SELECT id, created_at FROM snapshots WHERE sandbox_id=? AND scheduled=1"
		     " ORDER BY created_at, rowid",
		     "s", sb->id) < 0) {
		log_warn("sandbox %s: retention: %s", sb->id, err.msg);
		return;
	}
	if (rows.n_rows < 2) {
		db_rows_free(&rows);
		return;
	}
	items = xcalloc((size_t)rows.n_rows, sizeof(*items));
	for (int i = 0; i < rows.n_rows; i++)
		items[i].created_at = db_cell_int(&rows, i, 1);
	k = retention_select(items, (size_t)rows.n_rows, now, &sb->pol.retention);
	for (int i = 0; k && i < rows.n_rows; i++) {
		if (!items[i].prune)
			continue;
		if (snapshot_remove(n, sb, db_cell(&rows, i, 0), &err) < 0) {
			log_warn("sandbox %s: prune snapshot %s: %s", sb->id, db_cell(&rows, i, 0),
				 err.msg);
			err_clear(&err);
			break;  /* busy or gone: the next pass tries again */
		}
		{
			char why[120];
			enum sb_state st;
			pthread_mutex_lock(&sb->mu);
			st = sb->state;
			pthread_mutex_unlock(&sb->mu);
			snprintf(why, sizeof(why), "scheduled snapshot %s pruned (retention)",
				 db_cell(&rows, i, 0));
			if (state_event(n->db, sb->id, st, why, &err) < 0) {
				log_warn("sandbox %s: %s", sb->id, err.msg);
				err_clear(&err);
			}
		}
	}
	free(items);
	db_rows_free(&rows);
}

/* The scheduler's snapshots of sb are at most max_snapshots (quota.c): at
 * the cap, drop its oldest ones first, so that the newest point is always
 * taken (retention would thin them later anyway; a cap under what the
 * retention tiers keep must not stop the schedule). A client's snapshots
 * are never touched. */
static void make_room(struct node *n, struct sandbox *sb)
{
	uint32_t max = n->cfg->max_snapshots;
	struct db_rows rows;
	err_t err = { 0 };

	if (!max)
		return;
	if (db_query(n->db, &rows, &err,
		     "SELECT id FROM snapshots WHERE sandbox_id=? AND scheduled=1"
		     " ORDER BY created_at, rowid",
		     "s", sb->id) < 0) {
		log_warn("sandbox %s: max_snapshots: %s", sb->id, err.msg);
		return;
	}
	for (int i = 0; i + (int)max <= rows.n_rows; i++) {
		char why[160];
		enum sb_state st;

		if (snapshot_remove(n, sb, db_cell(&rows, i, 0), &err) < 0) {
			log_warn("sandbox %s: drop snapshot %s: %s", sb->id, db_cell(&rows, i, 0),
				 err.msg);
			break;  /* the take then says why it cannot */
		}
		pthread_mutex_lock(&sb->mu);
		st = sb->state;
		pthread_mutex_unlock(&sb->mu);
		snprintf(why, sizeof(why), "scheduled snapshot %s dropped (max_snapshots %u)",
			 db_cell(&rows, i, 0), max);
		if (state_event(n->db, sb->id, st, why, &err) < 0) {
			log_warn("sandbox %s: %s", sb->id, err.msg);
			err_clear(&err);
		}
	}
	db_rows_free(&rows);
}

/* Steps 3 and 4 for one kind. */
static void maybe_snapshot(struct node *n, struct sandbox *sb, int64_t now, const char *kind,
			   const struct sb_activity *smp, bool have_smp)
{
	bool full = strcmp(kind, "full") == 0;
	int64_t *last = full ? &sb->sched.last_full_at : &sb->sched.last_disk_at;
	bool *sig_valid = full ? &sb->sched.full_sig_valid : &sb->sched.snap_sig_valid;
	struct sb_activity *sig = full ? &sb->sched.full_sig : &sb->sched.snap_sig;
	bool changed;
	err_t err = { 0 };

	if (!have_smp)
		return;
	pthread_mutex_lock(&sb->mu);
	changed = !*sig_valid || !same_sample(sig, smp);
	*last = now;
	pthread_mutex_unlock(&sb->mu);
	if (!changed) {
		log_debug("sandbox %s: unchanged since its last scheduled %s snapshot: skipped",
			  sb->id, kind);
		return;
	}
	make_room(n, sb);
	if (snapshot_take(n, sb, NULL, kind, true, NULL, &err) < 0) {
		log_warn("sandbox %s: scheduled %s snapshot: %s", sb->id, kind, err.msg);
		return;
	}
	pthread_mutex_lock(&sb->mu);
	*sig = *smp;
	*sig_valid = true;
	pthread_mutex_unlock(&sb->mu);
}

static bool due(int64_t now, int64_t last, uint32_t interval_s)
{
	return interval_s && now - last >= (int64_t)interval_s * 1000;
}

static void pass_one(struct node *n, struct sandbox *sb, int64_t now)
{
	const struct sb_policy *pol = &sb->pol;   /* immutable after create */
	bool disk_ok = backend_can(sb->be, BACKEND_CAP_DISK_SNAPSHOT) && sb->be->snapshot;
	bool full_ok = backend_can(sb->be, BACKEND_CAP_FULL_SNAPSHOT);
	bool idle_due = false, disk_due, full_due, have_smp = false, idle = false, prune_due;
	bool baseline;
	struct sb_activity smp = { 0 };
	enum sb_state st;
	err_t err = { 0 };

	pthread_mutex_lock(&sb->mu);
	st = sb->state;
	if (sb->deleting || sb->lc_busy || (st != SB_RUNNING && st != SB_PAUSED)) {
		pthread_mutex_unlock(&sb->mu);
		return;
	}
	if (!sb->sched.known_since)
		sb->sched.known_since = now;
	if (!sb->sched.active_at)
		sb->sched.active_at = sb->sched.known_since;
	if (!sb->sched.last_disk_at || !sb->sched.last_full_at) {
		/* First look since the node (re)started: count intervals from
		 * the newest snapshot, or from when this node loaded it. */
		pthread_mutex_unlock(&sb->mu);
		int64_t d = last_snapshot_at(n, sb, "disk"), f = last_snapshot_at(n, sb, "full");
		pthread_mutex_lock(&sb->mu);
		if (!sb->sched.last_disk_at)
			sb->sched.last_disk_at = d ? d : sb->sched.known_since;
		if (!sb->sched.last_full_at)
			sb->sched.last_full_at = f ? f : sb->sched.known_since;
	}
	/* The second idle tier: paused (idle, by a client or its timeout) for
	 * suspend_after_idle_s, it is suspended to the object store. A sandbox
	 * loaded paused counts from when this node loaded it. */
	if (st == SB_PAUSED && !sb->sched.paused_at)
		sb->sched.paused_at = sb->sched.known_since;
	if (st == SB_PAUSED && n->cfg->suspend_after_idle_s && n->os &&
	    sandbox_suspend_kind(sb) &&
	    now - sb->sched.paused_at >= (int64_t)n->cfg->suspend_after_idle_s * 1000) {
		pthread_mutex_unlock(&sb->mu);
		if (sandbox_suspend(n, sb, "idle", NULL, &err) < 0) {
			log_warn("sandbox %s: idle suspend: %s", sb->id, err.msg);
			/* Over the tenant's snapshot_mb: asked again after another
			 * idle period, not at every pass (each try takes and drops
			 * a snapshot). */
			if (err.code == EDQUOT) {
				pthread_mutex_lock(&sb->mu);
				sb->sched.paused_at = now;
				pthread_mutex_unlock(&sb->mu);
			}
		} else {
			log_info("sandbox %s: suspended after %u s paused", sb->id,
				 n->cfg->suspend_after_idle_s);
		}
		return;
	}
	if (st == SB_RUNNING && pol->idle_timeout_s && sb->sched.streams == 0)
		idle_due = now - sb->sched.active_at >= (int64_t)pol->idle_timeout_s * 1000;
	disk_due = st == SB_RUNNING && disk_ok && due(now, sb->sched.last_disk_at,
						      pol->disk_interval_s);
	full_due = st == SB_RUNNING && full_ok && due(now, sb->sched.last_full_at,
						      pol->full_interval_s);
	/* The first sample of a sandbox with an idle timeout is only the
	 * baseline the next one is compared with, taken early so that the
	 * timeout is not doubled. */
	baseline = st == SB_RUNNING && pol->idle_timeout_s && !sb->sched.sig_valid;
	pthread_mutex_unlock(&sb->mu);

	if (idle_due || disk_due || full_due || baseline) {
		have_smp = sample(sb, &smp) == 0;
		pthread_mutex_lock(&sb->mu);
		if (have_smp && !sb->sched.sig_valid) {
			sb->sched.sig = smp;
			sb->sched.sig_valid = true;
		} else if (have_smp && !same_sample(&sb->sched.sig, &smp)) {
			sb->sched.sig = smp;
			sb->sched.active_at = now;
		}
		idle = idle_due && have_smp && sb->sched.streams == 0 &&
		       now - sb->sched.active_at >= (int64_t)pol->idle_timeout_s * 1000;
		pthread_mutex_unlock(&sb->mu);
	}
	/* Snapshot first: an idle sandbox's last changes are kept before it
	 * stops (and a paused one is not snapshotted). */
	if (disk_due)
		maybe_snapshot(n, sb, now, "disk", &smp, have_smp);
	if (full_due)
		maybe_snapshot(n, sb, now, "full", &smp, have_smp);
	/* The second idle tier will suspend the paused guest, which cannot
	 * reclaim its memory then: it does so now, while it runs (a suspend
	 * then uploads no copy of its page cache; it resumes with a cold
	 * one). */
	if (idle && n->cfg->suspend_after_idle_s && n->os)
		suspend_reclaim(n, sb);   /* a no-op but for a backend that reclaims */
	if (idle) {
		/* A client request may have come in meanwhile. */
		pthread_mutex_lock(&sb->mu);
		idle = sb->sched.streams == 0 &&
		       now - sb->sched.active_at >= (int64_t)pol->idle_timeout_s * 1000;
		pthread_mutex_unlock(&sb->mu);
	}
	if (idle) {
		if (sandbox_pause_why(n, sb, "idle", &err) < 0)
			log_warn("sandbox %s: idle pause: %s", sb->id, err.msg);
		else
			log_info("sandbox %s: paused after %u s idle", sb->id, pol->idle_timeout_s);
	}
	pthread_mutex_lock(&sb->mu);
	prune_due = disk_ok && (now - sb->sched.last_prune_at >= PRUNE_EVERY_MS ||
				sb->sched.last_disk_at == now);
	if (prune_due)
		sb->sched.last_prune_at = now;
	pthread_mutex_unlock(&sb->mu);
	if (prune_due)
		prune(n, sb, now);
}

static void pass(struct node *n)
{
	struct sandbox **list = NULL;
	size_t cnt = 0, cap = 0;
	int64_t now;

	pthread_mutex_lock(&n->sched_mu);
	now = sched_now(n);
	pthread_mutex_lock(&n->mu);
	for (int b = 0; b < NODE_BUCKETS; b++)
		for (struct sandbox *sb = n->buckets[b]; sb; sb = sb->hnext) {
			if (cnt == cap) {
				cap = cap ? cap * 2 : 16;
				list = xrealloc(list, cap * sizeof(*list));
			}
			sandbox_ref(sb);
			list[cnt++] = sb;
		}
	pthread_mutex_unlock(&n->mu);
	for (size_t i = 0; i < cnt; i++) {
		if (!node_stopping(n))
			pass_one(n, list[i], now);
		sandbox_unref(list[i]);
	}
	free(list);
	pthread_mutex_unlock(&n->sched_mu);
}

void schedule_start(struct node *n)
{
	reaper_add(n, now_ms() + TICK_MS, TIMER_SCHEDULE, "", 0);
}

void schedule_tick(struct node *n)
{
	pass(n);
	if (!node_stopping(n))
		reaper_add(n, now_ms() + TICK_MS, TIMER_SCHEDULE, "", 0);
}

/* ---- debug clock ---------------------------------------------------------- */

void handle_debug_clock(struct node *n, struct http_req *req, struct http_conn *c)
{
	static const char *const keys[] = { "advance_s", NULL };
	const json *v;
	char at[ISO_TIME_MAX];
	json *body;

	/* Off unless the operator asked for it: moving the scheduler's clock
	 * makes retention prune snapshots early. */
	if (!n->cfg->debug_clock) {
		http_respond_error(c, 404, "not_found", "no such endpoint");
		return;
	}
	if (strcmp(req->method, "POST") != 0) {
		http_respond_error(c, 405, "method_not_allowed", "%s is not allowed here",
				   req->method);
		return;
	}
	if (!(body = node_body_object(req, c, keys)))
		return;
	v = json_get(body, "advance_s");
	if (!v || v->type != JSON_NUM || !v->is_int || v->i < 0 || v->i > POLICY_MAX_S) {
		http_respond_error(c, 400, "invalid_field",
				   "`advance_s` must be a non-negative integer (seconds)");
		json_free(body);
		return;
	}
	__atomic_add_fetch(&n->sched_offset_ms, (int64_t)v->i * 1000, __ATOMIC_ACQ_REL);
	json_free(body);
	/* One pass at the new time, finished before the answer, so a test sees
	 * its outcome. */
	pass(n);
	{
		struct buf b;
		struct jw w;
		iso_time(sched_now(n), at);
		buf_init(&b);
		jw_init(&w, &b);
		jw_obj(&w);
		jw_key(&w, "now");
		jw_str(&w, at);
		jw_key(&w, "offset_s");
		jw_int(&w, __atomic_load_n(&n->sched_offset_ms, __ATOMIC_ACQUIRE) / 1000);
		jw_end(&w);
		http_respond_json(c, 200, b.data);
		buf_free(&b);
	}
}

/* ends_at: when timeout_s of active time runs out, as of now (a paused
 * sandbox's moves on while it stays paused); null: no timeout. Then the
 * policy. */
static void sched_render_locked(struct jw *w, struct sandbox *sb)
{
	int64_t end = sched_ttl_deadline_locked(sb);
	char t[ISO_TIME_MAX];

	jw_key(w, "ends_at");
	if (end) {
		iso_time(end, t);
		jw_str(w, t);
	} else {
		jw_null(w);
	}
	sched_policy_render(w, &sb->pol);
}

/* A loaded sandbox: the node's defaults under its row's policy, and this
 * node knows it from now. */
static void sched_load(struct node *n, struct sandbox *sb, const json *spec)
{
	sched_policy_defaults(n, &sb->pol);
	sb->sched.known_since = sb->sched.active_at = sched_now(n);
	if (spec)
		sched_policy_load(spec, &sb->pol);
}

const struct sandbox_feature sched_feature = {
	.name = "schedule",
	.render_locked = sched_render_locked,
	.load = sched_load,
};
