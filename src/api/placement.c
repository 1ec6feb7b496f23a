/* placement.c - which node serves a request, when several `airlockd up`
 * share one database (README "Cluster").
 *
 * Every api writes the address other apis reach it at into its node's row
 * (api_cluster_announce); the node daemon beats there (node/cluster/heartbeat.c). The
 * api keeps a copy of the nodes table, reloaded at most once a second, and
 * on reload marks `lost` every node that has not beaten for
 * heartbeat_timeout_s (any api may; the update is idempotent).
 *
 * Routing, for a request that did not come from another api:
 *   - a request for sandbox {id} goes to the node its row names;
 *   - a create is placed: a node that the body names ("node"), else the
 *     node that already has the Idempotency-Key's sandbox, else among the
 *     up nodes that have the backend and the memory, the ones that have
 *     the template; of those, the better of two picked at random (fewer
 *     committed MiB per MiB of memory);
 *   - a list asks every up node and merges the answers by creation time.
 * A request for another node goes to that node's api over HTTP with the
 * client's own Authorization (the database is shared, so the key is valid
 * there) and X-Airlock-Forwarded naming this node; an api that receives
 * that header serves the request with its own node. A client may send the
 * header too: it then gets this node's view only, never another tenant's.
 *
 * With no other node in the table, nothing here costs a query: the copy
 * says so and every request is local.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include "../lib/log.h"
#include "../lib/page.h"
#include "../lib/util.h"
#include "api-internal.h"

#define RELOAD_MS 1000

struct cnode {
	char name[65];
	char url[200];
	char state[16];
	int64_t heartbeat_at;
	json *cap;   /* the node's capacity JSON; NULL when unparsable */
};

struct cluster {
	pthread_mutex_t mu;
	int64_t loaded_ms;    /* monotonic */
	struct cnode *v;
	size_t n;
	/* The hosts of the nodes' urls, for the accept thread: under ip_mu,
	 * which is never held across a query (mu is). */
	pthread_mutex_t ip_mu;
	char (*hosts)[64];
	size_t n_hosts;
};

struct cluster *cluster_new(void)
{
	struct cluster *cl = xcalloc(1, sizeof(*cl));

	pthread_mutex_init(&cl->mu, NULL);
	pthread_mutex_init(&cl->ip_mu, NULL);
	return cl;
}

static void nodes_free(struct cnode *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		json_free(v[i].cap);
	free(v);
}

void cluster_free(struct cluster *cl)
{
	if (!cl)
		return;
	nodes_free(cl->v, cl->n);
	free(cl->hosts);
	pthread_mutex_destroy(&cl->mu);
	pthread_mutex_destroy(&cl->ip_mu);
	free(cl);
}

int api_cluster_announce(struct api *a, const char *url, err_t *err)
{
	if (!a->cfg->node_name)
		return 0;
	return db_exec(a->db, err,
		       "INSERT INTO nodes(name, url, state) VALUES(?,?,'starting')"
		       " ON CONFLICT(name) DO UPDATE SET url=excluded.url",
		       "ss", a->cfg->node_name, url) < 0 ? -err->code : 0;
}

/* "http://10.0.0.2:8080/x" -> "10.0.0.2", "http://[fd00::2]:80" ->
 * "fd00::2"; false when there is no host. */
static bool url_host(const char *url, char *out, size_t cap)
{
	const char *p = strstr(url, "://"), *e;

	p = p ? p + 3 : url;
	if (*p == '[') {
		e = strchr(++p, ']');
		if (!e)
			return false;
	} else {
		e = p + strcspn(p, ":/");
	}
	if (e == p || (size_t)(e - p) >= cap)
		return false;
	snprintf(out, cap, "%.*s", (int)(e - p), p);
	return true;
}

static bool is_self(struct api *a, const char *name);

