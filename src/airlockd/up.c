/* up.c - `airlockd up` (all-in-one) and the per-role entry points.
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
#include "../lib/resource.h"
#include "../lib/secret.h"
#include "../lib/secmem.h"
#include "../lib/tls.h"
#include "../lib/util.h"
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

/* FNV-1a of the data dir: names this instance's host-wide objects (cgroup
 * parent, nftables table, interface prefix), so instances never touch each
 * other's. */
static uint32_t instance_hash(const struct airlockd_config *cfg)
{
	uint32_t h = 2166136261u;

	for (const char *c = cfg->data_dir; *c; c++)
		h = (h ^ (unsigned char)*c) * 16777619u;
	return h;
}

static bool default_instance(const struct airlockd_config *cfg)
{
	return strcmp(cfg->data_dir, "/var/lib/airlock") == 0;
}

/* The sandbox network's settings. The default instance uses 10.213.0.0/16
 * and ports 7071 (proxy) and 7072 (DNS); another data dir gets its own /20
 * inside 10.128.0.0/10 and ports in 20000..29999 from its hash, so test
 * instances side by side do not collide (configure them to be sure). */
struct net_settings {
	char table[32], prefix[12], cidr[32];
	uint32_t base, size;
	uint16_t proxy_port, dns_port;
};

static int net_settings(const struct airlockd_config *cfg, struct net_settings *ns, err_t *err)
{
	uint32_t h = instance_hash(cfg);
	char ip[40];
	struct in_addr a;
	const char *slash;
	long bits;

	memset(ns, 0, sizeof(*ns));
	snprintf(ns->table, sizeof(ns->table), "airlock-%08x", h);
	snprintf(ns->prefix, sizeof(ns->prefix), "al%05x", h & 0xfffff);
	if (cfg->net_cidr[0])
		snprintf(ns->cidr, sizeof(ns->cidr), "%s", cfg->net_cidr);
	else if (default_instance(cfg))
		snprintf(ns->cidr, sizeof(ns->cidr), "10.213.0.0/16");
	else
		snprintf(ns->cidr, sizeof(ns->cidr), "10.%u.%u.0/20", 128 + (h >> 8) % 64,
			 ((h >> 4) & 0xf) << 4);
	slash = strchr(ns->cidr, '/');
	bits = slash ? strtol(slash + 1, NULL, 10) : -1;
	if (!slash || (size_t)(slash - ns->cidr) >= sizeof(ip) || bits < 8 || bits > 30)
		return err_set(err, EINVAL, "net_cidr: `%s` is not an IPv4 CIDR of /8../30",
			       ns->cidr);
	memcpy(ip, ns->cidr, (size_t)(slash - ns->cidr));
	ip[slash - ns->cidr] = '\0';
	if (inet_pton(AF_INET, ip, &a) != 1)
		return err_set(err, EINVAL, "net_cidr: bad address in `%s`", ns->cidr);
	ns->size = 1u << (32 - bits);
	ns->base = ntohl(a.s_addr) & ~(ns->size - 1);
	ns->proxy_port = (uint16_t)(cfg->gateway_proxy_port ? cfg->gateway_proxy_port
				   : default_instance(cfg) ? 7071 : 20000 + (h % 5000) * 2);
	ns->dns_port = (uint16_t)(cfg->gateway_dns_port ? cfg->gateway_dns_port
				 : default_instance(cfg) ? 7072 : 20001 + (h % 5000) * 2);
	return 0;
}

