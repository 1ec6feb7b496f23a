/* vm.c - the vm backend's privileged half: each sandbox is a QEMU microVM,
 * spawned and jailed here, driven over QMP.
 *
 * Files (all paths built from validated ids and template names):
 *
 *   pool/templates/<name>/<ver>/rootfs.ext4      the template's disk (read-only subvolume)
 *   pool/templates/<name>/<ver>.vm/              writable subvolume: the template's VM cache
 *       m<MB>-c<N>/rootfs.ext4                   the disk as the saved VM last saw it
 *       m<MB>-c<N>/mem                           guest RAM (memory-backend-file, share=on)
 *       m<MB>-c<N>/vmstate                       device state (x-ignore-shared stream)
 *       m<MB>-c<N>/ready                         written last: the snapshot is complete
 *   pool/sandboxes/<id>/rootfs.ext4              the sandbox's disk (CoW)
 *   run/vm/<id>/console.log                      the guest's serial console
 *
 * The template subvolume is read-only (a finished template never changes),
 * and a memory snapshot is made later, on the first vm use of a template and
 * per RAM/vCPU shape, so it lives beside it in <ver>.vm (template_delete
 * removes both).
 *
 * Jail, in order (parent = nodemgr thread, child = the future QEMU):
 *   parent: claim an id and slot (host uid NM_UID_BASE + slot*65536, the
 *           same ranges as ns jails), cgroup with memory (RAM + overhead),
 *           CPU and pids limits, run dir owned by that uid, two socketpairs
 *           (QMP, guest channel) and an error pipe
 *   child:  join the cgroup; new mount, net (no devices but lo), ipc and uts
 *           namespaces; an empty tmpfs root holding only /usr (read-only,
 *           for QEMU's libraries and firmware), /dev/{null,urandom[,kvm]},
 *           the kernel, the initramfs, its disk, its RAM file and its run
 *           dir; pivot_root; setgroups/setresgid/setresuid to its uid;
 *           no_new_privs; fds 3 (QMP) and 4 (channel) only; exec QEMU with
 *           -sandbox on (seccomp: no spawn, no privilege change)
 *   parent: EOF on the error pipe = exec'd; QMP greeting; for a clone the
 *           device state goes in over QMP as an fd (getfd), so QEMU never
 *           needs to see the state file or run a helper.
 *
 * The channel and QMP are socketpairs passed as fds (chardev socket,fd=N):
 * no socket file to race for, and nodemgr keeps the host ends for the VM's
 * life exactly as for ns jails (adopt hands out a new dup). When QEMU dies the
 * node sees EOF on its dup.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../lib/log.h"
#include "../lib/util.h"
#include "../proto/proto.h"
#include "../qmp/qmp.h"
#include "../storage/pool.h"
#include "jail.h"
#include "nodemgr-internal.h"
#include "vm-delta.h"

#define VM_QMP_TIMEOUT_MS 10000
/* cgroup memory on top of guest RAM: the TCG code buffer (tb-size 64 MiB),
 * QEMU's heap and the page cache of its disk. */
#define VM_MEM_OVERHEAD_MB 192
#define VM_PIDS 256
/* Part of a template's memory snapshot dir name: change it whenever the
 * QEMU device set or the guest's boot changes, so a snapshot saved by an
 * older build is not loaded into a machine it does not match (n1: the
 * virtio-net NIC; n2: microvm ioapic2=off, the guest's root mounted
 * without ext4's lazyinit; n3: root noatime, /etc/machine-id and
 * /etc/resolv.conf in memory; n4: eth0 has the fixed vm network; n5: the
 * guest boots with lsm=landlock,yama). */
#define VM_CACHE_TAG "n5"

struct nm_vm {
	char accel[8];
	char reason[160];
	char *kernel, *initrd, *qemu;
	char *capstone;  /* the libcapstone stand-in (src/vmstub/capstone.c), NULL if absent */
	char *run;       /* DATA/run/vm */
	char *root;      /* DATA/run/nodemgr/vmroot: each jail mounts its tmpfs here, in its own ns */
	gid_t kvm_gid;
	uint32_t tsc_khz;    /* host TSC rate, for the guest's tsc_early_khz (0 = unknown) */
	bool usable;
	bool refilling[2];   /* a refill thread runs, warm pool / fork standbys (under s->lock) */
};

struct vm_shape {
	uint32_t mem_mb, cpus;
};

static void warm_sweep(struct nm_server *s);
static void warm_refill(struct nm_server *s, const struct nm_sandbox_spec *spec);
static void standby_refill(struct nm_server *s, const struct nm_sandbox_spec *spec);

static void shape_of(const struct nm_sandbox_spec *spec, struct vm_shape *sh)
{
	uint32_t cpu = spec->limits.cpu_millis ? spec->limits.cpu_millis : 1000;

	sh->mem_mb = spec->limits.memory_mb ? spec->limits.memory_mb : 512;
	sh->cpus = (cpu + 999) / 1000;
	if (sh->cpus < 1)
		sh->cpus = 1;
}

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
	}
	if (mkdir_p(vm->run, 0700) < 0 || (mkdir(vm->root, 0755) < 0 && errno != EEXIST))
		return err_sys(err, "mkdir %s", vm->run);
	if (access(vm->qemu, X_OK) < 0) {
		snprintf(vm->reason, sizeof(vm->reason), "%s not installed", vm->qemu);
	} else if (!dir || access(vm->kernel, R_OK) < 0 || access(vm->initrd, R_OK) < 0) {
		snprintf(vm->reason, sizeof(vm->reason), "no guest kernel/initramfs in %s",
			 dir ? dir : "(vm_dir unset)");
	} else {
		vm->usable = true;
		vm_accel_detect(s, vm->accel, sizeof(vm->accel), vm->reason, sizeof(vm->reason));
	}
	log_info("vm backend: %s (%s)", vm->usable ? vm->accel : "off", vm->reason);
	warm_sweep(s);
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