/* The other nodes' hosts (this one's would exempt local clients too). */
static void set_hosts(struct api *a)
{
	struct cluster *cl = a->cluster;
	char (*hosts)[64] = xcalloc(cl->n + 1, sizeof(*hosts));
	size_t n = 0;

	for (size_t i = 0; i < cl->n; i++)
		if (!is_self(a, cl->v[i].name))
			n += url_host(cl->v[i].url, hosts[n], sizeof(hosts[n]));
	pthread_mutex_lock(&cl->ip_mu);
	free(cl->hosts);
	cl->hosts = hosts;
	cl->n_hosts = n;
	pthread_mutex_unlock(&cl->ip_mu);
}

bool api_cluster_is_peer(struct api *a, const char *ip)
{
	struct cluster *cl = a->cluster;
	bool found = false;

	pthread_mutex_lock(&cl->ip_mu);
	for (size_t i = 0; i < cl->n_hosts && !found; i++)
		found = strcmp(cl->hosts[i], ip) == 0;
	pthread_mutex_unlock(&cl->ip_mu);
	return found;
}

/* Reload the copy when it is older than RELOAD_MS. Caller holds cl->mu. */
static void reload_locked(struct api *a)
{
	struct cluster *cl = a->cluster;
	struct db_rows rows;
	int64_t now = (int64_t)now_ms();
	err_t err = { 0 };
	int64_t back;

	if (cl->loaded_ms && now - cl->loaded_ms < RELOAD_MS)
		return;
	cl->loaded_ms = now;
	/* Nodes are judged only on a connection that answers (this call makes
	 * a lost one again) and has been back for the timeout: while the
	 * database was out of reach no node could beat, so each gets one
	 * timeout from then to beat again before it counts as lost (else every
	 * node of a cluster, a lone one too, is lost after a database restart
	 * or a cut longer than the timeout). */
	back = a->cfg->heartbeat_timeout_s && db_exec(a->db, &err, "SELECT 1", NULL) >= 0
		       ? db_reconnected_ms(a->db) : -1;
	if (back >= 0 && (!back || now - back >= (int64_t)a->cfg->heartbeat_timeout_s * 1000) &&
	    db_exec(a->db, &err, "UPDATE nodes SET state='lost' WHERE state='up' AND heartbeat_at<?",
		    "i", wall_ms() - (int64_t)a->cfg->heartbeat_timeout_s * 1000) > 0)
		log_warn("cluster: a node stopped beating for %us: marked lost",
			 a->cfg->heartbeat_timeout_s);
	if (db_query(a->db, &rows, &err,
		     "SELECT name, url, state, heartbeat_at, capacity FROM nodes ORDER BY name",
		     NULL) < 0) {
		log_warn("cluster: %s", err.msg);
		return;
	}
	nodes_free(cl->v, cl->n);
	cl->v = xcalloc((size_t)rows.n_rows + 1, sizeof(*cl->v));
	cl->n = 0;
	for (int i = 0; i < rows.n_rows; i++) {
		struct cnode *c = &cl->v[cl->n++];
		const char *cap = db_cell(&rows, i, 4);

		snprintf(c->name, sizeof(c->name), "%s", db_cell(&rows, i, 0));
		snprintf(c->url, sizeof(c->url), "%s", db_cell(&rows, i, 1) ? db_cell(&rows, i, 1) : "");
		snprintf(c->state, sizeof(c->state), "%s", db_cell(&rows, i, 2));
		c->heartbeat_at = db_cell_int(&rows, i, 3);
		c->cap = cap ? json_parse(cap, strlen(cap), NULL) : NULL;
	}
	db_rows_free(&rows);
	set_hosts(a);
}

static bool is_self(struct api *a, const char *name)
{
	return a->cfg->node_name && strcmp(a->cfg->node_name, name) == 0;
}

