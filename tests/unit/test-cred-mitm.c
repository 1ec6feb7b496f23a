/* TLS interception end to end in one process: a sandbox-side TLS client that
 * trusts only the interception CA, the gateway side (mitm_serve, fed the
 * ClientHello bytes a sniffer already read), and an "internet" TLS server on
 * loopback whose certificate comes from a separate test CA. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "../../src/cred/ca.h"
#include "../../src/gateway/mitm.h"
#include "check.h"

static char dir[] = "/tmp/airlock-test-mitm-XXXXXX";
static struct ca *inet_ca;
static char inet_ca_crt[128], mitm_ca_crt[128];

struct upstream {
	int lfd;
	int port;
	char got[8192];
};

static void *upstream_main(void *arg)
{
	struct upstream *u = arg;
	int fd = accept(u->lfd, NULL, NULL);
	SSL_CTX *ctx = ca_server_ctx(inet_ca, "api.test", NULL);
	SSL *s = SSL_new(ctx);
	size_t n = 0;

	SSL_CTX_free(ctx);
	SSL_set_fd(s, fd);
	if (SSL_accept(s) == 1) {
		while (n < sizeof(u->got) - 1 && !strstr(u->got, "\r\n\r\n")) {
			int k = SSL_read(s, u->got + n, (int)(sizeof(u->got) - 1 - n));
			if (k <= 0)
				break;
			n += (size_t)k;
			u->got[n] = '\0';
		}
		static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
		SSL_write(s, resp, sizeof(resp) - 1);
		SSL_shutdown(s);
	}
	SSL_free(s);
	close(fd);
	return NULL;
}

struct client {
	int fd;
	long verify;
	const char *req;   /* NULL: the default request below */
	char resp[4096];
};

static void *client_main(void *arg)
{
	struct client *c = arg;
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL *s;
	size_t n = 0;

	SSL_CTX_load_verify_locations(ctx, mitm_ca_crt, NULL);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	s = SSL_new(ctx);
	SSL_set_fd(s, c->fd);
	SSL_set_tlsext_host_name(s, "api.test");
	SSL_set1_host(s, "api.test");
	c->verify = -1;
	if (SSL_connect(s) == 1) {
		static const char req[] = "GET /v1/x HTTP/1.1\r\nHost: api.test\r\n"
					  "Authorization: Bearer airlock-ph-x\r\nKeep-Alive: 5\r\n\r\n";
		const char *r = c->req ? c->req : req;
		c->verify = SSL_get_verify_result(s);
		SSL_write(s, r, (int)strlen(r));
		for (;;) {
			int k = SSL_read(s, c->resp + n, (int)(sizeof(c->resp) - 1 - n));
			if (k <= 0)
				break;
			n += (size_t)k;
		}
	}
	c->resp[n] = '\0';
	SSL_free(s);
	SSL_CTX_free(ctx);
	shutdown(c->fd, SHUT_RDWR);
	return NULL;
}

static int hook(void *arg, struct http_head *h, struct buf *reply)
{
	if (arg) {
		buf_adds(reply, "HTTP/1.1 429 Too Many Requests\r\nContent-Length: 0\r\n\r\n");
		return 1;
	}
	head_set(h, "Authorization", "Bearer REAL");
	if (h->has_body)   /* as an injection into the body may: longer */
		buf_adds(&h->body, "+REAL");
	return 0;
}

static int listen_lo(struct upstream *u)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);

	u->lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (bind(u->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(u->lfd, 4) < 0 ||
	    getsockname(u->lfd, (struct sockaddr *)&sa, &sl) < 0)
		return -1;
	u->port = ntohs(sa.sin_port);
	return 0;
}

static int dial_lo(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	return connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 ? fd : -1;
}

