/* http-server.c - the HTTP/1.1 server: a pool of threads that each accept
 * a connection, read its requests (keep-alive) and run the handler on each,
 * then go back to accepting; and starting and stopping it all. What a
 * handler sends is in http-respond.c, the listening socket in
 * http-listen.c.
 *
 * The thread that accepts a connection serves it itself (leader/follower):
 * no thread is created and none handed the connection on the request's
 * path, which costs a clone and a wakeup of a fresh thread per connection
 * (the api dials the node anew for every request it forwards). At least
 * one thread waits in accept; the one that takes the last idle slot starts
 * another before serving, and a thread whose connection ended goes back to
 * waiting unless HTTP_IDLE_THREADS already are.
 */
#include "http-internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include "log.h"
#include "tls.h"

/* A started body must keep making progress (each wait for more of it lasts
 * at most this); the head has a deadline of its own (opts.head_timeout_ms)
 * and only an authenticated client gets this far when the server has a head
 * hook. */
#define HTTP_READ_TIMEOUT_MS (30 * 1000)
#define HTTP_SEND_TIMEOUT_S 120
/* After an error response, read and discard what the client is still sending
 * for a short while, so our close does not turn into a RST that destroys the
 * response before the client reads it. */
#define HTTP_LINGER_MS 1000
#define HTTP_LINGER_BYTES (4 * 1024 * 1024)

/* Threads kept waiting in accept between connections; more exit. */
#define HTTP_IDLE_THREADS 4

/* read_request: the head hook answered; the body was not read. */
#define REQ_ANSWERED 2

/* ----------------------------------------------------------------- server */

/* ---- the budget of request bodies in flight ---- */

/* Reserve n more bytes of the server's body budget for c's request. */
static bool budget_take(struct http_conn *c, size_t n)
{
	struct http_server *s = c->srv;
	bool ok;

	if (!s->opts.body_budget || !n)
		return true;
	pthread_mutex_lock(&s->mu);
	ok = n <= s->opts.body_budget - s->body_inflight;
	if (ok) {
		s->body_inflight += n;
		c->body_reserved += n;
	}
	pthread_mutex_unlock(&s->mu);
	return ok;
}

/* Once the request's body is freed. */
static void budget_release(struct http_conn *c)
{
	struct http_server *s = c->srv;

	if (!c->body_reserved)
		return;
	pthread_mutex_lock(&s->mu);
	s->body_inflight -= c->body_reserved;
	pthread_mutex_unlock(&s->mu);
	c->body_reserved = 0;
}

/* ---- reading one request from a connection ---- */

/* The whole head must arrive by one deadline, so a peer sending a byte now
 * and then cannot hold the connection (a per-read timeout would restart on
 * every byte). A connection's first head counts from accept: a silent
 * connection is closed as soon; a later one from its first byte, after up to
 * idle_timeout_ms of keep-alive quiet (unauth_idle_timeout_ms until the
 * connection has carried a valid credential).
 * Returns 1 with the head length in *head_len, 0 when the connection ended
 * or went idle (close quietly), -EINVAL for an oversized head, or -ETIMEDOUT
 * when part of a head came but not all of it in time. */