/* Is any node but this one in the table? (Cheap: the copy.) */
static bool multi(struct api *a)
{
	bool r = false;

	pthread_mutex_lock(&a->cluster->mu);
	reload_locked(a);
	for (size_t i = 0; i < a->cluster->n && !r; i++)
		r = !is_self(a, a->cluster->v[i].name);
	pthread_mutex_unlock(&a->cluster->mu);
	return r;
}

/* url of node name when it is another node with an address: 1; 0 when it
 * is this one; -ENOENT when unknown, -EHOSTUNREACH when not up. */
static int node_url(struct api *a, const char *name, char *url, size_t cap, err_t *err)
{
	int r = -ENOENT;

	if (is_self(a, name))
		return 0;
	pthread_mutex_lock(&a->cluster->mu);
	reload_locked(a);
	for (size_t i = 0; i < a->cluster->n; i++) {
		struct cnode *c = &a->cluster->v[i];
		if (strcmp(c->name, name))
			continue;
		if (strcmp(c->state, "up") || !c->url[0]) {
			r = err_set(err, EHOSTUNREACH, "node `%s` is %s", name, c->state);
		} else {
			snprintf(url, cap, "%s", c->url);
			r = 1;
		}
		break;
	}
	pthread_mutex_unlock(&a->cluster->mu);
	if (r == -ENOENT)
		err_set(err, ENOENT, "no node `%s`", name);
	return r;
}

static bool forwarded(const struct http_req *req)
{
	return http_req_header(req, "X-Airlock-Forwarded") != NULL;
}

/* /v1/sandboxes/{id}... -> id. */
static bool sandbox_id_of(const char *path, char *id, size_t cap)
{
	static const char pre[] = "/v1/sandboxes/";
	size_t n;

	if (strncmp(path, pre, sizeof(pre) - 1))
		return false;
	path += sizeof(pre) - 1;
	n = strcspn(path, "/");
	if (!n || n >= cap)
		return false;
	memcpy(id, path, n);
	id[n] = '\0';
	return true;
}

static uint64_t cap_u(const json *cap, const char *k)
{
	int64_t v = json_get_int(cap, k, 0, NULL);
	return v > 0 ? (uint64_t)v : 0;
}

static bool cap_has(const json *cap, const char *list, const char *what, bool prefix)
{
	const json *v = json_get(cap, list);
	size_t n = strlen(what);

	for (size_t i = 0; v && v->type == JSON_ARR && i < v->n; i++) {
		const json *e = v->items[i];
		if (e->type != JSON_STR)
			continue;
		if (prefix ? (!strncmp(e->str, what, n) && e->str[n] == '/') : !strcmp(e->str, what))
			return true;
	}
	return false;
}

/* Committed memory per MiB of the node's memory, in millis: lower is
 * freer. */
static uint64_t load_of(const struct cnode *c)
{
	uint64_t mem = cap_u(c->cap, "memory_mb");

	return mem ? cap_u(c->cap, "committed_mb") * 1000 / mem : UINT64_MAX;
}

/* Place a sandbox of backend and template (either NULL: any) that needs
 * mem MiB. The name of the chosen node into out; -EHOSTUNREACH when no
 * node fits. */
