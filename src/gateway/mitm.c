/* Request reading and rewriting for credential injection: the plain-HTTP
 * path, and the pieces the interception loop (mitmloop.c) shares. */
#include "mitm.h"
#include "mitm-internal.h"

#include <ctype.h>
#include <errno.h>
#include <openssl/err.h>
#include <poll.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define CHUNK 16384

/* ---- a BIO that first returns bytes already read, then reads the fd ---- */

static int pbio_read(BIO *b, char *out, int len)
{
	struct pbio *p = BIO_get_data(b);
	ssize_t k;

	BIO_clear_retry_flags(b);
	if (len <= 0)
		return 0;
	if (p->off < p->n) {
		size_t m = p->n - p->off < (size_t)len ? p->n - p->off : (size_t)len;
		memcpy(out, p->pre + p->off, m);
		p->off += m;
		return (int)m;
	}
	do
		k = read(p->fd, out, (size_t)len);
	while (k < 0 && errno == EINTR);
	if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
		BIO_set_retry_read(b);
		return -1;
	}
	return (int)k;
}

static int pbio_write(BIO *b, const char *in, int len)
{
	struct pbio *p = BIO_get_data(b);
	ssize_t k;

	BIO_clear_retry_flags(b);
	do
		k = send(p->fd, in, (size_t)len, MSG_NOSIGNAL);
	while (k < 0 && errno == EINTR);
	if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
		BIO_set_retry_write(b);
		return -1;
	}
	return (int)k;
}

static long pbio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static BIO_METHOD *pbio_meth;
static pthread_once_t pbio_once = PTHREAD_ONCE_INIT;

static void pbio_init(void)
{
	pbio_meth = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "airlock-prefix");
	BIO_meth_set_read(pbio_meth, pbio_read);
	BIO_meth_set_write(pbio_meth, pbio_write);
	BIO_meth_set_ctrl(pbio_meth, pbio_ctrl);
}

BIO_METHOD *mitm_pbio_method(void)
{
	pthread_once(&pbio_once, pbio_init);
	return pbio_meth;
}

/* ---- helpers ----------------------------------------------------------- */

int mitm_tls_fail(err_t *err, const char *what)
{
	char msg[160];
	unsigned long e = ERR_get_error();

	ERR_error_string_n(e, msg, sizeof(msg));
	ERR_clear_error();
	return err_set(err, EPROTO, "mitm: %s: %s", what, e ? msg : "connection closed");
}

static void set_timeouts(int fd, int ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

SSL_CTX *mitm_upstream_ctx(const char *extra_ca_file, err_t *err)
{
	static const unsigned char h11[] = "\x08http/1.1";
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());

	if (!ctx || SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
	    SSL_CTX_set_default_verify_paths(ctx) != 1 ||
	    SSL_CTX_set_alpn_protos(ctx, h11, sizeof(h11) - 1) != 0) {
		SSL_CTX_free(ctx);
		mitm_tls_fail(err, "upstream context");
		return NULL;
	}
	if (extra_ca_file && SSL_CTX_load_verify_locations(ctx, extra_ca_file, NULL) != 1) {
		SSL_CTX_free(ctx);
		mitm_tls_fail(err, "loading the upstream CA file");
		return NULL;
	}
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	return ctx;
}

/* The head as it goes upstream: "Connection: close" (so the next request
 * comes on a new connection, through the hook again) and no Keep-Alive. */
static void with_close(struct http_head *h, struct buf *out)
{
	head_del(h, "Keep-Alive");
	head_set(h, "Connection", "close");
	head_write(h, out);
}

/* How the request's body is framed, for reading it whole: BODY_LENGTH
 * (one Content-Length, all digits, at most BODY_MAX: *len), BODY_CHUNKED
 * (Transfer-Encoding: chunked alone, and no Content-Length), or BODY_PASS:
 * no body we read (none, or framing we leave to the client and the server:
 * another transfer coding, both fields, a length past BODY_MAX). */
enum body_kind mitm_body_kind(const struct http_head *h, long *len)
{
	const char *cl = NULL, *te = NULL;
	int ncl = 0, nte = 0;

