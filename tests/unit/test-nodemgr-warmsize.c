/* Unit test for src/nodemgr/core/warmsize.c: a warm pool's target size from its
 * recent creates, between the configured minimum and maximum. */
#include <stdio.h>

#include "../../src/nodemgr/core/warmsize.h"
#include "check.h"

#define HALF 10000   /* half-life of the demand, ms */

/* n creates, one every gap_ms from t; returns the time of the last. */
static uint64_t creates(struct warm_demand *d, uint64_t t, int n, uint64_t gap_ms)
{
	for (int i = 0; i < n; i++, t += gap_ms)
		mgr_warm_demand_note(d, t, HALF);
	return t - gap_ms;
}

static void test_idle_is_min(void)
{
	struct warm_demand d = { 0 };

	CHECK(mgr_warm_pool_target(&d, 0, HALF, 2, 32) == 2);
	CHECK(mgr_warm_pool_target(&d, 123456, HALF, 0, 32) == 0);
	CHECK(mgr_warm_pool_target(&d, 5, HALF, 3, 1) == 3);   /* max < min: min */
}

static void test_burst_grows_to_its_size(void)
{
	struct warm_demand d = { 0 };
	uint64_t t = creates(&d, 100000, 16, 5);   /* 16 within 80 ms */

	CHECK(mgr_warm_pool_target(&d, t, HALF, 2, 32) == 16);
	CHECK(mgr_warm_pool_target(&d, t, HALF, 2, 8) == 8);    /* capped at max */
	CHECK(mgr_warm_pool_target(&d, t, HALF, 20, 32) == 20); /* never under min */
}

static void test_burst_across_windows_counts_whole(void)
{
	struct warm_demand d = { 0 };

	/* 8 at the end of one window, 8 at the start of the next. */
	creates(&d, 100000, 1, 1);                  /* opens a window at 100000 */
	creates(&d, 100990, 7, 1);
	uint64_t t = creates(&d, 101000, 8, 1);
	CHECK(mgr_warm_pool_target(&d, t, HALF, 2, 32) == 16);
}

static void test_shrinks_when_idle(void)
{
	struct warm_demand d = { 0 };
	uint64_t t = creates(&d, 100000, 16, 1);

	CHECK(mgr_warm_pool_target(&d, t + HALF, HALF, 2, 32) == 8);        /* one half-life */
	CHECK(mgr_warm_pool_target(&d, t + 2 * HALF, HALF, 2, 32) == 4);
	uint32_t mid = mgr_warm_pool_target(&d, t + HALF + HALF / 2, HALF, 2, 32);
	CHECK(mid > 4 && mid < 8);                                      /* in between */
	CHECK(mgr_warm_pool_target(&d, t + 10 * HALF, HALF, 2, 32) == 2);   /* back to min */
	CHECK(mgr_warm_pool_target(&d, t + 1000 * HALF, HALF, 2, 32) == 2); /* no underflow */
	CHECK(mgr_warm_demand_level(&d, t + 1000 * (uint64_t)HALF, HALF) == 0);
}

static void test_trickle_stays_at_min(void)
{
	struct warm_demand d = { 0 };
	/* One create every 3 s for ten minutes. */
	uint64_t t = creates(&d, 100000, 200, 3000);

	CHECK(mgr_warm_pool_target(&d, t, HALF, 2, 32) == 2);
	/* One every 100 ms (10/s): about 10 in any second. */
	t = creates(&d, t + 3000, 100, 100);
	uint32_t want = mgr_warm_pool_target(&d, t, HALF, 2, 32);
	CHECK(want >= 10 && want <= 20);
}

static void test_clock_backwards(void)
{
	struct warm_demand d = { 0 };

	creates(&d, 100000, 4, 1);
	/* A thread that read the clock earlier notes after a later one. */
	mgr_warm_demand_note(&d, 99000, HALF);
	CHECK(mgr_warm_pool_target(&d, 99000, HALF, 0, 32) >= 4);
	CHECK(mgr_warm_pool_target(&d, 100003, HALF, 0, 32) >= 4);
}

static void test_no_memory(void)
{
	struct warm_demand d = { 0 };
	uint64_t t = creates(&d, 100000, 16, 1);

	/* half-life 0: the level lasts only the instant of the create */
	CHECK(mgr_warm_pool_target(&d, t + 1, 0, 2, 32) == 2);
}

int main(void)
{
	test_idle_is_min();
	test_burst_grows_to_its_size();
	test_burst_across_windows_counts_whole();
	test_shrinks_when_idle();
	test_trickle_stays_at_min();
	test_clock_backwards();
	test_no_memory();
	return check_done("test-nodemgr-warmsize");
}
