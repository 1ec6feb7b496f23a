/* test-nodemgr-template-xfer: a template moved between two nodes as a btrfs
 * send stream, through the verbs (src/nodemgr/templates/template-xfer.c), as root.
 *
 * Two real nodemgrs (nodemgr_run in forked children), each with its own
 * DATA and its own btrfs loop pool, are driven through the client (nm.h),
 * so the wire, the verbs' checks and the reaper are in the path:
 *   - a template on node A exports (size > 0, a 36-char identity: the
 *     template's own uuid, given to it as received uuid);
 *   - node B has no version with that identity (-ENOENT), imports the
 *     stream as the version the rule picks, finds it by identity, lists
 *     it; its files are A's, read-only;
 *   - a sandbox's disk stream made on A against the template (suspend
 *     export) receives on B against the imported copy (suspend import):
 *     the parent is found by its received uuid;
 *   - refused, with nothing left under templates/<name>/: a corrupted
 *     stream, a wrong expected identity (-EPROTO), an incremental stream
 *     (its parent, a template of the same pool, is out of receive's reach),
 *     a hand-made stream that only makes a symlink to a template of the
 *     pool with the expected identity,
 *     two subvolumes in one stream (-EPROTO), a malformed uuid (-EINVAL);
 *   - two concurrent imports of one name get different versions;
 *   - what an import cut off by a crash left is removed at the next start.
 *
 * cleanup() runs on every exit path: stop both nodemgrs, remove their
 * cgroup parents, unmount both pools (the loop devices autoclear), remove
 * the temp dir. Nothing is killed by name.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../src/lib/log.h"
#include "../../src/lib/util.h"
#include "../../src/nmclient/nm.h"
#include "../../src/nodemgr/nodemgr.h"
#include "../../src/pool/pool.h"

static char tmpdir[] = "/tmp/airlock-test-xfer.XXXXXX";
static bool have_tmp;

struct node {
	char data[128], sock[160], pool[160], cgparent[64];
	pid_t pid;
};
static struct node A = { .pid = -1 }, B = { .pid = -1 };

static void stop_nodemgr(struct node *n)
{
	int st;

	if (n->pid <= 0)
		return;
	kill(n->pid, SIGTERM);
	for (int i = 0; i < 200; i++) {
		if (waitpid(n->pid, &st, WNOHANG) == n->pid) {
			n->pid = -1;
			return;
		}
		usleep(50000);
	}
	kill(n->pid, SIGKILL);
	waitpid(n->pid, &st, 0);
	n->pid = -1;
}

/* This test starts no jail: its cgroup parents hold nothing. */
static void remove_cgparent(const struct node *n)
{
	static const char *const ctrls[] = { "freezer", "memory", "cpu", "pids", "" };

	for (size_t i = 0; i < ARRAY_SIZE(ctrls); i++) {
		char dir[256];
		snprintf(dir, sizeof(dir), "/sys/fs/cgroup/%s%s%s", ctrls[i], *ctrls[i] ? "/" : "",
			 n->cgparent);
		rmdir(dir);
	}
}

static void cleanup(void)
{
	err_t e = { 0 };
	char cmd[256];

	stop_nodemgr(&A);
	stop_nodemgr(&B);
	remove_cgparent(&A);
	remove_cgparent(&B);
	if (!have_tmp)
		return;
	if (A.data[0] && pool_release(A.data, &e) < 0)
		fprintf(stderr, "cleanup: %s\n", e.msg);
	if (B.data[0] && pool_release(B.data, &e) < 0)
		fprintf(stderr, "cleanup: %s\n", e.msg);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "cleanup: %s failed\n", cmd);
	have_tmp = false;
}

static __attribute__((noreturn, format(printf, 3, 4))) void fail(const char *file, int line,
								 const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s:%d: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	cleanup();
	exit(1);
}
#define CHECK(c)                                                                        \
	do {                                                                            \
		if (!(c))                                                               \
			fail(__FILE__, __LINE__, "CHECK(%s) failed (errno %s)", #c,     \
			     strerror(errno));                                          \
	} while (0)
