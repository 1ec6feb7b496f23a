/* vm-base.c - the RAM file a vm memory artifact is a difference from (its
 * "base"), by content, so that a suspended vm sandbox can come back on a
 * node that never booted that template memory snapshot (docs/DESIGN.md
 * "Moving a suspended sandbox").
 *
 * A base is named by the SHA-256 of its bytes. The template's RAM file of
 * a shape (templates/<name>/<ver>.vm/<shape>/mem) gets its digest computed
 * once and kept beside it in mem.sha256 (with the file's inode, size and
 * mtime: a file made again gets a new digest). A base that came from the
 * object store is kept in pool/membase/<sha256> (root's, 0600, directory
 * 0700): only nodemgr reads it, to reflink a restored sandbox's RAM file
 * from it; no QEMU maps or even sees it (the reflink is what a QEMU maps,
 * read-only, as for a local base).
 *
 *   find     "" : the digest of the template's RAM file for the shape;
 *            sha: 0 if a base with that digest is here (the template's file
 *            or membase/<sha>), -ENOENT otherwise
 *   export   zstd of the template's RAM file for the shape into the node's
 *            fd, and its digest
 *   import   the node's fd (zstd, from the store: untrusted) decompressed
 *            into membase/.in-XXXXXX, its digest computed on the way (never
 *            more than the RAM of spec's shape); kept as membase/<sha> only
 *            when the digest is the one asked for and its size that RAM's
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "../../lib/log.h"
#include "../../lib/sha256.h"
#include "../../lib/util.h"
#include "../core/nodemgr-internal.h"
#include "vm-internal.h"

#define CHUNK (1u << 20)
/* Bases from the store kept at once; the least recently used go first. */
#define MEMBASE_KEEP 8

bool vm_base_sha_ok(const char *s)
{
	if (strlen(s) != 64)
		return false;
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
			return false;
	return true;
}

/* SHA-256 of fd's bytes (read from 0 to its end). */
static int digest_fd(int fd, char out[65], uint64_t *size, err_t *err)
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	_cleanup_free_ uint8_t *buf = xmalloc(CHUNK);
	unsigned char d[32];
	unsigned int len = 0;
	uint64_t off = 0;
	ssize_t n;
	int r = 0;

	if (!md || !EVP_DigestInit_ex(md, EVP_sha256(), NULL)) {
		EVP_MD_CTX_free(md);
		return err_set(err, ENOMEM, "sha256 context");
	}
	while ((n = pread(fd, buf, CHUNK, (off_t)off)) > 0) {
		EVP_DigestUpdate(md, buf, (size_t)n);
		off += (uint64_t)n;
	}
	if (n < 0)
		r = err_sys(err, "read a memory base");
	else if (!EVP_DigestFinal_ex(md, d, &len))
		r = err_set(err, EIO, "sha256");
	EVP_MD_CTX_free(md);
	if (r == 0) {
		hex_encode(d, 32, out);
		*size = off;
	}
	return r;
}

