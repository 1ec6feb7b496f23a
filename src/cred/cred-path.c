/* A credential's path_prefix against a request target: see cred.h.
 *
 * The target comes from inside a sandbox, and the upstream server decides
 * which resource it names, not us. So both sides are brought to one
 * spelling first (unreserved characters decoded, "." and ".." removed), and
 * any target that a server could plausibly read as another path than ours
 * does (an encoded slash, a backslash, path parameters, empty segments that
 * some servers merge) is refused outright: such a request gets no
 * credential, which is the safe way to be wrong. */
#include "cred.h"

#include <ctype.h>
#include <string.h>

#include "../lib/util.h"

static bool unreserved(unsigned char c)
{
	return isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

/* Percent-decode the unreserved characters of the path in s (up to '?' or
 * '#'), other escapes kept with upper-case hex. false when s is not a path
 * we read the same as any server would. */
static bool decode(const char *s, struct buf *d)
{
	static const char hex[] = "0123456789ABCDEF";

	if (s[0] != '/')
		return false;    /* origin-form only: absolute-form, '*' never match */
	for (; *s && *s != '?' && *s != '#'; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '\\' || c == ';' || c <= 0x20 || c >= 0x7f)
			return false;
		if (c != '%') {
			buf_addc(d, (char)c);
			continue;
		}
		int hi = hexval(s[1]), lo = hi < 0 ? -1 : hexval(s[2]);
		if (hi < 0 || lo < 0)
			return false;
		c = (unsigned char)(hi << 4 | lo);
		/* '%' too: a server that decodes twice would read "%252e" as "." */
		if (c == 0 || c == '/' || c == '\\' || c == ';' || c == '%')
			return false;
		if (unreserved(c)) {
			buf_addc(d, (char)c);
		} else {
			buf_addc(d, '%');
			buf_addc(d, hex[c >> 4]);
			buf_addc(d, hex[c & 15]);
		}
		s += 2;
	}
	buf_addc(d, '\0');
	d->len--;
	return !strstr(d->data, "//");
}

/* RFC 3986 5.2.4 remove_dot_segments on an absolute path p (starts with
 * '/', no empty segment but maybe a trailing one). Caller owns the result. */
static char *remove_dots(const char *p)
{
	struct buf o;
	bool trailing = false;

	buf_init(&o);
	while (*p == '/') {
		const char *seg = p + 1;
		size_t n = strcspn(seg, "/");

		if ((n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.')) {
			if (n == 2) {     /* drop the last segment; above the root stays there */
				while (o.len && o.data[o.len - 1] != '/')
					o.len--;
				if (o.len)
					o.len--;
			}
			trailing = true;
		} else {
			buf_addc(&o, '/');
			buf_add(&o, seg, n);
			trailing = false;
		}
		p = seg + n;
	}
	if (trailing || !o.len)
		buf_addc(&o, '/');
	buf_addc(&o, '\0');
	return buf_steal(&o);
}

/* The canonical path of s, or NULL when it is refused. Caller owns. */
static char *canon(const char *s)
{
	struct buf d;
	char *r = NULL;

	buf_init(&d);
	if (decode(s, &d))
		r = remove_dots(d.data);
	buf_free(&d);
	return r;
}

bool cred_path_prefix_ok(const char *prefix)
{
	_cleanup_free_ char *c = NULL;

	if (strchr(prefix, '?') || strchr(prefix, '#'))
		return false;
	c = canon(prefix);
	return c != NULL;
}

bool cred_path_match(const char *prefix, const char *target)
{
	_cleanup_free_ char *p = canon(prefix), *t = canon(target);
	size_t n;

	if (!p || !t)
		return false;
	n = strlen(p);
	if (n > 1 && p[n - 1] == '/')
		n--;              /* "/repos/" is the segment "repos" */
	if (n == 1)
		return true;      /* "/" */
	return strncmp(t, p, n) == 0 && (t[n] == '\0' || t[n] == '/');
}
