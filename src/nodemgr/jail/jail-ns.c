/* jail-ns.c - an ns sandbox's jail started on a claimed registry entry:
 * its cgroup, the jail (jail.c), its network and its publication; for the
 * ns warm pool, the guest's first exec run before it is published. Create,
 * rollback (mgr-sandbox.c) and the warm pool (nswarm.c) all start one this
 * way. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../guestproto/proto.h"
#include "../../lib/fault.h"
#include "../../lib/log.h"
#include "../../lib/util.h"
#include "../core/nodemgr-internal.h"
#include "../net/net.h"
#include "jail.h"
#include "ns.h"

/* The warm-up (warm_guest): how long it may take in all, how often
 * to look for the reap of its exec when the channel is quiet, and how long
 * to wait for the EXIT once the reap was seen first. */
#define WARM_EXEC_MAX_MS 5000
#define WARM_REAP_POLL_MS 10
#define WARM_TAIL_MS 10
#define WARM_DISCARD_MAX (64 * 1024)   /* bytes dropped per read round */

/* The page faults (minor + major, proc(5) fields 11 and 13) of the
 * children pid has waited for: they grow when the agent reaps the warm-up
 * exec. Any program that runs at all faults in a page of its code or
 * data, so the reap of `true` always shows here. */
static uint64_t children_faults(pid_t pid)
{
	return mgr_proc_stat_field(pid, 11) + mgr_proc_stat_field(pid, 13);
}

/* Read and drop what chan holds now, at most WARM_DISCARD_MAX bytes a
 * call, so a guest that never stops sending cannot keep the caller from
 * its deadline. How many bytes, 0 at EOF, -errno on an error (-EAGAIN:
 * nothing there). */
static ssize_t discard(int chan)
{
	char junk[4096];
	ssize_t n = -1, total = 0;

	while (total < WARM_DISCARD_MAX &&
	       (n = recv(chan, junk, sizeof(junk), MSG_DONTWAIT)) > 0)
		total += n;
	if (total >= WARM_DISCARD_MAX)
		return total;
	if (n == 0)
		return 0;
	if (errno != EAGAIN && errno != EINTR)
		return -errno;
	return total ? total : -EAGAIN;
}

/* Run the fresh guest on chan through one exec of `true`; init is the
 * jail's init (the agent), a child of ours.
 *
 * Nothing that comes back is parsed: nodemgr runs as root, and what the
 * channel carries comes from inside the jail, where besides our agent the
 * template's own `true` runs (a template is the user's files), which may
 * be anything. Every byte is read into a scratch buffer and dropped.
 * When the exec is over comes from the kernel instead: the agent reaps
 * `true` before it writes its EXIT, and the reap adds the child's page
 * faults to the agent's (children_faults). So bytes that arrive once the
 * agent has reaped hold the EXIT (a wait of WARM_TAIL_MS for them when the
 * reap is seen first), and bytes before that are its unprompted HELLO and
 * READY and the EXEC_OK. A guest that never gets there is published after
 * WARM_EXEC_MAX_MS, as one that does not answer at all.
 *
 * What a hostile sandbox can do here: send anything or nothing, any
 * amount. That only moves when the warm-up ends (never later than
 * WARM_EXEC_MAX_MS, in the refill thread, off any create) and costs one
 * 4 KiB buffer. What it left in the channel, or what the agent writes
 * after we stopped reading (an EXIT that crossed our last read), reaches
 * the node, whose reader decodes every byte of the channel as untrusted
 * input and skips an EXIT of a pid it never started. */
