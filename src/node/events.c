/* events.c - GET /v1/sandboxes/{id}/events: a sandbox's lifecycle log.
 *
 * Every transition (model/state.c) and every notable event (re-adoption, recovery,
 * snapshots pruned) is a row with its time and reason, and so is a limit
 * that bit (limits/limits.c: kind and count); this reads them a page at a
 * time (limit, next_token), oldest first:
 *   200 {"events":[{"at","type","from","to","reason"[,"count"]}, ...],"next_token"}
 * type: "state" for the lifecycle's rows, else the limit's kind
 * ("oom_kill", "pids_limit"), whose count is that kind's count in all.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>

#include "../lib/http.h"
#include "../lib/json.h"
#include "../lib/page.h"
#include "node-internal.h"

/* "type" of an event row, and a limit's "count" (column col). */
static void event_kind(struct jw *w, const char *kind, const struct db_rows *rows, int i, int col)
{
	jw_key(w, "type");
	jw_str(w, kind ? kind : "state");
	if (kind) {
		jw_key(w, "count");
		jw_int(w, db_cell_int(rows, i, col));
	}
}

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
		     "SELECT at, from_state, to_state, reason, id, kind, count FROM events"
		     " WHERE sandbox_id=? AND id > ? ORDER BY id LIMIT ?",
		     "sii", sb->id, after, (int64_t)pg.limit + 1) < 0) {
		node_respond_err(c, &err);
		return;
	}
	page_list_open(&w, &b, "events");
	for (int i = 0; i < rows.n_rows; i++) {
		char at[ISO_TIME_MAX], key[24];

		snprintf(key, sizeof(key), "%020lld", (long long)db_cell_int(&rows, i, 4));
		if (!page_take(&pg, 0, key))
			continue;
		iso_time(db_cell_int(&rows, i, 0), at);
		jw_obj(&w);
		jw_key(&w, "at");
		jw_str(&w, at);
		event_kind(&w, db_cell(&rows, i, 5), &rows, i, 6);
		jw_key(&w, "from");
		jw_str(&w, db_cell(&rows, i, 1));
		jw_key(&w, "to");
		jw_str(&w, db_cell(&rows, i, 2));
		jw_key(&w, "reason");
		jw_str(&w, db_cell(&rows, i, 3));
		jw_end(&w);
	}
	db_rows_free(&rows);
	page_list_respond(&pg, &w, &b, c);
}

/* GET /v1/sandboxes/events: the tenant's lifecycle transitions as they are
 * written, as a Server-Sent Events stream (text/event-stream), so that a
 * page (the web console) can show states live:
 *   id: <row id>
 *   event: state     (a limit's row: event: limit)
 *   data: {"sandbox","at","type","from","to","reason"[,"count"]}
 * It starts after the newest row at the time of the request, or after the
 * row named by `Last-Event-ID` (what a reconnecting client sends) or the
 * query `after`. It reads the events table (every writer of a transition
 * writes a row there: model/state.c), so it needs no hook in the state machine;
 * the cost per open stream is, every EVENTS_POLL_MS, a MAX(id) on the key
 * and a read of the rows written since the last tick, and the api's
 * per-tenant in-flight limit bounds how many streams a tenant opens. (With
 * PostgreSQL, a row whose transaction commits after a later id's was read
 * may be missed; SQLite commits one writer at a time, in id order.) A comment
 * line every EVENTS_KEEPALIVE_MS finds a client that went away. Scoped like
 * every list: the tenant's sandboxes only, an admin's included only as a
 * tenant's. Ends when the client goes or the node stops. */
#define EVENTS_POLL_MS 500
#define EVENTS_KEEPALIVE_MS 15000
#define EVENTS_BATCH 200

static int64_t events_newest_id(struct node *n, err_t *err)
{
	struct db_rows rows;
	int64_t id;

	if (db_query(n->db, &rows, err, "SELECT COALESCE(MAX(id), 0) FROM events", NULL) < 0)
		return -1;
	id = rows.n_rows ? db_cell_int(&rows, 0, 0) : 0;
	db_rows_free(&rows);
	return id;
}

/* The start: Last-Event-ID, else ?after=N, else the newest row. -1 and
 * answered 400 when either is not a row id. */
