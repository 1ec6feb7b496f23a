/* test-vmboot: boots the real guest kernel and initramfs (<build>/vm, made by
 * scripts/vm-kernel.sh) under QEMU's microvm with a rootfs.ext4 made by
 * scripts/template-build.sh from the busybox template, and drives the guest
 * agent over the virtio-serial port with guestconn:
 *
 *   - cold boot time, from spawning QEMU to the agent's HELLO + READY;
 *   - /proc/version is the guest kernel's, not the host's; the hostname is
 *     the one from airlock.hostname= on the command line;
 *   - RESET: a clock one day ahead is applied, then the true time; the
 *     hostname and /etc/machine-id change; /dev/urandom reads differ;
 *   - eth0 (a NIC on a hub with no other port: nothing leaves) has the
 *     fixed vm network from the guest's boot, /etc/resolv.conf and
 *     /etc/machine-id are in memory; a RESET with another address
 *     readdresses it (a guest restored from an older snapshot), one with
 *     the fixed network puts it back;
 *   - the host end disconnects and reconnects: the guest says HELLO again.
 *
 * QEMU is killed by its pid on every path (and by PDEATHSIG if we die).
 * Exit 77 when QEMU, mkfs.ext4, busybox or the kernel output is missing, or
 * when not root. AIRLOCK_VM_DIR overrides where vmlinuz and the initramfs are. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <x86intrin.h>

#include "../../src/guestconn/guestconn.h"
#include "../../src/guestproto/proto.h"
#include "../unit/check.h"

#define QEMU "/usr/bin/qemu-system-x86_64"
#define HOSTNAME "vmboot-test"

static pid_t qemu_pid = -1;
static char tmp[] = "/tmp/airlock-test-vmboot-XXXXXX";

static void kill_qemu(void)
{
	if (qemu_pid > 0) {
		kill(qemu_pid, SIGKILL);
		waitpid(qemu_pid, NULL, 0);
		qemu_pid = -1;
	}
}

static void cleanup(void)
{
	char cmd[256];

	kill_qemu();
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
	(void)!system(cmd);
}

/* ---- what the guest's processes print ------------------------------------ */

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint32_t pid;
	struct buf out;
	bool exited;
	int code;
} R = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static void on_output(void *arg, uint32_t pid, int fd, uint64_t off, const void *d, size_t n)
{
	pthread_mutex_lock(&R.mu);
	if (fd == 1)
		buf_add(&R.out, d, n);
	pthread_mutex_unlock(&R.mu);
}

static void on_exit_cb(void *arg, uint32_t pid, int code, int sig)
{
	pthread_mutex_lock(&R.mu);
	R.exited = true;
	R.code = sig ? 128 + sig : code;
	pthread_cond_broadcast(&R.cv);
	pthread_mutex_unlock(&R.mu);
}

static const struct guestconn_cbs cbs = { on_output, on_exit_cb, NULL };

/* Run a shell command in the guest; its stdout (caller owns), or NULL. One
 * at a time: the callbacks above keep a single record. */
