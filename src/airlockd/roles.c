/* roles.c - each role of airlockd started on its own (`airlockd nodemgr`,
 * `gateway`, `node`, `api`, and so by `up` for each child): the role's own
 * configuration built from airlockd's, and its run. up.c is the supervisor
 * that starts them. */
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
		/* GET /v1/node/doctor checks that the host-routed port URLs
		 * are a site apart from the API's host. */
		.ports_domain = cfg->ports_domain,
		.api_url = cfg->advertise_url[0] ? cfg->advertise_url : cfg->listen,
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
