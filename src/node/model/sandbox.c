/* Sandboxes: the in-memory map and refcounts, the JSON form, the row's
 * transactions, the guest channel (its users, its retirement and its
 * callbacks), loading a row, and the features' hooks. List and get are
 * ../sandboxes.c; create is ../create.c; pause, resume, failure, delete,
 * timeouts and shutdown are ../life/lifecycle.c.
 *
 * The node keeps every non-deleted sandbox in memory (loaded at startup by
 * reconcile.c), so reads never touch the DB. Rows are written on state
 * changes only.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/log.h"
#include "model.h"


static unsigned bucket_of(const char *id)
{
	unsigned h = 2166136261u;

	for (; *id; id++)
		h = (h ^ (unsigned char)*id) * 16777619u;
	return h % NODE_BUCKETS;
}

/* ---- the features' hooks ---------------------------------------------- */

#define FEATURES_MAX 8
static const struct sandbox_feature *features[FEATURES_MAX];
static size_t n_features;

void sandbox_feature_add(const struct sandbox_feature *f)
{
	for (size_t i = 0; i < n_features; i++)
		if (features[i] == f)
			return;
	if (n_features == FEATURES_MAX)
		abort();   /* the set is fixed in node.c: raise FEATURES_MAX with it */
	features[n_features++] = f;
}

/* Call hook h of every feature that has it, in registration order. */
#define FEATURES_CALL(h, ...)                                    \
	for (size_t fi_ = 0; fi_ < n_features; fi_++)            \
		if (features[fi_]->h)                            \
			features[fi_]->h(__VA_ARGS__)

/* ---- map and refcounts ------------------------------------------------ */

/* The one place a sandbox's state is set without an edge of the table: its
 * start, pending for a new sandbox (sandbox_new) or what its row says when
 * loaded (sandbox_from_row). Every later change goes through state.c. */
static struct sandbox *sandbox_alloc(struct node *n, const char *id, enum sb_state start)
{
	struct sandbox *sb = xcalloc(1, sizeof(*sb));

	sb->node = n;
	sb->refs = 1;
	snprintf(sb->id, sizeof(sb->id), "%s", id);
	pthread_mutex_init(&sb->mu, NULL);
	pthread_cond_init(&sb->cv, NULL);
	sb->state = start;
	sb->next_serial = 1;
	return sb;
}

