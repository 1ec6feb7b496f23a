/* mitm-harness.h - intercepted TLS end to end in one process, for the unit
 * tests of the interception loop (mitmloop.h): two CAs in a temp dir (the
 * interception CA, which the sandbox-side client alone trusts, and an
 * "internet" test CA), an "internet" TLS server for api.test on loopback
 * that records what it got and answers each request "hello", the
 * gateway's side on a mitm loop, and the sandbox-side client. */
#ifndef AIRLOCK_TEST_MITM_HARNESS_H
#define AIRLOCK_TEST_MITM_HARNESS_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../../src/cred/ca.h"
#include "../../src/gateway/mitm.h"
#include "../../src/gateway/mitmloop.h"
#include "../../src/gateway/tlsrelay.h"
#include "check.h"

static char h_dir[] = "/tmp/airlock-test-mitm-XXXXXX";
static char h_key[2][160], inet_ca_crt[160], mitm_ca_crt[160];
static struct ca *inet_ca, *mitm_ca;
/* upstream contexts: trusting the test CA, or the system store alone */
static SSL_CTX *trusting, *strict;
static struct mitm_loop *ml;
static int h_io_ms;

/* ---- the internet: answers each request "hello" --------------------- */

static int lfd, lport;

/* The upstream's connection threads, so that a test can wait for each to
 * end (an abandoned one is shut down): a thread still in OpenSSL at exit
 * would leave its per-thread state to LeakSanitizer. up_got: the request
 * bytes every connection received since upstream_reset(). */
static pthread_mutex_t up_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t up_cv = PTHREAD_COND_INITIALIZER;
static int up_fds[64], up_live, up_accepted;
static char up_got[16384];

static inline void upstream_reset(void)
{
	pthread_mutex_lock(&up_mu);
	up_got[0] = '\0';
	pthread_mutex_unlock(&up_mu);
}

/* Wait until the upstream accepted n connections in all and each has
 * ended: 1, or 0 after 10 s. */
static inline int upstream_wait(int n)
{
	struct timespec ts;
	int ok;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	pthread_mutex_lock(&up_mu);
	while (up_accepted < n || up_live > 0)
		if (pthread_cond_timedwait(&up_cv, &up_mu, &ts) != 0)
			break;
	ok = up_accepted >= n && up_live == 0;
	pthread_mutex_unlock(&up_mu);
	return ok;
}

static inline void upstream_end_all(void)
{
	pthread_mutex_lock(&up_mu);
	for (int i = 0; i < (int)ARRAY_SIZE(up_fds); i++)
		if (up_fds[i] > 0)
			shutdown(up_fds[i], SHUT_RDWR);
	while (up_live > 0)
		pthread_cond_wait(&up_cv, &up_mu);
	pthread_mutex_unlock(&up_mu);
}

static inline void *upstream_conn(void *arg)
{
	int fd = (int)(intptr_t)arg;
	SSL_CTX *ctx = ca_server_ctx(inet_ca, "api.test", NULL);
	SSL *s = SSL_new(ctx);
	char got[8192];
	size_t n = 0;

	SSL_CTX_free(ctx);
	SSL_set_fd(s, fd);
	got[0] = '\0';
	if (SSL_accept(s) == 1) {
		while (n < sizeof(got) - 1) {
			int k = SSL_read(s, got + n, (int)(sizeof(got) - 1 - n));
			if (k <= 0)
				break;
			n += (size_t)k;
			got[n] = '\0';
			if (strstr(got, "\r\n\r\n"))
				break;
		}
		char resp[256];
		snprintf(resp, sizeof(resp), "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
			 "X-Auth-Real: %d\r\n\r\nhello", n && strstr(got, "Bearer REAL") != NULL);
		SSL_write(s, resp, (int)strlen(resp));
		SSL_shutdown(s);
	}
	SSL_free(s);
	OPENSSL_thread_stop();
	pthread_mutex_lock(&up_mu);
	strncat(up_got, got, sizeof(up_got) - strlen(up_got) - 1);
	for (int i = 0; i < (int)ARRAY_SIZE(up_fds); i++)
		if (up_fds[i] == fd)
			up_fds[i] = 0;
	close(fd);
	up_live--;
	pthread_cond_broadcast(&up_cv);
	pthread_mutex_unlock(&up_mu);
	return NULL;
}

