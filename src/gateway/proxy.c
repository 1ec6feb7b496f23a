/* proxy.c - the transparent TCP proxy. A worker thread takes a connection
 * through its first steps:
 *   1. who: the source address names the sandbox (unknown source: close);
 *   2. where: SO_ORIGINAL_DST, the address the sandbox dialled;
 *   3. what: the first bytes, read with a size limit and a timeout, are a TLS
 *      ClientHello (SNI), an HTTP request head (Host), or anything else;
 *   4. decide (policy.h) and log; a named destination is dialled at the
 *      address the gateway itself resolves for that name (the dialled IP
 *      when it is one of them), so a forged SNI or Host cannot steer the
 *      connection to an address the policy never saw;
 *   5. with a credential for the name (cred.h): rewrite the request head,
 *      intercepting TLS for it; otherwise
 *   6. connect upstream, replay the sniffed bytes, and hand the pair to the
 *      relay loop (relay.h), which carries it until both sides closed; the
 *      worker is free for the next connection.
 * Intercepted TLS goes from the worker to the interception loop
 * (mitmloop.h: handshakes, head, injection, upstream) once its connect is
 * started, then to the TLS loop (tlsrelay.h): no worker waits on it.
 * Bytes from the sandbox are untrusted: only sniff.c parses them. */
#include "gateway-internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netfilter_ipv4.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../cred/cred.h"
#include "../lib/log.h"
#include "../lib/keycap.h"
#include "gw-cred.h"
#include "mitm.h"
#include "../lib/relay.h"
#include "../lib/util.h"

#define SNIFF_MAX (16384 + 5)        /* one TLS record, or an HTTP head */
#define SNIFF_MS 5000                /* a slow ClientHello / head */
#define CONNECT_MS 10000

struct pconn {
	struct gw *g;
	int fd;                          /* the sandbox's side */
	int up;                          /* upstream, -1 until connected */
	uint32_t src, dst;               /* host order */
	uint16_t dport;
	uint64_t accepted_us;            /* now_us() at accept */
	struct relay_pipes *pipes;       /* the worker's, kept across connections */
	bool handed;                     /* to the relay loop: it closes both */
	uint8_t head[SNIFF_MAX];
	size_t n;
	const char *proto;               /* "tcp", "tls", "http" */
	char host[SNIFF_HOST_MAX + 1];
	bool v6;                         /* dial up6: the name has no IPv4 address */
	struct in6_addr up6;
	struct gw_bytes *bytes;          /* its sandbox's counters (a ref); NULL */
};

static int wait_in(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int r;

	do
		r = poll(&p, 1, ms);
	while (r < 0 && errno == EINTR);
	return r;
}

/* Read what identifies the protocol. Never fails: what cannot be read in
 * time is decided as plain TCP on the original destination. */
static void sniff(struct pconn *pc)
{
	uint64_t deadline = 0;
	ssize_t k;

	pc->proto = "tcp";
	for (;;) {
		/* Read first, wait only when nothing is there: with
		 * TCP_DEFER_ACCEPT on the listener the first bytes usually
		 * came with the connection. */
		k = recv(pc->fd, pc->head + pc->n, sizeof(pc->head) - pc->n, MSG_DONTWAIT);
		if (k < 0 && (errno == EAGAIN || errno == EINTR)) {
			int ms;
			if (pc->n == 0) {
				/* nothing yet: a server-speaks-first protocol,
				 * once the listener's defer has waited */
				ms = pc->g->defer_accept ? 0 : FIRST_BYTE_MS;
			} else {
				/* the rest of a head: SNIFF_MS from its first bytes */
				uint64_t now = now_ms();
				if (now >= deadline)
					return;
				ms = (int)(deadline - now);
			}
			if (wait_in(pc->fd, ms) <= 0)
				return;
			continue;
		}
		if (k <= 0)
			return;
		if (pc->n == 0)
			deadline = now_ms() + SNIFF_MS;
		pc->n += (size_t)k;
		if (sniff_is_tls(pc->head, pc->n)) {
			int r = sniff_tls_sni(pc->head, pc->n, pc->host);
			if (r != 0) {
				pc->proto = "tls";
				if (r < 0)
					pc->host[0] = '\0';
				return;
			}
		} else if (sniff_is_http(pc->head, pc->n)) {
			int r = sniff_http_host(pc->head, pc->n, pc->host);
			if (r != 0) {
				pc->proto = "http";
				if (r < 0)
					pc->host[0] = '\0';
				return;
			}
		} else {
			return;
		}
		if (pc->n == sizeof(pc->head))
			return;
	}
}

