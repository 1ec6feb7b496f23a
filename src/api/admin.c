/* admin.c - the endpoints the api serves itself: tenants and keys.
 * The router (api.c) has already checked that the caller is an admin. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "../cred/cred.h"
#include "../cred/vault.h"
#include "../db/tenant-quota.h"
#include "../lib/ident.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/page.h"
#include "../lib/util.h"
#include "api-internal.h"

#define KEY_NAME_MAX_LEN 128

static void write_tenant(struct jw *w, const char *id, const char *name, int64_t created)
{
	char ts[ISO_TIME_MAX];

	iso_time(created, ts);
	jw_obj(w);
	jw_key(w, "id");
	jw_str(w, id);
	jw_key(w, "name");
	jw_str(w, name);
	jw_key(w, "created_at");
	jw_str(w, ts);
	jw_end(w);
}

static void tenant_create(struct api *a, struct http_req *req, struct http_conn *c)
{
	static const char *const allowed[] = { "name", NULL };
	_cleanup_free_ char *id = NULL;
	const json *name_v;
	struct buf out;
	struct jw w;
	err_t err = { 0 };
	int64_t now = wall_ms();
	json *body;
	int r;

	body = api_parse_body(req, c, allowed);
	if (!body)
		return;
	name_v = json_get(body, "name");
	if (!name_v) {
		json_free(body);
		http_respond_error(c, 400, "invalid_field", "field `name` is required");
		return;
	}
	if (name_v->type != JSON_STR || !ident_name_anycase_ok(name_v->str)) {
		json_free(body);
		http_respond_error(c, 400, "invalid_field",
				   "field `name` must be a string matching [A-Za-z0-9][A-Za-z0-9._-]{0,63}");
		return;
	}
	id = random_id("ten_", 8);
	r = db_exec(a->db, &err, "INSERT INTO tenants(id, name, created_at) VALUES(?, ?, ?)",
		    "ssi", id, name_v->str, now);
	if (r == -EEXIST) {
		http_respond_error(c, 409, "conflict", "tenant `%s` already exists", name_v->str);
		json_free(body);
		return;
	}
	if (r < 0) {
		log_err("create tenant: %s", err.msg);
		json_free(body);
		http_respond_error(c, 500, "internal", "cannot create tenant");
		return;
	}
	log_info("tenant %s (%s) created", id, name_v->str);
	buf_init(&out);
	jw_init(&w, &out);
	write_tenant(&w, id, name_v->str, now);
	{
		_cleanup_free_ char *loc = xasprintf("/v1/tenants/%s", id);
		http_respond_created(c, loc, out.data);
	}
	buf_free(&out);
	json_free(body);
}

static void tenant_list(struct api *a, struct http_req *req, struct http_conn *c)
{
	struct db_rows rows;
	struct buf out;
	struct jw w;
	struct page pg;
	int shown = 0, last = 0;
	bool more = false;
	err_t err = { 0 };

	if (page_from_req(&pg, req, false, c) < 0)
		return;
	if (db_query(a->db, &rows, &err,
		     "SELECT id, name, created_at FROM tenants ORDER BY created_at, id", NULL) < 0) {
		log_err("list tenants: %s", err.msg);
		http_respond_error(c, 500, "internal", "cannot list tenants");
		return;
	}
	buf_init(&out);
	jw_init(&w, &out);
	jw_obj(&w);
	jw_key(&w, "tenants");
	jw_arr(&w);
	for (int i = 0; i < rows.n_rows; i++) {
		if (!page_after(&pg, db_cell_int(&rows, i, 2), db_cell(&rows, i, 0)))
			continue;
		if ((unsigned)shown == pg.limit) {
			more = true;
			break;
		}
		write_tenant(&w, db_cell(&rows, i, 0), db_cell(&rows, i, 1),
			     db_cell_int(&rows, i, 2));
		last = i;
		shown++;
	}
	jw_end(&w);
	jw_key(&w, "next_token");
	if (more) {
		_cleanup_free_ char *t = page_token(db_cell_int(&rows, last, 2), db_cell(&rows, last, 0));
		jw_str(&w, t);
	} else {
		jw_null(&w);
	}
	jw_end(&w);
	db_rows_free(&rows);
	http_respond_json(c, 200, out.data);
	buf_free(&out);
}

/* ---- a tenant's quota ---------------------------------------------------- */