static int rm_rf_at(int dfd, const char *name)
{
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (fd >= 0) {
		DIR *d = fdopendir(fd);
		struct dirent *de;
		while (d && (de = readdir(d)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
				rm_rf_at(dirfd(d), de->d_name);
		if (d)
			closedir(d);
		else
			close(fd);
		return unlinkat(dfd, name, AT_REMOVEDIR);
	}
	return unlinkat(dfd, name, 0);
}

void vm_cleanup_run(struct nm_server *s, const char *id)
{
	int dfd;

	if (!s->vm)
		return;
	dfd = open(s->vm->run, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return;
	if (rm_rf_at(dfd, id) < 0 && errno != ENOENT)
		log_warn("remove run/vm/%s: %s", id, strerror(errno));
	close(dfd);
}

/* ---- the jail ---------------------------------------------------------- */

struct vm_launch {
	const char *id;          /* jail id = cgroup name = run dir name */
	uid_t uid;
	const char *disk;        /* host path, read-write */
	const char *mem;         /* host path of the RAM file; NULL = anonymous RAM */
	bool mem_shared;         /* share=on (template boot) or off (clone) */
	bool incoming;           /* -incoming defer -S (clone) */
	bool devices_only;       /* incoming: the devices of a memory-delta snapshot */
	const char *run;         /* host run dir (console.log) */
	const char *hostname;    /* cold boot only: on the kernel command line */
	const char *boot_log;    /* clone: the template boot's console log, copied in first */
	bool background;         /* a fork standby: at nice 19 until taken (standby_go) */
	struct vm_shape sh;
};

/* A jail's slot, from its uid (NM_UID_BASE + slot * JAIL_ID_RANGE). */
static int vm_slot(const struct vm_launch *l)
{
	return (int)((l->uid - NM_UID_BASE) / JAIL_ID_RANGE);
}

static void __attribute__((noreturn)) child_fail(int efd, const char *what)
{
	char msg[256];
	int n = snprintf(msg, sizeof(msg), "%s: %s", what, strerror(errno));

	if (write(efd, msg, (size_t)n) < 0) {
		/* nothing left to tell */
	}
	_exit(127);
}

/* Bind src at dst inside the new root (dst created as a file or dir). */
static int bind_at(const char *src, const char *dst, bool dir, bool ro)
{
	if (dir) {
		if (mkdir(dst, 0755) < 0 && errno != EEXIST)
			return -1;
	} else {
		int fd = open(dst, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
		if (fd < 0)
			return -1;
		close(fd);
	}
	if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
		return -1;
	if (ro && mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID, NULL) < 0)
		return -1;
	return 0;
}

/* Runs in the child between fork and exec: no locks, no return. */
static void __attribute__((noreturn))
child_main(struct nm_server *s, const struct vm_launch *l, int qmp_fd, int chan_fd, int efd,
	   char *const *argv, const char *nat)
{
	struct nm_vm *vm = s->vm;
	err_t e = { 0 };
	gid_t groups[2];
	int ng = 0;

	if (cgroup_attach(&s->cg, l->id, getpid(), &e) < 0) {
		errno = e.code;
		child_fail(efd, "join cgroup");
	}
	if (setsid() < 0)
		child_fail(efd, "setsid");
	if (unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS) < 0)
		child_fail(efd, "unshare");
	/* The NIC's tap, in this new namespace (net.c wires it up from outside). */
	int tap = net_vm_tap();
	if (tap < 0)
		child_fail(efd, "tap");
	if (nat && net_vm_nat(nat) < 0)
		child_fail(efd, "load the namespace's nat table (nft)");
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		child_fail(efd, "make / private");
	if (mount("tmpfs", vm->root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k") < 0)
		child_fail(efd, "mount tmpfs root");
	if (chdir(vm->root) < 0)
		child_fail(efd, "chdir root");
	if (bind_at("/usr", "usr", true, true) < 0)
		child_fail(efd, "bind /usr");
	if (symlink("usr/lib", "lib") < 0 || symlink("usr/lib64", "lib64") < 0 ||
	    symlink("usr/bin", "bin") < 0)
		child_fail(efd, "symlinks");
	if (mkdir("dev", 0755) < 0 || mkdir("vm", 0755) < 0)
		child_fail(efd, "mkdir");
	if (bind_at("/dev/null", "dev/null", false, false) < 0 ||
	    bind_at("/dev/urandom", "dev/urandom", false, false) < 0)
		child_fail(efd, "bind /dev");
	if (!strcmp(vm->accel, "kvm") && bind_at("/dev/kvm", "dev/kvm", false, false) < 0)
		child_fail(efd, "bind /dev/kvm");
	if (bind_at(vm->kernel, "vm/vmlinuz", false, true) < 0 ||
	    bind_at(vm->initrd, "vm/initrd", false, true) < 0)
		child_fail(efd, "bind kernel");
	if (vm->capstone && (mkdir("vm/lib", 0755) < 0 ||
			     bind_at(vm->capstone, "vm/lib/libcapstone.so.4", false, true) < 0))
		child_fail(efd, "bind the libcapstone stand-in");
	if (bind_at(l->disk, "disk", false, false) < 0)
		child_fail(efd, "bind disk");
	if (l->mem && bind_at(l->mem, "mem", false, false) < 0)
		child_fail(efd, "bind mem");
	if (bind_at(l->run, "run", true, false) < 0)
		child_fail(efd, "bind run dir");
	if (mkdir(".old", 0700) < 0 || syscall(SYS_pivot_root, ".", ".old") < 0)
		child_fail(efd, "pivot_root");
	if (chdir("/") < 0 || umount2("/.old", MNT_DETACH) < 0 || rmdir("/.old") < 0)
		child_fail(efd, "drop old root");
	if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) <
	    0)
		child_fail(efd, "remount / read-only");

	/* fds: 0-2 /dev/null, 3 QMP, 4 channel, 5 the error pipe (cloexec),
	 * 6 the tap. */
	int hi_q = fcntl(qmp_fd, F_DUPFD, 10), hi_c = fcntl(chan_fd, F_DUPFD, 10),
	    hi_e = fcntl(efd, F_DUPFD_CLOEXEC, 10), hi_t = fcntl(tap, F_DUPFD, 10),
	    dn = open("/dev/null", O_RDWR);
	if (hi_q < 0 || hi_c < 0 || hi_e < 0 || hi_t < 0 || dn < 0)
		child_fail(efd, "dup");
	efd = hi_e;
	if (dup2(dn, 0) < 0 || dup2(dn, 1) < 0 || dup2(dn, 2) < 0 || dup2(hi_q, 3) < 0 ||
	    dup2(hi_c, 4) < 0 || dup3(hi_e, 5, O_CLOEXEC) < 0 || dup2(hi_t, 6) < 0)
		child_fail(efd, "dup2");
	efd = 5;
	if (syscall(SYS_close_range, 7, ~0u, 0) < 0)
		child_fail(efd, "close_range");

	groups[ng++] = VM_SHARED_GID;
	if (!strcmp(vm->accel, "kvm") && vm->kvm_gid != (gid_t)-1)
		groups[ng++] = vm->kvm_gid;
	if (setgroups((size_t)ng, groups) < 0 || setresgid(l->uid, l->uid, l->uid) < 0 ||
	    setresuid(l->uid, l->uid, l->uid) < 0)
		child_fail(efd, "drop to the jail uid");
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		child_fail(efd, "no_new_privs");
	/* No transparent huge pages for this QEMU (the flag survives execve):
	 * QEMU madvises its TCG code buffer and its RAM blocks MADV_HUGEPAGE,
	 * so the 64 KiB firmware ROM took a whole private 2 MiB huge page and
	 * the code buffer grew in 2 MiB steps (about 3 MiB of an idle clone).
	 * A clone's guest RAM is a file mapping, which THP does not back. */
	if (l->background && setpriority(PRIO_PROCESS, 0, 19) < 0)
		child_fail(efd, "nice");
	if (prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) < 0)
		child_fail(efd, "thp_disable");
	/* G_SLICE=always-malloc: glib 2.74's slice allocator (GTree and GList
	 * nodes) keeps slabs and per-thread magazines of its own; plain malloc
	 * left an idle clone ~0.3 MiB smaller. LD_LIBRARY_PATH: ld.so takes
	 * libcapstone.so.4 from /vm/lib, the stand-in (1.3 MiB less private
	 * memory per QEMU); a QEMU that does not link Capstone ignores it. */
	char *envp[] = { "PATH=/usr/bin", "G_SLICE=always-malloc",
			 vm->capstone ? "LD_LIBRARY_PATH=/vm/lib" : NULL, NULL };
	execve("/usr/bin/qemu-system-x86_64", argv, envp);
	child_fail(efd, "exec qemu");
}

/* The QEMU command line. Template boot and clones use the same machine
 * (apart from share= and -incoming, and a clone has no -kernel, -initrd or
 * -append): the restored device state must match the machine it is loaded
 * into. */
static char **build_argv(struct nm_server *s, const struct vm_launch *l)
{
	struct nm_vm *vm = s->vm;
	char **v = xcalloc(64, sizeof(*v));
	int n = 0;

#define A(x) (v[n++] = xstrdup(x))
#define AF(...) (v[n++] = xasprintf(__VA_ARGS__))
	A("qemu-system-x86_64");
	A("-M");
	/* ioapic2=off: with ACPI on, microvm 7.2 adds a second IO-APIC and 24
	 * virtio-mmio transports (8 without it); we use three. The 16 unused
	 * ones were ~0.7 MiB of QEMU heap per VM. */
	A("microvm,memory-backend=mem,ioapic2=off");
	A("-object");
	if (l->mem)
		AF("memory-backend-file,id=mem,size=%" PRIu32 "M,mem-path=/mem,share=%s",
		   l->sh.mem_mb, l->mem_shared ? "on" : "off");
	else
		AF("memory-backend-ram,id=mem,size=%" PRIu32 "M", l->sh.mem_mb);
	A("-accel");
	A(!strcmp(vm->accel, "kvm") ? "kvm" : "tcg,tb-size=64");
	A("-cpu");
	A(!strcmp(vm->accel, "kvm") ? "host" : "max");
	A("-smp");
	AF("%" PRIu32, l->sh.cpus);
	A("-nodefaults");
	A("-no-user-config");
	A("-display");
	A("none");
	A("-no-reboot");
	/* The device state of a memory-delta snapshot (vm-delta.c,
	 * xen-save-devices-state) has no configuration section, and a loader
	 * expecting one refuses it. Only a QEMU loading one is told; every
	 * full snapshot of such a QEMU is a delta again, so its own streams
	 * (which this drops the section from too) are never made. */
	if (l->devices_only) {
		A("-global");
		A("migration.send-configuration=off");
	}
	A("-sandbox");
	A("on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny");
	/* Only a booting QEMU gets the kernel. QEMU reads -kernel into a
	 * malloc'd buffer that it keeps for fw_cfg (14 MiB of private dirty
	 * memory for the cloud kernel) and a clone never reads it: its guest
	 * booted long ago, in the template. fw_cfg's migrated state is only
	 * its cursor, and no RAM block depends on -kernel, so the device state
	 * still loads. */
	if (!l->incoming) {
		A("-kernel");
		A("/vm/vmlinuz");
		A("-initrd");
		A("/vm/initrd");
		A("-append");
		{
			char tsc[64] = "";
			/* tsc=reliable: without it the clocksource watchdog compares the
			 * TSC with emulated ticks that arrive late under TCG, drops the
			 * TSC, and the guest clock runs slow. */
			if (vm->tsc_khz)
				snprintf(tsc, sizeof(tsc), " tsc_early_khz=%" PRIu32 " tsc=reliable",
					 vm->tsc_khz);
			/* lsm=landlock,yama: the guest kernel's other LSMs (AppArmor,
			 * lockdown, IMA, BPF) have no policy in a sandbox (the agent is
			 * init; nothing loads profiles) but still run their hooks on
			 * every open and exec, i.e. under TCG code translated in every
			 * clone: without them an idle clone's PSS was 0.3-1.0 MiB
			 * lower (README, third PSS pass). Landlock and Yama stay: a
			 * program in the sandbox may use them itself. */
			AF("console=ttyS0 loglevel=6 panic=-1 ipv6.disable=1 lsm=landlock,yama%s%s%s",
			   tsc, l->hostname ? " airlock.hostname=" : "",
			   l->hostname ? l->hostname : "");
		}
	}
	/* cache=writeback honours the guest's flushes (fdatasync on the host),
	 * so what the guest fsync'ed survives a host crash; unsafe would drop
	 * that for no gain under TCG. discard lets fstrim return space to the
	 * pool. */
	A("-drive");
	A("id=d,file=/disk,format=raw,if=none,cache=writeback,discard=unmap,aio=threads");
	A("-device");
	A("virtio-blk-device,drive=d");
	A("-device");
	A("virtio-serial-device");
	A("-chardev");
	A("socket,id=ch,fd=4");
	A("-device");
	A("virtserialport,chardev=ch,name=airlock");
	/* The NIC (net.c: the tap is fd 6, routed to the sandbox's veth in
	 * QEMU's namespace). Every QEMU has it, network on or off, so a
	 * template's saved device state loads into every clone. The MAC is
	 * fixed: a clone restores the template's anyway, and each sandbox's
	 * tap is an L2 segment of its own. */
	A("-netdev");
	A("tap,id=n0,fd=6");
	A("-device");
	A("virtio-net-device,netdev=n0,mac=52:54:00:a1:0c:01");
	/* append=on: a clone's log starts with the boot of the template it was
	 * cloned from (vm_start copies it in). loglevel=6 (not quiet): the
	 * kernel's banner and notices reach the log that GET .../console
	 * serves; a few KB at boot, nothing after. */
	A("-chardev");
	A("file,id=con,path=/run/console.log,append=on");
	A("-serial");
	A("chardev:con");
	A("-chardev");
	A("socket,id=mon,fd=3");
	A("-mon");
	A("chardev=mon,mode=control");
	if (l->incoming) {
		A("-S");
		A("-incoming");
		A("defer");
	}
#undef A
#undef AF
	return v;
}

static void free_argv(char **v)
{
	for (size_t i = 0; v && v[i]; i++)
		free(v[i]);
	free(v);
}

/* Spawn QEMU in its jail. On success *pid is QEMU (our child), *qmp_out and
 * *chan_out the host ends (caller owns). The cgroup l->id must exist. */
static int spawn_qemu(struct nm_server *s, const struct vm_launch *l, pid_t *pid, int *qmp_out,
		      int *chan_out, err_t *err)
{
	int qsp[2] = { -1, -1 }, csp[2] = { -1, -1 }, ep[2] = { -1, -1 };
	char **argv = build_argv(s, l);
	_cleanup_free_ char *nat = net_vm_nat_rules(s, vm_slot(l));
	char msg[256];
	ssize_t n;
	pid_t c;
	int r = 0;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, qsp) < 0 ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, csp) < 0 ||
	    pipe2(ep, O_CLOEXEC) < 0) {
		r = err_sys(err, "socketpair");
		goto out;
	}
	c = fork();
	if (c < 0) {
		r = err_sys(err, "fork");
		goto out;
	}
	if (c == 0) {
		close(ep[0]);
		child_main(s, l, qsp[1], csp[1], ep[1], argv, nat);
	}
	close(ep[1]);
	ep[1] = -1;
	/* EOF (n == 0): exec happened and closed the pipe. */
	do
		n = read(ep[0], msg, sizeof(msg) - 1);
	while (n < 0 && errno == EINTR);
	if (n > 0) {
		msg[n] = '\0';
		kill(c, SIGKILL); /* the reaper collects it */
		r = err_set(err, EPERM, "vm jail: %s", msg);
		goto out;
	}
	*pid = c;
	*qmp_out = TAKE_FD(qsp[0]);
	*chan_out = TAKE_FD(csp[0]);
