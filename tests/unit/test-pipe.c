/* test-pipe: a producer and a consumer joined by a pipe (src/lib/pipe.c),
 * as a restore's download feeds nodemgr's receive: every byte through in
 * order; a consumer that stops and fails gives its error (the producer's
 * EPIPE is only the echo of it); a consumer that stops content is a
 * success; a producer's failure wins, and its consumer sees the end. */
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "../../src/lib/pipe.h"
#include "../../src/lib/util.h"
#include "check.h"

#define TOTAL (5u << 20)

struct side {
	size_t fail_after;   /* producer: fail after this many bytes; consumer: stop */
	int fail_code;       /* 0: succeed there */
	size_t seen;
	bool bytes_ok, eof;
};

static uint8_t at(size_t i)
{
	return (uint8_t)(i * 7 + (i >> 12));
}

static int produce(void *arg, int fd, err_t *err)
{
	struct side *p = arg;
	uint8_t buf[65536];

	for (size_t pos = 0; pos < TOTAL; pos += sizeof(buf)) {
		if (pos >= p->fail_after)
			return err_set(err, p->fail_code, "the store went away at %zu", pos);
		for (size_t i = 0; i < sizeof(buf); i++)
			buf[i] = at(pos + i);
		if (write_all(fd, buf, sizeof(buf)) < 0)
			return err_sys(err, "write the pipe");
		p->seen = pos + sizeof(buf);
	}
	return 0;
}

static int consume(void *arg, int fd, err_t *err)
{
	struct side *c = arg;
	uint8_t buf[4096];
	ssize_t n;

	c->bytes_ok = true;
	while (c->seen < c->fail_after && (n = read(fd, buf, sizeof(buf))) > 0) {
		for (ssize_t i = 0; i < n; i++)
			c->bytes_ok = c->bytes_ok && buf[i] == at(c->seen + (size_t)i);
		c->seen += (size_t)n;
	}
	c->eof = c->seen < c->fail_after;
	if (c->eof && c->fail_code)
		return err_set(err, c->fail_code, "the stream ended early");
	if (!c->eof && c->fail_code)
		return err_set(err, c->fail_code, "bad stream at %zu", c->seen);
	return 0;
}

int main(void)
{
	uint64_t pus = 0, tus = 0;
	err_t err = { 0 };

	signal(SIGPIPE, SIG_IGN);   /* as the daemons do */

	/* Every byte, in order; both times given. */
	struct side p = { .fail_after = SIZE_MAX, .fail_code = 0 }, c = { .fail_after = SIZE_MAX, .fail_code = 0 };
	CHECK(pipe_run(produce, &p, consume, &c, 1 << 20, &pus, &tus, &err) == 0);
	CHECK(c.seen == TOTAL && c.bytes_ok && c.eof);
	CHECK(pus > 0);

	/* The consumer stops at a bad byte: its error, not the producer's
	 * EPIPE (the producer would block forever on a full pipe without it). */
	p = (struct side){ .fail_after = SIZE_MAX, .fail_code = 0 };
	c = (struct side){ .fail_after = 100000, .fail_code = EBADMSG };
	err = (err_t){ 0 };
	CHECK(pipe_run(produce, &p, consume, &c, 0, NULL, NULL, &err) == -EBADMSG);
	CHECK(strstr(err.msg, "bad stream") != NULL);
	CHECK(p.seen < TOTAL);

	/* The consumer had all it needed: a success. */
	p = (struct side){ .fail_after = SIZE_MAX, .fail_code = 0 };
	c = (struct side){ .fail_after = 1, .fail_code = 0 };
	err = (err_t){ 0 };
	CHECK(pipe_run(produce, &p, consume, &c, 0, NULL, NULL, &err) == 0);

	/* The producer fails: its error wins over the consumer's, which saw
	 * the stream end after exactly what was written. */
	p = (struct side){ .fail_after = 1u << 20, .fail_code = EHOSTUNREACH };
	c = (struct side){ .fail_after = SIZE_MAX, .fail_code = EPROTO };
	err = (err_t){ 0 };
	CHECK(pipe_run(produce, &p, consume, &c, 0, NULL, NULL, &err) == -EHOSTUNREACH);
	CHECK(strstr(err.msg, "went away") != NULL);
	CHECK(c.eof && c.seen == 1u << 20 && c.bytes_ok);

	return check_done("test-pipe");
}