#define OK(call)                                                                        \
	do {                                                                            \
		err_t _e = { 0 };                                                       \
		if ((call) < 0)                                                         \
			fail(__FILE__, __LINE__, "%s: %s", #call, _e.msg);              \
	} while (0)
#define E (&_e)
/* call fails with exactly -code. */
#define FAILS(code, call)                                                               \
	do {                                                                            \
		err_t _e = { 0 };                                                       \
		int _r = (call);                                                        \
		if (_r != -(code))                                                      \
			fail(__FILE__, __LINE__, "%s: %d, not %d (%s)", #call, _r,      \
			     -(code), _e.msg);                                          \
		printf("refused as expected: %s\n", _e.msg);                            \
	} while (0)

static void start_nodemgr(struct node *n, const char *tag)
{
	snprintf(n->data, sizeof(n->data), "%s/%s", tmpdir, tag);
	snprintf(n->sock, sizeof(n->sock), "%s/nm-%s.sock", tmpdir, tag);
	snprintf(n->pool, sizeof(n->pool), "%s/pool", n->data);
	snprintf(n->cgparent, sizeof(n->cgparent), "airlock-test-xfer-%d-%s", (int)getpid(), tag);
	CHECK(mkdir(n->data, 0755) == 0 || errno == EEXIST);
	n->pid = fork();
	CHECK(n->pid >= 0);
	if (n->pid == 0) {
		struct nodemgr_config cfg = {
			.data_dir = n->data,
			.sock_path = n->sock,
			.guest_path = "/bin/true",
			.scripts_dir = AIRLOCK_SOURCE_DIR "/scripts",
			.client_uid = 65534,
			.client_gid = 0,
			.pool_size_mb = 1024,
			.cgroup_parent = n->cgparent,
		};
		err_t e = { 0 };
		log_init("nodemgr", getenv("NM_DEBUG") ? LOG_DEBUG : LOG_WARN);
		if (nodemgr_run(&cfg, &e) < 0) {
			fprintf(stderr, "nodemgr_run: %s\n", e.msg);
			_exit(1);
		}
		_exit(0);
	}
	for (int i = 0; i < 200; i++) {
		struct nm_node_info ni;
		err_t e = { 0 };
		int st;
		if (nm_node_info(n->sock, &ni, &e) == 0)
			return;
		if (waitpid(n->pid, &st, WNOHANG) == n->pid) {
			n->pid = -1;
			fail(__FILE__, __LINE__, "nodemgr %s exited during startup", tag);
		}
		usleep(50000);
	}
	fail(__FILE__, __LINE__, "nodemgr %s did not come up", tag);
}

static void put_file(const char *path, const void *p, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	CHECK(fd >= 0 && write_all(fd, p, n) == 0);
	close(fd);
}

static bool same_file(const char *a, const char *b)
{
	char *x = xmalloc(1 << 20), *y = xmalloc(1 << 20);
	int fa = open(a, O_RDONLY | O_CLOEXEC), fb = open(b, O_RDONLY | O_CLOEXEC);
	bool same = fa >= 0 && fb >= 0;
	ssize_t n, m;

	while (same && (n = read(fa, x, 1 << 20)) > 0) {
		m = read(fb, y, (size_t)n);
		same = m == n && memcmp(x, y, (size_t)n) == 0;
	}
	if (same)
		same = read(fb, y, 1) == 0;
	if (fa >= 0)
		close(fa);
	if (fb >= 0)
		close(fb);
	free(x);
	free(y);
	return same;
}

/* A file of the test, opened read-write and unlinked (as the node's
 * staging files are). */
static int stream_fd(void)
{
	char path[200];
	int fd;

	snprintf(path, sizeof(path), "%s/stream.XXXXXX", tmpdir);
	fd = mkostemp(path, O_CLOEXEC);
	CHECK(fd >= 0);
	unlink(path);
	return fd;
}

/* A copy of fd's bytes in a new stream fd, with n bytes at the middle
 * flipped (n = 0: an exact copy). */
static int copy_stream(int fd, size_t flip)
{
	struct stat st;
	char *b;
	int out = stream_fd();

	CHECK(fstat(fd, &st) == 0 && st.st_size > 0);
	b = xmalloc((size_t)st.st_size);
	CHECK(pread(fd, b, (size_t)st.st_size, 0) == st.st_size);
	for (size_t i = 0; i < flip; i++)
		b[(size_t)st.st_size / 2 + i] ^= 0x5a;
	CHECK(write_all(out, b, (size_t)st.st_size) == 0);
	free(b);
	return out;
}

/* Read a pipe to its end into a stream fd (an export into a pipe, as the
 * node seals it). */
struct drain {
	int in, out;
	uint64_t n;
};

static void *drain(void *arg)
{
	struct drain *d = arg;
	char b[65536];
	ssize_t k;

	while ((k = read(d->in, b, sizeof(b))) > 0) {
		CHECK(write_all(d->out, b, (size_t)k) == 0);
		d->n += (uint64_t)k;
	}
	close(d->in);
	return NULL;
}

/* The entries of pool/templates/<name>/, sorted, space-separated. */
static void entries(const struct node *n, const char *name, char *out, size_t cap)
{
	char dir[300], *names[64];
	size_t k = 0, len = 0;
	DIR *d;
	struct dirent *de;

	snprintf(dir, sizeof(dir), "%s/templates/%s", n->pool, name);
	out[0] = '\0';
	if (!(d = opendir(dir)))
		return;
	while ((de = readdir(d)) && k < ARRAY_SIZE(names))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			names[k++] = xstrdup(de->d_name);
	closedir(d);
	for (size_t i = 0; i < k; i++)
		for (size_t j = i + 1; j < k; j++)
			if (strcmp(names[j], names[i]) < 0) {
				char *t = names[i];
				names[i] = names[j];
				names[j] = t;
			}
	for (size_t i = 0; i < k; i++) {
		len += (size_t)snprintf(out + len, cap - len, "%s%s", i ? " " : "", names[i]);
		free(names[i]);
		CHECK(len < cap);
	}
}

static bool listed(const char *sock, const char *item)
{
	char **list;
	bool found = false;
	err_t e = { 0 };

	if (nm_template_list(sock, &list, &e) < 0)
		fail(__FILE__, __LINE__, "template list: %s", e.msg);
	for (size_t i = 0; list[i]; i++) {
		found |= !strcmp(list[i], item);
		free(list[i]);
	}
	free(list);
	return found;
}

/* A finished template at pool/templates/<name>/<ver>: rootfs/ with a small
 * file, a 3 MiB one, a directory and a symlink; read-only, and (as one
 * built before templates were marked) no received uuid yet. */
static void make_template(const struct node *n, const char *name, uint32_t ver)
{
	char p[400];
	static char mib[3 << 20];

	snprintf(p, sizeof(p), "%s/templates/%s", n->pool, name);
	CHECK(mkdir(p, 0700) == 0 || errno == EEXIST);
	snprintf(p, sizeof(p), "%s/templates/%s/%u", n->pool, name, ver);
	OK(pool_subvol_create(p, E));
	snprintf(p, sizeof(p), "%s/templates/%s/%u/rootfs", n->pool, name, ver);
	CHECK(mkdir(p, 0755) == 0);
	snprintf(p, sizeof(p), "%s/templates/%s/%u/rootfs/etc", n->pool, name, ver);
	CHECK(mkdir(p, 0755) == 0);
	snprintf(p, sizeof(p), "%s/templates/%s/%u/rootfs/etc/hello", n->pool, name, ver);
	put_file(p, "hello from the template\n", 24);
	for (size_t i = 0; i < sizeof(mib); i++)
		mib[i] = (char)(i * 7 + (i >> 11) + ver);
	snprintf(p, sizeof(p), "%s/templates/%s/%u/rootfs/big", n->pool, name, ver);
	put_file(p, mib, sizeof(mib));
	snprintf(p, sizeof(p), "%s/templates/%s/%u/rootfs/link", n->pool, name, ver);
	CHECK(symlink("etc/hello", p) == 0);
	snprintf(p, sizeof(p), "%s/templates/%s/%u", n->pool, name, ver);
	OK(pool_subvol_set_readonly(p, true, E));
}

/* A hand-made send stream (btrfs-progs' send.h, version 1): the header,
 * then commands of {le32 payload length, le16 command, le32 crc32c (seed
 * 0, no final inversion, over the command with its crc field 0)} and
 * their attributes {le16 type, le16 length, bytes}. */
struct hand {
	uint8_t b[4096];
	size_t n, cmd;
};

static uint32_t crc32c(const uint8_t *p, size_t n)
{
	uint32_t c = 0;

	while (n--) {
		c ^= *p++;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
	}
	return c;
}

static void hand_put(struct hand *h, const void *p, size_t n)
{
	CHECK(h->n + n <= sizeof(h->b));
	memcpy(h->b + h->n, p, n);
	h->n += n;
}

static void hand_begin(struct hand *h, uint16_t cmd)
{
	uint8_t hdr[10] = { 0 };

	if (!h->n)
		hand_put(h, "btrfs-stream\0\1\0\0\0", 17);
	h->cmd = h->n;
	memcpy(hdr + 4, &cmd, 2);
	hand_put(h, hdr, sizeof(hdr));
}

static void hand_attr(struct hand *h, uint16_t type, const void *p, uint16_t n)
{
	hand_put(h, &type, 2);
	hand_put(h, &n, 2);
	hand_put(h, p, n);
}

static void hand_end(struct hand *h)
{
	uint32_t len = (uint32_t)(h->n - h->cmd - 10), crc;

	memcpy(h->b + h->cmd, &len, 4);
	crc = crc32c(h->b + h->cmd, h->n - h->cmd);
	memcpy(h->b + h->cmd + 6, &crc, 4);
}

struct import_arg {
	int fd;
	const char *uuid;
	uint32_t version;
	int r;
	char msg[sizeof(((err_t *)0)->msg)];
};

static void *import_thread(void *p)
{
	struct import_arg *a = p;
	err_t e = { 0 };

	a->r = nm_template_import(B.sock, "c", a->uuid, 1, a->fd, &a->version, &e);
	snprintf(a->msg, sizeof(a->msg), "%s", e.msg);
	return NULL;
}

int main(void)
{
	char uuid[37], uuid_u[37], p[400], q[400], ls[512];
	struct pool_subvol_ids ids;
	struct nm_sandbox_spec spec;
	uint32_t ver = 0;
	int64_t size = 0, dsize = 0;
	struct stat st;
	int full, delta, fd;

	if (geteuid() != 0) {
		fprintf(stderr, "test-nodemgr-template-xfer: needs root, skipping\n");
		return 77;
	}
	CHECK(mkdtemp(tmpdir) != NULL);
	have_tmp = true;
	signal(SIGPIPE, SIG_IGN);
	start_nodemgr(&A, "a");
	start_nodemgr(&B, "b");

	/* Export from A. */
	make_template(&A, "t", 1);
	snprintf(p, sizeof(p), "%s/templates/t/1", A.pool);
	OK(pool_subvol_ids(p, &ids, E));
	CHECK(!ids.received_uuid[0]);
	full = stream_fd();
	OK(nm_template_export(A.sock, "t", 1, full, uuid, &size, E));
	printf("exported t/1: %lld bytes, identity %s\n", (long long)size, uuid);
	CHECK(fstat(full, &st) == 0 && size == st.st_size && size > (3 << 20));
	CHECK(strlen(uuid) == 36);
	/* the identity is the template's own uuid, now its received uuid too */
	OK(pool_subvol_ids(p, &ids, E));
	CHECK(!strcmp(uuid, ids.uuid) && !strcmp(uuid, ids.received_uuid) && ids.readonly);
	{
		uint32_t v = 0;
		OK(nm_template_find(A.sock, "t", uuid, &v, E));
		CHECK(v == 1);
	}
	fd = stream_fd();
	FAILS(ENOENT, nm_template_export(A.sock, "t", 9, fd, uuid_u, &size, E));
	FAILS(EINVAL, nm_template_export(A.sock, "../t", 1, fd, uuid_u, &size, E));
	close(fd);

	/* Import on B: unknown there first; then the version the rule picks
	 * (min_version 3 and nothing of the name: 3), found by identity,
	 * listed, the same files, read-only. */
	FAILS(ENOENT, nm_template_find(B.sock, "t", uuid, &ver, E));
	FAILS(EINVAL, nm_template_find(B.sock, "t", "not-a-uuid", &ver, E));
	OK(nm_template_import(B.sock, "t", uuid, 3, full, &ver, E));
	CHECK(ver == 3);
	{
		uint32_t v = 0;
		OK(nm_template_find(B.sock, "t", uuid, &v, E));
		CHECK(v == 3);
	}
	CHECK(listed(B.sock, "t/3"));
	entries(&B, "t", ls, sizeof(ls));
	CHECK(!strcmp(ls, "3"));
	snprintf(q, sizeof(q), "%s/templates/t/3", B.pool);
	OK(pool_subvol_ids(q, &ids, E));
	CHECK(ids.readonly && !strcmp(ids.received_uuid, uuid) && strcmp(ids.uuid, uuid));
	for (int i = 0; i < 3; i++) {
		static const char *const f[] = { "rootfs/etc/hello", "rootfs/big", "rootfs/link" };
		char a[500], b[500];
		snprintf(a, sizeof(a), "%s/templates/t/1/%s", A.pool, f[i]);
		snprintf(b, sizeof(b), "%s/templates/t/3/%s", B.pool, f[i]);
		CHECK(same_file(a, b));
	}
	snprintf(q, sizeof(q), "%s/templates/t/3/rootfs/link", B.pool);
	CHECK(readlink(q, ls, sizeof(ls)) == 9 && !memcmp(ls, "etc/hello", 9));
	snprintf(q, sizeof(q), "%s/templates/t/3/rootfs/new", B.pool);
	CHECK(open(q, O_WRONLY | O_CREAT | O_CLOEXEC, 0644) < 0 && errno == EROFS);
	/* A second import of the name goes above what is there (min_version
	 * lower): 4, and find answers the newest copy. */
	OK(nm_template_import(B.sock, "t", uuid, 1, full, &ver, E));
	CHECK(ver == 4);
	{
		uint32_t v = 0;
		OK(nm_template_find(B.sock, "t", uuid, &v, E));
		CHECK(v == 4);
	}
	OK(nm_template_delete(B.sock, "t", 4, E));

	/* A sandbox of t/1 on A, suspended: its disk stream against the
	 * template receives on B against the imported copy (t/3 there). */
	snprintf(p, sizeof(p), "%s/sandboxes/s1", A.pool);
	snprintf(q, sizeof(q), "%s/templates/t/1", A.pool);
	OK(pool_subvol_snapshot(q, p, false, E));
	snprintf(q, sizeof(q), "%s/sandboxes/s1/rootfs/etc/hello", A.pool);
	put_file(q, "changed in the sandbox\n", 23);
	snprintf(q, sizeof(q), "%s/sandboxes/s1/rootfs/new", A.pool);
	put_file(q, "new file\n", 9);
	snprintf(q, sizeof(q), "%s/snapshots/s1", A.pool);
	CHECK(mkdir(q, 0700) == 0);
	snprintf(q, sizeof(q), "%s/snapshots/s1/su-1", A.pool);
	OK(pool_subvol_snapshot(p, q, true, E));
	memset(&spec, 0, sizeof(spec));
	snprintf(spec.id, sizeof(spec.id), "s1");
	snprintf(spec.template_name, sizeof(spec.template_name), "t");
	spec.template_version = 1;
	delta = stream_fd();
	OK(nm_suspend_export(A.sock, &spec, "su-1", NM_ARTIFACT_DISK, delta, &dsize, NULL, E));
	printf("sandbox disk stream against t/1: %lld bytes\n", (long long)dsize);
	CHECK(dsize > 0 && dsize < (1 << 20));
	/* into a pipe instead: the same stream, its size unknown to nodemgr */
	{
		int pp[2];
		int64_t psize = 0;
		struct drain d = { -1, stream_fd(), 0 };
		pthread_t t;
		CHECK(pipe(pp) == 0);
		d.in = pp[0];
		CHECK(pthread_create(&t, NULL, drain, &d) == 0);
		OK(nm_suspend_export(A.sock, &spec, "su-1", NM_ARTIFACT_DISK, pp[1], &psize, NULL,
				     E));
		close(pp[1]);
		pthread_join(t, NULL);
		CHECK(psize == -1 && d.n == (uint64_t)dsize);
		close(d.out);
	}
	spec.template_version = 3;
	OK(nm_suspend_import(B.sock, &spec, "su-1", NM_ARTIFACT_DISK, delta, NULL, E));
	{
		char a[500], b[500];
		snprintf(a, sizeof(a), "%s/snapshots/s1/su-1/rootfs/etc/hello", A.pool);
		snprintf(b, sizeof(b), "%s/snapshots/s1/su-1/rootfs/etc/hello", B.pool);
		CHECK(same_file(a, b));
		snprintf(a, sizeof(a), "%s/snapshots/s1/su-1/rootfs/new", A.pool);
		snprintf(b, sizeof(b), "%s/snapshots/s1/su-1/rootfs/new", B.pool);
		CHECK(same_file(a, b));
		snprintf(a, sizeof(a), "%s/snapshots/s1/su-1/rootfs/big", A.pool);
		snprintf(b, sizeof(b), "%s/snapshots/s1/su-1/rootfs/big", B.pool);
		CHECK(same_file(a, b));
	}

	/* Refused, and nothing left of the attempt under templates/t. */
	fd = copy_stream(full, 64);
	{
		err_t e = { 0 };
		int r = nm_template_import(B.sock, "t", uuid, 1, fd, &ver, &e);
		printf("corrupted stream: %d %s\n", r, e.msg);
		CHECK(r < 0);
	}
	close(fd);
	entries(&B, "t", ls, sizeof(ls));
	CHECK(!strcmp(ls, "3"));
	FAILS(EPROTO, nm_template_import(B.sock, "t", "01234567-89ab-cdef-0123-456789abcdef", 1,
					 full, &ver, E));
	entries(&B, "t", ls, sizeof(ls));
	CHECK(!strcmp(ls, "3"));
	/* an incremental stream (the sandbox's disk) is not a template */
	{
		err_t e = { 0 };
		int r = nm_template_import(B.sock, "t", uuid, 1, delta, &ver, &e);
		printf("incremental stream: %d %s\n", r, e.msg);
		/* refused by receive itself (-EIO), before any check of what
		 * it made (-EPROTO): the parent (t/3 here) is outside the
		 * directory it receives in, so it cannot be opened */
		CHECK(r == -EIO);
	}
	entries(&B, "t", ls, sizeof(ls));
	CHECK(!strcmp(ls, "3"));
	/* two templates' streams one after the other: two subvolumes */
	make_template(&A, "u", 5);
	fd = copy_stream(full, 0);
	{
		int f2 = stream_fd();
		struct stat s2;
		char *b;
		OK(nm_template_export(A.sock, "u", 5, f2, uuid_u, &size, E));
		CHECK(fstat(f2, &s2) == 0);
		b = xmalloc((size_t)s2.st_size);
		CHECK(pread(f2, b, (size_t)s2.st_size, 0) == s2.st_size);
		CHECK(lseek(fd, 0, SEEK_END) > 0 && write_all(fd, b, (size_t)s2.st_size) == 0);
		free(b);
		close(f2);
	}
	FAILS(EPROTO, nm_template_import(B.sock, "t", uuid, 1, fd, &ver, E));
	close(fd);
	entries(&B, "t", ls, sizeof(ls));
	CHECK(!strcmp(ls, "3"));
	/* a stream whose one command, before any subvolume, is a symlink at
	 * the top of the receive directory to a template of the pool with
	 * the expected identity: it is not taken for a subvolume */
	{
		struct hand h = { .n = 0 };
		uint64_t ino = 257;
		snprintf(q, sizeof(q), "%s/templates/t/3", B.pool);
		hand_begin(&h, 8);              /* BTRFS_SEND_C_SYMLINK */
		hand_attr(&h, 15, "x", 1);      /* PATH */
		hand_attr(&h, 3, &ino, 8);      /* INO */
		hand_attr(&h, 17, q, (uint16_t)strlen(q)); /* PATH_LINK */
		hand_end(&h);
		hand_begin(&h, 21);             /* END */
		hand_end(&h);
		fd = stream_fd();
		CHECK(write_all(fd, h.b, h.n) == 0);
		FAILS(EPROTO, nm_template_import(B.sock, "t", uuid, 1, fd, &ver, E));
		close(fd);
		entries(&B, "t", ls, sizeof(ls));
		CHECK(!strcmp(ls, "3"));
		snprintf(q, sizeof(q), "%s/templates/t/3", B.pool);
		OK(pool_subvol_ids(q, &ids, E));
		CHECK(ids.readonly);
	}
	/* a failed first import of a name leaves not even its directory */
	FAILS(EPROTO, nm_template_import(B.sock, "v", uuid_u, 1, full, &ver, E));
	snprintf(q, sizeof(q), "%s/templates/v", B.pool);
	CHECK(access(q, F_OK) < 0 && errno == ENOENT);
	FAILS(EINVAL, nm_template_import(B.sock, "t", "0123456789ab-cdef-0123-456789abcdef-", 1,
					 full, &ver, E));
	FAILS(EINVAL, nm_template_import(B.sock, "t", uuid, 0, full, &ver, E));
	CHECK(listed(B.sock, "t/3"));

	/* Two imports of one name at once: two versions. */
	{
		struct import_arg a1 = { .fd = copy_stream(full, 0), .uuid = uuid };
		struct import_arg a2 = { .fd = copy_stream(full, 0), .uuid = uuid };
		pthread_t t1, t2;
		CHECK(pthread_create(&t1, NULL, import_thread, &a1) == 0);
		CHECK(pthread_create(&t2, NULL, import_thread, &a2) == 0);
		pthread_join(t1, NULL);
		pthread_join(t2, NULL);
		close(a1.fd);
		close(a2.fd);
		if (a1.r < 0 || a2.r < 0)
			fail(__FILE__, __LINE__, "concurrent imports: %s / %s", a1.msg, a2.msg);
		printf("concurrent imports: versions %u and %u\n", a1.version, a2.version);
		CHECK(a1.version != a2.version);
		CHECK((a1.version == 1 && a2.version == 2) || (a1.version == 2 && a2.version == 1));
		entries(&B, "c", ls, sizeof(ls));
		CHECK(!strcmp(ls, "1 2"));
		CHECK(listed(B.sock, "c/1") && listed(B.sock, "c/2"));
	}
	/* What an import cut off by a crash leaves (a received subvolume,
	 * read-only, in its .recv- dir) is gone after a restart; the versions
	 * stay. */
	stop_nodemgr(&B);
	snprintf(q, sizeof(q), "%s/templates/c/.recv-crash", B.pool);
	CHECK(mkdir(q, 0700) == 0);
	snprintf(q, sizeof(q), "%s/templates/c/.recv-crash/1", B.pool);
	snprintf(p, sizeof(p), "%s/templates/c/1", B.pool);
	OK(pool_subvol_snapshot(p, q, true, E));
	snprintf(q, sizeof(q), "%s/templates/w/.recv-crash", B.pool);
	CHECK(mkdir_p(q, 0700) == 0);
	start_nodemgr(&B, "b");
	entries(&B, "c", ls, sizeof(ls));
	CHECK(!strcmp(ls, "1 2"));
	snprintf(q, sizeof(q), "%s/templates/w", B.pool);
	CHECK(access(q, F_OK) < 0 && errno == ENOENT);
	CHECK(listed(B.sock, "c/1") && listed(B.sock, "t/3"));
	close(full);
	close(delta);
	cleanup();
	printf("test-nodemgr-template-xfer: ok\n");
	return 0;
}
