/* test-byok: the BYOK envelope (src/byok/envelope.c) and the local key
 * provider with its data keys (kms.c, kms-local.c), on a SQLite database
 * in a temp dir. Every tamper case must fail to open, naming what failed;
 * a rotation retires the old key versions (their files gone, a copy of one
 * opens nothing new) and every data key still opens. */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../src/byok/envelope.h"
#include "../../src/byok/kms.h"
#include "check.h"
#include <openssl/sha.h>

static uint8_t key[CRYPT_KEY_LEN], key2[CRYPT_KEY_LEN], ref[CRYPT_REF_LEN];
static const struct crypt_ctx ctx = { "t-1", "sb-a", "disk", "su-1" };
#define CS ((size_t)1 << CRYPT_CHUNK_LOG2)

static int open_err(const struct buf *b, const uint8_t *k, const struct crypt_ctx *c, err_t *err)
{
	struct buf out;
	int r;

	buf_init(&out);
	r = crypt_open_buf(b->data, b->len, k, c, &out, err);
	buf_free(&out);
	return r;
}

static void roundtrip(size_t n)
{
	uint8_t *p = xmalloc(n + 1);
	struct buf s, o;
	err_t err = { 0 };

	random_bytes(p, n + 1);
	buf_init(&s);
	buf_init(&o);
	CHECK(crypt_seal_buf(p, n, key, ref, &ctx, &s, &err) == 0);
	CHECK(crypt_open_buf(s.data, s.len, key, &ctx, &o, &err) == 0);
	CHECK(o.len == n && (n == 0 || memcmp(o.data, p, n) == 0));
	/* the plaintext appears nowhere in the sealed bytes */
	if (n >= 32)
		CHECK(!memmem(s.data, s.len, p + n / 2, 16));
	buf_free(&s);
	buf_free(&o);
	free(p);
}

struct feed {
	int fd;
	const uint8_t *p;
	size_t n;
};

static void *feed(void *arg)
{
	struct feed *f = arg;

	CHECK(write_all(f->fd, f->p, f->n) == 0);
	close(f->fd);
	return NULL;
}

/* Sealed from a pipe (an export as nodemgr writes it): the same bytes as
 * from the file, but for the nonce prefix, and they open back. */
static void seal_from_pipe(const uint8_t *p, size_t n, uint64_t want_size)
{
	int pp[2], mid = memfd_create("mid", 0), out = memfd_create("out", 0);
	uint64_t sb = 0, pb = 0;
	uint8_t *back = xmalloc(n + 1);
	err_t err = { 0 };
	char sha[65];
	pthread_t t;

	CHECK(pipe(pp) == 0);
	struct feed f = { pp[1], p, n };
	CHECK(pthread_create(&t, NULL, feed, &f) == 0);
	CHECK(crypt_seal_fd(pp[0], mid, key, ref, &ctx, &sb, sha, &err) == 0);
	pthread_join(t, NULL);
	close(pp[0]);
	CHECK(sb == want_size && strlen(sha) == 64);
	lseek(mid, 0, SEEK_SET);
	CHECK(crypt_open_fd(mid, out, key, &ctx, &pb, &err) == 0 && pb == n);
	lseek(out, 0, SEEK_SET);
	CHECK(read_all(out, back, n) == 0 && memcmp(back, p, n) == 0);
	close(mid);
	close(out);
	free(back);
}

