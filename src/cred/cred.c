/* Credentials: validation, storage, scope resolution, audit, placeholders. */
#include "cred.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "../lib/ident.h"
#include "../lib/util.h"

static const char *const inject_names[] = { [CRED_HEADER] = "header", [CRED_BASIC] = "basic",
					    [CRED_QUERY] = "query" };
static const char *const scope_names[] = { [CRED_SCOPE_TENANT] = "tenant",
					   [CRED_SCOPE_PROJECT] = "project",
					   [CRED_SCOPE_SANDBOX] = "sandbox" };

static void strv_free(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

void cred_free(struct cred *c)
{
	free(c->id);
	free(c->tenant);
	free(c->name);
	free(c->env);
	free(c->header);
	free(c->format);
	free(c->username);
	free(c->param);
	strv_free(c->hosts, c->n_hosts);
	free(c->path_prefix);
	strv_free(c->methods, c->n_methods);
	for (size_t i = 0; i < c->n_binds; i++)
		free(c->binds[i].value);
	free(c->binds);
	memset(c, 0, sizeof(*c));
}

/* ---- validation ---------------------------------------------------------- */

/* Names and binding values are checked with ident_name_anycase_ok. */
_Static_assert(CRED_NAME_MAX == IDENT_MAX, "a credential name's bound is ident.h's");

static bool env_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 128 || isdigit((unsigned char)s[0]))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '_')
			return false;
	return true;
}

/* RFC 7230 token (header names, methods). */
static bool token_ok(const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n == 0 || n > max)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr("!#$%&'*+-.^_`|~", s[i]))
			return false;
	return true;
}

/* Printable ASCII without CR/LF: safe in a header value or request line. */
static bool printable(const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n > max)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
			return false;
	return true;
}

/* A DNS name (labels of [a-z0-9-], 1..63, total <= 253), optionally "*."
 * in front. Lowercased in place. */
static bool host_pattern_ok(char *s)
{
	char *p = s;
	size_t n;

	for (char *q = s; *q; q++)
		*q = (char)tolower((unsigned char)*q);
	if (strncmp(p, "*.", 2) == 0)
		p += 2;
	n = strlen(p);
	if (n == 0 || n > 253)
		return false;
	while (*p) {
		size_t l = strcspn(p, ".");
		if (l == 0 || l > 63 || p[0] == '-' || p[l - 1] == '-')
			return false;
		for (size_t i = 0; i < l; i++)
			if (!isalnum((unsigned char)p[i]) && p[i] != '-')
				return false;
		p += l;
		if (*p == '.' && *++p == '\0')
			return false;
	}
	return true;
}

/* "2026-12-01T10:00:00Z" (optionally with .fraction) or unix seconds. */
static int parse_time(const json *v, int64_t *ms)
{
	struct tm tm = { 0 };
	const char *end;

	if (v->type == JSON_NUM && v->is_int && v->i > 0 && v->i < (int64_t)1 << 40) {
		*ms = v->i * 1000;
		return 0;
	}
	if (v->type != JSON_STR)
		return -1;
	end = strptime(v->str, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!end)
		return -1;
	if (*end == '.') {
		end++;
		if (!isdigit((unsigned char)*end))
			return -1;
		while (isdigit((unsigned char)*end))
			end++;
	}
	if (strcmp(end, "Z") != 0)
		return -1;
	*ms = (int64_t)timegm(&tm) * 1000;
	return 0;
}

static int str_array(const json *v, size_t max, char ***out, size_t *n)
{
	if (!v || v->type != JSON_ARR || v->n == 0 || v->n > max)
		return -1;
	*out = xcalloc(v->n, sizeof(char *));
	*n = v->n;
	for (size_t i = 0; i < v->n; i++) {
		if (v->items[i]->type != JSON_STR)
			return -1;
		(*out)[i] = xstrdup(v->items[i]->str);
	}
	return 0;
}

