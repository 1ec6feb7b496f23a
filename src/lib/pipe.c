/* pipe.c - see pipe.h. */
#include "pipe.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include "util.h"

struct consumer {
	pipe_side_fn fn;
	void *arg;
	int fd;
	int r;
	err_t err;
};

static void *consumer_main(void *arg)
{
	struct consumer *c = arg;

	c->r = c->fn(c->arg, c->fd, &c->err);
	close(TAKE_FD(c->fd));
	return NULL;
}

int pipe_run(pipe_side_fn produce, void *parg, pipe_side_fn consume, void *carg,
	     int pipe_size, uint64_t *produce_us, uint64_t *tail_us, err_t *err)
{
	struct consumer c = { .fn = consume, .arg = carg, .fd = -1 };
	pthread_t tid;
	uint64_t t0 = now_us(), t1;
	int fds[2], r;

	if (pipe2(fds, O_CLOEXEC) < 0)
		return err_sys(err, "pipe");
	if (pipe_size > 0)
		(void)fcntl(fds[1], F_SETPIPE_SZ, pipe_size);   /* best effort */
	c.fd = fds[0];
	if ((r = pthread_create(&tid, NULL, consumer_main, &c)) != 0) {
		close(fds[0]);
		close(fds[1]);
		errno = r;
		return err_sys(err, "start the pipe's reader");
	}
	r = produce(parg, fds[1], err);
	close(fds[1]);
	t1 = now_us();
	pthread_join(tid, NULL);
	if (produce_us)
		*produce_us = t1 - t0;
	if (tail_us)
		*tail_us = now_us() - t1;
	/* EPIPE: the consumer stopped reading first; its answer is the one */
	if (r < 0 && r != -EPIPE)
		return r;
	if (c.r < 0) {
		*err = c.err;
		return c.r;
	}
	return 0;
}
