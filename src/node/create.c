/* create.c - POST /v1/sandboxes: a new sandbox from a template.
 *
 * handle_sandboxes_create is a recipe of steps, run in this order:
 *   parse     the body and the Idempotency-Key (a repeated key answers at once)
 *   check     the limits fit the node; the template exists (built on demand)
 *   reserve   the sandbox in memory and in the map, within max_sandboxes
 *   record    write 1: the row, pending → starting
 *   jail      the backend builds the jail and starts its guest
 *   network   the gateway learns the sandbox's address and policy
 *   guest up  HELLO, READY, the backend's post-ready step; write 2: → running
 *   answer    201 with the sandbox
 * A step that ends the create answers the request and undoes what it took;
 * from the jail on, a failure leaves a failed row that says why. A create
 * costs two transactions, each one WAL append.
 *
 * The guest-up step (sandbox_guest_up, model/guest.c) is shared by
 * everything that starts a guest: fork, rollback, restore and crash
 * recovery too.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../cred/cred.h"
#include "../lib/fault.h"
#include "../lib/ident.h"
#include "../lib/log.h"
#include "../lib/phases.h"
#include "../policy/policy.h"
#include "node-internal.h"

/* ---- the request ------------------------------------------------------ */

struct create_req {
	const char *template_name;
	const struct backend_ops *be;
	struct nm_limits limits;
	const json *env, *metadata, *network;
	const json *image;      /* the template's exec defaults without env, or NULL */
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
	if (cr->image) {
		jw_key(&w, "image");
		jw_value(&w, cr->image);
	}
	sched_policy_render(&w, &cr->pol);
	if (cr->network) {
		jw_key(&w, "network");
		jw_value(&w, cr->network);
	}
	jw_end(&w);
	return buf_steal(&b);
}

/* ---- a repeated Idempotency-Key --------------------------------------- */

/* The sandbox of (tenant, key), ref'd, or NULL. Called with n->mu held. */
static struct sandbox *find_idem_locked(struct node *n, const char *tenant, const char *key)
{
	struct sandbox *sb = sandbox_find_idem_locked(n, tenant, key);

	if (sb)
		sandbox_ref(sb);
	return sb;
}

/* Answer a repeated Idempotency-Key with the existing sandbox, once its
 * create has settled. */
static void respond_existing(struct http_conn *c, struct sandbox *sb)
{
	pthread_mutex_lock(&sb->mu);
	while (sb->state == SB_PENDING || sb->state == SB_STARTING)
		pthread_cond_wait(&sb->cv, &sb->mu);
	pthread_mutex_unlock(&sb->mu);
	sandbox_respond(c, 200, sb);
}

/* The key is in the DB but not in memory (its sandbox was deleted, or
 * another process holds it: a second node sharing the database, which won
 * the INSERT). Answer from the row once that create has settled, like
 * respond_existing does for one in memory: the other process writes
 * starting -> running (or failed) when its guest is up, so poll the row
 * for as long as a create may wait for its guest, then answer what it is. */
static bool respond_existing_row(struct node *n, struct http_conn *c, const char *tenant,
				 const char *key)
{
	uint64_t deadline = now_ms() + (uint64_t)n->cfg->ready_timeout_ms + 5000;
	struct sandbox *sb = NULL;

	for (;;) {
		struct db_rows rows;
		err_t err = { 0 };
		const char *observed;
		bool settled;

		if (db_query(n->db, &rows, &err,
			     "SELECT " SANDBOX_COLS " FROM sandboxes WHERE tenant_id=? AND idem_key=?",
			     "ss", tenant, key) < 0)
			return false;
		observed = rows.n_rows ? db_cell(&rows, 0, 6) : NULL;
		settled = !observed || (strcmp(observed, "pending") && strcmp(observed, "starting"));
		if (rows.n_rows && (settled || now_ms() > deadline))
			sb = sandbox_from_row(n, &rows, 0);
		db_rows_free(&rows);
		if (sb || !observed)
			break;
		struct timespec ts = { 0, 50 * 1000 * 1000 };   /* a cross-node replay only */
		nanosleep(&ts, NULL);
	}
	if (!sb)
		return false;
	sandbox_respond(c, 200, sb);
	sandbox_unref(sb);
	return true;
}

/* ---- credentials in the environment ----------------------------------- */

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

/* ---- the steps of a create -------------------------------------------- */

