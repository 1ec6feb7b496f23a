/* test-oci: the bounded tar reader (ustar, prefix, pax, GNU long names,
 * base-256, every refusal: checksum, truncation, no end block, oversized
 * records), name cleaning, gzip layers, the image config's normalisation,
 * and the applier in a scratch directory: whiteouts, opaque directories,
 * and refusals (symlink on the way, "..", devices, hardlinks out). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "../../src/oci/oci.h"
#include "check.h"

/* ---- writing tars by hand ---- */

static void octal(char *f, size_t len, uint64_t v)
{
	char tmp[32];

	snprintf(tmp, sizeof(tmp), "%0*llo", (int)len - 1, (unsigned long long)v);
	memcpy(f, tmp, len - 1);   /* the last byte stays NUL */
}

static void header(struct buf *b, const char *name, char type, uint64_t size, const char *link,
		   const char *magic, const char *prefix)
{
	unsigned char h[512] = { 0 };
	unsigned sum = 0;

	memcpy(h, name, strnlen(name, 100));
	octal((char *)h + 100, 8, 0644);
	octal((char *)h + 108, 8, getuid());
	octal((char *)h + 116, 8, getgid());
	octal((char *)h + 124, 12, size);
	octal((char *)h + 136, 12, 1700000000);
	h[156] = (unsigned char)type;
	if (link)
		memcpy(h + 157, link, strnlen(link, 100));
	memcpy(h + 257, magic ? magic : "ustar\0" "00", 8);
	if (prefix)
		memcpy(h + 345, prefix, strnlen(prefix, 155));
	memset(h + 148, ' ', 8);
	for (int i = 0; i < 512; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
	buf_add(b, h, 512);
}

static void data(struct buf *b, const char *d, size_t n)
{
	static const char zero[512];

	buf_add(b, d, n);
	buf_add(b, zero, (512 - n % 512) % 512);
}

static void file(struct buf *b, const char *name, const char *content)
{
	header(b, name, '0', strlen(content), NULL, NULL, NULL);
	data(b, content, strlen(content));
}

static void end(struct buf *b)
{
	static const char zero[1024];

	buf_add(b, zero, sizeof(zero));
}

static void pax(struct buf *b, const char *key, const char *val)
{
	char rec[8192];
	size_t n = strlen(key) + strlen(val) + 3, len = n + 1;

	while (snprintf(NULL, 0, "%zu", len) + n != len)
		len++;
	snprintf(rec, sizeof(rec), "%zu %s=%s\n", len, key, val);
	header(b, "PaxHeader", 'x', strlen(rec), NULL, NULL, NULL);
	data(b, rec, strlen(rec));
}

/* ---- reading them ---- */

struct got {
	int rc;
	int n;
	char names[8][TAR_NAME_MAX + 1];
	char links[8][TAR_NAME_MAX + 1];
	char bodies[8][64];
	uint64_t sizes[8];
	err_t err;
};

static void read_all_entries(const struct buf *b, struct got *g)
{
	struct tar_mem m = { .p = (const uint8_t *)b->data, .len = b->len };
	struct tar_reader tr;
	struct tar_entry *e;

	memset(g, 0, sizeof(*g));
	tar_init(&tr, tar_mem_read, &m);
	while ((g->rc = tar_next(&tr, &e, &g->err)) > 0 && g->n < 8) {
		ssize_t k;
		snprintf(g->names[g->n], sizeof(g->names[0]), "%s", e->name);
		snprintf(g->links[g->n], sizeof(g->links[0]), "%s", e->linkname);
		g->sizes[g->n] = e->size;
		k = tar_read(&tr, g->bodies[g->n], sizeof(g->bodies[0]) - 1, &g->err);
		if (k < 0) {
			g->rc = (int)k;
			break;
		}
		g->n++;
	}
	tar_free(&tr);
}

static void test_reader(void)
{
	struct buf b;
	struct got g;
	char longname[300];

	/* plain ustar, and the prefix field */
	buf_init(&b);
	file(&b, "a.txt", "hello");
	header(&b, "name.txt", '0', 2, NULL, NULL, "some/prefix");
	data(&b, "hi", 2);
	header(&b, "dir/", '5', 0, NULL, NULL, NULL);
	header(&b, "ln", '2', 0, "a.txt", NULL, NULL);
	end(&b);
	read_all_entries(&b, &g);
	CHECK(g.rc == 0 && g.n == 4);
	CHECK(!strcmp(g.names[0], "a.txt") && !strcmp(g.bodies[0], "hello") && g.sizes[0] == 5);
	CHECK(!strcmp(g.names[1], "some/prefix/name.txt") && !strcmp(g.bodies[1], "hi"));
	CHECK(!strcmp(g.names[2], "dir/") && !strcmp(g.links[3], "a.txt"));

	/* pax path, linkpath and size override the header */
	memset(longname, 'p', 250);
	memcpy(longname + 250, "/end", 5);
	buf_reset(&b);
	pax(&b, "path", longname);
	file(&b, "short", "x");
	pax(&b, "linkpath", longname);
	header(&b, "lnk", '2', 0, "ignored", NULL, NULL);
	pax(&b, "size", "3");
	header(&b, "sized", '0', 99, NULL, NULL, NULL);
	data(&b, "abc", 3);
	end(&b);
	read_all_entries(&b, &g);
	CHECK(g.rc == 0 && g.n == 3);
	CHECK(!strcmp(g.names[0], longname) && !strcmp(g.bodies[0], "x"));
	CHECK(!strcmp(g.names[1], "lnk") && !strcmp(g.links[1], longname));
	CHECK(g.sizes[2] == 3 && !strcmp(g.bodies[2], "abc"));

	/* GNU long name and long link */
	buf_reset(&b);
	header(&b, "././@LongLink", 'L', strlen(longname) + 1, NULL, "ustar  \0", NULL);
	data(&b, longname, strlen(longname) + 1);
	header(&b, "././@LongLink", 'K', strlen(longname) + 1, NULL, "ustar  \0", NULL);
	data(&b, longname, strlen(longname) + 1);
	header(&b, "trunc", '1', 0, "trunc-link", "ustar  \0", NULL);
	end(&b);
	read_all_entries(&b, &g);
	CHECK(g.rc == 0 && g.n == 1 && !strcmp(g.names[0], longname) &&
	      !strcmp(g.links[0], longname));

	/* base-256 size */
	buf_reset(&b);
	header(&b, "b256", '0', 0, NULL, NULL, NULL);
	{
		unsigned char *h = (unsigned char *)b.data;
		unsigned sum = 0;
		memset(h + 124, 0, 12);
		h[124] = 0x80;
		h[135] = 4;
		memset(h + 148, ' ', 8);
		for (int i = 0; i < 512; i++)
			sum += h[i];
		snprintf((char *)h + 148, 8, "%06o", sum);
	}
	data(&b, "four", 4);
	end(&b);
	read_all_entries(&b, &g);
	CHECK(g.rc == 0 && g.n == 1 && g.sizes[0] == 4 && !strcmp(g.bodies[0], "four"));

	/* refusals */
	buf_reset(&b);
	file(&b, "a", "x");
	b.data[0] = 'b';   /* the checksum no longer matches */
	end(&b);
	read_all_entries(&b, &g);
	CHECK(g.rc == -EPROTO && strstr(g.err.msg, "checksum"));

	buf_reset(&b);
	file(&b, "a", "0123456789");
	b.len = 512 + 4;   /* cut inside the data */
	read_all_entries(&b, &g);
	CHECK(g.rc == -EPROTO && strstr(g.err.msg, "truncated"));

	buf_reset(&b);
	file(&b, "a", "x");   /* no end-of-archive block */
	read_all_entries(&b, &g);
	CHECK(g.rc == -EPROTO && strstr(g.err.msg, "truncated"));

	buf_reset(&b);
	header(&b, "PaxHeader", 'x', TAR_PAX_MAX + 1, NULL, NULL, NULL);
	read_all_entries(&b, &g);
	CHECK(g.rc == -EPROTO && strstr(g.err.msg, "pax header"));

	buf_reset(&b);
	header(&b, "././@LongLink", 'L', TAR_NAME_MAX + 1, NULL, NULL, NULL);
	read_all_entries(&b, &g);
	CHECK(g.rc == -EPROTO && strstr(g.err.msg, "long name"));

	buf_reset(&b);
	pax(&b, "path", "x");
	end(&b);   /* an extended header with no entry after it */
	read_all_entries(&b, &g);
	CHECK(g.rc == -EPROTO);

	buf_reset(&b);
	header(&b, "PaxHeader", 'x', 10, NULL, NULL, NULL);
	data(&b, "99 path=x\n", 10);   /* a record longer than the header */
	file(&b, "a", "x");
	end(&b);
	read_all_entries(&b, &g);
	CHECK(g.rc == -EPROTO && strstr(g.err.msg, "pax record"));
	buf_free(&b);
}

static void test_clean_path(void)
{
	char out[TAR_NAME_MAX + 1];

	CHECK(oci_clean_path("./a//b/./c/", out) == 0 && !strcmp(out, "a/b/c"));
	CHECK(oci_clean_path("/etc/passwd", out) == 0 && !strcmp(out, "etc/passwd"));
	CHECK(oci_clean_path("./", out) == 0 && !strcmp(out, ""));
	CHECK(oci_clean_path("../x", out) == -EINVAL);
	CHECK(oci_clean_path("a/../../x", out) == -EINVAL);
	CHECK(oci_clean_path("a/..", out) == -EINVAL);
	CHECK(oci_clean_path("a/..b/c", out) == 0 && !strcmp(out, "a/..b/c"));
}

/* ---- the applier, in a scratch directory ---- */

static char scratch[64];

static void rm_scratch(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", scratch);
	if (scratch[0] && system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", scratch);
}

static int apply(int root, const struct buf *b, err_t *err)
{
	struct tar_mem m = { .p = (const uint8_t *)b->data, .len = b->len };
	struct oci_applier a;
	struct tar_reader tr;
	int r;

	oci_applier_init(&a, root, NULL);
	tar_init(&tr, tar_mem_read, &m);
	r = oci_apply_layer(&a, &tr, "layer T", err);
	tar_free(&tr);
	oci_applier_free(&a);
	return r;
}

static bool exists(int root, const char *p)
{
	struct stat st;

	return fstatat(root, p, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

static void test_apply(void)
{
	struct buf b;
	err_t err = { 0 };
	int root;
	char outside[128];

	snprintf(scratch, sizeof(scratch), "/tmp/test-oci-XXXXXX");
	REQUIRE(mkdtemp(scratch) != NULL, rm_scratch);
	snprintf(outside, sizeof(outside), "%s/outside", scratch);
	REQUIRE(mkdir(outside, 0755) == 0, rm_scratch);
	{
		char r[128];
		snprintf(r, sizeof(r), "%s/root", scratch);
		REQUIRE(mkdir(r, 0755) == 0, rm_scratch);
		root = open(r, O_PATH | O_DIRECTORY | O_CLOEXEC);
		REQUIRE(root >= 0, rm_scratch);
	}
	buf_init(&b);
	/* lower layer: a parent made on the way, a symlink out */
	header(&b, "d/", '5', 0, NULL, NULL, NULL);
	file(&b, "d/gone", "1");
	file(&b, "d/keep", "2");
	file(&b, "o/a", "3");
	file(&b, "o/sub/b", "4");
	header(&b, "out", '2', 0, outside, NULL, NULL);
	end(&b);
	CHECK(apply(root, &b, &err) == 0);
	CHECK(exists(root, "d/keep") && exists(root, "o/sub/b") && exists(root, "out"));
	/* upper layer: a whiteout, an opaque dir with a new child before
	 * the marker (kept: it is this layer's) */
	buf_reset(&b);
	file(&b, "d/.wh.gone", "");
	file(&b, "o/new", "5");
	file(&b, "o/.wh..wh..opq", "");
	end(&b);
	CHECK(apply(root, &b, &err) == 0);
	CHECK(!exists(root, "d/gone") && exists(root, "d/keep"));
	CHECK(exists(root, "o/new") && !exists(root, "o/a") && !exists(root, "o/sub"));
	CHECK(!exists(root, "d/.wh.gone") && !exists(root, "o/.wh..wh..opq"));

	/* through the symlink: refused, nothing written outside */
	buf_reset(&b);
	file(&b, "out/planted", "x");
	end(&b);
	CHECK(apply(root, &b, &err) == -EPERM && strstr(err.msg, "layer T: entry `out/planted`") &&
	      strstr(err.msg, "symlink"));
	{
		char p[200];
		snprintf(p, sizeof(p), "%s/planted", outside);
		CHECK(access(p, F_OK) < 0);
	}
	/* a file over the symlink replaces the link, not its target */
	buf_reset(&b);
	file(&b, "out", "now a file");
	end(&b);
	CHECK(apply(root, &b, &err) == 0);
	{
		struct stat st;
		CHECK(fstatat(root, "out", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode));
	}
	buf_reset(&b);
	file(&b, "../escape", "x");
	end(&b);
	CHECK(apply(root, &b, &err) == -EPERM && strstr(err.msg, "leaves the root"));
	buf_reset(&b);
	header(&b, "dev", '3', 0, NULL, NULL, NULL);
	end(&b);
	CHECK(apply(root, &b, &err) == -EPERM && strstr(err.msg, "device node"));
	buf_reset(&b);
	header(&b, "hl", '1', 0, "../../etc/passwd", NULL, NULL);
	end(&b);
	CHECK(apply(root, &b, &err) == -EPERM && strstr(err.msg, "outside the tree"));
	buf_reset(&b);
	header(&b, "hl", '1', 0, "d/keep", NULL, NULL);
	end(&b);
	CHECK(apply(root, &b, &err) == 0 && exists(root, "hl"));
	buf_reset(&b);
	header(&b, "sparse", 'S', 0, NULL, NULL, NULL);
	end(&b);
	CHECK(apply(root, &b, &err) == -EPERM && strstr(err.msg, "unsupported entry type"));
	buf_free(&b);
	close(root);
	rm_scratch();
}

/* ---- gzip layers and the config ---- */

static void test_gzip_stream(void)
{
	struct buf tar, gz;
	z_stream z = { 0 };
	char path[] = "/tmp/test-oci-gz-XXXXXX";
	int fd = mkstemp(path);
	struct got g = { 0 };
	err_t err = { 0 };

	REQUIRE(fd >= 0, rm_scratch);
	unlink(path);
	buf_init(&tar);
	file(&tar, "inside", "gzipped");
	end(&tar);
	buf_init(&gz);
	gz.data = xmalloc(tar.len + 1024);
	REQUIRE(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK,
		rm_scratch);
	z.next_in = (unsigned char *)tar.data;
	z.avail_in = (uInt)tar.len;
	z.next_out = (unsigned char *)gz.data;
	z.avail_out = (uInt)(tar.len + 1024);
	CHECK(deflate(&z, Z_FINISH) == Z_STREAM_END);
	gz.len = z.total_out;
	deflateEnd(&z);
	CHECK(write_all(fd, "junk", 4) == 0 && write_all(fd, gz.data, gz.len) == 0);

	struct oci_stream *s = oci_stream_open(fd, 4, gz.len, &err);
	CHECK(s && !strcmp(oci_stream_kind(s), "gzip"));
	if (s) {
		struct tar_reader tr;
		struct tar_entry *e;
		tar_init(&tr, oci_stream_read, s);
		CHECK(tar_next(&tr, &e, &err) == 1 && !strcmp(e->name, "inside"));
		CHECK(tar_read(&tr, g.bodies[0], 60, &err) == 7 && !strcmp(g.bodies[0], "gzipped"));
		CHECK(tar_next(&tr, &e, &err) == 0);
		tar_free(&tr);
		oci_stream_close(s);
	}
	/* cut short: the inflater runs out of input */
	s = oci_stream_open(fd, 4, gz.len / 2, &err);
	if (s) {
		struct tar_reader tr;
		struct tar_entry *e;
		int r;
		tar_init(&tr, oci_stream_read, s);
		while ((r = tar_next(&tr, &e, &err)) > 0)
			;
		CHECK(r < 0 && strstr(err.msg, "truncated"));
		tar_free(&tr);
		oci_stream_close(s);
	}
	/* zstd, detected by its magic too */
	{
		size_t cap = ZSTD_compressBound(tar.len), n;
		char *zbuf = xmalloc(cap);
		n = ZSTD_compress(zbuf, cap, tar.data, tar.len, 3);
		CHECK(!ZSTD_isError(n));
		CHECK(ftruncate(fd, 0) == 0 && pwrite(fd, zbuf, n, 0) == (ssize_t)n);
		s = oci_stream_open(fd, 0, n, &err);
		CHECK(s && !strcmp(oci_stream_kind(s), "zstd"));
		if (s) {
			struct tar_reader tr;
			struct tar_entry *e;
			char body[64] = "";
			tar_init(&tr, oci_stream_read, s);
			CHECK(tar_next(&tr, &e, &err) == 1 && !strcmp(e->name, "inside"));
			CHECK(tar_read(&tr, body, 60, &err) == 7 && !strcmp(body, "gzipped"));
			CHECK(tar_next(&tr, &e, &err) == 0);
			tar_free(&tr);
			oci_stream_close(s);
		}
		free(zbuf);
	}
	close(fd);
	buf_free(&tar);
	buf_free(&gz);
}

static void test_config(void)
{
	static const struct { const char *in, *want; } ok[] = {
		{ "{\"config\":{\"Env\":[\"A=1\",\"B=x=y\",\"A=2\"],\"WorkingDir\":\"/w\","
		  "\"User\":\"1000:1000\",\"Entrypoint\":[\"/e\"],\"Cmd\":[\"c\",\"d\"]}}",
		  "{\"env\":{\"B\":\"x=y\",\"A\":\"2\"},\"workdir\":\"/w\",\"user\":\"1000:1000\","
		  "\"entrypoint\":[\"/e\"],\"cmd\":[\"c\",\"d\"]}" },
		{ "{\"config\":null}", "{}" },
		{ "{\"config\":{\"WorkingDir\":\"\",\"User\":\"\",\"Cmd\":null}}", "{}" },
	};
	static const char *const bad[] = {
		"[]", "{\"config\":[]}", "{\"config\":{\"Env\":[\"NOEQUALS\"]}}",
		"{\"config\":{\"Env\":[\"=v\"]}}", "{\"config\":{\"WorkingDir\":\"relative\"}}",
		"{\"config\":{\"Cmd\":\"sh -c x\"}}", "{\"config\":{\"Cmd\":[1]}}",
		"{\"config\":{\"User\":\"a/b\"}}",
	};
	struct buf out;
	err_t err = { 0 };

	buf_init(&out);
	for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
		json *j = json_parse(ok[i].in, strlen(ok[i].in), &err);
		CHECK(j && oci_config_normalize(j, &out, &err) == 0 && !strcmp(out.data, ok[i].want));
		if (out.data && strcmp(out.data, ok[i].want))
			fprintf(stderr, "  got %s\n", out.data);
		json_free(j);
	}
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		json *j = json_parse(bad[i], strlen(bad[i]), &err);
		CHECK(j && oci_config_normalize(j, &out, &err) == -EINVAL);
		json_free(j);
	}
	buf_free(&out);
}

int main(void)
{
	test_reader();
	test_clean_path();
	test_apply();
	test_gzip_stream();
	test_config();
	return check_done("test-oci");
}
