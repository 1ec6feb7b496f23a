/* s3-xml.c - the few XML documents an S3 server answers with, read by a
 * small scanner that knows elements, text, the five named entities and
 * numeric references, CDATA, comments, processing instructions and
 * attributes (skipped). It checks nesting, caps depth, path and text sizes,
 * and reports each element's start and end (with its own text) as a
 * '/'-joined path, so each document's reader is a few string compares.
 * Input is untrusted (tests/fuzz/fuzz-s3xml.c): anything it does not
 * understand is -EPROTO, never a crash. */
#include "s3-internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define XML_MAX_DEPTH 32
#define XML_MAX_PATH 512
#define XML_MAX_TEXT (16u << 10)

enum { XML_START, XML_END };

/* ev: XML_START or XML_END; text (NUL-terminated, entities decoded) only at
 * XML_END: the element's text since its last child. Non-zero stops. */
typedef int (*xml_fn)(void *arg, int ev, const char *path, int depth, const char *text,
		      size_t tl);

static size_t find(const char *p, size_t n, size_t from, const char *needle)
{
	size_t nl = strlen(needle);

	for (size_t i = from; i + nl <= n; i++)
		if (memcmp(p + i, needle, nl) == 0)
			return i;
	return (size_t)-1;
}

static bool name_char(char c)
{
	return !(c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '/' || c == '>' ||
		 c == '<' || c == '=' || c == '\0' || c == '"' || c == '\'');
}

static void put_utf8(struct buf *b, uint32_t cp)
{
	if (cp < 0x80) {
		buf_addc(b, (char)cp);
	} else if (cp < 0x800) {
		buf_addc(b, (char)(0xc0 | (cp >> 6)));
		buf_addc(b, (char)(0x80 | (cp & 0x3f)));
	} else if (cp < 0x10000) {
		buf_addc(b, (char)(0xe0 | (cp >> 12)));
		buf_addc(b, (char)(0x80 | ((cp >> 6) & 0x3f)));
		buf_addc(b, (char)(0x80 | (cp & 0x3f)));
	} else {
		buf_addc(b, (char)(0xf0 | (cp >> 18)));
		buf_addc(b, (char)(0x80 | ((cp >> 12) & 0x3f)));
		buf_addc(b, (char)(0x80 | ((cp >> 6) & 0x3f)));
		buf_addc(b, (char)(0x80 | (cp & 0x3f)));
	}
}

/* Decode the entity at p[0] == '&' (n bytes left) into text; returns the
 * bytes consumed or -EPROTO. */
static int entity(const char *p, size_t n, struct buf *text)
{
	static const struct { const char *name; char c; } named[] = {
		{ "amp;", '&' }, { "lt;", '<' }, { "gt;", '>' }, { "quot;", '"' }, { "apos;", '\'' },
	};
	const char *semi = memchr(p, ';', n < 16 ? n : 16);

	if (!semi)
		return -EPROTO;
	for (size_t i = 0; i < ARRAY_SIZE(named); i++) {
		size_t l = strlen(named[i].name);
		if ((size_t)(semi - p) == l && memcmp(p + 1, named[i].name, l) == 0) {
			buf_addc(text, named[i].c);
			return (int)l + 1;
		}
	}
	if (semi - p >= 3 && p[1] == '#') {
		int hex = p[2] == 'x';
		uint32_t cp = 0;
		const char *d = p + 2 + hex;
		if (d == semi)
			return -EPROTO;
		for (; d < semi; d++) {
			int v = hexval((unsigned char)*d);
			if (v < 0 || (!hex && v > 9))
				return -EPROTO;
			cp = cp * (hex ? 16u : 10u) + (uint32_t)v;
			if (cp > 0x10ffff)
				return -EPROTO;
		}
		if (cp == 0 || (cp >= 0xd800 && cp <= 0xdfff))
			return -EPROTO;
		put_utf8(text, cp);
		return (int)(semi - p) + 1;
	}
	return -EPROTO;
}

