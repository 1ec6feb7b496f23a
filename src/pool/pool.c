/* pool.c - the btrfs pool: loop image, mount, subvolume ioctls, quotas. */
#include "pool.h"

#include <endian.h>
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <libgen.h>
#include <linux/btrfs.h>
#include <linux/btrfs_tree.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <linux/loop.h>
#include <linux/magic.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../lib/log.h"
#include "../lib/util.h"

#ifndef BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA
#define BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA 4
#endif
#define BTRFS_FIRST_FREE_OBJECTID 256ULL

static bool is_btrfs(const char *path)
{
	struct statfs sf;

	return statfs(path, &sf) == 0 && sf.f_type == BTRFS_SUPER_MAGIC;
}

/* True when path is the root of a mount (its device differs from its parent's). */
static bool is_mountpoint(const char *path)
{
	_cleanup_free_ char *parent = xasprintf("%s/..", path);
	struct stat a, b;

	if (stat(path, &a) < 0 || stat(parent, &b) < 0)
		return false;
	return a.st_dev != b.st_dev || a.st_ino == b.st_ino;
}

static int run_quiet(char *const argv[], err_t *err)
{
	pid_t pid = fork();
	int st;

	if (pid < 0)
		return err_sys(err, "fork");
	if (pid == 0) {
		int fd = open("/dev/null", O_RDWR);
		if (fd >= 0) {
			dup2(fd, 0);
			dup2(fd, 1);
		}
		execvp(argv[0], argv);
		_exit(127);
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return err_sys(err, "waitpid %s", argv[0]);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return err_set(err, EIO, "%s failed (status %d)", argv[0], st);
	return 0;
}

/* Attach img to a free loop device with autoclear (the device frees itself on
 * the last umount) and mount it at dir. Another process may grab the device
 * LOOP_CTL_GET_FREE named first, so retry on EBUSY. */
static int loop_mount(const char *img, const char *dir, err_t *err)
{
	_cleanup_close_ int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	_cleanup_close_ int imgfd = open(img, O_RDWR | O_CLOEXEC);

	if (ctl < 0)
		return err_sys(err, "open /dev/loop-control");
	if (imgfd < 0)
		return err_sys(err, "open %s", img);
	for (int attempt = 0; attempt < 16; attempt++) {
		int n = ioctl(ctl, LOOP_CTL_GET_FREE);
		char dev[64];
		struct loop_config lc;
		_cleanup_close_ int lfd = -1;

		if (n < 0)
			return err_sys(err, "LOOP_CTL_GET_FREE");
		snprintf(dev, sizeof(dev), "/dev/loop%d", n);
		lfd = open(dev, O_RDWR | O_CLOEXEC);
		if (lfd < 0)
			return err_sys(err, "open %s", dev);
		memset(&lc, 0, sizeof(lc));
		lc.fd = (uint32_t)imgfd;
		lc.info.lo_flags = LO_FLAGS_AUTOCLEAR;
		if (ioctl(lfd, LOOP_CONFIGURE, &lc) < 0) {
			if (errno == EBUSY)
				continue;
			return err_sys(err, "LOOP_CONFIGURE %s", dev);
		}
		/* autoclear: once mounted, closing lfd keeps the device bound;
		 * if the mount fails, closing lfd releases it. */
		if (mount(dev, dir, "btrfs", MS_NOATIME, "") < 0)
			return err_sys(err, "mount %s on %s", dev, dir);
		return 0;
	}
	return err_set(err, EBUSY, "no free loop device");
}

int pool_quota_enable(const char *path, err_t *err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct btrfs_ioctl_quota_ctl_args q = { .cmd = BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA };

	if (fd < 0)
		return err_sys(err, "open %s", path);
	/* Simple quotas (kernel 6.7+) account extents to the subvolume that
	 * wrote them, so a snapshot costs no accounting work; full qgroups are
	 * the fallback. Enabling either when one is already on is harmless. */
	if (ioctl(fd, BTRFS_IOC_QUOTA_CTL, &q) == 0)
		return 0;
	q.cmd = BTRFS_QUOTA_CTL_ENABLE;
	if (ioctl(fd, BTRFS_IOC_QUOTA_CTL, &q) < 0)
		return err_sys(err, "enable btrfs quota on %s", path);
	return 0;
}

int pool_ensure(const char *data_dir, uint64_t size_mb, bool *mounted_by_us, err_t *err)
{
	_cleanup_free_ char *pool = xasprintf("%s/pool", data_dir);
	_cleanup_free_ char *img = xasprintf("%s/pool.img", data_dir);
	static const char *const subdirs[] = { "templates", "sandboxes", "snapshots" };
	int r;

	if (mounted_by_us)
		*mounted_by_us = false;
	if ((r = mkdir_p(data_dir, 0755)) < 0 || ((r = mkdir_p(pool, 0755)) < 0)) {
		errno = -r;
		return err_sys(err, "mkdir %s", pool);
	}
	if (is_btrfs(data_dir) && access(img, F_OK) < 0) {
		/* DATA lives on btrfs: the pool is a plain subtree there. */
		log_debug("pool: %s is on btrfs, using it directly", data_dir);
	} else if (!(is_mountpoint(pool) && is_btrfs(pool))) {
		if (access(img, F_OK) < 0) {
			_cleanup_close_ int fd =
				open(img, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
			char *mkfs[] = { "mkfs.btrfs", "-q", "-f", img, NULL };

			if (size_mb < 256)
				size_mb = 256;
			if (fd < 0)
				return err_sys(err, "create %s", img);
			if (ftruncate(fd, (off_t)(size_mb << 20)) < 0) {
				r = err_sys(err, "truncate %s", img);
				unlink(img);
				return r;
			}
			if (run_quiet(mkfs, err) < 0) {
				unlink(img);
				return err_wrap(err, "mkfs.btrfs %s", img);
			}
		}
		if (loop_mount(img, pool, err) < 0)
			return err_wrap(err, "mount pool");
		if (mounted_by_us)
			*mounted_by_us = true;
		/* Private: jail mount namespaces copied from ours must not
		 * propagate anything back, and nothing of ours leaks into them. */
		if (mount(NULL, pool, NULL, MS_PRIVATE, NULL) < 0)
			log_warn("pool: make %s private: %s", pool, strerror(errno));
	}
	for (size_t i = 0; i < ARRAY_SIZE(subdirs); i++) {
		_cleanup_free_ char *d = xasprintf("%s/%s", pool, subdirs[i]);
		if (mkdir(d, 0700) < 0 && errno != EEXIST)
			return err_sys(err, "mkdir %s", d);
	}
	if (pool_quota_enable(pool, err) < 0) {
		/* Disk limits are then not enforced; everything else works. */
		log_warn("pool: %s (disk limits off)", err->msg);
		err_clear(err);
	}
	return 0;
}

int pool_release(const char *data_dir, err_t *err)
{
	_cleanup_free_ char *pool = xasprintf("%s/pool", data_dir);
	_cleanup_free_ char *img = xasprintf("%s/pool.img", data_dir);

	if (access(img, F_OK) < 0 || !is_mountpoint(pool) || !is_btrfs(pool))
		return 0;
	if (umount2(pool, 0) < 0) {
		if (errno != EBUSY)
			return err_sys(err, "umount %s", pool);
		/* Something still holds a file open: detach, the loop device
		 * clears itself once the last user goes away. */
		if (umount2(pool, MNT_DETACH) < 0)
			return err_sys(err, "umount -l %s", pool);
	}
	return 0;
}

/* Split path into an open parent directory fd and its last component. */
static int open_parent(const char *path, char *name, size_t cap, err_t *err)
{
	_cleanup_free_ char *dup1 = xstrdup(path), *dup2 = xstrdup(path);
	const char *dir = dirname(dup1), *base = basename(dup2);
	int fd;

	if (strlen(base) >= cap || !strcmp(base, "/") || !strcmp(base, ".."))
		return err_set(err, EINVAL, "bad subvolume path `%s`", path);
	snprintf(name, cap, "%s", base);
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return err_sys(err, "open %s", dir);
	return fd;
}

int pool_subvol_create(const char *path, err_t *err)
{
	struct btrfs_ioctl_vol_args_v2 a;
	_cleanup_close_ int dfd = -1;

	memset(&a, 0, sizeof(a));
	if ((dfd = open_parent(path, a.name, sizeof(a.name), err)) < 0)
		return dfd;
	if (ioctl(dfd, BTRFS_IOC_SUBVOL_CREATE_V2, &a) < 0)
		return err_sys(err, "create subvolume %s", path);
	return 0;
}

int pool_subvol_snapshot(const char *src, const char *dst, bool readonly, err_t *err)
{
	struct btrfs_ioctl_vol_args_v2 a;
	_cleanup_close_ int dfd = -1;
	_cleanup_close_ int sfd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (sfd < 0)
		return err_sys(err, "open %s", src);
	memset(&a, 0, sizeof(a));
	if ((dfd = open_parent(dst, a.name, sizeof(a.name), err)) < 0)
		return dfd;
	a.fd = sfd;
	a.flags = readonly ? BTRFS_SUBVOL_RDONLY : 0;
	if (ioctl(dfd, BTRFS_IOC_SNAP_CREATE_V2, &a) < 0)
		return err_sys(err, "snapshot %s to %s", src, dst);
	return 0;
}

int pool_is_subvol(const char *path)
{
	struct stat st;

	if (stat(path, &st) < 0)
		return -errno;
	return S_ISDIR(st.st_mode) && st.st_ino == BTRFS_FIRST_FREE_OBJECTID && is_btrfs(path);
}

int pool_subvol_set_readonly(const char *path, bool readonly, err_t *err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	uint64_t flags;

	if (fd < 0)
		return err_sys(err, "open %s", path);
	if (ioctl(fd, BTRFS_IOC_SUBVOL_GETFLAGS, &flags) < 0)
		return err_sys(err, "get subvolume flags of %s", path);
	flags = readonly ? (flags | BTRFS_SUBVOL_RDONLY) : (flags & ~BTRFS_SUBVOL_RDONLY);
	if (ioctl(fd, BTRFS_IOC_SUBVOL_SETFLAGS, &flags) < 0)
		return err_sys(err, "set subvolume flags of %s", path);
	return 0;
}

int pool_subvol_delete(const char *path, err_t *err)
{
	struct btrfs_ioctl_vol_args a;
	_cleanup_close_ int dfd = -1;
	int r = pool_is_subvol(path);

	if (r == -ENOENT)
		return 0;
	if (r < 0) {
		errno = -r;
		return err_sys(err, "stat %s", path);
	}
	if (r == 0)
		return err_set(err, ENOTDIR, "%s is not a subvolume", path);
	memset(&a, 0, sizeof(a));
	if ((dfd = open_parent(path, a.name, sizeof(a.name), err)) < 0)
		return dfd;
	if (ioctl(dfd, BTRFS_IOC_SNAP_DESTROY, &a) == 0)
		return 0;
	if (errno == EPERM || errno == EROFS) {
		/* Older kernels refuse to drop a read-only subvolume. */
		if (pool_subvol_set_readonly(path, false, err) < 0)
			return -err->code;
		if (ioctl(dfd, BTRFS_IOC_SNAP_DESTROY, &a) == 0)
			return 0;
	}
	if (errno == ENOENT)
		return 0;
	return err_sys(err, "delete subvolume %s", path);
}

int pool_qgroup_limit(const char *path, uint64_t bytes, err_t *err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct btrfs_ioctl_qgroup_limit_args a;

	if (fd < 0)
		return err_sys(err, "open %s", path);
	memset(&a, 0, sizeof(a));
	a.qgroupid = 0; /* 0 = the subvolume fd's own qgroup 0/<id> */
	/* Exclusive bytes: what the sandbox wrote, not the template it shares. */
	a.lim.flags = BTRFS_QGROUP_LIMIT_MAX_EXCL;
	a.lim.max_excl = bytes;
	if (ioctl(fd, BTRFS_IOC_QGROUP_LIMIT, &a) < 0) {
		if (errno == ENOTCONN) /* quotas disabled */
			return 0;
		return err_sys(err, "qgroup limit on %s", path);
	}
	return 0;
}

int pool_subvol_otransid(const char *path, uint64_t *transid, err_t *err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct btrfs_ioctl_get_subvol_info_args a;

	if (fd < 0)
		return err_sys(err, "open %s", path);
	memset(&a, 0, sizeof(a));
	if (ioctl(fd, BTRFS_IOC_GET_SUBVOL_INFO, &a) < 0)
		return err_sys(err, "subvolume info of %s", path);
	*transid = a.otransid;
	return 0;
}

int pool_changed_bytes(const char *path, uint64_t since, uint64_t *bytes, err_t *err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct btrfs_ioctl_search_args a;
	struct btrfs_ioctl_search_key *k = &a.key;
	uint64_t total = 0;

	if (fd < 0)
		return err_sys(err, "open %s", path);
	memset(&a, 0, sizeof(a));
	k->tree_id = 0; /* the fd's own subvolume */
	k->max_objectid = UINT64_MAX;
	k->max_type = 255; /* key types are 8 bits */
	k->max_offset = UINT64_MAX;
	/* Only tree blocks written after `since`: unchanged subtrees (shared
	 * with the template or an older snapshot) are skipped whole. */
	k->min_transid = since + 1;
	k->max_transid = UINT64_MAX;
	for (;;) {
		size_t off = 0;

		k->nr_items = 4096;
		if (ioctl(fd, BTRFS_IOC_TREE_SEARCH, &a) < 0)
			return err_sys(err, "tree search in %s", path);
		if (k->nr_items == 0)
			break;
		for (uint32_t i = 0; i < k->nr_items; i++) {
			struct btrfs_ioctl_search_header h;
			const struct btrfs_file_extent_item *fe;

			if (off + sizeof(h) > sizeof(a.buf))
				break;
			memcpy(&h, a.buf + off, sizeof(h));
			off += sizeof(h);
			if (off + h.len > sizeof(a.buf))
				break;
			fe = (const void *)(a.buf + off);
			if (h.type == BTRFS_EXTENT_DATA_KEY &&
			    h.len >= offsetof(struct btrfs_file_extent_item, disk_bytenr) &&
			    le64toh(fe->generation) > since) {
				if (fe->type == BTRFS_FILE_EXTENT_INLINE)
					total += le64toh(fe->ram_bytes);
				else if (fe->type == BTRFS_FILE_EXTENT_REG &&
					 h.len >= sizeof(*fe) && le64toh(fe->disk_bytenr) != 0)
					total += le64toh(fe->num_bytes);
			}
			off += h.len;
			/* Continue after the last key seen. */
			k->min_objectid = h.objectid;
			k->min_type = h.type;
			k->min_offset = h.offset;
		}
		if (k->min_offset < UINT64_MAX) {
			k->min_offset++;
		} else if (k->min_type < 255) {
			k->min_offset = 0;
			k->min_type++;
		} else if (k->min_objectid < UINT64_MAX) {
			k->min_offset = 0;
			k->min_type = 0;
			k->min_objectid++;
		} else {
			break;
		}
	}
	*bytes = total;
	return 0;
}

int pool_usage(const char *path, uint64_t *total, uint64_t *free_bytes, err_t *err)
{
	struct statvfs sv;

	if (statvfs(path, &sv) < 0)
		return err_sys(err, "statvfs %s", path);
	*total = (uint64_t)sv.f_blocks * sv.f_frsize;
	*free_bytes = (uint64_t)sv.f_bavail * sv.f_frsize;
	return 0;
}

/* ---- shared extents ---------------------------------------------------- */

struct ext {
	uint64_t log, phys, len;
};

/* Flags that make an extent's physical address not a plain map of its
 * bytes: such extents are never taken as shared. */
#define EXT_INEXACT (FIEMAP_EXTENT_UNKNOWN | FIEMAP_EXTENT_DELALLOC | FIEMAP_EXTENT_ENCODED | \
		     FIEMAP_EXTENT_DATA_ENCRYPTED | FIEMAP_EXTENT_NOT_ALIGNED | \
		     FIEMAP_EXTENT_DATA_INLINE | FIEMAP_EXTENT_DATA_TAIL | \
		     FIEMAP_EXTENT_UNWRITTEN | FIEMAP_EXTENT_MERGED)
#define FIEMAP_BATCH 256

/* fd's extents within [0, size) with an exact address, in offset order. */
static int exact_extents(int fd, uint64_t size, struct ext **out, size_t *n, err_t *err)
{
	size_t sz = sizeof(struct fiemap) + FIEMAP_BATCH * sizeof(struct fiemap_extent);
	_cleanup_free_ struct fiemap *fm = xmalloc(sz);
	struct ext *v = NULL;
	size_t nv = 0, cap = 0;
	uint64_t at = 0;
	bool last = false;

	while (!last && at < size) {
		memset(fm, 0, sz);
		fm->fm_start = at;
		fm->fm_length = size - at;
		fm->fm_extent_count = FIEMAP_BATCH;
		if (ioctl(fd, FS_IOC_FIEMAP, fm) < 0) {
			free(v);
			return err_sys(err, "FIEMAP");
		}
		if (fm->fm_mapped_extents == 0)
			break;
		for (uint32_t i = 0; i < fm->fm_mapped_extents; i++) {
			const struct fiemap_extent *e = &fm->fm_extents[i];
			last = last || (e->fe_flags & FIEMAP_EXTENT_LAST);
			/* never backwards: a kernel that repeats an extent
			 * cannot make this loop forever */
			if (e->fe_logical + e->fe_length > at)
				at = e->fe_logical + e->fe_length;
			if (e->fe_flags & EXT_INEXACT)
				continue;
			if (nv == cap) {
				cap = cap ? 2 * cap : 64;
				v = xrealloc(v, cap * sizeof(*v));
			}
			v[nv++] = (struct ext){ e->fe_logical, e->fe_physical, e->fe_length };
		}
		if (!last && at <= fm->fm_start)
			break;
	}
	*out = v;
	*n = nv;
	return 0;
}

/* Append [lo, hi) to the sorted list v (nv of cap), joined to the last
 * span when they touch. */
static void span_add(struct pool_span **v, size_t *nv, size_t *cap, uint64_t lo, uint64_t hi)
{
	if (*nv && (*v)[*nv - 1].end == lo) {
		(*v)[*nv - 1].end = hi;
		return;
	}
	if (*nv == *cap) {
		*cap = *cap ? 2 * *cap : 64;
		*v = xrealloc(*v, *cap * sizeof(**v));
	}
	(*v)[(*nv)++] = (struct pool_span){ lo, hi };
}

int pool_shared_spans(int a, int b, uint64_t size, struct pool_span **out, size_t *n,
		      err_t *err)
{
	_cleanup_free_ struct ext *ea = NULL, *eb = NULL;
	struct pool_span *v = NULL;
	size_t na = 0, nb = 0, nv = 0, cap = 0;
	int r;

	*out = NULL;
	*n = 0;
	if ((r = exact_extents(a, size, &ea, &na, err)) < 0 ||
	    (r = exact_extents(b, size, &eb, &nb, err)) < 0)
		return r;
	/* both lists by offset: walk them side by side */
	for (size_t i = 0, j = 0; i < na && j < nb;) {
		const struct ext *x = &ea[i], *y = &eb[j];
		uint64_t lo = x->log > y->log ? x->log : y->log;
		uint64_t hi = x->log + x->len < y->log + y->len ? x->log + x->len : y->log + y->len;

		if (hi > size)
			hi = size;
		/* the same offset maps to the same disk byte in both */
		if (lo < hi && x->phys - x->log == y->phys - y->log)
			span_add(&v, &nv, &cap, lo, hi);
		if (x->log + x->len <= y->log + y->len)
			i++;
		else
			j++;
	}
	*out = v;
	*n = nv;
	return 0;
}

/* The holes of fd in [0, size), sorted: SEEK_DATA from each hole's end. */
static int holes_of(int fd, uint64_t size, struct pool_span **out, size_t *n, err_t *err)
{
	struct pool_span *v = NULL;
	size_t nv = 0, cap = 0;
	uint64_t at = 0;

	while (at < size) {
		off_t h = lseek(fd, (off_t)at, SEEK_HOLE), d;

		if (h < 0) {
			free(v);
			return err_sys(err, "SEEK_HOLE");
		}
		if ((uint64_t)h >= size)
			break;
		d = lseek(fd, h, SEEK_DATA);
		if (d < 0 && errno != ENXIO) {
			free(v);
			return err_sys(err, "SEEK_DATA");
		}
		uint64_t end = d < 0 || (uint64_t)d > size ? size : (uint64_t)d;
		if (end <= (uint64_t)h)
			break;   /* never backwards */
		span_add(&v, &nv, &cap, (uint64_t)h, end);
		at = end;
	}
	*out = v;
	*n = nv;
	return 0;
}

int pool_hole_spans(int a, int b, uint64_t size, struct pool_span **out, size_t *n,
		    err_t *err)
{
	_cleanup_free_ struct pool_span *ha = NULL, *hb = NULL;
	size_t na = 0, nb = 0, cap = 0;
	int r;

	*out = NULL;
	*n = 0;
	if ((r = holes_of(a, size, &ha, &na, err)) < 0 || (r = holes_of(b, size, &hb, &nb, err)) < 0)
		return r;
	/* both sorted: what each pair overlaps */
	for (size_t i = 0, j = 0; i < na && j < nb;) {
		uint64_t lo = ha[i].start > hb[j].start ? ha[i].start : hb[j].start;
		uint64_t hi = ha[i].end < hb[j].end ? ha[i].end : hb[j].end;

		if (lo < hi)
			span_add(out, n, &cap, lo, hi);
		if (ha[i].end <= hb[j].end)
			i++;
		else
			j++;
	}
	return 0;
}
