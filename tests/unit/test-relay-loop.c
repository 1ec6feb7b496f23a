/* Unit test for relay.h's relay_loop: pairs carried by a few epoll threads.
 * Many pairs at once, each with its bytes intact both ways and its
 * half-closes passed on, done called exactly once each; idle pairs held
 * without a thread each; a pair over in its first round ended by the
 * caller; the stop ends what is left. Unix stream socketpairs stand for
 * the two TCP connections. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../../src/lib/relay.h"
#include "check.h"

struct done_rec {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int calls, bad, last_r;
};
static struct done_rec rec = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0 };

static void on_done(void *arg, int a, int b, int r)
{
	int *seen = arg;

	pthread_mutex_lock(&rec.mu);
	if ((*seen)++)
		rec.bad++;          /* called twice for one pair */
	rec.calls++;
	rec.last_r = r;
	if (r != 0 && r != -ECANCELED)
		rec.bad++;
	pthread_cond_broadcast(&rec.cv);
	pthread_mutex_unlock(&rec.mu);
	close(a);
	close(b);
}

/* Until done was called n times in all; a pair never ended fails the
 * check after 20 s rather than hang the test. */
static void wait_calls(int n)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 20;
	pthread_mutex_lock(&rec.mu);
	while (rec.calls < n && pthread_cond_timedwait(&rec.cv, &rec.mu, &until) == 0)
		;
	CHECK(rec.calls >= n);
	pthread_mutex_unlock(&rec.mu);
}

static int threads_now(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d)))
		n += e->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

static char ref(unsigned seed, size_t o)
{
	return (char)(seed + o * 13 + o / 511);
}

/* Both ends of one pair as seen by its client and server: each writes its
 * stream then half-closes, and reads the other's to EOF, in one poll loop
 * (so many pairs run from one thread without deadlock). */
struct ends {
	int c, s;                /* client end, server end */
	unsigned seed;
	size_t up, down;         /* bytes client -> server, server -> client */
	size_t wc, ws, rc, rs;   /* written by c, s; read by c, s */
	bool c_eof, s_eof, ok;
	bool c_shut, s_shut;
	int seen;
};

static bool ends_step(struct ends *e)
{
	char buf[8192];
	ssize_t n;

	if (e->wc < e->up) {
		size_t k = e->up - e->wc < sizeof(buf) ? e->up - e->wc : sizeof(buf);
		for (size_t i = 0; i < k; i++)
			buf[i] = ref(e->seed, e->wc + i);
		if ((n = send(e->c, buf, k, MSG_DONTWAIT)) > 0)
			e->wc += (size_t)n;
	}
	if (e->wc == e->up && !e->c_shut)
		e->c_shut = shutdown(e->c, SHUT_WR) == 0;
	if (e->ws < e->down) {
		size_t k = e->down - e->ws < sizeof(buf) ? e->down - e->ws : sizeof(buf);
		for (size_t i = 0; i < k; i++)
			buf[i] = ref(e->seed + 1, e->ws + i);
		if ((n = send(e->s, buf, k, MSG_DONTWAIT)) > 0)
			e->ws += (size_t)n;
	}
	if (e->ws == e->down && !e->s_shut)
		e->s_shut = shutdown(e->s, SHUT_WR) == 0;
	while (!e->s_eof && (n = recv(e->s, buf, sizeof(buf), MSG_DONTWAIT)) >= 0) {
		if (n == 0)
			e->s_eof = true;
		for (ssize_t i = 0; i < n; i++, e->rs++)
			if (e->rs >= e->up || buf[i] != ref(e->seed, e->rs))
				e->ok = false;
	}
	while (!e->c_eof && (n = recv(e->c, buf, sizeof(buf), MSG_DONTWAIT)) >= 0) {
		if (n == 0)
			e->c_eof = true;
		for (ssize_t i = 0; i < n; i++, e->rc++)
			if (e->rc >= e->down || buf[i] != ref(e->seed + 1, e->rc))
				e->ok = false;
	}
	return e->c_eof && e->s_eof;
}

/* A new pair: returns the loop's two fds in a, b. */
static void new_pair(struct ends *e, int *a, int *b)
{
	int p[2], q[2];

	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) == 0);
	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, q) == 0);
	e->c = p[0];
	*a = p[1];
	*b = q[0];
	e->s = q[1];
	e->ok = true;
}

static void test_many_pairs(struct relay_loop *l)
{
	enum { N = 64 };
	static struct ends e[N];
	int base = rec.calls, left = N;

	for (int i = 0; i < N; i++) {
		int a, b;
		new_pair(&e[i], &a, &b);
		e[i].seed = (unsigned)i * 7;
		e[i].up = i % 4 == 0 ? 0 : (size_t)(i * 9173) % (600u << 10);
		e[i].down = i == 5 ? 4u << 20 : (size_t)(i * 31337) % (900u << 10);
		relay_loop_add(l, NULL, a, b, NULL, 0, on_done, &e[i].seen);
	}
	while (left > 0) {
		left = 0;
		for (int i = 0; i < N; i++)
			left += !ends_step(&e[i]);
		if (left)
			usleep(200);
	}
	wait_calls(base + N);
	for (int i = 0; i < N; i++) {
		CHECK(e[i].ok && e[i].rs == e[i].up && e[i].rc == e[i].down);
		CHECK(e[i].seen == 1);
		close(e[i].c);
		close(e[i].s);
	}
	CHECK(rec.bad == 0);
	CHECK(relay_loop_pairs(l) == 0);
}

