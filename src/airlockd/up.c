/* up.c - `airlockd up` (all-in-one): the supervisor of the roles (roles.c).
 *
 * Work done in the root parent: create the airlock user if missing, prepare
 * DATA (pool mount, run/ and logs/, DB file ownership), bootstrap the first
 * admin key and DATA/cli.json. Then three children: nodemgr keeps root; node
 * and api drop to the airlock user before they touch anything a client or a
 * sandbox sent. The parent supervises: a child that dies is restarted (node
 * re-adopts its sandboxes), and SIGTERM/SIGINT stops api, node, nodemgr in
 * that order and unmounts the pool if we mounted it. */
#include <arpa/inet.h>
#include <openssl/crypto.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../api/api.h"
#include "../cred/ca.h"
#include "../cred/seal.h"
#include "../db/db.h"
#include "../gateway/gateway.h"
#include "../lib/http.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/readiness.h"
#include "../lib/resource.h"
#include "../lib/secret.h"
#include "../lib/secmem.h"
#include "../lib/tls.h"
#include "../lib/util.h"
#include "../nmclient/nm.h"
#include "../node/node.h"
#include "../nodemgr/nodemgr.h"
#include "../pool/pool.h"
#include "airlockd.h"

/* The SQLite file `up` prepares and hands to the unprivileged user, or NULL
 * for PostgreSQL (its files are the server's). Caller frees. */
static char *db_sqlite_file(const struct airlockd_config *cfg)
{
	if (db_target_is_postgres(cfg->db))
		return NULL;
	if (!strncmp(cfg->db, "sqlite:", 7))
		return xstrdup(cfg->db + 7);
	return data_path(cfg, "db/airlock.db");
}

/* Read when no --config is given (an install puts a commented one there). */
#define DEFAULT_CONFIG "/etc/airlock/airlockd.conf"

int airlockd_parse_args(struct airlockd_config *cfg, int argc, char **argv, err_t *err)
{
	bool have_config = false;

	/* --config first, so that flags override the file whatever their order. */
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--config")) {
			if (i + 1 >= argc)
				return err_set(err, EINVAL, "--config needs a value");
			int r = config_load(cfg, argv[i + 1], err);
			if (r < 0)
				return r;
			have_config = true;
		}
	/* Else $AIRLOCK_CONFIG (empty: none), else the system's file if any. */
	if (!have_config) {
		const char *env = getenv("AIRLOCK_CONFIG");
		const char *path = env ? env : DEFAULT_CONFIG;
		int r;

		if (path[0] && (env || access(path, F_OK) == 0) &&
		    (r = config_load(cfg, path, err)) < 0)
			return r;
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		static const struct { const char *flag, *key; } map[] = {
			{ "--data-dir", "data_dir" }, { "--listen", "listen" },
			{ "--templates", "templates" }, { "--user", "user" },
			{ "--pool-size-mb", "pool_size_mb" }, { "--log-level", "log_level" },
			{ "--log-format", "log_format" },
			{ "--db", "db" }, { "--node-name", "node_name" },
			{ "--object-store", "object_store" },
			{ "--tls-cert", "tls_cert" }, { "--tls-key", "tls_key" },
		};
		bool done = false;

		if (!strcmp(a, "--config")) {
			i++;
			continue;
		}
		for (size_t k = 0; k < ARRAY_SIZE(map); k++)
			if (!strcmp(a, map[k].flag)) {
				if (!v)
					return err_set(err, EINVAL, "%s needs a value", a);
				int r = config_set(cfg, map[k].key, v, err);
				if (r < 0)
					return r;
				cfg->secret_in_argv |= secret_setting_holds(map[k].key, v);
				i++;
				done = true;
			}
		if (done)
			continue;
		if (!strcmp(a, "--set")) {
			char key[64];
			const char *eq = v ? strchr(v, '=') : NULL;
			if (!eq || (size_t)(eq - v) >= sizeof(key))
				return err_set(err, EINVAL, "--set needs key=value");
			memcpy(key, v, (size_t)(eq - v));
			key[eq - v] = '\0';
			int r = config_set(cfg, key, eq + 1, err);
			if (r < 0)
				return r;
			cfg->secret_in_argv |= secret_setting_holds(key, eq + 1);
			i++;
			continue;
		}
		return err_set(err, EINVAL, "unknown argument `%s`", a);
	}
	return config_secrets_load(cfg, err);
}

