/* reclaim.c - RECLAIM, before a suspend's memory snapshot (vm only).
 *
 * A vm's `memory` artifact holds the guest pages that differ from its
 * template's RAM (nodemgr vm-suspend.c). Two kinds of page there are
 * waste:
 *   - the page cache of the files the sandbox wrote: the same bytes are in
 *     the `disk` artifact (100 MiB of files were uploaded twice);
 *   - pages the guest has freed: they keep whatever they held last.
 * So, in this order:
 *   0. sync(), and FITRIM of / (trim_root: the same for the disk);
 *   1. vm.drop_caches = 1: the page cache, clean now, is freed
 *      (dentries and inodes stay: they are small);
 *   2. a child takes the free memory as anonymous pages, which the kernel
 *      hands out zeroed, a step at a time until only a reserve is left
 *      free (or as much as the drop freed and an eighth of the RAM more),
 *      and exits: the pages go back to the free lists holding zeros.
 *      Zero pages compress to nothing, and where the template's page was
 *      never written they equal it and are not in the artifact at all.
 *      The child has oom_score_adj 1000: should a process of the sandbox
 *      need memory meanwhile, the child is the one the kernel kills (the
 *      reserve makes that unlikely; a killed child only zeroes less).
 *      "An eighth of the RAM more" is at most what the guest freed since
 *      the last RECLAIM (the kernel's pgfree, /proc/vmstat): a guest quiet
 *      since its last suspend freed next to nothing, and its free pages
 *      are zero already (zeroing 32 MiB of them again cost 100-145 ms of
 *      the suspend under TCG here).
 *      It asks for transparent huge pages (one fault per 2 MiB instead of
 *      512): measured here under TCG, 96 MiB zeroed in 560-1507 ms with
 *      them, 955-2148 ms without. The guest kernel's THP switch (Debian's:
 *      `never`) is set to `madvise` for that moment and put back; defrag
 *      stays as it is (`never`: no compaction, a huge page only where a
 *      free 2 MiB block is).
 * A cost of the suspend alone: nothing changes while the sandbox runs
 * (unlike the kernel's init_on_free=1, which zeroes on every free, under
 * TCG on the guest's CPU). The guest resumes with a cold page cache: its
 * next reads of a file go to its disk.
 */
#include "guest.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define STEP (4ul << 20)
#define HUGE (2ul << 20)
#define RESERVE_MIN (8ul << 20)
#define THP_ENABLED "/sys/kernel/mm/transparent_hugepage/enabled"

/* A number of kB from /proc/meminfo's line key ("MemFree:"), or -1. */
static long meminfo_kb(int fd, const char *key)
{
	char buf[2048];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	const char *p;
	long v;

	if (n <= 0)
		return -1;
	buf[n] = '\0';
	p = strstr(buf, key);
	if (!p || sscanf(p + strlen(key), " %ld", &v) != 1)
		return -1;
	return v;
}

static long read_long(const char *path)
{
	char buf[32];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;
	long v = -1;

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n > 0) {
		buf[n] = '\0';
		if (sscanf(buf, "%ld", &v) != 1)
			v = -1;
	}
	return v;
}

static int write_str(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	int r = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, s, strlen(s)) < 0)
		r = -errno;
	close(fd);
	return r;
}

/* The disk has the same waste as memory: blocks the guest's ext4 freed
 * (a file rewritten, deleted) keep their bytes in the image, and `btrfs
 * send` against the template sends them (a 100 MiB file written twice:
 * a 218 MiB disk artifact). FITRIM discards them; QEMU (discard=unmap)
 * punches them out of the image. ext4 trims only the groups with blocks
 * freed since its last trim. Best effort. */
static void trim_root(void)
{
	struct fstrim_range range = { .start = 0, .len = ~0ull, .minlen = 0 };
	int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return;
	(void)ioctl(fd, FITRIM, &range);
	close(fd);
}

/* The pages the kernel freed since it booted (/proc/vmstat pgfree), or 0. */
static uint64_t pages_freed(void)
{
	char buf[16384];
	int fd = open("/proc/vmstat", O_RDONLY | O_CLOEXEC);
	size_t n = 0;
	ssize_t k;
	const char *p;
	unsigned long long v;

	if (fd < 0)
		return 0;
	while (n < sizeof(buf) - 1 && (k = read(fd, buf + n, sizeof(buf) - 1 - n)) > 0)
		n += (size_t)k;
	close(fd);
	buf[n] = '\0';
	p = strncmp(buf, "pgfree ", 7) == 0 ? buf : strstr(buf, "\npgfree ");
	if (!p || sscanf(p + (*p == '\n') + 7, "%llu", &v) != 1)
		return 0;
	return v;
}

