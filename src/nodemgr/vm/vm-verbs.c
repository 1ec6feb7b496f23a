/* vm-verbs.c - the vm backend's privileged half: each sandbox is a QEMU
 * microVM, spawned and jailed by nodemgr, driven over QMP. This file holds
 * its setup and the verbs that start one (create, boot in place) or pause
 * it; the jail and QEMU's command line are vm-qemu.c, saving and loading
 * state vm-state.c, parked QEMUs vm-pool.c, the console vm-console.c, the
 * files and paths they share vm-files.c.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../lib/fault.h"
#include "../../lib/log.h"
#include "../../lib/util.h"
#include "../../qmp/qmp.h"
#include "../../pool/pool.h"
#include "../jail/jail.h"
#include "../core/nodemgr-internal.h"
#include "vm-internal.h"

/* ---- setup ------------------------------------------------------------- */

/* Under TCG the guest's rdtsc reads the host TSC. The guest kernel
 * calibrates the TSC against the PIT, which under TCG on a busy host fails
 * at random ("Unable to calibrate against PIT", then no HPET or PM timer to
 * fall back on on microvm) and the boot hangs: measured here, two boots in
 * three. Telling it the rate (tsc_early_khz) skips the calibration. */
static uint32_t host_tsc_khz(void)
{
	struct buf b;
	uint32_t khz = 0;

	buf_init(&b);
	if (read_file("/proc/cpuinfo", 1 << 20, &b) == 0 && b.data) {
		char *p = strstr(b.data, "cpu MHz");
		if (p && (p = strchr(p, ':')))
			khz = (uint32_t)(strtod(p + 1, NULL) * 1000.0);
	}
	buf_free(&b);
	return khz;
}

int vm_init(struct nm_server *s, err_t *err)
{
	struct nm_vm *vm = xcalloc(1, sizeof(*vm));
	const char *dir = s->cfg->vm_dir;
	struct group *g;

	s->vm = vm;
	vm->run = xasprintf("%s/run/vm", s->cfg->data_dir);
	vm->root = xasprintf("%s/vmroot", s->run_dir);
	vm->qemu = xstrdup("/usr/bin/qemu-system-x86_64");
	vm->kvm_gid = (g = getgrnam("kvm")) ? g->gr_gid : (gid_t)-1;
	vm->tsc_khz = host_tsc_khz();
	if (dir) {
		vm->kernel = xasprintf("%s/vmlinuz", dir);
		vm->initrd = xasprintf("%s/initramfs.cpio.gz", dir);
		vm->capstone = xasprintf("%s/lib/libcapstone.so.4", dir);
		if (access(vm->capstone, R_OK) < 0) {
			free(vm->capstone);
			vm->capstone = NULL;
		}
		vm->romem = xasprintf("%s/lib/libairlock-romem.so", dir);
	}
	if (mkdir_p(vm->run, 0700) < 0 || (mkdir(vm->root, 0755) < 0 && errno != EEXIST))
		return err_sys(err, "mkdir %s", vm->run);
	if (access(vm->qemu, X_OK) < 0) {
		snprintf(vm->reason, sizeof(vm->reason), "%s not installed", vm->qemu);
	} else if (!dir || access(vm->kernel, R_OK) < 0 || access(vm->initrd, R_OK) < 0) {
		snprintf(vm->reason, sizeof(vm->reason), "no guest kernel/initramfs in %s",
			 dir ? dir : "(vm_dir unset)");
	} else if (access(vm->romem, R_OK) < 0) {
		/* Without it a clone's QEMU would need its template's shared RAM
		 * file writable (vm-qemu.c): no vm backend rather than that. */
		snprintf(vm->reason, sizeof(vm->reason), "no %s (build target airlock-romem)",
			 vm->romem);
	} else {
		vm->usable = true;
		vm_accel_detect(s, vm->accel, sizeof(vm->accel), vm->reason, sizeof(vm->reason));
	}
	log_info("vm backend: %s (%s)", vm->usable ? vm->accel : "off", vm->reason);
	if (vm_console_pump_start(s, s->cfg->vm_console_log_max ? s->cfg->vm_console_log_max
								 : NM_CONSOLE_LOG_MAX_DEFAULT,
				  err) < 0)
		return -err->code;
	vm_warm_sweep(s);
	return 0;
}

void vm_free(struct nm_server *s)
{
	struct nm_vm *vm = s->vm;

	if (!vm)
		return;
	free(vm->kernel);
	free(vm->initrd);
	free(vm->capstone);
	free(vm->romem);
	free(vm->qemu);
	free(vm->run);
	free(vm->root);
	free(vm);
	s->vm = NULL;
}

