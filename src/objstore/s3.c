/* s3.c - the s3 driver: s3://BUCKET?endpoint=http://HOST:PORT&region=R&path_style=1
 *
 * Every request is signed with AWS Signature V4 (sigv4.c) over the real
 * payload hash. A put stores the object's SHA-256 as user metadata
 * (x-amz-meta-sha256) and a get recomputes it while streaming the body out;
 * HEAD reads it back. Objects above part_size go as a multipart upload whose
 * parts are sent by opts.parallel threads, each from its own pread; any
 * failure aborts the upload so no part is left behind.
 *
 * Retries (opts.retries, exponential backoff with full jitter: a random
 * wait in [0, min(8 s, 100 ms * 2^attempt)]) on connection errors and on
 * 500, 502, 503 (SlowDown), 504 and 429; a get retries only while no byte
 * has gone to the caller. Errors: 404 -ENOENT, 401/403 -EACCES, refused,
 * unreachable or still 5xx/429 after the retries -EHOSTUNREACH, silent
 * -ETIMEDOUT, the rest -EIO, each message
 * with the method, key, status and the server's error code.
 *
 * path_style=0 addresses the bucket as a virtual host: Host BUCKET.HOST,
 * path /KEY (the connection still goes to HOST:PORT). https endpoints are
 * refused (ENOTSUP): run a TLS-terminating proxy on loopback if needed. */
#include "s3-internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sigv4.h"

#define MAX_XML (16u << 20)
#define MAX_PARTS 10000

struct os_s3 {
	struct objstore base;
	char *bucket, *region;
	char *host_header;   /* as sent and signed */
	char *path_prefix;   /* "/BUCKET" (path style) or "" */
	int max_keys;        /* list page size; 0: the server's (1000) */
	struct s3_http http;
};

static struct os_s3 *S(struct objstore *os)
{
	return (struct os_s3 *)os;
}

struct hdr {
	const char *name, *value;
};

/* One signed request, retried as the header says. key NULL: the bucket.
 * query: encoded pairs or NULL. */
struct call {
	const char *method;
	const char *key;
	const char *query;
	const struct hdr *hdrs;
	size_t n_hdrs;
	const void *body;           /* in memory, len bytes; or */
	size_t len;
	const struct os_src *src;   /* read as it is sent (payload_hash set) */
	const char *payload_hash;   /* NULL: computed here from body */
	bool is_head;
	const struct os_sink *sink;
	size_t max_body;
};

static void amz_now(char out[17])
{
	time_t t = time(NULL);
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(out, 17, "%Y%m%dT%H%M%SZ", &tm);
}

