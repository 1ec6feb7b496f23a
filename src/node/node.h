/* node.h - `airlockd node`, the sandbox manager of one node (unprivileged).
 *
 * It serves the sandbox and template endpoints of docs/API.md on a unix HTTP
 * socket (the api daemon forwards authenticated requests with
 * X-Airlock-Tenant / X-Airlock-Admin), owns the `sandboxes`, `templates` and
 * `events` rows, asks the node manager for privileged work (src/nmclient/nm.h)
 * through the backend ops table, and talks to each sandbox's guest agent over
 * its channel (src/guestconn/guestconn.h).
 */
#ifndef AIRLOCK_NODE_H
#define AIRLOCK_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../lib/err.h"

struct node_config {
	const char *sock_path;         /* listen address, e.g. "unix:/var/lib/airlock/run/node.sock" */
	const char *db_path;           /* db_open's target: SQLite file or PostgreSQL URL */
	const char *nm_sock;           /* node manager socket */
	const char *default_backend;   /* "ns" */
	const char *default_template;  /* "debian" */
	uint32_t default_memory_mb, default_cpu_millis, default_pids, default_disk_mb;
	uint32_t max_sandboxes;
	/* The most one sandbox may ask for (0 = only the node's size). */
	uint32_t max_sandbox_pids, max_sandbox_memory_mb, max_sandbox_cpus, max_sandbox_disk_mb;
	uint32_t max_snapshots;        /* per sandbox, client's and scheduler's each; 0 = none */
	bool vm_cold_boot;             /* vm: never clone a memory snapshot (baseline for bench/create) */
	int ready_timeout_ms;          /* wait for the guest's HELLO/READY */
	uint32_t vm_start_concurrency; /* vm creates starting a guest at once; 0: 2 per CPU */
	size_t out_buffer_bytes;       /* kept per process output stream (1 MiB) */
	/* Defaults of the per-sandbox policy (README "Snapshot scheduler"). */
	uint32_t snapshot_disk_interval_s;   /* 60; 0 = off */
	uint32_t snapshot_full_interval_s;   /* 900; 0 = off; vm with full snapshots only */
	uint32_t snapshot_keep_all_s;        /* 3600 */
	uint32_t snapshot_keep_hourly_s;     /* 86400 */
	uint32_t snapshot_keep_daily_s;      /* 604800 */
	uint32_t idle_timeout_s;             /* 0 = never */
	/* Suspend (src/node/suspend.c): the object store's URL ("file:///..."
	 * or "s3://..."), its keys (NULL: $AWS_ACCESS_KEY_ID /
	 * $AWS_SECRET_ACCESS_KEY), the node's own directory for artifacts in
	 * transit, and how long a paused sandbox waits before it is suspended
	 * (0 = never). */
	const char *object_store;
	const char *s3_access_key, *s3_secret_key;
	const char *staging_dir;
	uint32_t suspend_after_idle_s;
	/* BYOK (src/byok/kms.h): the local provider's key directory, how long
	 * unwrapped data keys and key checks are cached (s), and whether
	 * artifacts are sealed (false ONLY for the control test / bench). */
	const char *key_dir;
	uint32_t kms_cache_ttl_s;
	bool encrypt_artifacts;
	bool suspend_reclaim;                /* vm: RECLAIM in the guest before a suspend */
	bool debug_clock;                    /* POST /v1/debug/clock on the node socket (tests) */
	const char *gateway_sock;      /* "unix:DATA/run/gateway.sock"; NULL = no sandbox network */
	const char *node_name;         /* this node's row in the nodes table (cluster.c) */
};

/* Runs until SIGTERM/SIGINT (blocked in every thread and taken with
 * sigwait on the calling thread). On stop, running sandboxes are marked
 * stopped (the node manager kills the jails on its own shutdown) and 0 is
 * returned. cfg is borrowed for the duration of the call. */
int node_run(const struct node_config *cfg, err_t *err);

#endif
