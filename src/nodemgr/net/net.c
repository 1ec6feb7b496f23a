/* net.c - the per-sandbox network (ns and vm backends) and this instance's nftables
 * table. Privileged work: it runs in nodemgr (root). Links, addresses and
 * routes are made over rtnetlink (netlink.c: no process start on the
 * create path); the table is loaded once with the `nft` command. Nothing
 * built here comes from a sandbox: names and addresses follow from a
 * validated sandbox id's slot and the operator's configuration.
 *
 * Model. Slot N (the jail's uid range) owns the /31 at net_base + 2N: the
 * host end of a veth pair (<prefix>-<N>, IPv6 disabled) holds .2N, the
 * sandbox's eth0 holds .2N+1 with the host end as its default route. The
 * slot is unique while the jail lives and nodemgr's start-up sweep kills
 * every jail of an earlier run, so no live address is handed out twice and
 * nothing needs persisting.
 *
 * vm: the same pair, its sandbox end ("veth0", holding .2N+1) in QEMU's
 * own namespace, which routes between it and the tap QEMU's NIC uses
 * ("tap0", 100.96.0.1/30) and translates: the guest has the same address
 * in every VM (100.96.0.2, proto.h PROTO_VM_NET_*, set in the template's
 * boot), leaves that namespace as .2N+1 and is reached there (port
 * forwards) by .2N+1. So the host sees exactly what an ns jail sends.
 *
 * The table (inet <table>) matches packets by input interface name
 * (<prefix>-*), so it is installed once and a sandbox adds no rule:
 *   prerouting/raw     IPv6, anything to 169.254.0.0/16 (link-local, cloud
 *                      metadata), and any source address that does not
 *                      route back through the interface it came in on
 *                      (fib: no spoofing; the gateway knows sandboxes by
 *                      source address) -> drop, before any redirect
 *   prerouting/dstnat  TCP -> redirect to the gateway's proxy port,
 *                      UDP/53 -> redirect to the gateway's DNS port
 *   input              only those two redirected flows are accepted; ICMP,
 *                      other UDP, any other host port are dropped; the
 *                      proxy/DNS ports are closed to every other interface
 *   forward            everything from or to a sandbox is dropped (no
 *                      ip_forward is needed: the gateway dials upstream)
 * Redirected traffic to other sandboxes, the host's own addresses, private
 * and link-local ranges is then refused by the gateway's policy. */
#include "../core/nodemgr-internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_arp.h>
#include <linux/if_tun.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../lib/log.h"
#include "../../lib/util.h"
#include "../../guestproto/proto.h"
#include "netlink.h"
#include "net.h"

/* Run argv (PATH lookup) with stdin_text on stdin and wait for it. Only
 * before and after the server loop (which reaps every child otherwise).
 * Its output ends up in err on failure. */
static int run_cmd(const char *const *argv, const char *stdin_text, err_t *err)
{
	int in[2] = { -1, -1 }, out[2] = { -1, -1 }, st = 0, r;
	char msg[512];
	size_t n = 0;
	pid_t pid;

	if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0) {
		r = err_sys(err, "pipe");
		goto close_all;
	}
	pid = fork();
	if (pid < 0) {
		r = err_sys(err, "fork");
		goto close_all;
	}
	if (pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		dup2(out[1], 2);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	in[0] = out[1] = -1;
	if (stdin_text)
		(void)write_all(in[1], stdin_text, strlen(stdin_text));
	close(in[1]);
	in[1] = -1;
	for (;;) {
		ssize_t k = read(out[0], msg + n, sizeof(msg) - 1 - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		n += (size_t)k;
		if (n == sizeof(msg) - 1)
			n = 0; /* keep the tail */
	}
	msg[n] = '\0';
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	r = 0;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		while (n && (msg[n - 1] == '\n' || msg[n - 1] == ' '))
			msg[--n] = '\0';
		r = err_set(err, EIO, "%s %s: status %d: %s", argv[0], argv[1] ? argv[1] : "",
			    WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), msg);
	}
close_all:
	for (int i = 0; i < 2; i++) {
		if (in[i] >= 0)
			close(in[i]);
		if (out[i] >= 0)
			close(out[i]);
	}
	return r;
}

