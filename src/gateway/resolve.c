/* resolve.c - the gateway's own name resolution, without blocking.
 *
 * One thread (gw_dns_main) runs an event loop over the sandboxes' DNS
 * socket (dns.c), c-ares's sockets and an eventfd that proxy workers use to
 * hand it lookups. Nothing in that loop waits for an upstream resolver: a
 * lookup is started with ares_getaddrinfo and answered from its callback.
 *
 *   - gateway_hosts answer first (static, no lookup);
 *   - then a bounded cache (RES_CACHE_MAX names, RES_CACHE_PER_SBX of them
 *     filled by any one sandbox) that honours the answers' TTLs (the least
 *     of the records', at most RES_TTL_MAX; TTL 0 is not cached) and keeps
 *     "no such name" for RES_NEG_TTL seconds;
 *   - then one lookup per name in flight, which every asker of that name
 *     joins (a DNS query of the sandbox, or a proxy worker waiting on a
 *     condition variable for its own connection only);
 *   - each sandbox may have at most max_pending askers waiting at once
 *     (gateway_dns_max_pending): over it, the ask is refused at once and
 *     the refusal is in the sandbox's decision log ("dns lookup limit").
 *
 * The upstream servers are the host's /etc/resolv.conf (c-ares reads it),
 * or gateway_dns_servers when set. Everything here is driven by names the
 * sandboxes choose: the memory it holds is bounded by the caps above
 * (entries, flights and waiters), not by what the sandboxes send. */
#include "gateway-internal.h"

#include <ares.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../lib/log.h"
#include "../lib/keycap.h"
#include "../lib/util.h"

#define RES_CACHE_MAX 8192        /* names cached, all sandboxes */
#define RES_CACHE_PER_SBX 512     /* of them filled by one sandbox's lookups */
#define RES_BUCKETS 4096
#define RES_TTL_MAX 3600          /* s: longer TTLs are cut to this */
#define RES_NEG_TTL 5             /* s: "no such name" is kept this long */
#define RES_TIMEOUT_MS 2000       /* per try of one upstream server */
#define RES_TRIES 2

struct rcache {
	struct rcache *hnext;         /* bucket chain */
	struct rcache *older, *newer; /* age list */
	uint32_t owner;               /* the sandbox whose lookup filled it */
	uint64_t expires;             /* now_ms() */
	struct gw_addrs a;            /* n4 = n6 = 0: no such name */
	char name[];
};

enum { W_SYNC, W_UDP };

struct waiter {
	struct waiter *next;
	int kind;
	uint32_t src;                 /* the sandbox, host order */
	char name[SNIFF_HOST_MAX + 1];
	/* W_SYNC: a proxy worker, waiting on cv under r->mu */
	pthread_cond_t cv;
	bool done;
	struct gw_addrs *out;
	/* W_UDP: a sandbox's query, answered when the lookup ends */
	struct gw_udp_query *uq;
};

struct flight {
	struct flight *next;
	struct resolver *r;
	uint32_t owner;               /* the first asker */
	struct waiter *w;
	char name[SNIFF_HOST_MAX + 1];
};

struct resolver {
	struct gw *g;
	ares_channel ch;
	int efd;                      /* eventfd: submissions */
	pthread_mutex_t mu;           /* cache, submissions */
	struct rcache *bucket[RES_BUCKETS];
	struct rcache *oldest, *newest;
	size_t n_cache;
	struct keycap *per_owner;      /* cache entries per sandbox */
	struct keycap *pending;        /* askers waiting per sandbox */
	struct waiter *submitted;     /* from workers, for the loop (under mu) */
	struct flight *flights;       /* the loop's own */
	bool closed;                  /* no more submissions (under mu) */
};

static uint32_t hash_name(const char *s)
{
	uint32_t h = 2166136261u;

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h % RES_BUCKETS;
}

/* ---- cache (under r->mu) ---------------------------------------------- */

