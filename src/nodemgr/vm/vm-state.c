/* vm-state.c - a VM's device and memory state, moved over QMP into files
 * nodemgr opens (QEMU gets each as an fd: getfd, never a path): loading a
 * saved state into a QEMU waiting in -incoming defer (clones, restores,
 * fork standbys), a sandbox's full snapshot (its RAM file and devices,
 * vm-delta.c, or the whole migration stream), holding the vCPUs still for a
 * disk snapshot, and the template's memory snapshot that clones start from
 * (vm_template_save). What QEMU answers is read by the fuzzed src/qmp
 * parser; the state files themselves are only passed back to a QEMU.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../../lib/json.h"
#include "../../lib/log.h"
#include "../../lib/phases.h"
#include "../../lib/util.h"
#include "../../qmp/qmp.h"
#include "../core/nodemgr-internal.h"
#include "vm-internal.h"

static int fsync_path(const char *path, err_t *err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || fsync(fd) < 0)
		return err_sys(err, "sync %s", path);
	return 0;
}

/* ---- QMP steps --------------------------------------------------------- */

static const char *const caps_json =
	"{\"capabilities\":[{\"capability\":\"x-ignore-shared\",\"state\":true},"
	"{\"capability\":\"events\",\"state\":true}]}";

static int wait_migration(struct qmp *q, err_t *err)
{
	for (;;) {
		json *data = NULL;
		int r = qmp_wait_event(q, "MIGRATION", VM_QMP_TIMEOUT_MS, &data, err);
		if (r < 0)
			return r;
		const char *st = json_get_str(data, "status");
		if (st && !strcmp(st, "completed")) {
			json_free(data);
			return 0;
		}
		if (st && (!strcmp(st, "failed") || !strcmp(st, "cancelled"))) {
			r = err_set(err, EIO, "migration %s", st);
			json_free(data);
			return r;
		}
		json_free(data);
	}
}

int vm_restore_caps(struct qmp *q, err_t *err)
{
	if (qmp_exec(q, "migrate-set-capabilities", caps_json, -1, VM_QMP_TIMEOUT_MS, NULL, err) <
	    0)
		return err_wrap(err, "restore");
	return 0;
}

int vm_load_state(struct qmp *q, const char *vmstate, err_t *err)
{
	_cleanup_close_ int fd = open(vmstate, O_RDONLY | O_CLOEXEC);
	struct phases ph;
	char steps[200];
	int r;

	if (fd < 0)
		return err_sys(err, "open %s", vmstate);
	phases_start(&ph);
	if ((r = qmp_exec(q, "getfd", "{\"fdname\":\"vmstate\"}", fd, VM_QMP_TIMEOUT_MS, NULL,
			  err)) < 0 ||
	    (r = qmp_exec(q, "migrate-incoming", "{\"uri\":\"fd:vmstate\"}", -1,
			  VM_QMP_TIMEOUT_MS, NULL, err)) < 0)
		return err_wrap(err, "restore");
	phases_mark(&ph, "incoming");
	if ((r = wait_migration(q, err)) < 0)
		return err_wrap(err, "restore");
	phases_mark(&ph, "loaded");
	if ((r = qmp_exec(q, "cont", NULL, -1, VM_QMP_TIMEOUT_MS, NULL, err)) < 0)
		return err_wrap(err, "restore");
	phases_mark(&ph, "cont");
	phases_text(&ph, steps, sizeof(steps));
	log_debug("restore %s: %s", vmstate, steps);
	return 0;
}

/* Load the saved device state into a QEMU waiting in -incoming defer, then
 * start its vCPUs. The RAM itself is not copied: x-ignore-shared skips the
 * file-backed block, which this QEMU already maps (MAP_PRIVATE). */
int vm_restore_state(struct qmp *q, const char *vmstate, err_t *err)
{
	int r = vm_restore_caps(q, err);

	return r < 0 ? r : vm_load_state(q, vmstate, err);
}

