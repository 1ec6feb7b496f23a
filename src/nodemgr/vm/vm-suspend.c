/* vm-suspend.c - a vm sandbox's memory and device state as suspend
 * artifacts (snapshot/export.c has the disk):
 *
 *   memory    zstd of: "ALMEM001", u32 page size, u32 base (1: the
 *             template's RAM file for the sandbox's shape, 0: zeros), u64
 *             RAM size, then one record per page of snapshots/<id>/<snap>.mem
 *             that differs from the base (u64 page index, the page), then
 *             u64 ~0. A clone's RAM is the template's file plus the pages
 *             its guest wrote, so this is about what the guest wrote.
 *   vmstate   zstd of snapshots/<id>/<snap>.vmstate: the device state (tens
 *             of KB), or the whole migration stream when the full snapshot
 *             had no RAM file (a cold-booted guest)
 *
 * Import rebuilds <snap>.mem as a whole-file clone (FICLONE) of the base
 * plus the pages, and <snap>.vmstate; nm_sandbox_fork from the snapshot
 * then restores the guest exactly as a rollback or fork from a full
 * snapshot does. The stream is bytes from the store (checked by the node
 * against its manifest): every record is bounds-checked against the RAM
 * size, and the total decompressed size is bounded by it.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "../../lib/log.h"
#include "../../lib/util.h"
#include "../../pool/pool.h"
#include "../core/nodemgr-internal.h"
#include "vm-delta.h"
#include "vm-internal.h"

#define PAGE 4096u
#define CHUNK (1u << 20)
#define MAGIC "ALMEM001"
#define END_MARK UINT64_MAX

struct zout {
	ZSTD_CCtx *cc;
	int fd;
	void *buf;
	size_t cap;
};

static int zout_put(struct zout *z, const void *p, size_t n, ZSTD_EndDirective end, err_t *err)
{
	ZSTD_inBuffer in = { p, n, 0 };

	for (;;) {
		ZSTD_outBuffer out = { z->buf, z->cap, 0 };
		size_t left = ZSTD_compressStream2(z->cc, &out, &in, end);
		if (ZSTD_isError(left))
			return err_set(err, EIO, "zstd: %s", ZSTD_getErrorName(left));
		if (out.pos && write_all(z->fd, z->buf, out.pos) < 0)
			return err_sys(err, "write artifact");
		if (end == ZSTD_e_end ? left == 0 : in.pos == in.size)
			return 0;
	}
}

static int zout_init(struct zout *z, int fd, err_t *err)
{
	z->cc = ZSTD_createCCtx();
	z->fd = fd;
	z->cap = ZSTD_CStreamOutSize();
	z->buf = xmalloc(z->cap);
	if (!z->cc)
		return err_set(err, ENOMEM, "zstd context");
	/* level 1: what is left after the guest's RECLAIM is mostly what
	 * its programs wrote (often incompressible) and zero pages, which
	 * every level squeezes to nothing. One worker thread: the diff
	 * (reads and compares) and the compression overlap. */
	ZSTD_CCtx_setParameter(z->cc, ZSTD_c_compressionLevel, 1);
	ZSTD_CCtx_setParameter(z->cc, ZSTD_c_checksumFlag, 1);
	(void)ZSTD_CCtx_setParameter(z->cc, ZSTD_c_nbWorkers, 1);   /* no-op without threads */
	return 0;
}

static void zout_free(struct zout *z)
{
	ZSTD_freeCCtx(z->cc);
	free(z->buf);
}

/* The RAM file to diff against (caller frees), or NULL: want when it is
 * here (*known: its digest is want), else the template's for spec's shape. */
static char *base_mem(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *want,
		      bool *known)
{
	char *p = NULL;
	err_t e = { 0 };

	*known = want && want[0] && vm_base_path(s, spec, want, &p, &e) == 0;
	if (*known)
		return p;
	return vm_base_path(s, spec, NULL, &p, &e) == 0 ? p : NULL;
}

/* The pages of [from, to) (page-aligned) where mem differs from base (zeros
 * without one, bfd < 0) as records into z. */
static int diff_range(int mfd, int bfd, uint8_t *a, uint8_t *b, uint64_t from, uint64_t to,
		      struct zout *z, uint64_t *pages, err_t *err)
{
	uint64_t idx;
	int r;