	for (size_t i = 0; i < h->n; i++) {
		if (strcasecmp(h->f[i].name, "Transfer-Encoding") == 0) {
			te = h->f[i].value;
			nte++;
		} else if (strcasecmp(h->f[i].name, "Content-Length") == 0) {
			cl = h->f[i].value;
			ncl++;
		}
	}
	if (nte)
		return nte == 1 && !ncl && strcasecmp(te, "chunked") == 0 ? BODY_CHUNKED : BODY_PASS;
	if (ncl != 1 || !cl[0] || strlen(cl) > 15 || strspn(cl, "0123456789") != strlen(cl))
		return BODY_PASS;
	*len = strtol(cl, NULL, 10);
	return *len <= (long)BODY_MAX ? BODY_LENGTH : BODY_LARGE;
}

/* A chunked body, decoded as its bytes come (RFC 9112 7.1): each call
 * goes on from where the last one stopped, so a body that trickles in is
 * parsed once. */
#define CHUNK_LINE_MAX 1024              /* a size line, extensions included */
#define CHUNKED_RAW_MAX (2 * BODY_MAX)   /* the framing too */

/* p[0, n): the encoded body so far. 1: whole (d->off is its encoded
 * length, d->body the data); 0: more must come; -1: not a body read
 * whole here (malformed, data past BODY_MAX, framing past
 * CHUNKED_RAW_MAX, or trailer fields, which a Content-Length body cannot
 * carry). */
int mitm_dechunk(struct dechunk *d, const char *p, size_t n)
{
	for (;;) {
		const char *eol;
		size_t avail = n - d->off, k;

		if (d->off > CHUNKED_RAW_MAX)
			return -1;
		switch (d->state) {
		case DC_SIZE: {
			const char *q = p + d->off;
			size_t size = 0, digits = 0;
			eol = memmem(q, avail, "\r\n", 2);
			if (!eol)
				return avail > CHUNK_LINE_MAX ? -1 : 0;
			if ((size_t)(eol - q) > CHUNK_LINE_MAX)
				return -1;
			for (; q < eol && isxdigit((unsigned char)*q); q++, digits++) {
				size = size * 16 + (size_t)(*q <= '9' ? *q - '0' : (*q | 0x20) - 'a' + 10);
				if (size > BODY_MAX)
					return -1;
			}
			while (q < eol && (*q == ' ' || *q == '\t'))
				q++;
			if (!digits || (q < eol && *q != ';') || memchr(q, '\0', (size_t)(eol - q)))
				return -1;
			if (size > BODY_MAX - d->body.len)
				return -1;
			d->off = (size_t)(eol - p) + 2;
			d->left = size;
			d->state = size ? DC_DATA : DC_TRAILER;
			break;
		}
		case DC_DATA:
			k = d->left < avail ? d->left : avail;
			if (!k)
				return 0;
			buf_add(&d->body, p + d->off, k);
			d->off += k;
			if (!(d->left -= k))
				d->state = DC_DATA_END;
			break;
		case DC_DATA_END:
		case DC_TRAILER:   /* no trailer fields: the empty line ends it */
			if (avail < 2)
				return 0;
			if (memcmp(p + d->off, "\r\n", 2) != 0)
				return -1;
			d->off += 2;
			if (d->state == DC_TRAILER)
				return 1;
			d->state = DC_SIZE;
			break;
		}
	}
}

/* Where the request's bytes come from: the client's socket fd; none are
 * waited for past deadline. */
struct source {
	int fd;
	uint64_t deadline;
};

/* Append what the source has to hb: 0, -EPIPE (gone), -ETIMEDOUT. */
static long source_more(struct source *src, struct buf *hb)
{
	char tmp[16384];
	uint64_t now = now_ms();
	struct pollfd pf = { .fd = src->fd, .events = POLLIN };
	ssize_t k;

	if (now >= src->deadline || poll(&pf, 1, (int)(src->deadline - now)) <= 0)
		return -ETIMEDOUT;
	if ((k = read(src->fd, tmp, sizeof(tmp))) <= 0)
		return -EPIPE;
	buf_add(hb, tmp, (size_t)k);
	return 0;
}

/* Read until a whole request head is in hb: its length, or -errno
 * (-EPIPE: the client is gone; -ETIMEDOUT; else head_parse's). */
