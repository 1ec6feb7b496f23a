/* TLS interception and plain-HTTP head rewriting for the gateway. */
#include "mitm.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define IO_MS 30000            /* handshake and request head */
#define IDLE_MS (5 * 60000)    /* a relayed connection with no bytes either way */
#define CHUNK 16384

/* ---- a BIO that first returns bytes already read, then reads the fd ---- */

struct pbio {
	const uint8_t *pre;
	size_t n, off;
	int fd;
};

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

static BIO_METHOD *pbio_method(void)
{
	pthread_once(&pbio_once, pbio_init);
	return pbio_meth;
}

/* ---- helpers ----------------------------------------------------------- */

static int tls_fail(err_t *err, const char *what)
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

static void set_nonblock(int fd, bool on)
{
	int fl = fcntl(fd, F_GETFL);

	fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

SSL_CTX *mitm_upstream_ctx(const char *extra_ca_file, err_t *err)
{
	static const unsigned char h11[] = "\x08http/1.1";
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());

	if (!ctx || SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
	    SSL_CTX_set_default_verify_paths(ctx) != 1 ||
	    SSL_CTX_set_alpn_protos(ctx, h11, sizeof(h11) - 1) != 0) {
		SSL_CTX_free(ctx);
		tls_fail(err, "upstream context");
		return NULL;
	}
	if (extra_ca_file && SSL_CTX_load_verify_locations(ctx, extra_ca_file, NULL) != 1) {
		SSL_CTX_free(ctx);
		tls_fail(err, "loading the upstream CA file");
		return NULL;
	}
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	return ctx;
}

/* Write all of p to ssl (non-blocking fd underneath). */
static int ssl_write_all(SSL *ssl, int fd, const void *p, size_t n)
{
	const uint8_t *q = p;

	while (n) {
		int k = SSL_write(ssl, q, n > INT32_MAX ? INT32_MAX : (int)n);
		if (k > 0) {
			q += k;
			n -= (size_t)k;
			continue;
		}
		int e = SSL_get_error(ssl, k);
		struct pollfd pf = { .fd = fd, .events = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT };
		if ((e != SSL_ERROR_WANT_WRITE && e != SSL_ERROR_WANT_READ) || poll(&pf, 1, IO_MS) <= 0)
			return -EPIPE;
	}
	return 0;
}

/* Relay between two TLS connections until one side ends; then tell the
 * other (close_notify). */
static void relay_tls(SSL *a, int afd, SSL *b, int bfd)
{
	uint8_t *buf = xmalloc(CHUNK);
	bool done = false;

	set_nonblock(afd, true);
	set_nonblock(bfd, true);
	while (!done) {
		struct pollfd p[2] = { { .fd = afd, .events = POLLIN }, { .fd = bfd, .events = POLLIN } };
		int wait = SSL_pending(a) || SSL_pending(b) ? 0 : IDLE_MS;
		int r = poll(p, 2, wait);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 || (r == 0 && wait))
			break;
		for (int i = 0; i < 2 && !done; i++) {
			SSL *from = i ? b : a, *to = i ? a : b;
			int tofd = i ? afd : bfd;
			if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)) && !SSL_pending(from))
				continue;
			for (;;) {
				int k = SSL_read(from, buf, CHUNK);
				if (k > 0) {
					if (ssl_write_all(to, tofd, buf, (size_t)k) < 0)
						done = true;
					if (done || !SSL_pending(from))
						break;
					continue;
				}
				int e = SSL_get_error(from, k);
				if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
					done = true;   /* closed, reset or broken */
				break;
			}
		}
	}
	ERR_clear_error();
	SSL_shutdown(a);
	SSL_shutdown(b);
	free(buf);
}

/* Read from ssl until a whole request head is in hb. Returns the head length. */
static long read_head_tls(SSL *ssl, struct buf *hb, struct http_head *h)
{
	char tmp[4096];

	for (;;) {
		long r = hb->len ? head_parse(hb->data, hb->len, h) : 0;
		if (r != 0)
			return r;
		int k = SSL_read(ssl, tmp, sizeof(tmp));
		if (k <= 0)
			return -EPIPE;
		buf_add(hb, tmp, (size_t)k);
	}
}

