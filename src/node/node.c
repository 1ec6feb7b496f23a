/* airlockd node: startup, shutdown, HTTP routing and the helpers the
 * handlers share. The lifecycle lives in sandbox.c and state.c, processes in
 * exec.c, files in files.c, templates in templates.c, crash recovery in
 * reconcile.c and timed work in reaper.c. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "../lib/log.h"
#include "../lib/reqjson.h"
#include "node-internal.h"

/* ---- helpers ---------------------------------------------------------- */

void node_errno_to_http(int code, int *status, const char **ecode)
{
	switch (code) {
	case ENOENT:
	case ESRCH:
		*status = 404, *ecode = "not_found";
		break;
	case EINVAL:
	case EISDIR:
	case ENOTDIR:
	case ENAMETOOLONG:
	case ELOOP:
		*status = 400, *ecode = "bad_request";
		break;
	case EEXIST:
	case ENOTEMPTY:
	case EBUSY:
		*status = 409, *ecode = "conflict";
		break;
	case EFBIG:
	case E2BIG:
		*status = 413, *ecode = "body_too_large";
		break;
	case EACCES:
	case EPERM:
	case EROFS:
		*status = 403, *ecode = "forbidden";
		break;
	case ETIMEDOUT:
		*status = 504, *ecode = "timeout";
		break;
	case EAGAIN:
	case ECONNREFUSED:
	case ECONNRESET:
	case ENOTCONN:
	case EPIPE:
	case ESHUTDOWN:
		*status = 503, *ecode = "unavailable";
		break;
	case ENOSYS:
	case EOPNOTSUPP:
		*status = 501, *ecode = "not_supported";
		break;
	default:
		*status = 500, *ecode = "internal";
		break;
	}
}

void node_respond_err(struct http_conn *c, const err_t *e)
{
	int status;
	const char *code;

	node_errno_to_http(e->code, &status, &code);
	http_respond_error(c, status, code, "%s", e->msg[0] ? e->msg : "error");
}

void node_respond_conflict(struct http_conn *c, enum sb_state st, const char *fmt, ...)
{
	_cleanup_free_ char *msg = NULL;
	struct buf b;
	struct jw w;
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(&msg, fmt, ap) < 0)
		msg = NULL;
	va_end(ap);
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	http_write_error(&w, "conflict", msg ? msg : "conflict");
	jw_key(&w, "state");
	jw_str(&w, state_name(st));
	jw_end(&w);
	http_respond_json(c, 409, b.data);
	buf_free(&b);
}

json *node_body_object(struct http_req *req, struct http_conn *c, const char *const *allowed)
{
	return http_json_object_body(req, c, allowed, NODE_JSON_MAX);
}

/* Percent-decode s[0..n) into a new string; %00 and bad escapes are kept
 * literally so the result never contains NUL. */
static char *url_decode(const char *s, size_t n)
{
	struct buf b;

	buf_init(&b);
	for (size_t i = 0; i < n; i++) {
		int hi = -1, lo = -1;

		if (s[i] == '+') {
			buf_addc(&b, ' ');
			continue;
		}
		if (s[i] == '%' && i + 2 < n) {
			hi = hexval(s[i + 1]);
			lo = hexval(s[i + 2]);
		}
		if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
			buf_addc(&b, s[i]);
			continue;
		}
		buf_addc(&b, (char)(hi << 4 | lo));
		i += 2;
	}
	return buf_steal(&b);
}

void node_query_each(const char *query, void (*fn)(void *arg, const char *k, const char *v),
		     void *arg)
{
	const char *p = query ? query : "";

	while (*p) {
		const char *amp = strchr(p, '&');
		size_t len = amp ? (size_t)(amp - p) : strlen(p);
		const char *eq = memchr(p, '=', len);
		if (len) {
			_cleanup_free_ char *k = url_decode(p, eq ? (size_t)(eq - p) : len);
			_cleanup_free_ char *v =
				eq ? url_decode(eq + 1, len - (size_t)(eq + 1 - p)) : xstrdup("");
			fn(arg, k, v);
		}
		p += len;
		if (*p == '&')
			p++;
	}
}

