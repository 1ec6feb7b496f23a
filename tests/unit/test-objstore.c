/* test-objstore: the same conformance checks over every driver URL.
 *
 * The file driver always runs, in a fresh temporary directory. The s3
 * driver runs when AIRLOCK_TEST_S3_URL names a store (tests/s3/run-conformance.sh
 * starts a real S3-compatible server and sets it, with the credentials in
 * AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY). Each run uses its own key
 * prefix so a shared bucket does not disturb it. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../src/lib/util.h"
#include "../../src/objstore/objstore.h"
#include "check.h"
#include <openssl/sha.h>

/* sha256("hello") */
#define HELLO_SHA "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
#define EMPTY_SHA "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static char tmpdir[] = "/tmp/test-objstore.XXXXXX";

static void cleanup(void)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", tmpdir);
}

static void test_keys(void)
{
	CHECK(objstore_key_valid("a"));
	CHECK(objstore_key_valid("sandboxes/sb-1/snap.2/mem"));
	CHECK(objstore_key_valid("..a/.b/c..d/_-."));
	CHECK(!objstore_key_valid(""));
	CHECK(!objstore_key_valid(NULL));
	CHECK(!objstore_key_valid("/a"));
	CHECK(!objstore_key_valid("a/"));
	CHECK(!objstore_key_valid("a//b"));
	CHECK(!objstore_key_valid("a/./b"));
	CHECK(!objstore_key_valid("a/../b"));
	CHECK(!objstore_key_valid(".."));
	CHECK(!objstore_key_valid("a b"));
	CHECK(!objstore_key_valid("a~b"));
	CHECK(!objstore_key_valid("a%2fb"));
	CHECK(!objstore_key_valid("a\nb"));
	char big[1100];
	memset(big, 'x', sizeof(big));
	big[1024] = '\0';
	CHECK(objstore_key_valid(big));
	big[1024] = 'x';
	big[1025] = '\0';
	CHECK(!objstore_key_valid(big));
}

struct seen {
	char keys[64][128];
	uint64_t sizes[64];
	int n, stop_at;
};

static int collect(void *arg, const char *key, uint64_t size)
{
	struct seen *s = arg;

	if (s->n < 64) {
		snprintf(s->keys[s->n], sizeof(s->keys[0]), "%s", key);
		s->sizes[s->n] = size;
	}
	s->n++;
	return s->stop_at && s->n == s->stop_at ? 42 : 0;
}

static void fill(char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (char)(seed >> 16);
	}
}

/* A progress count, told from the threads of a multipart upload. */
struct counted {
	pthread_mutex_t mu;
	uint64_t stored;
};

static void counted_stored(void *arg, uint64_t n)
{
	struct counted *c = arg;

	pthread_mutex_lock(&c->mu);
	c->stored += n;
	pthread_mutex_unlock(&c->mu);
}

struct thr {
	struct objstore *os;
	const char *pfx;
	int id, bad;
};

static void *thread_main(void *arg)
{
	struct thr *t = arg;

	for (int i = 0; i < 8; i++) {
		char key[256], data[3000], *back = NULL;
		uint64_t n = 0;
		err_t err = { 0 };

		snprintf(key, sizeof(key), "%sthreads/%d/%d", t->pfx, t->id, i);
		fill(data, sizeof(data), (unsigned)(t->id * 100 + i));
		if (objstore_put_buf(t->os, key, data, sizeof(data), NULL, &err) < 0 ||
		    objstore_get_buf(t->os, key, 1 << 20, &back, &n, &err) < 0 || n != sizeof(data) ||
		    memcmp(back, data, sizeof(data)) != 0) {
			fprintf(stderr, "thread %d: %s\n", t->id, err.msg);
			t->bad++;
		}
		free(back);
	}
	return NULL;
}

/* The checks every driver passes. pfx: a key prefix of this run ("" or
 * "run-xxxx/"). big: size of an object above the multipart part size. */
