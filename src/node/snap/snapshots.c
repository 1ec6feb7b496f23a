/* Disk snapshots and rollback:
 *
 *   POST   /v1/sandboxes/{id}/snapshots          {name?}     201 snapshot
 *   GET    /v1/sandboxes/{id}/snapshots                      200 {"snapshots":[...]}
 *   DELETE /v1/sandboxes/{id}/snapshots/{snap}               204
 *   POST   /v1/sandboxes/{id}/rollback           {snapshot}  200 sandbox
 *
 * Rows live in the `snapshots` table; the btrfs snapshots belong to the
 * backend (nodemgr: DATA/pool/snapshots/<id>/<snap id>). A snapshot is named
 * by its id ("sn-…", also the on-disk name) and by a client name (default:
 * the id), unique per sandbox; {snap} and `snapshot` accept either.
 *
 * Snapshot, snapshot delete and rollback hold lc_busy while the backend
 * works, like pause and resume, so none of them overlaps another or a
 * delete. Rollback moves the sandbox running → rolling_back → running
 * (a paused one is resumed first, "resumed for rollback"), each step an
 * events row.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/fault.h"
#include "../../lib/ident.h"
#include "../../lib/log.h"
#include "../../lib/page.h"
#include "../http/handler.h"
#include "../life/lifecycle.h"
#include "../metrics/metrics.h"
#include "../proc/proc.h"
#include "../quota/quota.h"
#include "../wake/wake.h"
#include "snap.h"

#define SNAP_COLS "id, name, kind, size_bytes, created_at, scheduled"

static void render_snapshot(struct jw *w, const char *sandbox_id, const struct db_rows *rows,
			    int i)
{
	char at[ISO_TIME_MAX];

	iso_time(db_cell_int(rows, i, 4), at);
	jw_obj(w);
	jw_key(w, "id");
	jw_str(w, db_cell(rows, i, 0));
	jw_key(w, "name");
	jw_str(w, db_cell(rows, i, 1));
	jw_key(w, "sandbox_id");
	jw_str(w, sandbox_id);
	jw_key(w, "kind");
	jw_str(w, db_cell(rows, i, 2));
	/* Taken by the snapshot scheduler: only these are pruned by the
	 * retention tiers; a client's own snapshots stay until deleted. */
	jw_key(w, "scheduled");
	jw_bool(w, db_cell_int(rows, i, 5) != 0);
	jw_key(w, "created_at");
	jw_str(w, at);
	/* Bytes of file data written since the previous snapshot (see
	 * pool_changed_bytes); null when it could not be found. */
	jw_key(w, "size_bytes");
	if (db_cell(rows, i, 3))
		jw_int(w, db_cell_int(rows, i, 3));
	else
		jw_null(w);
	jw_end(w);
}

/* The snapshot of sb named by id or name, into *rows (one row, SNAP_COLS).
 * -ENOENT when there is none. */
int snapshot_find(struct node *n, struct sandbox *sb, const char *ref, struct db_rows *rows,
		  err_t *err)
{
	int r = db_query(n->db, rows, err,
			 "SELECT " SNAP_COLS " FROM snapshots WHERE sandbox_id=? AND (id=? OR name=?)"
			 " LIMIT 1",
			 "sss", sb->id, ref, ref);
	if (r < 0)
		return r;
	if (rows->n_rows == 0) {
		db_rows_free(rows);
		return err_set(err, ENOENT, "sandbox %s has no snapshot `%s`", sb->id, ref);
	}
	return 0;
}

/* Take lc_busy on a running or paused sandbox (waiting for another
 * lifecycle step to finish). -EBUSY naming the state otherwise. */
