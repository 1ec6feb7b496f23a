/* airlock-objstore-tool: the object store from the command line, for tests
 * and measurements (not installed).
 *
 *   airlock-objstore-tool put URL KEY FILE     store FILE under KEY
 *   airlock-objstore-tool get URL KEY FILE     fetch KEY into FILE (checked)
 *   airlock-objstore-tool head URL KEY         "SIZE SHA256"
 *   airlock-objstore-tool ls URL [PREFIX]      "KEY SIZE" lines, key order
 *   airlock-objstore-tool rm URL KEY
 *
 * Options from the environment: OBJSTORE_PART_SIZE (bytes),
 * OBJSTORE_PARALLEL, OBJSTORE_TIMEOUT_MS, OBJSTORE_RETRIES; credentials
 * from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY. put and get print
 * "SIZE SHA256 SECONDS" on stdout. On failure: the message on stderr, then
 * "errno NAME" as its last line, exit 1 (2: usage). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../src/lib/util.h"
#include "../../src/objstore/objstore.h"

static int fail(const err_t *err, int r)
{
	fprintf(stderr, "%s\nerrno %s\n", err->msg, strerrorname_np(-r) ? strerrorname_np(-r) : "?");
	return 1;
}

static int print_key(void *arg, const char *key, uint64_t size)
{
	printf("%s %llu\n", key, (unsigned long long)size);
	return 0;
}

static long env_num(const char *name)
{
	const char *v = getenv(name);

	return v ? strtol(v, NULL, 10) : 0;
}

int main(int argc, char **argv)
{
	struct objstore_opts o = { 0 };
	err_t err = { 0 };
	struct objstore *os;
	char hex[OBJSTORE_SHA256_HEX];
	uint64_t size = 0, t0;
	int r = 0, fd;

	if (argc < 3) {
		fprintf(stderr, "usage: %s put|get|head|ls|rm URL [KEY [FILE]]\n", argv[0]);
		return 2;
	}
	o.part_size = (uint64_t)env_num("OBJSTORE_PART_SIZE");
	o.parallel = (int)env_num("OBJSTORE_PARALLEL");
	o.timeout_ms = (int)env_num("OBJSTORE_TIMEOUT_MS");
	o.retries = (int)env_num("OBJSTORE_RETRIES");
	os = objstore_open(argv[2], &o, &err);
	if (!os)
		return fail(&err, -err.code);
	t0 = now_us();
	if (strcmp(argv[1], "put") == 0 && argc == 5) {
		struct stat st;
		fd = open(argv[4], O_RDONLY | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &st) < 0) {
			perror(argv[4]);
			return 1;
		}
		r = objstore_put_fd(os, argv[3], fd, (uint64_t)st.st_size, hex, &err);
		size = (uint64_t)st.st_size;
		close(fd);
	} else if (strcmp(argv[1], "get") == 0 && argc == 5) {
		fd = open(argv[4], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0) {
			perror(argv[4]);
			return 1;
		}
		r = objstore_get_fd(os, argv[3], fd, &size, hex, &err);
		close(fd);
	} else if (strcmp(argv[1], "head") == 0 && argc == 4) {
		r = objstore_head(os, argv[3], &size, hex, &err);
		if (r == 0)
			printf("%llu %s\n", (unsigned long long)size, hex);
	} else if (strcmp(argv[1], "ls") == 0 && argc <= 4) {
		r = objstore_list(os, argc == 4 ? argv[3] : "", print_key, NULL, &err);
	} else if (strcmp(argv[1], "rm") == 0 && argc == 4) {
		r = objstore_delete(os, argv[3], &err);
	} else {
		fprintf(stderr, "usage: %s put|get|head|ls|rm URL [KEY [FILE]]\n", argv[0]);
		objstore_close(os);
		return 2;
	}
	if (r == 0 && (!strcmp(argv[1], "put") || !strcmp(argv[1], "get")))
		printf("%llu %s %.3f\n", (unsigned long long)size, hex, (double)(now_us() - t0) / 1e6);
	objstore_close(os);
	return r < 0 ? fail(&err, r) : 0;
}
