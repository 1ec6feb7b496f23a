/* file.c - the file driver: file:///DIR, one file per key under DIR (a key's
 * '/' are directories).
 *
 * A put writes a temporary file in the key's directory (".NAME~tmp.RANDOM":
 * '~' is never in a key, so list() and keys cannot meet it), hashes while it
 * writes, fsyncs, stores the digest as the xattr user.airlock.sha256 of that
 * same file, and renames it over the key: the bytes and their digest appear
 * together or not at all, and a crash leaves at most a temporary file. A get
 * hashes what it reads and compares with the xattr. DIR must be on a file
 * system with user xattrs (ext4, btrfs, xfs); open checks. */
#include "objstore-internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "../lib/util.h"

#define XATTR "user.airlock.sha256"
#define CHUNK (1u << 20)

struct os_file {
	struct objstore base;
	char *dir;
	int dirfd;
};

static struct os_file *F(struct objstore *os)
{
	return (struct os_file *)os;
}

/* The temporary name beside key: "dir/.name~tmp.RANDOM". Caller owns. */
static char *tmp_name(const char *key)
{
	const char *slash = strrchr(key, '/');
	_cleanup_free_ char *rnd = random_id("", 8);

	if (!slash)
		return xasprintf(".%s~tmp.%s", key, rnd);
	return xasprintf("%.*s/.%s~tmp.%s", (int)(slash - key), key, slash + 1, rnd);
}

/* mkdir every directory of key below DIR. */
static int make_parents(struct os_file *f, const char *key, err_t *err)
{
	_cleanup_free_ char *p = xstrdup(key);

	for (char *s = p; (s = strchr(s, '/')); s++) {
		*s = '\0';
		if (mkdirat(f->dirfd, p, 0700) < 0 && errno != EEXIST)
			return err_sys(err, "objstore %s: cannot create directory `%s`", f->dir, p);
		*s = '/';
	}
	return 0;
}

static int file_put(struct objstore *os, const char *key, const struct os_src *src,
		    char sha256_hex[OBJSTORE_SHA256_HEX], err_t *err)
{
	struct os_file *f = F(os);
	_cleanup_free_ char *tmp = tmp_name(key);
	_cleanup_free_ char *chunk = xmalloc(CHUNK);
	_cleanup_close_ int fd = -1;
	EVP_MD_CTX *h;
	int r;

	/* a delete of the last key under a directory removes it: one racing
	 * with us may take the directory we just made, so make it again */
	for (int i = 0; i < 3 && fd < 0; i++) {
		if ((r = make_parents(f, key, err)) < 0)
			return r;
		fd = openat(f->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0 && errno != ENOENT)
			break;
	}
	if (fd < 0)
		return err_sys(err, "objstore put %s: cannot create `%s/%s`", key, f->dir, tmp);
	h = sha256_start();
	for (uint64_t pos = 0; pos < src->size;) {
		size_t n = src->size - pos < CHUNK ? (size_t)(src->size - pos) : CHUNK;
		r = os_src_read(src, pos, chunk, n);
		if (r < 0) {
			errno = -r;
			err_sys(err, "objstore put %s: cannot read the source at byte %llu", key,
				(unsigned long long)pos);
			goto fail;
		}
		sha256_add(h, chunk, n);
		r = write_all(fd, chunk, n);
		if (r < 0) {
			errno = -r;
			err_sys(err, "objstore put %s: cannot write `%s/%s`", key, f->dir, tmp);
			goto fail;
		}
		os_src_stored(src, n);
		pos += n;
	}
	sha256_end_hex(h, sha256_hex);
	h = NULL;
	if (src->sha256 && strcmp(src->sha256, sha256_hex) != 0) {
		r = err_set(err, EIO, "objstore put %s: the source's SHA-256 is %.12s…, not the "
			    "%.12s… it was given with", key, sha256_hex, src->sha256);
		goto fail;
	}
	if (fsetxattr(fd, XATTR, sha256_hex, 64, 0) < 0) {
		r = err_sys(err, "objstore put %s: cannot set the digest xattr", key);
		goto fail;
	}
	if (fsync(fd) < 0) {
		r = err_sys(err, "objstore put %s: fsync", key);
		goto fail;
	}
	if (renameat(f->dirfd, tmp, f->dirfd, key) < 0) {
		r = err_sys(err, "objstore put %s: cannot rename into place", key);
		goto fail;
	}
	/* the rename itself is durable once the directory is */
	{
		const char *slash = strrchr(key, '/');
		_cleanup_free_ char *parent = slash ? xstrndup(key, (size_t)(slash - key)) : xstrdup(".");
		_cleanup_close_ int dfd = openat(f->dirfd, parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0)
			(void)fsync(dfd);
	}
	return 0;
fail:
	if (h)
		EVP_MD_CTX_free(h);
	unlinkat(f->dirfd, tmp, 0);
	return r;
}