/* Pending bytes go first (in the caller's round); a pair whose both sides
 * had already ended is over at once. */
static void test_over_at_once(struct relay_loop *l)
{
	struct ends e = { 0 };
	char got[64] = "";
	int a, b, base = rec.calls;

	new_pair(&e, &a, &b);
	CHECK(shutdown(e.c, SHUT_WR) == 0);
	CHECK(shutdown(e.s, SHUT_WR) == 0);
	relay_loop_add(l, NULL, a, b, "pending", 7, on_done, &e.seen);
	wait_calls(base + 1);
	CHECK(e.seen == 1 && rec.last_r == 0);
	CHECK(recv(e.s, got, sizeof(got) - 1, 0) == 7 && !strcmp(got, "pending"));
	close(e.c);
	close(e.s);
}

/* The server answers and is gone both ways while the client, silent,
 * keeps its end open: the answer arrives, and the pair is over without the
 * client doing anything (nothing it sends could reach the server). The
 * hang-up is one edge, seen before the step that reads the EOF. */
static void test_server_gone_client_idle(struct relay_loop *l)
{
	struct ends e = { 0 };
	char got[16] = "";
	int a, b, base = rec.calls;

	new_pair(&e, &a, &b);
	relay_loop_add(l, NULL, a, b, NULL, 0, on_done, &e.seen);
	CHECK(write(e.s, "answer", 6) == 6);
	close(e.s);
	CHECK(recv(e.c, got, 6, MSG_WAITALL) == 6 && !strcmp(got, "answer"));
	wait_calls(base + 1);
	CHECK(e.seen == 1 && rec.last_r == 0);
	close(e.c);
}

/* The client reads only once the relay is stuck with bytes for it: the
 * server's whole answer (1 MiB, more than the client's socket holds) is
 * written and closed first. Only the client's socket turning writable can
 * move the rest, so the loop must wait for that too. */
static void test_slow_reader(struct relay_loop *l)
{
	struct ends e = { 0 };
	int a, b, big = 4 << 20, base = rec.calls, n = 0;
	time_t until = time(NULL) + 20;

	new_pair(&e, &a, &b);
	CHECK(setsockopt(e.s, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big)) == 0);
	e.seed = 99;
	e.down = 1u << 20;
	e.up = 0;
	while (e.ws < e.down && time(NULL) < until) {
		ssize_t k;
		char buf[65536];
		size_t m = e.down - e.ws < sizeof(buf) ? e.down - e.ws : sizeof(buf);
		for (size_t i = 0; i < m; i++)
			buf[i] = ref(e.seed + 1, e.ws + i);
		if ((k = send(e.s, buf, m, MSG_DONTWAIT)) > 0)
			e.ws += (size_t)k;
	}
	CHECK(e.ws == e.down);
	e.s_shut = shutdown(e.s, SHUT_WR) == 0;
	relay_loop_add(l, NULL, a, b, NULL, 0, on_done, &e.seen);
	/* the relay delivers what the client's socket holds, then waits */
	while (n == 0 && time(NULL) < until)
		if (ioctl(e.c, FIONREAD, &n) < 0 || n == 0)
			usleep(1000);
	usleep(50000);
	while (!ends_step(&e) && time(NULL) < until)
		usleep(200);
	CHECK(e.ok && e.rc == e.down && e.rs == 0);
	wait_calls(base + 1);
	CHECK(e.seen == 1);
	close(e.c);
	close(e.s);
}

/* Idle pairs hold no thread; the stop ends them, each once. */
static void test_idle_then_stop(struct relay_loop *l)
{
	enum { N = 300 };
	static struct ends e[N];
	int before = threads_now(), base = rec.calls;

	for (int i = 0; i < N; i++) {
		int a, b;
		new_pair(&e[i], &a, &b);
		relay_loop_add(l, NULL, a, b, NULL, 0, on_done, &e[i].seen);
	}
	CHECK(relay_loop_pairs(l) == N);
	CHECK(threads_now() == before);
	/* one of them still carries bytes */
	char got[8] = "";
	CHECK(write(e[7].c, "ping", 4) == 4);
	CHECK(recv(e[7].s, got, 4, MSG_WAITALL) == 4 && !strcmp(got, "ping"));
	relay_loop_stop(l);
	CHECK(rec.calls == base + N && rec.last_r == -ECANCELED);
	for (int i = 0; i < N; i++) {
		CHECK(e[i].seen == 1);
		/* the loop's ends were closed by done: the peers see EOF */
		CHECK(recv(e[i].c, got, 1, MSG_DONTWAIT) == 0);
		close(e[i].c);
		close(e[i].s);
	}
}

int main(void)
{
	err_t err = { 0 };
	struct relay_loop *l;

	signal(SIGPIPE, SIG_IGN);
	l = relay_loop_start(2, &err);
	CHECK(l != NULL);
	if (!l)
		return 1;
	test_many_pairs(l);
	test_over_at_once(l);
	test_server_gone_client_idle(l);
	test_slow_reader(l);
	test_idle_then_stop(l);
	return check_done("test-relay-loop");
}