/* The head as it goes upstream: "Connection: close" (so the next request
 * comes on a new connection, through the hook again) and no Keep-Alive. */
static void with_close(struct http_head *h, struct buf *out)
{
	head_del(h, "Keep-Alive");
	head_set(h, "Connection", "close");
	head_write(h, out);
}

/* The length of a body to read whole for injection, or -1 when it passes
 * untouched: no Content-Length, or more than one, or one not all digits; a
 * Transfer-Encoding (chunked: its framing stays the client's); more than
 * BODY_MAX. */
static long body_length(const struct http_head *h)
{
	const char *v = NULL;
	int n = 0;

	for (size_t i = 0; i < h->n; i++) {
		if (strcasecmp(h->f[i].name, "Transfer-Encoding") == 0)
			return -1;
		if (strcasecmp(h->f[i].name, "Content-Length") == 0) {
			v = h->f[i].value;
			n++;
		}
	}
	if (n != 1 || !v[0] || strlen(v) > 8 || strspn(v, "0123456789") != strlen(v))
		return -1;
	long len = strtol(v, NULL, 10);
	return len <= (long)BODY_MAX ? len : -1;
}

static const char continue_100[] = "HTTP/1.1 100 Continue\r\n\r\n";

/* A client that waits for "100 Continue" before it sends its body: true
 * when it should get it from us (we read the body before anything goes
 * upstream); the field is dropped, as the upstream gets the body at once. */
static bool wants_continue(struct http_head *h, const struct buf *hb, size_t body_end)
{
	const char *e = head_get(h, "Expect");

	if (!e || strcasecmp(e, "100-continue") != 0 || hb->len >= body_end)
		return false;
	head_del(h, "Expect");
	return true;
}

/* The body, read whole: hb[hl, body_end) into h->body. */
static void take_body(struct http_head *h, const struct buf *hb, size_t hl, size_t body_end)
{
	buf_init(&h->body);
	buf_add(&h->body, hb->data + hl, body_end - hl);
	h->has_body = true;
}

/* What goes upstream after the hook: the head as with_close writes it
 * (with the body's length, which injection may have changed), the body,
 * then whatever followed in hb from offset rest. */
static void request_out(struct http_head *h, const struct buf *hb, size_t rest, struct buf *out)
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

