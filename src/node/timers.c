/* timers.c - what each of the reaper's timers does (model/reaper.c runs
 * them on its thread): the features' work, which the model below them
 * cannot name. */
#include "node-internal.h"

#include "artifacts/artifacts.h"

void node_timer_fire(struct node *n, const struct timer *t)
{
	switch (t->kind) {
	case TIMER_SANDBOX_TIMEOUT:
		sandbox_on_timeout(n, t->sb_id);
		break;
	case TIMER_PROC_TIMEOUT:
		proc_on_timeout(n, t->sb_id, t->serial);
		break;
	case TIMER_CHAN_CLOSED: {
		char why[256];
		/* "out of memory: ..." when the kernel's OOM killer ended it */
		limits_why_closed(n, t->sb_id, why, sizeof(why));
		sandbox_on_chan_closed(n, t->sb_id, why);
		break;
	}
	case TIMER_SCHEDULE:
		schedule_tick(n);
		break;
	case TIMER_LIMITS:
		limits_tick(n);
		break;
	case TIMER_STORE_SWEEP:
		art_sweep_deleted(n, t->sb_id, (unsigned)t->serial);
		break;
	}
}