static void backoff(int attempt)
{
	uint64_t cap = 100ull << (attempt < 7 ? attempt : 7), r;
	struct timespec ts;

	if (cap > 8000)
		cap = 8000;
	random_bytes(&r, sizeof(r));
	r %= cap + 1;
	ts.tv_sec = (time_t)(r / 1000);
	ts.tv_nsec = (long)(r % 1000) * 1000000L;
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static bool retryable_status(int st)
{
	return st == 500 || st == 502 || st == 503 || st == 504 || st == 429;
}

static int status_error(struct os_s3 *s, const struct call *c, const struct s3_http_resp *resp,
			err_t *err)
{
	char code[128], msg[256];
	int e;

	s3_xml_error(resp->body.data ? resp->body.data : "", resp->body.len, code, sizeof(code), msg,
		     sizeof(msg));
	switch (resp->status) {
	case 404:
		e = ENOENT;
		break;
	case 401:
	case 403:
		e = EACCES;
		break;
	default:
		/* still 5xx (or 429) after every retry: the store is out of
		 * service, as when it does not answer (the node's 503
		 * store_unavailable, for the user to retry), not the node's
		 * own fault (500 internal) */
		if (retryable_status(resp->status)) {
			e = EHOSTUNREACH;
			break;
		}
		e = EIO;
	}
	return err_set(err, e, "objstore s3 %s %s/%s: HTTP %d%s%s%s%s", c->method, s->bucket,
		       c->key ? c->key : "", resp->status, code[0] ? " " : "", code,
		       msg[0] ? ": " : "", msg);
}

/* 0 with resp holding a 2xx answer, or an error (resp freed by the caller
 * either way). */
static int s3_call(struct os_s3 *s, const struct call *c, struct s3_http_resp *resp, err_t *err)
{
	char payload[OBJSTORE_SHA256_HEX], date[17];
	_cleanup_free_ char *path = c->key ? xasprintf("%s/%s", s->path_prefix, c->key)
					   : xstrdup(s->path_prefix[0] ? s->path_prefix : "/");
	struct os_src mem = { .buf = c->body, .fd = -1, .size = c->len };
	struct buf target, head;
	int r = 0;

	if (c->payload_hash)
		snprintf(payload, sizeof(payload), "%s", c->payload_hash);
	else
		sha256_of(c->body, c->len, payload);
	buf_init(&target);
	sigv4_uri_encode(path, 0, &target);
	if (c->query && c->query[0]) {
		buf_addc(&target, '?');
		buf_adds(&target, c->query);
	}
	buf_init(&head);
	for (int attempt = 0; attempt <= s->base.opts.retries; attempt++) {
		struct sigv4_header h[8];
		size_t n = 0;

		if (attempt)
			backoff(attempt - 1);
		amz_now(date);
		h[n++] = (struct sigv4_header){ "host", s->host_header };
		h[n++] = (struct sigv4_header){ "x-amz-content-sha256", payload };
		h[n++] = (struct sigv4_header){ "x-amz-date", date };
		for (size_t i = 0; i < c->n_hdrs && n < ARRAY_SIZE(h); i++)
			h[n++] = (struct sigv4_header){ c->hdrs[i].name, c->hdrs[i].value };
		struct sigv4_req sr = { c->method, path, c->query, h, n, payload };
		struct sigv4_scope sc = { s->base.opts.access_key, s->base.opts.secret_key,
					  s->region, "s3", date };
		_cleanup_free_ char *auth = sigv4_authorization(&sc, &sr);

		buf_reset(&head);
		buf_printf(&head, "%s %s HTTP/1.1\r\n", c->method, target.data);
		for (size_t i = 0; i < n; i++)
			buf_printf(&head, "%s: %s\r\n", h[i].name, h[i].value);
		buf_printf(&head, "Authorization: %s\r\n", auth);
		err_clear(err);
		r = s3_http_do(&s->http, head.data, c->src ? c->src : c->len ? &mem : NULL,
			       c->is_head, c->sink, c->max_body, resp, err);
		if (r < 0) {
			if (resp->sink_failed)
				break;  /* the caller's error, not the server's */
			err_wrap(err, "objstore s3 %s %s/%s", c->method, s->bucket,
				 c->key ? c->key : "");
			if (resp->delivered)
				break;  /* bytes already went out: a retry would repeat them */
			continue;
		}
		if (resp->status >= 200 && resp->status < 300)
			break;
		r = status_error(s, c, resp, err);
		if (!retryable_status(resp->status))
			break;
	}
	buf_free(&target);
	buf_free(&head);
	return r;
}

static int simple(struct os_s3 *s, const struct call *c, err_t *err)
{
	struct s3_http_resp resp = { 0 };
	int r = s3_call(s, c, &resp, err);

	s3_http_resp_free(&resp);
	return r;
}

/* put */

/* The SHA-256 of src's bytes, read a MiB at a time, into hex; with parts
 * (part_size > 0), each part's too, into parts[i]. */
static int hash_parts(const struct os_src *src, const char *key, uint64_t part_size,
		      char hex[OBJSTORE_SHA256_HEX], char (*parts)[OBJSTORE_SHA256_HEX],
		      err_t *err)
{
	_cleanup_free_ char *chunk = NULL;
	EVP_MD_CTX *h, *ph = NULL;
	size_t pi = 0;

	if (src->buf && !parts) {
		sha256_of(src->buf, (size_t)src->size, hex);
		return 0;
	}
	h = sha256_start();
	chunk = xmalloc(1u << 20);
	for (uint64_t pos = 0; pos < src->size;) {
		uint64_t left = src->size - pos;
		if (parts)   /* no chunk spans two parts */
			left = part_size - pos % part_size < left ? part_size - pos % part_size : left;
		size_t n = left < (1u << 20) ? (size_t)left : (1u << 20);
		int r = os_src_read(src, pos, chunk, n);
		if (r < 0) {
			EVP_MD_CTX_free(h);
			EVP_MD_CTX_free(ph);
			errno = -r;
			return err_sys(err, "objstore s3 put %s: cannot read the source", key);
		}
		sha256_add(h, chunk, n);
		if (parts && !ph)
			ph = sha256_start();
		if (ph)
			sha256_add(ph, chunk, n);
		pos += n;
		if (ph && (pos % part_size == 0 || pos == src->size)) {
			sha256_end_hex(ph, parts[pi++]);
			ph = NULL;
		}
	}
	sha256_end_hex(h, hex);
	return 0;
}

/* One PUT: the source hashed, then sent as it is read again (never held
 * whole in memory: a 100 MiB artifact malloc'd and filled cost the upload
 * a fifth of its time here). */
static int put_single(struct os_s3 *s, const char *key, const struct os_src *src,
		      char hex[OBJSTORE_SHA256_HEX], err_t *err)
{
	_cleanup_free_ char *mem = NULL;
	struct os_src whole = { .fd = -1, .size = src->size };
	int r;

	/* a pipe is read once, so into memory (at most a part's size) */
	if (!src->buf && !src->read_at && src->off < 0) {
		mem = xmalloc(src->size ? (size_t)src->size : 1);
		if ((r = os_src_read(src, 0, mem, (size_t)src->size)) < 0) {
			errno = -r;
			return err_sys(err, "objstore s3 put %s: cannot read the source", key);
		}
		whole.buf = mem;
		src = &whole;
	}
	if (src->sha256)
		memcpy(hex, src->sha256, OBJSTORE_SHA256_HEX);
	else if ((r = hash_parts(src, key, 0, hex, NULL, err)) < 0)
		return r;
	struct hdr h[] = { { "x-amz-meta-sha256", hex },
			   { "content-type", "application/octet-stream" } };
	struct call c = { .method = "PUT", .key = key, .hdrs = h, .n_hdrs = ARRAY_SIZE(h),
			  .src = src, .payload_hash = hex, .max_body = MAX_XML };
	return simple(s, &c, err);
}

struct mp {
	struct os_s3 *s;
	const char *key;
	const struct os_src *src;
	char upload_id[1024];
	char *enc_id;           /* upload_id, URI-encoded */
	uint64_t part_size;
	size_t n_parts;
	char (*etags)[128];
	/* each part's: from the one hash pass, or (the object's digest
	 * known) each hashed by its sender first */
	char (*shas)[OBJSTORE_SHA256_HEX];
	bool hash_each;
	pthread_mutex_t mu;
	size_t next;
	bool failed;
	err_t err;              /* the first failure */
};

static void mp_fail(struct mp *m, const err_t *e)
{
	pthread_mutex_lock(&m->mu);
	if (!m->failed) {
		m->failed = true;
		m->err = *e;
	}
	pthread_mutex_unlock(&m->mu);
}

/* A part: len bytes of the object's source from off. */
struct part_src {
	const struct os_src *src;
	uint64_t off;
};

static int part_read_at(void *arg, uint64_t pos, void *p, size_t n)
{
	const struct part_src *ps = arg;

	return os_src_read(ps->src, ps->off + pos, p, n);
}

static void part_stored(void *arg, uint64_t n)
{
	const struct part_src *ps = arg;

	os_src_stored(ps->src, n);
}

static void *mp_worker(void *arg)
{
	struct mp *m = arg;

	for (;;) {
		size_t i;
		err_t e = { 0 };

		pthread_mutex_lock(&m->mu);
		i = m->next++;
		bool stop = m->failed || i >= m->n_parts;
		pthread_mutex_unlock(&m->mu);
		if (stop)
			break;
		uint64_t off = i * m->part_size;
		uint64_t len = m->src->size - off < m->part_size ? m->src->size - off : m->part_size;
		struct part_src ps = { m->src, off };
		struct os_src part = { .fd = -1, .size = len, .read_at = part_read_at,
				       .progress = part_stored, .arg = &ps };
		_cleanup_free_ char *q = xasprintf("partNumber=%zu&uploadId=%s", i + 1, m->enc_id);
		struct call c = { .method = "PUT", .key = m->key, .query = q, .src = &part,
				  .payload_hash = m->shas[i], .max_body = MAX_XML };
		struct s3_http_resp resp = { 0 };
		int r = m->hash_each ? hash_parts(&part, m->key, 0, m->shas[i], NULL, &e) : 0;

		if (r == 0)
			r = s3_call(m->s, &c, &resp, &e);

		if (r == 0 && !resp.etag[0])
			r = err_set(&e, EPROTO, "objstore s3 put %s: part %zu: no ETag in the answer",
				    m->key, i + 1);
		if (r == 0)
			memcpy(m->etags[i], resp.etag, sizeof(m->etags[i]));
		s3_http_resp_free(&resp);
		if (r < 0) {
			err_wrap(&e, "part %zu", i + 1);
			mp_fail(m, &e);
			break;
		}
	}
	return NULL;
}

static void xml_escape(struct buf *b, const char *s)
{
	for (; *s; s++) {
		if (*s == '&')
			buf_adds(b, "&amp;");
		else if (*s == '<')
			buf_adds(b, "&lt;");
		else if (*s == '>')
			buf_adds(b, "&gt;");
		else
			buf_addc(b, *s);
	}
}

static int put_multipart(struct os_s3 *s, const char *key, const struct os_src *src,
			 char hex[OBJSTORE_SHA256_HEX], err_t *err)
{
	struct mp m = { .s = s, .key = key, .src = src, .part_size = s->base.opts.part_size };
	struct s3_http_resp resp = { 0 };
	struct buf enc;
	int r;

	if (!src->buf && !src->read_at && src->off < 0)
		return err_set(err, ESPIPE,
			       "objstore s3 put %s: %llu bytes go as a multipart upload, which "
			       "needs a regular file, not a pipe", key, (unsigned long long)src->size);
	m.n_parts = (size_t)((src->size + m.part_size - 1) / m.part_size);
	if (m.n_parts > MAX_PARTS)
		return err_set(err, EFBIG, "objstore s3 put %s: %llu bytes need more than %d parts "
			       "of %llu bytes", key, (unsigned long long)src->size, MAX_PARTS,
			       (unsigned long long)m.part_size);
	/* the object's digest goes with CreateMultipartUpload, so, unless
	 * known, first hash it all, and each part's on the same pass (its
	 * request is signed with it): the parts are then read once more, as
	 * they are sent */
	m.shas = xcalloc(m.n_parts, sizeof(*m.shas));
	m.hash_each = src->sha256 != NULL;
	if (m.hash_each)
		memcpy(hex, src->sha256, OBJSTORE_SHA256_HEX);
	else if ((r = hash_parts(src, key, m.part_size, hex, m.shas, err)) < 0) {
		free(m.shas);
		return r;
	}

	struct hdr hd[] = { { "x-amz-meta-sha256", hex },
			    { "content-type", "application/octet-stream" } };
	struct call c = { .method = "POST", .key = key, .query = "uploads=", .hdrs = hd,
			  .n_hdrs = ARRAY_SIZE(hd), .max_body = MAX_XML };
	r = s3_call(s, &c, &resp, err);
	if (r == 0 && s3_xml_upload_id(resp.body.data ? resp.body.data : "", resp.body.len,
				       m.upload_id, sizeof(m.upload_id)) < 0)
		r = err_set(err, EPROTO, "objstore s3 put %s: CreateMultipartUpload: no UploadId in "
			    "the answer", key);
	s3_http_resp_free(&resp);
	if (r < 0)
		return r;
	buf_init(&enc);
	sigv4_uri_encode(m.upload_id, 1, &enc);
	m.enc_id = enc.data;

	/* the parts, opts.parallel at a time */
	int nt = s->base.opts.parallel < (int)m.n_parts ? s->base.opts.parallel : (int)m.n_parts;
	pthread_t tid[64];
	int started = 0;
	m.etags = xcalloc(m.n_parts, sizeof(*m.etags));
	pthread_mutex_init(&m.mu, NULL);
	for (int i = 0; i < nt; i++) {
		if (pthread_create(&tid[i], NULL, mp_worker, &m) != 0)
			break;
		started++;
	}
	if (started == 0)
		mp_worker(&m);
	for (int i = 0; i < started; i++)
		pthread_join(tid[i], NULL);
	pthread_mutex_destroy(&m.mu);

	_cleanup_free_ char *q = xasprintf("uploadId=%s", m.enc_id);
	if (!m.failed) {
		struct buf x;
		buf_init(&x);
		buf_adds(&x, "<CompleteMultipartUpload>");
		for (size_t i = 0; i < m.n_parts; i++) {
			buf_printf(&x, "<Part><PartNumber>%zu</PartNumber><ETag>", i + 1);
			xml_escape(&x, m.etags[i]);
			buf_adds(&x, "</ETag></Part>");
		}
		buf_adds(&x, "</CompleteMultipartUpload>");
		struct hdr ct[] = { { "content-type", "application/xml" } };
		struct call cc = { .method = "POST", .key = key, .query = q, .hdrs = ct, .n_hdrs = 1,
				   .body = x.data, .len = x.len, .max_body = MAX_XML };
		memset(&resp, 0, sizeof(resp));
		r = s3_call(s, &cc, &resp, err);
		/* S3 may answer 200 and then an <Error> */
		if (r == 0 && !s3_xml_complete_ok(resp.body.data ? resp.body.data : "", resp.body.len)) {
			char code[128], msg[256];
			s3_xml_error(resp.body.data ? resp.body.data : "", resp.body.len, code,
				     sizeof(code), msg, sizeof(msg));
			r = err_set(err, EIO, "objstore s3 put %s: CompleteMultipartUpload failed: %s %s",
				    key, code[0] ? code : "(no result)", msg);
		}
		s3_http_resp_free(&resp);
		buf_free(&x);
	} else {
		*err = m.err;
		r = -(err->code ? err->code : EIO);
	}
	if (r < 0) {
		/* leave no parts behind; the first error is the one to report */
		err_t ae = { 0 };
		struct call ac = { .method = "DELETE", .key = key, .query = q, .max_body = MAX_XML };
		(void)simple(s, &ac, &ae);
	}
	free(m.etags);
	free(m.shas);
	buf_free(&enc);
	return r;
}

static int s3_put(struct objstore *os, const char *key, const struct os_src *src,
		  char sha256_hex[OBJSTORE_SHA256_HEX], err_t *err)
{
	struct os_s3 *s = S(os);

	if (src->size > s->base.opts.part_size)
		return put_multipart(s, key, src, sha256_hex, err);
	return put_single(s, key, src, sha256_hex, err);
}

/* get */

struct hash_sink {
	const struct os_sink *out;
	EVP_MD_CTX *h;
	uint64_t n;
};

static int hash_write(void *arg, const void *p, size_t n)
{
	struct hash_sink *hs = arg;

	sha256_add(hs->h, p, n);
	hs->n += n;
	return hs->out->write(hs->out->arg, p, n);
}

static int s3_get(struct objstore *os, const char *key, const struct os_sink *sink,
		  uint64_t *size, char sha256_hex[OBJSTORE_SHA256_HEX], err_t *err)
{
	struct os_s3 *s = S(os);
	struct hash_sink hs = { sink, sha256_start(), 0 };
	struct os_sink hsink = { hash_write, &hs };
	struct call c = { .method = "GET", .key = key, .sink = &hsink, .max_body = MAX_XML };
	struct s3_http_resp resp = { 0 };
	int r = s3_call(s, &c, &resp, err);

	if (r < 0) {
		EVP_MD_CTX_free(hs.h);
		s3_http_resp_free(&resp);
		if (resp.sink_failed)
			return r == -EFBIG ? err_set(err, EFBIG, "objstore s3 get %s: larger than asked for", key)
					   : (errno = -r, err_sys(err, "objstore s3 get %s: cannot write out", key));
		return r;
	}
	sha256_end_hex(hs.h, sha256_hex);
	if (!resp.meta_sha256[0])
		r = err_set(err, EBADMSG, "objstore s3 get %s: the object has no stored sha256 "
			    "(x-amz-meta-sha256)", key);
	else if (strcmp(resp.meta_sha256, sha256_hex) != 0)
		r = err_set(err, EBADMSG, "objstore s3 get %s: checksum mismatch: stored sha256 %s, "
			    "read %s", key, resp.meta_sha256, sha256_hex);
	*size = hs.n;
	s3_http_resp_free(&resp);
	return r;
}

static int s3_head(struct objstore *os, const char *key, uint64_t *size,
		   char sha256_hex[OBJSTORE_SHA256_HEX], err_t *err)
{
	struct os_s3 *s = S(os);
	struct call c = { .method = "HEAD", .key = key, .is_head = true, .max_body = MAX_XML };
	struct s3_http_resp resp = { 0 };
	int r = s3_call(s, &c, &resp, err);

	if (r == 0 && !resp.meta_sha256[0])
		r = err_set(err, EBADMSG, "objstore s3 head %s: the object has no stored sha256 "
			    "(x-amz-meta-sha256)", key);
	if (r == 0) {
		*size = resp.content_length;
		memcpy(sha256_hex, resp.meta_sha256, OBJSTORE_SHA256_HEX);
	}
	s3_http_resp_free(&resp);
	return r;
}

static int s3_del(struct objstore *os, const char *key, err_t *err)
{
	struct call c = { .method = "DELETE", .key = key, .max_body = MAX_XML };
	int r = simple(S(os), &c, err);

	return r == -ENOENT ? 0 : r;
}

/* list
 *
 * Every page is read before fn hears of any key, and the keys are sorted
 * here: S3 answers in byte order, but not every S3-compatible server does
 * (s3rver walks its directories), and objstore_list promises key order. */

struct list_walk {
	const char *prefix;
	struct list_ent {
		char *key;
		uint64_t size;
	} *v;
	size_t n, cap;
};

static int list_each(void *arg, const char *key, uint64_t size)
{
	struct list_walk *w = arg;

	/* what the server sends is checked: only our keys, under the prefix */
	if (!objstore_key_valid(key) || strncmp(key, w->prefix, strlen(w->prefix)) != 0)
		return 0;
	if (w->n == w->cap) {
		w->cap = w->cap ? 2 * w->cap : 256;
		w->v = xrealloc(w->v, w->cap * sizeof(*w->v));
	}
	w->v[w->n].key = xstrdup(key);
	w->v[w->n++].size = size;
	return 0;
}

static int ent_cmp(const void *a, const void *b)
{
	return strcmp(((const struct list_ent *)a)->key, ((const struct list_ent *)b)->key);
}

static int s3_list(struct objstore *os, const char *prefix, objstore_list_fn fn, void *arg,
		   err_t *err)
{
	struct os_s3 *s = S(os);
	struct list_walk w = { .prefix = prefix };
	char token[2048] = "", prev[2048] = "";
	int r = 0;

	for (int page = 0;; page++) {
		struct buf q;
		struct s3_http_resp resp = { 0 };
		bool truncated = false;

		buf_init(&q);
		buf_adds(&q, "list-type=2");
		if (s->max_keys)
			buf_printf(&q, "&max-keys=%d", s->max_keys);
		buf_adds(&q, "&prefix=");
		sigv4_uri_encode(prefix, 1, &q);
		if (page) {
			buf_adds(&q, "&continuation-token=");
			sigv4_uri_encode(token, 1, &q);
		}
		struct call c = { .method = "GET", .query = q.data, .max_body = MAX_XML };
		r = s3_call(s, &c, &resp, err);
		if (r == 0) {
			snprintf(prev, sizeof(prev), "%s", token);
			r = s3_xml_list(resp.body.data ? resp.body.data : "", resp.body.len, list_each,
					&w, &truncated, token, sizeof(token));
			if (r < 0)
				r = err_set(err, EPROTO, "objstore s3 list %s/%s: malformed ListObjectsV2 "
					    "answer", s->bucket, prefix);
			else if (truncated && strcmp(token, prev) == 0)
				r = err_set(err, EPROTO, "objstore s3 list %s/%s: the server repeats its "
					    "continuation token", s->bucket, prefix);
		}
		s3_http_resp_free(&resp);
		buf_free(&q);
		if (r != 0 || !truncated)
			break;
	}
	if (r == 0 && w.n)
		qsort(w.v, w.n, sizeof(*w.v), ent_cmp);
	/* a key twice (pages that overlap) is reported once */
	for (size_t i = 0; i < w.n && r == 0; i++)
		if (!(i && strcmp(w.v[i].key, w.v[i - 1].key) == 0))
			r = fn(arg, w.v[i].key, w.v[i].size);
	for (size_t i = 0; i < w.n; i++)
		free(w.v[i].key);
	free(w.v);
	return r;
}

static void s3_close(struct objstore *os)
{
	struct os_s3 *s = S(os);

	s3_http_fini(&s->http);
	free(s->bucket);
	free(s->region);
	free(s->host_header);
	free(s->path_prefix);
	os_opts_free(os);
	free(s);
}

static const struct objstore_ops s3_ops = {
	.name = "s3",
	.put = s3_put,
	.get = s3_get,
	.head = s3_head,
	.del = s3_del,
	.list = s3_list,
	.close = s3_close,
};

/* URL */

static char *pct_decode(const char *s, size_t n)
{
	struct buf b;

	buf_init(&b);
	for (size_t i = 0; i < n; i++) {
		int hi, lo;
		if (s[i] == '%' && i + 2 < n &&
		    (hi = hexval((unsigned char)s[i + 1])) >= 0 &&
		    (lo = hexval((unsigned char)s[i + 2])) >= 0 && (hi || lo)) {
			buf_addc(&b, (char)(hi * 16 + lo));
			i += 2;
		} else {
			buf_addc(&b, s[i]);
		}
	}
	buf_add(&b, "", 0);
	return buf_steal(&b);
}

static bool bucket_valid(const char *b)
{
	size_t n = strlen(b);

	if (n < 1 || n > 255)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= 'A' && b[i] <= 'Z') ||
		      (b[i] >= '0' && b[i] <= '9') || b[i] == '.' || b[i] == '-' || b[i] == '_'))
			return false;
	return true;
}