static inline void *upstream_main(void *arg)
{
	(void)arg;
	for (;;) {
		int fd = accept(lfd, NULL, NULL);
		pthread_t t;
		if (fd < 0)
			return NULL;
		pthread_mutex_lock(&up_mu);
		for (int i = 0; i < (int)ARRAY_SIZE(up_fds); i++)
			if (up_fds[i] == 0) {
				up_fds[i] = fd;
				break;
			}
		up_live++;
		up_accepted++;
		pthread_mutex_unlock(&up_mu);
		pthread_create(&t, NULL, upstream_conn, (void *)(intptr_t)fd);
		pthread_detach(t);
	}
}

/* A non-blocking socket connecting to port on loopback. */
static inline int dial_lo(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);

	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS) {
		close(fd);
		return -1;
	}
	return fd;
}

/* ---- the gateway's side ----------------------------------------------- */

struct conn {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int ended, r, done;           /* end's r; done called */
	char why[256];
	int slow_hook_ms;             /* the hook sleeps first */
	bool refuse;                  /* the hook answers 429 itself */
	int dialled_port;             /* by the sandbox; 0: 443 */
};

/* The credential hook: the real value in Authorization, and appended to
 * a body read whole (as an injection into it may: longer). arg: a struct
 * conn, or NULL (the plain-HTTP path's tests). */
static inline int hook(void *arg, struct http_head *h, struct buf *reply)
{
	struct conn *c = arg;

	if (c && c->slow_hook_ms)
		usleep((useconds_t)c->slow_hook_ms * 1000);
	if (c && c->refuse) {
		buf_adds(reply, "HTTP/1.1 429 Too Many Requests\r\nContent-Length: 0\r\n\r\n");
		return 1;
	}
	head_set(h, "Authorization", "Bearer REAL");
	if (h->has_body)
		buf_adds(&h->body, "+REAL");
	return 0;
}

static inline void on_end(void *arg, int r, const char *why)
{
	struct conn *c = arg;

	pthread_mutex_lock(&c->mu);
	c->ended++;
	c->r = r;
	snprintf(c->why, sizeof(c->why), "%s", why ? why : "");
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

static inline void on_done(void *arg, int fd, int up)
{
	struct conn *c = arg;

	close(fd);
	close(up);
	pthread_mutex_lock(&c->mu);
	c->done++;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

/* Hand the gateway's end of a socketpair to the loop, for api.test as
 * dialled on c->dialled_port, its upstream dialled on port. pre: bytes "sniffed"
 * from it first (n may be 0). */
static inline void start(struct conn *c, int gw_fd, const void *pre, size_t n, SSL_CTX *up, int port)
{
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	mitm_loop_add(ml, &(struct mitm_conn_spec){
		.ca = mitm_ca, .upstream = up, .client_fd = gw_fd, .prefix = pre, .n = n,
		.up_fd = dial_lo(port), .host = "api.test", .port = c->dialled_port ? c->dialled_port : 443, .hook = hook,
		.hook_arg = c, .end = on_end, .done = on_done, .done_arg = c });
}

/* Wait for end and done (up to 5 s past 4 deadlines): both called once. */
static inline int wait_ended(struct conn *c)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 5 + 4 * h_io_ms / 1000;
	pthread_mutex_lock(&c->mu);
	while (!(c->ended && c->done))
		if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) != 0)
			break;
	int ok = c->ended == 1 && c->done == 1;
	pthread_mutex_unlock(&c->mu);
	return ok;
}

/* ---- the sandbox's side ----------------------------------------------- */

static inline SSL *client_tls(int fd)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL *s;

	SSL_CTX_load_verify_locations(ctx, mitm_ca_crt, NULL);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	s = SSL_new(ctx);
	SSL_CTX_free(ctx);
	SSL_set_fd(s, fd);
	SSL_set_tlsext_host_name(s, "api.test");
	SSL_set1_host(s, "api.test");
	return s;
}