enum role { ROLE_NODEMGR, ROLE_GATEWAY, ROLE_NODE, ROLE_API, N_ROLES };
_Static_assert(1u << ROLE_NODEMGR == CONFIG_ROLE_NODEMGR && 1u << ROLE_GATEWAY == CONFIG_ROLE_GATEWAY &&
	       1u << ROLE_NODE == CONFIG_ROLE_NODE && 1u << ROLE_API == CONFIG_ROLE_API, "role bits");
static const char *const role_names[N_ROLES] = { "nodemgr", "gateway", "node", "api" };
static const char *const role_socks[N_ROLES] = { "run/nodemgr.sock", "run/gateway.sock",
						 "run/node.sock", NULL };

static volatile sig_atomic_t stop_requested;
static void on_stop(int sig) { stop_requested = sig; }

static pid_t spawn_role(struct airlockd_config *cfg, enum role role)
{
	pid_t parent = getpid();
	pid_t pid = fork();

	if (pid != 0)
		return pid;
	/* child: a fresh process for the role, dying with the supervisor */
	err_t err = { 0 };
	int r;
	signal(SIGTERM, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	airlockd_supervisor = parent;
	prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0);
	if (getppid() != airlockd_supervisor)
		_exit(1);
	log_init(role_names[role], (enum log_level)cfg->log_level);
	log_set_json(cfg->log_json);
	/* cfg is this child's copy (fork): the role keeps its secrets only. */
	config_keep_secrets(cfg, 1u << role);
	if (role == ROLE_NODEMGR)
		r = airlockd_nodemgr(cfg, &err);
	else if (role == ROLE_GATEWAY)
		r = airlockd_gateway(cfg, &err);
	else if (role == ROLE_NODE)
		r = airlockd_node(cfg, &err);
	else
		r = airlockd_api(cfg, &err);
	if (r < 0) {
		log_err("%s", err.msg);
		_exit(1);
	}
	_exit(0);
}

static int write_pidfile(const struct airlockd_config *cfg, const char *name, pid_t pid)
{
	_cleanup_free_ char *rel = xasprintf("run/%s.pid", name);
	_cleanup_free_ char *path = data_path(cfg, rel);
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%d\n", (int)pid);

	return write_file(path, buf, (size_t)n, 0644);
}

/* How long one readiness request may wait for its answer. The node's
 * GET /internal/ready asks nodemgr and the gateway (1 s each) in turn. */
#define ROLE_PROBE_MS 3000

/* Does the role answer now? Ready is a live connection that answers a
 * cheap request, never a socket file: a killed role leaves its file behind,
 * and the file stays until the new process renames its own over it. */
static int role_answers(const struct airlockd_config *cfg, enum role role, err_t *err)
{
	if (role == ROLE_API) {
		/* with TLS the plain probe gets a plain 400 tls_required: an
		 * answer all the same, the api is up */
		_cleanup_free_ char *url = xasprintf("http://%s", cfg->listen);
		return readiness_http_answers(url, "/v1/health", ROLE_PROBE_MS, err);
	}
	_cleanup_free_ char *sock = data_path(cfg, role_socks[role]);
	if (role == ROLE_NODEMGR)
		return nm_ping(sock, ROLE_PROBE_MS, err);  /* NODE_INFO answered */
	_cleanup_free_ char *base = xasprintf("unix:%s", sock);
	return readiness_http_answers(base, role == ROLE_GATEWAY ? "/health" : "/internal/ready",
				      ROLE_PROBE_MS, err);
}

/* Has pid exited? Peeks (WNOWAIT): the supervisor's loop reaps it and
 * restarts the role. */
static bool role_exited(pid_t pid, int *status)
{
	siginfo_t si;

	memset(&si, 0, sizeof(si));
	if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0)
		return errno == ECHILD;
	*status = si.si_status;
	return si.si_pid == pid;
}

/* Wait until a role answers (role_answers), its process exited (left
 * unreaped), a stop was asked for (-EINTR), or timeout_ms passed. */
