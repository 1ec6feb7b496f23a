/* http.c - HTTP/1.1 server and client.
 *
 * Everything a peer sends is untrusted: the server is reachable from tenants
 * (through the api) and the parser runs in every daemon. The parser is
 * strict where leniency has historically caused request smuggling: CRLF line
 * ends only, no obs-fold, no whitespace before ':', one Content-Length of
 * plain digits, Transfer-Encoding only "chunked" and never together with
 * Content-Length. Every buffer has a hard limit.
 *
 * Layout: request/response head parsing, the incremental dechunker (shared by
 * server and client), the server (accept thread + one thread per connection)
 * and the client.
 */
#include "http.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>

#include "json.h"
#include "log.h"

#define HTTP_MAX_HEAD (16 * 1024)       /* request line + headers + blank line */
#define HTTP_MAX_CHUNK_LINE 4096        /* chunk size line incl. extensions */
#define HTTP_MAX_TRAILER (16 * 1024)
#define HTTP_IO_CHUNK (64 * 1024)
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

/* ---------------------------------------------------------------- helpers */

static void http_buf_reserve(struct buf *b, size_t n)
{
	if (b->cap - b->len >= n + 1)
		return;
	size_t cap = b->cap ? b->cap : 256;
	while (cap - b->len < n + 1)
		cap *= 2;
	b->data = xrealloc(b->data, cap);
	b->cap = cap;
}

/* Drop the first n bytes of b (consumed input). */
static void http_buf_consume(struct buf *b, size_t n)
{
	if (n >= b->len) {
		buf_reset(b);
		return;
	}
	memmove(b->data, b->data + n, b->len - n);
	b->len -= n;
	b->data[b->len] = '\0';
}

static bool is_tchar(unsigned char c)
{
	return isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static const char *find_header(const struct http_header *h, size_t n, const char *name)
{
	for (size_t k = 0; k < n; k++)
		if (strcasecmp(h[k].name, name) == 0)
			return h[k].value;
	return NULL;
}

const char *http_req_header(const struct http_req *req, const char *name)
{
	return find_header(req->headers, req->n_headers, name);
}

const char *http_resp_header(const struct http_resp *r, const char *name)
{
	return find_header(r->headers, r->n_headers, name);
}

/* Whether a comma-separated header value lists token (case-insensitive). */
bool http_has_token(const char *v, const char *token)
{
	size_t tl = strlen(token);

	while (v && *v) {
		v += strspn(v, " \t,");
		size_t n = strcspn(v, ",");
		size_t m = n;
		while (m && (v[m - 1] == ' ' || v[m - 1] == '\t'))
			m--;
		if (m == tl && strncasecmp(v, token, tl) == 0)
			return true;
		v += n;
	}
	return false;
}

static void http_free_headers(struct http_header *h, size_t n)
{
	for (size_t k = 0; k < n; k++) {
		free(h[k].name);
		free(h[k].value);
	}
}

void http_req_free(struct http_req *req)
{
	if (!req)
		return;
	free(req->target);
	free(req->path);
	free(req->query);
	free(req->body);
	http_free_headers(req->headers, req->n_headers);
	memset(req, 0, sizeof(*req));
}

void http_resp_free(struct http_resp *r)
{
	if (!r)
		return;
	http_free_headers(r->headers, r->n_headers);
	buf_free(&r->body);
	memset(r, 0, sizeof(*r));
}

/* --------------------------------------------------------- percent coding */

/* Strict decoding for the path: routing and authorization look at the
 * decoded form, so anything ambiguous is refused instead of guessed. */
static char *decode_path(const char *s, size_t n, err_t *err)
{
	struct buf b;

	buf_init(&b);
	for (size_t k = 0; k < n; k++) {
		if (s[k] != '%') {
			buf_addc(&b, s[k]);
			continue;
		}
		int hi = -1, lo = -1;
		if (k + 2 < n) {
			hi = hexval((unsigned char)s[k + 1]);
			lo = hexval((unsigned char)s[k + 2]);
		}
		if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
			buf_free(&b);
			err_set(err, EINVAL, "bad percent-encoding in path");
			return NULL;
		}
		buf_addc(&b, (char)(hi << 4 | lo));
		k += 2;
	}
	return buf_steal(&b);
}