static int place(struct api *a, const char *backend, const char *tmpl, uint64_t mem, char *out,
		 size_t cap, err_t *err)
{
	size_t *fit, nfit = 0, nwarm = 0;
	int r = 0;

	pthread_mutex_lock(&a->cluster->mu);
	reload_locked(a);
	fit = xcalloc(a->cluster->n + 1, sizeof(*fit));
	/* Fitting nodes, those with the template first. */
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < a->cluster->n; i++) {
			struct cnode *c = &a->cluster->v[i];
			bool has_t = !tmpl || cap_has(c->cap, "templates", tmpl, true);

			if (strcmp(c->state, "up") || !c->cap || (!c->url[0] && !is_self(a, c->name)))
				continue;
			if (backend && !cap_has(c->cap, "backends", backend, false))
				continue;
			if (mem && cap_u(c->cap, "mem_free_mb") < mem)
				continue;
			if (has_t != (pass == 0))
				continue;
			fit[nfit++] = i;
			nwarm += pass == 0;
		}
	if (!nfit) {
		r = err_set(err, EHOSTUNREACH, "no node is up with room for this sandbox");
	} else {
		/* Among the best group (with the template, if any has it): the
		 * better of two at random. */
		size_t group = nwarm ? nwarm : nfit, x = 0, y = 0;
		uint32_t rnd[2] = { 0, 0 };

		if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
			rnd[0] = rnd[1] = (uint32_t)now_us();
		x = fit[rnd[0] % group];
		y = fit[rnd[1] % group];
		if (load_of(&a->cluster->v[y]) < load_of(&a->cluster->v[x]))
			x = y;
		snprintf(out, cap, "%s", a->cluster->v[x].name);
	}
	free(fit);
	pthread_mutex_unlock(&a->cluster->mu);
	return r;
}

/* The node of the sandbox that tenant's Idempotency-Key made, if any. */
static bool idem_node(struct api *a, const struct api_principal *who, const char *key,
		      char *out, size_t cap)
{
	struct db_rows rows;
	bool found = false;

	if (!key || db_query(a->db, &rows, NULL,
			     "SELECT node FROM sandboxes WHERE tenant_id=? AND idem_key=?", "ss",
			     who->tenant, key) < 0)
		return false;
	if (rows.n_rows == 1 && db_cell(&rows, 0, 0)) {
		snprintf(out, cap, "%s", db_cell(&rows, 0, 0));
		found = true;
	}
	db_rows_free(&rows);
	return found;
}

/* What the cluster knows of a sandbox whose node is not up: its row, with
 * state `lost` (or `suspended`: it is in the object store and can come
 * back elsewhere). Columns: LOST_COLS. */
#define LOST_COLS "id, tenant_id, template, template_version, backend, node, observed, created_at"

static void render_lost(struct jw *w, const struct db_rows *rows, int i)
{
	char t[ISO_TIME_MAX];
	const char *obs = db_cell(rows, i, 6);

	jw_obj(w);
	jw_key(w, "id");
	jw_str(w, db_cell(rows, i, 0));
	jw_key(w, "tenant");
	jw_str(w, db_cell(rows, i, 1));
	jw_key(w, "template");
	jw_str(w, db_cell(rows, i, 2));
	jw_key(w, "template_version");
	jw_int(w, db_cell_int(rows, i, 3));
	jw_key(w, "backend");
	jw_str(w, db_cell(rows, i, 4));
	jw_key(w, "node");
	jw_str(w, db_cell(rows, i, 5));
	jw_key(w, "state");
	jw_str(w, obs && !strcmp(obs, "suspended") ? "suspended" : "lost");
	jw_key(w, "created_at");
	iso_time(db_cell_int(rows, i, 7), t);
	jw_str(w, t);
	jw_end(w);
}

/* Is node name up (in the copy)? */
static bool node_up(struct api *a, const char *name)
{
	bool up = false;

	pthread_mutex_lock(&a->cluster->mu);
	reload_locked(a);
	for (size_t i = 0; i < a->cluster->n; i++)
		if (!strcmp(a->cluster->v[i].name, name))
			up = !strcmp(a->cluster->v[i].state, "up");
	pthread_mutex_unlock(&a->cluster->mu);
	return up;
}

/* The node for a request to existing sandbox id, into node: the one its
 * row names; for a restore that names a node ({"node"} in the body), that
 * one; for a suspended sandbox whose node is not up, one placed as for a
 * create (it moves there: node/suspend/move.c suspend_claim). 1 when node is
 * set, 0 to serve it here as it is, -1 when answered. */