/* /proc/sys files take one write; write_file's tmp + rename cannot. */
static int write_proc(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), r;

	if (fd < 0)
		return -errno;
	r = write_all(fd, text, strlen(text));
	close(fd);
	return r;
}

static void slot_addrs(struct nm_server *s, int slot, char host[16], char sbx[16])
{
	struct in_addr a;

	a.s_addr = htonl(s->cfg->net_base + 2u * (uint32_t)slot);
	inet_ntop(AF_INET, &a, host, 16);
	a.s_addr = htonl(s->cfg->net_base + 2u * (uint32_t)slot + 1);
	inet_ntop(AF_INET, &a, sbx, 16);
}

static char *ifname(struct nm_server *s, int slot)
{
	return xasprintf("%s-%d", s->cfg->net_prefix, slot);
}

static bool net_on(struct nm_server *s)
{
	return s->cfg->net_prefix && s->cfg->net_prefix[0];
}

int nmnet_init(struct nm_server *s, err_t *err)
{
	const struct nodemgr_config *c = s->cfg;
	static const char *const nft[] = { "nft", "-f", "-", NULL };
	_cleanup_free_ char *rules = NULL;
	struct in_addr a = { htonl(c->net_base) };
	char base[16];

	if (!net_on(s))
		return 0;
	inet_ntop(AF_INET, &a, base, sizeof(base));
	/* "add" then "delete" empties whatever an earlier run left, in the
	 * same atomic transaction that installs the new table. */
	rules = xasprintf(
		"add table inet %1$s\n"
		"delete table inet %1$s\n"
		"table inet %1$s {\n"
		"  chain early {\n"
		"    type filter hook prerouting priority raw; policy accept;\n"
		"    iifname \"%2$s-*\" meta nfproto != ipv4 drop\n"
		"    iifname \"%2$s-*\" ip daddr 169.254.0.0/16 drop\n"
		"    iifname \"%2$s-*\" fib saddr . iif oif missing drop\n"
		"  }\n"
		"  chain prerouting {\n"
		"    type nat hook prerouting priority dstnat; policy accept;\n"
		"    iifname \"%2$s-*\" meta nfproto ipv4 meta l4proto tcp redirect to :%3$u\n"
		"    iifname \"%2$s-*\" meta nfproto ipv4 udp dport 53 redirect to :%4$u\n"
		"  }\n"
		"  chain input {\n"
		"    type filter hook input priority filter; policy accept;\n"
		"    iifname \"%2$s-*\" jump from_sandbox\n"
		"    meta l4proto tcp th dport %3$u drop\n"
		"    meta l4proto udp th dport %4$u drop\n"
		"  }\n"
		"  chain from_sandbox {\n"
		"    meta nfproto != ipv4 drop\n"
		"    ct status dnat tcp dport %3$u accept\n"
		"    ct status dnat udp dport %4$u accept\n"
		"    drop\n"
		"  }\n"
		"  chain forward {\n"
		"    type filter hook forward priority filter; policy accept;\n"
		"    iifname \"%2$s-*\" drop\n"
		"    oifname \"%2$s-*\" drop\n"
		"  }\n"
		"}\n",
		c->net_table, c->net_prefix, c->net_proxy_port, c->net_dns_port);
	if (run_cmd(nft, rules, err) < 0)
		return err_wrap(err, "install nftables table %s (is the nftables package "
				"installed? `network = false` runs without a sandbox network)",
				c->net_table);
	log_info("nodemgr: nftables table inet %s, sandboxes %s/%u on %s-*", c->net_table, base,
		 32 - __builtin_ctz(c->net_size), c->net_prefix);
	return 0;
}

void nmnet_fini(struct nm_server *s)
{
	const char *argv[] = { "nft", "delete", "table", "inet", s->cfg->net_table, NULL };
	err_t e = { 0 };

	if (net_on(s) && run_cmd(argv, NULL, &e) < 0)
		log_warn("nodemgr: %s", e.msg);
}

/* The host end of slot's veth pair (<prefix>-<slot>, base/31, no IPv6,
 * up) with its other end, peer, created in the namespace ns. */