static void cache_unlink(struct resolver *r, struct rcache *e)
{
	struct rcache **pp = &r->bucket[hash_name(e->name)];

	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	if (e->older)
		e->older->newer = e->newer;
	else
		r->oldest = e->newer;
	if (e->newer)
		e->newer->older = e->older;
	else
		r->newest = e->older;
	r->n_cache--;
	keycap_give(r->per_owner, &e->owner, sizeof(e->owner));
	free(e);
}

static struct rcache *cache_find(struct resolver *r, const char *name)
{
	uint64_t now = now_ms();

	for (struct rcache *e = r->bucket[hash_name(name)]; e; e = e->hnext)
		if (!strcmp(e->name, name)) {
			if (e->expires <= now) {
				cache_unlink(r, e);
				return NULL;
			}
			return e;
		}
	return NULL;
}

/* The oldest entry owner filled, or with owner 0 the oldest of all. */
static struct rcache *cache_oldest(struct resolver *r, uint32_t owner)
{
	for (struct rcache *e = r->oldest; e; e = e->newer)
		if (!owner || e->owner == owner)
			return e;
	return NULL;
}

static void cache_put(struct resolver *r, const char *name, uint32_t owner,
		      const struct gw_addrs *a, uint32_t ttl)
{
	struct rcache *e;
	size_t len = strlen(name);

	if (ttl == 0)
		return;
	if ((e = cache_find(r, name)))
		cache_unlink(r, e);
	/* A sandbox that fills its share replaces its own oldest entry:
	 * one tenant's names cannot push the others' out beyond that. */
	while (!keycap_take(r->per_owner, &owner, sizeof(owner))) {
		struct rcache *old = cache_oldest(r, owner);
		if (!old)
			return;
		cache_unlink(r, old);
	}
	while (r->n_cache >= RES_CACHE_MAX)
		cache_unlink(r, r->oldest);
	e = xcalloc(1, sizeof(*e) + len + 1);
	memcpy(e->name, name, len + 1);
	e->owner = owner;
	e->a = *a;
	e->expires = now_ms() + (uint64_t)ttl * 1000;
	e->hnext = r->bucket[hash_name(name)];
	r->bucket[hash_name(name)] = e;
	e->older = r->newest;
	if (r->newest)
		r->newest->newer = e;
	else
		r->oldest = e;
	r->newest = e;
	r->n_cache++;
}

/* A hit fills *out with the seconds it has left; false on a miss. */
static bool cache_get(struct resolver *r, const char *name, struct gw_addrs *out)
{
	struct rcache *e = cache_find(r, name);

	if (!e)
		return false;
	*out = e->a;
	out->ttl = (uint32_t)((e->expires - now_ms() + 999) / 1000);
	return true;
}

static bool static_hosts(struct gw *g, const char *name, struct gw_addrs *out)
{
	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < g->n_hosts; i++)
		if (strcmp(g->hosts[i].name, name) == 0 && out->n4 < GW_MAX_HOSTS_IPS)
			out->v4[out->n4++] = g->hosts[i].ip;
	out->ttl = 30;
	return out->n4 > 0;
}

/* ---- lookups (the loop thread) ---------------------------------------- */

