/* backend.h - the ops table every sandbox backend implements.
 *
 * The node's sandbox manager talks to backends only through this table; it
 * never includes a backend's own headers. Each backend declares what it can
 * do, and the API answers 501 for an operation a backend lacks.
 */
#ifndef AIRLOCK_BACKEND_H
#define AIRLOCK_BACKEND_H

#include <stdbool.h>
#include <sys/types.h>

#include "../lib/err.h"
#include "../nmclient/nm.h"

/* What a backend can do: bits of backend_ops.caps. */
enum backend_cap {
	BACKEND_CAP_PAUSE = 1u << 0,          /* freeze/thaw with memory kept */
	BACKEND_CAP_DISK_SNAPSHOT = 1u << 1,
	BACKEND_CAP_FULL_SNAPSHOT = 1u << 2,  /* memory + device state */
	BACKEND_CAP_MEMORY_FORK = 1u << 3,
	/* What a suspend to the object store keeps: the disk (files only) or
	 * the memory too (processes carry on); neither: it cannot suspend. */
	BACKEND_CAP_SUSPEND_DISK = 1u << 4,
	BACKEND_CAP_SUSPEND_MEMORY = 1u << 5,
	/* Its guests take turns to start (config vm_start_concurrency): their
	 * first code runs slowly on the node's CPUs until it is warm. */
	BACKEND_CAP_START_TURNS = 1u << 6,
	/* Its limits (memory_mb, pids) bind the guest's own processes (ns:
	 * the jail's cgroup holds them), so an OOM kill or a fork refused is
	 * one of them; without it (vm) they bind the QEMU, and the guest
	 * kernel keeps its own. */
	BACKEND_CAP_GUEST_LIMITS = 1u << 7,
};

struct guestconn;

struct backend_ctx {
	const char *nm_sock;  /* node manager socket path (borrowed) */
	bool vm_cold_boot;    /* vm: always boot cold, never clone (config vm_snapshots=false) */
};

