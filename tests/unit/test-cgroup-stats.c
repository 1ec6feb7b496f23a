/* test-cgroup-stats.c - the per-sandbox metrics reader (cgroup_stats) on
 * both cgroup layouts. This host runs v1, so the v2 branch is fed fixture
 * files in a temp directory laid out as the kernel lays out a v2 cgroup (and
 * v1 the same way, for the figures' units). Then, when the host has a
 * writable cgroup2 mount (a hybrid host's /sys/fs/cgroup/unified, or a v2
 * host's /sys/fs/cgroup), a real child cgroup with a process burning CPU in
 * it: its cpu.stat usage_usec, read by the same code, must grow by about the
 * CPU time the process used. (memory.current needs the memory controller on
 * that hierarchy, which a hybrid host keeps on v1: then the full reader must
 * fail clearly, naming what is missing.) */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../src/lib/util.h"
#include "../../src/nodemgr/cgroup/cgroup.h"
#include "check.h"
#include "fixture-dir.h"

static char tmp[] = "/tmp/airlock-cgstats-XXXXXX";
static char real_cg[256];
static pid_t burner = -1;

static void cleanup(void)
{
	char cmd[300];

	if (burner > 0) {
		kill(burner, SIGKILL);
		waitpid(burner, NULL, 0);
		burner = -1;
	}
	if (*real_cg) {
		/* empty once the burner is reaped; the kernel may lag a moment */
		for (int i = 0; i < 100 && rmdir(real_cg) < 0 && errno == EBUSY; i++)
			usleep(10000);
		*real_cg = 0;
	}
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmp);
}


/* cpu.stat and memory.stat as a 6.x kernel writes them; usage_usec not on
 * the first line, and keys that start the same (user_usec, usage_usec_x are
 * not it). */
static const char v2_cpu_stat[] = "nr_periods 0\n"
				  "user_usec 1200000\n"
				  "usage_usec_x 7\n"
				  "usage_usec 1500123\n"
				  "system_usec 300123\n"
				  "nr_throttled 0\n";
static const char v2_memory_stat[] = "anon 1048576\nfile 2097152\nkernel 65536\n";

static void test_v2_fixture(void)
{
	char *d = fixture_dir(tmp, "v2", cleanup);
	struct cgroup_stats st;
	err_t err = { 0 };

	fixture_put(d, "cpu.stat", v2_cpu_stat, cleanup);
	fixture_put(d, "memory.current", "3211264\n", cleanup);
	fixture_put(d, "memory.peak", "8388608\n", cleanup);
	fixture_put(d, "memory.stat", v2_memory_stat, cleanup);
	CHECK(cgroup_stats_v2_dir(d, &st, &err) == 0);
	CHECK(st.cpu_ns == 1500123000ULL);
	CHECK(st.mem_bytes == 3211264);
	CHECK(st.mem_peak_known && st.mem_peak_bytes == 8388608);

	/* a kernel before 5.19 has no memory.peak: known false, the rest read */
	char *peak = xasprintf("%s/memory.peak", d);
	CHECK(unlink(peak) == 0);
	memset(&st, 0xff, sizeof(st));
	CHECK(cgroup_stats_v2_dir(d, &st, &err) == 0);
	CHECK(!st.mem_peak_known && st.mem_peak_bytes == 0);
	CHECK(st.cpu_ns == 1500123000ULL && st.mem_bytes == 3211264);

	/* no usage_usec line: an error naming it, not a zero */
	fixture_put(d, "cpu.stat", "nr_periods 0\nuser_usec 5\n", cleanup);
	err = (err_t){ 0 };
	CHECK(cgroup_stats_v2_dir(d, &st, &err) < 0);
	CHECK(err.code == ENOENT && strstr(err.msg, "usage_usec"));

	/* no memory.current (the memory controller not enabled) */
	fixture_put(d, "cpu.stat", v2_cpu_stat, cleanup);
	char *cur = xasprintf("%s/memory.current", d);
	CHECK(unlink(cur) == 0);
	err = (err_t){ 0 };
	CHECK(cgroup_stats_v2_dir(d, &st, &err) < 0);
	CHECK(err.code == ENOENT && strstr(err.msg, "memory.current"));
	free(cur);
	free(peak);
	free(d);
}

static void test_v1_fixture(void)
{
	char *cpu = fixture_dir(tmp, "v1/cpuacct/airlock/sb1", cleanup);
	char *mem = fixture_dir(tmp, "v1/memory/airlock/sb1", cleanup);
	struct cgroup_stats st;
	err_t err = { 0 };

	fixture_put(cpu, "cpuacct.usage", "987654321\n", cleanup);   /* ns already */
	fixture_put(mem, "memory.usage_in_bytes", "4096000\n", cleanup);
	fixture_put(mem, "memory.max_usage_in_bytes", "16384000\n", cleanup);
	CHECK(cgroup_stats_v1_dirs(cpu, mem, &st, &err) == 0);
	CHECK(st.cpu_ns == 987654321ULL);
	CHECK(st.mem_bytes == 4096000);
	CHECK(st.mem_peak_known && st.mem_peak_bytes == 16384000);

	/* and through cgroup_stats, with the root pointed at the fixture */
	struct cgroups cg = { .v2 = false, .v1_cpuacct = true, .parent = "airlock" };
	snprintf(cg.root, sizeof(cg.root), "%s/v1", tmp);
	memset(&st, 0, sizeof(st));
	CHECK(cgroup_stats(&cg, "sb1", &st, &err) == 0);
	CHECK(st.cpu_ns == 987654321ULL && st.mem_bytes == 4096000);
	err = (err_t){ 0 };
	CHECK(cgroup_stats(&cg, "sb2", &st, &err) < 0 && err.code == ENOENT);

	char *usage = xasprintf("%s/cpuacct.usage", cpu);
	CHECK(unlink(usage) == 0);
	err = (err_t){ 0 };
	CHECK(cgroup_stats_v1_dirs(cpu, mem, &st, &err) < 0);
	CHECK(err.code == ENOENT && strstr(err.msg, "cpuacct.usage"));
	free(usage);
	free(cpu);
	free(mem);
}

