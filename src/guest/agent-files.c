/* files.c - file requests: READ (streamed), WRITE (multi-frame, atomic), STAT,
 * LIST, MKDIR, REMOVE, RENAME. Paths are absolute paths inside the sandbox;
 * the agent runs as root in there, so there is no privilege to check: the
 * node only asks on behalf of the sandbox's owner. Every failure is an ERROR
 * carrying errno.
 */
#include "guest.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* Path from a request (untrusted decoding happens in proto_get_str). */
static int get_path(struct agent *a, const struct proto_frame *f, uint16_t tag, char **path)
{
	int r = proto_get_str(f->payload, f->len, tag, PROTO_MAX_PATH, path);

	if (r < 0) {
		agent_send_error(a, f->req_id, r == -ENOENT ? EINVAL : -r, "%s: missing or bad path",
				 proto_type_name(f->type));
		return -1;
	}
	if ((*path)[0] != '/') {
		agent_send_error(a, f->req_id, EINVAL, "path must be absolute: %s", *path);
		free(*path);
		*path = NULL;
		return -1;
	}
	return 0;
}

static void fill_stat(const struct stat *s, struct proto_stat *st)
{
	st->type = S_ISREG(s->st_mode) ? 'f' : S_ISDIR(s->st_mode) ? 'd' :
		   S_ISLNK(s->st_mode) ? 'l' : 'o';
	st->size = (uint64_t)s->st_size;
	st->mode = s->st_mode & 07777;
	st->mtime_ms = (int64_t)s->st_mtim.tv_sec * 1000 + s->st_mtim.tv_nsec / 1000000;
	st->uid = s->st_uid;
	st->gid = s->st_gid;
}

/* ---- READ ---------------------------------------------------------------- */

void file_read(struct agent *a, const struct proto_frame *f)
{
	_cleanup_free_ char *path = NULL;
	uint64_t max = UINT64_MAX;
	struct stat s;
	size_t n = 0;
	int fd;

	if (get_path(a, f, PTAG_PATH, &path) < 0)
		return;
	(void)proto_get_u64(f->payload, f->len, PTAG_MAX, &max);
	agent_touch(a);
	for (struct download *d = a->downloads; d; d = d->next)
		n++;
	if (n >= MAX_DOWNLOADS) {
		agent_send_error(a, f->req_id, EAGAIN, "too many reads in progress");
		return;
	}
	/* O_NONBLOCK: opening a FIFO must not hang the loop; non-regular
	 * files are refused below anyway. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		agent_send_error(a, f->req_id, errno, "open %s: %s", path, strerror(errno));
		return;
	}
	memset(&s, 0, sizeof(s));
	errno = 0;
	if (fstat(fd, &s) < 0 || !S_ISREG(s.st_mode)) {
		int e = errno;
		const char *why = strerror(e);
		if (e == 0 || S_ISDIR(s.st_mode)) {
			e = S_ISDIR(s.st_mode) ? EISDIR : EINVAL;
			why = e == EISDIR ? "is a directory" : "not a regular file";
		}
		agent_send_error(a, f->req_id, e, "read %s: %s", path, why);
		close(fd);
		return;
	}
	if ((uint64_t)s.st_size > max) {
		agent_send_error(a, f->req_id, EFBIG, "read %s: %llu bytes, limit %llu", path,
				 (unsigned long long)s.st_size, (unsigned long long)max);
		close(fd);
		return;
	}
	struct download *d = xcalloc(1, sizeof(*d));
	d->req_id = f->req_id;
	d->fd = fd;
	d->size = (uint64_t)s.st_size;
	d->max = max;
	/* Append at the tail: reads are answered in the order asked. */
	struct download **pp = &a->downloads;
	while (*pp)
		pp = &(*pp)->next;
	*pp = d;
}

/* One DATA frame of d; true when d is finished (sent its last frame). The
 * file's size at open is what we send: a file that grows meanwhile is cut
 * there, one that shrinks ends early. */
