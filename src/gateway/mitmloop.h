/* mitmloop.h - intercepted TLS connections set up on event loops.
 *
 * Everything between the sniffed ClientHello and the hand-over to the TLS
 * relay loop (tlsrelay.h) runs here, for every connection at once, with no
 * thread held by any of them: the TLS handshake with the sandbox, its
 * request head and body (mitm.h says which bodies are read whole), the
 * credential hook, the request's bytes upstream (a large body with
 * replacements streams from here too), then the pair goes on on the relay
 * loop. Alongside those first steps goes the upstream side: the TCP
 * connect (started by the caller) and the verified TLS handshake, so their
 * round trips are not the request's. An upstream that cannot be reached
 * or verified is answered 502 after the head, without running the hook. Each connection is a
 * state machine on non-blocking sockets; each phase has a deadline (IO_MS:
 * handshakes, head and body, the hook, each write; MITM_CONNECT_MS the dial),
 * past which the connection ends (a chunked body that does not end within
 * CHUNKED_WAIT_MS passes untouched, as on the plain-HTTP path). The
 * sandbox's answers, all before anything goes upstream: 400 for a
 * malformed head, 421 (400 without exactly one Host) for a request naming
 * another origin than the SNI name (domain fronting), the hook's own
 * (429), 502 when upstream cannot be reached or verified. The reason the
 * end callback gets is the log line, "mitm: ..." (as mitm_tls_fail words
 * a TLS failure).
 *
 * The hook reads the DB (which may be a Postgres server) and the vault, so
 * it runs on a few hook threads of the loop's own; a connection waits for
 * it without holding anything else. A connection whose hook has not
 * started by its deadline is dropped from their queue.
 */
#ifndef AIRLOCK_MITMLOOP_H
#define AIRLOCK_MITMLOOP_H

#include <openssl/ssl.h>
#include <stdbool.h>
#include <stddef.h>

#include "../cred/ca.h"
#include "../lib/err.h"
#include "mitm.h"
#include "tlsrelay.h"

#define MITM_CONNECT_MS 10000

struct mitm_loop;

/* The upstream connect finished (ok) or failed, on a loop thread. */
typedef void (*mitm_dialed_fn)(void *arg, bool ok);
/* The setup ended: r 1 handed to the relay loop, 0 the connection was
 * answered here (the hook's reply, say), -errno failed (why says what). */
typedef void (*mitm_end_fn)(void *arg, int r, const char *why);

struct mitm_conn_spec {
	struct ca *ca;                /* borrowed: outlives the loop */
	SSL_CTX *upstream;            /* borrowed: the verifying client context */
	int client_fd;                /* consumed (through done) */
	const void *prefix;           /* the sniffed bytes, copied */
	size_t n;
	int up_fd;                    /* consumed: non-blocking, connect() under way */
	const char *host;             /* the SNI name, copied */
	int port;
	mitm_head_fn hook;            /* run on a hook thread, with hook_arg */
	void *hook_arg;
	mitm_end_fn end;              /* with hook_arg, once, after the hook's last use */
	mitm_dialed_fn dialed;        /* with done_arg; may be NULL */
	/* Once, when the connection is over (on the relay loop, or here when
	 * its setup failed): client_fd and up_fd still open, it closes them. */
	tls_loop_done_fn done;
	void *done_arg;
};

struct mitm_loop_opts {
	unsigned shards;              /* loop threads; 0: 1 */
	unsigned hook_threads;        /* 0: 1 */
	int io_ms, connect_ms;        /* the deadlines; 0: IO_MS, MITM_CONNECT_MS */
};

/* Start the threads; connections handed over go to relay (borrowed).
 * NULL with err when a thread cannot start. */
struct mitm_loop *mitm_loop_start(struct tls_loop *relay, const struct mitm_loop_opts *o,
				  err_t *err);
/* Take a connection over (thread-safe; never fails: a failure is the
 * connection's end, through end and done). */
void mitm_loop_add(struct mitm_loop *l, const struct mitm_conn_spec *spec);
/* Connections being set up now. */
unsigned mitm_loop_conns(struct mitm_loop *l);

#endif