static void warm_guest(int chan, pid_t init, const char *wid)
{
	char *argv[] = { "true", NULL };
	char *envp[] = { "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			 NULL };
	struct proto_exec x = { .argv = argv, .argc = 1, .env = envp, .envc = 1 };
	uint64_t t0 = now_ms(), faults0 = children_faults(init);
	size_t got = 0;
	struct buf b;
	bool reaped = false, done = false;

	buf_init(&b);
	if (proto_enc_exec(&b, 1, &x) < 0 ||
	    send(chan, b.data, b.len, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)b.len) {
		buf_free(&b);
		log_warn("warm %s: cannot send the warm-up exec", wid);
		return;
	}
	buf_free(&b);
	while (!done) {
		int left = (int)(t0 + WARM_EXEC_MAX_MS - now_ms());
		int wait = reaped ? WARM_TAIL_MS : WARM_REAP_POLL_MS;
		struct pollfd pfd = { .fd = chan, .events = POLLIN };
		ssize_t n;
		int r;

		if (left <= 0)
			break;
		r = poll(&pfd, 1, left < wait ? left : wait);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			break;
		if (r == 0) {
			/* Quiet. Reaped already: the EXIT was in an earlier
			 * read. Else look whether the agent reaped now. */
			done = reaped;
			reaped = children_faults(init) != faults0;
			continue;
		}
		/* Reaped before this read: what it reads holds the EXIT. */
		done = reaped || children_faults(init) != faults0;
		n = discard(chan);
		if (n == 0 || (n < 0 && n != -EAGAIN))
			break;
		if (n > 0)
			got += (size_t)n;
	}
	log_debug("warm %s: first exec %s in %llu ms (%zu bytes back, unread)", wid,
		  done ? "done" : "NOT done", (unsigned long long)(now_ms() - t0), got);
}

struct cgroup_limits jail_ns_cgroup_limits(const struct nm_limits *lim)
{
	return (struct cgroup_limits){
		.memory_bytes = (uint64_t)(lim->memory_mb ? lim->memory_mb : NM_DEFAULT_MEMORY_MB)
				<< 20,
		.cpu_millis = lim->cpu_millis ? lim->cpu_millis : NM_DEFAULT_CPU_MILLIS,
		.pids = lim->pids ? lim->pids : NM_DEFAULT_PIDS,
	};
}

/* Start the ns jail of a claimed (busy) entry j whose subvolume exists:
 * cgroup with the spec's limits, channel, jail_spawn, publish. On failure
 * the caller destroys the cgroup (which kills whatever was started). Used
 * by create and by rollback (same id, same slot), and by the warm pool
 * (rootfs under pool/warm; a hidden j is warmed before it is published). */
int jail_ns_spawn(struct nm_server *s, struct jail *j, const struct nm_sandbox_spec *spec,
		  const char *rootfs_path, int *chan_dup, pid_t *pid, err_t *err)
{
	struct cgroup_limits cl = jail_ns_cgroup_limits(&spec->limits);
	const char *hostname = spec->hostname[0] ? spec->hostname : spec->id;
	_cleanup_free_ char *rootfs = rootfs_path ? xstrdup(rootfs_path)
				    : xasprintf("%s/sandboxes/%s/rootfs", s->pool, spec->id);
	_cleanup_free_ char *mnt_dir = xasprintf("%s/mnt", s->run_dir);
	_cleanup_free_ char *mnt = xasprintf("%s/%s", mnt_dir, spec->id);
	_cleanup_close_ int guest = -1;
	_cleanup_free_ char *resolv = nmnet_resolv_conf(s, j->slot);
	int chan[2] = { -1, -1 };
	pid_t init = -1;
	uint64_t t0 = now_us(), t_cg, t_spawn, t_net;
	int r;

	if ((r = cgroup_create(&s->cg, spec->id, &cl, err)) < 0)
		return r;
	t_cg = now_us();
	FAULT_POINT("nm.spawn.after_cgroup");
	guest = open(s->cfg->guest_path, O_PATH | O_CLOEXEC);
	if (guest < 0)
		return err_sys(err, "open guest %s", s->cfg->guest_path);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, chan) < 0)
		return err_sys(err, "socketpair");
	struct jail_params jp = {
		.id = spec->id,
		.hostname = hostname,
		.rootfs = rootfs,
		.mnt_dir = mnt_dir,
		.mnt = mnt,
		.host_base = NM_UID_BASE + (uid_t)j->slot * JAIL_ID_RANGE,
		.guest_fd = guest,
		.argv = s->guest_argv,
		.chan_fd = chan[1],
		.seccomp = &s->seccomp,
		.cg = &s->cg,
		.resolv_conf = resolv,
	};
	r = jail_spawn(&jp, &init, err);
	t_spawn = now_us();
	close(chan[1]);
	if (r < 0) {
		close(chan[0]);
		return r;
	}
	/* The network is in place before the node hears of the sandbox, so
	 * nothing the client runs in it can see it without eth0. On failure
	 * the caller's cgroup removal kills the jail. */
	if ((r = nmnet_attach(s, j, init, err)) < 0) {
		close(chan[0]);
		return r;
	}
	t_net = now_us();
	FAULT_POINT("nm.spawn.after_jail");
	if (j->hidden)
		warm_guest(chan[0], init, spec->id);
	if ((r = mgr_jail_publish(s, j, init, chan[0], chan_dup, err)) < 0)
		return r;
	*pid = init;
	log_info("sandbox %s: %s: jail pid %d, uid base %#x", spec->id,
		 j->hidden ? "parked for the warm pool" : "cold", (int)init, jp.host_base);
	log_debug("sandbox %s: spawn: cgroup %.2f ms, jail %.2f ms, net %.2f ms, publish %.2f ms",
		  spec->id, (t_cg - t0) / 1000.0, (t_spawn - t_cg) / 1000.0,
		  (t_net - t_spawn) / 1000.0, (now_us() - t_net) / 1000.0);
	return 0;
}
