/* Templates: the `templates` rows, builds through the node manager, and
 * coalescing.
 *
 * Every build, explicit (POST /v1/templates) or on demand (a create that
 * names a built-in template that is not there yet), registers itself in
 * node->builds under tmpl_mu. A create that needs a template being built
 * waits on that build's condvar instead of starting another: a hundred
 * creates of "debian" on a fresh node cause one debootstrap.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../../lib/ident.h"
#include "../../lib/log.h"
#include "../../lib/page.h"
#include "../cluster/cluster.h"
#include "../http/handler.h"
#include "tmplstore.h"

struct tbuild {
	struct tbuild *next;
	char name[65];
	uint32_t version;
	bool done;
	int rc;
	err_t err;
	int refs;               /* under tmpl_mu; the builder holds one */
	pthread_cond_t cv;      /* with tmpl_mu; broadcast when done */
};

/* The image defaults of one template version (NULL: it has none). */
struct tconfig {
	struct tconfig *next;
	char name[65];
	uint32_t version;
	json *cfg;
};

/* Built-in recipes, built on first use. */
static bool builtin_recipe(const char *name, struct nm_template_spec *spec)
{
	memset(spec, 0, sizeof(*spec));
	snprintf(spec->name, sizeof(spec->name), "%s", name);
	if (strcmp(name, "debian") == 0) {
		snprintf(spec->kind, sizeof(spec->kind), "debian");
		snprintf(spec->arg, sizeof(spec->arg), "bookworm");
		return true;
	}
	if (strcmp(name, "busybox") == 0) {
		snprintf(spec->kind, sizeof(spec->kind), "busybox");
		return true;
	}
	/* Debian with Jupyter's Python kernel, numpy, pandas, matplotlib,
	 * node and bash, and the code service (scripts/code-interpreter):
	 * built on first use only, so a first start stays fast. */
	if (strcmp(name, "code-interpreter") == 0) {
		snprintf(spec->kind, sizeof(spec->kind), "code");
		snprintf(spec->arg, sizeof(spec->arg), "bookworm");
		return true;
	}
	return false;
}

static void spec_source(const struct nm_template_spec *spec, char *out, size_t sz)
{
	if (strcmp(spec->kind, "debian") == 0 || strcmp(spec->kind, "code") == 0)
		snprintf(out, sz, "%s:%s%s%s", spec->kind, spec->arg, spec->packages[0] ? " +" : "",
			 spec->packages);
	else if (strcmp(spec->kind, "busybox") == 0)
		snprintf(out, sz, "busybox");
	else
		snprintf(out, sz, "%s:%s", spec->kind, spec->arg);
}

/* Newest ready version; -ENOENT when there is none. */
static int newest_ready(struct node *n, const char *name, uint32_t *version, err_t *err)
{
	struct db_rows rows;
	int r = db_query(n->db, &rows, err,
			 "SELECT MAX(version) FROM templates WHERE node=? AND name=? AND status='ready'",
			 "ss", node_me(n), name);

	if (r < 0)
		return r;
	r = rows.n_rows == 1 && db_cell(&rows, 0, 0) ? 0 : -ENOENT;
	if (r == 0)
		*version = (uint32_t)db_cell_int(&rows, 0, 0);
	db_rows_free(&rows);
	return r == -ENOENT ? err_set(err, ENOENT, "no template `%s`", name) : 0;
}

static uint32_t next_version(struct node *n, const char *name)
{
	struct db_rows rows;
	err_t err = { 0 };
	uint32_t v = 1;

	if (db_query(n->db, &rows, &err, "SELECT MAX(version) FROM templates WHERE node=? AND name=?",
		     "ss", node_me(n), name) == 0) {
		if (rows.n_rows == 1 && db_cell(&rows, 0, 0))
			v = (uint32_t)db_cell_int(&rows, 0, 0) + 1;
		db_rows_free(&rows);
	}
	return v;
}

/* Register a build of name. Called with tmpl_mu held; NULL if one is
 * already in flight. */