/* Form decoding for query values: '+' is a space. A malformed escape or %00
 * is kept literally rather than failing the lookup or truncating the C
 * string, so the handler sees exactly one unambiguous value. */
static char *decode_form(const char *s, size_t n)
{
	struct buf b;

	buf_init(&b);
	for (size_t k = 0; k < n; k++) {
		int hi = -1, lo = -1;
		if (s[k] == '%' && k + 2 < n) {
			hi = hexval((unsigned char)s[k + 1]);
			lo = hexval((unsigned char)s[k + 2]);
		}
		if (s[k] == '+') {
			buf_addc(&b, ' ');
		} else if (hi >= 0 && lo >= 0 && (hi | lo)) {
			buf_addc(&b, (char)(hi << 4 | lo));
			k += 2;
		} else {
			buf_addc(&b, s[k]);
		}
	}
	return buf_steal(&b);
}

char *http_query_param(const struct http_req *req, const char *name)
{
	const char *q = req->query;

	while (q && *q) {
		size_t n = strcspn(q, "&");
		const char *eq = memchr(q, '=', n);
		size_t kn = eq ? (size_t)(eq - q) : n;
		_cleanup_free_ char *key = decode_form(q, kn);
		if (strcmp(key, name) == 0)
			return eq ? decode_form(eq + 1, n - kn - 1) : xstrdup("");
		q += n;
		if (*q == '&')
			q++;
	}
	return NULL;
}

/* ------------------------------------------------------------ head parsing */

/* Offset just past the blank line ending the head, or 0 if not seen yet.
 * *scanned lets repeated calls on a growing buffer skip what was searched. */
static size_t http_find_head_end(const char *p, size_t len, size_t *scanned)
{
	size_t k = *scanned > 3 ? *scanned - 3 : 0;

	for (; k + 4 <= len; k++) {
		if (p[k] == '\r' && p[k + 1] == '\n' && p[k + 2] == '\r' && p[k + 3] == '\n')
			return k + 4;
	}
	*scanned = len;
	return 0;
}

/* One header line [p, eol) without its CRLF. */
static int parse_header_line(const char *p, const char *eol, struct http_header *h, err_t *err)
{
	const char *c = p;

	while (c < eol && is_tchar((unsigned char)*c))
		c++;
	if (c == p || c == eol || *c != ':')
		return err_set(err, EINVAL, "malformed header line");
	const char *v = c + 1, *ve = eol;
	while (v < ve && (*v == ' ' || *v == '\t'))
		v++;
	while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
		ve--;
	for (const char *x = v; x < ve; x++) {
		unsigned char u = (unsigned char)*x;
		if ((u < 0x20 && u != '\t') || u == 0x7f)
			return err_set(err, EINVAL, "control character in header value");
	}
	h->name = xstrndup(p, (size_t)(c - p));
	h->value = xstrndup(v, (size_t)(ve - v));
	return 0;
}

/* Header lines from p up to the final blank line; end points just past it. */
static int http_parse_header_block(const char *p, const char *end, struct http_header *h,
				   size_t *n, err_t *err)
{
	for (;;) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		if (!eol || eol == p || eol[-1] != '\r')
			return err_set(err, EINVAL, "header line not terminated by CRLF");
		eol--;
		if (eol == p)
			return 0;
		if (*n >= HTTP_MAX_HEADERS)
			return err_set(err, EINVAL, "too many headers (max %d)", HTTP_MAX_HEADERS);
		if (parse_header_line(p, eol, &h[*n], err) < 0)
			return -EINVAL;
		(*n)++;
		p = eol + 2;
	}
}

/* What the head says about framing and connection reuse. */
struct req_info {
	bool http10;
	bool chunked;
	bool has_clen;
	uint64_t clen;
	bool keep_alive;
	bool expect_continue;
};

