/* exec.h - the room node/exec: POST .../exec (exec.c) and the
 * .../processes endpoints (processes.c), over the process table
 * (node/proc), woken for use (node/wake). */
#ifndef AIRLOCK_NODE_EXEC_H
#define AIRLOCK_NODE_EXEC_H

#include "../model/model.h"
#include "../proc/proc.h"

/* exec.c */
void handle_exec(struct node *n, struct sandbox *sb, struct http_req *req, struct http_conn *c);
/* processes.c: stream p's output as NDJSON from off[0] (stdout) and off[1]
 * (stderr); with follow until its exit line, else what is buffered. The
 * response has begun; lines already in out go first. */
void proc_stream(struct node *n, struct sandbox *sb, struct proc *p, struct http_conn *c,
		 uint64_t off[2], bool follow, struct buf *out);
void handle_processes(struct node *n, struct sandbox *sb, struct http_req *req,
		      struct http_conn *c);
/* rest: "output", "stdin", "signal", "resize" */
void handle_process(struct node *n, struct sandbox *sb, uint32_t pid, const char *rest,
		    struct http_req *req, struct http_conn *c);

#endif
