/* http-server.c - the HTTP/1.1 server: an accept thread, one thread per
 * connection that reads requests (keep-alive) and runs the handler on each,
 * and starting and stopping it all. What a handler sends is in
 * http-respond.c, the listening socket in http-listen.c.
 */
#include "http-internal.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>

#include "log.h"

/* An idle keep-alive connection holds a thread; a started request must keep
 * making progress. Both bound what a slow or silent peer can tie up. */
#define HTTP_IDLE_TIMEOUT_MS (120 * 1000)
#define HTTP_READ_TIMEOUT_MS (30 * 1000)
#define HTTP_SEND_TIMEOUT_S 120
/* After an error response, read and discard what the client is still sending
 * for a short while, so our close does not turn into a RST that destroys the
 * response before the client reads it. */
#define HTTP_LINGER_MS 1000
#define HTTP_LINGER_BYTES (4 * 1024 * 1024)

/* ----------------------------------------------------------------- server */

/* ---- reading one request from a connection ---- */

/* Returns 1 with the head length in *head_len, 0 when the connection ended
 * or went idle (close quietly), or -EINVAL for an oversized head. */
static int read_head(struct http_conn *c, size_t *head_len)
{
	size_t scanned = 0;

	for (;;) {
		size_t skip = http_skip_blank_lines(c->in.data ? c->in.data : "", c->in.len);
		if (skip) {
			http_buf_consume(&c->in, skip);
			scanned = 0;
		}
		*head_len = http_find_head_end(c->in.data, c->in.len, &scanned);
		if (*head_len)
			return *head_len > HTTP_MAX_HEAD ? -EINVAL : 1;
		if (c->in.len >= HTTP_MAX_HEAD)
			return -EINVAL;
		int tmo = c->in.len ? HTTP_READ_TIMEOUT_MS : HTTP_IDLE_TIMEOUT_MS;
		if (http_recv_some(c->fd, &c->in, HTTP_IO_CHUNK, tmo) <= 0)
			return 0;
	}
}

static int read_body_clen(struct http_conn *c, struct http_req *req, size_t head, size_t clen)
{
	struct buf body;
	size_t have = c->in.len - head < clen ? c->in.len - head : clen;

	buf_init(&body);
	http_buf_reserve(&body, clen);
	buf_add(&body, c->in.data + head, have);
	http_buf_consume(&c->in, head + have);
	/* read the rest straight into the body: no copy for large uploads */
	while (body.len < clen) {
		if (http_recv_some(c->fd, &body, clen - body.len, HTTP_READ_TIMEOUT_MS) <= 0) {
			buf_free(&body);
			return 0;
		}
	}
	req->body_len = body.len;
	req->body = buf_steal(&body);
	return 1;
}

static int read_body_chunked(struct http_conn *c, struct http_req *req, size_t head,
			     err_t *err)
{
	_cleanup_(buf_free) struct buf body = { 0 };
	struct dechunk d;
	size_t used;

	http_dechunk_init(&d, c->srv->max_body);
	http_buf_consume(&c->in, head);
	for (;;) {
		int r = http_dechunk_feed(&d, c->in.data, c->in.len, &used, http_emit_to_buf,
					  &body);
		http_buf_consume(&c->in, used);
		if (r == -EFBIG)
			return err_set(err, EFBIG, "request body too large (max %zu bytes)",
				       c->srv->max_body);
		if (r < 0)
			return err_set(err, EINVAL, "malformed chunked body");
		if (d.state == DC_DONE)
			break;
		if (http_recv_some(c->fd, &c->in, HTTP_IO_CHUNK, HTTP_READ_TIMEOUT_MS) <= 0)
			return 0;
	}
	if (!body.data)
		buf_adds(&body, "");
	req->body_len = body.len;
	req->body = buf_steal(&body);
	return 1;
}

static int send_continue(struct http_conn *c)
{
	static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
	return http_send_all(c->fd, cont, sizeof(cont) - 1);
}

/* Returns 1 with req filled, 0 to close quietly (EOF, timeout, I/O error),
 * or <0 (-EINVAL, -EFBIG, -ENOSYS) with err set for an error response. */
