/* config.h - what airlockd tells nodemgr (nodemgr.h, nodemgr_run): every
 * room reads it through s->cfg, so it lives at the bottom. */
#ifndef AIRLOCK_NODEMGR_CONFIG_H
#define AIRLOCK_NODEMGR_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../../lib/err.h"

struct nodemgr_config {
	const char *data_dir;     /* DATA; the pool is DATA/pool, state DATA/run/nodemgr */
	const char *sock_path;    /* SOCK_SEQPACKET socket, root:client_gid 0660 */
	const char *guest_path;   /* host path of the static airlock-guest binary */
	const char *scripts_dir;  /* holds template-build.sh */
	uid_t client_uid;         /* the node's uid; root is always allowed too */
	gid_t client_gid;
	uint64_t pool_size_mb;    /* size of DATA/pool.img when it must be created */
	/* Name of the cgroup parent directory (NULL = "airlock"). The startup
	 * sweep kills everything below it, so tests use their own. */
	const char *cgroup_parent;
	/* pids.max of the cgroup parent, all sandboxes together (0 = three
	 * quarters of kernel.pid_max; see cgroup_set_parent_pids). */
	uint32_t max_pids_all_sandboxes;
	/* Remount the cgroup2 hierarchy with favordynmods (see cgroup.h). */
	bool cgroup_favordynmods;
	/* Tests only: argv for the guest (NULL = {"airlock-guest", NULL}).
	 * Borrowed; must outlive nodemgr_run. */
	const char *const *guest_argv;
	/* The vm backend: the directory holding vmlinuz and initramfs.cpio.gz
	 * (NULL or missing files: vm creates fail, GET /v1/node says why),
	 * "auto" | "kvm" | "tcg" (NULL = auto), and how many QEMU processes
	 * wait per template for a clone's state (0 = none). */
	const char *vm_dir;
	const char *vm_accel;
	uint32_t vm_warm_pool;
	uint32_t vm_fork_pool;   /* fork standbys per template and shape (vm-pool.c) */
	/* The bound of each vm's console log in bytes (vm-console.c; 0 =
	 * NM_CONSOLE_LOG_MAX_DEFAULT, at least 4096). */
	uint64_t vm_console_log_max;
	/* How many ns jails wait per template, spawned and warmed, for a
	 * create to take (0 = none; see nswarm.c). */
	uint32_t ns_warm_pool;
	/* The warm pools grow with their recent demand (warmsize.h): up to
	 * ns_warm_pool_max jails (ns) and vm_warm_pool_max QEMUs (vm) per
	 * template, never under ns_warm_pool / vm_warm_pool (a max under its
	 * min is the min: a fixed size; a min of 0 is that pool off). The demand halves every
	 * warm_pool_half_life_ms once creates stop, and the pools shrink
	 * with it. */
	uint32_t ns_warm_pool_max;
	uint32_t vm_warm_pool_max;
	uint32_t warm_pool_half_life_ms;
	/* The sandbox network (net.c). net_prefix NULL or "": off (ns jails
	 * get only lo). Interfaces are <net_prefix>-<slot> (<= 15 bytes),
	 * addresses /31s from net_base (host order) within net_size
	 * addresses, the nftables table `inet <net_table>` redirects to the
	 * gateway's ports. */
	const char *net_prefix;
	const char *net_table;
	uint32_t net_base, net_size;
	uint16_t net_proxy_port, net_dns_port;
	/* For NM_DOCTOR's `ports_domain` check only (src/doctor): the config's
	 * ports_domain (NULL: not checked) and where clients reach the API. */
	const char *ports_domain;
	const char *api_url;
};

#define NM_CONSOLE_LOG_MAX_DEFAULT (1u << 20)

#endif
