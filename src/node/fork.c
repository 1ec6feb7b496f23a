/* Fork: N new, independent sandboxes from one running or paused sandbox.
 *
 *   POST /v1/sandboxes/{id}/fork  {"count": N, "from_snapshot": "ref"?}
 *        201 {"sandboxes": [child, ...]}
 *
 * Each child is a new sandbox of the parent's tenant, template, backend,
 * limits, env, metadata and timeout, with `parent` = the parent's id (the
 * `lineage` table; GET shows it). Its disk is a writable btrfs snapshot of
 * one read-only snapshot of the parent (copy-on-write: nothing is copied):
 * the named snapshot, or, without from_snapshot, one taken on the spot and
 * dropped once every child has its disk. So all N children start from the
 * same point. On a backend with full snapshots (vm) the one taken on the
 * spot is a full one: every child's QEMU restores the parent's memory and
 * device state, so its processes carry on, and the backend's post-ready
 * reset gives it its own clock, RNG seed, hostname and machine-id (vm: the
 * snapshot is asked for in the fork form, snapshot_fork, which nodemgr makes
 * of only the pages the parent wrote since its template's RAM file and a
 * reflink of its disk image when it can; see "Fork standbys" in DESIGN.md).
 * Where the time went is answered as Server-Timing and logged. A child
 * of a named full snapshot is restored the same way; a child of a disk
 * snapshot boots fresh (ns: a fresh init on the forked disk; vm: a fresh
 * QEMU cold-boots the guest on it).
 *
 * The children come up in parallel (one thread each). All or nothing: when
 * a child fails, the children made so far are deleted
 * and the answer is the error. The parent holds lc_busy meanwhile, so no
 * rollback, snapshot delete or pause runs under the fork.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../lib/fault.h"
#include "../lib/log.h"
#include "../lib/phases.h"
#include "node-internal.h"

#define FORK_MAX 16

/* What the children copy from the parent's row, and (memory forks) the
 * process table of the point they start from. */
struct fork_src {
	char *spec, *metadata;
	char *procs;
};

static int load_src(struct node *n, struct sandbox *sb, struct fork_src *src, err_t *err)
{
	struct db_rows rows;
	int r = db_query(n->db, &rows, err, "SELECT spec, metadata FROM sandboxes WHERE id=?", "s",
			 sb->id);

	if (r < 0)
		return r;
	if (rows.n_rows == 0) {
		db_rows_free(&rows);
		return err_set(err, ENOENT, "sandbox %s has no row", sb->id);
	}
	src->spec = xstrdup(db_cell(&rows, 0, 0));
	limits_spec_forget(&src->spec);
	src->metadata = xstrdup(db_cell(&rows, 0, 1) ? db_cell(&rows, 0, 1) : "{}");
	db_rows_free(&rows);
	return 0;
}

/* The child's row (the parent's spec and metadata; desired running,
 * observed pending), its lineage, and pending → starting. */
static int write_child(struct node *n, struct sandbox *sb, const void *arg, err_t *err)
{
	const struct fork_src *src = arg;
	char why[120];
	struct state_fence f = state_fence();
	/* A child counts against its tenant's quota like a create (quota.c). */
	int r = quota_admit_sandbox(n, sb->tenant, &sb->limits, err);

	if (r < 0)
		return r;
	r = db_exec(n->db, err,
		    "INSERT INTO sandboxes(id, tenant_id, template, template_version, backend,"
		    " desired, observed, spec, metadata, created_at, updated_at, node)"
		    " VALUES(?,?,?,?,?,'running','pending',?,?,?,?,?)",
		    "sssisssiis", sb->id, sb->tenant, sb->template_name,
		    (int64_t)sb->template_version, sb->backend_name, src->spec, src->metadata,
		    sb->created_at, sb->created_at, node_me(n));

	if (r >= 0)
		r = db_exec(n->db, err,
			    "INSERT INTO lineage(sandbox_id, parent) SELECT ?,? WHERE "
			    STATE_FENCE_OF_SQL,
			    "ss" STATE_FENCE_OF_TYPES, sb->id, sb->parent,
			    STATE_FENCE_OF_ARGS(f, sb->id));
	if (r >= 0)
		r = state_fenced(n->db, sb->id, r, err);
	snprintf(why, sizeof(why), "fork of %s", sb->parent);
	pthread_mutex_lock(&sb->mu);
	if (r >= 0)
		r = state_transition(n->db, sb->id, &sb->state, SB_STARTING, why, STATE_IN_TX,
				     err);
	pthread_mutex_unlock(&sb->mu);
	return r;
}

