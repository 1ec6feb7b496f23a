/* mitm-internal.h - what mitm.c shares with the interception loop
 * (mitmloop-phases.c): the pieces of a request's reading and rewriting that do
 * not wait on anything themselves. All input is untrusted (the sandbox's). */
#ifndef AIRLOCK_MITM_INTERNAL_H
#define AIRLOCK_MITM_INTERNAL_H

#include <openssl/bio.h>
#include <stddef.h>
#include <stdint.h>

#include "../lib/err.h"
#include "../lib/util.h"
#include "inject.h"

#define IO_MS 30000            /* each step: a handshake, the request head, a write */
/* How long a chunked body may take to end before it passes untouched: a
 * small one comes at once; a stream (an upload of unknown length, say)
 * must not be cut off by the head's timeout, nor wait on us. */
#define CHUNKED_WAIT_MS 2000

/* The data of a BIO (mitm_pbio_method) that first returns the bytes the
 * gateway already read (pre, n: the sniffed ClientHello), then reads fd;
 * writes go to fd. A non-blocking fd makes it say "retry". */
struct pbio {
	const uint8_t *pre;
	size_t n, off;
	int fd;
};
BIO_METHOD *mitm_pbio_method(void);

/* err set from OpenSSL's error queue (cleared) with what failed: -EPROTO. */
int mitm_tls_fail(err_t *err, const char *what);

/* How the request's body is framed (mitm.c says how each is handled). */
enum body_kind { BODY_PASS, BODY_LENGTH, BODY_CHUNKED, BODY_LARGE };
enum body_kind mitm_body_kind(const struct http_head *h, long *len);

/* A chunked body decoded as its bytes come: 1 whole, 0 more must come,
 * -1 not read whole here (it passes untouched). */
struct dechunk {
	enum { DC_SIZE, DC_DATA, DC_DATA_END, DC_TRAILER } state;
	size_t off;    /* of the encoded body: parsed up to here */
	size_t left;   /* of the current chunk's data */
	struct buf body;
};
int mitm_dechunk(struct dechunk *d, const char *p, size_t n);

/* Domain fronting: 0 when the request names the origin sni (on port, or
 * the scheme's default dflt), else the status to answer (421, 400), which
 * mitm_status_answer appends to out as a whole answer. */
int mitm_host_vs_sni(const struct http_head *h, const char *sni, int dflt, int port);
void mitm_status_answer(int status, struct buf *out);

/* What goes upstream after the hook: the head with "Connection: close"
 * (and the body's length when it was read whole), the body, then hb's
 * bytes from rest. */
void mitm_request_out(struct http_head *h, const struct buf *hb, size_t rest, struct buf *out);
/* The head of a request whose large body streams with replacements
 * (re-framed chunked). */
void mitm_streamed_head_out(struct http_head *h, struct buf *out);

extern const char mitm_continue_100[];   /* "HTTP/1.1 100 Continue" */

#endif