static int read_request(struct http_conn *c, struct http_req *req, struct req_info *info,
			err_t *err)
{
	size_t head;
	int r = read_head(c, &head);

	memset(req, 0, sizeof(*req));
	if (r == -EINVAL)
		return err_set(err, EINVAL, "request head too large (max %d bytes)", HTTP_MAX_HEAD);
	if (r <= 0)
		return r;
	if (http_parse_request_head(c->in.data, head, req, info, err) < 0)
		return -err->code;
	snprintf(req->peer, sizeof(req->peer), "%s", c->peer);
	c->http10 = info->http10;
	c->keep_alive = info->keep_alive;
	if (info->has_clen && info->clen > c->srv->max_body)
		return err_set(err, EFBIG, "request body too large (max %zu bytes)",
			       c->srv->max_body);
	bool body_pending = (info->chunked || info->clen > 0) && c->in.len == head;
	if (info->expect_continue && body_pending && send_continue(c) < 0)
		return 0;
	if (info->chunked)
		return read_body_chunked(c, req, head, err);
	return read_body_clen(c, req, head, (size_t)info->clen);
}

/* ---- connection thread ---- */

static void linger_close(struct http_conn *c)
{
	char junk[16384];
	size_t total = 0;
	uint64_t deadline = now_ms() + HTTP_LINGER_MS;

	shutdown(c->fd, SHUT_WR);
	while (total < HTTP_LINGER_BYTES && !server_stopping(c->srv)) {
		uint64_t now = now_ms();
		struct pollfd pf = { .fd = c->fd, .events = POLLIN };
		if (now >= deadline || poll(&pf, 1, (int)(deadline - now)) <= 0)
			break;
		ssize_t n = recv(c->fd, junk, sizeof(junk), 0);
		if (n <= 0)
			break;
		total += (size_t)n;
	}
}

static void reply_parse_error(struct http_conn *c, int r, const err_t *err)
{
	c->state = RESP_NONE;
	c->keep_alive = false;
	c->is_head = false;
	if (r == -EFBIG)
		http_respond_error(c, 413, "body_too_large", "%s", err->msg);
	else if (r == -ENOSYS)
		http_respond_error(c, 501, "not_supported", "%s", err->msg);
	else
		http_respond_error(c, 400, "bad_request", "%s", err->msg);
	linger_close(c);
}

/* Runs the handler and makes sure exactly one complete response went out.
 * Returns whether the connection can carry another request. */
static bool serve_one(struct http_conn *c, struct http_req *req)
{
	c->state = RESP_NONE;
	c->is_head = strcmp(req->method, "HEAD") == 0;
	c->srv->fn(c->srv->ctx, req, c);
	if (c->state == RESP_NONE) {
		log_err("http: handler for %s %s returned without a response", req->method,
			req->path);
		http_respond_error(c, 500, "internal", "handler did not respond");
	} else if (c->state == RESP_STREAM) {
		/* unterminated stream: closing tells the client it was cut short */
		c->keep_alive = false;
	}
	return c->keep_alive && !c->broken && !server_stopping(c->srv);
}

static void conn_unregister(struct http_conn *c)
{
	struct http_server *s = c->srv;

	pthread_mutex_lock(&s->mu);
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (--s->n_conns == 0)
		pthread_cond_broadcast(&s->idle);
	pthread_mutex_unlock(&s->mu);
}

static void *conn_main(void *arg)
{
	struct http_conn *c = arg;

	for (;;) {
		struct http_req req;
		struct req_info info;
		err_t err = { 0 };
		int r = read_request(c, &req, &info, &err);
		if (r < 0)
			reply_parse_error(c, r, &err);
		bool again = r > 0 && serve_one(c, &req);
		http_req_free(&req);
		if (!again)
			break;
	}
	/* unregister before close: http_server_stop shuts down fds from the
	 * list, and a closed fd number may already belong to someone else */
	conn_unregister(c);
	close(c->fd);
	buf_free(&c->in);
	free(c);
	return NULL;
}

