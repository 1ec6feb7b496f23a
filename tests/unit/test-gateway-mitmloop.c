/* The interception loop (mitmloop.h) in one process, with deadlines of
 * IO_TEST_MS: a sandbox-side TLS client that trusts only the interception
 * CA, an "internet" TLS server on loopback with a certificate of another
 * CA, and the gateway's side on one loop thread with two hook threads.
 * Connections that stall in each phase (the handshake, the head, the
 * hook) end at their deadline with their answer and reason, while
 * another connection is served meanwhile; one that works goes on to the
 * relay loop and gets its answer. The harness is mitm-harness.h's. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "mitm-harness.h"

#define IO_TEST_MS 400

static const char good_req[] = "GET /v1/x HTTP/1.1\r\nHost: api.test\r\n"
			       "Authorization: Bearer airlock-ph-x\r\n\r\n";

/* A whole exchange through the loop while others stall. */
static void served(SSL_CTX *up, int port, const char *want_prefix, int want_r)
{
	struct conn c = { 0 };
	struct client cl = { .req = good_req };

	CHECK(exchange(&c, &cl, up, port, false));
	CHECK(c.r == want_r);
	if (strstr(cl.resp, want_prefix) != cl.resp)
		fprintf(stderr, "got %s (%s)\n", cl.resp, c.why);
	CHECK(strstr(cl.resp, want_prefix) == cl.resp);
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
	signal(SIGPIPE, SIG_IGN);
	CHECK(harness_start(IO_TEST_MS) == 0);
	if (ml)
		test_loop();
	harness_end();
	return check_done("test-gateway-mitmloop");
}