/* A new sandbox like parent, registered in the map (NULL with err when the
 * node is full) and in the DB as starting. */
static struct sandbox *child_new(struct node *n, struct sandbox *parent,
				 const struct fork_src *src, err_t *err)
{
	_cleanup_free_ char *id = random_id("sb-", 8);
	struct sandbox *sb = sandbox_new(n, id);
	size_t live = 0;
	bool full;

	sb->tenant = xstrdup(parent->tenant);
	sb->template_name = xstrdup(parent->template_name);
	sb->template_version = parent->template_version;
	sb->backend_name = xstrdup(parent->backend_name);
	sb->be = parent->be;
	sb->limits = parent->limits;
	sb->timeout_s = parent->timeout_s;
	sb->created_at = wall_ms();
	sb->parent = xstrdup(parent->id);
	sb->env = json_dup(parent->env);
	sb->image = json_dup(parent->image);
	sb->metadata = json_dup(parent->metadata);
	/* The parent's egress policy (its spec row, copied below, holds it too). */
	pthread_mutex_lock(&parent->mu);
	sb->network = json_dup(parent->network);
	pthread_mutex_unlock(&parent->mu);

	pthread_mutex_lock(&n->mu);
	live = sandbox_live_locked(n);
	full = n->cfg->max_sandboxes && live >= n->cfg->max_sandboxes;
	pthread_mutex_unlock(&n->mu);
	if (full) {
		sandbox_unref(sb);
		err_set(err, ENOSPC, "the node runs its maximum of %u sandboxes",
			n->cfg->max_sandboxes);
		return NULL;
	}
	sandbox_map_insert(n, sb);
	sandbox_ref(sb);

	if (sandbox_tx(n, sb, write_child, src, err) < 0) {
		sandbox_forget(n, sb);
		sandbox_unref(sb);
		return NULL;
	}
	return sb;
}

/* Bring one child up from the parent's snapshot snap. On failure the child
 * is failed (its row says why) and unref'd; NULL. */
static struct sandbox *fork_one(struct node *n, struct sandbox *parent,
				const struct fork_src *src, const char *snap, struct phases *ph,
				err_t *err)
{
	struct nm_sandbox_spec nspec;
	struct sandbox *sb;
	int chan_fd = -1, r;
	pid_t jail_pid = 0;
	bool created = false, turn = false;
	char why[200], addr[16] = "";

	phases_start(ph);
	if (!(sb = child_new(n, parent, src, err)))
		return NULL;
	/* Memory fork: the parent's processes carry on in the child; its
	 * table follows them (before the guest can say anything about them). */
	if (src->procs) {
		pthread_mutex_lock(&sb->mu);
		procs_restore_locked(sb, src->procs);
		pthread_mutex_unlock(&sb->mu);
	}
	sandbox_jail_spec(sb, &nspec);
	phases_mark(ph, "row");
	turn = vmstart_enter(n, sb);
	r = sb->be->fork(&n->bctx, &nspec, parent->id, snap, &chan_fd, &jail_pid, addr, err);
	if (r < 0) {
		err_wrap(err, "%s backend", sb->be->name);
		goto fail;
	}
	created = true;
	FAULT_POINT("fork.after_child_jail");
	phases_mark(ph, "take");
	/* The child has an address of its own: until the gateway knows it, all
	 * its traffic is refused (as for a create). */
	if (sandbox_net_push(n, sb, addr, err) < 0)
		goto fail;
	phases_mark(ph, "net");
	snprintf(why, sizeof(why), "guest ready (fork of %s)", parent->id);
	r = sandbox_guest_up_timed(n, sb, &nspec, TAKE_FD(chan_fd), jail_pid, why, "guest agent",
				   ph, err);
	vmstart_leave(n, turn);
	turn = false;
	if (r < 0)
		goto fail;
	sandbox_schedule_timeout(n, sb);
	return sb;
fail: {
	err_t e2 = { 0 };
	char reason[600];

	vmstart_leave(n, turn);
	log_warn("sandbox %s: fork of %s failed: %s", sb->id, parent->id, err->msg);
	if (created && sb->be->destroy(&n->bctx, sb->id, &e2) < 0)
		log_err("sandbox %s: destroy after failed fork: %s", sb->id, e2.msg);
	else if (created)
		sandbox_net_forget(n, sb);
	snprintf(reason, sizeof(reason), "fork failed: %s", err->msg);
	sandbox_fail(n, sb, reason);
	sandbox_unref(sb);
	return NULL;
}
}