/* One create in flight: what each step leaves for the next. */
struct create {
	struct node *n;
	struct http_conn *c;
	const char *tenant;
	const char *key;            /* Idempotency-Key, or NULL (borrowed from the request) */
	json *body;                 /* the request's body (owned) */
	struct create_req cr;       /* parsed; borrows from body (and cred_env) */
	json *cred_env;             /* env with credential placeholders (owned), or NULL */
	json *image_env;            /* the template's env under the request's (owned), or NULL */
	json *image;                /* the template's other defaults (owned), or NULL */
	uint32_t version;           /* of the template */
	char *spec, *meta;          /* the row's spec and metadata text (owned) */
	struct sandbox *sb;         /* the handler's reference */
	struct nm_sandbox_spec nspec;
	int chan_fd;                /* the guest's channel until the guest-up step takes it */
	pid_t jail_pid;
	char addr[16];              /* the sandbox's address, from the backend's create */
	bool created;               /* the backend made the jail */
	err_t err;
	uint64_t t_req, t_be, t_nm, t_net;   /* for the debug line of timings */
};

/* parse: the body and the Idempotency-Key (400 when either is bad). A key
 * this tenant used before is answered at once with its sandbox, once that
 * one's create settled. Takes nothing. */
static int create_parse(struct create *cx, struct http_req *req)
{
	static const char *const keys[] = { "template", "backend", "limits", "env",
					    "metadata", "timeout_s", "snapshots", "idle_timeout_s",
					    "on_timeout", "network", "node", NULL };
	struct node *n = cx->n;
	struct sandbox *old;
	const json *node;
	const char *code;
	char msg[512];

	cx->body = node_body_object(req, cx->c, keys);
	if (!cx->body)
		return -1;
	/* "node" is placement, done by the api (api/placement.c); a request that
	 * names another node reached the wrong one. */
	node = json_get(cx->body, "node");
	if (node && node->type != JSON_STR) {
		http_respond_error(cx->c, 400, "invalid_field", "node: must be a node name");
		return -1;
	}
	if (node && (!n->cfg->node_name || strcmp(node->str, n->cfg->node_name))) {
		http_respond_error(cx->c, 422, "wrong_node", "this is node `%s`, not the one asked for",
				   n->cfg->node_name ? n->cfg->node_name : "");
		return -1;
	}
	code = parse_create(n, cx->body, &cx->cr, msg, sizeof(msg));
	if (code) {
		http_respond_error(cx->c, 400, code, "%s", msg);
		return -1;
	}
	if (cx->key && (!*cx->key || strlen(cx->key) > 255)) {
		http_respond_error(cx->c, 400, "bad_request", "Idempotency-Key must be 1..255 bytes");
		return -1;
	}
	if (cx->key) {
		pthread_mutex_lock(&n->mu);
		old = find_idem_locked(n, cx->tenant, cx->key);
		pthread_mutex_unlock(&n->mu);
		if (old) {
			respond_existing(cx->c, old);
			sandbox_unref(old);
			return -1;
		}
	}
	return 0;
}

/* The template's image defaults (a template built from an image): its env
 * goes under the request's (a variable the request sets wins), the rest
 * (workdir, user, entrypoint, cmd) is kept for exec (exec.c). Takes
 * nothing from the request; fills cx->image_env and cx->image. */
static int create_image_defaults(struct create *cx)
{
	struct create_req *cr = &cx->cr;
	const json *tenv;
	json *cfg = NULL;
	struct buf b;
	struct jw w;

	if (template_image_config(cx->n, cr->template_name, cx->version, &cfg, &cx->err) < 0) {
		node_respond_err(cx->c, &cx->err);
		return -1;
	}
	if (!cfg)
		return 0;
	tenv = json_get(cfg, "env");
	if (tenv && tenv->n) {
		buf_init(&b);
		jw_init(&w, &b);
		jw_obj(&w);
		for (size_t i = 0; i < tenv->n; i++)
			if (!cr->env || !json_get(cr->env, tenv->keys[i])) {
				jw_key(&w, tenv->keys[i]);
				jw_value(&w, tenv->items[i]);
			}
		for (size_t i = 0; cr->env && i < cr->env->n; i++) {
			jw_key(&w, cr->env->keys[i]);
			jw_value(&w, cr->env->items[i]);
		}
		jw_end(&w);
		cx->image_env = json_parse(b.data, b.len, NULL);
		buf_free(&b);
		cr->env = cx->image_env;
	}
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	for (size_t i = 0; i < cfg->n; i++)
		if (strcmp(cfg->keys[i], "env")) {
			jw_key(&w, cfg->keys[i]);
			jw_value(&w, cfg->items[i]);
		}
	jw_end(&w);
	cx->image = json_parse(b.data, b.len, NULL);
	buf_free(&b);
	if (cx->image && !cx->image->n) {
		json_free(cx->image);
		cx->image = NULL;
	}
	cr->image = cx->image;
	json_free(cfg);
	return 0;
}