bool node_name_valid(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n < 1 || n > 64)
		return false;
	if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9')))
		return false;
	for (size_t i = 1; i < n; i++) {
		char ch = s[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '.' ||
		      ch == '_' || ch == '-'))
			return false;
	}
	return true;
}

int node_info_get(struct node *n, struct nm_node_info *out, err_t *err)
{
	int r = 0;

	/* The node's size does not change while it runs: ask once, keep it. */
	pthread_mutex_lock(&n->info_mu);
	if (!n->have_info) {
		r = nm_node_info(n->cfg->nm_sock, &n->info, err);
		if (r == 0)
			n->have_info = true;
	}
	if (r == 0)
		*out = n->info;
	pthread_mutex_unlock(&n->info_mu);
	return r;
}

/* ---- GET /v1/node ----------------------------------------------------- */

static void handle_node(struct node *n, struct http_conn *c)
{
	static const char *const names[] = { "ns", "vm" };
	struct nm_node_info info;
	size_t counts[SB__COUNT] = { 0 }, live = 0;
	err_t err = { 0 };
	struct buf b;
	struct jw w;

	if (node_info_get(n, &info, &err) < 0) {
		err_wrap(&err, "node manager");
		node_respond_err(c, &err);
		return;
	}
	sandbox_counts(n, counts);
	for (int s = 0; s < SB__COUNT; s++)
		if (state_is_live((enum sb_state)s))
			live += counts[s];
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "cpus");
	jw_uint(&w, info.cpus);
	jw_key(&w, "memory_mb");
	jw_uint(&w, info.mem_total_mb);
	jw_key(&w, "pool");
	jw_obj(&w);
	jw_key(&w, "free_mb");
	jw_uint(&w, info.pool_free_mb);
	jw_key(&w, "total_mb");
	jw_uint(&w, info.pool_total_mb);
	jw_end(&w);
	jw_key(&w, "cgroup_mode");
	jw_str(&w, info.cgroup_mode);
	/* The vm backend's acceleration, as nodemgr decided it (vm-accel.c). */
	jw_key(&w, "vm");
	jw_obj(&w);
	jw_key(&w, "accel");
	jw_str(&w, info.vm_accel[0] ? info.vm_accel : NULL);
	jw_key(&w, "reason");
	jw_str(&w, info.vm_reason);
	jw_end(&w);
	jw_key(&w, "default_backend");
	jw_str(&w, n->cfg->default_backend);
	jw_key(&w, "default_template");
	jw_str(&w, n->cfg->default_template);
	jw_key(&w, "backends");
	jw_arr(&w);
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		const struct backend_ops *be = backend_find(names[i]);
		if (!be)
			continue;
		jw_obj(&w);
		jw_key(&w, "name");
		jw_str(&w, be->name);
		jw_key(&w, "caps");
		jw_obj(&w);
		jw_key(&w, "pause");
		jw_bool(&w, be->caps.pause);
		jw_key(&w, "disk_snapshot");
		jw_bool(&w, be->caps.disk_snapshot);
		jw_key(&w, "full_snapshot");
		jw_bool(&w, be->caps.full_snapshot);
		jw_key(&w, "memory_fork");
		jw_bool(&w, be->caps.memory_fork);
		/* Both backends get the same sandbox network (an ns jail's veth,
		 * a vm guest's NIC routed to one); it is off node-wide or on. */
		jw_key(&w, "network");
		jw_bool(&w, n->cfg->gateway_sock != NULL);
		jw_end(&w);
		jw_end(&w);
	}
	jw_end(&w);
	jw_key(&w, "sandboxes");
	jw_obj(&w);
	jw_key(&w, "live");
	jw_uint(&w, live);
	jw_key(&w, "max");
	jw_uint(&w, n->cfg->max_sandboxes);
	for (int s = 0; s < SB__COUNT; s++) {
		if (s == SB_DELETED)
			continue;
		jw_key(&w, state_name((enum sb_state)s));
		jw_uint(&w, counts[s]);
	}
	jw_end(&w);
	jw_end(&w);
	http_respond_json(c, 200, b.data);
	buf_free(&b);
}