static int route_existing(struct api *a, struct http_req *req, struct http_conn *c,
			  const struct api_principal *who, const char *id, char *node, size_t cap)
{
	_cleanup_free_ char *backend = NULL, *tmpl = NULL;
	struct db_rows rows;
	bool suspended = false;
	err_t err = { 0 };
	size_t n = strlen("/v1/sandboxes/") + strlen(id);
	/* What follows the id in /v1/sandboxes/{id}...; NULL for another path
	 * naming the sandbox (src/compat: /e2b/...), which has no such part. */
	const char *rest = !strncmp(req->path, "/v1/sandboxes/", 14) &&
				   !strncmp(req->path + 14, id, strlen(id))
			   ? req->path + n
			   : NULL;

	if (db_query(a->db, &rows, &err,
		     "SELECT node, observed, backend, template FROM sandboxes WHERE id=?", "s",
		     id) < 0)
		return 0;   /* the node answers for itself */
	if (rows.n_rows == 1 && db_cell(&rows, 0, 0)) {
		snprintf(node, cap, "%s", db_cell(&rows, 0, 0));
		suspended = db_cell(&rows, 0, 1) && !strcmp(db_cell(&rows, 0, 1), "suspended");
		backend = xstrdup(db_cell(&rows, 0, 2));
		tmpl = xstrdup(db_cell(&rows, 0, 3));
	}
	db_rows_free(&rows);
	if (!node[0])
		return 0;
	if (suspended && !strcmp(req->method, "POST") && rest && !strcmp(rest, "/restore") &&
	    req->body_len) {
		json *b = json_parse(req->body, req->body_len, NULL);
		const json *want = b ? json_get(b, "node") : NULL;
		bool bad = b && (b->type != JSON_OBJ || (want && want->type != JSON_STR));

		if (want && want->type == JSON_STR)
			snprintf(node, cap, "%s", want->str);
		json_free(b);
		if (bad || !b) {
			http_respond_error(c, 400, "invalid_field", "body: {\"node\": NAME} or none");
			return -1;
		}
		return 1;
	}
	if (!node_up(a, node) && !strcmp(req->method, "GET") && rest && !strcmp(rest, "")) {
		/* GET of a sandbox whose node is lost or down: the row's view */
		struct buf b;
		struct jw w;

		if (db_query(a->db, &rows, &err,
			     "SELECT " LOST_COLS " FROM sandboxes WHERE id=? AND observed<>'deleted'"
			     " AND (tenant_id=? OR ?=1)",
			     "ssi", id, who->tenant, (int64_t)who->admin) < 0 || rows.n_rows != 1) {
			if (!err.code)
				db_rows_free(&rows);
			http_respond_error(c, 404, "not_found", "no sandbox `%s`", id);
			return -1;
		}
		buf_init(&b);
		jw_init(&w, &b);
		render_lost(&w, &rows, 0);
		db_rows_free(&rows);
		http_respond_json(c, 200, b.data);
		buf_free(&b);
		return -1;
	}
	if (suspended && !node_up(a, node) && strcmp(req->method, "GET")) {
		/* its node is lost or down: it comes back on another (a delete
		 * too: that node deletes its objects) */
		if (place(a, backend, tmpl, 0, node, cap, &err) < 0) {
			http_respond_error(c, 503, "no_capacity", "%s", err.msg);
			return -1;
		}
	}
	return 1;
}

/* The api url of node into url, as api_cluster_route answers: 1 another
 * node's, 0 this one's; a node the table does not know is 404 (or, with
 * unknown_here, this node's, which answers for itself); one not up, 503. */
static int answer_url(struct api *a, struct http_conn *c, const char *node, bool unknown_here,
		      char *url, size_t cap)
{
	err_t err = { 0 };
	int r = node_url(a, node, url, cap, &err);

	if (r == -ENOENT && unknown_here)
		return 0;
	if (r == -ENOENT)
		http_respond_error(c, 404, "not_found", "%s", err.msg);
	else if (r < 0)
		http_respond_error(c, 503, "node_unavailable", "%s", err.msg);
	return r < 0 ? -1 : r;
}