static int host_end(struct nm_server *s, int slot, const char *peer, int ns, err_t *err)
{
	_cleanup_free_ char *ifn = ifname(s, slot), *v6 = NULL;
	_cleanup_close_ int host = -1;
	uint32_t base = s->cfg->net_base + 2u * (uint32_t)slot;
	err_t e = { 0 };
	int r;

	if ((host = nmnet_nl_open(-1, err)) < 0)
		return host;
	/* A leftover host end of this slot (a crashed run, or a dead QEMU's
	 * namespace not yet freed) would block the name: remove it first.
	 * Looked up first (SIOCGIFINDEX reads under RCU), because the delete
	 * takes the kernel's RTNL lock even for a name that is not there,
	 * the normal case, and parallel creates queue on that lock. */
	if (if_nametoindex(ifn))
		(void)nmnet_nl_link_del(host, ifn, &e);
	if ((r = nmnet_nl_veth_add(host, ifn, peer, ns, err)) < 0)
		return r;
	/* The host end has no IPv6 at all: no link-local address a sandbox
	 * could reach. Set before the link goes up. */
	v6 = xasprintf("/proc/sys/net/ipv6/conf/%s/disable_ipv6", ifn);
	if (write_proc(v6, "1\n") < 0)
		log_warn("slot %d: cannot disable IPv6 on %s", slot, ifn);
	if ((r = nmnet_nl_addr_add(host, ifn, base, 31, err)) < 0 ||
	    (r = nmnet_nl_link_up(host, ifn, err)) < 0)
		(void)nmnet_nl_link_del(host, ifn, &e);
	return r;
}

/* Whether slot has its two addresses in the sandbox range. */
static bool slot_fits(struct nm_server *s, int slot)
{
	return slot >= 0 && 2u * (uint32_t)slot + 1 < s->cfg->net_size;
}

static int slot_ok(struct nm_server *s, int slot, err_t *err)
{
	if (!slot_fits(s, slot))
		return err_set(err, ENOSPC, "the sandbox network has no address for slot %d", slot);
	return 0;
}

int nmnet_attach(struct nm_server *s, struct jail *j, pid_t pid, err_t *err)
{
	_cleanup_free_ char *nsp = NULL;
	_cleanup_close_ int ns = -1, jail = -1;
	uint32_t base;
	int r;

	if (!net_on(s))
		return 0;
	if ((r = slot_ok(s, j->slot, err)) < 0)
		return r;
	uint64_t t0 = now_us();
	base = s->cfg->net_base + 2u * (uint32_t)j->slot;
	nsp = xasprintf("/proc/%d/ns/net", (int)pid);
	ns = open(nsp, O_RDONLY | O_CLOEXEC);
	if (ns < 0)
		return err_sys(err, "open %s", nsp);
	if ((r = host_end(s, j->slot, "eth0", ns, err)) < 0)
		return err_wrap(err, "sandbox %s network", j->id);
	if ((jail = nmnet_nl_open(ns, err)) < 0) {
		r = jail;
		goto fail;
	}
	if ((r = nmnet_nl_addr_add(jail, "eth0", base + 1, 31, err)) < 0 ||
	    (r = nmnet_nl_link_up(jail, "eth0", err)) < 0 ||
	    (r = nmnet_nl_route_default(jail, "eth0", base, err)) < 0)
		goto fail;
	log_debug("sandbox %s: network slot %d in %.2f ms", j->id, j->slot,
		  (now_us() - t0) / 1000.0);
	return 0;
fail:
	err_wrap(err, "sandbox %s network", j->id);
	nmnet_detach(s, j);
	return r;
}

/* vm: the guest's NIC is QEMU's tap. QEMU runs in a network namespace of
 * its own (vm-qemu.c's child_main made it before exec, with the tap "tap0", IPv6
 * off, forwarding on and the nat table of nmnet_vm_nat_rules). Here, from
 * outside, the same veth pair as for an ns jail, its sandbox end ("veth0")
 * moved into that namespace with the sandbox's address base+1/31 and the
 * default route via the host end, and tap0 with the guest's gateway
 * address. QEMU, the only process there, opens no socket: the namespace
 * only routes and translates between the guest and the host end. */
