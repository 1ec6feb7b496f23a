/* airlockd node: startup, shutdown and HTTP routing. The routes, and what
 * the router does before each handler, are rows of src/lib/routes.def,
 * shared with the api. The router only points down: what the handlers
 * share for answering and for reading a request is the room http/; GET
 * /v1/node is nodeinfo.c. Sandboxes (map, JSON, rows, guest channel,
 * states) live in model/, list and get in sandboxes.c, their
 * create in create.c, the rest of their lifecycle in life/, suspend/ and
 * wake/; processes in proc/ and exec/; files in files/, templates in
 * tmpl/, snapshots and crash recovery in snap/ (and reconcile.c at
 * start), and timed work in model/reaper.c and timers.c. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "../lib/fault.h"
#include "../lib/log.h"
#include "../lib/peer.h"
#include "../lib/route.h"
#include "../objstore/objstore.h"
#include "node-internal.h"

/* ---- routing ---------------------------------------------------------- */

/* What the router found for a request: the handlers' common arguments. */
struct node_call {
	const char *tenant;         /* X-Airlock-Tenant: whom the api acts for */
	bool admin;                 /* X-Airlock-Admin: 1 */
	struct route_params params; /* the path's {id}, {pid}, ... as strings */
	struct sandbox *sb;         /* N_FIND, N_CLAIM: the sandbox {id}, a ref */
	uint32_t pid;               /* {pid}, checked */
};

typedef void node_route_fn(struct node *n, struct http_req *req, struct http_conn *c,
			   const struct node_call *k);

/* node_flags of routes.def: what the router does before the handler. */
enum {
	N_FIND = 1 << 0,   /* find the sandbox {id} (404 when it is not here) */
	N_CLAIM = 1 << 1,  /* N_FIND, and claim a suspended one of another node; 409 if deleted */
	N_GATE = 1 << 2,   /* then the suspend gate (restore on use, or 409) */
	N_ANY = 1 << 3,    /* the handler answers the other methods of the path itself */
	N_ANYONE = 1 << 4, /* no tenant needed */
	N_EXACT = 1 << 5,  /* another method is 404, as an unknown path (the old
			    * router matched these with their method) */
};

static void not_allowed(struct http_conn *c, const struct http_req *req)
{
	http_respond_error(c, 405, "method_not_allowed", "%s is not allowed here", req->method);
}

static bool admin_only(const struct node_call *k, struct http_conn *c, const char *msg)
{
	if (!k->admin)
		http_respond_error(c, 403, "forbidden", "%s", msg);
	return k->admin;
}

static const char *param(const struct node_call *k, const char *name)
{
	return route_param(&k->params, name, NULL);
}

/* The path's last segment: the literal a row's pattern ends in (the
 * operation: "pause", "stdin", "stat", ...). */
