/* tls.c - TLS relays for the HTTP server and client (tls.h). */
#include "tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "log.h"
#include "util.h"

#define RELAY_BUF (16 * 1024)   /* one TLS record's worth */
#define RELAY_STACK (256 * 1024)
#define PLAIN_LINGER_MS 500   /* refuse_plain: how long to drain the request */
/* A peer that stops reading what we send it is given up after this (as
 * the HTTP server's SO_SNDTIMEO does on plain sockets), so it cannot hold
 * the relay's thread and socket for ever. */
#define RELAY_SEND_TIMEOUT_MS (120 * 1000)
/* The server's side of a connection is done (the HTTP code closed it): how
 * long a client that says nothing may keep the relay before it goes. */
#define RELAY_SERVER_LINGER_MS (30 * 1000)

/* What the api's listener accepts (tls_server_ctx). TLS 1.2 only with
 * ECDHE (forward secrecy: a stolen key does not open recorded sessions)
 * and an AEAD cipher: no CBC suite (MAC-then-encrypt, the root of Lucky13
 * and the padding oracles), no RSA key exchange, no SHA-1 MAC. Every
 * client of the last years has one of these. In this order, the server's
 * (SSL_OP_CIPHER_SERVER_PREFERENCE): a client listing a weaker suite
 * first still gets the best we share. ECDSA and RSA forms, for either
 * kind of certificate. */
#define TLS12_SERVER_CIPHERS                                                    \
	"ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"            \
	"ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"            \
	"ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"
/* TLS 1.3 has only AEAD suites; named anyway so a changed library
 * default cannot widen what we accept. */
#define TLS13_SERVER_SUITES \
	"TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"

/* An error of OpenSSL's queue (or `what` alone) into err; clears the queue. */
static int tls_err(err_t *err, int code, const char *what)
{
	char msg[200];
	unsigned long e = ERR_get_error();

	ERR_error_string_n(e, msg, sizeof(msg));
	ERR_clear_error();
	return err_set(err, code, "%s%s%s", what, e ? ": " : "", e ? msg : "");
}

struct tls_ctx *tls_server_ctx(const char *cert_file, const char *key_file, err_t *err)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());

	if (!ctx || SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
	    SSL_CTX_set_cipher_list(ctx, TLS12_SERVER_CIPHERS) != 1 ||
	    SSL_CTX_set_ciphersuites(ctx, TLS13_SERVER_SUITES) != 1) {
		SSL_CTX_free(ctx);
		tls_err(err, EIO, "TLS server context");
		return NULL;
	}
	if (SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1) {
		SSL_CTX_free(ctx);
		tls_err(err, EINVAL, "tls_cert");
		return err_wrap(err, "cannot use `%s`", cert_file), NULL;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) != 1) {
		SSL_CTX_free(ctx);
		tls_err(err, EINVAL, "tls_key");
		return err_wrap(err, "cannot use `%s`", key_file), NULL;
	}
	if (SSL_CTX_check_private_key(ctx) != 1) {
		SSL_CTX_free(ctx);
		tls_err(err, EINVAL, "tls_key does not match tls_cert");
		return NULL;
	}
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
	/* a client asking for handshake after handshake makes us spend CPU at
	 * its will: refuse (TLS 1.2; 1.3 has none) */
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
				 SSL_OP_CIPHER_SERVER_PREFERENCE);
	return (struct tls_ctx *)ctx;
}

struct tls_ctx *tls_client_ctx(const char *ca_file, err_t *err)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	int ok;

	if (!ctx || SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) {
		SSL_CTX_free(ctx);
		tls_err(err, EIO, "TLS client context");
		return NULL;
	}
	ok = ca_file ? SSL_CTX_load_verify_locations(ctx, ca_file, NULL)
		     : SSL_CTX_set_default_verify_paths(ctx);
	if (ok != 1) {
		SSL_CTX_free(ctx);
		tls_err(err, EINVAL, "CA file");
		return err_wrap(err, "cannot use `%s`", ca_file ? ca_file : "the system's CAs"), NULL;
	}
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	return (struct tls_ctx *)ctx;
}

/* What a context of tls_client_ctx_opts adds, as its SSL_CTX's app data
 * (the other contexts have none). */
struct client_extra {
	bool has_pin;
	uint8_t pin[32];
	int linger_ms;
};

/* An encrypted key file would make OpenSSL ask for its passphrase on the
 * terminal, from a daemon: refuse it instead. */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
	(void)buf, (void)size, (void)rwflag, (void)u;
	return 0;
}

