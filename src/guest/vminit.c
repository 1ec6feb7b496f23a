/* vminit.c - airlock-guest as init of a microVM (the vm backend).
 *
 * The kernel starts us as /init from the initramfs that scripts/vm-kernel.sh
 * built: that image holds only us, a few modules and /etc/airlock/modules
 * (their paths, in load order). We then, in this order:
 *
 *   1. mount devtmpfs on /dev and give ourselves fds 0-2 on /dev/console
 *      (the serial port the host captures to the sandbox's console log);
 *   2. mount /proc and /sys, read the kernel command line;
 *   3. load the modules (finit_module, in the listed order: virtio_ring,
 *      virtio, virtio_mmio, then the device drivers);
 *   4. wait for the rootfs disk (/dev/vda) and the channel, the virtio-serial
 *      port named "airlock" (/sys/class/virtio-ports/vportNpM/name);
 *   5. mount the disk (ext4) on /newroot, move /dev /proc /sys into it, delete
 *      the initramfs' files (they would hold RAM for nothing) and make
 *      /newroot the root: the classic switch_root (MS_MOVE onto /, chroot);
 *   6. devpts, /dev/shm, the /dev/fd links, /etc/machine-id and
 *      /etc/resolv.conf in memory, lo up, eth0's fixed address, the hostname;
 *   7. stop the PIT's channel 0 when the kernel does not use it.
 *
 * We stay PID 1 afterwards and run the ordinary agent with the port as the
 * channel. Any failure here is fatal: the message goes to the console and we
 * exit, the kernel panics ("Attempted to kill init") and, with panic=-1 on
 * the command line, resets the VM, which QEMU's -no-reboot turns into an exit
 * that the host notices.
 *
 * Command line (all optional): airlock.hostname=NAME, airlock.root=/dev/vda,
 * airlock.port=airlock; MODULE.PARAM=VALUE for the modules we load.
 *
 * QEMU: -M microvm with ACPI on (the default): Debian's kernel lacks
 * CONFIG_VIRTIO_MMIO_CMDLINE_DEVICES, so ACPI is its only way to find the
 * virtio-mmio devices. Under TCG the kernel cannot calibrate the TSC there
 * (no HPET or PM timer, the PIT calibration fails under emulation) and hangs
 * after "tsc: Marking TSC unstable"; the host must pass tsc_early_khz=<the
 * host's TSC kHz> (TCG's guest TSC is the host's) and tsc=reliable (else the
 * clocksource watchdog, comparing with late emulated ticks, throws the TSC
 * out and guest time runs slow).
 */
#include "guest.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <sys/io.h>
#endif

#include "../lib/ident.h"

#define MODULES_LIST "/etc/airlock/modules"
#define NEWROOT "/newroot"
#define DEVICE_WAIT_MS 20000       /* TCG is slow; the host's own timeout is the real bound */

struct vm_opts {
	char hostname[PROTO_HOSTNAME_MAX + 1];
	char root[64];
	char port[64];
	char cmdline[4096];
};

