/* page.h - keyset pagination of list answers (docs/API.md, "Pagination").
 *
 * Every list is ordered by a key (created_at in ms, id). A page is the first
 * `limit` items whose key comes after the cursor; `next_token` is the key of
 * the last item of a full page, encoded so that clients treat it as opaque
 * (base64url of "v1:<ms>:<id>"). Because the cursor is a key and not an
 * offset, items created or deleted while a client pages never make it see an
 * existing item twice or miss one. */
#ifndef AIRLOCK_PAGE_H
#define AIRLOCK_PAGE_H

#include <stdbool.h>
#include <stdint.h>

#include "http.h"

#define PAGE_DEFAULT 100
#define PAGE_MAX 1000
#define PAGE_ID_MAX 160

struct page {
	unsigned limit;          /* 1..PAGE_MAX */
	bool desc;               /* newest first: "after" means older */
	bool has_cursor;
	int64_t after_ms;
	char after_id[PAGE_ID_MAX + 1];
	/* the walk of page_take */
	unsigned shown;
	bool more;
	int64_t last_ms;
	char last_id[PAGE_ID_MAX + 1];
};

struct jw;

/* Read `limit` and `next_token` from req's query. Returns 0, or -1 after
 * answering 400 invalid_field on c. desc: the list runs newest first. */
int page_from_req(struct page *p, const struct http_req *req, bool desc, struct http_conn *c);

/* The same from raw values (NULL = absent); -1 with *why set when bad. */
int page_parse(struct page *p, const char *limit, const char *token, bool desc,
	       const char **why);

/* Does the item keyed (ms, id) come after the cursor in the list's order? */
bool page_after(const struct page *p, int64_t ms, const char *id);

/* Compare two keys in the list's order: <0, 0, >0. */
int page_cmp(const struct page *p, int64_t ams, const char *aid, int64_t bms, const char *bid);

/* The token naming (ms, id) as the last item seen. Caller owns. */
char *page_token(int64_t ms, const char *id);

/* Walk the list in its order, calling this for each item: true when the
 * item belongs on the page (render it), false when not (before the cursor,
 * or the page is full: then p->more is set). */
bool page_take(struct page *p, int64_t ms, const char *id);

/* Inside the answer's object: `"next_token": <token or null>` after a walk. */
void page_write_next(const struct page *p, struct jw *w);

/* A whole list answer, 200 {"<list>":[items...],"next_token":...}: open
 * starts it in b (caller's, uninitialised) up to the '['; the caller walks
 * with page_take and writes each item on w; respond closes it, answers on c
 * and frees b. */
void page_list_open(struct jw *w, struct buf *b, const char *list);
void page_list_respond(const struct page *p, struct jw *w, struct buf *b, struct http_conn *c);

/* "2026-01-02T03:04:05.678Z" -> ms since the epoch; -1 when malformed. */
int64_t page_iso_ms(const char *s);

#endif