struct sandbox *sandbox_new(struct node *n, const char *id)
{
	return sandbox_alloc(n, id, SB_PENDING);
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
	FEATURES_CALL(free, sb);
	json_free(sb->env);
	json_free(sb->image);
	json_free(sb->metadata);
	json_free(sb->network);
	free(sb->tenant);
	free(sb->template_name);
	free(sb->backend_name);
	free(sb->idem_key);
	free(sb->home);
	free(sb->error);
	free(sb->susp_snap);
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

static unsigned idem_bucket(const char *tenant, const char *key)
{
	unsigned h = 2166136261u;

	for (; *tenant; tenant++)
		h = (h ^ (unsigned char)*tenant) * 16777619u;
	h = (h ^ 0xff) * 16777619u;   /* a byte no id or key has: ("ab","c") != ("a","bc") */
	for (; *key; key++)
		h = (h ^ (unsigned char)*key) * 16777619u;
	return h % NODE_BUCKETS;
}

struct sandbox *sandbox_find_idem_locked(struct node *n, const char *tenant, const char *key)
{
	for (struct sandbox *sb = n->idem[idem_bucket(tenant, key)]; sb; sb = sb->ihnext)
		if (strcmp(sb->idem_key, key) == 0 && strcmp(sb->tenant, tenant) == 0)
			return sb;
	return NULL;
}

static void idem_unlink_locked(struct node *n, struct sandbox *sb)
{
	if (!sb->idem_key)
		return;
	for (struct sandbox **pp = &n->idem[idem_bucket(sb->tenant, sb->idem_key)]; *pp;
	     pp = &(*pp)->ihnext)
		if (*pp == sb) {
			*pp = sb->ihnext;
			sb->ihnext = NULL;
			return;
		}
}

/* In or out of the node's per-state counts (n->mu held). */
static void count_set(struct node *n, struct sandbox *sb, bool in)
{
	pthread_mutex_lock(&n->count_mu);
	if (sb->counted != in && (unsigned)sb->state < SB__COUNT) {
		if (in)
			n->state_n[sb->state]++;
		else
			n->state_n[sb->state]--;
	}
	sb->counted = in;
	pthread_mutex_unlock(&n->count_mu);
}

void sandbox_state_setter(enum sb_state *cur, enum sb_state to)
{
	/* Every caller passes &sb->state (state_transition's and
	 * state_set's call sites in src/node). */
	struct sandbox *sb = (struct sandbox *)((char *)cur - offsetof(struct sandbox, state));
	struct node *n = sb->node;

	pthread_mutex_lock(&n->count_mu);
	if (sb->counted) {
		if ((unsigned)sb->state < SB__COUNT)
			n->state_n[sb->state]--;
		if ((unsigned)to < SB__COUNT)
			n->state_n[to]++;
	}
	sb->state = to;
	pthread_mutex_unlock(&n->count_mu);
}

/* ---- each tenant's sandboxes in list order ------------------------------ */

struct tenant_order {
	struct tenant_order *next;
	char *tenant;
	struct sandbox **v;     /* (created_at, id) ascending */
	size_t n, cap;
};

static int key_cmp(int64_t ams, const char *aid, int64_t bms, const char *bid)
{
	return ams != bms ? (ams < bms ? -1 : 1) : strcmp(aid, bid);
}

static struct tenant_order **order_slot_locked(struct node *n, const char *tenant)
{
	struct tenant_order **pp = &n->orders[bucket_of(tenant)];

