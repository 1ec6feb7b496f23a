/* warmsize.h - how many jails (ns) or QEMUs (vm) a warm pool keeps for one
 * template, from the creates it saw lately, between the operator's bounds.
 *
 * A warm pool of a fixed size empties at the first burst larger than it,
 * and everything behind it takes the cold path. So each pool remembers its
 * recent demand: the most creates it saw within WARM_WINDOW_MS (counted
 * over the current and the previous window, so a burst that straddles two
 * windows counts whole), a level that halves every half_ms once creates
 * stop. The target is that level rounded up, never under min (the
 * operator's ns_warm_pool / vm_warm_pool) nor over max (…_max): after a
 * burst of 16 the pool grows to 16, a steady trickle keeps it at min, and
 * when creates stop it shrinks back towards min.
 *
 * Pure functions of (state, now): no clock, no locks (callers hold theirs).
 * Unit-tested in tests/unit/test-nodemgr-warmsize.c. */
#ifndef AIRLOCK_WARMSIZE_H
#define AIRLOCK_WARMSIZE_H

#include <stdbool.h>
#include <stdint.h>

#define WARM_WINDOW_MS 1000

struct warm_demand {
	double level;          /* decayed peak, as of at_ms */
	uint64_t at_ms;        /* when level was last brought up to date */
	uint64_t win_start_ms; /* the current counting window */
	uint32_t win_count;    /* creates in the current window */
	uint32_t prev_count;   /* creates in the window before it (0 if not adjacent) */
};

/* One create (hit or miss) at now_ms. */
void mgr_warm_demand_note(struct warm_demand *d, uint64_t now_ms, uint32_t half_ms);
/* The demand level at now_ms (decayed since the last create). */
double mgr_warm_demand_level(const struct warm_demand *d, uint64_t now_ms, uint32_t half_ms);
/* How many to keep parked at now_ms: ceil(level) within [min, max]
 * (max < min counts as max = min). */
uint32_t mgr_warm_pool_target(const struct warm_demand *d, uint64_t now_ms, uint32_t half_ms,
			      uint32_t min, uint32_t max);

#endif
