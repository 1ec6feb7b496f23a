/* page.c - keyset pagination: the query parameters and the opaque token. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "json.h"
#include "page.h"
#include "util.h"

char *page_token(int64_t ms, const char *id)
{
	_cleanup_free_ char *raw = xasprintf("v1:%lld:%s", (long long)ms, id ? id : "");
	char *t = base64_encode(raw, strlen(raw));
	size_t n = strlen(t);

	/* base64url without padding: nothing to escape in a query string */
	for (size_t i = 0; i < n; i++)
		t[i] = t[i] == '+' ? '-' : t[i] == '/' ? '_' : t[i];
	while (n && t[n - 1] == '=')
		t[--n] = '\0';
	return t;
}

static int token_parse(struct page *p, const char *tok)
{
	size_t n = strlen(tok);
	_cleanup_free_ char *s = NULL;
	struct buf out;
	char *end;
	const char *id;
	long long ms;
	int r = -1;

	if (n == 0 || n > 2 * PAGE_ID_MAX)
		return -1;
	s = xmalloc(n + 4);
	for (size_t i = 0; i < n; i++) {
		char ch = tok[i];
		if (ch == '+' || ch == '/' || ch == '=')
			return -1;   /* base64url only */
		s[i] = ch == '-' ? '+' : ch == '_' ? '/' : ch;
	}
	while (n % 4)
		s[n++] = '=';
	s[n] = '\0';
	buf_init(&out);
	if (base64_decode(s, n, &out) < 0 || out.len < 5 || memchr(out.data, '\0', out.len))
		goto done;
	buf_addc(&out, '\0');
	if (strncmp(out.data, "v1:", 3) != 0)
		goto done;
	errno = 0;
	ms = strtoll(out.data + 3, &end, 10);
	if (errno || end == out.data + 3 || *end != ':' || ms < 0)
		goto done;
	id = end + 1;
	if (strlen(id) > PAGE_ID_MAX)
		goto done;
	for (const char *q = id; *q; q++)
		if ((unsigned char)*q < 0x20 || *q == 0x7f)
			goto done;
	p->has_cursor = true;
	p->after_ms = ms;
	snprintf(p->after_id, sizeof(p->after_id), "%s", id);
	r = 0;
done:
	buf_free(&out);
	return r;
}

int page_parse(struct page *p, const char *limit, const char *token, bool desc,
	       const char **why)
{
	memset(p, 0, sizeof(*p));
	p->limit = PAGE_DEFAULT;
	p->desc = desc;
	if (limit) {
		char *end;
		long v;

		errno = 0;
		v = strtol(limit, &end, 10);
		if (errno || end == limit || *end || v < 1 || v > PAGE_MAX) {
			*why = "`limit` must be an integer from 1 to 1000";
			return -1;
		}
		p->limit = (unsigned)v;
	}
	if (token && token_parse(p, token) < 0) {
		*why = "`next_token` is not a token this server gave out";
		return -1;
	}
	return 0;
}

int page_from_req(struct page *p, const struct http_req *req, bool desc, struct http_conn *c)
{
	_cleanup_free_ char *limit = http_query_param(req, "limit");
	_cleanup_free_ char *token = http_query_param(req, "next_token");
	const char *why = NULL;

	if (page_parse(p, limit, token, desc, &why) < 0) {
		http_respond_error(c, 400, "invalid_field", "%s", why);
		return -1;
	}
	return 0;
}

int page_cmp(const struct page *p, int64_t ams, const char *aid, int64_t bms, const char *bid)
{
	int r = ams != bms ? (ams < bms ? -1 : 1) : strcmp(aid ? aid : "", bid ? bid : "");

	return p->desc ? -r : r;
}

bool page_after(const struct page *p, int64_t ms, const char *id)
{
	return !p->has_cursor || page_cmp(p, ms, id, p->after_ms, p->after_id) > 0;
}

int64_t page_iso_ms(const char *s)
{
	struct tm tm;
	unsigned frac = 0;
	const char *e;

	if (!s)
		return -1;
	memset(&tm, 0, sizeof(tm));
	e = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!e)
		return -1;
	if (*e == '.') {
		if (sscanf(e, ".%3u", &frac) != 1)
			return -1;
	}
	return (int64_t)timegm(&tm) * 1000 + frac;
}

bool page_take(struct page *p, int64_t ms, const char *id)
{
	if (p->more || !page_after(p, ms, id))
		return false;
	if (p->shown == p->limit) {
		p->more = true;
		return false;
	}
	p->shown++;
	p->last_ms = ms;
	snprintf(p->last_id, sizeof(p->last_id), "%s", id ? id : "");
	return true;
}

void page_write_next(const struct page *p, struct jw *w)
{
	jw_key(w, "next_token");
	if (p->more) {
		_cleanup_free_ char *t = page_token(p->last_ms, p->last_id);
		jw_str(w, t);
	} else {
		jw_null(w);
	}
}

void page_list_open(struct jw *w, struct buf *b, const char *list)
{
	buf_init(b);
	jw_init(w, b);
	jw_obj(w);
	jw_key(w, list);
	jw_arr(w);
}

void page_list_respond(const struct page *p, struct jw *w, struct buf *b, struct http_conn *c)
{
	jw_end(w);
	page_write_next(p, w);
	jw_end(w);
	http_respond_json(c, 200, b->data);
	buf_free(b);
}