static char *run(struct guestconn *gc, const char *cmd)
{
	char *argv[] = { "/bin/sh", "-c", (char *)cmd, NULL };
	struct exec_spec spec = { .argv = argv };
	err_t err = { 0 };
	struct timespec ts;
	uint32_t pid;

	pthread_mutex_lock(&R.mu);
	buf_reset(&R.out);
	R.exited = false;
	pthread_mutex_unlock(&R.mu);
	if (guestconn_exec(gc, &spec, &pid, &err) < 0) {
		fprintf(stderr, "exec %s: %s\n", cmd, err.msg);
		return NULL;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 60;
	pthread_mutex_lock(&R.mu);
	while (!R.exited && pthread_cond_timedwait(&R.cv, &R.mu, &ts) != ETIMEDOUT)
		;
	char *out = R.exited && R.code == 0 ? xstrdup(R.out.data ? R.out.data : "") : NULL;
	pthread_mutex_unlock(&R.mu);
	if (!out)
		fprintf(stderr, "%s: failed or timed out\n", cmd);
	return out;
}

/* ---- QEMU ----------------------------------------------------------------- */

/* Under TCG the guest's TSC is the host's, but the guest cannot calibrate it
 * (no HPET or PM timer on microvm, PIT calibration fails under emulation)
 * and then hangs; tsc_early_khz tells it the frequency. */
static unsigned long host_tsc_khz(void)
{
	struct timespec a, b;
	uint64_t t0, t1;

	clock_gettime(CLOCK_MONOTONIC_RAW, &a);
	t0 = __rdtsc();
	do
		clock_gettime(CLOCK_MONOTONIC_RAW, &b);
	while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < 50000000L);
	t1 = __rdtsc();
	double ns = (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
	return (unsigned long)((double)(t1 - t0) / ns * 1e6);
}

static pid_t spawn_qemu(const char *vmdir, const char *disk, const char *sock, const char *log,
			const char *console)
{
	char kernel[4400], initrd[4400], append[256], drive[4400], chardev[4400], serial[4400];
	pid_t pid;

	snprintf(kernel, sizeof(kernel), "%s/vmlinuz", vmdir);
	snprintf(initrd, sizeof(initrd), "%s/initramfs.cpio.gz", vmdir);
	/* tsc=reliable: otherwise the clocksource watchdog, comparing the TSC
	 * with emulated ticks that arrive late, drops the TSC for jiffies and
	 * the guest's clock runs slow (AIRLOCK_VM_TSC="" shows it). */
	const char *tsc = getenv("AIRLOCK_VM_TSC");
	snprintf(append, sizeof(append),
		 "console=ttyS0 quiet panic=-1 tsc_early_khz=%lu %s airlock.hostname=" HOSTNAME,
		 host_tsc_khz(), tsc ? tsc : "tsc=reliable");
	snprintf(drive, sizeof(drive), "id=d,file=%s,format=raw,if=none", disk);
	snprintf(chardev, sizeof(chardev), "socket,id=ch,path=%s,server=on,wait=off", sock);
	snprintf(serial, sizeof(serial), "file:%s", console);
	char *argv[] = {
		"qemu-system-x86_64", "-M", "microvm", "-accel", "tcg", "-cpu", "max", "-m", "256",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-kernel", kernel, "-initrd", initrd, "-append", append,
		"-device", "virtio-blk-device,drive=d", "-drive", drive,
		"-device", "virtio-serial-device", "-chardev", chardev,
		"-device", "virtserialport,chardev=ch,name=airlock",
		"-netdev", "hubport,id=n0,hubid=0", "-device", "virtio-net-device,netdev=n0",
		"-serial", serial, NULL,
	};
	pid = fork();
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(QEMU, argv);
		_exit(127);
	}
	return pid;
}

/* Connect to QEMU's chardev socket (it appears once QEMU is up). */
static int connect_sock(const char *path, int timeout_ms)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	uint64_t deadline = now_ms() + (uint64_t)timeout_ms;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	for (;;) {
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -1;
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			return fd;
		close(fd);
		if (now_ms() >= deadline || (qemu_pid > 0 && waitpid(qemu_pid, NULL, WNOHANG) == qemu_pid))
			return -1;
		usleep(2000);
	}
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void test_reset(struct guestconn *gc)
{
	struct guest_reset x = { .hostname = "clone-one" };
	const char *mid_want = "0123456789abcdef0123456789abcdef";
	err_t err = { 0 };
	char *s, *u1, *u2;
	struct buf mid;

	/* A clock one day ahead is really applied... */
	x.wall_ns = realtime_ns() + 86400ull * 1000000000ull;
	CHECK(guestconn_reset(gc, &x, &err) == 0);
	if ((s = run(gc, "date +%s"))) {
		long d = atol(s) - (long)time(NULL);
		CHECK(d > 86400 - 30 && d < 86400 + 30);
		free(s);
	}
	/* ...and so is the true one, with a new name and machine id. */
	x = (struct guest_reset){ .set_clock = true, .hostname = "clone-two", .machine_id = mid_want };
	uint64_t t0 = now_ms();
	CHECK(guestconn_reset(gc, &x, &err) == 0);
	printf("test-vmboot: RESET answered in %llu ms\n", (unsigned long long)(now_ms() - t0));
	if ((s = run(gc, "date +%s"))) {
		long d = atol(s) - (long)time(NULL);
		CHECK(d >= -5 && d <= 5);
		free(s);
	}
	/* The clock keeps time: a few seconds later it still agrees with ours. */
	sleep(3);
	if ((s = run(gc, "date +%s"))) {
		long d = atol(s) - (long)time(NULL);
		if (d < -1 || d > 1)
			fprintf(stderr, "guest clock off by %ld s 3 s after RESET\n", d);
		CHECK(d >= -1 && d <= 1);
		free(s);
	}
	if ((s = run(gc, "hostname"))) {
		CHECK(!strcmp(s, "clone-two\n"));
		free(s);
	}
	buf_init(&mid);
	CHECK(guestconn_file_read(gc, "/etc/machine-id", 4096, &mid, &err) == 0);
	CHECK(mid.len == 33 && !strncmp(mid.data, mid_want, 32) && mid.data[32] == '\n');
	buf_free(&mid);
	u1 = run(gc, "head -c 32 /dev/urandom | od -An -tx1");
	u2 = run(gc, "head -c 32 /dev/urandom | od -An -tx1");
	CHECK(u1 && u2 && strlen(u1) > 60 && strcmp(u1, u2) != 0);
	free(u1);
	free(u2);

	/* Bad fields are refused by the encoder already. */
	x = (struct guest_reset){ .set_clock = true, .hostname = "bad name" };
	CHECK(guestconn_reset(gc, &x, &err) < 0 && err.code == EINVAL);
}