/* One intercepted connection; mode 0 = forward, 1 = hook refuses (429). */
static int one(struct ca *mitm, SSL_CTX *up_ctx, int mode, struct upstream *u, struct client *c)
{
	int sp[2], upfd, r;
	pthread_t ut, ct;
	uint8_t pre[64];
	ssize_t k;
	err_t err = { 0 };

	memset(u->got, 0, sizeof(u->got));
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0);
	c->fd = sp[1];
	pthread_create(&ut, NULL, upstream_main, u);
	pthread_create(&ct, NULL, client_main, c);
	k = read(sp[0], pre, sizeof(pre));      /* what a sniffer would have taken */
	CHECK(k > 0);
	upfd = dial_lo(u->port);
	CHECK(upfd >= 0);
	r = mitm_serve(mitm, up_ctx, sp[0], pre, (size_t)k, upfd, "api.test", 8443, hook,
		       mode ? (void *)1 : NULL, &err);
	if (r < 0)
		fprintf(stderr, "mitm_serve: %s\n", err.msg);
	shutdown(sp[0], SHUT_RDWR);
	close(upfd);
	if (mode) {      /* the upstream was never used: wake its accept */
		int fd = dial_lo(u->port);
		close(fd);
	}
	pthread_join(ct, NULL);
	pthread_join(ut, NULL);
	close(sp[0]);
	close(sp[1]);
	return r;
}

static void test_mitm(void)
{
	_cleanup_free_ char *k1 = xasprintf("%s/inet.key", dir), *k2 = xasprintf("%s/mitm.key", dir);
	struct upstream u;
	struct client c = { 0 };
	struct ca *mitm;
	SSL_CTX *trusting, *strict;

	snprintf(inet_ca_crt, sizeof(inet_ca_crt), "%s/inet.crt", dir);
	snprintf(mitm_ca_crt, sizeof(mitm_ca_crt), "%s/mitm.crt", dir);
	CHECK(ca_ensure(k1, inet_ca_crt, NULL) == 0 && ca_ensure(k2, mitm_ca_crt, NULL) == 0);
	inet_ca = ca_load(k1, inet_ca_crt, NULL);
	mitm = ca_load(k2, mitm_ca_crt, NULL);
	CHECK(inet_ca && mitm);
	if (!inet_ca || !mitm)
		return;
	trusting = mitm_upstream_ctx(inet_ca_crt, NULL);
	strict = mitm_upstream_ctx(NULL, NULL);
	CHECK(trusting && strict);
	CHECK(listen_lo(&u) == 0);

	/* forwarded: the client verified our leaf; upstream got the rewrite */
	CHECK(one(mitm, trusting, 0, &u, &c) == 0);
	CHECK(c.verify == X509_V_OK);
	CHECK(strstr(u.got, "GET /v1/x HTTP/1.1\r\n") == u.got);
	CHECK(strstr(u.got, "Authorization: Bearer REAL\r\n") != NULL);
	CHECK(strstr(u.got, "airlock-ph-") == NULL);
	CHECK(strstr(u.got, "Connection: close\r\n") != NULL && !strstr(u.got, "Keep-Alive"));
	CHECK(strstr(c.resp, "HTTP/1.1 200 OK") == c.resp && strstr(c.resp, "\r\n\r\nhello"));

	/* an upstream the gateway cannot verify gets nothing; the client a 502 */
	CHECK(one(mitm, strict, 0, &u, &c) == -EPROTO);
	CHECK(strstr(u.got, "REAL") == NULL);
	CHECK(strstr(c.resp, "HTTP/1.1 502") == c.resp);

	/* domain fronting: the SNI name chose the credential, so a Host (or an
	 * absolute target) naming another origin gets 421, before the hook
	 * (nothing injected) and with nothing sent upstream */
	{
		static const char *const fronted[] = {
			"GET /v1/x HTTP/1.1\r\nHost: evil.test\r\nAuthorization: Bearer airlock-ph-x\r\n\r\n",
			"GET /v1/x HTTP/1.1\r\nHost: api.test.evil.test\r\n\r\n",
			"GET /v1/x HTTP/1.1\r\nHost: api.test:9999\r\n\r\n",
			"GET /v1/x HTTP/1.1\r\nHost: api.test@evil.test\r\n\r\n",
			"GET https://evil.test/v1/x HTTP/1.1\r\nHost: api.test\r\n\r\n",
			"GET https://api.test:9/v1/x HTTP/1.1\r\nHost: api.test\r\n\r\n",
			"CONNECT evil.test:443 HTTP/1.1\r\nHost: api.test\r\n\r\n",
			"GET / HTTP/1.0\r\nHost: evil.test\r\n\r\n",
		};
		for (size_t i = 0; i < sizeof(fronted) / sizeof(fronted[0]); i++) {
			c.req = fronted[i];
			CHECK(one(mitm, trusting, 0, &u, &c) == -EPERM);
			CHECK(strstr(c.resp, "HTTP/1.1 421 ") == c.resp);
			CHECK(u.got[0] == '\0');
		}
		/* two Host fields, or none in HTTP/1.1: 400, nothing sent */
		static const char *const bad[] = {
			"GET / HTTP/1.1\r\nHost: api.test\r\nHost: evil.test\r\n\r\n",
			"GET / HTTP/1.1\r\n\r\n",
		};
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			c.req = bad[i];
			CHECK(one(mitm, trusting, 0, &u, &c) == -EPERM);
			CHECK(strstr(c.resp, "HTTP/1.1 400 ") == c.resp);
			CHECK(u.got[0] == '\0');
		}
		/* the same origin however it is spelled: forwarded and injected */
		static const char *const same[] = {
			"GET /v1/x HTTP/1.1\r\nHost: API.Test\r\n\r\n",
			"GET /v1/x HTTP/1.1\r\nHost: api.test:443\r\n\r\n",
			"GET /v1/x HTTP/1.1\r\nHost: api.test:8443\r\n\r\n",
			"GET /v1/x HTTP/1.1\r\nHost: api.test.\r\n\r\n",
			"GET https://api.test/v1/x HTTP/1.1\r\nHost: api.test\r\n\r\n",
			"GET /v1/x HTTP/1.0\r\n\r\n",
		};
		for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
			c.req = same[i];
			CHECK(one(mitm, trusting, 0, &u, &c) == 0);
			CHECK(strstr(u.got, "Authorization: Bearer REAL\r\n") != NULL);
			CHECK(strstr(c.resp, "HTTP/1.1 200 OK") == c.resp);
		}
		c.req = NULL;
	}

	/* the hook answers itself */
	CHECK(one(mitm, trusting, 1, &u, &c) == 0);
	CHECK(strstr(c.resp, "HTTP/1.1 429") == c.resp);
	CHECK(u.got[0] == '\0');

	close(u.lfd);
	SSL_CTX_free(trusting);
	SSL_CTX_free(strict);
	ca_free(mitm);
	ca_free(inet_ca);
}