int nmnet_attach_vm(struct nm_server *s, int slot, const char *id, pid_t pid, err_t *err)
{
	_cleanup_free_ char *nsp = NULL;
	_cleanup_close_ int ns = -1, jail = -1;
	uint32_t base;
	int r;

	if (!net_on(s))
		return 0;
	if ((r = slot_ok(s, slot, err)) < 0)
		return r;
	uint64_t t0 = now_us();
	nsp = xasprintf("/proc/%d/ns/net", (int)pid);
	ns = open(nsp, O_RDONLY | O_CLOEXEC);
	if (ns < 0)
		return err_sys(err, "open %s", nsp);
	if ((r = host_end(s, slot, "veth0", ns, err)) < 0)
		return err_wrap(err, "vm %s network", id);
	if ((jail = nmnet_nl_open(ns, err)) < 0) {
		r = jail;
		goto fail;
	}
	base = s->cfg->net_base + 2u * (uint32_t)slot;
	if ((r = nmnet_nl_addr_add(jail, "tap0", PROTO_VM_NET_GATEWAY, PROTO_VM_NET_PREFIX,
				     err)) < 0 ||
	    (r = nmnet_nl_link_up(jail, "tap0", err)) < 0 ||
	    (r = nmnet_nl_addr_add(jail, "veth0", base + 1, 31, err)) < 0 ||
	    (r = nmnet_nl_link_up(jail, "veth0", err)) < 0 ||
	    (r = nmnet_nl_route_default(jail, "veth0", base, err)) < 0)
		goto fail;
	log_debug("vm %s: network slot %d in %.2f ms", id, slot, (now_us() - t0) / 1000.0);
	return 0;
fail:
	err_wrap(err, "vm %s network", id);
	nmnet_detach_slot(s, slot, id);
	return r;
}

/* A locally administered MAC, fixed (nmnet_vm_tap). */
static const uint8_t VM_TAP_MAC[6] = { 0x02, 0x61, 0x69, 0x72, 0x6c, 0x01 };

static int set_mac(const char *name, const uint8_t mac[6])
{
	struct ifreq ifr;
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), r, e;

	if (s < 0)
		return -1;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
	ifr.ifr_hwaddr.sa_family = ARPHRD_ETHER;
	memcpy(ifr.ifr_hwaddr.sa_data, mac, 6);
	r = ioctl(s, SIOCSIFHWADDR, &ifr);
	e = errno;
	close(s);
	errno = e;
	return r;
}

/* The vm jail namespace's nat table for slot (caller frees; NULL when the
 * network is off). New connections from the guest leave veth0 as the
 * sandbox's address; new ones to that address (port forwards) go to the
 * guest; DNS to the guest's gateway goes to the host end, whose every
 * UDP/53 the host redirects to the gateway. Replies follow conntrack. The
 * guest's own address never leaves the namespace, so a guest that takes
 * another (its root may) still leaves as its sandbox. */
char *nmnet_vm_nat_rules(struct nm_server *s, int slot)
{
	char host[16], sbx[16], gw[16], guest[16];
	struct in_addr a;

	if (!net_on(s) || !slot_fits(s, slot))
		return NULL;
	slot_addrs(s, slot, host, sbx);
	a.s_addr = htonl(PROTO_VM_NET_GATEWAY);
	inet_ntop(AF_INET, &a, gw, sizeof(gw));
	a.s_addr = htonl(PROTO_VM_NET_ADDR);
	inet_ntop(AF_INET, &a, guest, sizeof(guest));
	return xasprintf("table ip airlock-vm {\n"
			 " chain pre {\n"
			 "  type nat hook prerouting priority dstnat; policy accept;\n"
			 "  iifname \"tap0\" ip daddr %s meta l4proto { tcp, udp } th dport 53"
			 " dnat to %s\n"
			 "  iifname \"veth0\" ip daddr %s dnat to %s\n"
			 " }\n"
			 " chain post {\n"
			 "  type nat hook postrouting priority srcnat; policy accept;\n"
			 "  iifname \"tap0\" oifname \"veth0\" snat to %s\n"
			 " }\n"
			 "}\n",
			 gw, host, sbx, guest, sbx);
}