static bool download_step(struct agent *a, struct download *d)
{
	size_t want = d->size - d->off < PROTO_CHUNK ? (size_t)(d->size - d->off) : PROTO_CHUNK;
	ssize_t n = 0;
	struct proto_enc e;

	if (want) {
		do
			n = pread(d->fd, a->iobuf, want, (off_t)d->off);
		while (n < 0 && errno == EINTR);
		if (n < 0) {
			agent_send_error(a, d->req_id, errno, "read: %s", strerror(errno));
			return true;
		}
	}
	bool last = n == 0 || d->off + (uint64_t)n >= d->size;
	proto_enc_begin(&e, &a->out, PT_DATA, last ? 0 : PROTO_F_MORE, d->req_id);
	if (d->off == 0)
		proto_enc_u64(&e, PTAG_SIZE, d->size);
	proto_enc_u64(&e, PTAG_OFFSET, d->off);
	proto_enc_bytes(&e, PTAG_DATA, a->iobuf, (size_t)n);
	(void)proto_enc_end(&e);
	d->off += (uint64_t)n;
	return last;
}

void file_pump_downloads(struct agent *a)
{
	while (a->downloads && a->chan_up && agent_out_pending(a) < OUT_HIGH) {
		struct download *d = a->downloads;
		if (download_step(a, d)) {
			a->downloads = d->next;
			close(d->fd);
			free(d);
		}
	}
}

/* ---- WRITE --------------------------------------------------------------- */

static void upload_free(struct upload *u, bool unlink_tmp)
{
	if (u->fd >= 0)
		close(u->fd);
	if (unlink_tmp && u->tmp)
		unlink(u->tmp);
	free(u->tmp);
	free(u->path);
	free(u);
}

/* The target of a finished upload is a mount point (rename says EBUSY):
 * a file bind-mounted over its path, as the vm guest's /etc/resolv.conf
 * and /etc/machine-id are. Its content is replaced in place instead, from
 * the written temp file (which the caller then removes), and synced. */
static int copy_over(const char *from, const char *to)
{
	_cleanup_close_ int in = open(from, O_RDONLY | O_CLOEXEC);
	_cleanup_close_ int out = -1;
	char buf[16384];
	ssize_t n;

	if (in < 0)
		return -errno;
	out = open(to, O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC);
	if (out < 0)
		return -errno;
	while ((n = read(in, buf, sizeof(buf))) > 0) {
		int r = write_all(out, buf, (size_t)n);
		if (r < 0)
			return r;
	}
	if (n < 0 || fsync(out) < 0)
		return -errno;
	return 0;
}

static void upload_drop(struct agent *a, struct upload *u)
{
	for (struct upload **pp = &a->uploads; *pp; pp = &(*pp)->next) {
		if (*pp == u) {
			*pp = u->next;
			break;
		}
	}
	upload_free(u, true);
}

void file_reset_transfers(struct agent *a)
{
	while (a->uploads) {
		struct upload *u = a->uploads;
		a->uploads = u->next;
		upload_free(u, true);
	}
	while (a->downloads) {
		struct download *d = a->downloads;
		a->downloads = d->next;
		close(d->fd);
		free(d);
	}
}

static struct upload *upload_start(struct agent *a, const struct proto_frame *f)
{
	_cleanup_free_ char *path = NULL, *dir = NULL, *rnd = NULL;
	uint32_t mode = 0644;
	size_t n = 0;
	char *slash;
	int fd;

	if (get_path(a, f, PTAG_PATH, &path) < 0)
		return NULL;
	(void)proto_get_u32(f->payload, f->len, PTAG_MODE, &mode);
	for (struct upload *u = a->uploads; u; u = u->next)
		n++;
	if (n >= MAX_UPLOADS) {
		agent_send_error(a, f->req_id, EAGAIN, "too many writes in progress");
		return NULL;
	}
	slash = strrchr(path, '/');
	if (slash[1] == '\0') {
		agent_send_error(a, f->req_id, EISDIR, "write %s: names a directory", path);
		return NULL;
	}
	dir = xstrndup(path, slash == path ? 1 : (size_t)(slash - path));
	if (strcmp(dir, "/") != 0) {
		int r = mkdir_p(dir, 0755);
		if (r < 0) {
			agent_send_error(a, f->req_id, -r, "create %s: %s", dir, strerror(-r));
			return NULL;
		}
	}
	/* Temp file in the same directory: rename(2) is then atomic and the
	 * file never appears half-written under its name. */
	rnd = random_id(".airlock-tmp-", 8);
	struct upload *u = xcalloc(1, sizeof(*u));
	u->tmp = xasprintf("%s/%s", strcmp(dir, "/") ? dir : "", rnd);
	fd = open(u->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		agent_send_error(a, f->req_id, errno, "create %s: %s", u->tmp, strerror(errno));
		free(u->tmp);
		free(u);
		return NULL;
	}
	/* fchmod: the requested mode exactly, not filtered by the umask. */
	(void)fchmod(fd, mode & 07777);
	u->fd = fd;
	u->req_id = f->req_id;
	u->path = TAKE_PTR(path);
	u->next = a->uploads;
	a->uploads = u;
	return u;
}