/* ---- routing ---------------------------------------------------------- */

#define MAX_SEGS 8

static int split_path(char *p, char **segs)
{
	int n = 0;

	char *save = NULL;

	for (char *s = strtok_r(p, "/", &save); s; s = strtok_r(NULL, "/", &save)) {
		if (n == MAX_SEGS)
			return -1;
		segs[n++] = s;
	}
	return n;
}

static bool method_is(const struct http_req *req, const char *m)
{
	return strcmp(req->method, m) == 0;
}

static void not_allowed(struct http_conn *c, const struct http_req *req)
{
	http_respond_error(c, 405, "method_not_allowed", "%s is not allowed here", req->method);
}

static bool parse_pid(const char *s, uint32_t *pid)
{
	char *end;
	unsigned long v;

	if (!s || !*s || *s == '-' || *s == '+')
		return false;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v == 0 || v > UINT32_MAX)
		return false;
	*pid = (uint32_t)v;
	return true;
}

static void route_sandbox(struct node *n, struct http_req *req, struct http_conn *c,
			  const char *tenant, char **segs, int nseg)
{
	/* segs: v1 sandboxes {id} [sub...] */
	const char *id = segs[2];
	struct sandbox *sb;

	if (nseg == 3 && method_is(req, "DELETE")) {
		handle_sandbox_delete(n, id, tenant, c);
		return;
	}
	sb = sandbox_find(n, id, tenant);
	if (!sb) {
		/* An operation on this tenant's deleted sandbox is a conflict with
		 * its state; reading it (GET) is a plain 404. */
		if (nseg > 3 && sandbox_is_deleted(n, id, tenant))
			node_respond_conflict(c, SB_DELETED, "sandbox %s is deleted", id);
		else
			http_respond_error(c, 404, "not_found", "no sandbox `%s`", id);
		return;
	}
	if (nseg == 3) {
		if (method_is(req, "GET"))
			handle_sandbox_get(n, sb, c);
		else
			not_allowed(c, req);
	} else if (nseg == 4 && (strcmp(segs[3], "pause") == 0 || strcmp(segs[3], "resume") == 0 ||
				 strcmp(segs[3], "connect") == 0)) {
		if (method_is(req, "POST"))
			handle_sandbox_lifecycle(n, sb, segs[3], c);
		else
			not_allowed(c, req);
	} else if (strcmp(segs[3], "snapshots") == 0 && (nseg == 4 || nseg == 5)) {
		handle_snapshots(n, sb, nseg == 5 ? segs[4] : NULL, req, c);
	} else if (strcmp(segs[3], "fork") == 0 && nseg == 4) {
		if (method_is(req, "POST"))
			handle_fork(n, sb, req, c);
		else
			not_allowed(c, req);
	} else if (strcmp(segs[3], "rollback") == 0 && nseg == 4) {
		if (method_is(req, "POST"))
			handle_rollback(n, sb, req, c);
		else
			not_allowed(c, req);
	} else if (strcmp(segs[3], "network") == 0 && (nseg == 4 ||
						       (nseg == 5 && strcmp(segs[4], "log") == 0))) {
		handle_network(n, sb, nseg == 5, req, c);
	} else if (strcmp(segs[3], "exec") == 0 && nseg == 4) {
		if (method_is(req, "POST"))
			handle_exec(n, sb, req, c);
		else
			not_allowed(c, req);
	} else if (strcmp(segs[3], "events") == 0 && nseg == 4) {
		if (method_is(req, "GET"))
			handle_events(n, sb, c);
		else
			not_allowed(c, req);
	} else if (strcmp(segs[3], "console") == 0 && nseg == 4) {
		if (method_is(req, "GET"))
			handle_console(n, sb, c);
		else
			not_allowed(c, req);
	} else if (strcmp(segs[3], "processes") == 0 && nseg == 4) {
		if (method_is(req, "GET"))
			handle_processes(n, sb, c);
		else
			not_allowed(c, req);
	} else if (strcmp(segs[3], "processes") == 0 && nseg == 6) {
		uint32_t pid;
		const char *rest = segs[5];
		bool get = strcmp(rest, "output") == 0;
		bool post = strcmp(rest, "stdin") == 0 || strcmp(rest, "signal") == 0 ||
			    strcmp(rest, "resize") == 0;

		if (!parse_pid(segs[4], &pid))
			http_respond_error(c, 404, "not_found", "no process `%s`", segs[4]);
		else if (!get && !post)
			http_respond_error(c, 404, "not_found", "no such endpoint");
		else if ((get && !method_is(req, "GET")) || (post && !method_is(req, "POST")))
			not_allowed(c, req);
		else
			handle_process(n, sb, pid, rest, req, c);
	} else if (strcmp(segs[3], "files") == 0 && nseg == 4) {
		if (method_is(req, "GET") || method_is(req, "PUT") || method_is(req, "DELETE"))
			handle_files(n, sb, "", req, c);
		else
			not_allowed(c, req);
	} else if (strcmp(segs[3], "files") == 0 && nseg == 5) {
		const char *sub = segs[4];
		bool get = strcmp(sub, "stat") == 0 || strcmp(sub, "list") == 0;
		bool post = strcmp(sub, "mkdir") == 0 || strcmp(sub, "rename") == 0;

		if (!get && !post)
			http_respond_error(c, 404, "not_found", "no such endpoint");
		else if ((get && !method_is(req, "GET")) || (post && !method_is(req, "POST")))
			not_allowed(c, req);
		else
			handle_files(n, sb, sub, req, c);
	} else {
		http_respond_error(c, 404, "not_found", "no such endpoint");
	}
	sandbox_unref(sb);
}