static void vlog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void vlog(const char *fmt, ...)
{
	va_list ap;

	fputs("airlock-guest: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

#define FAIL(...) (vlog(__VA_ARGS__), -1)

bool vm_detect(void)
{
	struct stat st;

	/* The ns backend and the tests hand us a socket on fd 3 (or name the fd
	 * in AIRLOCK_CHANNEL_FD); as init of a VM we have neither. */
	if (getpid() != 1 || getenv("AIRLOCK_CHANNEL_FD"))
		return false;
	return fstat(3, &st) < 0 || !S_ISSOCK(st.st_mode);
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* ---- 1, 2: the early mounts and the command line -------------------------- */

static int mount_dir(const char *src, const char *dst, const char *type, unsigned long fl,
		     const char *data)
{
	(void)mkdir(dst, 0755);
	if (mount(src, dst, type, fl, data) < 0 && errno != EBUSY)
		return FAIL("mount %s on %s: %s", type, dst, strerror(errno));
	return 0;
}

static void console_fds(void)
{
	/* The initramfs has no /dev/console node, so the kernel started us
	 * with 0-2 closed. */
	int con = open("/dev/console", O_RDWR | O_NOCTTY | O_CLOEXEC);

	if (con < 0)
		con = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (con < 0)
		return;
	for (int fd = 0; fd < 3; fd++)
		if (fd != con && fcntl(fd, F_GETFD) < 0)
			(void)dup2(con, fd);
	if (con > 2)
		close(con);
	else
		(void)fcntl(con, F_SETFD, 0);
}

static void copy_opt(char *dst, size_t cap, const char *v, size_t n)
{
	if (n >= cap)
		n = cap - 1;
	memcpy(dst, v, n);
	dst[n] = '\0';
}

/* Reads /proc/cmdline into o->cmdline (kept for the module parameters) and
 * picks out our options. */
static void parse_cmdline(struct vm_opts *o)
{
	struct buf b;

	buf_init(&b);
	if (read_file("/proc/cmdline", 4096, &b) == 0) {
		snprintf(o->cmdline, sizeof(o->cmdline), "%s", b.data);
		for (char *s = b.data, *tok; (tok = strsep(&s, " \t\n"));) {
			size_t n = strlen(tok);
			if (!strncmp(tok, "airlock.hostname=", 17))
				copy_opt(o->hostname, sizeof(o->hostname), tok + 17, n - 17);
			else if (!strncmp(tok, "airlock.root=", 13))
				copy_opt(o->root, sizeof(o->root), tok + 13, n - 13);
			else if (!strncmp(tok, "airlock.port=", 13))
				copy_opt(o->port, sizeof(o->port), tok + 13, n - 13);
		}
	}
	buf_free(&b);
}

/* ---- 3: modules ------------------------------------------------------------ */

/* The parameters of module `name` from the kernel command line: the kernel
 * applies "name.param=value" only to built-in code and leaves it to whoever
 * loads a module (modprobe, normally; us here). QEMU's microvm with acpi=off
 * describes its virtio-mmio devices this way (virtio_mmio.device=...). */
static void module_params(const char *cmdline, const char *path, struct buf *out)
{
	char name[64];
	const char *base = strrchr(path, '/');
	size_t n;

	base = base ? base + 1 : path;
	n = strcspn(base, ".");
	if (n >= sizeof(name))
		n = sizeof(name) - 1;
	memcpy(name, base, n);
	name[n] = '\0';
	for (char *c = name; *c; c++)
		if (*c == '-')
			*c = '_';
	buf_reset(out);
	for (const char *s = cmdline; *s;) {
		size_t len = strcspn(s, " \t\n");
		if (len > n + 1 && !strncmp(s, name, n) && s[n] == '.') {
			if (out->len)
				buf_addc(out, ' ');
			buf_add(out, s + n + 1, len - n - 1);
		}
		s += len;
		s += strspn(s, " \t\n");
	}
}

static int load_modules(const char *cmdline)
{
	struct buf b, params;
	int r = 0;

	buf_init(&b);
	buf_init(&params);
	if (read_file(MODULES_LIST, 1 << 16, &b) < 0) {
		/* A kernel with everything built in needs no list. */
		buf_free(&b);
		return 0;
	}
	for (char *s = b.data, *path; (path = strsep(&s, "\n"));) {
		if (!path[0])
			continue;
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			r = FAIL("module %s: %s", path, strerror(errno));
			break;
		}
		module_params(cmdline, path, &params);
		long k = syscall(SYS_finit_module, fd, params.len ? params.data : "", 0);
		int e = errno;
		close(fd);
		if (k < 0 && e != EEXIST) {
			r = FAIL("load module %s: %s", path, strerror(e));
			break;
		}
	}
	buf_free(&b);
	buf_free(&params);
	return r;
}

/* ---- 4: devices ------------------------------------------------------------ */

/* The port whose name attribute is `name`: "/dev/vportNpM" in out. The name
 * arrives from the host in a control message after the port itself, so a
 * port can exist for a while without it. */
static bool find_port(const char *name, char *out, size_t cap)
{
	DIR *d = opendir("/sys/class/virtio-ports");
	struct dirent *e;
	bool found = false;

	if (!d)
		return false;
	while (!found && (e = readdir(d))) {
		char p[300];
		struct buf b;
		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "/sys/class/virtio-ports/%s/name", e->d_name);
		buf_init(&b);
		if (read_file(p, 256, &b) == 0) {
			while (b.len && b.data[b.len - 1] == '\n')
				b.data[--b.len] = '\0';
			if (!strcmp(b.data, name)) {
				snprintf(out, cap, "/dev/%s", e->d_name);
				found = true;
			}
		}
		buf_free(&b);
	}
	closedir(d);
	return found;
}

/* On failure: what the kernel did find, for the console log. */
static void dump_dir(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	struct buf b;

	buf_init(&b);
	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.')
			buf_printf(&b, " %s", e->d_name);
	if (d)
		closedir(d);
	vlog("%s:%s", path, b.len ? b.data : " (nothing)");
	buf_free(&b);
}

/* Wait for the disk and the port; returns the port opened (read-write, once:
 * a second open fails with EBUSY). */
static int wait_devices(const struct vm_opts *o)
{
	uint64_t deadline = now_ms() + DEVICE_WAIT_MS;
	char port[300] = "";
	struct stat st;
	bool disk = false;

	for (unsigned delay = 1;; delay = delay < 16 ? delay * 2 : 16) {
		if (!disk)
			disk = stat(o->root, &st) == 0 && S_ISBLK(st.st_mode);
		if (!port[0])
			(void)find_port(o->port, port, sizeof(port));
		if (disk && port[0]) {
			int fd = open(port, O_RDWR | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
			if (fd >= 0)
				return fd;
			if (errno != ENOENT)
				return FAIL("open %s: %s", port, strerror(errno));
		}
		if (now_ms() >= deadline) {
			dump_dir("/sys/bus/virtio/devices");
			dump_dir("/sys/bus/platform/devices");
			dump_dir("/sys/class/block");
			dump_dir("/sys/class/virtio-ports");
			if (!disk)
				return FAIL("no disk %s after %d ms", o->root, DEVICE_WAIT_MS);
			return FAIL("no virtio-serial port named \"%s\" after %d ms", o->port,
				    DEVICE_WAIT_MS);
		}
		sleep_ms(delay);
	}
}

/* ---- 5: switch root -------------------------------------------------------- */

/* Remove everything under dirfd that lives on device dev (the initramfs),
 * without crossing into other file systems (the new root, moved mounts). */
static void delete_contents(int dirfd, dev_t dev)
{
	DIR *d = fdopendir(dirfd);
	struct dirent *e;

	if (!d) {
		close(dirfd);
		return;
	}
	while ((e = readdir(d))) {
		struct stat st;
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || st.st_dev != dev)
			continue;
		if (S_ISDIR(st.st_mode)) {
			int sub = openat(dirfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub >= 0)
				delete_contents(sub, dev);
			(void)unlinkat(dirfd, e->d_name, AT_REMOVEDIR);
		} else {
			(void)unlinkat(dirfd, e->d_name, 0);
		}
	}
	closedir(d);
}

static int switch_root(const char *root)
{
	static const char *const moves[] = { "/dev", "/proc", "/sys" };
	struct stat st;
	int fd;

	/* noinit_itable, no_prefetch_block_bitmaps: no ext4 lazyinit thread.
	 * It zeroes the inode tables mkfs left uninitialised and prefetches
	 * block bitmaps in the background, so every clone of a template kept
	 * doing it after its restore: disk writes into its reflinked disk and,
	 * under TCG, ~0.3 MiB of freshly translated code in its first idle
	 * seconds. ext4 tracks uninitialised inode tables itself, so leaving
	 * them unzeroed is safe; the allocator reads a group's bitmap when it
	 * first needs it. noatime: with relatime, the first read of a file
	 * whose atime is a day old (every file of a template a day after it
	 * was built) dirties its inode, and every clone then ran a journal
	 * commit, and translated it, a few seconds into its idle time. */
	if (mount_dir(root, NEWROOT, "ext4", MS_NOATIME, "noinit_itable,no_prefetch_block_bitmaps") < 0)
		return -1;
	for (size_t i = 0; i < ARRAY_SIZE(moves); i++) {
		char dst[64];
		snprintf(dst, sizeof(dst), NEWROOT "%s", moves[i]);
		(void)mkdir(dst, 0755);
		if (mount(moves[i], dst, NULL, MS_MOVE, NULL) < 0)
			return FAIL("move %s to %s: %s", moves[i], dst, strerror(errno));
	}
	if (chdir(NEWROOT) < 0)
		return FAIL("chdir " NEWROOT ": %s", strerror(errno));
	/* Free the initramfs (rootfs is RAM and cannot be unmounted). */
	fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0 && fstat(fd, &st) == 0)
		delete_contents(fd, st.st_dev);
	else if (fd >= 0)
		close(fd);
	if (mount(".", "/", NULL, MS_MOVE, NULL) < 0)
		return FAIL("move " NEWROOT " to /: %s", strerror(errno));
	if (chroot(".") < 0 || chdir("/") < 0)
		return FAIL("chroot: %s", strerror(errno));
	return 0;
}