static int parse_inject(const json *v, struct cred *c, err_t *err)
{
	static const char *const keys[] = { "type", "header", "format", "username", "param", NULL };
	const char *type;
	err_t kerr = { 0 };

	if (!v || v->type != JSON_OBJ)
		return err_set(err, EINVAL, "field `inject` is required: an object with `type` "
				  "header, basic or query");
	if (json_check_keys(v, keys, &kerr) < 0)
		return err_set(err, EINVAL, "field `inject`: %s", kerr.msg);
	type = json_get_str(v, "type");
	if (!type)
		return err_set(err, EINVAL, "field `inject.type` must be header, basic or query");
	if (strcmp(type, "header") == 0) {
		const char *h = json_get_str(v, "header"), *f = json_get_str(v, "format");
		const char *hit;

		if ((json_get(v, "header") && !h) || (json_get(v, "format") && !f))
			return err_set(err, EINVAL, "fields `inject.header` and `inject.format` "
					  "must be strings");
		h = h ? h : "Authorization";
		f = f ? f : (strcasecmp(h, "Authorization") == 0 ? "Bearer {value}" : "{value}");
		if (!token_ok(h, 128))
			return err_set(err, EINVAL, "field `inject.header` must be a header name");
		hit = strstr(f, "{value}");
		if (!printable(f, 512) || !hit || strstr(hit + 1, "{value}"))
			return err_set(err, EINVAL, "field `inject.format` must be printable ASCII "
					  "with `{value}` exactly once");
		c->inject = CRED_HEADER;
		c->header = xstrdup(h);
		c->format = xstrdup(f);
	} else if (strcmp(type, "basic") == 0) {
		const char *u = json_get_str(v, "username");

		if (!u || !printable(u, 256) || strchr(u, ':'))
			return err_set(err, EINVAL, "field `inject.username` is required for basic "
					  "auth: printable ASCII without `:`");
		c->inject = CRED_BASIC;
		c->username = xstrdup(u);
	} else if (strcmp(type, "query") == 0) {
		const char *p = json_get_str(v, "param");

		if (!p || !token_ok(p, 128))
			return err_set(err, EINVAL, "field `inject.param` is required for query "
					  "injection: a parameter name");
		c->inject = CRED_QUERY;
		c->param = xstrdup(p);
	} else {
		return err_set(err, EINVAL, "field `inject.type` must be header, basic or query");
	}
	return 0;
}

static const char *const replace_names[] = { "headers", "body", "target" };

/* replace_in: absent, null or an array of distinct names from replace_names. */
static int parse_replace_in(const json *v, unsigned *out, err_t *err)
{
	*out = 0;
	if (!v || v->type == JSON_NULL)
		return 0;
	if (v->type != JSON_ARR || v->n > ARRAY_SIZE(replace_names))
		goto bad;
	for (size_t i = 0; i < v->n; i++) {
		size_t k;

		if (v->items[i]->type != JSON_STR)
			goto bad;
		for (k = 0; k < ARRAY_SIZE(replace_names); k++)
			if (strcmp(v->items[i]->str, replace_names[k]) == 0)
				break;
		if (k == ARRAY_SIZE(replace_names) || (*out & (1u << k)))
			goto bad;
		*out |= 1u << k;
	}
	return 0;
bad:
	return err_set(err, EINVAL, "field `replace_in` must be an array of distinct values "
			  "among \"headers\", \"body\" and \"target\"");
}