static int begin_step(struct sandbox *sb, const char *what, bool any_state, err_t *err)
{
	int r = 0;

	pthread_mutex_lock(&sb->mu);
	while (sb->lc_busy)
		pthread_cond_wait(&sb->cv, &sb->mu);
	if (sb->deleting || sb->state == SB_DELETED ||
	    (!any_state && sb->state != SB_RUNNING && sb->state != SB_PAUSED))
		r = err_set(err, EBUSY, "sandbox %s is %s; %s needs a running or paused sandbox",
			    sb->id, state_name(sb->state), what);
	else
		sb->lc_busy = true;
	pthread_mutex_unlock(&sb->mu);
	return r;
}

static void end_step(struct sandbox *sb)
{
	pthread_mutex_lock(&sb->mu);
	sb->lc_busy = false;
	pthread_cond_broadcast(&sb->cv);
	pthread_mutex_unlock(&sb->mu);
}

/* The backend's step before a disk snapshot (vm: the guest syncs). Only a
 * running guest can answer; a paused one is snapshotted as it stands (the
 * image then holds what reached it, like after a power cut). */
static int quiesce(struct node *n, struct sandbox *sb, err_t *err)
{
	struct guestconn *gc;
	int r;

	if (!sb->be->quiesce || !(gc = sandbox_gc_get(sb)))
		return 0;
	r = sb->be->quiesce(&n->bctx, gc, err);
	sandbox_gc_put(sb);
	return r;
}

static bool has_disk_snapshots(struct http_conn *c, struct sandbox *sb)
{
	if (backend_can(sb->be, BACKEND_CAP_DISK_SNAPSHOT) && sb->be->snapshot && sb->be->rollback)
		return true;
	http_respond_error(c, 501, "not_supported",
			   "disk snapshots and rollback are not supported on the %s backend yet",
			   sb->backend_name);
	return false;
}

