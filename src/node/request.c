/* request.c - reading a request: a JSON object body within NODE_JSON_MAX,
 * query parameters (percent-decoded) and the names clients give to
 * templates and snapshots. Shared by every handler, below the router.
 */
#include <string.h>

#include "../lib/reqjson.h"
#include "node-internal.h"

json *node_body_object(struct http_req *req, struct http_conn *c, const char *const *allowed)
{
	return http_json_object_body(req, c, allowed, NODE_JSON_MAX);
}

/* Percent-decode s[0..n) into a new string; %00 and bad escapes are kept
 * literally so the result never contains NUL. */
static char *url_decode(const char *s, size_t n)
{
	struct buf b;

	buf_init(&b);
	for (size_t i = 0; i < n; i++) {
		int hi = -1, lo = -1;

		if (s[i] == '+') {
			buf_addc(&b, ' ');
			continue;
		}
		if (s[i] == '%' && i + 2 < n) {
			hi = hexval(s[i + 1]);
			lo = hexval(s[i + 2]);
		}
		if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
			buf_addc(&b, s[i]);
			continue;
		}
		buf_addc(&b, (char)(hi << 4 | lo));
		i += 2;
	}
	return buf_steal(&b);
}

void node_query_each(const char *query, void (*fn)(void *arg, const char *k, const char *v),
		     void *arg)
{
	const char *p = query ? query : "";

	while (*p) {
		const char *amp = strchr(p, '&');
		size_t len = amp ? (size_t)(amp - p) : strlen(p);
		const char *eq = memchr(p, '=', len);
		if (len) {
			_cleanup_free_ char *k = url_decode(p, eq ? (size_t)(eq - p) : len);
			_cleanup_free_ char *v =
				eq ? url_decode(eq + 1, len - (size_t)(eq + 1 - p)) : xstrdup("");
			fn(arg, k, v);
		}
		p += len;
		if (*p == '&')
			p++;
	}
}

bool node_name_valid(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n < 1 || n > 64)
		return false;
	if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9')))
		return false;
	for (size_t i = 1; i < n; i++) {
		char ch = s[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '.' ||
		      ch == '_' || ch == '-'))
			return false;
	}
	return true;
}