int airlockd_nodemgr(const struct airlockd_config *cfg, err_t *err)
{
	_cleanup_free_ char *sock = data_path(cfg, "run/nodemgr.sock");
	_cleanup_free_ char *guest = airlock_resource("airlock-guest");
	_cleanup_free_ char *scripts = airlock_resource("scripts");
	/* The guest kernel: vm_dir, else the one shipped with the binaries
	 * (made by scripts/vm-kernel.sh). */
	_cleanup_free_ char *vm_dir = cfg->vm_dir[0] ? xstrdup(cfg->vm_dir)
						     : airlock_resource("vm");
	uid_t uid = 0;
	gid_t gid = 0;
	int r;

	if (getuid() != 0)
		return err_set(err, EPERM, "nodemgr must run as root");
	r = lookup_user(cfg->user, &uid, &gid, err);
	if (r < 0)
		return r;
	/* Each instance owns its own cgroup parent: nodemgr's start-up sweep
	 * kills whatever it finds under it, which must never be another
	 * instance's jails. The default data dir keeps the plain name. */
	_cleanup_free_ char *cg = NULL;
	struct net_settings net;
	if (!default_instance(cfg))
		cg = xasprintf("airlock-%08x", instance_hash(cfg));
	if ((r = net_settings(cfg, &net, err)) < 0)
		return r;
	struct nodemgr_config nc = {
		.cgroup_parent = cg,
		.cgroup_favordynmods = cfg->cgroup_favordynmods,
		.max_pids_all_sandboxes = cfg->max_pids_all_sandboxes,
		.data_dir = cfg->data_dir,
		.sock_path = sock,
		.guest_path = guest,
		.scripts_dir = scripts,
		.client_uid = uid,
		.client_gid = gid,
		.pool_size_mb = cfg->pool_size_mb,
		.vm_dir = vm_dir,
		.vm_accel = cfg->vm_accel,
		.vm_warm_pool = cfg->vm_warm_pool,
		.vm_fork_pool = cfg->vm_fork_pool,
		.vm_console_log_max = cfg->console_log_max,
		.ns_warm_pool = cfg->ns_warm_pool,
		.ns_warm_pool_max = cfg->ns_warm_pool_max,
		.vm_warm_pool_max = cfg->vm_warm_pool_max,
		.warm_pool_half_life_ms = cfg->warm_pool_half_life_s * 1000,
		.net_prefix = cfg->network ? net.prefix : NULL,
		.net_table = net.table,
		.net_base = net.base,
		.net_size = net.size,
		.net_proxy_port = net.proxy_port,
		.net_dns_port = net.dns_port,
	};
	return nodemgr_run(&nc, err);
}

int airlockd_gateway(const struct airlockd_config *cfg, err_t *err)
{
	_cleanup_free_ char *sock = data_path(cfg, "run/gateway.sock");
	_cleanup_free_ char *admin = xasprintf("unix:%s", sock);
	_cleanup_free_ char *nsock = data_path(cfg, "run/node.sock");
	_cleanup_free_ char *node = xasprintf("unix:%s", nsock);
	_cleanup_free_ char *db = config_db_target(cfg);
	_cleanup_free_ char *vault_key = data_path(cfg, "keys/vault.key");
	_cleanup_free_ char *ca_key = data_path(cfg, "keys/ca.key");
	_cleanup_free_ char *ca_crt = data_path(cfg, "ca.crt");
	struct net_settings net;
	struct seal_key *key = NULL;
	struct ca *ca;
	char gwbuf[64];
	gid_t shared_gid;
	struct peer_uids peers;
	int r = net_settings(cfg, &net, err);

	if (r < 0 || (r = shared_group(cfg, &shared_gid, err)) < 0 ||
	    (r = role_uids(cfg, &peers, err)) < 0)
		return r;
	/* Private keys live in locked memory left out of core dumps: OpenSSL's
	 * secure heap for the CA's key (and the X25519 keys the vault derives),
	 * a page of our own for the vault's. */
	if (!CRYPTO_secure_malloc_initialized() && !CRYPTO_secure_malloc_init(64 << 10, 32))
		log_warn("gateway: no OpenSSL secure heap; keys are in ordinary memory");
	key = secmem_alloc(sizeof(*key));
	/* The vault's private key and the CA's key are root's files: read them
	 * now, then drop (binding needs no root either: ports > 1024). */
	if ((r = seal_key_load_private(key, vault_key, err)) < 0)
		goto out;
	if (!(ca = ca_load(ca_key, ca_crt, err))) {
		r = -err->code;
		goto out;
	}
	if ((r = drop_privileges(gateway_user(cfg, gwbuf), shared_gid, err)) < 0) {
		ca_free(ca);
		goto out;
	}
	/* Not dumpable: no core file, and /proc/<pid>/mem and ptrace closed
	 * even to a process of the same uid. */
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	struct gateway_config gc = {
		.admin_sock = admin,
		.proxy_port = net.proxy_port,
		.dns_port = net.dns_port,
		.sandbox_net = net.cidr,
		.allow_private = cfg->network_allow_private_cidrs,
		.hosts = cfg->gateway_hosts,
		.node_sock = node,
		.db_path = db,
		.vault_key = key,
		.ca = ca,
		.upstream_ca = cfg->gateway_upstream_ca[0] ? cfg->gateway_upstream_ca : NULL,
		.max_conns = cfg->gateway_max_conns,
		.dns_servers = cfg->gateway_dns_servers,
		.dns_max_pending = cfg->gateway_dns_max_pending,
		.peers = peers,
	};
	r = gateway_run(&gc, err);
	ca_free(ca);
out:
	secmem_free(key, sizeof(*key));
	return r;
}

