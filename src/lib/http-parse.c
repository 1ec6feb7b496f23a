/* http-parse.c - HTTP/1.1 heads and request bodies parsed from bytes,
 * header lookup and percent decoding.
 *
 * Everything a peer sends is untrusted: the server is reachable from tenants
 * (through the api) and the parser runs in every daemon. The parser is
 * strict where leniency has historically caused request smuggling: CRLF line
 * ends only, no obs-fold, no whitespace before ':', one Content-Length of
 * plain digits, Transfer-Encoding only "chunked" and never together with
 * Content-Length. Every buffer has a hard limit.
 *
 * The server reads a request with these (http-server.c) and the client
 * parses response headers with them (http-client.c); http_parse_request
 * parses a whole request from one buffer (fuzz-http).
 */
#include "http-internal.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <strings.h>

/* ---------------------------------------------------------------- helpers */

static bool is_tchar(unsigned char c)
{
	return isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static const char *find_header(const struct http_header *h, size_t n, const char *name)
{
	for (size_t k = 0; k < n; k++)
		if (strcasecmp(h[k].name, name) == 0)
			return h[k].value;
	return NULL;
}

const char *http_req_header(const struct http_req *req, const char *name)
{
	return find_header(req->headers, req->n_headers, name);
}

const char *http_resp_header(const struct http_resp *r, const char *name)
{
	return find_header(r->headers, r->n_headers, name);
}

/* Whether a comma-separated header value lists token (case-insensitive). */
bool http_has_token(const char *v, const char *token)
{
	size_t tl = strlen(token);

	while (v && *v) {
		v += strspn(v, " \t,");
		size_t n = strcspn(v, ",");
		size_t m = n;
		while (m && (v[m - 1] == ' ' || v[m - 1] == '\t'))
			m--;
		if (m == tl && strncasecmp(v, token, tl) == 0)
			return true;
		v += n;
	}
	return false;
}

void http_free_headers(struct http_header *h, size_t n)
{
	for (size_t k = 0; k < n; k++) {
		free(h[k].name);
		free(h[k].value);
	}
}

void http_req_free(struct http_req *req)
{
	if (!req)
		return;
	free(req->target);
	free(req->path);
	free(req->query);
	free(req->body);
	http_free_headers(req->headers, req->n_headers);
	memset(req, 0, sizeof(*req));
}

void http_resp_free(struct http_resp *r)
{
	if (!r)
		return;
	http_free_headers(r->headers, r->n_headers);
	buf_free(&r->body);
	memset(r, 0, sizeof(*r));
}

/* --------------------------------------------------------- percent coding */

/* Strict decoding for the path: routing and authorization look at the
 * decoded form, so anything ambiguous is refused instead of guessed. */
static char *decode_path(const char *s, size_t n, err_t *err)
{
	struct buf b;

	buf_init(&b);
	for (size_t k = 0; k < n; k++) {
		if (s[k] != '%') {
			buf_addc(&b, s[k]);
			continue;
		}
		int hi = -1, lo = -1;
		if (k + 2 < n) {
			hi = hexval((unsigned char)s[k + 1]);
			lo = hexval((unsigned char)s[k + 2]);
		}
		if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
			buf_free(&b);
			err_set(err, EINVAL, "bad percent-encoding in path");
			return NULL;
		}
		buf_addc(&b, (char)(hi << 4 | lo));
		k += 2;
	}
	return buf_steal(&b);
}

/* Form decoding for query values: '+' is a space. A malformed escape or %00
 * is kept literally rather than failing the lookup or truncating the C
 * string, so the handler sees exactly one unambiguous value. */
static char *decode_form(const char *s, size_t n)
{
	struct buf b;

	buf_init(&b);
	for (size_t k = 0; k < n; k++) {
		int hi = -1, lo = -1;
		if (s[k] == '%' && k + 2 < n) {
			hi = hexval((unsigned char)s[k + 1]);
			lo = hexval((unsigned char)s[k + 2]);
		}
		if (s[k] == '+') {
			buf_addc(&b, ' ');
		} else if (hi >= 0 && lo >= 0 && (hi | lo)) {
			buf_addc(&b, (char)(hi << 4 | lo));
			k += 2;
		} else {
			buf_addc(&b, s[k]);
		}
	}
	return buf_steal(&b);
}

void http_query_each(const char *query, http_query_fn fn, void *arg)
{
	const char *q = query ? query : "";

	while (*q) {
		size_t n = strcspn(q, "&");
		const char *eq = memchr(q, '=', n);
		size_t kn = eq ? (size_t)(eq - q) : n;

		/* "a&&b": an empty segment names no parameter */
		if (n) {
			_cleanup_free_ char *k = decode_form(q, kn);
			_cleanup_free_ char *v = eq ? decode_form(eq + 1, n - kn - 1) : xstrdup("");
			if (!fn(arg, k, v))
				return;
		}
		q += n;
		if (*q == '&')
			q++;
	}
}