/* The whole migration stream to path. */
static int save_stream(struct jail *j, const char *path, err_t *err)
{
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	uint64_t t0 = now_us();
	int r;

	if (fd < 0)
		return err_sys(err, "create %s", path);
	if (!j->qmp)
		return err_set(err, ENOENT, "vm %s has no monitor", j->id);
	/* The same capabilities as a clone's restore (x-ignore-shared changes
	 * the stream's format). The sandbox's RAM is never a shared block (a
	 * clone maps the template's file MAP_PRIVATE, a cold boot has
	 * anonymous RAM), so every page goes into the stream; zero pages as a
	 * flag only. */
	/* max-bandwidth: QEMU rate-limits a migration to 128 MiB/s by
	 * default, also with the vCPUs stopped; into a local file that limit
	 * only costs time (measured: ~1.1 s for a 256 MiB guest with it). */
	if ((r = qmp_exec(j->qmp, "migrate-set-capabilities", caps_json, -1, VM_QMP_TIMEOUT_MS,
			  NULL, err)) < 0 ||
	    (r = qmp_exec(j->qmp, "migrate-set-parameters",
			  "{\"max-bandwidth\":1099511627776}", -1, VM_QMP_TIMEOUT_MS, NULL,
			  err)) < 0 ||
	    (r = qmp_exec(j->qmp, "getfd", "{\"fdname\":\"fullstate\"}", fd, VM_QMP_TIMEOUT_MS,
			  NULL, err)) < 0 ||
	    (r = qmp_exec(j->qmp, "migrate", "{\"uri\":\"fd:fullstate\"}", -1, VM_QMP_TIMEOUT_MS,
			  NULL, err)) < 0 ||
	    (r = wait_migration(j->qmp, err)) < 0)
		return err_wrap(err, "vm %s: save memory", j->id);
	log_debug("vm %s: memory and device state saved in %.1f ms", j->id,
		  (now_us() - t0) / 1000.0);
	return 0;
}

int vm_save_full(struct nm_server *s, struct jail *j, const char *state, const char *mem,
		 uint64_t *bytes, err_t *err)
{
	_cleanup_free_ char *dev = xasprintf("%s/%s/devstate", s->vm->run, j->id);
	struct stat st;
	int r;

	*bytes = 0;
	r = vm_save_delta(j, dev, state, mem, bytes, err);
	if (r == 0 || j->vm_devices_only)
		return r;   /* its stream would lack the configuration section */
	/* vm_save_delta left nothing behind */
	log_info("vm %s: full snapshot as a stream: %s", j->id, err->msg);
	err_clear(err);
	if ((r = save_stream(j, state, err)) < 0)
		return r;
	if (stat(state, &st) == 0)
		*bytes = (uint64_t)st.st_size;
	return 0;
}

int vm_hold_still(struct nm_server *s, struct jail *j, bool *stopped, err_t *err)
{
	json *st = NULL;
	bool bad = false;
	int r;

	*stopped = false;
	if (!j->qmp)
		return err_set(err, ENOENT, "vm %s has no monitor", j->id);
	if ((r = qmp_exec(j->qmp, "query-status", NULL, -1, VM_QMP_TIMEOUT_MS, &st, err)) < 0)
		return err_wrap(err, "vm %s: query-status", j->id);
	/* A paused sandbox is already still; it stays paused afterwards. */
	if (json_get_bool(st, "running", true, &bad)) {
		if ((r = qmp_exec(j->qmp, "stop", NULL, -1, VM_QMP_TIMEOUT_MS, NULL, err)) < 0)
			err_wrap(err, "vm %s: stop", j->id);
		else
			*stopped = true;
	}
	json_free(st);
	return r < 0 ? r : 0;
}

static struct jail *find_claim(struct nm_server *s, const char *id)
{
	struct jail *j;

	pthread_mutex_lock(&s->lock);
	j = mgr_jail_find_locked(s, id);
	if (j && (j->busy || !j->vm))
		j = NULL;
	if (j)
		j->busy = true;
	pthread_mutex_unlock(&s->lock);
	return j;
}

