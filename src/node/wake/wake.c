/* wake.c - the one place a sandbox is woken for use: a request that needs
 * its guest (exec, files, processes, ports, connect, a rollback, a resume
 * after an interrupted suspend) or the client's explicit resume finds it
 * running, resumes it when paused (life/lifecycle.c's step), or restores
 * it from the object store when suspended (restore.c), unless the request
 * said auto_restore=false (suspend_gate). Every caller goes through
 * sandbox_wake, or sandbox_gc_use when it then needs the channel.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../http/handler.h"
#include "../life/lifecycle.h"
#include "../suspend/suspend.h"
#include "wake.h"

int sandbox_wake(struct node *n, struct sandbox *sb, const char *why, err_t *err)
{
	int r;

	pthread_mutex_lock(&sb->mu);
	for (;;) {
		if (sb->lc_busy) {
			pthread_cond_wait(&sb->cv, &sb->mu);
			continue;
		}
		/* The cheap path of connect and exec: one lock, no backend call. */
		if (sb->state == SB_RUNNING && !sb->deleting && why) {
			r = 0;
		} else if (sb->state == SB_PAUSED && !sb->deleting) {
			r = sandbox_lc_step_locked(n, sb, SB_RUNNING, why ? why : "resumed by client",
						   err);
		} else if (sb->state == SB_SUSPENDED && !sb->deleting) {
			/* suspended → restoring → running: from the object store.
			 * Implied by a request unless it said auto_restore=false
			 * (suspend_gate answered it before this). */
			char reason[200];
			snprintf(reason, sizeof(reason), "restored (%s)",
				 why ? why : "resumed by client");
			pthread_mutex_unlock(&sb->mu);
			return sandbox_restore(n, sb, reason, NULL, err);
		} else if (why) {
			r = err_set(err, EBUSY, "sandbox %s is %s", sb->id, state_name(sb->state));
		} else {
			r = err_set(err, EBUSY,
				    "sandbox %s is %s; only a paused sandbox can be resumed",
				    sb->id, state_name(sb->state));
		}
		break;
	}
	pthread_mutex_unlock(&sb->mu);
	return r;
}

struct guestconn *sandbox_gc_use(struct node *n, struct sandbox *sb, const char *why,
				 err_t *err)
{
	struct guestconn *gc;
	enum sb_state st;

	/* A client request: the sandbox is not idle. */
	sched_touch(sb);
	/* A pause may slip in between the resume and taking the channel; a
	 * few rounds settle it, and a request that still loses answers 409. */
	for (int round = 0; round < 3; round++) {
		if (sandbox_wake(n, sb, why, err) < 0)
			return NULL;
		if ((gc = sandbox_gc_get(sb)))
			return gc;
	}
	pthread_mutex_lock(&sb->mu);
	st = sb->state;
	pthread_mutex_unlock(&sb->mu);
	err_set(err, EBUSY, "sandbox %s is %s", sb->id, state_name(st));
	return NULL;
}

/* auto_restore=false in the query: a request that needs the guest answers
 * 409 on a suspended sandbox instead of restoring it. */
static bool query_auto_restore(void *arg, const char *k, const char *v)
{
	if (strcmp(k, "auto_restore") == 0)
		*(bool *)arg = !(strcmp(v, "false") == 0 || strcmp(v, "0") == 0);
	return true;   /* the last one counts */
}

bool suspend_gate(struct sandbox *sb, struct http_req *req, struct http_conn *c)
{
	bool auto_restore = true;
	enum sb_state st;

	pthread_mutex_lock(&sb->mu);
	st = sb->state;
	pthread_mutex_unlock(&sb->mu);
	if (st != SB_SUSPENDED && st != SB_SUSPENDING)
		return true;
	http_query_each(req->query, query_auto_restore, &auto_restore);
	if (auto_restore)
		return true;
	node_respond_conflict(c, st, "sandbox %s is %s and auto_restore=false", sb->id,
			      state_name(st));
	return false;
}
