/* ns.h - ns jails as the rooms above see them: one started on a claimed
 * registry entry (jail-ns.c) and the ns warm pool (nswarm.c). jail.h is the
 * jailer's own steps. */
#ifndef AIRLOCK_NODEMGR_NS_H
#define AIRLOCK_NODEMGR_NS_H

#include "../core/nodemgr-internal.h"

/* An ns jail's cgroup limits: lim's, the node defaults for those at 0. */
struct cgroup_limits jail_ns_cgroup_limits(const struct nm_limits *lim);
/* Start the ns jail of claimed entry j on rootfs (NULL: the sandbox's own,
 * sandboxes/<id>/rootfs) with spec's id, hostname and limits; see jail-ns.c. */
int jail_ns_spawn(struct nm_server *s, struct jail *j, const struct nm_sandbox_spec *spec,
		  const char *rootfs, int *chan_dup, pid_t *pid, err_t *err);

/* nswarm.c: the ns warm pool (see the comment at its top).
 * take: hand a waiting jail of spec's template over to spec (id, limits,
 * hostname) as a cold create would; -EAGAIN when none waits (or the pool is
 * off), -EEXIST when the id is taken; on any other failure the jail is gone
 * and the caller may create cold. refill: top the template's pool up in the
 * background (a jail it parks has run its guest's first exec, jail-ns.c
 * warm_guest). remove_subvol: delete pool/warm/<wid>
 * (retrying while a dead jail's mount namespace still pins it). */
int jail_nswarm_take(struct nm_server *s, const struct nm_sandbox_spec *spec, int *chan_dup,
		     pid_t *pid, err_t *err);
void jail_nswarm_refill(struct nm_server *s, const struct nm_sandbox_spec *spec);
/* The size the pool of template name/version aims at now, or -1 when
 * nswarm knows no such pool. Under s->lock. */
int jail_nswarm_target_locked(struct nm_server *s, const char *name, uint32_t version);
void jail_nswarm_remove_subvol(struct nm_server *s, const char *wid);
/* Kill the parked jail j (claimed by the caller) and remove all of it. */
void jail_nswarm_discard(struct nm_server *s, struct jail *j);

#endif