/* check: the node can hold it and the template exists. A single sandbox may
 * not ask for more than the node has (503 when the node manager does not
 * say, 422 over_capacity when it does not fit) nor more than the node's
 * maxima per sandbox (422 invalid_argument); the template is built on demand for a
 * built-in, one build shared by concurrent creates (404 when there is
 * none). Takes nothing. */
static int create_check(struct create *cx)
{
	const struct create_req *cr = &cx->cr;
	struct nm_node_info info;
	char msg[256];
	int r;

	/* BYOK: a tenant whose key service refuses its key cannot boot new
	 * sandboxes (403 key_revoked; checked at most every kms_cache_ttl). */
	if (byok_create_gate(cx->n, cx->tenant, &cx->err) < 0) {
		node_respond_err(cx->c, &cx->err);
		return -1;
	}
	if (node_info_get(cx->n, &info, &cx->err) < 0) {
		http_respond_error(cx->c, 503, "unavailable", "node manager: %s", cx->err.msg);
		return -1;
	}
	if (cr->limits.memory_mb > info.mem_total_mb ||
	    cr->limits.cpu_millis > (uint64_t)info.cpus * 1000 ||
	    (info.pool_total_mb && cr->limits.disk_mb > info.pool_total_mb)) {
		http_respond_error(cx->c, 422, "over_capacity",
				   "limits exceed the node (%llu MiB memory, %u cpus, %llu MiB disk)",
				   (unsigned long long)info.mem_total_mb, info.cpus,
				   (unsigned long long)info.pool_total_mb);
		return -1;
	}
	/* Within the node, the operator's maxima per sandbox (a sandbox's
	 * pids come out of the host's pid_max, which the node's size does
	 * not say). */
	if (quota_check_limits(cx->n, &cr->limits, msg, sizeof(msg)) < 0) {
		http_respond_error(cx->c, 422, "invalid_argument", "%s", msg);
		return -1;
	}
	r = ident_name_ok(cr->template_name)
		    ? template_resolve(cx->n, cr->template_name, &cx->version, &cx->err)
		    : -ENOENT;
	if (r == -ENOENT) {
		http_respond_error(cx->c, 404, "template_not_found", "no template `%s`",
				   cr->template_name);
		return -1;
	} else if (r < 0) {
		err_wrap(&cx->err, "template %s", cr->template_name);
		node_respond_err(cx->c, &cx->err);
		return -1;
	}
	return create_image_defaults(cx);
}

/* reserve: the new sandbox (pending), with its env and the placeholders of
 * the credentials that apply to it, registered in memory under the map
 * lock, so that the count check and a racing request with the same
 * Idempotency-Key see it at once. When that racing request won, it is the
 * answer; when the node runs its maximum, 422. Either way the new sandbox
 * is dropped: it was never in the map. */
static int create_reserve(struct create *cx)
{
	struct node *n = cx->n;
	struct create_req *cr = &cx->cr;
	struct sandbox *sb, *old;
	size_t live = 0;

	{
		_cleanup_free_ char *id = random_id("sb-", 8);
		sb = sandbox_new(n, id);
	}
	cx->cred_env = env_with_credentials(n, cx->tenant, sb->id, cr->metadata, cr->env);
	if (cx->cred_env)
		cr->env = cx->cred_env;
	sb->tenant = xstrdup(cx->tenant);
	sb->template_name = xstrdup(cr->template_name);
	sb->template_version = cx->version;
	sb->backend_name = xstrdup(cr->be->name);
	sb->be = cr->be;
	sb->idem_key = cx->key ? xstrdup(cx->key) : NULL;
	sb->limits = cr->limits;
	sb->env = json_dup(cr->env);
	sb->image = json_dup(cr->image);
	sb->metadata = json_dup(cr->metadata);
	sb->network = json_dup(cr->network);
	sb->timeout_s = cr->timeout_s;
	sb->pol = cr->pol;
	sb->created_at = wall_ms();
	/* Scheduler intervals and idle time count from now. */
	sb->sched.known_since = sched_now(n);
	sb->sched.last_disk_at = sb->sched.last_full_at = sb->sched.active_at = sb->sched.known_since;
	cx->spec = spec_text(cr);
	if (cr->metadata) {
		struct buf b;
		struct jw w;
		buf_init(&b);
		jw_init(&w, &b);
		jw_value(&w, cr->metadata);
		cx->meta = buf_steal(&b);
	}

	pthread_mutex_lock(&n->mu);
	old = cx->key ? find_idem_locked(n, cx->tenant, cx->key) : NULL;
	if (!old) {
		live = sandbox_live_locked(n);
		if (!n->cfg->max_sandboxes || live < n->cfg->max_sandboxes) {
			/* The map takes our creation reference; this handler
			 * keeps its own. */
			sandbox_map_insert_locked(n, sb);
			sandbox_ref(sb);
		}
	}
	pthread_mutex_unlock(&n->mu);
	if (old) {
		sandbox_unref(sb);
		respond_existing(cx->c, old);
		sandbox_unref(old);
		return -1;
	}
	if (n->cfg->max_sandboxes && live >= n->cfg->max_sandboxes) {
		sandbox_unref(sb);
		http_respond_error(cx->c, 422, "over_capacity",
				   "the node runs its maximum of %u sandboxes", n->cfg->max_sandboxes);
		return -1;
	}
	cx->sb = sb;
	return 0;
}

