/* netlink.c - minimal rtnetlink client (see netlink.h). The kernel is the
 * only peer: answers are checked for type, sequence and size. */
#include "netlink.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../../lib/util.h"

#define NL_BUF 1024

struct nlreq {
	struct nlmsghdr *h;
	char buf[NL_BUF];
};

static void req_init(struct nlreq *r, uint16_t type, uint16_t flags)
{
	memset(r->buf, 0, sizeof(r->buf));
	r->h = (struct nlmsghdr *)r->buf;
	r->h->nlmsg_len = NLMSG_LENGTH(0);
	r->h->nlmsg_type = type;
	r->h->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
}

/* Append n bytes of fixed header (ifinfomsg, ifaddrmsg, rtmsg). */
static void *put(struct nlreq *r, size_t n)
{
	void *p = r->buf + NLMSG_ALIGN(r->h->nlmsg_len);

	r->h->nlmsg_len = NLMSG_ALIGN(r->h->nlmsg_len) + (uint32_t)n;
	return p;
}

static struct rtattr *attr(struct nlreq *r, uint16_t type, const void *data, size_t n)
{
	struct rtattr *a = (struct rtattr *)(r->buf + NLMSG_ALIGN(r->h->nlmsg_len));

	a->rta_type = type;
	a->rta_len = (unsigned short)RTA_LENGTH(n);
	if (n)
		memcpy(RTA_DATA(a), data, n);
	r->h->nlmsg_len = NLMSG_ALIGN(r->h->nlmsg_len) + RTA_ALIGN(a->rta_len);
	return a;
}

static void nest_end(struct nlreq *r, struct rtattr *a)
{
	a->rta_len = (unsigned short)((char *)r->buf + r->h->nlmsg_len - (char *)a);
}

static int talk(int sock, struct nlreq *r, const char *what, err_t *err)
{
	static uint32_t seq;  /* any value; answers are matched on it */
	char ans[NL_BUF];
	ssize_t k;

	r->h->nlmsg_seq = __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED);
	if (send(sock, r->buf, r->h->nlmsg_len, 0) < 0)
		return err_sys(err, "netlink %s", what);
	for (;;) {
		k = recv(sock, ans, sizeof(ans), 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return err_sys(err, "netlink %s", what);
		for (struct nlmsghdr *h = (struct nlmsghdr *)ans; NLMSG_OK(h, (size_t)k);
		     h = NLMSG_NEXT(h, k)) {
			if (h->nlmsg_seq != r->h->nlmsg_seq || h->nlmsg_type != NLMSG_ERROR)
				continue;
			if (h->nlmsg_len < NLMSG_LENGTH(sizeof(struct nlmsgerr)))
				return err_set(err, EPROTO, "netlink %s: short answer", what);
			int e = ((struct nlmsgerr *)NLMSG_DATA(h))->error;
			if (e == 0)
				return 0;
			errno = -e;
			return err_sys(err, "netlink %s", what);
		}
	}
}

int nmnet_nl_open(int netns_fd, err_t *err)
{
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
	int orig = -1, fd, r = 0;

	if (netns_fd >= 0) {
		char p[64];
		snprintf(p, sizeof(p), "/proc/self/task/%ld/ns/net", (long)syscall(SYS_gettid));
		orig = open(p, O_RDONLY | O_CLOEXEC);
		if (orig < 0)
			return err_sys(err, "open %s", p);
		if (setns(netns_fd, CLONE_NEWNET) < 0) {
			r = err_sys(err, "setns (sandbox network)");
			close(orig);
			return r;
		}
	}
	/* The socket belongs to the namespace it was created in. */
	fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (fd < 0)
		r = err_sys(err, "netlink socket");
	else if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		r = err_sys(err, "netlink bind");
	if (orig >= 0) {
		/* Back home; this must not fail, or the thread serves later
		 * verbs from the wrong namespace. */
		if (setns(orig, CLONE_NEWNET) < 0)
			abort();
		close(orig);
	}
	if (r < 0) {
		if (fd >= 0)
			close(fd);
		return r;
	}
	return fd;
}

/* A link request for `name`: header, ifinfomsg (returned) and IFLA_IFNAME. */
static struct ifinfomsg *link_req(struct nlreq *r, int type, int flags, const char *name)
{
	struct ifinfomsg *ifi;

	req_init(r, type, flags);
	ifi = put(r, sizeof(*ifi));
	ifi->ifi_family = AF_UNSPEC;
	attr(r, IFLA_IFNAME, name, strlen(name) + 1);
	return ifi;
}