	while (*pp && strcmp((*pp)->tenant, tenant) != 0)
		pp = &(*pp)->next;
	return pp;
}

/* The first index whose key is >= (ms, id) (after: > it). */
static size_t order_bound(const struct tenant_order *o, int64_t ms, const char *id, bool after)
{
	size_t lo = 0, hi = o->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = key_cmp(o->v[mid]->created_at, o->v[mid]->id, ms, id);
		if (c < 0 || (after && c == 0))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static void order_insert_locked(struct node *n, struct sandbox *sb)
{
	struct tenant_order **pp = order_slot_locked(n, sb->tenant), *o = *pp;
	size_t i;

	if (!o) {
		o = *pp = xcalloc(1, sizeof(*o));
		o->tenant = xstrdup(sb->tenant);
	}
	if (o->n == o->cap) {
		o->cap = o->cap ? o->cap * 2 : 16;
		o->v = xrealloc(o->v, o->cap * sizeof(*o->v));
	}
	/* new sandboxes are the newest: usually the end, no move */
	i = order_bound(o, sb->created_at, sb->id, false);
	memmove(o->v + i + 1, o->v + i, (o->n - i) * sizeof(*o->v));
	o->v[i] = sb;
	o->n++;
}

static void order_remove_locked(struct node *n, struct sandbox *sb)
{
	struct tenant_order **pp = order_slot_locked(n, sb->tenant), *o = *pp;
	size_t i;

	if (!o)
		return;
	i = order_bound(o, sb->created_at, sb->id, false);
	if (i == o->n || o->v[i] != sb)
		return;
	memmove(o->v + i, o->v + i + 1, (o->n - i - 1) * sizeof(*o->v));
	if (--o->n == 0) {
		*pp = o->next;
		free(o->v);
		free(o->tenant);
		free(o);
	}
}

size_t sandbox_list_take(struct node *n, const char *tenant, bool cursor, int64_t ms,
			 const char *id, struct sandbox **v, size_t max)
{
	struct tenant_order *o;
	size_t i, k = 0;

	pthread_mutex_lock(&n->mu);
	o = *order_slot_locked(n, tenant);
	for (i = o && cursor ? order_bound(o, ms, id, true) : 0; o && i < o->n && k < max; i++) {
		sandbox_ref(o->v[i]);
		v[k++] = o->v[i];
	}
	pthread_mutex_unlock(&n->mu);
	return k;
}

void sandbox_map_insert_locked(struct node *n, struct sandbox *sb)
{
	unsigned b = bucket_of(sb->id);

	sb->hnext = n->buckets[b];
	n->buckets[b] = sb;
	if (sb->idem_key) {
		unsigned i = idem_bucket(sb->tenant, sb->idem_key);
		sb->ihnext = n->idem[i];
		n->idem[i] = sb;
	}
	order_insert_locked(n, sb);
	count_set(n, sb, true);
}

void sandbox_map_insert(struct node *n, struct sandbox *sb)
{
	pthread_mutex_lock(&n->mu);
	sandbox_map_insert_locked(n, sb);
	pthread_mutex_unlock(&n->mu);
}

struct sandbox *sandbox_map_insert_unique(struct node *n, struct sandbox *sb)
{
	struct sandbox *s;

	pthread_mutex_lock(&n->mu);
	for (s = n->buckets[bucket_of(sb->id)]; s; s = s->hnext)
		if (strcmp(s->id, sb->id) == 0)
			break;
	if (s)
		sandbox_ref(s);
	else
		sandbox_map_insert_locked(n, sb);
	pthread_mutex_unlock(&n->mu);
	return s;
}

bool sandbox_map_unlink_locked(struct node *n, struct sandbox *sb)
{
	for (struct sandbox **pp = &n->buckets[bucket_of(sb->id)]; *pp; pp = &(*pp)->hnext) {
		if (*pp == sb) {
			*pp = sb->hnext;
			sb->hnext = NULL;
			idem_unlink_locked(n, sb);
			order_remove_locked(n, sb);
			count_set(n, sb, false);
			return true;
		}
	}
	return false;
}

void sandbox_map_remove(struct node *n, struct sandbox *sb)
{
	bool was;

	pthread_mutex_lock(&n->mu);
	was = sandbox_map_unlink_locked(n, sb);
	pthread_mutex_unlock(&n->mu);
	if (was)
		sandbox_unref(sb);   /* the map's reference */
}

/* O(1): the counts kept by count_set and sandbox_state_setter. */
static void counts_locked(struct node *n, size_t counts[SB__COUNT])
{
	pthread_mutex_lock(&n->count_mu);
	for (int s = 0; s < SB__COUNT; s++)
		counts[s] += n->state_n[s];
	pthread_mutex_unlock(&n->count_mu);
}

void sandbox_counts(struct node *n, size_t counts[SB__COUNT])
{
	pthread_mutex_lock(&n->mu);
	counts_locked(n, counts);
	pthread_mutex_unlock(&n->mu);
}

size_t sandbox_live_locked(struct node *n)
{
	size_t counts[SB__COUNT] = { 0 }, live = 0;

	counts_locked(n, counts);
	for (int s = 0; s < SB__COUNT; s++)
		if (state_is_live((enum sb_state)s))
			live += counts[s];
	return live;
}

void sandbox_jail_spec(const struct sandbox *sb, struct nm_sandbox_spec *spec)
{
	memset(spec, 0, sizeof(*spec));
	snprintf(spec->id, sizeof(spec->id), "%s", sb->id);
	snprintf(spec->template_name, sizeof(spec->template_name), "%s", sb->template_name);
	spec->template_version = sb->template_version;
	spec->limits = sb->limits;
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

void sandbox_progress_set(struct sandbox *sb, const char *op, const char *phase,
			  const char *unit, uint64_t done, uint64_t total)
{
	pthread_mutex_lock(&sb->mu);
	sb->prog.op = op;
	sb->prog.phase = phase;
	sb->prog.unit = unit;
	sb->prog.done = done;
	sb->prog.total = total;
	pthread_mutex_unlock(&sb->mu);
}

void sandbox_progress_total(struct sandbox *sb, const char *phase, uint64_t total)
{
	pthread_mutex_lock(&sb->mu);
	sb->prog.phase = phase;
	sb->prog.total = total;
	if (sb->prog.done > total)
		sb->prog.done = total;
	pthread_mutex_unlock(&sb->mu);
}

void sandbox_progress_add(struct sandbox *sb, uint64_t n)
{
	pthread_mutex_lock(&sb->mu);
	sb->prog.done += n;
	/* a retried part of a multipart upload is read twice */
	if (sb->prog.total && sb->prog.done > sb->prog.total)
		sb->prog.done = sb->prog.total;
	pthread_mutex_unlock(&sb->mu);
}

void sandbox_render(struct jw *w, struct sandbox *sb)
{
	char created[ISO_TIME_MAX];

	iso_time(sb->created_at, created);
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
	jw_key(w, "node");
	jw_str(w, sb->home ? sb->home : sb->node->cfg->node_name);
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
	FEATURES_CALL(render_locked, w, sb);
	if (sb->prog.op) {
		jw_key(w, "progress");
		jw_obj(w);
		jw_key(w, "op");
		jw_str(w, sb->prog.op);
		jw_key(w, "phase");
		jw_str(w, sb->prog.phase);
		jw_key(w, "unit");
		jw_str(w, sb->prog.unit);
		jw_key(w, "done");
		jw_uint(w, sb->prog.done);
		jw_key(w, "total");
		if (sb->prog.total)
			jw_uint(w, sb->prog.total);
		else
			jw_null(w);
		jw_end(w);
	}
	if (sb->error) {
		jw_key(w, "error");
		jw_str(w, sb->error);
	}
	jw_end(w);
	pthread_mutex_unlock(&sb->mu);
}

void sandbox_respond(struct http_conn *c, int status, struct sandbox *sb)
{
	struct buf b;
	struct jw w;

	buf_init(&b);
	jw_init(&w, &b);
	sandbox_render(&w, sb);
	if (status == 201) {
		_cleanup_free_ char *loc = xasprintf("/v1/sandboxes/%s", sb->id);
		http_respond_created(c, loc, b.data);
	} else {
		http_respond_json(c, status, b.data);
	}
	buf_free(&b);
}

/* ---- the row ---------------------------------------------------------- */

int sandbox_spec_set(struct node *n, struct sandbox *sb, const char *key, const json *v,
		     err_t *err)
{
	struct db_rows rows;
	json *spec;
	struct buf b;
	struct jw w;
	int r;

	if (db_query(n->db, &rows, err, "SELECT spec FROM sandboxes WHERE id=?", "s", sb->id) < 0)
		return -err->code;
	spec = rows.n_rows && db_cell(&rows, 0, 0)
		       ? json_parse(db_cell(&rows, 0, 0), strlen(db_cell(&rows, 0, 0)), err)
		       : NULL;
	db_rows_free(&rows);
	if (!spec || spec->type != JSON_OBJ) {
		json_free(spec);
		return err_set(err, EIO, "sandbox %s: unreadable spec row", sb->id);
	}
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	for (size_t i = 0; i < spec->n; i++) {
		if (strcmp(spec->keys[i], key) == 0)
			continue;
		jw_key(&w, spec->keys[i]);
		jw_value(&w, spec->items[i]);
	}
	if (v) {
		jw_key(&w, key);
		jw_value(&w, v);
	}
	jw_end(&w);
	json_free(spec);
	r = db_exec(n->db, err, "UPDATE sandboxes SET spec=? WHERE id=?" STATE_FENCE_SQL,
		    "ss" STATE_FENCE_TYPES, b.data, sb->id, STATE_FENCE_ARGS(state_fence()));
	buf_free(&b);
	return r < 0 ? r : 0;
}

void sandbox_forget(struct node *n, struct sandbox *sb)
{
	pthread_mutex_lock(&sb->mu);
	state_set(sb->id, &sb->state, SB_DELETED);
	pthread_cond_broadcast(&sb->cv);
	pthread_mutex_unlock(&sb->mu);
	sandbox_map_remove(n, sb);
}

int sandbox_tx(struct node *n, struct sandbox *sb,
	       int (*write)(struct node *n, struct sandbox *sb, const void *arg, err_t *err),
	       const void *arg, err_t *err)
{
	int r = db_tx_begin(n->db, err);

	if (r < 0)
		return r;
	r = write(n, sb, arg, err);
	if (r < 0) {
		db_tx_rollback(n->db);
		return r;
	}
	return db_tx_commit(n->db, err);
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

/* Detach the channel once no thread uses it any more; caller closes it.
 * Called with sb->mu held. */
struct guestconn *sandbox_gc_take_locked(struct sandbox *sb)
{
	struct guestconn *gc = sb->gc;

	sb->gc = NULL;
	/* Port relays and file watches hold the channel for as long as their
	 * client stays; end them rather than wait (this takes only the channel's lock). */
	guestconn_ports_abort(gc);
	guestconn_watches_abort(gc);
	while (sb->gc_users > 0)
		pthread_cond_wait(&sb->cv, &sb->mu);
	return gc;
}

void sandbox_gc_retire(struct sandbox *sb, const char *why, const char *procs)
{
	struct guestconn *old;

	pthread_mutex_lock(&sb->mu);
	FEATURES_CALL(retire_locked, sb, why, procs);
	old = sandbox_gc_take_locked(sb);
	pthread_mutex_unlock(&sb->mu);
	guestconn_close(old);
	pthread_mutex_lock(&sb->mu);
	sb->chan_closed = false;
	pthread_mutex_unlock(&sb->mu);
}

/* Callbacks run on the channel's reader thread: they only touch memory and
 * queue work. Every value they get was parsed from untrusted guest bytes by
 * src/guestproto; the features that keep them bound what they keep. */
static void cb_output(void *arg, uint32_t pid, int fd, uint64_t off, const void *data, size_t len)
{
	FEATURES_CALL(on_output, arg, pid, fd, off, data, len);
}

static void cb_exit(void *arg, uint32_t pid, int exit_code, int sig)
{
	FEATURES_CALL(on_exit, arg, pid, exit_code, sig);
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
	int st = state_parse(db_cell(rows, row, 6));
	struct sandbox *sb;
	err_t err = { 0 };
	json *j;

	if (!id)
		return NULL;
	/* A row with an unknown state loads as failed. */
	sb = sandbox_alloc(n, id, st < 0 ? SB_FAILED : (enum sb_state)st);
	sb->tenant = xstrdup(db_cell(rows, row, 1));
	sb->template_name = xstrdup(db_cell(rows, row, 2));
	sb->template_version = (uint32_t)db_cell_int(rows, row, 3);
	sb->backend_name = xstrdup(db_cell(rows, row, 4));
	sb->be = backend_find(sb->backend_name);
	if (db_cell(rows, row, 9))
		sb->idem_key = xstrdup(db_cell(rows, row, 9));
	if (err_text)
		sb->error = xstrdup(err_text);
	sb->created_at = db_cell_int(rows, row, 11);
	if (db_cell(rows, row, 12) && n->cfg->node_name &&
	    strcmp(db_cell(rows, row, 12), n->cfg->node_name))
		sb->home = xstrdup(db_cell(rows, row, 12));
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
		sb->network = json_dup(json_get(j, "network"));
		if (env && env->type == JSON_OBJ)
			sb->env = json_dup(env);
		if (json_get(j, "image") && json_get(j, "image")->type == JSON_OBJ)
			sb->image = json_dup(json_get(j, "image"));
	}
	FEATURES_CALL(load, n, sb, j && j->type == JSON_OBJ ? j : NULL);
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
