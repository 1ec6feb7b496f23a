/* handler.h - the room node/http: what every handler of the node shares,
 * reading a request's body (request.c) and answering (reply.c). Above the
 * model only, below every room that answers a request. */
#ifndef AIRLOCK_NODE_HANDLER_H
#define AIRLOCK_NODE_HANDLER_H

#include "../model/model.h"

#define NODE_JSON_MAX (1u << 20)        /* JSON request bodies */
#define NODE_FILE_MAX (16u << 20)       /* file reads and writes */
#define NODE_CHUNK (48u * 1024)         /* raw bytes per stdout/stderr line */

/* reply.c */
void node_respond_err(struct http_conn *c, const err_t *e);
void node_errno_to_http(int code, int *status, const char **ecode);
/* 409 `conflict` with the sandbox's current state next to the error:
 * {"error":{"code":"conflict","message"},"state":"paused"}. */
void node_respond_conflict(struct http_conn *c, enum sb_state st, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Answer an error about sb: 409 with its state for -EBUSY, else as
 * node_respond_err. */
void sandbox_respond_err(struct http_conn *c, struct sandbox *sb, const err_t *e);

/* request.c: parse a JSON object body (size-limited); on failure answers 400/413 and
 * returns NULL. allowed: NULL-terminated list of keys. Caller owns. */
json *node_body_object(struct http_req *req, struct http_conn *c, const char *const *allowed);

#endif