static int read_head(struct http_conn *c, bool first, size_t *head_len)
{
	const struct http_server_opts *o = &c->srv->opts;
	uint64_t deadline = first ? c->accepted_ms + (uint64_t)o->head_timeout_ms : 0;
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
		int tmo = c->authenticated ? o->idle_timeout_ms : o->unauth_idle_timeout_ms;
		if (c->in.len && !deadline)
			deadline = now_ms() + (uint64_t)o->head_timeout_ms;
		if (deadline) {
			uint64_t now = now_ms();
			if (now >= deadline)
				return c->in.len ? -ETIMEDOUT : 0;
			tmo = (int)(deadline - now);
		}
		ssize_t n = http_recv_some(c->fd, &c->in, HTTP_IO_CHUNK, tmo);
		if (n == -ETIMEDOUT && c->in.len)
			return -ETIMEDOUT;
		if (n <= 0)
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

	http_dechunk_init(&d, c->srv->opts.max_body);
	http_buf_consume(&c->in, head);
	for (;;) {
		int r = http_dechunk_feed(&d, c->in.data, c->in.len, &used, http_emit_to_buf,
					  &body);
		http_buf_consume(&c->in, used);
		if (r == -EFBIG)
			return err_set(err, EFBIG, "request body too large (max %zu bytes)",
				       c->srv->opts.max_body);
		if (r < 0)
			return err_set(err, EINVAL, "malformed chunked body");
		/* the size is not known ahead: reserve as the body grows */
		if (body.len > c->body_reserved &&
		    !budget_take(c, body.len - c->body_reserved + HTTP_IO_CHUNK))
			return err_set(err, EBUSY, "too many request bodies in flight");
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

static void linger_close(struct http_conn *c);

/* The head hook decides before any body byte is read. Returns whether the
 * request goes on; if not, it has been answered. */
static bool run_head_hook(struct http_conn *c, struct http_req *req, bool body_expected)
{
	bool ka = c->keep_alive;

	c->state = RESP_NONE;
	c->is_head = strcmp(req->method, "HEAD") == 0;
	/* answered without reading an announced body: the body's bytes would
	 * be read as the next request, so the connection ends */
	c->keep_alive = ka && !body_expected;
	if (c->srv->opts.head_fn(c->srv->ctx, req, c)) {
		c->keep_alive = ka;
		c->state = RESP_NONE;
		return true;
	}
	if (c->state == RESP_NONE) {
		log_err("http: head hook for %s %s returned without a response", req->method,
			req->path);
		http_respond_error(c, 500, "internal", "head hook did not respond");
	}
	if (body_expected)
		linger_close(c);
	return false;
}

/* Returns 1 with req filled, REQ_ANSWERED when the head hook answered, 0 to
 * close quietly (EOF, idle, I/O error), or <0 (-EINVAL, -EFBIG, -ENOSYS,
 * -ETIMEDOUT, -EBUSY) with err set for an error response. */
static int read_request(struct http_conn *c, bool first, struct http_req *req,
			struct req_info *info, err_t *err)
{
	const struct http_server_opts *o = &c->srv->opts;
	size_t head;
	int r = read_head(c, first, &head);

	memset(req, 0, sizeof(*req));
	if (r == -EINVAL)
		return err_set(err, EINVAL, "request head too large (max %d bytes)", HTTP_MAX_HEAD);
	if (r == -ETIMEDOUT)
		return err_set(err, ETIMEDOUT, "request head not complete within %d ms",
			       o->head_timeout_ms);
	if (r <= 0)
		return r;
	if (http_parse_request_head(c->in.data, head, req, info, err) < 0)
		return -err->code;
	snprintf(req->peer, sizeof(req->peer), "%s", c->peer);
	req->peer_uid = c->peer_uid;
	/* a new request: the last one's id and headers are not its own */
	c->req_hdr[0] = '\0';
	log_set_request_id(NULL);
	c->http10 = info->http10;
	c->keep_alive = info->keep_alive;
	req->body_declared = info->clen;
	req->body_chunked = info->chunked;
	if (info->has_clen && info->clen > o->max_body)
		return err_set(err, EFBIG, "request body too large (max %zu bytes)", o->max_body);
	bool body_expected = info->chunked || info->clen > 0;
	if (o->head_fn && !run_head_hook(c, req, body_expected))
		return REQ_ANSWERED;
	if (info->has_clen && !budget_take(c, (size_t)info->clen))
		return err_set(err, EBUSY, "too many request bodies in flight");
	bool body_pending = body_expected && c->in.len == head;
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
	static const char busy[] = "{\"error\":{\"code\":\"busy\",\"message\":"
				   "\"too many request bodies in flight; retry\"}}";

	c->state = RESP_NONE;
	c->keep_alive = false;
	c->is_head = false;
	if (r == -EFBIG)
		http_respond_error(c, 413, "body_too_large", "%s", err->msg);
	else if (r == -ETIMEDOUT)
		http_respond_error(c, 408, "request_timeout", "%s", err->msg);
	else if (r == -EBUSY)
		http_respond(c, 503, "application/json", busy, sizeof(busy) - 1,
			     "Retry-After: 1\r\n");
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
		if (c->held.len && !c->broken)
			(void)http_send_all(c->fd, c->held.data, c->held.len);
	}
	buf_reset(&c->held);
	return c->keep_alive && !c->broken && !server_stopping(c->srv);
}

static void tune_accepted(int fd, int family);

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
	s->n_conns--;
	pthread_cond_broadcast(&s->idle);
	pthread_mutex_unlock(&s->mu);
}

