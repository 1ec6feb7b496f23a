/* Unit test for src/node/snap/retention.c: the tiers with injected times. The
 * expected sets are worked out by hand in the comments, not by running the
 * same rule again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/node/snap/retention.h"
#include "check.h"

#define MIN_MS (60LL * 1000)
#define HOUR_MS (60 * MIN_MS)
#define DAY_MS (24 * HOUR_MS)

/* now = day 10, 00:00 UTC; a snapshot every 30 min from now - 9 days to
 * now inclusive (433 of them) under the default tiers:
 *   last hour (age < 1 h): now, now-30m                               2
 *   hourly (1 h <= age < 24 h): now-1h (its hour's other member,
 *     now-30m, is still in the first tier), and for each hour
 *     now-k h (k = 2..24) its newest member in the tier, now-(k-½) h   24
 *   daily (1 d <= age < 7 d): day 9's 00:00 (now-24h, alone in the
 *     tier), and days 3..8 each their 23:30 (day 3's 00:00 is 7 d old,
 *     dropped, but its 23:30 is not)                                    7
 *   older: dropped                                                     --
 *                                                                      33 */
static bool kept_by_hand(int64_t age)
{
	if (age < HOUR_MS)
		return true;
	if (age == HOUR_MS)
		return true;
	if (age < DAY_MS)
		return age % HOUR_MS == 30 * MIN_MS;   /* the hh:30 one */
	if (age == DAY_MS)
		return true;
	if (age < 7 * DAY_MS)
		return age % DAY_MS == 30 * MIN_MS;    /* 23:30 of each day */
	return false;
}

static void test_default_tiers(void)
{
	const struct retention pol = RETENTION_DEFAULT;
	int64_t now = 10 * DAY_MS;
	size_t n = 9 * 48 + 1, pruned, kept = 0;
	struct retention_item *it = calloc(n, sizeof(*it));

	for (size_t i = 0; i < n; i++)
		it[i].created_at = now - 9 * DAY_MS + (int64_t)i * 30 * MIN_MS;
	pruned = retention_select(it, n, now, &pol);
	for (size_t i = 0; i < n; i++) {
		int64_t age = now - it[i].created_at;
		if (it[i].prune == kept_by_hand(age)) {
			fprintf(stderr, "age %lld min: %s, expected %s\n",
				(long long)(age / MIN_MS), it[i].prune ? "pruned" : "kept",
				kept_by_hand(age) ? "kept" : "pruned");
			failures++;
		}
		kept += !it[i].prune;
	}
	CHECK(kept == 33);
	CHECK(pruned == n - 33);

	/* The same set in reverse order: the answer does not depend on it. */
	for (size_t i = 0; i < n; i++)
		it[i].created_at = now - (int64_t)i * 30 * MIN_MS;
	pruned = retention_select(it, n, now, &pol);
	CHECK(pruned == n - 33);
	for (size_t i = 0; i < n; i++)
		CHECK(it[i].prune != kept_by_hand(now - it[i].created_at));
	free(it);
}

/* As time passes the one kept for an hour stays the one kept: prune, drop
 * the pruned, move on 10 minutes, again, for two days; the hh:50 snapshot
 * (the newest of its hour) survives throughout once made. */
static void test_stable(void)
{
	const struct retention pol = RETENTION_DEFAULT;
	struct retention_item it[600];
	size_t n = 0;
	int64_t now;

	for (now = 0; now < 2 * DAY_MS; now += 10 * MIN_MS) {
		size_t w = 0;
		CHECK(n < 600);
		it[n++].created_at = now;
		retention_select(it, n, now, &pol);
		for (size_t i = 0; i < n; i++) {
			if (it[i].prune) {
				/* Never an hh:50 one younger than a day. */
				CHECK(!(it[i].created_at % HOUR_MS == 50 * MIN_MS &&
					now - it[i].created_at < DAY_MS));
				continue;
			}
			it[w++] = it[i];
		}
		n = w;
	}
	/* 6 in the last hour (..., now-10m) plus the hh:50 of each of the 23
	 * hours before (the hour bucket just past the first tier keeps hh:50
	 * too), plus day 1 in the daily tier: its 23:50 (age 24 h + 10 m). */
	CHECK(n == 6 + 23 + 1);
}

static void test_edges(void)
{
	struct retention none = { 0, 0, 0 };
	const struct retention pol = RETENTION_DEFAULT;
	struct retention_item one[1] = { { .created_at = 0 } };
	struct retention_item two[3] = { { .created_at = 5 }, { .created_at = 5 },
					 { .created_at = 1 } };

	/* The only snapshot is kept however old. */
	CHECK(retention_select(one, 1, 30 * DAY_MS, &pol) == 0 && !one[0].prune);
	/* Nothing kept by the tiers: only the newest stays (ties: the later
	 * index). */
	CHECK(retention_select(two, 3, 10, &none) == 2);
	CHECK(two[0].prune && !two[1].prune && two[2].prune);
	CHECK(retention_select(NULL, 0, 0, &pol) == 0);
	/* A snapshot from the future (clock stepped back) is kept. */
	two[0].created_at = 50 * DAY_MS;
	two[1].created_at = 49 * DAY_MS;
	two[2].created_at = 48 * DAY_MS;
	CHECK(retention_select(two, 3, 10 * DAY_MS, &pol) == 0);
	/* keep_all only: 2 h of minutely snapshots, keep_all 1 h -> 60 (ages
	 * 0..59 min) are kept. */
	{
		struct retention all = { 3600, 0, 0 };
		struct retention_item m[121];
		for (int i = 0; i <= 120; i++)
			m[i].created_at = (int64_t)i * MIN_MS;
		CHECK(retention_select(m, 121, 120 * MIN_MS, &all) == 121 - 60);
		CHECK(!m[120].prune && !m[61].prune && m[60].prune);
	}
}

int main(void)
{
	test_default_tiers();
	test_stable();
	test_edges();
	if (failures) {
		fprintf(stderr, "test-node-retention: %d failures\n", failures);
		return 1;
	}
	printf("test-node-retention: ok\n");
	return 0;
}
