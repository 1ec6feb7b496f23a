/* The reaper: one thread that runs timed and deferred work.
 *
 *   TIMER_SANDBOX_TIMEOUT  a sandbox's timeout_s of active time passed:
 *                          delete or pause it (its on_timeout)
 *   TIMER_SCHEDULE         once a second: the snapshot scheduler, retention
 *                          and idle pass (snap/schedule.c)
 *   TIMER_LIMITS           every few seconds: the sandboxes' limit counters
 *                          (node/limits)
 *   TIMER_PROC_TIMEOUT     an exec's timeout_s passed: SIGKILL the process
 *   TIMER_CHAN_CLOSED      a guest channel closed: fail the sandbox. Queued
 *                          from the channel's reader thread, which must not
 *                          close its own guestconn or wait on the node manager.
 *
 * The thread sleeps on a CLOCK_MONOTONIC condvar until the earliest due time
 * (the one timed wait in the node); adding an earlier timer wakes it. The
 * timers are a min-heap (theap.h): arming one is O(log n) with a timer per
 * sandbox, where a sorted list walked them all. What a timer does is the
 * node's (timers.c, given to reaper_start): the features sit above the
 * model.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "model.h"

static void *reaper_main(void *arg)
{
	struct node *n = arg;

	pthread_mutex_lock(&n->jan_mu);
	while (!n->jan_stop) {
		const struct theap_item *top = theap_peek(&n->timers);
		struct timer *t = top ? top->data : NULL;
		uint64_t now = now_ms();

		if (t && t->due_ms <= now) {
			theap_pop(&n->timers);
			pthread_mutex_unlock(&n->jan_mu);
			n->jan_fire(n, t);
			free(t);
			pthread_mutex_lock(&n->jan_mu);
			continue;
		}
		if (!t) {
			pthread_cond_wait(&n->jan_cv, &n->jan_mu);
		} else {
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			uint64_t wait = t->due_ms - now;
			ts.tv_sec += (time_t)(wait / 1000);
			ts.tv_nsec += (long)(wait % 1000) * 1000000L;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&n->jan_cv, &n->jan_mu, &ts);
		}
	}
	pthread_mutex_unlock(&n->jan_mu);
	return NULL;
}

void reaper_add(struct node *n, uint64_t due_ms, enum timer_kind kind, const char *sb_id,
		uint64_t serial)
{
	struct timer *t = xcalloc(1, sizeof(*t));
	const struct theap_item *top;

	t->due_ms = due_ms;
	t->kind = kind;
	snprintf(t->sb_id, sizeof(t->sb_id), "%s", sb_id);
	t->serial = serial;
	pthread_mutex_lock(&n->jan_mu);
	theap_push(&n->timers, due_ms, t);
	/* The new earliest: the thread's timed wait must end sooner. */
	if ((top = theap_peek(&n->timers)) && top->data == t)
		pthread_cond_signal(&n->jan_cv);
	pthread_mutex_unlock(&n->jan_mu);
}

int reaper_start(struct node *n, void (*fire)(struct node *n, const struct timer *t), err_t *err)
{
	int r;

	n->jan_fire = fire;
	r = pthread_create(&n->janitor, NULL, reaper_main, n);

	if (r != 0)
		return err_set(err, r, "cannot start the reaper thread");
	n->jan_started = true;
	return 0;
}

void reaper_stop(struct node *n)
{
	struct timer *t;

	if (n->jan_started) {
		pthread_mutex_lock(&n->jan_mu);
		n->jan_stop = true;
		pthread_cond_signal(&n->jan_cv);
		pthread_mutex_unlock(&n->jan_mu);
		pthread_join(n->janitor, NULL);
		n->jan_started = false;
	}
	while ((t = theap_pop(&n->timers)))
		free(t);
	theap_free(&n->timers);
}