static int xml_scan(const char *p, size_t n, xml_fn fn, void *arg)
{
	char path[XML_MAX_PATH + 1];
	size_t lens[XML_MAX_DEPTH + 1];
	int depth = 0, r = 0;
	bool had_root = false;
	struct buf text;
	size_t i = 0;

	path[0] = '\0';
	lens[0] = 0;
	buf_init(&text);
	while (i < n && r == 0) {
		if (p[i] != '<') {
			if (p[i] == '\0') {
				r = -EPROTO;
			} else if (p[i] == '&') {
				int e = entity(p + i, n - i, &text);
				if (e < 0)
					r = e;
				else
					i += (size_t)e;
			} else {
				if (depth == 0 && !(p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n'))
					r = -EPROTO;  /* text outside the root */
				buf_addc(&text, p[i++]);
			}
			if (text.len > XML_MAX_TEXT)
				r = -EPROTO;
			continue;
		}
		if (n - i >= 2 && p[i + 1] == '?') {
			size_t e = find(p, n, i + 2, "?>");
			if (e == (size_t)-1)
				r = -EPROTO;
			i = e + 2;
		} else if (n - i >= 4 && memcmp(p + i, "<!--", 4) == 0) {
			size_t e = find(p, n, i + 4, "-->");
			if (e == (size_t)-1)
				r = -EPROTO;
			i = e + 3;
		} else if (n - i >= 9 && memcmp(p + i, "<![CDATA[", 9) == 0) {
			size_t e = find(p, n, i + 9, "]]>");
			if (e == (size_t)-1 || depth == 0 || e - (i + 9) + text.len > XML_MAX_TEXT) {
				r = -EPROTO;
			} else {
				buf_add(&text, p + i + 9, e - (i + 9));
				if (memchr(p + i + 9, '\0', e - (i + 9)))
					r = -EPROTO;
			}
			i = e + 3;
		} else if (n - i >= 2 && p[i + 1] == '!') {
			const char *e = memchr(p + i, '>', n - i);  /* <!DOCTYPE ...> */
			if (!e || depth)
				r = -EPROTO;
			else
				i = (size_t)(e - p) + 1;
		} else if (n - i >= 2 && p[i + 1] == '/') {
			size_t s = i + 2, e = s;
			while (e < n && name_char(p[e]))
				e++;
			size_t nl = e - s;
			while (e < n && (p[e] == ' ' || p[e] == '\t' || p[e] == '\r' || p[e] == '\n'))
				e++;
			size_t off = depth > 1 ? lens[depth - 1] + 1 : 0;
			if (e >= n || p[e] != '>' || depth == 0 || nl != lens[depth] - off ||
			    memcmp(path + off, p + s, nl) != 0) {
				r = -EPROTO;
			} else {
				buf_addc(&text, '\0');
				text.len--;
				r = fn(arg, XML_END, path, depth, text.data ? text.data : "", text.len);
				buf_reset(&text);
				depth--;
				path[lens[depth]] = '\0';
				i = e + 1;
			}
		} else {
			size_t s = i + 1, e = s;
			bool self_close = false;
			char q = 0;

			while (e < n && name_char(p[e]))
				e++;
			size_t nl = e - s;
			/* attributes: skipped, quotes respected */
			for (; e < n; e++) {
				if (q) {
					if (p[e] == q)
						q = 0;
				} else if (p[e] == '"' || p[e] == '\'') {
					q = p[e];
				} else if (p[e] == '>' || p[e] == '<') {
					break;
				}
			}
			if (e >= n || p[e] != '>' || nl == 0 || depth >= XML_MAX_DEPTH ||
			    (depth == 0 && had_root)) {
				r = -EPROTO;
				break;
			}
			self_close = p[e - 1] == '/' && e - 1 >= s + nl;
			size_t at = depth ? lens[depth] + 1 : 0;
			if (at + nl > XML_MAX_PATH) {
				r = -EPROTO;
				break;
			}
			if (depth)
				path[lens[depth]] = '/';
			memcpy(path + at, p + s, nl);
			path[at + nl] = '\0';
			depth++;
			lens[depth] = at + nl;
			had_root = true;
			buf_reset(&text);
			r = fn(arg, XML_START, path, depth, NULL, 0);
			if (r == 0 && self_close) {
				r = fn(arg, XML_END, path, depth, "", 0);
				depth--;
				path[lens[depth]] = '\0';
			}
			i = e + 1;
		}
	}
	if (r == 0 && (depth != 0 || !had_root))
		r = -EPROTO;
	buf_free(&text);
	return r;
}

/* <Error><Code/><Message/></Error> */
struct err_doc {
	char *code, *msg;
	size_t code_len, msg_len;
};

static void copy_text(char *out, size_t len, const char *text)
{
	if (len)
		snprintf(out, len, "%s", text);
}

static int err_ev(void *arg, int ev, const char *path, int depth, const char *text, size_t tl)
{
	struct err_doc *d = arg;

	if (ev == XML_END && strcmp(path, "Error/Code") == 0)
		copy_text(d->code, d->code_len, text);
	else if (ev == XML_END && strcmp(path, "Error/Message") == 0)
		copy_text(d->msg, d->msg_len, text);
	return 0;
}

void s3_xml_error(const char *p, size_t n, char *code, size_t code_len, char *msg, size_t msg_len)
{
	struct err_doc d = { code, msg, code_len, msg_len };

	copy_text(code, code_len, "");
	copy_text(msg, msg_len, "");
	(void)xml_scan(p, n, err_ev, &d);
	/* what a broken document gave is shown as found, printable only */
	for (char *c = code; c && *c; c++)
		if ((unsigned char)*c < 0x20)
			*c = '?';
	for (char *c = msg; c && *c; c++)
		if ((unsigned char)*c < 0x20)
			*c = '?';
}

struct upload_doc {
	char *out;
	size_t len;
	bool found;
};

static int upload_ev(void *arg, int ev, const char *path, int depth, const char *text, size_t tl)
{
	struct upload_doc *d = arg;

	if (depth == 1 && ev == XML_START && strcmp(path, "InitiateMultipartUploadResult") != 0)
		return -EPROTO;
	if (ev == XML_END && strcmp(path, "InitiateMultipartUploadResult/UploadId") == 0) {
		if (tl == 0 || tl >= d->len)
			return -EPROTO;
		memcpy(d->out, text, tl + 1);
		d->found = true;
	}
	return 0;
}

int s3_xml_upload_id(const char *p, size_t n, char *out, size_t out_len)
{
	struct upload_doc d = { out, out_len, false };
	int r = xml_scan(p, n, upload_ev, &d);

	if (r == 0 && !d.found)
		r = -EPROTO;
	return r;
}

static int complete_ev(void *arg, int ev, const char *path, int depth, const char *text,
		       size_t tl)
{
	if (depth == 1 && ev == XML_START)
		*(bool *)arg = strcmp(path, "CompleteMultipartUploadResult") == 0;
	return 0;
}

bool s3_xml_complete_ok(const char *p, size_t n)
{
	bool ok = false;

	return xml_scan(p, n, complete_ev, &ok) == 0 && ok;
}

struct list_entry {
	char *key;
	uint64_t size;
};

struct list_doc {
	struct list_entry *v;
	size_t n, cap;
	char *key;
	uint64_t size;
	bool has_size, truncated, has_token, root;
	char *token;
	size_t token_len;
};

static int list_ev(void *arg, int ev, const char *path, int depth, const char *text, size_t tl)
{
	struct list_doc *d = arg;

	if (depth == 1 && ev == XML_START) {
		if (strcmp(path, "ListBucketResult") != 0)
			return -EPROTO;
		d->root = true;
		return 0;
	}
	if (ev == XML_START) {
		if (strcmp(path, "ListBucketResult/Contents") == 0) {
			free(d->key);
			d->key = NULL;
			d->has_size = false;
		}
		return 0;
	}
	if (strcmp(path, "ListBucketResult/Contents/Key") == 0) {
		if (tl == 0 || tl > 1024 || strlen(text) != tl)
			return -EPROTO;
		free(d->key);
		d->key = xstrdup(text);
	} else if (strcmp(path, "ListBucketResult/Contents/Size") == 0) {
		uint64_t v = 0;
		if (tl == 0 || tl > 19)
			return -EPROTO;
		for (size_t i = 0; i < tl; i++) {
			if (text[i] < '0' || text[i] > '9')
				return -EPROTO;
			v = v * 10 + (uint64_t)(text[i] - '0');
		}
		d->size = v;
		d->has_size = true;
	} else if (strcmp(path, "ListBucketResult/Contents") == 0) {
		if (!d->key || !d->has_size)
			return -EPROTO;
		if (d->n == d->cap) {
			d->cap = d->cap ? 2 * d->cap : 64;
			d->v = xrealloc(d->v, d->cap * sizeof(*d->v));
		}
		d->v[d->n].key = TAKE_PTR(d->key);
		d->v[d->n++].size = d->size;
	} else if (strcmp(path, "ListBucketResult/IsTruncated") == 0) {
		if (strcmp(text, "true") == 0)
			d->truncated = true;
		else if (strcmp(text, "false") == 0)
			d->truncated = false;
		else
			return -EPROTO;
	} else if (strcmp(path, "ListBucketResult/NextContinuationToken") == 0) {
		if (tl == 0 || tl >= d->token_len || strlen(text) != tl)
			return -EPROTO;
		memcpy(d->token, text, tl + 1);
		d->has_token = true;
	}
	return 0;
}

int s3_xml_list(const char *p, size_t n, s3_xml_list_fn fn, void *arg, bool *truncated,
		char *token, size_t token_len)
{
	struct list_doc d = { .token = token, .token_len = token_len };
	int r;

	if (token_len)
		token[0] = '\0';
	r = xml_scan(p, n, list_ev, &d);
	if (r == 0 && (!d.root || (d.truncated && !d.has_token)))
		r = -EPROTO;
	/* the page is whole and sound before anyone hears of it */
	for (size_t i = 0; i < d.n; i++) {
		if (r == 0)
			r = fn(arg, d.v[i].key, d.v[i].size);
		free(d.v[i].key);
	}
	free(d.v);
	free(d.key);
	*truncated = d.truncated;
	return r;
}
