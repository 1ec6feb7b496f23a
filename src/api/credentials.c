/* credentials.c - /v1/credentials: the credential manager's API.
 *
 *   POST   /v1/credentials                 create (the value goes to the vault)
 *   GET    /v1/credentials                 list (never values)
 *   GET    /v1/credentials/audit           the tenant's audit records
 *   GET    /v1/credentials/{id}            one
 *   DELETE /v1/credentials/{id}            revoke: never injected again; the
 *                                          secret is erased from the vault
 *   POST   /v1/credentials/{id}/rotate     {"value"}: a new version; with
 *                                          "schemes"/"ports", where it may
 *                                          go changes with it
 *   POST   /v1/credentials/{id}/bind       a binding: {"tenant":true} |
 *   POST   /v1/credentials/{id}/unbind       {"project":"L"} | {"sandbox":"ID"}
 *
 * Every credential belongs to the caller's tenant; another tenant's id is 404.
 * The api holds only the vault's public key: it can store a value but never
 * read one back (src/cred/seal.h).
 */
#include <errno.h>
#include <string.h>

#include "../cred/cred.h"
#include "../cred/vault.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/page.h"
#include "../lib/util.h"
#include "api-internal.h"

static void respond_cred(struct http_conn *c, int status, const struct cred *cr)
{
	struct buf out;
	struct jw w;

	buf_init(&out);
	jw_init(&w, &out);
	cred_write(&w, cr);
	if (status == 201) {
		_cleanup_free_ char *loc = xasprintf("/v1/credentials/%s", cr->id);
		http_respond_created(c, loc, out.data);
	} else {
		http_respond_json(c, status, out.data);
	}
	buf_free(&out);
}

static void internal(struct http_conn *c, const char *what, const err_t *err)
{
	log_err("credentials: %s: %s", what, err->msg);
	http_respond_error(c, 500, "internal", "cannot %s", what);
}

/* A secret goes into a header, a userinfo or a query: printable ASCII only,
 * so it can never split a request. */
static bool value_ok(const json *v)
{
	if (!v || v->type != JSON_STR || v->str_len == 0 || v->str_len > CRED_VALUE_MAX)
		return false;
	for (size_t i = 0; i < v->str_len; i++)
		if ((unsigned char)v->str[i] < 0x20 || (unsigned char)v->str[i] > 0x7e)
			return false;
	return true;
}

/* 404 unless sandbox_id is one of tenant's sandboxes (any state). */
static int check_sandbox(struct api *a, struct http_conn *c, const char *tenant,
			 const char *sandbox_id)
{
	struct db_rows rows;
	err_t err = { 0 };
	int found;

	if (db_query(a->db, &rows, &err, "SELECT 1 FROM sandboxes WHERE id = ? AND tenant_id = ?",
		     "ss", sandbox_id, tenant) < 0) {
		internal(c, "look up the sandbox", &err);
		return -1;
	}
	found = rows.n_rows > 0;
	db_rows_free(&rows);
	if (!found) {
		http_respond_error(c, 404, "not_found", "sandbox `%s` not found", sandbox_id);
		return -1;
	}
	return 0;
}

static int parse_binding(struct api *a, struct http_conn *c, const char *tenant, const json *v,
			 struct cred_binding *b)
{
	err_t err = { 0 };

	if (cred_parse_binding(v, b, &err) < 0) {
		http_respond_error(c, 400, "invalid_field", "%s", err.msg);
		return -1;
	}
	if (b->kind == CRED_SCOPE_SANDBOX && check_sandbox(a, c, tenant, b->value) < 0) {
		free(b->value);
		b->value = NULL;
		return -1;
	}
	return 0;
}

static bool need_vault(struct api *a, struct http_conn *c)
{
	if (a->vault)
		return true;
	http_respond_error(c, 503, "unavailable",
			   "credentials are not configured on this server (no vault key)");
	return false;
}