/* What the create's first write puts in the row besides sb's own fields. */
struct create_row {
	const char *spec, *meta, *key;
};

/* The row (desired running, observed pending) and pending → starting. */
static int write_created(struct node *n, struct sandbox *sb, const void *arg, err_t *err)
{
	const struct create_row *row = arg;
	/* The tenant's quota, counted from the rows in this transaction: no
	 * other create or fork inserts between the count and the insert. */
	int r = quota_admit_sandbox(n, sb->tenant, &sb->limits, err);

	if (r < 0)
		return r;
	r = db_exec(n->db, err,
		    "INSERT INTO sandboxes(id, tenant_id, template, template_version, backend,"
		    " desired, observed, spec, metadata, idem_key, created_at, updated_at, node)"
		    " VALUES(?,?,?,?,?,'running','pending',?,?,?,?,?,?)",
		    "sssissssiis", sb->id, sb->tenant, sb->template_name,
		    (int64_t)sb->template_version, sb->backend_name, row->spec, row->meta,
		    row->key, sb->created_at, sb->created_at, node_me(n));

	pthread_mutex_lock(&sb->mu);
	if (r >= 0)
		r = state_transition(n->db, sb->id, &sb->state, SB_STARTING, "create",
				     STATE_IN_TX, err);
	pthread_mutex_unlock(&sb->mu);
	return r;
}

/* record: write 1, the row (desired running) and pending → starting in one
 * transaction. When it fails the sandbox is not in the DB and is forgotten
 * entirely: pending or starting → deleted in memory only, out of the map.
 * A key that another create wrote first is answered from its row; anything
 * else is the error's answer. */
static int create_record(struct create *cx)
{
	struct create_row row = { .spec = cx->spec, .meta = cx->meta ? cx->meta : "{}",
				  .key = cx->key };
	struct sandbox *sb = cx->sb;
	int r = sandbox_tx(cx->n, sb, write_created, &row, &cx->err);

	if (r >= 0)
		return 0;
	sandbox_forget(cx->n, sb);
	if (r == -EEXIST && cx->key && respond_existing_row(cx->n, cx->c, cx->tenant, cx->key)) {
		sandbox_unref(sb);
		return -1;
	}
	node_respond_err(cx->c, &cx->err);
	sandbox_unref(sb);
	return -1;
}

/* jail: the backend builds the jail and starts its guest (chan_fd,
 * jail_pid, and the sandbox's network address in the same reply). On
 * failure there is no jail to undo; create_failed leaves the failed row. */
static int create_jail(struct create *cx)
{
	struct sandbox *sb = cx->sb;
	int r;

	sandbox_jail_spec(sb, &cx->nspec);
	cx->t_be = now_us();
	r = sb->be->create(&cx->n->bctx, &cx->nspec, &cx->chan_fd, &cx->jail_pid, cx->addr,
			   &cx->err);
	cx->t_nm = now_us();
	if (r < 0) {
		err_wrap(&cx->err, "%s backend", sb->be->name);
		return r;
	}
	cx->created = true;
	metrics_pool_create(cx->n, sb->be->name, nm_last_from_pool());
	/* vm: the template's memory snapshot of this shape (made by now) into
	 * the object store, off the request path, once (tmplstore.c) */
	if (backend_can(sb->be, BACKEND_CAP_SUSPEND_MEMORY))
		tmplstore_queue_base(cx->n, &cx->nspec);
	return 0;
}