struct tls_ctx *tls_client_ctx_opts(const struct tls_client_opts *o, err_t *err)
{
	struct client_extra *x;
	SSL_CTX *ctx;

	if (!o->cert_file != !o->key_file)
		return err_set(err, EINVAL, "a client certificate needs both its certificate and "
			       "its key file"), NULL;
	if (!(ctx = (SSL_CTX *)tls_client_ctx(o->ca_file, err)))
		return NULL;
	if (o->cert_file) {
		SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);
		if (SSL_CTX_use_certificate_chain_file(ctx, o->cert_file) != 1) {
			SSL_CTX_free(ctx);
			tls_err(err, EINVAL, "client certificate");
			return err_wrap(err, "cannot use `%s`", o->cert_file), NULL;
		}
		if (SSL_CTX_use_PrivateKey_file(ctx, o->key_file, SSL_FILETYPE_PEM) != 1) {
			SSL_CTX_free(ctx);
			tls_err(err, EINVAL, "client key (a PEM key without a passphrase)");
			return err_wrap(err, "cannot use `%s`", o->key_file), NULL;
		}
		if (SSL_CTX_check_private_key(ctx) != 1) {
			SSL_CTX_free(ctx);
			tls_err(err, EINVAL, "the client key does not match the client certificate");
			return NULL;
		}
	}
	x = xcalloc(1, sizeof(*x));
	if (o->pin_sha256) {
		x->has_pin = true;
		memcpy(x->pin, o->pin_sha256, sizeof(x->pin));
	}
	x->linger_ms = o->linger_ms > 0 ? o->linger_ms : 0;
	SSL_CTX_set_app_data(ctx, x);
	return (struct tls_ctx *)ctx;
}

void tls_ctx_free(struct tls_ctx *t)
{
	if (!t)
		return;
	/* a relay's SSL may keep the SSL_CTX alive past this (it holds a
	 * reference); the extra is only read before a relay starts */
	free(SSL_CTX_get_app_data((SSL_CTX *)t));
	SSL_CTX_set_app_data((SSL_CTX *)t, NULL);
	SSL_CTX_free((SSL_CTX *)t);
}

/* The pin, after the chain and the name passed: the server's own
 * certificate is the one the operator named, not merely one the CAs
 * vouch for. */
