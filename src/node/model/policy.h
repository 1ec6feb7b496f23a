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

#endif
