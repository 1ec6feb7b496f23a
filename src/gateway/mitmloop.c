/* mitmloop.c - intercepted TLS set up on event loops (mitmloop.h).
 *
 * A shard is one thread with its epoll; a connection stays on its shard.
 * advance() runs a connection's phases until one must wait: then what the
 * last SSL call wants (read or write readiness; TLS may need either for
 * either call) sets its fds' epoll events, and the phase's deadline is
 * checked every TICK_MS. The hook threads take connections from one queue
 * and give them back to their shard (a list and its eventfd). This file
 * is the loop: a connection's start, its events and deadlines, its end;
 * what each phase does is mitmloop-phases.c's, where all bytes from the
 * sandbox (untrusted) are parsed. */
#include "mitmloop.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "mitmloop-internal.h"

#define TICK_MS 250

/* ---- a connection's end, its events and deadlines -------------------- */

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

	mconn_up_progress(c);
	while (k > 0) {
		c->cwant = c->uwant = 0;
		if (c->phase == P_RELAY) {
			hand_over(c);
			return;
		}
		if (c->phase == P_DONE)
			return;
		k = mconn_step(c);
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
		mconn_up_unverified(c);
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
		mconn_fail(c, -ETIMEDOUT, "mitm: handshake with the sandbox: timed out");
		break;
	case P_HEAD:
		mconn_fail(c, -ETIMEDOUT, "mitm: no request head from the sandbox");
		break;
	case P_BODY:
		if (c->kind == BODY_CHUNKED) {
			mconn_chunked_pass(c);   /* a stream: it passes untouched */
			advance(c);
			return;
		}
		mconn_fail(c, -ETIMEDOUT, "mitm: the request body did not arrive");
		break;
	case P_HOOK:
		mconn_fail(c, -ETIMEDOUT, "mitm: the credential hook took too long");
		break;
	case P_UPSTREAM:
		return;   /* the upstream side's own deadlines */
	case P_SEND:
		mconn_fail(c, -ETIMEDOUT, "mitm: sending the request upstream: timed out");
		break;
	case P_STREAM:
		mconn_fail(c, -ETIMEDOUT, "mitm: streaming the request body upstream: timed out");
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
		mconn_fail(c, -EIO, "%s", err.msg);
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
