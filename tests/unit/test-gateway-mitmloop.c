/* The interception loop (mitmloop.h) in one process, with deadlines of
 * IO_TEST_MS: a sandbox-side TLS client that trusts only the interception
 * CA, an "internet" TLS server on loopback with a certificate of another
 * CA, and the gateway's side on one loop thread with two hook threads.
 * Connections that stall in each phase (the handshake, the head, the
 * hook) end at their deadline with the answer and reason the blocking
 * path gives, while another connection is served meanwhile; one that
 * works goes on to the relay loop and gets its answer. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../src/cred/ca.h"
#include "../../src/gateway/mitm.h"
#include "../../src/gateway/mitmloop.h"
#include "../../src/gateway/tlsrelay.h"
#include "check.h"

#define IO_TEST_MS 400

static char dir[] = "/tmp/airlock-test-mitmloop-XXXXXX";
static struct ca *inet_ca, *mitm_ca;
static char inet_ca_crt[128], mitm_ca_crt[128];
static SSL_CTX *trusting, *strict;
static struct mitm_loop *ml;

/* ---- the internet: answers each request "hello" --------------------- */

static int lfd, lport;

/* The upstream's connection threads, so that the test ends only after
 * each has ended (an abandoned one is shut down): a thread still in
 * OpenSSL at exit would leave its per-thread state to LeakSanitizer. */
static pthread_mutex_t up_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t up_cv = PTHREAD_COND_INITIALIZER;
static int up_fds[64], up_live;

static void upstream_end_all(void)
{
	pthread_mutex_lock(&up_mu);
	for (int i = 0; i < (int)ARRAY_SIZE(up_fds); i++)
		if (up_fds[i] > 0)
			shutdown(up_fds[i], SHUT_RDWR);
	while (up_live > 0)
		pthread_cond_wait(&up_cv, &up_mu);
	pthread_mutex_unlock(&up_mu);
}

static void *upstream_conn(void *arg)
{
	int fd = (int)(intptr_t)arg;
	SSL_CTX *ctx = ca_server_ctx(inet_ca, "api.test", NULL);
	SSL *s = SSL_new(ctx);
	char got[8192];
	size_t n = 0;

	SSL_CTX_free(ctx);
	SSL_set_fd(s, fd);
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
	for (int i = 0; i < (int)ARRAY_SIZE(up_fds); i++)
		if (up_fds[i] == fd)
			up_fds[i] = 0;
	close(fd);
	up_live--;
	pthread_cond_broadcast(&up_cv);
	pthread_mutex_unlock(&up_mu);
	return NULL;
}

static void *upstream_main(void *arg)
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
		pthread_mutex_unlock(&up_mu);
		pthread_create(&t, NULL, upstream_conn, (void *)(intptr_t)fd);
		pthread_detach(t);
	}
}

/* A non-blocking socket connecting to port on loopback. */
static int dial_lo(int port)
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
	int slow_hook_ms;
};

static int hook(void *arg, struct http_head *h, struct buf *reply)
{
	struct conn *c = arg;

	(void)reply;
	if (c->slow_hook_ms)
		usleep((useconds_t)c->slow_hook_ms * 1000);
	head_set(h, "Authorization", "Bearer REAL");
	return 0;
}

static void on_end(void *arg, int r, const char *why)
{
	struct conn *c = arg;

	pthread_mutex_lock(&c->mu);
	c->ended++;
	c->r = r;
	snprintf(c->why, sizeof(c->why), "%s", why ? why : "");
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

static void on_done(void *arg, int fd, int up)
{
	struct conn *c = arg;

	close(fd);
	close(up);
	pthread_mutex_lock(&c->mu);
	c->done++;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

/* Hand the gateway's end of a socketpair to the loop; sp[1] is the
 * sandbox's. pre: bytes "sniffed" from it first (n may be 0). */
static void start(struct conn *c, int gw_fd, const void *pre, size_t n, SSL_CTX *up, int port)
{
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	mitm_loop_add(ml, &(struct mitm_conn_spec){
		.ca = mitm_ca, .upstream = up, .client_fd = gw_fd, .prefix = pre, .n = n,
		.up_fd = dial_lo(port), .host = "api.test", .port = 443, .hook = hook,
		.hook_arg = c, .end = on_end, .done = on_done, .done_arg = c });
}

/* Wait (up to 5 s) for end and done. */
static int wait_ended(struct conn *c)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 5;
	pthread_mutex_lock(&c->mu);
	while (!(c->ended && c->done))
		if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) != 0)
			break;
	int ok = c->ended == 1 && c->done == 1;
	pthread_mutex_unlock(&c->mu);
	return ok;
}

/* ---- the sandbox's side ----------------------------------------------- */

static SSL *client_tls(int fd)
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
	char resp[4096];
};