/* A non-blocking socket whose connect() to sa is under way (or done), or
 * -1 (counted as a failed dial). */
static int dial_start(struct gw *g, const struct sockaddr *sa, socklen_t len)
{
	int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), one = 1;

	if (fd >= 0) {
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (connect(fd, sa, len) == 0 || errno == EINPROGRESS)
			return fd;
		close(fd);
	}
	gw_count(&g->stats.dial_fails, 1);
	return -1;
}

/* A connected socket to sa, or -1. nonblock: leave it O_NONBLOCK (the relay
 * wants it so; the credential paths read and write it blocking). Counted
 * and timed in g->stats. */
static int dial_sa(struct gw *g, const struct sockaddr *sa, socklen_t len, bool nonblock)
{
	uint64_t t0 = now_us();
	struct pollfd p;
	int fd = dial_start(g, sa, len), e = 0;
	socklen_t el = sizeof(e);

	if (fd < 0)
		return -1;
	p = (struct pollfd){ .fd = fd, .events = POLLOUT };
	if (poll(&p, 1, CONNECT_MS) <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0 ||
	    e != 0)
		goto fail;
	if (!nonblock)
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	gw_count(&g->stats.dials, 1);
	gw_count(&g->stats.dial_us, now_us() - t0);
	return fd;
fail:
	close(fd);
	gw_count(&g->stats.dial_fails, 1);
	return -1;
}

/* The connection's upstream: its IPv6 address when the name has only
 * those (pc->v6), else target. start: only start the connect (dial_start),
 * else wait for it (dial_sa). */
static int dial_up_how(struct pconn *pc, uint32_t target, bool nonblock, bool start)
{
	struct sockaddr_in sa4 = { .sin_family = AF_INET, .sin_port = htons(pc->dport),
				   .sin_addr.s_addr = htonl(target) };
	struct sockaddr_in6 sa6 = { .sin6_family = AF_INET6, .sin6_port = htons(pc->dport),
				    .sin6_addr = pc->up6 };
	const struct sockaddr *sa = pc->v6 ? (struct sockaddr *)&sa6 : (struct sockaddr *)&sa4;
	socklen_t len = pc->v6 ? sizeof(sa6) : sizeof(sa4);

	return start ? dial_start(pc->g, sa, len) : dial_sa(pc->g, sa, len, nonblock);
}

static int dial_up(struct pconn *pc, uint32_t target, bool nonblock)
{
	return dial_up_how(pc, target, nonblock, false);
}


static void deny_http(struct pconn *pc)
{
	static const char resp[] = "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\n"
				   "Content-Length: 37\r\nConnection: close\r\n\r\n"
				   "airlock: blocked by egress policy\r\n\r\n";
	(void)!write(pc->fd, resp, sizeof(resp) - 1);
}

/* A relayed connection's end: its sandbox may open another. */
struct relayed {
	struct gw *g;
	uint32_t src;
	struct gw_bytes *bytes;          /* a ref, or NULL */
	uint64_t dial_t0;                /* now_us() at an intercepted one's dial */
};

static void conn_give(struct gw *g, uint32_t addr);

static void relayed_done(void *arg, int a, int b, int r)
{
	struct relayed *x = arg;

	(void)r;
	close(a);
	close(b);
	conn_give(x->g, x->src);
	gw_bytes_unref(x->bytes);
	free(x);
}

/* Relay the sandbox's side and upstream, pending bytes first, on the loop. */
static void hand_over(struct pconn *pc, const void *pending, size_t n)
{
	struct relayed *x = xmalloc(sizeof(*x));

	struct gw_stats *st = &pc->g->stats;
	struct relay_counts cnt = {
		.ab = { &st->bytes_out, pc->bytes ? &pc->bytes->out : NULL },
		.ba = { &st->bytes_in, pc->bytes ? &pc->bytes->in : NULL },
	};

	x->g = pc->g;
	x->src = pc->src;
	x->bytes = pc->bytes;   /* the ref goes with the pair */
	pc->bytes = NULL;
	relay_loop_add_counted(pc->g->relay, pc->pipes, pc->fd, pc->up, pending, n, &cnt,
			       relayed_done, x);
	pc->fd = pc->up = -1;
	pc->handed = true;
}

/* An intercepted connection's end (its setup's failure on the mitm loop,
 * or the end of its relay on the TLS loop): its sandbox side's bytes, as
 * the kernel counted them, go to the totals and to its sandbox (the relay
 * loop counts the others as it moves them); then as relayed_done. */