static int check_pin(SSL *ssl, const struct client_extra *x, err_t *err)
{
	X509 *cert = SSL_get1_peer_certificate(ssl);
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int len = 0;
	char hex[2 * 32 + 1];
	bool ok;

	if (!cert)
		return err_set(err, EPROTO, "TLS: the server sent no certificate to check the pin");
	ok = X509_digest(cert, EVP_sha256(), md, &len) == 1 && len == sizeof(x->pin);
	X509_free(cert);
	if (!ok) {
		ERR_clear_error();
		return err_set(err, EPROTO, "TLS: cannot hash the server's certificate");
	}
	if (CRYPTO_memcmp(md, x->pin, sizeof(x->pin)) == 0)
		return 0;
	for (unsigned i = 0; i < len; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	return err_set(err, EPROTO, "TLS: the server's certificate is not the pinned one (its "
		       "SHA-256 is %s)", hex);
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -errno : 0;
}

/* Wait for fd to be ready for events, by deadline. */
static int wait_fd(int fd, short events, uint64_t deadline_ms)
{
	for (;;) {
		uint64_t now = now_ms();
		struct pollfd pf = { .fd = fd, .events = events };
		int r;

		if (now >= deadline_ms)
			return -ETIMEDOUT;
		r = poll(&pf, 1, (int)(deadline_ms - now));
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

/* SSL_accept or SSL_connect on a non-blocking fd, by the deadline. */
static int handshake(SSL *ssl, int fd, bool server, uint64_t deadline_ms, err_t *err)
{
	for (;;) {
		int k = server ? SSL_accept(ssl) : SSL_connect(ssl);
		int e, r;

		if (k == 1)
			return 0;
		e = SSL_get_error(ssl, k);
		if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
			long v = server ? X509_V_OK : SSL_get_verify_result(ssl);

			if (v != X509_V_OK) {
				ERR_clear_error();
				return err_set(err, EPROTO, "TLS: the server's certificate: %s",
					       X509_verify_cert_error_string(v));
			}
			return tls_err(err, EPROTO, "TLS handshake failed");
		}
		r = wait_fd(fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline_ms);
		if (r < 0)
			return err_set(err, -r, "TLS handshake: %s",
				       r == -ETIMEDOUT ? "timed out" : strerror(-r));
	}
}

/* ---- the relay ---------------------------------------------------------- */

/* Relays running, so a client process can let them finish before it exits
 * (tls_relays_wait). */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t live_cv = PTHREAD_COND_INITIALIZER;
static unsigned live_relays;

void tls_relays_wait(int timeout_ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += timeout_ms / 1000;
	ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&live_mu);
	while (live_relays && pthread_cond_timedwait(&live_cv, &live_mu, &ts) == 0)
		;
	pthread_mutex_unlock(&live_mu);
}

struct relay {
	SSL *ssl;
	int tfd;                     /* the TLS socket */
	int pfd;                     /* our end of the pair */
	char up[RELAY_BUF];          /* from TLS, to the pair */
	size_t up_off, up_len;
	char down[RELAY_BUF];        /* from the pair, to TLS */
	size_t down_off, down_len;
	bool tls_eof, pair_eof, failed, close_sent;
	int linger_ms;               /* 0: no limit (see relay_main) */
	short rd_want, wr_want;      /* what SSL_read / SSL_write wait for */
};

/* One step of each direction, none blocking. True when anything moved. */
static bool relay_step(struct relay *r)
{
	bool moved = false;

	/* TLS -> pair */
	if (!r->up_len && !r->tls_eof) {
		int k = SSL_read(r->ssl, r->up, sizeof(r->up));

		r->rd_want = 0;
		if (k > 0) {
			r->up_off = 0;
			r->up_len = (size_t)k;
			moved = true;
		} else {
			int e = SSL_get_error(r->ssl, k);

			if (e == SSL_ERROR_WANT_READ)
				r->rd_want = POLLIN;
			else if (e == SSL_ERROR_WANT_WRITE)
				r->rd_want = POLLOUT;
			else {
				/* close_notify, or the peer gone: the server sees EOF */
				r->tls_eof = true;
				r->failed = e != SSL_ERROR_ZERO_RETURN;
				shutdown(r->pfd, SHUT_WR);
				moved = true;
			}
		}
	}
	if (r->up_len) {
		ssize_t w = send(r->pfd, r->up + r->up_off, r->up_len, MSG_NOSIGNAL);

		if (w > 0) {
			r->up_off += (size_t)w;
			r->up_len -= (size_t)w;
			moved = true;
		} else if (w < 0 && errno != EAGAIN && errno != EINTR) {
			r->failed = true;   /* the plain side is gone */
			r->pair_eof = true;
			r->up_len = 0;
		}
	}
	/* pair -> TLS */
	if (!r->down_len && !r->pair_eof) {
		ssize_t n = recv(r->pfd, r->down, sizeof(r->down), 0);

		if (n > 0) {
			r->down_off = 0;
			r->down_len = (size_t)n;
			moved = true;
		} else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
			r->pair_eof = true;
			moved = true;
		}
	}
	if (r->down_len) {
		int k = SSL_write(r->ssl, r->down + r->down_off, (int)r->down_len);

		r->wr_want = 0;
		if (k > 0) {
			r->down_off += (size_t)k;
			r->down_len -= (size_t)k;
			moved = true;
		} else {
			int e = SSL_get_error(r->ssl, k);

			if (e == SSL_ERROR_WANT_READ)
				r->wr_want = POLLIN;
			else if (e == SSL_ERROR_WANT_WRITE)
				r->wr_want = POLLOUT;
			else {
				r->failed = true;
				r->down_len = 0;
				r->tls_eof = true;
			}
		}
	}
	return moved;
}

/* Send our close_notify once the plain side has ended and all it sent is
 * out: TLS's half-close (shutdown(SHUT_WR) on a socket). False while it
 * waits to be written. */
static bool send_close(struct relay *r)
{
	int k, e;

	if (r->close_sent)
		return true;
	k = SSL_shutdown(r->ssl);
	if (k >= 0) {
		r->close_sent = true;
		return true;
	}
	e = SSL_get_error(r->ssl, k);
	if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
		r->wr_want = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
		return false;
	}
	r->close_sent = true;   /* cannot: the peer is gone */
	r->failed = true;
	return true;
}

