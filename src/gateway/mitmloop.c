/* mitmloop.c - intercepted TLS set up on event loops (mitmloop.h).
 *
 * A shard is one thread with its epoll; a connection stays on its shard.
 * advance() runs a connection's phases until one must wait: then what the
 * last SSL call wants (read or write readiness; TLS may need either for
 * either call) sets its fds' epoll events, and the phase's deadline is
 * checked every TICK_MS. The hook threads take connections from one queue
 * and give them back to their shard (a list and its eventfd). All bytes
 * from the sandbox are untrusted: they are parsed by inject.c's head_parse
 * and mitm.c's helpers (mitm-internal.h), with the same limits as the
 * plain-HTTP path (mitm_http_head). */
#include "mitmloop.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../lib/log.h"
#include "../lib/util.h"
#include "mitm-internal.h"

#define TICK_MS 250
#define READ_CHUNK 16384

enum phase {
	P_ACCEPT,      /* TLS with the sandbox */
	P_HEAD,        /* its request head */
	P_BODY,        /* a body read whole (Content-Length or chunked) */
	P_HOOK,        /* the credential hook, on a hook thread */
	P_UPSTREAM,    /* the upstream side (below), if it is not ready yet */
	P_SEND,        /* the request upstream */
	P_STREAM,      /* a large body with replacements, streamed */
	P_RELAY,       /* to the relay loop */
	P_DONE,        /* over: freed at the end of the loop's turn */
};

/* The upstream side goes on alongside the phases up to P_UPSTREAM: the
 * connect, then TLS (verified), so neither adds its round trips to the
 * request's once the hook is done. */
enum up_state { U_CONNECTING, U_TLS, U_READY, U_UNREACHABLE, U_UNVERIFIED };

/* H_DONE: the hook thread gave it back (on the shard's hooked list);
 * H_BACK: the loop took it from there. */
enum hook_state { H_NONE, H_QUEUED, H_RUNNING, H_DONE, H_BACK };

struct shard;

struct mconn {
	struct mconn *next, *prev;    /* the shard's */
	struct mconn *hnext;          /* the hook queue's, then the shard's hooked list */
	struct shard *sh;
	struct mitm_conn_spec spec;   /* prefix and host point into this struct's copies */
	char *host;
	SSL *cs, *us;
	struct pbio *pb;              /* cs's BIO data, with the prefix after it */
	int cfd, ufd;
	enum phase phase;
	uint64_t deadline;            /* of the phase, now_ms() */
	uint64_t dial_deadline;
	enum up_state up;
	uint64_t up_deadline;         /* of U_TLS */
	uint32_t up_want;             /* what SSL_connect wants */
	char up_why[512];             /* why U_UNVERIFIED */
	uint32_t cev, uev;            /* epoll events armed */
	bool creg, ureg;              /* the fd is in the epoll set */
	uint32_t cwant, uwant;        /* what the last SSL calls want */
	/* the request */
	struct buf hb;
	struct http_head h;
	long hl, body_len;
	size_t rest;
	enum body_kind kind;
	struct dechunk d;
	/* the hook (under the loop's hook mutex while queued or running) */
	enum hook_state hs;
	int hook_r;
	struct buf reply;
	/* upstream: out[out_off, len) still to write */
	struct buf out;
	size_t out_off;
	/* streaming a large body */
	struct subst_stream ss;
	bool ss_on, stream_fin;
	uint64_t got;
	size_t take;
	int r;
	char why[256];
};

struct shard {
	struct mitm_loop *l;
	int ep, efd;
	pthread_mutex_t mu;
	struct mconn *incoming;       /* under mu */
	struct mconn *hooked;         /* under mu: back from the hook */
	struct mconn *conns;          /* the loop's */
	struct mconn *dead;           /* over: freed after this turn's events */
};

struct mitm_loop {
	struct tls_loop *relay;
	struct shard *sh;
	unsigned n_sh, next_sh;       /* next_sh: atomic */
	pthread_mutex_t hmu;
	pthread_cond_t hcv;
	struct mconn *hq_head, *hq_tail;
	unsigned n;                   /* atomic: connections being set up */
	int io_ms, connect_ms;        /* the deadlines */
};

/* ---- ending ------------------------------------------------------------ */