static int parse_request_line(const char *p, const char *eol, struct http_req *req,
			      bool *http10, err_t *err)
{
	const char *sp1 = memchr(p, ' ', (size_t)(eol - p));
	if (!sp1 || sp1 == p || (size_t)(sp1 - p) >= sizeof(req->method))
		return err_set(err, EINVAL, "malformed request line");
	for (const char *c = p; c < sp1; c++)
		if (!is_tchar((unsigned char)*c))
			return err_set(err, EINVAL, "malformed method");
	memcpy(req->method, p, (size_t)(sp1 - p));
	req->method[sp1 - p] = '\0';

	const char *t = sp1 + 1;
	const char *sp2 = memchr(t, ' ', (size_t)(eol - t));
	if (!sp2 || sp2 == t)
		return err_set(err, EINVAL, "malformed request line");
	for (const char *c = t; c < sp2; c++)
		if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f)
			return err_set(err, EINVAL, "invalid character in request target");
	if (*t != '/')
		return err_set(err, EINVAL, "request target must start with '/'");

	size_t vl = (size_t)(eol - sp2 - 1);
	if (vl == 8 && memcmp(sp2 + 1, "HTTP/1.1", 8) == 0)
		*http10 = false;
	else if (vl == 8 && memcmp(sp2 + 1, "HTTP/1.0", 8) == 0)
		*http10 = true;
	else
		return err_set(err, EINVAL, "unsupported HTTP version");

	size_t tl = (size_t)(sp2 - t);
	req->target = xstrndup(t, tl);
	const char *qm = memchr(t, '?', tl);
	size_t pl = qm ? (size_t)(qm - t) : tl;
	req->query = qm ? xstrndup(qm + 1, tl - pl - 1) : xstrdup("");
	req->path = decode_path(t, pl, err);
	return req->path ? 0 : -EINVAL;
}

static int http_parse_clen(const char *v, uint64_t *out, err_t *err)
{
	uint64_t n = 0;

	if (!*v)
		return err_set(err, EINVAL, "empty Content-Length");
	for (const char *c = v; *c; c++) {
		if (*c < '0' || *c > '9' || n > (UINT64_MAX - 9) / 10)
			return err_set(err, EINVAL, "invalid Content-Length");
		n = n * 10 + (uint64_t)(*c - '0');
	}
	*out = n;
	return 0;
}

/* Framing rules from RFC 9112 section 6, minus the lenient parts. */
static int interpret_headers(const struct http_req *req, struct req_info *info, err_t *err)
{
	size_t n_te = 0;

	for (size_t k = 0; k < req->n_headers; k++) {
		const struct http_header *h = &req->headers[k];
		if (strcasecmp(h->name, "Content-Length") == 0) {
			if (info->has_clen)
				return err_set(err, EINVAL, "duplicate Content-Length");
			if (http_parse_clen(h->value, &info->clen, err) < 0)
				return -EINVAL;
			info->has_clen = true;
		} else if (strcasecmp(h->name, "Transfer-Encoding") == 0) {
			n_te++;
			if (n_te > 1 || strcasecmp(h->value, "chunked") != 0)
				return err_set(err, ENOSYS, "unsupported Transfer-Encoding");
			info->chunked = true;
		}
	}
	if (info->chunked && info->has_clen)
		return err_set(err, EINVAL, "both Content-Length and Transfer-Encoding");

	const char *conn = http_req_header(req, "Connection");
	info->keep_alive = info->http10 ? http_has_token(conn, "keep-alive")
					 : !http_has_token(conn, "close");
	const char *expect = http_req_header(req, "Expect");
	info->expect_continue = !info->http10 && expect && strcasecmp(expect, "100-continue") == 0;
	return 0;
}

/* Parses the head [p, p+head_len) into req. On failure req holds partial
 * allocations; the caller frees it either way. */
static int http_parse_request_head(const char *p, size_t head_len, struct http_req *req,
				   struct req_info *info, err_t *err)
{
	const char *end = p + head_len;
	const char *eol = memchr(p, '\n', head_len);

