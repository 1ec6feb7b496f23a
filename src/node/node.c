/* airlockd node: startup, shutdown and HTTP routing. The router only points
 * down: what the handlers share for answering is in reply.c and for reading
 * a request in request.c; GET /v1/node is nodeinfo.c. Sandboxes (map, JSON,
 * rows, guest channel, states) live in model/, list and get in sandboxes.c,
 * their create in create.c, the rest of their lifecycle in life/;
 * processes in exec.c, proc/ and processes.c; files in
 * files.c, templates in templates.c, crash recovery in reconcile.c and
 * recover.c, and timed work in model/reaper.c and timers.c. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "../lib/log.h"
#include "../objstore/objstore.h"
#include "node-internal.h"

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
	if (sb && cluster_forget_if_moved(n, sb)) {
		/* moved to another node since: what this node has is stale */
		sandbox_unref(sb);
		sb = NULL;
	}
	if (!sb && nseg > 3) {
		/* A suspended sandbox of another node, sent here by the api
		 * (its node is lost or down, or the client asked for this one):
		 * it moves here, then the request goes on (a restore, or an
		 * operation that restores it). */
		err_t e = { 0 };

		sb = suspend_claim(n, id, tenant, &e);
		if (!sb && e.code != ENOENT) {
			node_respond_err(c, &e);
			return;
		}
	}
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
	} else if (nseg >= 4 && (strcmp(segs[3], "exec") == 0 || strcmp(segs[3], "connect") == 0 ||
				 strcmp(segs[3], "files") == 0 ||
				 strcmp(segs[3], "processes") == 0) &&
		   !suspend_gate(sb, req, c)) {
		/* answered: 409, suspended and auto_restore=false */
	} else if (nseg == 4 && (strcmp(segs[3], "pause") == 0 || strcmp(segs[3], "resume") == 0 ||
				 strcmp(segs[3], "connect") == 0 || strcmp(segs[3], "suspend") == 0 ||
				 strcmp(segs[3], "restore") == 0)) {
		if (method_is(req, "POST"))
			handle_sandbox_lifecycle(n, sb, segs[3], c);
		else
			not_allowed(c, req);
	} else if (strcmp(segs[3], "snapshots") == 0 && (nseg == 4 || nseg == 5)) {
		handle_snapshots(n, sb, nseg == 5 ? segs[4] : NULL, req, c);
	} else if (strcmp(segs[3], "timeout") == 0 && nseg == 4) {
		if (method_is(req, "POST"))
			handle_sandbox_timeout(n, sb, req, c);
		else
			not_allowed(c, req);
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
	} else if (strcmp(segs[3], "metrics") == 0 && nseg == 4) {
		if (method_is(req, "GET"))
			handle_sandbox_metrics(n, sb, c);
		else
			not_allowed(c, req);
	} else if (strcmp(segs[3], "events") == 0 && nseg == 4) {
		if (method_is(req, "GET"))
			handle_events(n, sb, req, c);
		else
			not_allowed(c, req);
	} else if (strcmp(segs[3], "console") == 0 && nseg == 4) {
		if (method_is(req, "GET"))
			handle_console(n, sb, c);
		else
			not_allowed(c, req);
	} else if (strcmp(segs[3], "processes") == 0 && nseg == 4) {
		if (method_is(req, "GET"))
			handle_processes(n, sb, req, c);
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
		bool watch = strcmp(sub, "watch") == 0;
		bool get = watch || strcmp(sub, "stat") == 0 || strcmp(sub, "list") == 0;
		bool post = strcmp(sub, "mkdir") == 0 || strcmp(sub, "rename") == 0;

		if (!get && !post)
			http_respond_error(c, 404, "not_found", "no such endpoint");
		else if ((get && !method_is(req, "GET")) || (post && !method_is(req, "POST")))
			not_allowed(c, req);
		else if (watch)
			handle_files_watch(n, sb, req, c);
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

	/* The api's id of this request, for our log lines and nodemgr's
	 * (nm.c sends it with each verb); dropped unless pattern-clean. */
	log_set_request_id(http_req_header(req, "X-Request-Id"));
	/* The api's readiness probe acts for nobody: only the airlock user can
	 * reach this socket (0660), and the answer names daemons, not data. */
	if (strcmp(path, "/internal/ready") == 0 && method_is(req, "GET")) {
		handle_internal_ready(n, c);
		return;
	}
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
	if (nseg == 1 && strcmp(segs[0], "metrics") == 0) {
		if (!method_is(req, "GET"))
			not_allowed(c, req);
		else if (!admin)
			http_respond_error(c, 403, "forbidden", "admin only");
		else
			handle_metrics(n, c);
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
	} else if (strcmp(segs[1], "node") == 0 &&
		   (nseg == 2 || (nseg == 3 && strcmp(segs[2], "doctor") == 0))) {
		if (!method_is(req, "GET"))
			not_allowed(c, req);
		else if (!admin)
			http_respond_error(c, 403, "forbidden", "admin only");
		else if (nseg == 3)
			handle_node_doctor(n, c);
		else
			handle_node(n, c);
	} else if (strcmp(segs[1], "templates") == 0 && nseg == 2) {
		if (method_is(req, "GET"))
			handle_templates_list(n, req, c, admin);
		else if (!method_is(req, "POST"))
			not_allowed(c, req);
		else if (!admin)
			http_respond_error(c, 403, "forbidden", "building templates is admin only");
		else
			handle_templates_create(n, req, c);
	} else if (strcmp(segs[1], "templates") == 0 && nseg == 3) {
		if (!method_is(req, "DELETE"))
			not_allowed(c, req);
		else if (!admin)
			http_respond_error(c, 403, "forbidden", "deleting templates is admin only");
		else
			handle_templates_delete(n, segs[2], c);
	} else if (strcmp(segs[1], "tenants") == 0 && (nseg == 4 || nseg == 5) &&
		   strcmp(segs[3], "encryption") == 0 &&
		   (nseg == 4 || strcmp(segs[4], "rotate") == 0)) {
		if (!admin)
			http_respond_error(c, 403, "forbidden", "admin only");
		else
			handle_tenant_encryption(n, req, c, segs[2], nseg == 5);
	} else if (strcmp(segs[1], "sandboxes") == 0 && nseg == 2) {
		if (method_is(req, "POST"))
			handle_sandboxes_create(n, req, c, tenant);
		else if (method_is(req, "GET"))
			handle_sandboxes_list(n, req, c, tenant);
		else
			not_allowed(c, req);
	} else if (strcmp(segs[1], "sandboxes") == 0 && nseg == 3 &&
		   strcmp(segs[2], "events") == 0 && method_is(req, "GET")) {
		/* no sandbox id is "events" (ids are sb-<hex>) */
		handle_sandboxes_events(n, req, c, tenant);
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
	/* A descriptor per sandbox (its guest channel), and more per exec:
	 * a thousand idle sandboxes are past a login's soft limit of 1024. */
	raise_fd_limit();
	n->stop_fd = eventfd(0, EFD_CLOEXEC);
	n->bctx.nm_sock = cfg->nm_sock;
	n->bctx.vm_cold_boot = cfg->vm_cold_boot;
	pthread_mutex_init(&n->mu, NULL);
	pthread_mutex_init(&n->count_mu, NULL);
	pthread_mutex_init(&n->vmstart_mu, NULL);
	pthread_cond_init(&n->vmstart_cv, NULL);
	n->vmstart_max = cfg->vm_start_concurrency ? cfg->vm_start_concurrency
						   : 2 * (unsigned)(sysconf(_SC_NPROCESSORS_ONLN) > 0 ?
								    sysconf(_SC_NPROCESSORS_ONLN) : 1);
	state_set_setter(sandbox_state_setter);
	sandbox_feature_add(&sched_feature);
	sandbox_feature_add(&suspend_feature);
	sandbox_feature_add(&proc_feature);
	pthread_mutex_init(&n->info_mu, NULL);
	pthread_mutex_init(&n->tmpl_mu, NULL);
	pthread_mutex_init(&n->tstore_mu, NULL);
	pthread_mutex_init(&n->tpub_mu, NULL);
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

	/* Only the node talks to the object store (suspend.c). A store that
	 * cannot be opened leaves suspend off; one that is down is found out
	 * by each suspend, which then fails and keeps the sandbox. */
	if (cfg->object_store && cfg->object_store[0]) {
		struct objstore_opts oo = { .access_key = cfg->s3_access_key,
					    .secret_key = cfg->s3_secret_key,
					    .timeout_ms = 10000, .retries = 2 };
		n->os = objstore_open(cfg->object_store, &oo, &e2);
		if (!n->os)
			log_err("object store %s: %s (suspend is off)", cfg->object_store, e2.msg);
		else
			log_info("object store: %s (%s)", cfg->object_store, objstore_driver(n->os));
	}

	/* BYOK: the tenants' keys (local ones under key_dir) and the cache
	 * of unwrapped data keys, in this process only. */
	if ((r = kms_init(&n->kms, n->db, cfg->key_dir ? cfg->key_dir : cfg->staging_dir,
			  cfg->kms_cache_ttl_s, err)) < 0)
		goto out;
	if (!cfg->encrypt_artifacts)
		log_warn("encrypt_artifacts = false: artifacts go to the object store in PLAINTEXT "
			 "(for the control test and benchmarks only)");

	if ((r = cluster_register(n, err)) < 0)
		goto out;
	templates_reconcile(n);
	node_reconcile(n);
	if ((r = cluster_start(n, err)) < 0)
		goto out;

	r = reaper_start(n, node_timer_fire, err);
	if (r < 0)
		goto out;
	schedule_start(n);
	byok_start(n);
	tmplstore_start(n);
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
	if (n->stop_fd >= 0 && eventfd_write(n->stop_fd, 1) < 0)
		log_warn("cannot cancel template builds: %m");
	procs_wake_all(n);
	http_server_stop(n->http);
	cluster_stop(n);
	tmplstore_stop(n);
	reaper_stop(n);
	byok_stop(n);
	if (n->db)
		sandbox_stop_all(n);
	templates_cleanup(n);
	db_close(n->db);
	objstore_close(n->os);
	if (n->stop_fd >= 0)
		close(n->stop_fd);
	kms_fini(&n->kms);
	pthread_cond_destroy(&n->jan_cv);
	pthread_mutex_destroy(&n->jan_mu);
	pthread_mutex_destroy(&n->sched_mu);
	pthread_mutex_destroy(&n->tmpl_mu);
	pthread_mutex_destroy(&n->tstore_mu);
	pthread_mutex_destroy(&n->tpub_mu);
	pthread_mutex_destroy(&n->info_mu);
	pthread_mutex_destroy(&n->mu);
	pthread_mutex_destroy(&n->count_mu);
	pthread_mutex_destroy(&n->vmstart_mu);
	pthread_cond_destroy(&n->vmstart_cv);
	free(n);
	pthread_sigmask(SIG_SETMASK, &old_set, NULL);
	return r;
}