int cred_parse_spec(const json *body, struct cred *c, err_t *err)
{
	const json *v;
	const char *s;

	s = json_get_str(body, "name");
	if (!s || !ident_name_anycase_ok(s))
		return err_set(err, EINVAL, "field `name` is required: [A-Za-z0-9][A-Za-z0-9._-]{0,63}");
	c->name = xstrdup(s);
	v = json_get(body, "env");
	if (v && v->type != JSON_NULL) {
		if (v->type != JSON_STR || !env_ok(v->str))
			return err_set(err, EINVAL, "field `env` must be an environment variable "
					  "name ([A-Za-z_][A-Za-z0-9_]*)");
		c->env = xstrdup(v->str);
	}
	if (parse_inject(json_get(body, "inject"), c, err) < 0)
		return -EINVAL;
	if (str_array(json_get(body, "hosts"), CRED_HOSTS_MAX, &c->hosts, &c->n_hosts) < 0)
		return err_set(err, EINVAL, "field `hosts` is required: 1 to %d host names "
				  "(exact or `*.suffix`)", CRED_HOSTS_MAX);
	for (size_t i = 0; i < c->n_hosts; i++)
		if (!host_pattern_ok(c->hosts[i]))
			return err_set(err, EINVAL, "field `hosts`: `%s` is not a host name or "
					  "`*.suffix` pattern", c->hosts[i]);
	v = json_get(body, "path_prefix");
	if (v && v->type != JSON_NULL) {
		if (v->type != JSON_STR || v->str[0] != '/' || !printable(v->str, 1024) ||
		    strchr(v->str, ' ') || !cred_path_prefix_ok(v->str))
			return err_set(err, EINVAL, "field `path_prefix` must be a path starting "
					  "with `/`, without `?`, `#`, `;`, `\\`, `//`, an encoded "
					  "`/` or `\\`, or a bad `%%` escape");
		c->path_prefix = xstrdup(v->str);
	}
	v = json_get(body, "methods");
	if (v && v->type != JSON_NULL) {
		if (str_array(v, 16, &c->methods, &c->n_methods) < 0)
			return err_set(err, EINVAL, "field `methods` must be 1 to 16 method names");
		for (size_t i = 0; i < c->n_methods; i++) {
			for (char *q = c->methods[i]; *q; q++)
				*q = (char)toupper((unsigned char)*q);
			if (!token_ok(c->methods[i], 16))
				return err_set(err, EINVAL, "field `methods`: `%s` is not a method",
					       c->methods[i]);
		}
	}
	if (parse_replace_in(json_get(body, "replace_in"), &c->replace_in, err) < 0)
		return -EINVAL;
	v = json_get(body, "rate_limit");
	if (v && v->type != JSON_NULL) {
		static const char *const keys[] = { "per_minute", NULL };
		bool bad = false;
		int64_t per;

		if (v->type != JSON_OBJ || json_check_keys(v, keys, NULL) < 0)
			return err_set(err, EINVAL, "field `rate_limit` must be {\"per_minute\": N}");
		per = json_get_int(v, "per_minute", 0, &bad);
		if (bad || per < 0 || per > 1000000)
			return err_set(err, EINVAL, "field `rate_limit.per_minute` must be an "
					  "integer from 0 to 1000000");
		c->rate_per_min = (uint32_t)per;
	}
	v = json_get(body, "expires_at");
	if (v && v->type != JSON_NULL && parse_time(v, &c->expires_at) < 0)
		return err_set(err, EINVAL, "field `expires_at` must be a UTC time "
				  "(\"2026-12-31T23:59:59Z\") or unix seconds");
	return 0;
}

int cred_parse_binding(const json *v, struct cred_binding *b, err_t *err)
{
	static const char *const keys[] = { "tenant", "project", "sandbox", NULL };
	const json *t, *p, *s;

	memset(b, 0, sizeof(*b));
	if (!v || v->type != JSON_OBJ || v->n != 1 || json_check_keys(v, keys, NULL) < 0)
		goto bad;
	t = json_get(v, "tenant");
	p = json_get(v, "project");
	s = json_get(v, "sandbox");
	if (t && t->type == JSON_BOOL && t->b) {
		b->kind = CRED_SCOPE_TENANT;
		return 0;
	}
	if (p && p->type == JSON_STR && ident_name_anycase_ok(p->str)) {
		b->kind = CRED_SCOPE_PROJECT;
		b->value = xstrdup(p->str);
		return 0;
	}
	if (s && s->type == JSON_STR && ident_name_anycase_ok(s->str)) {
		b->kind = CRED_SCOPE_SANDBOX;
		b->value = xstrdup(s->str);
		return 0;
	}
bad:
	return err_set(err, EINVAL, "a binding is one of {\"tenant\": true}, "
			  "{\"project\": \"LABEL\"} or {\"sandbox\": \"ID\"}");
}

/* ---- JSON out ------------------------------------------------------------ */

static void iso(struct jw *w, int64_t ms)
{
	char out[32];
	time_t t = (time_t)(ms / 1000);
	struct tm tm;

	if (!ms) {
		jw_null(w);
		return;
	}
	gmtime_r(&t, &tm);
	strftime(out, sizeof(out), "%Y-%m-%dT%H:%M:%SZ", &tm);
	jw_str(w, out);
}

static void strv_write(struct jw *w, char **v, size_t n)
{
	if (!v) {
		jw_null(w);
		return;
	}
	jw_arr(w);
	for (size_t i = 0; i < n; i++)
		jw_str(w, v[i]);
	jw_end(w);
}

