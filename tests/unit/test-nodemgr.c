/* test-nodemgr: the node manager end to end, as root, on a real btrfs loop
 * pool in a temp dir, with real namespaces and cgroups.
 *
 * nodemgr_run runs in a forked child. The guest is a stand-in: the host's
 * static /bin/busybox executed as `sh -c SCRIPT`, which reports what it sees
 * inside the jail on fd 3 (the channel) and then sleeps.
 *
 * cleanup() runs on every exit path: stop nodemgr (it kills its jails), kill
 * and remove whatever is left in this test's own cgroup parent, unmount the
 * pool (the loop device autoclears), remove the temp dir. Nothing is killed
 * by name.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../src/lib/log.h"
#include "../../src/lib/util.h"
#include "../../src/nmclient/nm.h"
#include "../../src/nodemgr/nodemgr.h"
#include "../../src/pool/pool.h"

static char tmpdir[] = "/tmp/airlock-test-nm.XXXXXX";
static bool have_tmp;
static char data[128], sock[160], pool[160], cgparent[64];
static pid_t nm_pid = -1;

static const char guest_script[] =
	"read h < /proc/sys/kernel/hostname\n"
	"case $h in bench*) exec sleep 100000;; esac\n"
	"exec 2>&3\n"
	"echo pid=$$ >&3\n"
	"echo host=$h >&3\n"
	"echo procs=$(ls -d /proc/[0-9]* | wc -l) >&3\n"
	"echo ifs=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' \\n') >&3\n"
	"echo uidmap=$(echo $(cat /proc/self/uid_map)) >&3\n"
	"echo uid=$(id -u) >&3\n"
	"echo owner=$(stat -c %u /etc/passwd) >&3\n"
	"mkdir -p /tmp/m; mount -t tmpfs x /tmp/m 2>/dev/null; echo mount=$? >&3\n"
	"test -e /work/f; echo sib=$? >&3\n"
	"echo hello > /work/f; echo wrote=$? >&3\n"
	"echo fowner=$(stat -c %u /work/f) >&3\n"
	"echo nnp=$(grep NoNewPrivs /proc/self/status | cut -f2) >&3\n"
	"echo seccomp=$(grep Seccomp: /proc/self/status | cut -f2) >&3\n"
	"echo capbnd=$(grep CapBnd /proc/self/status | cut -f2) >&3\n"
	"echo devs=$(ls /dev | tr '\\n' ' ') >&3\n"
	"echo END >&3\n"
	"exec sleep 100000\n";
static const char *guest_argv[] = { "sh", "-c", guest_script, NULL };

static void stop_nodemgr(void)
{
	int st;

	if (nm_pid <= 0)
		return;
	kill(nm_pid, SIGTERM);
	for (int i = 0; i < 200; i++) {
		if (waitpid(nm_pid, &st, WNOHANG) == nm_pid) {
			nm_pid = -1;
			return;
		}
		usleep(50000);
	}
	kill(nm_pid, SIGKILL);
	waitpid(nm_pid, &st, 0);
	nm_pid = -1;
}

/* Kill and remove every cgroup below this test's own parent. */
static void cleanup_cgroups(void)
{
	static const char *const ctrls[] = { "freezer", "memory", "cpu", "pids", "" };

	for (size_t i = 0; i < ARRAY_SIZE(ctrls); i++) {
		char dir[256];
		DIR *d;
		struct dirent *de;

		snprintf(dir, sizeof(dir), "/sys/fs/cgroup/%s%s%s", ctrls[i], *ctrls[i] ? "/" : "",
			 cgparent);
		if (!(d = opendir(dir)))
			continue;
		while ((de = readdir(d))) {
			char sub[600], procs[700], line[32];
			FILE *f;
			if (de->d_type != DT_DIR || de->d_name[0] == '.')
				continue;
			snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name);
			snprintf(procs, sizeof(procs), "%s/cgroup.procs", sub);
			for (int round = 0; round < 100 && rmdir(sub) < 0 && errno == EBUSY; round++) {
				if ((f = fopen(procs, "r"))) {
					while (fgets(line, sizeof(line), f))
						kill(atoi(line), SIGKILL);
					fclose(f);
				}
				usleep(10000);
			}
		}
		closedir(d);
		rmdir(dir);
	}
}

