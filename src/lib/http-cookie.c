/* http-cookie.c - Set-Cookie fields from a sandbox's service made host-only,
 * and whether two host names share a site (see http-cookie.h). */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "http-cookie.h"

static bool blank(char c)
{
	return c == ' ' || c == '\t';
}

/* s[0..n) without its leading and trailing blanks: how browsers read the
 * name of a cookie and of an attribute (RFC 6265bis 5.6). */
static void trim(const char **s, size_t *n)
{
	while (*n && blank(**s))
		(*s)++, (*n)--;
	while (*n && blank((*s)[*n - 1]))
		(*n)--;
}

/* The value is bytes the sandbox chose. We never reinterpret it: we only
 * find the ';' that separate the cookie pair from its attributes (a
 * browser splits at every ';', quotes or not) and leave out the segments
 * whose name is Domain. Every other byte passes unchanged, so what the
 * browser keeps is what the service meant, minus the parent domain. */
bool http_setcookie_rewrite(const char *v, size_t n, const char *reserved, struct buf *out)
{
	if (n > HTTP_SETCOOKIE_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (((unsigned char)v[i] < 0x20 && v[i] != '\t') || v[i] == 0x7f)
			return false;
	const char *end = v + n;
	const char *semi = memchr(v, ';', n);
	size_t pair_n = semi ? (size_t)(semi - v) : n;
	const char *eq = memchr(v, '=', pair_n);
	/* Without '=' the whole pair is the value of a nameless cookie. */
	if (reserved && eq) {
		const char *name = v;
		size_t name_n = (size_t)(eq - v);
		trim(&name, &name_n);
		if (name_n == strlen(reserved) && strncasecmp(name, reserved, name_n) == 0)
			return false;
	}
	buf_add(out, v, pair_n);
	for (const char *p = semi; p;) {
		const char *next = p + 1 < end ? memchr(p + 1, ';', (size_t)(end - p - 1)) : NULL;
		size_t seg_n = (size_t)((next ? next : end) - p);   /* with its ';' */
		const char *name = p + 1;
		const char *aeq = memchr(name, '=', seg_n - 1);
		size_t name_n = aeq ? (size_t)(aeq - name) : seg_n - 1;

		trim(&name, &name_n);
		if (!(name_n == 6 && strncasecmp(name, "domain", 6) == 0))
			buf_add(out, p, seg_n);
		p = next;
	}
	return true;
}

/* ---- sites ------------------------------------------------------------- */

#define NAME_CAP 256

/* s lowercased, without one trailing dot, into out; false when it does
 * not fit or is empty. */
static bool norm(const char *s, char out[NAME_CAP])
{
	size_t n = s ? strlen(s) : 0;

	if (n && s[n - 1] == '.')
		n--;
	if (!n || n >= NAME_CAP)
		return false;
	for (size_t i = 0; i < n; i++)
		out[i] = (char)tolower((unsigned char)s[i]);
	out[n] = '\0';
	return true;
}

static size_t count_labels(const char *s)
{
	size_t k = 1;

	for (; *s; s++)
		k += *s == '.';
	return k;
}

/* How many labels a and b share at their ends ("x.b.c", "y.b.c" -> 2). */
static size_t common_labels(const char *a, const char *b)
{
	size_t i = strlen(a), j = strlen(b), k = 0;

	for (;;) {
		size_t si = i, sj = j;
		while (si && a[si - 1] != '.')
			si--;
		while (sj && b[sj - 1] != '.')
			sj--;
		if (i - si != j - sj || memcmp(a + si, b + sj, i - si) != 0)
			return k;
		k++;
		if (!si || !sj)
			return k;
		i = si - 1, j = sj - 1;
	}
}

/* The last k labels of s ("a.b.c", 2 -> "b.c"). */
static const char *tail_labels(const char *s, size_t k)
{
	const char *t = s + strlen(s);

	while (t > s) {
		if (t[-1] == '.' && --k == 0)
			return t;
		t--;
	}
	return s;
}

static bool ip_literal(const char *s)
{
	if (*s == '[' || strchr(s, ':'))
		return true;
	return strspn(s, "0123456789.") == strlen(s);
}

bool http_site_separate(const char *ports_domain, const char *api_host, char *why, size_t cap)
{
	char p[NAME_CAP], h[NAME_CAP];

	if (!norm(ports_domain, p)) {
		snprintf(why, cap, "ports_domain is empty or too long");
		return false;
	}
	if (count_labels(p) < 2) {
		snprintf(why, cap,
			 "ports_domain `%s` is a single label: no registrable domain of its own, so "
			 "its hosts cannot be a site apart from the names around them", p);
		return false;
	}
	if (!norm(api_host, h) || ip_literal(h))
		return true;
	size_t np = count_labels(p), nh = count_labels(h), c = common_labels(p, h);
	if (c == np && c == nh)
		snprintf(why, cap, "ports_domain `%s` is the API's own host name", p);
	else if (c == np)
		snprintf(why, cap,
			 "the API's host `%s` is under ports_domain `%s`: a sandbox's service "
			 "shares a site with the API and the console", h, p);
	else if (c == nh)
		snprintf(why, cap,
			 "ports_domain `%s` is under the API's host `%s`: the API's cookies for its "
			 "domain reach every sandbox's service", p, h);
	else if (c >= 2)
		snprintf(why, cap,
			 "ports_domain `%s` and the API's host `%s` are both under `%s`: one site "
			 "(a sandbox's service can set and read that site's cookies) unless `%s` "
			 "is on the Public Suffix List", p, h, tail_labels(p, c), tail_labels(p, c));
	else
		return true;
	return false;
}

void http_url_host(const char *url, char *out, size_t cap)
{
	const char *s = url ? url : "";
	size_t n;

	if (!cap)
		return;
	if (strncasecmp(s, "http://", 7) == 0)
		s += 7;
	else if (strncasecmp(s, "https://", 8) == 0)
		s += 8;
	else if (strncmp(s, "unix:", 5) == 0)
		s = "";
	if (*s == '[') {
		const char *e = strchr(s, ']');
		n = e ? (size_t)(e + 1 - s) : 0;
	} else {
		n = strcspn(s, ":/?#");
	}
	if (n >= cap)
		n = 0;
	for (size_t i = 0; i < n; i++)
		out[i] = (char)tolower((unsigned char)s[i]);
	out[n] = '\0';
}
