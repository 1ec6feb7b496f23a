/* config.h - airlockd configuration: built-in defaults, then the config file
 * (`key = value` lines, '#' comments), then command-line flags. The result is
 * a named singleton-like struct built once in main() and passed down. */
#ifndef AIRLOCKD_CONFIG_H
#define AIRLOCKD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../lib/err.h"

struct airlockd_config {
	char data_dir[512];
	/* The database: "sqlite" (DATA/db/airlock.db), "sqlite:PATH", or a
	 * PostgreSQL URL or conninfo (src/db/db.h); every role opens it. */
	char db[1024];
	/* The database's password, from db_password_file or the systemd
	 * credential `db_password` ("" = none, or the one in db): added to
	 * the target each role opens (config_db_target). */
	char db_password[256];
	char node_name[65];        /* this node in the shared database (default: the hostname) */
	char listen[128];          /* api listen address */
	/* TLS on the api listener: PEM certificate (chain) and key; "" = plain
	 * HTTP. Read by the api process before it drops privileges. */
	char tls_cert[512], tls_key[512];
	char user[64];             /* unprivileged user for node and api */
	char gateway_user[64];     /* the gateway's own user; "" = user + "-gw" */
	char api_user[64];         /* the api's own user; "" = user + "-api" */
	uint64_t pool_size_mb;     /* size of DATA/pool.img when DATA is not on btrfs */
	char default_backend[16];
	char default_template[65];
	char templates[256];       /* comma-separated templates `up` makes sure exist */
	uint32_t default_memory_mb, default_cpu_millis, default_pids, default_disk_mb;
	uint32_t max_sandboxes;
	/* The most one sandbox may ask for; 0 = no cap but the node's size. */
	uint32_t max_sandbox_pids, max_sandbox_memory_mb, max_sandbox_cpus, max_sandbox_disk_mb;
	uint32_t max_pids_all_sandboxes;   /* pids.max of the cgroup parent; 0 = 3/4 of pid_max */
	uint32_t max_snapshots;    /* per sandbox (a client's; the scheduler's apart); 0 = none */
	double rate_per_s, rate_burst;
	char ports_domain[200];    /* host-routed port URLs {port}-{id}.<this>; "" = off */
	int log_level;             /* 0 error .. 3 debug */
	bool log_json;             /* log_format = json: one JSON object a line */
	char vm_accel[8];          /* vm backend: "auto" | "kvm" | "tcg" */
	char vm_dir[512];          /* vmlinuz + initramfs.cpio.gz; "" = the build tree's */
	uint32_t vm_warm_pool;     /* QEMU processes waiting per template (vm) */
	uint64_t console_log_max;  /* bytes of a vm's console log kept (the newest) */
	uint32_t vm_fork_pool;     /* QEMUs waiting for a fork per template (vm) */
	uint32_t ns_warm_pool;     /* ns jails waiting per template */
	uint32_t ns_warm_pool_max; /* what a burst grows an ns pool to (ns_warm_pool: the least) */
	uint32_t vm_warm_pool_max; /* likewise for vm_warm_pool */
	uint32_t warm_pool_half_life_s; /* the pools' recent demand halves in this (warmsize.h) */
	bool vm_snapshots;         /* vm: clone from a memory snapshot (false = always boot cold) */
	bool cgroup_favordynmods;  /* let nodemgr remount cgroup2 with favordynmods */
	/* Snapshot scheduler, retention and idle defaults (per sandbox overridable). */
	uint32_t snapshot_disk_interval_s, snapshot_full_interval_s;
	uint32_t snapshot_keep_all_s, snapshot_keep_hourly_s, snapshot_keep_daily_s;
	uint32_t idle_timeout_s;
	bool debug_clock;          /* tests: POST /v1/debug/clock on the node socket */
	/* The sandbox network (ns backend): nodemgr's veths and nftables, the
	 * gateway. net_cidr "" and ports 0 are derived from data_dir (see
	 * up.c: net_settings). */
	bool network;
	char net_cidr[32];
	uint32_t gateway_proxy_port, gateway_dns_port;
	char gateway_hosts[2048];              /* "name=ip,..." for tests and overrides */
	char gateway_upstream_ca[512];         /* extra CA file the gateway trusts upstream */
	uint32_t gateway_max_conns;            /* live TCP connections per sandbox */
	char gateway_dns_servers[512];         /* "ip[:port],..."; "": /etc/resolv.conf */
	uint32_t gateway_dns_max_pending;      /* name lookups waiting per sandbox */
	uint32_t api_max_inflight;             /* requests to sandboxes in progress per tenant */
	uint32_t api_max_conns_per_client;     /* api connections per client IP; 0 = no cap */
	uint32_t api_body_budget_mb;           /* api request bodies in flight; 0 = no cap */
	uint32_t api_head_timeout_s;           /* a request head must arrive within it */
	char network_allow_private_cidrs[1024];
	uint32_t ready_timeout_ms;  /* how long a create waits for the guest's READY */
	uint32_t vm_start_concurrency; /* vm creates starting their guest at once; 0: 2 per CPU */
	/* The cluster (docs/CONFIGURATION.md "Cluster"): this node's name in the nodes table,
	 * the address other nodes' apis reach this api at ("" = http://listen
	 * as bound), and how long a node may be silent before it is lost. */
	char advertise_url[200];
	uint32_t heartbeat_timeout_s;
	/* Suspend: where suspended sandboxes go ("" = file://DATA/objects),
	 * the S3 keys ("" = $AWS_ACCESS_KEY_ID / $AWS_SECRET_ACCESS_KEY), and
	 * how long a paused sandbox waits before it is suspended (0 = never). */
	char object_store[1024];
	char s3_access_key[256], s3_secret_key[256];
	uint32_t suspend_after_idle_s;
	/* BYOK (docs/DESIGN.md "Bring your own key"): how long an unwrapped
	 * data key or a tenant's key check is kept (60 s), and the switch that
	 * turns artifact sealing off - ONLY for the control test and the
	 * benchmark's baseline; true everywhere else. */
	uint32_t kms_cache_ttl_s;
	bool encrypt_artifacts;
	bool suspend_reclaim;   /* vm: RECLAIM in the guest before a suspend */
	/* The local provider's key directory ("" = DATA/tenant-keys). Nodes
	 * of one cluster that move sandboxes between them with the local
	 * provider must share it (or use the transit provider). */
	char tenant_key_dir[1024];
	/* Where the settings came from, for the start-up warnings about their
	 * secrets (config_secrets_warn): the file read ("" = none), and
	 * whether a flag put a secret on the command line. */
	char config_path[512];
	bool secret_in_argv;
};