/* ---- 6: the rest of the environment ---------------------------------------- */

/* What the ns jail gives a sandbox (jail-mount.c) and devtmpfs does not:
 * devpts, /dev/shm and the /dev/fd links. */
static int finish_dev(void)
{
	static const char *const links[][2] = {
		{ "/proc/self/fd", "/dev/fd" }, { "/proc/self/fd/0", "/dev/stdin" },
		{ "/proc/self/fd/1", "/dev/stdout" }, { "/proc/self/fd/2", "/dev/stderr" },
	};

	if (mount_dir("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
		      "ptmxmode=0666,mode=0620,gid=5") < 0)
		return -1;
	/* devtmpfs's /dev/ptmx is the legacy node; it resolves to /dev/pts. */
	(void)mkdir("/dev/shm", 01777);
	if (mount("shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") < 0)
		return FAIL("mount /dev/shm: %s", strerror(errno));
	for (size_t i = 0; i < ARRAY_SIZE(links); i++)
		if (symlink(links[i][0], links[i][1]) < 0 && errno != EEXIST)
			return FAIL("symlink %s: %s", links[i][1], strerror(errno));
	return 0;
}

/* /etc/machine-id and /etc/resolv.conf as files of a small tmpfs, each
 * bind-mounted over its path (as a container runtime mounts resolv.conf),
 * holding what the image had. RESET writes both in every clone and every
 * fork child; on the disk, each write was a dirty page, an inode in the
 * journal and, for resolv.conf's tmp + rename, a new block: ~5 s later the
 * clone ran ext4 writeback and a jbd2 commit for the first time in its
 * QEMU, which under TCG is ~1.5 MiB of freshly translated code per idle
 * sandbox, and a disk delta in every one. In memory, a clone's disk stays
 * as its template's until the sandbox itself writes. The tmpfs is detached
 * from /dev again; only the two mounts hold it. Best effort: a path that
 * cannot be mounted over stays on the disk, and RESET writes it there. */