static void addrs_from(const struct ares_addrinfo *ai, struct gw_addrs *a, uint32_t *ttl)
{
	uint32_t least = RES_TTL_MAX;

	memset(a, 0, sizeof(*a));
	for (const struct ares_addrinfo_node *n = ai ? ai->nodes : NULL; n; n = n->ai_next) {
		if (n->ai_ttl >= 0 && (uint32_t)n->ai_ttl < least)
			least = (uint32_t)n->ai_ttl;
		if (n->ai_family == AF_INET && a->n4 < GW_MAX_HOSTS_IPS) {
			uint32_t ip = ntohl(((struct sockaddr_in *)n->ai_addr)->sin_addr.s_addr);
			bool dup = false;
			for (size_t k = 0; k < a->n4; k++)
				dup = dup || a->v4[k] == ip;
			if (!dup)
				a->v4[a->n4++] = ip;
		} else if (n->ai_family == AF_INET6 && a->n6 < GW_MAX_HOSTS_IPS) {
			const struct in6_addr *ip = &((struct sockaddr_in6 *)n->ai_addr)->sin6_addr;
			bool dup = false;
			for (size_t k = 0; k < a->n6; k++)
				dup = dup || !memcmp(&a->v6[k], ip, sizeof(*ip));
			if (!dup)
				a->v6[a->n6++] = *ip;
		}
	}
	for (const struct ares_addrinfo_cname *c = ai ? ai->cnames : NULL; c; c = c->next)
		if (c->ttl >= 0 && (uint32_t)c->ttl < least)
			least = (uint32_t)c->ttl;
	*ttl = least;
	a->ttl = least;
}

/* One asker is answered: its sandbox may ask again. */
static void waiter_finish(struct resolver *r, struct waiter *w, const struct gw_addrs *a)
{
	keycap_give(r->pending, &w->src, sizeof(w->src));
	if (w->kind == W_SYNC) {
		pthread_mutex_lock(&r->mu);
		*w->out = *a;
		w->done = true;
		pthread_cond_signal(&w->cv);
		pthread_mutex_unlock(&r->mu);
		return;
	}
	gw_dns_answer(r->g, w->uq, a);
	free(w->uq);
	free(w);
}

static void lookup_done(void *arg, int status, int timeouts, struct ares_addrinfo *ai)
{
	struct flight *f = arg, **pp;
	struct resolver *r = f->r;
	struct gw_addrs a;
	uint32_t ttl = 0;

	(void)timeouts;
	if (status == ARES_SUCCESS) {
		addrs_from(ai, &a, &ttl);
	} else {
		memset(&a, 0, sizeof(a));
		/* the name does not exist (or has no address): remembered a
		 * little; a failure to get an answer is not */
		if (status == ARES_ENOTFOUND || status == ARES_ENODATA)
			ttl = RES_NEG_TTL;
		a.ttl = ttl;
	}
	if (ai)
		ares_freeaddrinfo(ai);
	if (status != ARES_EDESTRUCTION) {
		pthread_mutex_lock(&r->mu);
		cache_put(r, f->name, f->owner, &a, ttl);
		pthread_mutex_unlock(&r->mu);
	}
	for (pp = &r->flights; *pp && *pp != f; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = f->next;
	while (f->w) {
		struct waiter *w = f->w;
		f->w = w->next;
		waiter_finish(r, w, &a);
	}
	free(f);
}

/* Join the lookup of w->name in flight, or start one. */
static void lookup_join(struct resolver *r, struct waiter *w)
{
	struct flight *f;

	for (f = r->flights; f; f = f->next)
		if (!strcmp(f->name, w->name))
			break;
	if (f) {
		w->next = f->w;
		f->w = w;
		return;
	}
	f = xcalloc(1, sizeof(*f));
	f->r = r;
	f->owner = w->src;
	snprintf(f->name, sizeof(f->name), "%s", w->name);
	f->w = w;
	w->next = NULL;
	f->next = r->flights;
	r->flights = f;
	struct ares_addrinfo_hints hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
					     .ai_flags = ARES_AI_NOSORT };
	/* may call lookup_done at once (a literal, /etc/hosts, an error) */
	ares_getaddrinfo(r->ch, f->name, NULL, &hints, lookup_done, f);
}

/* The workers' submissions, taken over by the loop. */
static void drain_submitted(struct resolver *r)
{
	struct waiter *list;
	uint64_t v;

	(void)!read(r->efd, &v, sizeof(v));
	pthread_mutex_lock(&r->mu);
	list = r->submitted;
	r->submitted = NULL;
	pthread_mutex_unlock(&r->mu);
	while (list) {
		struct waiter *w = list;
		list = w->next;
		lookup_join(r, w);
	}
}