	memset(info, 0, sizeof(*info));
	if (!eol || eol == p || eol[-1] != '\r')
		return err_set(err, EINVAL, "malformed request line");
	if (parse_request_line(p, eol - 1, req, &info->http10, err) < 0)
		return -EINVAL;
	if (http_parse_header_block(eol + 1, end, req->headers, &req->n_headers, err) < 0)
		return -EINVAL;
	return interpret_headers(req, info, err);
}

/* ------------------------------------------------------------ dechunking */

enum dc_state {
	DC_SIZE, DC_EXT, DC_SIZE_LF, DC_DATA, DC_DATA_CR, DC_DATA_LF,
	DC_TRAILER, DC_TRAILER_LINE, DC_TRAILER_LF, DC_FINAL_LF, DC_DONE,
};

/* Incremental chunked-body decoder: bytes can arrive split anywhere. Data
 * is handed to emit as it is decoded, so a streaming client sees each piece
 * without waiting for the chunk boundary. */
struct dechunk {
	enum dc_state state;
	uint64_t size;        /* current chunk: digits so far, then bytes left */
	unsigned digits;
	size_t line;          /* bytes of the current size or trailer line */
	size_t trailer;
	uint64_t total, max;
};

typedef int (*emit_fn)(void *arg, const char *p, size_t n);

static void http_dechunk_init(struct dechunk *d, uint64_t max)
{
	memset(d, 0, sizeof(*d));
	d->max = max;
}

/* Size line: hex digits, then optional extensions (ignored), then CRLF. */
static int dc_size_byte(struct dechunk *d, char c)
{
	if (++d->line > HTTP_MAX_CHUNK_LINE)
		return -EINVAL;
	if (d->state == DC_SIZE) {
		int v = hexval((unsigned char)c);
		if (v >= 0) {
			if (++d->digits > 15)
				return -EFBIG;
			d->size = d->size << 4 | (uint64_t)v;
			return 0;
		}
		if (d->digits == 0)
			return -EINVAL;
		if (c == ';' || c == ' ' || c == '\t') {
			d->state = DC_EXT;
			return 0;
		}
	} else if (c != '\r' && ((unsigned char)c < 0x20 && c != '\t')) {
		return -EINVAL;
	}
	if (c == '\r') {
		d->state = DC_SIZE_LF;
		return 0;
	}
	return d->state == DC_EXT ? 0 : -EINVAL;
}

static int dc_control_byte(struct dechunk *d, char c)
{
	switch (d->state) {
	case DC_SIZE:
	case DC_EXT:
		return dc_size_byte(d, c);
	case DC_SIZE_LF:
		if (c != '\n')
			return -EINVAL;
		if (d->size == 0) {
			d->state = DC_TRAILER;
			return 0;
		}
		if (d->size > d->max - d->total)
			return -EFBIG;
		d->state = DC_DATA;
		return 0;
	case DC_DATA_CR:
		d->state = DC_DATA_LF;
		return c == '\r' ? 0 : -EINVAL;
	case DC_DATA_LF:
		if (c != '\n')
			return -EINVAL;
		d->state = DC_SIZE;
		d->size = 0;
		d->digits = 0;
		d->line = 0;
		return 0;
	case DC_TRAILER:
		d->state = c == '\r' ? DC_FINAL_LF : DC_TRAILER_LINE;
		return 0;
	case DC_TRAILER_LINE:
		if (++d->trailer > HTTP_MAX_TRAILER)
			return -EINVAL;
		if (c == '\r')
			d->state = DC_TRAILER_LF;
		else if ((unsigned char)c < 0x20 && c != '\t')
			return -EINVAL;
		return 0;
	case DC_TRAILER_LF:
		d->state = DC_TRAILER;
		return c == '\n' ? 0 : -EINVAL;
	case DC_FINAL_LF:
		if (c != '\n')
			return -EINVAL;
		d->state = DC_DONE;
		return 0;
	default:
		return -EINVAL;
	}
}

/* Feeds n bytes; *used says how many were consumed (fewer than n only once
 * the body is complete: the rest belongs to the next message). Returns 0,
 * -EINVAL / -EFBIG for bad input, or emit's non-zero return value. */