static void test_v2_through_cgroup_stats(void)
{
	char *d = fixture_dir(tmp, "v2root/airlock/sb1", cleanup);
	struct cgroups cg = { .v2 = true, .parent = "airlock" };
	struct cgroup_stats st;
	err_t err = { 0 };

	fixture_put(d, "cpu.stat", v2_cpu_stat, cleanup);
	fixture_put(d, "memory.current", "100\n", cleanup);
	snprintf(cg.root, sizeof(cg.root), "%s/v2root", tmp);
	CHECK(cgroup_stats(&cg, "sb1", &st, &err) == 0);
	CHECK(st.cpu_ns == 1500123000ULL && st.mem_bytes == 100 && !st.mem_peak_known);
	free(d);
}

static uint64_t cpu_of(pid_t pid)
{
	char path[64];
	struct buf b;
	unsigned long ut = 0, stt = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	buf_init(&b);
	if (read_file(path, 4096, &b) == 0 && b.data) {
		const char *p = strrchr(b.data, ')');
		/* fields 14, 15 (utime, stime) are the 12th and 13th after ") " */
		if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
				&stt) != 2)
			ut = stt = 0;
	}
	buf_free(&b);
	return (uint64_t)(ut + stt) * 1000000000ULL / (uint64_t)sysconf(_SC_CLK_TCK);
}

/* A real cgroup2 child; 0 when tested, 1 when there is no writable cgroup2. */
static int test_real_cgroup2(void)
{
	const char *mounts[] = { "/sys/fs/cgroup/unified", "/sys/fs/cgroup" };
	const char *root = NULL;
	char path[300];
	uint64_t before = 0, after = 0, used;
	struct cgroup_stats st;
	err_t err = { 0 };

	for (size_t i = 0; i < ARRAY_SIZE(mounts) && !root; i++) {
		snprintf(path, sizeof(path), "%s/cgroup.procs", mounts[i]);
		if (access(path, W_OK) == 0)
			root = mounts[i];
	}
	if (!root) {
		printf("no writable cgroup2 mount: real v2 part skipped\n");
		return 1;
	}
	snprintf(real_cg, sizeof(real_cg), "%s/airlock-unit-cgstats-%d", root, (int)getpid());
	if (mkdir(real_cg, 0755) < 0) {
		printf("cannot mkdir %s (%s): real v2 part skipped\n", real_cg, strerror(errno));
		*real_cg = 0;
		return 1;
	}
	CHECK(cgroup_v2_cpu_ns(real_cg, &before) == 0);
	CHECK(before == 0);

	int go[2];
	REQUIRE(pipe(go) == 0, cleanup);
	burner = fork();
	REQUIRE(burner >= 0, cleanup);
	if (burner == 0) {
		char c;
		close(go[1]);
		if (read(go[0], &c, 1) != 1)
			_exit(1);
		for (volatile unsigned long x = 0;; x++)
			;
	}
	close(go[0]);
	snprintf(path, sizeof(path), "%s/cgroup.procs", real_cg);
	char pid[16];
	int n = snprintf(pid, sizeof(pid), "%d", (int)burner);
	int fd = open(path, O_WRONLY);
	REQUIRE(fd >= 0 && write(fd, pid, (size_t)n) == n, cleanup);
	close(fd);
	REQUIRE(write(go[1], "g", 1) == 1, cleanup);
	close(go[1]);
	/* until it has used 300 ms of CPU (on a busy 2-core host: up to 20 s) */
	uint64_t t0 = now_ms();
	while (cpu_of(burner) < 300000000ULL && now_ms() - t0 < 20000)
		usleep(20000);
	kill(burner, SIGSTOP);
	usleep(50000);
	used = cpu_of(burner);
	CHECK(cgroup_v2_cpu_ns(real_cg, &after) == 0);
	printf("real cgroup2 %s: process used %.3f s (by /proc), cpu.stat usage_usec says %.3f s\n",
	       real_cg, used / 1e9, after / 1e9);
	/* /proc counts in clock ticks (10 ms): allow two ticks and 5 % */
	CHECK(used >= 300000000ULL);
	CHECK(after + 20000000ULL + used / 20 >= used && after <= used + 20000000ULL + used / 20);

	/* the full reader: with memory on this hierarchy it reads both figures;
	 * without (a hybrid host), it fails naming memory.current */
	snprintf(path, sizeof(path), "%s/memory.current", real_cg);
	bool has_mem = access(path, R_OK) == 0;
	int r = cgroup_stats_v2_dir(real_cg, &st, &err);
	if (has_mem) {
		CHECK(r == 0 && st.cpu_ns >= after && st.mem_bytes > 0);
		printf("real cgroup2 memory.current %" PRIu64 "\n", st.mem_bytes);
	} else {
		CHECK(r < 0 && err.code == ENOENT && strstr(err.msg, "memory.current"));
		printf("real cgroup2 without the memory controller: %s\n", err.msg);
	}
	return 0;
}

int main(void)
{
	REQUIRE(mkdtemp(tmp) != NULL, cleanup);
	test_v2_fixture();
	test_v1_fixture();
	test_v2_through_cgroup_stats();
	if (geteuid() == 0)
		test_real_cgroup2();
	cleanup();
	return check_done("test-cgroup-stats");
}
