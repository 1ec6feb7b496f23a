/* test-nodemgr-delta: vm_ram_delta_save (vm-delta.c) on a real process and a
 * real btrfs loop pool (root only), without QEMU: a child maps a "RAM" file
 * MAP_PRIVATE and writes some pages, the way a clone's guest writes over
 * the template's RAM file. Checked:
 *   - the memory file is the mapped file with exactly the written pages
 *     over it, and *bytes counts those pages;
 *   - memory that moves while `save` runs (a device writing guest RAM while
 *     the vCPUs are stopped) is caught and the whole thing done again, so
 *     the file matches memory as it was when `save` last ran;
 *   - memory that keeps moving: -EAGAIN and no file left;
 *   - the mapped file unlinked meanwhile (a fork's throw-away snapshot):
 *     still found through map_files;
 *   - no mapping of that size: -ENOTSUP, no file;
 *   - vm_ram_written counts the pages written, and a whole-file clone into
 *     the mapped file is what every page not written reads from then on;
 *   - the fork form: vm_ram_delta_save_sparse keeps exactly the written pages
 *     (a page written to zeros too) as data, holes elsewhere, and
 *     vm_ram_delta_apply into another process that maps the same file (a fork
 *     standby) gives it those pages as its own and the file's elsewhere (by
 *     the delta's run list, and without it by seeking its data); a
 *     process that maps another file is refused both ways.
 * Every exit path runs cleanup(): the child killed, the pool unmounted, the
 * temp dir removed. */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "../../src/lib/util.h"
#include "check.h"
#include "tmp-pool.h"
#include "../../src/nodemgr/vm/vm-delta.h"
#include "../../src/pool/pool.h"

#define PG 4096
#define NPAGES 512   /* a 2 MiB "guest" */

static pid_t child = -1;
static int to_child = -1, from_child = -1;

static void cleanup(void)
{
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		child = -1;
	}
	tmp_pool_remove();
}

#undef CHECK
#define CHECK(c) REQUIRE(c, cleanup)

/* The byte every page of the "template" starts with, and what the child
 * writes: page i of the template is filled with tmpl_byte(i). */
static uint8_t tmpl_byte(size_t i)
{
	return (uint8_t)(i * 7 + 1);
}

/* The child: map path private, then obey one-byte commands from the
 * parent: 'w' <page> <byte>: fill that page with byte; 'r' <page>: answer
 * its first byte; every other command is answered with one byte once
 * done. */
static void __attribute__((noreturn)) child_main(const char *path, int in, int out)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);
	uint8_t *ram;
	uint8_t cmd[4];

	if (fd < 0)
		_exit(2);
	ram = mmap(NULL, NPAGES * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	if (ram == MAP_FAILED)
		_exit(3);
	close(fd);
	/* read every page once: present file pages, which are not "written" */
	for (size_t i = 0; i < NPAGES; i++)
		(void)*(volatile uint8_t *)(ram + i * PG);
	for (;;) {
		if (read_all(in, cmd, sizeof(cmd)) < 0)
			_exit(0);
		size_t page = (size_t)cmd[1] << 8 | cmd[2];
		if (cmd[0] == 'w')
			memset(ram + page * PG, cmd[3], PG);
		if (write_all(out, cmd[0] == 'r' ? ram + page * PG : (const uint8_t *)"k", 1) < 0)
			_exit(4);
	}
}

static void child_write(size_t page, uint8_t byte)
{
	uint8_t cmd[4] = { 'w', (uint8_t)(page >> 8), (uint8_t)page, byte }, ack;

	CHECK(write_all(to_child, cmd, sizeof(cmd)) == 0);
	CHECK(read_all(from_child, &ack, 1) == 0);
}

static uint8_t child_read(size_t page)
{
	uint8_t cmd[4] = { 'r', (uint8_t)(page >> 8), (uint8_t)page, 0 }, got = 0;

	CHECK(write_all(to_child, cmd, sizeof(cmd)) == 0);
	CHECK(read_all(from_child, &got, 1) == 0);
	return got;
}

static void stop_child(void)
{
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	child = -1;
	close(to_child);
	close(from_child);
}

