/* warmsize.c - the size of a warm pool from its recent demand (warmsize.h). */
#include "warmsize.h"

/* v * 2^(-dt/half_ms), without libm: whole halvings, then the linear
 * approximation 1 - f/2 of 2^-f on the rest (within 6%, exact at both
 * ends: plenty for a pool size). half_ms 0: no memory at all. */
static double decay(double v, uint64_t dt, uint32_t half_ms)
{
	uint64_t k;

	if (!half_ms)
		return dt ? 0 : v;
	k = dt / half_ms;
	if (k >= 64)
		return 0;
	for (uint64_t i = 0; i < k; i++)
		v /= 2;
	return v * (1.0 - (double)(dt % half_ms) / half_ms / 2.0);
}

double mgr_warm_demand_level(const struct warm_demand *d, uint64_t now_ms, uint32_t half_ms)
{
	/* A clock read before at_ms (another thread's later note): no decay. */
	return now_ms <= d->at_ms ? d->level : decay(d->level, now_ms - d->at_ms, half_ms);
}

void mgr_warm_demand_note(struct warm_demand *d, uint64_t now_ms, uint32_t half_ms)
{
	double recent;

	if (now_ms >= d->win_start_ms + WARM_WINDOW_MS) {
		/* A new window; the last one counts on only if it just ended. */
		bool adjacent = now_ms < d->win_start_ms + 2 * WARM_WINDOW_MS;
		d->prev_count = adjacent ? d->win_count : 0;
		d->win_count = 0;
		d->win_start_ms = now_ms;
	}
	d->win_count++;
	d->level = mgr_warm_demand_level(d, now_ms, half_ms);
	if (now_ms > d->at_ms)
		d->at_ms = now_ms;
	recent = (double)d->win_count + d->prev_count;
	if (recent > d->level)
		d->level = recent;
}

uint32_t mgr_warm_pool_target(const struct warm_demand *d, uint64_t now_ms, uint32_t half_ms,
			      uint32_t min, uint32_t max)
{
	double level = mgr_warm_demand_level(d, now_ms, half_ms);
	uint32_t want;

	if (max < min)
		max = min;
	if (level >= max)
		return max;
	want = (uint32_t)level;
	if ((double)want < level - 1e-9)
		want++;
	return want < min ? min : want;
}
