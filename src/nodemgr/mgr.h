/* mgr.h - the top of nodemgr: the verbs (verbs.c) and the sandbox
 * lifecycle across the ns and vm rooms (mgr-sandbox.c). */
#ifndef AIRLOCK_NODEMGR_MGR_H
#define AIRLOCK_NODEMGR_MGR_H

#include "core/nodemgr-internal.h"

/* verbs.c: handle one connection (one request, replies, close). Consumes fd. */
void mgr_serve_conn(struct nm_server *s, int fd, uid_t peer_uid);

/* mgr-sandbox.c */
int mgr_sandbox_create(struct nm_server *s, const struct nm_sandbox_spec *spec, int *chan_dup,
		       pid_t *pid, err_t *err);
int mgr_sandbox_adopt(struct nm_server *s, const char *id, int *chan_dup, pid_t *pid, err_t *err);
int mgr_sandbox_destroy(struct nm_server *s, const char *id, err_t *err);
/* Pause (freeze) or resume a live jail; dispatches on its kind (ns: cgroup
 * freezer, vm: vm_freeze). Marks the jail busy meanwhile. */
int mgr_sandbox_freeze(struct nm_server *s, const char *id, bool freeze, err_t *err);
/* Roll a live ns jail back to snapshots/<id>/<snap> (see nm.h). */
int mgr_sandbox_rollback(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *snap,
			 int *chan_dup, pid_t *pid, err_t *err);
/* A child sandbox from snapshots/<parent>/<snap> (see nm.h). */
int mgr_sandbox_fork(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *parent,
		     const char *snap, bool vm, int *chan_dup, pid_t *pid, err_t *err);
/* ids: NULL-terminated, caller frees each and the array */
char **mgr_sandbox_list(struct nm_server *s);
/* Reaper hook: pid exited with wait status `status`; true when it was a
 * jail init. Called under lock. */
bool mgr_sandbox_reaped_locked(struct nm_server *s, pid_t pid, int status);
/* Startup: kill leftovers of a previous run (state files, cgroups). */
void mgr_sandbox_sweep_leftovers(struct nm_server *s);
/* Shutdown: kill every jail, keep subvolumes. */
void mgr_sandbox_kill_all(struct nm_server *s);

/* mgr-limits.c: NM_SANDBOX_LIMITS, one ITEM text per sandbox as nm.c reads
 * it (id "": every sandbox with something to tell; else that one, -ENOENT
 * when there is no jail for it). NULL-terminated, caller frees. */
int mgr_sandbox_limits(struct nm_server *s, const char *id, char ***items, err_t *err);

#endif
