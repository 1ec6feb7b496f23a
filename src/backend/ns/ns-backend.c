/* The "ns" backend: a Linux-namespace jail. All privileged work (subvolume
 * snapshot, uid mapping, namespaces, cgroups, seccomp) happens in the node
 * manager's ns jail code (src/nodemgr/jail-*.c); this table only forwards.
 * Pause is the cgroup freezer (nodemgr's sandbox freeze verb); disk snapshots
 * and rollback are nodemgr's snapshot and rollback verbs. */
#include "../backend.h"

static int ns_create(const struct backend_ctx *ctx, const struct nm_sandbox_spec *spec,
		     int *chan_fd, pid_t *pid, char addr[16], err_t *err)
{
	return nm_sandbox_create(ctx->nm_sock, spec, chan_fd, pid, addr, err);
}

static int ns_adopt(const struct backend_ctx *ctx, const char *id, int *chan_fd, pid_t *pid,
		    char addr[16], err_t *err)
{
	return nm_sandbox_adopt(ctx->nm_sock, id, chan_fd, pid, addr, err);
}

static int ns_destroy(const struct backend_ctx *ctx, const char *id, err_t *err)
{
	return nm_sandbox_destroy(ctx->nm_sock, id, err);
}

static int ns_pause(const struct backend_ctx *ctx, const char *id, err_t *err)
{
	return nm_sandbox_freeze(ctx->nm_sock, id, true, err);
}

static int ns_resume(const struct backend_ctx *ctx, const char *id, err_t *err)
{
	return nm_sandbox_freeze(ctx->nm_sock, id, false, err);
}

static int ns_snapshot(const struct backend_ctx *ctx, const char *id, const char *snap,
		       const char *prev, int64_t *size, err_t *err)
{
	return nm_snapshot_create(ctx->nm_sock, id, snap, prev, size, err);
}

static int ns_snapshot_delete(const struct backend_ctx *ctx, const char *id, const char *snap,
			      err_t *err)
{
	return nm_snapshot_delete(ctx->nm_sock, id, snap, err);
}

static int ns_rollback(const struct backend_ctx *ctx, const struct nm_sandbox_spec *spec,
		       const char *snap, int *chan_fd, pid_t *pid, err_t *err)
{
	return nm_sandbox_rollback(ctx->nm_sock, spec, snap, chan_fd, pid, err);
}

static int ns_fork(const struct backend_ctx *ctx, const struct nm_sandbox_spec *spec,
		   const char *parent, const char *snap, int *chan_fd, pid_t *pid, char addr[16],
		   err_t *err)
{
	return nm_sandbox_fork(ctx->nm_sock, spec, parent, snap, false, chan_fd, pid, addr, err);
}

const struct backend_ops backend_ns = {
	.name = "ns",
	.caps = BACKEND_CAP_PAUSE | BACKEND_CAP_DISK_SNAPSHOT | BACKEND_CAP_SUSPEND_DISK |
		BACKEND_CAP_GUEST_LIMITS,
	.create = ns_create,
	.adopt = ns_adopt,
	.destroy = ns_destroy,
	.pause = ns_pause,
	.resume = ns_resume,
	.snapshot = ns_snapshot,
	.snapshot_delete = ns_snapshot_delete,
	.rollback = ns_rollback,
	.fork = ns_fork,
};