/* The tenant named by id or name, into id (caller owns); -ENOENT when none. */
static int tenant_lookup(struct api *a, const char *ref, char **id, err_t *err)
{
	struct db_rows rows;
	int r = db_query(a->db, &rows, err, "SELECT id FROM tenants WHERE id = ? OR name = ?",
			 "ss", ref, ref);

	if (r < 0)
		return r;
	r = rows.n_rows ? 0 : -ENOENT;
	if (rows.n_rows)
		*id = xstrdup(db_cell(&rows, 0, 0));
	db_rows_free(&rows);
	return r;
}

/* 0 (no limit) is written as null. */
static void jw_limit(struct jw *w, const char *key, uint64_t v)
{
	jw_key(w, key);
	if (v)
		jw_uint(w, v);
	else
		jw_null(w);
}

static void quota_answer(struct api *a, struct http_conn *c, int status, const char *tenant_id)
{
	struct tenant_quota q;
	struct tenant_usage u;
	err_t err = { 0 };
	struct buf out;
	struct jw w;

	if (tenant_quota_get(a->db, tenant_id, &q, &err) < 0 ||
	    tenant_usage_get(a->db, tenant_id, &u, &err) < 0) {
		log_err("tenant %s quota: %s", tenant_id, err.msg);
		http_respond_error(c, 500, "internal", "cannot read the tenant's quota");
		return;
	}
	buf_init(&out);
	jw_init(&w, &out);
	jw_obj(&w);
	jw_key(&w, "tenant");
	jw_str(&w, tenant_id);
	jw_key(&w, "quota");
	jw_obj(&w);
	jw_limit(&w, "sandboxes", q.sandboxes);
	jw_limit(&w, "memory_mb", q.memory_mb);
	jw_key(&w, "cpus");
	if (q.cpu_millis)
		jw_double(&w, q.cpu_millis / 1000.0);
	else
		jw_null(&w);
	jw_limit(&w, "disk_mb", q.disk_mb);
	jw_limit(&w, "snapshots", q.snapshots);
	jw_limit(&w, "snapshot_mb", q.snapshot_mb);
	jw_end(&w);
	/* Counted from the rows, as the node counts them when it admits. */
	jw_key(&w, "usage");
	jw_obj(&w);
	jw_key(&w, "sandboxes");
	jw_uint(&w, u.sandboxes);
	jw_key(&w, "memory_mb");
	jw_uint(&w, u.memory_mb);
	jw_key(&w, "cpus");
	jw_double(&w, u.cpu_millis / 1000.0);
	jw_key(&w, "disk_mb");
	jw_uint(&w, u.disk_mb);
	jw_key(&w, "snapshots");
	jw_uint(&w, u.snapshots);
	jw_key(&w, "snapshot_bytes");
	jw_uint(&w, u.snapshot_bytes);
	jw_end(&w);
	jw_end(&w);
	http_respond_json(c, status, out.data);
	buf_free(&out);
}

/* One field of a quota body: absent or null = no limit; else an integer in
 * 0..2^40 (0 = no limit too). -1 after answering 400. */
static int quota_field(const json *body, const char *key, uint64_t *out, struct http_conn *c)
{
	const json *v = json_get(body, key);

	*out = 0;
	if (!v || v->type == JSON_NULL)
		return 0;
	if (v->type != JSON_NUM || !v->is_int || v->i < 0 || v->i > (1LL << 40)) {
		http_respond_error(c, 400, "invalid_field",
				   "`%s` must be null or an integer in 0..%lld", key, 1LL << 40);
		return -1;
	}
	*out = (uint64_t)v->i;
	return 0;
}

/* PUT replaces the whole quota: a field left out has no limit. Existing
 * sandboxes and snapshots are kept when a lower quota leaves them over it;
 * only new ones are refused. */
