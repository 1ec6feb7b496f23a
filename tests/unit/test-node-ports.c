/* test-node-ports: the node's rewrite of a proxied service's answer head
 * (src/node/ports.c ports_rewrite_head), the bytes from inside a sandbox
 * that a browser reads: hop-by-hop headers replaced, Set-Cookie fields made
 * host-only however the service folds or spells them, bounded in number.
 * Exit 0 = pass. */
#include <string.h>

#include "../../src/lib/http-cookie.h"
#include "../../src/node/node-internal.h"
#include "check.h"

/* The rewritten head as a string, or NULL when it is no answer head. */
static char *rewrite(const char *h)
{
	struct buf out;

	buf_init(&out);
	if (ports_rewrite_head(h, strlen(h), &out) < 0) {
		buf_free(&out);
		return NULL;
	}
	buf_addc(&out, '\0');
	return buf_steal(&out);
}

static void expect(const char *in, const char *want)
{
	char *got = rewrite(in);

	if (!got || strcmp(got, want) != 0) {
		fprintf(stderr, "rewrite of\n[%s]\ngave\n[%s]\nwant\n[%s]\n", in,
			got ? got : "(none)", want);
		failures++;
	}
	free(got);
}

static void test_hop_headers(void)
{
	expect("HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5\r\nConnection: keep-alive, X-Hop\r\n"
	       "X-Hop: 1\r\nX-Svc: kept\r\n\r\n",
	       "HTTP/1.1 200 OK\r\nX-Svc: kept\r\nConnection: close\r\n\r\n");
	expect("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
	       "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
	       "Connection: Upgrade\r\n\r\n");
	/* A CGI's bare "\n" line ends pass on. */
	expect("HTTP/1.0 200 OK\nContent-Type: text/plain\n\n",
	       "HTTP/1.0 200 OK\nContent-Type: text/plain\nConnection: close\r\n\n");
	CHECK(rewrite("http/1.1 200 OK\r\n\r\n") == NULL);
	CHECK(rewrite("SSH-2.0-OpenSSH\r\n\r\n") == NULL);
	/* The status line ends before its code: the code is on the next line. */
	CHECK(rewrite("HTTP/1.\n 400\n0\nP/\n\n") == NULL);
}

static void test_set_cookie_host_only(void)
{
	/* The case of item 6: a cookie for the whole ports domain. */
	expect("HTTP/1.1 200 OK\r\nSet-Cookie: x=1; Domain=ports.test; Path=/\r\n\r\n",
	       "HTTP/1.1 200 OK\r\nSet-Cookie: x=1; Path=/\r\nConnection: close\r\n\r\n");
	/* Any case of the field name, blanks before its colon. */
	expect("HTTP/1.1 200 OK\r\nset-cookie:a=1;domain=ports.test\r\n"
	       "SET-COOKIE \t: b=2; DoMaIn=.ports.test; HttpOnly \r\n\r\n",
	       "HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2; HttpOnly\r\n"
	       "Connection: close\r\n\r\n");
	/* Folded onto the next line (obs-fold): browsers join it. */
	expect("HTTP/1.1 200 OK\r\nSet-Cookie: x=1\r\n ; Domain=ports.test\r\n\t; Path=/\r\n\r\n",
	       "HTTP/1.1 200 OK\r\nSet-Cookie: x=1  ; Path=/\r\nConnection: close\r\n\r\n");
	/* A fold under a field we drop must not join the Set-Cookie above it. */
	expect("HTTP/1.1 200 OK\r\nSet-Cookie: x=1\r\nKeep-Alive: 5\r\n ; Domain=ports.test\r\n\r\n",
	       "HTTP/1.1 200 OK\r\nSet-Cookie: x=1\r\nConnection: close\r\n\r\n");
	expect("HTTP/1.1 200 OK\r\nSet-Cookie: x=1\r\nno colon here\r\n ; Domain=ports.test\r\n\r\n",
	       "HTTP/1.1 200 OK\r\nSet-Cookie: x=1\r\nConnection: close\r\n\r\n");
	/* Other folded fields are unfolded, not dropped. */
	expect("HTTP/1.1 200 OK\r\nX-A: 1\r\n 2\r\n\r\n",
	       "HTTP/1.1 200 OK\r\nX-A: 1  2\r\nConnection: close\r\n\r\n");
	/* A bare CR ends a line to some browsers: such a field goes whole,
	 * and a status line with one is no answer we pass. */
	expect("HTTP/1.1 200 OK\r\nX-A: 1\rSet-Cookie: z=1; Domain=ports.test\r\nX-B: 2\r\n\r\n",
	       "HTTP/1.1 200 OK\r\nX-B: 2\r\nConnection: close\r\n\r\n");
	expect("HTTP/1.1 200 OK\r\nX-A: 1\r\n \rSet-Cookie: z=1; Domain=ports.test\r\n\r\n",
	       "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
	CHECK(rewrite("HTTP/1.1 200 OK\rSet-Cookie: z=1; Domain=ports.test\r\n\r\n") == NULL);
	/* The proxy's token cookie is not the service's to set. */
	expect("HTTP/1.1 200 OK\r\nSet-Cookie: airlock_port_token=alp_x; Path=/\r\n\r\n",
	       "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
	/* Interim answers are rewritten the same way. */
	expect("HTTP/1.1 103 Early Hints\r\nSet-Cookie: x=1; Domain=ports.test\r\n\r\n",
	       "HTTP/1.1 103 Early Hints\r\nSet-Cookie: x=1\r\nConnection: close\r\n\r\n");
}

static void test_set_cookie_count(void)
{
	struct buf in;
	char *got;
	size_t n = 0;

	buf_init(&in);
	buf_adds(&in, "HTTP/1.1 200 OK\r\n");
	for (int i = 0; i < HTTP_SETCOOKIE_MAX_COUNT + 10; i++)
		buf_printf(&in, "Set-Cookie: c%d=1\r\n", i);
	buf_adds(&in, "X-After: 1\r\n\r\n");
	buf_addc(&in, '\0');
	got = rewrite(in.data);
	CHECK(got != NULL);
	for (const char *p = got; p && (p = strstr(p, "Set-Cookie: ")); p++)
		n++;
	CHECK(n == HTTP_SETCOOKIE_MAX_COUNT);
	CHECK(got && strstr(got, "X-After: 1\r\n"));
	free(got);
	buf_free(&in);
}

int main(void)
{
	test_hop_headers();
	test_set_cookie_host_only();
	test_set_cookie_count();
	return check_done("test-node-ports");
}
