/* mitm.h - credential injection into requests (used by the gateway).
 *
 * Only for a host that has a credential bound for the sandbox. Over TLS,
 * the interception loop (mitmloop.h) answers the sandbox's TLS with a
 * certificate for the SNI name from the deployment CA (ca.h), reads the
 * first request head, lets the caller rewrite it (cred_inject), and sends
 * it over its own TLS connection to the real host, made from
 * mitm_upstream_ctx: verified against the system trust store (plus an
 * extra CA file the operator names, e.g. a test CA) with the SNI name
 * checked. Over plain HTTP, mitm_http_head does the reading and the
 * rewrite. The request gets "Connection: close", so every request on an
 * intercepted connection passes the hook: the client opens a new
 * connection for the next one.
 * A body with a Content-Length of at most BODY_MAX, or a chunked one of at
 * most BODY_MAX of data (decoded; it goes on with a Content-Length), is
 * read whole first and goes through the hook with the head (h->has_body;
 * its new length is written); a client that waits with "Expect:
 * 100-continue" gets the 100 from us. A body with a Content-Length past
 * BODY_MAX streams: when a credential that applies opted in to "body"
 * (h->subst), its placeholders are replaced as the bytes come and it goes
 * upstream chunked (its length changes): over intercepted TLS from the
 * loop, over plain HTTP by the caller with mitm_stream_plain; otherwise
 * it passes byte-identical after the rewritten head. Any other body
 * (trailer fields, other codings) and the response are relayed as they
 * are.
 */
#ifndef AIRLOCK_MITM_H
#define AIRLOCK_MITM_H

#include <openssl/ssl.h>
#include <stddef.h>

#include "../lib/err.h"
#include "../lib/util.h"
#include "inject.h"

/* The client context for upstream connections: system store + extra_ca_file
 * (NULL = none), TLS >= 1.2, peer verification on. */
SSL_CTX *mitm_upstream_ctx(const char *extra_ca_file, err_t *err);

/* Called with the parsed request head. Rewrite h and return 0 to forward;
 * or fill reply with a whole HTTP response (e.g. 429) and return 1. */
typedef int (*mitm_head_fn)(void *arg, struct http_head *h, struct buf *reply);

/* Plain HTTP: read the rest of the first request head from fd after prefix
 * (prefix/n/cap: the bytes sniffed so far, in a buffer of cap bytes), parse
 * it (and its body, as above) and run fn. host (NULL: no check) is the name
 * the gateway checked, the first Host field as sniffed, and port the one
 * dialled: a request with another Host field or an absolute target naming
 * another origin is answered 421 (400 without exactly one Host) in out,
 * returning 1, and fn is not run (domain fronting). On 0, out holds what to send
 * upstream (the rewritten head with "Connection: close", the body, then any
 * bytes read past it); on 1, out is the reply for the client. -errno when
 * the head is malformed or too big, or the body does not arrive. */
int mitm_http_head(int fd, const void *prefix, size_t n, const char *host, int port,
		   mitm_head_fn fn, void *arg, struct buf *out, err_t *err);

/* A plain-HTTP body past BODY_MAX to replace in as it streams: when
 * stream is not NULL and the hook asked for that, mitm_http_head_stream
 * (otherwise mitm_http_head) returns 0
 * with out = the head only (chunked) and *stream set; the caller sends out
 * upstream, then mitm_stream_plain(*stream, fd, up) streams the body (both
 * fds blocking) and frees it: 0, or -EPIPE. */
struct mitm_stream {
	struct http_head h;
	struct buf hb;                /* the bytes read, the body's start from rest */
	size_t rest;
};
int mitm_http_head_stream(int fd, const void *prefix, size_t n, const char *host, int port,
			  mitm_head_fn fn, void *arg, struct buf *out, struct mitm_stream **stream,
			  err_t *err);
int mitm_stream_plain(struct mitm_stream *st, int client_fd, int up_fd);
void mitm_stream_free(struct mitm_stream *st);

#endif