static void cleanup(void)
{
	err_t e = { 0 };
	char cmd[256];

	stop_nodemgr();
	cleanup_cgroups();
	if (!have_tmp)
		return;
	if (pool_release(data, &e) < 0)
		fprintf(stderr, "cleanup: %s\n", e.msg);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "cleanup: %s failed\n", cmd);
	have_tmp = false;
}

static __attribute__((noreturn, format(printf, 3, 4))) void fail(const char *file, int line,
								 const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s:%d: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	cleanup();
	exit(1);
}
#define CHECK(c)                                                                        \
	do {                                                                            \
		if (!(c))                                                               \
			fail(__FILE__, __LINE__, "CHECK(%s) failed (errno %s)", #c,     \
			     strerror(errno));                                          \
	} while (0)
#define OK(call)                                                                        \
	do {                                                                            \
		err_t _e = { 0 };                                                       \
		if ((call) < 0)                                                         \
			fail(__FILE__, __LINE__, "%s: %s", #call, _e.msg);              \
	} while (0)
#define E (&_e)

static void start_nodemgr(void)
{
	nm_pid = fork();
	CHECK(nm_pid >= 0);
	if (nm_pid == 0) {
		struct nodemgr_config cfg = {
			.data_dir = data,
			.sock_path = sock,
			.guest_path = "/bin/busybox",
			.scripts_dir = AIRLOCK_SOURCE_DIR "/scripts",
			.client_uid = 65534,
			.client_gid = 0,
			.pool_size_mb = 2048,
			.cgroup_parent = cgparent,
			.guest_argv = guest_argv,
		};
		err_t e = { 0 };
		log_init("nodemgr", getenv("NM_DEBUG") ? LOG_DEBUG : LOG_WARN);
		if (nodemgr_run(&cfg, &e) < 0) {
			fprintf(stderr, "nodemgr_run: %s\n", e.msg);
			_exit(1);
		}
		_exit(0);
	}
	/* Ready once node_info answers. */
	for (int i = 0; i < 200; i++) {
		struct nm_node_info ni;
		err_t e = { 0 };
		int st;
		if (nm_node_info(sock, &ni, &e) == 0)
			return;
		if (waitpid(nm_pid, &st, WNOHANG) == nm_pid) {
			nm_pid = -1;
			fail(__FILE__, __LINE__, "nodemgr exited during startup");
		}
		usleep(50000);
	}
	fail(__FILE__, __LINE__, "nodemgr did not come up");
}

/* Read the guest's report (key=value lines up to END) from the channel. */
static void read_report(int fd, struct buf *out)
{
	buf_init(out);
	for (uint64_t dl = now_ms() + 10000; now_ms() < dl;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		char tmp[1024];
		ssize_t n;
		if (poll(&p, 1, 1000) <= 0)
			continue;
		n = read(fd, tmp, sizeof(tmp));
		if (n <= 0)
			break;
		buf_add(out, tmp, (size_t)n);
		if (strstr(out->data, "END\n"))
			return;
	}
	fail(__FILE__, __LINE__, "no complete report from guest; got: %s",
	     out->data ? out->data : "");
}

/* Value of key= in a report (copied into v). */
static const char *field(const struct buf *b, const char *key, char *v, size_t cap)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\n%s=", key);
	p = strstr(b->data, pat);
	if (!p && !strncmp(b->data, pat + 1, strlen(pat + 1)))
		p = b->data - 1;
	if (!p)
		fail(__FILE__, __LINE__, "no %s in report: %s", key, b->data);
	p += strlen(pat);
	snprintf(v, cap, "%.*s", (int)strcspn(p, "\n"), p);
	return v;
}

static bool cg_exists(const char *ctrl, const char *id)
{
	char p[256];
	snprintf(p, sizeof(p), "/sys/fs/cgroup/%s/%s/%s", ctrl, cgparent, id);
	return access(p, F_OK) == 0;
}