/* In the QEMU child, in its new namespace, still root, before exec:
 * forwarding on and the rules loaded by `nft -f -`, a process of the
 * child's own (waited for here, so nodemgr's loop never sees it). Only
 * system calls: this runs between fork and exec of a threaded process.
 * 0, or -1 with errno. */
int nmnet_vm_nat(const char *rules)
{
	char *const argv[] = { "nft", "-f", "-", NULL };
	int p[2], st = 0, r;
	pid_t pid;

	if ((r = write_proc("/proc/sys/net/ipv4/ip_forward", "1\n")) < 0) {
		errno = -r;
		return -1;
	}
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid == 0) {
		if (dup2(p[0], 0) < 0)
			_exit(126);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(p[0]);
	r = write_all(p[1], rules, strlen(rules));
	close(p[1]);
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	if (r < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		errno = r < 0 ? -r : EPROTO;
		return -1;
	}
	return 0;
}

/* In the QEMU child after unshare(CLONE_NEWNET), still root, before exec:
 * IPv6 off for every link of this namespace (so the tap and veth0 get
 * none), then the tap, with the same MAC in every jail: a clone's guest
 * keeps its template's ARP entry for its gateway (tap0), and a fork child
 * its parent's. The fd is what QEMU gets (-netdev tap,fd=N): it needs no
 * CAP_NET_ADMIN and never opens /dev/net/tun. vnet_hdr: virtio-net's
 * offloads (checksum, TSO) pass through. Only syscalls: this runs between
 * fork and exec. */
int nmnet_vm_tap(void)
{
	static const char *const v6[] = { "/proc/sys/net/ipv6/conf/all/disable_ipv6",
					  "/proc/sys/net/ipv6/conf/default/disable_ipv6" };
	struct ifreq ifr;
	int fd;

	for (size_t i = 0; i < ARRAY_SIZE(v6); i++)
		if (write_proc(v6[i], "1\n") < 0 && errno != ENOENT)
			return -1;
	fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -1;
	memset(&ifr, 0, sizeof(ifr));
	ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "tap0");
	if (ioctl(fd, TUNSETIFF, &ifr) < 0 || set_mac("tap0", VM_TAP_MAC) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

void nmnet_detach_slot(struct nm_server *s, int slot, const char *id)
{
	_cleanup_free_ char *ifn = NULL;
	_cleanup_close_ int host = -1;
	err_t e = { 0 };

	if (!net_on(s) || !slot_fits(s, slot))
		return;
	/* Deleting one end of a veth deletes the pair; the jail's namespace
	 * going away would too, but only once the kernel frees it. */
	ifn = ifname(s, slot);
	if ((host = nmnet_nl_open(-1, &e)) >= 0 && nmnet_nl_link_del(host, ifn, &e) < 0 &&
	    e.code != ENODEV)
		log_warn("sandbox %s: %s", id, e.msg);
}

void nmnet_detach(struct nm_server *s, struct jail *j)
{
	nmnet_detach_slot(s, j->slot, j->id);
}

char *nmnet_resolv_conf(struct nm_server *s, int slot)
{
	char host[16], sbx[16];

	if (!net_on(s) || 2u * (uint32_t)slot + 1 >= s->cfg->net_size)
		return NULL;
	/* Any address would do (every UDP/53 goes to the gateway), but not a
	 * loopback one: that never leaves the sandbox. */
	slot_addrs(s, slot, host, sbx);
	return xasprintf("nameserver %s\n", host);
}

int nmnet_addr(struct nm_server *s, const char *id, char out[16], err_t *err)
{
	char host[16];
	struct jail *j;
	int slot = -1;

	if (!net_on(s))
		return err_set(err, EOPNOTSUPP, "the sandbox network is off on this node");
	pthread_mutex_lock(&s->lock);
	j = mgr_jail_find_locked(s, id);
	if (j && !j->hidden)
		slot = j->slot;
	pthread_mutex_unlock(&s->lock);
	if (slot < 0)
		return err_set(err, ENOENT, "no jail for sandbox %s", id);
	slot_addrs(s, slot, host, out);
	return 0;
}
