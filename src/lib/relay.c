/* relay.c - see relay.h. */
#include "relay.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util.h"

struct dir {
	int from, to;
	int *pipe;       /* [2] */
	bool copy;       /* splice cannot move it: through buf */
	size_t inpipe;   /* bytes in the pipe, not yet written to `to` */
	char *buf;       /* the pending bytes, or the copy buffer */
	size_t cap, len, off;
	bool eof;        /* read side ended */
	bool shut;       /* shutdown(to, SHUT_WR) done */
	bool sink;       /* the receiver is gone: read and drop until EOF */
	bool dirty;      /* the pipe kept bytes nobody will read: not reusable */
};

static void set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0 && !(fl & O_NONBLOCK))
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void open_pipe(int p[2])
{
	if (p[0] >= 0)
		return;
	if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0) {
		p[0] = p[1] = -1;
		return;
	}
	/* Larger moves per splice for a bulk download; an unprivileged user
	 * past its pipe allowance keeps the default 64 KiB. */
	fcntl(p[1], F_SETPIPE_SZ, RELAY_PIPE);
}

static void close_pipe(int p[2])
{
	for (int k = 0; k < 2; k++)
		if (p[k] >= 0)
			close(p[k]);
	p[0] = p[1] = -1;
}

void relay_pipes_close(struct relay_pipes *rp)
{
	close_pipe(rp->p[0]);
	close_pipe(rp->p[1]);
}

/* The receiver closed: this direction is over, but what it sent the other
 * way still has to get through. Keep reading ours and drop it (through the
 * buffer), so closing our end later does not reset the connection (a reset
 * can discard an answer the sender has not read yet). */
static void to_sink(struct dir *d)
{
	d->sink = d->copy = true;
	d->len = d->off = 0;
	if (d->inpipe) {
		d->inpipe = 0;
		d->dirty = true;
	}
}

/* A write to d->to failed (errno): 1 to go on (interrupted, or the
 * receiver is gone and d now drops what it reads), 0 when it would block,
 * else -errno. */
static int write_failed(struct dir *d)
{
	if (errno == EINTR)
		return 1;
	if (errno == EPIPE || errno == ECONNRESET) {
		to_sink(d);
		return 1;
	}
	return errno == EAGAIN ? 0 : -errno;
}

/* Move what can be moved now: write what is held, then read more, until
 * one side would block. Returns 0 or -errno. */