static void destroy(struct mconn *c)
{
	c->spec.end(c->spec.hook_arg, c->r, c->r < 0 ? c->why : NULL);
	SSL_free(c->us);
	SSL_free(c->cs);
	free(c->pb);
	head_free(&c->h);
	if (c->hb.data)
		explicit_bzero(c->hb.data, c->hb.len);
	buf_free(&c->hb);
	buf_free(&c->d.body);
	if (c->out.data)
		explicit_bzero(c->out.data, c->out.len);   /* it held the injected value */
	buf_free(&c->out);
	buf_free(&c->reply);
	if (c->ss_on)
		subst_free(&c->ss);
	free(c->host);
	free(c);
}

static void unlist(struct mconn *c)
{
	struct shard *sh = c->sh;

	if (c->prev)
		c->prev->next = c->next;
	else
		sh->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->next = c->prev = NULL;
	if (c->creg)
		epoll_ctl(sh->ep, EPOLL_CTL_DEL, c->cfd, NULL);
	if (c->ureg)
		epoll_ctl(sh->ep, EPOLL_CTL_DEL, c->ufd, NULL);
	c->creg = c->ureg = false;
	__atomic_sub_fetch(&sh->l->n, 1, __ATOMIC_RELAXED);
}

/* Freed after the events of this turn, which may still name it. */
static void bury(struct mconn *c)
{
	c->phase = P_DONE;
	c->next = c->sh->dead;
	c->sh->dead = c;
}

/* The connection is over: its fds go back (done), and the rest once the
 * hook no longer uses it. A hook that has not started is taken off the
 * queue. */
static void finish(struct mconn *c)
{
	struct mitm_loop *l = c->sh->l;
	bool zombie = false;

	unlist(c);
	c->phase = P_DONE;
	if (c->cs && SSL_is_init_finished(c->cs)) {
		SSL_shutdown(c->cs);   /* close_notify, not waited for */
		ERR_clear_error();
	}
	c->spec.done(c->spec.done_arg, c->cfd, c->ufd);
	pthread_mutex_lock(&l->hmu);
	if (c->hs == H_QUEUED) {
		struct mconn **p = &l->hq_head, *prev = NULL;
		while (*p != c) {
			prev = *p;
			p = &(*p)->hnext;
		}
		*p = c->hnext;
		if (l->hq_tail == c)
			l->hq_tail = prev;
		c->hs = H_NONE;
	} else if (c->hs == H_RUNNING || c->hs == H_DONE) {
		zombie = true;   /* its hook thread hands it back; it ends then */
	}
	pthread_mutex_unlock(&l->hmu);
	if (!zombie)
		bury(c);
}

static int fail(struct mconn *c, int r, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(struct mconn *c, int r, const char *fmt, ...)
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
	return fail(c, -EPROTO, "%s", err.msg);
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

/* ---- the phases: 1 go on (next phase), 0 wait, -1 over (fail) ---------- */

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
			return fail(c, (int)hl, "mitm: a malformed or oversized request head from the "
				    "sandbox");
		}
		if (hl > 0) {
			c->hl = hl;
			break;
		}
		if ((k = client_more(c)) <= 0)
			return k < 0 ? fail(c, -EPIPE, "mitm: no request head from the sandbox") : 0;
	}
	if ((status = mitm_host_vs_sni(&c->h, c->host, 443, c->spec.port)) != 0) {
		/* before the hook: nothing injected, nothing sent upstream */
		struct buf a;
		buf_init(&a);
		mitm_status_answer(status, &a);
		answer(c, a.data, a.len);
		buf_free(&a);
		return fail(c, -EPERM, "mitm: answered %d: the request's Host or target does not "
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
			return fail(c, -EPIPE, "mitm: the request body did not arrive");
		break;
	case BODY_CHUNKED:
		if (answer_continue(c, c->hb.len > (size_t)c->hl) < 0)
			return fail(c, -EPIPE, "mitm: the request body did not arrive");
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
static void chunked_pass(struct mconn *c)
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
				return k < 0 ? fail(c, -EPIPE, "mitm: the request body did not arrive")
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
			return k < 0 ? fail(c, -EPIPE, "mitm: the request body did not arrive") : 0;
	if (r < 0) {
		chunked_pass(c);
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
			return fail(c, -EPIPE, "mitm: the sandbox went away");
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
		return fail(c, -EHOSTUNREACH, "mitm: upstream %s could not be reached", c->host);
	case U_UNVERIFIED:
		answer(c, bad_502_tls, sizeof(bad_502_tls) - 1);
		return fail(c, -EPROTO, "%s", c->up_why);
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
			return k < 0 ? fail(c, -EPIPE, "mitm: streaming the request body upstream") : 0;
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
				return fail(c, -EPIPE, "mitm: streaming the request body upstream");
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

/* The pair goes on on the relay loop, which ends it. */
static void hand_over(struct mconn *c)
{
	unlist(c);
	tls_loop_add(c->sh->l->relay, c->cs, c->cfd, c->us, c->ufd, c->pb, c->spec.done,
		     c->spec.done_arg);
	c->cs = c->us = NULL;
	c->pb = NULL;
	c->r = 1;
	bury(c);
}

static void up_unverified(struct mconn *c)
{
	long v = c->us ? SSL_get_verify_result(c->us) : X509_V_OK;

	ERR_clear_error();
	snprintf(c->up_why, sizeof(c->up_why), "mitm: upstream %s: %s", c->host,
		 v != X509_V_OK ? X509_verify_cert_error_string(v) : "handshake failed");
	c->up = U_UNVERIFIED;
	c->up_want = 0;
}

/* The upstream side's next steps, as far as they go now. */
static void up_progress(struct mconn *c)
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
			up_unverified(c);
		}
	}
}