int api_cluster_peer(struct api *a, struct http_req *req, struct http_conn *c,
		     const struct api_principal *who, const char *id, char *url, size_t cap)
{
	char node[65] = "";
	int r;

	if (!id || forwarded(req) || !a->cfg->node_name || !multi(a))
		return 0;
	if ((r = route_existing(a, req, c, who, id, node, sizeof(node))) <= 0)
		return r;
	return answer_url(a, c, node, true, url, cap);
}

int api_cluster_route(struct api *a, struct http_req *req, struct http_conn *c,
		      const struct api_principal *who, char *url, size_t cap)
{
	char node[65] = "", id[65];
	err_t err = { 0 };
	int r;

	if (forwarded(req) || !a->cfg->node_name || !multi(a))
		return 0;
	if (!strcmp(req->path, "/v1/sandboxes") && !strcmp(req->method, "POST")) {
		json *b = req->body_len ? json_parse(req->body, req->body_len, NULL) : NULL;
		const json *want = b ? json_get(b, "node") : NULL;

		if (want && want->type == JSON_STR) {
			snprintf(node, sizeof(node), "%s", want->str);
		} else if (!idem_node(a, who, http_req_header(req, "Idempotency-Key"), node,
				      sizeof(node))) {
			const json *o = b && b->type == JSON_OBJ ? b : NULL;
			const json *lim = o ? json_get(o, "limits") : NULL;
			int64_t mem = lim ? json_get_int(lim, "memory_mb", 0, NULL) : 0;

			place(a, o ? json_get_str(o, "backend") : NULL,
			      o ? json_get_str(o, "template") : NULL, mem > 0 ? (uint64_t)mem : 0,
			      node, sizeof(node), &err);
		}
		json_free(b);
		if (!node[0]) {
			http_respond_error(c, 503, "no_capacity", "%s", err.msg);
			return -1;
		}
	} else if (sandbox_id_of(req->path, id, sizeof(id))) {
		r = route_existing(a, req, c, who, id, node, sizeof(node));
		if (r <= 0)
			return r;
	} else {
		return 0;
	}
	return answer_url(a, c, node, false, url, cap);
}

/* ---- GET /v1/sandboxes across the cluster ------------------------------ */

static int cmp_created(const void *x, const void *y)
{
	const json *a = *(const json *const *)x, *b = *(const json *const *)y;
	const char *ca = json_get_str(a, "created_at"), *cb = json_get_str(b, "created_at");
	int r = strcmp(ca ? ca : "", cb ? cb : "");

	if (r)
		return r;
	ca = json_get_str(a, "id");
	cb = json_get_str(b, "id");
	return strcmp(ca ? ca : "", cb ? cb : "");
}

/* One node's list: its api's answer (or the local node's). */
static json *list_of(struct api *a, struct http_req *req, const struct api_principal *who,
		     const char *url, err_t *err)
{
	struct http_resp resp;
	struct buf hdr;
	json *j = NULL;
	int r;

	memset(&resp, 0, sizeof(resp));
	buf_init(&hdr);
	if (url) {
		buf_printf(&hdr, "Authorization: %s\r\nX-Airlock-Forwarded: %s\r\n",
			   http_req_header(req, "Authorization"), a->cfg->node_name);
		r = http_request(url, "GET", req->target, hdr.data, NULL, 0, &resp, err);
	} else {
		buf_printf(&hdr, "X-Airlock-Tenant: %s\r\nX-Airlock-Admin: %d\r\n", who->tenant,
			   who->admin ? 1 : 0);
		r = http_request(a->cfg->node_sock, "GET", req->target, hdr.data, NULL, 0, &resp,
				 err);
	}
	buf_free(&hdr);
	if (r == 0 && resp.status != 200)
		r = err_set(err, EIO, "answered %d", resp.status);
	if (r == 0)
		j = json_parse(resp.body.data ? resp.body.data : "", resp.body.len, err);
	http_resp_free(&resp);
	return j;
}