/* A file of NPAGES pages, page i filled with byte(i). */
static void make_ram(const char *path, uint8_t (*byte)(size_t))
{
	uint8_t *page = xmalloc(PG);
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);

	CHECK(fd >= 0);
	for (size_t i = 0; i < NPAGES; i++) {
		memset(page, byte(i), PG);
		CHECK(pwrite(fd, page, PG, (off_t)(i * PG)) == PG);
	}
	CHECK(fsync(fd) == 0);
	close(fd);
	free(page);
}

static uint8_t other_byte(size_t i)
{
	return (uint8_t)(i * 5 + 3);
}

static void start_child(const char *path)
{
	int a[2], b[2];
	uint8_t ack;

	CHECK(pipe2(a, O_CLOEXEC) == 0 && pipe2(b, O_CLOEXEC) == 0);
	child = fork();
	CHECK(child >= 0);
	if (child == 0)
		child_main(path, a[0], b[1]);
	close(a[0]);
	close(b[1]);
	to_child = a[1];
	from_child = b[0];
	/* a no-op command: the child has mapped and read its RAM */
	uint8_t cmd[4] = { 'n', 0, 0, 0 };
	CHECK(write_all(to_child, cmd, sizeof(cmd)) == 0);
	CHECK(read_all(from_child, &ack, 1) == 0);
}

/* save callbacks: how often they ran, and how many of those runs move
 * memory (write page `page` with a new byte each time). */
struct saver {
	int calls;
	int moves;
	size_t page;
};

static int save_cb(void *arg, err_t *err)
{
	struct saver *sv = arg;

	(void)err;
	if (sv->calls++ < sv->moves)
		child_write(sv->page, (uint8_t)(0xA0 + sv->calls));
	return 0;
}

/* mem must hold, page by page, want[i] (0 = the template's byte). */
static void check_file(const char *mem, const uint8_t *want)
{
	int fd = open(mem, O_RDONLY | O_CLOEXEC);
	uint8_t *buf = xmalloc(PG);
	struct stat st;

	CHECK(fd >= 0);
	CHECK(fstat(fd, &st) == 0 && st.st_size == NPAGES * PG);
	CHECK((st.st_mode & 0777) == 0640);
	for (size_t i = 0; i < NPAGES; i++) {
		uint8_t b = want[i] ? want[i] : tmpl_byte(i);
		CHECK(pread(fd, buf, PG, (off_t)(i * PG)) == PG);
		for (size_t k = 0; k < PG; k++)
			if (buf[k] != b) {
				fprintf(stderr, "page %zu byte %zu: %#x, want %#x\n", i, k, buf[k], b);
				CHECK(!"memory file differs");
			}
	}
	free(buf);
	close(fd);
}

