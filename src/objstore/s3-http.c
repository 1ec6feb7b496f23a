/* s3-http.c - just enough HTTP/1.1 for S3: one request at a time per
 * connection, Content-Length request bodies, Content-Length / chunked /
 * until-close response bodies, kept-alive connections pooled per handle.
 * Every wait is bounded by the handle's timeout. The response is untrusted:
 * the head is capped at S3_HTTP_MAX_HEAD, numbers are range-checked, and
 * anything malformed is -EPROTO. */
#include "s3-internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#define RBUF (256u << 10)
#define SEND_CHUNK (1u << 20)

void s3_http_init(struct s3_http *h, const char *host, const char *port, int timeout_ms)
{
	h->host = xstrdup(host);
	h->port = xstrdup(port);
	h->timeout_ms = timeout_ms;
	pthread_mutex_init(&h->mu, NULL);
	h->n_idle = 0;
}

void s3_http_fini(struct s3_http *h)
{
	for (int i = 0; i < h->n_idle; i++)
		close(h->idle[i]);
	h->n_idle = 0;
	pthread_mutex_destroy(&h->mu);
	free(h->host);
	free(h->port);
}

void s3_http_resp_free(struct s3_http_resp *r)
{
	buf_free(&r->body);
}

static int map_connect_errno(int e)
{
	switch (e) {
	case ETIMEDOUT:
		return -ETIMEDOUT;
	case ECONNREFUSED:
	case EHOSTUNREACH:
	case ENETUNREACH:
	case EHOSTDOWN:
	case ENETDOWN:
	case EADDRNOTAVAIL:
		return -EHOSTUNREACH;
	default:
		return -e;
	}
}

/* Non-blocking connect bounded by timeout_ms, to each address in turn. */
static int dial(struct s3_http *h, err_t *err)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res, *a;
	int r, last = -EHOSTUNREACH;

	r = getaddrinfo(h->host, h->port, &hints, &res);
	if (r != 0)
		return err_set(err, EHOSTUNREACH, "cannot resolve `%s`: %s", h->host,
			       gai_strerror(r));
	for (a = res; a; a = a->ai_next) {
		int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
				a->ai_protocol);
		if (fd < 0) {
			last = -errno;
			continue;
		}
		if (connect(fd, a->ai_addr, a->ai_addrlen) < 0 && errno != EINPROGRESS) {
			last = map_connect_errno(errno);
			close(fd);
			continue;
		}
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		int pr;
		do
			pr = poll(&p, 1, h->timeout_ms);
		while (pr < 0 && errno == EINTR);
		if (pr == 0) {
			last = -ETIMEDOUT;
			close(fd);
			continue;
		}
		int soerr = 0;
		socklen_t sl = sizeof(soerr);
		if (pr < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 || soerr) {
			last = map_connect_errno(soerr ? soerr : errno);
			close(fd);
			continue;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		freeaddrinfo(res);
		return fd;
	}
	freeaddrinfo(res);
	return err_set(err, -last, "cannot connect to %s:%s: %s", h->host, h->port,
		       last == -ETIMEDOUT ? "timed out" : strerror(-last));
}

static int wait_fd(struct s3_http *h, int fd, short ev)
{
	struct pollfd p = { .fd = fd, .events = ev };
	int r;

	do
		r = poll(&p, 1, h->timeout_ms);
	while (r < 0 && errno == EINTR);
	if (r == 0)
		return -ETIMEDOUT;
	return r < 0 ? -errno : 0;
}

static int send_all(struct s3_http *h, int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				int r = wait_fd(h, fd, POLLOUT);
				if (r < 0)
					return r;
				continue;
			}
			return -errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* A connection with its read buffer. */
struct conn {
	struct s3_http *h;
	int fd;
	char *buf;
	size_t start, end;
	bool got_any;   /* some response byte arrived */
};