static void cred_create(struct api *a, struct http_req *req, struct http_conn *c,
			const struct api_principal *who)
{
	static const char *const allowed[] = { "name", "value", "env", "inject", "hosts",
					       "schemes", "ports", "path_prefix", "methods",
					       "replace_in", "rate_limit", "expires_at",
					       "bindings", NULL };
	struct cred cr = { 0 };
	_cleanup_free_ char *ref = NULL;
	const json *value, *binds;
	err_t err = { 0 };
	json *body;
	int r;

	if (!need_vault(a, c))
		return;
	body = api_parse_body(req, c, allowed);
	if (!body)
		return;
	if (cred_parse_spec(body, &cr, &err) < 0) {
		http_respond_error(c, 400, "invalid_field", "%s", err.msg);
		goto out;
	}
	value = json_get(body, "value");
	if (!value_ok(value)) {
		http_respond_error(c, 400, "invalid_field", "field `value` is required: 1 to %d "
				   "bytes of printable ASCII", CRED_VALUE_MAX);
		goto out;
	}
	binds = json_get(body, "bindings");
	if (binds && (binds->type != JSON_ARR || binds->n > 64)) {
		http_respond_error(c, 400, "invalid_field", "field `bindings` must be an array of "
				   "at most 64 bindings");
		goto out;
	}
	if (binds && binds->n) {
		cr.binds = xcalloc(binds->n, sizeof(*cr.binds));
		for (size_t i = 0; i < binds->n; i++, cr.n_binds++)
			if (parse_binding(a, c, who->tenant, binds->items[i], &cr.binds[i]) < 0)
				goto out;
	} else if (!binds) {
		cr.binds = xcalloc(1, sizeof(*cr.binds));   /* default: the whole tenant */
		cr.n_binds = 1;
	}
	cr.id = random_id("cred_", 8);
	cr.tenant = xstrdup(who->tenant);
	cr.version = 1;
	cr.created_at = wall_ms();
	ref = cred_ref(cr.id, cr.version);
	if (vault_put(a->vault, ref, value->str, value->str_len, &err) < 0) {
		internal(c, "store the secret", &err);
		goto out;
	}
	r = cred_insert(a->db, &cr, &err);
	if (r < 0) {
		vault_del(a->vault, ref, NULL);
		if (r == -EEXIST)
			http_respond_error(c, 409, "conflict", "a credential named `%s` exists",
					   cr.name);
		else
			internal(c, "store the credential", &err);
		goto out;
	}
	cred_audit(a->db, cr.tenant, NULL, cr.id, NULL, NULL, NULL, "created", NULL, NULL);
	log_info("credential %s (%s) created for tenant %s", cr.id, cr.name, cr.tenant);
	respond_cred(c, 201, &cr);   /* with Location: /v1/credentials/{id} */
out:
	/* the parsed value lives in body; scrub it before freeing */
	if (body && (value = json_get(body, "value")) && value->type == JSON_STR)
		explicit_bzero(value->str, value->str_len);
	json_free(body);
	cred_free(&cr);
}

static void cred_list_all(struct api *a, struct http_req *req, struct http_conn *c,
			  const struct api_principal *who)
{
	struct cred *v = NULL;
	size_t n = 0, shown = 0, last = 0;
	bool more = false;
	struct page pg;
	struct buf out;
	struct jw w;
	err_t err = { 0 };

	/* newest first: (created_at, id) descending, as cred_list orders them */
	if (page_from_req(&pg, req, true, c) < 0)
		return;
	if (cred_list(a->db, who->tenant, &v, &n, &err) < 0) {
		internal(c, "list credentials", &err);
		return;
	}
	buf_init(&out);
	jw_init(&w, &out);
	jw_obj(&w);
	jw_key(&w, "credentials");
	jw_arr(&w);
	for (size_t i = 0; i < n && !more; i++) {
		if (!page_after(&pg, v[i].created_at, v[i].id))
			continue;
		if (shown == pg.limit) {
			more = true;
			break;
		}
		cred_write(&w, &v[i]);
		last = i;
		shown++;
	}
	jw_end(&w);
	jw_key(&w, "next_token");
	if (more) {
		_cleanup_free_ char *t = page_token(v[last].created_at, v[last].id);
		jw_str(&w, t);
	} else {
		jw_null(&w);
	}
	jw_end(&w);
	http_respond_json(c, 200, out.data);
	buf_free(&out);
	cred_list_free(v, n);
}