int snapshot_take(struct node *n, struct sandbox *sb, const char *name, const char *kind,
		  bool scheduled, char **out_id, err_t *err)
{
	_cleanup_free_ char *snap_id = random_id("sn-", 8);
	_cleanup_free_ char *prev = NULL, *procs = NULL;
	struct db_rows rows;
	int64_t size = -1, now;
	enum sb_state st;
	char why[200];
	int r;

	bool full = strcmp(kind, "full") == 0;

	if (!name)
		name = snap_id;
	if ((!full && strcmp(kind, "disk") != 0) || !backend_can(sb->be, BACKEND_CAP_DISK_SNAPSHOT) ||
	    !sb->be->snapshot)
		return err_set(err, EOPNOTSUPP, "%s snapshots are not supported on the %s backend",
			       kind, sb->backend_name);
	if (full && (!backend_can(sb->be, BACKEND_CAP_FULL_SNAPSHOT) || !sb->be->snapshot_full))
		return err_set(err, EOPNOTSUPP,
			       "full (memory) snapshots are not supported on the %s backend: it "
			       "has no memory checkpoint; take a disk snapshot (kind \"disk\")",
			       sb->backend_name);
	if (db_query(n->db, &rows, err,
		     "SELECT id, name FROM snapshots WHERE sandbox_id=? ORDER BY created_at, rowid",
		     "s", sb->id) < 0)
		return -err->code;
	for (int i = 0; i < rows.n_rows; i++) {
		if (strcmp(db_cell(&rows, i, 1), name) == 0) {
			db_rows_free(&rows);
			return err_set(err, EEXIST, "sandbox %s already has a snapshot named `%s`",
				       sb->id, name);
		}
		free(prev);
		prev = xstrdup(db_cell(&rows, i, 0));
	}
	db_rows_free(&rows);

	if ((r = begin_step(sb, "a snapshot", false, err)) < 0)
		return r;
	/* Room for one more (max_snapshots, the disk quota for full ones, the
	 * tenant's quota)? Checked again with its size before its row goes
	 * in. lc_busy keeps this sandbox's snapshots one at a time. */
	if ((r = quota_admit_snapshot(n, sb, scheduled, full, -1, err)) < 0) {
		end_step(sb);
		return r;
	}
	/* A full snapshot needs no sync: the page cache is in the memory it
	 * captures. */
	r = full ? 0 : quiesce(n, sb, err);
	/* The node's side of the memory: which processes the guest runs and
	 * where their output streams stand, so a rollback to this snapshot can
	 * follow them again. Taken just before the guest stops: output of the
	 * last moments in between shows as a gap, never as a repeat. */
	if (r == 0)
		FAULT_POINT("snapshot.before_backend");
	if (r == 0 && full) {
		procs = procs_image(sb);
		r = sb->be->snapshot_full(&n->bctx, sb->id, snap_id, prev ? prev : "", &size, err);
	} else if (r == 0)
		r = sb->be->snapshot(&n->bctx, sb->id, snap_id, prev ? prev : "", &size, err);
	/* The scheduler's clock (wall time unless a test moved it), so that
	 * retention compares like with like. */
	now = sched_now(n);
	if (r == 0)
		FAULT_POINT("snapshot.after_backend");
	if (r == 0) {
		static const char ins[] =
			"INSERT INTO snapshots(id, sandbox_id, name, kind, size_bytes, created_at,"
			" scheduled, procs) SELECT ?,?,?,?,?,?,?,? WHERE " STATE_FENCE_OF_SQL;
		struct state_fence f = state_fence();
		/* Its bytes known, the quotas again, and the row, in one
		 * transaction: snapshots of the tenant's other sandboxes
		 * cannot slip in between. Over a quota: dropped, 422. */
		r = db_tx_begin(n->db, err);
		if (r >= 0) {
			/* A size the backend could not find is checked at its
			 * upper bound, the sandbox's disk (tenant-quota.h
			 * counts its row so too), not as nothing. */
			r = quota_admit_snapshot(n, sb, scheduled, full,
						 size >= 0 ? size : (int64_t)sb->limits.disk_mb << 20,
						 err);
			/* 'n' binds NULL and takes no argument; a NULL 's' binds NULL */
			if (r >= 0 && size >= 0)
				r = db_exec(n->db, err, ins, "ssssiiis" STATE_FENCE_OF_TYPES,
					    snap_id, sb->id, name, kind, size, now,
					    (int64_t)scheduled, procs, STATE_FENCE_OF_ARGS(f, sb->id));
			else if (r >= 0)
				r = db_exec(n->db, err, ins, "ssssniis" STATE_FENCE_OF_TYPES,
					    snap_id, sb->id, name, kind, now, (int64_t)scheduled,
					    procs, STATE_FENCE_OF_ARGS(f, sb->id));
			if (r >= 0)
				r = state_fenced(n->db, sb->id, r, err);
			/* a failed commit ends the transaction too */
			if (r >= 0)
				r = db_tx_commit(n->db, err);
			else
				db_tx_rollback(n->db);
		}
		if (r < 0) {
			err_t e2 = { 0 };
			if (sb->be->snapshot_delete(&n->bctx, sb->id, snap_id, &e2) < 0)
				log_warn("sandbox %s: drop snapshot %s: %s", sb->id, snap_id, e2.msg);
		}
	}
	if (r >= 0) {
		err_t e2 = { 0 };
		FAULT_POINT("snapshot.after_row");
		pthread_mutex_lock(&sb->mu);
		st = sb->state;
		pthread_mutex_unlock(&sb->mu);
		snprintf(why, sizeof(why), "%s%s snapshot %s (%s) taken",
			 scheduled ? "scheduled " : "", kind, snap_id, name);
		if (state_event(n->db, sb->id, st, why, &e2) < 0)
			log_warn("sandbox %s: %s", sb->id, e2.msg);
	}
	end_step(sb);
	if (r < 0)
		return r;
	if (out_id)
		*out_id = TAKE_PTR(snap_id);
	return 0;
}

static void snapshot_create(struct node *n, struct sandbox *sb, struct http_req *req,
			    struct http_conn *c)
{
	static const char *const keys[] = { "name", "kind", NULL };
	_cleanup_free_ char *snap_id = NULL;
	const char *name = NULL;
	bool full = false;
	struct db_rows rows;
	json *body = NULL;
	err_t err = { 0 };
	uint64_t t_req = now_us();