static const char *last_segment(const struct http_req *req)
{
	return strrchr(req->path, '/') + 1;
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

/* The sandbox id of this tenant, for N_FIND and N_CLAIM: NULL when it has
 * answered (404, 409, or the claim's error). */
static struct sandbox *sandbox_here(struct node *n, const char *id, const char *tenant,
				    bool claim, struct http_conn *c)
{
	struct sandbox *sb = sandbox_find(n, id, tenant);

	if (sb && cluster_forget_if_moved(n, sb)) {
		/* moved to another node since: what this node has is stale */
		sandbox_unref(sb);
		sb = NULL;
	}
	if (!sb && claim) {
		/* A suspended sandbox of another node, sent here by the api
		 * (its node is lost or down, or the client asked for this one):
		 * it moves here, then the request goes on (a restore, or an
		 * operation that restores it). */
		err_t e = { 0 };

		sb = suspend_claim(n, id, tenant, &e);
		if (!sb && e.code != ENOENT) {
			node_respond_err(c, &e);
			return NULL;
		}
	}
	if (!sb) {
		/* An operation on this tenant's deleted sandbox is a conflict with
		 * its state; reading it (GET /v1/sandboxes/{id}) is a plain 404. */
		if (claim && sandbox_is_deleted(n, id, tenant))
			node_respond_conflict(c, SB_DELETED, "sandbox %s is deleted", id);
		else
			http_respond_error(c, 404, "not_found", "no sandbox `%s`", id);
	}
	return sb;
}

/* A path no row takes. ports.c may still know it (its own 400 for a port
 * that is not one). Under /v1/sandboxes/{id}/ the sandbox is looked up (and
 * claimed) first, so a missing or deleted one answers as it does on its
 * routes; then 404. */
static void no_route(struct node *n, struct http_req *req, struct http_conn *c,
		     const char *tenant)
{
	static const char under_sb[] = "/v1/sandboxes/{id}/{path...}";
	_cleanup_free_ char *path = xstrdup(req->path ? req->path : "");
	struct route_params p;
	struct sandbox *sb = NULL;

	if (ports_route(n, req, c, tenant))
		return;
	if (route_match(under_sb, path, &p) && route_param(&p, "path", NULL)[0]) {
		route_params_cut(&p);
		sb = sandbox_here(n, route_param(&p, "id", NULL), tenant, true, c);
		if (!sb)
			return;
	}
	http_respond_error(c, 404, "not_found", "no such endpoint");
	if (sb)
		sandbox_unref(sb);
}

/* The handlers of routes.def's node column: each calls its module's. */

static void node_metrics(struct node *n, struct http_req *req, struct http_conn *c,
			 const struct node_call *k)
{
	(void)req;
	if (admin_only(k, c, "admin only"))
		handle_metrics(n, c);
}

static void node_info(struct node *n, struct http_req *req, struct http_conn *c,
		      const struct node_call *k)
{
	(void)req;
	if (admin_only(k, c, "admin only"))
		handle_node(n, c);
}

static void node_doctor(struct node *n, struct http_req *req, struct http_conn *c,
			const struct node_call *k)
{
	(void)req;
	if (admin_only(k, c, "admin only"))
		handle_node_doctor(n, c);
}

static void node_encryption(struct node *n, struct http_req *req, struct http_conn *c,
			    const struct node_call *k)
{
	if (admin_only(k, c, "admin only"))
		handle_tenant_encryption(n, req, c, param(k, "tenant"), false);
}

static void node_encryption_rotate(struct node *n, struct http_req *req, struct http_conn *c,
				   const struct node_call *k)
{
	if (admin_only(k, c, "admin only"))
		handle_tenant_encryption(n, req, c, param(k, "tenant"), true);
}

static void node_templates_list(struct node *n, struct http_req *req, struct http_conn *c,
				const struct node_call *k)
{
	handle_templates_list(n, req, c, k->admin);
}

static void node_templates_create(struct node *n, struct http_req *req, struct http_conn *c,
				  const struct node_call *k)
{
	if (admin_only(k, c, "building templates is admin only"))
		handle_templates_create(n, req, c);
}

static void node_templates_delete(struct node *n, struct http_req *req, struct http_conn *c,
				  const struct node_call *k)
{
	(void)req;
	if (admin_only(k, c, "deleting templates is admin only"))
		handle_templates_delete(n, param(k, "name"), c);
}

static void node_sandboxes_list(struct node *n, struct http_req *req, struct http_conn *c,
				const struct node_call *k)
{
	handle_sandboxes_list(n, req, c, k->tenant);
}

static void node_sandboxes_create(struct node *n, struct http_req *req, struct http_conn *c,
				  const struct node_call *k)
{
	handle_sandboxes_create(n, req, c, k->tenant);
}

static void node_sandboxes_events(struct node *n, struct http_req *req, struct http_conn *c,
				  const struct node_call *k)
{
	handle_sandboxes_events(n, req, c, k->tenant);
}

static void node_sandbox_get(struct node *n, struct http_req *req, struct http_conn *c,
			     const struct node_call *k)
{
	(void)req;
	handle_sandbox_get(n, k->sb, c);
}

/* Before any lookup: a delete goes on whether or not this node has it. */
static void node_sandbox_delete(struct node *n, struct http_req *req, struct http_conn *c,
				const struct node_call *k)
{
	(void)req;
	handle_sandbox_delete(n, param(k, "id"), k->tenant, c);
}

static void node_lifecycle(struct node *n, struct http_req *req, struct http_conn *c,
			   const struct node_call *k)
{
	handle_sandbox_lifecycle(n, k->sb, last_segment(req), c);
}

static void node_timeout(struct node *n, struct http_req *req, struct http_conn *c,
			 const struct node_call *k)
{
	handle_sandbox_timeout(n, k->sb, req, c);
}

static void node_snapshots(struct node *n, struct http_req *req, struct http_conn *c,
			   const struct node_call *k)
{
	handle_snapshots(n, k->sb, param(k, "snapshot"), req, c);
}

static void node_rollback(struct node *n, struct http_req *req, struct http_conn *c,
			  const struct node_call *k)
{
	handle_rollback(n, k->sb, req, c);
}

static void node_fork(struct node *n, struct http_req *req, struct http_conn *c,
		      const struct node_call *k)
{
	handle_fork(n, k->sb, req, c);
}

static void node_exec(struct node *n, struct http_req *req, struct http_conn *c,
		      const struct node_call *k)
{
	handle_exec(n, k->sb, req, c);
}

static void node_processes(struct node *n, struct http_req *req, struct http_conn *c,
			   const struct node_call *k)
{
	handle_processes(n, k->sb, req, c);
}

static void node_process(struct node *n, struct http_req *req, struct http_conn *c,
			 const struct node_call *k)
{
	handle_process(n, k->sb, k->pid, last_segment(req), req, c);
}

static void node_events(struct node *n, struct http_req *req, struct http_conn *c,
			const struct node_call *k)
{
	handle_events(n, k->sb, req, c);
}

static void node_sandbox_metrics(struct node *n, struct http_req *req, struct http_conn *c,
				 const struct node_call *k)
{
	(void)req;
	handle_sandbox_metrics(n, k->sb, c);
}

static void node_console(struct node *n, struct http_req *req, struct http_conn *c,
			 const struct node_call *k)
{
	(void)req;
	handle_console(n, k->sb, c);
}

static void node_files(struct node *n, struct http_req *req, struct http_conn *c,
		       const struct node_call *k)
{
	handle_files(n, k->sb, "", req, c);
}

static void node_files_op(struct node *n, struct http_req *req, struct http_conn *c,
			  const struct node_call *k)
{
	handle_files(n, k->sb, last_segment(req), req, c);
}

static void node_files_watch(struct node *n, struct http_req *req, struct http_conn *c,
			     const struct node_call *k)
{
	handle_files_watch(n, k->sb, req, c);
}

static void node_network(struct node *n, struct http_req *req, struct http_conn *c,
			 const struct node_call *k)
{
	handle_network(n, k->sb, false, req, c);
}

static void node_network_log(struct node *n, struct http_req *req, struct http_conn *c,
			     const struct node_call *k)
{
	handle_network(n, k->sb, true, req, c);
}

/* ports.c reads the raw target (the service's path and query) itself; a
 * tunnel with a query string is not its: no such endpoint, as before. */
static void node_ports(struct node *n, struct http_req *req, struct http_conn *c,
		       const struct node_call *k)
{
	no_route(n, req, c, k->tenant);
}

static void node_code(struct node *n, struct http_req *req, struct http_conn *c,
		      const struct node_call *k)
{
	handle_code_execute(n, k->sb, req, c);
}

static void node_code_contexts(struct node *n, struct http_req *req, struct http_conn *c,
			       const struct node_call *k)
{
	handle_code_contexts(n, k->sb, param(k, "cid"), !strcmp(last_segment(req), "restart") &&
			     param(k, "cid"), req, c);
}

/* The api's readiness probe acts for nobody: only the airlock user can
 * reach this socket (0660), and the answer names daemons, not data. */
static void node_internal_ready(struct node *n, struct http_req *req, struct http_conn *c,
				const struct node_call *k)
{
	(void)req, (void)k;
	handle_internal_ready(n, c);
}

static void node_internal_network(struct node *n, struct http_req *req, struct http_conn *c,
				  const struct node_call *k)
{
	(void)req, (void)k;
	handle_internal_network(n, c);
}

/* Node socket only (the api daemon does not forward it), admin only, and
 * 404 unless config debug_clock=true. */
static void node_debug_clock(struct node *n, struct http_req *req, struct http_conn *c,
			     const struct node_call *k)
{
	if (admin_only(k, c, "admin only"))
		handle_debug_clock(n, req, c);
}

struct node_route {
	const char *method, *pattern;
	node_route_fn *fn;
	unsigned flags;
	unsigned peers;    /* PEER_* bits: the roles that may call it (root always may) */
};

/* routes.def's peers column, as PEER_* bits. */
enum { PEERS_API = PEER_API, PEERS_GW = PEER_GATEWAY, PEERS_ROOT = 0 };

static const struct node_route node_routes[] = {
#define ROUTE(method, pattern, auth, api, node, flags, peers) \
	{ method, pattern, node, flags, PEERS_##peers },
#include "../lib/routes.def"
#undef ROUTE
};

/* The row that takes (method, path), or NULL. *flags: that row's; when no
 * row takes the method, those of every row that takes the path, so a wrong
 * method on a sandbox's path finds the sandbox first, then is 405. *known:
 * some row takes the path. params: the path's values, of the row, or of
 * the first that takes the path (one that finds a sandbox, if any). */
static const struct node_route *route_find(const char *method, const char *path,
					   struct route_params *params, unsigned *flags,
					   bool *known)
{
	struct route_params p;

	*flags = 0;
	*known = false;
	for (size_t i = 0; i < ARRAY_SIZE(node_routes); i++) {
		const struct node_route *r = &node_routes[i];

		if (!r->fn || !route_match(r->pattern, path, &p))
			continue;
		if (!strcmp(r->method, "*") || !strcmp(r->method, method) || (r->flags & N_ANY)) {
			*params = p;
			*flags = r->flags;
			*known = true;
			return r;
		}
		if (r->flags & N_EXACT)
			continue;
		if (!*known || (!(*flags & (N_FIND | N_CLAIM)) && (r->flags & (N_FIND | N_CLAIM))))
			*params = p;
		*known = true;
		*flags |= r->flags;
	}
	return NULL;
}

static void node_handler(void *ctx, struct http_req *req, struct http_conn *c)
{
	struct node *n = ctx;
	const char *tenant = http_req_header(req, "X-Airlock-Tenant");
	const char *admin_h = http_req_header(req, "X-Airlock-Admin");
	struct node_call k = { .tenant = tenant, .admin = admin_h && strcmp(admin_h, "1") == 0 };
	_cleanup_free_ char *path = xstrdup(req->path ? req->path : "");
	const struct node_route *r;
	const char *pid;
	unsigned flags;
	bool known;

	/* The api's id of this request, for our log lines and nodemgr's
	 * (nm.c sends it with each verb); dropped unless pattern-clean. */
	log_set_request_id(http_req_header(req, "X-Request-Id"));
	r = route_find(req->method, path, &k.params, &flags, &known);
	/* The socket is the group's, so the api, the gateway and anyone else
	 * of the group reach it: the peer's uid decides, before the identity
	 * headers below are believed. A path no row takes is the api's (a
	 * client's mistake it forwarded, a host-routed port). */
	if (!peer_allow(&n->cfg->peers, req, c, r ? r->peers : PEERS_API))
		return;
	/* Every request comes from the api daemon, which authenticated it and
	 * names the tenant; without one there is nobody to act for. */
	if (!(r && (r->flags & N_ANYONE)) && (!tenant || !*tenant || strlen(tenant) > 128)) {
		http_respond_error(c, 401, "unauthorized", "missing X-Airlock-Tenant");
		return;
	}
	if (!known) {
		no_route(n, req, c, tenant);
		return;
	}
	route_params_cut(&k.params);
	if ((flags & (N_FIND | N_CLAIM)) &&
	    !(k.sb = sandbox_here(n, param(&k, "id"), tenant, flags & N_CLAIM, c)))
		return;
	if ((flags & N_GATE) && !suspend_gate(k.sb, req, c))
		;   /* answered: 409, suspended and auto_restore=false */
	else if ((pid = param(&k, "pid")) && !parse_pid(pid, &k.pid))
		http_respond_error(c, 404, "not_found", "no process `%s`", pid);
	else if (!r)
		not_allowed(c, req);
	else
		r->fn(n, req, c, &k);
	if (k.sb)
		sandbox_unref(k.sb);
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
	sandbox_feature_add(&limits_feature);
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
	limits_start(n);
	byok_start(n);
	tmplstore_start(n);
	/* tests/e2e/test_ready.py holds the node here: not listening yet,
	 * while a stale node.sock may still be on disk */
	FAULT_POINT("node.before_listen");
	n->http = http_server_start(cfg->sock_path, NODE_FILE_MAX + 4096, node_handler, n, err);
	if (!n->http) {
		r = err_wrap(err, "node: listen on %s", cfg->sock_path);
		goto out;
	}
	log_info("node listening on %s", cfg->sock_path);

	while (sigwait(&stop_set, &sig) != 0 || (sig != SIGTERM && sig != SIGINT))
		;
	if (__atomic_load_n(&n->fenced, __ATOMIC_ACQUIRE)) {
		/* Fenced (cluster/heartbeat.c): this process no longer owns its
		 * name, so it retires nothing and writes nothing; it goes as a
		 * node killed outright goes. The jails stay with nodemgr; the
		 * next process under this name draws a new epoch, re-adopts the
		 * sandboxes whose rows still name it and drops the rest. */
		log_err("node exiting: fenced");
		_exit(1);
	}
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
	db_close(n->lock_db);   /* the name's lock goes last: after the last write */
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
