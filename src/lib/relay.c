/* relay.c - see relay.h. */
#include "relay.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util.h"

struct dir {
	int from, to;
	struct relay_pipes *pool;        /* where pipes come from and go back */
	int pipe[2];                     /* held while bytes are in it; -1 */
	bool copy;       /* splice cannot move it: through buf */
	size_t inpipe;   /* bytes in the pipe, not yet written to `to` */
	char *buf;       /* the pending bytes, or the copy buffer */
	size_t cap, len, off;
	bool eof;        /* read side ended */
	bool shut;       /* shutdown(to, SHUT_WR) done */
	bool sink;       /* the receiver is gone: read and drop until EOF */
	uint64_t *count[2];   /* added to as bytes reach `to`; NULL = none */
};

static void counted(struct dir *d, size_t n)
{
	for (int k = 0; k < 2; k++)
		if (d->count[k])
			__atomic_add_fetch(d->count[k], n, __ATOMIC_RELAXED);
}

/* One relayed connection: d[0] moves fd[0] -> fd[1], d[1] the other way. */
struct pair {
	int fd[2];
	struct dir d[2];
	bool hup[2];     /* fd[k] polled hung up */
	bool go[2];      /* d[i] may move: its fd polled ready */
	int wait_on[2];  /* the fd index d[i] waits for, -1 none */
};

static void set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0 && !(fl & O_NONBLOCK))
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void close_pipe(int p[2])
{
	for (int k = 0; k < 2; k++)
		if (p[k] >= 0)
			close(p[k]);
	p[0] = p[1] = -1;
}

void relay_pipes_close(struct relay_pipes *rp)
{
	while (rp->n > 0)
		close_pipe(rp->p[--rp->n]);
}

/* A pipe into p: a kept one, else a new one. false: none to be had. */
static bool pipe_take(struct relay_pipes *rp, int p[2])
{
	if (rp->n > 0) {
		rp->n--;
		p[0] = rp->p[rp->n][0];
		p[1] = rp->p[rp->n][1];
		return true;
	}
	if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0) {
		p[0] = p[1] = -1;
		return false;
	}
	/* Larger moves per splice for a bulk download; an unprivileged user
	 * past its pipe allowance keeps the default 64 KiB. */
	fcntl(p[1], F_SETPIPE_SZ, RELAY_PIPE);
	return true;
}

/* p is empty: keep it for the next move, or close it when enough are. */
static void pipe_give(struct relay_pipes *rp, int p[2])
{
	if (rp->n < RELAY_PIPES_KEEP) {
		rp->p[rp->n][0] = p[0];
		rp->p[rp->n][1] = p[1];
		rp->n++;
		p[0] = p[1] = -1;
	} else {
		close_pipe(p);
	}
}

/* The receiver closed: this direction is over, but what it sent the other
 * way still has to get through. Keep reading ours and drop it (through the
 * buffer), so closing our end later does not reset the connection (a reset
 * can discard an answer the sender has not read yet). Bytes left in the
 * pipe can go nowhere: the pipe goes with them. */
static void to_sink(struct dir *d)
{
	d->sink = d->copy = true;
	d->len = d->off = 0;
	if (d->inpipe) {
		d->inpipe = 0;
		close_pipe(d->pipe);
	}
}

/* A write to d->to failed (errno): 1 to go on (interrupted, or the
 * receiver is gone and d now drops what it reads), 0 when it would block,
 * else -errno. */
static int write_failed(struct dir *d)
{
	if (errno == EINTR)
		return 1;
	if (errno == EPIPE || errno == ECONNRESET) {
		to_sink(d);
		return 1;
	}
	return errno == EAGAIN ? 0 : -errno;
}

/* Move what can be moved now: write what is held, then read more, until
 * one side would block (so an edge-triggered wait sees the next change).
 * Returns 0 or -errno. */