/* run(cmd) contains want (and says what it got when not). */
static void check_has(struct guestconn *gc, const char *cmd, const char *want)
{
	char *s = run(gc, cmd);

	if (!s || !strstr(s, want))
		fprintf(stderr, "`%s` lacks \"%s\":\n%s\n", cmd, want, s ? s : "(no output)");
	CHECK(s && strstr(s, want));
	free(s);
}

static void test_net(struct guestconn *gc)
{
	const char *show = "ip -4 addr show eth0; ip route; cat /etc/resolv.conf";
	struct guest_reset x = { .hostname = "net-one" };
	err_t err = { 0 };

	check_has(gc, show, "inet 100.96.0.2/30");
	check_has(gc, show, "default via 100.96.0.1 dev eth0");
	check_has(gc, show, "nameserver 100.96.0.1");
	check_has(gc, "grep -c -E ' /etc/(machine-id|resolv.conf) tmpfs ' /proc/mounts", "2");
	/* Another address (as an older snapshot's guest holds its sandbox's). */
	x.net_addr = 0x0afe0007;  /* 10.254.0.7/31 via .6 */
	x.net_prefix = 31;
	x.net_gateway = x.net_dns = 0x0afe0006;
	CHECK(guestconn_reset(gc, &x, &err) == 0);
	check_has(gc, show, "inet 10.254.0.7/31");
	check_has(gc, show, "default via 10.254.0.6 dev eth0");
	check_has(gc, show, "nameserver 10.254.0.6");
	/* The fixed network again, as the node sends it. */
	x = (struct guest_reset){ .hostname = "net-two", .net_addr = PROTO_VM_NET_ADDR,
				  .net_prefix = PROTO_VM_NET_PREFIX,
				  .net_gateway = PROTO_VM_NET_GATEWAY,
				  .net_dns = PROTO_VM_NET_GATEWAY };
	CHECK(guestconn_reset(gc, &x, &err) == 0);
	check_has(gc, show, "inet 100.96.0.2/30");
	check_has(gc, show, "default via 100.96.0.1 dev eth0");
	check_has(gc, show, "nameserver 100.96.0.1");
	char *s = run(gc, show);
	CHECK(s && !strstr(s, "10.254.0."));
	free(s);
}