static int step(struct dir *d)
{
	ssize_t n;
	int r;

	for (;;) {
		if (d->off < d->len) {
			n = send(d->to, d->buf + d->off, d->len - d->off, MSG_NOSIGNAL);
			if (n < 0) {
				if ((r = write_failed(d)) > 0)
					continue;
				return r;
			}
			d->off += (size_t)n;
			continue;
		}
		d->len = d->off = 0;
		if (d->inpipe) {
			n = splice(d->pipe[0], NULL, d->to, NULL, d->inpipe,
				   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
			if (n < 0) {
				if ((r = write_failed(d)) > 0)
					continue;
				return r;
			}
			d->inpipe -= (size_t)n;
			continue;
		}
		if (d->eof) {
			if (!d->shut) {
				shutdown(d->to, SHUT_WR);
				d->shut = true;
			}
			return 0;
		}
		if (!d->copy) {
			/* the pipe is empty here: take what fits */
			n = splice(d->from, NULL, d->pipe[1], NULL, RELAY_PIPE,
				   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
			if (n < 0 && errno == EINVAL) {
				d->copy = true;
				continue;
			}
		} else {
			if (d->cap < RELAY_BUF) {
				if (d->buf)   /* held pending bytes (see below) */
					explicit_bzero(d->buf, d->cap);
				free(d->buf);
				d->buf = xmalloc(RELAY_BUF);
				d->cap = RELAY_BUF;
			}
			n = recv(d->from, d->buf, RELAY_BUF, 0);
		}
		if (n < 0 && errno == ECONNRESET)
			n = 0;  /* gone, after everything it sent was read: its end */
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN ? 0 : -errno;
		}
		if (n == 0)
			d->eof = true;
		else if (d->sink)
			;       /* dropped */
		else if (d->copy)
			d->len = (size_t)n;
		else
			d->inpipe = (size_t)n;
	}
}

int relay_fds_pipes(struct relay_pipes *rp, int a, int b, const void *a_pending, size_t a_n,
		    const void *b_pending, size_t b_n)
{
	struct relay_pipes own = RELAY_PIPES_INIT, *pp = rp ? rp : &own;
	struct dir d[2] = {
		{ .from = a, .to = b, .pipe = pp->p[0] },
		{ .from = b, .to = a, .pipe = pp->p[1] },
	};
	const void *pending[2] = { a_pending, b_pending };
	size_t pending_n[2] = { a_n, b_n };
	bool hup[2] = { false, false }, go[2] = { true, true };
	int r = 0;

	for (int i = 0; i < 2; i++) {
		open_pipe(d[i].pipe);
		d[i].copy = d[i].pipe[0] < 0;
		if (pending_n[i]) {
			d[i].buf = xmalloc(pending_n[i]);
			memcpy(d[i].buf, pending[i], pending_n[i]);
			d[i].cap = d[i].len = pending_n[i];
		}
	}
	set_nonblock(a);
	set_nonblock(b);
	while (!(d[0].shut && d[1].shut)) {
		struct pollfd p[2] = { { .fd = a }, { .fd = b } };
		int wait_on[2] = { -1, -1 };   /* the p[] index d[i] waits for */

		/* Only a direction whose fd polled ready moves: a splice
		 * that can only say EAGAIN costs as much as one that moves
		 * bytes, and a short request would pay a few per wakeup. */
		for (int i = 0; i < 2 && r == 0; i++)
			if (go[i])
				r = step(&d[i]);
		if (r < 0 || (d[0].shut && d[1].shut))
			break;
		for (int i = 0; i < 2; i++) {
			/* d[i] reads from p[i] and writes to p[1 - i]. */
			if (d[i].off < d[i].len || d[i].inpipe) {
				p[1 - i].events |= POLLOUT;
				wait_on[i] = 1 - i;
			} else if (!d[i].eof) {
				p[i].events |= POLLIN;
				wait_on[i] = i;
			}
		}
		/* A hung-up fd polls ready for ever: leave it out unless we
		 * still read from it (the read then sees the EOF). */
		for (int i = 0; i < 2; i++)
			if (hup[i] && !(p[i].events & POLLIN))
				p[i].fd = -1;
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			break;
		}
		for (int i = 0; i < 2; i++) {
			int w = wait_on[i];
			short want = w == i ? POLLIN : POLLOUT;
			go[i] = w >= 0 && (p[w].revents & (want | POLLERR | POLLHUP | POLLNVAL));
		}
		for (int i = 0; i < 2; i++) {
			if (!(p[i].revents & (POLLHUP | POLLERR)))
				continue;
			hup[i] = true;
			/* Gone both ways after its EOF: nothing can reach it
			 * any more, so the other direction is over too. */
			if (d[i].eof && !(d[1 - i].off < d[1 - i].len || d[1 - i].inpipe)) {
				d[1 - i].eof = d[1 - i].shut = true;
				d[1 - i].len = d[1 - i].off = 0;
			}
		}
	}
	for (int i = 0; i < 2; i++) {
		/* the pending bytes may hold a secret (an injected header) */
		if (d[i].buf)
			explicit_bzero(d[i].buf, d[i].cap);
		free(d[i].buf);
		/* bytes left behind must not reach the next connection */
		if (d[i].inpipe || d[i].dirty)
			close_pipe(d[i].pipe);
	}
	if (!rp)
		relay_pipes_close(&own);
	return r;
}