struct objstore *os_s3_open(const char *rest, const struct objstore_opts *opts, err_t *err)
{
	const char *q = strchr(rest, '?');
	_cleanup_free_ char *bucket = xstrndup(rest, q ? (size_t)(q - rest) : strlen(rest));
	_cleanup_free_ char *endpoint = NULL, *region = NULL;
	_cleanup_free_ char *host = NULL, *port = NULL;
	int path_style = 1, max_keys = 0, part_mib = 0;
	struct os_s3 *s;

	if (!bucket_valid(bucket)) {
		err_set(err, EINVAL, "objstore: `s3://%.200s`: bad bucket name", rest);
		return NULL;
	}
	for (const char *p = q ? q + 1 : NULL; p && *p;) {
		const char *end = strchr(p, '&');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		const char *eq = memchr(p, '=', len);
		_cleanup_free_ char *name = xstrndup(p, eq ? (size_t)(eq - p) : len);
		_cleanup_free_ char *val = eq ? pct_decode(eq + 1, len - (size_t)(eq + 1 - p))
					      : xstrdup("");

		if (strcmp(name, "endpoint") == 0) {
			free(endpoint);
			endpoint = TAKE_PTR(val);
		} else if (strcmp(name, "region") == 0) {
			free(region);
			region = TAKE_PTR(val);
		} else if (strcmp(name, "path_style") == 0 && (!strcmp(val, "0") || !strcmp(val, "1"))) {
			path_style = val[0] == '1';
		} else if (strcmp(name, "max_keys") == 0 && atoi(val) > 0 && atoi(val) <= 1000) {
			max_keys = atoi(val);
		} else if (strcmp(name, "part_mib") == 0 && strspn(val, "0123456789") == strlen(val) &&
			   atoi(val) >= 5 && atoi(val) <= 5120) {
			/* S3's bounds: parts of at least 5 MiB, one PUT of at most 5 GiB */
			part_mib = atoi(val);
		} else {
			err_set(err, EINVAL, "objstore: `s3://%.200s`: unknown or bad parameter `%.40s`",
				rest, name);
			return NULL;
		}
		p = end ? end + 1 : NULL;
	}
	if (!endpoint) {
		err_set(err, EINVAL, "objstore: `s3://%.200s`: no endpoint=http://HOST:PORT", rest);
		return NULL;
	}
	if (strncmp(endpoint, "https://", 8) == 0) {
		err_set(err, ENOTSUP, "objstore: endpoint `%.200s`: https is not supported; use an "
			"http endpoint (e.g. a TLS proxy on loopback)", endpoint);
		return NULL;
	}
	if (strncmp(endpoint, "http://", 7) != 0) {
		err_set(err, EINVAL, "objstore: endpoint `%.200s`: want http://HOST[:PORT]", endpoint);
		return NULL;
	}
	/* http://HOST[:PORT][/] or http://[V6][:PORT][/] */
	{
		const char *h = endpoint + 7, *hend, *pp = NULL;
		size_t len = strlen(h);

		if (len && h[len - 1] == '/')
			len--;
		if (h[0] == '[') {
			hend = memchr(h, ']', len);
			if (!hend) {
				err_set(err, EINVAL, "objstore: endpoint `%.200s`: bad host", endpoint);
				return NULL;
			}
			host = xstrndup(h + 1, (size_t)(hend - h - 1));
			hend++;
		} else {
			hend = h;
			while ((size_t)(hend - h) < len && *hend != ':')
				hend++;
			host = xstrndup(h, (size_t)(hend - h));
		}
		if ((size_t)(hend - h) < len) {
			if (*hend != ':') {
				err_set(err, EINVAL, "objstore: endpoint `%.200s`: bad host", endpoint);
				return NULL;
			}
			pp = hend + 1;
			port = xstrndup(pp, len - (size_t)(pp - h));
		} else {
			port = xstrdup("80");
		}
		int pn = atoi(port);
		if (!host[0] || strspn(port, "0123456789") != strlen(port) || pn < 1 || pn > 65535 ||
		    strpbrk(host, "/?#@ ")) {
			err_set(err, EINVAL, "objstore: endpoint `%.200s`: bad host or port", endpoint);
			return NULL;
		}
	}
	s = xcalloc(1, sizeof(*s));
	s->base.ops = &s3_ops;
	os_opts_init(&s->base, opts);
	if (part_mib)
		s->base.opts.part_size = (uint64_t)part_mib << 20;
	s->bucket = TAKE_PTR(bucket);
	s->region = region ? TAKE_PTR(region) : xstrdup("us-east-1");
	s->max_keys = max_keys;
	{
		bool v6 = strchr(host, ':') != NULL;
		_cleanup_free_ char *hp = strcmp(port, "80") == 0
			? xasprintf(v6 ? "[%s]" : "%s", host)
			: xasprintf(v6 ? "[%s]:%s" : "%s:%s", host, port);
		s->host_header = path_style ? xstrdup(hp) : xasprintf("%s.%s", s->bucket, hp);
		s->path_prefix = path_style ? xasprintf("/%s", s->bucket) : xstrdup("");
	}
	s3_http_init(&s->http, host, port, s->base.opts.timeout_ms);
	return &s->base;
}