/* fd in the epoll set for events, or out of it when none: a hang-up
 * is reported whatever the events, and would wake the loop again and
 * again while the connection waits on something else. */
static void arm_fd(struct mconn *c, int fd, uint32_t want, uint32_t *armed, bool *reg)
{
	struct epoll_event ev = { .events = want, .data.ptr = c };

	if (!want) {
		if (*reg)
			epoll_ctl(c->sh->ep, EPOLL_CTL_DEL, fd, NULL);
		*reg = false;
	} else if (!*reg) {
		epoll_ctl(c->sh->ep, EPOLL_CTL_ADD, fd, &ev);
		*reg = true;
	} else if (want != *armed) {
		epoll_ctl(c->sh->ep, EPOLL_CTL_MOD, fd, &ev);
	}
	*armed = want;
}

static void arm(struct mconn *c)
{
	uint32_t uev = c->uwant;

	if (c->up == U_CONNECTING)
		uev = EPOLLOUT;   /* the connect's end */
	else if (c->up == U_TLS)
		uev = c->up_want;
	arm_fd(c, c->cfd, c->cwant, &c->cev, &c->creg);
	arm_fd(c, c->ufd, uev, &c->uev, &c->ureg);
}

/* Run c's phases until one waits, or it is over. */
static void advance(struct mconn *c)
{
	int k = 1;

	up_progress(c);
	while (k > 0) {
		c->cwant = c->uwant = 0;
		switch (c->phase) {
		case P_ACCEPT: k = do_accept(c); break;
		case P_HEAD: k = do_head(c); break;
		case P_BODY: k = do_body(c); break;
		case P_HOOK: k = do_hook(c); break;
		case P_UPSTREAM: k = do_upstream(c); break;
		case P_SEND: k = do_send(c); break;
		case P_STREAM: k = do_stream(c); break;
		case P_RELAY:
			hand_over(c);
			return;
		case P_DONE:
			return;
		}
	}
	if (k < 0)
		finish(c);
	else
		arm(c);
}

/* A phase past its deadline. */
static void expire(struct mconn *c, uint64_t now)
{
	bool up_ended = false;

	if (c->up == U_CONNECTING && now >= c->dial_deadline) {
		c->up = U_UNREACHABLE;
		if (c->spec.dialed)
			c->spec.dialed(c->spec.done_arg, false);
		up_ended = true;
	} else if (c->up == U_TLS && now >= c->up_deadline) {
		up_unverified(c);
		up_ended = true;
	}
	if (up_ended && c->phase == P_UPSTREAM) {
		advance(c);
		return;
	}
	if (now < c->deadline)
		return;
	switch (c->phase) {
	case P_ACCEPT:
		fail(c, -ETIMEDOUT, "mitm: handshake with the sandbox: timed out");
		break;
	case P_HEAD:
		fail(c, -ETIMEDOUT, "mitm: no request head from the sandbox");
		break;
	case P_BODY:
		if (c->kind == BODY_CHUNKED) {
			chunked_pass(c);   /* a stream: it passes untouched */
			advance(c);
			return;
		}
		fail(c, -ETIMEDOUT, "mitm: the request body did not arrive");
		break;
	case P_HOOK:
		fail(c, -ETIMEDOUT, "mitm: the credential hook took too long");
		break;
	case P_UPSTREAM:
		return;   /* the upstream side's own deadlines */
	case P_SEND:
		fail(c, -ETIMEDOUT, "mitm: sending the request upstream: timed out");
		break;
	case P_STREAM:
		fail(c, -ETIMEDOUT, "mitm: streaming the request body upstream: timed out");
		break;
	case P_RELAY:
	case P_DONE:
		return;
	}
	finish(c);
}

