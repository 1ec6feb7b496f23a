/* tlsrelay.c - intercepted TLS connections on an event loop (tlsrelay.h).
 *
 * Each pair has two directions (a->b, b->a), each with a buffer of one
 * read: a direction reads only when its buffer is empty, and writes it out
 * before it reads again, so a slow reader holds back its writer (no
 * unbounded buffering) and SSL_write is retried with the same bytes, as
 * OpenSSL requires. What each SSL call wants (read or write readiness of
 * its socket; TLS may need either for either call) sets the fd's epoll
 * events. */
#include "tlsrelay.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "../lib/log.h"
#include "../lib/util.h"

#define TLS_CHUNK 16384
#define PUMP_ROUNDS 16            /* reads per direction per turn: fairness */

struct tdir {
	SSL *from, *to;
	uint8_t buf[TLS_CHUNK];
	size_t len, off;              /* buf[off, len) still to write */
	uint32_t want_from, want_to;  /* EPOLLIN / EPOLLOUT the last call needs */
	bool eof;
};

struct tpair {
	struct tpair *next, *prev;
	SSL *a, *b;
	int afd, bfd;
	struct tdir d[2];             /* 0: a->b, 1: b->a */
	uint64_t last;                /* now_ms() of the last byte moved */
	bool again;                   /* on the ready list: more to do */
	struct tpair *ready_next;
	void *owned;
	tls_loop_done_fn done;
	void *arg;
};

struct tls_loop {
	int ep, efd;
	pthread_mutex_t mu;
	struct tpair *incoming;       /* under mu */
	struct tpair *pairs;          /* the loop's */
	struct tpair *ready;          /* of them, those to serve next (again) */
	unsigned n;                   /* atomic */
};

static void set_nonblock(int fd)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static uint32_t wants(SSL *s, int k)
{
	int e = SSL_get_error(s, k);

	return e == SSL_ERROR_WANT_READ ? EPOLLIN : e == SSL_ERROR_WANT_WRITE ? EPOLLOUT : 0;
}

/* Move what one direction can now. false when its side closed or failed. */
static bool pump(struct tpair *p, struct tdir *d, bool *more)
{
	for (int round = 0; round < PUMP_ROUNDS; round++) {
		if (d->off < d->len) {
			int k = SSL_write(d->to, d->buf + d->off, (int)(d->len - d->off));
			if (k <= 0) {
				d->want_to = wants(d->to, k);
				d->want_from = 0;
				return d->want_to != 0;
			}
			d->off += (size_t)k;
			p->last = now_ms();
			continue;
		}
		d->off = d->len = 0;
		d->want_to = 0;
		int k = SSL_read(d->from, d->buf, sizeof(d->buf));
		if (k <= 0) {
			d->want_from = wants(d->from, k);
			if (!d->want_from)
				d->eof = true;   /* closed, reset or broken */
			return !d->eof;
		}
		d->len = (size_t)k;
		p->last = now_ms();
	}
	*more = true;   /* it could go on: after the others' turn */
	return true;
}

static void arm(struct tls_loop *l, struct tpair *p, int op)
{
	struct epoll_event ea = { .events = p->d[0].want_from | p->d[1].want_to, .data.ptr = p };
	struct epoll_event eb = { .events = p->d[1].want_from | p->d[0].want_to, .data.ptr = p };

	epoll_ctl(l->ep, op, p->afd, &ea);
	epoll_ctl(l->ep, op, p->bfd, &eb);
}

static void pair_end(struct tls_loop *l, struct tpair *p)
{
	if (p->prev)
		p->prev->next = p->next;
	else
		l->pairs = p->next;
	if (p->next)
		p->next->prev = p->prev;
	epoll_ctl(l->ep, EPOLL_CTL_DEL, p->afd, NULL);
	epoll_ctl(l->ep, EPOLL_CTL_DEL, p->bfd, NULL);
	/* close_notify to both, without waiting for theirs */
	SSL_shutdown(p->a);
	SSL_shutdown(p->b);
	ERR_clear_error();
	p->done(p->arg, p->afd, p->bfd);
	SSL_free(p->a);
	SSL_free(p->b);
	free(p->owned);
	explicit_bzero(p->d, sizeof(p->d));   /* the bytes held a request's secret */
	free(p);
	__atomic_sub_fetch(&l->n, 1, __ATOMIC_RELAXED);
}

