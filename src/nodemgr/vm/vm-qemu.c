/* vm-qemu.c - one QEMU in its jail: the jail child (mounts, uid, fds, exec)
 * and QEMU's command line, and vm_start, which runs them with the cgroup,
 * the run dir, the network and the monitor around them.
 *
 * Jail, in order (parent = nodemgr thread, child = the future QEMU):
 *   parent: claim an id and slot (host uid NM_UID_BASE + slot*65536, the
 *           same ranges as ns jails), cgroup with memory (RAM + overhead),
 *           CPU and pids limits, run dir owned by that uid, three socketpairs
 *           (QMP, guest channel, serial console) and an error pipe
 *   child:  join the cgroup; new mount, net (no devices but lo), ipc and uts
 *           namespaces; an empty tmpfs root holding only /usr (read-only,
 *           for QEMU's libraries and firmware), /dev/{null,urandom[,kvm]},
 *           the kernel, the initramfs, its disk, its RAM file (read-only
 *           when mapped private: see "RAM files" below) and its run
 *           dir; pivot_root; setgroups/setresgid/setresuid to its uid;
 *           no_new_privs; fds 3 (QMP), 4 (channel), 6 (tap) and 7 (serial)
 *           only; exec QEMU with
 *           -sandbox on (seccomp: no spawn, no privilege change)
 *   parent: EOF on the error pipe = exec'd; QMP greeting; for a clone the
 *           device state goes in over QMP as an fd (getfd), so QEMU never
 *           needs to see the state file or run a helper.
 *
 * The channel and QMP are socketpairs passed as fds (chardev socket,fd=N):
 * no socket file to race for, and nodemgr keeps the host ends for the VM's
 * life exactly as for ns jails (adopt hands out a new dup). When QEMU dies the
 * node sees EOF on its dup.
 *
 * RAM files. A QEMU whose RAM maps a file private (share=off: a clone of a
 * template's memory snapshot, a warm or fork standby QEMU, a restore from a
 * full snapshot's .mem) never writes that file, and several QEMUs may map
 * the same one (every clone of a template), so it must not be able to: the
 * file is root's, mode 0640 (group VM_SHARED_GID, which every vm jail has,
 * to read it), bound read-only at /mem, and QEMU opens it O_RDONLY. QEMU
 * 7.2 has no option for that (readonly=on maps the RAM PROT_READ; 8.2's
 * rom=off separates the two), so src/qemushim/romem.c is preloaded and turns
 * its open("/mem", O_RDWR) into O_RDONLY; a private writable map needs no
 * more. Only a template boot (share=on) maps its RAM file writable, a file
 * of its own uid until the save hands it to root (vm_template_save).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../../lib/log.h"
#include "../../lib/util.h"
#include "../../qmp/qmp.h"
#include "../jail/jail.h"
#include "../core/nodemgr-internal.h"
#include "vm-internal.h"

/* cgroup memory on top of guest RAM: the TCG code buffer (tb-size 64 MiB),
 * QEMU's heap and the page cache of its disk. */
#define VM_MEM_OVERHEAD_MB 192
#define VM_PIDS 256

/* ---- the jail ---------------------------------------------------------- */

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

/* QEMU maps its RAM file private: the file and QEMU's fd on it read-only. */
static bool mem_ro(const struct vm_launch *l)
{
	return l->mem && !l->mem_shared;
}

/* Runs in the child between fork and exec: no locks, no return. */
static void __attribute__((noreturn))
child_main(struct nm_server *s, const struct vm_launch *l, int qmp_fd, int chan_fd, int con_fd,
	   int efd, char *const *argv, const char *nat)
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
	int tap = nmnet_vm_tap();
	if (tap < 0)
		child_fail(efd, "tap");
	if (nat && nmnet_vm_nat(nat) < 0)
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
	if (mkdir("vm/lib", 0755) < 0)
		child_fail(efd, "mkdir vm/lib");
	if (vm->capstone && bind_at(vm->capstone, "vm/lib/libcapstone.so.4", false, true) < 0)
		child_fail(efd, "bind the libcapstone stand-in");
	if (mem_ro(l) && bind_at(vm->romem, "vm/lib/libairlock-romem.so", false, true) < 0)
		child_fail(efd, "bind libairlock-romem.so");
	if (bind_at(l->disk, "disk", false, false) < 0)
		child_fail(efd, "bind disk");
	if (l->mem && bind_at(l->mem, "mem", false, mem_ro(l)) < 0)
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
	 * 6 the tap, 7 the serial console (vm-console.c's pump reads it). */
	int hi_q = fcntl(qmp_fd, F_DUPFD, 10), hi_c = fcntl(chan_fd, F_DUPFD, 10),
	    hi_e = fcntl(efd, F_DUPFD_CLOEXEC, 10), hi_t = fcntl(tap, F_DUPFD, 10),
	    hi_o = fcntl(con_fd, F_DUPFD, 10), dn = open("/dev/null", O_RDWR);
	if (hi_q < 0 || hi_c < 0 || hi_e < 0 || hi_t < 0 || hi_o < 0 || dn < 0)
		child_fail(efd, "dup");
	efd = hi_e;
	if (dup2(dn, 0) < 0 || dup2(dn, 1) < 0 || dup2(dn, 2) < 0 || dup2(hi_q, 3) < 0 ||
	    dup2(hi_c, 4) < 0 || dup3(hi_e, 5, O_CLOEXEC) < 0 || dup2(hi_t, 6) < 0 ||
	    dup2(hi_o, 7) < 0)
		child_fail(efd, "dup2");
	efd = 5;
	if (syscall(SYS_close_range, 8, ~0u, 0) < 0)
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
	 * memory per QEMU); a QEMU that does not link Capstone ignores it.
	 * LD_PRELOAD: QEMU opens a private RAM file read-only (above). */
	char *envp[5] = { "PATH=/usr/bin", "G_SLICE=always-malloc" };
	int ne = 2;
	if (mem_ro(l))
		envp[ne++] = "LD_PRELOAD=/vm/lib/libairlock-romem.so";
	if (vm->capstone)
		envp[ne++] = "LD_LIBRARY_PATH=/vm/lib";
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
	/* The serial console: a socket whose other end nodemgr's console pump
	 * reads into run/console.log, bounded (vm-console.c); QEMU never
	 * writes the log itself, so a guest cannot grow it without end. A
	 * clone's log starts with the boot of the template it was cloned from
	 * (vm_start copies it in). loglevel=6 (not quiet): the kernel's banner
	 * and notices reach the log that GET .../console serves; a few KB at
	 * boot, nothing after. */
	A("-chardev");
	A("socket,id=con,fd=7");
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