static int http_dechunk_feed(struct dechunk *d, const char *p, size_t n, size_t *used,
			     emit_fn emit, void *arg)
{
	size_t k = 0;
	int r = 0;

	while (k < n && d->state != DC_DONE) {
		if (d->state == DC_DATA) {
			size_t take = n - k < d->size ? n - k : (size_t)d->size;
			d->size -= take;
			d->total += take;
			if (d->size == 0)
				d->state = DC_DATA_CR;
			r = emit(arg, p + k, take);
			k += take;
		} else {
			r = dc_control_byte(d, p[k++]);
		}
		if (r)
			break;
	}
	*used = k;
	return r;
}

static int http_emit_to_buf(void *arg, const char *p, size_t n)
{
	buf_add(arg, p, n);
	return 0;
}

/* ------------------------------------------------------ request parsing */

static size_t http_skip_blank_lines(const char *buf, size_t len)
{
	size_t k = 0;

	/* RFC 9112 2.2: ignore CRLFs before a request line (some clients send
	 * one after a POST body). */
	while (k + 2 <= len && buf[k] == '\r' && buf[k + 1] == '\n')
		k += 2;
	return k;
}

static int parse_body_chunked(const char *p, size_t len, size_t max_body,
			      struct http_req *req, size_t *used, err_t *err)
{
	struct dechunk d;
	struct buf body;

	buf_init(&body);
	http_dechunk_init(&d, max_body);
	int r = http_dechunk_feed(&d, p, len, used, http_emit_to_buf, &body);
	if (r < 0 || d.state != DC_DONE) {
		buf_free(&body);
		if (r == -EFBIG)
			return err_set(err, EFBIG, "request body too large (max %zu bytes)", max_body);
		return r < 0 ? err_set(err, EINVAL, "malformed chunked body") : 0;
	}
	req->body_len = body.len;
	req->body = buf_steal(&body);
	return 1;
}

int http_parse_request(const char *buf, size_t len, size_t max_body, struct http_req *req,
		       err_t *err)
{
	struct req_info info;
	size_t scanned = 0, used = 0;
	int r;

	memset(req, 0, sizeof(*req));
	size_t skip = http_skip_blank_lines(buf, len);
	size_t head = http_find_head_end(buf + skip, len - skip, &scanned);
	if (!head || head > HTTP_MAX_HEAD) {
		if (head || len - skip > HTTP_MAX_HEAD)
			return err_set(err, EINVAL, "request head too large");
		return 0;
	}
	r = http_parse_request_head(buf + skip, head, req, &info, err);
	if (r < 0)
		goto fail;
	const char *rest = buf + skip + head;
	size_t avail = len - skip - head;
	if (info.chunked) {
		r = parse_body_chunked(rest, avail, max_body, req, &used, err);
		if (r <= 0)
			goto fail;
	} else if (info.has_clen) {
		r = -EFBIG;
		if (info.clen > max_body) {
			err_set(err, EFBIG, "request body too large (max %zu bytes)", max_body);
			goto fail;
		}
		r = 0;
		if (avail < info.clen)
			goto fail;
		used = (size_t)info.clen;
		/* bodies are binary: memcpy, not a string copy that stops at NUL */
		req->body = xmalloc(used + 1);
		memcpy(req->body, rest, used);
		req->body[used] = '\0';
		req->body_len = used;
	} else {
		req->body = xstrdup("");
	}
	if (skip + head + used > INT_MAX) {
		r = err_set(err, EFBIG, "request too large");
		goto fail;
	}
	return (int)(skip + head + used);
fail:
	http_req_free(req);
	return r;
}

/* ---------------------------------------------------------------- sending */

/* sendmsg with MSG_NOSIGNAL: a peer that went away must give us EPIPE, not
 * kill the daemon with SIGPIPE. Returns 0 or -EPIPE. */
static int http_send_iov(int fd, struct iovec *iov, size_t n)
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

static int http_send_all(int fd, const void *p, size_t n)
{
	struct iovec iov = { .iov_base = (void *)p, .iov_len = n };
	return http_send_iov(fd, &iov, 1);
}

