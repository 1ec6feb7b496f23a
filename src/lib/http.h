/* http.h - a small HTTP/1.1 server and client.
 *
 * Server: one thread per connection, keep-alive, request bodies up to
 * max_body bytes (Content-Length or chunked), header block up to 16 KiB and 64
 * headers. Malformed requests get a 400 JSON error and the connection closes;
 * nothing the peer sends can crash the server. Listens on "HOST:PORT" (IPv4
 * or [IPv6]) or "unix:/path".
 *
 * What a slow or hostile peer can hold is bounded (struct http_server_opts):
 * the whole request head must arrive within a deadline (408 past it), an
 * optional head hook answers before any body byte is read (authentication),
 * connections per client address are capped (429 from the accept thread, no
 * thread started), and the bytes of request bodies in flight share a budget
 * (503 busy past it).
 *
 * Responses: either one complete response (http_respond*), or a chunked stream
 * (http_stream_begin / write / end). A handler must finish the response
 * before returning; if it does not, the server sends 500.
 */
#ifndef AIRLOCK_HTTP_H
#define AIRLOCK_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"
#include "util.h"

/* Connections one server holds at once (each a thread); past it a new one
 * is refused. */
#define HTTP_MAX_CONNS 1024

#define HTTP_MAX_HEADERS 64

struct http_header {
	char *name;   /* as sent; compare case-insensitively */
	char *value;
};

struct http_req {
	char method[16];
	char *target;        /* raw request target, e.g. "/v1/x?a=b" */
	char *path;          /* percent-decoded path without query */
	char *query;         /* raw query string without '?', "" when none */
	struct http_header headers[HTTP_MAX_HEADERS];
	size_t n_headers;
	char *body;          /* NUL-terminated (not counted in body_len); "" when none */
	size_t body_len;
	/* What the head announces, for the head hook (body not read yet):
	 * Content-Length (0 when absent) and whether the body is chunked. */
	uint64_t body_declared;
	bool body_chunked;
	char peer[64];       /* "127.0.0.1:5555" or "unix" */
	/* A unix peer's uid as the kernel gave it at connect (SO_PEERCRED):
	 * what the internal sockets decide by (peer.h). HTTP_NO_UID for a
	 * TCP peer. */
	uid_t peer_uid;
};

#define HTTP_NO_UID ((uid_t)-1)

/* Borrowed pointers into req; NULL when absent. */
const char *http_req_header(const struct http_req *req, const char *name);
/* Does a comma-separated header value (Connection, Upgrade) list token?
 * Case-insensitive. */
bool http_has_token(const char *v, const char *token);
/* Decoded query parameter (the first of that name); caller owns; NULL when
 * absent. */
char *http_query_param(const struct http_req *req, const char *name);
/* Calls fn for each parameter of a raw query string (NULL = none), in order,
 * with its key and value form-decoded ('+' is a space; a malformed escape or
 * %00 is kept literally); both borrowed for the call. fn returns false to
 * stop. */
typedef bool (*http_query_fn)(void *arg, const char *k, const char *v);
void http_query_each(const char *query, http_query_fn fn, void *arg);

struct http_conn;  /* opaque, one per connection, valid during the handler */

typedef void (*http_handler_fn)(void *ctx, struct http_req *req, struct http_conn *c);

/* extra_headers: NULL or "Name: value\r\n..." lines. */
int http_respond(struct http_conn *c, int status, const char *content_type,
		 const void *body, size_t len, const char *extra_headers);