/* Open key for reading with its stored digest; -ENOENT when there is no
 * such object (a directory is none either). */
static int open_obj(struct os_file *f, const char *key, struct stat *st,
		    char hex[OBJSTORE_SHA256_HEX], err_t *err)
{
	_cleanup_close_ int fd = openat(f->dirfd, key, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	ssize_t n;

	if (fd < 0) {
		if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP)
			return err_set(err, ENOENT, "objstore %s: no object `%s`", f->dir, key);
		return err_sys(err, "objstore %s: cannot open `%s`", f->dir, key);
	}
	if (fstat(fd, st) < 0)
		return err_sys(err, "objstore %s: stat `%s`", f->dir, key);
	if (!S_ISREG(st->st_mode))
		return err_set(err, ENOENT, "objstore %s: no object `%s`", f->dir, key);
	n = fgetxattr(fd, XATTR, hex, 64);
	if (n != 64) {
		if (n < 0 && errno != ENODATA && errno != ERANGE)
			return err_sys(err, "objstore %s: cannot read the digest of `%s`", f->dir, key);
		return err_set(err, EBADMSG, "objstore %s: object `%s` has no valid stored digest",
			       f->dir, key);
	}
	hex[64] = '\0';
	if (!sha256_hex_ok(hex))
		return err_set(err, EBADMSG, "objstore %s: object `%s` has no valid stored digest",
			       f->dir, key);
	return TAKE_FD(fd);
}

static int file_get(struct objstore *os, const char *key, const struct os_sink *sink,
		    uint64_t *size, char sha256_hex[OBJSTORE_SHA256_HEX], err_t *err)
{
	struct os_file *f = F(os);
	char stored[OBJSTORE_SHA256_HEX];
	_cleanup_free_ char *chunk = NULL;
	_cleanup_close_ int fd = -1;
	uint64_t total = 0;
	struct stat st;
	EVP_MD_CTX *h;
	int r = 0;

	fd = open_obj(f, key, &st, stored, err);
	if (fd < 0)
		return fd;
	chunk = xmalloc(CHUNK);
	h = sha256_start();
	for (;;) {
		ssize_t n = read(fd, chunk, CHUNK);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			r = err_sys(err, "objstore get %s: read", key);
			break;
		}
		if (n == 0)
			break;
		sha256_add(h, chunk, (size_t)n);
		r = sink->write(sink->arg, chunk, (size_t)n);
		if (r < 0) {
			errno = -r;
			r = r == -EFBIG ? err_set(err, EFBIG, "objstore get %s: larger than asked for", key)
					: err_sys(err, "objstore get %s: cannot write out", key);
			break;
		}
		total += (uint64_t)n;
	}
	if (r < 0) {
		EVP_MD_CTX_free(h);
		return r;
	}
	sha256_end_hex(h, sha256_hex);
	if (strcmp(sha256_hex, stored) != 0)
		return err_set(err, EBADMSG,
			       "objstore get %s: checksum mismatch: stored sha256 %s, read %s", key,
			       stored, sha256_hex);
	*size = total;
	return 0;
}

static int file_head(struct objstore *os, const char *key, uint64_t *size,
		     char sha256_hex[OBJSTORE_SHA256_HEX], err_t *err)
{
	struct stat st;
	int fd = open_obj(F(os), key, &st, sha256_hex, err);

	if (fd < 0)
		return fd;
	close(fd);
	*size = (uint64_t)st.st_size;
	return 0;
}

static int file_del(struct objstore *os, const char *key, err_t *err)
{
	struct os_file *f = F(os);
	struct stat st;
	_cleanup_free_ char *p = xstrdup(key);
	char *slash;

	if (fstatat(f->dirfd, key, &st, AT_SYMLINK_NOFOLLOW) < 0 || S_ISDIR(st.st_mode))
		return 0;  /* absent: deleting it succeeds */
	if (unlinkat(f->dirfd, key, 0) < 0 && errno != ENOENT)
		return err_sys(err, "objstore %s: cannot delete `%s`", f->dir, key);
	/* drop the directories the key made, while they are empty */
	while ((slash = strrchr(p, '/'))) {
		*slash = '\0';
		if (unlinkat(f->dirfd, p, AT_REMOVEDIR) < 0)
			break;
	}
	return 0;
}

struct entry {
	char *key;
	uint64_t size;
};

