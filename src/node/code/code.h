/* code.h - the room node/code: a sandbox's code interpreter, the service of
 * the code-interpreter template (scripts/code-interpreter) on the sandbox's
 * loopback port CODE_PORT, reached through ports.c's relay. */
#ifndef AIRLOCK_NODE_CODE_H
#define AIRLOCK_NODE_CODE_H

#include "../http/handler.h"

#define CODE_PORT 49999   /* E2B's: @e2b/code-interpreter reaches it there too */

/* POST /v1/sandboxes/{id}/code. */
void handle_code_execute(struct node *n, struct sandbox *sb, struct http_req *req,
			 struct http_conn *c);
/* /v1/sandboxes/{id}/code/contexts[/{cid}[/restart]]: cid NULL for the
 * collection; restart: the .../restart row. */
void handle_code_contexts(struct node *n, struct sandbox *sb, const char *cid, bool restart,
			  struct http_req *req, struct http_conn *c);

#endif
