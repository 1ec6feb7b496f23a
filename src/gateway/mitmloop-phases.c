/* mitmloop-phases.c - one intercepted connection's phases on the loop
 * (mitmloop.h, mitmloop-internal.h): the TLS handshake with the sandbox,
 * its request head and body, the credential hook's queue, the request
 * upstream (a large body with replacements streamed), and alongside them
 * the upstream side's connect and verified handshake. Each phase returns 1
 * to go on (next phase), 0 to wait (what it waits for in cwant/uwant), -1
 * when the connection is over (c->r and c->why say why). Every byte from
 * the sandbox is untrusted: inject.c's head_parse and mitm.c's helpers
 * (mitm-internal.h) parse it, with the plain-HTTP path's limits. */
#include <errno.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "mitmloop-internal.h"

#define READ_CHUNK 16384

int mconn_fail(struct mconn *c, int r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->why, sizeof(c->why), fmt, ap);
	va_end(ap);
	c->r = r;
	return -1;
}

static int fail_tls(struct mconn *c, const char *what)
{
	err_t err = { 0 };

	mitm_tls_fail(&err, what);
	return mconn_fail(c, -EPROTO, "%s", err.msg);
}

/* A whole answer for the sandbox, once (best effort: a few hundred bytes
 * on a connection that just did its handshake). */
static void answer(struct mconn *c, const void *p, size_t n)
{
	if (SSL_write(c->cs, p, (int)n) <= 0)
		ERR_clear_error();
}