static void mark_ready(struct tls_loop *l, struct tpair *p)
{
	if (p->again)
		return;
	p->again = true;
	p->ready_next = l->ready;
	l->ready = p;
}

/* Both directions' turn; the pair ends when either side did. */
static void serve(struct tls_loop *l, struct tpair *p)
{
	p->again = false;
	bool more = false;
	if (!pump(p, &p->d[0], &more) || !pump(p, &p->d[1], &more)) {
		pair_end(l, p);
		return;
	}
	arm(l, p, EPOLL_CTL_MOD);
	if (more)
		mark_ready(l, p);
}

static void take_incoming(struct tls_loop *l)
{
	struct tpair *list;
	uint64_t v;

	(void)!read(l->efd, &v, sizeof(v));
	pthread_mutex_lock(&l->mu);
	list = l->incoming;
	l->incoming = NULL;
	pthread_mutex_unlock(&l->mu);
	while (list) {
		struct tpair *p = list;
		list = p->next;
		p->prev = NULL;
		p->next = l->pairs;
		if (l->pairs)
			l->pairs->prev = p;
		l->pairs = p;
		arm(l, p, EPOLL_CTL_ADD);
		serve(l, p);   /* bytes may be waiting in the SSLs already */
	}
}

static void *loop_main(void *arg)
{
	struct tls_loop *l = arg;
	uint64_t idle_check = now_ms();

	for (;;) {
		struct epoll_event ev[64];
		int n = epoll_wait(l->ep, ev, 64, l->ready ? 0 : 1000);
		struct tpair *list;
		for (int i = 0; i < n; i++) {
			if (ev[i].data.ptr == l) {
				take_incoming(l);
				continue;
			}
			/* listed, not served here: a pair may have two events
			 * (its fds) in this batch, and serving may end it */
			mark_ready(l, ev[i].data.ptr);
		}
		/* serve this round's list; those with more go on the next */
		list = l->ready;
		l->ready = NULL;
		while (list) {
			struct tpair *p = list;
			list = p->ready_next;
			serve(l, p);
		}
		if (now_ms() - idle_check >= 1000) {
			idle_check = now_ms();
			for (struct tpair *p = l->pairs, *next; p; p = next) {
				next = p->next;
				/* one on the ready list is not idle */
				if (!p->again && idle_check - p->last > TLS_LOOP_IDLE_MS)
					pair_end(l, p);
			}
		}
	}
	return NULL;
}

struct tls_loop *tls_loop_start(err_t *err)
{
	struct tls_loop *l = xcalloc(1, sizeof(*l));
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = l };
	pthread_t t;

	l->ep = epoll_create1(EPOLL_CLOEXEC);
	l->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (l->ep < 0 || l->efd < 0 || epoll_ctl(l->ep, EPOLL_CTL_ADD, l->efd, &ev) < 0) {
		err_sys(err, "tls loop");
		goto fail;
	}
	pthread_mutex_init(&l->mu, NULL);
	if (pthread_create(&t, NULL, loop_main, l) != 0) {
		err_set(err, EAGAIN, "tls loop: thread");
		goto fail;
	}
	pthread_detach(t);   /* it lives as long as the process */
	return l;
fail:
	if (l->ep >= 0)
		close(l->ep);
	if (l->efd >= 0)
		close(l->efd);
	free(l);
	return NULL;
}

void tls_loop_add(struct tls_loop *l, SSL *a, int afd, SSL *b, int bfd, void *owned,
		  tls_loop_done_fn done, void *arg)
{
	struct tpair *p = xcalloc(1, sizeof(*p));

	set_nonblock(afd);
	set_nonblock(bfd);
	p->a = a;
	p->b = b;
	p->afd = afd;
	p->bfd = bfd;
	p->d[0] = (struct tdir){ .from = a, .to = b };
	p->d[1] = (struct tdir){ .from = b, .to = a };
	p->last = now_ms();
	p->owned = owned;
	p->done = done;
	p->arg = arg;
	__atomic_add_fetch(&l->n, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&l->mu);
	p->next = l->incoming;
	l->incoming = p;
	pthread_mutex_unlock(&l->mu);
	(void)!write(l->efd, &(uint64_t){ 1 }, sizeof(uint64_t));
}

unsigned tls_loop_pairs(struct tls_loop *l)
{
	return l ? __atomic_load_n(&l->n, __ATOMIC_RELAXED) : 0;
}
