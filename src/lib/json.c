/* json.c - strict JSON parser (RFC 8259) for untrusted bodies, and a writer.
 *
 * The parser is a recursive descent over (s, len) that never reads s[len]:
 * API bodies are not NUL-terminated. Recursion is bounded by JSON_MAX_DEPTH,
 * so a hostile body cannot exhaust the stack. Everything RFC 8259 leaves to
 * the implementation is decided on the strict side, because the values feed
 * security decisions (paths, uids, limits) and are echoed back to clients:
 * invalid UTF-8, lone surrogates, \u0000, duplicate keys and non-finite
 * numbers are all rejected.
 */
#include "json.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct parser {
	const char *s;
	size_t len, pos;
	err_t *err;
};

static int fail(struct parser *p, const char *what)
{
	return err_set(p->err, EINVAL, "invalid JSON at offset %zu: %s", p->pos, what);
}

static void skip_ws(struct parser *p)
{
	while (p->pos < p->len) {
		char c = p->s[p->pos];
		if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
			break;
		p->pos++;
	}
}

static bool peek_is(struct parser *p, char c)
{
	return p->pos < p->len && p->s[p->pos] == c;
}

static json *new_node(enum json_type t)
{
	json *j = xcalloc(1, sizeof(*j));
	j->type = t;
	return j;
}

void json_free(json *j)
{
	if (!j)
		return;
	for (size_t k = 0; k < j->n; k++) {
		json_free(j->items[k]);
		if (j->keys)
			free(j->keys[k]);
	}
	free(j->items);
	free(j->keys);
	free(j->str);
	free(j);
}

/* ---- strings ---- */

static int hex4(struct parser *p, unsigned *out)
{
	unsigned v = 0;

	if (p->len - p->pos < 4)
		return fail(p, "truncated \\u escape");
	for (int k = 0; k < 4; k++) {
		char c = p->s[p->pos + k];
		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (unsigned)(c - 'A' + 10);
		else
			return fail(p, "bad hex digit in \\u escape");
	}
	p->pos += 4;
	*out = v;
	return 0;
}