int mitm_serve(struct ca *ca, SSL_CTX *upstream, int client_fd, const void *prefix, size_t n,
	       int up_fd, const char *host, mitm_head_fn fn, void *arg, err_t *err)
{
	struct pbio pb = { .pre = prefix, .n = n, .fd = client_fd };
	SSL_CTX *sctx;
	SSL *cs = NULL, *us = NULL;
	BIO *bio;
	struct http_head h = { 0 };
	struct buf hb, out;
	long hl;
	int r = -EPROTO;

	buf_init(&hb);
	buf_init(&out);
	sctx = ca_server_ctx(ca, host, err);
	if (!sctx)
		return -EIO;
	cs = SSL_new(sctx);
	SSL_CTX_free(sctx);   /* cs holds its own reference */
	bio = cs ? BIO_new(pbio_method()) : NULL;
	if (!bio) {
		SSL_free(cs);
		return tls_fail(err, "setting up the client side");
	}
	BIO_set_data(bio, &pb);
	BIO_set_init(bio, 1);
	SSL_set_bio(cs, bio, bio);
	set_timeouts(client_fd, IO_MS);
	set_timeouts(up_fd, IO_MS);
	if (SSL_accept(cs) != 1) {
		r = tls_fail(err, "handshake with the sandbox");
		goto out;
	}
	hl = read_head_tls(cs, &hb, &h);
	if (hl < 0) {
		r = err_set(err, hl == -EPIPE ? EPIPE : -hl, "mitm: %s request head from the sandbox",
			    hl == -EPIPE ? "no" : "a malformed or oversized");
		if (hl != -EPIPE) {
			static const char bad[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n"
						  "Connection: close\r\n\r\n";
			SSL_write(cs, bad, sizeof(bad) - 1);
		}
		goto out;
	}
	size_t rest = (size_t)hl;
	long bl = body_length(&h);
	if (bl >= 0) {
		rest = (size_t)hl + (size_t)bl;
		if (wants_continue(&h, &hb, rest))
			SSL_write(cs, continue_100, sizeof(continue_100) - 1);
		while (hb.len < rest) {
			char tmp[16384];
			int k = SSL_read(cs, tmp, sizeof(tmp));
			if (k <= 0) {
				r = err_set(err, EPIPE, "mitm: the request body did not arrive");
				goto out;
			}
			buf_add(&hb, tmp, (size_t)k);
		}
		take_body(&h, &hb, (size_t)hl, rest);
	}
	if (fn(arg, &h, &out) == 1) {
		SSL_write(cs, out.data, (int)out.len);
		r = 0;
		goto out;
	}
	request_out(&h, &hb, rest, &out);

	us = SSL_new(upstream);
	if (!us || SSL_set_fd(us, up_fd) != 1 || SSL_set_tlsext_host_name(us, host) != 1 ||
	    SSL_set1_host(us, host) != 1) {
		r = tls_fail(err, "setting up the upstream side");
		goto out;
	}
	if (SSL_connect(us) != 1) {
		static const char bad[] = "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\n"
					  "Content-Length: 47\r\nConnection: close\r\n\r\n"
					  "airlock: upstream TLS could not be verified\r\n\r\n";
		long v = SSL_get_verify_result(us);
		r = err_set(err, EPROTO, "mitm: upstream %s: %s", host,
			    v != X509_V_OK ? X509_verify_cert_error_string(v) : "handshake failed");
		ERR_clear_error();
		SSL_write(cs, bad, sizeof(bad) - 1);
		goto out;
	}
	if (SSL_write(us, out.data, (int)out.len) != (int)out.len) {
		r = tls_fail(err, "sending the request upstream");
		goto out;
	}
	relay_tls(cs, client_fd, us, up_fd);
	r = 0;
out:
	if (out.data)
		explicit_bzero(out.data, out.len);   /* it held the injected value */
	buf_free(&out);
	buf_free(&hb);
	head_free(&h);
	SSL_free(us);
	SSL_free(cs);
	ERR_clear_error();
	return r;
}

/* Append what fd has to hb, waiting until deadline (ms). 0, or -ETIMEDOUT,
 * or -EPIPE when the client is gone. */
static long read_more(int fd, struct buf *hb, uint64_t deadline)
{
	char tmp[16384];
	uint64_t now = now_ms();
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	ssize_t k;

	if (now >= deadline || poll(&pf, 1, (int)(deadline - now)) <= 0)
		return -ETIMEDOUT;
	if ((k = read(fd, tmp, sizeof(tmp))) <= 0)
		return -EPIPE;
	buf_add(hb, tmp, (size_t)k);
	return 0;
}

int mitm_http_head(int fd, const void *prefix, size_t n, mitm_head_fn fn, void *arg,
		   struct buf *out, err_t *err)
{
	struct http_head h = { 0 };
	struct buf hb;
	uint64_t deadline = now_ms() + IO_MS;
	long hl;
	int r;

	buf_init(&hb);
	buf_add(&hb, prefix, n);
	while ((hl = head_parse(hb.data, hb.len, &h)) == 0)
		if ((hl = read_more(fd, &hb, deadline)) < 0)
			break;
	if (hl < 0) {
		buf_free(&hb);
		return err_set(err, (int)-hl, "mitm: no valid request head");
	}
	size_t rest = (size_t)hl;
	long bl = body_length(&h);
	if (bl >= 0) {
		rest = (size_t)hl + (size_t)bl;
		if (wants_continue(&h, &hb, rest) &&
		    write_all(fd, continue_100, sizeof(continue_100) - 1) < 0)
			hl = -EPIPE;
		while (hl > 0 && hb.len < rest) {
			long e = read_more(fd, &hb, deadline);
			if (e < 0)
				hl = e;
		}
		if (hl < 0) {
			head_free(&h);
			buf_free(&hb);
			return err_set(err, (int)-hl, "mitm: the request body did not arrive");
		}
		take_body(&h, &hb, (size_t)hl, rest);
	}
	r = fn(arg, &h, out);
	if (r != 1) {
		request_out(&h, &hb, rest, out);
		r = 0;
	}
	head_free(&h);
	buf_free(&hb);
	return r;
}