	for (uint64_t off = from; off < to; off += CHUNK) {
		size_t n = to - off < CHUNK ? (size_t)(to - off) : CHUNK;
		if (pread(mfd, a, n, (off_t)off) != (ssize_t)n ||
		    (bfd >= 0 && pread(bfd, b, n, (off_t)off) != (ssize_t)n))
			return err_sys(err, "read the memory at %llu", (unsigned long long)off);
		for (size_t p = 0; p + PAGE <= n; p += PAGE) {
			if (memcmp(a + p, b + p, PAGE) == 0)
				continue;
			idx = (off + p) / PAGE;
			if ((r = zout_put(z, &idx, 8, ZSTD_e_continue, err)) < 0 ||
			    (r = zout_put(z, a + p, PAGE, ZSTD_e_continue, err)) < 0)
				return r;
			(*pages)++;
		}
	}
	return 0;
}

static bool bit(const uint8_t *m, uint64_t i)
{
	return m[i / 8] & (1u << (i % 8));
}

/* Which pages of mem (a bitmap, one bit a page) the export must compare
 * with the base, or NULL for all.
 * The memory file is a reflink of the file its QEMU mapped, itself one of
 * the base (a clone's, or a restore's rebuilt on it), with the pages the
 * guest wrote over it: what is still the base's extent on disk, or a hole
 * in both (pages no guest wrote), is equal without reading it (most of it,
 * and mostly not in the page cache).
 * FIEMAP shows the written pages only once they are written back, so those
 * come from the list the memory snapshot keeps (vm_ram_delta_runs); a file
 * without that list, or a filesystem without FIEMAP, is compared whole. */
static uint8_t *pages_to_read(int mfd, int bfd, uint64_t size)
{
	uint64_t npages = size / PAGE;
	_cleanup_free_ struct pool_span *sp = NULL, *holes = NULL;
	_cleanup_free_ uint32_t *runs = NULL;
	size_t nsp = 0, nholes = 0, nruns = 0;
	uint8_t *need;
	err_t e = { 0 };

	if (bfd < 0 || !(runs = vm_ram_delta_runs(mfd, size, &nruns)))
		return NULL;
	if (pool_shared_spans(mfd, bfd, size, &sp, &nsp, &e) < 0 ||
	    pool_hole_spans(mfd, bfd, size, &holes, &nholes, &e) < 0) {
		log_debug("memory compared whole: %s", e.msg);
		return NULL;
	}
	need = xmalloc(npages / 8 + 1);
	memset(need, 0xff, npages / 8 + 1);
	/* the whole pages of each span: shared, or a hole in both (a RAM file
	 * QEMU wrote keeps the pages its guest never wrote as holes) */
	for (size_t k = 0; k < nsp + nholes; k++) {
		const struct pool_span *q = k < nsp ? &sp[k] : &holes[k - nsp];
		for (uint64_t i = (q->start + PAGE - 1) / PAGE; i < q->end / PAGE; i++)
			need[i / 8] &= (uint8_t)~(1u << (i % 8));
	}
	for (size_t k = 0; k < nruns; k += 2)
		for (uint64_t i = runs[k]; i < (uint64_t)runs[k] + runs[k + 1]; i++)
			need[i / 8] |= (uint8_t)(1u << (i % 8));
	return need;
}

