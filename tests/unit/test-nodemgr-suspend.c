/* test-nodemgr-suspend: a vm suspend's memory and device-state artifacts
 * (src/nodemgr/vm/vm-suspend.c) on a real btrfs pool (root only): the memory
 * is exported as the pages that differ from the template's RAM file and
 * rebuilt byte for byte on a reflink of it; the device state round-trips;
 * and the importer, which parses bytes from the object store as root,
 * refuses every hostile stream: not zstd, a wrong magic, a RAM size not the
 * guest's, a page past the end, a stream cut short, bytes after the end
 * mark, and one that decompresses past its bound. The memory's base
 * travels by content (src/nodemgr/vm/vm-base.c): the export names the
 * template RAM file's SHA-256, a node without that file takes the base
 * only when its content has that digest (a swapped or corrupted one is
 * refused naming it), and then rebuilds the same RAM from it. */
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <zstd.h>

#include "../../src/lib/util.h"
#include "../../src/nodemgr/core/nodemgr-internal.h"
#include "../../src/nodemgr/vm/vm-delta.h"
#include "../../src/nodemgr/vm/vm-internal.h"
#include "../../src/pool/pool.h"
#include "check.h"
#include "tmp-pool.h"

#undef CHECK
#define CHECK(c) REQUIRE(c, tmp_pool_remove)

#define MB 4u
#define SIZE ((size_t)MB << 20)
#define PG 4096u

static struct nm_server srv;
/* What an export names as its memory's base; most tests diff against the
 * template's own RAM file (want_base NULL), as a suspend does by default. */
static char base_sha[65];
static struct nm_sandbox_spec spec;
static char snapdir[300], mem[400], vmstate[400], tmem[400];

static void fill(uint8_t *b, uint8_t seed)
{
	for (size_t i = 0; i < SIZE; i++)
		b[i] = (uint8_t)(i * 31 + seed + (i >> 12));
}

static void put_file(const char *path, const void *p, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	CHECK(fd >= 0 && write_all(fd, p, n) == 0);
	close(fd);
}

static uint8_t *get_file(const char *path, size_t *n)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	uint8_t *b;

	CHECK(fd >= 0 && fstat(fd, &st) == 0);
	b = xmalloc((size_t)st.st_size + 1);
	CHECK(read(fd, b, (size_t)st.st_size) == st.st_size);
	close(fd);
	*n = (size_t)st.st_size;
	return b;
}

/* A pipe's bytes, read to its end (an export into a pipe, as the node
 * seals it as it comes). */
struct drain {
	int in;
	struct buf b;
};

static void *drain(void *arg)
{
	struct drain *d = arg;
	char c[65536];
	ssize_t k;

	while ((k = read(d->in, c, sizeof(c))) > 0)
		buf_add(&d->b, c, (size_t)k);
	return NULL;
}

/* Export artifact into a pipe: the same bytes as want (size bytes of a
 * file), and nodemgr does not know their size. */
static void export_piped(uint32_t artifact, int want, int64_t size)
{
	int pp[2];
	int64_t psize = 0;
	struct drain d = { -1, { 0 } };
	pthread_t t;
	err_t e = { 0 };
	char *w = xmalloc((size_t)size + 1);

	buf_init(&d.b);
	CHECK(pipe(pp) == 0);
	d.in = pp[0];
	CHECK(pthread_create(&t, NULL, drain, &d) == 0);
	CHECK(vm_suspend_export(&srv, &spec, "su-1", artifact, pp[1], &psize, NULL, base_sha,
				&e) == 0);
	close(pp[1]);
	pthread_join(t, NULL);
	close(pp[0]);
	CHECK(pread(want, w, (size_t)size, 0) == size);
	CHECK(psize == -1 && d.b.len == (size_t)size && memcmp(d.b.data, w, (size_t)size) == 0);
	buf_free(&d.b);
	free(w);
}

