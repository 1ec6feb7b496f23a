/* timeout.c - POST /v1/sandboxes/{id}/timeout {"timeout_s":N}: the sandbox
 * now ends (its on_timeout: delete or pause) after N more seconds of active
 * time; 0 takes its timeout away. E2B's setTimeout is this call.
 *
 * timeout_s stays what it always was, the budget of active time counted
 * from the TTL base (its creation, or the resume after a timeout pause):
 * the new value is the active time used so far plus N. So the deadline
 * survives a node restart the way any other does (the spec row keeps
 * timeout_s; the events replay the paused time). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "node-internal.h"

#define TIMEOUT_MAX_S 0xfffffffeLL
#define TIMEOUT_REQ_MAX_S (10LL * 365 * 86400)   /* as create's timeout_s */

/* Write timeout_s into the spec row. */
static int store_timeout(struct node *n, struct sandbox *sb, uint32_t t, err_t *err)
{
	json v = { .type = JSON_NUM, .num = t, .is_int = true, .i = t };

	return sandbox_spec_set(n, sb, "timeout_s", &v, err);
}

void handle_sandbox_timeout(struct node *n, struct sandbox *sb, struct http_req *req,
			    struct http_conn *c)
{
	static const char *const allowed[] = { "timeout_s", NULL };
	json *body = node_body_object(req, c, allowed);
	err_t err = { 0 };
	bool bad = false;
	int64_t add, t = 0;
	enum sb_state st;

	if (!body)
		return;
	add = json_get_int(body, "timeout_s", -1, &bad);
	json_free(body);
	if (bad || add < 0 || add > TIMEOUT_REQ_MAX_S) {
		http_respond_error(c, 400, "invalid_field",
				   "field `timeout_s` must be an integer 0..%lld", TIMEOUT_REQ_MAX_S);
		return;
	}
	pthread_mutex_lock(&sb->mu);
	st = sb->state;
	if (st == SB_RUNNING || st == SB_PAUSED) {
		const struct sb_sched *s = &sb->sched;
		int64_t now = wall_ms();
		int64_t used = now - (s->ttl_base ? s->ttl_base : sb->created_at) -
			       s->paused_total_ms - (s->paused_since ? now - s->paused_since : 0);

		if (add > 0) {
			t = (used > 0 ? (used + 999) / 1000 : 0) + add;
			if (t > TIMEOUT_MAX_S)
				t = TIMEOUT_MAX_S;
		}
	}
	pthread_mutex_unlock(&sb->mu);
	if (st != SB_RUNNING && st != SB_PAUSED) {
		node_respond_conflict(c, st, "sandbox %s is not running or paused", sb->id);
		return;
	}
	if (store_timeout(n, sb, (uint32_t)t, &err) < 0) {
		node_respond_err(c, &err);
		return;
	}
	pthread_mutex_lock(&sb->mu);
	sb->timeout_s = (uint32_t)t;
	/* A shorter deadline needs its own timer; a later one is found by
	 * the queued timer, which checks again when it fires. */
	sandbox_schedule_timeout(n, sb);
	pthread_mutex_unlock(&sb->mu);
	sandbox_respond(c, 200, sb);
}
