/* Unit test for src/node/model/state.c: every (from, to) pair against the table
 * (state_transition and its in-memory half state_set), the names, and that a
 * transition writes observed, error and an events row (and that an illegal
 * one writes nothing). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/db/db.h"
#include "../../src/node/model/state.h"
#include "check.h"


/* The lifecycle as the README documents it, written out independently of
 * the table in state.c. */
static bool expected(enum sb_state from, enum sb_state to)
{
	switch (from) {
	case SB_PENDING: return to == SB_STARTING || to == SB_FAILED;
	case SB_STARTING: return to == SB_RUNNING || to == SB_FAILED;
	case SB_RUNNING:
		return to == SB_PAUSED || to == SB_STOPPING || to == SB_FAILED ||
		       to == SB_ROLLING_BACK || to == SB_SUSPENDING;
	case SB_PAUSED:
		return to == SB_RUNNING || to == SB_STOPPING || to == SB_FAILED ||
		       to == SB_ROLLING_BACK || to == SB_SUSPENDING;
	/* A failed suspend goes back to where it was; only a verified upload
	 * leads to suspended, which holds nothing on the node. */
	case SB_SUSPENDING:
		return to == SB_RUNNING || to == SB_PAUSED || to == SB_SUSPENDED ||
		       to == SB_FAILED;
	case SB_SUSPENDED: return to == SB_RESTORING || to == SB_DELETED;
	case SB_RESTORING: return to == SB_RUNNING || to == SB_SUSPENDED || to == SB_FAILED;
	case SB_ROLLING_BACK: return to == SB_RUNNING || to == SB_FAILED;
	case SB_STOPPING: return to == SB_STOPPED || to == SB_FAILED;
	case SB_STOPPED: return to == SB_DELETED || to == SB_FAILED;
	case SB_FAILED: return to == SB_DELETED;
	case SB_DELETED: return false;
	default: return false;
	}
}

static void test_table(void)
{
	int legal = 0;

	for (int f = 0; f < SB__COUNT; f++) {
		for (int t = 0; t < SB__COUNT; t++) {
			enum sb_state cur = (enum sb_state)f;
			err_t err = { 0 };
			bool want = expected((enum sb_state)f, (enum sb_state)t);
			int r;

			if (state_allowed((enum sb_state)f, (enum sb_state)t) != want) {
				fprintf(stderr, "table: %s -> %s should be %s\n",
					state_name((enum sb_state)f), state_name((enum sb_state)t),
					want ? "legal" : "illegal");
				failures++;
			}
			r = state_transition(NULL, "sb-test", &cur, (enum sb_state)t, "test", 0,
					     &err);
			if (want) {
				CHECK(r == 0 && cur == (enum sb_state)t);
				legal++;
			} else {
				CHECK(r == -EBUSY && cur == (enum sb_state)f);
				CHECK(err.code == EBUSY);
				CHECK(strstr(err.msg, state_name((enum sb_state)f)) != NULL);
			}
		}
	}
	/* 15 + running|paused → rolling_back → running|failed, + 11 of suspend:
	 * running|paused → suspending → running|paused|suspended|failed,
	 * suspended → restoring|deleted, restoring → running|suspended|failed */
	CHECK(legal == 30);
	/* Out-of-range values are never legal. */
	CHECK(!state_allowed(SB__COUNT, SB_FAILED));
	CHECK(!state_allowed(SB_RUNNING, SB__COUNT));
}

/* state_set, the in-memory half: the same table, plus the edges only memory
 * takes (a create whose first write rolled back: pending or starting →
 * deleted), which state_transition keeps refusing. */
