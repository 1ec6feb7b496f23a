/* The "vm" backend: every sandbox is a QEMU microVM with its own guest kernel.
 * All privileged work (the jail, QEMU, QMP, the pool) happens in nodemgr
 * (src/nodemgr/vm/); this table decides which kind of start to ask for and
 * drives the guest side of making a template's memory snapshot.
 *
 * Create, in order:
 *   1. clone: restore the template's memory snapshot for this RAM/vCPU shape
 *      (milliseconds). nodemgr answers -ENODATA when there is none yet.
 *   2. first vm use of a template (one at a time per node): boot the template
 *      VM with its RAM in a shared file, wait for the guest's READY, run
 *      `sync` in it so its disk image holds everything its page cache says,
 *      then have nodemgr save the device state. Then 1 again.
 *   3. if the snapshot cannot be made, a cold boot, so a create still works.
 * post_ready then resets what clones of one snapshot would share (clock,
 * RNG, hostname, machine-id) and gives the guest its network address before
 * the sandbox is reported running.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "../../guestconn/guestconn.h"
#include "../../lib/log.h"
#include "../../lib/util.h"
#include "../../guestproto/proto.h"
#include "../backend.h"

#define TEMPLATE_BOOT_TIMEOUT_MS 60000

/* Serialises template snapshot making on this node: concurrent first
 * creates of one template share one boot (the second finds the snapshot).
 * Set once, process-wide, like the config. */
static pthread_mutex_t prep_mu = PTHREAD_MUTEX_INITIALIZER;

struct prep_wait {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool exited, closed;
	int code;
};

static void prep_on_output(void *arg, uint32_t pid, int fd, uint64_t off, const void *data,
			   size_t len)
{
}