static int export_mem(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *mem,
		      int fd, const char *want, char base_sha[65], err_t *err)
{
	bool known;
	_cleanup_free_ char *base = base_mem(s, spec, want, &known);
	_cleanup_close_ int mfd = open(mem, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	_cleanup_close_ int bfd = base ? open(base, O_RDONLY | O_CLOEXEC) : -1;
	_cleanup_free_ uint8_t *a = xmalloc(CHUNK), *b = xcalloc(1, CHUNK);
	_cleanup_free_ uint8_t *need = NULL;
	struct zout z = { 0 };
	struct stat ms, bs;
	uint64_t pages = 0, idx, size, read = 0;
	uint8_t head[24];
	uint32_t v;
	int r;

	if (mfd < 0 || fstat(mfd, &ms) < 0)
		return err_sys(err, "open %s", mem);
	size = (uint64_t)ms.st_size;
	if (bfd >= 0 && (fstat(bfd, &bs) < 0 || bs.st_size != ms.st_size)) {
		close(bfd);
		bfd = -1;   /* not this shape's: diff against zeros */
	}
	/* the base by content, for the manifest: a restore on any node finds
	 * or fetches exactly these bytes (vm-base.c) */
	base_sha[0] = '\0';
	if (bfd >= 0 && known)
		snprintf(base_sha, 65, "%s", want);
	else if (bfd >= 0 && (r = vm_base_digest(base, bfd, base_sha, err)) < 0)
		return r;
	need = pages_to_read(mfd, bfd, size);
	if ((r = zout_init(&z, fd, err)) < 0)
		goto out;
	memcpy(head, MAGIC, 8);
	v = PAGE;
	memcpy(head + 8, &v, 4);
	v = bfd >= 0;
	memcpy(head + 12, &v, 4);
	memcpy(head + 16, &size, 8);
	if ((r = zout_put(&z, head, sizeof(head), ZSTD_e_continue, err)) < 0)
		goto out;
	/* each run of pages to read */
	for (uint64_t i = 0, j, npages = size / PAGE; i < npages; i = j) {
		while (i < npages && need && !bit(need, i))
			i++;
		for (j = i; j < npages && (!need || bit(need, j)); j++)
			;
		if (i < j && (r = diff_range(mfd, bfd, a, b, i * PAGE, j * PAGE, &z, &pages,
					     err)) < 0)
			goto out;
		read += (j - i) * PAGE;
	}
	idx = END_MARK;
	r = zout_put(&z, &idx, 8, ZSTD_e_end, err);
	if (r == 0)
		log_info("sandbox %s: memory: %llu of %llu pages differ from the %s (%llu MiB "
			 "shared on disk with it, not read)", spec->id, (unsigned long long)pages,
			 (unsigned long long)(size / PAGE),
			 bfd < 0 ? "zero page" : known ? "base it was restored on" : "template's",
			 (unsigned long long)((size / PAGE * PAGE - read) >> 20));
out:
	zout_free(&z);
	return r;
}

static int export_file(const char *path, int fd, err_t *err)
{
	_cleanup_close_ int in = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	_cleanup_free_ uint8_t *a = xmalloc(CHUNK);
	struct zout z = { 0 };
	ssize_t n;
	int r;

	if (in < 0)
		return err_sys(err, "open %s", path);
	if ((r = zout_init(&z, fd, err)) < 0)
		goto out;
	while ((n = read(in, a, CHUNK)) > 0)
		if ((r = zout_put(&z, a, (size_t)n, ZSTD_e_continue, err)) < 0)
			goto out;
	if (n < 0) {
		r = err_sys(err, "read %s", path);
		goto out;
	}
	r = zout_put(&z, "", 0, ZSTD_e_end, err);
out:
	zout_free(&z);
	return r;
}

int vm_suspend_export(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *snap,
		      uint32_t artifact, int fd, int64_t *size, const char *want_base,
		      char base_sha[65], err_t *err)
{
	_cleanup_free_ char *mem = xasprintf("%s/snapshots/%s/%s" VM_MEM_SUFFIX, s->pool, spec->id,
					     snap);
	_cleanup_free_ char *state = xasprintf("%s/snapshots/%s/%s" VM_FULL_SUFFIX, s->pool,
					       spec->id, snap);
	struct stat st;
	bool piped = fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);   /* the node counts */
	int r;

	*size = -1;
	base_sha[0] = '\0';
	if (!piped && (ftruncate(fd, 0) < 0 || lseek(fd, 0, SEEK_SET) < 0))
		return err_sys(err, "truncate artifact fd");
	if (artifact == NM_ARTIFACT_MEM) {
		/* A snapshot saved as a stream has no RAM file: 0 bytes, and the
		 * node leaves the artifact out. */
		if (access(mem, F_OK) < 0) {
			*size = 0;
			return 0;
		}
		r = export_mem(s, spec, mem, fd, want_base, base_sha, err);
	} else if (artifact == NM_ARTIFACT_VMSTATE) {
		r = export_file(state, fd, err);
	} else {
		r = err_set(err, EINVAL, "unknown artifact %u", artifact);
	}
	if (r < 0)
		return err_wrap(err, "sandbox %s: %s of %s", spec->id,
				artifact == NM_ARTIFACT_MEM ? "memory" : "vmstate", snap);
	if (!piped && fstat(fd, &st) == 0)
		*size = st.st_size;
	return 0;
}