static long read_head(struct source *src, struct buf *hb, struct http_head *h)
{
	long hl;

	while ((hl = hb->len ? head_parse(hb->data, hb->len, h) : 0) == 0)
		if ((hl = source_more(src, hb)) < 0)
			break;
	return hl;
}

const char mitm_continue_100[] = "HTTP/1.1 100 Continue\r\n\r\n";

/* A client that waits for "100 Continue" before it sends its body gets it
 * from us, as we read the body before anything goes upstream; the field is
 * dropped, as the upstream gets the body at once. */
static long answer_continue(struct source *src, struct http_head *h, bool have_body)
{
	const char *e = head_get(h, "Expect");

	if (!e || strcasecmp(e, "100-continue") != 0 || have_body)
		return 0;
	head_del(h, "Expect");
	return write_all(src->fd, mitm_continue_100, sizeof(mitm_continue_100) - 1) < 0 ? -EPIPE : 0;
}

/* Read the body after the head (hb[0, hl)) whole into h->body when its
 * framing allows (body_kind): *rest is where the bytes after it start in
 * hb. A chunked body goes on with a Content-Length (request_out); one that
 * is not read whole after all (dechunk's -1, or not ended within
 * CHUNKED_WAIT_MS) passes untouched, with what was read of it. 0, or
 * -errno when the body did not arrive. */
static long read_body(struct source *src, struct http_head *h, struct buf *hb, size_t hl,
		      size_t *rest)
{
	struct dechunk d = { .state = DC_SIZE };
	long len = 0, e;
	int r;

	*rest = hl;
	switch (mitm_body_kind(h, &len)) {
	case BODY_PASS:
		return 0;
	case BODY_LARGE:
		/* streamed after the head (stream_body), if the hook wants
		 * anything replaced in it; else it passes untouched */
		h->body_streams = true;
		h->stream_len = (uint64_t)len;
		return 0;
	case BODY_LENGTH:
		if ((e = answer_continue(src, h, hb->len >= hl + (size_t)len)) < 0)
			return e;
		while (hb->len < hl + (size_t)len)
			if ((e = source_more(src, hb)) < 0)
				return e;
		buf_init(&h->body);
		buf_add(&h->body, hb->data + hl, (size_t)len);
		h->has_body = true;
		*rest = hl + (size_t)len;
		return 0;
	case BODY_CHUNKED:
		if ((e = answer_continue(src, h, hb->len > hl)) < 0)
			return e;
		if (src->deadline > now_ms() + CHUNKED_WAIT_MS)
			src->deadline = now_ms() + CHUNKED_WAIT_MS;
		buf_init(&d.body);
		while ((r = mitm_dechunk(&d, hb->data + hl, hb->len - hl)) == 0)
			if ((e = source_more(src, hb)) < 0) {
				buf_free(&d.body);
				return e == -ETIMEDOUT ? 0 : e;
			}
		if (r < 0) {
			buf_free(&d.body);
			return 0;
		}
		head_del(h, "Transfer-Encoding");
		h->body = d.body;
		h->has_body = true;
		*rest = hl + d.off;
		return 0;
	}
	return 0;
}

/* What goes upstream after the hook: the head as with_close writes it
 * (with the body's length, which injection may have changed), the body,
 * then whatever followed in hb from offset rest. */
void mitm_request_out(struct http_head *h, const struct buf *hb, size_t rest, struct buf *out)
{
	if (h->has_body) {
		char cl[24];
		snprintf(cl, sizeof(cl), "%zu", h->body.len);
		head_set(h, "Content-Length", cl);
	}
	with_close(h, out);
	if (h->has_body)
		buf_add(out, h->body.data, h->body.len);
	buf_add(out, hb->data + rest, hb->len - rest);
}

/* Read up to n bytes from fd: their count, or <= 0 (gone, failed, timed
 * out). */
static long recv_some(int fd, void *p, size_t n)
{
	ssize_t k;

	do
		k = read(fd, p, n);
	while (k < 0 && errno == EINTR);
	return k;
}

/* Write all of p to fd: 0, or -EPIPE. */
static int send_all(int fd, const void *p, size_t n)
{
	return write_all(fd, p, n) < 0 ? -EPIPE : 0;
}