static struct tbuild *build_register_locked(struct node *n, const char *name)
{
	struct tbuild *b;

	for (b = n->builds; b; b = b->next)
		if (strcmp(b->name, name) == 0)
			return NULL;
	b = xcalloc(1, sizeof(*b));
	snprintf(b->name, sizeof(b->name), "%s", name);
	b->version = next_version(n, name);
	b->refs = 1;
	pthread_cond_init(&b->cv, NULL);
	b->next = n->builds;
	n->builds = b;
	return b;
}

static void build_unref_locked(struct tbuild *b)
{
	if (--b->refs == 0) {
		pthread_cond_destroy(&b->cv);
		free(b);
	}
}

/* Record the result, wake the waiters, forget the build. */
static void build_finish(struct node *n, struct tbuild *b, int rc, const err_t *err)
{
	pthread_mutex_lock(&n->tmpl_mu);
	for (struct tbuild **pp = &n->builds; *pp; pp = &(*pp)->next)
		if (*pp == b) {
			*pp = b->next;
			break;
		}
	b->done = true;
	b->rc = rc;
	if (err)
		b->err = *err;
	pthread_cond_broadcast(&b->cv);
	build_unref_locked(b);
	pthread_mutex_unlock(&n->tmpl_mu);
}

/* Row building -> nm build -> row ready / failed. */
static int run_build(struct node *n, struct nm_template_spec *spec,
		     void (*progress)(void *, const char *), void *arg, err_t *err)
{
	char source[2304];
	/* A node's template rows are its own; a stale process writes none
	 * (model/state.h). */
	struct state_fence f = state_fence();
	int r;

	spec_source(spec, source, sizeof(source));
	r = db_exec(n->db, err,
		    "INSERT INTO templates(node, name, version, status, source, created_at)"
		    " SELECT ?,?,?,'building',?,? WHERE " STATE_FENCE_SELF_SQL,
		    "ssisi" STATE_FENCE_SELF_TYPES, node_me(n), spec->name, (int64_t)spec->version,
		    source, wall_ms(), STATE_FENCE_SELF_ARGS(f));
	r = state_fenced(n->db, NULL, r, err);
	if (r < 0)
		return err_wrap(err, "template %s/%u", spec->name, spec->version);
	log_info("building template %s/%u from %s", spec->name, spec->version, source);
	r = nm_template_build(n->cfg->nm_sock, spec, n->stop_fd, progress, arg, err);
	if (r < 0) {
		err_t e2 = { 0 };
		err_wrap(err, "build template %s/%u", spec->name, spec->version);
		log_warn("%s", err->msg);
		db_exec(n->db, &e2,
			"UPDATE templates SET status='failed', error=? WHERE node=? AND name=?"
			" AND version=? AND " STATE_FENCE_SELF_SQL,
			"sssi" STATE_FENCE_SELF_TYPES, err->msg, node_me(n), spec->name,
			(int64_t)spec->version, STATE_FENCE_SELF_ARGS(f));
		return r;
	}
	r = db_exec(n->db, err, "UPDATE templates SET status='ready' WHERE node=? AND name=?"
		    " AND version=? AND " STATE_FENCE_SELF_SQL, "ssi" STATE_FENCE_SELF_TYPES,
		    node_me(n), spec->name, (int64_t)spec->version, STATE_FENCE_SELF_ARGS(f));
	r = state_fenced(n->db, NULL, r, err);
	if (r < 0)
		return err_wrap(err, "template %s/%u", spec->name, spec->version);
	log_info("template %s/%u ready", spec->name, spec->version);
	cluster_poke(n);
	/* into the object store now, off the request path (tmplstore.c) */
	tmplstore_queue_template(n, spec->name, spec->version);
	return 0;
}

