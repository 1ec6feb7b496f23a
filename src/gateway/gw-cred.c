/* The gateway's side of credential injection: see gw-cred.h. */
#include "gw-cred.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "../cred/ca.h"
#include "../cred/cred.h"
#include "inject.h"
#include "mitm.h"
#include "../cred/vault.h"
#include "../lib/json.h"
#include "../lib/log.h"

#define WHO_MAX 4096          /* cached sandbox identities */
#define HOSTS_TTL_MS 1000

/* Where one of a sandbox's credentials goes: its host patterns and its
 * schemes and ports. */
struct want {
	char **hosts;
	size_t n_hosts;
	struct cred_transport transport;
};

struct who {
	struct who *next;
	char id[65];
	char *tenant, *project;
	struct want *wants;       /* one per credential of the sandbox */
	size_t n_wants;
	uint64_t hosts_at;        /* now_ms() of the last refresh; 0 = never */
};

struct gw_cred {
	struct db *db;
	struct vault *vault;
	struct ca *ca;
	SSL_CTX *upstream;
	struct inject_rl *rl;
	pthread_mutex_t mu;
	struct who *whos;
	size_t n_whos;
};

struct gw_cred *gw_cred_open(const struct gateway_config *cfg, err_t *err)
{
	struct gw_cred *gc;

	if (!cfg->db_path || !cfg->vault_key || !cfg->ca) {
		err_set(err, EINVAL, "gateway: credentials need the DB, the vault key and the CA");
		return NULL;
	}
	gc = xcalloc(1, sizeof(*gc));
	pthread_mutex_init(&gc->mu, NULL);
	gc->db = db_open(cfg->db_path, err);
	gc->upstream = gc->db ? mitm_upstream_ctx(cfg->upstream_ca, err) : NULL;
	if (!gc->db || !gc->upstream) {
		db_close(gc->db);
		free(gc);
		return NULL;
	}
	gc->vault = vault_local_open(gc->db, cfg->vault_key);
	gc->ca = cfg->ca;
	gc->rl = inject_rl_new();
	return gc;
}

static void who_hosts_free(struct who *w)
{
	for (size_t i = 0; i < w->n_wants; i++) {
		for (size_t k = 0; k < w->wants[i].n_hosts; k++)
			free(w->wants[i].hosts[k]);
		free(w->wants[i].hosts);
	}
	free(w->wants);
	w->wants = NULL;
	w->n_wants = 0;
}

/* The cached identity of a sandbox (gc->mu held); NULL when the DB does not
 * know it. */
static struct who *who_get_locked(struct gw_cred *gc, const char *sandbox_id)
{
	struct db_rows rows;
	struct who *w;
	const char *meta;
	json *m;

	for (w = gc->whos; w; w = w->next)
		if (strcmp(w->id, sandbox_id) == 0)
			return w;
	if (db_query(gc->db, &rows, NULL, "SELECT tenant_id, metadata FROM sandboxes WHERE id = ?",
		     "s", sandbox_id) < 0)
		return NULL;
	if (rows.n_rows == 0) {
		db_rows_free(&rows);
		return NULL;
	}
	if (gc->n_whos >= WHO_MAX) {      /* bounded: start over */
		for (struct who *x = gc->whos, *next; x; x = next) {
			next = x->next;
			who_hosts_free(x);
			free(x->tenant);
			free(x->project);
			free(x);
		}
		gc->whos = NULL;
		gc->n_whos = 0;
	}
	w = xcalloc(1, sizeof(*w));
	snprintf(w->id, sizeof(w->id), "%s", sandbox_id);
	w->tenant = xstrdup(db_cell(&rows, 0, 0));
	meta = db_cell(&rows, 0, 1);
	m = meta ? json_parse(meta, strlen(meta), NULL) : NULL;
	if (m && json_get_str(m, "project"))
		w->project = xstrdup(json_get_str(m, "project"));
	json_free(m);
	db_rows_free(&rows);
	w->next = gc->whos;
	gc->whos = w;
	gc->n_whos++;
	return w;
}