static const char bad_400[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n"
			      "Connection: close\r\n\r\n";
static const char bad_502_tls[] = "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\n"
				  "Content-Length: 47\r\nConnection: close\r\n\r\n"
				  "airlock: upstream TLS could not be verified\r\n\r\n";
static const char bad_502_dial[] = "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\n"
				   "Content-Length: 39\r\nConnection: close\r\n\r\n"
				   "airlock: upstream could not be reached\n";

/* What an SSL call that returned k wants: *want set, 0; or -1 (closed or
 * broken). */
static int wants(SSL *s, int k, uint32_t *want)
{
	int e = SSL_get_error(s, k);

	*want = e == SSL_ERROR_WANT_READ ? EPOLLIN : e == SSL_ERROR_WANT_WRITE ? EPOLLOUT : 0;
	return *want ? 0 : -1;
}

/* Read what the sandbox sent into hb: 1 some, 0 wait, -1 gone. */
static int client_more(struct mconn *c)
{
	char tmp[READ_CHUNK];
	int k = SSL_read(c->cs, tmp, (int)sizeof(tmp));

	if (k > 0) {
		buf_add(&c->hb, tmp, (size_t)k);
		explicit_bzero(tmp, (size_t)k);
		return 1;
	}
	return wants(c->cs, k, &c->cwant) < 0 ? -1 : 0;
}

static int do_accept(struct mconn *c)
{
	int k = SSL_accept(c->cs);

	if (k == 1) {
		c->phase = P_HEAD;
		c->deadline = now_ms() + (uint64_t)c->sh->l->io_ms;   /* head and body */
		return 1;
	}
	if (wants(c->cs, k, &c->cwant) == 0)
		return 0;
	return fail_tls(c, "handshake with the sandbox");
}

/* A client that waits for "100 Continue" before it sends its body gets
 * it from us (as mitm.c's answer_continue on the plain-HTTP path). */
static int answer_continue(struct mconn *c, bool have_body)
{
	const char *e = head_get(&c->h, "Expect");

	if (!e || strcasecmp(e, "100-continue") != 0 || have_body)
		return 0;
	head_del(&c->h, "Expect");
	if (SSL_write(c->cs, mitm_continue_100, (int)strlen(mitm_continue_100)) > 0)
		return 0;
	ERR_clear_error();
	return -1;
}

static int do_head(struct mconn *c)
{
	int status, k;

	for (;;) {
		long hl = c->hb.len ? head_parse(c->hb.data, c->hb.len, &c->h) : 0;
		if (hl < 0) {
			answer(c, bad_400, sizeof(bad_400) - 1);
			return mconn_fail(c, (int)hl, "mitm: a malformed or oversized request head from the "
				    "sandbox");
		}
		if (hl > 0) {
			c->hl = hl;
			break;
		}
		if ((k = client_more(c)) <= 0)
			return k < 0 ? mconn_fail(c, -EPIPE, "mitm: no request head from the sandbox") : 0;
	}
	if ((status = mitm_host_vs_sni(&c->h, c->host, 443, c->spec.port)) != 0) {
		/* before the hook: nothing injected, nothing sent upstream */
		struct buf a;
		buf_init(&a);
		mitm_status_answer(status, &a);
		answer(c, a.data, a.len);
		buf_free(&a);
		return mconn_fail(c, -EPERM, "mitm: answered %d: the request's Host or target does not "
			    "name %s", status, c->host);
	}
	c->rest = (size_t)c->hl;
	c->kind = mitm_body_kind(&c->h, &c->body_len);
	switch (c->kind) {
	case BODY_PASS:
		c->phase = P_HOOK;
		return 1;
	case BODY_LARGE:
		/* streamed after the head, if the hook wants anything
		 * replaced in it; else it passes untouched */
		c->h.body_streams = true;
		c->h.stream_len = (uint64_t)c->body_len;
		c->phase = P_HOOK;
		return 1;
	case BODY_LENGTH:
		if (answer_continue(c, c->hb.len >= (size_t)c->hl + (size_t)c->body_len) < 0)
			return mconn_fail(c, -EPIPE, "mitm: the request body did not arrive");
		break;
	case BODY_CHUNKED:
		if (answer_continue(c, c->hb.len > (size_t)c->hl) < 0)
			return mconn_fail(c, -EPIPE, "mitm: the request body did not arrive");
		if (c->deadline > now_ms() + CHUNKED_WAIT_MS)
			c->deadline = now_ms() + CHUNKED_WAIT_MS;
		c->d = (struct dechunk){ .state = DC_SIZE };
		buf_init(&c->d.body);
		break;
	}
	c->phase = P_BODY;
	return 1;
}

/* A chunked body not read whole after all: it passes untouched. */
void mconn_chunked_pass(struct mconn *c)
{
	buf_free(&c->d.body);
	c->rest = (size_t)c->hl;
	c->phase = P_HOOK;
}

static int do_body(struct mconn *c)
{
	size_t hl = (size_t)c->hl;
	int k, r;

	if (c->kind == BODY_LENGTH) {
		size_t len = (size_t)c->body_len;
		while (c->hb.len < hl + len)
			if ((k = client_more(c)) <= 0)
				return k < 0 ? mconn_fail(c, -EPIPE, "mitm: the request body did not arrive")
					     : 0;
		buf_init(&c->h.body);
		buf_add(&c->h.body, c->hb.data + hl, len);
		c->h.has_body = true;
		c->rest = hl + len;
		c->phase = P_HOOK;
		return 1;
	}
	while ((r = mitm_dechunk(&c->d, c->hb.data + hl, c->hb.len - hl)) == 0)
		if ((k = client_more(c)) <= 0)
			return k < 0 ? mconn_fail(c, -EPIPE, "mitm: the request body did not arrive") : 0;
	if (r < 0) {
		mconn_chunked_pass(c);
		return 1;
	}
	head_del(&c->h, "Transfer-Encoding");
	c->h.body = c->d.body;
	c->h.has_body = true;
	buf_init(&c->d.body);
	c->rest = hl + c->d.off;
	c->phase = P_HOOK;
	return 1;
}

/* Queue the hook (first call), or take its result (once it is back). */
static int do_hook(struct mconn *c)
{
	struct mitm_loop *l = c->sh->l;

	if (c->hs == H_NONE && (c->up == U_UNREACHABLE || c->up == U_UNVERIFIED)) {
		c->phase = P_UPSTREAM;   /* its 502: no value read for nothing */
		return 1;
	}
	if (c->hs == H_NONE) {
		c->deadline = now_ms() + (uint64_t)c->sh->l->io_ms;
		c->cwant = 0;   /* nothing read from the sandbox meanwhile */
		pthread_mutex_lock(&l->hmu);
		c->hs = H_QUEUED;
		c->hnext = NULL;
		if (l->hq_tail)
			l->hq_tail->hnext = c;
		else
			l->hq_head = c;
		l->hq_tail = c;
		pthread_cond_signal(&l->hcv);
		pthread_mutex_unlock(&l->hmu);
		return 0;
	}
	if (c->hs != H_BACK)
		return 0;
	if (c->hook_r == 1) {
		answer(c, c->reply.data, c->reply.len);
		c->r = 0;
		return -1;
	}
	if (c->h.body_streams && c->h.n_subst) {
		/* a large body to replace in: re-framed chunked, as its
		 * length changes with the replacements */
		if (answer_continue(c, c->hb.len > c->rest) < 0)
			return mconn_fail(c, -EPIPE, "mitm: the sandbox went away");
		mitm_streamed_head_out(&c->h, &c->out);
	} else {
		mitm_request_out(&c->h, &c->hb, c->rest, &c->out);
	}
	c->phase = P_UPSTREAM;
	return 1;
}

static int do_upstream(struct mconn *c)
{
	switch (c->up) {
	case U_CONNECTING:
	case U_TLS:
		return 0;
	case U_UNREACHABLE:
		answer(c, bad_502_dial, sizeof(bad_502_dial) - 1);
		return mconn_fail(c, -EHOSTUNREACH, "mitm: upstream %s could not be reached", c->host);
	case U_UNVERIFIED:
		answer(c, bad_502_tls, sizeof(bad_502_tls) - 1);
		return mconn_fail(c, -EPROTO, "%s", c->up_why);
	case U_READY:
		break;
	}
	c->phase = P_SEND;
	c->deadline = now_ms() + (uint64_t)c->sh->l->io_ms;
	c->out_off = 0;
	return 1;
}

/* Write out[out_off, len) upstream: 1 all of it (out emptied, wiped), 0
 * wait, -1 failed. A write that must wait is retried with the same
 * bytes, as OpenSSL requires. */
static int flush_out(struct mconn *c)
{
	while (c->out_off < c->out.len) {
		int k = SSL_write(c->us, c->out.data + c->out_off, (int)(c->out.len - c->out_off));
		if (k <= 0)
			return wants(c->us, k, &c->uwant);
		c->out_off += (size_t)k;
		c->deadline = now_ms() + (uint64_t)c->sh->l->io_ms;
	}
	c->uwant = 0;
	explicit_bzero(c->out.data, c->out.len);
	c->out.len = 0;
	c->out_off = 0;
	return 1;
}

/* One chunk of the re-framed body into out (RFC 9112 7.1); chunk wiped. */
static void frame_chunk(struct mconn *c, struct buf *chunk)
{
	if (!chunk->len)
		return;
	buf_printf(&c->out, "%zx\r\n", chunk->len);
	buf_add(&c->out, chunk->data, chunk->len);
	buf_add(&c->out, "\r\n", 2);
	explicit_bzero(chunk->data, chunk->len);
	chunk->len = 0;
}

static int do_send(struct mconn *c)
{
	int k = flush_out(c);

	if (k < 0)
		return fail_tls(c, "sending the request upstream");
	if (k == 0)
		return 0;
	if (!(c->h.body_streams && c->h.n_subst)) {
		c->phase = P_RELAY;
		return 1;
	}
	/* the body's bytes already read first (stream_body in mitm.c) */
	struct buf chunk;
	uint64_t len = c->h.stream_len;
	buf_init(&chunk);
	subst_init(&c->ss, &c->h);
	c->ss_on = true;
	c->take = c->hb.len - c->rest < len ? c->hb.len - c->rest : (size_t)len;
	c->got = c->take;
	subst_feed(&c->ss, c->hb.data + c->rest, c->take, c->got == len, &chunk);
	frame_chunk(c, &chunk);
	buf_free(&chunk);
	c->phase = P_STREAM;
	return 1;
}

static int do_stream(struct mconn *c)
{
	uint64_t len = c->h.stream_len;
	uint8_t tmp[READ_CHUNK];
	int k;

	for (;;) {
		if ((k = flush_out(c)) <= 0)
			return k < 0 ? mconn_fail(c, -EPIPE, "mitm: streaming the request body upstream") : 0;
		if (c->stream_fin) {
			c->phase = P_RELAY;
			return 1;
		}
		if (c->got == len) {
			/* the end, then what followed the body in hb */
			size_t after = c->rest + c->take;
			buf_add(&c->out, "0\r\n\r\n", 5);
			buf_add(&c->out, c->hb.data + after, c->hb.len - after);
			c->stream_fin = true;
			continue;
		}
		k = SSL_read(c->cs, tmp, len - c->got < sizeof(tmp) ? (int)(len - c->got)
								     : (int)sizeof(tmp));
		if (k <= 0) {
			if (wants(c->cs, k, &c->cwant) < 0)
				return mconn_fail(c, -EPIPE, "mitm: streaming the request body upstream");
			return 0;
		}
		struct buf chunk;
		buf_init(&chunk);
		c->got += (uint64_t)k;
		c->deadline = now_ms() + (uint64_t)c->sh->l->io_ms;
		subst_feed(&c->ss, tmp, (size_t)k, c->got == len, &chunk);
		explicit_bzero(tmp, (size_t)k);
		frame_chunk(c, &chunk);
		buf_free(&chunk);
	}
}

void mconn_up_unverified(struct mconn *c)
{
	long v = c->us ? SSL_get_verify_result(c->us) : X509_V_OK;

	ERR_clear_error();
	snprintf(c->up_why, sizeof(c->up_why), "mitm: upstream %s: %s", c->host,
		 v != X509_V_OK ? X509_verify_cert_error_string(v) : "handshake failed");
	c->up = U_UNVERIFIED;
	c->up_want = 0;
}

/* The upstream side's next steps, as far as they go now. */
void mconn_up_progress(struct mconn *c)
{
	if (c->up == U_CONNECTING) {
		struct pollfd p = { .fd = c->ufd, .events = POLLOUT };
		int e = 0;
		socklen_t el = sizeof(e);

		if (poll(&p, 1, 0) <= 0)
			return;
		bool ok = getsockopt(c->ufd, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e == 0;
		if (c->spec.dialed)
			c->spec.dialed(c->spec.done_arg, ok);
		if (!ok) {
			c->up = U_UNREACHABLE;
			return;
		}
		c->us = SSL_new(c->spec.upstream);
		if (!c->us || SSL_set_fd(c->us, c->ufd) != 1 ||
		    SSL_set_tlsext_host_name(c->us, c->host) != 1 ||
		    SSL_set1_host(c->us, c->host) != 1) {
			err_t err = { 0 };
			mitm_tls_fail(&err, "setting up the upstream side");
			snprintf(c->up_why, sizeof(c->up_why), "%s", err.msg);
			c->up = U_UNVERIFIED;
			return;
		}
		c->up = U_TLS;
		c->up_deadline = now_ms() + (uint64_t)c->sh->l->io_ms;
	}
	if (c->up == U_TLS) {
		int k = SSL_connect(c->us);
		if (k == 1) {
			c->up = U_READY;
			c->up_want = 0;
		} else if (wants(c->us, k, &c->up_want) < 0) {
			mconn_up_unverified(c);
		}
	}
}

/* Run c's current phase, P_ACCEPT to P_STREAM (advance handles the
 * others): 1 go on, 0 wait, -1 over. */
int mconn_step(struct mconn *c)
{
	switch (c->phase) {
	case P_ACCEPT: return do_accept(c);
	case P_HEAD: return do_head(c);
	case P_BODY: return do_body(c);
	case P_HOOK: return do_hook(c);
	case P_UPSTREAM: return do_upstream(c);
	case P_SEND: return do_send(c);
	case P_STREAM: return do_stream(c);
	case P_RELAY:
	case P_DONE:
		break;
	}
	return 0;
}
