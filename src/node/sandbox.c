/* Sandboxes: the in-memory map, the JSON form, create / list / get / delete,
 * teardown, and the guest channel's callbacks.
 *
 * The node keeps every non-deleted sandbox in memory (loaded at startup by
 * reconcile.c), so reads never touch the DB. Rows are written on state
 * changes only; a create costs two transactions (insert + starting, then
 * running), each one WAL append.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../lib/log.h"
#include "../cred/cred.h"
#include "node-internal.h"
#include "../policy/policy.h"

/* ---- map and refcounts ------------------------------------------------ */

static unsigned bucket_of(const char *id)
{
	unsigned h = 2166136261u;

	for (; *id; id++)
		h = (h ^ (unsigned char)*id) * 16777619u;
	return h % NODE_BUCKETS;
}

struct sandbox *sandbox_new(struct node *n, const char *id)
{
	struct sandbox *sb = xcalloc(1, sizeof(*sb));

	sb->node = n;
	sb->refs = 1;
	snprintf(sb->id, sizeof(sb->id), "%s", id);
	pthread_mutex_init(&sb->mu, NULL);
	pthread_cond_init(&sb->cv, NULL);
	sb->state = SB_PENDING;
	sb->next_serial = 1;
	return sb;
}

void sandbox_ref(struct sandbox *sb)
{
	__atomic_add_fetch(&sb->refs, 1, __ATOMIC_RELAXED);
}

