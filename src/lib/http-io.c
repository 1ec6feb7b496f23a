/* http-io.c - receive-buffer and socket helpers of the HTTP server and
 * client: growing and consuming the buffer a connection reads into, sending
 * without SIGPIPE, receiving with a timeout.
 */
#include "http-internal.h"

#include <errno.h>
#include <poll.h>
#include <string.h>

/* ---------------------------------------------------------------- helpers */

void http_buf_reserve(struct buf *b, size_t n)
{
	if (b->cap - b->len >= n + 1)
		return;
	size_t cap = b->cap ? b->cap : 256;
	while (cap - b->len < n + 1)
		cap *= 2;
	b->data = xrealloc(b->data, cap);
	b->cap = cap;
}

void http_buf_consume(struct buf *b, size_t n)
{
	if (n >= b->len) {
		buf_reset(b);
		return;
	}
	memmove(b->data, b->data + n, b->len - n);
	b->len -= n;
	b->data[b->len] = '\0';
}

/* ---------------------------------------------------------------- sending */

int http_send_iov(int fd, struct iovec *iov, size_t n)
{
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = n };

	while (m.msg_iovlen > 0) {
		ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -EPIPE;
		}
		while (m.msg_iovlen > 0 && (size_t)w >= m.msg_iov->iov_len) {
			w -= (ssize_t)m.msg_iov->iov_len;
			m.msg_iov++;
			m.msg_iovlen--;
		}
		if (m.msg_iovlen > 0) {
			m.msg_iov->iov_base = (char *)m.msg_iov->iov_base + w;
			m.msg_iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

int http_send_all(int fd, const void *p, size_t n)
{
	struct iovec iov = { .iov_base = (void *)p, .iov_len = n };
	return http_send_iov(fd, &iov, 1);
}

ssize_t http_recv_some(int fd, struct buf *b, size_t want, int timeout_ms)
{
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	bool polled = false;

	http_buf_reserve(b, want);
	for (;;) {
		ssize_t n = recv(fd, b->data + b->len, want, polled ? 0 : MSG_DONTWAIT);
		if (n >= 0) {
			b->len += (size_t)n;
			b->data[b->len] = '\0';
			return n;
		}
		if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		if (errno == EINTR)
			continue;
		int r = poll(&pf, 1, timeout_ms);
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r == 0)
			return -ETIMEDOUT;
		polled = r > 0;
	}
}
