/* stream.c - a layer's bytes from a region of the spooled image, inflated
 * when they are gzip (Debian's zlib) or zstd. Bounded by the region: a
 * compressed stream that claims more input than the region has is
 * "truncated". */
#include <errno.h>
#include <string.h>
#include <openssl/evp.h>
#include <zlib.h>
#include <zstd.h>

#include "../lib/sha256.h"
#include "oci.h"

#define IN_BUF (128u * 1024)

enum kind { RAW, GZIP, ZSTD };

struct oci_stream {
	int fd;
	uint64_t off, left;      /* the region still to read */
	enum kind kind;
	bool eof;                /* decompressor finished */
	z_stream z;
	ZSTD_DStream *zs;
	ZSTD_inBuffer zin;
	unsigned char *in;
	EVP_MD_CTX *md;          /* oci_stream_expect: the raw bytes' hash */
	char want[65];
};

static ssize_t region_read(struct oci_stream *s, void *p, size_t n, err_t *err)
{
	ssize_t k;

	if (n > s->left)
		n = (size_t)s->left;
	if (n == 0)
		return 0;
	do
		k = pread(s->fd, p, n, (off_t)s->off);
	while (k < 0 && errno == EINTR);
	if (k < 0)
		return err_sys(err, "read image");
	if (k == 0)
		return err_set(err, EPROTO, "image file shorter than its index");
	if (s->md && !EVP_DigestUpdate(s->md, p, (size_t)k))
		return err_set(err, EIO, "sha256");
	s->off += (uint64_t)k;
	s->left -= (uint64_t)k;
	return k;
}

struct oci_stream *oci_stream_open(int fd, uint64_t off, uint64_t len, err_t *err)
{
	struct oci_stream *s = xcalloc(1, sizeof(*s));
	unsigned char magic[4] = { 0 };
	ssize_t k;

	s->fd = fd;
	s->off = off;
	s->left = len;
	do
		k = pread(fd, magic, len < 4 ? (size_t)len : 4, (off_t)off);
	while (k < 0 && errno == EINTR);
	if (k < 0) {
		err_sys(err, "read image");
		free(s);
		return NULL;
	}
	if (k >= 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
		s->kind = GZIP;
		/* 16 + MAX_WBITS: gzip framing only */
		if (inflateInit2(&s->z, 16 + MAX_WBITS) != Z_OK) {
			err_set(err, ENOMEM, "zlib init");
			free(s);
			return NULL;
		}
	} else if (k == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f &&
		   magic[3] == 0xfd) {
		s->kind = ZSTD;
		s->zs = ZSTD_createDStream();
		if (!s->zs || ZSTD_isError(ZSTD_initDStream(s->zs))) {
			err_set(err, ENOMEM, "zstd init");
			ZSTD_freeDStream(s->zs);
			free(s);
			return NULL;
		}
	}
	if (s->kind != RAW)
		s->in = xmalloc(IN_BUF);
	return s;
}

void oci_stream_close(struct oci_stream *s)
{
	if (!s)
		return;
	if (s->kind == GZIP)
		inflateEnd(&s->z);
	if (s->zs)
		ZSTD_freeDStream(s->zs);
	EVP_MD_CTX_free(s->md);
	free(s->in);
	free(s);
}

char *oci_blob_digest(const char *name)
{
	const char *hex;

	if (strncmp(name, "blobs/sha256/", 13))
		return NULL;
	hex = name + 13;
	if (strlen(hex) != 64 || strspn(hex, "0123456789abcdef") != 64)
		return NULL;
	return xasprintf("sha256:%s", hex);
}

int oci_stream_expect(struct oci_stream *s, const char *digest, err_t *err)
{
	if (strncmp(digest, "sha256:", 7) || strlen(digest + 7) != 64)
		return err_set(err, ENOTSUP, "digest `%.80s`: only sha256 is checked", digest);
	snprintf(s->want, sizeof(s->want), "%s", digest + 7);
	s->md = EVP_MD_CTX_new();
	if (!s->md || !EVP_DigestInit_ex(s->md, EVP_sha256(), NULL))
		return err_set(err, ENOMEM, "sha256");
	/* The magic was peeked with pread; the hash starts at the region's
	 * first byte, which no read has consumed yet. */
	return 0;
}