static void tune_accepted(int fd, int family)
{
	int one = 1;
	struct timeval tv = { .tv_sec = HTTP_SEND_TIMEOUT_S };

	/* responses are written whole or per stream chunk: Nagle only adds
	 * latency to the exec round trip */
	if (family == AF_INET || family == AF_INET6)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* a client that stops reading must not pin a thread forever */
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static bool conn_register(struct http_server *s, struct http_conn *c)
{
	bool ok;

	pthread_mutex_lock(&s->mu);
	ok = !s->stopping && s->n_conns < HTTP_MAX_CONNS;
	if (ok) {
		c->next = s->conns;
		if (s->conns)
			s->conns->prev = c;
		s->conns = c;
		s->n_conns++;
	}
	pthread_mutex_unlock(&s->mu);
	return ok;
}

static void start_conn(struct http_server *s, int fd, const struct sockaddr_storage *ss)
{
	struct http_conn *c = xcalloc(1, sizeof(*c));
	pthread_attr_t attr;
	pthread_t t;

	c->srv = s;
	c->fd = fd;
	buf_init(&c->in);
	http_format_peer(ss, c->peer, sizeof(c->peer));
	tune_accepted(fd, ss->ss_family);
	if (!conn_register(s, c)) {
		log_warn("http: refusing connection from %s (limit or shutdown)", c->peer);
		close(fd);
		free(c);
		return;
	}
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	int r = pthread_create(&t, &attr, conn_main, c);
	pthread_attr_destroy(&attr);
	if (r != 0) {
		log_err("http: cannot start connection thread: %s", strerror(r));
		conn_unregister(c);
		close(fd);
		free(c);
	}
}

static void *accept_main(void *arg)
{
	struct http_server *s = arg;
	struct pollfd pf[2] = { { .fd = s->lfd, .events = POLLIN },
				{ .fd = s->wake_fd, .events = POLLIN } };

	for (;;) {
		if (poll(pf, 2, -1) < 0 && errno != EINTR) {
			log_err("http: accept loop on %s stopped: poll: %m", s->addr);
			break;
		}
		if (pf[1].revents)
			break;
		if (!(pf[0].revents & POLLIN))
			continue;
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd = accept4(s->lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
		if (fd < 0) {
			/* out of fds or memory: back off instead of spinning */
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
				poll(NULL, 0, 50);
			continue;
		}
		start_conn(s, fd, &ss);
	}
	return NULL;
}

/* ---- starting and stopping ---- */

static void server_free(struct http_server *s)
{
	if (s->lfd >= 0)
		close(s->lfd);
	if (s->wake_fd >= 0)
		close(s->wake_fd);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->idle);
	free(s->unix_path);
	free(s);
}

struct http_server *http_server_start(const char *listen_addr, size_t max_body,
				      http_handler_fn fn, void *ctx, err_t *err)
{
	struct http_server *s = xcalloc(1, sizeof(*s));
	int r;

	s->lfd = -1;
	s->max_body = max_body;
	s->fn = fn;
	s->ctx = ctx;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->idle, NULL);
	s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->wake_fd < 0) {
		err_sys(err, "eventfd");
		goto fail;
	}
	if (strncmp(listen_addr, "unix:", 5) == 0)
		r = http_listen_unix(s, listen_addr + 5, err);
	else
		r = http_listen_inet(s, listen_addr, err);
	if (r < 0)
		goto fail;
	r = pthread_create(&s->thread, NULL, accept_main, s);
	if (r != 0) {
		err_set(err, r, "cannot start accept thread");
		http_unlink_own_socket(s);
		goto fail;
	}
	return s;
fail:
	server_free(s);
	return NULL;
}

void http_server_stop(struct http_server *s)
{
	uint64_t one = 1;

	if (!s)
		return;
	if (write(s->wake_fd, &one, sizeof(one)) < 0)
		log_warn("http: cannot wake accept thread: %m");
	pthread_join(s->thread, NULL);
	close(s->lfd);
	s->lfd = -1;
	http_unlink_own_socket(s);

	pthread_mutex_lock(&s->mu);
	__atomic_store_n(&s->stopping, true, __ATOMIC_RELEASE);
	/* wakes threads blocked in recv/send/poll; handlers that stream see
	 * -EPIPE or http_conn_peer_closed() and return */
	for (struct http_conn *c = s->conns; c; c = c->next)
		shutdown(c->fd, SHUT_RDWR);
	while (s->n_conns > 0)
		pthread_cond_wait(&s->idle, &s->mu);
	pthread_mutex_unlock(&s->mu);
	server_free(s);
}

const char *http_server_addr(const struct http_server *s)
{
	return s->addr;
}