static int wait_ready(const struct airlockd_config *cfg, enum role role, pid_t pid,
		      int timeout_ms, err_t *err)
{
	uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
	err_t last = { 0 };

	for (;;) {
		int st = 0;
		if (stop_requested)
			return err_set(err, EINTR, "stopping");
		if (role_exited(pid, &st))
			return err_set(err, ECHILD, "%s exited during start-up (status %d)",
				       role_names[role], st);
		memset(&last, 0, sizeof(last));
		if (role_answers(cfg, role, &last) == 0)
			return 0;
		if (now_ms() > deadline)
			return err_set(err, ETIMEDOUT, "%s did not come up: %s", role_names[role],
				       last.msg);
		/* start-up only, never on a request path */
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
}

static int prepare_data_dir(const struct airlockd_config *cfg, bool *pool_mounted, err_t *err)
{
	static const char *const dirs[] = { "", "run", "logs", "db", "staging", "objects",
					    "tenant-keys" };
	uid_t uid = 0;
	gid_t gid = 0;
	int r = lookup_user(cfg->user, &uid, &gid, err);

	if (r < 0)
		return r;
	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
		_cleanup_free_ char *p = data_path(cfg, dirs[i]);
		r = mkdir_p(p, 0755);
		if (r < 0) {
			errno = -r;
			return err_sys(err, "mkdir %s", p);
		}
	}
	/* The unprivileged node and api must be able to reach DATA/db and
	 * DATA/run, whatever mode the directory was made with (mkdtemp: 0700). */
	if (chmod(cfg->data_dir, 0755) < 0)
		return err_sys(err, "chmod %s", cfg->data_dir);
	/* ... and they must reach it: every parent searchable by them (the
	 * dirs just made included: a umask may have made them 0700). */
	{
		char apibuf[64], gwbuf[64];
		if ((r = check_data_dir_reachable(cfg, cfg->user, (gid_t)-1, err)) < 0 ||
		    (r = check_data_dir_reachable(cfg, api_user(cfg, apibuf), gid, err)) < 0 ||
		    (cfg->network &&
		     (r = check_data_dir_reachable(cfg, gateway_user(cfg, gwbuf), gid, err)) < 0))
			return r;
	}
	/* run/ holds the node socket and must be writable by the node; the
	 * nodemgr socket in it is root-owned with group access only. */
	/* staging/ holds artifacts of suspends and restores in transit (the
	 * node's); objects/ is the default file:// object store, which only
	 * the node talks to. */
	/* run/ and db/ are shared with the gateway, which runs as a user of
	 * its own in this user's group: group-writable, and setgid so that
	 * what either creates there (sockets, SQLite's -wal and -shm) keeps
	 * the group. */
	static const struct { const char *dir; mode_t mode; } owned[] = {
		{ "run", 02770 }, { "db", 02770 }, { "staging", 0700 }, { "objects", 0700 },
	};
	for (size_t i = 0; i < ARRAY_SIZE(owned); i++) {
		_cleanup_free_ char *p = data_path(cfg, owned[i].dir);
		if (chown(p, uid, gid) < 0 || chmod(p, owned[i].mode) < 0)
			return err_sys(err, "chown %s", p);
	}
	/* tenant-keys/ holds the local BYOK provider's tenant keys
	 * (src/byok/kms-local.c): the node's, and no one else's. */
	{
		_cleanup_free_ char *p = cfg->tenant_key_dir[0] ? xstrdup(cfg->tenant_key_dir)
							       : data_path(cfg, "tenant-keys");
		if ((r = mkdir_p(p, 0700)) < 0) {
			errno = -r;
			return err_sys(err, "mkdir %s", p);
		}
		if (chown(p, uid, gid) < 0 || chmod(p, 0700) < 0)
			return err_sys(err, "chown %s", p);
	}
	/* An SQLite DB (and its WAL files) belong to the unprivileged user,
	 * readable and writable by its group (the gateway). */
	_cleanup_free_ char *db = db_sqlite_file(cfg);
	if (db) {
		_cleanup_close_ int fd = open(db, O_RDWR | O_CREAT | O_CLOEXEC, 0660);
		if (fd < 0 || fchown(fd, uid, gid) < 0 || fchmod(fd, 0660) < 0)
			return err_sys(err, "prepare %s", db);
	}
	/* The credential vault's key pair: the private half stays root's
	 * (DATA/keys, 0700) for the gateway; the api gets the public half only,
	 * so it can store secrets but never read them. */
	{
		_cleanup_free_ char *priv = data_path(cfg, "keys/vault.key");
		_cleanup_free_ char *pub = data_path(cfg, "vault.pub");
		struct seal_key k;

		r = seal_key_ensure(&k, priv, pub, err);
		explicit_bzero(&k, sizeof(k));
		if (r < 0)
			return r;
	}
	/* The gateway's interception CA: key root's, certificate public (the
	 * template build installs it in every rootfs). */
	{
		_cleanup_free_ char *key = data_path(cfg, "keys/ca.key");
		_cleanup_free_ char *crt = data_path(cfg, "ca.crt");

		r = ca_ensure(key, crt, err);
		if (r < 0)
			return r;
	}
	r = pool_ensure(cfg->data_dir, cfg->pool_size_mb, pool_mounted, err);
	if (r < 0)
		return err_wrap(err, "storage pool");
	return 0;
}

