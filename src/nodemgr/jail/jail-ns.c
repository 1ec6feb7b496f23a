/* jail-ns.c - an ns sandbox's jail started on a claimed registry entry:
 * its cgroup, the jail (jail.c), its network and its publication. Create,
 * rollback (mgr-sandbox.c) and the ns warm pool (nswarm.c) all start one
 * this way. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../lib/fault.h"
#include "../../lib/log.h"
#include "../../lib/util.h"
#include "../core/nodemgr-internal.h"
#include "../net/net.h"
#include "jail.h"
#include "ns.h"

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
		jail_nswarm_warm_guest(chan[0], init, spec->id);
	if ((r = mgr_jail_publish(s, j, init, chan[0], chan_dup, err)) < 0)
		return r;
	*pid = init;
	log_info("sandbox %s: jail pid %d, uid base %#x", spec->id, (int)init, jp.host_base);
	log_debug("sandbox %s: spawn: cgroup %.2f ms, jail %.2f ms, net %.2f ms, publish %.2f ms",
		  spec->id, (t_cg - t0) / 1000.0, (t_spawn - t_cg) / 1000.0,
		  (t_net - t_spawn) / 1000.0, (now_us() - t_net) / 1000.0);
	return 0;
}