/* ---- import: untrusted bytes from the store ------------------------------ */

struct zin {
	ZSTD_DCtx *dc;
	int fd;
	uint8_t *ibuf, *obuf;
	ZSTD_inBuffer in;
	size_t ocap, opos, olen;   /* decompressed bytes obuf[opos, olen) */
	bool eof;
	uint64_t total, limit;
};

static int zin_fill(struct zin *z, err_t *err)
{
	for (;;) {
		ZSTD_outBuffer out = { z->obuf, z->ocap, 0 };
		size_t ret;
		if (z->in.pos == z->in.size && !z->eof) {
			ssize_t n = read(z->fd, z->ibuf, ZSTD_DStreamInSize());
			if (n < 0)
				return err_sys(err, "read artifact");
			if (n == 0)
				z->eof = true;
			z->in = (ZSTD_inBuffer){ z->ibuf, (size_t)n, 0 };
		}
		if (z->in.pos == z->in.size && z->eof)
			return 0;
		ret = ZSTD_decompressStream(z->dc, &out, &z->in);
		if (ZSTD_isError(ret))
			return err_set(err, EBADMSG, "zstd: %s", ZSTD_getErrorName(ret));
		z->total += out.pos;
		if (z->total > z->limit)
			return err_set(err, EBADMSG, "decompresses to more than %llu bytes",
				       (unsigned long long)z->limit);
		if (out.pos) {
			z->opos = 0;
			z->olen = out.pos;
			return 0;
		}
	}
}

/* Exactly n bytes, or -EBADMSG at the end of the stream. */
static int zin_read(struct zin *z, void *p, size_t n, err_t *err)
{
	uint8_t *d = p;

	while (n) {
		size_t take;
		if (z->opos == z->olen) {
			int r = zin_fill(z, err);
			if (r < 0)
				return r;
			if (z->opos == z->olen)
				return err_set(err, EBADMSG, "stream ends early");
		}
		take = z->olen - z->opos < n ? z->olen - z->opos : n;
		memcpy(d, z->obuf + z->opos, take);
		z->opos += take;
		d += take;
		n -= take;
	}
	return 0;
}

static int zin_init(struct zin *z, int fd, uint64_t limit, err_t *err)
{
	memset(z, 0, sizeof(*z));
	z->dc = ZSTD_createDCtx();
	z->fd = fd;
	z->ibuf = xmalloc(ZSTD_DStreamInSize());
	z->ocap = ZSTD_DStreamOutSize();
	z->obuf = xmalloc(z->ocap);
	z->limit = limit;
	if (!z->dc)
		return err_set(err, ENOMEM, "zstd context");
	return lseek(fd, 0, SEEK_SET) < 0 ? err_sys(err, "rewind artifact") : 0;
}

static void zin_free(struct zin *z)
{
	ZSTD_freeDCtx(z->dc);
	free(z->ibuf);
	free(z->obuf);
}

