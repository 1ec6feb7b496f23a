/* jail.h - spawn one ns-backend jail (private to src/nodemgr).
 *
 * Who does what, in order:
 *
 *   nodemgr thread (parent, host root)      middle child A            init B (PID 1 inside)
 *   ----------------------------------      ---------------           ---------------------
 *   fork A ──────────────────────────────►  unshare(USER), "U" ──┐
 *   write uid_map/gid_map, join cgroup   ◄──────────────────────┘
 *   idmapped mount of rootfs at mnt/<id>
 *   send "G" ────────────────────────────►  setres[ug]id(0) in userns
 *                                           unshare(NS PID NET UTS IPC CGROUP)
 *                                           sethostname, fork B ────► jail-mount: private /, bind the
 *   detach mnt/<id> from the host      ◄──  "P" + pid of B, exit        idmapped root onto itself, /dev
 *   reap A (reaper thread)                                              /proc, pivot_root
 *                                                                     jail-caps: lo up, bounding set,
 *                                                                       no_new_privs, fds
 *                                                                     jail-seccomp: filter
 *   sync socket EOF = B exec'd the guest ◄──────────────────────────  execveat(guest fd)
 *
 * Any step that fails sends "E" + message on the sync socket and exits; the
 * parent then reports it and the caller tears everything down.
 *
 * The idmapped mount is created detached (open_tree(OPEN_TREE_CLONE)) and is
 * attached in the host namespace only between "G" and "P" (at
 * DATA/run/nodemgr/mnt/<id>, a private mount), because a mount namespace
 * owned by the jail's user namespace may not attach a tree we created. Once A
 * has copied the namespace the host copy is detached: nothing of the jail
 * stays visible on the host.
 *
 * A finds its copy through its working directory: it enters mnt_dir while
 * still host root (before any namespace), and unshare(CLONE_NEWNS) moves the
 * cwd to the copy. A path lookup from the host root would need host
 * privileges A no longer has once it is in the user namespace.
 */
#ifndef AIRLOCK_NM_JAIL_H
#define AIRLOCK_NM_JAIL_H

#include <linux/filter.h>
#include <stdint.h>
#include <sys/types.h>

#include "../../lib/err.h"
#include "../cgroup/cgroup.h"

#define JAIL_ID_RANGE 65536u

struct jail_params {
	const char *id;               /* validated */
	const char *hostname;         /* validated */
	const char *rootfs;           /* DATA/pool/sandboxes/<id>/rootfs */
	const char *mnt_dir;          /* DATA/run/nodemgr/mnt (private mount, 0711) */
	const char *mnt;              /* mnt_dir/<id>: idmapped view, attached briefly */
	uid_t host_base;              /* first host uid/gid of the range */
	int guest_fd;                 /* O_PATH fd of the guest binary (borrowed) */
	const char *const *argv;      /* guest argv (borrowed) */
	int chan_fd;                  /* guest end of the channel, becomes fd 3 (borrowed) */
	const struct sock_fprog *seccomp;
	const struct cgroups *cg;
	/* Written to the jail's /etc/resolv.conf by init, inside its own root
	 * (so links resolve there), before the guest starts; NULL = untouched. */
	const char *resolv_conf;
};

/* Spawn the jail; returns once the guest is exec'd (or failed). *init_pid is
 * B's host pid (a child of this process once A exits: nodemgr is a
 * subreaper). The caller reaps A and B (the reaper thread). On failure B may
 * exist; the caller kills the cgroup. */
int jail_spawn(const struct jail_params *p, pid_t *init_pid, err_t *err);

/* jail-userns.c (parent side) */
int jail_write_idmaps(pid_t pid, uid_t base, err_t *err);
/* Idmapped clone of rootfs, mapped through pid's user namespace, attached
 * at target (created). jail_idmapped_detach undoes it (idempotent). */
int jail_idmapped_attach(const char *rootfs, pid_t pid, const char *target, err_t *err);
void jail_idmapped_detach(const char *target);

/* Child-side steps. They run after fork, report failures by returning -errno
 * with a short message in msg (no allocation needed by the caller). */
/* root_fd: O_PATH fd of this namespace's copy of the idmapped mount. */
int jail_mount_root(int root_fd, char *msg, size_t cap);
int jail_net_lo_up(char *msg, size_t cap);
int jail_drop_caps(char *msg, size_t cap);

/* jail-seccomp.c: build the filter once at startup (parent); the caller
 * owns prog->filter (free). Apply in the child after no_new_privs. */
int jail_seccomp_build(struct sock_fprog *prog, err_t *err);
int jail_seccomp_apply(const struct sock_fprog *prog);

#endif
