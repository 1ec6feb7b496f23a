/* relay.c - see relay.h. */
#include "relay.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>

#include "util.h"

struct dir {
	int from, to;
	char *buf;
	size_t len, off;
	bool eof;        /* read side ended */
	bool shut;       /* shutdown(to, SHUT_WR) done */
	bool sink;       /* the receiver is gone: read and drop until EOF */
};

static void set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Move what can be moved now. Returns 0 or -errno. */
static int step(struct dir *d)
{
	for (;;) {
		if (d->off < d->len) {
			ssize_t w = send(d->to, d->buf + d->off, d->len - d->off, MSG_NOSIGNAL);
			if (w < 0) {
				if (errno == EINTR)
					continue;
				if (errno == EPIPE || errno == ECONNRESET) {
					/* The receiver closed: this direction is
					 * over, but what it sent the other way
					 * still has to get through. Keep reading
					 * ours and drop it, so closing our end
					 * later does not reset the connection
					 * (a reset can discard an answer the
					 * sender has not read yet). */
					d->sink = true;
					d->len = d->off = 0;
					continue;
				}
				return errno == EAGAIN ? 0 : -errno;
			}
			d->off += (size_t)w;
			continue;
		}
		d->len = d->off = 0;
		if (d->eof) {
			if (!d->shut) {
				shutdown(d->to, SHUT_WR);
				d->shut = true;
			}
			return 0;
		}
		ssize_t n = recv(d->from, d->buf, RELAY_BUF, 0);
		if (n < 0 && errno == ECONNRESET)
			n = 0; /* gone, after everything it sent was read: its end */
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN ? 0 : -errno;
		}
		if (n == 0)
			d->eof = true;
		d->len = d->sink ? 0 : (size_t)n;
	}
}

int relay_fds(int a, int b, const void *a_pending, size_t a_n, const void *b_pending,
	      size_t b_n)
{
	struct dir d[2] = {
		{ .from = a, .to = b, .buf = xmalloc(RELAY_BUF + a_n) },
		{ .from = b, .to = a, .buf = xmalloc(RELAY_BUF + b_n) },
	};
	int r = 0;

	if (a_n)
		memcpy(d[0].buf, a_pending, a_n), d[0].len = a_n;
	if (b_n)
		memcpy(d[1].buf, b_pending, b_n), d[1].len = b_n;
	set_nonblock(a);
	set_nonblock(b);
	bool hup[2] = { false, false };
	while (!(d[0].shut && d[1].shut)) {
		struct pollfd p[2] = { { .fd = a }, { .fd = b } };
		for (int i = 0; i < 2 && r == 0; i++)
			r = step(&d[i]);
		if (r < 0 || (d[0].shut && d[1].shut))
			break;
		for (int i = 0; i < 2; i++) {
			/* d[i] reads from p[i] and writes to p[1 - i]. */
			if (d[i].off < d[i].len)
				p[1 - i].events |= POLLOUT;
			else if (!d[i].eof)
				p[i].events |= POLLIN;
		}
		/* A hung-up fd polls ready for ever: leave it out unless we
		 * still read from it (the read then sees the EOF). */
		for (int i = 0; i < 2; i++)
			if (hup[i] && !(p[i].events & POLLIN))
				p[i].fd = -1;
		if (poll(p, 2, -1) < 0 && errno != EINTR) {
			r = -errno;
			break;
		}
		for (int i = 0; i < 2; i++) {
			if (!(p[i].revents & (POLLHUP | POLLERR)))
				continue;
			hup[i] = true;
			/* Gone both ways after its EOF: nothing can reach it
			 * any more, so the other direction is over too. */
			if (d[i].eof && !(d[1 - i].off < d[1 - i].len)) {
				d[1 - i].eof = d[1 - i].shut = true;
				d[1 - i].len = d[1 - i].off = 0;
			}
		}
	}
	free(d[0].buf);
	free(d[1].buf);
	return r;
}