static void etc_in_memory(void)
{
	static const struct {
		const char *path, *name;
		mode_t mode;
	} files[] = {
		{ "/etc/machine-id", "machine-id", 0444 },
		{ "/etc/resolv.conf", "resolv.conf", 0644 },
	};
	const char *dir = "/dev/.airlock-etc";

	(void)mkdir_p("/etc", 0755);
	if (mkdir(dir, 0700) < 0 ||
	    mount("airlock-etc", dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
		  "mode=0755,size=64k") < 0) {
		vlog("in-memory /etc files: %s", strerror(errno));
		(void)rmdir(dir);
		return;
	}
	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		char src[64], text[4096];
		ssize_t n = 0;
		struct stat st;
		int fd;

		/* The image's content, when it is a regular file (a symlink,
		 * e.g. to systemd-resolved's stub, is replaced, as RESET did). */
		fd = open(files[i].path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
			n = read(fd, text, sizeof(text));
		if (fd >= 0)
			close(fd);
		if (lstat(files[i].path, &st) < 0 || !S_ISREG(st.st_mode)) {
			(void)unlink(files[i].path);
			fd = open(files[i].path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
				  files[i].mode);
			if (fd < 0) {
				vlog("create %s: %s", files[i].path, strerror(errno));
				continue;
			}
			close(fd);
		}
		snprintf(src, sizeof(src), "%s/%s", dir, files[i].name);
		fd = open(src, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, files[i].mode);
		if (fd < 0 || (n > 0 && write(fd, text, (size_t)n) != n) ||
		    mount(src, files[i].path, NULL, MS_BIND, NULL) < 0)
			vlog("in-memory %s: %s", files[i].path, strerror(errno));
		if (fd >= 0)
			close(fd);
	}
	if (umount2(dir, MNT_DETACH) < 0 || rmdir(dir) < 0)
		vlog("detach %s: %s", dir, strerror(errno));
}

