/* TLS interception end to end in one process, through the interception
 * loop the gateway uses (mitmloop.h, mitm-harness.h): a sandbox-side TLS
 * client that trusts only the interception CA, the gateway's side on the
 * loop (fed the ClientHello bytes a sniffer already read), and an
 * "internet" TLS server on loopback whose certificate comes from a
 * separate test CA. Then the plain-HTTP head path (mitm_http_head). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "check.h"
#include "mitm-harness.h"

/* Deadlines: nothing here stalls, so they only end a run gone wrong. */
#define IO_TEST_MS 10000

static int dialled;   /* upstream connections so far */

/* One intercepted connection to api.test, dialled by the sandbox on port
 * 8443: req (NULL: the default below) from the client; the hook refuses
 * it itself (429) when refuse is set. Returns the end's r (1 handed to
 * the relay loop, 0 answered here, -errno); up_got then holds what the
 * upstream received, once all its connections ended. */
static int one(SSL_CTX *up, bool refuse, struct client *cl, const char *req)
{
	static const char dflt[] = "GET /v1/x HTTP/1.1\r\nHost: api.test\r\n"
				   "Authorization: Bearer airlock-ph-x\r\nKeep-Alive: 5\r\n\r\n";
	struct conn c = { .refuse = refuse, .dialled_port = 8443 };

	memset(cl, 0, sizeof(*cl));
	cl->req = req ? req : dflt;
	upstream_reset();
	CHECK(exchange(&c, cl, up, lport, true));
	/* its upstream was dialled, as the gateway does before the hand-over */
	CHECK(upstream_wait(++dialled));
	if (c.r < 0)
		fprintf(stderr, "mitm: %d %s\n", c.r, c.why);
	return c.r;
}

static void test_mitm(void)
{
	struct client c;

	/* forwarded: the client verified our leaf; upstream got the rewrite */
	CHECK(one(trusting, false, &c, NULL) == 1);
	CHECK(c.verify == X509_V_OK);
	CHECK(strstr(up_got, "GET /v1/x HTTP/1.1\r\n") == up_got);
	CHECK(strstr(up_got, "Authorization: Bearer REAL\r\n") != NULL);
	CHECK(strstr(up_got, "airlock-ph-") == NULL);
	CHECK(strstr(up_got, "Connection: close\r\n") != NULL && !strstr(up_got, "Keep-Alive"));
	CHECK(strstr(c.resp, "HTTP/1.1 200 OK") == c.resp && strstr(c.resp, "\r\n\r\nhello"));

	/* an upstream the gateway cannot verify gets nothing; the client a 502 */
	CHECK(one(strict, false, &c, NULL) == -EPROTO);
	CHECK(strstr(up_got, "REAL") == NULL);
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
		for (size_t i = 0; i < ARRAY_SIZE(fronted); i++) {
			CHECK(one(trusting, false, &c, fronted[i]) == -EPERM);
			CHECK(strstr(c.resp, "HTTP/1.1 421 ") == c.resp);
			CHECK(up_got[0] == '\0');
		}
		/* two Host fields, or none in HTTP/1.1: 400, nothing sent */
		static const char *const bad[] = {
			"GET / HTTP/1.1\r\nHost: api.test\r\nHost: evil.test\r\n\r\n",
			"GET / HTTP/1.1\r\n\r\n",
		};
		for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
			CHECK(one(trusting, false, &c, bad[i]) == -EPERM);
			CHECK(strstr(c.resp, "HTTP/1.1 400 ") == c.resp);
			CHECK(up_got[0] == '\0');
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
		for (size_t i = 0; i < ARRAY_SIZE(same); i++) {
			CHECK(one(trusting, false, &c, same[i]) == 1);
			CHECK(strstr(up_got, "Authorization: Bearer REAL\r\n") != NULL);
			CHECK(strstr(c.resp, "HTTP/1.1 200 OK") == c.resp);
		}
	}

	/* the hook answers itself */
	CHECK(one(trusting, true, &c, NULL) == 0);
	CHECK(strstr(c.resp, "HTTP/1.1 429") == c.resp);
	CHECK(up_got[0] == '\0');
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
	CHECK(harness_start(IO_TEST_MS) == 0);
	if (ml)
		test_mitm();
	test_plain_head();
	harness_end();
	return check_done("test-cred-mitm");
}