static void quota_put(struct api *a, struct http_req *req, struct http_conn *c,
		      const char *tenant_id)
{
	static const char *const allowed[] = { "sandboxes", "memory_mb", "cpus", "disk_mb",
					       "snapshots", "snapshot_mb", NULL };
	struct tenant_quota q = { 0 };
	const json *cpus;
	err_t err = { 0 };
	json *body = api_parse_body(req, c, allowed);

	if (!body)
		return;
	if (quota_field(body, "sandboxes", &q.sandboxes, c) < 0 ||
	    quota_field(body, "memory_mb", &q.memory_mb, c) < 0 ||
	    quota_field(body, "disk_mb", &q.disk_mb, c) < 0 ||
	    quota_field(body, "snapshots", &q.snapshots, c) < 0 ||
	    quota_field(body, "snapshot_mb", &q.snapshot_mb, c) < 0)
		goto out;
	cpus = json_get(body, "cpus");
	if (cpus && cpus->type != JSON_NULL) {
		if (cpus->type != JSON_NUM || !(cpus->num >= 0) || cpus->num > 1e6) {
			http_respond_error(c, 400, "invalid_field",
					   "`cpus` must be null or a number in 0..1000000");
			goto out;
		}
		q.cpu_millis = (uint64_t)(cpus->num * 1000.0 + 0.5);
	}
	if (tenant_quota_set(a->db, tenant_id, &q, &err) < 0) {
		log_err("tenant %s quota: %s", tenant_id, err.msg);
		http_respond_error(c, 500, "internal", "cannot write the tenant's quota");
		goto out;
	}
	log_info("tenant %s: quota set", tenant_id);
	quota_answer(a, c, 200, tenant_id);
out:
	json_free(body);
}

/* /v1/tenants/{tenant}/quota (tenant = id or name). */
static void tenant_quota(struct api *a, struct http_req *req, struct http_conn *c,
			 const struct api_principal *who, const char *rest)
{
	_cleanup_free_ char *ref = NULL, *id = NULL;
	const char *slash = strchr(rest, '/');
	err_t err = { 0 };
	int r;

	bool enc = slash && (strcmp(slash, "/encryption") == 0 ||
			     strcmp(slash, "/encryption/rotate") == 0);

	if (!slash || slash == rest || (strcmp(slash, "/quota") != 0 && !enc)) {
		http_respond_error(c, 404, "not_found", "no such endpoint");
		return;
	}
	ref = xstrndup(rest, (size_t)(slash - rest));
	r = tenant_lookup(a, ref, &id, &err);
	if (r == -ENOENT) {
		http_respond_error(c, 404, "not_found", "tenant `%s` not found", ref);
		return;
	}
	if (r < 0) {
		log_err("tenant quota: %s", err.msg);
		http_respond_error(c, 500, "internal", "cannot look up tenant");
		return;
	}
	if (enc) {
		/* BYOK: the node holds the keys (src/node/byok.c); it gets the
		 * tenant's id whatever the client named it by. */
		_cleanup_free_ char *target = xasprintf("/v1/tenants/%s%s", id, slash);
		api_forward_to(a, req, c, who, target);
	} else if (strcmp(req->method, "GET") == 0)
		quota_answer(a, c, 200, id);
	else if (strcmp(req->method, "PUT") == 0)
		quota_put(a, req, c, id);
	else
		api_method_not_allowed(c, "GET, PUT");
}

/* Everything of a tenant that is not a sandbox, in one transaction:
 * refused (-EBUSY) while it has a sandbox not deleted yet, suspended ones
 * included, since those would be left with no owner; a create racing the
 * delete either is counted or fails (403) for want of its tenant. Its credentials'
 * sealed values are erased after the commit (refs; caller frees). The
 * credential audit is kept: it is history, and tenant ids are never reused. */
static int tenant_delete_rows(struct api *a, const char *id, struct db_rows *creds, err_t *err)
{
	static const char *const per_tenant[] = {
		"DELETE FROM api_keys WHERE tenant_id = ?",
		"DELETE FROM port_tokens WHERE tenant_id = ?",
		"DELETE FROM tenant_quotas WHERE tenant_id = ?",
		"DELETE FROM credential_bindings WHERE cred_id IN"
		" (SELECT id FROM credentials WHERE tenant_id = ?)",
		"DELETE FROM credential_placeholders WHERE cred_id IN"
		" (SELECT id FROM credentials WHERE tenant_id = ?)",
		"DELETE FROM credentials WHERE tenant_id = ?",
		"DELETE FROM tenants WHERE id = ?",
	};
	struct db_rows rows;
	int64_t live;
	int r;

	memset(creds, 0, sizeof(*creds));
	if ((r = db_tx_begin(a->db, err)) < 0)
		return r;
	/* A create or fork on its way inserts its row only while the tenant
	 * row exists, holding it (node/quota-check.c): take the row first, so either
	 * it committed and is counted below, or it finds no tenant. SQLite's
	 * transactions are serial already. */
	if (strcmp(db_driver_name(a->db), "postgres") == 0) {
		r = db_query(a->db, &rows, err, "SELECT 1 FROM tenants WHERE id = ? FOR UPDATE",
			     "s", id);
		if (r < 0)
			goto fail;
		db_rows_free(&rows);
	}
	r = db_query(a->db, &rows, err,
		     "SELECT count(*) FROM sandboxes WHERE tenant_id = ? AND observed <> 'deleted'",
		     "s", id);
	if (r < 0)
		goto fail;
	live = db_cell_int(&rows, 0, 0);
	db_rows_free(&rows);
	if (live > 0) {
		db_tx_rollback(a->db);
		return err_set(err, EBUSY, "%" PRId64, live);
	}
	r = db_query(a->db, creds, err, "SELECT id, version FROM credentials WHERE tenant_id = ?",
		     "s", id);
	if (r < 0)
		goto fail;
	for (size_t i = 0; i < ARRAY_SIZE(per_tenant); i++)
		if ((r = db_exec(a->db, err, per_tenant[i], "s", id)) < 0)
			goto fail;
	if ((r = db_tx_commit(a->db, err)) < 0)
		goto out;
	return 0;
fail:
	db_tx_rollback(a->db);
out:
	db_rows_free(creds);
	memset(creds, 0, sizeof(*creds));
	return r;
}

