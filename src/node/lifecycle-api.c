/* lifecycle-api.c - the lifecycle's endpoints: POST .../pause, .../resume,
 * .../connect, .../suspend, .../restore, and DELETE /v1/sandboxes/{id}
 * (including a suspended sandbox that another node left behind). The steps
 * are life/lifecycle.c, wake/wake.c and suspend/.
 */
#include <errno.h>
#include <string.h>

#include "node-internal.h"

void handle_sandbox_lifecycle(struct node *n, struct sandbox *sb, const char *op,
			      struct http_conn *c)
{
	err_t err = { 0 };
	int r;

	if (strcmp(op, "suspend") == 0 || strcmp(op, "restore") == 0) {
		handle_sandbox_suspend(n, sb, op, c);
		return;
	}
	if (strcmp(op, "pause") == 0)
		r = sandbox_pause(n, sb, &err);
	else if (strcmp(op, "resume") == 0)
		r = sandbox_wake(n, sb, NULL, &err);
	else {
		sched_touch(sb);
		r = sandbox_wake(n, sb, "resumed by connect", &err);
	}
	if (r < 0)
		sandbox_respond_err(c, sb, &err);
	else
		sandbox_respond(c, 200, sb);
}

void handle_sandbox_delete(struct node *n, const char *id, const char *tenant,
			   struct http_conn *c)
{
	struct sandbox *sb = sandbox_find(n, id, tenant);
	err_t err = { 0 };

	if (sb && cluster_forget_if_moved(n, sb)) {   /* stale: it moved away */
		sandbox_unref(sb);
		sb = NULL;
	}
	/* A suspended sandbox of a node that is lost or down, sent here by the
	 * api: taken over, then deleted (its objects with it). */
	if (!sb && !(sb = suspend_claim(n, id, tenant, &err)) && err.code != ENOENT) {
		node_respond_err(c, &err);
		return;
	}
	if (!sb) {
		/* Deleting again is fine for the owner. */
		if (sandbox_is_deleted(n, id, tenant))
			http_respond(c, 204, NULL, NULL, 0, NULL);
		else
			http_respond_error(c, 404, "not_found", "no sandbox `%s`", id);
		return;
	}
	if (sandbox_delete(n, sb, "deleted by client", &err) < 0)
		sandbox_respond_err(c, sb, &err);
	else
		http_respond(c, 204, NULL, NULL, 0, NULL);
	sandbox_unref(sb);
}

void handle_sandbox_suspend(struct node *n, struct sandbox *sb, const char *op,
			    struct http_conn *c)
{
	err_t err = { 0 };
	int r;

	if (strcmp(op, "suspend") == 0) {
		r = sandbox_suspend(n, sb, "suspended by client", c, &err);
	} else {
		enum sb_state st;
		bool busy;
		pthread_mutex_lock(&sb->mu);
		st = sb->state;
		busy = sb->lc_busy;
		pthread_mutex_unlock(&sb->mu);
		/* An explicit restore of a sandbox that is not suspended is a
		 * conflict (one restoring now is waited for). */
		if (!busy && st != SB_SUSPENDED)
			r = err_set(&err, EBUSY, "sandbox %s is %s; only a suspended sandbox can be "
				    "restored", sb->id, state_name(st));
		else
			r = sandbox_restore(n, sb, "restored by client", c, &err);
	}
	if (r < 0)
		sandbox_respond_err(c, sb, &err);
	else if (!http_conn_answered(c))   /* restored meanwhile by another request */
		sandbox_respond(c, 200, sb);
}
