/* envelope.c - chunked AES-256-GCM objects (format in envelope.h). */
#include "envelope.h"

#include "../lib/sha256.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

static const char magic[6] = { 'A', 'L', 'S', 'E', 'A', 'L' };
#define AAD_LABEL "airlock-seal-v1"

/* Where the bytes come from and go to: an fd or memory, so one loop serves
 * the streams and the manifest. */
struct src {
	int fd;
	const uint8_t *p;
	size_t n, off;
};

struct sink {
	int fd;
	struct buf *b;
	uint64_t bytes;
	EVP_MD_CTX *md;   /* NULL, or hashes what is written */
};

/* Up to want bytes; fewer only at the end. -errno on a read error. */
static ssize_t src_read(struct src *s, void *dst, size_t want)
{
	size_t got = 0;

	if (s->fd < 0) {
		size_t left = s->n - s->off;
		got = want < left ? want : left;
		memcpy(dst, s->p + s->off, got);
		s->off += got;
		return (ssize_t)got;
	}
	while (got < want) {
		ssize_t r = read(s->fd, (uint8_t *)dst + got, want - got);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

static int sink_write(struct sink *s, const void *p, size_t n)
{
	int r = 0;

	if (s->b)
		buf_add(s->b, p, n);
	else
		r = write_all(s->fd, p, n);
	if (r == 0)
		s->bytes += n;
	if (r == 0 && s->md)
		sha256_add(s->md, p, n);
	return r;
}

void crypt_ref_hex(const uint8_t ref[CRYPT_REF_LEN], char out[2 * CRYPT_REF_LEN + 1])
{
	static const char hex[] = "0123456789abcdef";

	for (int i = 0; i < CRYPT_REF_LEN; i++) {
		out[2 * i] = hex[ref[i] >> 4];
		out[2 * i + 1] = hex[ref[i] & 15];
	}
	out[2 * CRYPT_REF_LEN] = '\0';
}

int crypt_ref_parse(const char *hex, uint8_t ref[CRYPT_REF_LEN])
{
	if (!hex || strlen(hex) != 2 * CRYPT_REF_LEN)
		return -EINVAL;
	for (int i = 0; i < CRYPT_REF_LEN; i++) {
		int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -EINVAL;
		ref[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

static bool ctx_ok(const struct crypt_ctx *c)
{
	const char *s[4] = { c->tenant, c->sandbox, c->kind, c->snapshot };

	for (int i = 0; i < 4; i++)
		if (!s[i] || strlen(s[i]) > CRYPT_NAME_MAX)
			return false;
	return true;
}

static void add_name(struct buf *b, const char *s)
{
	uint8_t len = (uint8_t)strlen(s);

	buf_add(b, &len, 1);
	buf_add(b, s, len);
}

static void head_write(struct buf *b, const struct crypt_head *h, const struct crypt_ctx *c)
{
	size_t start = b->len, hl;
	uint8_t v[2] = { 1, CRYPT_CHUNK_LOG2 }, len[2] = { 0, 0 };

	buf_add(b, magic, sizeof(magic));
	buf_add(b, v, 2);
	buf_add(b, h->key_ref, CRYPT_REF_LEN);
	buf_add(b, h->nonce_prefix, 8);
	buf_add(b, len, 2);
	add_name(b, c->tenant);
	add_name(b, c->sandbox);
	add_name(b, c->kind);
	add_name(b, c->snapshot);
	hl = b->len - start;
	((uint8_t *)b->data)[start + 32] = (uint8_t)(hl >> 8);
	((uint8_t *)b->data)[start + 33] = (uint8_t)hl;
}

static int take_name(const uint8_t *p, size_t end, size_t *off, char out[CRYPT_NAME_MAX + 1])
{
	size_t len;

	if (*off >= end)
		return -1;
	len = p[*off];
	if (*off + 1 + len > end)
		return -1;
	memcpy(out, p + *off + 1, len);
	out[len] = '\0';
	if (strlen(out) != len)    /* a NUL inside a name */
		return -1;
	*off += 1 + len;
	return 0;
}

int crypt_head_parse(const void *buf, size_t n, struct crypt_head *h, err_t *err)
{
	const uint8_t *p = buf;
	size_t hl, off = CRYPT_HEAD_FIXED;

	memset(h, 0, sizeof(*h));
	if (n < CRYPT_HEAD_FIXED)
		return n >= sizeof(magic) && memcmp(p, magic, sizeof(magic)) != 0
			       ? err_set(err, EBADMSG, "not a sealed object (no ALSEAL header)")
			       : 0;
	if (memcmp(p, magic, sizeof(magic)) != 0)
		return err_set(err, EBADMSG, "not a sealed object (no ALSEAL header)");
	h->version = p[6];
	h->chunk_log2 = p[7];
	if (h->version != 1)
		return err_set(err, EBADMSG, "sealed object format version %u is not known",
			       h->version);
	if (h->chunk_log2 < 12 || h->chunk_log2 > 24)
		return err_set(err, EBADMSG, "sealed object: chunk size 2^%u is out of range",
			       h->chunk_log2);
	memcpy(h->key_ref, p + 8, CRYPT_REF_LEN);
	memcpy(h->nonce_prefix, p + 24, 8);
	hl = (size_t)p[32] << 8 | p[33];
	if (hl < CRYPT_HEAD_FIXED + 4 || hl > CRYPT_HEAD_MAX)
		return err_set(err, EBADMSG, "sealed object: header length %zu is out of range", hl);
	if (n < hl)
		return 0;
	if (take_name(p, hl, &off, h->tenant) < 0 || take_name(p, hl, &off, h->sandbox) < 0 ||
	    take_name(p, hl, &off, h->kind) < 0 || take_name(p, hl, &off, h->snapshot) < 0 ||
	    off != hl)
		return err_set(err, EBADMSG, "sealed object: malformed header");
	h->len = hl;
	return (int)hl;
}

static void aad_build(struct buf *a, const struct crypt_head *h, const struct crypt_ctx *c,
		      uint64_t index, bool final)
{
	uint8_t ix[9];

	buf_reset(a);
	buf_add(a, AAD_LABEL, sizeof(AAD_LABEL));
	buf_add(a, h->key_ref, CRYPT_REF_LEN);
	buf_add(a, h->nonce_prefix, 8);
	buf_add(a, &h->chunk_log2, 1);
	add_name(a, c->tenant);
	add_name(a, c->sandbox);
	add_name(a, c->kind);
	add_name(a, c->snapshot);
	for (int i = 0; i < 8; i++)
		ix[i] = (uint8_t)(index >> (56 - 8 * i));
	ix[8] = final ? 1 : 0;
	buf_add(a, ix, 9);
}

static void nonce_of(const struct crypt_head *h, uint64_t index, uint8_t nonce[12])
{
	memcpy(nonce, h->nonce_prefix, 8);
	for (int i = 0; i < 4; i++)
		nonce[8 + i] = (uint8_t)(index >> (24 - 8 * i));
}

/* One chunk, either way: out gets n bytes (and the tag is written to /
 * checked against tag). 0, or -EBADMSG when open fails authentication. */
static int chunk_crypt(EVP_CIPHER_CTX *cx, bool enc, const uint8_t key[CRYPT_KEY_LEN],
		       const struct crypt_head *h, const struct buf *aad, uint64_t index,
		       const uint8_t *in, size_t n, uint8_t *out, uint8_t tag[CRYPT_TAG_LEN])
{
	uint8_t nonce[12];
	int len = 0, ok;

	nonce_of(h, index, nonce);
	ok = EVP_CipherInit_ex(cx, EVP_aes_256_gcm(), NULL, key, nonce, enc ? 1 : 0) == 1 &&
	     EVP_CipherUpdate(cx, NULL, &len, (const uint8_t *)aad->data, (int)aad->len) == 1 &&
	     (n == 0 || EVP_CipherUpdate(cx, out, &len, in, (int)n) == 1);
	if (ok && !enc)
		ok = EVP_CIPHER_CTX_ctrl(cx, EVP_CTRL_GCM_SET_TAG, CRYPT_TAG_LEN, tag) == 1;
	if (ok)
		ok = EVP_CipherFinal_ex(cx, out + n, &len) == 1;
	if (ok && enc)
		ok = EVP_CIPHER_CTX_ctrl(cx, EVP_CTRL_GCM_GET_TAG, CRYPT_TAG_LEN, tag) == 1;
	return ok ? 0 : -EBADMSG;
}

static int seal_stream(struct src *in, struct sink *out, const uint8_t key[CRYPT_KEY_LEN],
		       const uint8_t ref[CRYPT_REF_LEN], const struct crypt_ctx *c, err_t *err)
{
	const size_t cs = (size_t)1 << CRYPT_CHUNK_LOG2;
	struct crypt_head h = { .version = 1, .chunk_log2 = CRYPT_CHUNK_LOG2 };
	uint8_t *cur = xmalloc(cs + CRYPT_TAG_LEN), *next = xmalloc(cs), *ct = xmalloc(cs + 16);
	EVP_CIPHER_CTX *cx = EVP_CIPHER_CTX_new();
	struct buf head, aad;
	ssize_t n_cur, n_next;
	uint64_t i = 0;
	int r = 0;

	buf_init(&head);
	buf_init(&aad);
	if (!cx)
		abort();
	memcpy(h.key_ref, ref, CRYPT_REF_LEN);
	random_bytes(h.nonce_prefix, sizeof(h.nonce_prefix));
	head_write(&head, &h, c);
	if (sink_write(out, head.data, head.len) < 0) {
		r = err_sys(err, "write the sealed %s", c->kind);
		goto out;
	}
	/* One chunk ahead, so the last one is known as it is sealed. */
	n_cur = src_read(in, cur, cs);
	for (;;) {
		bool final;
		if (n_cur < 0) {
			errno = (int)-n_cur;
			r = err_sys(err, "read the %s artifact", c->kind);
			goto out;
		}
		n_next = (size_t)n_cur == cs ? src_read(in, next, cs) : 0;
		if (n_next < 0) {
			n_cur = n_next;
			continue;
		}
		final = n_next == 0;
		if (i > UINT32_MAX) {
			r = err_set(err, EFBIG, "the %s artifact is too large to seal", c->kind);
			goto out;
		}
		aad_build(&aad, &h, c, i, final);
		if (chunk_crypt(cx, true, key, &h, &aad, i, cur, (size_t)n_cur, ct, ct + n_cur) < 0) {
			r = err_set(err, EIO, "seal chunk %llu of the %s artifact",
				    (unsigned long long)i, c->kind);
			goto out;
		}
		if (sink_write(out, ct, (size_t)n_cur + CRYPT_TAG_LEN) < 0) {
			r = err_sys(err, "write the sealed %s", c->kind);
			goto out;
		}
		if (final)
			break;
		memcpy(cur, next, (size_t)n_next);
		n_cur = n_next;
		i++;
	}
out:
	/* the plaintext chunks go too */
	OPENSSL_cleanse(cur, cs + CRYPT_TAG_LEN);
	OPENSSL_cleanse(next, cs);
	free(cur);
	free(next);
	free(ct);
	EVP_CIPHER_CTX_free(cx);
	buf_free(&head);
	buf_free(&aad);
	return r;
}

static int name_mismatch(const struct crypt_head *h, const struct crypt_ctx *c, err_t *err)
{
	if (strcmp(h->tenant, c->tenant) != 0)
		return err_set(err, EBADMSG, "artifact %s: sealed for another tenant, not %s",
			       c->kind, c->tenant);
	if (strcmp(h->sandbox, c->sandbox) != 0)
		return err_set(err, EBADMSG, "artifact %s: sealed for sandbox %s, not %s", c->kind,
			       h->sandbox, c->sandbox);
	if (strcmp(h->kind, c->kind) != 0)
		return err_set(err, EBADMSG, "artifact %s: is the %s artifact, in the wrong position",
			       c->kind, h->kind);
	if (strcmp(h->snapshot, c->snapshot) != 0)
		return err_set(err, EBADMSG, "artifact %s: sealed for snapshot %s, not %s", c->kind,
			       h->snapshot, c->snapshot);
	return 0;
}

static int read_head(struct src *in, struct crypt_head *h, const char *kind, err_t *err)
{
	uint8_t hb[CRYPT_HEAD_MAX];
	ssize_t got = src_read(in, hb, CRYPT_HEAD_FIXED), more;
	int r;

	if (got < 0) {
		errno = (int)-got;
		return err_sys(err, "artifact %s: read", kind);
	}
	r = crypt_head_parse(hb, (size_t)got, h, err);
	if (r == 0 && got == CRYPT_HEAD_FIXED) {
		size_t hl = (size_t)hb[32] << 8 | hb[33];
		more = src_read(in, hb + got, hl - CRYPT_HEAD_FIXED);
		if (more < 0) {
			errno = (int)-more;
			return err_sys(err, "artifact %s: read", kind);
		}
		r = crypt_head_parse(hb, (size_t)got + (size_t)more, h, err);
	}
	if (r == 0)
		return err_set(err, EBADMSG, "artifact %s: truncated inside its header", kind);
	return r < 0 ? err_wrap(err, "artifact %s", kind) : 0;
}

static int open_stream(struct src *in, struct sink *out, const uint8_t key[CRYPT_KEY_LEN],
		       const struct crypt_ctx *c, err_t *err)
{
	struct crypt_head h;
	size_t cs, cl;
	uint8_t *cur = NULL, *next = NULL, *pt = NULL;
	EVP_CIPHER_CTX *cx = NULL;
	ssize_t n_cur, n_next;
	struct buf aad;
	uint64_t i = 0;
	int r;

	buf_init(&aad);
	if ((r = read_head(in, &h, c->kind, err)) < 0)
		return r;
	if ((r = name_mismatch(&h, c, err)) < 0)
		return r;
	cs = (size_t)1 << h.chunk_log2;
	cl = cs + CRYPT_TAG_LEN;
	cur = xmalloc(cl);
	next = xmalloc(cl);
	pt = xmalloc(cs + 16);
	if (!(cx = EVP_CIPHER_CTX_new()))
		abort();
	n_cur = src_read(in, cur, cl);
	for (;;) {
		bool final;
		size_t n;
		if (n_cur < 0) {
			errno = (int)-n_cur;
			r = err_sys(err, "artifact %s: read", c->kind);
			goto out;
		}
		if (n_cur < CRYPT_TAG_LEN) {
			r = err_set(err, EBADMSG, "artifact %s: truncated: chunk %llu is %zd bytes, "
				    "shorter than its tag", c->kind, (unsigned long long)i, n_cur);
			goto out;
		}
		n_next = (size_t)n_cur == cl ? src_read(in, next, cl) : 0;
		if (n_next < 0) {
			n_cur = n_next;
			continue;
		}
		final = n_next == 0;
		n = (size_t)n_cur - CRYPT_TAG_LEN;
		if (i > UINT32_MAX) {
			r = err_set(err, EBADMSG, "artifact %s: too many chunks", c->kind);
			goto out;
		}
		aad_build(&aad, &h, c, i, final);
		if (chunk_crypt(cx, false, key, &h, &aad, i, cur, n, pt, cur + n) < 0) {
			/* Would it open as a middle chunk? Then the stream was
			 * cut after it: say so rather than "damaged". */
			aad_build(&aad, &h, c, i, !final);
			if (final && chunk_crypt(cx, false, key, &h, &aad, i, cur, n, pt, cur + n) == 0)
				r = err_set(err, EBADMSG, "artifact %s: truncated after chunk %llu "
					    "(its final chunk is missing)", c->kind,
					    (unsigned long long)i);
			else
				r = err_set(err, EBADMSG, "artifact %s: chunk %llu fails authentication "
					    "(damaged, moved, or sealed under another key or for "
					    "another tenant/sandbox/snapshot/position)",
					    c->kind, (unsigned long long)i);
			goto out;
		}
		if (sink_write(out, pt, n) < 0) {
			r = err_sys(err, "artifact %s: write the opened bytes", c->kind);
			goto out;
		}
		if (final)
			break;
		memcpy(cur, next, (size_t)n_next);
		n_cur = n_next;
		i++;
	}
out:
	if (pt)
		OPENSSL_cleanse(pt, cs + 16);
	free(cur);
	free(next);
	free(pt);
	EVP_CIPHER_CTX_free(cx);
	buf_free(&aad);
	return r;
}

int crypt_seal_fd(int in, int out, const uint8_t key[CRYPT_KEY_LEN],
		  const uint8_t ref[CRYPT_REF_LEN], const struct crypt_ctx *ctx,
		  uint64_t *out_bytes, char out_sha256[65], err_t *err)
{
	struct src s = { .fd = in };
	struct sink k = { .fd = out };
	int r;

	if (!ctx_ok(ctx))
		return err_set(err, EINVAL, "seal: a context name is missing or too long");
	if (out_sha256)
		k.md = sha256_start();
	r = seal_stream(&s, &k, key, ref, ctx, err);
	if (out_bytes)
		*out_bytes = k.bytes;
	if (out_sha256)
		sha256_end_hex(k.md, out_sha256);
	return r;
}

int crypt_open_fd(int in, int out, const uint8_t key[CRYPT_KEY_LEN], const struct crypt_ctx *ctx,
		  uint64_t *plain_bytes, err_t *err)
{
	struct src s = { .fd = in };
	struct sink k = { .fd = out };
	int r;

	if (!ctx_ok(ctx))
		return err_set(err, EINVAL, "open: a context name is missing or too long");
	r = open_stream(&s, &k, key, ctx, err);
	if (plain_bytes)
		*plain_bytes = k.bytes;
	return r;
}

int crypt_seal_buf(const void *p, size_t n, const uint8_t key[CRYPT_KEY_LEN],
		   const uint8_t ref[CRYPT_REF_LEN], const struct crypt_ctx *ctx,
		   struct buf *out, err_t *err)
{
	struct src s = { .fd = -1, .p = p, .n = n };
	struct sink k = { .fd = -1, .b = out };

	if (!ctx_ok(ctx))
		return err_set(err, EINVAL, "seal: a context name is missing or too long");
	return seal_stream(&s, &k, key, ref, ctx, err);
}

int crypt_open_buf(const void *p, size_t n, const uint8_t key[CRYPT_KEY_LEN],
		   const struct crypt_ctx *ctx, struct buf *out, err_t *err)
{
	struct src s = { .fd = -1, .p = p, .n = n };
	struct sink k = { .fd = -1, .b = out };

	if (!ctx_ok(ctx))
		return err_set(err, EINVAL, "open: a context name is missing or too long");
	return open_stream(&s, &k, key, ctx, err);
}

/* ---- an opener fed in order (downloads) ----------------------------------- */

/* A worker thread opens and writes out chunk k while the download brings
 * chunk k+1 (one in flight); the last chunk, whose final flag is known only
 * at the end, is opened by crypt_opener_finish. */
struct crypt_opener {
	int out;
	const uint8_t *key;
	struct crypt_ctx ctx;
	struct crypt_head h;
	bool have_head;
	struct buf pend;        /* the header, then bytes of chunks not yet handed over */
	uint64_t index, plain;  /* the next chunk to hand over; plaintext written */
	EVP_CIPHER_CTX *cx;
	uint8_t *pt;
	struct buf aad;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t worker;
	bool started, stop, job;        /* job: job_buf holds a chunk to open */
	uint8_t *job_buf;
	uint64_t job_index;
	err_t err;                      /* under mu once the worker runs */
};

/* Open one chunk (c, len bytes with its tag) and write its plaintext. */
static int open_one(struct crypt_opener *o, EVP_CIPHER_CTX *cx, struct buf *aad, uint8_t *pt,
		    uint8_t *c, size_t len, uint64_t index, bool final, err_t *err)
{
	size_t n = len - CRYPT_TAG_LEN;
	const struct crypt_ctx *cc = &o->ctx;
	int r;

	if (index > UINT32_MAX)
		return err_set(err, EBADMSG, "artifact %s: too many chunks", cc->kind);
	aad_build(aad, &o->h, cc, index, final);
	if (chunk_crypt(cx, false, o->key, &o->h, aad, index, c, n, pt, c + n) < 0) {
		aad_build(aad, &o->h, cc, index, !final);
		if (final && chunk_crypt(cx, false, o->key, &o->h, aad, index, c, n, pt, c + n) == 0)
			return err_set(err, EBADMSG, "artifact %s: truncated after chunk %llu (its "
				       "final chunk is missing)", cc->kind, (unsigned long long)index);
		return err_set(err, EBADMSG, "artifact %s: chunk %llu fails authentication "
			       "(damaged, moved, or sealed under another key or for another "
			       "tenant/sandbox/snapshot/position)", cc->kind,
			       (unsigned long long)index);
	}
	r = write_all(o->out, pt, n);
	OPENSSL_cleanse(pt, n);
	if (r < 0) {
		errno = -r;
		return err_sys(err, "artifact %s: write the opened bytes", cc->kind);
	}
	return 0;
}

static void *opener_worker(void *arg)
{
	struct crypt_opener *o = arg;
	size_t cl = ((size_t)1 << o->h.chunk_log2) + CRYPT_TAG_LEN;
	EVP_CIPHER_CTX *cx = EVP_CIPHER_CTX_new();
	uint8_t *pt = xmalloc(cl);
	struct buf aad;

	if (!cx)
		abort();
	buf_init(&aad);
	pthread_mutex_lock(&o->mu);
	for (;;) {
		err_t e = { 0 };
		int r;

		while (!o->job && !o->stop)
			pthread_cond_wait(&o->cv, &o->mu);
		if (!o->job)
			break;
		pthread_mutex_unlock(&o->mu);
		r = open_one(o, cx, &aad, pt, o->job_buf, cl, o->job_index, false, &e);
		pthread_mutex_lock(&o->mu);
		if (r < 0 && !o->err.code)
			o->err = e;
		else if (r == 0)
			o->plain += cl - CRYPT_TAG_LEN;
		o->job = false;
		pthread_cond_broadcast(&o->cv);
	}
	pthread_mutex_unlock(&o->mu);
	OPENSSL_cleanse(pt, cl);
	free(pt);
	buf_free(&aad);
	EVP_CIPHER_CTX_free(cx);
	return NULL;
}

struct crypt_opener *crypt_opener_new(int out, const uint8_t key[CRYPT_KEY_LEN],
				      const struct crypt_ctx *ctx)
{
	struct crypt_opener *o = xcalloc(1, sizeof(*o));

	o->out = out;
	o->key = key;
	o->ctx = *ctx;
	buf_init(&o->pend);
	buf_init(&o->aad);
	pthread_mutex_init(&o->mu, NULL);
	pthread_cond_init(&o->cv, NULL);
	if (!(o->cx = EVP_CIPHER_CTX_new()))
		abort();
	if (!ctx_ok(ctx))
		err_set(&o->err, EINVAL, "open: a context name is missing or too long");
	return o;
}

/* Wait until the worker has no chunk; its error, if any. */
static int opener_drain(struct crypt_opener *o)
{
	int r;

	pthread_mutex_lock(&o->mu);
	while (o->job)
		pthread_cond_wait(&o->cv, &o->mu);
	r = -o->err.code;
	pthread_mutex_unlock(&o->mu);
	return r;
}

int crypt_opener_write(void *arg, const void *p, size_t n)
{
	struct crypt_opener *o = arg;
	size_t cl;
	int r;

	if ((r = opener_drain(o)) < 0)
		return r;
	buf_add(&o->pend, p, n);
	if (!o->have_head) {
		r = crypt_head_parse(o->pend.data, o->pend.len, &o->h, &o->err);
		if (r < 0)
			return err_wrap(&o->err, "artifact %s", o->ctx.kind);
		if (r == 0)
			return o->pend.len > CRYPT_HEAD_MAX
				       ? err_set(&o->err, EBADMSG, "artifact %s: bad header", o->ctx.kind)
				       : 0;
		if ((r = name_mismatch(&o->h, &o->ctx, &o->err)) < 0)
			return r;
		o->have_head = true;
		cl = ((size_t)1 << o->h.chunk_log2) + CRYPT_TAG_LEN;
		o->pt = xmalloc(cl);
		o->job_buf = xmalloc(cl);
		memmove(o->pend.data, o->pend.data + o->h.len, o->pend.len - o->h.len);
		o->pend.len -= o->h.len;
		o->started = pthread_create(&o->worker, NULL, opener_worker, o) == 0;
	}
	/* a chunk with bytes after it is not the last one: to the worker */
	cl = ((size_t)1 << o->h.chunk_log2) + CRYPT_TAG_LEN;
	while (o->pend.len > cl) {
		if ((r = opener_drain(o)) < 0)
			return r;
		if (o->started) {
			pthread_mutex_lock(&o->mu);
			memcpy(o->job_buf, o->pend.data, cl);
			o->job_index = o->index;
			o->job = true;
			pthread_cond_broadcast(&o->cv);
			pthread_mutex_unlock(&o->mu);
		} else if ((r = open_one(o, o->cx, &o->aad, o->pt, (uint8_t *)o->pend.data, cl,
					 o->index, false, &o->err)) < 0) {
			return r;
		} else {
			o->plain += cl - CRYPT_TAG_LEN;
		}
		o->index++;
		memmove(o->pend.data, o->pend.data + cl, o->pend.len - cl);
		o->pend.len -= cl;
	}
	return 0;
}

static void opener_stop(struct crypt_opener *o)
{
	if (!o->started)
		return;
	pthread_mutex_lock(&o->mu);
	o->stop = true;
	pthread_cond_broadcast(&o->cv);
	pthread_mutex_unlock(&o->mu);
	pthread_join(o->worker, NULL);
	o->started = false;
}

int crypt_opener_finish(struct crypt_opener *o, uint64_t *plain, err_t *err)
{
	int r = opener_drain(o);

	opener_stop(o);
	if (r == 0 && !o->have_head)
		err_set(&o->err, EBADMSG, "artifact %s: truncated inside its header", o->ctx.kind);
	else if (r == 0 && o->pend.len < CRYPT_TAG_LEN)
		err_set(&o->err, EBADMSG, "artifact %s: truncated: chunk %llu is %zu bytes, shorter "
			"than its tag", o->ctx.kind, (unsigned long long)o->index, o->pend.len);
	else if (r == 0 && open_one(o, o->cx, &o->aad, o->pt, (uint8_t *)o->pend.data,
				    o->pend.len, o->index, true, &o->err) == 0)
		o->plain += o->pend.len - CRYPT_TAG_LEN;
	r = 0;
	if (o->err.code) {
		*err = o->err;
		r = -o->err.code;
	}
	if (plain)
		*plain = o->plain;
	return r;
}

void crypt_opener_free(struct crypt_opener *o)
{
	size_t cl;

	if (!o)
		return;
	opener_stop(o);
	cl = o->have_head ? ((size_t)1 << o->h.chunk_log2) + CRYPT_TAG_LEN : 0;
	if (o->pt)
		OPENSSL_cleanse(o->pt, cl);
	if (o->job_buf)
		OPENSSL_cleanse(o->job_buf, cl);
	free(o->pt);
	free(o->job_buf);
	if (o->pend.data)
		OPENSSL_cleanse(o->pend.data, o->pend.len);
	buf_free(&o->pend);
	buf_free(&o->aad);
	EVP_CIPHER_CTX_free(o->cx);
	pthread_mutex_destroy(&o->mu);
	pthread_cond_destroy(&o->cv);
	free(o);
}

int crypt_opener_failed(struct crypt_opener *o, err_t *err)
{
	if (opener_drain(o) == 0)
		return 0;
	*err = o->err;
	return -o->err.code;
}