static void streams(void)
{
	size_t n = 3 * CS + 12345;
	uint8_t *p = xmalloc(n);
	int in = memfd_create("in", 0), mid = memfd_create("mid", 0), out = memfd_create("out", 0);
	uint64_t sb = 0, pb = 0;
	err_t err = { 0 };
	struct stat st;
	uint8_t *back = xmalloc(n);
	char sha[65];

	random_bytes(p, n);
	CHECK(write_all(in, p, n) == 0);
	lseek(in, 0, SEEK_SET);
	CHECK(crypt_seal_fd(in, mid, key, ref, &ctx, &sb, sha, &err) == 0);
	CHECK(fstat(mid, &st) == 0 && (uint64_t)st.st_size == sb);
	CHECK(sb == n + 4 * CRYPT_TAG_LEN + (CRYPT_HEAD_FIXED + 4 + 3 + 4 + 4 + 4));
	/* the digest is the written bytes' */
	{
		uint8_t *sealed = xmalloc(sb), d[32];
		char hex[65];
		CHECK(pread(mid, sealed, sb, 0) == (ssize_t)sb);
		SHA256(sealed, sb, d);
		for (int i = 0; i < 32; i++)
			snprintf(hex + 2 * i, 3, "%02x", d[i]);
		CHECK(strcmp(hex, sha) == 0);
		free(sealed);
	}
	lseek(mid, 0, SEEK_SET);
	CHECK(crypt_open_fd(mid, out, key, &ctx, &pb, &err) == 0);
	CHECK(pb == n);
	lseek(out, 0, SEEK_SET);
	CHECK(read_all(out, back, n) == 0 && memcmp(back, p, n) == 0);
	seal_from_pipe(p, n, sb);
	close(in);
	close(mid);
	close(out);
	free(p);
	free(back);
}

static void tamper(void)
{
	size_t n = 3 * CS + 100;
	uint8_t *p = xcalloc(1, n), *tmp;
	struct buf s, t;
	struct crypt_head h;
	size_t hl, cl = CS + CRYPT_TAG_LEN;
	err_t err = { 0 };

	buf_init(&s);
	buf_init(&t);
	CHECK(crypt_seal_buf(p, n, key, ref, &ctx, &s, &err) == 0);
	hl = (size_t)crypt_head_parse(s.data, s.len, &h, &err);
	CHECK(hl > CRYPT_HEAD_FIXED && memcmp(h.key_ref, ref, CRYPT_REF_LEN) == 0);
	CHECK(strcmp(h.sandbox, "sb-a") == 0 && strcmp(h.kind, "disk") == 0);

	/* a flipped bit in chunk 1 */
	buf_reset(&t);
	buf_add(&t, s.data, s.len);
	t.data[hl + cl + 5] ^= 1;
	CHECK(open_err(&t, key, &ctx, &err) == -EBADMSG && strstr(err.msg, "chunk 1 fails"));
	/* chunks 0 and 1 swapped: both are full and valid, only out of place */
	buf_reset(&t);
	buf_add(&t, s.data, s.len);
	tmp = xmalloc(cl);
	memcpy(tmp, t.data + hl, cl);
	memmove(t.data + hl, t.data + hl + cl, cl);
	memcpy(t.data + hl + cl, tmp, cl);
	free(tmp);
	CHECK(open_err(&t, key, &ctx, &err) == -EBADMSG && strstr(err.msg, "chunk 0 fails"));
	/* the last chunk cut off whole */
	buf_reset(&t);
	buf_add(&t, s.data, hl + 3 * cl);
	CHECK(open_err(&t, key, &ctx, &err) == -EBADMSG && strstr(err.msg, "truncated after chunk 2"));
	/* the last chunk cut short */
	buf_reset(&t);
	buf_add(&t, s.data, s.len - 10);
	CHECK(open_err(&t, key, &ctx, &err) == -EBADMSG && strstr(err.msg, "chunk 3"));
	/* cut inside the header */
	buf_reset(&t);
	buf_add(&t, s.data, 20);
	CHECK(open_err(&t, key, &ctx, &err) == -EBADMSG && strstr(err.msg, "header"));
	/* another key */
	CHECK(open_err(&s, key2, &ctx, &err) == -EBADMSG && strstr(err.msg, "chunk 0 fails"));
	/* opened as another sandbox's, tenant's, kind's, snapshot's */
	{
		struct crypt_ctx c = ctx;
		c.sandbox = "sb-b";
		CHECK(open_err(&s, key, &c, &err) == -EBADMSG && strstr(err.msg, "sealed for sandbox sb-a"));
		c = ctx;
		c.tenant = "t-2";
		CHECK(open_err(&s, key, &c, &err) == -EBADMSG && strstr(err.msg, "another tenant"));
		c = ctx;
		c.kind = "memory";
		CHECK(open_err(&s, key, &c, &err) == -EBADMSG && strstr(err.msg, "wrong position"));
		c = ctx;
		c.snapshot = "su-2";
		CHECK(open_err(&s, key, &c, &err) == -EBADMSG && strstr(err.msg, "snapshot su-1"));
		/* the header's names rewritten to match: the AAD still binds
		 * the real ones */
		buf_reset(&t);
		buf_add(&t, s.data, s.len);
		char *at = memmem(t.data, hl, "sb-a", 4);
		CHECK(at != NULL);
		if (at)
			at[3] = 'b';
		c = ctx;
		c.sandbox = "sb-b";
		CHECK(open_err(&t, key, &c, &err) == -EBADMSG && strstr(err.msg, "chunk 0 fails"));
	}
	/* not sealed at all */
	buf_reset(&t);
	buf_adds(&t, "plain text, not an object of ours, long enough for a header!");
	CHECK(open_err(&t, key, &ctx, &err) == -EBADMSG && strstr(err.msg, "not a sealed object"));
	buf_free(&s);
	buf_free(&t);
	free(p);
}

