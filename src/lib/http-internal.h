/* http-internal.h - shared between the files of the HTTP server and client
 * (src/lib/http-*.c); not a public API, http.h is.
 *
 * The files, one concern each:
 *   http-parse.c    header lookup, percent decoding, request heads and bodies
 *                   parsed from bytes (the untrusted part; fuzz-http)
 *   http-chunked.c  the incremental chunked-body decoder (server and client)
 *   http-io.c       receive-buffer and socket helpers (server and client)
 *   http-respond.c  what a handler sends: whole responses, chunked streams
 *   http-server.c   the thread pool (accept and serve), start and stop
 *   http-listen.c   the listening socket: HOST:PORT, [IPV6]:PORT, unix:/path
 *   http-client.c   the client
 */
#ifndef AIRLOCK_HTTP_INTERNAL_H
#define AIRLOCK_HTTP_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "http.h"

#define HTTP_MAX_HEAD (16 * 1024)       /* request line + headers + blank line */
#define HTTP_IO_CHUNK (64 * 1024)

/* ---- http-io.c ---- */

/* Room for n more bytes and a NUL in b. */
void http_buf_reserve(struct buf *b, size_t n);
/* Drop the first n bytes of b (consumed input). */
void http_buf_consume(struct buf *b, size_t n);
/* sendmsg with MSG_NOSIGNAL: a peer that went away must give us EPIPE, not
 * kill the daemon with SIGPIPE. Returns 0 or -EPIPE. */
int http_send_iov(int fd, struct iovec *iov, size_t n);
int http_send_all(int fd, const void *p, size_t n);
/* Reads what is available into b, waiting up to timeout_ms (-1: forever)
 * for input. The first attempt skips poll(): on the request path the bytes
 * are usually already queued, and a syscall less is latency saved.
 * Returns bytes read, 0 on EOF, -ETIMEDOUT or -errno. */
ssize_t http_recv_some(int fd, struct buf *b, size_t want, int timeout_ms);

/* ---- http-parse.c ---- */

/* What the head says about framing and connection reuse. */
struct req_info {
	bool http10;
	bool chunked;
	bool has_clen;
	uint64_t clen;
	bool keep_alive;
	bool expect_continue;
};

/* Frees the names and values of h[0..n). */
void http_free_headers(struct http_header *h, size_t n);
/* Offset just past the blank line ending the head, or 0 if not seen yet.
 * *scanned lets repeated calls on a growing buffer skip what was searched. */
size_t http_find_head_end(const char *p, size_t len, size_t *scanned);
/* Header lines from p up to the final blank line; end points just past it. */
int http_parse_header_block(const char *p, const char *end, struct http_header *h,
			    size_t *n, err_t *err);
/* Content-Length: plain digits only, and no overflow. */
int http_parse_clen(const char *v, uint64_t *out, err_t *err);
/* Parses the head [p, p+head_len) into req. On failure req holds partial
 * allocations; the caller frees it either way. */
int http_parse_request_head(const char *p, size_t head_len, struct http_req *req,
			    struct req_info *info, err_t *err);
/* Length of the CRLFs before a request line, which are ignored. */
size_t http_skip_blank_lines(const char *buf, size_t len);

/* ---- http-chunked.c ---- */

enum dc_state {
	DC_SIZE, DC_EXT, DC_SIZE_LF, DC_DATA, DC_DATA_CR, DC_DATA_LF,
	DC_TRAILER, DC_TRAILER_LINE, DC_TRAILER_LF, DC_FINAL_LF, DC_DONE,
};

/* Incremental chunked-body decoder: bytes can arrive split anywhere. Data
 * is handed to emit as it is decoded, so a streaming client sees each piece
 * without waiting for the chunk boundary. */
struct dechunk {
	enum dc_state state;
	uint64_t size;        /* current chunk: digits so far, then bytes left */
	unsigned digits;
	size_t line;          /* bytes of the current size or trailer line */
	size_t trailer;
	uint64_t total, max;
};

typedef int (*emit_fn)(void *arg, const char *p, size_t n);