/* Reads what is available into b, waiting up to timeout_ms (-1: forever)
 * for input. The first attempt skips poll(): on the request path the bytes
 * are usually already queued, and a syscall less is latency saved.
 * Returns bytes read, 0 on EOF, -ETIMEDOUT or -errno. */
static ssize_t http_recv_some(int fd, struct buf *b, size_t want, int timeout_ms)
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

/* ----------------------------------------------------------------- server */

enum resp_state { RESP_NONE, RESP_DONE, RESP_STREAM, RESP_STREAM_DONE };

struct http_conn {
	struct http_server *srv;
	int fd;
	struct http_conn *prev, *next;   /* srv->conns, under srv->mu */
	char peer[64];
	struct buf in;                   /* received, not yet consumed */
	enum resp_state state;
	bool keep_alive;                 /* for the current request */
	bool http10;
	bool is_head;
	bool broken;                     /* a send failed; close after handler */
};

struct http_server {
	int lfd, wake_fd;
	pthread_t thread;
	char addr[128];
	char *unix_path;                 /* socket file we created, to unlink */
	dev_t unix_dev;
	ino_t unix_ino;
	size_t max_body;
	http_handler_fn fn;
	void *ctx;
	pthread_mutex_t mu;
	pthread_cond_t idle;             /* signalled when n_conns drops to 0 */
	struct http_conn *conns;
	size_t n_conns;
	bool stopping;
};

static const char *reason(int status)
{
	static const struct { int code; const char *text; } t[] = {
		{ 100, "Continue" }, { 200, "OK" }, { 201, "Created" }, { 202, "Accepted" },
		{ 204, "No Content" }, { 206, "Partial Content" }, { 301, "Moved Permanently" },
		{ 302, "Found" }, { 304, "Not Modified" }, { 400, "Bad Request" },
		{ 401, "Unauthorized" }, { 403, "Forbidden" }, { 404, "Not Found" },
		{ 405, "Method Not Allowed" }, { 409, "Conflict" }, { 411, "Length Required" },
		{ 413, "Content Too Large" }, { 415, "Unsupported Media Type" },
		{ 422, "Unprocessable Content" }, { 429, "Too Many Requests" },
		{ 500, "Internal Server Error" }, { 501, "Not Implemented" },
		{ 502, "Bad Gateway" }, { 503, "Service Unavailable" }, { 504, "Gateway Timeout" },
	};
	for (size_t k = 0; k < ARRAY_SIZE(t); k++)
		if (t[k].code == status)
			return t[k].text;
	return "Status";
}

static bool server_stopping(const struct http_server *s)
{
	return __atomic_load_n(&s->stopping, __ATOMIC_ACQUIRE);
}

static void start_head(struct http_conn *c, struct buf *h, int status, const char *ctype,
		       const char *extra)
{
	if (server_stopping(c->srv))
		c->keep_alive = false;
	buf_printf(h, "HTTP/1.1 %d %s\r\n", status, reason(status));
	if (ctype)
		buf_printf(h, "Content-Type: %s\r\n", ctype);
	if (extra && *extra) {
		buf_adds(h, extra);
		if (extra[strlen(extra) - 1] != '\n')
			buf_adds(h, "\r\n");
	}
	if (!c->keep_alive)
		buf_adds(h, "Connection: close\r\n");
	else if (c->http10)
		buf_adds(h, "Connection: keep-alive\r\n");
}

static int conn_send(struct http_conn *c, struct iovec *iov, size_t n)
{
	if (c->broken)
		return -EPIPE;
	if (http_send_iov(c->fd, iov, n) < 0) {
		c->broken = true;
		return -EPIPE;
	}
	return 0;
}

int http_respond(struct http_conn *c, int status, const char *content_type,
		 const void *body, size_t len, const char *extra_headers)
{
	_cleanup_(buf_free) struct buf h = { 0 };
	/* RFC 9110 8.6: no Content-Length and no body on 1xx, 204 and 304 */
	bool bodyless = status < 200 || status == 204 || status == 304;

	if (c->state != RESP_NONE)
		return -EALREADY;
	c->state = RESP_DONE;
	start_head(c, &h, status, content_type, extra_headers);
	if (!bodyless)
		buf_printf(&h, "Content-Length: %zu\r\n", len);
	buf_adds(&h, "\r\n");
	struct iovec iov[2] = {
		{ .iov_base = h.data, .iov_len = h.len },
		{ .iov_base = (void *)body, .iov_len = len },
	};
	return conn_send(c, iov, bodyless || c->is_head || !len ? 1 : 2);
}