static int64_t events_start(struct node *n, struct http_req *req, struct http_conn *c)
{
	const char *h = http_req_header(req, "Last-Event-ID");
	_cleanup_free_ char *q = http_query_param(req, "after");
	const char *s = h ? h : q;
	err_t err = { 0 };
	int64_t v;

	if (!s) {
		v = events_newest_id(n, &err);
		if (v < 0)
			node_respond_err(c, &err);
		return v;
	}
	char *end;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (end == s || *end || errno || v < 0) {
		http_respond_error(c, 400, "invalid_field", "%s must be an event id (an integer >= 0)",
				   h ? "Last-Event-ID" : "after");
		return -1;
	}
	return v;
}

/* One batch of the tenant's rows after *after, written as events; *after
 * moves on. It moves past other tenants' rows too (to the newest row read
 * when the batch is not full), so that each tick reads only rows not read
 * before: a tenant with no events, or a stream started at 0, does not make
 * the node scan the whole table twice a second. Returns the number written,
 * or -1 when the client went away. */
static int events_send_batch(struct node *n, struct http_conn *c, const char *tenant,
			     int64_t *after, err_t *err)
{
	struct db_rows rows;
	int64_t newest = events_newest_id(n, err);
	struct buf b;
	int r;

	if (newest <= *after)
		return 0;   /* nothing new (or a busy database: the next tick) */
	if (db_query(n->db, &rows, err,
		     "SELECT e.id, e.sandbox_id, e.at, e.from_state, e.to_state, e.reason, e.kind,"
		     " e.count"
		     " FROM events e JOIN sandboxes s ON s.id = e.sandbox_id"
		     " WHERE e.id > ? AND e.id <= ? AND s.tenant_id = ? ORDER BY e.id LIMIT ?",
		     "iisi", *after, newest, tenant, (int64_t)EVENTS_BATCH) < 0)
		return 0;   /* a busy database: try again on the next tick */
	buf_init(&b);
	for (int i = 0; i < rows.n_rows; i++) {
		char at[ISO_TIME_MAX];
		struct jw w;

		*after = db_cell_int(&rows, i, 0);
		iso_time(db_cell_int(&rows, i, 2), at);
		/* a limit's row is event "limit": a page that follows states
		 * (event "state") is not told of it as a change */
		buf_printf(&b, "id: %lld\nevent: %s\ndata: ", (long long)*after,
			   db_cell(&rows, i, 6) ? "limit" : "state");
		jw_init(&w, &b);
		jw_obj(&w);
		jw_key(&w, "sandbox");
		jw_str(&w, db_cell(&rows, i, 1));
		jw_key(&w, "at");
		jw_str(&w, at);
		event_kind(&w, db_cell(&rows, i, 6), &rows, i, 7);
		jw_key(&w, "from");
		jw_str(&w, db_cell(&rows, i, 3));
		jw_key(&w, "to");
		jw_str(&w, db_cell(&rows, i, 4));
		jw_key(&w, "reason");
		jw_str(&w, db_cell(&rows, i, 5));
		jw_end(&w);
		buf_adds(&b, "\n\n");
	}
	r = rows.n_rows;
	if (r < EVENTS_BATCH)
		*after = newest;   /* every row up to newest is read */
	db_rows_free(&rows);
	if (b.len && http_stream_write(c, b.data, b.len) < 0)
		r = -1;
	buf_free(&b);
	return r;
}

void handle_sandboxes_events(struct node *n, struct http_req *req, struct http_conn *c,
			     const char *tenant)
{
	static const char hello[] = "retry: 2000\n: airlock sandbox events\n\n";
	int64_t after = events_start(n, req, c);
	uint64_t quiet_since = now_ms();
	err_t err = { 0 };

	if (after < 0)
		return;
	if (http_stream_begin(c, 200, "text/event-stream",
			      "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n") < 0 ||
	    http_stream_write(c, hello, sizeof(hello) - 1) < 0)
		return;
	while (!node_stopping(n) && !http_conn_peer_closed(c)) {
		int k = events_send_batch(n, c, tenant, &after, &err);

		if (k < 0)
			return;   /* the client went away */
		if (k > 0) {
			quiet_since = now_ms();
			if (k == EVENTS_BATCH)
				continue;   /* more are waiting */
		} else if (now_ms() - quiet_since >= EVENTS_KEEPALIVE_MS) {
			if (http_stream_write(c, ": keepalive\n\n", 13) < 0)
				return;
			quiet_since = now_ms();
		}
		poll(NULL, 0, EVENTS_POLL_MS);
	}
	http_stream_end(c);
}