static void node_handler(void *ctx, struct http_req *req, struct http_conn *c)
{
	struct node *n = ctx;
	const char *tenant = http_req_header(req, "X-Airlock-Tenant");
	const char *admin_h = http_req_header(req, "X-Airlock-Admin");
	bool admin = admin_h && strcmp(admin_h, "1") == 0;
	_cleanup_free_ char *path = xstrdup(req->path ? req->path : "");
	char *segs[MAX_SEGS];
	int nseg;

	/* Every request comes from the api daemon, which authenticated it and
	 * names the tenant; without one there is nobody to act for. */
	if (!tenant || !*tenant || strlen(tenant) > 128) {
		http_respond_error(c, 401, "unauthorized", "missing X-Airlock-Tenant");
		return;
	}
	/* Port paths carry the service's own path, of any depth. */
	if (ports_route(n, req, c, tenant))
		return;
	nseg = split_path(path, segs);
	if (nseg == 2 && strcmp(segs[0], "internal") == 0 && strcmp(segs[1], "network") == 0 &&
	    method_is(req, "GET")) {
		handle_internal_network(n, c);
		return;
	}
	if (nseg < 2 || strcmp(segs[0], "v1") != 0) {
		http_respond_error(c, 404, "not_found", "no such endpoint");
		return;
	}
	if (strcmp(segs[1], "debug") == 0 && nseg == 3 && strcmp(segs[2], "clock") == 0) {
		/* Node socket only (the api daemon does not forward it), admin
		 * only, and 404 unless config debug_clock=true. */
		if (!admin)
			http_respond_error(c, 403, "forbidden", "admin only");
		else
			handle_debug_clock(n, req, c);
	} else if (strcmp(segs[1], "node") == 0 && nseg == 2) {
		if (!method_is(req, "GET"))
			not_allowed(c, req);
		else if (!admin)
			http_respond_error(c, 403, "forbidden", "admin only");
		else
			handle_node(n, c);
	} else if (strcmp(segs[1], "templates") == 0 && nseg == 2) {
		if (method_is(req, "GET"))
			handle_templates_list(n, c);
		else if (!method_is(req, "POST"))
			not_allowed(c, req);
		else if (!admin)
			http_respond_error(c, 403, "forbidden", "building templates is admin only");
		else
			handle_templates_create(n, req, c);
	} else if (strcmp(segs[1], "sandboxes") == 0 && nseg == 2) {
		if (method_is(req, "POST"))
			handle_sandboxes_create(n, req, c, tenant);
		else if (method_is(req, "GET"))
			handle_sandboxes_list(n, req, c, tenant);
		else
			not_allowed(c, req);
	} else if (strcmp(segs[1], "sandboxes") == 0 && nseg >= 3) {
		route_sandbox(n, req, c, tenant, segs, nseg);
	} else {
		http_respond_error(c, 404, "not_found", "no such endpoint");
	}
}