int http_respond_json(struct http_conn *c, int status, const char *json_body)
{
	return http_respond(c, status, "application/json", json_body, strlen(json_body), NULL);
}

void http_write_error(struct jw *w, const char *code, const char *msg)
{
	jw_key(w, "error");
	jw_obj(w);
	jw_key(w, "code");
	jw_str(w, code);
	jw_key(w, "message");
	jw_str(w, msg);
	jw_end(w);
}

int http_respond_error(struct http_conn *c, int status, const char *code, const char *fmt, ...)
{
	_cleanup_(buf_free) struct buf b = { 0 };
	_cleanup_free_ char *msg = NULL;
	struct jw w;
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(&msg, fmt, ap) < 0)
		msg = NULL;
	va_end(ap);
	jw_init(&w, &b);
	jw_obj(&w);
	http_write_error(&w, code, msg ? msg : "");
	jw_end(&w);
	return http_respond_json(c, status, b.data);
}

/* HTTP/1.0 has no chunked coding: such a stream is the raw bytes, ended by
 * closing the connection. */
int http_stream_begin(struct http_conn *c, int status, const char *content_type,
		      const char *extra_headers)
{
	_cleanup_(buf_free) struct buf h = { 0 };

	if (c->state != RESP_NONE)
		return -EALREADY;
	c->state = RESP_STREAM;
	if (c->http10)
		c->keep_alive = false;
	start_head(c, &h, status, content_type, extra_headers);
	if (!c->http10)
		buf_adds(&h, "Transfer-Encoding: chunked\r\n");
	buf_adds(&h, "\r\n");
	struct iovec iov = { .iov_base = h.data, .iov_len = h.len };
	return conn_send(c, &iov, 1);
}

int http_stream_write(struct http_conn *c, const void *p, size_t n)
{
	char size[24];

	if (c->state != RESP_STREAM)
		return -EINVAL;
	if (c->broken)
		return -EPIPE;
	/* an empty chunk would end the stream */
	if (n == 0 || c->is_head)
		return 0;
	if (c->http10) {
		struct iovec raw = { .iov_base = (void *)p, .iov_len = n };
		return conn_send(c, &raw, 1);
	}
	int sl = snprintf(size, sizeof(size), "%zx\r\n", n);
	struct iovec iov[3] = {
		{ .iov_base = size, .iov_len = (size_t)sl },
		{ .iov_base = (void *)p, .iov_len = n },
		{ .iov_base = (void *)"\r\n", .iov_len = 2 },
	};
	return conn_send(c, iov, 3);
}

int http_stream_end(struct http_conn *c)
{
	if (c->state != RESP_STREAM)
		return -EINVAL;
	c->state = RESP_STREAM_DONE;
	if (c->http10 || c->is_head)
		return c->broken ? -EPIPE : 0;
	struct iovec iov = { .iov_base = (void *)"0\r\n\r\n", .iov_len = 5 };
	return conn_send(c, &iov, 1);
}

