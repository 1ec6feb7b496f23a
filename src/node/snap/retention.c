/* Tiered retention (see retention.h). O(n^2) over one sandbox's scheduled
 * snapshots, which the policy itself keeps to a few hundred. */
#include "retention.h"

#define HOUR_MS (3600LL * 1000)
#define DAY_MS (86400LL * 1000)

/* Is item j newer than item i? */
static bool newer(const struct retention_item *items, size_t i, size_t j)
{
	return items[j].created_at > items[i].created_at ||
	       (items[j].created_at == items[i].created_at && j > i);
}

/* floor division: a snapshot from before 1970 still lands in one bucket. */
static int64_t bucket(int64_t t, int64_t width)
{
	return t >= 0 ? t / width : -((-t + width - 1) / width);
}

/* Which tier keeps an age: 0 all, 1 hourly, 2 daily, 3 none. */
static int tier_of(int64_t age_ms, const struct retention *pol)
{
	if (age_ms < (int64_t)pol->keep_all_s * 1000)
		return 0;
	if (age_ms < (int64_t)pol->keep_hourly_s * 1000)
		return 1;
	if (age_ms < (int64_t)pol->keep_daily_s * 1000)
		return 2;
	return 3;
}

size_t retention_select(struct retention_item *items, size_t n, int64_t now_ms,
			const struct retention *pol)
{
	size_t newest = 0, pruned = 0;

	for (size_t i = 0; i < n; i++) {
		int t = tier_of(now_ms - items[i].created_at, pol);

		if (newer(items, newest, i))
			newest = i;
		if (t == 0) {
			items[i].prune = false;
		} else if (t == 3) {
			items[i].prune = true;
		} else {
			/* Kept only if no newer snapshot of the same tier shares
			 * its hour (or day). */
			int64_t w = t == 1 ? HOUR_MS : DAY_MS, b = bucket(items[i].created_at, w);
			items[i].prune = false;
			for (size_t j = 0; j < n; j++) {
				if (j == i || !newer(items, i, j) ||
				    tier_of(now_ms - items[j].created_at, pol) != t)
					continue;
				if (bucket(items[j].created_at, w) == b) {
					items[i].prune = true;
					break;
				}
			}
		}
	}
	if (n)
		items[newest].prune = false;
	for (size_t i = 0; i < n; i++)
		pruned += items[i].prune;
	return pruned;
}