/* One key of the configuration: the parser's table, config_keys in config.c.
 * docs/CONFIGURATION.md has one row per key with the same type and default
 * and says what it means (tests/unit/test-config-doc.c checks that). */
struct config_key {
	const char *key;
	const char *type;   /* as the page says it: "integer", "bool", "path", ... */
	const char *def;    /* the default: a value as written in the file, or
			     * "(...)" for one worked out at start */
	int (*set)(const struct config_key *k, struct airlockd_config *c, const char *val,
		   err_t *err);
	size_t off, size;   /* the field it sets (size 0: set() knows) */
	uint64_t lo, hi;    /* bounds, where set() uses them */
};
extern const struct config_key config_keys[];
extern const size_t config_keys_n;
/* The row of `key`, or NULL. */
const struct config_key *config_key_find(const char *key);

void config_defaults(struct airlockd_config *c);
/* Parse a config file over *c. Unknown keys, bad values and unreadable files
 * are errors that name the file and line. */
int config_load(struct airlockd_config *c, const char *path, err_t *err);
/* The same from an open stream; `name` is what errors call it. */
int config_read(struct airlockd_config *c, FILE *f, const char *name, err_t *err);
/* Set one key from a string (shared by the file parser and flags). */
int config_set(struct airlockd_config *c, const char *key, const char *val, err_t *err);

/* ---- secrets (config-secrets.c; docs/DESIGN.md "Secrets in the
 * configuration") ---- */

/* airlockd's processes as bits: which keeps a secret (config_keep_secrets). */
enum config_role {
	CONFIG_ROLE_NODEMGR = 1 << 0,
	CONFIG_ROLE_GATEWAY = 1 << 1,
	CONFIG_ROLE_NODE = 1 << 2,
	CONFIG_ROLE_API = 1 << 3,
};
/* After the file and the flags: fill each secret still empty from its
 * systemd credential ($CREDENTIALS_DIRECTORY/<name>), and refuse a
 * db_password without a PostgreSQL db. */
int config_secrets_load(struct airlockd_config *c, err_t *err);
/* Wipe (explicit_bzero) from this process's copy of the config, and from
 * its environment, every secret that `role` (one CONFIG_ROLE_*, or 0 for a
 * process that needs none) does not use. Called in the role's process
 * before it runs: the copy is its own, made by fork or by its own parse. */
void config_keep_secrets(struct airlockd_config *c, unsigned role);
/* What every role passes to db_open: the SQLite file in DATA for "sqlite",
 * else the configured target with db_password added (a PostgreSQL URL's
 * query parameter, a conninfo's keyword; either overrides a password the
 * target names). Caller frees. */
char *config_db_target(const struct airlockd_config *c);
/* Log a warning when the config file holds a secret others can read, or a
 * flag put one on the command line (every user sees it in ps). */
void config_secrets_warn(const struct airlockd_config *c);

#endif