static void test_set(void)
{
	int legal = 0;

	for (int f = 0; f < SB__COUNT; f++) {
		for (int t = 0; t < SB__COUNT; t++) {
			bool unrecorded = ((f == SB_PENDING || f == SB_STARTING) && t == SB_DELETED) ||
					  (f == SB_SUSPENDED && t == SB_SUSPENDING);
			bool want = expected((enum sb_state)f, (enum sb_state)t) || unrecorded;
			enum sb_state cur = (enum sb_state)f;
			int r = state_set("sb-test", &cur, (enum sb_state)t);

			if (want) {
				CHECK(r == 0 && cur == (enum sb_state)t);
				legal++;
			} else {
				CHECK(r == -EBUSY && cur == (enum sb_state)f);
			}
		}
	}
	/* the table's 30 + pending|starting → deleted + suspended → suspending */
	CHECK(legal == 33);
	{
		enum sb_state cur = SB_PENDING;
		err_t err = { 0 };
		CHECK(state_transition(NULL, "sb-test", &cur, SB_DELETED, NULL, 0, &err) == -EBUSY);
		CHECK(cur == SB_PENDING);
		cur = SB_SUSPENDED;
		CHECK(state_transition(NULL, "sb-test", &cur, SB_SUSPENDING, NULL, 0, &err) == -EBUSY);
		CHECK(cur == SB_SUSPENDED);
	}
}

static void test_names(void)
{
	for (int s = 0; s < SB__COUNT; s++)
		CHECK(state_parse(state_name((enum sb_state)s)) == s);
	CHECK(state_parse("paused") == SB_PAUSED);
	CHECK(strcmp(state_name(SB_PAUSED), "paused") == 0);
	CHECK(state_is_live(SB_PAUSED));
	CHECK(state_parse("rolling_back") == SB_ROLLING_BACK);
	CHECK(state_is_live(SB_ROLLING_BACK));
	CHECK(state_parse("suspended") == SB_SUSPENDED);
	CHECK(state_parse("suspending") == SB_SUSPENDING && state_parse("restoring") == SB_RESTORING);
	/* suspending and restoring hold the node's resources; suspended holds
	 * none (it does not count against max_sandboxes). */
	CHECK(state_is_live(SB_SUSPENDING) && state_is_live(SB_RESTORING));
	CHECK(!state_is_live(SB_SUSPENDED));
	CHECK(state_parse("hibernated") == -1);
	CHECK(state_parse("") == -1);
	CHECK(state_parse(NULL) == -1);
	CHECK(strcmp(state_name(SB_RUNNING), "running") == 0);
	CHECK(state_is_live(SB_RUNNING) && state_is_live(SB_STARTING));
	CHECK(!state_is_live(SB_FAILED) && !state_is_live(SB_DELETED) && !state_is_live(SB_STOPPED));
}

static int count_events(struct db *db, const char *id)
{
	struct db_rows rows;
	err_t err = { 0 };
	int n;

	if (db_query(db, &rows, &err, "SELECT COUNT(*) FROM events WHERE sandbox_id=?", "s",
		     id) < 0)
		return -1;
	n = (int)db_cell_int(&rows, 0, 0);
	db_rows_free(&rows);
	return n;
}