/* First admin key and DATA/cli.json. Runs as root so cli.json can be root's
 * 0600 file; the DB files are then handed to the unprivileged user. */
static int bootstrap(const struct airlockd_config *cfg, err_t *err)
{
	static const char *const suffixes[] = { "", "-wal", "-shm" };
	_cleanup_free_ char *db = config_db_target(cfg);
	_cleanup_free_ char *file = db_sqlite_file(cfg);
	_cleanup_free_ char *cli = data_path(cfg, "cli.json");
	_cleanup_free_ char *url = xasprintf("%s://%s", cfg->tls_cert[0] ? "https" : "http",
					     cfg->listen);
	uid_t uid = 0;
	gid_t gid = 0;
	int r = lookup_user(cfg->user, &uid, &gid, err);

	if (r < 0)
		return r;
	r = api_bootstrap(db, cli, url, err);
	if (r < 0)
		return err_wrap(err, "bootstrap");
	for (size_t i = 0; file && i < ARRAY_SIZE(suffixes); i++) {
		_cleanup_free_ char *p = xasprintf("%s%s", file, suffixes[i]);
		if ((chown(p, uid, gid) < 0 || chmod(p, 0660) < 0) && errno != ENOENT)
			return err_sys(err, "chown %s", p);
	}
	return 0;
}

struct progress_ctx {
	const char *name;
	struct buf line;
};

static int on_progress(void *arg, const void *p, size_t n)
{
	struct progress_ctx *pc = arg;

	buf_add(&pc->line, p, n);
	for (;;) {
		char *nl = memchr(pc->line.data, '\n', pc->line.len);
		if (!nl)
			return 0;
		*nl = '\0';
		err_t e = { 0 };
		json *j = json_parse(pc->line.data, (size_t)(nl - pc->line.data), &e);
		if (j) {
			const char *ev = json_get_str(j, "event");
			const json *er = json_get(j, "error");
			if (ev && !strcmp(ev, "progress") && json_get_str(j, "line"))
				printf("[template %s] %s\n", pc->name, json_get_str(j, "line"));
			else if (ev && !strcmp(ev, "done"))
				printf("[template %s] ready\n", pc->name);
			else if (er && json_get_str(er, "message"))
				printf("[template %s] failed: %s\n", pc->name, json_get_str(er, "message"));
			fflush(stdout);
			json_free(j);
		}
		size_t used = (size_t)(nl - pc->line.data) + 1;
		memmove(pc->line.data, nl + 1, pc->line.len - used);
		pc->line.len -= used;
	}
}

/* Does the node's template list (GET /v1/templates) hold name, ready or
 * being built, on node `node`? (In a cluster the list has every node's.) */
static bool template_listed(const json *list, const char *name, const char *node)
{
	const json *v = json_get(list, "templates");

	for (size_t i = 0; v && v->type == JSON_ARR && i < v->n; i++) {
		const char *nm = json_get_str(v->items[i], "name");
		const char *st = json_get_str(v->items[i], "status");
		const char *on = json_get_str(v->items[i], "node");

		if (nm && !strcmp(nm, name) && st && strcmp(st, "failed") && (!on || !strcmp(on, node)))
			return true;
	}
	return false;
}

/* Make sure the configured templates exist, building missing ones through the
 * node (so concurrent creates share the build) and showing progress. */