/* The in-order opener, fed in odd pieces, gives the file back and names
 * tampering as crypt_open_buf does. */
static void opener(size_t n)
{
	uint8_t *p = xmalloc(n + 1);
	int out = memfd_create("out", 0);
	struct crypt_opener *o;
	struct buf s, back;
	uint64_t size, plain = 0;
	err_t err = { 0 };
	uint8_t *sealed;

	random_bytes(p, n + 1);
	buf_init(&s);
	buf_init(&back);
	CHECK(crypt_seal_buf(p, n, key, ref, &ctx, &s, &err) == 0);
	sealed = (uint8_t *)s.data;
	size = s.len;
	CHECK(crypt_open_buf(sealed, size, key, &ctx, &back, &err) == 0);
	CHECK(back.len == n && (n == 0 || memcmp(back.data, p, n) == 0));
	/* the opener, fed 1000 bytes at a time */
	o = crypt_opener_new(out, key, &ctx);
	for (uint64_t pos = 0; pos < size; pos += 1000)
		CHECK(crypt_opener_write(o, sealed + pos, size - pos < 1000 ? size - pos : 1000) == 0);
	CHECK(crypt_opener_finish(o, &plain, &err) == 0 && plain == n);
	crypt_opener_free(o);
	buf_reset(&back);
	lseek(out, 0, SEEK_SET);
	{
		uint8_t *got = xmalloc(n + 1);
		CHECK(read_all(out, got, n) == 0 && (n == 0 || memcmp(got, p, n) == 0));
		free(got);
	}
	/* cut after a whole chunk: named */
	if (n > CS) {
		struct crypt_head h;
		size_t hl = (size_t)crypt_head_parse(sealed, size, &h, &err);
		o = crypt_opener_new(out, key, &ctx);
		CHECK(crypt_opener_write(o, sealed, hl + CS + CRYPT_TAG_LEN) == 0);
		CHECK(crypt_opener_finish(o, NULL, &err) == -EBADMSG &&
		      strstr(err.msg, "truncated after chunk 0"));
		crypt_opener_free(o);
		/* another sandbox's */
		struct crypt_ctx c2 = ctx;
		c2.sandbox = "sb-z";
		o = crypt_opener_new(out, key, &c2);
		CHECK(crypt_opener_write(o, sealed, size) < 0);
		CHECK(crypt_opener_failed(o, &err) == -EBADMSG && strstr(err.msg, "sealed for sandbox"));
		crypt_opener_free(o);
		/* a flipped byte in chunk 1 */
		sealed[hl + CS + CRYPT_TAG_LEN + 3] ^= 1;
		o = crypt_opener_new(out, key, &ctx);
		(void)crypt_opener_write(o, sealed, size);
		CHECK(crypt_opener_finish(o, NULL, &err) == -EBADMSG && strstr(err.msg, "chunk 1 fails"));
		crypt_opener_free(o);
	}
	buf_free(&s);
	buf_free(&back);
	free(p);
	close(out);
}

static char dir[] = "/tmp/test-byok-XXXXXX";

static void cleanup(void)
{
	_cleanup_free_ char *cmd = xasprintf("rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cleanup failed\n");
}

/* Many first uses of one tenant's key at once (creates racing): each gets
 * a data key, and every one unwraps afterwards under the one key made. */
struct racer {
	struct kms *k;
	uint8_t ref[CRYPT_REF_LEN];
	int r;
};