int main(void)
{
	char pool[200], ram[300], mem[300];
	uint8_t want[NPAGES] = { 0 }, *page = xmalloc(PG);
	bool mounted = false;
	uint64_t bytes = 0;
	struct saver sv;
	err_t e = { 0 };

	if (geteuid() != 0) {
		fprintf(stderr, "test-nodemgr-delta: needs root, skipping\n");
		return 77;
	}
	CHECK(tmp_pool_make(1024, &mounted, &e) == 0);
	snprintf(pool, sizeof(pool), "%s/pool", tmpdir);
	snprintf(ram, sizeof(ram), "%s/ram", pool);
	snprintf(mem, sizeof(mem), "%s/snap.mem", pool);

	/* The "template RAM file", written and synced (as a template's is). */
	make_ram(ram, tmpl_byte);
	start_child(ram);   /* it writes only on command: "stopped" in between */

	/* 1. Nothing written yet: the file as it is, no page counted. */
	sv = (struct saver){ 0 };
	CHECK(vm_ram_delta_save(child, NPAGES * PG, mem, 0, save_cb, &sv, &bytes, &e) == 0);
	CHECK(sv.calls == 1 && bytes == 0);
	check_file(mem, want);
	unlink(mem);
	CHECK(vm_ram_written(child, NPAGES * PG, &bytes, &e) == 0 && bytes == 0);

	/* 2. Three pages written, two of them next to each other. */
	child_write(3, 0x11), want[3] = 0x11;
	child_write(4, 0x12), want[4] = 0x12;
	child_write(300, 0x13), want[300] = 0x13;
	sv = (struct saver){ 0 };
	CHECK(vm_ram_delta_save(child, NPAGES * PG, mem, 0, save_cb, &sv, &bytes, &e) == 0);
	CHECK(sv.calls == 1 && bytes == 3 * PG);
	check_file(mem, want);
	unlink(mem);
	CHECK(vm_ram_written(child, NPAGES * PG, &bytes, &e) == 0 && bytes == 3);

	/* 3. Memory moves during the first save (a page written anew, and a
	 * page written for the first time): done again, and the file is
	 * memory as of the second save. */
	sv = (struct saver){ .moves = 1, .page = 4 };
	CHECK(vm_ram_delta_save(child, NPAGES * PG, mem, 0, save_cb, &sv, &bytes, &e) == 0);
	CHECK(sv.calls == 2);
	want[4] = 0xA1;
	check_file(mem, want);
	unlink(mem);
	sv = (struct saver){ .moves = 1, .page = 511 };
	CHECK(vm_ram_delta_save(child, NPAGES * PG, mem, 0, save_cb, &sv, &bytes, &e) == 0);
	CHECK(sv.calls == 2 && bytes == 4 * PG);
	want[511] = 0xA1;
	check_file(mem, want);
	unlink(mem);

	/* 4. Memory that keeps moving: -EAGAIN after three tries, no file. */
	sv = (struct saver){ .moves = 100, .page = 7 };
	CHECK(vm_ram_delta_save(child, NPAGES * PG, mem, 0, save_cb, &sv, &bytes, &e) == -EAGAIN);
	CHECK(sv.calls == 3);
	CHECK(access(mem, F_OK) < 0 && errno == ENOENT);
	want[7] = 0xA3;

	/* 5. The mapped file unlinked: still found (map_files). */
	CHECK(unlink(ram) == 0);
	sv = (struct saver){ 0 };
	e = (err_t){ 0 };
	CHECK(vm_ram_delta_save(child, NPAGES * PG, mem, 0, save_cb, &sv, &bytes, &e) == 0);
	check_file(mem, want);
	unlink(mem);

	/* 6. No mapping of that size: -ENOTSUP, nothing made, save not run. */
	sv = (struct saver){ 0 };
	CHECK(vm_ram_delta_save(child, (NPAGES + 1) * PG, mem, 0, save_cb, &sv, &bytes, &e) ==
	      -ENOTSUP);
	CHECK(sv.calls == 0 && access(mem, F_OK) < 0);
	CHECK(vm_ram_written(child, (NPAGES + 1) * PG, &bytes, &e) == -ENOTSUP);
	stop_child();

	/* 7. A fork standby: a process maps a file it has not written (its
	 * pages read, so present), and a whole-file clone into that file
	 * replaces what it reads, every page. */
	{
		char ram2[300], other[300];
		snprintf(ram2, sizeof(ram2), "%s/ram2", pool);
		snprintf(other, sizeof(other), "%s/other", pool);
		make_ram(ram2, tmpl_byte);
		make_ram(other, other_byte);
		start_child(ram2);
		CHECK(child_read(9) == tmpl_byte(9));
		CHECK(vm_ram_written(child, NPAGES * PG, &bytes, &e) == 0 && bytes == 0);
		int src = open(other, O_RDONLY | O_CLOEXEC), dst = open(ram2, O_WRONLY | O_CLOEXEC);
		CHECK(src >= 0 && dst >= 0 && ioctl(dst, FICLONE, src) == 0);
		close(src);
		close(dst);
		for (size_t i = 0; i < NPAGES; i++)
			if (child_read(i) != other_byte(i)) {
				fprintf(stderr, "page %zu: %#x, want %#x\n", i, child_read(i),
					other_byte(i));
				CHECK(!"a page kept the file's old bytes");
			}
	}

	stop_child();

	/* 8. The fork form. */
	{
		char base[300], delta[300], other[300];
		struct stat bst, ost;
		uint8_t fwant[NPAGES] = { 0 };
		off_t off, end;
		size_t data = 0;

		snprintf(base, sizeof(base), "%s/ram3", pool);
		snprintf(delta, sizeof(delta), "%s/snap.delta", pool);
		snprintf(other, sizeof(other), "%s/other", pool);
		make_ram(base, tmpl_byte);
		CHECK(stat(base, &bst) == 0 && stat(other, &ost) == 0);
		start_child(base);   /* the parent */
		child_write(3, 0x21), fwant[3] = 0x21;
		child_write(4, 0x22), fwant[4] = 0x22;
		child_write(10, 0x00);   /* written, and zero: must still go */
		child_write(300, 0x23), fwant[300] = 0x23;
		/* not the file it maps: refused, nothing made */
		sv = (struct saver){ 0 };
		CHECK(vm_ram_delta_save_sparse(child, NPAGES * PG, &ost, delta, 0, save_cb, &sv,
					       &bytes, &e) == -ENOTSUP);
		CHECK(sv.calls == 0 && access(delta, F_OK) < 0);
		sv = (struct saver){ .moves = 1, .page = 300 };   /* and memory moves once */
		CHECK(vm_ram_delta_save_sparse(child, NPAGES * PG, &bst, delta, 0, save_cb, &sv,
					       &bytes, &e) == 0);
		fwant[300] = 0xA1;
		CHECK(sv.calls == 2 && bytes == 4 * PG);
		stop_child();
		/* data exactly at pages 3-4, 10 and 300 */
		int fd = open(delta, O_RDONLY | O_CLOEXEC);
		CHECK(fd >= 0);
		for (off = 0; (off = lseek(fd, off, SEEK_DATA)) >= 0; off = end) {
			end = lseek(fd, off, SEEK_HOLE);
			CHECK(end > off);
			for (off_t p = off; p < end; p += PG) {
				size_t i = (size_t)(p / PG);
				CHECK(i == 3 || i == 4 || i == 10 || i == 300);
				data++;
			}
		}
		close(fd);
		CHECK(data == 4);
		/* a standby of another file: refused */
		start_child(other);
		CHECK(vm_ram_delta_apply(child, NPAGES * PG, delta, &bytes, &e) == -ESTALE);
		CHECK(vm_ram_written(child, NPAGES * PG, &bytes, &e) == 0 && bytes == 0);
		stop_child();
		/* a standby of the same file: the parent's memory */
		start_child(base);
		CHECK(vm_ram_delta_apply(child, NPAGES * PG, delta, &bytes, &e) == 0 &&
		      bytes == 4 * PG);
		CHECK(vm_ram_written(child, NPAGES * PG, &bytes, &e) == 0 && bytes == 4);
		for (size_t i = 0; i < NPAGES; i++) {
			uint8_t w = i == 10 ? 0 : fwant[i] ? fwant[i] : tmpl_byte(i);
			if (child_read(i) != w) {
				fprintf(stderr, "page %zu: %#x, want %#x\n", i, child_read(i), w);
				CHECK(!"the standby does not hold the parent's memory");
			}
		}
		/* and the file itself untouched */
		uint8_t b = 0;
		fd = open(base, O_RDONLY | O_CLOEXEC);
		CHECK(fd >= 0 && pread(fd, &b, 1, 3 * PG) == 1 && b == tmpl_byte(3));
		close(fd);
		stop_child();
		/* Without its run list (one too long for an xattr): found by
		 * seeking, the same pages. */
		CHECK(removexattr(delta, "user.airlock.delta_runs") == 0);
		start_child(base);
		CHECK(vm_ram_delta_apply(child, NPAGES * PG, delta, &bytes, &e) == 0 &&
		      bytes == 4 * PG);
		CHECK(child_read(3) == 0x21 && child_read(10) == 0 && child_read(300) == 0xA1 &&
		      child_read(5) == tmpl_byte(5));
	}

	free(page);
	cleanup();
	printf("test-nodemgr-delta: ok\n");
	return 0;
}