static void intercepted_done(void *arg, int fd, int up)
{
	struct relayed *x = arg;
	struct gw_stats *st = &x->g->stats;
	uint64_t from_sbx, to_sbx;

	if (gw_sock_bytes(fd, &from_sbx, &to_sbx) == 0) {
		gw_count(&st->bytes_out, from_sbx);
		gw_count(&st->bytes_in, to_sbx);
		if (x->bytes) {
			gw_count(&x->bytes->out, from_sbx);
			gw_count(&x->bytes->in, to_sbx);
		}
	}
	relayed_done(x, fd, up, 0);
}

/* An intercepted connection's upstream connect ended (on the mitm loop). */
static void intercepted_dialed(void *arg, bool ok)
{
	struct relayed *x = arg;

	if (ok) {
		gw_count(&x->g->stats.dials, 1);
		gw_count(&x->g->stats.dial_us, now_us() - x->dial_t0);
	} else {
		gw_count(&x->g->stats.dial_fails, 1);
	}
}

/* Credential injection (cred.h) on an allowed connection. Returns true when
 * it served the connection itself (intercepted TLS, a rewritten HTTP head
 * then relayed, or an answer of its own); false to relay as usual. */
static bool serve_with_credentials(struct pconn *pc, const char *sbx, uint32_t target)
{
	struct gw_cred *gc = pc->g->cred;
	bool http = !strcmp(pc->proto, "http");
	struct mitm_stream *stream = NULL;
	struct buf out;
	int r;

	if (!gc || !pc->host[0])
		return false;
	if (!strcmp(pc->proto, "tls")) {
		if (!gw_cred_wants(gc, sbx, pc->host, CRED_SCHEME_HTTPS, pc->dport))
			return false;
		/* the connect goes on alongside the handshake, on the loop */
		uint64_t t0 = now_us();
		pc->up = dial_up_how(pc, target, true, true);
		if (pc->up >= 0) {
			struct relayed *x = xmalloc(sizeof(*x));
			*x = (struct relayed){ .g = pc->g, .src = pc->src, .bytes = pc->bytes,
					       .dial_t0 = t0 };
			gw_cred_tls_start(gc, pc->g->mitm, sbx, pc->host, pc->dport, pc->fd, pc->head,
					  pc->n, pc->up, intercepted_dialed, intercepted_done, x);
			/* the loops' now, which end it */
			pc->bytes = NULL;   /* the ref went with x */
			pc->fd = pc->up = -1;
			pc->handed = true;
		}
		return true;
	}
	/* A placeholder toward a host without credentials (or with none for
	 * plain HTTP to this port) is audited too. */
	if (!http || (!gw_cred_wants(gc, sbx, pc->host, CRED_SCHEME_HTTP, pc->dport) &&
		      !memmem(pc->head, pc->n, CRED_PLACEHOLDER_MARK, strlen(CRED_PLACEHOLDER_MARK))))
		return false;
	buf_init(&out);
	r = gw_cred_http(gc, sbx, pc->host, pc->dport, pc->fd, pc->head, pc->n, &out, &stream);
	if (r == 0 && stream) {
		/* a large body replaced in as it streams: the head, the body
		 * (this worker, blocking), then the relay for the answer */
		int sent = -1;
		pc->up = dial_up(pc, target, false);
		if (pc->up >= 0 && write_all(pc->up, out.data, out.len) == 0) {
			sent = mitm_stream_plain(stream, pc->fd, pc->up);   /* frees it */
			stream = NULL;
		}
		mitm_stream_free(stream);
		if (sent == 0) {
			fcntl(pc->up, F_SETFL, fcntl(pc->up, F_GETFL) | O_NONBLOCK);
			hand_over(pc, NULL, 0);
		}
	} else if (r == 1) {
		(void)!write_all(pc->fd, out.data, out.len);
	} else if (r < 0) {
		static const char bad[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n"
					  "Connection: close\r\n\r\n";
		(void)!write_all(pc->fd, bad, sizeof(bad) - 1);
	} else {
		pc->up = dial_up(pc, target, true);
		if (pc->up >= 0)
			hand_over(pc, out.data, out.len);
	}
	if (out.data)
		explicit_bzero(out.data, out.len);   /* it may hold an injected value */
	buf_free(&out);
	return true;
}

/* The decision's time since the sniff ended, and whether it refused. */
static void count_decision(struct gw *g, bool allow, uint64_t sniffed)
{
	gw_count(&g->stats.decide_us, now_us() - sniffed);
	if (!allow)
		gw_count(&g->stats.denied, 1);
}

/* A connection refused before its name was resolved: counted, an HTTP
 * client told 403, closed. Returns false (nothing handed over). */
static bool refuse_unresolved(struct gw *g, struct pconn *pc, uint64_t sniffed)
{
	count_decision(g, false, sniffed);
	if (!strcmp(pc->proto, "http"))
		deny_http(pc);
	close(pc->fd);
	free(pc);
	return false;
}

/* Serve one connection; true when the relay loop took it over (and gives
 * its sandbox's count back at the end). */
static bool serve(struct pconn *pc)
{
	struct gw *g = pc->g;
	struct gw_sbx *s;
	struct gw_addrs addrs;
	uint32_t target;
	char sbx[65] = "";
	size_t n = 0;
	uint64_t sniffed;
	bool allow;

	sniff(pc);
	sniffed = now_us();
	gw_count(&g->stats.sniff_us, sniffed - pc->accepted_us);
	target = pc->dst;
	if (pc->host[0] &&
	    gw_name_gate(g, pc->src, pc->proto,
			 &(struct dest){ .host = pc->host, .ip = pc->dst, .port = pc->dport }) != 1) {
		/* refused on the name: never resolved (see policy_name_gate) */
		return refuse_unresolved(g, pc, sniffed);
	}
	if (pc->host[0]) {
		if (gw_resolve(g, pc->src, pc->proto, pc->host, &addrs) < 0)
			/* over its cap of lookups waiting: refused, and logged */
			return refuse_unresolved(g, pc, sniffed);
		n = addrs.n4;
		if (n) {
			target = addrs.v4[0];
			for (size_t i = 0; i < n; i++)
				if (addrs.v4[i] == pc->dst)
					target = pc->dst;
		} else if (addrs.n6) {
			/* a name with IPv6 addresses only: dialled over IPv6 */
			pc->v6 = true;
			pc->up6 = addrs.v6[0];
			n = addrs.n6;
		}
	}
	pthread_rwlock_rdlock(&g->lock);
	s = gw_find_locked(g, pc->src);
	if (s) {
		snprintf(sbx, sizeof(sbx), "%s", s->id);
		pc->bytes = gw_bytes_ref(s->bytes);
	}
	if (!s) {
		allow = false;
	} else if (pc->host[0] && n == 0) {
		/* a name nobody can resolve: there is no address to allow */
		struct dest d = { .host = pc->host, .ip = pc->dst, .port = pc->dport };
		gw_log(s, pc->proto, &d, false, "unresolved");
		allow = false;
	} else {
		struct dest d = { .host = pc->host[0] ? pc->host : NULL, .ip = target,
				  .port = pc->dport, .ip6 = pc->v6 ? &pc->up6 : NULL };
		allow = gw_decide_log(g, s, pc->proto, &d);
	}
	pthread_rwlock_unlock(&g->lock);
	count_decision(g, allow, sniffed);

	if (allow && serve_with_credentials(pc, sbx, target)) {
		/* served */
	} else if (allow) {
		/* the sniffed bytes go first, written by the relay */
		pc->up = dial_up(pc, target, true);
		if (pc->up >= 0)
			hand_over(pc, pc->head, pc->n);
	} else if (!strcmp(pc->proto, "http")) {
		deny_http(pc);
	}
	bool handed = pc->handed;
	if (pc->up >= 0)
		close(pc->up);
	if (pc->fd >= 0)
		close(pc->fd);
	gw_bytes_unref(pc->bytes);
	free(pc);
	return handed;
}

/* Acceptors: every worker thread blocks in poll+accept on the listening
 * socket itself, so a new connection costs no hand-off between threads.
 * A worker serves one connection at a time, until it hands it to the relay
 * loop or the interception loop (or to its end); the last idle worker starts
 * another before it serves, so somebody always accepts, and
 * a worker that finds more than POOL_IDLE_MAX others idle exits. */
#define POOL_START 8
#define POOL_IDLE_MAX 16
#define POOL_MAX_THREADS GATEWAY_WORKERS_MAX

struct pool {
	struct gw *g;
	pthread_attr_t at;
};

/* A connection of the sandbox at addr (host order) counted, or ended. */
static bool conn_take(struct gw *g, uint32_t addr)
{
	return keycap_take(g->conns, &addr, sizeof(addr));
}

static void conn_give(struct gw *g, uint32_t addr)
{
	keycap_give(g->conns, &addr, sizeof(addr));
}

/* Take one connection; NULL when there is none (timeout, stop, error). */
static struct pconn *accept_one(struct gw *g)
{
	struct sockaddr_in peer, orig;
	socklen_t pl = sizeof(peer), ol = sizeof(orig);
	struct pconn *pc;
	int one = 1, fd;

	/* A blocking accept: the kernel wakes exactly one waiting worker
	 * (poll would wake them all). gateway_run's shutdown() of the
	 * listening socket ends every wait at stop. */
	fd = accept4(g->proxy_fd, (struct sockaddr *)&peer, &pl, SOCK_CLOEXEC);
	if (fd < 0) {
		if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED)
			usleep(10000);  /* EMFILE and the like: do not spin */
		return NULL;
	}
	/* Only redirected connections from a known sandbox address are
	 * served; the original destination is what the sandbox dialled. */
	if (peer.sin_family != AF_INET ||
	    getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &orig, &ol) < 0) {
		close(fd);
		return NULL;
	}
	/* A sandbox at its cap is refused here, before any worker serves
	 * it, and the refusal is in its decision log. */
	uint32_t src = ntohl(peer.sin_addr.s_addr);
	pthread_rwlock_rdlock(&g->lock);
	struct gw_sbx *s = gw_find_locked(g, src);
	bool known = s != NULL, ok = known && conn_take(g, src);
	if (known && !ok) {
		struct dest d = { .ip = ntohl(orig.sin_addr.s_addr), .port = ntohs(orig.sin_port) };
		gw_log(s, "tcp", &d, false, "connection limit");
		gw_count(&g->stats.over_limit, 1);
	}
	pthread_rwlock_unlock(&g->lock);
	if (!ok) {
		if (known)   /* a reset: the client fails at once, no answer to mistake */
			setsockopt(fd, SOL_SOCKET, SO_LINGER, &(struct linger){ 1, 0 },
				   sizeof(struct linger));
		close(fd);
		return NULL;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	pc = xcalloc(1, sizeof(*pc));
	pc->g = g;
	pc->fd = fd;
	pc->up = -1;
	pc->src = src;
	pc->dst = ntohl(orig.sin_addr.s_addr);
	pc->dport = ntohs(orig.sin_port);
	pc->accepted_us = now_us();
	gw_count(&g->stats.conns, 1);
	return pc;
}