int vm_state_template_save(struct nm_server *s, const struct nm_sandbox_spec *spec, bool discard,
			   bool *saved, err_t *err)
{
	struct vm_shape sh;
	char id[65];
	_cleanup_free_ char *cache = NULL, *tmp = NULL, *vmstate = NULL, *ready = NULL,
			    *disk = NULL, *mem = NULL, *st = NULL;
	_cleanup_close_ int fd = -1;
	struct jail *j;
	int r;

	vm_shape_of(spec, &sh);
	vm_template_jail_id(spec, &sh, id, sizeof(id));
	if (!(j = find_claim(s, id)))
		return err_set(err, ENOENT, "no template vm running for %s/%u", spec->template_name,
			       spec->template_version);
	cache = vm_cache_dir(s, spec, &sh);
	tmp = xasprintf("%s/vmstate.tmp", cache);
	vmstate = xasprintf("%s/vmstate", cache);
	ready = xasprintf("%s/ready", cache);
	disk = xasprintf("%s/rootfs.ext4", cache);
	mem = xasprintf("%s/mem", cache);

	uint64_t t0 = now_us();
	if (discard) {
		r = 0;
		goto out;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		r = err_sys(err, "create %s", tmp);
		goto out;
	}
	if ((r = qmp_exec(j->qmp, "stop", NULL, -1, VM_QMP_TIMEOUT_MS, NULL, err)) < 0 ||
	    (r = qmp_exec(j->qmp, "migrate-set-capabilities", caps_json, -1, VM_QMP_TIMEOUT_MS,
			  NULL, err)) < 0 ||
	    (r = qmp_exec(j->qmp, "getfd", "{\"fdname\":\"vmstate\"}", fd, VM_QMP_TIMEOUT_MS, NULL,
			  err)) < 0 ||
	    (r = qmp_exec(j->qmp, "migrate", "{\"uri\":\"fd:vmstate\"}", -1, VM_QMP_TIMEOUT_MS,
			  NULL, err)) < 0 ||
	    (r = wait_migration(j->qmp, err)) < 0) {
		err_wrap(err, "save");
		goto out;
	}
	/* QEMU wrote through its own dup; quit and wait for the process so the
	 * RAM file and the disk are final before anything reads them. */
	err_t eq = { 0 };
	(void)qmp_exec(j->qmp, "quit", NULL, -1, VM_QMP_TIMEOUT_MS, NULL, &eq);
	if (j->pidfd >= 0) {
		struct pollfd pfd = { .fd = j->pidfd, .events = POLLIN };
		if (poll(&pfd, 1, VM_QMP_TIMEOUT_MS) <= 0) {
			r = err_set(err, ETIMEDOUT, "template vm did not quit");
			goto out;
		}
	}
	if (fsync(fd) < 0 || rename(tmp, vmstate) < 0) {
		r = err_sys(err, "write %s", vmstate);
		goto out;
	}
	/* The boot's console log, for the clones' logs (vm_console_seed). */
	{
		_cleanup_free_ char *log = xasprintf("%s/%s/console.log", s->vm->run, id);
		_cleanup_free_ char *keep = xasprintf("%s/console.log", cache);
		unlink(keep);
		if (vm_console_copy_tail(log, keep, 0) < 0)
			log_warn("template boot log %s: %s", keep, strerror(errno));
	}
	/* Clones get their own reflinked copy of this disk; keep it root's.
	 * Every clone maps the RAM file private: root's, readable by the vm
	 * jails' group, writable by none (the boot QEMU that owned it is gone). */
	if (chown(disk, 0, 0) < 0 || chmod(disk, 0644) < 0) {
		r = err_sys(err, "chown %s", disk);
		goto out;
	}
	if (chown(mem, 0, VM_SHARED_GID) < 0 || chmod(mem, 0640) < 0) {
		r = err_sys(err, "chown %s", mem);
		goto out;
	}
	/* The RAM file and the disk on the pool before `ready` says they are
	 * there: after a host crash a clone must never map a RAM file the
	 * kernel had not written back. It also takes that writeback (~100 MB
	 * the guest touched) off the first full snapshot of a clone, whose
	 * reflink of this file would otherwise flush it. */
	if ((r = fsync_path(mem, err)) < 0 || (r = fsync_path(disk, err)) < 0)
		goto out;
	if ((r = write_file(ready, "1\n", 2, 0644)) < 0) {
		errno = -r;
		r = err_sys(err, "write %s", ready);
		goto out;
	}
	log_info("template %s/%u: memory snapshot for %u MiB/%u vCPU saved in %.1f ms",
		 spec->template_name, spec->template_version, sh.mem_mb, sh.cpus,
		 (now_us() - t0) / 1000.0);
	r = 0;
	*saved = true;
out:
	{
		err_t e2 = { 0 };
		nmnet_detach(s, j);
		if (j->pidfd >= 0)
			syscall(SYS_pidfd_send_signal, j->pidfd, SIGKILL, NULL, 0);
		if (cgroup_destroy(&s->cg, id, &e2) < 0)
			log_warn("template vm %s cleanup: %s", id, e2.msg);
		vm_cleanup_run(s, id);
		st = xasprintf("%s/%s.state", s->run_dir, id);
		unlink(st);
	}
	mgr_jail_unclaim(s, j);
	return r;
}
