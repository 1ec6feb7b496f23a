/* clock.c - a sandbox's clocks, kept in its sched fields (policy.h): the
 * scheduler's clock (sched_now: wall time plus the debug clock's advance),
 * its last activity, and the TTL's paused time, which every state change
 * and a restart's replay of the event log account for. The scheduler's
 * pass is ../snap/schedule.c.
 */
#include <stdlib.h>
#include <string.h>

#include "model.h"

int64_t sched_now(struct node *n)
{
	return wall_ms() + __atomic_load_n(&n->sched_offset_ms, __ATOMIC_ACQUIRE);
}

void sched_touch(struct sandbox *sb)
{
	int64_t now = sched_now(sb->node);

	pthread_mutex_lock(&sb->mu);
	if (now > sb->sched.active_at)
		sb->sched.active_at = now;
	pthread_mutex_unlock(&sb->mu);
}

/* The TTL arithmetic of one transition at wall time `at` (ms). */
static void ttl_step(struct sb_sched *s, int to, int64_t at)
{
	/* Suspended time does not count either: it is paused time. */
	if (to == SB_PAUSED || to == SB_SUSPENDING || to == SB_SUSPENDED) {
		if (!s->paused_since)
			s->paused_since = at;
		return;
	}
	if (to != SB_RUNNING)
		return;
	if (s->paused_since) {
		s->paused_total_ms += at - s->paused_since;
		s->paused_since = 0;
	}
	/* Paused by its timeout: a resume starts a fresh budget (E2B's
	 * auto-pause does the same). */
	if (s->ttl_paused) {
		s->ttl_paused = false;
		s->ttl_base = at;
		s->paused_total_ms = 0;
	}
}

void sched_on_state_locked(struct sandbox *sb, int to)
{
	ttl_step(&sb->sched, to, wall_ms());
	/* A resumed sandbox is not idle: the idle clock starts again. The
	 * last sample stays valid: frozen processes kept their counters. */
	if (to == SB_RUNNING)
		sb->sched.active_at = sched_now(sb->node);
	/* The second idle tier counts from here (suspend_after_idle_s). */
	if (to == SB_PAUSED)
		sb->sched.paused_at = sched_now(sb->node);
}

int sched_ttl_replay(struct node *n, struct sandbox *sb, err_t *err)
{
	struct db_rows rows;

	if (!sb->timeout_s)
		return 0;
	sb->sched.ttl_base = sb->sched.paused_total_ms = sb->sched.paused_since = 0;
	sb->sched.ttl_paused = false;
	if (db_query(n->db, &rows, err,
		     "SELECT at, to_state, reason FROM events WHERE sandbox_id=?"
		     " AND from_state IS DISTINCT FROM to_state ORDER BY id",
		     "s", sb->id) < 0)
		return -1;
	for (int i = 0; i < rows.n_rows; i++) {
		const char *at = db_cell(&rows, i, 0), *reason = db_cell(&rows, i, 2);
		int to = state_parse(db_cell(&rows, i, 1));

		/* Thawed only to say HELLO to a restarted node: still paused. */
		if (!at || to < 0 ||
		    (reason && (strcmp(reason, REASON_READOPT_RESUME) == 0 ||
				strcmp(reason, REASON_READOPT_PAUSE) == 0)))
			continue;
		if (to == SB_PAUSED && !sb->sched.paused_since)
			sb->sched.ttl_paused = reason && strcmp(reason, "timeout") == 0;
		ttl_step(&sb->sched, to, strtoll(at, NULL, 10));
	}
	db_rows_free(&rows);
	return 0;
}

int64_t sched_ttl_deadline_locked(const struct sandbox *sb)
{
	const struct sb_sched *s = &sb->sched;
	int64_t d;

	if (!sb->timeout_s)
		return 0;
	d = (s->ttl_base ? s->ttl_base : sb->created_at) + (int64_t)sb->timeout_s * 1000 +
	    s->paused_total_ms;
	if (s->paused_since)
		d += wall_ms() - s->paused_since;
	return d;
}