static void test_db(void)
{
	char path[] = "/tmp/test-node-state-XXXXXX";
	int fd = mkstemp(path);
	struct db_rows rows;
	err_t err = { 0 };
	enum sb_state cur = SB_PENDING;
	struct db *db;

	CHECK(fd >= 0);
	close(fd);
	db = db_open(path, &err);
	CHECK(db != NULL);
	if (!db) {
		fprintf(stderr, "db_open: %s\n", err.msg);
		unlink(path);
		return;
	}
	CHECK(db_exec(db, &err,
		      "INSERT INTO sandboxes(id, tenant_id, template, template_version, backend,"
		      " desired, observed, spec, created_at, updated_at)"
		      " VALUES('sb-1','t','debian',1,'ns','running','pending','{}',0,0)",
		      NULL) == 1);

	CHECK(state_transition(db, "sb-1", &cur, SB_STARTING, "create", 0, &err) == 0);
	CHECK(cur == SB_STARTING);
	CHECK(count_events(db, "sb-1") == 1);

	/* Inside the caller's transaction. */
	CHECK(db_tx_begin(db, &err) == 0);
	CHECK(state_transition(db, "sb-1", &cur, SB_RUNNING, "ready", STATE_IN_TX, &err) == 0);
	CHECK(db_tx_commit(db, &err) == 0);
	CHECK(cur == SB_RUNNING);

	/* Illegal: nothing is written. */
	CHECK(state_transition(db, "sb-1", &cur, SB_PENDING, "nope", 0, &err) == -EBUSY);
	CHECK(cur == SB_RUNNING);
	CHECK(count_events(db, "sb-1") == 2);

	/* Pause and resume: running -> paused -> running, each an events row
	 * with its reason; resuming a running or pausing a paused sandbox is a
	 * conflict that names the current state and writes nothing. */
	CHECK(state_transition(db, "sb-1", &cur, SB_PAUSED, "paused by client", 0, &err) == 0);
	CHECK(cur == SB_PAUSED);
	CHECK(state_transition(db, "sb-1", &cur, SB_PAUSED, "again", 0, &err) == -EBUSY);
	CHECK(strstr(err.msg, "paused") != NULL);
	CHECK(db_query(db, &rows, &err, "SELECT observed FROM sandboxes WHERE id='sb-1'", NULL) == 0);
	CHECK(rows.n_rows == 1 && strcmp(db_cell(&rows, 0, 0), "paused") == 0);
	db_rows_free(&rows);
	CHECK(state_transition(db, "sb-1", &cur, SB_RUNNING, "resumed for exec", 0, &err) == 0);
	CHECK(state_transition(db, "sb-1", &cur, SB_RUNNING, "resume", 0, &err) == -EBUSY);
	CHECK(strstr(err.msg, "running") != NULL);
	CHECK(cur == SB_RUNNING);
	CHECK(count_events(db, "sb-1") == 4);
	CHECK(db_query(db, &rows, &err,
		       "SELECT from_state, to_state, reason FROM events WHERE sandbox_id='sb-1'"
		       " ORDER BY id DESC LIMIT 1",
		       NULL) == 0);
	CHECK(rows.n_rows == 1 && strcmp(db_cell(&rows, 0, 0), "paused") == 0 &&
	      strcmp(db_cell(&rows, 0, 1), "running") == 0 &&
	      strcmp(db_cell(&rows, 0, 2), "resumed for exec") == 0);
	db_rows_free(&rows);

	CHECK(state_transition(db, "sb-1", &cur, SB_FAILED, "guest channel closed", 0, &err) == 0);
	CHECK(db_query(db, &rows, &err, "SELECT observed, error FROM sandboxes WHERE id='sb-1'",
		       NULL) == 0);
	CHECK(rows.n_rows == 1 && strcmp(db_cell(&rows, 0, 0), "failed") == 0 &&
	      strcmp(db_cell(&rows, 0, 1), "guest channel closed") == 0);
	db_rows_free(&rows);
	CHECK(db_query(db, &rows, &err,
		       "SELECT from_state, to_state, reason FROM events WHERE sandbox_id='sb-1'"
		       " ORDER BY id",
		       NULL) == 0);
	CHECK(rows.n_rows == 5);
	CHECK(strcmp(db_cell(&rows, 0, 0), "pending") == 0 &&
	      strcmp(db_cell(&rows, 0, 1), "starting") == 0 &&
	      strcmp(db_cell(&rows, 0, 2), "create") == 0);
	CHECK(strcmp(db_cell(&rows, 4, 0), "running") == 0 &&
	      strcmp(db_cell(&rows, 4, 1), "failed") == 0);
	db_rows_free(&rows);

	CHECK(state_event(db, "sb-1", SB_FAILED, "note", &err) == 0);
	CHECK(count_events(db, "sb-1") == 6);

	/* A missing row is an error and leaves the state alone. */
	cur = SB_PENDING;
	CHECK(state_transition(db, "sb-none", &cur, SB_STARTING, NULL, 0, &err) == -ENOENT);
	CHECK(cur == SB_PENDING);

	db_close(db);
	unlink(path);
	{
		char extra[64];
		snprintf(extra, sizeof(extra), "%s-wal", path);
		unlink(extra);
		snprintf(extra, sizeof(extra), "%s-shm", path);
		unlink(extra);
	}
}