/* One child per thread: the children come up side by side (a vm child's
 * restore is mostly waiting on its QEMU). */
struct fork_job {
	struct node *n;
	struct sandbox *parent;
	const struct fork_src *src;
	const char *snap;
	struct sandbox *kid;
	struct phases ph;
	err_t err;
	pthread_t th;
	bool threaded;
};

static void *fork_job_main(void *arg)
{
	struct fork_job *fj = arg;

	fj->kid = fork_one(fj->n, fj->parent, fj->src, fj->snap, &fj->ph, &fj->err);
	if (fj->kid)
		sandbox_progress_add(fj->parent, 1);   /* children done, for GET */
	return NULL;
}

/* Make count children into kids[]; the number made. On a shortfall *err is
 * the first failure. The children's steps go into ph, each the slowest
 * child's. */
static int fork_all(struct node *n, struct sandbox *parent, const struct fork_src *src,
		    const char *snap, int count, struct sandbox **kids, struct phases *ph,
		    err_t *err)
{
	struct fork_job jobs[FORK_MAX];
	int made = 0;

	memset(jobs, 0, sizeof(jobs));
	for (int i = 0; i < count; i++) {
		jobs[i] = (struct fork_job){ .n = n, .parent = parent, .src = src, .snap = snap };
		jobs[i].threaded = count > 1 &&
				   pthread_create(&jobs[i].th, NULL, fork_job_main, &jobs[i]) == 0;
		if (!jobs[i].threaded)
			fork_job_main(&jobs[i]);
	}
	for (int i = 0; i < count; i++) {
		if (jobs[i].threaded)
			pthread_join(jobs[i].th, NULL);
		phases_max(ph, &jobs[i].ph);
		if (jobs[i].kid)
			kids[made++] = jobs[i].kid;
		else if (!err->code)
			*err = jobs[i].err;
	}
	return made;
}

/* 201 with the children, Location naming the first one, and where the
 * fork's time went as Server-Timing (the names and durations are ours). */
static void respond_children(struct http_conn *c, struct sandbox **kids, int count,
			     const struct phases *ph)
{
	char timing[600];
	struct buf b;
	struct jw w;

	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "sandboxes");
	jw_arr(&w);
	for (int i = 0; i < count; i++)
		sandbox_render(&w, kids[i]);
	jw_end(&w);
	jw_end(&w);
	phases_server_timing(ph, timing, sizeof(timing));
	{
		/* Location names the first child (a server-made id); the body
		 * lists them all. */
		_cleanup_free_ char *hdr = xasprintf("Location: /v1/sandboxes/%s\r\n"
						     "Server-Timing: %s\r\n", kids[0]->id, timing);
		http_respond(c, 201, "application/json", b.data, b.len, hdr);
	}
	buf_free(&b);
}

