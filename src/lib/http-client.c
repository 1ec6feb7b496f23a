/* http-client.c - the HTTP/1.1 client: dial "http://host:port",
 * "https://host:port" or "unix:/path", send one request (Connection: close),
 * read the response whole (http_request) or hand its body on as it arrives
 * (http_request_stream). The response is parsed as strictly as a request.
 * https: the connection goes through a TLS relay (tls.h), so the code below
 * reads and writes a plain socket either way.
 */
#include "http-internal.h"
#include "tls.h"

#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>

/* ----------------------------------------------------------------- client */

/* How long a TLS handshake may take. */
#define TLS_HANDSHAKE_MS (30 * 1000)

struct endpoint {
	bool is_unix;
	bool tls;
	char host[256];       /* for getaddrinfo, without brackets */
	char port[8];
	char host_header[256];
	char path[108];
};

static int parse_base(const char *base, struct endpoint *ep, err_t *err)
{
	memset(ep, 0, sizeof(*ep));
	if (strncmp(base, "unix:", 5) == 0) {
		if (strlen(base + 5) >= sizeof(ep->path) || !base[5])
			return err_set(err, EINVAL, "bad unix socket path in `%s`", base);
		ep->is_unix = true;
		strcpy(ep->path, base + 5);
		strcpy(ep->host_header, "localhost");
		return 0;
	}
	if (strncmp(base, "https://", 8) == 0)
		ep->tls = true;
	else if (strncmp(base, "http://", 7) != 0)
		return err_set(err, EINVAL, "unsupported base URL `%s`", base);
	const char *hp = base + (ep->tls ? 8 : 7);
	size_t n = strcspn(hp, "/");
	if (n == 0 || n >= sizeof(ep->host_header))
		return err_set(err, EINVAL, "bad host in `%s`", base);
	snprintf(ep->host_header, sizeof(ep->host_header), "%.*s", (int)n, hp);
	bool has_port = ep->host_header[0] == '['
		? strstr(ep->host_header, "]:") != NULL
		: strchr(ep->host_header, ':') != NULL;
	if (has_port)
		return http_split_host_port(ep->host_header, ep->host, sizeof(ep->host), ep->port,
					    sizeof(ep->port), err);
	snprintf(ep->port, sizeof(ep->port), ep->tls ? "443" : "80");
	if (ep->host_header[0] == '[' && (n < 3 || ep->host_header[n - 1] != ']'))
		return err_set(err, EINVAL, "bad host in `%s`", base);
	if (ep->host_header[0] == '[')
		snprintf(ep->host, sizeof(ep->host), "%.*s", (int)(n - 2), ep->host_header + 1);
	else
		snprintf(ep->host, sizeof(ep->host), "%s", ep->host_header);
	return 0;
}

static int connect_unix(const struct endpoint *ep, err_t *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return err_sys(err, "socket");
	strcpy(sa.sun_path, ep->path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		err_sys(err, "connect unix:%s", ep->path);
		close(fd);
		return -err->code;
	}
	return fd;
}

static int connect_tcp(const struct endpoint *ep, err_t *err)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
	struct addrinfo *res = NULL;
	int fd = -1, one = 1;

	int r = getaddrinfo(ep->host, ep->port, &hints, &res);
	if (r != 0)
		return err_set(err, EHOSTUNREACH, "cannot resolve %s: %s", ep->host, gai_strerror(r));
	err_set(err, ECONNREFUSED, "no address for %s", ep->host);
	for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
		fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
			err_sys(err, "connect %s", ep->host_header);
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	if (fd < 0)
		return -err->code;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static pthread_mutex_t tls_mu = PTHREAD_MUTEX_INITIALIZER;
static struct tls_ctx *tls_client;   /* under tls_mu; made at the first https */
static bool tls_client_set;

void http_client_set_tls(struct tls_ctx *ctx)
{
	pthread_mutex_lock(&tls_mu);
	tls_client = ctx;
	tls_client_set = true;
	pthread_mutex_unlock(&tls_mu);
}

/* The client TLS context: the one set, else one trusting the system's CAs. */
static struct tls_ctx *client_tls(err_t *err)
{
	struct tls_ctx *t;

	pthread_mutex_lock(&tls_mu);
	if (!tls_client_set) {
		tls_client = tls_client_ctx(NULL, err);
		tls_client_set = tls_client != NULL;
	}
	t = tls_client;
	pthread_mutex_unlock(&tls_mu);
	if (!t && !err->code)
		err_set(err, EINVAL, "no TLS client context");
	return t;
}

