/* finish.c - the fixed touches every template rootfs gets (oci.h), done
 * beneath the root with the applier's no-follow discipline, so that a tree
 * from a tar, a directory or an image cannot turn them into writes on the
 * host. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "oci.h"

/* dir (clean, relative) beneath root, made (0755) where missing. A
 * component that is not a directory fails (-ENOTDIR, -ELOOP for a
 * symlink). */
static int make_dirs(int root, const char *dir)
{
	_cleanup_free_ char *path = xstrdup(dir);
	int fd = oci_openat2_beneath(root, ".", O_PATH | O_DIRECTORY);

	for (char *p = path, *slash; fd >= 0 && *p; p = slash + 1) {
		int next;

		slash = strchr(p, '/');
		if (slash)
			*slash = '\0';
		next = oci_openat2_beneath(fd, p, O_PATH | O_DIRECTORY);
		if (next == -ENOENT && mkdirat(fd, p, 0755) == 0)
			next = oci_openat2_beneath(fd, p, O_PATH | O_DIRECTORY);
		close(fd);
		fd = next;
		if (!slash)
			break;
	}
	return fd;
}

/* A mount point or the workdir: a real directory with this mode. */
static int ensure_dir(int root, const char *name, mode_t mode, err_t *err)
{
	struct stat st;
	_cleanup_close_ int fd = -1;

	if (fstatat(root, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode) &&
	    unlinkat(root, name, 0) < 0)
		return err_sys(err, "replace /%s", name);
	if (mkdirat(root, name, mode) < 0 && errno != EEXIST)
		return err_sys(err, "mkdir /%s", name);
	fd = openat(root, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fchmod(fd, mode) < 0)
		return err_sys(err, "/%s", name);
	return 0;
}

/* Write data as dir/name (replacing a file or link there) or, with append,
 * add it to a regular file there. */
static int put_file(int root, const char *dir, const char *name, const struct buf *data,
		    bool append, FILE *log, err_t *err)
{
	_cleanup_close_ int dfd = make_dirs(root, dir), fd = -1;
	struct stat st;

	if (dfd < 0) {
		if (log)
			fprintf(log, "template-build: /%s is not a plain directory: the CA is not"
				" put in it\n", dir);
		return 0;
	}
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    (!append || !S_ISREG(st.st_mode)) && unlinkat(dfd, name, 0) < 0)
		return err_sys(err, "replace /%s/%s", dir, name);
	fd = openat(dfd, name, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return err_sys(err, "open /%s/%s", dir, name);
	if (write_all(fd, data->data, data->len) < 0 || fchmod(fd, 0644) < 0)
		return err_sys(err, "write /%s/%s", dir, name);
	return 0;
}

int oci_finish_rootfs(int root, const char *ca_path, FILE *log, err_t *err)
{
	static const struct { const char *name; mode_t mode; } dirs[] = {
		{ "proc", 0755 }, { "dev", 0755 }, { "sys", 0755 }, { "tmp", 01777 },
		{ "work", 0755 }, { "etc", 0755 },
	};
	struct stat st;
	struct buf ca;
	int r = 0;

	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++)
		if ((r = ensure_dir(root, dirs[i].name, dirs[i].mode, err)) < 0)
			return r;
	if (fstatat(root, "etc/hostname", &st, AT_SYMLINK_NOFOLLOW) < 0) {
		struct buf h = { .data = "sandbox\n", .len = 8 };
		if ((r = put_file(root, "etc", "hostname", &h, false, log, err)) < 0)
			return r;
	}
	if (!ca_path || !*ca_path)
		return 0;
	buf_init(&ca);
	if (read_file(ca_path, 1u << 20, &ca) < 0) {
		buf_free(&ca);
		return 0;   /* no CA on this node */
	}
	if ((r = put_file(root, "etc/airlock", "gateway-ca.crt", &ca, false, log, err)) == 0 &&
	    (r = put_file(root, "usr/local/share/ca-certificates", "airlock-gateway.crt", &ca,
			  false, log, err)) == 0 &&
	    (r = put_file(root, "etc/ssl/certs", "ca-certificates.crt", &ca, true, log, err)) == 0 &&
	    log)
		fprintf(log, "template-build: trusts the gateway CA\n");
	buf_free(&ca);
	return r;
}