/* The client side of Expect: read the 100 Continue, then send the body. */
static void *continue_then_body(void *arg)
{
	int fd = *(int *)arg;
	char got[64] = "";
	size_t n = 0;
	ssize_t k;

	while (n < sizeof(got) - 1 && !strstr(got, "\r\n\r\n") &&
	       (k = read(fd, got + n, sizeof(got) - 1 - n)) > 0)
		n += (size_t)k;
	CHECK(strcmp(got, "HTTP/1.1 100 Continue\r\n\r\n") == 0);
	CHECK(write(fd, "wxyz", 4) == 4);
	return NULL;
}

static void test_plain_head(void)
{
	int sp[2];
	struct buf out;
	err_t err = { 0 };
	static const char p1[] = "POST /a HTTP/1.1\r\nHost: x\r\n";
	static const char p2[] = "Content-Length: 3\r\n\r\nabc";

	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0);
	CHECK(write(sp[1], p2, sizeof(p2) - 1) == (ssize_t)(sizeof(p2) - 1));
	buf_init(&out);
	/* the body, read whole, went through the hook; its length follows */
	CHECK(mitm_http_head(sp[0], p1, sizeof(p1) - 1, NULL, 0, hook, NULL, &out, &err) == 0);
	CHECK(strcmp(out.data, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\n"
			       "Authorization: Bearer REAL\r\nConnection: close\r\n\r\nabc+REAL") == 0);
	buf_reset(&out);
	/* chunked, arriving in pieces: decoded whole, through the hook, and
	 * sent on with its length; what follows the last chunk stays */
	{
		static const char ch[] = "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
					 "3;ext=1\r\nabc\r\n";
		static const char more[] = "A\r\n0123456789\r\n0\r\n\r\nNEXT";
		CHECK(write(sp[1], more, sizeof(more) - 1) == (ssize_t)(sizeof(more) - 1));
		CHECK(mitm_http_head(sp[0], ch, sizeof(ch) - 1, NULL, 0, hook, NULL, &out, &err) == 0);
		CHECK(strcmp(out.data, "POST /c HTTP/1.1\r\nAuthorization: Bearer REAL\r\n"
				       "Content-Length: 18\r\nConnection: close\r\n\r\n"
				       "abc0123456789+REALNEXT") == 0);
		buf_reset(&out);
	}
	/* chunked bodies not read whole pass as they came: with trailer fields
	 * (a length cannot carry them), a malformed size, a chunk past
	 * BODY_MAX, chunked beside a Content-Length, another coding */
	{
		static const char *const pass[] = {
			"POST /t HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
			"3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
			"POST /t HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n",
			"POST /t HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n",
			"POST /t HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n200000\r\nab",
			"POST /t HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
			"3\r\nabc\r\n0\r\n\r\n",
			"POST /t HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
			"3\r\nabc\r\n0\r\n\r\n",
		};
		for (size_t i = 0; i < sizeof(pass) / sizeof(pass[0]); i++) {
			const char *body = strstr(pass[i], "\r\n\r\n") + 4;
			CHECK(mitm_http_head(sp[0], pass[i], strlen(pass[i]), NULL, 0, hook, NULL, &out,
					     &err) == 0);
			CHECK(strstr(out.data, "Transfer-Encoding: ") != NULL);
			CHECK(strcmp(strstr(out.data, "\r\n\r\n") + 4, body) == 0);
			CHECK(!strstr(out.data, "+REAL"));
			buf_reset(&out);
		}
	}
	/* chunked, and the client goes quiet before the last chunk (a stream):
	 * after CHUNKED_WAIT_MS it passes as it came so far, not cut off */
	{
		static const char ch[] = "POST /q HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
					 "3\r\nabc\r\n";
		CHECK(mitm_http_head(sp[0], ch, sizeof(ch) - 1, NULL, 0, hook, NULL, &out, &err) == 0);
		CHECK(strstr(out.data, "Transfer-Encoding: chunked\r\n") != NULL);
		CHECK(strcmp(strstr(out.data, "\r\n\r\n") + 4, "3\r\nabc\r\n") == 0);
		buf_reset(&out);
	}
	/* chunked, then the client is gone before the last chunk */
	{
		static const char ch[] = "POST /g HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
					 "3\r\nabc\r\n";
		int sq[2];
		CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sq) == 0);
		close(sq[1]);
		CHECK(mitm_http_head(sq[0], ch, sizeof(ch) - 1, NULL, 0, hook, NULL, &out, &err) == -EPIPE);
		close(sq[0]);
		buf_reset(&out);
	}
	/* a client that waits for 100 Continue gets it from us, then sends */
	{
		static const char ex[] = "PUT /e HTTP/1.1\r\nExpect: 100-continue\r\n"
					 "Content-Length: 4\r\n\r\n";
		struct timeval tv = { .tv_sec = 5 };   /* no 100: fail, do not hang */
		pthread_t t;
		setsockopt(sp[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		CHECK(pthread_create(&t, NULL, continue_then_body, &sp[1]) == 0);
		CHECK(mitm_http_head(sp[0], ex, sizeof(ex) - 1, NULL, 0, hook, NULL, &out, &err) == 0);
		pthread_join(t, NULL);
		CHECK(strcmp(out.data, "PUT /e HTTP/1.1\r\nContent-Length: 9\r\n"
				       "Authorization: Bearer REAL\r\nConnection: close\r\n\r\n"
				       "wxyz+REAL") == 0);
		buf_reset(&out);
	}
	/* the most fields a client may send: ours are still added (the fuzz
	 * target found them silently dropped once the array was full) */
	{
		struct buf many;
		buf_init(&many);
		buf_adds(&many, "GET /m HTTP/1.1\r\n");
		for (int i = 0; i < HEAD_MAX_FIELDS; i++)
			buf_printf(&many, "X-F%d: y\r\n", i);
		buf_adds(&many, "\r\n");
		CHECK(mitm_http_head(sp[0], many.data, many.len, NULL, 0, hook, NULL, &out, &err) == 0);
		CHECK(strstr(out.data, "\r\nAuthorization: Bearer REAL\r\n") != NULL);
		CHECK(strstr(out.data, "\r\nConnection: close\r\n") != NULL);
		buf_free(&many);
		buf_reset(&out);
	}
	/* a body shorter than its length, then the client is gone */
	{
		static const char sh[] = "POST /s HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc";
		int sq[2];
		CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sq) == 0);
		close(sq[1]);
		CHECK(mitm_http_head(sq[0], sh, sizeof(sh) - 1, NULL, 0, hook, NULL, &out, &err) == -EPIPE);
		close(sq[0]);
		buf_reset(&out);
	}
	/* domain fronting over plain HTTP: the gateway checked the first Host
	 * (sniffed); another Host field or an absolute target naming another
	 * origin gets 421 (two Hosts 400) from us, before the hook */
	{
		static const char *const fronted[] = {
			"GET http://evil.test/k HTTP/1.1\r\nHost: api.test\r\n\r\n",
			"GET http://api.test:81/k HTTP/1.1\r\nHost: api.test\r\n\r\n",
			"GET /k HTTP/1.1\r\nHost: api.test\r\nHost: evil.test\r\n\r\n",
		};
		for (size_t i = 0; i < ARRAY_SIZE(fronted); i++) {
			CHECK(mitm_http_head(sp[0], fronted[i], strlen(fronted[i]), "api.test", 8080,
					     hook, NULL, &out, &err) == 1);
			CHECK(strncmp(out.data, i == 2 ? "HTTP/1.1 400 " : "HTTP/1.1 421 ", 13) == 0);
			CHECK(!strstr(out.data, "REAL"));
			buf_reset(&out);
		}
		static const char *const same[] = {
			"GET /k HTTP/1.1\r\nHost: API.test:80\r\n\r\n",
			"GET /k HTTP/1.1\r\nHost: api.test:8080\r\n\r\n",
			"GET http://api.test/k HTTP/1.1\r\nHost: api.test\r\n\r\n",
		};
		for (size_t i = 0; i < ARRAY_SIZE(same); i++) {
			CHECK(mitm_http_head(sp[0], same[i], strlen(same[i]), "api.test", 8080, hook,
					     NULL, &out, &err) == 0);
			CHECK(strstr(out.data, "Authorization: Bearer REAL\r\n") != NULL);
			buf_reset(&out);
		}
	}
	CHECK(mitm_http_head(sp[0], "GET / HTTP/1.1\nX", 16, NULL, 0, hook, NULL, &out, &err) == -EINVAL);
	close(sp[1]);
	CHECK(mitm_http_head(sp[0], "GET / HTTP/1.1\r\n", 16, NULL, 0, hook, NULL, &out, &err) == -EPIPE);
	buf_free(&out);
	close(sp[0]);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);   /* as in the gateway: a peer may go away mid-write */
	CHECK(mkdtemp(dir) != NULL);
	test_mitm();
	test_plain_head();
	{
		_cleanup_free_ char *cmd = xasprintf("rm -rf '%s'", dir);
		CHECK(system(cmd) == 0);
	}
	if (failures)
		fprintf(stderr, "%d check(s) failed\n", failures);
	return failures ? 1 : 0;
}