int template_resolve(struct node *n, const char *name, uint32_t *version, err_t *err)
{
	struct nm_template_spec spec;
	struct tbuild *b;
	int r;

	/* Hot path: the template exists; no lock beyond the DB's own. */
	r = newest_ready(n, name, version, err);
	if (r != -ENOENT)
		return r;
	pthread_mutex_lock(&n->tmpl_mu);
	r = newest_ready(n, name, version, err);
	if (r != -ENOENT) {
		pthread_mutex_unlock(&n->tmpl_mu);
		return r;
	}
	for (b = n->builds; b; b = b->next)
		if (strcmp(b->name, name) == 0)
			break;
	if (b) {
		/* Someone builds it already: wait for that build. */
		b->refs++;
		while (!b->done)
			pthread_cond_wait(&b->cv, &n->tmpl_mu);
		r = b->rc;
		if (r == 0)
			*version = b->version;
		else
			*err = b->err;
		build_unref_locked(b);
		pthread_mutex_unlock(&n->tmpl_mu);
		/* A failed build is not "unknown template": say why it failed. */
		return r == -ENOENT ? err_set(err, EIO, "%s", err->msg) : r;
	}
	if (!builtin_recipe(name, &spec)) {
		pthread_mutex_unlock(&n->tmpl_mu);
		return err_set(err, ENOENT, "no template `%s`", name);
	}
	b = build_register_locked(n, name);
	spec.version = b->version;
	pthread_mutex_unlock(&n->tmpl_mu);

	r = run_build(n, &spec, NULL, NULL, err);
	if (r == 0)
		*version = spec.version;
	build_finish(n, b, r == -ENOENT ? -EIO : r, err);
	return r == -ENOENT ? err_set(err, EIO, "%s", err->msg) : r;
}

/* ---- image defaults ---------------------------------------------------- */

static bool str_array_ok(const json *v)
{
	if (v->type != JSON_ARR || v->n > 4096)
		return false;
	for (size_t i = 0; i < v->n; i++)
		if (v->items[i]->type != JSON_STR)
			return false;
	return true;
}

/* The file comes from a build of an untrusted image (through airlock-oci,
 * which wrote it from the image's config): check every field as a request
 * would be, and refuse the whole thing otherwise. */
static bool image_config_ok(const json *c)
{
	static const char *const keys[] = { "env", "workdir", "user", "entrypoint", "cmd", NULL };
	const json *v;
	err_t err = { 0 };

	if (c->type != JSON_OBJ || json_check_keys(c, keys, &err) < 0)
		return false;
	if ((v = json_get(c, "env"))) {
		if (v->type != JSON_OBJ || v->n > 1024)
			return false;
		for (size_t i = 0; i < v->n; i++)
			if (v->items[i]->type != JSON_STR || !*v->keys[i] || strchr(v->keys[i], '=') ||
			    strlen(v->keys[i]) > 256 || v->items[i]->str_len > 32768)
				return false;
	}
	if ((v = json_get(c, "workdir")) &&
	    (v->type != JSON_STR || v->str[0] != '/' || v->str_len > 4096))
		return false;
	if ((v = json_get(c, "user")) && (v->type != JSON_STR || !v->str_len || v->str_len > 64))
		return false;
	if (((v = json_get(c, "entrypoint")) && !str_array_ok(v)) ||
	    ((v = json_get(c, "cmd")) && !str_array_ok(v)))
		return false;
	return true;
}

int template_image_config(struct node *n, const char *name, uint32_t version, json **out,
			  err_t *err)
{
	_cleanup_free_ char *text = NULL;
	struct tconfig *t;
	json *cfg = NULL;

	*out = NULL;
	pthread_mutex_lock(&n->tmpl_mu);
	for (t = n->tconfigs; t; t = t->next)
		if (t->version == version && !strcmp(t->name, name))
			break;
	if (t)
		*out = json_dup(t->cfg);
	pthread_mutex_unlock(&n->tmpl_mu);
	if (t)
		return 0;
	if (nm_template_config(n->cfg->nm_sock, name, version, &text, err) < 0)
		return -err->code;
	if (text) {
		cfg = json_parse(text, strlen(text), err);
		if (!cfg || !image_config_ok(cfg)) {
			json_free(cfg);
			return err_set(err, EINVAL, "template %s/%u: its image defaults are not valid",
				       name, version);
		}
	}
	pthread_mutex_lock(&n->tmpl_mu);
	t = xcalloc(1, sizeof(*t));
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->version = version;
	t->cfg = cfg;
	t->next = n->tconfigs;
	n->tconfigs = t;
	*out = json_dup(cfg);
	pthread_mutex_unlock(&n->tmpl_mu);
	return 0;
}