/* Ready to decode a body of at most max bytes. */
void http_dechunk_init(struct dechunk *d, uint64_t max);
/* Feeds n bytes; *used says how many were consumed (fewer than n only once
 * the body is complete: the rest belongs to the next message). Returns 0,
 * -EINVAL / -EFBIG for bad input, or emit's non-zero return value. */
int http_dechunk_feed(struct dechunk *d, const char *p, size_t n, size_t *used,
		      emit_fn emit, void *arg);
/* An emit_fn that appends to arg, a struct buf. */
int http_emit_to_buf(void *arg, const char *p, size_t n);

/* ---- http-server.c and http-respond.c ---- */

enum resp_state { RESP_NONE, RESP_DONE, RESP_STREAM, RESP_STREAM_DONE };

struct http_conn {
	struct http_server *srv;
	int fd;
	struct http_conn *prev, *next;   /* srv->conns, under srv->mu */
	char peer[64];
	char ip[48];                     /* peer's address without port; "" for unix */
	char client[48];                 /* http_format_peer_client: the cap's key */
	uid_t peer_uid;                  /* a unix peer's (SO_PEERCRED); HTTP_NO_UID */
	uint64_t accepted_ms;            /* now_ms() at accept: the first head's deadline */
	size_t body_reserved;            /* bytes of srv->body_inflight this request holds */
	struct buf in;                   /* received, not yet consumed */
	struct buf held;                 /* a stream's head, not sent yet (http_stream_hold) */
	enum resp_state state;
	bool keep_alive;                 /* for the current request */
	bool http10;
	bool is_head;
	bool broken;                     /* a send failed; close after handler */
	bool authenticated;              /* http_conn_set_authenticated: the long idle */
	char req_hdr[128];               /* http_conn_set_header: this request's */
};

struct http_server {
	int lfd, wake_fd;
	unsigned n_workers;              /* pool threads alive, under mu */
	unsigned n_idle;                 /* of them, waiting for a connection */
	char addr[128];
	char *unix_path;                 /* socket file we created, to unlink */
	dev_t unix_dev;
	ino_t unix_ino;
	struct http_server_opts opts;    /* defaults filled in */
	http_handler_fn fn;
	void *ctx;
	pthread_mutex_t mu;
	pthread_cond_t idle;             /* broadcast when a connection or thread ends */
	struct http_conn *conns;
	size_t n_conns;
	size_t body_inflight;            /* sum of conns' body_reserved */
	bool stopping;
	uint64_t refused_log_ms;         /* under mu: last refusal logged */
	unsigned refused_unlogged;
};

static inline bool server_stopping(const struct http_server *s)
{
	return __atomic_load_n(&s->stopping, __ATOMIC_ACQUIRE);
}

/* ---- http-listen.c ---- */

/* "127.0.0.1:5555", "[::1]:5555", or "unix" for anything else. */
void http_format_peer(const struct sockaddr_storage *ss, char *out, size_t n);
/* The address alone, "127.0.0.1" or "::1" (an IPv4-mapped IPv6 address as
 * IPv4), "" for a unix socket peer: what exempt_fn is asked about. */
void http_format_peer_ip(const struct sockaddr_storage *ss, char *out, size_t n);
/* The key of the per-client connection cap (max_conns_per_client): the
 * address for IPv4 (and IPv4-mapped IPv6), the /64 for IPv6
 * ("2001:db8:1:2::/64"), "" for a unix socket peer (never capped). */
void http_format_peer_client(const struct sockaddr_storage *ss, char *out, size_t n);
/* "HOST:PORT" or "[IPV6]:PORT" into host (brackets removed) and port. */
int http_split_host_port(const char *spec, char *host, size_t hn, char *port, size_t pn,
			 err_t *err);
/* Bind and listen on spec ("HOST:PORT") or on a unix socket at path; fill
 * s->lfd and s->addr (a unix socket also s->unix_path, _dev and _ino). */
int http_listen_inet(struct http_server *s, const char *spec, err_t *err);
int http_listen_unix(struct http_server *s, const char *path, err_t *err);
/* Remove our socket file, unless someone has since replaced it. */
void http_unlink_own_socket(struct http_server *s);

#endif