/* ---- the threads ------------------------------------------------------- */

static void take_lists(struct shard *sh)
{
	struct mconn *in, *hooked;
	uint64_t v;

	(void)!read(sh->efd, &v, sizeof(v));
	pthread_mutex_lock(&sh->mu);
	in = sh->incoming;
	hooked = sh->hooked;
	sh->incoming = sh->hooked = NULL;
	pthread_mutex_unlock(&sh->mu);
	while (in) {
		struct mconn *c = in;
		in = c->next;
		c->prev = NULL;
		c->next = sh->conns;
		if (sh->conns)
			sh->conns->prev = c;
		sh->conns = c;
		advance(c);   /* the ClientHello is there already */
	}
	while (hooked) {
		struct mconn *c = hooked;
		hooked = c->hnext;
		pthread_mutex_lock(&sh->l->hmu);
		c->hs = H_BACK;
		pthread_mutex_unlock(&sh->l->hmu);
		if (c->phase == P_DONE)
			bury(c);   /* it ended while its hook ran */
		else
			advance(c);
	}
}

static void *shard_main(void *arg)
{
	struct shard *sh = arg;
	uint64_t tick = now_ms();

	for (;;) {
		struct epoll_event ev[64];
		int n = epoll_wait(sh->ep, ev, 64, TICK_MS);
		for (int i = 0; i < n; i++) {
			if (ev[i].data.ptr == sh)
				take_lists(sh);
		}
		for (int i = 0; i < n; i++) {
			struct mconn *c = ev[i].data.ptr;
			/* two events of one connection (its fds) in a batch:
			 * the second may find it over, and not yet freed */
			if (c != (void *)sh && c->phase != P_DONE)
				advance(c);
		}
		uint64_t now = now_ms();
		if (now - tick >= TICK_MS) {
			tick = now;
			for (struct mconn *c = sh->conns, *next; c; c = next) {
				next = c->next;
				expire(c, now);
			}
		}
		while (sh->dead) {
			struct mconn *c = sh->dead;
			sh->dead = c->next;
			destroy(c);
		}
	}
	return NULL;
}

static void *hook_main(void *arg)
{
	struct mitm_loop *l = arg;

	for (;;) {
		struct mconn *c;
		pthread_mutex_lock(&l->hmu);
		while (!l->hq_head)
			pthread_cond_wait(&l->hcv, &l->hmu);
		c = l->hq_head;
		l->hq_head = c->hnext;
		if (!l->hq_head)
			l->hq_tail = NULL;
		c->hs = H_RUNNING;
		pthread_mutex_unlock(&l->hmu);

		int r = c->spec.hook(c->spec.hook_arg, &c->h, &c->reply);

		pthread_mutex_lock(&l->hmu);
		c->hook_r = r;
		c->hs = H_DONE;
		pthread_mutex_unlock(&l->hmu);
		pthread_mutex_lock(&c->sh->mu);
		c->hnext = c->sh->hooked;
		c->sh->hooked = c;
		pthread_mutex_unlock(&c->sh->mu);
		(void)!write(c->sh->efd, &(uint64_t){ 1 }, sizeof(uint64_t));
	}
	return NULL;
}