/* Forget the cached defaults of name (deleted: its version numbers may be
 * used again). Called with tmpl_mu held. */
static void tconfig_forget_locked(struct node *n, const char *name)
{
	for (struct tconfig **pp = &n->tconfigs; *pp;) {
		struct tconfig *t = *pp;
		if (strcmp(t->name, name)) {
			pp = &t->next;
			continue;
		}
		*pp = t->next;
		json_free(t->cfg);
		free(t);
	}
}

/* ---- HTTP ------------------------------------------------------------- */

/* One row. What a tenant (not an admin) sees of a template is what it
 * needs to pick one: no host paths. "source" keeps only its kind
 * ("tar:/srv/x.tar" -> "tar", "debian:bookworm +curl" -> "debian"), and a
 * failed build's error, which may quote paths, is left out. A ready version
 * built from an image also shows the defaults its sandboxes get ("image":
 * env, workdir, user, entrypoint, cmd). */
static void render_template_row(struct node *n, struct jw *w, const struct db_rows *rows, int i,
				bool admin)
{
	const char *source = db_cell(rows, i, 3);
	char t[ISO_TIME_MAX];
	json *image = NULL;
	err_t err = { 0 };

	jw_obj(w);
	jw_key(w, "name");
	jw_str(w, db_cell(rows, i, 0));
	jw_key(w, "version");
	jw_int(w, db_cell_int(rows, i, 1));
	jw_key(w, "status");
	jw_str(w, db_cell(rows, i, 2));
	jw_key(w, "source");
	if (admin || !source)
		jw_str(w, source);
	else
		jw_strn(w, source, strcspn(source, ": "));
	jw_key(w, "created_at");
	iso_time(db_cell_int(rows, i, 4), t);
	jw_str(w, t);
	if (db_cell(rows, i, 5) && admin) {
		jw_key(w, "error");
		jw_str(w, db_cell(rows, i, 5));
	}
	if (db_cell(rows, i, 6)) {
		jw_key(w, "node");
		jw_str(w, db_cell(rows, i, 6));
	}
	if (db_cell(rows, i, 2) && !strcmp(db_cell(rows, i, 2), "ready") && db_cell(rows, i, 0) &&
	    template_image_config(n, db_cell(rows, i, 0), (uint32_t)db_cell_int(rows, i, 1), &image,
				  &err) == 0 && image) {
		jw_key(w, "image");
		jw_value(w, image);
		json_free(image);
	}
	jw_end(w);
}

#define TEMPLATE_COLS "name, version, status, source, created_at, error, node"

struct tkey {
	char key[PAGE_ID_MAX + 1];
	int row;
};

static int tkey_cmp(const void *x, const void *y)
{
	return strcmp(((const struct tkey *)x)->key, ((const struct tkey *)y)->key);
}

/* Keyset order of templates: name, then version, compared bytewise here (not
 * by the database's collation, which may differ between drivers). The key is
 * "name version" with the version zero-padded; ' ' sorts before every byte a
 * name may hold. */