int oci_stream_verify(struct oci_stream *s, err_t *err)
{
	unsigned char md[EVP_MAX_MD_SIZE], rest[64 * 1024];
	unsigned int n = 0;
	char hex[65];
	ssize_t k;

	if (!s->md)
		return 0;
	/* A decompressor may hold input it read but did not need: it was
	 * hashed when read. What no one read is hashed now. */
	while ((k = region_read(s, rest, sizeof(rest), err)) > 0)
		;
	if (k < 0)
		return (int)k;
	if (!EVP_DigestFinal_ex(s->md, md, &n) || n != 32)
		return err_set(err, EIO, "sha256");
	hex_encode(md, 32, hex);
	if (strcmp(hex, s->want))
		return err_set(err, EBADMSG, "content is sha256:%.12s…, not the sha256:%.12s… its"
			       " name says", hex, s->want);
	return 0;
}

const char *oci_stream_kind(const struct oci_stream *s)
{
	return s->kind == GZIP ? "gzip" : s->kind == ZSTD ? "zstd" : "tar";
}

static ssize_t gzip_read(struct oci_stream *s, void *p, size_t n, err_t *err)
{
	s->z.next_out = p;
	s->z.avail_out = (uInt)(n > (1u << 30) ? (1u << 30) : n);
	while (s->z.avail_out > 0 && !s->eof) {
		int zr;

		if (s->z.avail_in == 0) {
			ssize_t k = region_read(s, s->in, IN_BUF, err);
			if (k < 0)
				return k;
			if (k == 0)
				return err_set(err, EPROTO, "truncated gzip stream");
			s->z.next_in = s->in;
			s->z.avail_in = (uInt)k;
		}
		zr = inflate(&s->z, Z_NO_FLUSH);
		if (zr == Z_STREAM_END) {
			/* Another gzip member may follow (gzip allows concatenation). */
			if (s->z.avail_in == 0 && s->left == 0)
				s->eof = true;
			else if (inflateReset(&s->z) != Z_OK)
				return err_set(err, EPROTO, "gzip: reset failed");
		} else if (zr != Z_OK && zr != Z_BUF_ERROR) {
			return err_set(err, EPROTO, "gzip: %s", s->z.msg ? s->z.msg : "bad data");
		} else if (zr == Z_BUF_ERROR && s->z.avail_in != 0) {
			return err_set(err, EPROTO, "gzip: stuck");
		}
		if ((unsigned char *)s->z.next_out != (unsigned char *)p)
			break;   /* some output: hand it out */
	}
	return (ssize_t)((unsigned char *)s->z.next_out - (unsigned char *)p);
}

static ssize_t zstd_read(struct oci_stream *s, void *p, size_t n, err_t *err)
{
	ZSTD_outBuffer out = { .dst = p, .size = n, .pos = 0 };

	while (out.pos == 0 && !s->eof) {
		size_t zr;

		if (s->zin.pos == s->zin.size) {
			ssize_t k = region_read(s, s->in, IN_BUF, err);
			if (k < 0)
				return k;
			if (k == 0)
				return err_set(err, EPROTO, "truncated zstd stream");
			s->zin.src = s->in;
			s->zin.size = (size_t)k;
			s->zin.pos = 0;
		}
		zr = ZSTD_decompressStream(s->zs, &out, &s->zin);
		if (ZSTD_isError(zr))
			return err_set(err, EPROTO, "zstd: %s", ZSTD_getErrorName(zr));
		if (zr == 0 && s->zin.pos == s->zin.size && s->left == 0)
			s->eof = true;
	}
	return (ssize_t)out.pos;
}

ssize_t oci_stream_read(void *ctx, void *p, size_t n, err_t *err)
{
	struct oci_stream *s = ctx;

	if (s->kind == GZIP)
		return gzip_read(s, p, n, err);
	if (s->kind == ZSTD)
		return zstd_read(s, p, n, err);
	return region_read(s, p, n, err);
}