/* One chunk of the re-framed body upstream (RFC 9112 7.1), then wiped: it
 * may hold a value. */
static int send_chunk(int up, struct buf *c)
{
	char size[24];
	int r = 0;

	if (!c->len)
		return 0;
	snprintf(size, sizeof(size), "%zx\r\n", c->len);
	if (send_all(up, size, strlen(size)) < 0 || send_all(up, c->data, c->len) < 0 ||
	    send_all(up, "\r\n", 2) < 0)
		r = -EPIPE;
	explicit_bzero(c->data, c->len);
	c->len = 0;
	return r;
}

/* A body past BODY_MAX that a credential wants replaced in: its
 * h->stream_len bytes (those in hb from rest first, then from the client)
 * go upstream chunked as they come, with h->subst replaced (subst_feed),
 * and whatever followed it in hb after them; both fds blocking, with
 * timeouts. 0, or -EPIPE. */
static int stream_body(int client, int up, const struct http_head *h, const struct buf *hb,
		       size_t rest)
{
	struct subst_stream ss;
	struct buf chunk;
	uint8_t *tmp = xmalloc(CHUNK);
	uint64_t len = h->stream_len, got;
	size_t take = hb->len - rest < len ? hb->len - rest : (size_t)len;
	int r = 0;

	subst_init(&ss, h);
	buf_init(&chunk);
	got = take;
	subst_feed(&ss, hb->data + rest, take, got == len, &chunk);
	while (r == 0 && (r = send_chunk(up, &chunk)) == 0 && got < len) {
		long k = recv_some(client, tmp, len - got < CHUNK ? (size_t)(len - got) : CHUNK);
		if (k <= 0) {
			r = -EPIPE;   /* the client is gone, or too slow (IO_MS) */
			break;
		}
		got += (uint64_t)k;
		subst_feed(&ss, tmp, (size_t)k, got == len, &chunk);
	}
	if (r == 0)
		r = send_all(up, "0\r\n\r\n", 5);
	if (r == 0 && rest + take < hb->len)
		r = send_all(up, hb->data + rest + take, hb->len - rest - take);
	explicit_bzero(tmp, CHUNK);
	free(tmp);
	subst_free(&ss);
	buf_free(&chunk);
	return r;
}

/* The head of a request whose large body streams with replacements:
 * re-framed chunked (its length changes with them). */
void mitm_streamed_head_out(struct http_head *h, struct buf *out)
{
	head_del(h, "Content-Length");
	head_set(h, "Transfer-Encoding", "chunked");
	with_close(h, out);
}

/* Does authority a (a Host value, or the authority of an absolute or
 * authority-form target) name the origin the gateway checked the request
 * for: sni (the SNI name, or for plain HTTP the sniffed Host), on port?  The
 * name is compared case-insensitively with one trailing dot dropped; a port
 * may be absent, the scheme's default (dflt: 443, 80) or the port the
 * sandbox dialled. Untrusted input. */
static bool authority_is(const char *a, size_t len, const char *sni, int dflt, int port)
{
	const char *colon = memchr(a, ':', len);
	size_t name = colon ? (size_t)(colon - a) : len;

	if (colon) {
		const char *p = colon + 1;
		size_t digits = len - name - 1;
		long v = 0;

		if (!digits || digits > 5 || strspn(p, "0123456789") < digits)
			return false;
		for (size_t i = 0; i < digits; i++)
			v = v * 10 + (p[i] - '0');
		if (v != dflt && v != port)
			return false;
	}
	if (name && a[name - 1] == '.')
		name--;
	return name && name == strlen(sni) && strncasecmp(a, sni, name) == 0;
}

/* Domain fronting: the gateway chose the credential by the SNI name (plain
 * HTTP: by the first Host field, which the sniffer read), so the request
 * must go to that origin too. A front that serves several names on one
 * address routes by Host (perhaps another Host field than the first, or
 * the authority of an absolute target, which takes precedence over Host),
 * so a request naming another origin would carry the injected credential
 * there. 0 when they agree (an HTTP/1.0 request without Host is fine: it
 * names nothing else); else the status to answer: 421, or 400 for an
 * HTTP/1.1 request without exactly one Host. */