/* Each direction ends on its own, as a TCP connection's do: TLS's
 * close_notify half-closes the pair (the HTTP code reads EOF), the plain
 * side's EOF (the HTTP code closed, or a tunnel's half-close) becomes our
 * close_notify. The relay ends when both have, or on an error. A peer
 * that stops reading is dropped after RELAY_SEND_TIMEOUT_MS; one that
 * keeps its side open after ours ended, after linger_ms of silence. */
static void *relay_main(void *arg)
{
	struct relay *r = arg;
	uint64_t sent_ms = now_ms();   /* when TLS last took bytes we had for it */
	uint64_t heard_ms = now_ms();  /* when TLS last gave us bytes */

	for (;;) {
		struct pollfd pf[2] = { { .fd = r->tfd }, { .fd = r->pfd } };
		size_t before_down = r->down_len, before_up = r->up_len;
		uint64_t now;
		int tmo = -1;

		while (relay_step(r) || (!r->up_len && !r->tls_eof && SSL_pending(r->ssl) > 0))
			;
		if (r->failed)
			break;
		if (r->pair_eof && !r->down_len && !send_close(r))
			pf[0].events |= r->wr_want;
		if (r->failed || (r->close_sent && r->tls_eof && !r->up_len))
			break;
		now = now_ms();
		if (!r->down_len || r->down_len != before_down)
			sent_ms = now;
		if (r->up_len != before_up)
			heard_ms = now;
		if (r->down_len) {
			if (now - sent_ms >= RELAY_SEND_TIMEOUT_MS)
				break;   /* the peer stopped reading */
			tmo = (int)(RELAY_SEND_TIMEOUT_MS - (now - sent_ms));
		} else if (r->close_sent && r->linger_ms) {
			if (now - heard_ms >= (uint64_t)r->linger_ms)
				break;   /* we are done; it says nothing more */
			tmo = (int)((uint64_t)r->linger_ms - (now - heard_ms));
		}
		if (!r->up_len && !r->tls_eof)
			pf[0].events |= r->rd_want ? r->rd_want : POLLIN;
		if (r->down_len)
			pf[0].events |= r->wr_want ? r->wr_want : POLLOUT;
		if (r->up_len)
			pf[1].events |= POLLOUT;
		if (!r->down_len && !r->pair_eof)
			pf[1].events |= POLLIN;
		if (poll(pf, 2, tmo) < 0 && errno != EINTR)
			break;
	}
	SSL_free(r->ssl);
	close(r->tfd);
	close(r->pfd);
	free(r);
	/* this thread's OpenSSL state (its error queue), now rather than in
	 * a key destructor after the count below says we are gone */
	OPENSSL_thread_stop();
	pthread_mutex_lock(&live_mu);
	if (--live_relays == 0)
		pthread_cond_broadcast(&live_cv);
	pthread_mutex_unlock(&live_mu);
	return NULL;
}

/* Handshake done: the pair, the thread. Returns the plain end or -errno;
 * on failure ssl is freed and fd left open. */
static int start_relay(SSL *ssl, int fd, int linger_ms, err_t *err)
{
	struct relay *r;
	pthread_attr_t attr;
	pthread_t t;
	sigset_t all, old;
	int sp[2], e;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0) {
		SSL_free(ssl);
		return err_sys(err, "socketpair");
	}
	if ((e = set_nonblock(sp[1])) < 0) {
		SSL_free(ssl);
		close(sp[0]);
		close(sp[1]);
		return err_set(err, -e, "socketpair: %s", strerror(-e));
	}
	r = xcalloc(1, sizeof(*r));
	r->ssl = ssl;
	r->tfd = fd;
	r->pfd = sp[1];
	r->linger_ms = linger_ms;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	/* its buffers are on the heap: a server full of TLS connections
	 * should not reserve 8 MiB of stack for each of these */
	pthread_attr_setstacksize(&attr, RELAY_STACK);
	/* no signal of the process is for this thread (the api sigwaits) */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	pthread_mutex_lock(&live_mu);
	live_relays++;
	pthread_mutex_unlock(&live_mu);
	e = pthread_create(&t, &attr, relay_main, r);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (e != 0) {
		pthread_mutex_lock(&live_mu);
		live_relays--;
		pthread_mutex_unlock(&live_mu);
		free(r);
		SSL_free(ssl);
		close(sp[0]);
		close(sp[1]);
		return err_set(err, e, "cannot start the TLS relay thread");
	}
	return sp[0];
}

