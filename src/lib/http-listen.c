/* http-listen.c - the server's listening socket: "HOST:PORT", "[IPV6]:PORT"
 * or "unix:/path". A unix socket is installed with mode 0660 under its final
 * name in one rename, and only a stale socket file is ever replaced.
 */
#include "http-internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>

/* ---- listening ---- */

void http_format_peer(const struct sockaddr_storage *ss, char *out, size_t n)
{
	char ip[INET6_ADDRSTRLEN];

	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
		inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
		snprintf(out, n, "%s:%u", ip, ntohs(a->sin_port));
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
		inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
		snprintf(out, n, "[%s]:%u", ip, ntohs(a->sin6_port));
	} else {
		snprintf(out, n, "unix");
	}
}

void http_format_peer_ip(const struct sockaddr_storage *ss, char *out, size_t n)
{
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
		inet_ntop(AF_INET, &a->sin_addr, out, (socklen_t)n);
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
		if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr))
			inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], out, (socklen_t)n);
		else
			inet_ntop(AF_INET6, &a->sin6_addr, out, (socklen_t)n);
	} else if (n) {
		out[0] = '\0';
	}
}

void http_format_peer_client(const struct sockaddr_storage *ss, char *out, size_t n)
{
	const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
	struct in6_addr net;
	char ip[INET6_ADDRSTRLEN];

	if (ss->ss_family != AF_INET6 || IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
		http_format_peer_ip(ss, out, n);
		return;
	}
	/* A site is given a /64 at least and each host on it picks its own
	 * interface id (SLAAC, privacy addresses that change by the hour): one
	 * machine has 2^64 addresses to open connections from, so the /64 is
	 * the smallest thing that stands for one client. The cost: hosts that
	 * share a /64 (one LAN behind a router) share a cap, as hosts behind
	 * one IPv4 NAT do. */
	net = a->sin6_addr;
	memset(&net.s6_addr[8], 0, 8);
	inet_ntop(AF_INET6, &net, ip, sizeof(ip));
	snprintf(out, n, "%s/64", ip);
}

static int listen_fd_ready(int fd, const char *what, err_t *err)
{
	if (listen(fd, SOMAXCONN) < 0)
		return err_sys(err, "listen on %s", what);
	return 0;
}

int http_split_host_port(const char *spec, char *host, size_t hn, char *port, size_t pn,
			 err_t *err)
{
	const char *colon;

	if (spec[0] == '[') {
		const char *close_br = strchr(spec, ']');
		if (!close_br || close_br[1] != ':')
			return err_set(err, EINVAL, "bad address `%s`: expected [IPV6]:PORT", spec);
		snprintf(host, hn, "%.*s", (int)(close_br - spec - 1), spec + 1);
		colon = close_br + 1;
	} else {
		colon = strrchr(spec, ':');
		if (!colon)
			return err_set(err, EINVAL, "bad address `%s`: expected HOST:PORT", spec);
		snprintf(host, hn, "%.*s", (int)(colon - spec), spec);
	}
	const char *p = colon + 1;
	if (!*p || strlen(p) > 5 || strspn(p, "0123456789") != strlen(p) || atoi(p) > 65535)
		return err_set(err, EINVAL, "bad port in `%s`", spec);
	snprintf(port, pn, "%s", p);
	return 0;
}

static void format_sockname(int fd, char *out, size_t n)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
		http_format_peer(&ss, out, n);
}

static int bind_inet(const struct addrinfo *ai, err_t *err)
{
	int one = 1;
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0)
		return err_sys(err, "socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ai->ai_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		err_sys(err, "bind");
		close(fd);
		return -err->code;
	}
	return fd;
}