/* tls: the context for an https endpoint, NULL for the process's. */
static int dial(const struct endpoint *ep, struct tls_ctx *tls, err_t *err)
{
	struct tls_ctx *t = tls;
	int fd, pfd;

	if (ep->is_unix)
		return connect_unix(ep, err);
	fd = connect_tcp(ep, err);
	if (fd < 0 || !ep->tls)
		return fd;
	if (!t && !(t = client_tls(err))) {
		close(fd);
		return -err->code;
	}
	pfd = tls_client_wrap(t, fd, ep->host, now_ms() + TLS_HANDSHAKE_MS, err);
	if (pfd < 0) {
		close(fd);
		return err_wrap(err, "%s", ep->host_header);
	}
	return pfd;
}

int http_dial(const char *base, char *host_header, size_t hn, err_t *err)
{
	struct endpoint ep;

	if (parse_base(base, &ep, err) < 0)
		return -err->code;
	if (host_header)
		snprintf(host_header, hn, "%s", ep.host_header);
	return dial(&ep, NULL, err);
}

/* The request goes out in one sendmsg: head and body together, so a small
 * request is a single packet. A failed send is not fatal by itself: the
 * server may have answered early (413) and closed; the caller still reads. */
static int send_request(int fd, const struct endpoint *ep, const char *method,
			const char *target, const char *headers, const void *body, size_t len,
			bool keep)
{
	_cleanup_(buf_free) struct buf h = { 0 };

	buf_printf(&h, "%s %s HTTP/1.1\r\nHost: %s\r\n%s", method, target, ep->host_header,
		   keep ? "" : "Connection: close\r\n");
	if (body || len)
		buf_printf(&h, "Content-Length: %zu\r\n", len);
	if (headers && *headers) {
		buf_adds(&h, headers);
		if (headers[strlen(headers) - 1] != '\n')
			buf_adds(&h, "\r\n");
	}
	buf_adds(&h, "\r\n");
	struct iovec iov[2] = {
		{ .iov_base = h.data, .iov_len = h.len },
		{ .iov_base = (void *)body, .iov_len = len },
	};
	return http_send_iov(fd, iov, len ? 2 : 1);
}

enum body_kind { BODY_NONE, BODY_CLEN, BODY_CHUNKED, BODY_EOF };

struct reader {
	int fd;
	struct buf in;   /* received, not yet consumed */
	/* While waiting for body bytes: call on_idle every idle_ms (0 = never);
	 * a non-zero return aborts the read with that value. */
	int idle_ms;
	int (*on_idle)(void *arg);
	void *idle_arg;
	/* Each wait for bytes (head or body) lasts at most this long, then the
	 * request fails with ETIMEDOUT; -1: no limit. For probes of a peer
	 * that may be stalled (GET /v1/ready), where blocking is the failure. */
	int timeout_ms;
	/* 0, or when the whole exchange must be over (now_ms() clock): each
	 * wait is cut to what is left (http_request_bounded). */
	uint64_t deadline_ms;
};

/* How long the next wait for bytes may last: want (-1: no limit), cut to
 * what is left before the deadline. */
static int wait_ms(const struct reader *r, int want)
{
	uint64_t now;
	int left;

	if (!r->deadline_ms)
		return want;
	now = now_ms();
	left = now >= r->deadline_ms ? 0 : (int)(r->deadline_ms - now);
	return want < 0 || left < want ? left : want;
}

static int parse_status_line(const char *p, const char *eol, int *status, err_t *err)
{
	size_t n = (size_t)(eol - p);

	if (n < 12 || memcmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1') ||
	    p[8] != ' ' || !isdigit((unsigned char)p[9]) || !isdigit((unsigned char)p[10]) ||
	    !isdigit((unsigned char)p[11]) || (n > 12 && p[12] != ' '))
		return err_set(err, EPROTO, "malformed status line");
	*status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
	return 0;
}

/* Reads one response head into out (status and headers). */
static int read_resp_head(struct reader *r, struct http_resp *out, err_t *err)
{
	size_t scanned = 0, head;

	while (!(head = http_find_head_end(r->in.data, r->in.len, &scanned))) {
		if (r->in.len > HTTP_MAX_HEAD)
			return err_set(err, EPROTO, "response head too large");
		ssize_t n = http_recv_some(r->fd, &r->in, HTTP_IO_CHUNK, wait_ms(r, r->timeout_ms));
		if (n == -ETIMEDOUT)
			return err_set(err, ETIMEDOUT, "no response within %d ms", r->timeout_ms);
		if (n <= 0)
			return n == 0 ? err_set(err, EPIPE, "connection closed before response")
				      : err_set(err, (int)-n, "receive response");
	}
	const char *eol = memchr(r->in.data, '\n', head);
	if (eol == r->in.data || eol[-1] != '\r')
		return err_set(err, EPROTO, "malformed status line");
	if (parse_status_line(r->in.data, eol - 1, &out->status, err) < 0)
		return -EPROTO;
	if (http_parse_header_block(eol + 1, r->in.data + head, out->headers, &out->n_headers,
				    err) < 0)
		return err_set(err, EPROTO, "malformed response header");
	http_buf_consume(&r->in, head);
	return 0;
}