struct param_find {
	const char *name;
	char *value;
};

static bool param_find(void *arg, const char *k, const char *v)
{
	struct param_find *f = arg;

	if (strcmp(k, f->name) != 0)
		return true;
	f->value = xstrdup(v);
	return false;
}

char *http_query_param(const struct http_req *req, const char *name)
{
	struct param_find f = { .name = name };

	http_query_each(req->query, param_find, &f);
	return f.value;
}

/* ------------------------------------------------------------ head parsing */

size_t http_find_head_end(const char *p, size_t len, size_t *scanned)
{
	size_t k = *scanned > 3 ? *scanned - 3 : 0;

	for (; k + 4 <= len; k++) {
		if (p[k] == '\r' && p[k + 1] == '\n' && p[k + 2] == '\r' && p[k + 3] == '\n')
			return k + 4;
	}
	*scanned = len;
	return 0;
}

/* One header line [p, eol) without its CRLF. */
static int parse_header_line(const char *p, const char *eol, struct http_header *h, err_t *err)
{
	const char *c = p;

	while (c < eol && is_tchar((unsigned char)*c))
		c++;
	if (c == p || c == eol || *c != ':')
		return err_set(err, EINVAL, "malformed header line");
	const char *v = c + 1, *ve = eol;
	while (v < ve && (*v == ' ' || *v == '\t'))
		v++;
	while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
		ve--;
	for (const char *x = v; x < ve; x++) {
		unsigned char u = (unsigned char)*x;
		if ((u < 0x20 && u != '\t') || u == 0x7f)
			return err_set(err, EINVAL, "control character in header value");
	}
	h->name = xstrndup(p, (size_t)(c - p));
	h->value = xstrndup(v, (size_t)(ve - v));
	return 0;
}

int http_parse_header_block(const char *p, const char *end, struct http_header *h,
			    size_t *n, err_t *err)
{
	for (;;) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		if (!eol || eol == p || eol[-1] != '\r')
			return err_set(err, EINVAL, "header line not terminated by CRLF");
		eol--;
		if (eol == p)
			return 0;
		if (*n >= HTTP_MAX_HEADERS)
			return err_set(err, EINVAL, "too many headers (max %d)", HTTP_MAX_HEADERS);
		if (parse_header_line(p, eol, &h[*n], err) < 0)
			return -EINVAL;
		(*n)++;
		p = eol + 2;
	}
}

static int parse_request_line(const char *p, const char *eol, struct http_req *req,
			      bool *http10, err_t *err)
{
	const char *sp1 = memchr(p, ' ', (size_t)(eol - p));
	if (!sp1 || sp1 == p || (size_t)(sp1 - p) >= sizeof(req->method))
		return err_set(err, EINVAL, "malformed request line");
	for (const char *c = p; c < sp1; c++)
		if (!is_tchar((unsigned char)*c))
			return err_set(err, EINVAL, "malformed method");
	memcpy(req->method, p, (size_t)(sp1 - p));
	req->method[sp1 - p] = '\0';

	const char *t = sp1 + 1;
	const char *sp2 = memchr(t, ' ', (size_t)(eol - t));
	if (!sp2 || sp2 == t)
		return err_set(err, EINVAL, "malformed request line");
	for (const char *c = t; c < sp2; c++)
		if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f)
			return err_set(err, EINVAL, "invalid character in request target");
	if (*t != '/')
		return err_set(err, EINVAL, "request target must start with '/'");

	size_t vl = (size_t)(eol - sp2 - 1);
	if (vl == 8 && memcmp(sp2 + 1, "HTTP/1.1", 8) == 0)
		*http10 = false;
	else if (vl == 8 && memcmp(sp2 + 1, "HTTP/1.0", 8) == 0)
		*http10 = true;
	else
		return err_set(err, EINVAL, "unsupported HTTP version");

	size_t tl = (size_t)(sp2 - t);
	req->target = xstrndup(t, tl);
	const char *qm = memchr(t, '?', tl);
	size_t pl = qm ? (size_t)(qm - t) : tl;
	req->query = qm ? xstrndup(qm + 1, tl - pl - 1) : xstrdup("");
	req->path = decode_path(t, pl, err);
	return req->path ? 0 : -EINVAL;
}

int http_parse_clen(const char *v, uint64_t *out, err_t *err)
{
	uint64_t n = 0;

	if (!*v)
		return err_set(err, EINVAL, "empty Content-Length");
	for (const char *c = v; *c; c++) {
		if (*c < '0' || *c > '9' || n > (UINT64_MAX - 9) / 10)
			return err_set(err, EINVAL, "invalid Content-Length");
		n = n * 10 + (uint64_t)(*c - '0');
	}
	*out = n;
	return 0;
}