void vm_node_info(struct nm_server *s, struct nm_node_info *out)
{
	if (!s->vm)
		return;
	snprintf(out->vm_accel, sizeof(out->vm_accel), "%s", s->vm->usable ? s->vm->accel : "");
	snprintf(out->vm_reason, sizeof(out->vm_reason), "%s", s->vm->reason);
}

/* ---- verbs ------------------------------------------------------------- */

int vm_create(struct nm_server *s, const struct nm_sandbox_spec *spec, uint32_t mode,
	      int *chan_dup, pid_t *pid, err_t *err)
{
	struct nm_vm *vm = s->vm;
	struct vm_shape sh;
	char id[65];
	_cleanup_free_ char *tmpl = NULL, *sbx = NULL, *disk = NULL, *cache = NULL,
			    *cache_parent = NULL, *mem = NULL, *vmstate = NULL, *run = NULL,
			    *ready = NULL, *boot_log = NULL;
	bool made_subvol = false;
	struct qmp *q = NULL;
	int chan = -1, r;
	pid_t qpid = -1;
	struct jail *j;

	if (!vm || !vm->usable)
		return err_set(err, ENOTSUP, "vm backend unavailable: %s",
			       vm ? vm->reason : "not initialised");
	if (mode != NM_VM_COLD && mode != NM_VM_CLONE && mode != NM_VM_TEMPLATE)
		return err_set(err, EINVAL, "bad vm mode %u", mode);
	vm_shape_of(spec, &sh);
	if (sh.mem_mb < 64 || sh.mem_mb > 65536 || sh.cpus > 64)
		return err_set(err, EINVAL, "vm memory %u MiB or %u vCPUs out of range", sh.mem_mb,
			       sh.cpus);
	if (mode == NM_VM_TEMPLATE)
		vm_template_jail_id(spec, &sh, id, sizeof(id));
	else
		snprintf(id, sizeof(id), "%s", spec->id);
	tmpl = xasprintf("%s/templates/%s/%u", s->pool, spec->template_name, spec->template_version);
	cache = vm_cache_dir(s, spec, &sh);
	cache_parent = xasprintf("%s/templates/%s/%u.vm", s->pool, spec->template_name,
				 spec->template_version);
	vmstate = xasprintf("%s/vmstate", cache);
	ready = xasprintf("%s/ready", cache);
	run = xasprintf("%s/%s", vm->run, id);

	if (pool_is_subvol(tmpl) != 1)
		return err_set(err, ENOENT, "template %s/%u not found", spec->template_name,
			       spec->template_version);
	if (mode == NM_VM_CLONE && access(ready, F_OK) < 0)
		return err_set(err, ENODATA, "template %s/%u has no memory snapshot for %u MiB/%u vCPUs",
			       spec->template_name, spec->template_version, sh.mem_mb, sh.cpus);
	/* A warm QEMU fits when its CPU quota is the one asked for. */
	uint32_t cpu_millis = spec->limits.cpu_millis ? spec->limits.cpu_millis : 1000;
	if (mode == NM_VM_CLONE && cpu_millis == sh.cpus * 1000) {
		uint64_t t0 = now_us();
		r = vm_warm_take(s, spec, &sh, chan_dup, pid, err);
		if (r != -EAGAIN) {
			if (r == 0)
				log_info("vm %s: warm: qemu pid %d from the warm pool in %.1f ms", spec->id,
					 (int)*pid, (now_us() - t0) / 1000.0);
			vm_warm_refill(s, spec);
			return r;
		}
	}
	if (!(j = mgr_jail_claim(s, id, err)))
		return -err->code;
	j->vm = true;
	j->vm_mem_mb = sh.mem_mb;
	j->hidden = mode == NM_VM_TEMPLATE;
	uid_t uid = NM_UID_BASE + (uid_t)j->slot * JAIL_ID_RANGE;

	if (mode == NM_VM_TEMPLATE) {
		/* The cache subvolume and a clean shape dir. */
		_cleanup_free_ char *src = xasprintf("%s/rootfs.ext4", tmpl);
		if (access(cache_parent, F_OK) < 0 && (r = pool_subvol_create(cache_parent, err)) < 0)
			goto fail;
		if ((mkdir(cache, 0755) < 0 && errno != EEXIST)) {
			r = err_sys(err, "mkdir %s", cache);
			goto fail;
		}
		unlink(ready);
		unlink(vmstate);
		disk = xasprintf("%s/rootfs.ext4", cache);
		if ((r = vm_reflink(src, disk, err)) < 0)
			goto fail;
		mem = xasprintf("%s/mem", cache);
		unlink(mem);
		/* The booting QEMU's own until the save makes it root's and
		 * read-only for the clones (vm_template_save). */
		_cleanup_close_ int mfd = open(mem, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (mfd < 0 || ftruncate(mfd, (off_t)sh.mem_mb << 20) < 0 ||
		    fchown(mfd, uid, uid) < 0 || fchmod(mfd, 0600) < 0) {
			r = err_sys(err, "create %s", mem);
			goto fail;
		}
	} else {
		uint64_t dmb = spec->limits.disk_mb ? spec->limits.disk_mb : NM_DEFAULT_DISK_MB;
		sbx = xasprintf("%s/sandboxes/%s", s->pool, id);
		disk = xasprintf("%s/rootfs.ext4", sbx);
		if (access(sbx, F_OK) == 0) {
			r = err_set(err, EEXIST, "subvolume for sandbox %s exists", id);
			goto fail;
		}
		if ((r = pool_subvol_snapshot(tmpl, sbx, false, err)) < 0)
			goto fail;
		made_subvol = true;
		FAULT_POINT("nm.vm.after_subvol");
		if ((r = pool_qgroup_limit(sbx, dmb << 20, err)) < 0)
			goto fail;
		if (mode == NM_VM_CLONE) {
			/* The disk exactly as the saved VM saw it. */
			_cleanup_free_ char *src = xasprintf("%s/rootfs.ext4", cache);
			if ((r = vm_reflink(src, disk, err)) < 0)
				goto fail;
			mem = xasprintf("%s/mem", cache);
		} else if (access(disk, F_OK) < 0) {
			r = err_set(err, ENOENT, "template %s/%u has no rootfs.ext4",
				    spec->template_name, spec->template_version);
			goto fail;
		}
	}
	if (chown(disk, uid, uid) < 0 || chmod(disk, 0600) < 0) {
		r = err_sys(err, "chown %s", disk);
		goto fail;
	}

	struct vm_launch l = {
		.id = id,
		.uid = uid,
		.disk = disk,
		.mem = mem,
		.mem_shared = mode == NM_VM_TEMPLATE,
		.incoming = mode == NM_VM_CLONE,
		.run = run,
		.hostname = mode == NM_VM_COLD ? (spec->hostname[0] ? spec->hostname : spec->id) : NULL,
		.sh = sh,
	};
	if (mode == NM_VM_CLONE)
		l.boot_log = boot_log = xasprintf("%s/console.log", cache);
	uint64_t t0 = now_us();
	if ((r = vm_start(s, &l, spec->limits.cpu_millis, &qpid, &chan, &q, err)) < 0)
		goto fail;
	FAULT_POINT("nm.vm.after_qemu");
	uint64_t t1 = now_us();
	if (mode == NM_VM_CLONE && (r = vm_restore_state(q, vmstate, err)) < 0)
		goto fail_started;
	j->qmp = TAKE_PTR(q);
	r = mgr_jail_publish(s, j, qpid, chan, chan_dup, err);
	chan = -1;
	if (r < 0)
		goto fail_started;
	*pid = qpid;
	/* "cold": not from the warm pool (a clone of the template's memory,
	 * a boot, or the template's own boot) */
	log_info("vm %s: %s: qemu pid %d (%s, %u MiB, %u vCPU, uid %#x): qmp %.1f ms, ready %.1f ms",
		 id, mode == NM_VM_TEMPLATE ? "template" : "cold", (int)qpid,
		 mode == NM_VM_COLD ? "boot" : mode == NM_VM_CLONE ? "clone" : "template",
		 sh.mem_mb, sh.cpus, uid, (t1 - t0) / 1000.0, (now_us() - t0) / 1000.0);
	if (mode == NM_VM_CLONE)
		vm_warm_refill(s, spec);
	return 0;

fail_started: {
	err_t e2 = { 0 };
	nmnet_detach(s, j);
	if (cgroup_destroy(&s->cg, id, &e2) < 0)
		log_warn("vm create %s cleanup: %s", id, e2.msg);
	vm_cleanup_run(s, id);
}
fail:
	qmp_close(q);
	if (chan >= 0)
		close(chan);
	{
		err_t e2 = { 0 };
		if (made_subvol && pool_subvol_delete(sbx, &e2) < 0)
			log_warn("vm create %s cleanup: %s", id, e2.msg);
	}
	mgr_jail_unclaim(s, j);
	return r;
}

int vm_boot_in_place(struct nm_server *s, struct jail *j, const struct nm_sandbox_spec *spec,
		     const char *vmstate, const char *mem, int *chan_dup, pid_t *pid, err_t *err)
{
	_cleanup_free_ char *disk = xasprintf("%s/sandboxes/%s/rootfs.ext4", s->pool, j->id);
	_cleanup_free_ char *run = xasprintf("%s/%s", s->vm->run, j->id);
	uid_t uid = NM_UID_BASE + (uid_t)j->slot * JAIL_ID_RANGE;
	struct vm_shape sh;
	struct qmp *q = NULL;
	int chan = -1, r;
	pid_t qpid = -1;

	if (!s->vm || !s->vm->usable)
		return err_set(err, ENOTSUP, "vm backend unavailable");
	vm_shape_of(spec, &sh);
	if (chown(disk, uid, uid) < 0 || chmod(disk, 0600) < 0)
		return err_sys(err, "chown %s", disk);
	struct vm_launch l = {
		.id = j->id,
		.uid = uid,
		.disk = disk,
		.run = run,
		.hostname = vmstate ? NULL : spec->hostname[0] ? spec->hostname : spec->id,
		.incoming = vmstate != NULL,
		.mem = vmstate ? mem : NULL,
		.devices_only = vmstate && mem,
		.sh = sh,
	};
	uint64_t t0 = now_us();
	if ((r = vm_start(s, &l, spec->limits.cpu_millis, &qpid, &chan, &q, err)) < 0)
		return r;
	FAULT_POINT("nm.vm.after_qemu");
	/* A full snapshot's stream holds all of guest RAM (and the device
	 * state); this QEMU's RAM is anonymous and takes it whole. A delta
	 * snapshot's RAM is its file, mapped private as a clone maps the
	 * template's; the state is the devices only. */
	if (vmstate && (r = vm_restore_state(q, vmstate, err)) < 0) {
		err_t e2 = { 0 };
		qmp_close(q);
		close(chan);
		nmnet_detach(s, j);
		if (cgroup_destroy(&s->cg, j->id, &e2) < 0)
			log_warn("vm restore %s cleanup: %s", j->id, e2.msg);
		vm_cleanup_run(s, j->id);
		return r;
	}
	qmp_close(j->qmp);
	j->qmp = TAKE_PTR(q);
	r = mgr_jail_publish(s, j, qpid, chan, chan_dup, err);
	if (r < 0) {
		err_t e2 = { 0 };
		nmnet_detach(s, j);
		if (cgroup_destroy(&s->cg, j->id, &e2) < 0)
			log_warn("vm boot %s cleanup: %s", j->id, e2.msg);
		vm_cleanup_run(s, j->id);
		return r;
	}
	*pid = qpid;
	/* A fork child's or a restored jail was not made by vm_create. */
	j->vm_mem_mb = sh.mem_mb;
	j->vm_devices_only = l.devices_only;
	log_info("vm %s: qemu pid %d (%s, in place, %u MiB, %u vCPU): %.1f ms", j->id, (int)qpid,
		 !vmstate ? "cold" : mem ? "restored from a memory file" : "restored from a stream",
		 sh.mem_mb, sh.cpus, (now_us() - t0) / 1000.0);
	return 0;
}

int vm_template_save(struct nm_server *s, const struct nm_sandbox_spec *spec, bool discard,
		     err_t *err)
{
	bool saved = false;
	int r = vm_state_template_save(s, spec, discard, &saved, err);

	/* A new memory snapshot: park QEMUs on it for the next clones. */
	if (saved)
		vm_warm_refill(s, spec);
	return r;
}

int vm_freeze(struct nm_server *s, struct jail *j, bool freeze, err_t *err)
{
	/* stop returns once every vCPU thread is parked (QEMU's
	 * pause_all_vcpus); memory, devices and the virtio-serial connection
	 * stay, so the node's channel simply sees no data until cont. */
	if (!j->qmp)
		return err_set(err, ENOENT, "vm %s has no monitor", j->id);
	if (qmp_exec(j->qmp, freeze ? "stop" : "cont", NULL, -1, VM_QMP_TIMEOUT_MS, NULL, err) < 0)
		return err_wrap(err, "vm %s: %s", j->id, freeze ? "stop" : "cont");
	return 0;
}
