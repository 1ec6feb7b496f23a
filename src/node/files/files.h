/* files.h - the room node/files: the .../files endpoints (files.c) and
 * their watch (files-watch.c), through the guest channel of a sandbox
 * woken for use (node/wake). */
#ifndef AIRLOCK_NODE_FILES_H
#define AIRLOCK_NODE_FILES_H

#include "../model/model.h"

/* files.c; sub: "" (GET/PUT/DELETE), "stat", "list", "mkdir", "rename" */
void handle_files(struct node *n, struct sandbox *sb, const char *sub, struct http_req *req,
		  struct http_conn *c);
/* files-watch.c: GET .../files/watch (NDJSON until the client leaves). */
void handle_files_watch(struct node *n, struct sandbox *sb, struct http_req *req,
			struct http_conn *c);

#endif