/* The stored spec: everything but identity, times and bindings. */
static void spec_write(struct jw *w, const struct cred *c)
{
	jw_key(w, "inject");
	jw_obj(w);
	jw_key(w, "type");
	jw_str(w, inject_names[c->inject]);
	if (c->inject == CRED_HEADER) {
		jw_key(w, "header");
		jw_str(w, c->header);
		jw_key(w, "format");
		jw_str(w, c->format);
	} else if (c->inject == CRED_BASIC) {
		jw_key(w, "username");
		jw_str(w, c->username);
	} else {
		jw_key(w, "param");
		jw_str(w, c->param);
	}
	jw_end(w);
	jw_key(w, "hosts");
	strv_write(w, c->hosts, c->n_hosts);
	jw_key(w, "path_prefix");
	jw_str(w, c->path_prefix);
	jw_key(w, "methods");
	strv_write(w, c->methods, c->n_methods);
	jw_key(w, "replace_in");
	jw_arr(w);
	for (size_t k = 0; k < ARRAY_SIZE(replace_names); k++)
		if (c->replace_in & (1u << k))
			jw_str(w, replace_names[k]);
	jw_end(w);
	jw_key(w, "rate_limit");
	jw_obj(w);
	jw_key(w, "per_minute");
	jw_uint(w, c->rate_per_min);
	jw_end(w);
}

void cred_write(struct jw *w, const struct cred *c)
{
	int64_t now = wall_ms();

	jw_obj(w);
	jw_key(w, "id");
	jw_str(w, c->id);
	jw_key(w, "name");
	jw_str(w, c->name);
	jw_key(w, "env");
	jw_str(w, c->env);
	spec_write(w, c);
	jw_key(w, "expires_at");
	iso(w, c->expires_at);
	jw_key(w, "version");
	jw_uint(w, c->version);
	jw_key(w, "status");
	jw_str(w, c->revoked_at ? "revoked" :
		  (c->expires_at && c->expires_at <= now) ? "expired" : "active");
	jw_key(w, "bindings");
	jw_arr(w);
	for (size_t i = 0; i < c->n_binds; i++) {
		jw_obj(w);
		jw_key(w, scope_names[c->binds[i].kind]);
		if (c->binds[i].kind == CRED_SCOPE_TENANT)
			jw_bool(w, true);
		else
			jw_str(w, c->binds[i].value);
		jw_end(w);
	}
	jw_end(w);
	jw_key(w, "created_at");
	iso(w, c->created_at);
	jw_key(w, "rotated_at");
	iso(w, c->rotated_at);
	jw_key(w, "revoked_at");
	iso(w, c->revoked_at);
	jw_end(w);
}

/* ---- DB ------------------------------------------------------------------ */

#define CRED_COLS "id, tenant_id, name, env, spec, expires_at, version, created_at, " \
		  "rotated_at, revoked_at"

int cred_insert(struct db *db, const struct cred *c, err_t *err)
{
	struct buf spec;
	struct jw w;
	int r;

	buf_init(&spec);
	jw_init(&w, &spec);
	jw_obj(&w);
	spec_write(&w, c);
	jw_end(&w);
	r = db_tx_begin(db, err);
	if (r < 0)
		goto out;
	r = db_exec(db, err,
		    "INSERT INTO credentials(" CRED_COLS ") VALUES(?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL)",
		    "sssssiii", c->id, c->tenant, c->name, c->env, spec.data,
		    (int64_t)c->expires_at, (int64_t)c->version, (int64_t)c->created_at);
	for (size_t i = 0; r >= 0 && i < c->n_binds; i++)
		r = db_exec(db, err, "INSERT INTO credential_bindings(cred_id, kind, value)"
			    " VALUES(?, ?, ?) ON CONFLICT DO NOTHING", "sss", c->id, scope_names[c->binds[i].kind],
			    c->binds[i].value ? c->binds[i].value : "");
	if (r < 0) {
		db_tx_rollback(db);
		goto out;
	}
	r = db_tx_commit(db, err);
out:
	buf_free(&spec);
	return r < 0 ? r : 0;
}

static int scope_parse(const char *s)
{
	for (size_t i = 0; i < ARRAY_SIZE(scope_names); i++)
		if (strcmp(s, scope_names[i]) == 0)
			return (int)i;
	return -1;
}

static int load_binds(struct db *db, struct cred *c, err_t *err)
{
	struct db_rows rows;
	int r;

	r = db_query(db, &rows, err, "SELECT kind, value FROM credential_bindings WHERE cred_id = ?"
		     " ORDER BY kind, value", "s", c->id);
	if (r < 0)
		return r;
	c->binds = xcalloc(rows.n_rows ? rows.n_rows : 1, sizeof(*c->binds));
	for (int i = 0; i < rows.n_rows; i++) {
		int k = scope_parse(db_cell(&rows, i, 0));
		if (k < 0)
			continue;
		c->binds[c->n_binds].kind = k;
		if (k != CRED_SCOPE_TENANT)
			c->binds[c->n_binds].value = xstrdup(db_cell(&rows, i, 1));
		c->n_binds++;
	}
	db_rows_free(&rows);
	return 0;
}