void handle_templates_list(struct node *n, struct http_req *req, struct http_conn *c,
			   bool admin)
{
	struct db_rows rows;
	struct tkey *keys;
	struct page pg;
	err_t err = { 0 };
	struct buf b;
	struct jw w;

	if (page_from_req(&pg, req, false, c) < 0)
		return;
	if (db_query(n->db, &rows, &err,
		     "SELECT " TEMPLATE_COLS " FROM templates WHERE node=? ORDER BY name, version",
		     "s", node_me(n)) < 0) {
		node_respond_err(c, &err);
		return;
	}
	page_list_open(&w, &b, "templates");
	keys = xcalloc((size_t)rows.n_rows + 1, sizeof(*keys));
	for (int i = 0; i < rows.n_rows; i++) {
		snprintf(keys[i].key, sizeof(keys[i].key), "%.64s %020lld", db_cell(&rows, i, 0),
			 (long long)db_cell_int(&rows, i, 1));
		keys[i].row = i;
	}
	if (rows.n_rows)
		qsort(keys, (size_t)rows.n_rows, sizeof(*keys), tkey_cmp);
	for (int i = 0; i < rows.n_rows; i++)
		if (page_take(&pg, 0, keys[i].key))
			render_template_row(n, &w, &rows, keys[i].row, admin);
	free(keys);
	db_rows_free(&rows);
	page_list_respond(&pg, &w, &b, c);
}

/* DELETE /v1/templates/{name} (admin): every version, from the pool and
 * the table. 409 while a build of it runs or a sandbox row not yet deleted
 * names it (a suspended sandbox needs its template to come back). A create
 * that resolved the template just before and records its row just after
 * fails at its jail step, with nothing left behind. */
void handle_templates_delete(struct node *n, const char *name, struct http_conn *c)
{
	struct db_rows rows = { 0 };
	char **pool = NULL;
	bool building = false, found = false;
	int64_t users = 0;
	int r = 0;
	err_t err = { 0 };

	if (!ident_name_ok(name)) {
		http_respond_error(c, 400, "invalid_argument", "bad template name");
		return;
	}
	/* Not while a version is being published (tmplstore.c): btrfs refuses
	 * to drop a subvolume a send is reading. The publisher takes only
	 * tpub_mu, so it goes first here; creates wait on tmpl_mu, never on
	 * an upload. */
	pthread_mutex_lock(&n->tpub_mu);
	pthread_mutex_lock(&n->tmpl_mu);
	for (struct tbuild *b = n->builds; b; b = b->next)
		building |= strcmp(b->name, name) == 0;
	if (building) {
		r = err_set(&err, EBUSY, "template `%s` is being built", name);
		goto out;
	}
	if ((r = db_query(n->db, &rows, &err,
			  "SELECT COUNT(*) FROM sandboxes WHERE template=? AND observed<>'deleted'"
			  " AND node=?", "ss", name, n->cfg->node_name)) < 0)
		goto out;
	users = db_cell_int(&rows, 0, 0);
	db_rows_free(&rows);
	if (users > 0) {
		r = err_set(&err, EBUSY, "template `%s` is used by %lld sandbox(es)", name,
			    (long long)users);
		goto out;
	}
	/* The versions the pool has, whether or not the table knows them. */
	if ((r = nm_template_list(n->cfg->nm_sock, &pool, &err)) < 0)
		goto out;
	for (char **p = pool; p && *p; p++) {
		size_t len = strlen(name);
		char *end;
		unsigned long ver;

		if (strncmp(*p, name, len) || (*p)[len] != '/')
			continue;
		ver = strtoul(*p + len + 1, &end, 10);
		if (*end || ver > UINT32_MAX)
			continue;
		found = true;
		if ((r = nm_template_delete(n->cfg->nm_sock, name, (uint32_t)ver, &err)) < 0)
			goto out;
	}
	tconfig_forget_locked(n, name);
	r = db_exec(n->db, &err, "DELETE FROM templates WHERE name=? AND node=? AND "
		    STATE_FENCE_SELF_SQL, "ss" STATE_FENCE_SELF_TYPES, name, n->cfg->node_name,
		    STATE_FENCE_SELF_ARGS(state_fence()));
	if ((r = state_fenced(n->db, NULL, r, &err)) < 0)
		goto out;
	if (r == 0 && !found)
		r = err_set(&err, ENOENT, "no template `%s`", name);
	else
		log_info("template %s deleted", name);
out:
	pthread_mutex_unlock(&n->tmpl_mu);
	pthread_mutex_unlock(&n->tpub_mu);
	for (char **p = pool; p && *p; p++)
		free(*p);
	free(pool);
	if (r < 0)
		node_respond_err(c, &err);
	else
		http_respond(c, 204, NULL, NULL, 0, NULL);
}