/* Make bytes available: > 0 count, 0 at EOF, < 0 error. */
static ssize_t fill(struct conn *c)
{
	if (c->start < c->end)
		return (ssize_t)(c->end - c->start);
	c->start = c->end = 0;
	for (;;) {
		ssize_t r = recv(c->fd, c->buf, RBUF, 0);
		if (r >= 0) {
			c->end = (size_t)r;
			if (r)
				c->got_any = true;
			return r;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;
		int w = wait_fd(c->h, c->fd, POLLIN);
		if (w < 0)
			return w;
	}
}

static bool hdr_is(const char *line, size_t n, const char *name, const char **value, size_t *vl)
{
	size_t nl = strlen(name);

	if (n <= nl || strncasecmp(line, name, nl) != 0 || line[nl] != ':')
		return false;
	line += nl + 1;
	n -= nl + 1;
	while (n && (*line == ' ' || *line == '\t')) {
		line++;
		n--;
	}
	while (n && (line[n - 1] == ' ' || line[n - 1] == '\t'))
		n--;
	*value = line;
	*vl = n;
	return true;
}

static int parse_u64(const char *p, size_t n, int base, uint64_t *out)
{
	uint64_t v = 0;

	if (n == 0 || n > 20)
		return -EPROTO;
	for (size_t i = 0; i < n; i++) {
		int d = hexval((unsigned char)p[i]);
		if (d < 0 || d >= base)
			return -EPROTO;
		if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base)
			return -EPROTO;
		v = v * (uint64_t)base + (uint64_t)d;
	}
	*out = v;
	return 0;
}