/* ---- what the rest of the gateway calls ------------------------------- */

/* Logged refusal of an asker over the cap (caller holds no lock). */
static void log_over_cap(struct gw *g, uint32_t src, const char *proto, const char *name)
{
	pthread_rwlock_rdlock(&g->lock);
	struct gw_sbx *s = gw_find_locked(g, src);
	if (s)
		gw_log(s, proto, &(struct dest){ .host = name }, false, "dns lookup limit");
	pthread_rwlock_unlock(&g->lock);
	log_info("gateway: sandbox %s over its %u pending dns lookups, `%s` refused",
		 s ? s->id : "?", g->cfg->dns_max_pending, name);
}

int gw_resolve(struct gw *g, uint32_t src, const char *proto, const char *name,
	       struct gw_addrs *out)
{
	struct resolver *r = g->res;
	struct waiter w = { .kind = W_SYNC, .src = src, .out = out };

	if (static_hosts(g, name, out))
		return 0;
	pthread_mutex_lock(&r->mu);
	if (cache_get(r, name, out)) {
		pthread_mutex_unlock(&r->mu);
		return 0;
	}
	if (r->closed) {
		pthread_mutex_unlock(&r->mu);
		return 0;
	}
	if (!keycap_take(r->pending, &src, sizeof(src))) {
		pthread_mutex_unlock(&r->mu);
		log_over_cap(g, src, proto, name);
		return -1;
	}
	snprintf(w.name, sizeof(w.name), "%s", name);
	pthread_cond_init(&w.cv, NULL);
	w.next = r->submitted;
	r->submitted = &w;
	(void)!write(r->efd, &(uint64_t){ 1 }, sizeof(uint64_t));
	/* Only this connection waits; c-ares ends every lookup (an answer,
	 * RES_TRIES timeouts per server, or the channel's destruction). */
	while (!w.done)
		pthread_cond_wait(&w.cv, &r->mu);
	pthread_mutex_unlock(&r->mu);
	pthread_cond_destroy(&w.cv);
	return 0;
}

int gw_resolve_async(struct gw *g, struct gw_udp_query *uq, struct gw_addrs *out)
{
	struct resolver *r = g->res;
	struct waiter *w;

	if (static_hosts(g, uq->q.name, out))
		return 0;
	pthread_mutex_lock(&r->mu);
	bool hit = cache_get(r, uq->q.name, out);
	pthread_mutex_unlock(&r->mu);
	if (hit)
		return 0;
	/* A retransmission of a query that waits already is dropped: the
	 * first one's answer answers it. */
	for (struct flight *f = r->flights; f; f = f->next) {
		if (strcmp(f->name, uq->q.name))
			continue;
		for (struct waiter *x = f->w; x; x = x->next)
			if (x->kind == W_UDP && x->src == uq->src && x->uq->q.id == uq->q.id &&
			    x->uq->q.qtype == uq->q.qtype &&
			    x->uq->peer.sin_port == uq->peer.sin_port)
				return 2;
	}
	if (!keycap_take(r->pending, &uq->src, sizeof(uq->src))) {
		log_over_cap(g, uq->src, "dns", uq->q.name);
		return -1;
	}
	w = xcalloc(1, sizeof(*w));
	w->kind = W_UDP;
	w->src = uq->src;
	snprintf(w->name, sizeof(w->name), "%s", uq->q.name);
	w->uq = xmalloc(sizeof(*uq));
	*w->uq = *uq;
	lookup_join(r, w);
	return 1;
}