int main(void)
{
	const char *bin = getenv("AIRLOCK_BIN"), *src = getenv("AIRLOCK_SRC");
	const char *vmdir_env = getenv("AIRLOCK_VM_DIR");
	char vmdir[4096], path[4300], sock[4300], disk[4300], log[4300], console[4300], cmd[9000];
	struct guest_hello hello;
	err_t err = { 0 };
	struct buf kver;
	struct utsname un;
	struct stat st;

	if (vmdir_env)
		snprintf(vmdir, sizeof(vmdir), "%s", vmdir_env);
	else
		snprintf(vmdir, sizeof(vmdir), "%s/../vm", bin ? bin : ".");
	snprintf(path, sizeof(path), "%s/initramfs.cpio.gz", vmdir);
	if (geteuid() != 0 || access(QEMU, X_OK) != 0 || access(path, R_OK) != 0 ||
	    system("command -v mkfs.ext4 >/dev/null") != 0 || access("/bin/busybox", X_OK) != 0) {
		fprintf(stderr, "test-vmboot: needs root, %s, mkfs.ext4, /bin/busybox and %s; skipping\n",
			QEMU, path);
		return 77;
	}
	buf_init(&kver);
	snprintf(path, sizeof(path), "%s/kernel.version", vmdir);
	if (read_file(path, 256, &kver) < 0 || !kver.len) {
		fprintf(stderr, "test-vmboot: no %s; skipping\n", path);
		return 77;
	}
	while (kver.len && kver.data[kver.len - 1] == '\n')
		kver.data[--kver.len] = '\0';
	signal(SIGPIPE, SIG_IGN);
	if (!mkdtemp(tmp)) {
		perror("mkdtemp");
		return 1;
	}
	atexit(cleanup);

	/* The rootfs image, exactly as a template build makes it. */
	uint64_t t_img = now_ms();
	snprintf(cmd, sizeof(cmd), "sh %s/scripts/template-build.sh busybox '' %s/rootfs >%s/build.log 2>&1",
		 src ? src : AIRLOCK_SOURCE_DIR, tmp, tmp);
	snprintf(disk, sizeof(disk), "%s/rootfs.ext4", tmp);
	if (system(cmd) != 0 || stat(disk, &st) < 0) {
		fprintf(stderr, "test-vmboot: template build failed (%s/build.log)\n", tmp);
		return 1;
	}
	printf("test-vmboot: busybox template with rootfs.ext4 (%lld MiB, %lld KiB allocated) in %llu ms\n",
	       (long long)st.st_size >> 20, (long long)st.st_blocks / 2,
	       (unsigned long long)(now_ms() - t_img));

	snprintf(sock, sizeof(sock), "%s/chan.sock", tmp);
	snprintf(log, sizeof(log), "%s/qemu.log", tmp);
	snprintf(console, sizeof(console), "%s/console.log", tmp);
	uint64_t t0 = now_ms();
	qemu_pid = spawn_qemu(vmdir, disk, sock, log, console);
	int fd = connect_sock(sock, 30000);
	struct guestconn *gc = fd >= 0 ? guestconn_open(fd, &cbs, NULL, 180000, &hello, &err) : NULL;
	if (!gc) {
		fprintf(stderr, "test-vmboot: no HELLO from the guest: %s\n", fd < 0 ? "no socket" : err.msg);
		snprintf(cmd, sizeof(cmd), "tail -n 30 %s %s >&2", log, console);
		(void)!system(cmd);
		return 1;
	}
	uint64_t boot_ms = now_ms() - t0;
	printf("test-vmboot: cold boot (QEMU spawn -> HELLO+READY) under TCG: %llu ms\n",
	       (unsigned long long)boot_ms);
	fflush(stdout);
	snprintf(cmd, sizeof(cmd), "grep airlock-guest %s", console);
	(void)!system(cmd);

	char *s = run(gc, "cat /proc/version");
	uname(&un);
	CHECK(s && strstr(s, kver.data));
	CHECK(s && (strcmp(un.release, kver.data) == 0 || !strstr(s, un.release)));
	if (s)
		printf("test-vmboot: guest %s", s);
	free(s);
	s = run(gc, "hostname");
	CHECK(s && !strcmp(s, HOSTNAME "\n"));
	free(s);
	s = run(gc, "cat /proc/1/comm; ls /; mount | grep -c ' / '");
	CHECK(s && !strncmp(s, "init\n", 5) && !strstr(s, "newroot"));
	free(s);

	test_reset(gc);
	test_net(gc);

	/* The host end goes away and comes back: the guest speaks first again. */
	guestconn_close(gc);
	usleep(200 * 1000);
	t0 = now_ms();
	fd = connect_sock(sock, 10000);
	gc = fd >= 0 ? guestconn_open(fd, &cbs, NULL, 30000, &hello, &err) : NULL;
	CHECK(gc != NULL);
	if (gc) {
		printf("test-vmboot: reconnect -> HELLO in %llu ms\n",
		       (unsigned long long)(now_ms() - t0));
		s = run(gc, "echo again");
		CHECK(s && !strcmp(s, "again\n"));
		free(s);
		guestconn_close(gc);
	} else {
		fprintf(stderr, "reconnect: %s\n", err.msg);
	}
	kill_qemu();
	buf_free(&kver);
	buf_free(&R.out);
	if (failures) {
		fflush(stdout);
		snprintf(cmd, sizeof(cmd), "tail -n 30 %s >&2", console);
		(void)!system(cmd);
		fprintf(stderr, "test-vmboot: %d failure(s)\n", failures);
		return 1;
	}
	printf("test-vmboot: ok\n");
	return 0;
}