int s3_http_parse_head(const char *p, size_t n, struct s3_http_resp *r)
{
	const char *end = p + n, *line = p, *eol;
	bool first = true;

	r->status = 0;
	r->has_length = r->chunked = r->close = false;
	r->content_length = 0;
	r->meta_sha256[0] = r->etag[0] = '\0';
	while (line < end) {
		eol = memchr(line, '\n', (size_t)(end - line));
		if (!eol)
			return -EPROTO;
		size_t ll = (size_t)(eol - line);
		if (ll && line[ll - 1] == '\r')
			ll--;
		if (first) {
			/* "HTTP/1.x DDD reason" */
			if (ll < 12 || memcmp(line, "HTTP/1.", 7) != 0 || line[8] != ' ' ||
			    line[9] < '1' || line[9] > '5' || line[10] < '0' || line[10] > '9' ||
			    line[11] < '0' || line[11] > '9' || (ll > 12 && line[12] != ' '))
				return -EPROTO;
			r->status = (line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0');
			if (line[7] == '0')
				r->close = true;  /* HTTP/1.0: no keep-alive unless asked; we never ask */
			first = false;
		} else if (ll == 0) {
			return eol + 1 == end ? 0 : -EPROTO;
		} else {
			const char *v;
			size_t vl;
			if (memchr(line, '\0', ll))
				return -EPROTO;
			if (hdr_is(line, ll, "Content-Length", &v, &vl)) {
				uint64_t cl;
				if (parse_u64(v, vl, 10, &cl) < 0 ||
				    (r->has_length && cl != r->content_length))
					return -EPROTO;
				r->has_length = true;
				r->content_length = cl;
			} else if (hdr_is(line, ll, "Transfer-Encoding", &v, &vl)) {
				if (vl == 7 && strncasecmp(v, "chunked", 7) == 0)
					r->chunked = true;
				else if (!(vl == 8 && strncasecmp(v, "identity", 8) == 0))
					return -EPROTO;
			} else if (hdr_is(line, ll, "Connection", &v, &vl)) {
				if (vl == 5 && strncasecmp(v, "close", 5) == 0)
					r->close = true;
			} else if (hdr_is(line, ll, "x-amz-meta-sha256", &v, &vl)) {
				if (vl == 64) {
					memcpy(r->meta_sha256, v, 64);
					r->meta_sha256[64] = '\0';
					/* S3 keeps metadata values as sent; compare in lower case */
					for (int i = 0; i < 64; i++)
						if (r->meta_sha256[i] >= 'A' && r->meta_sha256[i] <= 'F')
							r->meta_sha256[i] = (char)(r->meta_sha256[i] + 32);
					if (!sha256_hex_ok(r->meta_sha256))
						r->meta_sha256[0] = '\0';
				}
			} else if (hdr_is(line, ll, "ETag", &v, &vl)) {
				if (vl < sizeof(r->etag)) {
					memcpy(r->etag, v, vl);
					r->etag[vl] = '\0';
				}
			}
		}
		line = eol + 1;
	}
	return -EPROTO;
}

/* Read the head into hb (up to and including the empty line); bytes past
 * it stay in c's buffer. */
static int read_head(struct conn *c, struct buf *hb)
{
	for (;;) {
		ssize_t r = fill(c);
		if (r < 0)
			return (int)r;
		if (r == 0)
			return hb->len || c->got_any ? -EPROTO : -ECONNRESET;
		size_t old = hb->len, avail = c->end - c->start;
		buf_add(hb, c->buf + c->start, avail);
		c->start = c->end;
		/* the first "\n\n" or "\n\r\n" that ends in the new bytes */
		for (size_t i = old; i < hb->len; i++) {
			if (hb->data[i] != '\n' || i == 0)
				continue;
			if (hb->data[i - 1] == '\n' ||
			    (hb->data[i - 1] == '\r' && i >= 2 && hb->data[i - 2] == '\n')) {
				size_t keep = i + 1, extra = hb->len - keep;
				if (keep > S3_HTTP_MAX_HEAD)
					return -EPROTO;
				c->start = c->end - extra;
				hb->len = keep;
				hb->data[keep] = '\0';
				return 0;
			}
		}
		if (hb->len > S3_HTTP_MAX_HEAD)
			return -EPROTO;
	}
}

struct body_out {
	const struct os_sink *sink;
	struct s3_http_resp *resp;
	size_t max;
};

static int deliver(struct body_out *o, const char *p, size_t n)
{
	if (!n)
		return 0;
	if (o->sink) {
		int r = o->sink->write(o->sink->arg, p, n);
		if (r < 0) {
			o->resp->sink_failed = true;
			return r;
		}
		o->resp->delivered = true;
		return 0;
	}
	if (o->resp->body.len + n > o->max)
		return -EMSGSIZE;
	buf_add(&o->resp->body, p, n);
	return 0;
}

/* Exactly n bytes (or to EOF when until_eof) of body. */
static int read_fixed(struct conn *c, struct body_out *o, uint64_t n, bool until_eof)
{
	while (n || until_eof) {
		ssize_t r = fill(c);
		if (r < 0)
			return (int)r;
		if (r == 0)
			return until_eof ? 0 : -EPROTO;
		size_t take = c->end - c->start;
		if (!until_eof && take > n)
			take = (size_t)n;
		int d = deliver(o, c->buf + c->start, take);
		if (d < 0)
			return d;
		c->start += take;
		if (!until_eof)
			n -= take;
	}
	return 0;
}

/* One CRLF-terminated line of at most max bytes into line (NUL-terminated). */
static int read_line(struct conn *c, char *line, size_t max)
{
	size_t n = 0;

	for (;;) {
		ssize_t r = fill(c);
		if (r < 0)
			return (int)r;
		if (r == 0)
			return -EPROTO;
		char ch = c->buf[c->start++];
		if (ch == '\n') {
			if (n && line[n - 1] == '\r')
				n--;
			line[n] = '\0';
			return 0;
		}
		if (n + 1 >= max)
			return -EPROTO;
		line[n++] = ch;
	}
}

static int read_chunked(struct conn *c, struct body_out *o)
{
	char line[256];

	for (;;) {
		uint64_t size;
		size_t l;
		int r = read_line(c, line, sizeof(line));
		if (r < 0)
			return r;
		l = strcspn(line, "; \t");  /* chunk extensions are ignored */
		if (parse_u64(line, l, 16, &size) < 0)
			return -EPROTO;
		if (size == 0)
			break;
		if ((r = read_fixed(c, o, size, false)) < 0)
			return r;
		if ((r = read_line(c, line, sizeof(line))) < 0)
			return r;
		if (line[0])
			return -EPROTO;
	}
	/* trailers, to the empty line */
	for (int i = 0; i < 64; i++) {
		int r = read_line(c, line, sizeof(line));
		if (r < 0)
			return r;
		if (!line[0])
			return 0;
	}
	return -EPROTO;
}

/* Read one response on c into resp; 0 or -errno. */
static int read_response(struct conn *c, bool is_head, const struct os_sink *sink,
			 size_t max_body, struct s3_http_resp *resp)
{
	struct buf hb;
	int r;

	buf_init(&hb);
	for (;;) {
		r = read_head(c, &hb);
		if (r < 0)
			goto out;
		r = s3_http_parse_head(hb.data, hb.len, resp);
		if (r < 0)
			goto out;
		if (resp->status >= 200)
			break;
		buf_reset(&hb);  /* 1xx (100 Continue): the real answer follows */
	}
	{
		bool ok = resp->status >= 200 && resp->status < 300;
		struct body_out o = { ok ? sink : NULL, resp, max_body };
		bool none = is_head || resp->status == 204 || resp->status == 304;

		if (none)
			r = 0;
		else if (resp->chunked)
			r = read_chunked(c, &o);
		else if (resp->has_length)
			r = read_fixed(c, &o, resp->content_length, false);
		else {
			resp->close = true;
			r = read_fixed(c, &o, 0, true);
		}
	}
out:
	buf_free(&hb);
	return r;
}

int s3_http_read_fd(int fd, int timeout_ms, bool is_head, const struct os_sink *sink,
		    size_t max_body, struct s3_http_resp *resp)
{
	struct s3_http h = { .timeout_ms = timeout_ms };
	struct conn c = { .h = &h, .fd = fd, .buf = xmalloc(RBUF) };
	int r = read_response(&c, is_head, sink, max_body, resp);

	free(c.buf);
	return r;
}

static int take_conn(struct s3_http *h, bool *reused, err_t *err)
{
	int fd = -1;

	pthread_mutex_lock(&h->mu);
	if (h->n_idle)
		fd = h->idle[--h->n_idle];
	pthread_mutex_unlock(&h->mu);
	*reused = fd >= 0;
	return fd >= 0 ? fd : dial(h, err);
}

static void give_conn(struct s3_http *h, int fd)
{
	pthread_mutex_lock(&h->mu);
	if (h->n_idle < S3_HTTP_MAX_IDLE) {
		h->idle[h->n_idle++] = fd;
		fd = -1;
	}
	pthread_mutex_unlock(&h->mu);
	if (fd >= 0)
		close(fd);
}

static const char *what(int r)
{
	switch (r) {
	case -ETIMEDOUT:
		return "timed out";
	case -EPROTO:
		return "malformed response";
	case -ECONNRESET:
		return "connection closed by the server";
	case -EMSGSIZE:
		return "response body too large";
	default:
		return strerror(-r);
	}
}

/* body's bytes: from memory as they are, else read a MiB at a time. */
static int send_body(struct s3_http *h, int fd, const struct os_src *body,
		     struct s3_http_resp *resp)
{
	_cleanup_free_ char *chunk = NULL;
	int r = 0;

	if (body->buf) {
		if ((r = send_all(h, fd, body->buf, (size_t)body->size)) == 0)
			os_src_stored(body, body->size);
		return r;
	}
	chunk = xmalloc(SEND_CHUNK);
	for (uint64_t pos = 0; pos < body->size && r == 0;) {
		size_t n = body->size - pos < SEND_CHUNK ? (size_t)(body->size - pos) : SEND_CHUNK;
		if ((r = os_src_read(body, pos, chunk, n)) < 0) {
			resp->sink_failed = true;
			break;
		}
		if ((r = send_all(h, fd, chunk, n)) == 0)
			os_src_stored(body, n);
		pos += n;
	}
	return r;
}

static int attempt(struct s3_http *h, const char *head, const struct os_src *body, bool is_head,
		   const struct os_sink *sink, size_t max_body, struct s3_http_resp *resp,
		   bool *reused, bool *got_any, err_t *err)
{
	struct conn c = { .h = h, .fd = -1 };
	struct buf hb;
	int r;

	*got_any = false;
	c.fd = take_conn(h, reused, err);
	if (c.fd < 0)
		return c.fd;
	buf_init(&hb);
	buf_printf(&hb, "%sContent-Length: %llu\r\n\r\n", head,
		   (unsigned long long)(body ? body->size : 0));
	r = send_all(h, c.fd, hb.data, hb.len);
	if (r == 0 && body && (r = send_body(h, c.fd, body, resp)) < 0 && resp->sink_failed) {
		err_set(err, -r, "cannot read the request body: %s", strerror(-r));
		goto out;
	}
	buf_reset(&hb);
	if (r < 0)
		goto out;
	c.buf = xmalloc(RBUF);
	r = read_response(&c, is_head, sink, max_body, resp);
out:
	*got_any = c.got_any;
	buf_free(&hb);
	free(c.buf);
	if (r == 0 && !resp->close && c.start == c.end)
		give_conn(h, c.fd);
	else
		close(c.fd);
	if (r < 0 && !resp->sink_failed)
		err_set(err, -r, "%s:%s: %s", h->host, h->port, what(r));
	return r;
}

int s3_http_do(struct s3_http *h, const char *head, const struct os_src *body, bool is_head,
	       const struct os_sink *sink, size_t max_body, struct s3_http_resp *resp,
	       err_t *err)
{
	for (int tries = 0;; tries++) {
		bool reused, got_any;
		int r;

		buf_reset(&resp->body);
		resp->delivered = resp->sink_failed = false;
		r = attempt(h, head, body, is_head, sink, max_body, resp, &reused, &got_any, err);
		/* a kept-alive connection the server closed meanwhile: once more
		 * on a new one, which is not a retry of the request */
		if (r < 0 && reused && !got_any && !resp->sink_failed && tries < S3_HTTP_MAX_IDLE + 1 &&
		    (r == -ECONNRESET || r == -EPIPE))
			continue;
		return r;
	}
}