out:
	for (int i = 0; i < 2; i++) {
		if (qsp[i] >= 0)
			close(qsp[i]);
		if (csp[i] >= 0)
			close(csp[i]);
		if (ep[i] >= 0)
			close(ep[i]);
	}
	free_argv(argv);
	return r;
}

/* ---- files ------------------------------------------------------------- */

/* dst = CoW copy of src (one FICLONE ioctl: extents are shared). */
static int reflink(const char *src, const char *dst, err_t *err)
{
	_cleanup_close_ int in = open(src, O_RDONLY | O_CLOEXEC);
	_cleanup_free_ char *tmp = xasprintf("%s.tmp", dst);
	_cleanup_close_ int out = -1;

	if (in < 0)
		return err_sys(err, "open %s", src);
	unlink(tmp);
	out = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (out < 0)
		return err_sys(err, "create %s", tmp);
	if (ioctl(out, FICLONE, in) < 0) {
		int r = err_sys(err, "reflink %s", src);
		unlink(tmp);
		return r;
	}
	if (rename(tmp, dst) < 0) {
		int r = err_sys(err, "rename %s", tmp);
		unlink(tmp);
		return r;
	}
	return 0;
}

static int fsync_path(const char *path, err_t *err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || fsync(fd) < 0)
		return err_sys(err, "sync %s", path);
	return 0;
}

static char *cache_dir(struct nm_server *s, const struct nm_sandbox_spec *spec,
		       const struct vm_shape *sh)
{
	return xasprintf("%s/templates/%s/%u.vm/m%" PRIu32 "-c%" PRIu32 "-" VM_CACHE_TAG, s->pool,
			 spec->template_name, spec->template_version, sh->mem_mb, sh->cpus);
}

/* The jail id of a template boot: not a sandbox id the node would make
 * ("sbx-..."), and stable per template and shape. */