static void cg_read(const char *ctrl, const char *id, const char *file, char *v, size_t cap)
{
	char p[256];
	FILE *f;

	snprintf(p, sizeof(p), "/sys/fs/cgroup/%s/%s/%s/%s", ctrl, cgparent, id, file);
	f = fopen(p, "r");
	CHECK(f != NULL);
	CHECK(fgets(v, (int)cap, f) != NULL);
	v[strcspn(v, "\n")] = '\0';
	fclose(f);
}

static void spec_init(struct nm_sandbox_spec *sp, const char *id, const char *tmpl)
{
	memset(sp, 0, sizeof(*sp));
	snprintf(sp->id, sizeof(sp->id), "%s", id);
	snprintf(sp->template_name, sizeof(sp->template_name), "%s", tmpl);
	sp->template_version = 1;
}

static int progress_lines;
static void on_progress(void *arg, const char *line)
{
	(void)arg;
	progress_lines++;
	if (getenv("NM_DEBUG"))
		printf("  build: %s\n", line);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static bool list_has(char **v, const char *s)
{
	bool found = false;
	for (size_t i = 0; v[i]; i++) {
		if (!strcmp(v[i], s))
			found = true;
		free(v[i]);
	}
	free(v);
	return found;
}

int main(void)
{
	bool v2 = access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0 &&
		  access("/sys/fs/cgroup/memory", F_OK) < 0;
	const char *memctl = v2 ? "" : "memory", *pidctl = v2 ? "" : "pids";
	struct nm_template_spec ts;
	struct nm_sandbox_spec sp;
	struct nm_node_info ni;
	struct buf rep;
	char v[512], path[512], s1[64], s2[64], s3[64], bad[64];
	int chan1 = -1, chan2 = -1, chan3 = -1, adopted = -1;
	pid_t pid1 = 0, pid2 = 0, pid3 = 0;
	struct stat st, st2;
	char **list;

	if (geteuid() != 0 || access("/bin/busybox", X_OK) < 0) {
		fprintf(stderr, "test-nodemgr: needs root and /bin/busybox, skipping\n");
		return 77;
	}
	CHECK(mkdtemp(tmpdir) != NULL);
	have_tmp = true;
	snprintf(data, sizeof(data), "%s/data", tmpdir);
	snprintf(sock, sizeof(sock), "%s/nm.sock", tmpdir);
	snprintf(pool, sizeof(pool), "%s/pool", data);
	snprintf(cgparent, sizeof(cgparent), "airlock-test-%d", (int)getpid());
	snprintf(s1, sizeof(s1), "t%d-one", (int)getpid());
	snprintf(s2, sizeof(s2), "t%d-two", (int)getpid());
	snprintf(s3, sizeof(s3), "t%d-three", (int)getpid());
	snprintf(bad, sizeof(bad), "t%d-bad", (int)getpid());
	signal(SIGPIPE, SIG_IGN);
	start_nodemgr();

	/* node_info */
	OK(nm_node_info(sock, &ni, E));
	CHECK(ni.cpus > 0 && ni.mem_total_mb > 0 && ni.pool_total_mb > 0);
	CHECK(!strcmp(ni.cgroup_mode, v2 ? "v2" : "v1"));

	/* busybox template */
	memset(&ts, 0, sizeof(ts));
	snprintf(ts.name, sizeof(ts.name), "bb");
	ts.version = 1;
	snprintf(ts.kind, sizeof(ts.kind), "busybox");
	OK(nm_template_build(sock, &ts, -1, on_progress, NULL, E));
	CHECK(progress_lines > 0);
	OK(nm_template_list(sock, &list, E));
	CHECK(list_has(list, "bb/1"));
	{
		err_t e = { 0 };
		CHECK(nm_template_build(sock, &ts, -1, NULL, NULL, &e) == -EEXIST);
		snprintf(ts.name, sizeof(ts.name), "../x");
		CHECK(nm_template_build(sock, &ts, -1, NULL, NULL, &e) == -EINVAL);
		snprintf(ts.name, sizeof(ts.name), "badkind");
		snprintf(ts.kind, sizeof(ts.kind), "rm");
		CHECK(nm_template_build(sock, &ts, -1, NULL, NULL, &e) == -EINVAL);
		/* A failing build leaves nothing behind. */
		snprintf(ts.name, sizeof(ts.name), "broken");
		snprintf(ts.kind, sizeof(ts.kind), "tar");
		snprintf(ts.arg, sizeof(ts.arg), "/nonexistent.tar");
		CHECK(nm_template_build(sock, &ts, -1, NULL, NULL, &e) < 0);
		snprintf(path, sizeof(path), "%s/templates/broken", pool);
		CHECK(access(path, F_OK) < 0);
	}
	{
		/* A silent build (cat of a FIFO nobody writes) is cancelled
		 * through cancel_fd: the call fails at once, and nodemgr stops
		 * the builder and removes its subvolume. */
		err_t e = { 0 };
		char fifo[512];
		int efd = eventfd(0, EFD_CLOEXEC);
		uint64_t t0;
		pid_t waker;

		snprintf(fifo, sizeof(fifo), "%s/silent.tar", tmpdir);
		CHECK(mkfifo(fifo, 0600) == 0 && efd >= 0);
		snprintf(ts.name, sizeof(ts.name), "silent");
		snprintf(ts.arg, sizeof(ts.arg), "%s", fifo);
		t0 = now_ms();
		waker = fork();
		if (waker == 0) {  /* cancels once the builder sits on the FIFO */
			usleep(1000 * 1000);
			_exit(eventfd_write(efd, 1) < 0);
		}
		CHECK(waker > 0);
		CHECK(nm_template_build(sock, &ts, efd, NULL, NULL, &e) == -ECANCELED);
		CHECK(waitpid(waker, NULL, 0) == waker);
		snprintf(path, sizeof(path), "%s/templates/silent", pool);
		for (int i = 0; i < 100 && access(path, F_OK) == 0; i++)
			usleep(100 * 1000);
		CHECK(access(path, F_OK) < 0);
		CHECK(now_ms() - t0 < 8000);
		close(efd);
	}

	/* Sandbox one, with limits. */
	spec_init(&sp, s1, "bb");
	sp.limits.memory_mb = 256;
	sp.limits.pids = 100;
	sp.limits.cpu_millis = 500;
	sp.limits.disk_mb = 64;
	OK(nm_sandbox_create(sock, &sp, &chan1, &pid1, NULL, E));
	CHECK(chan1 >= 0 && pid1 > 0);
	/* a memory snapshot alone is a vm's: refused for a jail, before any
	 * disk snapshot is looked for */
	{
		err_t e = { 0 };
		int64_t sz = 0;
		CHECK(nm_snapshot_create_memory(sock, s1, "su-mem", &sz, &e) == -EOPNOTSUPP);
		CHECK(strstr(e.msg, "vm") != NULL);
	}
	read_report(chan1, &rep);
	if (getenv("NM_DEBUG"))
		printf("report:\n%s", rep.data);
	CHECK(!strcmp(field(&rep, "pid", v, sizeof(v)), "1"));
	CHECK(!strcmp(field(&rep, "host", v, sizeof(v)), s1));
	CHECK(atoi(field(&rep, "procs", v, sizeof(v))) <= 6);
	CHECK(!strcmp(field(&rep, "ifs", v, sizeof(v)), "lo"));
	field(&rep, "uidmap", v, sizeof(v));
	CHECK(!strncmp(v, "0 107374", 8) && strstr(v, " 65536"));
	CHECK(!strcmp(field(&rep, "uid", v, sizeof(v)), "0"));
	CHECK(!strcmp(field(&rep, "owner", v, sizeof(v)), "0"));
	CHECK(strcmp(field(&rep, "mount", v, sizeof(v)), "0") != 0);
	CHECK(!strcmp(field(&rep, "sib", v, sizeof(v)), "1"));
	CHECK(!strcmp(field(&rep, "wrote", v, sizeof(v)), "0"));
	CHECK(!strcmp(field(&rep, "fowner", v, sizeof(v)), "0"));
	CHECK(!strcmp(field(&rep, "nnp", v, sizeof(v)), "1"));
	CHECK(!strcmp(field(&rep, "seccomp", v, sizeof(v)), "2"));
	CHECK(!strcmp(field(&rep, "capbnd", v, sizeof(v)), "00000000a00405fb"));
	field(&rep, "devs", v, sizeof(v));
	CHECK(strstr(v, "null") && strstr(v, "ptmx") && strstr(v, "pts") && !strstr(v, "sda") &&
	      !strstr(v, "loop"));
	buf_free(&rep);

	/* Host side: uid range of the jail, file on disk owned by on-disk root,
	 * template untouched, no jail mount visible on the host. */
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid1);
	{
		struct buf b;
		buf_init(&b);
		CHECK(read_file(path, 65536, &b) == 0);
		CHECK(strstr(b.data, "Uid:\t1073741824") != NULL || strstr(b.data, "Uid:\t10737") != NULL);
		buf_free(&b);
		buf_init(&b);
		CHECK(read_file("/proc/self/mountinfo", 1 << 20, &b) == 0);
		CHECK(strstr(b.data, "sandboxes/") == NULL);
		buf_free(&b);
	}
	snprintf(path, sizeof(path), "%s/sandboxes/%s/rootfs/work/f", pool, s1);
	CHECK(stat(path, &st) == 0 && st.st_uid == 0 && st.st_gid == 0);
	snprintf(path, sizeof(path), "%s/templates/bb/1/rootfs/work/f", pool);
	CHECK(access(path, F_OK) < 0);

	/* cgroup limits */
	cg_read(memctl, s1, v2 ? "memory.max" : "memory.limit_in_bytes", v, sizeof(v));
	CHECK(!strcmp(v, "268435456"));
	cg_read(pidctl, s1, "pids.max", v, sizeof(v));
	CHECK(!strcmp(v, "100"));
	if (v2) {
		cg_read("", s1, "cpu.max", v, sizeof(v));
		CHECK(!strcmp(v, "50000 100000"));
	} else {
		cg_read("cpu", s1, "cpu.cfs_quota_us", v, sizeof(v));
		CHECK(!strcmp(v, "50000"));
	}

	/* Sibling: does not see the first one's file. */
	spec_init(&sp, s2, "bb");
	OK(nm_sandbox_create(sock, &sp, &chan2, &pid2, NULL, E));
	read_report(chan2, &rep);
	CHECK(!strcmp(field(&rep, "sib", v, sizeof(v)), "1"));
	CHECK(!strcmp(field(&rep, "host", v, sizeof(v)), s2));
	field(&rep, "uidmap", v, sizeof(v));
	CHECK(!strcmp(v, "0 1073807360 65536")); /* next slot: 0x40010000 */
	buf_free(&rep);

	/* Duplicate id is refused. */
	{
		err_t e = { 0 };
		int fd = -1;
		spec_init(&sp, s1, "bb");
		CHECK(nm_sandbox_create(sock, &sp, &fd, NULL, NULL, &e) == -EEXIST);
		spec_init(&sp, "../etc", "bb");
		CHECK(nm_sandbox_create(sock, &sp, &fd, NULL, NULL, &e) == -EINVAL);
	}

	/* Adopt: a dup of the same host end. */
	{
		pid_t p = 0;
		err_t e = { 0 };
		OK(nm_sandbox_adopt(sock, s1, &adopted, &p, NULL, E));
		CHECK(p == pid1 && fstat(adopted, &st) == 0 && fstat(chan1, &st2) == 0);
		CHECK(st.st_ino == st2.st_ino);
		CHECK(nm_sandbox_adopt(sock, bad, &chan3, &p, NULL, &e) == -ENOENT);
	}
	OK(nm_sandbox_list(sock, &list, E));
	CHECK(list_has(list, s2));

	/* Destroy: jail gone (channel EOF), cgroup gone, subvolume gone. */
	OK(nm_sandbox_destroy(sock, s1, E));
	{
		char c;
		struct pollfd p = { .fd = adopted, .events = POLLIN };
		CHECK(poll(&p, 1, 2000) == 1 && read(adopted, &c, 1) == 0);
	}
	CHECK(!cg_exists(memctl, s1) && !cg_exists(pidctl, s1));
	snprintf(path, sizeof(path), "%s/sandboxes/%s", pool, s1);
	CHECK(access(path, F_OK) < 0);
	CHECK(kill(pid1, 0) < 0);
	OK(nm_sandbox_destroy(sock, s1, E)); /* idempotent */
	close(chan1);
	close(adopted);

	/* Failed create (no such template) leaves nothing. */
	{
		err_t e = { 0 };
		int fd = -1;
		char st_path[512];
		spec_init(&sp, bad, "nosuch");
		CHECK(nm_sandbox_create(sock, &sp, &fd, NULL, NULL, &e) == -ENOENT);
		CHECK(fd < 0);
		snprintf(path, sizeof(path), "%s/sandboxes/%s", pool, bad);
		snprintf(st_path, sizeof(st_path), "%s/run/nodemgr/%s.state", data, bad);
		CHECK(access(path, F_OK) < 0 && access(st_path, F_OK) < 0);
		CHECK(!cg_exists(memctl, bad));
	}

	/* A jail whose init dies: nodemgr notices, adopt says ENOENT, destroy
	 * still cleans up. */
	spec_init(&sp, s3, "bb");
	snprintf(sp.hostname, sizeof(sp.hostname), "bench-dies");
	OK(nm_sandbox_create(sock, &sp, &chan3, &pid3, NULL, E));
	CHECK(kill(pid3, SIGKILL) == 0);
	{
		int r = 0, fd = -1;
		for (int i = 0; i < 100; i++) {
			err_t e = { 0 };
			pid_t p;
			r = nm_sandbox_adopt(sock, s3, &fd, &p, NULL, &e);
			if (r == -ENOENT)
				break;
			if (fd >= 0)
				close(fd);
			usleep(20000);
		}
		CHECK(r == -ENOENT);
	}
	OK(nm_sandbox_destroy(sock, s3, E));
	close(chan3);

	/* Timing: create + destroy, 50 rounds. */
	{
		uint64_t tc[50], td[50];
		for (int i = 0; i < 50; i++) {
			char id[64];
			int fd = -1;
			pid_t p;
			uint64_t t0, t1;
			snprintf(id, sizeof(id), "t%d-bench-%d", (int)getpid(), i);
			spec_init(&sp, id, "bb");
			snprintf(sp.hostname, sizeof(sp.hostname), "bench");
			t0 = now_us();
			OK(nm_sandbox_create(sock, &sp, &fd, &p, NULL, E));
			t1 = now_us();
			OK(nm_sandbox_destroy(sock, id, E));
			tc[i] = t1 - t0;
			td[i] = now_us() - t1;
			close(fd);
		}
		qsort(tc, 50, sizeof(tc[0]), cmp_u64);
		qsort(td, 50, sizeof(td[0]), cmp_u64);
		printf("sandbox create: median %.2f ms (min %.2f, max %.2f); destroy: median %.2f ms "
		       "(max %.2f)\n",
		       tc[25] / 1000.0, tc[0] / 1000.0, tc[49] / 1000.0, td[25] / 1000.0,
		       td[49] / 1000.0);
	}

	/* Stop: jails are killed, subvolumes kept; after a restart, destroy of
	 * the leftover still works. */
	stop_nodemgr();
	CHECK(kill(pid2, 0) < 0);
	CHECK(!cg_exists(memctl, s2));
	snprintf(path, sizeof(path), "%s/sandboxes/%s", pool, s2);
	CHECK(access(path, F_OK) == 0);
	start_nodemgr();
	OK(nm_sandbox_list(sock, &list, E));
	CHECK(list_has(list, s2));
	{
		int fd = -1;
		pid_t p;
		err_t e = { 0 };
		CHECK(nm_sandbox_adopt(sock, s2, &fd, &p, NULL, &e) == -ENOENT);
	}
	OK(nm_sandbox_destroy(sock, s2, E));
	CHECK(access(path, F_OK) < 0);
	close(chan2);
	OK(nm_template_delete(sock, "bb", 1, E));
	OK(nm_template_list(sock, &list, E));
	CHECK(!list_has(list, "bb/1"));

	cleanup();
	printf("test-nodemgr: ok\n");
	return 0;
}