static int tmpfd(void)
{
	char path[400];
	int fd;

	snprintf(path, sizeof(path), "%s/artifact", tmpdir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	CHECK(fd >= 0);
	unlink(path);
	return fd;
}

/* An fd holding zstd(raw). */
static int zfd(const void *raw, size_t n)
{
	size_t cap = ZSTD_compressBound(n);
	void *z = xmalloc(cap);
	size_t zn = ZSTD_compress(z, cap, raw, n, 1);
	int fd = tmpfd();

	CHECK(!ZSTD_isError(zn) && write_all(fd, z, zn) == 0);
	free(z);
	return fd;
}

/* A memory stream: header (magic, page size, base, size), the records, and
 * the end mark unless end is false. */
static size_t stream(uint8_t *out, const char *magic, uint64_t size, const uint64_t *idx,
		     int n, bool end)
{
	uint32_t ps = PG, base = 1;
	size_t o = 0;

	memcpy(out, magic, 8);
	memcpy(out + 8, &ps, 4);
	memcpy(out + 12, &base, 4);
	memcpy(out + 16, &size, 8);
	o = 24;
	for (int i = 0; i < n; i++) {
		memcpy(out + o, &idx[i], 8);
		memset(out + o + 8, 0x77, PG);
		o += 8 + PG;
	}
	if (end) {
		memset(out + o, 0xff, 8);
		o += 8;
	}
	return o;
}

static int import_mem(int fd, err_t *e)
{
	return vm_suspend_import(&srv, &spec, "su-1", NM_ARTIFACT_MEM, fd, NULL, e);
}

static void hostile(const char *what, const void *raw, size_t n, bool compress)
{
	int fd = compress ? zfd(raw, n) : tmpfd();
	err_t e = { 0 };
	int r;

	if (!compress)
		CHECK(write_all(fd, raw, n) == 0);
	r = import_mem(fd, &e);
	if (r != -EBADMSG)
		fprintf(stderr, "%s: %d %s\n", what, r, e.msg);
	CHECK(r == -EBADMSG);
	close(fd);
}

int main(void)
{
	uint8_t *tmpl = xmalloc(SIZE), *guest = xmalloc(SIZE), *raw, *got;
	size_t n, rawcap = 24 + 4 * (8 + PG) + 8;
	struct vm_shape sh;
	bool mounted = false;
	int64_t size = 0;
	err_t e = { 0 };
	char *cache;
	int fd;

	if (geteuid() != 0) {
		fprintf(stderr, "test-nodemgr-suspend: needs root, skipping\n");
		return 77;
	}
	CHECK(tmp_pool_make(1024, &mounted, &e) == 0);
	srv.pool = xasprintf("%s/pool", tmpdir);
	snprintf(spec.id, sizeof(spec.id), "sb-1");
	snprintf(spec.template_name, sizeof(spec.template_name), "t");
	spec.template_version = 1;
	spec.limits.memory_mb = MB;
	spec.limits.cpu_millis = 1000;

	/* The template's RAM file for this shape, and a full snapshot whose
	 * RAM is it with 3 pages written (first, middle, last). */
	vm_shape_of(&spec, &sh);
	cache = vm_cache_dir(&srv, &spec, &sh);
	CHECK(mkdir_p(cache, 0700) == 0);
	snprintf(tmem, sizeof(tmem), "%s/mem", cache);
	fill(tmpl, 1);
	/* a booted guest's RAM is mostly zero pages: the second half here */
	memset(tmpl + SIZE / 2, 0, SIZE / 2);
	put_file(tmem, tmpl, SIZE);
	memcpy(guest, tmpl, SIZE);
	memset(guest, 0xaa, PG);
	memset(guest + SIZE / 2 + 5, 0xbb, 10);
	memset(guest + SIZE - PG, 0xcc, PG);
	snprintf(snapdir, sizeof(snapdir), "%s/snapshots/sb-1", srv.pool);
	CHECK(mkdir(snapdir, 0700) == 0);
	snprintf(mem, sizeof(mem), "%s/su-1.mem", snapdir);
	snprintf(vmstate, sizeof(vmstate), "%s/su-1.vmstate", snapdir);
	put_file(mem, guest, SIZE);
	put_file(vmstate, "device state", 12);
	{
		char sub[400];
		snprintf(sub, sizeof(sub), "%s/su-1", snapdir);
		CHECK(pool_subvol_create(sub, &e) == 0);
	}

	/* Export: 3 pages, compressed; far less than the RAM. */
	fd = tmpfd();
	CHECK(vm_suspend_export(&srv, &spec, "su-1", NM_ARTIFACT_MEM, fd, &size, NULL, base_sha,
				&e) == 0);
	printf("memory artifact: %lld bytes for 3 written pages of %u MiB\n", (long long)size, MB);
	CHECK(size > 0 && size < 4 * PG);
	export_piped(NM_ARTIFACT_MEM, fd, size);
	/* Import over nothing: the same RAM, byte for byte. */
	unlink(mem);
	CHECK(import_mem(fd, &e) == 0);
	got = get_file(mem, &n);
	CHECK(n == SIZE && memcmp(got, guest, SIZE) == 0);
	free(got);
	close(fd);
	/* The device state round-trips. */
	fd = tmpfd();
	CHECK(vm_suspend_export(&srv, &spec, "su-1", NM_ARTIFACT_VMSTATE, fd, &size, NULL, base_sha,
				&e) == 0);
	export_piped(NM_ARTIFACT_VMSTATE, fd, size);
	unlink(vmstate);
	CHECK(vm_suspend_import(&srv, &spec, "su-1", NM_ARTIFACT_VMSTATE, fd, NULL, &e) == 0);
	got = get_file(vmstate, &n);
	CHECK(n == 12 && memcmp(got, "device state", 12) == 0);
	free(got);
	close(fd);

	/* A reflink of the base with pages written over it, as a clone's
	 * memory file is (vm_ram_delta_save). Once written back, the extents
	 * still shared are known without reading them (pool_shared_spans);
	 * before, FIEMAP does not see the written pages, so the export takes
	 * them from the file's run list, and compares all without one. */
	{
		char mem2[400];
		uint8_t *guest2 = xmalloc(SIZE), pg[PG];
		uint32_t runs[6] = { 0, 1, (uint32_t)(SIZE / 2 / PG), 1, (uint32_t)(SIZE / PG - 1), 1 };
		struct pool_span *sp = NULL;
		size_t nsp = 0;
		int tfd = open(tmem, O_RDONLY | O_CLOEXEC), mfd, ofd;
		uint64_t shared = 0;

		snprintf(mem2, sizeof(mem2), "%s/su-2.mem", snapdir);
		memcpy(guest2, tmpl, SIZE);
		for (int round = 0; round < 3; round++) {
			/* 0: no run list; 1: the list; 2: a list that leaves out
			 * the middle page (nothing reads it: the export is short
			 * of it, proof that it trusted the list) */
			unlink(mem2);
			mfd = open(mem2, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
			CHECK(tfd >= 0 && mfd >= 0 && ioctl(mfd, FICLONE, tfd) == 0);
			for (uint32_t i = 0; i < 3; i++) {
				memset(pg, 0x40 + (int)i, PG);
				CHECK(pwrite(mfd, pg, PG, (off_t)runs[2 * i] * PG) == PG);
				memcpy(guest2 + (size_t)runs[2 * i] * PG, pg, PG);
			}
			if (round == 1)
				CHECK(fsetxattr(mfd, RAM_RUNS_XATTR, runs, sizeof(runs), 0) == 0);
			if (round == 2) {
				uint32_t some[4] = { runs[0], runs[1], runs[4], runs[5] };
				CHECK(fsetxattr(mfd, RAM_RUNS_XATTR, some, sizeof(some), 0) == 0);
			}
			close(mfd);
			fd = tmpfd();
			CHECK(vm_suspend_export(&srv, &spec, "su-2", NM_ARTIFACT_MEM, fd, &size,
						NULL, base_sha, &e) == 0);
			CHECK(size > 0 && size < 4 * PG);
			unlink(mem2);
			CHECK(vm_suspend_import(&srv, &spec, "su-2", NM_ARTIFACT_MEM, fd, NULL,
						&e) == 0);
			close(fd);
			got = get_file(mem2, &n);
			CHECK(n == SIZE);
			if (round < 2) {
				CHECK(memcmp(got, guest2, SIZE) == 0);
			} else {
				CHECK(got[SIZE / 2] == tmpl[SIZE / 2] && got[SIZE / 2] != guest2[SIZE / 2]);
				CHECK(got[0] == guest2[0] && got[SIZE - 1] == guest2[SIZE - 1]);
			}
			free(got);
		}
		/* written back: exactly the 3 pages are no longer shared */
		mfd = open(mem2, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		CHECK(mfd >= 0 && ioctl(mfd, FICLONE, tfd) == 0);
		for (uint32_t i = 0; i < 3; i++)
			CHECK(pwrite(mfd, pg, PG, (off_t)runs[2 * i] * PG) == PG);
		CHECK(fsync(mfd) == 0);
		CHECK(pool_shared_spans(mfd, tfd, SIZE, &sp, &nsp, &e) == 0);
		for (size_t i = 0; i < nsp; i++)
			shared += sp[i].end - sp[i].start;
		free(sp);
		printf("reflink, 3 pages written back: %zu shared spans, %llu of %zu bytes\n", nsp,
		       (unsigned long long)shared, SIZE);
		CHECK(nsp == 2 && shared == SIZE - 3 * PG);
		close(mfd);
		/* two files written apart share nothing, however alike */
		put_file(mem2, tmpl, SIZE);
		ofd = open(mem2, O_RDONLY | O_CLOEXEC);
		CHECK(ofd >= 0 && fsync(ofd) == 0);
		CHECK(pool_shared_spans(ofd, tfd, SIZE, &sp, &nsp, &e) == 0);
		free(sp);
		CHECK(nsp == 0);
		close(ofd);
		/* holes in both (a RAM file QEMU wrote keeps its guest's
		 * never-written pages as holes): known zero in both; a page
		 * written into a hole is not one, written back or not */
		{
			char *h1 = xasprintf("%s.h1", mem2), *h2 = xasprintf("%s.h2", mem2);
			int f1 = open(h1, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
			int f2 = open(h2, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
			const uint64_t M = 1u << 20;

			CHECK(f1 >= 0 && f2 >= 0 && ftruncate(f1, SIZE) == 0 && ftruncate(f2, SIZE) == 0);
			/* f1: data in [0, 1M) and [2M, 3M); f2: in [0, 1.5M) and [3.5M, 4M) */
			for (uint64_t o = 0; o < SIZE; o += PG) {
				if (o < M || (o >= 2 * M && o < 3 * M))
					CHECK(pwrite(f1, pg, PG, (off_t)o) == PG);
				if (o < 3 * M / 2 || o >= 7 * M / 2)
					CHECK(pwrite(f2, pg, PG, (off_t)o) == PG);
			}
			CHECK(fsync(f1) == 0 && fsync(f2) == 0);
			CHECK(pool_hole_spans(f1, f2, SIZE, &sp, &nsp, &e) == 0);
			CHECK(nsp == 2 && sp[0].start == 3 * M / 2 && sp[0].end == 2 * M &&
			      sp[1].start == 3 * M && sp[1].end == 7 * M / 2);
			free(sp);
			/* a page into f1's hole at 3M, not written back */
			CHECK(pwrite(f1, pg, PG, (off_t)(3 * M)) == PG);
			CHECK(pool_hole_spans(f1, f2, SIZE, &sp, &nsp, &e) == 0);
			CHECK(nsp == 2 && sp[1].start == 3 * M + PG && sp[1].end == 7 * M / 2);
			free(sp);
			close(f1);
			close(f2);
			unlink(h1);
			unlink(h2);
			free(h1);
			free(h2);
		}
		close(tfd);
		unlink(mem2);
		free(guest2);
	}

	/* The base by content: the export names the SHA-256 of the
	 * template's RAM file, which a node without that file takes only with
	 * that digest, and then rebuilds the same RAM from it. */
	{
		char bsha[65], xsha[65], want[65], moved[420];
		unsigned char md[32];
		unsigned int mdlen = 0;
		uint64_t bsize = 0;
		int64_t bbytes = 0;
		int bfd, mfd;

		EVP_Digest(tmpl, SIZE, md, &mdlen, EVP_sha256(), NULL);
		for (unsigned i = 0; i < 32; i++)
			snprintf(want + 2 * i, 3, "%02x", md[i]);
		mfd = tmpfd();
		CHECK(vm_suspend_export(&srv, &spec, "su-1", NM_ARTIFACT_MEM, mfd, &size, NULL,
					bsha, &e) == 0);
		CHECK(strcmp(bsha, want) == 0);
		bfd = tmpfd();
		CHECK(vm_base_export(&srv, &spec, bfd, xsha, &bsize, &bbytes, &e) == 0);
		CHECK(strcmp(xsha, want) == 0 && bsize == SIZE && bbytes > 0);
		/* another node: no template file of that shape */
		snprintf(moved, sizeof(moved), "%s.away", tmem);
		CHECK(rename(tmem, moved) == 0);
		CHECK(vm_base_find(&srv, &spec, bsha, xsha, &bsize, &e) == -ENOENT);
		unlink(mem);
		CHECK(vm_suspend_import(&srv, &spec, "su-1", NM_ARTIFACT_MEM, mfd, bsha, &e) ==
		      -ENOENT);
		/* a base named by another digest is refused, naming both */
		memset(xsha, 'a', 64);
		xsha[64] = '\0';
		e = (err_t){ 0 };
		CHECK(vm_base_import(&srv, &spec, xsha, bfd, &e) == -EBADMSG);
		CHECK(strstr(e.msg, "memory base aaaaaaaa") && strstr(e.msg, "manifest names"));
		/* other bytes (a valid stream) under the right name: refused */
		{
			int ofd = zfd(guest, SIZE);
			CHECK(vm_base_import(&srv, &spec, bsha, ofd, &e) == -EBADMSG);
			close(ofd);
		}
		/* more than the shape's RAM: stopped at that bound */
		{
			uint8_t *big = xcalloc(2, SIZE);
			int ofd = zfd(big, 2 * SIZE);
			e = (err_t){ 0 };
			CHECK(vm_base_import(&srv, &spec, bsha, ofd, &e) == -EBADMSG);
			CHECK(strstr(e.msg, "more than the 4 MiB"));
			close(ofd);
			free(big);
		}
		CHECK(vm_base_find(&srv, &spec, bsha, xsha, &bsize, &e) == -ENOENT);
		/* the right one: kept, and the RAM rebuilt from it */
		CHECK(vm_base_import(&srv, &spec, bsha, bfd, &e) == 0);
		CHECK(vm_base_find(&srv, &spec, bsha, xsha, &bsize, &e) == 0 && bsize == SIZE);
		{
			/* byte for byte the template's RAM, its zero pages holes */
			char *kept = xasprintf("%s/membase/%s", srv.pool, bsha);
			struct stat st;
			size_t kn = 0;
			uint8_t *kb = get_file(kept, &kn);

			CHECK(kb && kn == SIZE && memcmp(kb, tmpl, SIZE) == 0);
			CHECK(stat(kept, &st) == 0 && st.st_size == SIZE &&
			      (uint64_t)st.st_blocks * 512 <= SIZE / 2 + 65536);
			free(kb);
			free(kept);
		}
		CHECK(vm_suspend_import(&srv, &spec, "su-1", NM_ARTIFACT_MEM, mfd, bsha, &e) == 0);
		got = get_file(mem, &n);
		CHECK(n == SIZE && memcmp(got, guest, SIZE) == 0);
		free(got);
		/* its next suspend here diffs against the base it was rebuilt
		 * on when asked (this node has no template file), not zeros */
		{
			int64_t from_base = 0, from_zeros = 0;
			int f1 = tmpfd(), f2 = tmpfd();
			CHECK(vm_suspend_export(&srv, &spec, "su-1", NM_ARTIFACT_MEM, f1,
						&from_base, bsha, xsha, &e) == 0);
			CHECK(strcmp(xsha, bsha) == 0);
			CHECK(vm_suspend_export(&srv, &spec, "su-1", NM_ARTIFACT_MEM, f2,
						&from_zeros, "", xsha, &e) == 0);
			CHECK(xsha[0] == '\0');
			CHECK(from_base > 0 && from_base < from_zeros);
			close(f1);
			close(f2);
		}
		CHECK(rename(moved, tmem) == 0);
		close(bfd);
		close(mfd);
	}

	/* Hostile streams. */
	raw = xcalloc(1, rawcap + SIZE);
	{
		uint64_t ok[1] = { 3 }, past[1] = { SIZE / PG }, huge[1] = { UINT64_MAX - 1 };
		hostile("not zstd", "this is not a zstd frame at all", 31, false);
		n = stream(raw, "ALMEM999", SIZE, ok, 1, true);
		hostile("magic", raw, n, true);
		n = stream(raw, "ALMEM001", SIZE * 2, ok, 1, true);
		hostile("size", raw, n, true);
		n = stream(raw, "ALMEM001", SIZE, past, 1, true);
		hostile("page past the end", raw, n, true);
		n = stream(raw, "ALMEM001", SIZE, huge, 1, true);
		hostile("huge page index", raw, n, true);
		n = stream(raw, "ALMEM001", SIZE, ok, 1, false);
		hostile("no end mark", raw, n, true);
		n = stream(raw, "ALMEM001", SIZE, ok, 1, true);
		memcpy(raw + n, "trailing", 8);
		hostile("bytes after the end", raw, n + 8, true);
		/* a page repeated past twice the RAM: the bound stops it */
		n = stream(raw, "ALMEM001", SIZE, ok, 0, false);
		{
			size_t total = (size_t)2 * SIZE + 2 * (8 + PG);
			uint8_t *bomb = xcalloc(1, total + n);
			memcpy(bomb, raw, n);
			for (size_t o = n; o + 8 + PG <= total + n; o += 8 + PG)
				memcpy(bomb + o, ok, 8);
			hostile("bomb", bomb, total + n, true);
			free(bomb);
		}
		/* and a good one still imports after all that */
		n = stream(raw, "ALMEM001", SIZE, ok, 1, true);
		fd = zfd(raw, n);
		CHECK(import_mem(fd, &e) == 0);
		close(fd);
		got = get_file(mem, &n);
		CHECK(n == SIZE && got[3 * PG] == 0x77 && got[4 * PG] == tmpl[4 * PG]);
		free(got);
	}
	free(raw);
	free(tmpl);
	free(guest);
	free(cache);
	tmp_pool_remove();
	printf("test-nodemgr-suspend: ok\n");
	return 0;
}