int airlockd_node(const struct airlockd_config *cfg, err_t *err)
{
	_cleanup_free_ char *sock = data_path(cfg, "run/node.sock");
	_cleanup_free_ char *gw_path = data_path(cfg, "run/gateway.sock");
	_cleanup_free_ char *gw = xasprintf("unix:%s", gw_path);
	_cleanup_free_ char *listen = xasprintf("unix:%s", sock);
	_cleanup_free_ char *db = config_db_target(cfg);
	_cleanup_free_ char *nm = data_path(cfg, "run/nodemgr.sock");
	_cleanup_free_ char *staging = data_path(cfg, "staging");
	_cleanup_free_ char *objects = data_path(cfg, "objects");
	_cleanup_free_ char *tkeys = cfg->tenant_key_dir[0] ? xstrdup(cfg->tenant_key_dir)
							    : data_path(cfg, "tenant-keys");
	_cleanup_free_ char *store = cfg->object_store[0] ? xstrdup(cfg->object_store)
							  : xasprintf("file://%s", objects);
	struct node_config nc = {
		.sock_path = listen,
		.db_path = db,
		.nm_sock = nm,
		.default_backend = cfg->default_backend,
		.default_template = cfg->default_template,
		.default_memory_mb = cfg->default_memory_mb,
		.default_cpu_millis = cfg->default_cpu_millis,
		.default_pids = cfg->default_pids,
		.default_disk_mb = cfg->default_disk_mb,
		.max_sandboxes = cfg->max_sandboxes,
		.max_sandbox_pids = cfg->max_sandbox_pids,
		.max_sandbox_memory_mb = cfg->max_sandbox_memory_mb,
		.max_sandbox_cpus = cfg->max_sandbox_cpus,
		.max_sandbox_disk_mb = cfg->max_sandbox_disk_mb,
		.max_snapshots = cfg->max_snapshots,
		.vm_cold_boot = !cfg->vm_snapshots,
		.ready_timeout_ms = (int)cfg->ready_timeout_ms,
		.vm_start_concurrency = cfg->vm_start_concurrency,
		.out_buffer_bytes = 1 << 20,
		.snapshot_disk_interval_s = cfg->snapshot_disk_interval_s,
		.snapshot_full_interval_s = cfg->snapshot_full_interval_s,
		.snapshot_keep_all_s = cfg->snapshot_keep_all_s,
		.snapshot_keep_hourly_s = cfg->snapshot_keep_hourly_s,
		.snapshot_keep_daily_s = cfg->snapshot_keep_daily_s,
		.idle_timeout_s = cfg->idle_timeout_s,
		.debug_clock = cfg->debug_clock,
		.gateway_sock = cfg->network ? gw : NULL,
		.node_name = cfg->node_name,
		.object_store = store,
		.s3_access_key = cfg->s3_access_key[0] ? cfg->s3_access_key : NULL,
		.s3_secret_key = cfg->s3_secret_key[0] ? cfg->s3_secret_key : NULL,
		.staging_dir = staging,
		.suspend_after_idle_s = cfg->suspend_after_idle_s,
		.key_dir = tkeys,
		.kms_cache_ttl_s = cfg->kms_cache_ttl_s,
		.encrypt_artifacts = cfg->encrypt_artifacts,
		.suspend_reclaim = cfg->suspend_reclaim,
	};
	/* the roles' uids are looked up as root, before the drop */
	int r = role_uids(cfg, &nc.peers, err);

	if (r < 0 || (r = drop_privileges(cfg->user, (gid_t)-1, err)) < 0)
		return r;
	return node_run(&nc, err);
}