/* lo, and eth0 (the NIC, when QEMU has one; net_up addresses it). Up
 * already here so that virtio-net's receive buffers are allocated in the
 * boot that a template's memory snapshot saves, i.e. in RAM that every
 * clone shares, not anew in each clone. */
static void lo_up(void)
{
	static const char *const names[] = { "lo", "eth0" };
	struct ifreq ifr;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		memset(&ifr, 0, sizeof(ifr));
		snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", names[i]);
		if (ioctl(fd, SIOCGIFFLAGS, &ifr) == 0) {
			ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
			if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
				vlog("%s up: %s", names[i], strerror(errno));
		}
	}
	close(fd);
}

/* eth0 with the fixed vm network (proto.h PROTO_VM_NET_*): set here, in
 * the boot a template's memory snapshot saves, it is every clone's and fork
 * child's without a step of theirs. Under TCG configuring it in each clone
 * was ~1.2 MiB of freshly translated guest kernel code per idle sandbox.
 * QEMU's network namespace translates the address (nodemgr net.c); with
 * the network off nothing is behind the tap. No NIC: nothing to do. */
static void net_up(void)
{
	const char *step = "";
	int r;

	if (access("/sys/class/net/eth0", F_OK) < 0)
		return;
	r = guest_net_setup(PROTO_VM_NET_ADDR, PROTO_VM_NET_PREFIX, PROTO_VM_NET_GATEWAY,
			    PROTO_VM_NET_GATEWAY, &step);
	if (r < 0)
		vlog("eth0: %s: %s", step, strerror(-r));
}

/* The command line's name, else the image's /etc/hostname, else "sandbox". */
static void set_hostname(const struct vm_opts *o)
{
	char name[PROTO_HOSTNAME_MAX + 1] = "";
	struct buf b;

	if (o->hostname[0] && ident_hostname_ok(o->hostname)) {
		snprintf(name, sizeof(name), "%s", o->hostname);
	} else {
		buf_init(&b);
		if (read_file("/etc/hostname", 256, &b) == 0) {
			b.data[strcspn(b.data, " \t\r\n")] = '\0';
			if (ident_hostname_ok(b.data))
				snprintf(name, sizeof(name), "%s", b.data);
		}
		buf_free(&b);
	}
	if (!name[0])
		snprintf(name, sizeof(name), "sandbox");
	if (sethostname(name, strlen(name)) < 0)
		vlog("sethostname: %s", strerror(errno));
}