struct walk {
	struct entry *v;
	size_t n, cap;
	const char *prefix;
};

static bool seg_name_valid(const char *name)
{
	/* the same test as a whole key's, for one segment */
	return !strchr(name, '/') && objstore_key_valid(name);
}

/* Every regular file below dirfd/rel (rel "" is DIR itself) whose key could
 * start with prefix. */
static int walk_dir(struct os_file *f, const char *rel, struct walk *w, err_t *err)
{
	int fd = openat(f->dirfd, rel[0] ? rel : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d;
	struct dirent *e;
	int r = 0;

	if (fd < 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			return 0;
		return err_sys(err, "objstore %s: cannot open `%s`", f->dir, rel);
	}
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return err_sys(err, "objstore %s: cannot read `%s`", f->dir, rel);
	}
	while (r == 0 && (e = readdir(d))) {
		struct stat st;
		_cleanup_free_ char *key = NULL;
		size_t kl, pl = strlen(w->prefix);

		if (!seg_name_valid(e->d_name))
			continue;  /* ".", "..", temporaries */
		key = rel[0] ? xasprintf("%s/%s", rel, e->d_name) : xstrdup(e->d_name);
		kl = strlen(key);
		/* key must agree with prefix on their common length */
		if (strncmp(key, w->prefix, kl < pl ? kl : pl) != 0)
			continue;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;  /* gone since readdir */
		if (S_ISDIR(st.st_mode)) {
			r = walk_dir(f, key, w, err);
		} else if (S_ISREG(st.st_mode) && kl >= pl) {
			if (w->n == w->cap) {
				w->cap = w->cap ? 2 * w->cap : 64;
				w->v = xrealloc(w->v, w->cap * sizeof(*w->v));
			}
			w->v[w->n].key = TAKE_PTR(key);
			w->v[w->n++].size = (uint64_t)st.st_size;
		}
	}
	closedir(d);
	return r;
}

static int entry_cmp(const void *a, const void *b)
{
	return strcmp(((const struct entry *)a)->key, ((const struct entry *)b)->key);
}

static int file_list(struct objstore *os, const char *prefix, objstore_list_fn fn, void *arg,
		     err_t *err)
{
	struct walk w = { .prefix = prefix };
	int r = walk_dir(F(os), "", &w, err);

	if (r == 0) {
		if (w.n)
			qsort(w.v, w.n, sizeof(*w.v), entry_cmp);
		for (size_t i = 0; i < w.n && r == 0; i++)
			r = fn(arg, w.v[i].key, w.v[i].size);
	}
	for (size_t i = 0; i < w.n; i++)
		free(w.v[i].key);
	free(w.v);
	return r;
}

static void file_close(struct objstore *os)
{
	struct os_file *f = F(os);

	close(f->dirfd);
	free(f->dir);
	os_opts_free(os);
	free(f);
}

static const struct objstore_ops file_ops = {
	.name = "file",
	.put = file_put,
	.get = file_get,
	.head = file_head,
	.del = file_del,
	.list = file_list,
	.close = file_close,
};

/* The file system under DIR must keep user xattrs: try one. */
static int probe_xattr(int dirfd, const char *dir, err_t *err)
{
	_cleanup_free_ char *name = random_id(".probe~tmp.", 8);
	int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	int r = 0;

	if (fd < 0)
		return err_sys(err, "objstore %s: cannot write in it", dir);
	if (fsetxattr(fd, XATTR, "x", 1, 0) < 0)
		r = err_sys(err, "objstore %s: its file system does not keep user xattrs", dir);
	close(fd);
	unlinkat(dirfd, name, 0);
	return r;
}

struct objstore *os_file_open(const char *rest, const struct objstore_opts *opts, err_t *err)
{
	struct os_file *f;
	int fd, r;

	if (rest[0] != '/' || strpbrk(rest, "?#")) {
		err_set(err, EINVAL, "objstore: `file://%.200s`: want file:///ABSOLUTE/DIR", rest);
		return NULL;
	}
	r = mkdir_p(rest, 0700);
	if (r < 0) {
		errno = -r;
		err_sys(err, "objstore: cannot create `%s`", rest);
		return NULL;
	}
	fd = open(rest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		err_sys(err, "objstore: cannot open `%s`", rest);
		return NULL;
	}
	if (probe_xattr(fd, rest, err) < 0) {
		close(fd);
		return NULL;
	}
	f = xcalloc(1, sizeof(*f));
	f->base.ops = &file_ops;
	os_opts_init(&f->base, opts);
	f->dir = xstrdup(rest);
	f->dirfd = fd;
	return &f->base;
}
