/* apply.c - one layer's tar onto the root, beneath it and nowhere else.
 *
 * The discipline (oci.h says what is refused):
 *   - a name is cleaned first (oci_clean_path): ".." anywhere is refused;
 *   - its parent directory is opened from the root with openat2 and
 *     RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
 *     RESOLVE_NO_XDEV, made component by component when missing (each
 *     component resolved the same way), so no symlink on the way is ever
 *     followed, whoever made it;
 *   - the last component is replaced (unlinked, or removed as a tree with
 *     the same no-follow discipline) and made with O_CREAT|O_EXCL|O_NOFOLLOW,
 *     mkdirat, symlinkat, linkat without AT_SYMLINK_FOLLOW or mknodat of a
 *     FIFO; owners and modes are set on the fd or with
 *     AT_SYMLINK_NOFOLLOW.
 * Whiteouts (".wh.NAME") remove NAME of a lower layer; an opaque marker
 * (".wh..wh..opq") empties its directory of everything a lower layer put
 * there. "Lower" is told apart by the set of paths this layer made so far.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "oci.h"

#define WH_PREFIX ".wh."
#define WH_OPAQUE ".wh..wh..opq"
#define RM_DEPTH_MAX 512

/* ---- the set of paths a layer made (open addressing, FNV-1a) ---- */

struct pathset {
	char **slot;
	size_t cap, n;
};

static uint64_t fnv(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

static bool set_has(const struct pathset *ps, const char *p)
{
	if (!ps->cap)
		return false;
	for (size_t i = fnv(p) & (ps->cap - 1);; i = (i + 1) & (ps->cap - 1)) {
		if (!ps->slot[i])
			return false;
		if (!strcmp(ps->slot[i], p))
			return true;
	}
}

static void set_put_owned(struct pathset *ps, char *p);

static void set_grow(struct pathset *ps)
{
	struct pathset old = *ps;

	ps->cap = old.cap ? old.cap * 2 : 1024;
	ps->slot = xcalloc(ps->cap, sizeof(char *));
	ps->n = 0;
	for (size_t i = 0; i < old.cap; i++)
		if (old.slot[i])
			set_put_owned(ps, old.slot[i]);
	free(old.slot);
}

static void set_put_owned(struct pathset *ps, char *p)
{
	size_t i;

	if ((ps->n + 1) * 2 > ps->cap)
		set_grow(ps);
	for (i = fnv(p) & (ps->cap - 1); ps->slot[i]; i = (i + 1) & (ps->cap - 1))
		if (!strcmp(ps->slot[i], p)) {
			free(p);
			return;
		}
	ps->slot[i] = p;
	ps->n++;
}

static void set_put(struct pathset *ps, const char *p)
{
	if (!set_has(ps, p))
		set_put_owned(ps, xstrdup(p));
}

static void set_clear(struct pathset *ps)
{
	for (size_t i = 0; i < ps->cap; i++)
		free(ps->slot[i]);
	free(ps->slot);
	memset(ps, 0, sizeof(*ps));
}

/* ---- names ---- */

int oci_clean_path(const char *in, char *out)
{
	size_t o = 0;
	const char *p = in;

	while (*p) {
		const char *e = strchr(p, '/');
		size_t n = e ? (size_t)(e - p) : strlen(p);

		if (n == 2 && p[0] == '.' && p[1] == '.')
			return -EINVAL;
		if (n > 255)
			return -ENAMETOOLONG;
		if (n && !(n == 1 && p[0] == '.')) {
			if (o + n + 1 > TAR_NAME_MAX)
				return -ENAMETOOLONG;
			if (o)
				out[o++] = '/';
			memcpy(out + o, p, n);
			o += n;
		}
		p += n;
		while (*p == '/')
			p++;
	}
	out[o] = '\0';
	return 0;
}

/* ---- resolving beneath the root ---- */

int oci_openat2_beneath(int dirfd, const char *path, int flags)
{
	struct open_how how = {
		.flags = (uint64_t)(flags | O_CLOEXEC),
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
			   RESOLVE_NO_XDEV,
	};
	long r = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));

	return r < 0 ? -errno : (int)r;
}

struct ctx {
	struct oci_applier *a;
	struct pathset *made;
	const char *layer, *entry;
	err_t *err;
};