static void audit_list(struct api *a, struct http_req *req, struct http_conn *c,
		       const struct api_principal *who)
{
	_cleanup_free_ char *sbx = http_query_param(req, "sandbox");
	_cleanup_free_ char *cid = http_query_param(req, "credential");
	_cleanup_free_ char *lim = http_query_param(req, "limit");
	_cleanup_free_ char *dec = http_query_param(req, "decision");
	struct db_rows rows;
	long limit = 100;
	struct buf out;
	struct jw w;
	err_t err = { 0 };

	if (lim) {
		char *end;
		limit = strtol(lim, &end, 10);
		if (*end || end == lim || limit < 1 || limit > 1000) {
			http_respond_error(c, 400, "invalid_query", "`limit` must be 1 to 1000");
			return;
		}
	}
	if (db_query(a->db, &rows, &err,
		     "SELECT at, sandbox_id, cred_id, host, method, path, decision, detail"
		     " FROM credential_audit WHERE tenant_id = ?"
		     " AND (? IS NULL OR sandbox_id = ?) AND (? IS NULL OR cred_id = ?)"
		     " AND (? IS NULL OR decision = ?) ORDER BY id DESC LIMIT ?",
		     "sssssssi", who->tenant, sbx, sbx, cid, cid, dec, dec, (int64_t)limit) < 0) {
		internal(c, "read the audit log", &err);
		return;
	}
	buf_init(&out);
	jw_init(&w, &out);
	jw_obj(&w);
	jw_key(&w, "records");
	jw_arr(&w);
	for (int i = 0; i < rows.n_rows; i++) {
		static const char *const keys[] = { "at", "sandbox", "credential", "host",
						    "method", "path", "decision", "detail" };
		char ts[ISO_TIME_MAX];

		jw_obj(&w);
		iso_time(db_cell_int(&rows, i, 0), ts);
		jw_key(&w, keys[0]);
		jw_str(&w, ts);
		for (int k = 1; k < 8; k++) {
			jw_key(&w, keys[k]);
			jw_str(&w, db_cell(&rows, i, k));
		}
		jw_end(&w);
	}
	jw_end(&w);
	jw_end(&w);
	db_rows_free(&rows);
	http_respond_json(c, 200, out.data);
	buf_free(&out);
}

/* Load id for the caller or answer 404/500; returns 0 when loaded. */
static int load_own(struct api *a, struct http_conn *c, const char *id,
		    const struct api_principal *who, struct cred *cr)
{
	err_t err = { 0 };
	int r = cred_load(a->db, id, who->tenant, cr, &err);

	if (r == -ENOENT)
		http_respond_error(c, 404, "not_found", "credential `%s` not found", id);
	else if (r < 0)
		internal(c, "load the credential", &err);
	return r;
}

static void cred_revoke(struct api *a, struct http_conn *c, struct cred *cr)
{
	_cleanup_free_ char *ref = cred_ref(cr->id, cr->version);
	err_t err = { 0 };

	if (!cr->revoked_at) {
		int64_t now = wall_ms();
		if (db_exec(a->db, &err, "UPDATE credentials SET revoked_at = ? WHERE id = ?"
			    " AND revoked_at IS NULL", "is", now, cr->id) < 0) {
			internal(c, "revoke the credential", &err);
			return;
		}
		cr->revoked_at = now;
		cred_audit(a->db, cr->tenant, NULL, cr->id, NULL, NULL, NULL, "revoked", NULL, NULL);
		log_info("credential %s revoked", cr->id);
	}
	/* Erase the value even on a repeated revoke (a crash may have come
	 * between the two steps). */
	if (a->vault && vault_del(a->vault, ref, &err) < 0)
		log_err("credential %s: %s", cr->id, err.msg);
	respond_cred(c, 200, cr);
}

static void cred_rotate(struct api *a, struct http_req *req, struct http_conn *c,
			struct cred *cr)
{
	static const char *const allowed[] = { "value", "schemes", "ports", NULL };
	_cleanup_free_ char *old_ref = NULL, *new_ref = NULL, *schemes = NULL, *ports = NULL;
	struct cred_transport t = cr->transport;
	const json *value;
	err_t err = { 0 };
	json *body;
	int r;

	if (!need_vault(a, c))
		return;
	body = api_parse_body(req, c, allowed);
	if (!body)
		return;
	value = json_get(body, "value");
	if (cr->revoked_at) {
		http_respond_error(c, 409, "conflict", "credential `%s` is revoked", cr->id);
		goto out;
	}
	if (!value_ok(value)) {
		http_respond_error(c, 400, "invalid_field", "field `value` is required: 1 to %d "
				   "bytes of printable ASCII", CRED_VALUE_MAX);
		goto out;
	}
	/* The one way to change where an existing credential may go (e.g. a
	 * credential from before schemes existed that must reach a plain-HTTP
	 * host): with a new value, as the rest of the spec is fixed at create.
	 * Either field given: both as at create (an absent one defaults). */
	if ((json_get(body, "schemes") || json_get(body, "ports")) &&
	    cred_parse_transport(body, &t, &err) < 0) {
		http_respond_error(c, 400, "invalid_field", "%s", err.msg);
		goto out;
	}
	schemes = cred_transport_text(&t, false);
	ports = cred_transport_text(&t, true);
	old_ref = cred_ref(cr->id, cr->version);
	new_ref = cred_ref(cr->id, cr->version + 1);
	if (vault_put(a->vault, new_ref, value->str, value->str_len, &err) < 0) {
		internal(c, "store the secret", &err);
		goto out;
	}
	/* Only one concurrent rotation wins the version. */
	r = db_exec(a->db, &err, "UPDATE credentials SET version = ?, rotated_at = ?, schemes = ?,"
		    " ports = ? WHERE id = ? AND version = ? AND revoked_at IS NULL", "iisssi",
		    (int64_t)cr->version + 1, wall_ms(), schemes, ports, cr->id,
		    (int64_t)cr->version);
	if (r <= 0) {
		vault_del(a->vault, new_ref, NULL);
		if (r == 0)
			http_respond_error(c, 409, "conflict", "credential `%s` changed meanwhile; "
					   "retry", cr->id);
		else
			internal(c, "rotate the credential", &err);
		goto out;
	}
	vault_del(a->vault, old_ref, NULL);
	cr->transport = t;
	cr->version++;
	cr->rotated_at = wall_ms();
	{
		/* where the value may go is part of the record when it changed */
		_cleanup_free_ char *moved = json_get(body, "schemes") || json_get(body, "ports") ?
			xasprintf("schemes %s, ports %s", schemes, ports) : NULL;
		cred_audit(a->db, cr->tenant, NULL, cr->id, NULL, NULL, NULL, "rotated", moved,
			   NULL);
		log_info("credential %s rotated to version %u%s%s", cr->id, cr->version,
			 moved ? "; " : "", moved ? moved : "");
	}
	respond_cred(c, 200, cr);
out:
	if (value && value->type == JSON_STR)
		explicit_bzero(value->str, value->str_len);
	json_free(body);
}