int airlockd_api(const struct airlockd_config *cfg, err_t *err)
{
	_cleanup_free_ char *db = config_db_target(cfg);
	_cleanup_free_ char *sock = data_path(cfg, "run/node.sock");
	_cleanup_free_ char *node = xasprintf("unix:%s", sock);
	_cleanup_free_ char *vault_pub = data_path(cfg, "vault.pub");
	struct tls_ctx *tls = NULL;
	char apibuf[64];
	gid_t shared_gid;
	int r = shared_group(cfg, &shared_gid, err);

	if (r < 0)
		return r;
	/* The key is read as root, so its file may be root's alone. */
	if (cfg->tls_cert[0] && !(tls = tls_server_ctx(cfg->tls_cert, cfg->tls_key, err)))
		return err_wrap(err, "api");
	r = drop_privileges(api_user(cfg, apibuf), shared_gid, err);
	if (r < 0) {
		tls_ctx_free(tls);
		return r;
	}
	struct api_config ac = {
		.tls = tls,
		.listen = cfg->listen,
		.db_path = db,
		.node_sock = node,
		.max_body = 16u << 20,
		.rate_per_s = cfg->rate_per_s,
		.rate_burst = cfg->rate_burst,
		.max_inflight = cfg->api_max_inflight,
		.vault_pub = vault_pub,
		.ports_domain = cfg->ports_domain,
		.node_name = cfg->node_name,
		.advertise_url = cfg->advertise_url,
		.heartbeat_timeout_s = cfg->heartbeat_timeout_s,
		.max_conns_per_client = cfg->api_max_conns_per_client,
		.body_budget = (size_t)cfg->api_body_budget_mb << 20,
		.head_timeout_ms = (int)cfg->api_head_timeout_s * 1000,
	};
	r = api_run(&ac, err);
	tls_ctx_free(tls);
	return r;
}

/* ---- supervision ---- */

/* In the order of enum config_role's bits (1u << role is the role's). */
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

/* Wait until a role's socket accepts connections, or its process died. */
static int wait_ready(const struct airlockd_config *cfg, enum role role, pid_t pid,
		      int timeout_ms, err_t *err)
{
	uint64_t deadline = now_ms() + (uint64_t)timeout_ms;

	for (;;) {
		int st;
		if (waitpid(pid, &st, WNOHANG) == pid)
			return err_set(err, ECHILD, "%s exited during start-up (status %d)",
				       role_names[role], st);
		if (role == ROLE_API) {
			struct http_resp resp;
			/* with TLS the plain probe gets a plain 400 tls_required:
			 * an answer all the same, the api is up */
			_cleanup_free_ char *url = xasprintf("http://%s", cfg->listen);
			err_t e2 = { 0 };
			memset(&resp, 0, sizeof(resp));
			if (http_request(url, "GET", "/v1/health", NULL, NULL, 0, &resp, &e2) == 0) {
				http_resp_free(&resp);
				return 0;
			}
		} else {
			_cleanup_free_ char *sock = data_path(cfg, role_socks[role]);
			if (access(sock, F_OK) == 0)
				return 0;
		}
		if (now_ms() > deadline)
			return err_set(err, ETIMEDOUT, "%s did not come up", role_names[role]);
		/* start-up only, never on a request path */
		struct timespec ts = { 0, 5 * 1000 * 1000 };
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

/* Make the templates, then say that we are up; in a child, dying with us. */
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
	{
		_cleanup_free_ char *cli = data_path(cfg, "cli.json");
		printf("airlock is up: %s://%s  (CLI config: %s)\n",
		       cfg->tls_cert[0] ? "https" : "http", cfg->listen, cli);
		fflush(stdout);
	}
	_exit(0);
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
			pids[i] = 0;
			goto stop;
		}
	}
	write_pidfile(cfg, "up", getpid());
	/* The templates are made by a child of their own, so that this
	 * process takes a stop at once, also during a first-run build (the
	 * node then cancels the build). A child, not a thread: a role that
	 * dies is restarted by fork without exec, which wants one thread. */
	if (!stop_requested)
		templates_pid = spawn_templates(cfg);

	/* Supervise: restart a role that dies (the node re-adopts sandboxes). */
	while (!stop_requested) {
		int st;
		pid_t p = waitpid(-1, &st, 0);
		if (p < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p == templates_pid) {
			templates_pid = 0;
			notify_systemd("READY=1");  /* up, templates made or tried */
		}
		for (int i = 0; i < N_ROLES; i++) {
			if (pids[i] != p || stop_requested)
				continue;
			log_warn("%s (pid %d) exited with status %d; restarting", role_names[i],
				 (int)p, st);
			pids[i] = spawn_role(cfg, (enum role)i);
			write_pidfile(cfg, role_names[i], pids[i]);
		}
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