static void conformance(const char *url, const struct objstore_opts *opts, const char *pfx,
			uint64_t big)
{
	err_t err = { 0 };
	struct objstore *os = objstore_open(url, opts, &err);
	char hex[OBJSTORE_SHA256_HEX], key[512], k2[512];
	char *back = NULL;
	uint64_t n = 0;
	int r;

	printf("conformance: %s (prefix `%s`)\n", url, pfx);
	REQUIRE(os, cleanup);
#define K(s) (snprintf(key, sizeof(key), "%s%s", pfx, s), key)

	/* put, head, get of a small object */
	r = objstore_put_buf(os, K("hello"), "hello", 5, hex, &err);
	CHECK(r == 0);
	if (r)
		fprintf(stderr, "put: %s\n", err.msg);
	CHECK(strcmp(hex, HELLO_SHA) == 0);
	memset(hex, 0, sizeof(hex));
	CHECK(objstore_head(os, K("hello"), &n, hex, &err) == 0 && n == 5);
	CHECK(strcmp(hex, HELLO_SHA) == 0);
	r = objstore_get_buf(os, K("hello"), 100, &back, &n, &err);
	CHECK(r == 0 && n == 5 && memcmp(back, "hello", 6) == 0);  /* NUL past size */
	free(back);
	back = NULL;
	CHECK(objstore_get_buf(os, K("hello"), 4, &back, &n, &err) == -EFBIG && !back);

	/* an empty object */
	CHECK(objstore_put_buf(os, K("empty"), NULL, 0, hex, &err) == 0);
	CHECK(strcmp(hex, EMPTY_SHA) == 0);
	CHECK(objstore_get_buf(os, K("empty"), 10, &back, &n, &err) == 0 && n == 0 && back &&
	      back[0] == '\0');
	free(back);
	back = NULL;

	/* overwrite replaces */
	CHECK(objstore_put_buf(os, K("hello"), "HELLO!", 6, NULL, &err) == 0);
	CHECK(objstore_get_buf(os, K("hello"), 100, &back, &n, &err) == 0 && n == 6 &&
	      memcmp(back, "HELLO!", 6) == 0);
	free(back);
	back = NULL;

	/* absent keys; delete of an absent key succeeds */
	err_clear(&err);
	r = objstore_get_buf(os, K("nope/none"), 100, &back, &n, &err);
	CHECK(r == -ENOENT);
	CHECK(strstr(err.msg, "nope/none") != NULL);
	CHECK(objstore_head(os, K("nope"), &n, hex, &err) == -ENOENT);
	CHECK(objstore_delete(os, K("nope/none"), &err) == 0);

	/* invalid keys never reach the driver */
	CHECK(objstore_put_buf(os, "../escape", "x", 1, NULL, &err) == -EINVAL);
	CHECK(objstore_get_buf(os, "a//b", 10, &back, &n, &err) == -EINVAL);
	CHECK(objstore_head(os, "/abs", &n, NULL, &err) == -EINVAL);
	CHECK(objstore_delete(os, "x y", &err) == -EINVAL);

	/* put_fd from a file's current offset, get_fd into a file */
	{
		char path[300], data[10000], got[10000];
		int fd;

		snprintf(path, sizeof(path), "%s/src.bin", tmpdir);
		fill(data, sizeof(data), 7);
		fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		REQUIRE(fd >= 0, cleanup);
		CHECK(write(fd, data, sizeof(data)) == (ssize_t)sizeof(data));
		CHECK(lseek(fd, 100, SEEK_SET) == 100);
		CHECK(objstore_put_fd(os, K("fd/obj"), fd, 9000, NULL, &err) == 0);
		close(fd);
		snprintf(path, sizeof(path), "%s/dst.bin", tmpdir);
		fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		REQUIRE(fd >= 0, cleanup);
		r = objstore_get_fd(os, K("fd/obj"), fd, &n, hex, &err);
		CHECK(r == 0 && n == 9000);
		CHECK(pread(fd, got, sizeof(got), 0) == 9000 && memcmp(got, data + 100, 9000) == 0);
		close(fd);
	}

	/* put_fd from a pipe (no offset) */
	{
		int p[2];
		REQUIRE(pipe(p) == 0, cleanup);
		CHECK(write(p[1], "piped bytes", 11) == 11);
		close(p[1]);
		CHECK(objstore_put_fd(os, K("fd/pipe"), p[0], 11, NULL, &err) == 0);
		close(p[0]);
		CHECK(objstore_get_buf(os, K("fd/pipe"), 100, &back, &n, &err) == 0 && n == 11 &&
		      memcmp(back, "piped bytes", 11) == 0);
		free(back);
		back = NULL;
		/* the pipe ends before size: an error, and nothing stored */
		REQUIRE(pipe(p) == 0, cleanup);
		CHECK(write(p[1], "short", 5) == 5);
		close(p[1]);
		CHECK(objstore_put_fd(os, K("fd/short"), p[0], 50, NULL, &err) < 0);
		close(p[0]);
		CHECK(objstore_head(os, K("fd/short"), &n, NULL, &err) == -ENOENT);
	}

	/* an object above the part size (multipart for s3) from a file */
	if (big) {
		char path[300];
		char *data = xmalloc(big);
		int fd;

		snprintf(path, sizeof(path), "%s/big.bin", tmpdir);
		fill(data, big, 99);
		fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		REQUIRE(fd >= 0, cleanup);
		CHECK(write(fd, data, big) == (ssize_t)big);
		CHECK(lseek(fd, 0, SEEK_SET) == 0);
		r = objstore_put_fd(os, K("big/object"), fd, big, hex, &err);
		CHECK(r == 0);
		if (r)
			fprintf(stderr, "big put: %s\n", err.msg);
		close(fd);
		char want[OBJSTORE_SHA256_HEX], got_hex[OBJSTORE_SHA256_HEX];
		CHECK(objstore_head(os, K("big/object"), &n, want, &err) == 0 && n == big);
		CHECK(strcmp(want, hex) == 0);
		r = objstore_get_buf(os, K("big/object"), big, &back, &n, &err);
		CHECK(r == 0 && n == big && memcmp(back, data, big) == 0);
		if (r)
			fprintf(stderr, "big get: %s\n", err.msg);
		free(back);
		back = NULL;
		fd = open(path, O_RDWR | O_TRUNC | O_CLOEXEC);
		CHECK(objstore_get_fd(os, K("big/object"), fd, &n, got_hex, &err) == 0 &&
		      strcmp(got_hex, hex) == 0);
		close(fd);
		free(data);
	}

	/* put_hashed: a file whose digest the caller knows (it hashed the
	 * bytes as it wrote them): stored without a pass over it first, each
	 * byte's progress told once. A wrong digest: the file driver checks
	 * it and stores nothing, and so does S3 for one PUT (the body does not
	 * match the signed payload hash); a multipart upload's parts are
	 * signed with their own, so that object is stored with the wrong one,
	 * and a get says so. */
	{
		uint64_t sizes[] = { 3u << 20, big ? big : 3u << 20 };
		bool s3 = strncmp(url, "s3:", 3) == 0;
		for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
			char *data = xmalloc(sizes[i]), path[300], sha[OBJSTORE_SHA256_HEX];
			unsigned char d[32];
			struct counted prog = { PTHREAD_MUTEX_INITIALIZER, 0 };
			bool multipart = s3 && i == 1 && big;
			int fd;

			fill(data, sizes[i], 11 + (unsigned)i);
			SHA256((const unsigned char *)data, sizes[i], d);
			for (int b = 0; b < 32; b++)
				snprintf(sha + 2 * b, 3, "%02x", d[b]);
			snprintf(path, sizeof(path), "%s/hashed.bin", tmpdir);
			fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
			REQUIRE(fd >= 0, cleanup);
			CHECK(write_all(fd, data, sizes[i]) == 0);
			r = objstore_put_hashed(os, K("hashed/obj"), fd, sizes[i], sha, counted_stored,
						&prog, &err);
			CHECK(r == 0 && prog.stored == sizes[i]);
			if (r)
				fprintf(stderr, "put_hashed: %s\n", err.msg);
			CHECK(objstore_head(os, K("hashed/obj"), &n, hex, &err) == 0 && n == sizes[i] &&
			      strcmp(hex, sha) == 0);
			r = objstore_get_buf(os, K("hashed/obj"), sizes[i], &back, &n, &err);
			CHECK(r == 0 && n == sizes[i] && memcmp(back, data, sizes[i]) == 0);
			free(back);
			back = NULL;
			/* a wrong digest */
			sha[10] = sha[10] == '0' ? '1' : '0';
			err_clear(&err);
			r = objstore_put_hashed(os, K("hashed/wrong"), fd, sizes[i], sha, NULL, NULL,
						&err);
			if (multipart) {
				CHECK(r == 0);
				CHECK(objstore_get_buf(os, K("hashed/wrong"), sizes[i], &back, &n, &err) ==
					      -EBADMSG &&
				      strstr(err.msg, "checksum mismatch"));
				free(back);
				back = NULL;
			} else {
				CHECK(r < 0);
				CHECK(s3 ? strstr(err.msg, "XAmzContentSHA256Mismatch") != NULL
					 : r == -EIO && strstr(err.msg, "SHA-256") != NULL);
				if (r == 0 || !strstr(err.msg, s3 ? "Mismatch" : "SHA-256"))
					fprintf(stderr, "put_hashed, wrong digest: %d %s\n", r, err.msg);
				CHECK(objstore_head(os, K("hashed/wrong"), &n, NULL, &err) == -ENOENT);
			}
			/* a file that ends before the size it was put with (its
			 * source failing while its bytes are sent): an error, not
			 * retried, and nothing stored */
			sha[10] = sha[10] == '0' ? '1' : '0';
			CHECK(ftruncate(fd, (off_t)(sizes[i] - (1u << 20))) == 0);
			err_clear(&err);
			r = objstore_put_hashed(os, K("hashed/short"), fd, sizes[i], sha, NULL, NULL,
						&err);
			CHECK(r < 0);
			if (r == 0)
				fprintf(stderr, "put_hashed of a short file stored it\n");
			CHECK(objstore_head(os, K("hashed/short"), &n, NULL, &err) == -ENOENT);
			memset(sha, 'g', 64);   /* not hex */
			CHECK(objstore_put_hashed(os, K("hashed/x"), fd, sizes[i], sha, NULL, NULL,
						  &err) == -EINVAL);
			close(fd);
			free(data);
		}
	}

	/* list: key order, prefixes, nested names, early stop */
	{
		static const char *names[] = { "l/b", "l/a/z", "l/a-x", "l/a/y/deep", "l/c", "l/a0" };
		struct seen s = { 0 };

		for (size_t i = 0; i < ARRAY_SIZE(names); i++)
			CHECK(objstore_put_buf(os, K(names[i]), names[i], strlen(names[i]), NULL,
					       &err) == 0);
		CHECK(objstore_list(os, K("l/"), collect, &s, &err) == 0);
		CHECK(s.n == 6);
		/* byte order: '-' < '/' < '0' */
		static const char *want[] = { "l/a-x", "l/a/y/deep", "l/a/z", "l/a0", "l/b", "l/c" };
		for (int i = 0; i < 6 && i < s.n; i++) {
			snprintf(k2, sizeof(k2), "%s%s", pfx, want[i]);
			CHECK(strcmp(s.keys[i], k2) == 0);
			CHECK(s.sizes[i] == strlen(want[i]));
		}
		memset(&s, 0, sizeof(s));
		CHECK(objstore_list(os, K("l/a"), collect, &s, &err) == 0 && s.n == 4);
		memset(&s, 0, sizeof(s));
		CHECK(objstore_list(os, K("l/a/"), collect, &s, &err) == 0 && s.n == 2);
		memset(&s, 0, sizeof(s));
		CHECK(objstore_list(os, K("l/a/y/dee"), collect, &s, &err) == 0 && s.n == 1);
		memset(&s, 0, sizeof(s));
		CHECK(objstore_list(os, K("l/zz"), collect, &s, &err) == 0 && s.n == 0);
		memset(&s, 0, sizeof(s));
		s.stop_at = 2;
		CHECK(objstore_list(os, K("l/"), collect, &s, &err) == 42 && s.n == 2);
		/* delete, then gone from get and list */
		CHECK(objstore_delete(os, K("l/a/y/deep"), &err) == 0);
		CHECK(objstore_get_buf(os, K("l/a/y/deep"), 100, &back, &n, &err) == -ENOENT);
		memset(&s, 0, sizeof(s));
		CHECK(objstore_list(os, K("l/"), collect, &s, &err) == 0 && s.n == 5);
	}

	/* many threads on one handle */
	{
		struct thr t[4];
		pthread_t tid[4];
		for (int i = 0; i < 4; i++) {
			t[i] = (struct thr){ .os = os, .pfx = pfx, .id = i };
			CHECK(pthread_create(&tid[i], NULL, thread_main, &t[i]) == 0);
		}
		for (int i = 0; i < 4; i++) {
			pthread_join(tid[i], NULL);
			CHECK(t[i].bad == 0);
		}
	}