/* Row i of a CRED_COLS query into c (spec parsed back). */
static int from_row(const struct db_rows *rows, int i, struct cred *c, err_t *err)
{
	const char *spec = db_cell(rows, i, 4), *env = db_cell(rows, i, 3);
	json *j;
	int r;

	memset(c, 0, sizeof(*c));
	j = json_parse(spec ? spec : "", spec ? strlen(spec) : 0, err);
	if (!j)
		return -EIO;
	/* The stored spec was written by spec_write, so it parses; name/env
	 * come from columns. */
	c->name = xstrdup(db_cell(rows, i, 2));
	r = parse_inject(json_get(j, "inject"), c, err);
	if (r == 0 && str_array(json_get(j, "hosts"), CRED_HOSTS_MAX, &c->hosts, &c->n_hosts) < 0)
		r = err_set(err, EIO, "credential %s: bad stored hosts", db_cell(rows, i, 0));
	if (r == 0) {
		const json *m = json_get(j, "methods");
		const char *pp = json_get_str(j, "path_prefix");
		const json *rl = json_get(j, "rate_limit");

		if (m && m->type == JSON_ARR)
			str_array(m, 16, &c->methods, &c->n_methods);
		c->path_prefix = pp ? xstrdup(pp) : NULL;
		c->rate_per_min = rl ? (uint32_t)json_get_int(rl, "per_minute", 0, NULL) : 0;
		/* A spec stored before replace_in existed has none: the value
		 * then goes only where inject says, like any new credential. */
		parse_replace_in(json_get(j, "replace_in"), &c->replace_in, NULL);
	}
	json_free(j);
	if (r < 0)
		return r;
	c->id = xstrdup(db_cell(rows, i, 0));
	c->tenant = xstrdup(db_cell(rows, i, 1));
	c->env = env ? xstrdup(env) : NULL;
	c->expires_at = db_cell_int(rows, i, 5);
	c->version = (uint32_t)db_cell_int(rows, i, 6);
	c->created_at = db_cell_int(rows, i, 7);
	c->rotated_at = db_cell_int(rows, i, 8);
	c->revoked_at = db_cell_int(rows, i, 9);
	return 0;
}

int cred_load(struct db *db, const char *id, const char *tenant, struct cred *c, err_t *err)
{
	struct db_rows rows;
	int r;

	r = db_query(db, &rows, err, "SELECT " CRED_COLS " FROM credentials WHERE id = ?"
		     " AND (? IS NULL OR tenant_id = ?)", "sss", id, tenant, tenant);
	if (r < 0)
		return r;
	if (rows.n_rows == 0) {
		db_rows_free(&rows);
		return err_set(err, ENOENT, "credential `%s` not found", id);
	}
	r = from_row(&rows, 0, c, err);
	db_rows_free(&rows);
	if (r == 0 && (r = load_binds(db, c, err)) < 0)
		cred_free(c);
	return r;
}

static int load_many(struct db *db, struct db_rows *rows, struct cred **out, size_t *n,
		     err_t *err)
{
	struct cred *v = xcalloc(rows->n_rows ? rows->n_rows : 1, sizeof(*v));
	int r = 0;

	*n = 0;
	for (int i = 0; i < rows->n_rows && r == 0; i++) {
		r = from_row(rows, i, &v[*n], err);
		if (r == 0 && (r = load_binds(db, &v[*n], err)) < 0)
			cred_free(&v[*n]);
		if (r == 0)
			(*n)++;
	}
	if (r < 0) {
		cred_list_free(v, *n);
		*n = 0;
		return r;
	}
	*out = v;
	return 0;
}

int cred_list(struct db *db, const char *tenant, struct cred **out, size_t *n, err_t *err)
{
	struct db_rows rows;
	int r;

	r = db_query(db, &rows, err, "SELECT " CRED_COLS " FROM credentials WHERE tenant_id = ?"
		     " ORDER BY created_at DESC, id DESC", "s", tenant);
	if (r < 0)
		return r;
	r = load_many(db, &rows, out, n, err);
	db_rows_free(&rows);
	return r;
}

void cred_list_free(struct cred *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		cred_free(&v[i]);
	free(v);
}