int vm_base_digest(const char *path, int fd, char sha[65], err_t *err)
{
	_cleanup_free_ char *side = xasprintf("%s.sha256", path);
	_cleanup_free_ char *tmp = xasprintf("%s.sha256.tmp", path);
	char want[160], got[256], s[65];
	struct stat st;
	uint64_t size = 0;
	ssize_t n;
	int r;

	if (fstat(fd, &st) < 0)
		return err_sys(err, "stat %s", path);
	snprintf(want, sizeof(want), " %llu %llu %lld.%09ld\n", (unsigned long long)st.st_ino,
		 (unsigned long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
	/* mem.sha256: "<sha> <ino> <size> <mtime>", nodemgr's own file */
	{
		_cleanup_close_ int sfd = open(side, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (sfd >= 0 && (n = read(sfd, got, sizeof(got) - 1)) > 64) {
			got[n] = '\0';
			if (strcmp(got + 64, want) == 0) {
				memcpy(sha, got, 64);
				sha[64] = '\0';
				if (vm_base_sha_ok(sha))
					return 0;
			}
		}
	}
	uint64_t t0 = now_us();
	if ((r = digest_fd(fd, s, &size, err)) < 0)
		return r;
	if (size != (uint64_t)st.st_size)
		return err_set(err, EAGAIN, "%s changed while its digest was computed", path);
	snprintf(got, sizeof(got), "%s%s", s, want);
	unlink(tmp);
	if (write_file(tmp, got, strlen(got), 0644) < 0 || rename(tmp, side) < 0)
		log_warn("keep the digest of %s: %s", path, strerror(errno));
	memcpy(sha, s, 65);
	log_info("memory base %s: SHA-256 %.16s… (%.1f ms)", path, sha, (now_us() - t0) / 1000.0);
	return 0;
}

/* n bytes of a RAM image at off into fd, whole zero pages left as holes
 * (the file is sized at the end): a booted guest's RAM is mostly zero
 * pages (43,480 of 65,536 in a 256 MiB busybox template here), and what
 * is not written is not flushed by the fsync either. */
static int write_sparse(int fd, const uint8_t *p, size_t n, uint64_t off)
{
	static const uint8_t zero[4096];

	while (n) {
		size_t k = sizeof(zero) - off % sizeof(zero);
		if (k > n)
			k = n;
		if (k < sizeof(zero) || memcmp(p, zero, k) != 0) {
			for (size_t w = 0; w < k;) {
				ssize_t r = pwrite(fd, p + w, k - w, (off_t)(off + w));
				if (r < 0 && errno == EINTR)
					continue;
				if (r <= 0) {
					errno = r < 0 ? errno : EIO;
					return -1;
				}
				w += (size_t)r;
			}
		}
		p += k;
		n -= k;
		off += k;
	}
	return 0;
}

static char *membase_dir(struct nm_server *s)
{
	return xasprintf("%s/membase", s->pool);
}

/* The template's RAM file for spec's shape, or NULL. */
static char *template_mem(struct nm_server *s, const struct nm_sandbox_spec *spec)
{
	struct vm_shape sh;
	_cleanup_free_ char *dir = NULL;
	char *p;

	vm_shape_of(spec, &sh);
	dir = vm_cache_dir(s, spec, &sh);
	p = xasprintf("%s/mem", dir);
	if (access(p, R_OK) == 0)
		return p;
	free(p);
	return NULL;
}

int vm_base_path(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *sha,
		 char **path, err_t *err)
{
	_cleanup_free_ char *tm = template_mem(s, spec);
	char got[65];
	char *p;

	*path = NULL;
	if (!sha || !sha[0]) {
		if (!tm)
			return err_set(err, ENOENT, "template %s/%u has no memory snapshot for this "
				       "shape", spec->template_name, spec->template_version);
		*path = TAKE_PTR(tm);
		return 0;
	}
	if (!vm_base_sha_ok(sha))
		return err_set(err, EINVAL, "bad memory base digest");
	if (tm) {
		_cleanup_close_ int fd = open(tm, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		err_t e2 = { 0 };
		if (fd >= 0 && vm_base_digest(tm, fd, got, &e2) == 0 && strcmp(got, sha) == 0) {
			*path = TAKE_PTR(tm);
			return 0;
		}
	}
	p = xasprintf("%s/membase/%s", s->pool, sha);
	if (access(p, R_OK) == 0) {
		/* used: the eviction keeps the most recently used */
		utimensat(AT_FDCWD, p, NULL, 0);
		*path = p;
		return 0;
	}
	free(p);
	return err_set(err, ENOENT, "no memory base %.16s… on this node", sha);
}

int vm_base_find(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *sha,
		 char out[65], uint64_t *size, err_t *err)
{
	_cleanup_free_ char *path = NULL;
	struct stat st;
	int r;

	out[0] = '\0';
	*size = 0;
	if ((r = vm_base_path(s, spec, sha, &path, err)) < 0)
		return r;
	if (stat(path, &st) == 0)
		*size = (uint64_t)st.st_size;
	if (sha && sha[0]) {
		snprintf(out, 65, "%s", sha);
		return 0;
	}
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return err_sys(err, "open %s", path);
	return vm_base_digest(path, fd, out, err);
}

int vm_base_export(struct nm_server *s, const struct nm_sandbox_spec *spec, int fd,
		   char sha[65], uint64_t *size, int64_t *bytes, err_t *err)
{
	_cleanup_free_ char *path = NULL;
	_cleanup_free_ uint8_t *in = xmalloc(CHUNK);
	_cleanup_close_ int mfd = -1;
	ZSTD_CCtx *cc = NULL;
	size_t cap = ZSTD_CStreamOutSize();
	_cleanup_free_ uint8_t *out = xmalloc(cap);
	char got[65];
	uint64_t off = 0;
	struct stat st;
	int r;

	if ((r = vm_base_path(s, spec, NULL, &path, err)) < 0)
		return r;
	if ((mfd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0)
		return err_sys(err, "open %s", path);
	if ((r = vm_base_digest(path, mfd, sha, err)) < 0)
		return r;
	if (ftruncate(fd, 0) < 0 || lseek(fd, 0, SEEK_SET) < 0)
		return err_sys(err, "truncate the base fd");
	if (!(cc = ZSTD_createCCtx()))
		return err_set(err, ENOMEM, "zstd context");
	ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, 3);
	ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
	for (;;) {
		ssize_t n = pread(mfd, in, CHUNK, (off_t)off);
		ZSTD_EndDirective end = n == 0 ? ZSTD_e_end : ZSTD_e_continue;
		ZSTD_inBuffer ib = { in, n > 0 ? (size_t)n : 0, 0 };
		size_t left;

		if (n < 0) {
			r = err_sys(err, "read %s", path);
			goto out;
		}
		off += (uint64_t)n;
		do {
			ZSTD_outBuffer ob = { out, cap, 0 };
			left = ZSTD_compressStream2(cc, &ob, &ib, end);
			if (ZSTD_isError(left)) {
				r = err_set(err, EIO, "zstd: %s", ZSTD_getErrorName(left));
				goto out;
			}
			if (ob.pos && write_all(fd, out, ob.pos) < 0) {
				r = err_sys(err, "write the base fd");
				goto out;
			}
		} while (end == ZSTD_e_end ? left != 0 : ib.pos < ib.size);
		if (n == 0)
			break;
	}
	/* the bytes sent are the ones digested (the file is never written in
	 * place: a template memory snapshot made again is a new file) */
	if (fstat(mfd, &st) < 0 || (uint64_t)st.st_size != off ||
	    (r = vm_base_digest(path, mfd, got, err)) < 0 || strcmp(got, sha) != 0) {
		r = r < 0 ? r : err_set(err, EAGAIN, "%s changed while it was exported", path);
		goto out;
	}
	*size = off;
	*bytes = lseek(fd, 0, SEEK_CUR);
	log_info("memory base %.16s… of %s/%u exported: %" PRIu64 " bytes as %lld",
		 sha, spec->template_name, spec->template_version, off, (long long)*bytes);
out:
	ZSTD_freeCCtx(cc);
	return r;
}

/* Keep at most MEMBASE_KEEP bases: the least recently used go (never keep). */
static void membase_evict(struct nm_server *s, const char *keep)
{
	_cleanup_free_ char *dir = membase_dir(s);
	for (;;) {
		DIR *d = opendir(dir);
		struct dirent *de;
		char oldest[65] = "";
		struct timespec ot = { 0 };
		int n = 0;

		if (!d)
			return;
		while ((de = readdir(d))) {
			struct stat st;
			if (!vm_base_sha_ok(de->d_name) ||
			    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
				continue;
			n++;
			if (strcmp(de->d_name, keep) == 0)
				continue;
			if (!oldest[0] || st.st_mtim.tv_sec < ot.tv_sec ||
			    (st.st_mtim.tv_sec == ot.tv_sec && st.st_mtim.tv_nsec < ot.tv_nsec)) {
				snprintf(oldest, sizeof(oldest), "%.64s", de->d_name);   /* vm_base_sha_ok: 64 */
				ot = st.st_mtim;
			}
		}
		if (n <= MEMBASE_KEEP || !oldest[0] || unlinkat(dirfd(d), oldest, 0) < 0) {
			closedir(d);
			return;
		}
		log_info("memory base %.16s…: removed (least recently used of %d)", oldest, n);
		closedir(d);
	}
}

int vm_base_import(struct nm_server *s, const struct nm_sandbox_spec *spec, const char *sha,
		   int fd, err_t *err)
{
	_cleanup_free_ char *dir = membase_dir(s);
	_cleanup_free_ char *tmp = xasprintf("%s/.in-XXXXXX", dir);
	_cleanup_free_ char *dst = xasprintf("%s/%s", dir, sha);
	size_t icap = ZSTD_DStreamInSize(), ocap = ZSTD_DStreamOutSize();
	_cleanup_free_ uint8_t *in = xmalloc(icap), *out = xmalloc(ocap);
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	ZSTD_DCtx *dc = ZSTD_createDCtx();
	unsigned char d[32];
	unsigned int len = 0;
	uint64_t total = 0, t0 = now_us();
	size_t ret = 1;
	struct vm_shape sh;
	uint64_t ram;
	char got[65];
	int out_fd = -1, r = 0;
	ssize_t n;

	vm_shape_of(spec, &sh);
	ram = (uint64_t)sh.mem_mb << 20;
	if (!md || !dc || !EVP_DigestInit_ex(md, EVP_sha256(), NULL)) {
		r = err_set(err, ENOMEM, "zstd or sha256 context");
		goto done;
	}
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		r = err_sys(err, "mkdir %s", dir);
		goto done;
	}
	if (access(dst, F_OK) == 0)
		goto done;   /* here already (verified when it came) */
	if ((out_fd = mkostemp(tmp, O_CLOEXEC)) < 0) {
		r = err_sys(err, "create %s", tmp);
		goto done;
	}
	if (lseek(fd, 0, SEEK_SET) < 0 && errno != ESPIPE) {
		r = err_sys(err, "rewind the base fd");
		goto done;
	}
	while ((n = read(fd, in, icap)) > 0) {
		ZSTD_inBuffer ib = { in, (size_t)n, 0 };
		while (ib.pos < ib.size) {
			ZSTD_outBuffer ob = { out, ocap, 0 };
			ret = ZSTD_decompressStream(dc, &ob, &ib);
			if (ZSTD_isError(ret)) {
				r = err_set(err, EBADMSG, "zstd: %s", ZSTD_getErrorName(ret));
				goto done;
			}
			total += ob.pos;
			if (total > ram) {
				r = err_set(err, EBADMSG, "decompresses to more than the %u MiB of "
					    "RAM of its shape", sh.mem_mb);
				goto done;
			}
			EVP_DigestUpdate(md, out, ob.pos);
			if (write_sparse(out_fd, out, ob.pos, total - ob.pos) < 0) {
				r = err_sys(err, "write %s", tmp);
				goto done;
			}
		}
	}
	if (n < 0) {
		r = err_sys(err, "read the base fd");
		goto done;
	}
	if (ret != 0) {
		r = err_set(err, EBADMSG, "the stream ends early");
		goto done;
	}
	if (!EVP_DigestFinal_ex(md, d, &len)) {
		r = err_set(err, EIO, "sha256");
		goto done;
	}
	hex_encode(d, 32, got);
	if (strcmp(got, sha) != 0) {
		r = err_set(err, EBADMSG, "its content has SHA-256 %.16s…, not the %.16s… its "
			    "manifest names", got, sha);
		goto done;
	}
	if (total != ram) {
		r = err_set(err, EBADMSG, "%llu bytes is not the %u MiB of RAM of its shape",
			    (unsigned long long)total, sh.mem_mb);
		goto done;
	}
	if (ftruncate(out_fd, (off_t)total) < 0 || fchmod(out_fd, 0600) < 0 || fsync(out_fd) < 0 ||
	    rename(tmp, dst) < 0) {
		r = err_sys(err, "keep %s", dst);
		goto done;
	}
	tmp[0] = '\0';
	log_info("memory base %.16s…: %llu bytes received in %.1f ms", sha,
		 (unsigned long long)total, (now_us() - t0) / 1000.0);
	membase_evict(s, sha);
done:
	if (out_fd >= 0)
		close(out_fd);
	if (tmp[0] && out_fd >= 0)
		unlink(tmp);
	EVP_MD_CTX_free(md);
	ZSTD_freeDCtx(dc);
	return r < 0 ? err_wrap(err, "memory base %.16s…", sha) : 0;
}

void vm_base_sweep(struct nm_server *s)
{
	_cleanup_free_ char *dir = membase_dir(s);
	DIR *d = opendir(dir);
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d)))
		if (strncmp(de->d_name, ".in-", 4) == 0)
			unlinkat(dirfd(d), de->d_name, 0);
	closedir(d);
}