void sandbox_unref(struct sandbox *sb)
{
	if (!sb || __atomic_sub_fetch(&sb->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	/* Last reference: nobody can reach it any more. Its channel was closed
	 * by whoever retired it (teardown or shutdown). */
	if (sb->gc)
		guestconn_close(sb->gc);
	procs_free_all(sb);
	json_free(sb->env);
	json_free(sb->metadata);
	json_free(sb->network);
	free(sb->tenant);
	free(sb->template_name);
	free(sb->backend_name);
	free(sb->idem_key);
	free(sb->error);
	free(sb->parent);
	json_free(sb->recovered_from);
	pthread_cond_destroy(&sb->cv);
	pthread_mutex_destroy(&sb->mu);
	free(sb);
}

struct sandbox *sandbox_find(struct node *n, const char *id, const char *tenant)
{
	struct sandbox *sb;

	pthread_mutex_lock(&n->mu);
	for (sb = n->buckets[bucket_of(id)]; sb; sb = sb->hnext)
		if (strcmp(sb->id, id) == 0)
			break;
	/* Another tenant's sandbox is indistinguishable from a missing one. */
	if (sb && tenant && strcmp(sb->tenant, tenant) != 0)
		sb = NULL;
	if (sb)
		sandbox_ref(sb);
	pthread_mutex_unlock(&n->mu);
	return sb;
}

void sandbox_map_insert(struct node *n, struct sandbox *sb)
{
	unsigned b = bucket_of(sb->id);

	pthread_mutex_lock(&n->mu);
	sb->hnext = n->buckets[b];
	n->buckets[b] = sb;
	pthread_mutex_unlock(&n->mu);
}

static bool map_unlink_locked(struct node *n, struct sandbox *sb)
{
	for (struct sandbox **pp = &n->buckets[bucket_of(sb->id)]; *pp; pp = &(*pp)->hnext) {
		if (*pp == sb) {
			*pp = sb->hnext;
			sb->hnext = NULL;
			return true;
		}
	}
	return false;
}

void sandbox_map_remove(struct node *n, struct sandbox *sb)
{
	bool was;

	pthread_mutex_lock(&n->mu);
	was = map_unlink_locked(n, sb);
	pthread_mutex_unlock(&n->mu);
	if (was)
		sandbox_unref(sb);   /* the map's reference */
}

void sandbox_counts(struct node *n, size_t counts[SB__COUNT])
{
	pthread_mutex_lock(&n->mu);
	for (int b = 0; b < NODE_BUCKETS; b++) {
		for (struct sandbox *sb = n->buckets[b]; sb; sb = sb->hnext) {
			pthread_mutex_lock(&sb->mu);
			if ((unsigned)sb->state < SB__COUNT)
				counts[sb->state]++;
			pthread_mutex_unlock(&sb->mu);
		}
	}
	pthread_mutex_unlock(&n->mu);
}

/* ---- JSON ------------------------------------------------------------- */

static void render_limits(struct jw *w, const struct nm_limits *l)
{
	char cpus[32];

	jw_obj(w);
	jw_key(w, "memory_mb");
	jw_uint(w, l->memory_mb);
	jw_key(w, "cpus");
	snprintf(cpus, sizeof(cpus), "%g", l->cpu_millis / 1000.0);
	jw_raw(w, cpus);
	jw_key(w, "pids");
	jw_uint(w, l->pids);
	jw_key(w, "disk_mb");
	jw_uint(w, l->disk_mb);
	jw_end(w);
}

void sandbox_render(struct jw *w, struct sandbox *sb)
{
	char created[40];

	node_iso_time(sb->created_at, created);
	pthread_mutex_lock(&sb->mu);
	jw_obj(w);
	jw_key(w, "id");
	jw_str(w, sb->id);
	jw_key(w, "tenant");
	jw_str(w, sb->tenant);
	jw_key(w, "template");
	jw_str(w, sb->template_name);
	jw_key(w, "template_version");
	jw_uint(w, sb->template_version);
	jw_key(w, "backend");
	jw_str(w, sb->backend_name);
	jw_key(w, "state");
	jw_str(w, state_name(sb->state));
	jw_key(w, "limits");
	render_limits(w, &sb->limits);
	jw_key(w, "metadata");
	if (sb->metadata) {
		jw_value(w, sb->metadata);
	} else {
		jw_obj(w);
		jw_end(w);
	}
	jw_key(w, "timeout_s");
	jw_uint(w, sb->timeout_s);
	sched_policy_render(w, &sb->pol);
	jw_key(w, "created_at");
	jw_str(w, created);
	jw_key(w, "parent");
	if (sb->parent)
		jw_str(w, sb->parent);
	else
		jw_null(w);
	jw_key(w, "recovered_from");
	if (sb->recovered_from)
		jw_value(w, sb->recovered_from);
	else
		jw_null(w);
	if (sb->error) {
		jw_key(w, "error");
		jw_str(w, sb->error);
	}
	jw_end(w);
	pthread_mutex_unlock(&sb->mu);
}

static void respond_sandbox(struct http_conn *c, int status, struct sandbox *sb)
{
	struct buf b;
	struct jw w;

	buf_init(&b);
	jw_init(&w, &b);
	sandbox_render(&w, sb);
	http_respond_json(c, status, b.data);
	buf_free(&b);
}

/* ---- the guest channel ------------------------------------------------ */

struct guestconn *sandbox_gc_get(struct sandbox *sb)
{
	struct guestconn *gc = NULL;

	pthread_mutex_lock(&sb->mu);
	if (sb->gc && sb->state == SB_RUNNING && !sb->deleting) {
		gc = sb->gc;
		sb->gc_users++;
	}
	pthread_mutex_unlock(&sb->mu);
	return gc;
}

void sandbox_gc_put(struct sandbox *sb)
{
	pthread_mutex_lock(&sb->mu);
	if (--sb->gc_users == 0)
		pthread_cond_broadcast(&sb->cv);
	pthread_mutex_unlock(&sb->mu);
}

/* ---- pause, resume, connect ------------------------------------------- */

/* Ask the backend to pause (to = paused) or resume (to = running), then move
 * the state along the table. Called with sb->mu held and the state checked;
 * the lock is dropped around the backend call, with lc_busy keeping other
 * pauses, resumes and deletes out meanwhile (a failure may still happen:
 * then the table refuses the step and the sandbox stays failed). */
static int lc_step_locked(struct node *n, struct sandbox *sb, enum sb_state to,
			  const char *reason, err_t *err)
{
	const struct backend_ops *be = sb->be;
	uint64_t t0 = now_us();
	int r;

	if (!be || !be->caps.pause || !be->pause || !be->resume)
		return err_set(err, EOPNOTSUPP, "the %s backend cannot pause a sandbox",
			       sb->backend_name);
	sb->lc_busy = true;
	pthread_mutex_unlock(&sb->mu);
	r = to == SB_PAUSED ? be->pause(&n->bctx, sb->id, err) : be->resume(&n->bctx, sb->id, err);
	pthread_mutex_lock(&sb->mu);
	sb->lc_busy = false;
	pthread_cond_broadcast(&sb->cv);
	if (r < 0)
		return err_wrap(err, "%s sandbox %s", to == SB_PAUSED ? "pause" : "resume", sb->id);
	r = state_transition(n->db, sb->id, &sb->state, to, reason, 0, err);
	if (r < 0 && r != -EBUSY) {
		/* The jail did change; only the row lags. Keep memory honest. */
		log_err("sandbox %s: %s", sb->id, err->msg);
		sb->state = to;
		r = 0;
	}
	if (r == 0) {
		/* Paused time does not count against timeout_s: a resume moves
		 * the deadline out, so the TTL is looked at again. */
		sched_on_state_locked(sb, to);
		if (to == SB_RUNNING)
			sandbox_schedule_timeout(n, sb);
	}
	log_debug("sandbox %s: %s in %.2f ms (%s)", sb->id, state_name(to),
		  (now_us() - t0) / 1000.0, reason);
	return r;
}

int sandbox_pause(struct node *n, struct sandbox *sb, err_t *err)
{
	return sandbox_pause_why(n, sb, "paused by client", err);
}

int sandbox_pause_why(struct node *n, struct sandbox *sb, const char *why, err_t *err)
{
	int r;

	pthread_mutex_lock(&sb->mu);
	while (sb->lc_busy)
		pthread_cond_wait(&sb->cv, &sb->mu);
	if (sb->deleting || !state_allowed(sb->state, SB_PAUSED))
		r = err_set(err, EBUSY, "sandbox %s is %s; only a running sandbox can be paused",
			    sb->id, state_name(sb->state));
	else
		r = lc_step_locked(n, sb, SB_PAUSED, why, err);
	pthread_mutex_unlock(&sb->mu);
	return r;
}

int sandbox_resume(struct node *n, struct sandbox *sb, const char *why, err_t *err)
{
	int r;

	pthread_mutex_lock(&sb->mu);
	for (;;) {
		if (sb->lc_busy) {
			pthread_cond_wait(&sb->cv, &sb->mu);
			continue;
		}
		/* The cheap path of connect and exec: one lock, no backend call. */
		if (sb->state == SB_RUNNING && !sb->deleting && why) {
			r = 0;
		} else if (sb->state == SB_PAUSED && !sb->deleting) {
			r = lc_step_locked(n, sb, SB_RUNNING, why ? why : "resumed by client", err);
		} else if (why) {
			r = err_set(err, EBUSY, "sandbox %s is %s", sb->id, state_name(sb->state));
		} else {
			r = err_set(err, EBUSY,
				    "sandbox %s is %s; only a paused sandbox can be resumed",
				    sb->id, state_name(sb->state));
		}
		break;
	}
	pthread_mutex_unlock(&sb->mu);
	return r;
}

struct guestconn *sandbox_gc_use(struct node *n, struct sandbox *sb, const char *why,
				 err_t *err)
{
	struct guestconn *gc;
	enum sb_state st;

	/* A client request: the sandbox is not idle. */
	sched_touch(sb);
	/* A pause may slip in between the resume and taking the channel; a
	 * few rounds settle it, and a request that still loses answers 409. */
	for (int round = 0; round < 3; round++) {
		if (sandbox_resume(n, sb, why, err) < 0)
			return NULL;
		if ((gc = sandbox_gc_get(sb)))
			return gc;
	}
	pthread_mutex_lock(&sb->mu);
	st = sb->state;
	pthread_mutex_unlock(&sb->mu);
	err_set(err, EBUSY, "sandbox %s is %s", sb->id, state_name(st));
	return NULL;
}

void sandbox_respond_err(struct http_conn *c, struct sandbox *sb, const err_t *e)
{
	enum sb_state st;

	if (e->code != EBUSY) {
		node_respond_err(c, e);
		return;
	}
	pthread_mutex_lock(&sb->mu);
	st = sb->state;
	pthread_mutex_unlock(&sb->mu);
	node_respond_conflict(c, st, "%s", e->msg);
}

void handle_sandbox_lifecycle(struct node *n, struct sandbox *sb, const char *op,
			      struct http_conn *c)
{
	err_t err = { 0 };
	int r;

	if (strcmp(op, "pause") == 0)
		r = sandbox_pause(n, sb, &err);
	else if (strcmp(op, "resume") == 0)
		r = sandbox_resume(n, sb, NULL, &err);
	else {
		sched_touch(sb);
		r = sandbox_resume(n, sb, "resumed by connect", &err);
	}
	if (r < 0)
		sandbox_respond_err(c, sb, &err);
	else
		respond_sandbox(c, 200, sb);
}

/* Detach the channel once no thread uses it any more; caller closes it.
 * Called with sb->mu held. */
static struct guestconn *take_gc_locked(struct sandbox *sb)
{
	struct guestconn *gc = sb->gc;

	sb->gc = NULL;
	/* Port relays hold the channel for as long as their client stays;
	 * end them rather than wait (this takes only the channel's lock). */
	guestconn_ports_abort(gc);
	while (sb->gc_users > 0)
		pthread_cond_wait(&sb->cv, &sb->mu);
	return gc;
}

/* Callbacks run on the channel's reader thread: they only touch memory and
 * queue work. Every value they get was parsed from untrusted guest bytes by
 * src/proto; exec.c bounds what it keeps. */
static void cb_output(void *arg, uint32_t pid, int fd, uint64_t off, const void *data, size_t len)
{
	proc_on_output(arg, pid, fd, off, data, len);
}

static void cb_exit(void *arg, uint32_t pid, int exit_code, int sig)
{
	proc_on_exit(arg, pid, exit_code, sig);
}

static void cb_closed(void *arg, const char *reason)
{
	struct sandbox *sb = arg;

	pthread_mutex_lock(&sb->mu);
	sb->chan_closed = true;
	pthread_mutex_unlock(&sb->mu);
	log_info("sandbox %s: guest channel closed: %s", sb->id, reason ? reason : "?");
	/* Closing the guestconn and destroying the jail must not happen on this
	 * (the reader) thread: hand it to the reaper. */
	reaper_add(sb->node, 0, TIMER_CHAN_CLOSED, sb->id, 0);
}

const struct guestconn_cbs sandbox_guest_cbs = {
	.on_output = cb_output,
	.on_exit = cb_exit,
	.on_closed = cb_closed,
};

/* ---- teardown --------------------------------------------------------- */

static void set_error(struct sandbox *sb, const char *reason)
{
	free(sb->error);
	sb->error = xstrdup(reason);
}

/* Wait until no create is in flight and no other teardown owns sb.
 * Called and returns with sb->mu held. */
static void wait_settled_locked(struct sandbox *sb)
{
	while (sb->state == SB_PENDING || sb->state == SB_STARTING || sb->deleting || sb->lc_busy)
		pthread_cond_wait(&sb->cv, &sb->mu);
}

void sandbox_fail(struct node *n, struct sandbox *sb, const char *reason)
{
	struct guestconn *gc;
	err_t err = { 0 };

	pthread_mutex_lock(&sb->mu);
	if (sb->deleting || !state_is_live(sb->state)) {
		pthread_mutex_unlock(&sb->mu);
		return;
	}
	sb->deleting = true;
	if (state_transition(n->db, sb->id, &sb->state, SB_FAILED, reason, 0, &err) < 0)
		log_err("%s", err.msg);
	sb->state = SB_FAILED;  /* in memory even if the write failed */
	set_error(sb, reason);
	procs_mark_lost(sb, "the sandbox failed");
	pthread_mutex_unlock(&sb->mu);

	if (sb->be && sb->be->destroy(&n->bctx, sb->id, &err) < 0)
		log_err("sandbox %s: destroy after failure: %s", sb->id, err.msg);

	pthread_mutex_lock(&sb->mu);
	gc = take_gc_locked(sb);
	pthread_mutex_unlock(&sb->mu);
	guestconn_close(gc);

	pthread_mutex_lock(&sb->mu);
	sb->deleting = false;
	pthread_cond_broadcast(&sb->cv);
	pthread_mutex_unlock(&sb->mu);
	log_warn("sandbox %s failed: %s", sb->id, reason);
}

int sandbox_delete(struct node *n, struct sandbox *sb, const char *reason, err_t *err)
{
	struct guestconn *gc;
	int r;

	pthread_mutex_lock(&sb->mu);
	wait_settled_locked(sb);
	if (sb->state == SB_DELETED) {
		pthread_mutex_unlock(&sb->mu);
		return 0;
	}
	sb->deleting = true;

	/* Record the intent first (desired=deleted), so a crash from here on is
	 * finished by reconcile at the next start. */
	r = db_tx_begin(n->db, err);
	if (r == 0) {
		r = db_exec(n->db, err,
			    "UPDATE sandboxes SET desired='deleted', gen=gen+1 WHERE id=?", "s",
			    sb->id);
		if (r >= 0 && (sb->state == SB_RUNNING || sb->state == SB_PAUSED))
			r = state_transition(n->db, sb->id, &sb->state, SB_STOPPING, reason,
					     STATE_IN_TX, err);
		if (r < 0)
			db_tx_rollback(n->db);
		else
			r = db_tx_commit(n->db, err);
	}
	if (r < 0) {
		sb->deleting = false;
		pthread_cond_broadcast(&sb->cv);
		pthread_mutex_unlock(&sb->mu);
		return r;
	}
	procs_mark_lost(sb, "the sandbox was deleted");
	pthread_mutex_unlock(&sb->mu);

	/* Kill everything first: requests in flight on the channel then fail
	 * fast instead of waiting for their timeouts. */
	if (sb->be) {
		r = sb->be->destroy(&n->bctx, sb->id, err);
		if (r == 0)
			sandbox_net_forget(n, sb);
	} else {
		r = 0;  /* unknown backend: nothing of ours can be running */
	}
	pthread_mutex_lock(&sb->mu);
	gc = take_gc_locked(sb);
	pthread_mutex_unlock(&sb->mu);
	guestconn_close(gc);

	pthread_mutex_lock(&sb->mu);
	if (r < 0) {
		char why[600];

		err_wrap(err, "destroy");
		snprintf(why, sizeof(why), "delete failed: %s", err->msg);
		if (sb->state != SB_FAILED) {
			err_t e2 = { 0 };
			if (state_transition(n->db, sb->id, &sb->state, SB_FAILED, why, 0, &e2) < 0)
				log_err("%s", e2.msg);
			sb->state = SB_FAILED;
			set_error(sb, why);
		}
		sb->deleting = false;
		pthread_cond_broadcast(&sb->cv);
		pthread_mutex_unlock(&sb->mu);
		return r;
	}
	r = db_tx_begin(n->db, err);
	if (r == 0) {
		if (sb->state == SB_STOPPING)
			r = state_transition(n->db, sb->id, &sb->state, SB_STOPPED,
					     "jail destroyed", STATE_IN_TX, err);
		if (r == 0)
			r = state_transition(n->db, sb->id, &sb->state, SB_DELETED, reason,
					     STATE_IN_TX, err);
		/* The backend's destroy removed the snapshots with the disk. */
		if (r == 0)
			r = db_exec(n->db, err, "DELETE FROM snapshots WHERE sandbox_id=?", "s",
				    sb->id) < 0 ? -err->code : 0;
		if (r < 0)
			db_tx_rollback(n->db);
		else
			r = db_tx_commit(n->db, err);
	}
	if (r < 0) {
		/* The jail is gone; only the row lags. desired=deleted is recorded,
		 * so the next start finishes it. Keep the memory state honest. */
		log_err("sandbox %s: %s", sb->id, err->msg);
		if (sb->state == SB_STOPPING)
			sb->state = SB_STOPPED;
		sb->deleting = false;
		pthread_cond_broadcast(&sb->cv);
		pthread_mutex_unlock(&sb->mu);
		return r;
	}
	pthread_cond_broadcast(&sb->cv);
	pthread_mutex_unlock(&sb->mu);
	sandbox_map_remove(n, sb);
	log_info("sandbox %s deleted (%s)", sb->id, reason);
	return 0;
}

void sandbox_on_timeout(struct node *n, const char *id)
{
	struct sandbox *sb = sandbox_find(n, id, NULL);
	err_t err = { 0 };
	int64_t deadline;
	bool paused;

	if (!sb)
		return;
	/* Only active time counts: a paused sandbox waits (its resume looks
	 * again), and one that was paused meanwhile has a later deadline. A
	 * timer may also be stale (several are queued over pauses and
	 * resumes); each one just checks. */
	pthread_mutex_lock(&sb->mu);
	deadline = sched_ttl_deadline_locked(sb);
	paused = sb->state == SB_PAUSED || sb->sched.paused_since;
	pthread_mutex_unlock(&sb->mu);
	if (!deadline || paused) {
		sandbox_unref(sb);
		return;
	}
	if (deadline > wall_ms()) {
		pthread_mutex_lock(&sb->mu);
		sandbox_schedule_timeout(n, sb);
		pthread_mutex_unlock(&sb->mu);
	} else if (sb->pol.timeout_pause) {
		pthread_mutex_lock(&sb->mu);
		sb->sched.ttl_paused = true;
		pthread_mutex_unlock(&sb->mu);
		if (sandbox_pause_why(n, sb, "timeout", &err) < 0) {
			pthread_mutex_lock(&sb->mu);
			sb->sched.ttl_paused = false;
			pthread_mutex_unlock(&sb->mu);
			log_err("sandbox %s: pause after timeout: %s", id, err.msg);
		}
	} else if (sandbox_delete(n, sb, "timeout", &err) < 0) {
		log_err("sandbox %s: delete after timeout: %s", id, err.msg);
	}
	sandbox_unref(sb);
}

void sandbox_on_chan_closed(struct node *n, const char *id)
{
	struct sandbox *sb = sandbox_find(n, id, NULL);
	bool fail;

	if (!sb)
		return;
	/* While starting, the create handler sees chan_closed itself; while
	 * deleting, the teardown owns the sandbox. */
	pthread_mutex_lock(&sb->mu);
	fail = (sb->state == SB_RUNNING || sb->state == SB_PAUSED) && !sb->deleting &&
	       sb->chan_closed;
	pthread_mutex_unlock(&sb->mu);
	if (fail && !sandbox_recover(n, sb, "guest channel closed"))
		sandbox_fail(n, sb, "guest channel closed");
	sandbox_unref(sb);
}

void sandbox_schedule_timeout(struct node *n, struct sandbox *sb)
{
	int64_t left, deadline;

	/* Called with sb->mu held, or (create, load) before any pause or
	 * resume can touch the bookkeeping. */
	deadline = sched_ttl_deadline_locked(sb);
	if (!deadline)
		return;
	/* The deadline is wall time (it survives restarts, less the paused
	 * time, which is kept in memory only); the reaper sleeps on the
	 * monotonic clock. */
	left = deadline - wall_ms();
	reaper_add(n, now_ms() + (uint64_t)(left > 0 ? left : 0), TIMER_SANDBOX_TIMEOUT, sb->id,
		   0);
}

void sandbox_stop_all(struct node *n)
{
	for (int b = 0; b < NODE_BUCKETS; b++) {
		for (;;) {
			struct sandbox *sb;
			struct guestconn *gc;
			err_t err = { 0 };

			pthread_mutex_lock(&n->mu);
			sb = n->buckets[b];
			if (sb)
				map_unlink_locked(n, sb);
			pthread_mutex_unlock(&n->mu);
			if (!sb)
				break;
			pthread_mutex_lock(&sb->mu);
			if (sb->state == SB_RUNNING || sb->state == SB_PAUSED) {
				/* The node manager kills the jails on its own shutdown;
				 * the rows say they are stopped. */
				if (db_tx_begin(n->db, &err) == 0) {
					if (state_transition(n->db, sb->id, &sb->state, SB_STOPPING,
							     "node shutdown", STATE_IN_TX, &err) < 0 ||
					    state_transition(n->db, sb->id, &sb->state, SB_STOPPED,
							     "node shutdown", STATE_IN_TX, &err) < 0) {
						db_tx_rollback(n->db);
						log_err("%s", err.msg);
					} else if (db_tx_commit(n->db, &err) < 0) {
						log_err("%s", err.msg);
					}
				}
			}
			procs_mark_lost(sb, "the node stopped");
			gc = take_gc_locked(sb);
			pthread_mutex_unlock(&sb->mu);
			guestconn_close(gc);
			sandbox_unref(sb);
		}
	}
}

/* ---- loading a row ---------------------------------------------------- */

static uint32_t json_u32(const json *obj, const char *key)
{
	const json *v = json_get(obj, key);

	if (!v || v->type != JSON_NUM || !v->is_int || v->i < 0 || v->i > UINT32_MAX)
		return 0;
	return (uint32_t)v->i;
}

struct sandbox *sandbox_from_row(struct node *n, const struct db_rows *rows, int row)
{
	const char *id = db_cell(rows, row, 0);
	const char *spec = db_cell(rows, row, 7), *meta = db_cell(rows, row, 8);
	const char *err_text = db_cell(rows, row, 10);
	struct sandbox *sb;
	err_t err = { 0 };
	json *j;
	int st;

	if (!id)
		return NULL;
	sb = sandbox_new(n, id);
	sb->tenant = xstrdup(db_cell(rows, row, 1));
	sb->template_name = xstrdup(db_cell(rows, row, 2));
	sb->template_version = (uint32_t)db_cell_int(rows, row, 3);
	sb->backend_name = xstrdup(db_cell(rows, row, 4));
	sb->be = backend_find(sb->backend_name);
	st = state_parse(db_cell(rows, row, 6));
	sb->state = st < 0 ? SB_FAILED : (enum sb_state)st;
	if (db_cell(rows, row, 9))
		sb->idem_key = xstrdup(db_cell(rows, row, 9));
	if (err_text)
		sb->error = xstrdup(err_text);
	sb->created_at = db_cell_int(rows, row, 11);
	sched_policy_defaults(n, &sb->pol);
	sb->sched.known_since = sb->sched.active_at = sched_now(n);
	/* Our own rows, but parse defensively: a bad row loads with defaults. */
	j = spec ? json_parse(spec, strlen(spec), &err) : NULL;
	if (j && j->type == JSON_OBJ) {
		const json *l = json_get(j, "limits");
		const json *env = json_get(j, "env");
		if (l) {
			sb->limits.memory_mb = json_u32(l, "memory_mb");
			sb->limits.cpu_millis = json_u32(l, "cpu_millis");
			sb->limits.pids = json_u32(l, "pids");
			sb->limits.disk_mb = json_u32(l, "disk_mb");
		}
		sb->timeout_s = json_u32(j, "timeout_s");
		sched_policy_load(j, &sb->pol);
		sb->network = json_dup(json_get(j, "network"));
		if (env && env->type == JSON_OBJ)
			sb->env = json_dup(env);
	}
	json_free(j);
	{
		struct db_rows lr;
		if (db_query(n->db, &lr, &err,
			     "SELECT parent, recovered_from FROM lineage WHERE sandbox_id=?", "s",
			     id) == 0) {
			const char *rf = lr.n_rows ? db_cell(&lr, 0, 1) : NULL;
			if (lr.n_rows && db_cell(&lr, 0, 0))
				sb->parent = xstrdup(db_cell(&lr, 0, 0));
			if (rf)
				sb->recovered_from = json_parse(rf, strlen(rf), &err);
			db_rows_free(&lr);
		}
	}
	sb->metadata = meta ? json_parse(meta, strlen(meta), &err) : NULL;
	if (sb->metadata && sb->metadata->type != JSON_OBJ) {
		json_free(sb->metadata);
		sb->metadata = NULL;
	}
	return sb;
}

/* ---- create ----------------------------------------------------------- */

struct create_req {
	const char *template_name;
	const struct backend_ops *be;
	struct nm_limits limits;
	const json *env, *metadata, *network;
	uint32_t timeout_s;
	struct sb_policy pol;
};

/* Validation failure: fills msg, returns the error code for the answer. */
static const char *bad(char *msg, size_t sz, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static const char *bad(char *msg, size_t sz, const char *code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sz, fmt, ap);
	va_end(ap);
	return code;
}

static const char *check_u32(const json *obj, const char *key, uint32_t min, uint32_t max,
			     uint32_t *out, char *msg, size_t sz)
{
	const json *v = json_get(obj, key);

	if (!v)
		return NULL;
	if (v->type != JSON_NUM || !v->is_int || v->i < min || v->i > max)
		return bad(msg, sz, "invalid_field", "`%s` must be an integer in %u..%u", key,
			   min, max);
	*out = (uint32_t)v->i;
	return NULL;
}

/* A JSON object whose values are all strings, within limits. key_env: keys
 * must also be usable as environment names. */
static const char *check_str_map(const json *v, const char *field, bool key_env, size_t max_n,
				 char *msg, size_t sz)
{
	if (v->type != JSON_OBJ)
		return bad(msg, sz, "invalid_field", "`%s` must be an object of strings", field);
	if (v->n > max_n)
		return bad(msg, sz, "invalid_field", "`%s` has more than %zu entries", field,
			   max_n);
	for (size_t i = 0; i < v->n; i++) {
		const char *k = v->keys[i];
		if (v->items[i]->type != JSON_STR)
			return bad(msg, sz, "invalid_field", "`%s.%s` must be a string", field, k);
		if (!*k || strlen(k) > 256 || (key_env && strchr(k, '=')))
			return bad(msg, sz, "invalid_field", "`%s` has an invalid key", field);
		if (v->items[i]->str_len > 32768)
			return bad(msg, sz, "invalid_field", "`%s.%s` is too long", field, k);
	}
	return NULL;
}

static const char *parse_create(struct node *n, const json *body, struct create_req *cr,
				char *msg, size_t sz)
{
	static const char *const limit_keys[] = { "memory_mb", "cpus", "pids", "disk_mb", NULL };
	const json *v;
	const char *code;
	err_t err = { 0 };

	cr->template_name = n->cfg->default_template;
	if ((v = json_get(body, "template"))) {
		if (v->type != JSON_STR)
			return bad(msg, sz, "invalid_field", "`template` must be a string");
		cr->template_name = v->str;
	}
	cr->be = backend_find(n->cfg->default_backend);
	if ((v = json_get(body, "backend"))) {
		if (v->type != JSON_STR)
			return bad(msg, sz, "invalid_field", "`backend` must be a string");
		cr->be = backend_find(v->str);
		if (!cr->be)
			return bad(msg, sz, "invalid_field", "unknown backend `%s`", v->str);
	}
	if (!cr->be)
		return bad(msg, sz, "invalid_field", "the node's default backend `%s` is unknown",
			   n->cfg->default_backend);
	cr->limits.memory_mb = n->cfg->default_memory_mb;
	cr->limits.cpu_millis = n->cfg->default_cpu_millis;
	cr->limits.pids = n->cfg->default_pids;
	cr->limits.disk_mb = n->cfg->default_disk_mb;
	if ((v = json_get(body, "limits"))) {
		const json *cpus;
		if (v->type != JSON_OBJ)
			return bad(msg, sz, "invalid_field", "`limits` must be an object");
		if (json_check_keys(v, limit_keys, &err) < 0)
			return bad(msg, sz, "unknown_field", "limits: %s", err.msg);
		if ((code = check_u32(v, "memory_mb", 16, 1u << 24, &cr->limits.memory_mb, msg, sz)) ||
		    (code = check_u32(v, "pids", 8, 1u << 22, &cr->limits.pids, msg, sz)) ||
		    (code = check_u32(v, "disk_mb", 16, 1u << 30, &cr->limits.disk_mb, msg, sz)))
			return code;
		if ((cpus = json_get(v, "cpus"))) {
			if (cpus->type != JSON_NUM || !(cpus->num >= 0.01) ||
			    cpus->num > 4096)
				return bad(msg, sz, "invalid_field",
					   "`cpus` must be a number in 0.01..4096");
			cr->limits.cpu_millis = (uint32_t)(cpus->num * 1000.0 + 0.5);
		}
	}
	if ((v = json_get(body, "env"))) {
		if ((code = check_str_map(v, "env", true, 1024, msg, sz)))
			return code;
		cr->env = v;
	}
	if ((v = json_get(body, "metadata"))) {
		if ((code = check_str_map(v, "metadata", false, 64, msg, sz)))
			return code;
		cr->metadata = v;
	}
	if ((v = json_get(body, "network"))) {
		struct policy p;
		if (policy_parse(v, &p, msg, sz) < 0)
			return "invalid_field";
		policy_free(&p);
		cr->network = v;
	}
	if ((v = json_get(body, "timeout_s"))) {
		if (v->type != JSON_NUM || !v->is_int || v->i < 0 || v->i > 10LL * 365 * 86400)
			return bad(msg, sz, "invalid_field",
				   "`timeout_s` must be a non-negative integer");
		cr->timeout_s = (uint32_t)v->i;
	}
	sched_policy_defaults(n, &cr->pol);
	return sched_policy_parse(body, &cr->pol, msg, sz);
}

static char *spec_text(const struct create_req *cr)
{
	struct buf b;
	struct jw w;

	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "limits");
	jw_obj(&w);
	jw_key(&w, "memory_mb");
	jw_uint(&w, cr->limits.memory_mb);
	jw_key(&w, "cpu_millis");
	jw_uint(&w, cr->limits.cpu_millis);
	jw_key(&w, "pids");
	jw_uint(&w, cr->limits.pids);
	jw_key(&w, "disk_mb");
	jw_uint(&w, cr->limits.disk_mb);
	jw_end(&w);
	jw_key(&w, "env");
	if (cr->env) {
		jw_value(&w, cr->env);
	} else {
		jw_obj(&w);
		jw_end(&w);
	}
	jw_key(&w, "timeout_s");
	jw_uint(&w, cr->timeout_s);
	sched_policy_render(&w, &cr->pol);
	if (cr->network) {
		jw_key(&w, "network");
		jw_value(&w, cr->network);
	}
	jw_end(&w);
	return buf_steal(&b);
}

/* The sandbox of (tenant, key), ref'd, or NULL. Called with n->mu held. */
static struct sandbox *find_idem_locked(struct node *n, const char *tenant, const char *key)
{
	for (int b = 0; b < NODE_BUCKETS; b++)
		for (struct sandbox *sb = n->buckets[b]; sb; sb = sb->hnext)
			if (sb->idem_key && strcmp(sb->idem_key, key) == 0 &&
			    strcmp(sb->tenant, tenant) == 0) {
				sandbox_ref(sb);
				return sb;
			}
	return NULL;
}

/* Answer a repeated Idempotency-Key with the existing sandbox, once its
 * create has settled. */
static void respond_existing(struct http_conn *c, struct sandbox *sb)
{
	pthread_mutex_lock(&sb->mu);
	while (sb->state == SB_PENDING || sb->state == SB_STARTING)
		pthread_cond_wait(&sb->cv, &sb->mu);
	pthread_mutex_unlock(&sb->mu);
	respond_sandbox(c, 200, sb);
}

/* The key is in the DB but not in memory (its sandbox was deleted, or
 * another process holds it): answer from the row. */
static bool respond_existing_row(struct node *n, struct http_conn *c, const char *tenant,
				 const char *key)
{
	struct db_rows rows;
	err_t err = { 0 };
	struct sandbox *sb;

	if (db_query(n->db, &rows, &err,
		     "SELECT " SANDBOX_COLS " FROM sandboxes WHERE tenant_id=? AND idem_key=?",
		     "ss", tenant, key) < 0)
		return false;
	sb = rows.n_rows ? sandbox_from_row(n, &rows, 0) : NULL;
	db_rows_free(&rows);
	if (!sb)
		return false;
	respond_sandbox(c, 200, sb);
	sandbox_unref(sb);
	return true;
}

static void create_status(int code, int *status, const char **ecode)
{
	node_errno_to_http(code, status, ecode);
	/* Failures to bring a sandbox up are ours, not the client's, except
	 * for the ones that say "try again". */
	if (*status < 500 && *status != 409 && *status != 422)
		*status = 500, *ecode = "internal";
}

int sandbox_guest_up(struct node *n, struct sandbox *sb, const struct nm_sandbox_spec *nspec,
		     int chan_fd, pid_t jail_pid, const char *why, const char *what, err_t *err)
{
	struct guest_hello hello;
	struct guestconn *gc;
	char addr[sizeof(sb->addr)];
	int r;

	/* The guest always speaks first: HELLO, then READY once it can serve. */
	uint64_t t0 = now_us();
	gc = guestconn_open(chan_fd, &sandbox_guest_cbs, sb, n->cfg->ready_timeout_ms, &hello, err);
	if (!gc)
		return err_wrap(err, "%s", what);
	log_debug("sandbox %s: guest hello in %.2f ms", sb->id, (now_us() - t0) / 1000.0);
	pthread_mutex_lock(&sb->mu);
	snprintf(addr, sizeof(addr), "%s", sb->addr);
	pthread_mutex_unlock(&sb->mu);
	if (sb->be->post_ready && sb->be->post_ready(&n->bctx, nspec, addr, gc, err) < 0) {
		guestconn_close(gc);
		return err_wrap(err, "%s backend", sb->be->name);
	}
	/* One transaction: the jail's pid and the move to running. */
	pthread_mutex_lock(&sb->mu);
	if (sb->chan_closed) {
		pthread_mutex_unlock(&sb->mu);
		guestconn_close(gc);
		return err_set(err, EPIPE, "guest channel closed right after READY");
	}
	r = db_tx_begin(n->db, err);
	if (r == 0) {
		r = db_exec(n->db, err, "UPDATE sandboxes SET jail_pid=? WHERE id=?", "is",
			    (int64_t)jail_pid, sb->id);
		if (r >= 0)
			r = state_transition(n->db, sb->id, &sb->state, SB_RUNNING, why,
					     STATE_IN_TX, err);
		if (r < 0)
			db_tx_rollback(n->db);
		else
			r = db_tx_commit(n->db, err);
	}
	if (r < 0) {
		pthread_mutex_unlock(&sb->mu);
		guestconn_close(gc);
		return r;
	}
	sb->gc = gc;
	pthread_cond_broadcast(&sb->cv);
	pthread_mutex_unlock(&sb->mu);
	return 0;
}

/* The sandbox's environment: the request's env plus one placeholder per
 * credential that applies to it (cred_resolve: bound to its tenant, its
 * project label — metadata "project" — or itself). The real values never
 * come here; the gateway swaps a placeholder for its value on the way out.
 * A variable the request sets itself wins. Returns a new object, or NULL
 * when nothing is added (then the request's env stands). */
static json *env_with_credentials(struct node *n, const char *tenant, const char *sandbox_id,
				  const json *metadata, const json *env)
{
	const char *project = metadata ? json_get_str(metadata, "project") : NULL;
	struct cred *creds = NULL;
	size_t n_creds = 0, added = 0;
	struct buf b;
	struct jw w;
	err_t err = { 0 };
	json *out;

	if (cred_resolve(n->db, tenant, sandbox_id, project, &creds, &n_creds, &err) < 0) {
		log_warn("sandbox %s: credentials not resolved: %s", sandbox_id, err.msg);
		return NULL;
	}
	if (!n_creds) {   /* the usual case: the request's env stands, nothing to copy */
		cred_list_free(creds, 0);
		return NULL;
	}
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	for (size_t i = 0; env && i < env->n; i++) {
		jw_key(&w, env->keys[i]);
		jw_value(&w, env->items[i]);
	}
	for (size_t i = 0; i < n_creds; i++) {
		_cleanup_free_ char *ph = NULL;

		if (!creds[i].env || (env && json_get(env, creds[i].env)))
			continue;
		ph = cred_placeholder(n->db, sandbox_id, creds[i].id, &err);
		if (!ph) {
			log_warn("sandbox %s: no placeholder for %s: %s", sandbox_id, creds[i].id,
				 err.msg);
			continue;
		}
		jw_key(&w, creds[i].env);
		jw_str(&w, ph);
		added++;
	}
	/* With credentials, HTTPS to their hosts is intercepted: point the usual
	 * TLS libraries at the bundle that holds the gateway CA (the template
	 * build put it there). */
	if (added) {
		static const char *const tls_env[][2] = {
			{ "SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt" },
			{ "REQUESTS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt" },
			{ "NODE_EXTRA_CA_CERTS", "/etc/airlock/gateway-ca.crt" },
		};
		for (size_t i = 0; i < ARRAY_SIZE(tls_env); i++) {
			if (env && json_get(env, tls_env[i][0]))
				continue;
			jw_key(&w, tls_env[i][0]);
			jw_str(&w, tls_env[i][1]);
		}
	}
	jw_end(&w);
	cred_list_free(creds, n_creds);
	out = added ? json_parse(b.data, b.len, NULL) : NULL;
	buf_free(&b);
	return out;
}

void handle_sandboxes_create(struct node *n, struct http_req *req, struct http_conn *c,
			     const char *tenant)
{
	static const char *const keys[] = { "template", "backend", "limits", "env",
					    "metadata", "timeout_s", "snapshots", "idle_timeout_s",
					    "on_timeout", "network", NULL };
	_cleanup_free_ char *spec = NULL, *meta = NULL;
	const char *key = http_req_header(req, "Idempotency-Key");
	struct create_req cr = { 0 };
	struct nm_sandbox_spec nspec;
	struct nm_node_info info;
	struct sandbox *sb, *old;
	bool created = false;
	int chan_fd = -1, status, r;
	const char *code;
	pid_t jail_pid = 0;
	char addr[16] = "";
	uint32_t version = 0;
	size_t live = 0;
	err_t err = { 0 };
	char msg[512];
	json *body, *cred_env = NULL;

	uint64_t t_req = now_us();

	body = node_body_object(req, c, keys);
	if (!body)
		return;
	code = parse_create(n, body, &cr, msg, sizeof(msg));
	if (code) {
		http_respond_error(c, 400, code, "%s", msg);
		goto out;
	}
	if (key && (!*key || strlen(key) > 255)) {
		http_respond_error(c, 400, "bad_request", "Idempotency-Key must be 1..255 bytes");
		goto out;
	}
	if (key) {
		pthread_mutex_lock(&n->mu);
		old = find_idem_locked(n, tenant, key);
		pthread_mutex_unlock(&n->mu);
		if (old) {
			respond_existing(c, old);
			sandbox_unref(old);
			goto out;
		}
	}

	/* Capacity: a single sandbox may not ask for more than the node has. */
	if (node_info_get(n, &info, &err) < 0) {
		http_respond_error(c, 503, "unavailable", "node manager: %s", err.msg);
		goto out;
	}
	if (cr.limits.memory_mb > info.mem_total_mb ||
	    cr.limits.cpu_millis > (uint64_t)info.cpus * 1000 ||
	    (info.pool_total_mb && cr.limits.disk_mb > info.pool_total_mb)) {
		http_respond_error(c, 422, "over_capacity",
				   "limits exceed the node (%llu MiB memory, %u cpus, %llu MiB disk)",
				   (unsigned long long)info.mem_total_mb, info.cpus,
				   (unsigned long long)info.pool_total_mb);
		goto out;
	}

	/* The template (built on demand for a built-in, shared by concurrent
	 * creates). */
	r = node_name_valid(cr.template_name) ? template_resolve(n, cr.template_name, &version, &err)
					      : -ENOENT;
	if (r == -ENOENT) {
		http_respond_error(c, 404, "template_not_found", "no template `%s`",
				   cr.template_name);
		goto out;
	} else if (r < 0) {
		err_wrap(&err, "template %s", cr.template_name);
		node_respond_err(c, &err);
		goto out;
	}

	/* Register in memory under the map lock: the count check and a racing
	 * request with the same Idempotency-Key see it at once. */
	{
		_cleanup_free_ char *id = random_id("sb-", 8);
		sb = sandbox_new(n, id);
	}
	cred_env = env_with_credentials(n, tenant, sb->id, cr.metadata, cr.env);
	if (cred_env)
		cr.env = cred_env;
	sb->tenant = xstrdup(tenant);
	sb->template_name = xstrdup(cr.template_name);
	sb->template_version = version;
	sb->backend_name = xstrdup(cr.be->name);
	sb->be = cr.be;
	sb->idem_key = key ? xstrdup(key) : NULL;
	sb->limits = cr.limits;
	sb->env = json_dup(cr.env);
	sb->metadata = json_dup(cr.metadata);
	sb->network = json_dup(cr.network);
	sb->timeout_s = cr.timeout_s;
	sb->pol = cr.pol;
	sb->created_at = wall_ms();
	/* Scheduler intervals and idle time count from now. */
	sb->sched.known_since = sched_now(n);
	sb->sched.last_disk_at = sb->sched.last_full_at = sb->sched.active_at = sb->sched.known_since;
	spec = spec_text(&cr);
	if (cr.metadata) {
		struct buf b;
		struct jw w;
		buf_init(&b);
		jw_init(&w, &b);
		jw_value(&w, cr.metadata);
		meta = buf_steal(&b);
	}

	pthread_mutex_lock(&n->mu);
	old = key ? find_idem_locked(n, tenant, key) : NULL;
	if (!old) {
		for (int b = 0; b < NODE_BUCKETS; b++)
			for (struct sandbox *s = n->buckets[b]; s; s = s->hnext) {
				pthread_mutex_lock(&s->mu);
				live += state_is_live(s->state) ? 1 : 0;
				pthread_mutex_unlock(&s->mu);
			}
		if (!n->cfg->max_sandboxes || live < n->cfg->max_sandboxes) {
			/* The map takes our creation reference; this handler
			 * keeps its own. */
			unsigned bk = bucket_of(sb->id);
			sb->hnext = n->buckets[bk];
			n->buckets[bk] = sb;
			sandbox_ref(sb);
		}
	}
	pthread_mutex_unlock(&n->mu);
	if (old) {
		sandbox_unref(sb);
		respond_existing(c, old);
		sandbox_unref(old);
		goto out;
	}
	if (n->cfg->max_sandboxes && live >= n->cfg->max_sandboxes) {
		sandbox_unref(sb);
		http_respond_error(c, 422, "over_capacity", "the node runs its maximum of %u sandboxes",
				   n->cfg->max_sandboxes);
		goto out;
	}

	/* Write 1: the row (desired=running) and pending -> starting. */
	r = db_tx_begin(n->db, &err);
	if (r == 0) {
		r = db_exec(n->db, &err,
			    "INSERT INTO sandboxes(id, tenant_id, template, template_version, backend,"
			    " desired, observed, spec, metadata, idem_key, created_at, updated_at)"
			    " VALUES(?,?,?,?,?,'running','pending',?,?,?,?,?)",
			    "sssissssii", sb->id, tenant, sb->template_name,
			    (int64_t)sb->template_version, sb->backend_name, spec,
			    meta ? meta : "{}", key, sb->created_at, sb->created_at);
		pthread_mutex_lock(&sb->mu);
		if (r >= 0)
			r = state_transition(n->db, sb->id, &sb->state, SB_STARTING,
					     "create", STATE_IN_TX, &err);
		pthread_mutex_unlock(&sb->mu);
		if (r < 0)
			db_tx_rollback(n->db);
		else
			r = db_tx_commit(n->db, &err);
	}
	if (r < 0) {
		/* Not in the DB: forget it entirely. */
		pthread_mutex_lock(&sb->mu);
		sb->state = SB_DELETED;
		pthread_cond_broadcast(&sb->cv);
		pthread_mutex_unlock(&sb->mu);
		sandbox_map_remove(n, sb);
		if (r == -EEXIST && key && respond_existing_row(n, c, tenant, key)) {
			sandbox_unref(sb);
			goto out;
		}
		node_respond_err(c, &err);
		sandbox_unref(sb);
		goto out;
	}

	/* The jail. */
	memset(&nspec, 0, sizeof(nspec));
	snprintf(nspec.id, sizeof(nspec.id), "%s", sb->id);
	snprintf(nspec.template_name, sizeof(nspec.template_name), "%s", sb->template_name);
	nspec.template_version = sb->template_version;
	nspec.limits = sb->limits;
	uint64_t t_be = now_us();
	r = sb->be->create(&n->bctx, &nspec, &chan_fd, &jail_pid, addr, &err);
	uint64_t t_nm = now_us();
	if (r < 0) {
		err_wrap(&err, "%s backend", sb->be->name);
		goto fail;
	}
	created = true;
	/* Until the gateway knows the sandbox, all its traffic is refused: a
	 * create that cannot install the policy fails rather than hand out a
	 * sandbox without a network. Done while the guest starts up. */
	if ((r = sandbox_net_push(n, sb, addr, &err)) < 0)
		goto fail;
	uint64_t t_net = now_us();
	r = sandbox_guest_up(n, sb, &nspec, TAKE_FD(chan_fd), jail_pid, "guest ready", "guest agent",
			     &err);
	if (r < 0)
		goto fail;
	log_debug("sandbox %s: create: row %.2f ms, backend %.2f ms, net push %.2f ms, guest up %.2f ms",
		  sb->id, (t_be - t_req) / 1000.0, (t_nm - t_be) / 1000.0, (t_net - t_nm) / 1000.0,
		  (now_us() - t_net) / 1000.0);

	sandbox_schedule_timeout(n, sb);
	respond_sandbox(c, 201, sb);
	sandbox_unref(sb);
	goto out;

fail:
	/* Leave nothing behind but a failed row that says why. */
	{
		err_t e2 = { 0 };
		char reason[600];

		log_warn("sandbox %s: create failed: %s", sb->id, err.msg);
		if (created && sb->be->destroy(&n->bctx, sb->id, &e2) < 0)
			log_err("sandbox %s: destroy after failed create: %s", sb->id, e2.msg);
		if (chan_fd >= 0)
			close(chan_fd);
		snprintf(reason, sizeof(reason), "%s", err.msg);
		pthread_mutex_lock(&sb->mu);
		if (state_transition(n->db, sb->id, &sb->state, SB_FAILED, reason, 0, &e2) < 0)
			log_err("%s", e2.msg);
		sb->state = SB_FAILED;
		set_error(sb, reason);
		pthread_cond_broadcast(&sb->cv);
		pthread_mutex_unlock(&sb->mu);
		create_status(err.code, &status, &code);
		http_respond_error(c, status, code, "%s", err.msg);
		sandbox_unref(sb);
	}
out:
	json_free(cred_env);
	json_free(body);
}

/* ---- list / get / delete ---------------------------------------------- */

struct list_filter {
	int state;               /* -1 = any */
	const char *template_name;
	const char *keys[16], *vals[16];
	size_t n_meta;
	char *owned[40];
	size_t n_owned;
	const char *bad;
};

static void filter_param(void *arg, const char *k, const char *v)
{
	struct list_filter *f = arg;

	if (f->n_owned + 2 > ARRAY_SIZE(f->owned)) {
		f->bad = "too many query parameters";
		return;
	}
	if (strcmp(k, "state") == 0) {
		f->state = state_parse(v);
		if (f->state < 0)
			f->bad = "unknown state";
	} else if (strcmp(k, "template") == 0) {
		f->template_name = f->owned[f->n_owned++] = xstrdup(v);
	} else if (strncmp(k, "metadata.", 9) == 0) {
		if (f->n_meta == ARRAY_SIZE(f->keys)) {
			f->bad = "too many metadata filters";
			return;
		}
		f->keys[f->n_meta] = f->owned[f->n_owned++] = xstrdup(k + 9);
		f->vals[f->n_meta++] = f->owned[f->n_owned++] = xstrdup(v);
	}
	/* Other parameters are ignored. */
}

static bool filter_match(const struct list_filter *f, struct sandbox *sb)
{
	bool ok;

	pthread_mutex_lock(&sb->mu);
	ok = sb->state != SB_DELETED && (f->state < 0 || (int)sb->state == f->state);
	pthread_mutex_unlock(&sb->mu);
	if (!ok)
		return false;
	if (f->template_name && strcmp(f->template_name, sb->template_name) != 0)
		return false;
	for (size_t i = 0; i < f->n_meta; i++) {
		const char *v = sb->metadata ? json_get_str(sb->metadata, f->keys[i]) : NULL;
		if (!v || strcmp(v, f->vals[i]) != 0)
			return false;
	}
	return true;
}

static int cmp_created(const void *a, const void *b)
{
	const struct sandbox *x = *(struct sandbox *const *)a, *y = *(struct sandbox *const *)b;

	if (x->created_at != y->created_at)
		return x->created_at < y->created_at ? -1 : 1;
	return strcmp(x->id, y->id);
}

void handle_sandboxes_list(struct node *n, struct http_req *req, struct http_conn *c,
			   const char *tenant)
{
	struct list_filter f = { .state = -1 };
	struct sandbox **v = NULL;
	size_t nv = 0, cap = 0;
	struct buf b;
	struct jw w;

	node_query_each(req->query, filter_param, &f);
	if (f.bad) {
		http_respond_error(c, 400, "invalid_field", "%s", f.bad);
		goto out;
	}
	pthread_mutex_lock(&n->mu);
	for (int bk = 0; bk < NODE_BUCKETS; bk++)
		for (struct sandbox *sb = n->buckets[bk]; sb; sb = sb->hnext) {
			if (strcmp(sb->tenant, tenant) != 0)
				continue;
			if (nv == cap) {
				cap = cap ? cap * 2 : 32;
				v = xrealloc(v, cap * sizeof(*v));
			}
			sandbox_ref(sb);
			v[nv++] = sb;
		}
	pthread_mutex_unlock(&n->mu);
	if (nv)
		qsort(v, nv, sizeof(*v), cmp_created);

	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "sandboxes");
	jw_arr(&w);
	for (size_t i = 0; i < nv; i++) {
		if (filter_match(&f, v[i]))
			sandbox_render(&w, v[i]);
		sandbox_unref(v[i]);
	}
	jw_end(&w);
	jw_end(&w);
	http_respond_json(c, 200, b.data);
	buf_free(&b);
	free(v);
out:
	for (size_t i = 0; i < f.n_owned; i++)
		free(f.owned[i]);
}