/* Specificity of the best binding of c for this sandbox; -1 if none. */
static int rank(const struct cred *c, const char *sandbox_id, const char *project)
{
	int best = -1;

	for (size_t i = 0; i < c->n_binds; i++) {
		const struct cred_binding *b = &c->binds[i];
		int r = -1;

		if (b->kind == CRED_SCOPE_TENANT)
			r = 0;
		else if (b->kind == CRED_SCOPE_PROJECT && project && strcmp(b->value, project) == 0)
			r = 1;
		else if (b->kind == CRED_SCOPE_SANDBOX && sandbox_id &&
			 strcmp(b->value, sandbox_id) == 0)
			r = 2;
		if (r > best)
			best = r;
	}
	return best;
}

int cred_resolve(struct db *db, const char *tenant, const char *sandbox_id, const char *project,
		 struct cred **out, size_t *n, err_t *err)
{
	struct cred *all = NULL;
	size_t n_all = 0, kept = 0;
	int *ranks;
	int r;

	*out = NULL;
	*n = 0;
	{
		struct db_rows rows;
		r = db_query(db, &rows, err, "SELECT " CRED_COLS " FROM credentials"
			     " WHERE tenant_id = ? AND revoked_at IS NULL"
			     " AND (expires_at = 0 OR expires_at > ?) ORDER BY created_at DESC, id",
			     "si", tenant, wall_ms());
		if (r < 0)
			return r;
		r = load_many(db, &rows, &all, &n_all, err);
		db_rows_free(&rows);
		if (r < 0)
			return r;
	}
	ranks = xcalloc(n_all ? n_all : 1, sizeof(int));
	for (size_t i = 0; i < n_all; i++)
		ranks[i] = rank(&all[i], sandbox_id, project);
	/* For each key (env, else name) keep the highest rank; on a tie the
	 * newest (earlier in the list) wins. */
	for (size_t i = 0; i < n_all; i++) {
		const char *key_i = all[i].env ? all[i].env : all[i].name;
		if (ranks[i] < 0)
			continue;
		for (size_t j = 0; j < n_all; j++) {
			const char *key_j = all[j].env ? all[j].env : all[j].name;
			if (j == i || ranks[j] < 0 || strcmp(key_i, key_j) != 0)
				continue;
			if (ranks[j] > ranks[i] || (ranks[j] == ranks[i] && j < i)) {
				ranks[i] = -2;
				break;
			}
		}
	}
	for (size_t i = 0; i < n_all; i++) {
		if (ranks[i] >= 0)
			all[kept++] = all[i];
		else
			cred_free(&all[i]);
	}
	free(ranks);
	*out = all;
	*n = kept;
	return 0;
}

char *cred_ref(const char *id, uint32_t version)
{
	return xasprintf("%s:%u", id, version);
}

int cred_audit(struct db *db, const char *tenant, const char *sandbox_id, const char *cred_id,
	       const char *host, const char *method, const char *path, const char *decision,
	       const char *detail, err_t *err)
{
	int r = db_exec(db, err,
			"INSERT INTO credential_audit(at, tenant_id, sandbox_id, cred_id, host,"
			" method, path, decision, detail) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)",
			"issssssss", wall_ms(), tenant, sandbox_id, cred_id, host, method, path,
			decision, detail);
	return r < 0 ? r : 0;
}

char *cred_placeholder(struct db *db, const char *sandbox_id, const char *cred_id, err_t *err)
{
	for (int attempt = 0; attempt < 2; attempt++) {
		struct db_rows rows;
		_cleanup_free_ char *ph = NULL;
		int r;

		r = db_query(db, &rows, err, "SELECT placeholder FROM credential_placeholders"
			     " WHERE sandbox_id = ? AND cred_id = ?", "ss", sandbox_id, cred_id);
		if (r < 0)
			return NULL;
		if (rows.n_rows > 0) {
			char *s = xstrdup(db_cell(&rows, 0, 0));
			db_rows_free(&rows);
			return s;
		}
		db_rows_free(&rows);
		ph = random_id(CRED_PLACEHOLDER_PREFIX, 16);
		r = db_exec(db, err, "INSERT INTO credential_placeholders(sandbox_id, cred_id,"
			    " placeholder, created_at) VALUES(?, ?, ?, ?)", "sssi", sandbox_id,
			    cred_id, ph, wall_ms());
		if (r >= 0)
			return TAKE_PTR(ph);
		if (r != -EEXIST)
			return NULL;
	}
	err_set(err, EIO, "cannot make a placeholder");
	return NULL;
}