static void template_jail_id(const struct nm_sandbox_spec *spec, const struct vm_shape *sh,
			     char *out, size_t cap)
{
	char key[160];
	uint64_t h = 1469598103934665603ull;

	snprintf(key, sizeof(key), "%s/%u/%" PRIu32 "/%" PRIu32, spec->template_name,
		 spec->template_version, sh->mem_mb, sh->cpus);
	for (const char *c = key; *c; c++)
		h = (h ^ (unsigned char)*c) * 1099511628211ull;
	snprintf(out, cap, "tmpl-%016" PRIx64, h);
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

/* Load the saved device state into a QEMU waiting in -incoming defer, then
 * start its vCPUs. The RAM itself is not copied: x-ignore-shared skips the
 * file-backed block, which this QEMU already maps (MAP_PRIVATE). */
static int restore_state(struct qmp *q, const char *vmstate, err_t *err)
{
	_cleanup_close_ int fd = open(vmstate, O_RDONLY | O_CLOEXEC);
	int r;

	if (fd < 0)
		return err_sys(err, "open %s", vmstate);
	if ((r = qmp_exec(q, "migrate-set-capabilities", caps_json, -1, VM_QMP_TIMEOUT_MS, NULL,
			  err)) < 0 ||
	    (r = qmp_exec(q, "getfd", "{\"fdname\":\"vmstate\"}", fd, VM_QMP_TIMEOUT_MS, NULL,
			  err)) < 0 ||
	    (r = qmp_exec(q, "migrate-incoming", "{\"uri\":\"fd:vmstate\"}", -1,
			  VM_QMP_TIMEOUT_MS, NULL, err)) < 0 ||
	    (r = wait_migration(q, err)) < 0 ||
	    (r = qmp_exec(q, "cont", NULL, -1, VM_QMP_TIMEOUT_MS, NULL, err)) < 0)
		return err_wrap(err, "restore");
	return 0;
}

/* ---- the console log ---------------------------------------------------- */

#define CONSOLE_SEED_MAX (64u << 10)

/* A clone's console log starts as the last 64 KiB of the template boot's
 * log (the boot lines of the kernel it runs) and a line saying where the
 * restore happened. Best effort: a missing template log only makes the
 * console shorter. The file is the jail uid's, like the one QEMU makes. */
/* dst (new, mode 0600 owned by uid; 0644 root's when uid is 0) = the last
 * 64 KiB of src plus mark. src is a log a QEMU wrote: not followed if a
 * link, read only if a regular file. -1 with errno on failure. */
static int copy_tail_mark(const char *src, const char *dst, uid_t uid, const char *mark)
{
	_cleanup_close_ int in = open(src, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	_cleanup_close_ int out = -1;
	_cleanup_free_ char *data = NULL;
	struct stat st;
	ssize_t n = 0;

	if (in >= 0 && fstat(in, &st) == 0 && S_ISREG(st.st_mode)) {
		off_t off = st.st_size > (off_t)CONSOLE_SEED_MAX ? st.st_size - CONSOLE_SEED_MAX : 0;
		data = xmalloc(CONSOLE_SEED_MAX);
		n = pread(in, data, CONSOLE_SEED_MAX, off);
	}
	out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, uid ? 0600 : 0644);
	if (out < 0 || (uid && fchown(out, uid, uid) < 0) ||
	    (n > 0 && write(out, data, (size_t)n) != n) ||
	    (mark && write(out, mark, strlen(mark)) != (ssize_t)strlen(mark)))
		return -1;
	return 0;
}

static int copy_tail(const char *src, const char *dst, uid_t uid)
{
	return copy_tail_mark(src, dst, uid, NULL);
}

static void seed_console(const char *boot_log, const char *run, uid_t uid)
{
	_cleanup_free_ char *dst = xasprintf("%s/console.log", run);

	if (copy_tail_mark(boot_log, dst, uid,
			   "\n[airlock: restored from the template's memory snapshot]\n") < 0)
		log_warn("seed %s: %s", dst, strerror(errno));
}

int vm_console_open(struct nm_server *s, const char *id, int *fd, err_t *err)
{
	_cleanup_free_ char *path = NULL;
	struct jail *j;
	struct stat st;
	uid_t uid = 0;
	bool found = false;

	*fd = -1;
	if (!s->vm)
		return err_set(err, ENOTSUP, "vm backend not initialised");
	pthread_mutex_lock(&s->lock);
	j = jail_find_locked(s, id);
	if (j && j->vm && !j->hidden) {
		uid = NM_UID_BASE + (uid_t)j->slot * JAIL_ID_RANGE;
		found = true;
	}
	pthread_mutex_unlock(&s->lock);
	if (!found)
		return err_set(err, ENOENT, "no vm jail for sandbox %s", id);
	path = xasprintf("%s/%s/console.log", s->vm->run, id);
	/* The run dir belongs to the jail's uid: the name may be anything a
	 * QEMU escape put there, so no links, no FIFOs or devices (O_NONBLOCK
	 * keeps a FIFO from hanging us before fstat), and only its own file. */
	*fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (*fd < 0)
		return err_sys(err, "open %s", path);
	if (fstat(*fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != uid || st.st_nlink != 1) {
		close(*fd);
		*fd = -1;
		return err_set(err, EPERM, "%s is not the jail's own regular file", path);
	}
	return 0;
}

/* ---- starting QEMU ------------------------------------------------------ */

/* cgroup, run dir, QEMU, its network, monitor. On failure everything this
 * made is gone (the subvolume and the jail entry are the caller's); once it
 * succeeded, the caller's cleanup must net_detach too. */
static int vm_start(struct nm_server *s, const struct vm_launch *l, uint32_t cpu_millis,
		    pid_t *qpid, int *chan, struct qmp **q, err_t *err)
{
	_cleanup_free_ char *run = xasprintf("%s/%s", s->vm->run, l->id);
	struct cgroup_limits cl = {
		.memory_bytes = (uint64_t)(l->sh.mem_mb + VM_MEM_OVERHEAD_MB) << 20,
		.cpu_millis = cpu_millis ? cpu_millis : l->sh.cpus * 1000,
		.pids = VM_PIDS,
	};
	int qfd = -1, r;
	err_t e2 = { 0 };

	*qpid = -1;
	*chan = -1;
	*q = NULL;
	if ((r = cgroup_create(&s->cg, l->id, &cl, err)) < 0)
		goto fail;
	vm_cleanup_run(s, l->id);
	if (mkdir(run, 0700) < 0 || chown(run, l->uid, l->uid) < 0) {
		r = err_sys(err, "mkdir %s", run);
		goto fail;
	}
	if (l->boot_log)
		seed_console(l->boot_log, run, l->uid);
	if ((r = spawn_qemu(s, l, qpid, &qfd, chan, err)) < 0)
		goto fail;
	/* The NIC's wiring, in place before the guest runs: a clone waits in
	 * -incoming, a cold guest takes longer to boot than this. */
	if ((r = net_attach_vm(s, vm_slot(l), l->id, *qpid, err)) < 0)
		goto fail;
	if ((r = qmp_open_fd(qfd, VM_QMP_TIMEOUT_MS, q, err)) < 0) {
		err_wrap(err, "qemu monitor");
		goto fail;
	}
	return 0;
fail:
	net_detach_slot(s, vm_slot(l), l->id);
	if (*chan >= 0)
		close(*chan);
	*chan = -1;
	/* Killing the cgroup kills QEMU (the reaper collects it). */
	if (cgroup_destroy(&s->cg, l->id, &e2) < 0)
		log_warn("vm %s cleanup: %s", l->id, e2.msg);
	vm_cleanup_run(s, l->id);
	return r;
}

static void warm_key(const struct nm_sandbox_spec *spec, const struct vm_shape *sh, char *out,
		     size_t cap)
{
	snprintf(out, cap, "%s/%u/m%" PRIu32 "-c%" PRIu32, spec->template_name,
		 spec->template_version, sh->mem_mb, sh->cpus);
}

/* ---- the warm pool ------------------------------------------------------
 *
 * Per template and shape, up to cfg->vm_warm_pool QEMUs already spawned,
 * jailed and waiting in -incoming defer, each with its future sandbox
 * subvolume ready at pool/warm/<wid> (a snapshot of the template with the
 * snapshot's disk reflinked in). Taking one is renames only: the subvolume
 * to sandboxes/<id>, the cgroup and the run dir to <id>, the jail entry to
 * <id>; then the device state goes in and the vCPUs start. Warm jails are
 * hidden (not listed or adoptable). One refill thread at a time tops the
 * pool up in the background after each use. Warm QEMUs die with nodemgr
 * like every jail; their subvolumes are removed at the next start. */

/* Under TCG a restored clone starts with an empty translation cache: every
 * guest code path it runs for the first time is translated first, and the
 * first HELLO, RESET and exec of a fresh clone took ~60, ~100 and ~150 ms
 * that way (a warm one: a few ms each). So a pooled clone is restored and
 * run through the same paths before it is parked: HELLO, an exec of `true`
 * and a RESET with throw-away values (its own random seed, hostname "warm",
 * a random machine-id), then QMP `stop`. The real RESET at create replaces
 * all of it before the sandbox is handed out, and the cache survives
 * stop/cont (it belongs to this QEMU process).
 *
 * What comes back is read and thrown away, never parsed (nodemgr does not
 * parse bytes from inside a VM): the guest is done when it has been quiet
 * for WARM_QUIET_MS after answering, or after WARM_MAX_MS. A guest that does
 * not answer at all (a restored port can lose the first bytes) is asked
 * again; one that never answers is parked cold, which is only slower. */
#define WARM_QUIET_MS 120
#define WARM_RESEND_MS 300
#define WARM_MAX_MS 3000
#define WARM_ROUNDS 2      /* the second round runs paths the first one only faulted in:
			    * RESET after one round 40-50 ms, after two ~10 ms */

static void warm_guest(int chan, const char *wid, bool net)
{
	char *argv[] = { "true", NULL };
	char *envp[] = { "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			 "HOME=/root", NULL };
	struct proto_hello h = { .version = PROTO_VERSION };
	struct proto_exec x = { .argv = argv, .argc = 1, .env = envp, .envc = 2 };
	struct proto_reset rs = { .entropy_len = 64 };
	struct timespec ts;
	uint64_t t0 = now_ms(), sent = 0, last = 0;
	size_t got = 0, total = 0;
	int round = 0;
	char junk[4096];
	struct buf b;

	clock_gettime(CLOCK_REALTIME, &ts);
	rs.wall_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	random_bytes(rs.entropy, rs.entropy_len);
	snprintf(rs.hostname, sizeof(rs.hostname), "warm");
	/* The fixed vm network the guest has had since the template's boot,
	 * as the real RESET sends it: its check runs warm. */
	if (net) {
		rs.net_addr = PROTO_VM_NET_ADDR;
		rs.net_prefix = PROTO_VM_NET_PREFIX;
		rs.net_gateway = rs.net_dns = PROTO_VM_NET_GATEWAY;
	}
	{
		uint8_t id[PROTO_MACHINE_ID_LEN / 2];
		random_bytes(id, sizeof(id));
		id[0] |= 1;  /* never all zero */
		for (size_t i = 0; i < sizeof(id); i++)
			snprintf(rs.machine_id + 2 * i, 3, "%02x", id[i]);
	}
	buf_init(&b);
	if (proto_enc_hello(&b, 1, &h) < 0 || proto_enc_exec(&b, 2, &x) < 0 ||
	    proto_enc_reset(&b, 3, &rs) < 0) {
		buf_free(&b);
		return;
	}
	explicit_bzero(&rs, sizeof(rs));
	for (;;) {
		uint64_t now = now_ms();
		if (now - t0 >= WARM_MAX_MS)
			break;
		if (got && now - last >= WARM_QUIET_MS) {
			/* This round is answered: the next one, or done. */
			total += got;
			got = 0;
			sent = 0;
			if (++round == WARM_ROUNDS)
				break;
			continue;
		}
		if (!got && now - sent >= WARM_RESEND_MS) {
			if (send(chan, b.data, b.len, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)b.len)
				break;
			sent = now;
		}
		int left = got ? (int)(last + WARM_QUIET_MS - now) : (int)(sent + WARM_RESEND_MS - now);
		struct pollfd pfd = { .fd = chan, .events = POLLIN };
		int r = poll(&pfd, 1, left > 0 ? left : 0);
		if (r < 0 && errno != EINTR)
			break;
		if (r > 0) {
			ssize_t n = recv(chan, junk, sizeof(junk), MSG_DONTWAIT);
			if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
				break;
			if (n > 0) {
				got += (size_t)n;
				last = now_ms();
			}
		}
	}
	buf_free(&b);
	log_debug("warm %s: guest warmed in %llu ms (%d rounds, %zu bytes back)", wid,
		  (unsigned long long)(now_ms() - t0), round, total + got);
}

static void standby_key(const struct nm_sandbox_spec *spec, const struct vm_shape *sh, char *out,
			size_t cap);

/* One parked QEMU for spec's template and shape, hidden and keyed for its
 * pool. Warm (standby false): its disk as the template's memory snapshot
 * saw it, that snapshot restored and the guest warmed, then stopped. A
 * fork standby: the template's disk and an empty RAM file beside the
 * subvolume, nothing restored, at nice 19 (see "fork standbys" below). */
static int park_spawn(struct nm_server *s, const struct nm_sandbox_spec *spec,
		      const struct vm_shape *sh, bool standby, err_t *err)
{
	_cleanup_free_ char *rnd = random_id("warm-", 8);
	_cleanup_free_ char *tmpl = xasprintf("%s/templates/%s/%u", s->pool, spec->template_name,
					      spec->template_version);
	_cleanup_free_ char *cache = cache_dir(s, spec, sh);
	_cleanup_free_ char *src = xasprintf("%s/rootfs.ext4", cache);
	_cleanup_free_ char *wdir = xasprintf("%s/warm", s->pool);
	_cleanup_free_ char *sbx = xasprintf("%s/%s", wdir, rnd);
	_cleanup_free_ char *mem = standby ? xasprintf("%s.mem", sbx) : xasprintf("%s/mem", cache);
	_cleanup_free_ char *disk = xasprintf("%s/rootfs.ext4", sbx);
	_cleanup_free_ char *run = xasprintf("%s/%s", s->vm->run, rnd);
	_cleanup_free_ char *boot_log = xasprintf("%s/console.log", cache);
	uint64_t size = (uint64_t)sh->mem_mb << 20, written = 0;
	struct qmp *q = NULL;
	struct jail *j;
	int chan = -1, dup = -1, r;
	pid_t qpid;

	if (!(j = jail_claim(s, rnd, err)))
		return -err->code;
	j->vm = true;
	j->vm_mem_mb = sh->mem_mb;
	j->vm_devices_only = standby;
	j->hidden = true;
	(standby ? standby_key : warm_key)(spec, sh, j->warm_key, sizeof(j->warm_key));
	uid_t uid = NM_UID_BASE + (uid_t)j->slot * JAIL_ID_RANGE;
	if ((mkdir(wdir, 0700) < 0 && errno != EEXIST)) {
		r = err_sys(err, "mkdir %s", wdir);
		goto fail;
	}
	if ((r = pool_subvol_snapshot(tmpl, sbx, false, err)) < 0)
		goto fail;
	if (standby) {
		_cleanup_close_ int mfd = open(mem, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (mfd < 0 || ftruncate(mfd, (off_t)size) < 0 || fchown(mfd, uid, uid) < 0) {
			r = err_sys(err, "create %s", mem);
			goto fail_subvol;
		}
	} else if ((r = reflink(src, disk, err)) < 0) {
		goto fail_subvol;
	}
	if (chown(disk, uid, uid) < 0 || chmod(disk, 0600) < 0) {
		r = err_sys(err, "chown %s", disk);
		goto fail_subvol;
	}
	struct vm_launch l = { .id = rnd, .uid = uid, .disk = disk, .mem = mem, .incoming = true,
			       .devices_only = standby, .background = standby,
			       .boot_log = standby ? NULL : boot_log, .run = run, .sh = *sh };
	if ((r = vm_start(s, &l, sh->cpus * 1000, &qpid, &chan, &q, err)) < 0)
		goto fail_subvol;
	if (standby) {
		if ((r = ram_written(qpid, size, &written, err)) < 0)
			goto fail_started;
		if (written) {
			r = err_set(err, EPROTO, "qemu wrote %" PRIu64 " pages of guest RAM before "
				    "any restore; no fork standby kept", written);
			goto fail_started;
		}
	} else {
		/* Restored, warmed and parked (stopped) before anyone can take
		 * it: a create then only needs `cont`. */
		_cleanup_free_ char *vmstate = xasprintf("%s/vmstate", cache);
		if ((r = restore_state(q, vmstate, err)) < 0)
			goto fail_started;
		warm_guest(chan, rnd, s->cfg->net_prefix && s->cfg->net_prefix[0]);
		if ((r = qmp_exec(q, "stop", NULL, -1, VM_QMP_TIMEOUT_MS, NULL, err)) < 0) {
			err_wrap(err, "park warm vm");
			goto fail_started;
		}
	}
	j->qmp = TAKE_PTR(q);
	r = jail_publish(s, j, qpid, chan, &dup, err);
	chan = -1;
	if (dup >= 0)
		close(dup);
	if (r < 0)
		goto fail_started;
	return 0;
fail_started: {
	err_t e2 = { 0 };
	qmp_close(q);
	if (chan >= 0)
		close(chan);
	net_detach(s, j);
	cgroup_destroy(&s->cg, rnd, &e2);
	vm_cleanup_run(s, rnd);
}
fail_subvol: {
	err_t e2 = { 0 };
	if (pool_subvol_delete(sbx, &e2) < 0)
		log_warn("parked vm %s cleanup: %s", rnd, e2.msg);
	if (standby)
		unlink(mem);
}
fail:
	jail_unclaim(s, j);
	return r;
}

static int warm_spawn(struct nm_server *s, const struct nm_sandbox_spec *spec,
		      const struct vm_shape *sh, err_t *err)
{
	return park_spawn(s, spec, sh, false, err);
}

/* A pool of parked QEMUs per key: the warm pool (restored, warmed) or the
 * fork standbys (spawned, not restored; see below). */
struct pool_kind {
	const char *name;
	void (*key)(const struct nm_sandbox_spec *spec, const struct vm_shape *sh, char *out,
		    size_t cap);
	int (*spawn)(struct nm_server *s, const struct nm_sandbox_spec *spec,
		     const struct vm_shape *sh, err_t *err);
	uint32_t (*size)(const struct nm_server *s);
	int idx;   /* in nm_vm.refilling */
};

struct refill {
	struct nm_server *s;
	const struct pool_kind *kind;
	struct nm_sandbox_spec spec;
};

static void *refill_main(void *arg)
{
	struct refill *rf = arg;
	struct nm_server *s = rf->s;
	const struct pool_kind *k = rf->kind;
	struct vm_shape sh;
	char key[96];

	shape_of(&rf->spec, &sh);
	k->key(&rf->spec, &sh, key, sizeof(key));
	for (;;) {
		uint32_t n = 0;
		err_t err = { 0 };

		pthread_mutex_lock(&s->lock);
		for (struct jail *j = s->jails; j; j = j->next)
			if (j->hidden && j->alive && !strcmp(j->warm_key, key))
				n++;
		bool stop = s->stopping || n >= k->size(s);
		pthread_mutex_unlock(&s->lock);
		if (stop)
			break;
		if (k->spawn(s, &rf->spec, &sh, &err) < 0) {
			log_warn("%s %s: %s", k->name, key, err.msg);
			break;
		}
	}
	free(rf);
	pthread_mutex_lock(&s->lock);
	s->vm->refilling[k->idx] = false;
	s->nthreads--;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* Top the pool of kind k for spec's template and shape up, in the
 * background (one refill thread per kind at a time). */
static void pool_refill(struct nm_server *s, const struct pool_kind *k,
			const struct nm_sandbox_spec *spec)
{
	struct refill *rf;
	pthread_attr_t attr;
	pthread_t th;

	if (!k->size(s))
		return;
	pthread_mutex_lock(&s->lock);
	if (s->stopping || s->vm->refilling[k->idx]) {
		pthread_mutex_unlock(&s->lock);
		return;
	}
	s->vm->refilling[k->idx] = true;
	s->nthreads++;  /* shutdown waits for it like for a verb */
	pthread_mutex_unlock(&s->lock);
	rf = xcalloc(1, sizeof(*rf));
	rf->s = s;
	rf->kind = k;
	rf->spec = *spec;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&th, &attr, refill_main, rf) != 0) {
		free(rf);
		pthread_mutex_lock(&s->lock);
		s->vm->refilling[k->idx] = false;
		s->nthreads--;
		pthread_mutex_unlock(&s->lock);
	}
	pthread_attr_destroy(&attr);
}

static uint32_t warm_size(const struct nm_server *s)
{
	return s->cfg->vm_warm_pool;
}

static const struct pool_kind warm_kind = {
	.name = "warm pool", .key = warm_key, .spawn = warm_spawn, .size = warm_size, .idx = 0,
};

static void warm_refill(struct nm_server *s, const struct nm_sandbox_spec *spec)
{
	pool_refill(s, &warm_kind, spec);
}

/* A parked QEMU of key, marked busy and taken out of its pool (its id in
 * wid), or NULL when none waits. */
static struct jail *pool_pick(struct nm_server *s, const char *key, char wid[65])
{
	struct jail *j;

	pthread_mutex_lock(&s->lock);
	for (j = s->jails; j; j = j->next)
		if (j->hidden && j->alive && !j->busy && !strcmp(j->warm_key, key))
			break;
	if (j) {
		j->busy = true;
		j->warm_key[0] = '\0';
		snprintf(wid, 65, "%s", j->id);
	}
	pthread_mutex_unlock(&s->lock);
	return j;
}

/* Make the parked QEMU j (id wid, from pool_pick) sandbox spec->id: the
 * jail entry, subvolume, cgroup and run dir renamed, then go(j, arg) runs
 * it and the entry goes live. On failure all of it is gone. */
static int pool_adopt(struct nm_server *s, struct jail *j, const char *wid,
		      const struct nm_sandbox_spec *spec,
		      int (*go)(struct nm_server *s, struct jail *j, void *arg, err_t *err),
		      void *arg, int *chan_dup, pid_t *pid, err_t *err)
{
	int r;
	_cleanup_free_ char *wsbx = xasprintf("%s/warm/%s", s->pool, wid);
	_cleanup_free_ char *sbx = xasprintf("%s/sandboxes/%s", s->pool, spec->id);
	_cleanup_free_ char *wrun = xasprintf("%s/%s", s->vm->run, wid);
	_cleanup_free_ char *run = xasprintf("%s/%s", s->vm->run, spec->id);
	uint64_t dmb = spec->limits.disk_mb ? spec->limits.disk_mb : NM_DEFAULT_DISK_MB;
	bool renamed = false, moved = false, cg_moved = false;

	if (access(sbx, F_OK) == 0) {
		r = err_set(err, EEXIST, "subvolume for sandbox %s exists", spec->id);
		goto fail;
	}
	if ((r = jail_rename(s, j, spec->id, err)) < 0)
		goto fail;
	renamed = true;
	if (rename(wsbx, sbx) < 0) {
		r = err_sys(err, "rename %s", wsbx);
		goto fail;
	}
	moved = true;
	if ((r = pool_qgroup_limit(sbx, dmb << 20, err)) < 0 ||
	    (r = cgroup_rename(&s->cg, wid, spec->id, err)) < 0)
		goto fail;
	cg_moved = true;
	vm_cleanup_run(s, spec->id);
	if (rename(wrun, run) < 0) {
		r = err_sys(err, "rename %s", wrun);
		goto fail;
	}
	if ((r = go(s, j, arg, err)) < 0 || (r = jail_activate(s, j, chan_dup, err)) < 0)
		goto fail;
	*pid = j->pid;
	return 0;
fail: {
	err_t e2 = { 0 };
	net_detach(s, j);
	if (j->pidfd >= 0)
		syscall(SYS_pidfd_send_signal, j->pidfd, SIGKILL, NULL, 0);
	cgroup_destroy(&s->cg, cg_moved ? spec->id : wid, &e2);
	if (pool_subvol_delete(moved ? sbx : wsbx, &e2) < 0)
		log_warn("warm %s cleanup: %s", wid, e2.msg);
	vm_cleanup_run(s, wid);
	if (renamed)
		vm_cleanup_run(s, spec->id);
}
	jail_unclaim(s, j);
	return r;
}

/* A warm QEMU's state was restored and its guest warmed at spawn
 * (warm_guest): it only needs its vCPUs. */
static int warm_go(struct nm_server *s, struct jail *j, void *arg, err_t *err)
{
	(void)s;
	(void)arg;
	return qmp_exec(j->qmp, "cont", NULL, -1, VM_QMP_TIMEOUT_MS, NULL, err);
}

/* Make a warm QEMU sandbox id. -EAGAIN when none is waiting. */
static int warm_take(struct nm_server *s, const struct nm_sandbox_spec *spec,
		     const struct vm_shape *sh, int *chan_dup, pid_t *pid, err_t *err)
{
	char key[96], wid[65];
	struct jail *j;

	warm_key(spec, sh, key, sizeof(key));
	if (!(j = pool_pick(s, key, wid)))
		return -EAGAIN;
	return pool_adopt(s, j, wid, spec, warm_go, NULL, chan_dup, pid, err);
}

/* ---- fork standbys -----------------------------------------------------
 *
 * A vm fork child is a new QEMU that maps the fork snapshot's RAM file
 * MAP_PRIVATE and loads its device state (vm_boot_in_place). Spawning that
 * QEMU (jail, exec, machine init, monitor greeting) was 55-90 ms of a
 * ~250 ms fork here, and with KVM, where the guest's own part is a few ms,
 * it would be most of a fork. So per template and shape up to
 * cfg->vm_fork_pool QEMUs wait already spawned and jailed in -incoming
 * defer, on a subvolume made from the template (pool/warm/<wid>, its disk
 * rootfs.ext4) and a RAM file of the guest's size (pool/warm/<wid>.mem),
 * neither of them read by the QEMU yet. A fork clones the snapshot's disk
 * and RAM file into those two files (FICLONE of the whole file: the
 * destination's extents are replaced and its page cache dropped, so every
 * page the QEMU has not written reads the new contents), renames the
 * standby to the child as the warm pool does, loads the device state and
 * starts the vCPUs. That the QEMU wrote no page of its RAM before that is
 * checked when it is parked (ram_written: none, else it is not kept); the
 * kernel's side of it by test-nodemgr-delta. The RAM file is unlinked once
 * the fork has it (its mapping keeps it; a full snapshot of the child
 * finds it through /proc/<pid>/map_files). A standby holds nothing of any
 * parent before a fork takes it. It is spawned at nice 19 and its threads
 * set back to 0 when taken: the refill after a fork runs while that fork's
 * child runs its first guest code, and on 2 cores they competed (fork of 1
 * p50 335-349 ms either way before, 313-319 ms with it). */

static void standby_key(const struct nm_sandbox_spec *spec, const struct vm_shape *sh, char *out,
			size_t cap)
{
	snprintf(out, cap, "fork:%s/%u/m%" PRIu32 "-c%" PRIu32, spec->template_name,
		 spec->template_version, sh->mem_mb, sh->cpus);
}

static int standby_spawn(struct nm_server *s, const struct nm_sandbox_spec *spec,
			 const struct vm_shape *sh, err_t *err)
{
	return park_spawn(s, spec, sh, true, err);
}

static uint32_t standby_size(const struct nm_server *s)
{
	return s->cfg->vm_fork_pool;
}

static const struct pool_kind standby_kind = {
	.name = "fork standby", .key = standby_key, .spawn = standby_spawn, .size = standby_size,
	.idx = 1,
};

static void standby_refill(struct nm_server *s, const struct nm_sandbox_spec *spec)
{
	pool_refill(s, &standby_kind, spec);
}

/* What a fork puts into a standby: the snapshot's files, and the
 * standby's RAM file. */
struct standby_fill {
	const char *disk, *mem, *state, *wmem;
};

/* dst (existing, the same size) = src, extents shared. */
static int clone_into(const char *src, const char *dst, err_t *err)
{
	_cleanup_close_ int in = open(src, O_RDONLY | O_CLOEXEC);
	_cleanup_close_ int out = open(dst, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);

	if (in < 0 || out < 0)
		return err_sys(err, "open %s", in < 0 ? src : dst);
	if (ioctl(out, FICLONE, in) < 0)
		return err_sys(err, "reflink %s into %s", src, dst);
	return 0;
}

/* Every thread of pid back to nice 0 (threads it makes later inherit
 * that). */
static int renice_all(pid_t pid, err_t *err)
{
	_cleanup_free_ char *dir = xasprintf("/proc/%d/task", (int)pid);
	DIR *d = opendir(dir);
	struct dirent *de;
	int r = 0;

	if (!d)
		return err_sys(err, "open %s", dir);
	while ((de = readdir(d)))
		if (de->d_name[0] != '.' &&
		    setpriority(PRIO_PROCESS, (id_t)atoi(de->d_name), 0) < 0 && errno != ESRCH)
			r = err_sys(err, "renice qemu %d", (int)pid);
	closedir(d);
	return r;
}

static int standby_go(struct nm_server *s, struct jail *j, void *arg, err_t *err)
{
	struct standby_fill *f = arg;
	_cleanup_free_ char *disk = xasprintf("%s/sandboxes/%s/rootfs.ext4", s->pool, j->id);
	int r;

	if ((r = renice_all(j->pid, err)) < 0)
		return r;
	if ((r = clone_into(f->disk, disk, err)) < 0 || (r = clone_into(f->mem, f->wmem, err)) < 0)
		return r;
	return restore_state(j->qmp, f->state, err);
}

/* st_size of path, or -1. */
static off_t size_of(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode) ? st.st_size : -1;
}

int vm_fork_standby(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *parent,
		    const char *snap, int *chan_dup, pid_t *pid, err_t *err)
{
	_cleanup_free_ char *snapdir = xasprintf("%s/snapshots/%s/%s", s->pool, parent, snap);
	_cleanup_free_ char *disk = xasprintf("%s/rootfs.ext4", snapdir);
	_cleanup_free_ char *mem = xasprintf("%s" VM_MEM_SUFFIX, snapdir);
	_cleanup_free_ char *state = xasprintf("%s" VM_FULL_SUFFIX, snapdir);
	_cleanup_free_ char *tdisk = xasprintf("%s/templates/%s/%u/rootfs.ext4", s->pool,
					       spec->template_name, spec->template_version);
	uint32_t cpu_millis = spec->limits.cpu_millis ? spec->limits.cpu_millis : 1000;
	char key[96], wid[65];
	struct vm_shape sh;
	struct jail *j;
	int r;

	if (!s->vm || !s->vm->usable)
		return -EAGAIN;
	shape_of(spec, &sh);
	/* A memory-file snapshot (a stream is loaded whole, vm_boot_in_place)
	 * of a disk the template's size, and the CPU quota a standby has. */
	if (cpu_millis != sh.cpus * 1000 || size_of(state) < 0 ||
	    size_of(mem) != (off_t)((uint64_t)sh.mem_mb << 20) || size_of(disk) < 0 ||
	    size_of(disk) != size_of(tdisk))
		return -EAGAIN;
	standby_key(spec, &sh, key, sizeof(key));
	if (!(j = pool_pick(s, key, wid))) {
		standby_refill(s, spec);
		return -EAGAIN;
	}
	_cleanup_free_ char *wmem = xasprintf("%s/warm/%s.mem", s->pool, wid);
	struct standby_fill f = { .disk = disk, .mem = mem, .state = state, .wmem = wmem };
	r = pool_adopt(s, j, wid, spec, standby_go, &f, chan_dup, pid, err);
	unlink(wmem);
	standby_refill(s, spec);
	return r;
}

/* Startup: warm subvolumes and run dirs of a previous run (their QEMUs were
 * killed with their cgroups by the sweep). */
static void warm_sweep(struct nm_server *s)
{
	_cleanup_free_ char *wdir = xasprintf("%s/warm", s->pool);
	DIR *d = opendir(wdir);
	struct dirent *de;

	while (d && (de = readdir(d))) {
		if (strncmp(de->d_name, "warm-", 5))
			continue;
		_cleanup_free_ char *p = xasprintf("%s/%s", wdir, de->d_name);
		err_t e = { 0 };
		size_t len = strlen(de->d_name);
		if (len > 4 && !strcmp(de->d_name + len - 4, ".mem")) {
			unlink(p);   /* a fork standby's RAM file */
			continue;
		}
		if (pool_subvol_delete(p, &e) < 0)
			log_warn("sweep %s: %s", p, e.msg);
	}
	if (d)
		closedir(d);
	d = opendir(s->vm->run);
	while (d && (de = readdir(d)))
		if (!strncmp(de->d_name, "warm-", 5) || !strncmp(de->d_name, "tmpl-", 5))
			rm_rf_at(dirfd(d), de->d_name);
	if (d)
		closedir(d);
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
	shape_of(spec, &sh);
	if (sh.mem_mb < 64 || sh.mem_mb > 65536 || sh.cpus > 64)
		return err_set(err, EINVAL, "vm memory %u MiB or %u vCPUs out of range", sh.mem_mb,
			       sh.cpus);
	if (mode == NM_VM_TEMPLATE)
		template_jail_id(spec, &sh, id, sizeof(id));
	else
		snprintf(id, sizeof(id), "%s", spec->id);
	tmpl = xasprintf("%s/templates/%s/%u", s->pool, spec->template_name, spec->template_version);
	cache = cache_dir(s, spec, &sh);
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
		r = warm_take(s, spec, &sh, chan_dup, pid, err);
		if (r != -EAGAIN) {
			if (r == 0)
				log_info("vm %s: warm qemu pid %d restored in %.1f ms", spec->id,
					 (int)*pid, (now_us() - t0) / 1000.0);
			warm_refill(s, spec);
			return r;
		}
	}
	if (!(j = jail_claim(s, id, err)))
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
		if ((r = reflink(src, disk, err)) < 0)
			goto fail;
		mem = xasprintf("%s/mem", cache);
		unlink(mem);
		_cleanup_close_ int mfd = open(mem, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0660);
		if (mfd < 0 || ftruncate(mfd, (off_t)sh.mem_mb << 20) < 0 ||
		    fchown(mfd, 0, VM_SHARED_GID) < 0 || fchmod(mfd, 0660) < 0) {
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
		if ((r = pool_qgroup_limit(sbx, dmb << 20, err)) < 0)
			goto fail;
		if (mode == NM_VM_CLONE) {
			/* The disk exactly as the saved VM saw it. */
			_cleanup_free_ char *src = xasprintf("%s/rootfs.ext4", cache);
			if ((r = reflink(src, disk, err)) < 0)
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
	uint64_t t1 = now_us();
	if (mode == NM_VM_CLONE && (r = restore_state(q, vmstate, err)) < 0)
		goto fail_started;
	j->qmp = TAKE_PTR(q);
	r = jail_publish(s, j, qpid, chan, chan_dup, err);
	chan = -1;
	if (r < 0)
		goto fail_started;
	*pid = qpid;
	log_info("vm %s: qemu pid %d (%s, %u MiB, %u vCPU, uid %#x): qmp %.1f ms, ready %.1f ms",
		 id, (int)qpid, mode == NM_VM_COLD ? "cold" : mode == NM_VM_CLONE ? "clone" : "template",
		 sh.mem_mb, sh.cpus, uid, (t1 - t0) / 1000.0, (now_us() - t0) / 1000.0);
	if (mode == NM_VM_CLONE)
		warm_refill(s, spec);
	return 0;

fail_started: {
	err_t e2 = { 0 };
	net_detach(s, j);
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
	jail_unclaim(s, j);
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
	shape_of(spec, &sh);
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
	/* A full snapshot's stream holds all of guest RAM (and the device
	 * state); this QEMU's RAM is anonymous and takes it whole. A delta
	 * snapshot's RAM is its file, mapped private as a clone maps the
	 * template's; the state is the devices only. */
	if (vmstate && (r = restore_state(q, vmstate, err)) < 0) {
		err_t e2 = { 0 };
		qmp_close(q);
		close(chan);
		net_detach(s, j);
		if (cgroup_destroy(&s->cg, j->id, &e2) < 0)
			log_warn("vm restore %s cleanup: %s", j->id, e2.msg);
		vm_cleanup_run(s, j->id);
		return r;
	}
	qmp_close(j->qmp);
	j->qmp = TAKE_PTR(q);
	r = jail_publish(s, j, qpid, chan, chan_dup, err);
	if (r < 0) {
		err_t e2 = { 0 };
		net_detach(s, j);
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
	j = jail_find_locked(s, id);
	if (j && (j->busy || !j->vm))
		j = NULL;
	if (j)
		j->busy = true;
	pthread_mutex_unlock(&s->lock);
	return j;
}

int vm_template_save(struct nm_server *s, const struct nm_sandbox_spec *spec, bool discard,
		     err_t *err)
{
	struct vm_shape sh;
	char id[65];
	_cleanup_free_ char *cache = NULL, *tmp = NULL, *vmstate = NULL, *ready = NULL,
			    *disk = NULL, *mem = NULL, *st = NULL;
	_cleanup_close_ int fd = -1;
	bool saved = false;
	struct jail *j;
	int r;

	shape_of(spec, &sh);
	template_jail_id(spec, &sh, id, sizeof(id));
	if (!(j = find_claim(s, id)))
		return err_set(err, ENOENT, "no template vm running for %s/%u", spec->template_name,
			       spec->template_version);
	cache = cache_dir(s, spec, &sh);
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
	/* The boot's console log, for the clones' logs (seed_console). */
	{
		_cleanup_free_ char *log = xasprintf("%s/%s/console.log", s->vm->run, id);
		_cleanup_free_ char *keep = xasprintf("%s/console.log", cache);
		unlink(keep);
		if (copy_tail(log, keep, 0) < 0)
			log_warn("template boot log %s: %s", keep, strerror(errno));
	}
	/* Clones get their own reflinked copy of this disk; keep it root's. */
	if (chown(disk, 0, 0) < 0 || chmod(disk, 0644) < 0) {
		r = err_sys(err, "chown %s", disk);
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
	saved = true;
out:
	{
		err_t e2 = { 0 };
		net_detach(s, j);
		if (j->pidfd >= 0)
			syscall(SYS_pidfd_send_signal, j->pidfd, SIGKILL, NULL, 0);
		if (cgroup_destroy(&s->cg, id, &e2) < 0)
			log_warn("template vm %s cleanup: %s", id, e2.msg);
		vm_cleanup_run(s, id);
		st = xasprintf("%s/%s.state", s->run_dir, id);
		unlink(st);
	}
	jail_unclaim(s, j);
	if (saved)
		warm_refill(s, spec);
	return r;
}