void handle_sandbox_get(struct node *n, struct sandbox *sb, struct http_conn *c)
{
	respond_sandbox(c, 200, sb);
}

bool sandbox_is_deleted(struct node *n, const char *id, const char *tenant)
{
	struct db_rows rows;
	err_t err = { 0 };
	bool mine = false;

	if (db_query(n->db, &rows, &err, "SELECT observed FROM sandboxes WHERE id=? AND tenant_id=?",
		     "ss", id, tenant) == 0) {
		mine = rows.n_rows == 1 && db_cell(&rows, 0, 0) &&
		       strcmp(db_cell(&rows, 0, 0), "deleted") == 0;
		db_rows_free(&rows);
	}
	return mine;
}

void handle_sandbox_delete(struct node *n, const char *id, const char *tenant,
			   struct http_conn *c)
{
	struct sandbox *sb = sandbox_find(n, id, tenant);
	err_t err = { 0 };

	if (!sb) {
		/* Deleting again is fine for the owner. */
		if (sandbox_is_deleted(n, id, tenant))
			http_respond(c, 204, NULL, NULL, 0, NULL);
		else
			http_respond_error(c, 404, "not_found", "no sandbox `%s`", id);
		return;
	}
	if (sandbox_delete(n, sb, "deleted by client", &err) < 0)
		sandbox_respond_err(c, sb, &err);
	else
		http_respond(c, 204, NULL, NULL, 0, NULL);
	sandbox_unref(sb);
}