	if (req->body_len) {
		const json *v;
		if (!(body = node_body_object(req, c, keys)))
			return;
		v = json_get(body, "name");
		if (v && v->type != JSON_NULL) {
			if (v->type != JSON_STR || !ident_name_ok(v->str)) {
				http_respond_error(c, 400, "invalid_field",
						   "`name` must match [a-z0-9][a-z0-9._-]{0,63}");
				goto out;
			}
			name = v->str;
		}
		v = json_get(body, "kind");
		if (v && v->type != JSON_NULL) {
			if (v->type != JSON_STR || (strcmp(v->str, "disk") && strcmp(v->str, "full"))) {
				http_respond_error(c, 400, "invalid_field",
						   "`kind` must be \"disk\" or \"full\"");
				goto out;
			}
			full = strcmp(v->str, "full") == 0;
		}
	}
	if (!has_disk_snapshots(c, sb))
		goto out;
	/* An unsupported kind is EOPNOTSUPP from snapshot_take: 501. */
	if (snapshot_take(n, sb, name, full ? "full" : "disk", false, &snap_id, &err) < 0) {
		sandbox_respond_err(c, sb, &err);
		goto out;
	}
	{
		struct buf b;
		struct jw w;
		if (snapshot_find(n, sb, snap_id, &rows, &err) < 0) {
			node_respond_err(c, &err);
			goto out;
		}
		buf_init(&b);
		jw_init(&w, &b);
		render_snapshot(&w, sb->id, &rows, 0);
		db_rows_free(&rows);
		{
			_cleanup_free_ char *loc =
				xasprintf("/v1/sandboxes/%s/snapshots/%s", sb->id, snap_id);
			http_respond_created(c, loc, b.data);
		}
		buf_free(&b);
		metrics_observe(n, OP_SNAPSHOT, now_us() - t_req);
	}
out:
	json_free(body);
}

static void snapshot_list(struct node *n, struct sandbox *sb, struct http_req *req,
			  struct http_conn *c)
{
	struct db_rows rows;
	struct page pg;
	err_t err = { 0 };
	struct buf b;
	struct jw w;

	if (page_from_req(&pg, req, false, c) < 0)
		return;
	/* oldest first; ids break ties (the page key is (created_at, id)) */
	if (db_query(n->db, &rows, &err,
		     "SELECT " SNAP_COLS " FROM snapshots WHERE sandbox_id=? ORDER BY created_at, id",
		     "s", sb->id) < 0) {
		node_respond_err(c, &err);
		return;
	}
	page_list_open(&w, &b, "snapshots");
	for (int i = 0; i < rows.n_rows; i++)
		if (page_take(&pg, db_cell_int(&rows, i, 4), db_cell(&rows, i, 0)))
			render_snapshot(&w, sb->id, &rows, i);
	db_rows_free(&rows);
	page_list_respond(&pg, &w, &b, c);
}

int snapshot_remove(struct node *n, struct sandbox *sb, const char *snap_id, err_t *err)
{
	int r;

	if ((r = begin_step(sb, "deleting a snapshot", true, err)) < 0)
		return r;
	r = sb->be && sb->be->snapshot_delete
		    ? sb->be->snapshot_delete(&n->bctx, sb->id, snap_id, err)
		    : 0;
	if (r == 0) {
		struct state_fence f = state_fence();

		r = db_exec(n->db, err,
			    "DELETE FROM snapshots WHERE id=? AND sandbox_id=? AND " STATE_FENCE_OF_SQL,
			    "ss" STATE_FENCE_OF_TYPES, snap_id, sb->id, STATE_FENCE_OF_ARGS(f, sb->id));
		r = state_fenced(n->db, sb->id, r, err);
	}
	end_step(sb);
	return r < 0 ? r : 0;
}