/* DELETE /v1/tenants/{tenant} (id or name). */
static void tenant_delete(struct api *a, struct http_conn *c, const char *ref,
			  const struct api_principal *who)
{
	_cleanup_free_ char *id = NULL;
	struct db_rows creds;
	err_t err = { 0 };
	int r = tenant_lookup(a, ref, &id, &err);

	if (r == -ENOENT) {
		http_respond_error(c, 404, "not_found", "tenant `%s` not found", ref);
		return;
	}
	if (r < 0) {
		log_err("delete tenant: %s", err.msg);
		http_respond_error(c, 500, "internal", "cannot look up tenant");
		return;
	}
	/* Its keys go with it: the caller's own would lock the operator out. */
	if (strcmp(id, who->tenant) == 0) {
		http_respond_error(c, 409, "conflict",
				   "tenant `%s` holds the key making this request", ref);
		return;
	}
	r = tenant_delete_rows(a, id, &creds, &err);
	if (r == -EBUSY) {
		http_respond_error(c, 409, "conflict",
				   "tenant `%s` still has %s sandbox(es); delete them first", ref,
				   err.msg);
		return;
	}
	if (r < 0) {
		log_err("delete tenant %s: %s", id, err.msg);
		http_respond_error(c, 500, "internal", "cannot delete tenant");
		return;
	}
	/* Its keys are refused from the next request on, not in 5 s. */
	auth_cache_clear(a->cache);
	for (int i = 0; i < creds.n_rows; i++) {
		_cleanup_free_ char *sref =
			cred_ref(db_cell(&creds, i, 0), (uint32_t)db_cell_int(&creds, i, 1));
		if (a->vault && vault_del(a->vault, sref, &err) < 0)
			log_err("delete tenant %s: credential %s: %s", id, db_cell(&creds, i, 0),
				err.msg);
	}
	log_info("tenant %s (%s) deleted with %d credential(s)", id, ref, creds.n_rows);
	db_rows_free(&creds);
	http_respond(c, 204, NULL, NULL, 0, NULL);
}

void api_handle_tenants(struct api *a, struct http_req *req, struct http_conn *c,
			const struct api_principal *who)
{
	static const char prefix[] = "/v1/tenants/";
	bool sub = strncmp(req->path, prefix, sizeof(prefix) - 1) == 0;
	const char *rest = sub ? req->path + sizeof(prefix) - 1 : NULL;

	if (sub && !strchr(rest, '/')) {   /* /v1/tenants/{t} */
		if (strcmp(req->method, "DELETE") == 0)
			tenant_delete(a, c, rest, who);
		else
			api_method_not_allowed(c, "DELETE");
	} else if (sub) {
		tenant_quota(a, req, c, who, rest);
	} else if (strcmp(req->method, "POST") == 0) {
		tenant_create(a, req, c);
	} else if (strcmp(req->method, "GET") == 0) {
		tenant_list(a, req, c);
	} else {
		api_method_not_allowed(c, "GET, POST");
	}
}