/* The kernel's THP switch reads "always madvise [never]" when off. */
static bool thp_is_never(void)
{
	char buf[128];
	int fd = open(THP_ENABLED, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;

	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	return strstr(buf, "[never]") != NULL;
}

/* The child: zeroed pages taken until only reserve bytes are free, or
 * at most cap bytes. */
static void zero_free(unsigned long reserve, unsigned long cap)
{
	int mfd = open("/proc/meminfo", O_RDONLY | O_CLOEXEC);
	long free_kb = mfd >= 0 ? meminfo_kb(mfd, "MemFree:") : -1;
	unsigned long want, done = 0;
	char *p;

	(void)write_str("/proc/self/oom_score_adj", "1000");
	if (free_kb < 0 || (unsigned long)free_kb * 1024 <= reserve)
		_exit(0);
	want = (unsigned long)free_kb * 1024 - reserve;
	if (want > cap)
		want = cap;
	want &= ~(STEP - 1);
	p = mmap(NULL, want + HUGE, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		_exit(1);
	/* 2 MiB aligned, for huge pages */
	p = (char *)(((unsigned long)p + HUGE - 1) & ~(HUGE - 1));
	(void)madvise(p, want, MADV_HUGEPAGE);
	while (done < want) {
		free_kb = meminfo_kb(mfd, "MemFree:");
		if (free_kb < 0 || (unsigned long)free_kb * 1024 < reserve + STEP)
			break;
		if (madvise(p + done, STEP, MADV_POPULATE_WRITE) < 0) {
			if (errno != EINVAL)
				break;
			/* an older kernel: fault each page in by a write */
			for (unsigned long o = 0; o < STEP; o += 4096)
				((volatile char *)p)[done + o] = 0;
		}
		done += STEP;
	}
	_exit(0);
}

void guest_reclaim(struct agent *a, const struct proto_frame *f)
{
	unsigned long reserve = RESERVE_MIN;
	long min_free_kb, free0_kb, free1_kb, total_kb;
	unsigned long cap;
	uint64_t freed;
	bool thp_never;
	int mfd;
	int status, r;
	pid_t pid;

	if (!a->vm_port) {
		agent_send_error(a, f->req_id, EOPNOTSUPP, "reclaim: only in a vm guest");
		return;
	}
	freed = pages_freed();
	sync();
	trim_root();
	mfd = open("/proc/meminfo", O_RDONLY | O_CLOEXEC);
	free0_kb = mfd >= 0 ? meminfo_kb(mfd, "MemFree:") : -1;
	r = write_str("/proc/sys/vm/drop_caches", "1");
	free1_kb = mfd >= 0 ? meminfo_kb(mfd, "MemFree:") : -1;
	total_kb = mfd >= 0 ? meminfo_kb(mfd, "MemTotal:") : -1;
	if (mfd >= 0)
		close(mfd);
	if (r < 0) {
		agent_send_error(a, f->req_id, -r, "reclaim: drop_caches: %s", strerror(-r));
		return;
	}
	/* Zeroing costs the guest's CPU (under TCG 220-320 MiB/s): as much as
	 * the drop freed, and an eighth of the RAM more (pages freed earlier;
	 * at most as many as were freed since the last RECLAIM), not all that
	 * is free (most of an idle big guest's: zero already, never written
	 * since its template booted). */
	cap = ~0ul;
	if (free0_kb >= 0 && free1_kb >= free0_kb && total_kb > 0) {
		unsigned long more = (unsigned long)total_kb / 8 * 1024;
		long page = sysconf(_SC_PAGESIZE);

		if (a->pgfree_mark && freed >= a->pgfree_mark && page > 0 &&
		    (freed - a->pgfree_mark) * (uint64_t)page < more)
			more = (unsigned long)((freed - a->pgfree_mark) * (uint64_t)page);
		cap = (unsigned long)(free1_kb - free0_kb) * 1024 + more;
	}
	/* above the kernel's own watermarks (high = 1.5 x min; 2 MiB of min
	 * in a 256 MiB guest). What stays free is not zeroed: a 16 MiB
	 * reserve left 15 MiB of a 48 MiB file's old cache in the artifact. */
	min_free_kb = read_long("/proc/sys/vm/min_free_kbytes");
	if (min_free_kb > 0 && (unsigned long)min_free_kb * 1024 * 3 > reserve)
		reserve = (unsigned long)min_free_kb * 1024 * 3;
	thp_never = thp_is_never();
	if (thp_never)
		(void)write_str(THP_ENABLED, "madvise");
	pid = fork();
	if (pid == 0)
		zero_free(reserve, cap);
	r = pid < 0 ? errno : 0;
	/* Synchronous: the host pauses the guest after our answer. */
	while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (thp_never)
		(void)write_str(THP_ENABLED, "never");
	if (r) {
		agent_send_error(a, f->req_id, r, "reclaim: fork: %s", strerror(r));
		return;
	}
	/* what was free is zero now (what the child freed on its way out
	 * included); a child that stopped early leaves the mark as it was */
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		a->pgfree_mark = pages_freed();
	agent_send_ok(a, f->req_id);
}
