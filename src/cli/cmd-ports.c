/* cmd-ports.c - `airlock port-forward SBX [LOCAL:]REMOTE`.
 *
 * Listens on 127.0.0.1:LOCAL (only loopback: the tunnel carries the
 * owner's authority, so it is not offered to the network) and, for each
 * connection, opens `GET /v1/sandboxes/{id}/tunnel/{REMOTE}` with
 * `Upgrade: airlock-tcp`; after the 101 the bytes are relayed both ways
 * with half-close, one thread per connection. LOCAL 0 picks a free port.
 * The line "Forwarding 127.0.0.1:L -> SBX:R" on stdout says when the
 * listener is ready. Runs until interrupted.
 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "../lib/relay.h"
#include "cli.h"

struct fwd {
	struct cli *cli;
	char *target;   /* /v1/sandboxes/{id}/tunnel/{port} */
};

struct fwd_conn {
	const struct fwd *f;
	int fd;
};

/* Read the answer head (up to the blank line) byte-wise-bounded; leftover
 * bytes after it go to *extra. Returns the status or -1. */
static int read_head(int fd, struct buf *in, size_t *head_len)
{
	for (;;) {
		char *end = in->len ? memmem(in->data, in->len, "\r\n\r\n", 4) : NULL;
		if (end) {
			*head_len = (size_t)(end - in->data) + 4;
			int status = 0;
			if (sscanf(in->data, "HTTP/1.%*c %d", &status) != 1)
				return -1;
			return status;
		}
		if (in->len > 16384)
			return -1;
		char tmp[4096];
		ssize_t n = recv(fd, tmp, sizeof(tmp), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		buf_add(in, tmp, (size_t)n);
	}
}

static void *conn_main(void *arg)
{
	struct fwd_conn *fc = arg;
	const struct fwd *f = fc->f;
	_cleanup_(buf_free) struct buf req = { 0 }, in = { 0 };
	char host[256];
	err_t err = { 0 };
	size_t head = 0;
	int up;

	up = http_dial(f->cli->url, host, sizeof(host), &err);
	if (up < 0) {
		fprintf(stderr, "airlock: port-forward: %s\n", err.msg);
		goto out;
	}
	buf_printf(&req, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
			 "Connection: Upgrade\r\nUpgrade: airlock-tcp\r\n\r\n",
		   f->target, host, f->cli->key ? f->cli->key : "");
	if (send(up, req.data, req.len, MSG_NOSIGNAL) < 0) {
		fprintf(stderr, "airlock: port-forward: send: %s\n", strerror(errno));
		goto out_up;
	}
	int status = read_head(up, &in, &head);
	if (status != 101) {
		/* The error body follows the head: show it (JSON). */
		fprintf(stderr, "airlock: port-forward: %d %s\n", status,
			head ? in.data + head : "(no answer)");
		goto out_up;
	}
	/* Bytes the sandbox sent right after the 101 are in `in`. */
	(void)relay_fds(fc->fd, up, NULL, 0, in.data + head, in.len - head);
out_up:
	close(up);
out:
	close(fc->fd);
	free(fc);
	return NULL;
}

static bool parse_spec(const char *s, long long *local, long long *remote)
{
	const char *colon = strchr(s, ':');

	if (!colon)
		return cli_parse_int(s, 1, 65535, remote) && ((*local = *remote), true);
	_cleanup_free_ char *l = xasprintf("%.*s", (int)(colon - s), s);
	return cli_parse_int(l, 0, 65535, local) && cli_parse_int(colon + 1, 1, 65535, remote);
}

int cmd_port_forward(struct cli *cli, int argc, char **argv)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sin);
	long long local, remote;
	int r, lfd, one = 1;

	if ((r = cli_only_common(cli, argc, argv, "port-forward", 2, 2)))
		return r;
	if (!parse_spec(argv[optind + 1], &local, &remote))
		return cli_usage("port-forward", "`%s` is not [LOCAL:]REMOTE (ports 1..65535)",
				 argv[optind + 1]);
	if ((r = cli_load(cli)))
		return r;
	_cleanup_free_ char *id = cli_escape(argv[optind]);
	struct fwd f = { .cli = cli, .target = xasprintf("/v1/sandboxes/%s/tunnel/%lld", id,
							  remote) };

	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		return cli_fail("internal", "socket: %s", strerror(errno));
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	sin.sin_port = htons((uint16_t)local);
	if (bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(lfd, 64) < 0) {
		r = cli_fail("bad_request", "cannot listen on 127.0.0.1:%lld: %s", local,
			     strerror(errno));
		close(lfd);
		free(f.target);
		return r;
	}
	getsockname(lfd, (struct sockaddr *)&sin, &sl);
	printf("Forwarding 127.0.0.1:%u -> %s:%lld\n", ntohs(sin.sin_port), argv[optind], remote);
	fflush(stdout);
	signal(SIGPIPE, SIG_IGN);
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE)
				continue;
			break;
		}
		struct fwd_conn *fc = xmalloc(sizeof(*fc));
		pthread_t t;
		fc->f = &f;
		fc->fd = fd;
		if (pthread_create(&t, NULL, conn_main, fc) != 0) {
			close(fd);
			free(fc);
			continue;
		}
		pthread_detach(t);
	}
	r = cli_fail("internal", "accept: %s", strerror(errno));
	close(lfd);
	free(f.target);
	return r;
}
