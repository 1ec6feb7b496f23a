/* test-relay: relay_fds over socket pairs, one thread, every case set up
 * before the call so the outcome does not depend on timing: bytes both ways
 * with pending data and half-closes, and a side that closes while the other
 * still sends to it (its answer must still arrive). Exit 0 = pass. */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "../../src/lib/relay.h"
#include "check.h"

/* Everything fd has until EOF, as a string (cap bytes at most). */
static size_t read_all(int fd, char *out, size_t cap)
{
	size_t n = 0;

	while (n < cap - 1) {
		ssize_t r = read(fd, out + n, cap - 1 - n);
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	out[n] = 0;
	return n;
}

/* A failed relay leaves sockets open: reads give up after 5 s rather than
 * hang the test. */
static void pairs(int c[2], int s[2])
{
	struct timeval tv = { .tv_sec = 5 };

	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, c) == 0);
	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s) == 0);
	for (int i = 0; i < 2; i++) {
		setsockopt(c[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		setsockopt(s[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}
}

/* c[0] = client, c[1] = relay's client side; s[0] = relay's server side,
 * s[1] = server. */
static void test_both_ways(void)
{
	int c[2], s[2];
	char got[256];

	pairs(c, s);
	CHECK(write(c[0], "more-from-client", 16) == 16);
	CHECK(shutdown(c[0], SHUT_WR) == 0);
	CHECK(write(s[1], "server-says-hi", 14) == 14);
	CHECK(shutdown(s[1], SHUT_WR) == 0);
	CHECK(relay_fds(c[1], s[0], "pending:", 8, "early:", 6) == 0);
	read_all(s[1], got, sizeof(got));
	CHECK(strcmp(got, "pending:more-from-client") == 0);
	read_all(c[0], got, sizeof(got));
	CHECK(strcmp(got, "early:server-says-hi") == 0);
	for (int i = 0; i < 2; i++)
		close(c[i]), close(s[i]);
}

/* The server answers and closes without reading what it was sent (as the
 * node does after an error answer). The relay's next send to it fails; the
 * answer must still reach the client, and the client's further bytes are
 * read and dropped until its EOF. */
static void test_peer_closes_with_unread_input(void)
{
	int c[2], s[2];
	char got[256];

	pairs(c, s);
	CHECK(write(s[0], "GET /first", 10) == 10); /* relayed earlier, never read */
	CHECK(write(s[1], "HTTP/1.1 404", 12) == 12);
	close(s[1]);
	CHECK(write(c[0], "trailing bytes", 14) == 14);
	CHECK(shutdown(c[0], SHUT_WR) == 0);
	int r = relay_fds(c[1], s[0], "GET /second", 11, NULL, 0);
	if (r != 0)
		fprintf(stderr, "  relay: %s\n", strerror(-r));
	CHECK(r == 0);
	read_all(c[0], got, sizeof(got));
	CHECK(strcmp(got, "HTTP/1.1 404") == 0);
	/* everything the client sent was consumed: nothing left to reset on */
	char one;
	CHECK(recv(c[1], &one, 1, MSG_DONTWAIT) == 0);
	close(c[0]), close(c[1]), close(s[0]);
}

int main(void)
{
	test_both_ways();
	test_peer_closes_with_unread_input();
	return check_done("test-relay");
}
