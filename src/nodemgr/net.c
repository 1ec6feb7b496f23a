/* net.c - the per-sandbox network (ns backend) and this instance's nftables
 * table. Privileged work: it runs in nodemgr (root) and drives the `ip` and
 * `nft` commands (iproute2, nftables) with arguments built only from a
 * validated sandbox id's slot and the operator's configuration; nothing
 * that came from a sandbox reaches a command line.
 *
 * Model. Slot N (the jail's uid range) owns the /31 at net_base + 2N: the
 * host end of a veth pair (<prefix>-<N>, IPv6 disabled) holds .2N, the
 * sandbox's eth0 holds .2N+1 with the host end as its default route. The
 * slot is unique while the jail lives and nodemgr's start-up sweep kills
 * every jail of an earlier run, so no live address is handed out twice and
 * nothing needs persisting.
 *
 * The table (inet <table>) matches packets by input interface name
 * (<prefix>-*), so it is installed once and each sandbox only adds its
 * (interface, address) pair to the `sources` set (no spoofed source is
 * accepted, the gateway identifies sandboxes by it):
 *   prerouting/raw     IPv6 and anything to 169.254.0.0/16 (link-local,
 *                      cloud metadata) -> drop, before any redirect
 *   prerouting/dstnat  TCP -> redirect to the gateway's proxy port,
 *                      UDP/53 -> redirect to the gateway's DNS port
 *   input              only those two redirected flows are accepted; IPv6,
 *                      ICMP, other UDP, any other host port are dropped;
 *                      the proxy/DNS ports are closed to every other
 *                      interface
 *   forward            everything from a sandbox is dropped (no ip_forward
 *                      is needed: the gateway dials upstream itself)
 * Redirected traffic to other sandboxes, the host's own addresses, private
 * and link-local ranges is then refused by the gateway's policy. */
#include "nodemgr-internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../lib/log.h"
#include "../lib/util.h"

#define CMD_TIMEOUT_MS 10000

/* Run argv (PATH lookup), with stdin_text on stdin, in the network
 * namespace of netns_fd (-1 = ours). While the server loop runs
 * (reaper = true) the exit status comes through nm_wait_child; before
 * and after it, through waitpid. stderr ends up in err on failure. */
static int run_cmd(struct nm_server *s, const char *const *argv, const char *stdin_text,
		   int netns_fd, bool reaper, err_t *err)
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
		if (netns_fd >= 0 && setns(netns_fd, CLONE_NEWNET) < 0)
			_exit(126);
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
	if (reaper) {
		if ((r = nm_wait_child(s, pid, &st, CMD_TIMEOUT_MS)) < 0) {
			r = err_set(err, ETIMEDOUT, "%s timed out", argv[0]);
			goto close_all;
		}
	} else {
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
	}
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

int net_init(struct nm_server *s, err_t *err)
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
		"  set sources { type ifname . ipv4_addr; }\n"
		"  chain early {\n"
		"    type filter hook prerouting priority raw; policy accept;\n"
		"    iifname \"%2$s-*\" meta nfproto != ipv4 drop\n"
		"    iifname \"%2$s-*\" ip daddr 169.254.0.0/16 drop\n"
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
		"    iifname . ip saddr != @sources drop\n"
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
	if (run_cmd(s, nft, rules, -1, false, err) < 0)
		return err_wrap(err, "install nftables table %s (is the nftables package "
				"installed? `network = false` runs without a sandbox network)",
				c->net_table);
	log_info("nodemgr: nftables table inet %s, sandboxes %s/%u on %s-*", c->net_table, base,
		 32 - __builtin_ctz(c->net_size), c->net_prefix);
	return 0;
}

void net_fini(struct nm_server *s)
{
	const char *argv[] = { "nft", "delete", "table", "inet", s->cfg->net_table, NULL };
	err_t e = { 0 };

	if (net_on(s) && run_cmd(s, argv, NULL, -1, false, &e) < 0)
		log_warn("nodemgr: %s", e.msg);
}

