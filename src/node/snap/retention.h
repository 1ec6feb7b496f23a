/* retention.h - tiered retention of scheduled snapshots: which to prune.
 *
 * A pure function of (snapshots, now, policy): no clock, no I/O, so unit
 * tests drive it with made-up times. The policy is three ages:
 *
 *   age <  keep_all_s                 keep every snapshot
 *   age <  keep_hourly_s              keep one per hour  (the newest of each)
 *   age <  keep_daily_s               keep one per day   (the newest of each)
 *   older                             drop
 *
 * Hours and days are buckets of wall time (created_at / 3600 s, / 86400 s,
 * UTC), not of age, so the snapshot that represents a bucket does not
 * change as time passes; the newest of a bucket is the one kept, which is
 * what restic/borg do. A tier whose age is not above the previous one is
 * empty (e.g. keep_hourly_s = 0: nothing between keep_all_s and the daily
 * tier is kept by the hour). The newest snapshot of all is never pruned, so
 * a sandbox that stopped changing keeps its last rollback point.
 */
#ifndef AIRLOCK_NODE_RETENTION_H
#define AIRLOCK_NODE_RETENTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../model/policy.h"

struct retention_item {
	int64_t created_at;      /* wall ms */
	bool prune;              /* out: true when the policy drops it */
};

/* Sets items[i].prune for each of the n items (any order; ties in
 * created_at are broken by index, the later index being newer). Returns
 * how many are to be pruned. */
size_t retention_select(struct retention_item *items, size_t n, int64_t now_ms,
			const struct retention *pol);

#endif