/* Reads heads until a final (non-1xx) one and decides body framing. */
static int read_final_head(struct reader *r, const char *method, struct http_resp *out,
			   enum body_kind *kind, uint64_t *clen, err_t *err)
{
	for (;;) {
		if (read_resp_head(r, out, err) < 0)
			return -err->code;
		if (out->status >= 200)
			break;
		http_free_headers(out->headers, out->n_headers);
		out->n_headers = 0;
	}
	const char *te = http_resp_header(out, "Transfer-Encoding");
	const char *cl = http_resp_header(out, "Content-Length");
	if (strcmp(method, "HEAD") == 0 || out->status == 204 || out->status == 304)
		*kind = BODY_NONE;
	else if (te)
		*kind = http_has_token(te, "chunked") ? BODY_CHUNKED : BODY_EOF;
	else if (cl)
		*kind = BODY_CLEN;
	else
		*kind = BODY_EOF;
	if (*kind == BODY_CLEN && http_parse_clen(cl, clen, err) < 0)
		return err_set(err, EPROTO, "bad Content-Length in response");
	return 0;
}

/* Wraps the caller's data callback so an abort is told apart from a
 * framing error coming out of the dechunker. */
struct sink {
	emit_fn fn;
	void *arg;
	int aborted;
	int (*flush)(void *arg);   /* optional: before each wait for more body */
	void *flush_arg;
};

static int sink_emit(void *arg, const char *p, size_t n)
{
	struct sink *s = arg;
	int r = n ? s->fn(s->arg, p, n) : 0;

	if (r)
		s->aborted = r;
	return r;
}

static int body_fed(struct sink *s, int r, err_t *err)
{
	if (s->aborted)
		return s->aborted;
	if (r == -EINVAL)
		return err_set(err, EPROTO, "malformed chunked response");
	return r;
}

/* Delivers the body as it arrives. Whatever is already buffered goes first,
 * then each recv is passed on at once. */
static int read_body(struct reader *r, enum body_kind kind, uint64_t clen, struct sink *s,
		     err_t *err)
{
	struct dechunk d;
	uint64_t got = 0;

	http_dechunk_init(&d, UINT64_MAX);
	for (;;) {
		int rc = 0;
		size_t used = r->in.len;
		if (kind == BODY_CHUNKED) {
			rc = http_dechunk_feed(&d, r->in.data, r->in.len, &used, sink_emit, s);
		} else if (kind != BODY_NONE) {
			if (kind == BODY_CLEN && used > clen - got)
				used = (size_t)(clen - got);
			got += used;
			rc = sink_emit(s, r->in.data, used);
		}
		http_buf_consume(&r->in, used);
		if (rc)
			return body_fed(s, rc, err);
		if (kind == BODY_NONE || (kind == BODY_CLEN && got == clen) ||
		    (kind == BODY_CHUNKED && d.state == DC_DONE))
			return 0;
		if (s->flush && (rc = s->flush(s->flush_arg)) != 0)
			return s->aborted = rc;
		ssize_t n = http_recv_some(r->fd, &r->in, HTTP_IO_CHUNK,
					   wait_ms(r, r->idle_ms > 0 ? r->idle_ms : r->timeout_ms));
		if (n == -ETIMEDOUT && r->on_idle) {
			int ir = r->on_idle(r->idle_arg);
			if (ir)
				return ir;
			continue;
		}
		if (n == 0 && kind == BODY_EOF)
			return 0;
		if (n <= 0)
			return n == 0 ? err_set(err, EPIPE, "connection closed mid-body")
				      : err_set(err, (int)-n, "receive response body");
	}
}

/* ---- idle connections to unix-socket servers (http_stream_cbs.reuse) ----
 * The api forwards every request to its node over a unix socket; dialing
 * anew each time costs a socket, a connect and an accept, and a close on
 * both sides. A connection whose answer ended cleanly waits here for the
 * next request to the same socket. Unix only: there, a peer's close is
 * seen at once (the liveness check below), so a request never goes out on
 * a connection the server already dropped; a server drops an idle one only
 * after HTTP_IDLE_TIMEOUT_MS, well past POOL_IDLE_MS. */