size_t api_cluster_peer_urls(struct api *a, const struct http_req *req, char (*urls)[200],
			     size_t max)
{
	size_t n = 0;

	if (forwarded(req) || !a->cfg->node_name || !multi(a))
		return 0;
	pthread_mutex_lock(&a->cluster->mu);
	for (size_t i = 0; i < a->cluster->n && n < max; i++) {
		const struct cnode *cn = &a->cluster->v[i];

		if (!is_self(a, cn->name) && !strcmp(cn->state, "up") && cn->url[0])
			snprintf(urls[n++], 200, "%s", cn->url);
	}
	pthread_mutex_unlock(&a->cluster->mu);
	return n;
}

bool api_cluster_list(struct api *a, struct http_req *req, struct http_conn *c,
		      const struct api_principal *who)
{
	struct cnode *nodes;
	size_t nn = 0, nall = 0;
	const json **all = NULL;
	json *lost = NULL;
	json **lists;
	bool more = false;
	struct page pg;
	struct buf b;
	struct jw w;

	if (forwarded(req) || !a->cfg->node_name || !multi(a))
		return false;
	/* Each node answers its first `limit` after the cursor (the query goes
	 * to it unchanged); the merged page is the first `limit` of those. */
	if (page_from_req(&pg, req, false, c) < 0)
		return true;
	/* The up nodes' names and addresses, copied out of the lock. */
	pthread_mutex_lock(&a->cluster->mu);
	nodes = xcalloc(a->cluster->n + 1, sizeof(*nodes));
	for (size_t i = 0; i < a->cluster->n; i++)
		if (!strcmp(a->cluster->v[i].state, "up") || is_self(a, a->cluster->v[i].name)) {
			nodes[nn] = a->cluster->v[i];
			nodes[nn++].cap = NULL;
		}
	pthread_mutex_unlock(&a->cluster->mu);

	lists = xcalloc(nn + 1, sizeof(*lists));
	for (size_t i = 0; i < nn; i++) {
		err_t err = { 0 };
		bool self = is_self(a, nodes[i].name);
		const json *v;

		if (!self && !nodes[i].url[0])
			continue;
		lists[i] = list_of(a, req, who, self ? NULL : nodes[i].url, &err);
		if (!lists[i]) {
			log_warn("list: node %s: %s", nodes[i].name, err.msg);
			continue;
		}
		v = json_get(lists[i], "next_token");
		if (v && v->type == JSON_STR)
			more = true;
		v = json_get(lists[i], "sandboxes");
		for (size_t k = 0; v && v->type == JSON_ARR && k < v->n; k++) {
			all = xrealloc(all, (nall + 1) * sizeof(*all));
			all[nall++] = v->items[k];
		}
	}
	/* Nodes that are not up: what the rows say (state lost, or suspended). */
	{
		struct db_rows rows;
		err_t err = { 0 };
		int r = who->admin ? db_query(a->db, &rows, &err,
					      "SELECT " LOST_COLS " FROM sandboxes WHERE observed<>'deleted'"
					      " AND node NOT IN (SELECT name FROM nodes WHERE state='up')",
					      NULL)
				   : db_query(a->db, &rows, &err,
					      "SELECT " LOST_COLS " FROM sandboxes WHERE observed<>'deleted'"
					      " AND tenant_id=? AND node NOT IN"
					      " (SELECT name FROM nodes WHERE state='up')",
					      "s", who->tenant);
		if (r == 0) {
			struct buf lb;
			struct jw lw;

			buf_init(&lb);
			jw_init(&lw, &lb);
			jw_arr(&lw);
			for (int i = 0; i < rows.n_rows; i++)
				render_lost(&lw, &rows, i);
			jw_end(&lw);
			db_rows_free(&rows);
			lost = json_parse(lb.data, lb.len, NULL);
			buf_free(&lb);
			for (size_t k = 0; lost && k < lost->n; k++) {
				if (!page_after(&pg, page_iso_ms(json_get_str(lost->items[k], "created_at")),
						json_get_str(lost->items[k], "id")))
					continue;
				all = xrealloc(all, (nall + 1) * sizeof(*all));
				all[nall++] = lost->items[k];
			}
		}
	}
	if (nall)
		qsort(all, nall, sizeof(*all), cmp_created);
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "sandboxes");
	jw_arr(&w);
	if (nall > pg.limit) {
		more = true;
		nall = pg.limit;
	}
	for (size_t i = 0; i < nall; i++)
		jw_value(&w, all[i]);
	jw_end(&w);
	jw_key(&w, "next_token");
	if (more && nall) {
		_cleanup_free_ char *t =
			page_token(page_iso_ms(json_get_str(all[nall - 1], "created_at")),
				   json_get_str(all[nall - 1], "id"));
		jw_str(&w, t);
	} else {
		jw_null(&w);
	}
	jw_end(&w);
	http_respond_json(c, 200, b.data);
	buf_free(&b);
	for (size_t i = 0; i < nn; i++)
		json_free(lists[i]);
	free(lists);
	free(all);
	free(nodes);
	json_free(lost);
	return true;
}