void file_write(struct agent *a, const struct proto_frame *f)
{
	struct upload *u = NULL;
	const uint8_t *data = NULL;
	size_t len = 0;
	uint64_t off = 0;
	int r;

	agent_touch(a);
	(void)proto_get_u64(f->payload, f->len, PTAG_OFFSET, &off);
	for (u = a->uploads; u; u = u->next)
		if (u->req_id == f->req_id)
			break;
	if (!u) {
		/* A continuation without state belongs to a write that already
		 * failed (ERROR was sent then): drop it quietly. */
		if (off != 0)
			return;
		if (!(u = upload_start(a, f)))
			return;
	}
	(void)proto_get_bytes(f->payload, f->len, PTAG_DATA, &data, &len);
	if (off != u->next_off) {
		agent_send_error(a, f->req_id, EINVAL, "write %s: chunk at %llu, expected %llu",
				 u->path, (unsigned long long)off,
				 (unsigned long long)u->next_off);
		upload_drop(a, u);
		return;
	}
	r = write_all(u->fd, data, len);
	if (r < 0) {
		agent_send_error(a, f->req_id, -r, "write %s: %s", u->path, strerror(-r));
		upload_drop(a, u);
		return;
	}
	u->next_off += len;
	if (f->flags & PROTO_F_MORE)
		return;

	/* Last chunk: make the data durable before the name points at it. */
	if (fsync(u->fd) < 0 || close(u->fd) < 0) {
		u->fd = -1;
		agent_send_error(a, f->req_id, errno, "write %s: %s", u->path, strerror(errno));
		upload_drop(a, u);
		return;
	}
	u->fd = -1;
	if (rename(u->tmp, u->path) < 0) {
		int e = errno;

		if (e == EBUSY && (e = -copy_over(u->tmp, u->path)) == 0)
			(void)unlink(u->tmp);
		if (e) {
			agent_send_error(a, f->req_id, e, "rename to %s: %s", u->path, strerror(e));
			upload_drop(a, u);
			return;
		}
	}
	/* The rename itself is durable once the directory is synced. */
	char *slash = strrchr(u->path, '/');
	_cleanup_free_ char *dir = xstrndup(u->path, slash == u->path ? 1 : (size_t)(slash - u->path));
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		(void)fsync(dfd);
		close(dfd);
	}
	free(u->tmp);
	u->tmp = NULL;
	upload_drop(a, u);
	agent_send_ok(a, f->req_id);
}

/* ---- STAT / LIST --------------------------------------------------------- */

void file_stat(struct agent *a, const struct proto_frame *f)
{
	_cleanup_free_ char *path = NULL;
	struct proto_stat st;
	struct proto_enc e;
	struct stat s;

	if (get_path(a, f, PTAG_PATH, &path) < 0)
		return;
	agent_touch(a);
	if (lstat(path, &s) < 0) {
		agent_send_error(a, f->req_id, errno, "stat %s: %s", path, strerror(errno));
		return;
	}
	fill_stat(&s, &st);
	proto_enc_begin(&e, &a->out, PT_STAT_OK, 0, f->req_id);
	proto_enc_stat_fields(&e, &st);
	(void)proto_enc_end(&e);
}

