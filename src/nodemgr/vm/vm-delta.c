/* vm-delta.c - a full snapshot of a vm whose guest RAM is a private map of
 * a file, taken as a RAM file plus the device state instead of a migration
 * stream.
 *
 * A clone maps the template's RAM file MAP_PRIVATE (vm-qemu.c), so its guest
 * memory is that file plus the pages the guest wrote since, which the
 * kernel keeps as anonymous copy-on-write pages. A full snapshot therefore
 * only needs those pages:
 *
 *   snapshots/<id>/<snap>.mem      FICLONE of the file the RAM maps (shared
 *                                  extents: no copy), then every anonymous
 *                                  page of the mapping written over it
 *   snapshots/<id>/<snap>.vmstate  QMP xen-save-devices-state: every device
 *                                  section, no RAM (tens of KB)
 *
 * and a restore is a clone of that file: QEMU maps <snap>.mem MAP_PRIVATE
 * and loads the device state in -incoming, exactly as a template clone. The
 * pages come from /proc/<qemu>/pagemap (present and not a file page: the
 * guest wrote it) and /proc/<qemu>/mem; the file from
 * /proc/<qemu>/map_files, so it is found even when it was unlinked since
 * (the throw-away snapshot of a fork is deleted while its children map it).
 *
 * One point in time: with the vCPUs stopped the guest writes nothing, but
 * QEMU's main loop still may (virtio-serial puts bytes from the host into
 * the guest's buffers while stopped). So the pages are written first, the
 * device state saved, and then every page is checked again: the same set of
 * written pages with the same bytes means memory did not move while the
 * devices were saved. Otherwise it is tried again, and after a few tries the
 * caller falls back to the stream.
 *
 * A fork's throw-away snapshot may take the fork form instead
 * (vm_save_fork): when the RAM maps the template's RAM file, <snap>.delta
 * holds only the written pages, at their offsets, in a sparse file (holes:
 * the template's bytes), with xattrs naming that file and listing the data
 * runs; vm_ram_delta_apply writes them into a fork standby's QEMU, which maps
 * the same template file (vm-pool.c).
 *
 * Needs the RAM to be one file-backed private mapping of the guest's size:
 * a cold-booted guest (anonymous RAM) or one restored from a stream is
 * -ENOTSUP here and gets the stream (vm-state.c, vm_save_full).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "../../lib/log.h"
#include "../../lib/phases.h"
#include "../../lib/util.h"
#include "../../qmp/qmp.h"
#include "../core/nodemgr-internal.h"
#include "vm-delta.h"
#include "vm-internal.h"

#define PAGE 4096ull
#define PM_PRESENT (1ull << 63)
#define PM_SWAP (1ull << 62)
#define PM_FILE (1ull << 61)
#define DELTA_TRIES 3
#define CHUNK (1u << 20)

/* The guest RAM mapping of QEMU pid: the one private, writable, file-backed
 * mapping at file offset 0 that is exactly size bytes long. */
struct ram_map {
	uint64_t start, len;
	char range[40];   /* "start-end" as in maps, for map_files */
};

static int find_ram(pid_t pid, uint64_t size, struct ram_map *m, err_t *err)
{
	_cleanup_free_ char *path = xasprintf("/proc/%d/maps", (int)pid);
	_cleanup_free_ char *line = NULL;
	FILE *f = fopen(path, "re");
	size_t cap = 0;
	int found = 0;

	if (!f)
		return err_sys(err, "open %s", path);
	/* getline: a line is read whole however long its path is, so no
	 * tail of a long file name can pass for a line of its own. */
	while (getline(&line, &cap, f) > 0) {
		unsigned long long a, b, off, ino;
		char perms[8];
		unsigned maj, mnr;
		if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu", &a, &b, perms, &off, &maj, &mnr,
			   &ino) != 7)
			continue;
		if (!ino || off || b - a != size || strncmp(perms, "rw-p", 4))
			continue;
		m->start = a;
		m->len = b - a;
		snprintf(m->range, sizeof(m->range), "%llx-%llx", a, b);
		found++;
	}
	fclose(f);
	if (found != 1)
		return err_set(err, ENOTSUP, "qemu %d: %s file-backed RAM mapping of %" PRIu64
			       " bytes", (int)pid, found ? "more than one" : "no", size);
	return 0;
}

static inline bool written(uint64_t e)
{
	return (e & PM_SWAP) || ((e & PM_PRESENT) && !(e & PM_FILE));
}