/* Spawn QEMU in its jail. On success *pid is QEMU (our child), *qmp_out,
 * *chan_out and *con_out (the serial console) the host ends (caller owns).
 * The cgroup l->id must exist. */
static int spawn_qemu(struct nm_server *s, const struct vm_launch *l, pid_t *pid, int *qmp_out,
		      int *chan_out, int *con_out, err_t *err)
{
	int qsp[2] = { -1, -1 }, csp[2] = { -1, -1 }, osp[2] = { -1, -1 }, ep[2] = { -1, -1 };
	char **argv = build_argv(s, l);
	_cleanup_free_ char *nat = nmnet_vm_nat_rules(s, vm_slot(l));
	char msg[256];
	ssize_t n;
	pid_t c;
	int r = 0;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, qsp) < 0 ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, csp) < 0 ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, osp) < 0 ||
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
		child_main(s, l, qsp[1], csp[1], osp[1], ep[1], argv, nat);
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
	*con_out = TAKE_FD(osp[0]);
out:
	for (int i = 0; i < 2; i++) {
		if (qsp[i] >= 0)
			close(qsp[i]);
		if (csp[i] >= 0)
			close(csp[i]);
		if (osp[i] >= 0)
			close(osp[i]);
		if (ep[i] >= 0)
			close(ep[i]);
	}
	free_argv(argv);
	return r;
}

/* ---- starting QEMU ------------------------------------------------------ */

struct cgroup_limits vm_cgroup_limits(const struct vm_shape *sh, uint32_t cpu_millis)
{
	return (struct cgroup_limits){
		.memory_bytes = (uint64_t)(sh->mem_mb + VM_MEM_OVERHEAD_MB) << 20,
		.cpu_millis = cpu_millis ? cpu_millis : sh->cpus * 1000,
		.pids = VM_PIDS,
	};
}

/* cgroup, run dir, QEMU, its network, monitor. On failure everything this
 * made is gone (the subvolume and the jail entry are the caller's); once it
 * succeeded, the caller's cleanup must nmnet_detach too. */
int vm_start(struct nm_server *s, const struct vm_launch *l, uint32_t cpu_millis,
	     pid_t *qpid, int *chan, struct qmp **q, err_t *err)
{
	_cleanup_free_ char *run = xasprintf("%s/%s", s->vm->run, l->id);
	struct cgroup_limits cl = vm_cgroup_limits(&l->sh, cpu_millis);
	int qfd = -1, con = -1, log = -1, r;
	err_t e2 = { 0 };

	*qpid = -1;
	*chan = -1;
	*q = NULL;
	if ((r = cgroup_create(&s->cg, l->id, &cl, err)) < 0)
		goto fail;
	/* A RAM file saved by an older build was group-writable (0660). */
	struct stat st;
	if (mem_ro(l) && stat(l->mem, &st) == 0 && (st.st_mode & 022) &&
	    chmod(l->mem, st.st_mode & 0755) < 0) {
		r = err_sys(err, "chmod %s", l->mem);
		goto fail;
	}
	vm_cleanup_run(s, l->id);
	if (mkdir(run, 0700) < 0 || chown(run, l->uid, l->uid) < 0) {
		r = err_sys(err, "mkdir %s", run);
		goto fail;
	}
	if (l->boot_log)
		vm_console_seed(l->boot_log, run, l->uid);
	if ((r = log = vm_console_log_open(run, l->uid, err)) < 0)
		goto fail;
	if ((r = spawn_qemu(s, l, qpid, &qfd, chan, &con, err)) < 0) {
		close(log);
		goto fail;
	}
	/* Consumes both; on a failure QEMU's serial loses its peer and drops
	 * what the guest writes there; the sandbox itself works. */
	if (vm_console_attach(s, con, log, &e2) < 0)
		log_warn("vm %s: %s", l->id, e2.msg);
	/* The NIC's wiring, in place before the guest runs: a clone waits in
	 * -incoming, a cold guest takes longer to boot than this. */
	if ((r = nmnet_attach_vm(s, vm_slot(l), l->id, *qpid, err)) < 0)
		goto fail;
	if ((r = qmp_open_fd(qfd, VM_QMP_TIMEOUT_MS, q, err)) < 0) {
		err_wrap(err, "qemu monitor");
		goto fail;
	}
	return 0;
fail:
	nmnet_detach_slot(s, vm_slot(l), l->id);
	if (*chan >= 0)
		close(*chan);
	*chan = -1;
	/* Killing the cgroup kills QEMU (the reaper collects it). */
	if (cgroup_destroy(&s->cg, l->id, &e2) < 0)
		log_warn("vm %s cleanup: %s", l->id, e2.msg);
	vm_cleanup_run(s, l->id);
	return r;
}