static const char *observed(struct db *db, const char *id, char *out, size_t n)
{
	struct db_rows rows;
	err_t err = { 0 };

	out[0] = 0;
	if (db_query(db, &rows, &err, "SELECT observed FROM sandboxes WHERE id=?", "s", id) == 0) {
		if (rows.n_rows == 1)
			snprintf(out, n, "%s", db_cell(&rows, 0, 0));
		db_rows_free(&rows);
	}
	return out;
}

static int count_rows(struct db *db, const char *table, const char *id)
{
	char sql[128];
	struct db_rows rows;
	err_t err = { 0 };
	int n;

	snprintf(sql, sizeof(sql), "SELECT COUNT(*) FROM %s WHERE sandbox_id=?", table);
	if (db_query(db, &rows, &err, sql, "s", id) < 0)
		return -1;
	n = (int)db_cell_int(&rows, 0, 0);
	db_rows_free(&rows);
	return n;
}

/* The rows about a sandbox besides its own, written as the node writes them
 * (snap/snapshots.c, suspend/suspend.c and restore.c, snap/recover.c and
 * fork.c, artifacts/artifacts.c, state_event): under a stale epoch (the
 * caller made one) none is added, changed or deleted, and each says ESTALE. */
static void test_fence_rows(struct db *db, const char *id)
{
	struct state_fence f = state_fence();
	err_t err = { 0 };
	int r;

	CHECK(f.epoch != 0);
	/* rows that were there before the node went stale */
	CHECK(db_exec(db, &err,
		      "INSERT INTO snapshots(id, sandbox_id, name, kind, created_at)"
		      " VALUES('s0',?,'old','disk',0)", "s", id) == 1);
	CHECK(db_exec(db, &err,
		      "INSERT INTO suspensions(sandbox_id, snapshot_id, bytes, manifest_sha,"
		      " prev_state, created_at) VALUES(?,'s0',1,'x','running',0)", "s", id) == 1);
	CHECK(db_exec(db, &err,
		      "INSERT INTO data_keys(id, tenant_id, sandbox_id, snapshot_id, provider,"
		      " wrapped, created_at) VALUES('k0','t',?,'s0','local','w',0)", "s", id) == 1);
	err = (err_t){ 0 };

	CHECK(state_event(db, id, SB_PAUSED, "stale", &err) == -ESTALE);
	CHECK(err.code == ESTALE);
	CHECK(count_events(db, id) == 1); /* only the first pause's */

	r = db_exec(db, &err,
		    "INSERT INTO snapshots(id, sandbox_id, name, kind, size_bytes, created_at,"
		    " scheduled, procs) SELECT ?,?,?,?,?,?,?,? WHERE " STATE_FENCE_OF_SQL,
		    "ssssiiis" STATE_FENCE_OF_TYPES, "s1", id, "new", "disk", (int64_t)1,
		    (int64_t)1, (int64_t)1, NULL, STATE_FENCE_OF_ARGS(f, id));
	CHECK(state_fenced(db, id, r, &err) == -ESTALE);
	CHECK(count_rows(db, "snapshots", id) == 1);

	r = db_exec(db, &err,
		    "DELETE FROM snapshots WHERE id=? AND sandbox_id=? AND " STATE_FENCE_OF_SQL,
		    "ss" STATE_FENCE_OF_TYPES, "s0", id, STATE_FENCE_OF_ARGS(f, id));
	CHECK(state_fenced(db, id, r, &err) == -ESTALE);
	CHECK(count_rows(db, "snapshots", id) == 1);

	r = db_exec(db, &err,
		    "INSERT INTO suspensions(sandbox_id, snapshot_id, bytes, manifest_sha,"
		    " prev_state, created_at, procs, data_key) SELECT ?,?,?,?,?,?,?,? WHERE "
		    STATE_FENCE_OF_SQL
		    " ON CONFLICT(sandbox_id) DO UPDATE SET snapshot_id=excluded.snapshot_id",
		    "ssississ" STATE_FENCE_OF_TYPES, id, "s9", (int64_t)2, "y", "paused",
		    (int64_t)2, NULL, NULL, STATE_FENCE_OF_ARGS(f, id));
	CHECK(state_fenced(db, id, r, &err) == -ESTALE);
	{
		struct db_rows rows;

		CHECK(db_query(db, &rows, &err, "SELECT snapshot_id FROM suspensions"
			       " WHERE sandbox_id=?", "s", id) == 0);
		CHECK(rows.n_rows == 1 && strcmp(db_cell(&rows, 0, 0), "s0") == 0);
		db_rows_free(&rows);
	}
	r = db_exec(db, &err, "DELETE FROM suspensions WHERE sandbox_id=? AND " STATE_FENCE_OF_SQL,
		    "s" STATE_FENCE_OF_TYPES, id, STATE_FENCE_OF_ARGS(f, id));
	CHECK(state_fenced(db, id, r, &err) == -ESTALE);
	CHECK(count_rows(db, "suspensions", id) == 1);

	r = db_exec(db, &err,
		    "INSERT INTO lineage(sandbox_id, recovered_from) SELECT ?,? WHERE "
		    STATE_FENCE_OF_SQL
		    " ON CONFLICT(sandbox_id) DO UPDATE SET recovered_from=excluded.recovered_from",
		    "ss" STATE_FENCE_OF_TYPES, id, "{}", STATE_FENCE_OF_ARGS(f, id));
	CHECK(state_fenced(db, id, r, &err) == -ESTALE);
	CHECK(count_rows(db, "lineage", id) == 0);

	r = db_exec(db, &err,
		    "DELETE FROM data_keys WHERE sandbox_id=? AND (? IS NULL OR id<>?) AND "
		    STATE_FENCE_OF_SQL,
		    "sss" STATE_FENCE_OF_TYPES, id, NULL, NULL, STATE_FENCE_OF_ARGS(f, id));
	CHECK(state_fenced(db, id, r, &err) == -ESTALE);
	CHECK(count_rows(db, "data_keys", id) == 1);

	/* the same statements while the fence holds write (the epoch back) */
	CHECK(db_exec(db, &err, "UPDATE nodes SET generation=? WHERE name=?", "is", f.epoch,
		      f.node) == 1);
	CHECK(state_event(db, id, SB_PAUSED, "current", &err) == 0);
	CHECK(count_events(db, id) == 2);
	r = db_exec(db, &err, "DELETE FROM suspensions WHERE sandbox_id=? AND " STATE_FENCE_OF_SQL,
		    "s" STATE_FENCE_OF_TYPES, id, STATE_FENCE_OF_ARGS(f, id));
	CHECK(state_fenced(db, id, r, &err) == 1);
	/* nothing to delete is no miss */
	r = db_exec(db, &err, "DELETE FROM suspensions WHERE sandbox_id=? AND " STATE_FENCE_OF_SQL,
		    "s" STATE_FENCE_OF_TYPES, id, STATE_FENCE_OF_ARGS(f, id));
	CHECK(state_fenced(db, id, r, &err) == 0);
	r = db_exec(db, &err,
		    "INSERT INTO lineage(sandbox_id, recovered_from) SELECT ?,? WHERE "
		    STATE_FENCE_OF_SQL,
		    "ss" STATE_FENCE_OF_TYPES, id, "{}", STATE_FENCE_OF_ARGS(f, id));
	CHECK(state_fenced(db, id, r, &err) == 1);
	CHECK(db_exec(db, &err, "DELETE FROM lineage WHERE sandbox_id=?", "s", id) == 1);
	/* and stale again, as the caller left it */
	CHECK(db_exec(db, &err, "UPDATE nodes SET generation=? WHERE name=?", "is",
		      f.epoch + 1, f.node) == 1);
}