/* The pagemap entries of m (one per page). */
static int read_pagemap(int pmfd, const struct ram_map *m, uint64_t *pm, err_t *err)
{
	size_t n = (size_t)(m->len / PAGE) * sizeof(*pm);
	ssize_t got = pread(pmfd, pm, n, (off_t)(m->start / PAGE * sizeof(*pm)));

	if (got != (ssize_t)n)
		return err_sys(err, "read pagemap");
	return 0;
}

/* pread that fills the whole buffer (memory and files both). */
static int pread_full(int fd, void *p, size_t n, uint64_t off)
{
	while (n) {
		ssize_t r = pread(fd, p, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		p = (char *)p + r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

/* The next run of written pages of pm at or after i, at most CHUNK bytes
 * long: its first page, and its length in *len; npages when there is none. */
static size_t next_run(const uint64_t *pm, size_t npages, size_t i, size_t *len)
{
	while (i < npages && !written(pm[i]))
		i++;
	*len = 0;
	while (i + *len < npages && *len < CHUNK / PAGE && written(pm[i + *len]))
		(*len)++;
	return i;
}

/* Write the pages of buf (n bytes for offset off) that differ from same
 * (the bytes dst already holds there; NULL: all of them) into dst. */
static int write_changed(int dst, const uint8_t *buf, const uint8_t *same, uint64_t n,
			 uint64_t off, uint64_t *bytes, err_t *err)
{
	for (uint64_t p = 0; p < n;) {
		uint64_t q;

		if (same && !memcmp(buf + p, same + p, PAGE)) {
			p += PAGE;
			continue;
		}
		for (q = p + PAGE; q < n && !(same && !memcmp(buf + q, same + q, PAGE)); q += PAGE)
			;
		if (pwrite(dst, buf + p, q - p, (off_t)(off + p)) != (ssize_t)(q - p))
			return err_sys(err, "write memory file");
		*bytes += q - p;
		p = q;
	}
	return 0;
}

/* Pass 1: the written pages of m into dst at the same offsets. With cmpfd
 * (the file m maps, which dst is a clone of) a page that still holds the
 * file's bytes is not written: dst has them (the guest's RECLAIM leaves
 * most of its free pages zero, as they are in a template's file), and an
 * unwritten page keeps sharing the file's extent. */
static int copy_pages(int memfd, int cmpfd, int dst, const struct ram_map *m, const uint64_t *pm,
		      uint8_t *buf, uint8_t *fbuf, uint64_t *bytes, err_t *err)
{
	size_t npages = (size_t)(m->len / PAGE);

	*bytes = 0;
	for (size_t first = 0, count; (first = next_run(pm, npages, first, &count)) < npages;
	     first += count) {
		uint64_t off = first * PAGE, n = count * PAGE;
		int r = pread_full(memfd, buf, n, m->start + off);

		if (r < 0)
			return err_set(err, -r, "read guest memory at %#" PRIx64, off);
		if (cmpfd >= 0 && pread_full(cmpfd, fbuf, n, off) < 0)
			return err_sys(err, "read the mapped file");
		if ((r = write_changed(dst, buf, cmpfd >= 0 ? fbuf : NULL, n, off, bytes, err)) < 0)
			return r;
	}
	return 0;
}

/* Pass 2: true when the written pages are the same set with the same bytes
 * as dst holds. */
static bool unchanged(int pmfd, int memfd, int dst, const struct ram_map *m, const uint64_t *pm1,
		      uint64_t *pm2, uint8_t *a, uint8_t *b)
{
	size_t npages = (size_t)(m->len / PAGE);
	err_t e = { 0 };

	if (read_pagemap(pmfd, m, pm2, &e) < 0)
		return false;
	for (size_t i = 0; i < npages; i++)
		if (written(pm1[i]) != written(pm2[i]))
			return false;
	for (size_t first = 0, count; (first = next_run(pm2, npages, first, &count)) < npages;
	     first += count) {
		uint64_t off = first * PAGE, n = count * PAGE;

		if (pread_full(memfd, a, n, m->start + off) < 0 || pread_full(dst, b, n, off) < 0 ||
		    memcmp(a, b, n))
			return false;
	}
	return true;
}

/* The device state QEMU wrote into its run dir, which QEMU can write too:
 * only a regular file (never a FIFO to block on, nor a link) of sane size. */
#define DEVSTATE_MAX (64u << 20)

static int copy_devstate(const char *src, const char *dst, err_t *err)
{
	_cleanup_close_ int in = open(src, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	_cleanup_close_ int out = -1;
	char buf[65536];
	struct stat st;
	ssize_t n;

	if (in < 0)
		return err_sys(err, "open %s", src);
	if (fstat(in, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > DEVSTATE_MAX)
		return err_set(err, EINVAL, "%s: not a device state file", src);
	out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (out < 0)
		return err_sys(err, "create %s", dst);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write_all(out, buf, (size_t)n) < 0)
			return err_sys(err, "write %s", dst);
	if (n < 0)
		return err_sys(err, "read %s", src);
	return 0;
}

/* A sparse delta names the file its holes stand for (device and inode), so
 * it is only ever applied over that file (vm_ram_delta_apply). */
#define BASE_XATTR "user.airlock.delta_base"

static int mark_base(int fd, const struct stat *base, err_t *err)
{
	char v[64];
	int n = snprintf(v, sizeof(v), "%llu:%llu", (unsigned long long)base->st_dev,
			 (unsigned long long)base->st_ino);

	if (fsetxattr(fd, BASE_XATTR, v, (size_t)n, 0) < 0)
		return err_sys(err, "mark memory delta");
	return 0;
}

/* ... and lists the runs of pages written (pairs of u32: first page, page
 * count): a sparse delta's data, so vm_ram_delta_apply need not seek for it (on
 * btrfs a SEEK_DATA over a file whose pages are not written back yet walks
 * its page cache, 65-170 ms for the ~200 runs of a fork here); a whole
 * RAM's pages written over its reflink, which FIEMAP does not show until
 * they are written back (the suspend export reads them, and trusts FIEMAP
 * for the rest). Optional: a list too long for an xattr is left out, and
 * readers seek or compare everything. */

static void mark_runs(int fd, const uint64_t *pm, size_t npages)
{
	_cleanup_free_ uint32_t *v = NULL;
	size_t n = 0, cap = 0;

	for (size_t first = 0, count; (first = next_run(pm, npages, first, &count)) < npages;
	     first += count) {
		if (n + 2 > cap) {
			cap = cap ? 2 * cap : 256;
			v = xrealloc(v, cap * sizeof(*v));
		}
		v[n++] = (uint32_t)first;
		v[n++] = (uint32_t)count;
	}
	if (n && fsetxattr(fd, RAM_RUNS_XATTR, v, n * sizeof(*v), 0) < 0)
		log_debug("memory delta: no run list (%s); it will be seeked", strerror(errno));
}

uint32_t *vm_ram_delta_runs(int fd, uint64_t size, size_t *n)
{
	ssize_t len = fgetxattr(fd, RAM_RUNS_XATTR, NULL, 0);
	uint32_t *v;

	*n = 0;
	if (len <= 0 || len % (2 * sizeof(uint32_t)))
		return NULL;
	v = xmalloc((size_t)len);
	if (fgetxattr(fd, RAM_RUNS_XATTR, v, (size_t)len) != len) {
		free(v);
		return NULL;
	}
	*n = (size_t)len / sizeof(uint32_t);
	for (size_t i = 0; i < *n; i += 2)
		if (!v[i + 1] || ((uint64_t)v[i] + v[i + 1]) * PAGE > size) {
			free(v);
			*n = 0;
			return NULL;
		}
	return v;
}

static bool is_base(int fd, const struct stat *st)
{
	char v[64], want[64];
	ssize_t n = fgetxattr(fd, BASE_XATTR, v, sizeof(v) - 1);
	int wn = snprintf(want, sizeof(want), "%llu:%llu", (unsigned long long)st->st_dev,
			  (unsigned long long)st->st_ino);

	return n == wn && !memcmp(v, want, (size_t)n);
}

/* vm_ram_delta_save and vm_ram_delta_save_sparse: base NULL, mem the whole RAM
 * (a reflink of the mapped file, the written pages over it); else only the
 * written pages, in a sparse file, and only when the mapped file is base. */
static int delta_save(pid_t pid, uint64_t size, const struct stat *base, const char *mem,
		      gid_t gid, int (*save)(void *arg, err_t *err), void *arg, uint64_t *bytes,
		      err_t *err)
{
	_cleanup_free_ char *pm_path = xasprintf("/proc/%d/pagemap", (int)pid);
	_cleanup_free_ char *mem_path = xasprintf("/proc/%d/mem", (int)pid);
	_cleanup_free_ char *src_path = NULL;
	_cleanup_free_ uint64_t *pm1 = NULL, *pm2 = NULL;
	_cleanup_free_ uint8_t *a = NULL, *b = NULL;
	_cleanup_close_ int pmfd = -1, memfd = -1, src = -1, dst = -1;
	struct ram_map m;
	struct phases ph;
	char steps[300];
	int r, tries;

	*bytes = 0;
	phases_start(&ph);
	if ((r = find_ram(pid, size, &m, err)) < 0)
		return r;
	src_path = xasprintf("/proc/%d/map_files/%s", (int)pid, m.range);
	if ((src = open(src_path, O_RDONLY | O_CLOEXEC)) < 0)
		return err_sys(err, "open %s", src_path);
	if (base) {
		struct stat st;
		if (fstat(src, &st) < 0)
			return err_sys(err, "stat %s", src_path);
		if (st.st_dev != base->st_dev || st.st_ino != base->st_ino)
			return err_set(err, ENOTSUP, "process %d: its RAM maps another file",
				       (int)pid);
	}
	if ((pmfd = open(pm_path, O_RDONLY | O_CLOEXEC)) < 0 ||
	    (memfd = open(mem_path, O_RDONLY | O_CLOEXEC)) < 0)
		return err_sys(err, "open /proc/%d", (int)pid);
	pm1 = xmalloc((size_t)(m.len / PAGE) * sizeof(*pm1));
	pm2 = xmalloc((size_t)(m.len / PAGE) * sizeof(*pm2));
	a = xmalloc(CHUNK);
	b = xmalloc(CHUNK);
	if ((dst = open(mem, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0640)) < 0)
		return err_sys(err, "create %s", mem);
	if (fchown(dst, 0, gid) < 0 || fchmod(dst, 0640) < 0) {
		r = err_sys(err, "chown %s", mem);
		goto fail;
	}
	for (tries = 0; tries < DELTA_TRIES; tries++) {
		/* The file the RAM maps, shared extents only (a whole-file
		 * clone replaces what an earlier try wrote); then the pages
		 * written over it. */
		phases_mark(&ph, "open");
		if (base) {
			/* Holes where the page is the base file's; emptied
			 * by punching when this is a retry. Never truncated
			 * to 0: btrfs then writes the file back on close
			 * (auto_da_alloc), 15-20 ms of a fork here. */
			if ((tries == 0 && ftruncate(dst, (off_t)size) < 0) ||
			    (tries > 0 && fallocate(dst, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
						    (off_t)size) < 0)) {
				r = err_sys(err, "size %s", mem);
				goto fail;
			}
		} else if (ioctl(dst, FICLONE, src) < 0) {
			r = err_sys(err, "reflink %s", src_path);
			goto fail;
		}
		phases_mark(&ph, "reflink");
		if ((r = read_pagemap(pmfd, &m, pm1, err)) < 0 ||
		    (r = copy_pages(memfd, base ? -1 : src, dst, &m, pm1, a, b, bytes, err)) < 0)
			goto fail;
		phases_mark(&ph, "pages");
		if ((r = save(arg, err)) < 0)
			goto fail;
		phases_mark(&ph, "devices");
		bool same = unchanged(pmfd, memfd, dst, &m, pm1, pm2, a, b);
		phases_mark(&ph, "check");
		if (same && base && (r = mark_base(dst, base, err)) < 0)
			goto fail;
		if (same)
			mark_runs(dst, pm1, (size_t)(m.len / PAGE));
		if (same)
			phases_mark(&ph, "xattr");
		if (same) {
			phases_text(&ph, steps, sizeof(steps));
			log_debug("process %d: memory delta: %s", (int)pid, steps);
			return 0;
		}
		log_info("process %d: memory moved while its devices were saved; again", (int)pid);
	}
	r = err_set(err, EAGAIN, "process %d: memory kept moving while stopped", (int)pid);
fail:
	unlink(mem);
	return r;
}

int vm_ram_delta_save(pid_t pid, uint64_t size, const char *mem, gid_t gid,
		      int (*save)(void *arg, err_t *err), void *arg, uint64_t *bytes, err_t *err)
{
	return delta_save(pid, size, NULL, mem, gid, save, arg, bytes, err);
}

int vm_ram_delta_save_sparse(pid_t pid, uint64_t size, const struct stat *base, const char *delta,
			     gid_t gid, int (*save)(void *arg, err_t *err), void *arg,
			     uint64_t *bytes, err_t *err)
{
	return delta_save(pid, size, base, delta, gid, save, arg, bytes, err);
}

int vm_ram_delta_apply(pid_t pid, uint64_t size, const char *delta, uint64_t *bytes, err_t *err)
{
	_cleanup_free_ char *mem_path = xasprintf("/proc/%d/mem", (int)pid);
	_cleanup_free_ uint8_t *buf = NULL;
	_cleanup_close_ int in = -1, memfd = -1;
	struct ram_map m;
	struct stat st;
	off_t off = 0, end;
	int r;

	*bytes = 0;
	if ((r = find_ram(pid, size, &m, err)) < 0)
		return r;
	in = open(delta, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (in < 0)
		return err_sys(err, "open %s", delta);
	if (fstat(in, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != size)
		return err_set(err, EINVAL, "%s: not a memory delta of %" PRIu64 " bytes", delta,
			       size);
	{
		/* Its holes are the file pid maps, or it does not apply. */
		_cleanup_free_ char *map = xasprintf("/proc/%d/map_files/%s", (int)pid, m.range);
		struct stat mst;
		if (stat(map, &mst) < 0)
			return err_sys(err, "stat %s", map);
		if (!is_base(in, &mst))
			return err_set(err, ESTALE, "%s is a delta of another RAM file", delta);
	}
	if ((memfd = open(mem_path, O_RDWR | O_CLOEXEC)) < 0)
		return err_sys(err, "open %s", mem_path);
	buf = xmalloc(CHUNK);
	{
		size_t nruns;
		_cleanup_free_ uint32_t *runs = vm_ram_delta_runs(in, size, &nruns);
		for (size_t i = 0; runs && i < nruns; i += 2) {
			uint64_t o = (uint64_t)runs[i] * PAGE, left = (uint64_t)runs[i + 1] * PAGE;
			while (left) {
				size_t n = left < CHUNK ? (size_t)left : CHUNK;
				if ((r = pread_full(in, buf, n, o)) < 0)
					return err_set(err, -r, "read %s", delta);
				if (pwrite(memfd, buf, n, (off_t)(m.start + o)) != (ssize_t)n)
					return err_sys(err, "write guest memory at %#" PRIx64, o);
				*bytes += n;
				o += n;
				left -= n;
			}
		}
		if (runs)
			return 0;
	}
	/* No run list: each run of data (pages the parent had written) over the same
	 * offsets of the RAM: the process gets private copies of those pages,
	 * the rest it keeps reading from its file. */
	for (;;) {
		off = lseek(in, off, SEEK_DATA);
		if (off < 0) {
			if (errno == ENXIO)
				return 0;   /* no data after off */
			return err_sys(err, "seek %s", delta);
		}
		if ((end = lseek(in, off, SEEK_HOLE)) < 0)
			return err_sys(err, "seek %s", delta);
		while (off < end) {
			size_t n = (size_t)(end - off) < CHUNK ? (size_t)(end - off) : CHUNK;
			if ((r = pread_full(in, buf, n, (uint64_t)off)) < 0)
				return err_set(err, -r, "read %s", delta);
			if (pwrite(memfd, buf, n, (off_t)(m.start + (uint64_t)off)) != (ssize_t)n)
				return err_sys(err, "write guest memory at %#" PRIx64,
					       (uint64_t)off);
			*bytes += n;
			off += (off_t)n;
		}
	}
}

int vm_ram_written(pid_t pid, uint64_t size, uint64_t *pages, err_t *err)
{
	_cleanup_free_ char *pm_path = xasprintf("/proc/%d/pagemap", (int)pid);
	_cleanup_free_ uint64_t *pm = NULL;
	_cleanup_close_ int pmfd = -1;
	struct ram_map m;
	int r;

	*pages = 0;
	if ((r = find_ram(pid, size, &m, err)) < 0)
		return r;
	if ((pmfd = open(pm_path, O_RDONLY | O_CLOEXEC)) < 0)
		return err_sys(err, "open %s", pm_path);
	pm = xmalloc((size_t)(m.len / PAGE) * sizeof(*pm));
	if ((r = read_pagemap(pmfd, &m, pm, err)) < 0)
		return r;
	for (size_t i = 0; i < m.len / PAGE; i++)
		*pages += written(pm[i]);
	return 0;
}

struct qemu_save {
	struct jail *j;
	const char *dev;
};

/* QEMU's devices, no RAM, into its run dir. live=false: the block devices
 * stay active (a live save hands them over, as for an outgoing migration). */
static int save_devices(void *arg, err_t *err)
{
	struct qemu_save *q = arg;

	unlink(q->dev);
	if (qmp_exec(q->j->qmp, "xen-save-devices-state",
		     "{\"filename\":\"/run/devstate\",\"live\":false}", -1, 10000, NULL, err) < 0)
		return err_wrap(err, "vm %s: save device state", q->j->id);
	return 0;
}

int vm_save_delta(struct jail *j, const char *dev, const char *state, const char *mem,
		  uint64_t *bytes, err_t *err)
{
	uint32_t mem_mb = j->vm_mem_mb;
	struct qemu_save q = { .j = j, .dev = dev };
	uint64_t t0 = now_us();
	int r;

	if (!j->qmp || j->pid <= 0)
		return err_set(err, ENOENT, "vm %s has no running qemu", j->id);
	/* The RAM file is read by the restoring QEMU (its jail uid is in the
	 * shared group) as the template's is. */
	r = vm_ram_delta_save(j->pid, (uint64_t)mem_mb << 20, mem, VM_SHARED_GID, save_devices, &q,
			      bytes, err);
	if (r == 0 && (r = copy_devstate(dev, state, err)) < 0)
		unlink(mem);
	unlink(dev);
	if (r < 0) {
		unlink(state);
		return r;
	}
	log_debug("vm %s: memory delta %" PRIu64 " KiB of %u MiB and device state saved in %.1f ms",
		  j->id, *bytes >> 10, mem_mb, (now_us() - t0) / 1000.0);
	return 0;
}

int vm_save_fork(struct nm_server *s, struct jail *j, const struct nm_sandbox_spec *spec,
		 const char *state, const char *delta, uint64_t *bytes, err_t *err)
{
	_cleanup_free_ char *dev = xasprintf("%s/%s/devstate", s->vm->run, j->id);
	_cleanup_free_ char *cache = NULL, *base = NULL, *disk = NULL, *tdisk = NULL;
	uint32_t cpu_millis = spec->limits.cpu_millis ? spec->limits.cpu_millis : 1000;
	struct qemu_save q = { .j = j, .dev = dev };
	struct stat bst, dst, tst;
	struct vm_shape sh;
	uint64_t t0 = now_us();
	int r;

	*bytes = 0;
	if (!j->qmp || j->pid <= 0)
		return err_set(err, ENOENT, "vm %s has no running qemu", j->id);
	vm_shape_of(spec, &sh);
	cache = vm_cache_dir(s, spec, &sh);
	base = xasprintf("%s/mem", cache);
	disk = xasprintf("%s/sandboxes/%s/rootfs.ext4", s->pool, j->id);
	tdisk = xasprintf("%s/templates/%s/%u/rootfs.ext4", s->pool, spec->template_name,
			  spec->template_version);
	/* What a fork standby is (vm_fork_standby): the template's RAM file
	 * of this shape, a disk of the template's size, a whole vCPU each. */
	if (j->vm_mem_mb != sh.mem_mb || cpu_millis != sh.cpus * 1000 || stat(base, &bst) < 0 ||
	    stat(disk, &dst) < 0 || stat(tdisk, &tst) < 0 || dst.st_size != tst.st_size)
		return err_set(err, ENOTSUP, "vm %s: no fork standby fits it", j->id);
	uint64_t t1 = now_us(), t2 = 0;
	r = vm_ram_delta_save_sparse(j->pid, (uint64_t)sh.mem_mb << 20, &bst, delta, VM_SHARED_GID,
				     save_devices, &q, bytes, err);
	t2 = now_us();
	if (r == 0 && (r = copy_devstate(dev, state, err)) < 0)
		unlink(delta);
	unlink(dev);
	if (r < 0) {
		unlink(state);
		return r;
	}
	log_debug("vm %s: fork delta %" PRIu64 " KiB of %u MiB and device state saved in %.1f ms "
		  "(checks %.1f ms, pages and devices %.1f ms, devices copied %.1f ms)",
		  j->id, *bytes >> 10, sh.mem_mb, (now_us() - t0) / 1000.0, (t1 - t0) / 1000.0,
		  (t2 - t1) / 1000.0, (now_us() - t2) / 1000.0);
	return 0;
}