/* ---- 7: the PIT --------------------------------------------------------- */

/* Whether any clock event device in use is the PIT ("pit"): per CPU, and
 * the broadcast device. */
static bool pit_in_use(void)
{
	DIR *d = opendir("/sys/devices/system/clockevents");
	struct dirent *e;
	bool used = false;

	if (!d)
		return true;   /* cannot tell: leave it */
	while (!used && (e = readdir(d))) {
		char path[PATH_MAX], dev[32] = "";
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/sys/devices/system/clockevents/%s/current_device",
			 e->d_name);
		if (!(f = fopen(path, "re")))
			continue;
		if (fgets(dev, sizeof(dev), f) && !strncmp(dev, "pit", 3))
			used = true;
		fclose(f);
	}
	closedir(d);
	return used;
}

/* The PIT's channel 0 stays as the machine reset it (mode 3, a square wave
 * at 18.2 Hz) when the kernel keeps time with the TSC and the local APIC
 * timer, as this guest's does: Debian 12's kernel never touches it (6.1;
 * later kernels stop it themselves). Nothing reads it, but the hypervisor
 * emulates every edge of that wave: under TCG QEMU's main loop woke 36
 * times a second for it, two thirds of an idle clone's CPU time. Mode 0
 * with a zero count fires once and then stays quiet, as those later
 * kernels leave it. The template's saved device state holds it stopped, so
 * every clone inherits that. */
static void pit_stop(void)
{
#if defined(__x86_64__) || defined(__i386__)
	if (pit_in_use())
		return;
	if (ioperm(0x40, 4, 1) < 0) {
		vlog("ioperm for the PIT: %s (it keeps running)", strerror(errno));
		return;
	}
	outb(0x30, 0x43);   /* channel 0, low then high byte, mode 0 */
	outb(0, 0x40);
	outb(0, 0x40);
	ioperm(0x40, 4, 0);
#endif
}

int vm_init(void)
{
	struct vm_opts o = { .root = "/dev/vda", .port = "airlock" };
	uint64_t t0 = now_ms(), t_mod;
	int port;

	if (mount_dir("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755") < 0)
		return -1;
	console_fds();
	if (mount_dir("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0 ||
	    mount_dir("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		return -1;
	parse_cmdline(&o);
	if (load_modules(o.cmdline) < 0)
		return -1;
	t_mod = now_ms();
	if ((port = wait_devices(&o)) < 0)
		return -1;
	if (switch_root(o.root) < 0 || finish_dev() < 0) {
		close(port);
		return -1;
	}
	etc_in_memory();
	lo_up();
	net_up();
	set_hostname(&o);
	pit_stop();
	vlog("vm init done in %llu ms (modules %llu ms, devices %llu ms)",
	     (unsigned long long)(now_ms() - t0), (unsigned long long)(t_mod - t0),
	     (unsigned long long)(now_ms() - t_mod));
	return port;
}

int vm_port_async(int fd)
{
	/* SIGIO (blocked, read from the signalfd) tells us when the host end
	 * connects or disconnects: virtio_console signals every change of
	 * host_connected, and poll() alone cannot wait for a reconnect
	 * because a port without a host polls as POLLHUP continuously. */
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETOWN, getpid()) < 0 || fcntl(fd, F_SETFL, fl | O_ASYNC) < 0)
		return -errno;
	return 0;
}

bool vm_port_connected(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN | POLLOUT };

	if (poll(&p, 1, 0) < 0)
		return false;
	return !(p.revents & (POLLHUP | POLLERR | POLLNVAL));
}