static void key_create(struct api *a, struct http_req *req, struct http_conn *c)
{
	static const char *const allowed[] = { "tenant", "name", "admin", NULL };
	_cleanup_free_ char *key = NULL, *id = NULL;
	const json *tenant_v, *name_v, *admin_v;
	struct db_rows rows;
	struct buf out;
	struct jw w;
	err_t err = { 0 };
	char ts[ISO_TIME_MAX];
	json *body;
	int r;

	body = api_parse_body(req, c, allowed);
	if (!body)
		return;
	tenant_v = json_get(body, "tenant");
	name_v = json_get(body, "name");
	admin_v = json_get(body, "admin");
	if (!tenant_v || tenant_v->type != JSON_STR || tenant_v->str_len == 0) {
		http_respond_error(c, 400, "invalid_field",
				   "field `tenant` (id or name) is required and must be a string");
		goto out;
	}
	if (name_v && (name_v->type != JSON_STR || name_v->str_len > KEY_NAME_MAX_LEN)) {
		http_respond_error(c, 400, "invalid_field",
				   "field `name` must be a string of at most %d bytes",
				   KEY_NAME_MAX_LEN);
		goto out;
	}
	if (admin_v && admin_v->type != JSON_BOOL) {
		http_respond_error(c, 400, "invalid_field", "field `admin` must be a boolean");
		goto out;
	}
	r = db_query(a->db, &rows, &err, "SELECT id FROM tenants WHERE id = ? OR name = ?", "ss",
		     tenant_v->str, tenant_v->str);
	if (r < 0) {
		log_err("create key: %s", err.msg);
		http_respond_error(c, 500, "internal", "cannot look up tenant");
		goto out;
	}
	if (rows.n_rows == 0) {
		db_rows_free(&rows);
		http_respond_error(c, 404, "not_found", "tenant `%s` not found", tenant_v->str);
		goto out;
	}
	{
		_cleanup_free_ char *tenant_id = xstrdup(db_cell(&rows, 0, 0));
		bool admin = admin_v && admin_v->b;

		db_rows_free(&rows);
		if (api_key_create(a->db, tenant_id, name_v ? name_v->str : NULL, admin, &key,
				   &id, &err) < 0) {
			log_err("%s", err.msg);
			http_respond_error(c, 500, "internal", "cannot create key");
			goto out;
		}
		log_info("key %s created for tenant %s%s", id, tenant_id, admin ? " (admin)" : "");
		iso_time(wall_ms(), ts);
		buf_init(&out);
		jw_init(&w, &out);
		jw_obj(&w);
		jw_key(&w, "id");
		jw_str(&w, id);
		jw_key(&w, "key");
		jw_str(&w, key);
		jw_key(&w, "tenant");
		jw_str(&w, tenant_id);
		jw_key(&w, "name");
		jw_str(&w, name_v ? name_v->str : NULL);
		jw_key(&w, "admin");
		jw_bool(&w, admin);
		jw_key(&w, "created_at");
		jw_str(&w, ts);
		jw_end(&w);
		{
			_cleanup_free_ char *loc = xasprintf("/v1/keys/%s", id);
			http_respond_created(c, loc, out.data);
		}
		buf_free(&out);
	}
out:
	json_free(body);
}

/* GET /v1/keys[?tenant=T]: never the key nor its hash. Revoked keys are
 * not listed. */
static void key_list(struct api *a, struct http_req *req, struct http_conn *c)
{
	_cleanup_free_ char *tref = http_query_param(req, "tenant"), *tid = NULL;
	struct db_rows rows;
	struct page pg;
	struct buf out;
	struct jw w;
	err_t err = { 0 };
	int r;

	if (page_from_req(&pg, req, false, c) < 0)
		return;
	if (tref) {
		r = tenant_lookup(a, tref, &tid, &err);
		if (r == -ENOENT) {
			http_respond_error(c, 404, "not_found", "tenant `%s` not found", tref);
			return;
		}
		if (r < 0) {
			log_err("list keys: %s", err.msg);
			http_respond_error(c, 500, "internal", "cannot look up tenant");
			return;
		}
	}
	if (db_query(a->db, &rows, &err,
		     "SELECT id, name, tenant_id, admin, created_at FROM api_keys"
		     " WHERE revoked = 0 AND (? IS NULL OR tenant_id = ?)"
		     " ORDER BY created_at, id",
		     "ss", tid, tid) < 0) {
		log_err("list keys: %s", err.msg);
		http_respond_error(c, 500, "internal", "cannot list keys");
		return;
	}
	buf_init(&out);
	jw_init(&w, &out);
	jw_obj(&w);
	jw_key(&w, "keys");
	jw_arr(&w);
	for (int i = 0; i < rows.n_rows; i++) {
		char ts[ISO_TIME_MAX];

		if (!page_take(&pg, db_cell_int(&rows, i, 4), db_cell(&rows, i, 0)))
			continue;
		iso_time(db_cell_int(&rows, i, 4), ts);
		jw_obj(&w);
		jw_key(&w, "id");
		jw_str(&w, db_cell(&rows, i, 0));
		jw_key(&w, "name");
		jw_str(&w, db_cell(&rows, i, 1));
		jw_key(&w, "tenant");
		jw_str(&w, db_cell(&rows, i, 2));
		jw_key(&w, "admin");
		jw_bool(&w, db_cell_int(&rows, i, 3) != 0);
		jw_key(&w, "created_at");
		jw_str(&w, ts);
		jw_end(&w);
	}
	jw_end(&w);
	page_write_next(&pg, &w);
	jw_end(&w);
	db_rows_free(&rows);
	http_respond_json(c, 200, out.data);
	buf_free(&out);
}