/* ---- GET /v1/nodes (admin) --------------------------------------------- */

static int cnode_cmp(const void *x, const void *y)
{
	return strcmp((*(const struct cnode *const *)x)->name, (*(const struct cnode *const *)y)->name);
}

/* By name, compared bytewise (the page key), whatever the database's collation. */
void api_handle_nodes(struct api *a, struct http_req *req, struct http_conn *c)
{
	const struct cnode **order;
	struct page pg;
	struct buf b;
	struct jw w;

	if (strcmp(req->method, "GET")) {
		api_method_not_allowed(c, "GET");
		return;
	}
	if (page_from_req(&pg, req, false, c) < 0)
		return;
	buf_init(&b);
	jw_init(&w, &b);
	pthread_mutex_lock(&a->cluster->mu);
	a->cluster->loaded_ms = 0;   /* fresh for a person looking */
	reload_locked(a);
	jw_obj(&w);
	jw_key(&w, "nodes");
	jw_arr(&w);
	order = xcalloc(a->cluster->n + 1, sizeof(*order));
	for (size_t i = 0; i < a->cluster->n; i++)
		order[i] = &a->cluster->v[i];
	if (a->cluster->n)
		qsort(order, a->cluster->n, sizeof(*order), cnode_cmp);
	for (size_t i = 0; i < a->cluster->n; i++) {
		const struct cnode *n = order[i];
		char t[ISO_TIME_MAX];

		if (!page_take(&pg, 0, n->name))
			continue;
		jw_obj(&w);
		jw_key(&w, "name");
		jw_str(&w, n->name);
		jw_key(&w, "state");
		jw_str(&w, n->state);
		jw_key(&w, "url");
		jw_str(&w, n->url[0] ? n->url : NULL);
		jw_key(&w, "last_heartbeat");
		if (n->heartbeat_at) {
			iso_time(n->heartbeat_at, t);
			jw_str(&w, t);
		} else {
			jw_null(&w);
		}
		jw_key(&w, "self");
		jw_bool(&w, is_self(a, n->name));
		jw_key(&w, "capacity");
		if (n->cap)
			jw_value(&w, n->cap);
		else
			jw_raw(&w, "{}");
		jw_end(&w);
	}
	free(order);
	jw_end(&w);
	page_write_next(&pg, &w);
	jw_end(&w);
	pthread_mutex_unlock(&a->cluster->mu);
	http_respond_json(c, 200, b.data);
	buf_free(&b);
}