static void snapshot_delete(struct node *n, struct sandbox *sb, const char *ref,
			    struct http_conn *c)
{
	_cleanup_free_ char *snap_id = NULL;
	struct db_rows rows;
	err_t err = { 0 };

	if (snapshot_find(n, sb, ref, &rows, &err) < 0) {
		node_respond_err(c, &err);
		return;
	}
	snap_id = xstrdup(db_cell(&rows, 0, 0));
	db_rows_free(&rows);
	if (snapshot_remove(n, sb, snap_id, &err) < 0)
		sandbox_respond_err(c, sb, &err);
	else
		http_respond(c, 204, NULL, NULL, 0, NULL);
}

void handle_snapshots(struct node *n, struct sandbox *sb, const char *snap, struct http_req *req,
		      struct http_conn *c)
{
	if (!snap && strcmp(req->method, "POST") == 0)
		snapshot_create(n, sb, req, c);
	else if (!snap && strcmp(req->method, "GET") == 0)
		snapshot_list(n, sb, req, c);
	else if (snap && strcmp(req->method, "DELETE") == 0)
		snapshot_delete(n, sb, snap, c);
	else
		http_respond_error(c, 405, "method_not_allowed", "%s is not allowed here",
				   req->method);
}

/* Put a failed rollback's sandbox right: when the backend still holds the
 * old jail (it failed before killing anything), the sandbox is running as
 * before; otherwise nothing runs and it fails. */
static void rollback_failed(struct node *n, struct sandbox *sb, const err_t *cause)
{
	char reason[600];
	err_t e2 = { 0 };
	int fd = -1;
	pid_t pid;

	snprintf(reason, sizeof(reason), "rollback failed: %s", cause->msg);
	if (sb->be->adopt && sb->be->adopt(&n->bctx, sb->id, &fd, &pid, NULL, &e2) == 0) {
		close(fd);
		pthread_mutex_lock(&sb->mu);
		/* rolling_back → running: the old guest still runs; memory
		 * says so even when the row cannot. */
		if (state_transition(n->db, sb->id, &sb->state, SB_RUNNING, reason, 0, &e2) < 0) {
			log_err("%s", e2.msg);
			state_set(sb->id, &sb->state, SB_RUNNING);
		}
		sb->lc_busy = false;
		pthread_cond_broadcast(&sb->cv);
		pthread_mutex_unlock(&sb->mu);
		return;
	}
	end_step(sb);
	sandbox_fail(n, sb, reason);
}

char *snapshot_procs(struct node *n, const char *snap_id)
{
	struct db_rows rows;
	err_t err = { 0 };
	char *out = NULL;

	if (db_query(n->db, &rows, &err, "SELECT procs FROM snapshots WHERE id=?", "s",
		     snap_id) < 0) {
		log_warn("snapshot %s: process table: %s", snap_id, err.msg);
		return NULL;
	}
	if (rows.n_rows && db_cell(&rows, 0, 0))
		out = xstrdup(db_cell(&rows, 0, 0));
	db_rows_free(&rows);
	return out;
}

void handle_rollback(struct node *n, struct sandbox *sb, struct http_req *req,
		     struct http_conn *c)
{
	static const char *const keys[] = { "snapshot", NULL };
	_cleanup_free_ char *snap_id = NULL, *snap_name = NULL, *snap_kind = NULL, *procs = NULL;
	struct nm_sandbox_spec nspec;
	struct db_rows rows;
	const char *ref;
	int chan_fd = -1, r, status;
	bool turn;
	const char *code;
	pid_t jail_pid = 0;
	uint64_t t0 = now_us();
	err_t err = { 0 };
	char why[300];
	json *body;