int mitm_host_vs_sni(const struct http_head *h, const char *sni, int dflt, int port)
{
	const char *host = NULL, *t = h->target;
	int n = 0;

	for (size_t i = 0; i < h->n; i++)
		if (strcasecmp(h->f[i].name, "Host") == 0) {
			host = h->f[i].value;
			n++;
		}
	if (n > 1 || (!n && strcmp(h->version, "HTTP/1.0") != 0))
		return 400;
	if (host && !authority_is(host, strlen(host), sni, dflt, port))
		return 421;
	if (t[0] != '/' && strcmp(t, "*") != 0) {
		const char *a = strstr(t, "://"), *end;
		a = a ? a + 3 : t;   /* absolute-form, else authority-form */
		end = a + strcspn(a, "/?#");
		if (!authority_is(a, (size_t)(end - a), sni, dflt, port))
			return 421;
	}
	return 0;
}

/* host_vs_sni's answer, appended to out. */
void mitm_status_answer(int status, struct buf *out)
{
	const char *body = status == 421 ? "airlock: the request names another host than the one "
					   "its connection was checked for\n"
					 : "airlock: one Host field is required\n";

	buf_printf(out, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
		   "Connection: close\r\n\r\n%s", status,
		   status == 421 ? "Misdirected Request" : "Bad Request", strlen(body), body);
}

int mitm_http_head(int fd, const void *prefix, size_t n, const char *host, int port,
		   mitm_head_fn fn, void *arg, struct buf *out, err_t *err)
{
	return mitm_http_head_stream(fd, prefix, n, host, port, fn, arg, out, NULL, err);
}

int mitm_http_head_stream(int fd, const void *prefix, size_t n, const char *host, int port,
			  mitm_head_fn fn, void *arg, struct buf *out, struct mitm_stream **stream,
			  err_t *err)
{
	struct http_head h = { 0 };
	struct source src = { .fd = fd, .deadline = now_ms() + IO_MS };
	struct buf hb;
	size_t rest;
	long hl;
	int r;

	buf_init(&hb);
	buf_add(&hb, prefix, n);
	if ((hl = read_head(&src, &hb, &h)) < 0) {
		buf_free(&hb);
		return err_set(err, (int)-hl, "mitm: no valid request head");
	}
	if (host && (r = mitm_host_vs_sni(&h, host, 80, port)) != 0) {
		/* before the hook and the body: nothing injected or sent on */
		mitm_status_answer(r, out);
		head_free(&h);
		buf_free(&hb);
		return 1;
	}
	if ((hl = read_body(&src, &h, &hb, (size_t)hl, &rest)) < 0) {
		head_free(&h);
		buf_free(&hb);
		return err_set(err, (int)-hl, "mitm: the request body did not arrive");
	}
	r = fn(arg, &h, out);
	if (r != 1 && h.body_streams && h.n_subst && stream) {
		/* the caller streams the body once it dialled (mitm_stream_plain) */
		if (answer_continue(&src, &h, hb.len > rest) < 0) {
			head_free(&h);
			buf_free(&hb);
			return err_set(err, EPIPE, "mitm: the sandbox went away");
		}
		mitm_streamed_head_out(&h, out);
		*stream = xcalloc(1, sizeof(**stream));
		(*stream)->h = h;
		(*stream)->hb = hb;
		(*stream)->rest = rest;
		return 0;
	}
	if (r != 1) {
		mitm_request_out(&h, &hb, rest, out);
		r = 0;
	}
	head_free(&h);
	buf_free(&hb);
	return r;
}

int mitm_stream_plain(struct mitm_stream *st, int client_fd, int up_fd)
{
	int r;

	/* a client that stops sending (or an upstream that stops reading)
	 * frees the worker after IO_MS */
	set_timeouts(client_fd, IO_MS);
	set_timeouts(up_fd, IO_MS);
	r = stream_body(client_fd, up_fd, &st->h, &st->hb, st->rest);

	mitm_stream_free(st);
	return r;
}

void mitm_stream_free(struct mitm_stream *st)
{
	if (!st)
		return;
	head_free(&st->h);
	if (st->hb.data)
		explicit_bzero(st->hb.data, st->hb.len);
	buf_free(&st->hb);
	free(st);
}