struct backend_ops {
	const char *name;
	unsigned caps;        /* enum backend_cap bits */
	/* Bring a sandbox up; on success *chan_fd (caller owns) is the guest
	 * channel and addr (may be NULL) the sandbox's address on the node's
	 * network, "" when it has none (nm.h, nm_sandbox_create). */
	int (*create)(const struct backend_ctx *ctx, const struct nm_sandbox_spec *spec,
		      int *chan_fd, pid_t *pid, char addr[16], err_t *err);
	/* Reattach to a sandbox that is still running (after a node restart);
	 * *chan_fd and addr as for create. */
	int (*adopt)(const struct backend_ctx *ctx, const char *id, int *chan_fd, pid_t *pid,
		     char addr[16], err_t *err);
	/* Tear everything down; idempotent. */
	int (*destroy)(const struct backend_ctx *ctx, const char *id, err_t *err);
	/* Optional: runs after create, once the guest said READY and before the
	 * sandbox is reported running (vm: the clone reset of clock, RNG,
	 * hostname, machine-id and network). addr: the sandbox's address on the
	 * node's network as the node already knows it ("" = none). gc is
	 * borrowed. A failure fails the create. */
	int (*post_ready)(const struct backend_ctx *ctx, const struct nm_sandbox_spec *spec,
			  const char *addr, struct guestconn *gc, err_t *err);
	/* Optional: a read-only fd (caller owns) on the sandbox's serial
	 * console log. NULL: the backend has none (the API answers 501). */
	int (*console)(const struct backend_ctx *ctx, const char *id, int *fd, err_t *err);
	/* Optional (BACKEND_CAP_PAUSE): stop every process / vCPU of the jail with its
	 * memory and guest channel kept, and start them again. pause returns
	 * once nothing in the jail can run; both are idempotent. */
	int (*pause)(const struct backend_ctx *ctx, const char *id, err_t *err);
	int (*resume)(const struct backend_ctx *ctx, const char *id, err_t *err);
	/* Optional (BACKEND_CAP_DISK_SNAPSHOT): a read-only, atomic snapshot of the
	 * sandbox's disk named snap; *size gets the bytes written since
	 * snapshot prev ("" = since the sandbox's disk was made), -1 when
	 * unknown. snapshot_delete is idempotent. rollback kills every process,
	 * swaps the disk for a writable clone of snap and starts a fresh guest
	 * with the same id and limits; *chan_fd as for create. */
	int (*snapshot)(const struct backend_ctx *ctx, const char *id, const char *snap,
			const char *prev, int64_t *size, err_t *err);
	int (*snapshot_delete)(const struct backend_ctx *ctx, const char *id, const char *snap,
			       err_t *err);
	/* Optional (BACKEND_CAP_FULL_SNAPSHOT): as snapshot, with the guest's memory
	 * and device state captured at the same point; rollback and fork from
	 * it restore the running guest instead of booting one. */
	int (*snapshot_full)(const struct backend_ctx *ctx, const char *id, const char *snap,
			     const char *prev, int64_t *size, err_t *err);
	/* Optional (with snapshot_full): a paused sandbox's memory and device
	 * state alone, beside its disk snapshot snap taken since it paused:
	 * together one full snapshot, whose disk a suspend sends while the
	 * memory is saved. */
	int (*snapshot_memory)(const struct backend_ctx *ctx, const char *id, const char *snap,
			       int64_t *size, err_t *err);
	/* Optional: snapshot_full for a fork's throw-away snapshot of the
	 * sandbox spec->id, which only fork reads (vm: maybe only the pages
	 * written since the template's memory). */
	int (*snapshot_fork)(const struct backend_ctx *ctx, const struct nm_sandbox_spec *spec,
			     const char *snap, int64_t *size, err_t *err);
	int (*rollback)(const struct backend_ctx *ctx, const struct nm_sandbox_spec *spec,
			const char *snap, int *chan_fd, pid_t *pid, err_t *err);
	/* Optional: runs before a disk snapshot of a running sandbox, so the
	 * snapshot holds what the guest wrote (vm: the guest agent syncs its
	 * page cache to the disk image). gc is borrowed. A failure fails the
	 * snapshot. */
	int (*quiesce)(const struct backend_ctx *ctx, struct guestconn *gc, err_t *err);
	/* Optional: runs before the memory snapshot of a suspend, on a running
	 * sandbox, to make that memory smaller (vm: the guest drops its page
	 * cache and zeroes its free pages). gc is borrowed. Best effort: a
	 * failure is logged and the suspend goes on. */
	int (*reclaim)(const struct backend_ctx *ctx, struct guestconn *gc, err_t *err);
	/* Optional (with snapshot): a new sandbox spec->id whose disk is a
	 * writable clone of snapshot snap of sandbox parent, started fresh
	 * with spec's limits; *chan_fd and addr (the child's own) as for
	 * create. */
	int (*fork)(const struct backend_ctx *ctx, const struct nm_sandbox_spec *spec,
		    const char *parent, const char *snap, int *chan_fd, pid_t *pid, char addr[16],
		    err_t *err);
};

extern const struct backend_ops backend_ns;
extern const struct backend_ops backend_vm;
/* NULL when no backend has that name. */
const struct backend_ops *backend_find(const char *name);

/* Can be do every one of caps (be may be NULL: an unknown backend)? */
static inline bool backend_can(const struct backend_ops *be, unsigned caps)
{
	return be && (be->caps & caps) == caps;
}

/* What a suspend keeps, as the API names it: "memory", "disk", or NULL
 * when be cannot suspend (or is NULL). */
static inline const char *backend_suspend_kind(const struct backend_ops *be)
{
	if (backend_can(be, BACKEND_CAP_SUSPEND_MEMORY))
		return "memory";
	return backend_can(be, BACKEND_CAP_SUSPEND_DISK) ? "disk" : NULL;
}

#endif