static void ensure_templates(const struct airlockd_config *cfg)
{
	_cleanup_free_ char *sock = data_path(cfg, "run/node.sock");
	_cleanup_free_ char *base = xasprintf("unix:%s", sock);
	_cleanup_free_ char *list = xstrdup(cfg->templates);
	const char *hdr = "X-Airlock-Tenant: admin\r\nX-Airlock-Admin: 1\r\n"
			  "Content-Type: application/json\r\n";
	struct http_resp resp;
	json *listed;
	err_t err = { 0 };
	char *save = NULL;

	memset(&resp, 0, sizeof(resp));
	if (http_request(base, "GET", "/v1/templates", hdr, NULL, 0, &resp, &err) < 0) {
		log_warn("templates: %s", err.msg);
		return;
	}
	listed = resp.body.data ? json_parse(resp.body.data, resp.body.len, &err) : NULL;
	for (char *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
		if (template_listed(listed, name, cfg->node_name))
			continue;
		printf("[template %s] building (first run only; later starts reuse it)\n", name);
		fflush(stdout);
		_cleanup_free_ char *body = xasprintf("{\"name\":\"%s\"}", name);
		struct progress_ctx pc = { .name = name };
		struct http_stream_cbs cbs = { .on_data = on_progress };
		buf_init(&pc.line);
		if (http_request_stream(base, "POST", "/v1/templates", hdr, body, strlen(body), &cbs,
					&pc, &err) < 0)
			log_warn("template %s: %s", name, err.msg);
		buf_free(&pc.line);
	}
	json_free(listed);
	http_resp_free(&resp);
}

/* Tell systemd (Type=notify) how we are: "READY=1", "STOPPING=1". Its
 * socket is in $NOTIFY_SOCKET, a path or, after '@', an abstract name. */
static void notify_systemd(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t n;
	int fd;

	if (!path || (path[0] != '/' && path[0] != '@') || (n = strlen(path)) >= sizeof(sa.sun_path))
		return;
	memcpy(sa.sun_path, path, n);
	if (path[0] == '@')
		sa.sun_path[0] = '\0';
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	if (sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa,
		   (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)) < 0)
		log_warn("sd_notify %s: %m", state);
	close(fd);
}

/* Make the templates in a child, dying with us; when it is done, the
 * parent says that we are up (announce_up). */
static pid_t spawn_templates(struct airlockd_config *cfg)
{
	pid_t parent = getpid(), pid;

	fflush(stdout);  /* or the child writes our buffered lines again */
	pid = fork();
	if (pid != 0)
		return pid;
	signal(SIGTERM, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0);
	if (getppid() != parent)
		_exit(1);
	config_keep_secrets(cfg, 0);   /* it talks to the node socket only */
	ensure_templates(cfg);
	fflush(stdout);
	_exit(0);
}

/* Up: every role that runs answers now (a restarted one included). Then
 * say so on stdout and to systemd; false (not said) when one does not. */
static bool announce_up(const struct airlockd_config *cfg, const pid_t *pids)
{
	_cleanup_free_ char *cli = data_path(cfg, "cli.json");

	for (int i = 0; i < N_ROLES; i++) {
		err_t e = { 0 };
		if (pids[i] > 0 && wait_ready(cfg, (enum role)i, pids[i], 30000, &e) < 0) {
			if (e.code != EINTR)
				log_warn("not up yet: %s", e.msg);
			return false;
		}
	}
	printf("airlock is up: %s://%s  (CLI config: %s)\n", cfg->tls_cert[0] ? "https" : "http",
	       cfg->listen, cli);
	fflush(stdout);
	notify_systemd("READY=1");
	return true;
}

