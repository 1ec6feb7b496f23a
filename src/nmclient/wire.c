/* wire.c - one fixed-size message per SOCK_SEQPACKET packet, with an fd. */
#include "wire.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int wire_send(int sock, const void *msg, size_t len, int fd)
{
	struct iovec iov = { .iov_base = (void *)msg, .iov_len = len };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (fd >= 0) {
		struct cmsghdr *c;
		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = sizeof(u.buf);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	for (;;) {
		ssize_t n = sendmsg(sock, &mh, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		return (size_t)n == len ? 0 : -EPROTO;
	}
}

int wire_recv(int sock, void *msg, size_t len, int *fd)
{
	struct iovec iov = { .iov_base = msg, .iov_len = len };
	union {
		char buf[CMSG_SPACE(sizeof(int) * 4)];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
	ssize_t n;
	int got = -1;

	if (fd)
		*fd = -1;
	do
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < nfd; i++) {
			int f;
			memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (got < 0 && fd)
				got = f;
			else
				close(f);
		}
	}
	if (n == 0) {
		if (got >= 0)
			close(got);
		return -EPIPE;
	}
	if ((size_t)n != len || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
		if (got >= 0)
			close(got);
		return -EPROTO;
	}
	if (fd)
		*fd = got;
	return 0;
}
