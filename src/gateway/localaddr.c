/* localaddr.c - the host's own addresses, IPv4 and IPv6, which are never a
 * destination (policy_env's is_local and is_local6), kept current off the
 * connections' path.
 *
 * Why not getifaddrs(3) once a second, as before: it dumps every link with
 * its statistics as well as every address, and a host with hundreds of
 * sandbox veths made that 30 ms to over a second of kernel time here (most
 * of the gateway's CPU in a profile), taken inside is_local by whichever
 * connection came first each second, with every other connection of that
 * second waiting behind the lock. Instead: one RTM_GETADDR dump (addresses
 * only, both families) at start and again only after the kernel announced
 * an address change (RTMGRP_IPV4_IFADDR, RTMGRP_IPV6_IFADDR), at most once a
 * second; a connection only searches the sorted lists. */
#include "gateway-internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../lib/util.h"

#define REFRESH_MS 1000   /* at most one dump per this, however many changes */

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static int cmp_in6(const void *a, const void *b)
{
	return memcmp(a, b, sizeof(struct in6_addr));
}

/* The address of one RTM_NEWADDR: IFA_LOCAL when there is one (on a
 * point-to-point link IFA_ADDRESS is the peer's), as getifaddrs chose.
 * Returns its family (AF_INET: *ip in host order; AF_INET6: *ip6), or 0. */
static int addr_of(struct nlmsghdr *nh, uint32_t *ip, struct in6_addr *ip6)
{
	struct ifaddrmsg *ifa = NLMSG_DATA(nh);
	int len = (int)IFA_PAYLOAD(nh);
	size_t want = ifa->ifa_family == AF_INET ? 4 : ifa->ifa_family == AF_INET6 ? 16 : 0;
	bool found = false;

	if (!want)
		return 0;
	for (struct rtattr *a = IFA_RTA(ifa); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
		if (RTA_PAYLOAD(a) != want || (a->rta_type != IFA_LOCAL && a->rta_type != IFA_ADDRESS))
			continue;
		if (a->rta_type == IFA_LOCAL || !found) {
			if (want == 4) {
				uint32_t v;
				memcpy(&v, RTA_DATA(a), 4);
				*ip = ntohl(v);
			} else {
				memcpy(ip6, RTA_DATA(a), 16);
			}
			found = true;
		}
	}
	return found ? ifa->ifa_family : 0;
}

struct addrs {
	uint32_t *v4;
	size_t n4, cap4;
	struct in6_addr *v6;
	size_t n6, cap6;
};

static void addrs_add(struct addrs *a, int family, uint32_t ip, const struct in6_addr *ip6)
{
	if (family == AF_INET) {
		if (a->n4 == a->cap4) {
			a->cap4 = a->cap4 ? a->cap4 * 2 : 64;
			a->v4 = xrealloc(a->v4, a->cap4 * sizeof(*a->v4));
		}
		a->v4[a->n4++] = ip;
	} else {
		if (a->n6 == a->cap6) {
			a->cap6 = a->cap6 ? a->cap6 * 2 : 64;
			a->v6 = xrealloc(a->v6, a->cap6 * sizeof(*a->v6));
		}
		a->v6[a->n6++] = *ip6;
	}
}

/* Every address of the host, each family sorted, into *out. -1 on a
 * failure (the caller keeps its last lists). */