#define POOL_MAX 8
#define POOL_IDLE_MS (HTTP_IDLE_TIMEOUT_MS / 4)

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static struct pooled {
	char path[108];
	int fd;
	uint64_t at;     /* now_ms() when put back */
} pool[POOL_MAX];
static size_t pool_n;

/* Open, and nothing unread: a peer that closed reads as EOF, one that sent
 * something unasked is out of step. Either way the connection is dropped. */
static bool conn_idle_ok(int fd)
{
	char ch;
	ssize_t n = recv(fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);

	return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

static int pool_take(const char *path)
{
	uint64_t now = now_ms();

	for (;;) {
		struct pooled got = { .fd = -1 };

		pthread_mutex_lock(&pool_mu);
		for (size_t i = pool_n; i-- > 0;)
			if (strcmp(pool[i].path, path) == 0) {
				got = pool[i];
				pool[i] = pool[--pool_n];
				break;
			}
		pthread_mutex_unlock(&pool_mu);
		if (got.fd < 0)
			return -1;
		if (now - got.at < POOL_IDLE_MS && conn_idle_ok(got.fd))
			return got.fd;
		close(got.fd);
	}
}

static void pool_put(const char *path, int fd)
{
	pthread_mutex_lock(&pool_mu);
	if (pool_n < POOL_MAX) {
		snprintf(pool[pool_n].path, sizeof(pool[pool_n].path), "%s", path);
		pool[pool_n].fd = fd;
		pool[pool_n].at = now_ms();
		pool_n++;
		fd = -1;
	}
	pthread_mutex_unlock(&pool_mu);
	if (fd >= 0)
		close(fd);
}

/* Connects (or takes an idle connection when *reuse and the endpoint is a
 * unix socket; *reuse says on return whether the request asked to keep
 * the connection), sends, and reads the final head into head. */
static int start_request(struct tls_ctx *tls, const char *base, const char *method,
			 const char *target,
			 const char *headers, const void *body, size_t len, struct reader *r,
			 struct http_resp *head, enum body_kind *kind, uint64_t *clen, bool *reuse,
			 char *path, err_t *err)
{
	struct endpoint ep;
	bool keep = reuse && *reuse;
	int sr = 0;   /* set on each path below; GCC under ASan cannot tell */

	if (reuse)
		*reuse = false;
	if (parse_base(base, &ep, err) < 0)
		return -err->code;
	keep = keep && ep.is_unix;
	r->fd = keep ? pool_take(ep.path) : -1;
	if (r->fd >= 0) {
		sr = send_request(r->fd, &ep, method, target, headers, body, len, true);
		if (sr < 0) {
			/* nothing of it was taken: a fresh connection instead */
			close(r->fd);
			r->fd = -1;
		}
	}
	if (r->fd < 0) {
		r->fd = dial(&ep, tls, err);
		if (r->fd < 0)
			return r->fd;
		sr = send_request(r->fd, &ep, method, target, headers, body, len, keep);
	}
	if (keep) {
		*reuse = true;
		snprintf(path, 108, "%s", ep.path);
	}
	int rr = read_final_head(r, method, head, kind, clen, err);
	if (rr < 0 && sr < 0)
		return err_set(err, EPIPE, "%s %s%s: cannot send request", method, base, target);
	if (rr < 0)
		return err_wrap(err, "%s %s%s", method, base, target);
	return 0;
}

static int emit_resp_body(void *arg, const char *p, size_t n)
{
	buf_add(&((struct http_resp *)arg)->body, p, n);
	return 0;
}

struct bounded_body {
	struct http_resp *out;
	size_t max;
};

static int emit_bounded_body(void *arg, const char *p, size_t n)
{
	struct bounded_body *bb = arg;

	if (bb->out->body.len + n > bb->max)
		return -EFBIG;
	buf_add(&bb->out->body, p, n);
	return 0;
}

int http_request_bounded(const char *base, const char *method, const char *target,
			 const char *headers, const void *body, size_t len, int timeout_ms,
			 int total_ms, size_t max_body, struct http_resp *out, err_t *err)
{
	return http_request_bounded_tls(NULL, base, method, target, headers, body, len,
					timeout_ms, total_ms, max_body, out, err);
}

int http_request_bounded_tls(struct tls_ctx *tls, const char *base, const char *method,
			     const char *target, const char *headers, const void *body,
			     size_t len, int timeout_ms, int total_ms, size_t max_body,
			     struct http_resp *out, err_t *err)
{
	struct reader r = { .fd = -1, .timeout_ms = timeout_ms,
			    .deadline_ms = now_ms() + (uint64_t)(total_ms > 0 ? total_ms : 1) };
	struct bounded_body bb = { out, max_body };
	enum body_kind kind;
	uint64_t clen = 0;

	memset(out, 0, sizeof(*out));
	buf_init(&r.in);
	int rc = start_request(tls, base, method, target, headers, body, len, &r, out, &kind, &clen,
			       NULL, NULL, err);
	if (rc == 0) {
		struct sink s = { .fn = emit_bounded_body, .arg = &bb };
		rc = read_body(&r, kind, clen, &s, err);
		if (rc == -EFBIG)
			rc = err_set(err, EFBIG, "%s %s%s: answer larger than %zu bytes", method, base,
				     target, max_body);
	}
	if (rc == 0 && !out->body.data)
		buf_adds(&out->body, "");
	if (rc < 0)
		http_resp_free(out);
	if (r.fd >= 0)
		close(r.fd);
	buf_free(&r.in);
	return rc;
}

int http_request(const char *base, const char *method, const char *target,
		 const char *headers, const void *body, size_t len,
		 struct http_resp *out, err_t *err)
{
	return http_request_timeout(base, method, target, headers, body, len, -1, out, err);
}

int http_request_timeout(const char *base, const char *method, const char *target,
			 const char *headers, const void *body, size_t len, int timeout_ms,
			 struct http_resp *out, err_t *err)
{
	struct reader r = { .fd = -1, .timeout_ms = timeout_ms };
	enum body_kind kind;
	uint64_t clen = 0;

	memset(out, 0, sizeof(*out));
	buf_init(&r.in);
	int rc = start_request(NULL, base, method, target, headers, body, len, &r, out, &kind, &clen,
			       NULL, NULL, err);
	if (rc == 0) {
		struct sink s = { .fn = emit_resp_body, .arg = out };
		rc = read_body(&r, kind, clen, &s, err);
	}
	if (rc == 0 && !out->body.data)
		buf_adds(&out->body, "");
	if (rc < 0)
		http_resp_free(out);
	if (r.fd >= 0)
		close(r.fd);
	buf_free(&r.in);
	return rc;
}

struct stream_arg {
	const struct http_stream_cbs *cbs;
	void *arg;
};

static int emit_stream(void *arg, const char *p, size_t n)
{
	struct stream_arg *sa = arg;
	return sa->cbs->on_data ? sa->cbs->on_data(sa->arg, p, n) : 0;
}

int http_request_stream(const char *base, const char *method, const char *target,
			const char *headers, const void *body, size_t len,
			const struct http_stream_cbs *cbs, void *arg, err_t *err)
{
	struct reader r = { .fd = -1, .timeout_ms = -1 };
	struct http_resp head;
	enum body_kind kind;
	uint64_t clen = 0;

	memset(&head, 0, sizeof(head));
	buf_init(&r.in);
	bool reuse = cbs->reuse;
	char path[108] = "";
	int rc = start_request(NULL, base, method, target, headers, body, len, &r, &head, &kind, &clen,
			       &reuse, path, err);
	if (rc == 0 && cbs->on_head)
		rc = cbs->on_head(arg, &head);
	if (rc == 0) {
		struct stream_arg sa = { .cbs = cbs, .arg = arg };
		if (cbs->on_idle && cbs->idle_ms > 0) {
			r.idle_ms = cbs->idle_ms;
			r.on_idle = cbs->on_idle;
			r.idle_arg = arg;
		}
		struct sink s = { .fn = emit_stream, .arg = &sa, .flush = cbs->on_flush,
				  .flush_arg = arg };
		rc = read_body(&r, kind, clen, &s, err);
	}
	/* Reused only after an answer that ended cleanly where its framing
	 * said, with nothing after it, on a connection the server keeps. */
	const char *conn = rc == 0 ? http_resp_header(&head, "Connection") : NULL;
	if (reuse && rc == 0 && r.fd >= 0 && (kind == BODY_CLEN || kind == BODY_CHUNKED ||
					      kind == BODY_NONE) &&
	    r.in.len == 0 && !(conn && http_has_token(conn, "close"))) {
		pool_put(path, r.fd);
		r.fd = -1;
	}
	http_resp_free(&head);
	if (r.fd >= 0)
		close(r.fd);
	buf_free(&r.in);
	return rc;
}