int net_attach(struct nm_server *s, struct jail *j, pid_t pid, err_t *err)
{
	static const char *const ip_batch[] = { "ip", "-batch", "-", NULL };
	static const char *const nft[] = { "nft", "-f", "-", NULL };
	_cleanup_free_ char *ifn = NULL, *host_cmds = NULL, *jail_cmds = NULL, *elem = NULL;
	_cleanup_free_ char *nsp = NULL, *v6 = NULL;
	_cleanup_close_ int ns = -1;
	char host[16], sbx[16];
	int r;

	if (!net_on(s))
		return 0;
	if (2u * (uint32_t)j->slot + 1 >= s->cfg->net_size)
		return err_set(err, ENOSPC, "the sandbox network has no address for slot %d",
			       j->slot);
	ifn = ifname(s, j->slot);
	slot_addrs(s, j->slot, host, sbx);
	nsp = xasprintf("/proc/%d/ns/net", (int)pid);
	ns = open(nsp, O_RDONLY | O_CLOEXEC);
	if (ns < 0)
		return err_sys(err, "open %s", nsp);
	/* A leftover host end of this slot (a crashed run) would block the
	 * name: remove it first; ENODEV is the normal case. */
	{
		const char *del[] = { "ip", "link", "del", ifn, NULL };
		err_t e = { 0 };
		(void)run_cmd(s, del, NULL, -1, true, &e);
	}
	host_cmds = xasprintf("link add %1$s type veth peer name eth0 netns %2$d\n"
			      "addr add %3$s/31 dev %1$s\n",
			      ifn, (int)pid, host);
	if ((r = run_cmd(s, ip_batch, host_cmds, -1, true, err)) < 0)
		goto fail;
	/* The host end has no IPv6 at all: no link-local address a sandbox
	 * could reach. Set before the link goes up. */
	v6 = xasprintf("/proc/sys/net/ipv6/conf/%s/disable_ipv6", ifn);
	if (write_proc(v6, "1\n") < 0)
		log_warn("sandbox %s: cannot disable IPv6 on %s", j->id, ifn);
	{
		const char *up[] = { "ip", "link", "set", ifn, "up", NULL };
		if ((r = run_cmd(s, up, NULL, -1, true, err)) < 0)
			goto fail;
	}
	jail_cmds = xasprintf("addr add %1$s/31 dev eth0\n"
			      "link set eth0 up\n"
			      "route add default via %2$s dev eth0\n",
			      sbx, host);
	if ((r = run_cmd(s, ip_batch, jail_cmds, ns, true, err)) < 0)
		goto fail;
	elem = xasprintf("add element inet %s sources { \"%s\" . %s }\n", s->cfg->net_table, ifn,
			 sbx);
	if ((r = run_cmd(s, nft, elem, -1, true, err)) < 0)
		goto fail;
	return 0;
fail:
	err_wrap(err, "sandbox %s network", j->id);
	net_detach(s, j, true);
	return r;
}

void net_detach(struct nm_server *s, struct jail *j, bool reaper)
{
	static const char *const nft[] = { "nft", "-f", "-", NULL };
	_cleanup_free_ char *ifn = NULL, *elem = NULL;
	char host[16], sbx[16];
	err_t e = { 0 };

	if (!net_on(s) || j->slot < 0 || 2u * (uint32_t)j->slot + 1 >= s->cfg->net_size)
		return;
	ifn = ifname(s, j->slot);
	slot_addrs(s, j->slot, host, sbx);
	{
		/* Deleting one end of a veth deletes the pair; the jail's
		 * namespace going away would too, but only once it is freed. */
		const char *del[] = { "ip", "link", "del", ifn, NULL };
		(void)run_cmd(s, del, NULL, -1, reaper, &e);
	}
	elem = xasprintf("delete element inet %s sources { \"%s\" . %s }\n", s->cfg->net_table,
			 ifn, sbx);
	(void)run_cmd(s, nft, elem, -1, reaper, &e);
}

int net_addr(struct nm_server *s, const char *id, char out[16], err_t *err)
{
	char host[16];
	struct jail *j;
	int slot = -1;

	if (!net_on(s))
		return err_set(err, EOPNOTSUPP, "the sandbox network is off on this node");
	pthread_mutex_lock(&s->lock);
	for (j = s->jails; j; j = j->next)
		if (!j->hidden && !j->vm && j->alive && strcmp(j->id, id) == 0)
			slot = j->slot;
	pthread_mutex_unlock(&s->lock);
	if (slot < 0)
		return err_set(err, ENOENT, "no live ns jail for sandbox %s", id);
	slot_addrs(s, slot, host, out);
	return 0;
}