static bool suite_ok(const char *s)
{
	size_t n = strlen(s);

	if (n < 1 || n > 32)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(s[i] >= 'a' && s[i] <= 'z') && s[i] != '-')
			return false;
	return true;
}

static bool package_ok(const char *s)
{
	size_t n = strlen(s);

	if (n < 1 || n > 128 || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9')))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
		      s[i] == '+' || s[i] == '-' || s[i] == '.'))
			return false;
	return true;
}

/* Fill spec from the body; returns NULL or the error code (msg filled). */
static const char *parse_template(const json *body, struct nm_template_spec *spec, char *msg,
				  size_t sz)
{
	const json *name = json_get(body, "name"), *from = json_get(body, "from");
	const json *pk = json_get(body, "packages"), *dir = json_get(body, "from_dir");
	const json *tar = json_get(body, "from_tar"), *oci = json_get(body, "from_oci");
	int sources = !!from + !!dir + !!tar + !!oci;

	memset(spec, 0, sizeof(*spec));
	if (!name || name->type != JSON_STR || !ident_name_ok(name->str)) {
		snprintf(msg, sz, "`name` must match [a-z0-9][a-z0-9._-]{0,63}");
		return "invalid_field";
	}
	snprintf(spec->name, sizeof(spec->name), "%s", name->str);
	/* A bare built-in name ("debian", "busybox") builds its own recipe. */
	if (sources == 0 && !json_get(body, "packages") && builtin_recipe(name->str, spec))
		return NULL;
	if (sources != 1) {
		snprintf(msg, sz, "give exactly one of `from`, `from_dir`, `from_tar`, `from_oci`"
			 " (or only the name of a built-in: debian, busybox, code-interpreter)");
		return "invalid_field";
	}
	if (from) {
		if (from->type != JSON_STR) {
			snprintf(msg, sz, "`from` must be a string like \"debian:bookworm\"");
			return "invalid_field";
		}
		if (strncmp(from->str, "debian:", 7) == 0 && suite_ok(from->str + 7)) {
			snprintf(spec->kind, sizeof(spec->kind), "debian");
			snprintf(spec->arg, sizeof(spec->arg), "%s", from->str + 7);
		} else if (strcmp(from->str, "busybox") == 0) {
			snprintf(spec->kind, sizeof(spec->kind), "busybox");
		} else {
			snprintf(msg, sz, "`from` must be \"debian:SUITE\" or \"busybox\"");
			return "invalid_field";
		}
	} else {
		const json *p = dir ? dir : tar ? tar : oci;
		if (p->type != JSON_STR || p->str[0] != '/' || p->str_len >= sizeof(spec->arg)) {
			snprintf(msg, sz, "`%s` must be an absolute host path",
				 dir ? "from_dir" : tar ? "from_tar" : "from_oci");
			return "invalid_field";
		}
		snprintf(spec->kind, sizeof(spec->kind), "%s", dir ? "dir" : tar ? "tar" : "oci");
		snprintf(spec->arg, sizeof(spec->arg), "%s", p->str);
	}
	if (pk) {
		size_t len = 0;
		if (pk->type != JSON_ARR || strcmp(spec->kind, "debian") != 0) {
			snprintf(msg, sz, "`packages` is an array of names, with a debian `from`");
			return "invalid_field";
		}
		for (size_t i = 0; i < pk->n; i++) {
			const json *v = pk->items[i];
			if (v->type != JSON_STR || !package_ok(v->str)) {
				snprintf(msg, sz, "`packages[%zu]` is not a package name", i);
				return "invalid_field";
			}
			if (len + v->str_len + 2 > sizeof(spec->packages)) {
				snprintf(msg, sz, "`packages` is too long");
				return "invalid_field";
			}
			len += (size_t)snprintf(spec->packages + len, sizeof(spec->packages) - len,
						"%s%s", i ? "," : "", v->str);
		}
	}
	return NULL;
}