#undef K
	objstore_close(os);
}

/* file driver only: what is on disk */
static void file_specific(void)
{
	char url[400], dir[300], path[400], cmd[800];
	err_t err = { 0 };
	struct objstore *os;
	struct seen s = { 0 };
	char *back = NULL;
	uint64_t n;
	int fd;

	snprintf(dir, sizeof(dir), "%s/store2/sub", tmpdir);
	snprintf(url, sizeof(url), "file://%s", dir);
	os = objstore_open(url, NULL, &err);
	REQUIRE(os, cleanup);
	CHECK(strcmp(objstore_driver(os), "file") == 0);
	CHECK(objstore_put_buf(os, "a/b/c", "abc", 3, NULL, &err) == 0);
	/* a leftover temporary file is never listed */
	snprintf(path, sizeof(path), "%s/a/.c~tmp.0123", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	CHECK(fd >= 0);
	close(fd);
	CHECK(objstore_list(os, "", collect, &s, &err) == 0 && s.n == 1 &&
	      strcmp(s.keys[0], "a/b/c") == 0);
	/* bytes changed on disk behind the store's back: -EBADMSG naming the key */
	snprintf(path, sizeof(path), "%s/a/b/c", dir);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	CHECK(fd >= 0 && pwrite(fd, "X", 1, 1) == 1);
	close(fd);
	err_clear(&err);
	CHECK(objstore_get_buf(os, "a/b/c", 100, &back, &n, &err) == -EBADMSG);
	CHECK(strstr(err.msg, "a/b/c") != NULL);
	free(back);
	/* delete removes the directories it emptied (not the temp's) */
	CHECK(objstore_delete(os, "a/b/c", &err) == 0);
	snprintf(path, sizeof(path), "%s/a/b", dir);
	CHECK(access(path, F_OK) < 0 && errno == ENOENT);
	objstore_close(os);
	/* bad URLs */
	CHECK(objstore_open("file://relative/dir", NULL, &err) == NULL && err.code == EINVAL);
	CHECK(objstore_open("ftp://x", NULL, &err) == NULL && err.code == EINVAL);
	CHECK(objstore_open(NULL, NULL, &err) == NULL);
	objstore_close(NULL);
	/* s3's part size within S3's bounds (opening sends nothing) */
	{
		const char *bad[] = { "4", "5121", "16x", "", "-16" };
		struct objstore *s3;
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			snprintf(cmd, sizeof(cmd), "s3://b?endpoint=http://127.0.0.1:9&part_mib=%s",
				 bad[i]);
			err = (err_t){ 0 };
			CHECK(objstore_open(cmd, NULL, &err) == NULL && err.code == EINVAL);
			CHECK(strstr(err.msg, "part_mib") != NULL);
		}
		s3 = objstore_open("s3://b?endpoint=http://127.0.0.1:9&part_mib=128", NULL, &err);
		CHECK(s3 != NULL);
		objstore_close(s3);
	}
	/* no temporary file left by the puts of the conformance run */
	snprintf(cmd, sizeof(cmd), "find %s/store -name '*~tmp*' | grep -q .", tmpdir);
	CHECK(system(cmd) != 0);
}

int main(void)
{
	char url[300];
	const char *s3 = getenv("AIRLOCK_TEST_S3_URL");

	REQUIRE(mkdtemp(tmpdir), cleanup);
	test_keys();
	snprintf(url, sizeof(url), "file://%s/store", tmpdir);
	conformance(url, NULL, "", 3u << 20);
	file_specific();
	if (s3 && s3[0]) {
		struct objstore_opts o = { .part_size = 5u << 20, .parallel = 3, .timeout_ms = 10000 };
		_cleanup_free_ char *pfx = random_id("run-", 6);
		char *slash_pfx = xasprintf("%s/", pfx);

		conformance(s3, &o, slash_pfx, (12u << 20) + 12345);
		free(slash_pfx);
	} else {
		printf("s3: not tested here (AIRLOCK_TEST_S3_URL unset)\n");
	}
	cleanup();
	return check_done("test-objstore");
}