void handle_fork(struct node *n, struct sandbox *sb, struct http_req *req, struct http_conn *c)
{
	static const char *const keys[] = { "count", "from_snapshot", NULL };
	struct sandbox *kids[FORK_MAX] = { 0 };
	struct fork_src src = { 0 };
	char snap[65] = "", why[200];
	const json *v;
	bool temp = false, busy = false;
	int64_t count = 1;
	int made = 0, r;
	err_t err = { 0 };
	json *body = NULL;
	uint64_t t_req = now_us();
	struct phases ph, kid_ph = { 0 };
	char steps[600];

	phases_start(&ph);

	if (req->body_len && !(body = node_body_object(req, c, keys)))
		return;
	if ((v = json_get(body, "count"))) {
		if (v->type != JSON_NUM || !v->is_int || v->i < 1 || v->i > FORK_MAX) {
			http_respond_error(c, 400, "invalid_field",
					   "`count` must be an integer from 1 to %d", FORK_MAX);
			goto out;
		}
		count = v->i;
	}
	v = json_get(body, "from_snapshot");
	if (v && v->type != JSON_NULL && (v->type != JSON_STR || !*v->str)) {
		http_respond_error(c, 400, "invalid_field",
				   "`from_snapshot` must be a snapshot id or name");
		goto out;
	}
	/* A child is a new sandbox: not while the tenant's key is revoked. */
	if (byok_create_gate(n, sb->tenant, &err) < 0) {
		node_respond_err(c, &err);
		goto out;
	}
	if (!backend_can(sb->be, BACKEND_CAP_DISK_SNAPSHOT) || !sb->be->fork || !sb->be->snapshot) {
		http_respond_error(c, 501, "not_supported", "fork is not supported on the %s backend",
				   sb->backend_name);
		goto out;
	}
	if (v && v->type == JSON_STR) {
		struct db_rows rows;
		if (snapshot_find(n, sb, v->str, &rows, &err) < 0) {
			node_respond_err(c, &err);
			goto out;
		}
		snprintf(snap, sizeof(snap), "%s", db_cell(&rows, 0, 0));   /* SNAP_COLS: id first */
		db_rows_free(&rows);
		src.procs = snapshot_procs(n, snap);
	}

	/* The parent: running or paused, and held still for the whole fork. */
	pthread_mutex_lock(&sb->mu);
	while (sb->lc_busy)
		pthread_cond_wait(&sb->cv, &sb->mu);
	if (sb->deleting || (sb->state != SB_RUNNING && sb->state != SB_PAUSED)) {
		err_set(&err, EBUSY, "sandbox %s is %s; fork needs a running or paused sandbox",
			sb->id, state_name(sb->state));
	} else {
		sb->lc_busy = true;
		busy = true;
		sb->prog.op = "fork";
		sb->prog.phase = "snapshot";
		sb->prog.unit = "sandboxes";
		sb->prog.total = (uint64_t)count;
	}
	pthread_mutex_unlock(&sb->mu);
	if (!busy) {
		sandbox_respond_err(c, sb, &err);
		goto out;
	}
	if (load_src(n, sb, &src, &err) < 0) {
		node_respond_err(c, &err);
		goto out;
	}
	phases_mark(&ph, "hold");
	if (!snap[0]) {
		/* One point for all children: a throw-away snapshot (not in the
		 * snapshots table), after the backend's quiesce (vm: sync). */
		_cleanup_free_ char *id = random_id("fk-", 8);
		struct guestconn *gc;
		int64_t size;

		snprintf(snap, sizeof(snap), "%s", id);
		r = 0;
		if (backend_can(sb->be, BACKEND_CAP_FULL_SNAPSHOT) && sb->be->snapshot_fork) {
			struct nm_sandbox_spec pspec;
			sandbox_jail_spec(sb, &pspec);
			src.procs = procs_image(sb);
			r = sb->be->snapshot_fork(&n->bctx, &pspec, snap, &size, &err);
		} else if (backend_can(sb->be, BACKEND_CAP_FULL_SNAPSHOT) && sb->be->snapshot_full) {
			src.procs = procs_image(sb);
			r = sb->be->snapshot_full(&n->bctx, sb->id, snap, "", &size, &err);
		} else {
			if (sb->be->quiesce && (gc = sandbox_gc_get(sb))) {
				r = sb->be->quiesce(&n->bctx, gc, &err);
				sandbox_gc_put(sb);
			}
			if (r == 0)
				r = sb->be->snapshot(&n->bctx, sb->id, snap, "", &size, &err);
		}
		if (r < 0) {
			sandbox_respond_err(c, sb, &err);
			goto out;
		}
		temp = true;
	}
	phases_mark(&ph, "capture");

	sandbox_progress_set(sb, "fork", "fork", "sandboxes", 0, (uint64_t)count);
	FAULT_POINT("fork.after_snapshot");
	made = fork_all(n, sb, &src, snap, (int)count, kids, &kid_ph, &err);
	{
		/* The slowest child's steps; what the threads took beyond
		 * them (start, join) as "join". */
		uint64_t now = now_us(), sum = 0;
		for (int i = 0; i < kid_ph.n; i++) {
			phases_add(&ph, kid_ph.p[i].name, kid_ph.p[i].us);
			sum += kid_ph.p[i].us;
		}
		phases_add(&ph, "join", now - ph.last > sum ? now - ph.last - sum : 0);
		ph.last = now;
	}
	if (made < count) {
		/* All or nothing. */
		for (int i = 0; i < made; i++) {
			err_t e2 = { 0 };
			if (sandbox_delete(n, kids[i], "fork failed", &e2) < 0)
				log_warn("sandbox %s: %s", kids[i]->id, e2.msg);
		}
		if (err.code == ENOSPC) {
			http_respond_error(c, 422, "over_capacity", "%s", err.msg);
		} else if (err.code == EDQUOT) {
			http_respond_error(c, 422, "quota_exceeded", "%s", err.msg);
		} else {
			int status;
			const char *code;
			node_errno_to_http(err.code, &status, &code);
			if (status < 500)
				status = 500, code = "internal";
			http_respond_error(c, status, code, "%s", err.msg);
		}
		goto out;
	}
	snprintf(why, sizeof(why), "forked into %d sandbox%s from %s%s", (int)count,
		 count == 1 ? "" : "es", temp ? "its disk" : "snapshot ", temp ? "" : snap);
	pthread_mutex_lock(&sb->mu);
	if (state_event(n->db, sb->id, sb->state, why, &err) < 0)
		log_warn("sandbox %s: %s", sb->id, err.msg);
	pthread_mutex_unlock(&sb->mu);
	FAULT_POINT("fork.before_answer");
	phases_mark(&ph, "event");
	phases_add(&ph, "total", now_us() - t_req);
	respond_children(c, kids, (int)count, &ph);
	metrics_observe(n, OP_FORK, now_us() - t_req);
	phases_text(&ph, steps, sizeof(steps));
	log_info("sandbox %s: fork of %d: %s", sb->id, (int)count, steps);

out:
	if (temp) {
		err_t e2 = { 0 };
		if (sb->be->snapshot_delete(&n->bctx, sb->id, snap, &e2) < 0)
			log_warn("sandbox %s: drop fork snapshot %s: %s", sb->id, snap, e2.msg);
	}
	if (busy) {
		pthread_mutex_lock(&sb->mu);
		memset(&sb->prog, 0, sizeof(sb->prog));
		sb->lc_busy = false;
		pthread_cond_broadcast(&sb->cv);
		pthread_mutex_unlock(&sb->mu);
	}
	for (int i = 0; i < made; i++)
		sandbox_unref(kids[i]);
	free(src.spec);
	free(src.metadata);
	free(src.procs);
	json_free(body);
}