static void *worker_main(void *arg);

static void spawn_worker(struct pool *p)
{
	pthread_t t;

	__atomic_add_fetch(&p->g->workers, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&p->g->workers_idle, 1, __ATOMIC_ACQ_REL);
	if (pthread_create(&t, &p->at, worker_main, p) != 0) {
		__atomic_sub_fetch(&p->g->workers, 1, __ATOMIC_RELAXED);
		__atomic_sub_fetch(&p->g->workers_idle, 1, __ATOMIC_ACQ_REL);
	}
}

static void *worker_main(void *arg)
{
	struct pool *p = arg;
	struct gw *g = p->g;
	struct relay_pipes pipes = RELAY_PIPES_INIT;

	/* idle counts this thread from its spawn on */
	while (!__atomic_load_n(&g->stopping, __ATOMIC_ACQUIRE)) {
		struct pconn *pc = accept_one(g);
		if (!pc)
			continue;
		/* Past POOL_MAX_THREADS busy connections, nobody accepts until
		 * one ends: the listen backlog holds the rest (back-pressure,
		 * so one sandbox cannot make the gateway spawn without end). */
		if (__atomic_sub_fetch(&p->g->workers_idle, 1, __ATOMIC_ACQ_REL) == 0 &&
		    __atomic_load_n(&p->g->workers, __ATOMIC_ACQUIRE) < POOL_MAX_THREADS)
			spawn_worker(p);
		pc->pipes = &pipes;
		uint32_t src = pc->src;
		if (!serve(pc))   /* frees pc */
			conn_give(g, src);
		if (__atomic_add_fetch(&p->g->workers_idle, 1, __ATOMIC_ACQ_REL) > POOL_IDLE_MAX) {
			__atomic_sub_fetch(&p->g->workers_idle, 1, __ATOMIC_ACQ_REL);
			break;
		}
	}
	__atomic_sub_fetch(&p->g->workers, 1, __ATOMIC_ACQ_REL);
	relay_pipes_close(&pipes);
	return NULL;
}

void *gw_proxy_main(void *arg)
{
	struct gw *g = arg;
	/* The pool lives as long as the process. */
	struct pool *p = xcalloc(1, sizeof(*p));

	p->g = g;
	pthread_attr_init(&p->at);
	pthread_attr_setdetachstate(&p->at, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&p->at, 256 * 1024);
	for (int i = 0; i < POOL_START; i++)
		spawn_worker(p);
	/* This thread waits for the stop (workers see it when the listening
	 * socket is shut down) and keeps the host's address list fresh, so
	 * that no connection waits for it to be read. */
	while (!__atomic_load_n(&g->stopping, __ATOMIC_ACQUIRE))
		gw_local_wait(g, 500);
	return NULL;
}