static int dump(struct addrs *out)
{
	struct {
		struct nlmsghdr nh;
		struct ifaddrmsg ifa;
	} req = {
		.nh = { .nlmsg_len = sizeof(req), .nlmsg_type = RTM_GETADDR,
			.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP, .nlmsg_seq = 1 },
		.ifa = { .ifa_family = AF_UNSPEC },
	};
	size_t bufsz = 32768;
	char *buf = xmalloc(bufsz);   /* malloc's alignment suits nlmsghdr */
	struct addrs a = { 0 };
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE), r = -1;

	if (fd < 0) {
		free(buf);
		return -1;
	}
	if (send(fd, &req, sizeof(req), 0) != (ssize_t)sizeof(req))
		goto out;
	for (;;) {
		ssize_t k = recv(fd, buf, bufsz, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			goto out;
		int len = (int)k;
		/* NLMSG_OK compares the header's unsigned length with len, an
		 * int (as NLMSG_NEXT needs it): clang's -Wsign-compare says so */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
		for (struct nlmsghdr *nh = (struct nlmsghdr *)buf; NLMSG_OK(nh, len);
		     nh = NLMSG_NEXT(nh, len)) {
#pragma GCC diagnostic pop
			uint32_t ip = 0;
			struct in6_addr ip6;
			int family;
			if (nh->nlmsg_type == NLMSG_DONE) {
				r = 0;
				goto out;
			}
			if (nh->nlmsg_type == NLMSG_ERROR)
				goto out;
			if (nh->nlmsg_type == RTM_NEWADDR && (family = addr_of(nh, &ip, &ip6)))
				addrs_add(&a, family, ip, &ip6);
		}
	}
out:
	close(fd);
	free(buf);
	if (r < 0) {
		free(a.v4);
		free(a.v6);
		return -1;
	}
	if (a.n4)
		qsort(a.v4, a.n4, sizeof(*a.v4), cmp_u32);
	if (a.n6)
		qsort(a.v6, a.n6, sizeof(*a.v6), cmp_in6);
	*out = a;
	return 0;
}

static void refresh(struct gw *g)
{
	struct addrs a;
	uint32_t *old;
	struct in6_addr *old6;

	if (dump(&a) < 0)
		return;   /* the last lists stay; retried at the next change */
	pthread_mutex_lock(&g->local_mu);
	old = g->local;
	old6 = g->local6;
	g->local = a.v4;
	g->n_local = a.n4;
	g->local6 = a.v6;
	g->n_local6 = a.n6;
	pthread_mutex_unlock(&g->local_mu);
	free(old);
	free(old6);
	g->local_at = now_ms();
	g->local_dirty = false;
}

void gw_local_init(struct gw *g)
{
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK,
				  .nl_groups = RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR };

	/* Subscribed before the first dump, so no change falls between. Without
	 * the subscription, the list is read again once a second. */
	g->local_nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
	if (g->local_nl >= 0 && bind(g->local_nl, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(g->local_nl);
		g->local_nl = -1;
	}
	refresh(g);
}

void gw_local_wait(struct gw *g, int ms)
{
	struct pollfd p = { .fd = g->local_nl, .events = POLLIN };

	if (poll(&p, 1, ms) > 0 && (p.revents & POLLIN)) {
		static char buf[8192];
		ssize_t k;
		/* what changed does not matter: the next dump reads it all (a
		 * lost notification, ENOBUFS, is a change too) */
		while ((k = recv(g->local_nl, buf, sizeof(buf), 0)) > 0 || (k < 0 && errno == ENOBUFS))
			g->local_dirty = true;
	}
	if ((g->local_dirty || g->local_nl < 0) && now_ms() - g->local_at >= REFRESH_MS)
		refresh(g);
}

bool gw_local_is(void *arg, uint32_t ip)
{
	struct gw *g = arg;
	bool found;

	pthread_mutex_lock(&g->local_mu);
	found = g->n_local && bsearch(&ip, g->local, g->n_local, sizeof(ip), cmp_u32);
	pthread_mutex_unlock(&g->local_mu);
	return found;
}

bool gw_local_is6(void *arg, const struct in6_addr *ip)
{
	struct gw *g = arg;
	bool found;

	pthread_mutex_lock(&g->local_mu);
	found = g->n_local6 && bsearch(ip, g->local6, g->n_local6, sizeof(*ip), cmp_in6);
	pthread_mutex_unlock(&g->local_mu);
	return found;
}
