/* test-pool: the btrfs pool on a real loop file in a temp dir (root only).
 * Every exit path runs cleanup(): unmount (the loop device autoclears) and
 * remove the temp dir. */
#include <errno.h>
#include <fcntl.h>
#include <linux/btrfs.h>
#include <linux/fs.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../src/lib/util.h"
#include "check.h"
#include "tmp-pool.h"
#include "../../src/pool/pool.h"

#define cleanup tmp_pool_remove
#undef CHECK
#define CHECK(c) REQUIRE(c, cleanup)
#define OK(call)                                                                   \
	do {                                                                       \
		err_t _e = { 0 };                                                  \
		if ((call) < 0) {                                                  \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__,     \
				#call, _e.msg);                                    \
			cleanup();                                                 \
			exit(1);                                                   \
		}                                                                  \
	} while (0)
#define E (&_e)

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* dst = a reflink of src, then 1 MiB of other bytes at 3 MiB. */
static void clone_and_touch(const char *src, const char *dst)
{
	static char mib[1 << 20];
	int in = open(src, O_RDONLY | O_CLOEXEC);
	int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	memset(mib, 0x5a, sizeof(mib));
	CHECK(in >= 0 && out >= 0 && ioctl(out, FICLONE, in) == 0);
	CHECK(pwrite(out, mib, sizeof(mib), 3 << 20) == (ssize_t)sizeof(mib));
	close(in);
	close(out);
}

static bool same_file(const char *a, const char *b)
{
	char *x = xmalloc(1 << 20), *y = xmalloc(1 << 20);
	int fa = open(a, O_RDONLY | O_CLOEXEC), fb = open(b, O_RDONLY | O_CLOEXEC);
	bool same = fa >= 0 && fb >= 0;
	ssize_t n, m;

	while (same && (n = read(fa, x, 1 << 20)) > 0) {
		m = read(fb, y, (size_t)n);
		same = m == n && memcmp(x, y, (size_t)n) == 0;
	}
	if (same)
		same = read(fb, y, 1) == 0;
	close(fa);
	close(fb);
	free(x);
	free(y);
	return same;
}

/* Median snapshot and delete time (µs) over n rounds of src -> dst. */
static void time_snapshots(const char *label, const char *src, const char *dst, int n)
{
	uint64_t snap[64], del[64];

	for (int i = 0; i < n; i++) {
		uint64_t t0 = now_us(), t1;
		OK(pool_subvol_snapshot(src, dst, false, E));
		OK(pool_qgroup_limit(dst, 64ULL << 20, E));
		t1 = now_us();
		OK(pool_subvol_delete(dst, E));
		snap[i] = t1 - t0;
		del[i] = now_us() - t1;
	}
	qsort(snap, (size_t)n, sizeof(snap[0]), cmp_u64);
	qsort(del, (size_t)n, sizeof(del[0]), cmp_u64);
	printf("%-22s snapshot+limit median %6.2f ms (max %6.2f), delete median %6.2f ms\n",
	       label, snap[n / 2] / 1000.0, snap[n - 1] / 1000.0, del[n / 2] / 1000.0);
	CHECK(snap[n / 2] < 200000);
}

static void quota_ctl(const char *path, uint64_t cmd)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct btrfs_ioctl_quota_ctl_args q = { .cmd = cmd };

	CHECK(fd >= 0);
	if (ioctl(fd, BTRFS_IOC_QUOTA_CTL, &q) < 0)
		fprintf(stderr, "quota ctl %llu: %s\n", (unsigned long long)cmd, strerror(errno));
	close(fd);
}