/* network: the gateway learns the sandbox's address and policy. Until it
 * does, all the sandbox's traffic is refused: a create that cannot install
 * the policy fails rather than hand out a sandbox without a network. Done
 * while the guest starts up. On failure create_failed destroys the jail. */
static int create_network(struct create *cx)
{
	int r = sandbox_net_push(cx->n, cx->sb, cx->addr, &cx->err);

	cx->t_net = now_us();
	return r;
}

/* guest up: the guest says HELLO and READY on its channel (which this step
 * takes over), the backend's post-ready step runs, and starting → running
 * with the jail's pid. On failure the channel is closed already and
 * create_failed destroys the jail. */
static int create_guest_up(struct create *cx)
{
	return sandbox_guest_up(cx->n, cx->sb, &cx->nspec, TAKE_FD(cx->chan_fd), cx->jail_pid,
				"guest ready", "guest agent", &cx->err);
}

/* answer: 201 with the running sandbox, once its TTL is timed. */
static void create_answer(struct create *cx)
{
	struct sandbox *sb = cx->sb;

	log_debug("sandbox %s: create: row %.2f ms, backend %.2f ms, net push %.2f ms, guest up %.2f ms",
		  sb->id, (cx->t_be - cx->t_req) / 1000.0, (cx->t_nm - cx->t_be) / 1000.0,
		  (cx->t_net - cx->t_nm) / 1000.0, (now_us() - cx->t_net) / 1000.0);
	sandbox_schedule_timeout(cx->n, sb);
	sandbox_respond(cx->c, 201, sb);
	sandbox_unref(sb);
}

static void create_status(int code, int *status, const char **ecode)
{
	node_errno_to_http(code, status, ecode);
	/* Failures to bring a sandbox up are ours, not the client's, except
	 * for the ones that say "try again". */
	if (*status < 500 && *status != 409 && *status != 422)
		*status = 500, *ecode = "internal";
}

/* A step from the jail on failed: leave nothing behind but a failed row that
 * says why. Destroys the jail if one was made, closes a channel no step
 * took, moves starting (or running, when only guest up's commit failed) →
 * failed, and answers: our fault (500) unless the error says "try again"
 * (409, 422, 5xx). */
static void create_failed(struct create *cx)
{
	struct sandbox *sb = cx->sb;
	const char *code;
	err_t e2 = { 0 };
	char reason[600];
	int status;

	log_warn("sandbox %s: create failed: %s", sb->id, cx->err.msg);
	if (cx->created && sb->be->destroy(&cx->n->bctx, sb->id, &e2) < 0)
		log_err("sandbox %s: destroy after failed create: %s", sb->id, e2.msg);
	if (cx->chan_fd >= 0)
		close(cx->chan_fd);
	snprintf(reason, sizeof(reason), "%s", cx->err.msg);
	pthread_mutex_lock(&sb->mu);
	sandbox_mark_failed(cx->n, sb, reason);
	pthread_cond_broadcast(&sb->cv);
	pthread_mutex_unlock(&sb->mu);
	create_status(cx->err.code, &status, &code);
	http_respond_error(cx->c, status, code, "%s", cx->err.msg);
	sandbox_unref(sb);
}

void handle_sandboxes_create(struct node *n, struct http_req *req, struct http_conn *c,
			     const char *tenant)
{
	struct create cx = { .n = n, .c = c, .tenant = tenant, .chan_fd = -1 };
	bool gated, up;

	cx.key = http_req_header(req, "Idempotency-Key");
	cx.t_req = now_us();
	/* Until the row exists, a step that fails has answered and undone
	 * itself; from the jail on, create_failed leaves a failed row. */
	if (create_parse(&cx, req) < 0 ||
	    create_check(&cx) < 0 ||
	    create_reserve(&cx) < 0 ||
	    create_record(&cx) < 0)
		goto out;
	FAULT_POINT("create.after_record");
	gated = vmstart_enter(n, cx.sb);
	up = create_jail(&cx) >= 0 &&
	     (FAULT_POINT("create.after_jail"), create_network(&cx) >= 0) &&
	     (FAULT_POINT("create.after_network"), create_guest_up(&cx) >= 0);
	vmstart_leave(n, gated);
	if (!up) {
		create_failed(&cx);
	} else {
		FAULT_POINT("create.before_answer");
		create_answer(&cx);
		metrics_observe(n, OP_CREATE, now_us() - cx.t_req);
	}
out:
	free(cx.spec);
	free(cx.meta);
	json_free(cx.cred_env);
	json_free(cx.image_env);
	json_free(cx.image);
	json_free(cx.body);
}