int http_listen_inet(struct http_server *s, const char *spec, err_t *err)
{
	char host[256], port[8];
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *res = NULL;
	int fd = -1;

	if (http_split_host_port(spec, host, sizeof(host), port, sizeof(port), err) < 0)
		return -EINVAL;
	int r = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
	if (r != 0)
		return err_set(err, EINVAL, "cannot resolve `%s`: %s", spec, gai_strerror(r));
	for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next)
		fd = bind_inet(ai, err);
	freeaddrinfo(res);
	if (fd < 0)
		return err_wrap(err, "listen on %s", spec);
	if (listen_fd_ready(fd, spec, err) < 0) {
		close(fd);
		return -err->code;
	}
	s->lfd = fd;
	format_sockname(fd, s->addr, sizeof(s->addr));
	return 0;
}

/* Another process still accepting on the path? Non-blocking connect: a full
 * backlog (EAGAIN) also means alive. */
static bool unix_socket_alive(const struct sockaddr_un *sa)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	bool alive;

	if (fd < 0)
		return false;
	alive = connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0 || errno == EAGAIN;
	close(fd);
	return alive;
}

/* A leftover socket file from a previous run is replaced; anything else at
 * the path (a regular file, a live server) is an error, not collateral. */
static int check_unix_path(const struct sockaddr_un *sa, err_t *err)
{
	struct stat st;

	if (lstat(sa->sun_path, &st) < 0)
		return errno == ENOENT ? 0 : err_sys(err, "stat %s", sa->sun_path);
	if (!S_ISSOCK(st.st_mode))
		return err_set(err, EEXIST, "%s exists and is not a socket", sa->sun_path);
	if (unix_socket_alive(sa))
		return err_set(err, EADDRINUSE, "%s: another server is listening", sa->sun_path);
	return 0;
}

/* Bind under a temporary name, set the mode, then rename over the final
 * path: the socket is never reachable with a umask-derived mode, and a
 * stale file is replaced atomically. */
static int bind_unix(int fd, const struct sockaddr_un *sa, err_t *err)
{
	struct sockaddr_un tmp = { .sun_family = AF_UNIX };
	int n = snprintf(tmp.sun_path, sizeof(tmp.sun_path), "%s.%d.tmp", sa->sun_path,
			 (int)getpid());

	if (n < 0 || (size_t)n >= sizeof(tmp.sun_path)) {
		/* no room for a temporary name: plain bind, then chmod */
		unlink(sa->sun_path);
		if (bind(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0)
			return err_sys(err, "bind %s", sa->sun_path);
		if (chmod(sa->sun_path, 0660) < 0)
			return err_sys(err, "chmod %s", sa->sun_path);
		return 0;
	}
	unlink(tmp.sun_path);
	if (bind(fd, (const struct sockaddr *)&tmp, sizeof(tmp)) < 0)
		return err_sys(err, "bind %s", tmp.sun_path);
	if (chmod(tmp.sun_path, 0660) < 0 || rename(tmp.sun_path, sa->sun_path) < 0) {
		err_sys(err, "install %s", sa->sun_path);
		unlink(tmp.sun_path);
		return -err->code;
	}
	return 0;
}

int http_listen_unix(struct http_server *s, const char *path, err_t *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;

	if (!*path || strlen(path) >= sizeof(sa.sun_path))
		return err_set(err, ENAMETOOLONG, "bad unix socket path `%s`", path);
	strcpy(sa.sun_path, path);
	if (check_unix_path(&sa, err) < 0)
		return -err->code;
	_cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return err_sys(err, "socket");
	if (bind_unix(fd, &sa, err) < 0)
		return -err->code;
	if (listen_fd_ready(fd, path, err) < 0) {
		unlink(path);
		return -err->code;
	}
	if (stat(path, &st) < 0) {
		err_sys(err, "stat %s", path);
		unlink(path);
		return -err->code;
	}
	s->unix_path = xstrdup(path);
	s->unix_dev = st.st_dev;
	s->unix_ino = st.st_ino;
	snprintf(s->addr, sizeof(s->addr), "unix:%s", path);
	s->lfd = TAKE_FD(fd);
	return 0;
}

void http_unlink_own_socket(struct http_server *s)
{
	struct stat st;

	if (s->unix_path && stat(s->unix_path, &st) == 0 && st.st_dev == s->unix_dev &&
	    st.st_ino == s->unix_ino)
		unlink(s->unix_path);
}
