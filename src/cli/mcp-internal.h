/* mcp-internal.h - shared by the three files of `airlock mcp`'s core only:
 * mcp.c (JSON-RPC messages and methods, line splitting), mcp-tools.c (the
 * tool table: schemas, argument checks, tools/list and tools/call) and
 * mcp-run.c (what each tool does against the API). */
#ifndef AIRLOCK_MCP_INTERNAL_H
#define AIRLOCK_MCP_INTERNAL_H

#include <stdbool.h>

#include "../lib/json.h"
#include "../lib/util.h"
#include "mcp.h"

/* JSON-RPC 2.0 error codes */
#define RPC_PARSE_ERROR -32700
#define RPC_INVALID_REQUEST -32600
#define RPC_METHOD_NOT_FOUND -32601
#define RPC_INVALID_PARAMS -32602

/* mcp.c: a whole JSON-RPC answer (caller owns). The error's message is
 * logged; it may quote an agent's bytes. result is an object's JSON text. */
char *mcp_rpc_error(struct mcp_server *s, const json *id, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
char *mcp_rpc_result(const json *id, const char *result);

/* mcp-tools.c: the answers to tools/list and tools/call (caller owns). */
char *mcp_tools_list(const json *id);
char *mcp_tools_call(struct mcp_server *s, const json *id, const json *params);

/* One tools/call: the arguments were checked against the tool's table
 * entry before its run starts. */
struct mcp_tool;
struct mcp_call {
	struct mcp_server *s;
	const struct mcp_tool *tool;
	const json *args;
	struct buf out;   /* the result object, written through w */
	struct jw w;
	/* images (run_code) for image contents beside the text; owned */
	struct mcp_image {
		const char *mime;   /* static */
		char *data;         /* base64, checked to decode */
	} *images;
	size_t n_images;
	/* a failure: the API's error, or one of ours */
	bool failed;
	int status;       /* HTTP status; 0 when there was no answer */
	char *code, *message;
};

/* mcp-run.c: each tool's run writes the fields of its result into c->w
 * (inside the object tools/call opened), or records a failure. */
void mcp_run_create(struct mcp_call *c);
void mcp_run_list(struct mcp_call *c);
void mcp_run_delete(struct mcp_call *c);
void mcp_run_exec(struct mcp_call *c);
void mcp_run_read(struct mcp_call *c);
void mcp_run_write(struct mcp_call *c);
void mcp_run_list_files(struct mcp_call *c);
void mcp_run_snapshot(struct mcp_call *c);
void mcp_run_snapshot_list(struct mcp_call *c);
void mcp_run_rollback(struct mcp_call *c);
void mcp_run_code(struct mcp_call *c);

#endif