/* TLS: hand the socket to a relay and talk through its plain end from
 * here on. False when the handshake failed (nothing to answer: the client
 * could not read it, or was already told it needs TLS). */
static bool conn_start_tls(struct http_conn *c)
{
	err_t err = { 0 };
	int pfd = tls_server_wrap(c->srv->opts.tls, c->fd,
				  c->accepted_ms + (uint64_t)c->srv->opts.head_timeout_ms, &err);

	if (pfd < 0) {
		log_debug("http: %s: %s", c->peer, err.msg);
		return false;
	}
	tune_accepted(pfd, AF_UNIX);
	/* under the lock: http_server_stop shuts the listed fds down */
	pthread_mutex_lock(&c->srv->mu);
	c->fd = pfd;   /* the relay owns the TCP socket now */
	pthread_mutex_unlock(&c->srv->mu);
	return true;
}

/* Serve c until it ends, then close and free it. */
static void conn_serve(struct http_conn *c)
{
	bool first = true;

	for (;;) {
		if (first && c->srv->opts.tls && !conn_start_tls(c))
			break;
		struct http_req req;
		struct req_info info;
		err_t err = { 0 };
		int r = read_request(c, first, &req, &info, &err);
		bool again;
		first = false;
		if (r < 0)
			reply_parse_error(c, r, &err);
		if (r == REQ_ANSWERED)
			again = c->keep_alive && !c->broken && !server_stopping(c->srv);
		else
			again = r > 0 && serve_one(c, &req);
		http_req_free(&req);
		budget_release(c);
		if (!again)
			break;
	}
	/* unregister before close: http_server_stop shuts down fds from the
	 * list, and a closed fd number may already belong to someone else */
	conn_unregister(c);
	close(c->fd);
	buf_free(&c->in);
	buf_free(&c->held);
	free(c);
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

/* Under s->mu. */
static unsigned conns_from(const struct http_server *s, const char *client)
{
	unsigned n = 0;

	for (const struct http_conn *c = s->conns; c; c = c->next)
		n += strcmp(c->client, client) == 0;
	return n;
}

/* 0, or why not: -ESHUTDOWN, -EMFILE (the server is full), -EUSERS (this
 * client address has max_conns_per_client). */
static int conn_register(struct http_server *s, struct http_conn *c, bool exempt)
{
	unsigned cap = exempt ? 0 : s->opts.max_conns_per_client;
	int r = 0;

	pthread_mutex_lock(&s->mu);
	if (s->stopping)
		r = -ESHUTDOWN;
	else if (s->n_conns >= HTTP_MAX_CONNS)
		r = -EMFILE;
	else if (cap && c->client[0] && conns_from(s, c->client) >= cap)
		r = -EUSERS;
	if (r == 0) {
		c->next = s->conns;
		if (s->conns)
			s->conns->prev = c;
		s->conns = c;
		s->n_conns++;
	}
	pthread_mutex_unlock(&s->mu);
	return r;
}

/* A flood of refusals must not become a flood of log lines: at most one a
 * second, with the count of those not logged. */
static void log_refused(struct http_server *s, const char *peer, int why)
{
	uint64_t now = now_ms();
	unsigned unlogged;

	pthread_mutex_lock(&s->mu);
	if (s->refused_log_ms && now - s->refused_log_ms < 1000) {
		s->refused_unlogged++;
		pthread_mutex_unlock(&s->mu);
		return;
	}
	unlogged = s->refused_unlogged;
	s->refused_log_ms = now;
	s->refused_unlogged = 0;
	pthread_mutex_unlock(&s->mu);
	log_warn("http: refusing connection from %s (%s; %u more refused since the last "
		 "such line)", peer,
		 why == -EUSERS ? "too many from this address"
				: why == -EMFILE ? "server full" : "shutting down",
		 unlogged);
}

/* Refuse at once: a canned answer sent without waiting (the
 * socket's send buffer is empty), then close; no thread, no reading. */
static void refuse(int fd, int why)
{
	static const char busy_client[] =
		"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
		"Retry-After: 1\r\nConnection: close\r\nContent-Length: 80\r\n\r\n"
		"{\"error\":{\"code\":\"too_many_connections\",\"message\":\"too many from this address\"}}";
	static const char full[] =
		"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
		"Retry-After: 1\r\nConnection: close\r\nContent-Length: 52\r\n\r\n"
		"{\"error\":{\"code\":\"busy\",\"message\":\"server is full\"}}";

	if (why == -EUSERS)
		(void)!send(fd, busy_client, sizeof(busy_client) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
	else if (why == -EMFILE)
		(void)!send(fd, full, sizeof(full) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
	close(fd);
}

/* Who connected to a unix socket, by the credentials the kernel recorded
 * at connect (they cannot be sent, only held); HTTP_NO_UID otherwise. */
static uid_t peer_uid(int fd, int family)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (family != AF_UNIX || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return HTTP_NO_UID;
	return cred.uid;
}

/* The connection fd just accepted, registered, or refused and closed.
 * Returns it ready to serve, or NULL. */
static struct http_conn *conn_new(struct http_server *s, int fd,
				  const struct sockaddr_storage *ss)
{
	struct http_conn *c = xcalloc(1, sizeof(*c));

	c->srv = s;
	c->fd = fd;
	c->accepted_ms = now_ms();
	buf_init(&c->in);
	buf_init(&c->held);
	http_format_peer(ss, c->peer, sizeof(c->peer));
	http_format_peer_ip(ss, c->ip, sizeof(c->ip));
	http_format_peer_client(ss, c->client, sizeof(c->client));
	c->peer_uid = peer_uid(fd, ss->ss_family);
	int why = conn_register(s, c, false);
	if (why == -EUSERS && s->opts.exempt_fn && s->opts.exempt_fn(s->ctx, c->ip))
		why = conn_register(s, c, true);
	if (why < 0) {
		log_refused(s, c->peer, why);
		refuse(fd, why);
		free(c);
		return NULL;
	}
	tune_accepted(fd, ss->ss_family);
	return c;
}

static void *worker_main(void *arg);

/* Under s->mu. False when no thread could be started (the caller goes on:
 * the threads serving now come back to accepting when done). */
static bool worker_spawn_locked(struct http_server *s)
{
	pthread_attr_t attr;
	pthread_t t;
	int r;

	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	r = pthread_create(&t, &attr, worker_main, s);
	pthread_attr_destroy(&attr);
	if (r != 0) {
		log_err("http: cannot start a server thread: %s", strerror(r));
		return false;
	}
	s->n_workers++;
	s->n_idle++;
	return true;
}

/* Waits for a connection and accepts it; the listening socket is
 * non-blocking, shared by every idle thread of the pool. Each thread has
 * its own epoll set holding the socket with EPOLLEXCLUSIVE, so a
 * connection wakes one of them, not all; the stop eventfd (not exclusive)
 * wakes all. Returns the fd, -EAGAIN to try again, -ESHUTDOWN to stop. */
static int worker_accept(struct http_server *s, int ep, struct sockaddr_storage *ss)
{
	struct epoll_event ev[2];
	socklen_t sl = sizeof(*ss);
	int n, fd;

	/* The timeout is a backstop only: should a wakeup ever go to a
	 * thread that was already busy, a connection waits at most this. */
	n = epoll_wait(ep, ev, 2, 1000);
	if (n < 0 && errno != EINTR) {
		log_err("http: accept loop on %s stopped: epoll_wait: %m", s->addr);
		return -ESHUTDOWN;
	}
	if (server_stopping(s))
		return -ESHUTDOWN;
	for (int i = 0; i < n; i++)
		if (ev[i].data.fd == s->wake_fd)
			return -ESHUTDOWN;
	fd = accept4(s->lfd, (struct sockaddr *)ss, &sl, SOCK_CLOEXEC);
	if (fd >= 0)
		return fd;
	/* out of fds or memory: back off instead of spinning */
	if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
		poll(NULL, 0, 50);
	return -EAGAIN;
}

static void *worker_main(void *arg)
{
	struct http_server *s = arg;
	struct epoll_event lev = { .events = EPOLLIN | EPOLLEXCLUSIVE, .data.fd = s->lfd };
	struct epoll_event wev = { .events = EPOLLIN, .data.fd = s->wake_fd };
	int ep = epoll_create1(EPOLL_CLOEXEC);
	bool idle = true;   /* counted in s->n_idle (worker_spawn_locked did) */

	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, s->lfd, &lev) < 0 ||
	    epoll_ctl(ep, EPOLL_CTL_ADD, s->wake_fd, &wev) < 0)
		log_err("http: server thread on %s: epoll: %m", s->addr);
	else
		for (;;) {
			struct sockaddr_storage ss;
			int fd = worker_accept(s, ep, &ss);

			if (fd == -ESHUTDOWN)
				break;
			if (fd < 0)
				continue;
			pthread_mutex_lock(&s->mu);
			idle = false;
			/* Someone must be left waiting for the next connection. */
			if (--s->n_idle == 0 && !s->stopping)
				worker_spawn_locked(s);
			pthread_mutex_unlock(&s->mu);
			struct http_conn *c = conn_new(s, fd, &ss);
			if (c)
				conn_serve(c);
			pthread_mutex_lock(&s->mu);
			bool stay = !s->stopping && s->n_idle < HTTP_IDLE_THREADS;
			if (stay) {
				s->n_idle++;
				idle = true;
			}
			pthread_mutex_unlock(&s->mu);
			if (!stay)
				break;
		}
	if (ep >= 0)
		close(ep);
	/* The count is touched last: http_server_stop frees s once it is 0. */
	pthread_mutex_lock(&s->mu);
	if (idle)
		s->n_idle--;
	s->n_workers--;
	pthread_cond_broadcast(&s->idle);
	pthread_mutex_unlock(&s->mu);
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
	struct http_server_opts o = { .max_body = max_body };

	return http_server_start_opts(listen_addr, &o, fn, ctx, err);
}

struct http_server *http_server_start_opts(const char *listen_addr,
					   const struct http_server_opts *opts,
					   http_handler_fn fn, void *ctx, err_t *err)
{
	struct http_server *s = xcalloc(1, sizeof(*s));
	int r;

	s->lfd = -1;
	s->opts = *opts;
	if (s->opts.head_timeout_ms <= 0)
		s->opts.head_timeout_ms = HTTP_HEAD_TIMEOUT_MS;
	if (s->opts.idle_timeout_ms <= 0)
		s->opts.idle_timeout_ms = HTTP_IDLE_TIMEOUT_MS;
	if (s->opts.unauth_idle_timeout_ms <= 0)
		s->opts.unauth_idle_timeout_ms = s->opts.idle_timeout_ms;
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
	/* Shared by the pool's idle threads: whoever loses the race for a
	 * connection gets EAGAIN, not a block. */
	(void)fcntl(s->lfd, F_SETFL, fcntl(s->lfd, F_GETFL) | O_NONBLOCK);
	pthread_mutex_lock(&s->mu);
	bool ok = worker_spawn_locked(s);
	if (ok)
		worker_spawn_locked(s);   /* a spare: the first connection spawns none */
	pthread_mutex_unlock(&s->mu);
	if (!ok) {
		err_set(err, EAGAIN, "cannot start server thread");
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
	pthread_mutex_lock(&s->mu);
	__atomic_store_n(&s->stopping, true, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&s->mu);
	/* wakes every idle thread (level-triggered, never read) */
	if (write(s->wake_fd, &one, sizeof(one)) < 0)
		log_warn("http: cannot wake server threads: %m");

	pthread_mutex_lock(&s->mu);
	/* wakes threads blocked in recv/send/poll; handlers that stream see
	 * -EPIPE or http_conn_peer_closed() and return. A connection accepted
	 * from now on is refused (conn_register). */
	for (struct http_conn *c = s->conns; c; c = c->next)
		shutdown(c->fd, SHUT_RDWR);
	while (s->n_conns > 0 || s->n_workers > 0) {
		pthread_cond_wait(&s->idle, &s->mu);
		for (struct http_conn *c = s->conns; c; c = c->next)
			shutdown(c->fd, SHUT_RDWR);
	}
	pthread_mutex_unlock(&s->mu);
	/* no thread uses the socket any more */
	close(s->lfd);
	s->lfd = -1;
	http_unlink_own_socket(s);
	server_free(s);
}

const char *http_server_addr(const struct http_server *s)
{
	return s->addr;
}
