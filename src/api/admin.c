/* admin.c - the endpoints the api serves itself: tenants and keys.
 * The router (api.c) has already checked that the caller is an admin. */
#include <errno.h>
#include <string.h>

#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/util.h"
#include "api-internal.h"

#define NAME_MAX_LEN 64
#define KEY_NAME_MAX_LEN 128

/* Tenant names: [A-Za-z0-9][A-Za-z0-9._-]{0,63}. They appear in logs and CLI
 * tables, so no spaces or control characters. */
static bool tenant_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > NAME_MAX_LEN)
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			     (ch >= '0' && ch <= '9');
		if (!alnum && (i == 0 || (ch != '.' && ch != '_' && ch != '-')))
			return false;
	}
	return true;
}

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
	if (name_v->type != JSON_STR || !tenant_name_ok(name_v->str)) {
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
	http_respond_json(c, 201, out.data);
	buf_free(&out);
	json_free(body);
}

static void tenant_list(struct api *a, struct http_conn *c)
{
	struct db_rows rows;
	struct buf out;
	struct jw w;
	err_t err = { 0 };

	if (db_query(a->db, &rows, &err,
		     "SELECT id, name, created_at FROM tenants ORDER BY created_at, name", NULL) < 0) {
		log_err("list tenants: %s", err.msg);
		http_respond_error(c, 500, "internal", "cannot list tenants");
		return;
	}
	buf_init(&out);
	jw_init(&w, &out);
	jw_obj(&w);
	jw_key(&w, "tenants");
	jw_arr(&w);
	for (int i = 0; i < rows.n_rows; i++)
		write_tenant(&w, db_cell(&rows, i, 0), db_cell(&rows, i, 1),
			     db_cell_int(&rows, i, 2));
	jw_end(&w);
	jw_end(&w);
	db_rows_free(&rows);
	http_respond_json(c, 200, out.data);
	buf_free(&out);
}

void api_handle_tenants(struct api *a, struct http_req *req, struct http_conn *c,
			const struct api_principal *who)
{
	if (strcmp(req->method, "POST") == 0)
		tenant_create(a, req, c);
	else if (strcmp(req->method, "GET") == 0)
		tenant_list(a, c);
	else
		api_method_not_allowed(c, "GET, POST");
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
		http_respond_json(c, 201, out.data);
		buf_free(&out);
	}
out:
	json_free(body);
}

void api_handle_keys(struct api *a, struct http_req *req, struct http_conn *c,
		     const struct api_principal *who)
{
	if (strcmp(req->method, "POST") == 0)
		key_create(a, req, c);
	else
		api_method_not_allowed(c, "POST");
}