int main(void)
{
	bool mounted = false, again = true;
	char pool[200], tmpl[300], t1[400], rootfs[500], sb[400], f[600];
	struct stat st;
	int fd;

	if (geteuid() != 0) {
		fprintf(stderr, "test-pool: needs root, skipping\n");
		return 77;
	}
	CHECK(mkdtemp(tmpdir) != NULL);
	have_tmp = true;

	/* ensure: creates, formats and mounts the image; again: a no-op. */
	OK(pool_ensure(tmpdir, 1024, &mounted, E));
	CHECK(mounted);
	OK(pool_ensure(tmpdir, 1024, &again, E));
	CHECK(!again);
	snprintf(pool, sizeof(pool), "%s/pool", tmpdir);
	snprintf(f, sizeof(f), "%s/templates", pool);
	CHECK(stat(f, &st) == 0 && S_ISDIR(st.st_mode));

	/* A template: subvolume with a rootfs, then read-only. */
	snprintf(tmpl, sizeof(tmpl), "%s/templates/t", pool);
	CHECK(mkdir(tmpl, 0700) == 0);
	snprintf(t1, sizeof(t1), "%s/1", tmpl);
	OK(pool_subvol_create(t1, E));
	CHECK(pool_is_subvol(t1) == 1);
	CHECK(pool_is_subvol(tmpl) == 0);
	snprintf(rootfs, sizeof(rootfs), "%s/rootfs", t1);
	CHECK(mkdir(rootfs, 0755) == 0);
	snprintf(f, sizeof(f), "%s/hello", rootfs);
	fd = open(f, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	CHECK(fd >= 0 && write(fd, "hi\n", 3) == 3);
	close(fd);
	OK(pool_subvol_set_readonly(t1, true, E));
	snprintf(f, sizeof(f), "%s/other", rootfs);
	CHECK(open(f, O_WRONLY | O_CREAT | O_CLOEXEC, 0644) < 0 && errno == EROFS);

	/* A sandbox snapshot is writable and independent of the template. */
	snprintf(sb, sizeof(sb), "%s/sandboxes/s1", pool);
	OK(pool_subvol_snapshot(t1, sb, false, E));
	snprintf(f, sizeof(f), "%s/rootfs/new", sb);
	fd = open(f, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	CHECK(fd >= 0);
	close(fd);
	snprintf(f, sizeof(f), "%s/new", rootfs);
	CHECK(access(f, F_OK) < 0);
	OK(pool_qgroup_limit(sb, 16ULL << 20, E));
	OK(pool_subvol_delete(sb, E));
	CHECK(access(sb, F_OK) < 0);
	OK(pool_subvol_delete(sb, E)); /* idempotent */

	/* A read-only snapshot, then deleting a read-only subvolume. */
	snprintf(sb, sizeof(sb), "%s/snapshots/ro", pool);
	OK(pool_subvol_snapshot(t1, sb, true, E));
	snprintf(f, sizeof(f), "%s/rootfs/x", sb);
	CHECK(open(f, O_WRONLY | O_CREAT | O_CLOEXEC, 0644) < 0 && errno == EROFS);
	OK(pool_subvol_delete(sb, E));

	/* The delta of a snapshot: bytes written since a transaction. A sandbox
	 * writes 1 MiB + a small (inline) file; its snapshot counts those and
	 * none of the template; a second snapshot right after counts nothing. */
	{
		char s1[400], s2[400], s3[400], big[600];
		static char mib[1 << 20];
		uint64_t since = 0, bytes = 1;

		snprintf(s1, sizeof(s1), "%s/sandboxes/d1", pool);
		snprintf(s2, sizeof(s2), "%s/snapshots/d1a", pool);
		snprintf(s3, sizeof(s3), "%s/snapshots/d1b", pool);
		OK(pool_subvol_snapshot(t1, s1, false, E));
		snprintf(big, sizeof(big), "%s/rootfs/big", s1);
		memset(mib, 'x', sizeof(mib));
		fd = open(big, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
		CHECK(fd >= 0 && write(fd, mib, sizeof(mib)) == (ssize_t)sizeof(mib));
		close(fd);
		snprintf(big, sizeof(big), "%s/rootfs/small", s1);
		fd = open(big, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
		CHECK(fd >= 0 && write(fd, "0123456789", 10) == 10);
		close(fd);
		OK(pool_subvol_snapshot(s1, s2, true, E));
		OK(pool_subvol_otransid(s1, &since, E));
		OK(pool_changed_bytes(s2, since, &bytes, E));
		CHECK(bytes == (1u << 20) + 10);
		OK(pool_subvol_snapshot(s1, s3, true, E));
		OK(pool_subvol_otransid(s2, &since, E));
		OK(pool_changed_bytes(s3, since, &bytes, E));
		CHECK(bytes == 0);
		OK(pool_subvol_delete(s3, E));
		OK(pool_subvol_delete(s2, E));
		OK(pool_subvol_delete(s1, E));
	}

	/* Send against a template and receive (suspend's disk artifact): a
	 * sandbox whose file is a reflink of a modified copy of the template's
	 * (a vm disk image) sends about the modified MiB only, as clones from
	 * the template, and receives whole once the template has a received
	 * uuid (pool_subvol_ensure_received on a read-only template, twice). */
	{
		char t2[512], cache[512], sb2[512], sdir[512], s1[512], p1[600], p2[600];
		char stream[600];
		struct stat ss;
		static char mib[1 << 20];

		snprintf(t2, sizeof(t2), "%s/2", tmpl);
		snprintf(cache, sizeof(cache), "%s/2.vm", tmpl);
		snprintf(sb2, sizeof(sb2), "%s/sandboxes/sr", pool);
		snprintf(sdir, sizeof(sdir), "%s/snapshots/sr", pool);
		snprintf(s1, sizeof(s1), "%s/snapshots/sr/s1", pool);
		snprintf(stream, sizeof(stream), "%s/stream", tmpdir);
		OK(pool_subvol_create(t2, E));
		snprintf(p1, sizeof(p1), "%s/big", t2);
		fd = open(p1, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
		CHECK(fd >= 0);
		for (int i = 0; i < 8; i++) {
			for (size_t k = 0; k < sizeof(mib); k++)
				mib[k] = (char)(k * 7 + i * 13 + (k >> 9));
			CHECK(write(fd, mib, sizeof(mib)) == (ssize_t)sizeof(mib));
		}
		close(fd);
		OK(pool_subvol_set_readonly(t2, true, E));
		OK(pool_subvol_ensure_received(t2, E));
		OK(pool_subvol_ensure_received(t2, E));
		OK(pool_subvol_create(cache, E));
		snprintf(p2, sizeof(p2), "%s/big", cache);
		clone_and_touch(p1, p2);
		OK(pool_subvol_snapshot(t2, sb2, false, E));
		snprintf(p1, sizeof(p1), "%s/big", sb2);
		unlink(p1);
		clone_and_touch(p2, p1);
		CHECK(mkdir(sdir, 0700) == 0);
		OK(pool_subvol_snapshot(sb2, s1, true, E));
		fd = open(stream, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		CHECK(fd >= 0);
		OK(pool_send(s1, t2, fd, NULL, E));
		CHECK(fstat(fd, &ss) == 0);
		printf("send -p: %lld bytes for 1 MiB changed in an 8 MiB clone\n",
		       (long long)ss.st_size);
		CHECK(ss.st_size > (1 << 20) && ss.st_size < (2 << 20));
		OK(pool_subvol_delete(s1, E));
		CHECK(lseek(fd, 0, SEEK_SET) == 0);
		OK(pool_receive(sdir, fd, NULL, E));
		close(fd);
		CHECK(pool_is_subvol(s1) == 1);
		snprintf(p1, sizeof(p1), "%s/big", s1);
		CHECK(same_file(p1, p2));
		OK(pool_subvol_delete(s1, E));
		OK(pool_subvol_delete(sb2, E));
		OK(pool_subvol_delete(cache, E));
		OK(pool_subvol_delete(t2, E));
		unlink(stream);
	}

	/* Timing: the quota mode pool_ensure chose, full qgroups, no quotas. */
	snprintf(sb, sizeof(sb), "%s/sandboxes/bench", pool);
	time_snapshots("quota (as configured)", t1, sb, 30);
	quota_ctl(pool, BTRFS_QUOTA_CTL_DISABLE);
	time_snapshots("quota off", t1, sb, 30);
	quota_ctl(pool, BTRFS_QUOTA_CTL_ENABLE);
	time_snapshots("full qgroups", t1, sb, 30);

	{
		uint64_t total, fr;
		OK(pool_usage(pool, &total, &fr, E));
		CHECK(total > (512ULL << 20) && fr > 0);
	}
	OK(pool_release(tmpdir, E));
	CHECK(pool_is_subvol(t1) == -ENOENT);
	/* Re-mount the existing image (as after a reboot): the template is back. */
	OK(pool_ensure(tmpdir, 1024, &mounted, E));
	CHECK(mounted && pool_is_subvol(t1) == 1);
	cleanup();
	printf("test-pool: ok\n");
	return 0;
}