struct progress_ctx {
	struct http_conn *c;
	bool gone;
};

/* The build script numbers its steps ("template-build: step 2/4: ...",
 * scripts/template-build.sh) and airlock-oci the layers it applies ("oci:
 * applying layer 1/3 ..."): a client can show how far the build is. */
static void build_step(struct jw *w, const char *line)
{
	unsigned i, n;
	int end = 0;
	const char *what = NULL;

	if (!line)
		return;
	if (sscanf(line, "template-build: step %u/%u:%n", &i, &n, &end) == 2 && end)
		what = "step";
	else if (sscanf(line, "oci: applying layer %u/%u %n", &i, &n, &end) == 2 && end)
		what = "layer";
	if (!what || i == 0 || i > n || n > 1000)
		return;
	jw_key(w, what);
	jw_uint(w, i);
	jw_key(w, !strcmp(what, "step") ? "steps" : "layers");
	jw_uint(w, n);
}

static void on_progress(void *arg, const char *line)
{
	struct progress_ctx *p = arg;
	struct buf b;
	struct jw w;

	if (p->gone)
		return;
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "event");
	jw_str(&w, "progress");
	jw_key(&w, "line");
	jw_str(&w, line ? line : "");
	build_step(&w, line);
	jw_end(&w);
	buf_addc(&b, '\n');
	/* The build goes on even when the client stops listening. */
	if (http_stream_write(p->c, b.data, b.len) < 0)
		p->gone = true;
	buf_free(&b);
}

void handle_templates_create(struct node *n, struct http_req *req, struct http_conn *c)
{
	static const char *const keys[] = { "name", "from", "packages", "from_dir", "from_tar",
					    "from_oci", NULL };
	struct progress_ctx pc = { .c = c };
	struct nm_template_spec spec;
	struct tbuild *b;
	const char *code;
	err_t err = { 0 };
	struct buf out;
	struct jw w;
	char msg[256];
	json *body;
	int r;

	body = node_body_object(req, c, keys);
	if (!body)
		return;
	code = parse_template(body, &spec, msg, sizeof(msg));
	json_free(body);
	if (code) {
		http_respond_error(c, 400, code, "%s", msg);
		return;
	}
	pthread_mutex_lock(&n->tmpl_mu);
	b = build_register_locked(n, spec.name);
	if (b)
		spec.version = b->version;
	pthread_mutex_unlock(&n->tmpl_mu);
	if (!b) {
		http_respond_error(c, 409, "conflict", "template `%s` is being built already",
				   spec.name);
		return;
	}
	if (http_stream_begin(c, 200, "application/x-ndjson", NULL) < 0)
		pc.gone = true;
	r = run_build(n, &spec, on_progress, &pc, &err);
	build_finish(n, b, r, &err);

	buf_init(&out);
	jw_init(&w, &out);
	jw_obj(&w);
	if (r == 0) {
		struct db_rows rows;
		err_t e2 = { 0 };

		jw_key(&w, "event");
		jw_str(&w, "done");
		jw_key(&w, "template");
		if (db_query(n->db, &rows, &e2,
			     "SELECT " TEMPLATE_COLS " FROM templates WHERE node=? AND name=?"
			     " AND version=?", "ssi", node_me(n), spec.name, (int64_t)spec.version) == 0 &&
		    rows.n_rows == 1) {
			render_template_row(n, &w, &rows, 0, true);   /* builds are admin only */
			db_rows_free(&rows);
		} else {
			jw_null(&w);
		}
	} else {
		int status;
		const char *ecode;

		node_errno_to_http(err.code, &status, &ecode);
		jw_key(&w, "event");
		jw_str(&w, "error");
		jw_key(&w, "error");
		jw_obj(&w);
		jw_key(&w, "code");
		jw_str(&w, ecode);
		jw_key(&w, "message");
		jw_str(&w, err.msg);
		jw_end(&w);
	}
	jw_end(&w);
	buf_addc(&out, '\n');
	if (!pc.gone) {
		http_stream_write(c, out.data, out.len);
		http_stream_end(c);
	}
	buf_free(&out);
}