static int refuse(struct ctx *c, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int refuse(struct ctx *c, int code, const char *fmt, ...)
{
	char why[300], name[201];
	size_t i;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	/* The name is the image's: printable ASCII only in a message that
	 * becomes JSON and a log line. */
	for (i = 0; c->entry[i] && i < sizeof(name) - 1; i++)
		name[i] = c->entry[i] >= 0x20 && c->entry[i] < 0x7f ? c->entry[i] : '?';
	name[i] = '\0';
	for (i = 0; why[i]; i++)
		if ((unsigned char)why[i] < 0x20 || (unsigned char)why[i] >= 0x7f)
			why[i] = '?';
	return err_set(c->err, code, "%s: entry `%s`: %s", c->layer, name, why);
}

static int resolve_error(struct ctx *c, int r, const char *dir)
{
	if (r == -ELOOP)
		return refuse(c, EPERM, "refused: `%.200s` goes through a symlink", dir);
	if (r == -EXDEV)
		return refuse(c, EPERM, "refused: `%.200s` leaves the root", dir);
	if (r == -ENOTDIR)
		return refuse(c, ENOTDIR, "`%.200s` is not a directory", dir);
	errno = -r;
	return refuse(c, -r, "open `%.200s`: %s", dir, strerror(-r));
}

/* The directory `dir` (clean, "" = the root) as an O_PATH fd; with make,
 * missing components are created (0755, root's) and recorded as this
 * layer's. */
static int open_dir(struct ctx *c, const char *dir, bool make)
{
	char *p, *slash;
	int fd, r;

	if (!*dir)
		return oci_openat2_beneath(c->a->root, ".", O_PATH | O_DIRECTORY);
	fd = oci_openat2_beneath(c->a->root, dir, O_PATH | O_DIRECTORY);
	if (fd >= 0 || fd != -ENOENT || !make)
		return fd >= 0 ? fd : resolve_error(c, fd, dir);
	/* Walk it, making what is missing. */
	_cleanup_free_ char *path = xstrdup(dir);
	fd = oci_openat2_beneath(c->a->root, ".", O_PATH | O_DIRECTORY);
	if (fd < 0)
		return resolve_error(c, fd, ".");
	for (p = path;; p = slash + 1) {
		int next;

		slash = strchr(p, '/');
		if (slash)
			*slash = '\0';
		next = oci_openat2_beneath(fd, p, O_PATH | O_DIRECTORY);
		if (next == -ENOENT) {
			if (mkdirat(fd, p, 0755) < 0 && errno != EEXIST) {
				r = -errno;
				close(fd);
				return resolve_error(c, r, path);
			}
			set_put(c->made, path);
			next = oci_openat2_beneath(fd, p, O_PATH | O_DIRECTORY);
		}
		close(fd);
		if (next < 0)
			return resolve_error(c, next, path);
		fd = next;
		if (!slash)
			return fd;
		*slash = '/';
	}
}

/* ---- removing, never following a link ---- */

static int rm_tree(int dirfd, const char *name, int depth)
{
	struct stat st;
	int fd, r = 0;
	DIR *d;
	struct dirent *de;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISDIR(st.st_mode))
		return unlinkat(dirfd, name, 0) < 0 ? -errno : 0;
	if (depth > RM_DEPTH_MAX)
		return -ELOOP;
	fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	while (r == 0 && (de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			r = rm_tree(fd, de->d_name, depth + 1);
	closedir(d);
	if (r == 0 && unlinkat(dirfd, name, AT_REMOVEDIR) < 0)
		r = -errno;
	return r;
}

/* Empty the directory `path` (fd) of what lower layers put there: a child
 * this layer made stays, and if it is a directory the rule applies inside
 * it too. */
static int clear_lower(struct ctx *c, int fd, const char *path, int depth)
{
	int dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = 0;
	struct dirent *de;
	DIR *d;

	if (dfd < 0)
		return -errno;
	if (depth > RM_DEPTH_MAX) {
		close(dfd);
		return -ELOOP;
	}
	d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return -errno;
	}
	while (r == 0 && (de = readdir(d))) {
		_cleanup_free_ char *child = NULL;
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		child = *path ? xasprintf("%s/%s", path, de->d_name) : xstrdup(de->d_name);
		if (!set_has(c->made, child)) {
			r = rm_tree(dirfd(d), de->d_name, 0);
			continue;
		}
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISDIR(st.st_mode)) {
			int sub = openat(dirfd(d), de->d_name,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0)
				r = -errno;
			else {
				r = clear_lower(c, sub, child, depth + 1);
				close(sub);
			}
		}
	}
	closedir(d);
	return r;
}