/* A client that speaks plain HTTP to the TLS port: its first byte is a
 * method's letter, where a TLS ClientHello starts with 0x16. Tell it in
 * plain HTTP, which it can read. 0: TLS comes; -errno (err set) when it
 * was plain (answered) or nothing came by the deadline. */
static int refuse_plain(int fd, uint64_t deadline_ms, err_t *err)
{
	static const char body[] = "{\"error\":{\"code\":\"tls_required\",\"message\":"
				   "\"this port speaks TLS: use https://\"}}";
	char msg[320];
	unsigned char b;
	ssize_t n;
	int r, len;

	for (;;) {
		n = recv(fd, &b, 1, MSG_PEEK);
		if (n == 1)
			break;
		if (n == 0)
			return err_set(err, EPIPE, "closed before the TLS handshake");
		if (errno != EAGAIN && errno != EINTR)
			return err_sys(err, "TLS handshake");
		if ((r = wait_fd(fd, POLLIN, deadline_ms)) < 0)
			return err_set(err, -r, "TLS handshake: %s",
				       r == -ETIMEDOUT ? "timed out" : strerror(-r));
	}
	if (b == 0x16)
		return 0;
	len = snprintf(msg, sizeof(msg),
		       "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
		       "Connection: close\r\nContent-Length: %zu\r\n\r\n%s",
		       sizeof(body) - 1, body);
	(void)!send(fd, msg, (size_t)len, MSG_NOSIGNAL);
	/* Closing with its request unread would send a RST that can destroy
	 * the answer before the client reads it: read and drop what it sends
	 * for a moment first, as the HTTP server does after an error. */
	shutdown(fd, SHUT_WR);
	{
		uint64_t until = now_ms() + PLAIN_LINGER_MS;
		char junk[4096];
		size_t total = 0;

		while (total < (64u << 10) && wait_fd(fd, POLLIN, until) == 0) {
			n = recv(fd, junk, sizeof(junk), 0);
			if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR)))
				break;
			if (n > 0)
				total += (size_t)n;
		}
	}
	return err_set(err, EPROTO, "plain HTTP on the TLS port");
}

int tls_server_wrap(struct tls_ctx *t, int fd, uint64_t deadline_ms, err_t *err)
{
	SSL *ssl;
	int r;

	if ((r = set_nonblock(fd)) < 0)
		return err_set(err, -r, "TLS: %s", strerror(-r));
	if (refuse_plain(fd, deadline_ms, err) < 0)
		return -err->code;
	ssl = SSL_new((SSL_CTX *)t);
	if (!ssl || SSL_set_fd(ssl, fd) != 1) {
		SSL_free(ssl);
		return tls_err(err, ENOMEM, "TLS session");
	}
	if (handshake(ssl, fd, true, deadline_ms, err) < 0) {
		SSL_free(ssl);
		return -err->code;
	}
	return start_relay(ssl, fd, RELAY_SERVER_LINGER_MS, err);
}

int tls_client_wrap(struct tls_ctx *t, int fd, const char *host, uint64_t deadline_ms,
		    err_t *err)
{
	SSL *ssl = SSL_new((SSL_CTX *)t);
	const struct client_extra *x = SSL_CTX_get_app_data((SSL_CTX *)t);
	X509_VERIFY_PARAM *vp;
	unsigned char ip[16];
	bool is_ip = inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
	int r;

	if (!ssl || SSL_set_fd(ssl, fd) != 1) {
		SSL_free(ssl);
		return tls_err(err, ENOMEM, "TLS session");
	}
	vp = SSL_get0_param(ssl);
	X509_VERIFY_PARAM_set_hostflags(vp, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
	if ((is_ip ? X509_VERIFY_PARAM_set1_ip_asc(vp, host)
		   : X509_VERIFY_PARAM_set1_host(vp, host, 0)) != 1 ||
	    (!is_ip && SSL_set_tlsext_host_name(ssl, host) != 1)) {
		SSL_free(ssl);
		return tls_err(err, EINVAL, "TLS: the server's name");
	}
	if ((r = set_nonblock(fd)) < 0) {
		SSL_free(ssl);
		return err_set(err, -r, "TLS: %s", strerror(-r));
	}
	if (handshake(ssl, fd, false, deadline_ms, err) < 0 ||
	    (x && x->has_pin && check_pin(ssl, x, err) < 0)) {
		SSL_free(ssl);
		return -err->code;
	}
	/* no linger: the user's own process (the CLI); else the context's */
	return start_relay(ssl, fd, x ? x->linger_ms : 0, err);
}
