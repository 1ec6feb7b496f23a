/* envd-internal.h - shared by the files of envd, E2B's in-sandbox API, only:
 * envd.c (Connect errors, the helpers below, dispatch), envd-stream.c
 * (server streams), envd-process.c (process.Process) and envd-fs.c
 * (filesystem.Filesystem and the HTTP file endpoints). */
#ifndef AIRLOCK_ENVD_INTERNAL_H
#define AIRLOCK_ENVD_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "e2b-internal.h"

/* One envd call; everything borrowed for its duration. The sandbox is
 * the one of the caller's envd token (e2b.c), and every node request
 * carries the token's tenant, so the node's ownership rules hold. */
struct envd_ctx {
	struct api *a;
	const struct api_principal *who;
	const char *id;
	struct http_req *req;
	struct http_conn *c;
};

/* ---- envd.c: Connect errors and shared helpers */

/* The node's HTTP status as a Connect code. */
const char *envd_code_of_status(int st);
/* {"code","message"} into b. */
void envd_write_error_obj(struct buf *b, const char *code, const char *msg);
/* A unary call's answers: an error with the code's HTTP status, the
 * node's error (st < 0: it was unreachable), or 200 with json_text. */
void envd_rpc_error(struct http_conn *c, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void envd_rpc_node_error(struct http_conn *c, int st, const struct http_resp *r);
void envd_rpc_ok(struct http_conn *c, const char *json_text, size_t n);
/* The user of a call: HTTP Basic "name:" (the SDK's `user` option), else
 * the username query parameter, else root. Into out; false when bad. */
bool envd_call_user(const struct http_req *req, char *out, size_t cap);
/* A path as the node takes it: relative ones are under the user's home;
 * caller owns. */
char *envd_resolve_path(const char *p, const char *user);
/* "/v1/sandboxes/<id>/files<op>?path=<path><extra>"; caller owns. */
char *envd_files_target(const char *id, const char *op, const char *path, const char *extra);
/* The field of a request, a path, resolved (caller owns); NULL when
 * answered (400). */
char *envd_req_path(struct envd_ctx *x, const json *msg, const char *field);
/* A unary node call whose success answer is {} to the client. */
void envd_node_then_empty(struct envd_ctx *x, const char *method, const char *target,
			  const char *body);

/* ---- envd-stream.c: a node answer that streams, translated */

enum stream_kind { S_EXEC, S_WATCH };

struct envd_stream {
	struct http_conn *c;
	enum stream_kind kind;
	bool pty;             /* exec with a terminal: output is "pty" data */
	bool skip_start;      /* Connect: the start message was written already */
	bool begun, ended, client_gone, too_long;
	int status;           /* the node's */
	uint64_t last_ms;
	struct buf line;      /* a partial NDJSON line */
	struct buf errbody;   /* the node's error answer */
	const char *root;     /* WatchDir: the watched path */
	const char *pid;      /* Connect: the pid, for the start message */
};

/* A streaming call refused before it reached the node: the stream's head
 * and an end-of-stream message with the error {code, msg}, nothing else. */
void envd_stream_refuse(struct http_conn *c, const char *code, const char *msg);
/* Run a node request whose answer is a stream, and translate it (s's
 * kind, pty, skip_start, root and pid set by the caller). */
void envd_relay_stream(struct envd_ctx *x, struct envd_stream *s, const char *method,
		       const char *target, const char *body);

/* ---- envd-process.c: process.Process (Start and Connect stream) */

void envd_process_start(struct envd_ctx *x, const json *msg);
void envd_process_connect(struct envd_ctx *x, const json *msg);
void envd_process_list(struct envd_ctx *x);
void envd_process_input(struct envd_ctx *x, const json *msg, bool eof);   /* eof: CloseStdin */
void envd_process_signal(struct envd_ctx *x, const json *msg);
void envd_process_update(struct envd_ctx *x, const json *msg);

/* ---- envd-fs.c: filesystem.Filesystem (WatchDir streams) and /files */

void envd_answer_entry(struct envd_ctx *x, const char *path);   /* Stat: {"entry": EntryInfo} */
void envd_fs_list(struct envd_ctx *x, const json *msg);
void envd_fs_mkdir(struct envd_ctx *x, const json *msg);
void envd_fs_move(struct envd_ctx *x, const json *msg);
void envd_fs_remove(struct envd_ctx *x, const json *msg);
void envd_fs_watch(struct envd_ctx *x, const json *msg);
void envd_files_read(struct envd_ctx *x);    /* GET /files?path=P: the file's bytes */
void envd_files_write(struct envd_ctx *x);   /* POST /files: multipart or octet-stream */

#endif
