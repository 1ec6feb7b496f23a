/* airlock-oci - apply an image archive to a directory (template builds).
 *
 *   airlock-oci ROOT CONFIG_OUT [SPOOL_DIR] < IMAGE
 *   airlock-oci --finish ROOT [CA_CERT]
 *
 * IMAGE (stdin) is a docker-save archive or an OCI layout as a tar. Run by
 * scripts/template-build.sh as root, with stdin already read as the
 * requester (so it never sees a host file the requester could not read).
 * A pipe is spooled first into an unlinked file in SPOOL_DIR (default: the
 * parent of ROOT), since an archive is read out of order. ROOT must exist;
 * CONFIG_OUT is created (never replaced) with the normalised image config.
 * Exit 0 when done, 1 with "oci: ..." on stderr when refused or failed.
 *
 * --finish gives any template rootfs its mount points, hostname and the
 * gateway CA (oci_finish_rootfs), beneath ROOT without following a link.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "../oci.h"

static int spool(const char *dir, err_t *err)
{
	char buf[128 * 1024];
	ssize_t k;
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

	if (fd < 0)
		return err_sys(err, "spool in %s", dir);
	while ((k = read(0, buf, sizeof(buf))) != 0) {
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 || write_all(fd, buf, (size_t)k) < 0) {
			err_sys(err, "spool the image");
			close(fd);
			return -err->code;
		}
	}
	return fd;
}

static uint64_t env_u64(const char *name)
{
	const char *v = getenv(name);

	return v ? strtoull(v, NULL, 10) : 0;
}

int main(int argc, char **argv)
{
	struct oci_limits lim = { .max_bytes = env_u64("AIRLOCK_OCI_MAX_BYTES"),
				  .max_entries = env_u64("AIRLOCK_OCI_MAX_ENTRIES") };
	err_t err = { 0 };
	struct buf cfg;
	struct stat st;
	int root, fd = 0, out, r;

	if (argc >= 3 && argc <= 4 && !strcmp(argv[1], "--finish")) {
		umask(022);
		root = open(argv[2], O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (root < 0 || oci_finish_rootfs(root, argc == 4 ? argv[3] : NULL, stdout, &err) < 0) {
			fprintf(stderr, "template-build: %s: %s\n", argv[2],
				root < 0 ? strerror(errno) : err.msg);
			return 1;
		}
		return 0;
	}
	if (argc < 3 || argc > 4) {
		fprintf(stderr, "usage: airlock-oci ROOT CONFIG_OUT [SPOOL_DIR] < IMAGE\n");
		return 2;
	}
	umask(0);
	root = open(argv[1], O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (root < 0) {
		fprintf(stderr, "oci: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	if (fstat(0, &st) < 0 || !S_ISREG(st.st_mode)) {
		_cleanup_free_ char *copy = xstrdup(argv[1]);
		fd = spool(argc == 4 ? argv[3] : dirname(copy), &err);
		if (fd < 0) {
			fprintf(stderr, "oci: %s\n", err.msg);
			return 1;
		}
	}
	buf_init(&cfg);
	r = oci_import(fd, root, &lim, &cfg, stdout, &err);
	if (r < 0) {
		fprintf(stderr, "oci: %s\n", err.msg);
		buf_free(&cfg);
		return 1;
	}
	out = open(argv[2], O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (out < 0 || write_all(out, cfg.data, cfg.len) < 0 || write_all(out, "\n", 1) < 0 ||
	    close(out) < 0) {
		fprintf(stderr, "oci: write %s: %s\n", argv[2], strerror(errno));
		buf_free(&cfg);
		return 1;
	}
	printf("oci: image config: %s\n", cfg.data);
	buf_free(&cfg);
	return 0;
}