/* The fence: once set, a row is written only while it names this node and
 * the nodes row holds this node at its epoch, not lost. */
static void test_fence(void)
{
	char path[] = "/tmp/test-node-fence-XXXXXX";
	int fd = mkstemp(path);
	err_t err = { 0 };
	enum sb_state cur = SB_RUNNING;
	char got[32];
	struct db *db;

	CHECK(fd >= 0);
	close(fd);
	db = db_open(path, &err);
	CHECK(db != NULL);
	if (!db) {
		unlink(path);
		return;
	}
	CHECK(db_exec(db, &err,
		      "INSERT INTO sandboxes(id, tenant_id, template, template_version, backend,"
		      " desired, observed, spec, created_at, updated_at, node) VALUES"
		      " ('mine','t','debian',1,'ns','running','running','{}',0,0,'na'),"
		      " ('moved','t','debian',1,'ns','running','running','{}',0,0,'nb')",
		      NULL) == 2);
	CHECK(db_exec(db, &err,
		      "INSERT INTO nodes(name, state, generation, started_at, heartbeat_at)"
		      " VALUES('na','up',7,0,0)", NULL) == 1);
	state_set_fence("na", 7);

	CHECK(state_transition(db, "mine", &cur, SB_PAUSED, "p", 0, &err) == 0);
	CHECK(strcmp(observed(db, "mine", got, sizeof(got)), "paused") == 0);

	/* a row that names another node: not written, memory unchanged */
	cur = SB_RUNNING;
	CHECK(state_transition(db, "moved", &cur, SB_PAUSED, "p", 0, &err) == -ESTALE);
	CHECK(cur == SB_RUNNING);
	CHECK(strcmp(observed(db, "moved", got, sizeof(got)), "running") == 0);
	CHECK(count_events(db, "moved") == 0);

	/* another process registered under the name (a newer epoch) */
	cur = SB_PAUSED;
	CHECK(db_exec(db, &err, "UPDATE nodes SET generation=8 WHERE name='na'", NULL) == 1);
	CHECK(state_transition(db, "mine", &cur, SB_RUNNING, "r", 0, &err) == -ESTALE);
	CHECK(strcmp(observed(db, "mine", got, sizeof(got)), "paused") == 0);
	test_fence_rows(db, "mine");

	/* marked lost at this epoch */
	CHECK(db_exec(db, &err, "UPDATE nodes SET generation=7, state='lost' WHERE name='na'",
		      NULL) == 1);
	CHECK(state_transition(db, "mine", &cur, SB_FAILED, "x", 0, &err) == -ESTALE);
	CHECK(strcmp(observed(db, "mine", got, sizeof(got)), "paused") == 0);

	/* stopping cleanly (down) still writes its own rows */
	CHECK(db_exec(db, &err, "UPDATE nodes SET state='down' WHERE name='na'", NULL) == 1);
	CHECK(state_transition(db, "mine", &cur, SB_RUNNING, "r", 0, &err) == 0);

	state_set_fence(NULL, 0);
	db_close(db);
	unlink(path);
	{
		char extra[64];
		snprintf(extra, sizeof(extra), "%s-wal", path);
		unlink(extra);
		snprintf(extra, sizeof(extra), "%s-shm", path);
		unlink(extra);
	}
}

int main(void)
{
	test_table();
	test_set();
	test_names();
	test_db();
	test_fence();
	if (failures) {
		fprintf(stderr, "test-node-state: %d failures\n", failures);
		return 1;
	}
	printf("test-node-state: ok\n");
	return 0;
}
