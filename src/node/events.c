/* events.c - GET /v1/sandboxes/{id}/events: a sandbox's lifecycle log.
 *
 * Every transition (state.c) and every notable event (re-adoption, recovery,
 * snapshots pruned) is a row with its time and reason; this reads them a page
 * at a time (limit, next_token), oldest first:
 *   200 {"events":[{"at","from","to","reason"}, ...],"next_token"}
 */
#include <stdio.h>
#include <stdlib.h>

#include "../lib/http.h"
#include "../lib/json.h"
#include "../lib/page.h"
#include "node-internal.h"

/* Pages run oldest first by the row's id (the order they were written, which
 * the wall clock in `at` may not follow); the page key is that id. */
void handle_events(struct node *n, struct sandbox *sb, struct http_req *req, struct http_conn *c)
{
	struct db_rows rows;
	struct page pg;
	int64_t after = -1;
	err_t err = { 0 };
	struct buf b;
	struct jw w;

	if (page_from_req(&pg, req, false, c) < 0)
		return;
	if (pg.has_cursor)
		after = strtoll(pg.after_id, NULL, 10);
	if (db_query(n->db, &rows, &err,
		     "SELECT at, from_state, to_state, reason, id FROM events"
		     " WHERE sandbox_id=? AND id > ? ORDER BY id LIMIT ?",
		     "sii", sb->id, after, (int64_t)pg.limit + 1) < 0) {
		node_respond_err(c, &err);
		return;
	}
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "events");
	jw_arr(&w);
	for (int i = 0; i < rows.n_rows; i++) {
		char at[ISO_TIME_MAX], key[24];

		snprintf(key, sizeof(key), "%020lld", (long long)db_cell_int(&rows, i, 4));
		if (!page_take(&pg, 0, key))
			continue;
		iso_time(db_cell_int(&rows, i, 0), at);
		jw_obj(&w);
		jw_key(&w, "at");
		jw_str(&w, at);
		jw_key(&w, "from");
		jw_str(&w, db_cell(&rows, i, 1));
		jw_key(&w, "to");
		jw_str(&w, db_cell(&rows, i, 2));
		jw_key(&w, "reason");
		jw_str(&w, db_cell(&rows, i, 3));
		jw_end(&w);
	}
	jw_end(&w);
	page_write_next(&pg, &w);
	jw_end(&w);
	db_rows_free(&rows);
	http_respond_json(c, 200, b.data);
	buf_free(&b);
}
