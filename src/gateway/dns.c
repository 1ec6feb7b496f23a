/* dns.c - the sandboxes' resolver. nodemgr redirects every UDP/53 datagram
 * a sandbox sends (whatever resolver it names) here. A query is parsed
 * (sniff.c, untrusted), the name is resolved by the gateway (gateway_hosts,
 * then the host's resolver) and each address is decided as a destination
 * with the name and no port; only allowed addresses are answered.
 *   A, allowed           -> NOERROR with the allowed addresses
 *   A, nothing allowed   -> REFUSED
 *   AAAA (and any other type) for a name whose A would be allowed
 *                        -> NOERROR, no records (IPv6 is not routed)
 *   everything else      -> REFUSED
 * A name the policy refuses on the name alone (policy_name_gate) is
 * answered REFUSED without being looked up.
 * One thread: lookups of the host resolver block it, which is fine for a
 * node's sandboxes and keeps this path simple. */
#include "gateway-internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include "../lib/util.h"

#define DNS_TTL 30

void *gw_dns_main(void *arg)
{
	struct gw *g = arg;
	uint8_t in[512], out[1024];

	while (!__atomic_load_n(&g->stopping, __ATOMIC_ACQUIRE)) {
		struct pollfd p = { .fd = g->dns_fd, .events = POLLIN };
		struct sockaddr_in peer;
		socklen_t pl = sizeof(peer);
		struct dns_query q;
		uint32_t ips[GW_MAX_HOSTS_IPS], ok[GW_MAX_HOSTS_IPS];
		size_t n, n_ok = 0;
		int len;
		struct gw_sbx *s;

		if (poll(&p, 1, 500) <= 0)
			continue;
		ssize_t k = recvfrom(g->dns_fd, in, sizeof(in), MSG_DONTWAIT,
				     (struct sockaddr *)&peer, &pl);
		if (k <= 0 || peer.sin_family != AF_INET)
			continue;
		if (sniff_dns_query(in, (size_t)k, &q) < 0)
			continue;  /* not a query we answer: drop, as a firewall would */
		/* The name gate first: a name the policy cannot allow is never
		 * looked up (no exfiltration through the host's resolver). */
		int pass = gw_name_gate(g, ntohl(peer.sin_addr.s_addr), "dns",
					&(struct dest){ .host = q.name });
		if (pass < 0)
			continue;
		if (!pass) {
			len = dns_build_answer(in, &q, 5, NULL, 0, 0, out, sizeof(out));
			if (len > 0)
				sendto(g->dns_fd, out, (size_t)len, MSG_DONTWAIT,
				       (struct sockaddr *)&peer, pl);
			continue;
		}
		n = (q.qclass == 1) ? gw_resolve(g, q.name, ips, GW_MAX_HOSTS_IPS) : 0;

		pthread_rwlock_rdlock(&g->lock);
		s = gw_find_locked(g, ntohl(peer.sin_addr.s_addr));
		if (!s) {
			pthread_rwlock_unlock(&g->lock);
			continue;
		}
		if (n == 0) {
			struct dest d = { .host = q.name };
			gw_log(s, "dns", &d, false, "unresolved");
		}
		for (size_t i = 0; i < n; i++) {
			struct dest d = { .host = q.name, .ip = ips[i] };
			/* log only the first address's decision, and every allow */
			char rule[96];
			bool allow = policy_decide(&s->pol, &g->env, &d, rule, sizeof(rule));
			if (allow || i == 0)
				gw_log(s, "dns", &d, allow, rule);
			if (allow)
				ok[n_ok++] = htonl(ips[i]);
		}
		pthread_rwlock_unlock(&g->lock);

		if (n_ok && q.qtype == 1)
			len = dns_build_answer(in, &q, 0, ok, n_ok, DNS_TTL, out, sizeof(out));
		else if (n_ok)
			len = dns_build_answer(in, &q, 0, NULL, 0, DNS_TTL, out, sizeof(out));
		else
			len = dns_build_answer(in, &q, 5, NULL, 0, 0, out, sizeof(out));
		if (len > 0)
			sendto(g->dns_fd, out, (size_t)len, MSG_DONTWAIT, (struct sockaddr *)&peer,
			       pl);
	}
	return NULL;
}