static void *client_main(void *arg)
{
	struct client *cl = arg;
	SSL *s = client_tls(cl->fd);
	size_t n = 0;

	if (SSL_connect(s) == 1 && cl->req) {
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

static const char good_req[] = "GET /v1/x HTTP/1.1\r\nHost: api.test\r\n"
			       "Authorization: Bearer airlock-ph-x\r\n\r\n";

/* A whole exchange through the loop while others stall. */
static void served(SSL_CTX *up, int port, const char *want_prefix, int want_r)
{
	struct conn c = { 0 };
	struct client cl = { .req = good_req };
	int sp[2];
	pthread_t t;

	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0);
	cl.fd = sp[1];
	pthread_create(&t, NULL, client_main, &cl);
	start(&c, sp[0], NULL, 0, up, port);
	CHECK(wait_ended(&c));
	pthread_join(t, NULL);
	CHECK(c.r == want_r);
	if (strstr(cl.resp, want_prefix) != cl.resp)
		fprintf(stderr, "got %s (%s)\n", cl.resp, c.why);
	CHECK(strstr(cl.resp, want_prefix) == cl.resp);
	close(sp[1]);
}

static void test_loop(void)
{
	struct conn hs = { 0 }, head = { 0 }, slow = { 0 };
	struct client scl = { .req = good_req };
	int a[2], b[2], s[2];
	pthread_t st;
	SSL *cs;

	/* stalled in the handshake: nothing after the connect */
	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a) == 0);
	start(&hs, a[0], NULL, 0, trusting, lport);
	/* stalled in the head: half of one after the handshake */
	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, b) == 0);
	start(&head, b[0], NULL, 0, trusting, lport);
	cs = client_tls(b[1]);
	CHECK(SSL_connect(cs) == 1);
	SSL_write(cs, "GET / HTTP/1.1\r\nHost: api.test\r\n", 32);
	/* a hook slower than the deadline */
	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s) == 0);
	slow.slow_hook_ms = 3 * IO_TEST_MS;
	scl.fd = s[1];
	pthread_create(&st, NULL, client_main, &scl);
	start(&slow, s[0], NULL, 0, trusting, lport);

	/* meanwhile another connection goes all the way, injected, to the
	 * relay loop and its answer (on the other hook thread) */
	served(trusting, lport, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Auth-Real: 1", 1);
	CHECK(mitm_loop_conns(ml) <= 3);

	CHECK(wait_ended(&hs));
	CHECK(hs.r == -ETIMEDOUT && strstr(hs.why, "handshake with the sandbox") != NULL);
	CHECK(wait_ended(&head));
	CHECK(head.r == -ETIMEDOUT && strcmp(head.why, "mitm: no request head from the sandbox") == 0);
	CHECK(wait_ended(&slow));
	CHECK(slow.r == -ETIMEDOUT && strstr(slow.why, "hook took too long") != NULL);
	pthread_join(st, NULL);
	CHECK(scl.resp[0] == '\0');   /* closed, nothing forwarded */
	/* the ones whose fds went back at their deadline are freed once
	 * their hook returned: none is left */
	usleep(4 * IO_TEST_MS * 1000);
	CHECK(mitm_loop_conns(ml) == 0);
	SSL_free(cs);
	close(a[1]);
	close(b[1]);
	close(s[1]);

	/* an upstream the gateway cannot verify: 502, nothing injected sent */
	served(strict, lport, "HTTP/1.1 502 Bad Gateway", -EPROTO);
	/* an upstream nobody listens on: 502 too */
	{
		int fd = socket(AF_INET, SOCK_STREAM, 0), port;
		struct sockaddr_in sa = { .sin_family = AF_INET,
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t sl = sizeof(sa);
		bind(fd, (struct sockaddr *)&sa, sizeof(sa));
		getsockname(fd, (struct sockaddr *)&sa, &sl);
		port = ntohs(sa.sin_port);
		close(fd);   /* the port is closed now */
		served(trusting, port, "HTTP/1.1 502 Bad Gateway", -EHOSTUNREACH);
	}
	/* a client that closes in the middle of its handshake ends at once */
	{
		struct conn c = { 0 };
		int p[2];
		CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) == 0);
		start(&c, p[0], NULL, 0, trusting, lport);
		close(p[1]);
		CHECK(wait_ended(&c));
		CHECK(c.r == -EPROTO);
	}
}

int main(void)
{
	_cleanup_free_ char *k1 = NULL, *k2 = NULL;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	struct tls_loop *relay;
	pthread_t ut;

	signal(SIGPIPE, SIG_IGN);
	CHECK(mkdtemp(dir) != NULL);
	k1 = xasprintf("%s/inet.key", dir);
	k2 = xasprintf("%s/mitm.key", dir);
	snprintf(inet_ca_crt, sizeof(inet_ca_crt), "%s/inet.crt", dir);
	snprintf(mitm_ca_crt, sizeof(mitm_ca_crt), "%s/mitm.crt", dir);
	CHECK(ca_ensure(k1, inet_ca_crt, NULL) == 0 && ca_ensure(k2, mitm_ca_crt, NULL) == 0);
	inet_ca = ca_load(k1, inet_ca_crt, NULL);
	mitm_ca = ca_load(k2, mitm_ca_crt, NULL);
	trusting = mitm_upstream_ctx(inet_ca_crt, NULL);
	strict = mitm_upstream_ctx(NULL, NULL);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(inet_ca && mitm_ca && trusting && strict && lfd >= 0);
	CHECK(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(lfd, 16) == 0 &&
	      getsockname(lfd, (struct sockaddr *)&sa, &sl) == 0);
	lport = ntohs(sa.sin_port);
	pthread_create(&ut, NULL, upstream_main, NULL);
	pthread_detach(ut);
	relay = tls_loop_start(NULL);
	ml = relay ? mitm_loop_start(relay, &(struct mitm_loop_opts){ .shards = 1, .hook_threads = 2,
				     .io_ms = IO_TEST_MS }, NULL)
		   : NULL;
	CHECK(ml != NULL);
	if (ml)
		test_loop();
	upstream_end_all();
	/* the loops' threads live as long as the process */
	unlink(k1);
	unlink(k2);
	unlink(inet_ca_crt);
	unlink(mitm_ca_crt);
	rmdir(dir);
	return check_done("test-gateway-mitmloop");
}