bool gw_cred_wants(struct gw_cred *gc, const char *sandbox_id, const char *host, unsigned scheme,
		   int port)
{
	struct who *w;
	bool found = false;

	if (!host || !host[0])
		return false;
	pthread_mutex_lock(&gc->mu);
	w = who_get_locked(gc, sandbox_id);
	if (w && (!w->hosts_at || now_ms() - w->hosts_at > HOSTS_TTL_MS)) {
		struct cred *creds = NULL;
		size_t n = 0;

		who_hosts_free(w);
		if (cred_resolve(gc->db, w->tenant, w->id, w->project, &creds, &n, NULL) == 0) {
			w->wants = xcalloc(n ? n : 1, sizeof(*w->wants));
			for (size_t i = 0; i < n; i++) {
				w->wants[i] = (struct want){ .hosts = creds[i].hosts,
							     .n_hosts = creds[i].n_hosts,
							     .transport = creds[i].transport };
				creds[i].hosts = NULL;     /* now the cache's */
				creds[i].n_hosts = 0;
			}
			w->n_wants = n;
			cred_list_free(creds, n);
		}
		w->hosts_at = now_ms();
	}
	/* TLS to a port no credential names is not intercepted, nor is plain
	 * HTTP read, for credentials' sake: nothing would go in */
	for (size_t i = 0; w && i < w->n_wants && !found; i++) {
		if (!cred_transport_ok(&w->wants[i].transport, scheme, port))
			continue;
		for (size_t k = 0; k < w->wants[i].n_hosts && !found; k++)
			found = host_match(w->wants[i].hosts[k], host);
	}
	pthread_mutex_unlock(&gc->mu);
	return found;
}

struct hook_arg {
	struct gw_cred *gc;
	const char *sandbox_id, *host;
	unsigned scheme;          /* CRED_SCHEME_HTTP or _HTTPS */
	int port;                 /* the one the sandbox dialled */
};

/* Rewrite one request head; a refusal is a whole answer in reply. */
static int hook(void *arg, struct http_head *h, struct buf *reply)
{
	struct hook_arg *a = arg;
	struct inject_who who = { .sandbox_id = a->sandbox_id, .host = a->host,
				  .scheme = a->scheme, .port = a->port };
	struct inject_ctx ctx = { .db = a->gc->db, .vault = a->gc->vault, .rl = a->gc->rl,
				  .now_ms = wall_ms() };
	_cleanup_free_ char *tenant = NULL, *project = NULL;
	enum inject_verdict v = INJECT_FORWARD;
	err_t err = { 0 };
	int n = 0;

	pthread_mutex_lock(&a->gc->mu);
	{
		struct who *w = who_get_locked(a->gc, a->sandbox_id);
		if (w) {
			tenant = xstrdup(w->tenant);
			project = w->project ? xstrdup(w->project) : NULL;
		}
	}
	pthread_mutex_unlock(&a->gc->mu);
	if (!tenant)
		return 0;           /* unknown sandbox: nothing to inject */
	who.tenant = tenant;
	who.project = project;
	if (cred_inject(&ctx, &who, h, &v, &n, &err) < 0)
		log_warn("gateway: sandbox %s: injection: %s", a->sandbox_id, err.msg);
	if (v == INJECT_RATE_LIMITED) {
		static const char body[] = "airlock: credential rate limit reached\n";
		buf_printf(reply, "HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/plain\r\n"
			   "Retry-After: 60\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
			   sizeof(body) - 1, body);
		return 1;
	}
	return 0;
}

int gw_cred_http(struct gw_cred *gc, const char *sandbox_id, const char *host, int port,
		 int fd, const void *pre, size_t n, struct buf *out, struct mitm_stream **stream)
{
	struct hook_arg a = { .gc = gc, .sandbox_id = sandbox_id, .host = host,
			      .scheme = CRED_SCHEME_HTTP, .port = port };
	err_t err = { 0 };

	return mitm_http_head_stream(fd, pre, n, host, port, hook, &a, out, stream, &err);
}

/* An intercepted connection's hook argument, with its own copies: it
 * lives on the loop until the setup's end. */
struct tls_job {
	struct hook_arg a;
	char *sandbox_id, *host;
};

static void tls_end(void *arg, int r, const char *why)
{
	struct hook_arg *a = arg;
	struct tls_job *j = (struct tls_job *)a;   /* a is j's first member */

	if (r < 0)
		log_info("gateway: sandbox %s: intercepted TLS to %s: %s", j->sandbox_id, j->host,
			 why);
	free(j->sandbox_id);
	free(j->host);
	free(j);
}

void gw_cred_tls_start(struct gw_cred *gc, struct mitm_loop *ml, const char *sandbox_id,
		       const char *host, int port, int fd, const void *pre, size_t n, int up,
		       mitm_dialed_fn dialed, tls_loop_done_fn done, void *done_arg)
{
	struct tls_job *j = xcalloc(1, sizeof(*j));

	j->sandbox_id = xstrdup(sandbox_id);
	j->host = xstrdup(host);
	j->a = (struct hook_arg){ .gc = gc, .sandbox_id = j->sandbox_id, .host = j->host,
				  .scheme = CRED_SCHEME_HTTPS, .port = port };
	mitm_loop_add(ml, &(struct mitm_conn_spec){
		.ca = gc->ca, .upstream = gc->upstream, .client_fd = fd, .prefix = pre, .n = n,
		.up_fd = up, .host = host, .port = port, .hook = hook, .hook_arg = &j->a,
		.end = tls_end, .dialed = dialed, .done = done, .done_arg = done_arg });
}