bool http_conn_peer_closed(struct http_conn *c)
{
	char ch;

	if (c->broken)
		return true;
	ssize_t r = recv(c->fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
	if (r == 0)
		return true;
	return r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

int http_conn_takeover(struct http_conn *c, struct buf *pending)
{
	c->state = RESP_DONE;
	c->keep_alive = false;
	if (pending && c->in.len)
		buf_add(pending, c->in.data, c->in.len);
	http_buf_consume(&c->in, c->in.len);
	return c->fd;
}

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

static void http_format_peer(const struct sockaddr_storage *ss, char *out, size_t n)
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

/* ---- listening ---- */

static int listen_fd_ready(int fd, const char *what, err_t *err)
{
	if (listen(fd, SOMAXCONN) < 0)
		return err_sys(err, "listen on %s", what);
	return 0;
}

static int http_split_host_port(const char *spec, char *host, size_t hn, char *port, size_t pn,
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

static int http_listen_inet(struct http_server *s, const char *spec, err_t *err)
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

static int http_listen_unix(struct http_server *s, const char *path, err_t *err)
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

/* Remove our socket file, unless someone has since replaced it. */
static void http_unlink_own_socket(struct http_server *s)
{
	struct stat st;

	if (s->unix_path && stat(s->unix_path, &st) == 0 && st.st_dev == s->unix_dev &&
	    st.st_ino == s->unix_ino)
		unlink(s->unix_path);
}

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

/* ----------------------------------------------------------------- client */

struct endpoint {
	bool is_unix;
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
	if (strncmp(base, "http://", 7) != 0)
		return err_set(err, EINVAL, "unsupported base URL `%s`", base);
	const char *hp = base + 7;
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
	snprintf(ep->port, sizeof(ep->port), "80");
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

int http_dial(const char *base, char *host_header, size_t hn, err_t *err)
{
	struct endpoint ep;

	if (parse_base(base, &ep, err) < 0)
		return -err->code;
	if (host_header)
		snprintf(host_header, hn, "%s", ep.host_header);
	return ep.is_unix ? connect_unix(&ep, err) : connect_tcp(&ep, err);
}

/* The request goes out in one sendmsg: head and body together, so a small
 * request is a single packet. A failed send is not fatal by itself: the
 * server may have answered early (413) and closed; the caller still reads. */
static int send_request(int fd, const struct endpoint *ep, const char *method,
			const char *target, const char *headers, const void *body, size_t len)
{
	_cleanup_(buf_free) struct buf h = { 0 };

	buf_printf(&h, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", method, target,
		   ep->host_header);
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
};

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
		ssize_t n = http_recv_some(r->fd, &r->in, HTTP_IO_CHUNK, -1);
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
		ssize_t n = http_recv_some(r->fd, &r->in, HTTP_IO_CHUNK,
					   r->idle_ms > 0 ? r->idle_ms : -1);
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

/* Connects, sends, and reads the final head into head. */
static int start_request(const char *base, const char *method, const char *target,
			 const char *headers, const void *body, size_t len, struct reader *r,
			 struct http_resp *head, enum body_kind *kind, uint64_t *clen, err_t *err)
{
	struct endpoint ep;

	if (parse_base(base, &ep, err) < 0)
		return -err->code;
	r->fd = ep.is_unix ? connect_unix(&ep, err) : connect_tcp(&ep, err);
	if (r->fd < 0)
		return r->fd;
	int sr = send_request(r->fd, &ep, method, target, headers, body, len);
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

int http_request(const char *base, const char *method, const char *target,
		 const char *headers, const void *body, size_t len,
		 struct http_resp *out, err_t *err)
{
	struct reader r = { .fd = -1 };
	enum body_kind kind;
	uint64_t clen = 0;

	memset(out, 0, sizeof(*out));
	buf_init(&r.in);
	int rc = start_request(base, method, target, headers, body, len, &r, out, &kind, &clen,
			       err);
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
	struct reader r = { .fd = -1 };
	struct http_resp head;
	enum body_kind kind;
	uint64_t clen = 0;

	memset(&head, 0, sizeof(head));
	buf_init(&r.in);
	int rc = start_request(base, method, target, headers, body, len, &r, &head, &kind, &clen,
			       err);
	if (rc == 0 && cbs->on_head)
		rc = cbs->on_head(arg, &head);
	if (rc == 0) {
		struct stream_arg sa = { .cbs = cbs, .arg = arg };
		if (cbs->on_idle && cbs->idle_ms > 0) {
			r.idle_ms = cbs->idle_ms;
			r.on_idle = cbs->on_idle;
			r.idle_arg = arg;
		}
		struct sink s = { .fn = emit_stream, .arg = &sa };
		rc = read_body(&r, kind, clen, &s, err);
	}
	http_resp_free(&head);
	if (r.fd >= 0)
		close(r.fd);
	buf_free(&r.in);
	return rc;
}