int airlockd_up(struct airlockd_config *cfg, err_t *err)
{
	pid_t pids[N_ROLES] = { 0 }, templates_pid = 0;
	bool pool_mounted = false;
	int r;

	if (getuid() != 0)
		return err_set(err, EPERM, "`airlockd up` must run as root (it starts the node manager)");
	if (!cfg->tls_cert[0] != !cfg->tls_key[0])
		return err_set(err, EINVAL, "tls_cert and tls_key go together");
	if (cfg->tls_cert[0]) {
		/* a bad file is said now, not as an api that keeps dying */
		struct tls_ctx *t = tls_server_ctx(cfg->tls_cert, cfg->tls_key, err);
		if (!t)
			return err_wrap(err, "TLS");
		tls_ctx_free(t);
	}
	r = ensure_user(cfg->user, err);
	{
		char apibuf[64], gwbuf[64];
		if (r == 0)
			r = ensure_user(api_user(cfg, apibuf), err);
		if (r == 0 && cfg->network)
			r = ensure_user(gateway_user(cfg, gwbuf), err);
	}
	if (r < 0)
		return r;
	r = prepare_data_dir(cfg, &pool_mounted, err);
	if (r < 0)
		return r;
	r = bootstrap(cfg, err);
	if (r < 0)
		goto out;

	struct sigaction sa = { .sa_handler = on_stop };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	for (int i = 0; i < N_ROLES && !stop_requested; i++) {
		if (i == ROLE_GATEWAY && !cfg->network)
			continue;  /* no sandbox network: nothing to proxy */
		pids[i] = spawn_role(cfg, (enum role)i);
		if (pids[i] < 0) {
			r = err_sys(err, "fork %s", role_names[i]);
			goto stop;
		}
		write_pidfile(cfg, role_names[i], pids[i]);
		r = wait_ready(cfg, (enum role)i, pids[i], 30000, err);
		if (r < 0) {
			if (stop_requested)
				r = 0;  /* told to stop while it started: a clean stop */
			goto stop;  /* the stop below reaps it */
		}
	}
	write_pidfile(cfg, "up", getpid());
	/* The templates are made by a child of their own, so that this
	 * process takes a stop at once, also during a first-run build (the
	 * node then cancels the build). A child, not a thread: a role that
	 * dies is restarted by fork without exec, which wants one thread. */
	if (!stop_requested)
		templates_pid = spawn_templates(cfg);

	/* Supervise: restart a role that dies (the node re-adopts sandboxes).
	 * "Up" (the line, READY=1) is said once, after the templates were made
	 * or tried and every role answers; until then a failed announce is
	 * tried again each time round. */
	bool announce = false;
	while (!stop_requested) {
		int st;
		pid_t p = waitpid(-1, &st, announce ? WNOHANG : 0);
		if (p < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p > 0 && p == templates_pid) {
			templates_pid = 0;
			announce = true;
		}
		for (int i = 0; p > 0 && i < N_ROLES; i++) {
			if (pids[i] != p || stop_requested)
				continue;
			log_warn("%s (pid %d) exited with status %d; restarting", role_names[i],
				 (int)p, st);
			pids[i] = spawn_role(cfg, (enum role)i);
			write_pidfile(cfg, role_names[i], pids[i]);
			/* back only once it answers; if it dies meanwhile, the
			 * next waitpid reaps it and it is restarted again */
			err_t e = { 0 };
			if (pids[i] > 0 && wait_ready(cfg, (enum role)i, pids[i], 30000, &e) == 0)
				log_info("%s (pid %d) answers again", role_names[i], (int)pids[i]);
			else if (e.code != EINTR)
				log_warn("%s (pid %d): %s", role_names[i], (int)pids[i], e.msg);
		}
		if (announce && !stop_requested && announce_up(cfg, pids))
			announce = false;
	}
	r = 0;
stop:
	notify_systemd("STOPPING=1");
	if (templates_pid > 0)
		kill(templates_pid, SIGTERM);  /* a build it waits for is cancelled by the node */
	/* Stop in reverse order: api, node, nodemgr. */
	for (int i = N_ROLES - 1; i >= 0; i--) {
		if (pids[i] <= 0)
			continue;
		kill(pids[i], SIGTERM);
		for (int t = 0; t < 300; t++) {
			if (waitpid(pids[i], NULL, WNOHANG) == pids[i]) {
				pids[i] = 0;
				break;
			}
			struct timespec ts = { 0, 50 * 1000 * 1000 };
			nanosleep(&ts, NULL);
		}
		if (pids[i] > 0) {
			log_warn("%s did not stop in 15 s; killing it", role_names[i]);
			kill(pids[i], SIGKILL);
			waitpid(pids[i], NULL, 0);
		}
	}
	if (templates_pid > 0)
		waitpid(templates_pid, NULL, 0);  /* its node connection is closed by now */
out:
	/* Release the pool even when an earlier, crashed instance mounted it:
	 * pool_release only unmounts a loop-image pool. */
	(void)pool_mounted;
	{
		err_t e2 = { 0 };
		if (pool_release(cfg->data_dir, &e2) < 0)
			log_warn("pool: %s", e2.msg);
	}
	return r;
}