static void cred_bind(struct api *a, struct http_req *req, struct http_conn *c,
		      const struct api_principal *who, struct cred *cr, bool bind)
{
	static const char *const allowed[] = { "tenant", "project", "sandbox", NULL };
	struct cred_binding b = { 0 };
	err_t err = { 0 };
	json *body;
	int r;

	body = api_parse_body(req, c, allowed);
	if (!body)
		return;
	if (parse_binding(a, c, who->tenant, body, &b) < 0) {
		json_free(body);
		return;
	}
	json_free(body);
	static const char *const kinds[] = { "tenant", "project", "sandbox" };
	if (bind)
		r = db_exec(a->db, &err, "INSERT INTO credential_bindings(cred_id, kind, value)"
			    " VALUES(?, ?, ?) ON CONFLICT DO NOTHING", "sss", cr->id, kinds[b.kind],
			    b.value ? b.value : "");
	else
		r = db_exec(a->db, &err, "DELETE FROM credential_bindings WHERE cred_id = ? AND"
			    " kind = ? AND value = ?", "sss", cr->id, kinds[b.kind],
			    b.value ? b.value : "");
	free(b.value);
	if (r < 0) {
		internal(c, "change the bindings", &err);
		return;
	}
	{
		_cleanup_free_ char *cid = xstrdup(cr->id);
		cred_free(cr);
		if (load_own(a, c, cid, who, cr) < 0)
			return;
	}
	respond_cred(c, 200, cr);
}

void api_handle_credentials(struct api *a, struct http_req *req, struct http_conn *c,
			    const struct api_principal *who)
{
	const char *rest = req->path + strlen("/v1/credentials");
	const char *m = req->method;
	_cleanup_free_ char *id = NULL;
	const char *op;
	struct cred cr = { 0 };

	if (*rest == '\0') {
		if (strcmp(m, "POST") == 0)
			cred_create(a, req, c, who);
		else if (strcmp(m, "GET") == 0)
			cred_list_all(a, req, c, who);
		else
			api_method_not_allowed(c, "GET, POST");
		return;
	}
	rest++;   /* past '/' */
	if (strcmp(rest, "audit") == 0) {
		if (strcmp(m, "GET") == 0)
			audit_list(a, req, c, who);
		else
			api_method_not_allowed(c, "GET");
		return;
	}
	op = strchr(rest, '/');
	id = op ? xstrndup(rest, (size_t)(op - rest)) : xstrdup(rest);
	op = op ? op + 1 : "";
	if (*op && strcmp(op, "rotate") != 0 && strcmp(op, "bind") != 0 &&
	    strcmp(op, "unbind") != 0) {
		http_respond_error(c, 404, "not_found", "no such endpoint");
		return;
	}
	if (load_own(a, c, id, who, &cr) < 0)
		return;
	if (*op == '\0') {
		if (strcmp(m, "GET") == 0)
			respond_cred(c, 200, &cr);
		else if (strcmp(m, "DELETE") == 0)
			cred_revoke(a, c, &cr);
		else
			api_method_not_allowed(c, "GET, DELETE");
	} else if (strcmp(m, "POST") != 0) {
		api_method_not_allowed(c, "POST");
	} else if (strcmp(op, "rotate") == 0) {
		cred_rotate(a, req, c, &cr);
	} else {
		cred_bind(a, req, c, who, &cr, strcmp(op, "bind") == 0);
	}
	cred_free(&cr);
}