/* Framing rules from RFC 9112 section 6, minus the lenient parts. */
static int interpret_headers(const struct http_req *req, struct req_info *info, err_t *err)
{
	size_t n_te = 0;

	for (size_t k = 0; k < req->n_headers; k++) {
		const struct http_header *h = &req->headers[k];
		if (strcasecmp(h->name, "Content-Length") == 0) {
			if (info->has_clen)
				return err_set(err, EINVAL, "duplicate Content-Length");
			if (http_parse_clen(h->value, &info->clen, err) < 0)
				return -EINVAL;
			info->has_clen = true;
		} else if (strcasecmp(h->name, "Transfer-Encoding") == 0) {
			n_te++;
			if (n_te > 1 || strcasecmp(h->value, "chunked") != 0)
				return err_set(err, ENOSYS, "unsupported Transfer-Encoding");
			info->chunked = true;
		}
	}
	if (info->chunked && info->has_clen)
		return err_set(err, EINVAL, "both Content-Length and Transfer-Encoding");

	const char *conn = http_req_header(req, "Connection");
	info->keep_alive = info->http10 ? http_has_token(conn, "keep-alive")
					 : !http_has_token(conn, "close");
	const char *expect = http_req_header(req, "Expect");
	info->expect_continue = !info->http10 && expect && strcasecmp(expect, "100-continue") == 0;
	return 0;
}

int http_parse_request_head(const char *p, size_t head_len, struct http_req *req,
			    struct req_info *info, err_t *err)
{
	const char *end = p + head_len;
	const char *eol = memchr(p, '\n', head_len);

	memset(info, 0, sizeof(*info));
	if (!eol || eol == p || eol[-1] != '\r')
		return err_set(err, EINVAL, "malformed request line");
	if (parse_request_line(p, eol - 1, req, &info->http10, err) < 0)
		return -EINVAL;
	if (http_parse_header_block(eol + 1, end, req->headers, &req->n_headers, err) < 0)
		return -EINVAL;
	return interpret_headers(req, info, err);
}

/* ------------------------------------------------------ request parsing */

size_t http_skip_blank_lines(const char *buf, size_t len)
{
	size_t k = 0;

	/* RFC 9112 2.2: ignore CRLFs before a request line (some clients send
	 * one after a POST body). */
	while (k + 2 <= len && buf[k] == '\r' && buf[k + 1] == '\n')
		k += 2;
	return k;
}

static int parse_body_chunked(const char *p, size_t len, size_t max_body,
			      struct http_req *req, size_t *used, err_t *err)
{
	struct dechunk d;
	struct buf body;

	buf_init(&body);
	http_dechunk_init(&d, max_body);
	int r = http_dechunk_feed(&d, p, len, used, http_emit_to_buf, &body);
	if (r < 0 || d.state != DC_DONE) {
		buf_free(&body);
		if (r == -EFBIG)
			return err_set(err, EFBIG, "request body too large (max %zu bytes)", max_body);
		return r < 0 ? err_set(err, EINVAL, "malformed chunked body") : 0;
	}
	req->body_len = body.len;
	req->body = buf_steal(&body);
	return 1;
}

int http_parse_request(const char *buf, size_t len, size_t max_body, struct http_req *req,
		       err_t *err)
{
	struct req_info info;
	size_t scanned = 0, used = 0;
	int r;

	memset(req, 0, sizeof(*req));
	size_t skip = http_skip_blank_lines(buf, len);
	size_t head = http_find_head_end(buf + skip, len - skip, &scanned);
	if (!head || head > HTTP_MAX_HEAD) {
		if (head || len - skip > HTTP_MAX_HEAD)
			return err_set(err, EINVAL, "request head too large");
		return 0;
	}
	r = http_parse_request_head(buf + skip, head, req, &info, err);
	if (r < 0)
		goto fail;
	const char *rest = buf + skip + head;
	size_t avail = len - skip - head;
	if (info.chunked) {
		r = parse_body_chunked(rest, avail, max_body, req, &used, err);
		if (r <= 0)
			goto fail;
	} else if (info.has_clen) {
		r = -EFBIG;
		if (info.clen > max_body) {
			err_set(err, EFBIG, "request body too large (max %zu bytes)", max_body);
			goto fail;
		}
		r = 0;
		if (avail < info.clen)
			goto fail;
		used = (size_t)info.clen;
		/* bodies are binary: memcpy, not a string copy that stops at NUL */
		req->body = xmalloc(used + 1);
		memcpy(req->body, rest, used);
		req->body[used] = '\0';
		req->body_len = used;
	} else {
		req->body = xstrdup("");
	}
	if (skip + head + used > INT_MAX) {
		r = err_set(err, EFBIG, "request too large");
		goto fail;
	}
	return (int)(skip + head + used);
fail:
	http_req_free(req);
	return r;
}