/* ---- one entry ---- */

static int copy_data(struct ctx *c, struct tar_reader *tr, int fd, uint64_t size)
{
	char buf[64 * 1024];
	ssize_t k;

	if (c->a->bytes + size > c->a->lim.max_bytes || c->a->bytes + size < c->a->bytes)
		return refuse(c, EFBIG, "the image is over its limit of %llu bytes",
			      (unsigned long long)c->a->lim.max_bytes);
	c->a->bytes += size;
	while ((k = tar_read(tr, buf, sizeof(buf), c->err)) > 0)
		if (write_all(fd, buf, (size_t)k) < 0)
			return refuse(c, errno ? errno : EIO, "write: %s", strerror(errno));
	if (k < 0)
		return err_wrap(c->err, "%s: entry `%.200s`", c->layer, c->entry);
	return 0;
}

/* Make the entry's last component `base` in dirfd. */
static int make_entry(struct ctx *c, struct tar_reader *tr, const struct tar_entry *e, int dirfd,
		      const char *base)
{
	struct timespec ts[2] = { { .tv_sec = e->mtime }, { .tv_sec = e->mtime } };
	struct stat st;
	bool exists = fstatat(dirfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0;
	int r;

	/* Replace what is there, unless a directory meets a directory. */
	if (exists && !(e->type == '5' && S_ISDIR(st.st_mode)) &&
	    (r = rm_tree(dirfd, base, 0)) < 0)
		return refuse(c, -r, "cannot replace it: %s", strerror(-r));
	switch (e->type) {
	case '0': {
		_cleanup_close_ int fd = openat(dirfd, base, O_WRONLY | O_CREAT | O_EXCL |
						O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0)
			return refuse(c, errno, "create: %s", strerror(errno));
		if ((r = copy_data(c, tr, fd, e->size)) < 0)
			return r;
		if (fchown(fd, e->uid, e->gid) < 0 || fchmod(fd, e->mode) < 0)
			return refuse(c, errno, "owner/mode: %s", strerror(errno));
		futimens(fd, ts);
		return 0;
	}
	case '5': {
		_cleanup_close_ int fd = -1;
		if (!exists && mkdirat(dirfd, base, 0700) < 0)
			return refuse(c, errno, "mkdir: %s", strerror(errno));
		fd = openat(dirfd, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return refuse(c, errno, "open directory: %s", strerror(errno));
		if (fchown(fd, e->uid, e->gid) < 0 || fchmod(fd, e->mode) < 0)
			return refuse(c, errno, "owner/mode: %s", strerror(errno));
		return 0;
	}
	case '2':
		if (!e->linkname[0])
			return refuse(c, EINVAL, "symlink without a target");
		/* Any target may be stored: nothing here ever follows it. */
		if (symlinkat(e->linkname, dirfd, base) < 0)
			return refuse(c, errno, "symlink: %s", strerror(errno));
		if (fchownat(dirfd, base, e->uid, e->gid, AT_SYMLINK_NOFOLLOW) < 0)
			return refuse(c, errno, "owner: %s", strerror(errno));
		return 0;
	case '6':
		if (mknodat(dirfd, base, S_IFIFO | (e->mode & 0777), 0) < 0)
			return refuse(c, errno, "mkfifo: %s", strerror(errno));
		if (fchownat(dirfd, base, e->uid, e->gid, AT_SYMLINK_NOFOLLOW) < 0)
			return refuse(c, errno, "owner: %s", strerror(errno));
		return 0;
	}
	return refuse(c, EINVAL, "entry type `%c`", e->type);
}

/* A hardlink: its target must be a non-directory already in the tree,
 * found by the same resolution as any other name. */
static int make_link(struct ctx *c, const struct tar_entry *e, int dirfd, const char *base)
{
	char target[TAR_NAME_MAX + 1];
	_cleanup_close_ int tdir = -1;
	const char *tbase;
	char *slash;
	struct stat st;
	int r;

	if (!e->linkname[0] || oci_clean_path(e->linkname, target) < 0 || !target[0])
		return refuse(c, EPERM, "refused: hardlink target `%.200s` is outside the tree",
			      e->linkname);
	slash = strrchr(target, '/');
	tbase = slash ? slash + 1 : target;
	if (slash)
		*slash = '\0';
	tdir = oci_openat2_beneath(c->a->root, slash ? target : ".", O_PATH | O_DIRECTORY);
	if (tdir < 0 || fstatat(tdir, tbase, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return refuse(c, EPERM, "refused: hardlink target `%.200s` is not in the tree",
			      e->linkname);
	if (S_ISDIR(st.st_mode))
		return refuse(c, EPERM, "refused: hardlink to a directory `%.200s`", e->linkname);
	if (fstatat(dirfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && (r = rm_tree(dirfd, base, 0)) < 0)
		return refuse(c, -r, "cannot replace it: %s", strerror(-r));
	if (linkat(tdir, tbase, dirfd, base, 0) < 0)
		return refuse(c, errno, "link: %s", strerror(errno));
	return 0;
}

static int apply_entry(struct ctx *c, struct tar_reader *tr, const struct tar_entry *e)
{
	char path[TAR_NAME_MAX + 1];
	_cleanup_close_ int dirfd = -1;
	const char *base;
	char *slash;
	int r;

	if (++c->a->entries > c->a->lim.max_entries)
		return refuse(c, EFBIG, "more than %llu entries",
			      (unsigned long long)c->a->lim.max_entries);
	if ((r = oci_clean_path(e->name, path)) < 0)
		return refuse(c, EPERM, r == -EINVAL ? "refused: the name leaves the root (`..`)"
						     : "refused: name too long");
	switch (e->type) {
	case '0': case '1': case '2': case '5': case '6':
		break;
	case '3': case '4':
		return refuse(c, EPERM, "refused: device node (%s %u:%u)",
			      e->type == '3' ? "char" : "block", e->devmajor, e->devminor);
	default:
		return refuse(c, EPERM, "refused: unsupported entry type `%c`", e->type);
	}
	if (!path[0])
		return 0;   /* the root itself: its owner and mode stay ours */
	slash = strrchr(path, '/');
	base = slash ? slash + 1 : path;
	if (slash)
		*slash = '\0';
	dirfd = open_dir(c, slash ? path : "", true);
	if (dirfd < 0)
		return dirfd;
	if (!strcmp(base, WH_OPAQUE)) {
		if ((r = clear_lower(c, dirfd, slash ? path : "", 0)) < 0)
			return refuse(c, -r, "opaque directory: %s", strerror(-r));
		return 0;
	}
	if (!strncmp(base, WH_PREFIX, strlen(WH_PREFIX))) {
		const char *victim = base + strlen(WH_PREFIX);
		_cleanup_free_ char *vpath = slash ? xasprintf("%s/%s", path, victim)
						   : xstrdup(victim);
		if (!*victim || !strcmp(victim, ".") || !strcmp(victim, ".."))
			return refuse(c, EPERM, "refused: bad whiteout");
		if (!set_has(c->made, vpath) && (r = rm_tree(dirfd, victim, 0)) < 0)
			return refuse(c, -r, "whiteout: %s", strerror(-r));
		return 0;
	}
	if (e->type == '1')
		r = make_link(c, e, dirfd, base);
	else
		r = make_entry(c, tr, e, dirfd, base);
	if (r < 0)
		return r;
	if (slash)
		*slash = '/';
	set_put(c->made, path);
	return 0;
}

void oci_applier_init(struct oci_applier *a, int root, const struct oci_limits *lim)
{
	memset(a, 0, sizeof(*a));
	a->root = root;
	a->lim.max_bytes = lim && lim->max_bytes ? lim->max_bytes : 16ull << 30;
	a->lim.max_entries = lim && lim->max_entries ? lim->max_entries : 2000000;
	a->created = xcalloc(1, sizeof(struct pathset));
}

void oci_applier_free(struct oci_applier *a)
{
	if (a->created)
		set_clear(a->created);
	free(a->created);
	a->created = NULL;
}

int oci_apply_layer(struct oci_applier *a, struct tar_reader *tr, const char *layer, err_t *err)
{
	struct ctx c = { .a = a, .made = a->created, .layer = layer, .err = err };
	struct tar_entry *e;
	int r;

	set_clear(a->created);
	while ((r = tar_next(tr, &e, err)) > 0) {
		c.entry = e->name;
		if ((r = apply_entry(&c, tr, e)) < 0)
			return r;
	}
	if (r < 0)
		return err_wrap(err, "%s", layer);
	return 0;
}