static void prep_on_exit(void *arg, uint32_t pid, int exit_code, int sig)
{
	struct prep_wait *w = arg;

	pthread_mutex_lock(&w->mu);
	w->exited = true;
	w->code = sig ? 128 + sig : exit_code;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

static void prep_on_closed(void *arg, const char *reason)
{
	struct prep_wait *w = arg;

	pthread_mutex_lock(&w->mu);
	w->closed = true;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

static const struct guestconn_cbs prep_cbs = {
	.on_output = prep_on_output,
	.on_exit = prep_on_exit,
	.on_closed = prep_on_closed,
};

/* Step 2 above. On failure the template VM is discarded. */
static int make_snapshot(const struct backend_ctx *ctx, const struct nm_sandbox_spec *spec,
			 err_t *err)
{
	struct prep_wait w = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	char *argv[] = { "sync", NULL };
	struct exec_spec ex = { .argv = argv };
	struct guest_hello hello;
	struct guestconn *gc;
	uint64_t t0 = now_ms();
	uint32_t gpid;
	int fd = -1, r;
	pid_t pid;

	if ((r = nm_vm_create(ctx->nm_sock, spec, NM_VM_TEMPLATE, &fd, &pid, NULL, err)) < 0)
		return err_wrap(err, "boot template vm");
	gc = guestconn_open(fd, &prep_cbs, &w, TEMPLATE_BOOT_TIMEOUT_MS, &hello, err);
	if (!gc) {
		r = err_wrap(err, "template vm guest agent");
		goto discard;
	}
	if ((r = guestconn_exec(gc, &ex, &gpid, err)) < 0) {
		err_wrap(err, "sync in template vm");
		guestconn_close(gc);
		goto discard;
	}
	pthread_mutex_lock(&w.mu);
	while (!w.exited && !w.closed)
		pthread_cond_wait(&w.cv, &w.mu);
	pthread_mutex_unlock(&w.mu);
	guestconn_close(gc);
	if (!w.exited || w.code != 0) {
		r = err_set(err, EIO, "sync in template vm: %s",
			    w.exited ? "non-zero exit" : "channel closed");
		goto discard;
	}
	if ((r = nm_vm_template_save(ctx->nm_sock, spec, false, err)) < 0)
		return r;
	log_info("template %s/%u: vm memory snapshot made in %llu ms", spec->template_name,
		 spec->template_version, (unsigned long long)(now_ms() - t0));
	return 0;
discard: {
	err_t e2 = { 0 };
	if (nm_vm_template_save(ctx->nm_sock, spec, true, &e2) < 0)
		log_warn("discard template vm: %s", e2.msg);
}
	return r;
}

static int vmb_create(const struct backend_ctx *ctx, const struct nm_sandbox_spec *spec,
		      int *chan_fd, pid_t *pid, char addr[16], err_t *err)
{
	uint64_t t0 = now_us();
	int r;

	/* vm_snapshots = false: the cold boot that fast create is measured
	 * against (bench/create), with nothing else changed. */
	if (ctx->vm_cold_boot)
		return nm_vm_create(ctx->nm_sock, spec, NM_VM_COLD, chan_fd, pid, addr, err);
	r = nm_vm_create(ctx->nm_sock, spec, NM_VM_CLONE, chan_fd, pid, addr, err);

	log_debug("vm %s: nodemgr answered in %.1f ms", spec->id, (now_us() - t0) / 1000.0);
	if (r != -ENODATA)
		return r;
	pthread_mutex_lock(&prep_mu);
	err_clear(err);
	r = nm_vm_create(ctx->nm_sock, spec, NM_VM_CLONE, chan_fd, pid, addr, err);
	if (r == -ENODATA) {
		err_t pe = { 0 };
		if (make_snapshot(ctx, spec, &pe) == 0) {
			err_clear(err);
			r = nm_vm_create(ctx->nm_sock, spec, NM_VM_CLONE, chan_fd, pid, addr, err);
		} else {
			log_warn("template %s/%u: no vm memory snapshot (%s); booting cold",
				 spec->template_name, spec->template_version, pe.msg);
			err_clear(err);
			r = nm_vm_create(ctx->nm_sock, spec, NM_VM_COLD, chan_fd, pid, addr, err);
		}
	}
	pthread_mutex_unlock(&prep_mu);
	return r;
}

static int vmb_adopt(const struct backend_ctx *ctx, const char *id, int *chan_fd, pid_t *pid,
		     char addr[16], err_t *err)
{
	return nm_sandbox_adopt(ctx->nm_sock, id, chan_fd, pid, addr, err);
}

static int vmb_destroy(const struct backend_ctx *ctx, const char *id, err_t *err)
{
	return nm_sandbox_destroy(ctx->nm_sock, id, err);
}

/* The guest's eth0: the fixed vm network (proto.h), which every guest has
 * set at boot, so a clone or a fork child changes nothing; a guest restored
 * from a snapshot made before it is readdressed. QEMU's namespace
 * translates it to the sandbox's own address addr (nodemgr net.c). No
 * address (the node runs without a sandbox network): nothing sent. */
static void guest_net(const char *addr, struct guest_reset *rq)
{
	if (!addr[0])
		return;
	rq->net_addr = PROTO_VM_NET_ADDR;
	rq->net_prefix = PROTO_VM_NET_PREFIX;
	rq->net_gateway = rq->net_dns = PROTO_VM_NET_GATEWAY;
}

/* Fresh clock (ours, read just before sending), 64 bytes of host entropy,
 * the sandbox's hostname, a new random machine-id and its network. */
static int vmb_reset_guest(struct guestconn *gc, const char *addr, const char *hostname,
			   err_t *err)
{
	struct guest_reset rq = { .set_clock = true, .hostname = hostname };
	uint64_t t0 = now_us();

	guest_net(addr, &rq);
	if (guestconn_reset(gc, &rq, err) < 0)
		return err_wrap(err, "clone reset");
	log_debug("vm %s: clone reset in %.1f ms", hostname, (now_us() - t0) / 1000.0);
	return 0;
}

/* Clones of one snapshot share the clock they were saved with, the RNG state,
 * the hostname and the machine-id: the guest agent resets them from host
 * values (guestconn_reset). A cold-booted VM gets the same reset, which is
 * harmless and keeps one path. */
static int vmb_post_ready(const struct backend_ctx *ctx, const struct nm_sandbox_spec *spec,
			  const char *addr, struct guestconn *gc, err_t *err)
{
	(void)ctx;
	return vmb_reset_guest(gc, addr, spec->hostname[0] ? spec->hostname : spec->id, err);
}

static int vmb_pause(const struct backend_ctx *ctx, const char *id, err_t *err)
{
	return nm_sandbox_freeze(ctx->nm_sock, id, true, err);
}

static int vmb_resume(const struct backend_ctx *ctx, const char *id, err_t *err)
{
	return nm_sandbox_freeze(ctx->nm_sock, id, false, err);
}

/* Disk snapshots: the guest syncs first (quiesce), then nodemgr stops the
 * vCPUs around the btrfs snapshot, so the image is consistent at that
 * point. Rollback boots a fresh guest on a clone of the snapshot. */
static int vmb_quiesce(const struct backend_ctx *ctx, struct guestconn *gc, err_t *err)
{
	if (guestconn_sync(gc, err) < 0)
		return err_wrap(err, "sync in the guest");
	return 0;
}

/* Before a suspend: guest reclaim.c (sync, drop the page cache, zero the
 * free pages), so the memory artifact holds neither a second copy of the
 * files the disk artifact has nor stale freed pages. */
static int vmb_reclaim(const struct backend_ctx *ctx, struct guestconn *gc, err_t *err)
{
	(void)ctx;
	if (guestconn_reclaim(gc, err) < 0)
		return err_wrap(err, "reclaim in the guest");
	return 0;
}

static int vmb_snapshot(const struct backend_ctx *ctx, const char *id, const char *snap,
			const char *prev, int64_t *size, err_t *err)
{
	return nm_snapshot_create(ctx->nm_sock, id, snap, prev, size, err);
}

static int vmb_snapshot_full(const struct backend_ctx *ctx, const char *id, const char *snap,
			     const char *prev, int64_t *size, err_t *err)
{
	return nm_snapshot_create_full(ctx->nm_sock, id, snap, prev, size, err);
}

static int vmb_snapshot_memory(const struct backend_ctx *ctx, const char *id, const char *snap,
			       int64_t *size, err_t *err)
{
	return nm_snapshot_create_memory(ctx->nm_sock, id, snap, size, err);
}

static int vmb_snapshot_fork(const struct backend_ctx *ctx, const struct nm_sandbox_spec *spec,
			     const char *snap, int64_t *size, err_t *err)
{
	return nm_snapshot_create_fork(ctx->nm_sock, spec, snap, size, err);
}

static int vmb_snapshot_delete(const struct backend_ctx *ctx, const char *id, const char *snap,
			       err_t *err)
{
	return nm_snapshot_delete(ctx->nm_sock, id, snap, err);
}

static int vmb_rollback(const struct backend_ctx *ctx, const struct nm_sandbox_spec *spec,
			const char *snap, int *chan_fd, pid_t *pid, err_t *err)
{
	return nm_sandbox_rollback(ctx->nm_sock, spec, snap, chan_fd, pid, err);
}

static int vmb_fork(const struct backend_ctx *ctx, const struct nm_sandbox_spec *spec,
		    const char *parent, const char *snap, int *chan_fd, pid_t *pid, char addr[16],
		    err_t *err)
{
	return nm_sandbox_fork(ctx->nm_sock, spec, parent, snap, true, chan_fd, pid, addr, err);
}

static int vmb_console(const struct backend_ctx *ctx, const char *id, int *fd, err_t *err)
{
	return nm_vm_console(ctx->nm_sock, id, fd, err);
}

const struct backend_ops backend_vm = {
	.name = "vm",
	/* pause: QMP stop/cont in nodemgr; disk and full snapshots, rollback
	 * and fork: nodemgr's snapshot, rollback and fork verbs. */
	.caps = BACKEND_CAP_PAUSE | BACKEND_CAP_DISK_SNAPSHOT | BACKEND_CAP_FULL_SNAPSHOT |
		BACKEND_CAP_MEMORY_FORK | BACKEND_CAP_SUSPEND_MEMORY | BACKEND_CAP_START_TURNS,
	.create = vmb_create,
	.adopt = vmb_adopt,
	.destroy = vmb_destroy,
	.pause = vmb_pause,
	.resume = vmb_resume,
	.post_ready = vmb_post_ready,
	.console = vmb_console,
	.snapshot = vmb_snapshot,
	.snapshot_delete = vmb_snapshot_delete,
	.snapshot_full = vmb_snapshot_full,
	.snapshot_memory = vmb_snapshot_memory,
	.snapshot_fork = vmb_snapshot_fork,
	.rollback = vmb_rollback,
	.quiesce = vmb_quiesce,
	.reclaim = vmb_reclaim,
	.fork = vmb_fork,
};