/* Revoke key id unless it is the last admin key: the check and the write
 * in one transaction. SQLite's transactions are serial; PostgreSQL's READ
 * COMMITTED would let two revokes of two admin keys each count the other,
 * so there the table is locked against other writers first. Rows changed. */
static int key_revoke_row(struct api *a, const char *id, err_t *err)
{
	int r = db_tx_begin(a->db, err);

	if (r < 0)
		return r;
	if (strcmp(db_driver_name(a->db), "postgres") == 0)
		r = db_exec(a->db, err, "LOCK TABLE api_keys IN SHARE ROW EXCLUSIVE MODE", NULL);
	if (r >= 0)
		r = db_exec(a->db, err,
			    "UPDATE api_keys SET revoked = 1 WHERE id = ? AND revoked = 0 AND"
			    " (admin = 0 OR (SELECT count(*) FROM api_keys k"
			    "  WHERE k.admin = 1 AND k.revoked = 0) > 1)",
			    "s", id);
	/* Its port and envd tokens go with it. Checks join api_keys, so they
	 * already fail; this only keeps the table small. */
	if (r > 0) {
		int d = db_exec(a->db, err, "DELETE FROM port_tokens WHERE key_id = ?", "s", id);
		if (d < 0)
			r = d;
	}
	if (r < 0) {
		db_tx_rollback(a->db);
		return r;
	}
	int c = db_tx_commit(a->db, err);
	return c < 0 ? c : r;
}

/* DELETE /v1/keys/{id}: refused at once by this api (the cache is emptied),
 * and the port and envd tokens it minted at once by every api (their
 * checks read api_keys).
 * The last admin key cannot go: nobody could then manage the service. */
static void key_revoke(struct api *a, struct http_conn *c, const char *id)
{
	struct db_rows rows;
	err_t err = { 0 };
	bool exists;
	int r = key_revoke_row(a, id, &err);

	if (r < 0) {
		log_err("revoke key %s: %s", id, err.msg);
		http_respond_error(c, 500, "internal", "cannot revoke key");
		return;
	}
	if (r > 0) {
		auth_cache_clear(a->cache);
		log_info("key %s revoked", id);
		http_respond(c, 204, NULL, NULL, 0, NULL);
		return;
	}
	/* Nothing changed: unknown, already revoked, or the last admin key. */
	if (db_query(a->db, &rows, &err, "SELECT admin FROM api_keys WHERE id = ? AND revoked = 0",
		     "s", id) < 0) {
		log_err("revoke key %s: %s", id, err.msg);
		http_respond_error(c, 500, "internal", "cannot revoke key");
		return;
	}
	exists = rows.n_rows > 0;
	db_rows_free(&rows);
	if (exists)
		http_respond_error(c, 409, "conflict",
				   "key `%s` is the last admin key; create another first", id);
	else
		http_respond_error(c, 404, "not_found", "key `%s` not found", id);
}

void api_handle_keys(struct api *a, struct http_req *req, struct http_conn *c,
		     const struct api_principal *who)
{
	static const char prefix[] = "/v1/keys/";

	(void)who;
	if (strncmp(req->path, prefix, sizeof(prefix) - 1) == 0) {
		const char *id = req->path + sizeof(prefix) - 1;

		if (!*id || strchr(id, '/'))
			http_respond_error(c, 404, "not_found", "no such endpoint");
		else if (strcmp(req->method, "DELETE") == 0)
			key_revoke(a, c, id);
		else
			api_method_not_allowed(c, "DELETE");
	} else if (strcmp(req->method, "POST") == 0) {
		key_create(a, req, c);
	} else if (strcmp(req->method, "GET") == 0) {
		key_list(a, req, c);
	} else {
		api_method_not_allowed(c, "GET, POST");
	}
}