static int step_dir(struct dir *d)
{
	ssize_t n;
	int r;

	for (;;) {
		if (d->off < d->len) {
			n = send(d->to, d->buf + d->off, d->len - d->off, MSG_NOSIGNAL);
			if (n < 0) {
				if ((r = write_failed(d)) > 0)
					continue;
				return r;
			}
			d->off += (size_t)n;
			counted(d, (size_t)n);
			continue;
		}
		d->len = d->off = 0;
		if (d->inpipe) {
			n = splice(d->pipe[0], NULL, d->to, NULL, d->inpipe,
				   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
			if (n < 0) {
				if ((r = write_failed(d)) > 0)
					continue;
				return r;
			}
			d->inpipe -= (size_t)n;
			counted(d, (size_t)n);
			continue;
		}
		if (d->eof) {
			if (!d->shut) {
				shutdown(d->to, SHUT_WR);
				d->shut = true;
			}
			return 0;
		}
		if (!d->copy) {
			if (d->pipe[0] < 0 && !pipe_take(d->pool, d->pipe)) {
				d->copy = true;
				continue;
			}
			/* the pipe is empty here: take what fits */
			n = splice(d->from, NULL, d->pipe[1], NULL, RELAY_PIPE,
				   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
			if (n < 0 && errno == EINVAL) {
				d->copy = true;
				continue;
			}
		} else {
			if (d->cap < RELAY_BUF) {
				if (d->buf)   /* held pending bytes (see pair_init) */
					explicit_bzero(d->buf, d->cap);
				free(d->buf);
				d->buf = xmalloc(RELAY_BUF);
				d->cap = RELAY_BUF;
			}
			n = recv(d->from, d->buf, RELAY_BUF, 0);
		}
		if (n < 0 && errno == ECONNRESET)
			n = 0;  /* gone, after everything it sent was read: its end */
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN ? 0 : -errno;
		}
		if (n == 0)
			d->eof = true;
		else if (d->sink)
			;       /* dropped */
		else if (d->copy)
			d->len = (size_t)n;
		else
			d->inpipe = (size_t)n;
	}
}

static int step(struct dir *d)
{
	int r = step_dir(d);

	/* an empty pipe is nobody's: the next move may be another pair's */
	if (d->pipe[0] >= 0 && !d->inpipe)
		pipe_give(d->pool, d->pipe);
	return r;
}

static void pair_init(struct pair *p, struct relay_pipes *rp, int a, int b,
		      const void *a_pending, size_t a_n, const void *b_pending, size_t b_n)
{
	const void *pending[2] = { a_pending, b_pending };
	size_t pending_n[2] = { a_n, b_n };

	memset(p, 0, sizeof(*p));
	p->fd[0] = a;
	p->fd[1] = b;
	for (int i = 0; i < 2; i++) {
		struct dir *d = &p->d[i];
		d->from = p->fd[i];
		d->to = p->fd[1 - i];
		d->pool = rp;
		d->pipe[0] = d->pipe[1] = -1;
		if (pending_n[i]) {
			d->buf = xmalloc(pending_n[i]);
			memcpy(d->buf, pending[i], pending_n[i]);
			d->cap = d->len = pending_n[i];
		}
		p->go[i] = true;
		p->wait_on[i] = -1;
	}
	set_nonblock(a);
	set_nonblock(b);
}

static void pair_fini(struct pair *p)
{
	for (int i = 0; i < 2; i++) {
		struct dir *d = &p->d[i];
		/* the pending bytes may hold a secret (an injected header) */
		if (d->buf)
			explicit_bzero(d->buf, d->cap);
		free(d->buf);
		d->buf = NULL;
		/* a held pipe has bytes nobody will read */
		close_pipe(d->pipe);
	}
}

static bool pending(const struct dir *d)
{
	return d->off < d->len || d->inpipe;
}

/* Move the directions that may move, then note what each waits for. ev:
 * the poll events each fd waits for, -1 to leave it out (a hung-up fd
 * polls ready for ever, so it is left out unless still read from: the read
 * then sees the EOF). Returns 1 when the pair is over, 0 to wait, -errno. */
static int pair_round(struct pair *p, short ev[2])
{
	int r = 0;

	/* Only a direction whose fd polled ready moves: a splice that can
	 * only say EAGAIN costs as much as one that moves bytes, and a short
	 * request would pay a few per wakeup. */
	for (int i = 0; i < 2 && r == 0; i++)
		if (p->go[i])
			r = step(&p->d[i]);
	if (r < 0)
		return r;
	/* Gone both ways after its EOF: nothing can reach fd[k] any more, so
	 * the direction toward it is over too. (Here, after the steps: an
	 * edge-triggered wait reports the hang-up once, maybe before the
	 * step that reads the EOF.) */
	for (int k = 0; k < 2; k++) {
		struct dir *o = &p->d[1 - k];
		if (p->hup[k] && p->d[k].eof && !pending(o)) {
			o->eof = o->shut = true;
			o->len = o->off = 0;
		}
	}
	if (p->d[0].shut && p->d[1].shut)
		return 1;
	ev[0] = ev[1] = 0;
	for (int i = 0; i < 2; i++) {
		/* d[i] reads from fd[i] and writes to fd[1 - i] */
		p->go[i] = false;
		p->wait_on[i] = -1;
		if (pending(&p->d[i])) {
			ev[1 - i] |= POLLOUT;
			p->wait_on[i] = 1 - i;
		} else if (!p->d[i].eof) {
			ev[i] |= POLLIN;
			p->wait_on[i] = i;
		}
	}
	for (int k = 0; k < 2; k++)
		if (p->hup[k] && !(ev[k] & POLLIN))
			ev[k] = -1;
	return 0;
}

/* fd[k] polled revents. */
static void pair_ready(struct pair *p, int k, short revents)
{
	for (int i = 0; i < 2; i++) {
		short want = k == i ? POLLIN : POLLOUT;
		if (p->wait_on[i] == k && (revents & (want | POLLERR | POLLHUP | POLLNVAL)))
			p->go[i] = true;
	}
	if (revents & (POLLHUP | POLLERR))
		p->hup[k] = true;
}

int relay_fds_pipes(struct relay_pipes *rp, int a, int b, const void *a_pending, size_t a_n,
		    const void *b_pending, size_t b_n)
{
	struct relay_pipes own = RELAY_PIPES_INIT;
	struct pair p;
	int r;

	pair_init(&p, rp ? rp : &own, a, b, a_pending, a_n, b_pending, b_n);
	for (;;) {
		short ev[2];
		if ((r = pair_round(&p, ev)) != 0)
			break;
		struct pollfd pf[2];
		for (int k = 0; k < 2; k++)
			pf[k] = (struct pollfd){ .fd = ev[k] < 0 ? -1 : p.fd[k],
						 .events = ev[k] < 0 ? 0 : ev[k] };
		if (poll(pf, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			break;
		}
		for (int k = 0; k < 2; k++)
			pair_ready(&p, k, pf[k].revents);
	}
	pair_fini(&p);
	if (!rp)
		relay_pipes_close(&own);
	return r < 0 ? r : 0;
}

/* ---- the loop ----
 * Each thread waits on its own epoll set, where both fds of each of its
 * pairs are registered edge-triggered: a direction always moves until it
 * would block (step), so the next change on either fd is an edge. An fd is
 * registered for input, and for output too from the first time a direction
 * waits to write to it (then kept: a socket reports writable as an edge
 * only after it was full). A new socket is writable at once, so asking for
 * output from the start would wake the thread for nothing on every pair. */

struct lpair {
	struct pair p;
	struct lthread *t;
	relay_done_fn done;
	void *arg;
	uint32_t reg[2];                 /* the events fd[k] is registered for */
	pthread_mutex_t mu;              /* held by relay_loop_add while it registers */
	bool dead;                       /* ended in this batch: skip its other events */
	struct lpair *prev, *next;       /* t->live */
};

struct lthread {
	struct relay_loop *l;
	pthread_t tid;
	int ep;
	struct relay_pipes pipes;
	pthread_mutex_t mu;              /* live, gone */
	struct lpair *live;
	unsigned n_live;
	struct lpair *gone;              /* ended by relay_loop_add: freed here */
};

struct relay_loop {
	unsigned n;
	unsigned next;                   /* atomic: round robin */
	int stopping;                    /* atomic */
	int wake;                        /* eventfd, in every set: the stop */
	struct lthread t[];
};

static void live_unlink(struct lthread *t, struct lpair *lp)
{
	pthread_mutex_lock(&t->mu);
	if (lp->prev)
		lp->prev->next = lp->next;
	else
		t->live = lp->next;
	if (lp->next)
		lp->next->prev = lp->prev;
	t->n_live--;
	pthread_mutex_unlock(&t->mu);
}

/* The pair is over: its fds leave the set, its owner gets them back. The
 * struct itself is freed by the caller once no event of this batch can
 * name it. */
static void lpair_end(struct lpair *lp, int r)
{
	for (int k = 0; k < 2; k++)
		epoll_ctl(lp->t->ep, EPOLL_CTL_DEL, lp->p.fd[k], NULL);
	live_unlink(lp->t, lp);
	pair_fini(&lp->p);
	lp->dead = true;
	lp->done(lp->arg, lp->p.fd[0], lp->p.fd[1], r < 0 ? r : 0);
}

/* The events fd[k] needs once it waits for ev (pair_round's). */
static uint32_t wanted(const struct lpair *lp, int k, short ev)
{
	uint32_t e = EPOLLIN | EPOLLET | (lp->reg[k] & EPOLLOUT);

	if (ev >= 0 && (ev & POLLOUT))
		e |= EPOLLOUT;
	return e;
}

/* After a round: ask for output where a direction now waits to write. */
static void lpair_rearm(struct lpair *lp, const short ev[2])
{
	for (int k = 0; k < 2; k++) {
		uint32_t e = wanted(lp, k, ev[k]);
		struct epoll_event ee = { .events = e,
					  .data.ptr = (void *)((uintptr_t)lp | (uintptr_t)k) };
		if (e != lp->reg[k] && epoll_ctl(lp->t->ep, EPOLL_CTL_MOD, lp->p.fd[k], &ee) == 0)
			lp->reg[k] = e;
	}
}

static void free_lpair(struct lpair *lp)
{
	pthread_mutex_destroy(&lp->mu);
	free(lp);
}

static void *lthread_main(void *arg)
{
	struct lthread *t = arg;
	struct epoll_event evs[64];

	while (!__atomic_load_n(&t->l->stopping, __ATOMIC_ACQUIRE)) {
		struct lpair *dead[64], *gone;
		int n = epoll_wait(t->ep, evs, 64, -1), nd = 0;

		for (int i = 0; i < n; i++) {
			uintptr_t v = (uintptr_t)evs[i].data.ptr;
			struct lpair *lp = (struct lpair *)(v & ~(uintptr_t)1);
			short ev[2];
			int r = 0;

			if (!lp)
				continue;   /* the stop */
			pthread_mutex_lock(&lp->mu);
			/* dead: ended above, or by relay_loop_add */
			if (!lp->dead) {
				/* EPOLLIN etc. have poll's values */
				pair_ready(&lp->p, (int)(v & 1), (short)evs[i].events);
				r = pair_round(&lp->p, ev);
				if (r == 0)
					lpair_rearm(lp, ev);
			}
			pthread_mutex_unlock(&lp->mu);
			if (r != 0) {
				lpair_end(lp, r);
				dead[nd++] = lp;
			}
		}
		/* no event of this batch names them any more; and none of a
		 * later one names a gone pair (its fds left the set first) */
		for (int i = 0; i < nd; i++)
			free_lpair(dead[i]);
		pthread_mutex_lock(&t->mu);
		gone = t->gone;
		t->gone = NULL;
		pthread_mutex_unlock(&t->mu);
		while (gone) {
			struct lpair *next = gone->next;
			free_lpair(gone);
			gone = next;
		}
	}
	return NULL;
}

struct relay_loop *relay_loop_start(unsigned threads, err_t *err)
{
	struct relay_loop *l;
	unsigned started = 0;

	if (threads == 0)
		threads = 1;
	l = xcalloc(1, sizeof(*l) + threads * sizeof(l->t[0]));
	l->n = threads;
	l->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (l->wake < 0) {
		err_sys(err, "relay: eventfd");
		free(l);
		return NULL;
	}
	for (; started < threads; started++) {
		struct lthread *t = &l->t[started];
		struct epoll_event we = { .events = EPOLLIN, .data.ptr = NULL };

		t->l = l;
		pthread_mutex_init(&t->mu, NULL);
		t->ep = epoll_create1(EPOLL_CLOEXEC);
		if (t->ep < 0 || epoll_ctl(t->ep, EPOLL_CTL_ADD, l->wake, &we) < 0) {
			err_sys(err, "relay: epoll");
			break;
		}
		if ((errno = pthread_create(&t->tid, NULL, lthread_main, t)) != 0) {
			err_sys(err, "relay: start a thread");
			break;
		}
	}
	if (started < threads) {
		if (l->t[started].ep >= 0)
			close(l->t[started].ep);
		pthread_mutex_destroy(&l->t[started].mu);
		l->n = started;
		relay_loop_stop(l);
		return NULL;
	}
	return l;
}

void relay_loop_add(struct relay_loop *l, struct relay_pipes *rp, int a, int b,
		    const void *a_pending, size_t a_n, relay_done_fn done, void *arg)
{
	relay_loop_add_counted(l, rp, a, b, a_pending, a_n, NULL, done, arg);
}

void relay_loop_add_counted(struct relay_loop *l, struct relay_pipes *rp, int a, int b,
			    const void *a_pending, size_t a_n, const struct relay_counts *cnt,
			    relay_done_fn done, void *arg)
{
	struct relay_pipes own = RELAY_PIPES_INIT;
	struct lthread *t = &l->t[__atomic_fetch_add(&l->next, 1, __ATOMIC_RELAXED) % l->n];
	struct lpair *lp = xcalloc(1, sizeof(*lp));
	short ev[2];
	int r;

	/* The first round here, with the caller's pipes: the pending bytes
	 * leave now, not a thread switch later. A pipe still held after it
	 * holds bytes, and goes with the pair. */
	pair_init(&lp->p, rp ? rp : &own, a, b, a_pending, a_n, NULL, 0);
	for (int k = 0; cnt && k < 2; k++) {
		lp->p.d[0].count[k] = cnt->ab[k];
		lp->p.d[1].count[k] = cnt->ba[k];
	}
	/* b's bytes, if any came already, are reported when b is registered:
	 * a splice now could only say EAGAIN */
	lp->p.go[1] = false;
	r = pair_round(&lp->p, ev);
	relay_pipes_close(&own);
	for (int i = 0; i < 2; i++)
		lp->p.d[i].pool = &t->pipes;
	lp->t = t;
	lp->done = done;
	lp->arg = arg;
	pthread_mutex_init(&lp->mu, NULL);
	if (r == 0) {
		pthread_mutex_lock(&t->mu);
		lp->next = t->live;
		if (t->live)
			t->live->prev = lp;
		t->live = lp;
		t->n_live++;
		pthread_mutex_unlock(&t->mu);
		/* Once the first fd is in, the thread may see it: it waits
		 * for lp->mu until both are. */
		pthread_mutex_lock(&lp->mu);
		for (int k = 0; k < 2 && r == 0; k++) {
			struct epoll_event e = { .events = wanted(lp, k, ev[k]),
						 .data.ptr = (void *)((uintptr_t)lp | (uintptr_t)k) };
			if (epoll_ctl(t->ep, EPOLL_CTL_ADD, lp->p.fd[k], &e) < 0)
				r = -errno;
			else
				lp->reg[k] = e.events;
		}
		if (r == 0) {
			pthread_mutex_unlock(&lp->mu);
			return;
		}
		/* Not carried. The thread may hold an event of the fd that
		 * did get in: it waits for lp->mu, then sees dead, and frees
		 * lp itself after that batch. */
		lpair_end(lp, r);
		pthread_mutex_unlock(&lp->mu);
		pthread_mutex_lock(&t->mu);
		lp->next = t->gone;
		t->gone = lp;
		pthread_mutex_unlock(&t->mu);
		return;
	}
	pair_fini(&lp->p);
	done(arg, a, b, r < 0 ? r : 0);
	free_lpair(lp);
}

unsigned relay_loop_pairs(struct relay_loop *l)
{
	unsigned n = 0;

	for (unsigned i = 0; i < l->n; i++) {
		pthread_mutex_lock(&l->t[i].mu);
		n += l->t[i].n_live;
		pthread_mutex_unlock(&l->t[i].mu);
	}
	return n;
}

void relay_loop_stop(struct relay_loop *l)
{
	if (!l)
		return;
	__atomic_store_n(&l->stopping, 1, __ATOMIC_RELEASE);
	(void)!write(l->wake, &(uint64_t){ 1 }, sizeof(uint64_t));
	for (unsigned i = 0; i < l->n; i++)
		pthread_join(l->t[i].tid, NULL);
	for (unsigned i = 0; i < l->n; i++) {
		struct lthread *t = &l->t[i];
		while (t->live) {
			struct lpair *lp = t->live;
			lpair_end(lp, -ECANCELED);
			free_lpair(lp);
		}
		while (t->gone) {
			struct lpair *lp = t->gone;
			t->gone = lp->next;
			free_lpair(lp);
		}
		relay_pipes_close(&t->pipes);
		close(t->ep);
		pthread_mutex_destroy(&t->mu);
	}
	close(l->wake);
	free(l);
}