int gw_resolver_init(struct gw *g, err_t *err)
{
	struct resolver *r = xcalloc(1, sizeof(*r));
	struct ares_options o = { .flags = ARES_FLAG_NOSEARCH, .timeout = RES_TIMEOUT_MS,
				  .tries = RES_TRIES };
	int st;

	if ((st = ares_library_init(ARES_LIB_INIT_ALL)) != ARES_SUCCESS) {
		free(r);
		return err_set(err, EIO, "c-ares: %s", ares_strerror(st));
	}
	/* The host's resolv.conf gives the servers; the sandbox's names are
	 * asked as they are (no search domains of the host's). */
	st = ares_init_options(&r->ch, &o, ARES_OPT_FLAGS | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES);
	if (st != ARES_SUCCESS) {
		free(r);
		return err_set(err, EIO, "c-ares: %s", ares_strerror(st));
	}
	if (g->cfg->dns_servers && g->cfg->dns_servers[0] &&
	    (st = ares_set_servers_ports_csv(r->ch, g->cfg->dns_servers)) != ARES_SUCCESS) {
		ares_destroy(r->ch);
		free(r);
		return err_set(err, EINVAL, "gateway_dns_servers: `%s`: %s", g->cfg->dns_servers,
			       ares_strerror(st));
	}
	r->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (r->efd < 0) {
		ares_destroy(r->ch);
		free(r);
		return err_sys(err, "eventfd");
	}
	r->g = g;
	pthread_mutex_init(&r->mu, NULL);
	r->per_owner = keycap_new(RES_CACHE_PER_SBX);
	r->pending = keycap_new(g->cfg->dns_max_pending ? g->cfg->dns_max_pending
						      : GATEWAY_DNS_MAX_PENDING_DEFAULT);
	g->res = r;
	return 0;
}

/* The loop: the sandboxes' DNS socket, c-ares's sockets, the workers'
 * submissions; never a blocking call but poll. */
void *gw_dns_main(void *arg)
{
	struct gw *g = arg;
	struct resolver *r = g->res;

	while (!__atomic_load_n(&g->stopping, __ATOMIC_ACQUIRE)) {
		ares_socket_t socks[ARES_GETSOCK_MAXNUM];
		struct pollfd p[ARES_GETSOCK_MAXNUM + 2];
		int bits = ares_getsock(r->ch, socks, ARES_GETSOCK_MAXNUM), np = 2;
		struct timeval max = { 0, 500000 }, tv, *t;

		p[0] = (struct pollfd){ .fd = g->dns_fd, .events = POLLIN };
		p[1] = (struct pollfd){ .fd = r->efd, .events = POLLIN };
		/* The bits read as unsigned: c-ares's own ARES_GETSOCK_WRITABLE
		 * shifts an int 1 by up to 31 (undefined; UBSan stops on it). */
		for (int i = 0; i < ARES_GETSOCK_MAXNUM; i++) {
			unsigned ub = (unsigned)bits;
			short ev = (short)(((ub >> i) & 1u ? POLLIN : 0) |
					   ((ub >> (i + ARES_GETSOCK_MAXNUM)) & 1u ? POLLOUT : 0));
			if (ev)
				p[np++] = (struct pollfd){ .fd = socks[i], .events = ev };
		}
		t = ares_timeout(r->ch, &max, &tv);
		int ms = (int)(t->tv_sec * 1000 + t->tv_usec / 1000);
		if (poll(p, (nfds_t)np, ms < 1 ? 1 : ms) < 0 && errno != EINTR)
			continue;
		for (int i = 2; i < np; i++)
			if (p[i].revents)
				ares_process_fd(r->ch,
						p[i].revents & (POLLIN | POLLERR | POLLHUP) ? p[i].fd
											   : ARES_SOCKET_BAD,
						p[i].revents & POLLOUT ? p[i].fd : ARES_SOCKET_BAD);
		/* the timeouts of lookups no answer came for */
		ares_process_fd(r->ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
		if (p[1].revents)
			drain_submitted(r);
		if (p[0].revents)
			gw_dns_readable(g);
	}
	/* Stop: no more submissions; the lookups in flight end, each asker
	 * told "nothing" (ARES_EDESTRUCTION). */
	pthread_mutex_lock(&r->mu);
	r->closed = true;
	pthread_mutex_unlock(&r->mu);
	drain_submitted(r);
	ares_destroy(r->ch);
	return NULL;
}