struct mitm_loop *mitm_loop_start(struct tls_loop *relay, const struct mitm_loop_opts *o,
				  err_t *err)
{
	struct mitm_loop *l = xcalloc(1, sizeof(*l));
	pthread_attr_t at;
	pthread_t t;

	l->relay = relay;
	l->n_sh = o->shards ? o->shards : 1;
	l->io_ms = o->io_ms > 0 ? o->io_ms : IO_MS;
	l->connect_ms = o->connect_ms > 0 ? o->connect_ms : MITM_CONNECT_MS;
	l->sh = xcalloc(l->n_sh, sizeof(*l->sh));
	pthread_mutex_init(&l->hmu, NULL);
	pthread_cond_init(&l->hcv, NULL);
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	/* everything here lives as long as the process */
	for (unsigned i = 0; i < l->n_sh; i++) {
		struct shard *sh = &l->sh[i];
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = sh };
		sh->l = l;
		pthread_mutex_init(&sh->mu, NULL);
		sh->ep = epoll_create1(EPOLL_CLOEXEC);
		sh->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (sh->ep < 0 || sh->efd < 0 || epoll_ctl(sh->ep, EPOLL_CTL_ADD, sh->efd, &ev) < 0) {
			err_sys(err, "mitm loop");
			return NULL;
		}
		if (pthread_create(&t, &at, shard_main, sh) != 0) {
			err_set(err, EAGAIN, "mitm loop: thread");
			return NULL;
		}
	}
	for (unsigned i = 0; i < (o->hook_threads ? o->hook_threads : 1); i++)
		if (pthread_create(&t, &at, hook_main, l) != 0) {
			err_set(err, EAGAIN, "mitm loop: hook thread");
			return NULL;
		}
	pthread_attr_destroy(&at);
	return l;
}

void mitm_loop_add(struct mitm_loop *l, const struct mitm_conn_spec *spec)
{
	struct mconn *c = xcalloc(1, sizeof(*c));
	unsigned i = __atomic_fetch_add(&l->next_sh, 1, __ATOMIC_RELAXED) % l->n_sh;
	struct shard *sh = &l->sh[i];
	err_t err = { 0 };
	SSL_CTX *sctx;
	BIO *bio;

	c->sh = sh;
	c->spec = *spec;
	c->host = xstrdup(spec->host);
	c->spec.host = c->host;
	c->cfd = spec->client_fd;
	c->ufd = spec->up_fd;
	c->dial_deadline = now_ms() + (uint64_t)l->connect_ms;
	c->deadline = now_ms() + (uint64_t)c->sh->l->io_ms;
	buf_init(&c->hb);
	buf_init(&c->out);
	buf_init(&c->reply);
	buf_init(&c->d.body);
	fcntl(c->cfd, F_SETFL, fcntl(c->cfd, F_GETFL) | O_NONBLOCK);
	/* the client's SSL reads the sniffed bytes first, from its own copy */
	c->pb = xcalloc(1, sizeof(*c->pb) + spec->n);
	if (spec->n)
		memcpy(c->pb + 1, spec->prefix, spec->n);
	c->pb->pre = (const uint8_t *)(c->pb + 1);
	c->pb->n = spec->n;
	c->pb->fd = c->cfd;
	c->spec.prefix = NULL;
	__atomic_add_fetch(&l->n, 1, __ATOMIC_RELAXED);
	sctx = ca_server_ctx(spec->ca, c->host, &err);
	if (sctx) {
		c->cs = SSL_new(sctx);
		SSL_CTX_free(sctx);   /* cs holds its own reference */
	}
	bio = c->cs ? BIO_new(mitm_pbio_method()) : NULL;
	if (!bio) {
		if (sctx)
			mitm_tls_fail(&err, "setting up the client side");
		fail(c, -EIO, "%s", err.msg);
		/* never listed: end it here, as finish would */
		__atomic_sub_fetch(&l->n, 1, __ATOMIC_RELAXED);
		c->phase = P_DONE;
		c->spec.done(c->spec.done_arg, c->cfd, c->ufd);
		destroy(c);
		return;
	}
	BIO_set_data(bio, c->pb);
	BIO_set_init(bio, 1);
	SSL_set_bio(c->cs, bio, bio);
	pthread_mutex_lock(&sh->mu);
	c->next = sh->incoming;
	sh->incoming = c;
	pthread_mutex_unlock(&sh->mu);
	(void)!write(sh->efd, &(uint64_t){ 1 }, sizeof(uint64_t));
}

unsigned mitm_loop_conns(struct mitm_loop *l)
{
	return l ? __atomic_load_n(&l->n, __ATOMIC_RELAXED) : 0;
}