int nmnet_nl_veth_add(int sock, const char *name, const char *peer, int peer_netns_fd, err_t *err)
{
	struct nlreq r;
	struct ifinfomsg *ifi;
	struct rtattr *li, *data, *pe;
	uint32_t nsfd = (uint32_t)peer_netns_fd, one = 1;

	link_req(&r, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, name);
	/* One queue each way on both ends, said up front: a veth made
	 * without these gets one per CPU and is cut down to one after it is
	 * registered, an RCU grace period per end waited out under the RTNL
	 * lock (veth_init_queues), which every other create's network
	 * setup then queues behind (the first wait of parallel creates). */
	attr(&r, IFLA_NUM_TX_QUEUES, &one, sizeof(one));
	attr(&r, IFLA_NUM_RX_QUEUES, &one, sizeof(one));
	li = attr(&r, IFLA_LINKINFO, NULL, 0);
	attr(&r, IFLA_INFO_KIND, "veth", 4);
	data = attr(&r, IFLA_INFO_DATA, NULL, 0);
	pe = attr(&r, VETH_INFO_PEER, NULL, 0);
	ifi = put(&r, sizeof(*ifi));   /* the peer's ifinfomsg */
	ifi->ifi_family = AF_UNSPEC;
	attr(&r, IFLA_IFNAME, peer, strlen(peer) + 1);
	attr(&r, IFLA_NET_NS_FD, &nsfd, sizeof(nsfd));
	attr(&r, IFLA_NUM_TX_QUEUES, &one, sizeof(one));
	attr(&r, IFLA_NUM_RX_QUEUES, &one, sizeof(one));
	nest_end(&r, pe);
	nest_end(&r, data);
	nest_end(&r, li);
	return talk(sock, &r, "add veth", err);
}

int nmnet_nl_link_del(int sock, const char *name, err_t *err)
{
	struct nlreq r;

	link_req(&r, RTM_DELLINK, 0, name);
	return talk(sock, &r, "delete link", err);
}

int nmnet_nl_link_up(int sock, const char *name, err_t *err)
{
	struct nlreq r;
	struct ifinfomsg *ifi;

	ifi = link_req(&r, RTM_NEWLINK, 0, name);
	ifi->ifi_flags = IFF_UP;
	ifi->ifi_change = IFF_UP;
	return talk(sock, &r, "link up", err);
}

/* RTM_NEWADDR and RTM_NEWROUTE take an index, not a name: look it up in
 * the socket's own namespace with RTM_GETLINK. */
static int index_of(int sock, const char *name, int *index, err_t *err)
{
	struct nlreq r;
	char ans[4096];
	ssize_t k;

	link_req(&r, RTM_GETLINK, 0, name);
	r.h->nlmsg_flags = NLM_F_REQUEST;
	r.h->nlmsg_seq = 0x7fffffff;
	if (send(sock, r.buf, r.h->nlmsg_len, 0) < 0)
		return err_sys(err, "netlink get link %s", name);
	for (;;) {
		k = recv(sock, ans, sizeof(ans), 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return err_sys(err, "netlink get link %s", name);
		for (struct nlmsghdr *h = (struct nlmsghdr *)ans; NLMSG_OK(h, (size_t)k);
		     h = NLMSG_NEXT(h, k)) {
			if (h->nlmsg_seq != 0x7fffffff)
				continue;
			if (h->nlmsg_type == NLMSG_ERROR) {
				int e = h->nlmsg_len >= NLMSG_LENGTH(sizeof(struct nlmsgerr))
						? ((struct nlmsgerr *)NLMSG_DATA(h))->error
						: -EPROTO;
				errno = e ? -e : ENODEV;
				return err_sys(err, "netlink get link %s", name);
			}
			if (h->nlmsg_type == RTM_NEWLINK &&
			    h->nlmsg_len >= NLMSG_LENGTH(sizeof(struct ifinfomsg))) {
				*index = ((struct ifinfomsg *)NLMSG_DATA(h))->ifi_index;
				return 0;
			}
		}
	}
}

int nmnet_nl_addr_add(int sock, const char *name, uint32_t addr, int prefix, err_t *err)
{
	struct nlreq r;
	struct ifaddrmsg *ifa;
	uint32_t a = htonl(addr);
	int index, rc;

	if ((rc = index_of(sock, name, &index, err)) < 0)
		return rc;
	req_init(&r, RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL);
	ifa = put(&r, sizeof(*ifa));
	ifa->ifa_family = AF_INET;
	ifa->ifa_prefixlen = (unsigned char)prefix;
	ifa->ifa_index = (unsigned)index;
	attr(&r, IFA_LOCAL, &a, 4);
	attr(&r, IFA_ADDRESS, &a, 4);
	return talk(sock, &r, "add address", err);
}

int nmnet_nl_route_default(int sock, const char *name, uint32_t gw, err_t *err)
{
	struct nlreq r;
	struct rtmsg *rt;
	uint32_t g = htonl(gw), oif;
	int index, rc;

	if ((rc = index_of(sock, name, &index, err)) < 0)
		return rc;
	oif = (uint32_t)index;
	req_init(&r, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL);
	rt = put(&r, sizeof(*rt));
	rt->rtm_family = AF_INET;
	rt->rtm_table = RT_TABLE_MAIN;
	rt->rtm_protocol = RTPROT_BOOT;
	rt->rtm_scope = RT_SCOPE_UNIVERSE;
	rt->rtm_type = RTN_UNICAST;
	attr(&r, RTA_GATEWAY, &g, 4);
	attr(&r, RTA_OIF, &oif, 4);
	return talk(sock, &r, "add default route", err);
}
