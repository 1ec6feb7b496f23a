/* dns.c - the sandboxes' resolver. nodemgr redirects every UDP/53 datagram
 * a sandbox sends (whatever resolver it names) here. A query is parsed
 * (sniff.c, untrusted), the name is resolved by the gateway (resolve.c:
 * gateway_hosts, its cache, then an asynchronous lookup) and each address
 * is decided as a destination with the name and no port; only allowed
 * addresses are answered.
 *   A, allowed           -> NOERROR with the allowed addresses
 *   A, nothing allowed   -> REFUSED
 *   A, the name has IPv6 addresses only, one allowed
 *                        -> NOERROR with 192.0.0.8 (RFC 7600's "IPv4 dummy
 *                           address"): sandboxes have no IPv6 route, so a
 *                           name reachable only over IPv6 gets a stand-in
 *                           IPv4 address; every TCP connection is redirected
 *                           to the gateway, which dials the name in the
 *                           HTTP Host or TLS SNI over IPv6 (proxy.c); a
 *                           protocol without a name is decided on 192.0.0.8
 *                           itself, a special range, and refused
 *   AAAA (and any other type) for a name whose A would be allowed
 *                        -> NOERROR, no records (IPv6 is not routed)
 *   everything else      -> REFUSED
 * A name the policy refuses on the name alone (policy_name_gate) is
 * answered REFUSED without being looked up, and so is a query of a sandbox
 * that has gateway_dns_max_pending lookups waiting already.
 * These run on resolve.c's loop thread: a query whose name is not cached
 * is answered from the lookup's end, and nothing here blocks. */
#include "gateway-internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "../lib/util.h"

#define DNS_TTL 30                 /* s: the most a sandbox is told to keep */
#define DNS_V6_STAND_IN 0xc0000008u  /* 192.0.0.8, for IPv6-only names */

static void send_answer(struct gw *g, const struct gw_udp_query *uq, int rcode,
			const uint32_t *a, size_t n, uint32_t ttl)
{
	uint8_t out[1024];
	int len = dns_build_answer(uq->query, &uq->q, rcode, a, n, ttl, out, sizeof(out));

	if (len > 0)
		sendto(g->dns_fd, out, (size_t)len, MSG_DONTWAIT,
		       (const struct sockaddr *)&uq->peer, sizeof(uq->peer));
}

void gw_dns_answer(struct gw *g, const struct gw_udp_query *uq, const struct gw_addrs *a)
{
	uint32_t ok[GW_MAX_HOSTS_IPS];
	size_t n_ok = 0, n = uq->q.qclass == 1 ? a->n4 : 0;
	size_t n6 = uq->q.qclass == 1 && n == 0 ? a->n6 : 0;
	uint32_t ttl = a->ttl < DNS_TTL ? a->ttl : DNS_TTL;
	struct gw_sbx *s;

	pthread_rwlock_rdlock(&g->lock);
	s = gw_find_locked(g, uq->src);
	if (!s) {
		pthread_rwlock_unlock(&g->lock);
		return;
	}
	if (n == 0 && n6 == 0) {
		struct dest d = { .host = uq->q.name };
		gw_log(s, "dns", &d, false, "unresolved");
	}
	for (size_t i = 0; i < n6 && !n_ok; i++) {
		struct dest d = { .host = uq->q.name, .ip6 = &a->v6[i] };
		char rule[96];
		bool allow = policy_decide(&s->pol, &g->env, &d, rule, sizeof(rule));
		if (allow || i == 0)
			gw_log(s, "dns", &d, allow, rule);
		if (allow)
			ok[n_ok++] = htonl(DNS_V6_STAND_IN);
	}
	for (size_t i = 0; i < n; i++) {
		struct dest d = { .host = uq->q.name, .ip = a->v4[i] };
		/* log only the first address's decision, and every allow */
		char rule[96];
		bool allow = policy_decide(&s->pol, &g->env, &d, rule, sizeof(rule));
		if (allow || i == 0)
			gw_log(s, "dns", &d, allow, rule);
		if (allow)
			ok[n_ok++] = htonl(a->v4[i]);
	}
	pthread_rwlock_unlock(&g->lock);

	if (n_ok && uq->q.qtype == 1)
		send_answer(g, uq, 0, ok, n_ok, ttl);
	else if (n_ok)
		send_answer(g, uq, 0, NULL, 0, ttl);
	else
		send_answer(g, uq, 5, NULL, 0, 0);
}

/* One datagram from a sandbox. */
static void one_query(struct gw *g, struct gw_udp_query *uq)
{
	struct gw_addrs a;
	int pass, r;

	if (sniff_dns_query(uq->query, uq->len, &uq->q) < 0)
		return;  /* not a query we answer: drop, as a firewall would */
	/* The name gate first: a name the policy cannot allow is never
	 * looked up (no exfiltration through the host's resolver). */
	pass = gw_name_gate(g, uq->src, "dns", &(struct dest){ .host = uq->q.name });
	if (pass < 0)
		return;
	if (!pass || uq->q.qclass != 1) {
		send_answer(g, uq, 5, NULL, 0, 0);
		return;
	}
	r = gw_resolve_async(g, uq, &a);
	if (r == 0)
		gw_dns_answer(g, uq, &a);
	else if (r < 0)
		send_answer(g, uq, 5, NULL, 0, 0);   /* over its cap of lookups */
	/* 1: answered when the lookup ends; 2: a retransmission, dropped */
}

void gw_dns_readable(struct gw *g)
{
	/* A bounded batch, so the lookups' sockets get their turn. */
	for (int i = 0; i < 64; i++) {
		struct gw_udp_query uq;
		socklen_t pl = sizeof(uq.peer);
		ssize_t k = recvfrom(g->dns_fd, uq.query, sizeof(uq.query), MSG_DONTWAIT,
				     (struct sockaddr *)&uq.peer, &pl);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return;
		if (k == 0 || uq.peer.sin_family != AF_INET)
			continue;
		uq.len = (size_t)k;
		uq.src = ntohl(uq.peer.sin_addr.s_addr);
		one_query(g, &uq);
	}
}