static void put_utf8(struct buf *b, unsigned cp)
{
	char u[4];
	size_t n;

	if (cp < 0x80) {
		u[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		u[0] = (char)(0xC0 | (cp >> 6));
		u[1] = (char)(0x80 | (cp & 0x3F));
		n = 2;
	} else if (cp < 0x10000) {
		u[0] = (char)(0xE0 | (cp >> 12));
		u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		u[2] = (char)(0x80 | (cp & 0x3F));
		n = 3;
	} else {
		u[0] = (char)(0xF0 | (cp >> 18));
		u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
		u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
		u[3] = (char)(0x80 | (cp & 0x3F));
		n = 4;
	}
	buf_add(b, u, n);
}

/* \uXXXX, possibly the first half of a surrogate pair. p->pos is just past
 * the 'u'. A lone surrogate cannot be represented in UTF-8, and U+0000 would
 * silently truncate every C string consumer, so both are rejected. */
static int unicode_escape(struct parser *p, struct buf *out)
{
	unsigned cp, lo;

	if (hex4(p, &cp) < 0)
		return -EINVAL;
	if (cp >= 0xDC00 && cp <= 0xDFFF)
		return fail(p, "lone low surrogate");
	if (cp >= 0xD800 && cp <= 0xDBFF) {
		if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
			return fail(p, "lone high surrogate");
		p->pos += 2;
		if (hex4(p, &lo) < 0)
			return -EINVAL;
		if (lo < 0xDC00 || lo > 0xDFFF)
			return fail(p, "high surrogate not followed by low surrogate");
		cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
	}
	if (cp == 0)
		return fail(p, "\\u0000 not allowed");
	put_utf8(out, cp);
	return 0;
}

static int escape(struct parser *p, struct buf *out)
{
	char c;

	if (p->pos >= p->len)
		return fail(p, "truncated escape");
	c = p->s[p->pos++];
	switch (c) {
	case '"': buf_addc(out, '"'); return 0;
	case '\\': buf_addc(out, '\\'); return 0;
	case '/': buf_addc(out, '/'); return 0;
	case 'b': buf_addc(out, '\b'); return 0;
	case 'f': buf_addc(out, '\f'); return 0;
	case 'n': buf_addc(out, '\n'); return 0;
	case 'r': buf_addc(out, '\r'); return 0;
	case 't': buf_addc(out, '\t'); return 0;
	case 'u': return unicode_escape(p, out);
	}
	p->pos--;
	return fail(p, "invalid escape");
}

/* Length of the valid UTF-8 sequence starting at s[0] (a byte >= 0x80), or 0.
 * Rejects overlong forms, UTF-16 surrogates and code points above U+10FFFF,
 * so that every string we echo back is valid UTF-8. */
static size_t utf8_seq(const unsigned char *s, size_t avail)
{
	unsigned c = s[0], min, cp;
	size_t n;

	if (c >= 0xC2 && c <= 0xDF) {
		n = 2; cp = c & 0x1F; min = 0x80;
	} else if (c >= 0xE0 && c <= 0xEF) {
		n = 3; cp = c & 0x0F; min = 0x800;
	} else if (c >= 0xF0 && c <= 0xF4) {
		n = 4; cp = c & 0x07; min = 0x10000;
	} else {
		return 0;
	}
	if (avail < n)
		return 0;
	for (size_t k = 1; k < n; k++) {
		if ((s[k] & 0xC0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[k] & 0x3F);
	}
	if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return n;
}

/* Parses a string starting at the opening quote into out (reset first). */
static int parse_string_into(struct parser *p, struct buf *out)
{
	buf_reset(out);
	p->pos++; /* opening quote */
	for (;;) {
		size_t start = p->pos;
		unsigned char c = 0;

		/* copy plain runs in one go: strings are the bulk of API bodies */
		while (p->pos < p->len) {
			c = (unsigned char)p->s[p->pos];
			if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80)
				break;
			p->pos++;
		}
		buf_add(out, p->s + start, p->pos - start);
		if (p->pos >= p->len)
			return fail(p, "unterminated string");
		if (c == '"') {
			p->pos++;
			return 0;
		}
		if (c < 0x20)
			return fail(p, "control character in string");
		if (c == '\\') {
			p->pos++;
			if (escape(p, out) < 0)
				return -EINVAL;
			continue;
		}
		size_t n = utf8_seq((const unsigned char *)p->s + p->pos, p->len - p->pos);
		if (!n)
			return fail(p, "invalid UTF-8 in string");
		buf_add(out, p->s + p->pos, n);
		p->pos += n;
	}
}

/* ---- numbers ---- */

static size_t scan_digits(struct parser *p)
{
	size_t start = p->pos;

	while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
		p->pos++;
	return p->pos - start;
}

/* Grammar check first (strtod alone accepts hex, "inf", leading '+' and
 * leading zeros), then conversion from a NUL-terminated copy. */
static json *parse_number(struct parser *p)
{
	size_t start = p->pos;
	bool integral = true;

	if (peek_is(p, '-'))
		p->pos++;
	if (peek_is(p, '0')) {
		p->pos++;
	} else if (scan_digits(p) == 0) {
		fail(p, "invalid number");
		return NULL;
	}
	if (peek_is(p, '.')) {
		integral = false;
		p->pos++;
		if (scan_digits(p) == 0) {
			fail(p, "digit expected after decimal point");
			return NULL;
		}
	}
	if (peek_is(p, 'e') || peek_is(p, 'E')) {
		integral = false;
		p->pos++;
		if (peek_is(p, '+') || peek_is(p, '-'))
			p->pos++;
		if (scan_digits(p) == 0) {
			fail(p, "digit expected in exponent");
			return NULL;
		}
	}

	_cleanup_free_ char *txt = xstrndup(p->s + start, p->pos - start);
	json *j = new_node(JSON_NUM);
	j->num = strtod(txt, NULL);
	if (!isfinite(j->num)) {
		json_free(j);
		p->pos = start;
		fail(p, "number out of range");
		return NULL;
	}
	if (integral) {
		errno = 0;
		long long v = strtoll(txt, NULL, 10);
		if (errno == 0) {
			j->is_int = true;
			j->i = v;
		}
	}
	return j;
}

/* ---- values ---- */

static json *parse_value(struct parser *p, int depth);

static bool match_lit(struct parser *p, const char *lit)
{
	size_t n = strlen(lit);

	if (p->len - p->pos < n || memcmp(p->s + p->pos, lit, n) != 0)
		return false;
	p->pos += n;
	return true;
}

static void append_item(json *j, size_t *cap, json *v, char *key)
{
	if (j->n == *cap) {
		*cap = *cap ? *cap * 2 : 4;
		j->items = xrealloc(j->items, *cap * sizeof(*j->items));
		if (j->type == JSON_OBJ)
			j->keys = xrealloc(j->keys, *cap * sizeof(*j->keys));
	}
	j->items[j->n] = v;
	if (j->type == JSON_OBJ)
		j->keys[j->n] = key;
	j->n++;
}

static json *parse_array(struct parser *p, int depth)
{
	json *j = new_node(JSON_ARR);
	size_t cap = 0;

	p->pos++; /* '[' */
	skip_ws(p);
	if (peek_is(p, ']')) {
		p->pos++;
		return j;
	}
	for (;;) {
		json *v = parse_value(p, depth);
		if (!v)
			goto fail;
		append_item(j, &cap, v, NULL);
		skip_ws(p);
		if (peek_is(p, ',')) {
			p->pos++;
			continue;
		}
		if (peek_is(p, ']')) {
			p->pos++;
			return j;
		}
		fail(p, "expected ',' or ']'");
		goto fail;
	}
fail:
	json_free(j);
	return NULL;
}

static int cmp_keys(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Duplicate keys are ambiguous (which one wins differs between parsers, a
 * classic smuggling trick), so they are an error. Sorting a copy keeps this
 * O(n log n) for hostile objects with many keys. */
static int check_duplicates(struct parser *p, const json *j)
{
	if (j->n < 2)
		return 0;
	_cleanup_free_ char **sorted = xmalloc(j->n * sizeof(*sorted));
	memcpy(sorted, j->keys, j->n * sizeof(*sorted));
	qsort(sorted, j->n, sizeof(*sorted), cmp_keys);
	for (size_t k = 1; k < j->n; k++)
		if (strcmp(sorted[k - 1], sorted[k]) == 0)
			return err_set(p->err, EINVAL, "invalid JSON: duplicate key \"%.100s\"",
				       sorted[k]);
	return 0;
}

static json *parse_object(struct parser *p, int depth)
{
	json *j = new_node(JSON_OBJ);
	struct buf key;
	size_t cap = 0;

	buf_init(&key);
	p->pos++; /* '{' */
	skip_ws(p);
	if (peek_is(p, '}')) {
		p->pos++;
		return j;
	}
	for (;;) {
		skip_ws(p);
		if (!peek_is(p, '"')) {
			fail(p, "expected string key");
			goto fail;
		}
		if (parse_string_into(p, &key) < 0)
			goto fail;
		skip_ws(p);
		if (!peek_is(p, ':')) {
			fail(p, "expected ':'");
			goto fail;
		}
		p->pos++;
		json *v = parse_value(p, depth);
		if (!v)
			goto fail;
		append_item(j, &cap, v, buf_steal(&key));
		skip_ws(p);
		if (peek_is(p, ',')) {
			p->pos++;
			continue;
		}
		if (peek_is(p, '}')) {
			p->pos++;
			break;
		}
		fail(p, "expected ',' or '}'");
		goto fail;
	}
	if (check_duplicates(p, j) < 0)
		goto fail;
	buf_free(&key);
	return j;
fail:
	buf_free(&key);
	json_free(j);
	return NULL;
}

static json *parse_value(struct parser *p, int depth)
{
	skip_ws(p);
	if (p->pos >= p->len) {
		fail(p, "unexpected end of input");
		return NULL;
	}
	char c = p->s[p->pos];
	if (c == '{' || c == '[') {
		if (depth >= JSON_MAX_DEPTH) {
			fail(p, "nesting too deep");
			return NULL;
		}
		return c == '{' ? parse_object(p, depth + 1) : parse_array(p, depth + 1);
	}
	if (c == '"') {
		struct buf b;
		buf_init(&b);
		if (parse_string_into(p, &b) < 0) {
			buf_free(&b);
			return NULL;
		}
		json *j = new_node(JSON_STR);
		j->str_len = b.len;
		j->str = buf_steal(&b);
		return j;
	}
	if (c == '-' || (c >= '0' && c <= '9'))
		return parse_number(p);
	if (match_lit(p, "true") || match_lit(p, "false")) {
		json *j = new_node(JSON_BOOL);
		j->b = c == 't';
		return j;
	}
	if (match_lit(p, "null"))
		return new_node(JSON_NULL);
	fail(p, "unexpected character");
	return NULL;
}

json *json_parse(const char *s, size_t len, err_t *err)
{
	struct parser p = { .s = s, .len = len, .pos = 0, .err = err };
	json *j;

	if (!s)
		len = p.len = 0;
	j = parse_value(&p, 0);
	if (!j)
		return NULL;
	skip_ws(&p);
	if (p.pos != p.len) {
		fail(&p, "trailing data after value");
		json_free(j);
		return NULL;
	}
	return j;
}

/* ---- lookups ---- */

const json *json_get(const json *obj, const char *key)
{
	if (!obj || obj->type != JSON_OBJ)
		return NULL;
	for (size_t k = 0; k < obj->n; k++)
		if (strcmp(obj->keys[k], key) == 0)
			return obj->items[k];
	return NULL;
}

const char *json_get_str(const json *obj, const char *key)
{
	const json *v = json_get(obj, key);
	return v && v->type == JSON_STR ? v->str : NULL;
}

int64_t json_get_int(const json *obj, const char *key, int64_t def, bool *bad)
{
	const json *v = json_get(obj, key);

	if (!v)
		return def;
	if (v->type != JSON_NUM || !v->is_int) {
		if (bad)
			*bad = true;
		return def;
	}
	return v->i;
}

bool json_get_bool(const json *obj, const char *key, bool def, bool *bad)
{
	const json *v = json_get(obj, key);

	if (!v)
		return def;
	if (v->type != JSON_BOOL) {
		if (bad)
			*bad = true;
		return def;
	}
	return v->b;
}

int json_check_keys(const json *obj, const char *const *allowed, err_t *err)
{
	if (!obj || obj->type != JSON_OBJ)
		return err_set(err, EINVAL, "expected a JSON object");
	for (size_t k = 0; k < obj->n; k++) {
		bool ok = false;
		for (const char *const *a = allowed; a && *a && !ok; a++)
			ok = strcmp(*a, obj->keys[k]) == 0;
		if (!ok)
			return err_set(err, EINVAL, "unknown field \"%.100s\"", obj->keys[k]);
	}
	return 0;
}

json *json_dup(const json *v)
{
	struct buf b;
	struct jw w;
	json *j;

	if (!v)
		return NULL;
	buf_init(&b);
	jw_init(&w, &b);
	jw_value(&w, v);
	j = json_parse(b.data, b.len, NULL);
	buf_free(&b);
	return j;
}

/* ---- writer ---- */

void jw_init(struct jw *w, struct buf *b)
{
	memset(w, 0, sizeof(*w));
	w->b = b;
	w->first[0] = true;
}

/* Whether the current container already holds an item. Beyond the depth
 * first[] can track (jw_value of a maximally nested tree inside a wrapper),
 * the last byte written tells: the writer emits no whitespace, and only an
 * opening bracket precedes a container's first item. */
static bool need_comma(struct jw *w)
{
	if (w->depth == 0)
		return false;
	if (w->depth <= JSON_MAX_DEPTH)
		return !w->first[w->depth];
	char last = w->b->len ? w->b->data[w->b->len - 1] : '[';
	return last != '[' && last != '{';
}

/* Called before every value: separator unless it follows a key. */
static void before_value(struct jw *w)
{
	if (w->after_key)
		w->after_key = false;
	else if (need_comma(w))
		buf_addc(w->b, ',');
	if (w->depth <= JSON_MAX_DEPTH)
		w->first[w->depth] = false;
}

static void open_container(struct jw *w, char c)
{
	before_value(w);
	buf_addc(w->b, c);
	w->depth++;
	if (w->depth <= JSON_MAX_DEPTH)
		w->first[w->depth] = true;
}

void jw_obj(struct jw *w) { open_container(w, '{'); }
void jw_arr(struct jw *w) { open_container(w, '['); }

/* struct jw keeps no stack of container kinds, so jw_end finds the innermost
 * unclosed bracket by scanning back over what this writer produced. Outside
 * strings, the first '"' met going backwards closes a string; its opening
 * quote is the previous '"' preceded by an even run of backslashes. The scan
 * stops at the container's own opening bracket, so it costs the size of the
 * container being closed. */
static size_t skip_string_back(const char *d, size_t k)
{
	while (k > 0) {
		k--;
		if (d[k] != '"')
			continue;
		size_t bs = 0;
		while (bs < k && d[k - bs - 1] == '\\')
			bs++;
		if (bs % 2 == 0)
			return k;
	}
	return 0;
}

static char innermost_kind(const struct buf *b)
{
	int level = 0;

	for (size_t k = b->len; k-- > 0;) {
		char c = b->data[k];
		if (c == '"') {
			k = skip_string_back(b->data, k);
		} else if (c == '}' || c == ']') {
			level++;
		} else if (c == '{' || c == '[') {
			if (level == 0)
				return c;
			level--;
		}
	}
	return '{';
}

void jw_end(struct jw *w)
{
	if (w->depth == 0)
		return;
	buf_addc(w->b, innermost_kind(w->b) == '[' ? ']' : '}');
	w->depth--;
	w->after_key = false;
}

static void put_escaped(struct buf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	size_t start = 0;

	buf_addc(b, '"');
	for (size_t k = 0; k < n; k++) {
		unsigned char c = (unsigned char)s[k];
		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		buf_add(b, s + start, k - start);
		start = k + 1;
		switch (c) {
		case '"': buf_adds(b, "\\\""); break;
		case '\\': buf_adds(b, "\\\\"); break;
		case '\n': buf_adds(b, "\\n"); break;
		case '\r': buf_adds(b, "\\r"); break;
		case '\t': buf_adds(b, "\\t"); break;
		default: {
			char u[6] = { '\\', 'u', '0', '0', hex[c >> 4], hex[c & 15] };
			buf_add(b, u, sizeof(u));
		}
		}
	}
	buf_add(b, s + start, n - start);
	buf_addc(b, '"');
}

void jw_key(struct jw *w, const char *k)
{
	if (need_comma(w))
		buf_addc(w->b, ',');
	if (w->depth <= JSON_MAX_DEPTH)
		w->first[w->depth] = false;
	put_escaped(w->b, k, strlen(k));
	buf_addc(w->b, ':');
	w->after_key = true;
}

void jw_strn(struct jw *w, const char *s, size_t n)
{
	before_value(w);
	put_escaped(w->b, s, n);
}

void jw_strn_lossy(struct jw *w, const char *s, size_t n)
{
	_cleanup_(buf_free) struct buf clean = { 0 };
	const unsigned char *u = (const unsigned char *)s;

	for (size_t k = 0; k < n;) {
		size_t l = u[k] < 0x80 ? 1 : utf8_seq(u + k, n - k);
		if (l == 0) {
			buf_adds(&clean, "\xEF\xBF\xBD");   /* U+FFFD */
			k++;
			continue;
		}
		buf_add(&clean, s + k, l);
		k += l;
	}
	jw_strn(w, clean.data ? clean.data : "", clean.len);
}

void jw_str_lossy(struct jw *w, const char *s)
{
	jw_strn_lossy(w, s, strlen(s));
}

bool json_utf8_valid(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;

	for (size_t k = 0; k < n;) {
		size_t l = u[k] == 0 ? 0 : u[k] < 0x80 ? 1 : utf8_seq(u + k, n - k);
		if (l == 0)
			return false;
		k += l;
	}
	return true;
}

void jw_str(struct jw *w, const char *s)
{
	if (!s) {
		jw_null(w);
		return;
	}
	jw_strn(w, s, strlen(s));
}

void jw_int(struct jw *w, int64_t v)
{
	before_value(w);
	buf_printf(w->b, "%" PRId64, v);
}

void jw_uint(struct jw *w, uint64_t v)
{
	before_value(w);
	buf_printf(w->b, "%" PRIu64, v);
}

/* Shortest of %.15g/%.16g/%.17g that reads back to the same double, so
 * 0.1 stays "0.1". JSON has no NaN or infinity: those become null. */
void jw_double(struct jw *w, double v)
{
	char tmp[40];

	if (!isfinite(v)) {
		jw_null(w);
		return;
	}
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(tmp, sizeof(tmp), "%.*g", prec, v);
		if (strtod(tmp, NULL) == v)
			break;
	}
	before_value(w);
	buf_adds(w->b, tmp);
}

void jw_bool(struct jw *w, bool v)
{
	before_value(w);
	buf_adds(w->b, v ? "true" : "false");
}

void jw_null(struct jw *w)
{
	before_value(w);
	buf_adds(w->b, "null");
}

void jw_raw(struct jw *w, const char *json_text)
{
	before_value(w);
	buf_adds(w->b, json_text);
}

void jw_value(struct jw *w, const json *v)
{
	if (!v) {
		jw_null(w);
		return;
	}
	switch (v->type) {
	case JSON_NULL: jw_null(w); break;
	case JSON_BOOL: jw_bool(w, v->b); break;
	case JSON_NUM:
		if (v->is_int)
			jw_int(w, v->i);
		else
			jw_double(w, v->num);
		break;
	case JSON_STR: jw_strn(w, v->str, v->str_len); break;
	case JSON_ARR:
		jw_arr(w);
		for (size_t k = 0; k < v->n; k++)
			jw_value(w, v->items[k]);
		jw_end(w);
		break;
	case JSON_OBJ:
		jw_obj(w);
		for (size_t k = 0; k < v->n; k++) {
			jw_key(w, v->keys[k]);
			jw_value(w, v->items[k]);
		}
		jw_end(w);
		break;
	}
}
