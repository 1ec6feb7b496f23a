/* wake.h - the room node/wake (wake.c): the one way a sandbox is woken
 * for use. Above node/life (the resume step) and node/suspend (the
 * restore); every feature that needs a guest calls it. */
#ifndef AIRLOCK_NODE_WAKE_H
#define AIRLOCK_NODE_WAKE_H

#include "../model/model.h"

/* Wake sb for use. Running: nothing to do (one lock); paused: resumed;
 * suspended: restored from the object store; a pause or resume under way
 * is waited for. why: the event's reason ("resumed for exec"); NULL is the
 * client's explicit resume, which is a conflict on a running sandbox. Else
 * -EBUSY naming the state. */
int sandbox_wake(struct node *n, struct sandbox *sb, const char *why, err_t *err);
/* The channel of a sandbox woken for use (sandbox_wake, counted as
 * activity). NULL with err set otherwise: -EBUSY naming the state (409),
 * or the backend's error. Pair with sandbox_gc_put. */
struct guestconn *sandbox_gc_use(struct node *n, struct sandbox *sb, const char *why,
				 err_t *err);
/* false when the request said auto_restore=false on a suspended sandbox
 * (answered 409). */
bool suspend_gate(struct sandbox *sb, struct http_req *req, struct http_conn *c);

#endif