void file_list(struct agent *a, const struct proto_frame *f)
{
	_cleanup_free_ char *path = NULL;
	struct proto_enc e;
	struct dirent *de;
	DIR *d;

	if (get_path(a, f, PTAG_PATH, &path) < 0)
		return;
	agent_touch(a);
	d = opendir(path);
	if (!d) {
		agent_send_error(a, f->req_id, errno, "list %s: %s", path, strerror(errno));
		return;
	}
	proto_enc_begin(&e, &a->out, PT_LIST_OK, 0, f->req_id);
	for (;;) {
		struct proto_stat st;
		struct stat s;

		errno = 0;
		de = readdir(d);
		if (!de) {
			if (errno) {
				int err = errno;
				proto_enc_abort(&e);
				agent_send_error(a, f->req_id, err, "list %s: %s", path,
						 strerror(err));
				closedir(d);
				return;
			}
			break;
		}
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(dirfd(d), de->d_name, &s, AT_SYMLINK_NOFOLLOW) < 0)
			continue;   /* removed meanwhile */
		/* Big directories span frames: close this one with MORE while a
		 * whole entry (name <= 255 + fixed fields) still fits. */
		if (proto_enc_size(&e) > PROTO_MAX_FRAME - 1024) {
			proto_enc_set_flags(&e, PROTO_F_MORE);
			(void)proto_enc_end(&e);
			proto_enc_begin(&e, &a->out, PT_LIST_OK, 0, f->req_id);
		}
		fill_stat(&s, &st);
		size_t mark = proto_enc_nest_begin(&e, PTAG_DIRENT);
		proto_enc_str(&e, PTAG_NAME, de->d_name);
		proto_enc_stat_fields(&e, &st);
		proto_enc_nest_end(&e, mark);
	}
	closedir(d);
	(void)proto_enc_end(&e);
}

/* ---- MKDIR / REMOVE / RENAME --------------------------------------------- */

void file_mkdir(struct agent *a, const struct proto_frame *f)
{
	_cleanup_free_ char *path = NULL;
	bool parents = proto_get_flag(f->payload, f->len, PTAG_PARENTS);
	struct stat s;

	if (get_path(a, f, PTAG_PATH, &path) < 0)
		return;
	agent_touch(a);
	if (parents) {
		int r = mkdir_p(path, 0755);
		if (r < 0) {
			agent_send_error(a, f->req_id, -r, "mkdir %s: %s", path, strerror(-r));
			return;
		}
		/* mkdir_p accepts any existing entry; only a directory is fine. */
		if (stat(path, &s) < 0 || !S_ISDIR(s.st_mode)) {
			agent_send_error(a, f->req_id, EEXIST, "mkdir %s: exists, not a directory",
					 path);
			return;
		}
	} else if (mkdir(path, 0755) < 0) {
		agent_send_error(a, f->req_id, errno, "mkdir %s: %s", path, strerror(errno));
		return;
	}
	agent_send_ok(a, f->req_id);
}

static int rm_one(const char *p, const struct stat *s, int type, struct FTW *ftw)
{
	(void)s;
	(void)ftw;
	/* FTW_PHYS: symlinks are reported as links (FTW_SL) and removed as such;
	 * their targets are never visited. */
	if (type == FTW_DP || type == FTW_D)
		return rmdir(p) < 0 ? -1 : 0;
	return unlink(p) < 0 ? -1 : 0;
}

void file_remove(struct agent *a, const struct proto_frame *f)
{
	_cleanup_free_ char *path = NULL;
	bool recursive = proto_get_flag(f->payload, f->len, PTAG_RECURSIVE);
	struct stat s;

	if (get_path(a, f, PTAG_PATH, &path) < 0)
		return;
	agent_touch(a);
	if (lstat(path, &s) < 0) {
		agent_send_error(a, f->req_id, errno, "remove %s: %s", path, strerror(errno));
		return;
	}
	if (S_ISDIR(s.st_mode) && recursive) {
		if (nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS) != 0) {
			int e = errno ? errno : EIO;
			agent_send_error(a, f->req_id, e, "remove %s: %s", path, strerror(e));
			return;
		}
	} else if ((S_ISDIR(s.st_mode) ? rmdir(path) : unlink(path)) < 0) {
		agent_send_error(a, f->req_id, errno, "remove %s: %s", path, strerror(errno));
		return;
	}
	agent_send_ok(a, f->req_id);
}

void file_rename(struct agent *a, const struct proto_frame *f)
{
	_cleanup_free_ char *from = NULL, *to = NULL;

	if (get_path(a, f, PTAG_PATH, &from) < 0 || get_path(a, f, PTAG_PATH2, &to) < 0)
		return;
	agent_touch(a);
	if (rename(from, to) < 0) {
		agent_send_error(a, f->req_id, errno, "rename %s to %s: %s", from, to,
				 strerror(errno));
		return;
	}
	agent_send_ok(a, f->req_id);
}
