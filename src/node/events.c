/* events.c - GET /v1/sandboxes/{id}/events: a sandbox's lifecycle log.
 *
 * Every transition (state.c) and every notable event (re-adoption, recovery,
 * snapshots pruned) is a row with its time and reason; this reads the last
 * EVENTS_MAX of them, oldest first:
 *   200 {"events":[{"at","from","to","reason"}, ...]}
 */
#include "../lib/http.h"
#include "../lib/json.h"
#include "node-internal.h"

#define EVENTS_MAX 500

void handle_events(struct node *n, struct sandbox *sb, struct http_conn *c)
{
	struct db_rows rows;
	err_t err = { 0 };
	struct buf b;
	struct jw w;

	if (db_query(n->db, &rows, &err,
		     "SELECT at, from_state, to_state, reason FROM"
		     " (SELECT id, at, from_state, to_state, reason FROM events"
		     "  WHERE sandbox_id=? ORDER BY id DESC LIMIT ?) AS last ORDER BY id",
		     "si", sb->id, (int64_t)EVENTS_MAX) < 0) {
		node_respond_err(c, &err);
		return;
	}
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "events");
	jw_arr(&w);
	for (int i = 0; i < rows.n_rows; i++) {
		char at[ISO_TIME_MAX];

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
	jw_end(&w);
	db_rows_free(&rows);
	http_respond_json(c, 200, b.data);
	buf_free(&b);
}
