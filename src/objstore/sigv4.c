/* sigv4.c - AWS Signature Version 4, after
 * https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html
 * (S3 flavour: the path is encoded once and never normalised). */
#include "sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdlib.h>
#include <string.h>

#include "objstore-internal.h"

void sigv4_uri_encode(const char *s, int encode_slash, struct buf *out)
{
	static const char hex[] = "0123456789ABCDEF";

	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		unsigned char c = *p;
		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		    c == '-' || c == '.' || c == '_' || c == '~' || (c == '/' && !encode_slash)) {
			buf_addc(out, (char)c);
		} else {
			buf_addc(out, '%');
			buf_addc(out, hex[c >> 4]);
			buf_addc(out, hex[c & 15]);
		}
	}
}

struct hdr {
	char *name;       /* lower case */
	struct buf value; /* trimmed, joined */
};

static int hdr_cmp(const void *a, const void *b)
{
	return strcmp(((const struct hdr *)a)->name, ((const struct hdr *)b)->name);
}

/* Append value trimmed, runs of spaces (and tabs) made one space. */
static void add_trimmed(struct buf *b, const char *v)
{
	int pending = 0;

	while (*v == ' ' || *v == '\t')
		v++;
	for (; *v; v++) {
		if (*v == ' ' || *v == '\t') {
			pending = 1;
			continue;
		}
		if (pending)
			buf_addc(b, ' ');
		pending = 0;
		buf_addc(b, *v);
	}
}

struct qpair {
	const char *name, *value;
	size_t nl, vl;
};

static int qpair_cmp(const void *a, const void *b)
{
	const struct qpair *x = a, *y = b;
	size_t n = x->nl < y->nl ? x->nl : y->nl;
	int c = memcmp(x->name, y->name, n);

	if (c == 0 && x->nl != y->nl)
		c = x->nl < y->nl ? -1 : 1;
	if (c)
		return c;
	n = x->vl < y->vl ? x->vl : y->vl;
	c = memcmp(x->value, y->value, n);
	if (c == 0 && x->vl != y->vl)
		c = x->vl < y->vl ? -1 : 1;
	return c;
}

static void canonical_query(const char *q, struct buf *out)
{
	struct qpair *v = NULL;
	size_t n = 0, cap = 0;

	while (q && *q) {
		const char *end = strchr(q, '&');
		size_t len = end ? (size_t)(end - q) : strlen(q);
		const char *eq = memchr(q, '=', len);

		if (len) {
			if (n == cap) {
				cap = cap ? 2 * cap : 8;
				v = xrealloc(v, cap * sizeof(*v));
			}
			v[n].name = q;
			v[n].nl = eq ? (size_t)(eq - q) : len;
			v[n].value = eq ? eq + 1 : "";
			v[n].vl = eq ? len - v[n].nl - 1 : 0;
			n++;
		}
		q = end ? end + 1 : NULL;
	}
	if (n)
		qsort(v, n, sizeof(*v), qpair_cmp);
	for (size_t i = 0; i < n; i++) {
		if (i)
			buf_addc(out, '&');
		buf_add(out, v[i].name, v[i].nl);
		buf_addc(out, '=');
		buf_add(out, v[i].value, v[i].vl);
	}
	free(v);
}

void sigv4_canonical_request(const struct sigv4_req *r, struct buf *creq,
			     struct buf *signed_headers)
{
	struct hdr *h = xcalloc(r->n_headers ? r->n_headers : 1, sizeof(*h));
	size_t n = 0;

	buf_reset(creq);
	buf_reset(signed_headers);
	buf_adds(creq, r->method);
	buf_addc(creq, '\n');
	sigv4_uri_encode(r->path && r->path[0] ? r->path : "/", 0, creq);
	buf_addc(creq, '\n');
	canonical_query(r->query, creq);
	buf_addc(creq, '\n');

	/* headers: lower-case names, one entry per name */
	for (size_t i = 0; i < r->n_headers; i++) {
		char *name = xstrdup(r->headers[i].name);
		size_t j;

		for (char *c = name; *c; c++)
			if (*c >= 'A' && *c <= 'Z')
				*c = (char)(*c - 'A' + 'a');
		for (j = 0; j < n && strcmp(h[j].name, name) != 0; j++)
			;
		if (j < n) {
			free(name);
			buf_addc(&h[j].value, ',');
		} else {
			h[n].name = name;
			buf_init(&h[n].value);
			n++;
		}
		add_trimmed(&h[j].value, r->headers[i].value);
	}
	if (n)
		qsort(h, n, sizeof(*h), hdr_cmp);
	for (size_t i = 0; i < n; i++) {
		buf_printf(creq, "%s:%s\n", h[i].name, h[i].value.data ? h[i].value.data : "");
		if (i)
			buf_addc(signed_headers, ';');
		buf_adds(signed_headers, h[i].name);
		free(h[i].name);
		buf_free(&h[i].value);
	}
	free(h);
	buf_addc(creq, '\n');
	buf_adds(creq, signed_headers->data ? signed_headers->data : "");
	buf_addc(creq, '\n');
	buf_adds(creq, r->payload_hash);
}

void sigv4_string_to_sign(const struct sigv4_scope *s, const char *creq, struct buf *sts)
{
	char hex[OBJSTORE_SHA256_HEX];

	sha256_of(creq, strlen(creq), hex);
	buf_reset(sts);
	buf_printf(sts, "AWS4-HMAC-SHA256\n%s\n%.8s/%s/%s/aws4_request\n%s", s->amz_date,
		   s->amz_date, s->region, s->service, hex);
}

static void hmac(const void *key, size_t kl, const char *msg, unsigned char out[32])
{
	unsigned int n = 32;

	if (!HMAC(EVP_sha256(), key, (int)kl, (const unsigned char *)msg, strlen(msg), out, &n))
		abort();
}

void sigv4_signature(const struct sigv4_scope *s, const char *sts, char hex[65])
{
	unsigned char k[32], sig[32];
	char date[9];
	_cleanup_free_ char *secret = xasprintf("AWS4%s", s->secret_key ? s->secret_key : "");

	memcpy(date, s->amz_date, 8);
	date[8] = '\0';
	hmac(secret, strlen(secret), date, k);
	hmac(k, 32, s->region, k);
	hmac(k, 32, s->service, k);
	hmac(k, 32, "aws4_request", k);
	hmac(k, 32, sts, sig);
	hex_encode(sig, 32, hex);
}

char *sigv4_authorization(const struct sigv4_scope *s, const struct sigv4_req *r)
{
	struct buf creq, sh, sts;
	char sig[65];
	char *out;

	buf_init(&creq);
	buf_init(&sh);
	buf_init(&sts);
	sigv4_canonical_request(r, &creq, &sh);
	sigv4_string_to_sign(s, creq.data, &sts);
	sigv4_signature(s, sts.data, sig);
	out = xasprintf("AWS4-HMAC-SHA256 Credential=%s/%.8s/%s/%s/aws4_request, "
			"SignedHeaders=%s, Signature=%s",
			s->access_key ? s->access_key : "", s->amz_date, s->region, s->service,
			sh.data ? sh.data : "", sig);
	buf_free(&creq);
	buf_free(&sh);
	buf_free(&sts);
	return out;
}
