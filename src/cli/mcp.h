/* mcp.h - the core of `airlock mcp`: a Model Context Protocol server.
 *
 * MCP is JSON-RPC 2.0, here over stdio: one message per line. This core
 * takes the bytes an MCP client (an agent) sent, split into lines with a
 * bound, answers each request and drives the Airlock API through a
 * transport, so it holds no socket or file descriptor of its own: cmd-mcp.c
 * plugs in the CLI's HTTP client, tests/fuzz/fuzz-mcp.c a canned one.
 *
 * The input is an agent's bytes: every message is parsed with json.h's
 * limits, a line longer than MCP_MAX_LINE is answered with an error and
 * skipped, and nothing an agent sends can end the server.
 */
#ifndef AIRLOCK_MCP_H
#define AIRLOCK_MCP_H

#include <stdbool.h>
#include <stdio.h>

#include "../lib/http.h"
#include "../lib/json.h"

#define MCP_PROTOCOL_VERSION "2025-06-18"
#define MCP_MAX_LINE (16u << 20)          /* one message, without its '\n' */
#define MCP_EXEC_MAX_OUTPUT (64u << 10)   /* bytes of stdout (and of stderr) kept */
#define MCP_READ_MAX (4u << 20)           /* files_read: bytes returned at most */
#define MCP_WRITE_MAX (16u << 20)         /* files_write: the API's limit */

/* How the core reaches the API. Both return 0 when an answer came (any
 * status), or < 0 with err filled when the server could not be reached. */
struct mcp_transport {
	/* A whole answer into *out (zeroed by the caller; freed by it too). */
	int (*request)(void *arg, const char *method, const char *target,
		       const char *content_type, const void *body, size_t len,
		       struct http_resp *out, err_t *err);
	/* A streamed answer: as http_request_stream, with a JSON body or NULL. */
	int (*stream)(void *arg, const char *method, const char *target, const char *json_body,
		      const struct http_stream_cbs *cbs, void *cbarg, err_t *err);
	void *arg;
};

struct mcp_server {
	const char *version;     /* serverInfo.version */
	struct mcp_transport t;
	FILE *log;               /* one line per tool call and per error; NULL: quiet */
	bool initialized;        /* `initialize` was answered */
	/* line splitting (mcp_feed) */
	struct buf line;
	bool skipping;           /* inside a line that went past MCP_MAX_LINE */
};

/* Called with each answer: one JSON text, without a newline (the caller
 * adds it); it never contains a raw newline. */
typedef void (*mcp_emit_fn)(void *arg, const char *msg, size_t len);

void mcp_init(struct mcp_server *s, const char *version, const struct mcp_transport *t,
	      FILE *log);
void mcp_free(struct mcp_server *s);

/* Handle one message (a line without its '\n'). Returns the answer (caller
 * owns), or NULL when there is none (a notification, a client's response,
 * a blank line). */
char *mcp_handle(struct mcp_server *s, const char *msg, size_t len);

/* Feed bytes as read from the client; every complete line is handled and
 * its answer emitted. mcp_finish handles a last line without '\n' (EOF). */
void mcp_feed(struct mcp_server *s, const char *data, size_t n, mcp_emit_fn emit, void *arg);
void mcp_finish(struct mcp_server *s, mcp_emit_fn emit, void *arg);

#endif