static void *race_one(void *arg)
{
	struct racer *rc = arg;
	struct dkey *dk = NULL;
	err_t err = { 0 };

	rc->r = kms_data_key_new(rc->k, "t-race", "sb-r", "su-r", rc->ref, &dk, &err);
	if (rc->r < 0)
		fprintf(stderr, "race: %s\n", err.msg);
	dkey_free(dk);
	return NULL;
}

static void first_use_race(struct kms *k)
{
	struct racer rc[8];
	pthread_t th[8];

	for (int i = 0; i < 8; i++) {
		rc[i] = (struct racer){ .k = k };
		CHECK(pthread_create(&th[i], NULL, race_one, &rc[i]) == 0);
	}
	for (int i = 0; i < 8; i++)
		pthread_join(th[i], NULL);
	kms_cache_flush(k, NULL);
	for (int i = 0; i < 8; i++) {
		struct dkey *dk = NULL;
		err_t err = { 0 };
		CHECK(rc[i].r == 0);
		CHECK(kms_data_key_get(k, "t-race", rc[i].ref, &dk, &err) == 0);
		dkey_free(dk);
	}
	CHECK(kms_local_version(k, "t-race", "default") == 1);
}

static void local_keys(void)
{
	_cleanup_free_ char *dbp = NULL, *kd = NULL, *f1 = NULL, *f2 = NULL, *kdir = NULL;
	_cleanup_free_ char *saved = NULL;
	uint8_t r1[CRYPT_REF_LEN], r2[CRYPT_REF_LEN], r3[CRYPT_REF_LEN], r4[CRYPT_REF_LEN];
	struct dkey *a = NULL, *b = NULL, *c = NULL, *d3 = NULL, *d4 = NULL;
	struct kms k;
	struct db *db;
	struct stat st;
	unsigned n = 0;
	err_t err = { 0 };

	REQUIRE(mkdtemp(dir) != NULL, cleanup);
	dbp = xasprintf("%s/db.sqlite", dir);
	kd = xasprintf("%s/keys", dir);
	db = db_open(dbp, &err);
	REQUIRE(db != NULL, cleanup);
	CHECK(kms_init(&k, db, kd, 60, &err) == 0);
	CHECK(kms_data_key_new(&k, "t-1", "sb-a", "su-1", r1, &a, &err) == 0);
	f1 = xasprintf("%s/t-1/default.v1", kd);
	kdir = xasprintf("%s/t-1", kd);
	CHECK(stat(f1, &st) == 0 && (st.st_mode & 0777) == 0600 && st.st_size == 32);
	CHECK(stat(kdir, &st) == 0 && (st.st_mode & 0777) == 0700);
	CHECK(stat(kd, &st) == 0 && (st.st_mode & 0777) == 0700);
	/* from the provider, not the cache */
	kms_cache_flush(&k, NULL);
	CHECK(kms_data_key_get(&k, "t-1", r1, &b, &err) == 0 && b &&
	      memcmp(a->k, b->k, CRYPT_KEY_LEN) == 0);
	dkey_free(b);
	b = NULL;
	/* another tenant cannot name it */
	CHECK(kms_data_key_get(&k, "t-2", r1, &b, &err) == -EBADMSG);
	/* a wrapping moved to another tenant's row does not open under its key */
	CHECK(kms_data_key_new(&k, "t-2", "sb-b", "su-2", r2, &c, &err) == 0);
	CHECK(db_exec(db, &err, "UPDATE data_keys SET wrapped=(SELECT wrapped FROM data_keys d"
		      " WHERE d.tenant_id='t-1') WHERE tenant_id='t-2'", "") >= 0);
	kms_cache_flush(&k, NULL);
	CHECK(kms_data_key_get(&k, "t-2", r2, &b, &err) == -EBADMSG);
	/* a key file readable by others is refused */
	chmod(f1, 0644);
	CHECK(kms_data_key_get(&k, "t-1", r1, &b, &err) == -EPERM);
	chmod(f1, 0600);
	/* a copy of v1 taken before the rotation (a leaked key file) */
	saved = xasprintf("%s/v1.saved", dir);
	{
		_cleanup_free_ char *cmd = xasprintf("cp -p '%s' '%s'", f1, saved);
		CHECK(system(cmd) == 0);
	}
	/* rotate: v2, every data key rewrapped, the data key unchanged, and
	 * v1 retired: its file is gone (nothing is wrapped under it now) */
	CHECK(kms_rotate(&k, "t-1", &n, &err) == 0 && n == 1);
	CHECK(kms_local_version(&k, "t-1", "default") == 2);
	CHECK(access(f1, F_OK) < 0 && errno == ENOENT);
	kms_cache_flush(&k, NULL);
	CHECK(kms_data_key_get(&k, "t-1", r1, &b, &err) == 0 && b &&
	      memcmp(a->k, b->k, CRYPT_KEY_LEN) == 0);
	dkey_free(b);
	b = NULL;
	/* another tenant's versions are its own: t-2's v1 stays */
	{
		_cleanup_free_ char *t2v1 = xasprintf("%s/t-2/default.v1", kd);
		CHECK(access(t2v1, F_OK) == 0);
	}
	/* the next version counts on from the newest (not v1 again, now that
	 * it is gone); data keys made under v2, then a version made with no
	 * rewrap: retiring finds every data key still under v2, rewraps it
	 * under v3 and only then deletes v2 */
	CHECK(kms_data_key_new(&k, "t-1", "sb-a", "su-3", r3, &d3, &err) == 0);
	CHECK(kms_data_key_new(&k, "t-1", "sb-a", "su-4", r4, &d4, &err) == 0);
	{
		struct kms_conf lc = { 0 };
		unsigned v = 0, gone = 0;

		/* and v1 as a retirement cut short by a crash leaves it */
		_cleanup_free_ char *left = xasprintf("%s.retiring", f1);
		_cleanup_free_ char *cmd = xasprintf("cp -p '%s' '%s'", saved, left);

		CHECK(system(cmd) == 0);
		CHECK(kms_local_rotate(&k, "t-1", "default", &v, &err) == 0 && v == 3);
		CHECK(kms_conf_get(&k, "t-1", &lc, &err) == 0);
		CHECK(kms_local_retire(&k, "t-1", &lc, &gone, &err) == 0 && gone == 2);
		CHECK(access(left, F_OK) < 0 && errno == ENOENT);
	}
	f2 = xasprintf("%s/t-1/default.v2", kd);
	CHECK(access(f2, F_OK) < 0 && errno == ENOENT);
	CHECK(kms_local_version(&k, "t-1", "default") == 3);
	kms_cache_flush(&k, NULL);
	{
		const uint8_t *refs[] = { r1, r3, r4 };
		const struct dkey *want[] = { a, d3, d4 };
		for (int i = 0; i < 3; i++) {
			CHECK(kms_data_key_get(&k, "t-1", refs[i], &b, &err) == 0 && b &&
			      memcmp(want[i]->k, b->k, CRYPT_KEY_LEN) == 0);
			dkey_free(b);
			b = NULL;
		}
	}
	/* the old version alone cannot unwrap the new wrapping */
	dkey_free(d3);
	dkey_free(d4);
	free(f2);
	f2 = xasprintf("%s/t-1/default.v3", kd);
	{
		_cleanup_free_ char *f2x = xasprintf("%s.x", f2);
		_cleanup_free_ char *cmd = xasprintf("cp -p '%s' '%s'", saved, f2);
		CHECK(rename(f2, f2x) == 0);
		CHECK(system(cmd) == 0);   /* v1's bytes as v3 */
		kms_cache_flush(&k, NULL);
		CHECK(kms_data_key_get(&k, "t-1", r1, &b, &err) == -EBADMSG);
		CHECK(rename(f2x, f2) == 0);
	}
	first_use_race(&k);
	dkey_free(a);
	dkey_free(c);
	kms_fini(&k);
	db_close(db);
	cleanup();
}

int main(void)
{
	random_bytes(key, sizeof(key));
	random_bytes(key2, sizeof(key2));
	random_bytes(ref, sizeof(ref));
	roundtrip(0);
	roundtrip(1);
	roundtrip(100);
	roundtrip(CS);
	roundtrip(CS + 1);
	roundtrip(2 * CS);
	streams();
	opener(0);
	opener(5000);
	opener(CS);
	opener(2 * CS + 333);
	tamper();
	local_keys();
	return check_done("test-byok");
}
