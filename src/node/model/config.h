/* config.h - the node's configuration (struct node_config, filled by
 * airlockd from its config file; node.h's node_run takes it). In the model
 * room, the node's bottom, because every layer of the node reads it. */
#ifndef AIRLOCK_NODE_CONFIG_H
#define AIRLOCK_NODE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../lib/peer.h"

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
	/* Suspend (src/node/suspend/suspend.c): the object store's URL ("file:///..."
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
	const char *node_name;         /* this node's row in the nodes table (cluster/) */
	/* The roles' uids: who may call which route of sock_path (routes.def's
	 * peers column); zero: every role is this process's uid. */
	struct peer_uids peers;
};

#endif
