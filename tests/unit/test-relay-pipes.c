/* Unit test for src/lib/relay.c's splice path (test-relay.c has the
 * relay's cases of closing sides): megabytes intact both ways (pending
 * bytes first), half-closes passed on, pipes kept across relays without
 * bytes of one relay reaching the next, and a pipe left holding bytes
 * (its receiver gone) dropped, not kept (a pipe is known by its inode). Unix stream socketpairs stand for the two TCP
 * connections (splice moves their bytes as it does a TCP socket's). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../src/lib/relay.h"
#include "check.h"

/* The byte the stream `seed` has at offset o. */
static char ref(unsigned seed, size_t o)
{
	return (char)(seed + o * 7 + o / 4093);
}

struct writer {
	int fd;
	unsigned seed;
	size_t n;
	bool shut;       /* shutdown(SHUT_WR) when done */
	int err;
};

static void *write_main(void *arg)
{
	struct writer *w = arg;
	char buf[65536];
	size_t off = 0;

	while (off < w->n) {
		size_t k = w->n - off < sizeof(buf) ? w->n - off : sizeof(buf);
		for (size_t i = 0; i < k; i++)
			buf[i] = ref(w->seed, off + i);
		ssize_t r = write(w->fd, buf, k);
		if (r < 0) {
			w->err = errno;
			return NULL;
		}
		off += (size_t)r;
	}
	if (w->shut)
		shutdown(w->fd, SHUT_WR);
	return NULL;
}

/* Read fd to EOF; true when it held `head` then n bytes of stream seed. */
static bool read_check(int fd, const char *head, unsigned seed, size_t n)
{
	size_t hl = strlen(head), off = 0;
	char buf[65536];
	bool ok = true;
	ssize_t r;

	while ((r = read(fd, buf, sizeof(buf))) > 0) {
		for (ssize_t i = 0; i < r; i++, off++) {
			char want = off < hl ? head[off] : ref(seed, off - hl);
			if (off >= hl + n || buf[i] != want)
				ok = false;
		}
	}
	return ok && r == 0 && off == hl + n;
}

struct relay_run {
	struct relay_pipes *rp;
	int a, b;
	const char *pending;
	int r;
};

static void *relay_main(void *arg)
{
	struct relay_run *rr = arg;

	rr->r = relay_fds_pipes(rr->rp, rr->a, rr->b, rr->pending, strlen(rr->pending), NULL, 0);
	return NULL;
}

/* One relayed connection: client c <-> a [relay] b <-> s server. The client
 * sends up bytes after the pending head, the server answers down bytes;
 * each side half-closes when done. */
static void one_connection(struct relay_pipes *rp, unsigned seed, size_t up, size_t down)
{
	int p[2], q[2];
	pthread_t rt, wc, ws;

	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) == 0);
	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, q) == 0);
	struct relay_run rr = { .rp = rp, .a = p[1], .b = q[0], .pending = "HEAD\r\n" };
	struct writer cw = { .fd = p[0], .seed = seed, .n = up, .shut = true };
	struct writer sw = { .fd = q[1], .seed = seed + 1, .n = down, .shut = true };

	pthread_create(&rt, NULL, relay_main, &rr);
	pthread_create(&wc, NULL, write_main, &cw);
	pthread_create(&ws, NULL, write_main, &sw);
	CHECK(read_check(q[1], "HEAD\r\n", seed, up));   /* the server got it all, then EOF */
	CHECK(read_check(p[0], "", seed + 1, down));     /* the client likewise */
	pthread_join(wc, NULL);
	pthread_join(ws, NULL);
	pthread_join(rt, NULL);
	CHECK(cw.err == 0 && sw.err == 0);
	CHECK(rr.r == 0);
	for (int i = 0; i < 2; i++) {
		close(p[i]);
		close(q[i]);
	}
}

static void test_intact_and_half_close(void)
{
	one_connection(NULL, 3, 8u << 20, 3u << 20);
	one_connection(NULL, 5, 0, 0);                 /* only the pending head */
}

/* The pipe's identity: its inode. */
static ino_t pipe_ino(const int p[2])
{
	struct stat st;

	CHECK(fstat(p[0], &st) == 0);
	return st.st_ino;
}

/* Every pipe the pool keeps is empty. */
static bool pool_empty(const struct relay_pipes *rp)
{
	for (int i = 0; i < rp->n; i++) {
		int n = -1;
		if (ioctl(rp->p[i][0], FIONREAD, &n) < 0 || n != 0)
			return false;
	}
	return true;
}

static void test_pipes_kept(void)
{
	struct relay_pipes rp = RELAY_PIPES_INIT;
	ino_t first[RELAY_PIPES_KEEP];
	int n;

	one_connection(&rp, 11, 1u << 20, 5u << 20);
	n = rp.n;
	CHECK(n >= 1 && n <= 2);          /* one per direction at most */
	CHECK(pool_empty(&rp));
	for (int i = 0; i < n; i++)
		first[i] = pipe_ino(rp.p[i]);
	/* the same pipes carry the next connection, and only its bytes */
	one_connection(&rp, 17, 3u << 20, 100);
	CHECK(rp.n == n);
	CHECK(pool_empty(&rp));
	for (int i = 0; i < rp.n; i++) {
		bool seen = false;
		for (int k = 0; k < n; k++)
			seen |= pipe_ino(rp.p[i]) == first[k];
		CHECK(seen);
	}
	relay_pipes_close(&rp);
	CHECK(rp.n == 0);
}

/* The server is gone and the client has sent: the bytes already in the
 * client -> server pipe can go nowhere, so that pipe must not be kept for
 * the next connection; the relay still ends cleanly at the client's EOF
 * (the other side's close ends only its own direction). The client's bytes
 * are there before the relay starts, and it moves that direction first, so
 * they are in the pipe (the one pipe the pool held) when the send fails. */
static void test_pipe_with_bytes_dropped(void)
{
	struct relay_pipes rp = RELAY_PIPES_INIT;
	int p[2], q[2], kept[2];
	char buf[65536];
	ino_t used;

	CHECK(pipe(kept) == 0);
	used = pipe_ino(kept);
	rp.p[0][0] = kept[0];
	rp.p[0][1] = kept[1];
	rp.n = 1;
	memset(buf, 'x', sizeof(buf));
	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) == 0);
	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, q) == 0);
	CHECK(write(p[0], buf, sizeof(buf)) == (ssize_t)sizeof(buf));
	CHECK(shutdown(p[0], SHUT_WR) == 0);
	close(q[1]);
	CHECK(relay_fds_pipes(&rp, p[1], q[0], NULL, 0, NULL, 0) == 0);
	CHECK(rp.n == 1);              /* the other direction's, new and empty */
	CHECK(pool_empty(&rp));
	CHECK(pipe_ino(rp.p[0]) != used);   /* bytes were left in it: dropped */
	relay_pipes_close(&rp);
	close(p[0]);
	close(p[1]);
	close(q[0]);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	test_intact_and_half_close();
	test_pipes_kept();
	test_pipe_with_bytes_dropped();
	return failures ? 1 : 0;
}