static int import_mem(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *mem,
		      int fd, const char *base_sha, err_t *err)
{
	_cleanup_free_ char *base = NULL;
	_cleanup_free_ uint8_t *page = xmalloc(PAGE);
	_cleanup_close_ int dst = -1;
	struct vm_shape sh;
	struct zin z;
	uint8_t head[24];
	uint32_t psize, from_base;
	uint64_t size, idx, pages = 0;
	int r;

	vm_shape_of(spec, &sh);
	/* the RAM of this shape, plus one record per page at most */
	if ((r = zin_init(&z, fd, (uint64_t)sh.mem_mb * 2 * (1u << 20) + 64, err)) < 0)
		goto out;
	if ((r = zin_read(&z, head, sizeof(head), err)) < 0)
		goto out;
	memcpy(&psize, head + 8, 4);
	memcpy(&from_base, head + 12, 4);
	memcpy(&size, head + 16, 8);
	if (memcmp(head, MAGIC, 8) != 0 || psize != PAGE || from_base > 1 ||
	    size != (uint64_t)sh.mem_mb << 20) {
		r = err_set(err, EBADMSG, "not a memory artifact of a %u MiB guest", sh.mem_mb);
		goto out;
	}
	unlink(mem);
	if (from_base) {
		/* the base the manifest names by digest (here, or fetched by the
		 * node before), else (an older manifest) the template's own */
		if ((r = vm_base_path(s, spec, base_sha, &base, err)) < 0) {
			if (!base_sha || !base_sha[0])
				err_set(err, ENOENT, "template %s/%u has no memory snapshot for %u MiB",
					spec->template_name, spec->template_version, sh.mem_mb);
			goto out;
		}
		if ((r = vm_reflink(base, mem, err)) < 0)
			goto out;
		dst = open(mem, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
		struct stat bs;
		if (dst >= 0 && (fstat(dst, &bs) < 0 || (uint64_t)bs.st_size != size)) {
			r = err_set(err, EBADMSG, "the memory base is not a %u MiB guest's RAM",
				    sh.mem_mb);
			goto out;
		}
	} else {
		dst = open(mem, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0640);
		if (dst >= 0 && ftruncate(dst, (off_t)size) < 0) {
			r = err_sys(err, "size %s", mem);
			goto out;
		}
	}
	if (dst < 0 || fchown(dst, 0, VM_SHARED_GID) < 0 || fchmod(dst, 0640) < 0) {
		r = err_sys(err, "create %s", mem);
		goto out;
	}
	for (;;) {
		if ((r = zin_read(&z, &idx, 8, err)) < 0)
			goto out;
		if (idx == END_MARK)
			break;
		if (idx >= size / PAGE) {
			r = err_set(err, EBADMSG, "page %llu past the end of the RAM",
				    (unsigned long long)idx);
			goto out;
		}
		if ((r = zin_read(&z, page, PAGE, err)) < 0)
			goto out;
		if (pwrite(dst, page, PAGE, (off_t)(idx * PAGE)) != PAGE) {
			r = err_sys(err, "write %s", mem);
			goto out;
		}
		pages++;
	}
	/* nothing may follow the end mark */
	if (z.opos != z.olen || (r = zin_fill(&z, err)) < 0 || z.opos != z.olen) {
		r = r < 0 ? r : err_set(err, EBADMSG, "bytes after the end of the memory stream");
		goto out;
	}
	log_info("sandbox %s: memory rebuilt from %llu pages", spec->id, (unsigned long long)pages);
out:
	zin_free(&z);
	return r;
}

static int import_file(const char *path, int fd, uint64_t limit, err_t *err)
{
	_cleanup_close_ int out = -1;
	struct zin z;
	int r;

	if ((r = zin_init(&z, fd, limit, err)) < 0)
		goto done;
	unlink(path);
	out = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (out < 0) {
		r = err_sys(err, "create %s", path);
		goto done;
	}
	for (;;) {
		if ((r = zin_fill(&z, err)) < 0)
			goto done;
		if (z.opos == z.olen)
			break;
		if (write_all(out, z.obuf + z.opos, z.olen - z.opos) < 0) {
			r = err_sys(err, "write %s", path);
			goto done;
		}
		z.opos = z.olen;
	}
done:
	zin_free(&z);
	return r;
}

int vm_suspend_import(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *snap,
		      uint32_t artifact, int fd, const char *base_sha, err_t *err)
{
	_cleanup_free_ char *mem = xasprintf("%s/snapshots/%s/%s" VM_MEM_SUFFIX, s->pool, spec->id,
					     snap);
	_cleanup_free_ char *state = xasprintf("%s/snapshots/%s/%s" VM_FULL_SUFFIX, s->pool,
					       spec->id, snap);
	_cleanup_free_ char *dir = xasprintf("%s/snapshots/%s", s->pool, spec->id);
	struct vm_shape sh;
	int r;

	/* beside the disk's import (snap_suspend_import), which makes the same
	 * directory */
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return err_sys(err, "mkdir %s", dir);
	vm_shape_of(spec, &sh);
	if (artifact == NM_ARTIFACT_MEM)
		r = import_mem(s, spec, mem, fd, base_sha, err);
	else if (artifact == NM_ARTIFACT_VMSTATE)
		/* device state, or a whole stream: RAM size plus slack */
		r = import_file(state, fd, ((uint64_t)sh.mem_mb << 20) + (64u << 20), err);
	else
		r = err_set(err, EINVAL, "unknown artifact %u", artifact);
	if (r < 0)
		return err_wrap(err, "sandbox %s: %s of %s", spec->id,
				artifact == NM_ARTIFACT_MEM ? "memory" : "vmstate", snap);
	return 0;
}
