/* policy.h - the lifecycle policy and scheduler bookkeeping a sandbox
 * keeps (struct sandbox's pol and sched): plain data, which the model
 * holds and the scheduler (schedule.h, retention.h) reads and writes. */
#ifndef AIRLOCK_NODE_MODEL_POLICY_H
#define AIRLOCK_NODE_MODEL_POLICY_H

#include <stdbool.h>
#include <stdint.h>

struct retention {
	uint32_t keep_all_s;     /* default 3600 */
	uint32_t keep_hourly_s;  /* default 86400 */
	uint32_t keep_daily_s;   /* default 7 * 86400 */
};

#define RETENTION_DEFAULT { 3600, 86400, 7 * 86400 }

struct sb_policy {
	uint32_t disk_interval_s;   /* 0 = no scheduled disk snapshots */
	uint32_t full_interval_s;   /* 0 = none; skipped unless BACKEND_CAP_FULL_SNAPSHOT */
	struct retention retention;
	uint32_t idle_timeout_s;    /* 0 = never auto-pause */
	bool timeout_pause;         /* on_timeout "pause" (false: "delete") */
};

/* What the guest said about activity; equal samples = nothing happened. */
struct sb_activity {
	int64_t last_activity_ms;   /* guest clock: only compared for equality */
	uint64_t cpu_ms;
	uint32_t n_procs;
};

/* Scheduler and TTL bookkeeping of one sandbox; under sb->mu. */
struct sb_sched {
	bool sig_valid, snap_sig_valid, full_sig_valid;
	struct sb_activity sig;        /* last sample */
	struct sb_activity snap_sig;   /* sample when the last scheduled disk snapshot was taken */
	struct sb_activity full_sig;
	int64_t known_since;           /* sched clock: created, or loaded by this node */
	int64_t active_at;             /* sched clock: activity last seen (0 = not yet) */
	int64_t last_disk_at;          /* sched clock: last scheduled disk attempt (0 = unknown) */
	int64_t last_full_at;
	int64_t last_prune_at;         /* sched clock */
	int streams;                   /* clients following a running process's output */
	/* TTL, wall ms: deadline = ttl_base + timeout_s + paused_total_ms. */
	int64_t ttl_base;
	int64_t paused_total_ms;
	int64_t paused_since;          /* 0 unless paused */
	bool ttl_paused;               /* paused by on_timeout=pause: a resume restarts the budget */
	int64_t paused_at;             /* sched clock: when it was last paused (0 = not yet seen) */
};

/* Limits that bit (node/limits): per kind, the count since the sandbox
 * was made, the cgroup counter last seen (of the cgroup gen), what the
 * last event row said, and when it was written; under sb->mu. */
enum sb_limit_kind { LIMIT_OOM_KILL, LIMIT_PIDS_MAX, LIMIT__COUNT };
/* Their names in events (type, events.kind) and metrics (kind), in order. */
#define LIMIT_KIND_NAMES { "oom_kill", "pids_limit" }
struct sb_limits {
	uint64_t gen;               /* the cgroup (nodemgr's gen) seen[] counts in */
	uint64_t total[LIMIT__COUNT];
	uint64_t seen[LIMIT__COUNT];
	uint64_t reported[LIMIT__COUNT];   /* total as of the last event row */
	uint64_t event_ms[LIMIT__COUNT];   /* monotonic ms of that row; 0 = none yet */
	uint64_t hit_ms[LIMIT__COUNT];     /* monotonic ms a rise was last seen */
	int64_t last_at;            /* wall ms of the last rise seen; 0 = never */
};

#endif