	if (!(body = node_body_object(req, c, keys)))
		return;
	ref = json_get_str(body, "snapshot");
	if (!ref || !*ref) {
		http_respond_error(c, 400, "invalid_field", "`snapshot` (an id or name) is required");
		goto out;
	}
	if (!has_disk_snapshots(c, sb))
		goto out;
	if (snapshot_find(n, sb, ref, &rows, &err) < 0) {
		node_respond_err(c, &err);
		goto out;
	}
	snap_id = xstrdup(db_cell(&rows, 0, 0));
	snap_name = xstrdup(db_cell(&rows, 0, 1));
	snap_kind = xstrdup(db_cell(&rows, 0, 2));
	db_rows_free(&rows);
	procs = snapshot_procs(n, snap_id);

	/* A paused sandbox is resumed first, so a rollback that fails before
	 * it changed anything leaves a running sandbox, as the table says. */
	if (sandbox_wake(n, sb, "resumed for rollback", &err) < 0) {
		sandbox_respond_err(c, sb, &err);
		goto out;
	}
	pthread_mutex_lock(&sb->mu);
	while (sb->lc_busy)
		pthread_cond_wait(&sb->cv, &sb->mu);
	snprintf(why, sizeof(why), "rollback to %s snapshot %s (%s)", snap_kind, snap_id,
		 snap_name);
	if (sb->deleting || sb->state != SB_RUNNING) {
		err_set(&err, EBUSY, "sandbox %s is %s; only a running or paused sandbox can be "
			"rolled back", sb->id, state_name(sb->state));
		r = -EBUSY;
	} else {
		/* running → rolling_back (a paused one was resumed above). */
		r = state_transition(n->db, sb->id, &sb->state, SB_ROLLING_BACK, why, 0, &err);
	}
	if (r == 0)
		sb->lc_busy = true;
	pthread_mutex_unlock(&sb->mu);
	if (r < 0) {
		sandbox_respond_err(c, sb, &err);
		goto out;
	}

	FAULT_POINT("rollback.after_transition");
	sandbox_jail_spec(sb, &nspec);
	turn = vmstart_enter(n, sb);
	r = sb->be->rollback(&n->bctx, &nspec, snap_id, &chan_fd, &jail_pid, &err);
	if (r < 0) {
		vmstart_leave(n, turn);
		err_wrap(&err, "%s backend", sb->be->name);
		rollback_failed(n, sb, &err);
		goto fail_respond;
	}

	/* The old guest is gone with every process: retire its channel and
	 * what it was running. After a full rollback the guest's processes are
	 * the ones of the snapshot and carry on there: the table gets the
	 * records kept with the snapshot (fresh ones, output from the
	 * snapshot's offsets on). */
	FAULT_POINT("rollback.after_backend");
	sandbox_gc_retire(sb, "the sandbox was rolled back", procs);

	snprintf(why, sizeof(why), "rolled back to %s snapshot %s (%s)", snap_kind, snap_id,
		 snap_name);
	r = sandbox_guest_up(n, sb, &nspec, TAKE_FD(chan_fd), jail_pid, why,
			     "guest agent after rollback", &err);
	vmstart_leave(n, turn);
	if (r < 0)
		goto fail;
	FAULT_POINT("rollback.after_guest_up");
	end_step(sb);
	log_info("sandbox %s: %s in %.1f ms", sb->id, why, (now_us() - t0) / 1000.0);
	{
		struct buf b;
		struct jw w;
		buf_init(&b);
		jw_init(&w, &b);
		sandbox_render(&w, sb);
		http_respond_json(c, 200, b.data);
		buf_free(&b);
	}
	goto out;

fail:
	/* The old jail is gone and the new one did not come up. */
	{
		char reason[600];
		if (chan_fd >= 0)
			close(chan_fd);
		snprintf(reason, sizeof(reason), "rollback failed: %s", err.msg);
		end_step(sb);
		sandbox_fail(n, sb, reason);
	}
fail_respond:
	node_errno_to_http(err.code, &status, &code);
	if (status == 404 || status == 409)
		http_respond_error(c, status, code, "%s", err.msg);
	else
		http_respond_error(c, status < 500 ? 500 : status, status < 500 ? "internal" : code,
				   "%s", err.msg);
out:
	json_free(body);
}