/* ---- startup ---------------------------------------------------------- */

void templates_reconcile(struct node *n)
{
	struct db_rows rows;
	char **pool = NULL;
	struct state_fence f = state_fence();
	err_t err = { 0 };

	/* Claim the rows that are this node's under another name: on a shared
	 * database those from before node names (migration 3; one made for
	 * sharing came after it); in an SQLite file, one host's, every row,
	 * whatever the host was called when it was written. */
	if (db_exec(n->db, &err,
		    node_db_is_private(n)
			    ? "UPDATE templates SET node=? WHERE node != ? AND " STATE_FENCE_SELF_SQL
			    : "UPDATE templates SET node=? WHERE node='' AND ? != '' AND "
			      STATE_FENCE_SELF_SQL,
		    "ss" STATE_FENCE_SELF_TYPES, node_me(n), node_me(n), STATE_FENCE_SELF_ARGS(f)) < 0)
		log_warn("templates: %s", err.msg);
	/* A build the node did not see finish is not trusted: remove it. */
	if (db_query(n->db, &rows, &err,
		     "SELECT name, version FROM templates WHERE node=? AND status='building'", "s",
		     node_me(n)) == 0) {
		for (int i = 0; i < rows.n_rows; i++) {
			const char *name = db_cell(&rows, i, 0);
			int64_t ver = db_cell_int(&rows, i, 1);
			err_t e2 = { 0 };

			if (name && nm_template_delete(n->cfg->nm_sock, name, (uint32_t)ver, &e2) < 0)
				log_warn("template %s/%lld: %s", name, (long long)ver, e2.msg);
			db_exec(n->db, &e2,
				"UPDATE templates SET status='failed', error=? WHERE node=? AND"
				" name=? AND version=? AND " STATE_FENCE_SELF_SQL,
				"sssi" STATE_FENCE_SELF_TYPES, "interrupted by a node restart",
				node_me(n), name, ver, STATE_FENCE_SELF_ARGS(f));
		}
		db_rows_free(&rows);
	} else {
		log_err("templates: %s", err.msg);
	}

	/* Versions in the pool that the DB does not know (built by an earlier
	 * install, or the DB was replaced) are ready to use. */
	if (nm_template_list(n->cfg->nm_sock, &pool, &err) < 0) {
		log_warn("cannot list templates in the pool: %s", err.msg);
		return;
	}
	for (char **p = pool; p && *p; p++) {
		char *slash = strchr(*p, '/'), *end;
		long long ver;
		err_t e2 = { 0 };

		if (!slash)
			continue;
		*slash = '\0';
		ver = strtoll(slash + 1, &end, 10);
		if (*end || ver <= 0 || ver > UINT32_MAX || !ident_name_ok(*p))
			continue;
		if (db_exec(n->db, &e2,
			    "INSERT INTO templates(node, name, version, status, source, created_at)"
			    " SELECT ?,?,?,'ready','pool',? WHERE " STATE_FENCE_SELF_SQL
			    " ON CONFLICT DO NOTHING",
			    "ssii" STATE_FENCE_SELF_TYPES, node_me(n), *p, (int64_t)ver, wall_ms(),
			    STATE_FENCE_SELF_ARGS(f)) > 0)
			log_info("template %s/%lld found in the pool", *p, ver);
	}
	for (char **p = pool; p && *p; p++)
		free(*p);
	free(pool);
}

void templates_cleanup(struct node *n)
{
	/* Builds register and finish within one request; once the HTTP server
	 * has stopped none is left. */
	if (n->builds)
		log_warn("template builds still registered at shutdown");
	pthread_mutex_lock(&n->tmpl_mu);
	while (n->tconfigs) {
		struct tconfig *t = n->tconfigs;
		n->tconfigs = t->next;
		json_free(t->cfg);
		free(t);
	}
	pthread_mutex_unlock(&n->tmpl_mu);
}