/* ---- run -------------------------------------------------------------- */

int node_run(const struct node_config *cfg, err_t *err)
{
	struct node *n = xcalloc(1, sizeof(*n));
	pthread_condattr_t ca;
	sigset_t stop_set, old_set;
	struct nm_node_info info;
	err_t e2 = { 0 };
	int sig = 0, r;

	n->cfg = cfg;
	n->bctx.nm_sock = cfg->nm_sock;
	n->bctx.vm_cold_boot = cfg->vm_cold_boot;
	pthread_mutex_init(&n->mu, NULL);
	pthread_mutex_init(&n->info_mu, NULL);
	pthread_mutex_init(&n->tmpl_mu, NULL);
	pthread_mutex_init(&n->jan_mu, NULL);
	pthread_mutex_init(&n->sched_mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&n->jan_cv, &ca);
	pthread_condattr_destroy(&ca);

	/* SIGTERM/SIGINT are taken by sigwait below; block them before any
	 * thread starts so every thread inherits the mask. A client that goes
	 * away must not kill us with SIGPIPE. */
	sigemptyset(&stop_set);
	sigaddset(&stop_set, SIGTERM);
	sigaddset(&stop_set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &stop_set, &old_set);
	signal(SIGPIPE, SIG_IGN);

	n->db = db_open(cfg->db_path, err);
	if (!n->db) {
		r = err_wrap(err, "node");
		goto out;
	}
	if (node_info_get(n, &info, &e2) < 0)
		log_warn("node manager not answering yet: %s", e2.msg);
	else
		log_info("node: %u cpus, %llu MiB memory, cgroup %s", info.cpus,
			 (unsigned long long)info.mem_total_mb, info.cgroup_mode);

	templates_reconcile(n);
	node_reconcile(n);

	r = reaper_start(n, err);
	if (r < 0)
		goto out;
	schedule_start(n);
	n->http = http_server_start(cfg->sock_path, NODE_FILE_MAX + 4096, node_handler, n, err);
	if (!n->http) {
		r = err_wrap(err, "node: listen on %s", cfg->sock_path);
		goto out;
	}
	log_info("node listening on %s", cfg->sock_path);

	while (sigwait(&stop_set, &sig) != 0 || (sig != SIGTERM && sig != SIGINT))
		;
	log_info("node stopping (signal %d)", sig);
	r = 0;
out:
	/* Wake every streaming handler so the server's connection threads can
	 * finish, then stop serving, then retire the sandboxes. */
	__atomic_store_n(&n->stopping, 1, __ATOMIC_RELEASE);
	procs_wake_all(n);
	http_server_stop(n->http);
	reaper_stop(n);
	if (n->db)
		sandbox_stop_all(n);
	templates_cleanup(n);
	db_close(n->db);
	pthread_cond_destroy(&n->jan_cv);
	pthread_mutex_destroy(&n->jan_mu);
	pthread_mutex_destroy(&n->sched_mu);
	pthread_mutex_destroy(&n->tmpl_mu);
	pthread_mutex_destroy(&n->info_mu);
	pthread_mutex_destroy(&n->mu);
	free(n);
	pthread_sigmask(SIG_SETMASK, &old_set, NULL);
	return r;
}
