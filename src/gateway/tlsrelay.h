/* tlsrelay.h - the event loop that carries intercepted TLS connections
 * once their request went upstream (mitm.c): one thread, epoll, both
 * sides' SSL non-blocking (SSL_ERROR_WANT_READ / WANT_WRITE), so such a
 * connection holds no worker thread for its life, as the plain relay loop
 * (relay.h) does for the others. A pair ends when either side closes or
 * fails (close_notify to the other, as the blocking relay did), or after
 * TLS_LOOP_IDLE_MS without a byte either way. */
#ifndef AIRLOCK_TLSRELAY_H
#define AIRLOCK_TLSRELAY_H

#include <openssl/ssl.h>

#include "../lib/err.h"

#define TLS_LOOP_IDLE_MS (5 * 60000)

struct tls_loop;

/* At the pair's end, on the loop's thread: afd and bfd are still open (the
 * callback closes them); the SSLs are freed after it returns. */
typedef void (*tls_loop_done_fn)(void *arg, int afd, int bfd);

struct tls_loop *tls_loop_start(err_t *err);
/* Carry a (afd) and b (bfd), both past their handshakes; owned (may be
 * NULL) is freed after the SSLs (a BIO's data). The fds are made
 * non-blocking. Thread-safe. */
void tls_loop_add(struct tls_loop *l, SSL *a, int afd, SSL *b, int bfd, void *owned,
		  tls_loop_done_fn done, void *arg);
/* Pairs carried now. */
unsigned tls_loop_pairs(struct tls_loop *l);

#endif