struct client {
	int fd;
	const char *req;              /* NULL: handshake only, then wait */
	long verify;                  /* of the gateway's leaf; -1: no handshake */
	char resp[4096];
};

static inline void *client_main(void *arg)
{
	struct client *cl = arg;
	SSL *s = client_tls(cl->fd);
	size_t n = 0;

	cl->verify = -1;
	if (SSL_connect(s) == 1 && cl->req) {
		cl->verify = SSL_get_verify_result(s);
		SSL_write(s, cl->req, (int)strlen(cl->req));
		for (;;) {
			int k = SSL_read(s, cl->resp + n, (int)(sizeof(cl->resp) - 1 - n));
			if (k <= 0)
				break;
			n += (size_t)k;
		}
	} else if (!cl->req) {
		char b;
		while (read(cl->fd, &b, 1) > 0)   /* until the gateway closes */
			;
	}
	cl->resp[n] = '\0';
	SSL_free(s);
	OPENSSL_thread_stop();
	return NULL;
}

/* One whole connection through the loop: cl->req from a client thread,
 * the gateway's side given what a sniffer read of it first when sniff is
 * set; returns once end and done were called (1) and the client is done. */
static inline int exchange(struct conn *c, struct client *cl, SSL_CTX *up, int port, bool sniff)
{
	uint8_t pre[64];
	ssize_t k = 0;
	int sp[2], ok;
	pthread_t t;

	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0);
	cl->fd = sp[1];
	pthread_create(&t, NULL, client_main, cl);
	if (sniff) {
		k = read(sp[0], pre, sizeof(pre));   /* what a sniffer would have taken */
		CHECK(k > 0);
	}
	start(c, sp[0], pre, k > 0 ? (size_t)k : 0, up, port);
	ok = wait_ended(c);
	pthread_join(t, NULL);
	close(sp[1]);
	return ok;
}

/* ---- set-up and tear-down --------------------------------------------- */

/* The CAs, the contexts, the internet and the loops (one loop thread, two
 * hook threads, deadlines of io_ms > 0): 0, or -1. */
static inline int harness_start(int io_ms)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	struct tls_loop *relay;
	pthread_t ut;

	h_io_ms = io_ms;
	if (!mkdtemp(h_dir))
		return -1;
	snprintf(h_key[0], sizeof(h_key[0]), "%s/inet.key", h_dir);
	snprintf(h_key[1], sizeof(h_key[1]), "%s/mitm.key", h_dir);
	snprintf(inet_ca_crt, sizeof(inet_ca_crt), "%s/inet.crt", h_dir);
	snprintf(mitm_ca_crt, sizeof(mitm_ca_crt), "%s/mitm.crt", h_dir);
	if (ca_ensure(h_key[0], inet_ca_crt, NULL) != 0 || ca_ensure(h_key[1], mitm_ca_crt, NULL) != 0)
		return -1;
	inet_ca = ca_load(h_key[0], inet_ca_crt, NULL);
	mitm_ca = ca_load(h_key[1], mitm_ca_crt, NULL);
	trusting = mitm_upstream_ctx(inet_ca_crt, NULL);
	strict = mitm_upstream_ctx(NULL, NULL);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (!inet_ca || !mitm_ca || !trusting || !strict || lfd < 0 ||
	    bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd, 16) != 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &sl) != 0)
		return -1;
	lport = ntohs(sa.sin_port);
	pthread_create(&ut, NULL, upstream_main, NULL);
	pthread_detach(ut);
	relay = tls_loop_start(NULL);
	ml = relay ? mitm_loop_start(relay, &(struct mitm_loop_opts){ .shards = 1, .hook_threads = 2,
				     .io_ms = io_ms }, NULL)
		   : NULL;
	return ml ? 0 : -1;
}

/* The upstream's connections ended and the files gone; the loops' threads
 * live as long as the process. */
static inline void harness_end(void)
{
	upstream_end_all();
	unlink(h_key[0]);
	unlink(h_key[1]);
	unlink(inet_ca_crt);
	unlink(mitm_ca_crt);
	rmdir(h_dir);
}

#endif
