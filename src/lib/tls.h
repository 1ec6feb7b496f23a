/* tls.h - TLS for the HTTP server (the api's listener) and client (the CLI),
 * as a relay: the TLS connection is ended in its own thread, which passes
 * the plain bytes on through a socketpair. The HTTP code reads and writes
 * the other end of the pair as it reads and writes a TCP socket, so every
 * path it has (keep-alive, streams, connections taken over for tunnels and
 * port forwarding) works over TLS unchanged, and the plain path has not
 * one more branch or copy. The price, on TLS connections only: one more
 * thread per connection and one more copy through a unix socket.
 *
 * OpenSSL (libssl), TLS 1.2 or later; the server takes on TLS 1.2 only
 * ECDHE with AES-GCM or ChaCha20-Poly1305, in its own order (tls.c). */
#ifndef AIRLOCK_TLS_H
#define AIRLOCK_TLS_H

#include <stdbool.h>
#include <stdint.h>

#include "err.h"

struct tls_ctx;   /* an SSL_CTX */

/* A server context from PEM files: the certificate (chain) and its private
 * key, checked to match. Read them before dropping privileges: the key may
 * then be root's alone. */
struct tls_ctx *tls_server_ctx(const char *cert_file, const char *key_file, err_t *err);
/* A client context that verifies the server's chain against ca_file (PEM)
 * when given, else the system's store. */
struct tls_ctx *tls_client_ctx(const char *ca_file, err_t *err);
/* A client context for one service (a tenant's key service): the chain
 * checked against ca_file (PEM; NULL: the system's store) and the name
 * always; then, when pin_sha256 is given, the server's own certificate
 * must have that SHA-256 (of its DER) too; a client certificate when
 * cert_file and key_file are given (both or neither; checked to match).
 * linger_ms > 0: a relay of this context whose peer keeps the connection
 * open after ours ended is dropped after that much silence (a server that
 * may be hostile cannot hold the relay's thread). */
struct tls_client_opts {
	const char *ca_file;
	const char *cert_file, *key_file;
	const uint8_t *pin_sha256;   /* 32 bytes, or NULL */
	int linger_ms;
};
struct tls_ctx *tls_client_ctx_opts(const struct tls_client_opts *o, err_t *err);
void tls_ctx_free(struct tls_ctx *t);   /* accepts NULL */

/* Server side, on an accepted socket fd: when the first bytes are not a TLS
 * handshake (a client speaking plain HTTP to this port), answer a plain
 * HTTP 400 that says so and fail. Else handshake, by deadline_ms (now_ms()
 * clock), and start the relay. Returns the plain end (caller owns and
 * closes it; the relay owns fd from then on and ends when either side
 * closes), or -errno with err set (fd is left open for the caller). */
int tls_server_wrap(struct tls_ctx *t, int fd, uint64_t deadline_ms, err_t *err);
/* Client side, on a connected socket fd: handshake with SNI host and the
 * certificate checked for host (a name or an IP address), and the pin of
 * a context made with one. As above; a certificate that fails a check is
 * -EPROTO with err naming the check. */
int tls_client_wrap(struct tls_ctx *t, int fd, const char *host, uint64_t deadline_ms,
		    err_t *err);

/* Wait up to timeout_ms for every relay of this process to end: a client
 * about to exit lets its connections close cleanly (close_notify both
 * ways) instead of cutting them. */
void tls_relays_wait(int timeout_ms);

#endif