int http_respond_json(struct http_conn *c, int status, const char *json_body);
/* 201 with `Location: location` (a path of the new resource) and the body. */
int http_respond_created(struct http_conn *c, const char *location, const char *json_body);
/* {"error":{"code":code,"message":...}} */
int http_respond_error(struct http_conn *c, int status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Inside an open JSON object: write `"error":{"code":code,"message":msg}`,
 * for answers that carry more than http_respond_error's body. */
struct jw;
void http_write_error(struct jw *w, const char *code, const char *msg);
/* Chunked streaming. Each write is sent (flushed) immediately. Returns
 * -EPIPE once the client has gone away; the handler should then stop. */
int http_stream_begin(struct http_conn *c, int status, const char *content_type,
		      const char *extra_headers);
int http_stream_write(struct http_conn *c, const void *p, size_t n);
int http_stream_end(struct http_conn *c);
/* The same, with the first (or last) n bytes of the stream in the same
 * sendmsg as the head (or the end): one packet and one wakeup of the
 * reader instead of two. n == 0 sends nothing more. */
int http_stream_begin_with(struct http_conn *c, int status, const char *content_type,
			   const char *extra_headers, const void *p, size_t n);
int http_stream_end_with(struct http_conn *c, const void *p, size_t n);
/* Begin a stream whose head waits for the first write or the end, to go
 * out in the same sendmsg (so a stream that ends at once is one packet).
 * For a handler that writes or ends without waiting on anything first. */
void http_stream_hold(struct http_conn *c, int status, const char *content_type,
		      const char *extra_headers);
/* Header lines ("Name: value\r\n", < 128 bytes, not checked: the caller's
 * own) sent with every answer to the current request (X-Request-Id);
 * cleared when the next request's head arrives. */
void http_conn_set_header(struct http_conn *c, const char *lines);
/* True once the current request's answer began (http_respond*, a stream). */
bool http_conn_answered(const struct http_conn *c);
/* The current request carried a valid credential: from now on the
 * connection may wait idle_timeout_ms for its next request, not
 * unauth_idle_timeout_ms (for the rest of its life: a key proven once on
 * a connection is not asked again to keep it). */
void http_conn_set_authenticated(struct http_conn *c);
/* True once the peer closed its side (checked without blocking). */
bool http_conn_peer_closed(struct http_conn *c);

/* Take the connection over after a request (an Upgrade, a raw relay): the
 * server sends nothing more on it and closes it once the handler returns.
 * Bytes the client already sent beyond the request are appended to pending.
 * Returns the fd, borrowed for the rest of the handler. */
int http_conn_takeover(struct http_conn *c, struct buf *pending);

/* Called once a request head is parsed, before the server reads its body
 * (and before 100 Continue). Return true to go on (read the body, run the
 * handler); false after answering with http_respond* (the body is never read;
 * if one was announced the connection closes after the answer). */
typedef bool (*http_head_fn)(void *ctx, struct http_req *req, struct http_conn *c);

#define HTTP_HEAD_TIMEOUT_MS (10 * 1000)
#define HTTP_IDLE_TIMEOUT_MS (120 * 1000)

/* Zero fields take the defaults named. */
struct http_server_opts {
	size_t max_body;               /* bytes per request body */
	/* The whole head must arrive within this: from accept for a
	 * connection's first request, from its first byte for a later one
	 * (HTTP_HEAD_TIMEOUT_MS). Past it: 408 and close. */
	int head_timeout_ms;
	/* A keep-alive connection may wait this long for the next request's
	 * first byte (HTTP_IDLE_TIMEOUT_MS)... */
	int idle_timeout_ms;
	/* ... once a handler called http_conn_set_authenticated on it; until
	 * then, this long (0: idle_timeout_ms, for servers with no notion of
	 * a credential). A server that authenticates sets it short, so a
	 * client without a key cannot park connections between requests. */
	int unauth_idle_timeout_ms;
	/* Connections at once from one client: an IPv4 address, or an IPv6
	 * /64 (0: no cap; unix socket peers are never capped). Past it 429 and close, from the accept
	 * thread, with no connection thread started. */
	unsigned max_conns_per_client;
	/* NULL, or: may ip (the peer's whole address alone, "10.0.0.2") pass
	 * max_conns_per_client? Asked from the accept thread, only for an
	 * address at its cap; must not block. ctx: the handler's. */
	bool (*exempt_fn)(void *ctx, const char *ip);
	/* Bytes of request bodies held at once by all connections (0: no
	 * cap). A body that does not fit gets 503 busy + Retry-After. */
	size_t body_budget;
	http_head_fn head_fn;          /* NULL: none */
	/* NULL: plain HTTP. Else every connection is TLS (tls_server_ctx,
	 * tls.h; borrowed), ended in a relay thread before the first head;
	 * the handshake shares the first head's deadline. A client speaking
	 * plain HTTP gets a plain 400 tls_required. */
	struct tls_ctx *tls;
};

struct http_server;
/* Starts the listener thread. ctx is borrowed. unix sockets are created with
 * mode 0660 (an existing socket file is replaced). */
struct http_server *http_server_start(const char *listen_addr, size_t max_body,
				      http_handler_fn fn, void *ctx, err_t *err);
/* The same with limits and a head hook; opts is copied. */
struct http_server *http_server_start_opts(const char *listen_addr,
					   const struct http_server_opts *opts,
					   http_handler_fn fn, void *ctx, err_t *err);
/* Stops accepting, waits for connection threads to finish. Accepts NULL. */
void http_server_stop(struct http_server *s);
/* The bound address, e.g. "127.0.0.1:43111" (useful with port 0). Borrowed. */
const char *http_server_addr(const struct http_server *s);

/* Client. base: "http://127.0.0.1:8080" or "unix:/path".
 * headers: NULL or "Name: value\r\n..." lines. */
struct http_resp {
	int status;
	struct http_header headers[HTTP_MAX_HEADERS];
	size_t n_headers;
	struct buf body;
};
void http_resp_free(struct http_resp *r);  /* frees headers and body */
const char *http_resp_header(const struct http_resp *r, const char *name);

/* https:// bases verify the server against ctx (tls_client_ctx, tls.h);
 * without a call, against the system's CAs. ctx is borrowed for good. */
struct tls_ctx;
void http_client_set_tls(struct tls_ctx *ctx);

/* Connect to base ("http://host:port", "https://host:port" or "unix:/path"):
 * for https the fd is the plain end of a TLS relay. The Host header a
 * request to it should carry goes to host_header. Returns an fd (O_CLOEXEC,
 * caller owns) or -errno with err filled. */
int http_dial(const char *base, char *host_header, size_t hn, err_t *err);

int http_request(const char *base, const char *method, const char *target,
		 const char *headers, const void *body, size_t len,
		 struct http_resp *out, err_t *err);
/* http_request where each wait for the answer's bytes lasts at most
 * timeout_ms (-1: no limit); past it, -ETIMEDOUT. Connecting is not timed
 * (a unix socket's connect does not wait for the peer to run). */
int http_request_timeout(const char *base, const char *method, const char *target,
			 const char *headers, const void *body, size_t len, int timeout_ms,
			 struct http_resp *out, err_t *err);

/* http_request_timeout for a peer that may be hostile (a tenant's key
 * service): besides each wait, the whole answer must arrive within
 * total_ms of the request (connecting is still not timed), and a body
 * larger than max_body fails with -EFBIG instead of filling memory. */
int http_request_bounded(const char *base, const char *method, const char *target,
			 const char *headers, const void *body, size_t len, int timeout_ms,
			 int total_ms, size_t max_body, struct http_resp *out, err_t *err);
/* The same, an https base verified by tls (borrowed; NULL: the process's
 * context, http_client_set_tls) instead: one service's CA, pin and client
 * certificate (tls_client_ctx_opts). */
int http_request_bounded_tls(struct tls_ctx *tls, const char *base, const char *method,
			     const char *target, const char *headers, const void *body,
			     size_t len, int timeout_ms, int total_ms, size_t max_body,
			     struct http_resp *out, err_t *err);

/* Streaming client: on_head is called once with status/headers (out has no
 * body); then on_data for each piece of the body as it arrives (dechunked).
 * A callback returning non-zero aborts the request (returns that value). */
struct http_stream_cbs {
	int (*on_head)(void *arg, const struct http_resp *head);
	int (*on_data)(void *arg, const void *p, size_t n);
	/* Optional: called every idle_ms while the body is quiet, e.g. to notice
	 * that the party we relay to went away. Non-zero aborts the request. */
	int (*on_idle)(void *arg);
	int idle_ms;
	/* Optional: called when all the body received so far went to on_data
	 * and the client is about to wait for more, so a relay can hold what
	 * one read brought (head and first lines, last lines) and pass it on
	 * in one send. Not called once the body is complete. Non-zero aborts. */
	int (*on_flush)(void *arg);
	/* Keep the connection (unix-socket servers only) for the next request
	 * to the same socket, once the answer ended cleanly. */
	bool reuse;
};
int http_request_stream(const char *base, const char *method, const char *target,
			const char *headers, const void *body, size_t len,
			const struct http_stream_cbs *cbs, void *arg, err_t *err);

/* Parser entry point exposed for the fuzz target: parse one request from buf.
 * Returns >0 bytes consumed, 0 if more bytes are needed, <0 on malformed input.
 * On success req must be freed with http_req_free. */
int http_parse_request(const char *buf, size_t len, size_t max_body, struct http_req *req,
		       err_t *err);
void http_req_free(struct http_req *req);

#endif
