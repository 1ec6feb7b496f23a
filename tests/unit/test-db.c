/* The database layer, the same checks on both drivers: SQLite on a file in a
 * temp directory, and a real PostgreSQL 15 that tests/pg/pg-start.sh starts
 * in another one (stopped and removed at exit, or by its watcher if this
 * process dies). Exit 77 only when PostgreSQL is not installed (after the
 * SQLite half ran).
 *
 * Each check gets a fresh database: a new file, or CREATE DATABASE t<n>. */
#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../src/db/db.h"
#include "../../src/lib/util.h"
#include "check.h"

static char tmp[] = "/tmp/airlock-test-db.XXXXXX";
static char pgdir[256];
static char pg_url[256];   /* postgresql://airlock@127.0.0.1:PORT/airlock, or "" */
static struct db *pg_admin;
static int fresh_n;

/* A target nobody opened yet: a new SQLite file, or a new PostgreSQL
 * database made through the admin handle. */
static void fresh(bool pg, char *out, size_t len)
{
	fresh_n++;
	if (!pg) {
		snprintf(out, len, "%s/t%d.db", tmp, fresh_n);
		return;
	}
	char sql[64];
	err_t err = { 0 };
	snprintf(sql, sizeof(sql), "CREATE DATABASE t%d", fresh_n);
	if (db_exec(pg_admin, &err, sql, NULL) < 0)
		fprintf(stderr, "create database: %s\n", err.msg);
	snprintf(out, len, "%.*s/t%d", (int)(strrchr(pg_url, '/') - pg_url), pg_url, fresh_n);
}

static int64_t q_int(struct db *db, const char *sql)
{
	struct db_rows rows;
	err_t err = { 0 };
	int64_t v;

	if (db_query(db, &rows, &err, sql, NULL) < 0) {
		fprintf(stderr, "%s: %s\n", sql, err.msg);
		return -1;
	}
	v = db_cell_int(&rows, 0, 0);
	db_rows_free(&rows);
	return v;
}

/* Migrations: applied once, recorded 1..latest; a reopen changes nothing. */
static void test_migrations(bool pg)
{
	char t[256];
	err_t err = { 0 };
	struct db *db;
	struct db_rows before, after;
	int latest = db_schema_latest();

	fresh(pg, t, sizeof(t));
	db = db_open(t, &err);
	CHECK(db != NULL);
	if (!db) {
		fprintf(stderr, "open %s: %s\n", t, err.msg);
		return;
	}
	CHECK(latest >= 3);
	CHECK(db_schema_version(db, &err) == latest);
	CHECK(q_int(db, "SELECT count(*) FROM schema_migrations") == latest);
	CHECK(q_int(db, "SELECT min(version) FROM schema_migrations") == 1);
	/* migration 1 has the columns old code added by ALTER; 2 the nodes table */
	CHECK(db_exec(db, &err, "INSERT INTO snapshots(id, sandbox_id, name, kind, created_at,"
		      " scheduled, procs) VALUES('s1', 'sb', 'n', 'disk', ?, 1, '[]')", "i",
		      (int64_t)1764633600123) == 1);
	CHECK(q_int(db, "SELECT created_at FROM snapshots") == 1764633600123);
	CHECK(db_exec(db, &err, "INSERT INTO nodes(name, state, heartbeat_at, capacity,"
		      " generation) VALUES('n1', 'up', 1, '{}', 1)", NULL) == 1);
	/* auto-numbered ids on both */
	CHECK(db_exec(db, &err, "INSERT INTO events(sandbox_id, at) VALUES('sb', 1)", NULL) == 1);
	CHECK(db_exec(db, &err, "INSERT INTO events(sandbox_id, at) VALUES('sb', 2)", NULL) == 1);
	CHECK(q_int(db, "SELECT max(id) - min(id) FROM events") == 1);
	CHECK(db_query(db, &before, &err, "SELECT version, applied_at FROM schema_migrations"
		       " ORDER BY version", NULL) == 0);
	/* an envd token check (compat/e2b, no credential needed to cause
	 * one) reads its sandbox's rows by index, not the whole table */
	if (!pg) {
		struct db_rows plan;
		bool indexed = false;
		CHECK(db_query(db, &plan, &err, "EXPLAIN QUERY PLAN SELECT hash FROM port_tokens"
			       " WHERE sandbox_id = 'sb' AND port = 49983 AND expires_at > 1",
			       NULL) == 0);
		for (int i = 0; i < plan.n_rows; i++)
			indexed |= strstr(db_cell(&plan, i, 3), "USING INDEX port_tokens_sandbox") != 0;
		CHECK(indexed);
		db_rows_free(&plan);
	} else {
		CHECK(q_int(db, "SELECT count(*) FROM pg_indexes WHERE indexname ="
			    " 'port_tokens_sandbox'") == 1);
	}
	db_close(db);

	db = db_open(t, &err);
	CHECK(db != NULL);
	if (!db)
		return;
	CHECK(db_query(db, &after, &err, "SELECT version, applied_at FROM schema_migrations"
		       " ORDER BY version", NULL) == 0);
	CHECK(after.n_rows == before.n_rows && after.n_rows == latest);
	for (int i = 0; i < after.n_rows && i < before.n_rows; i++)
		CHECK(!strcmp(db_cell(&after, i, 1), db_cell(&before, i, 1)));
	CHECK(q_int(db, "SELECT count(*) FROM snapshots") == 1);
	db_rows_free(&before);
	db_rows_free(&after);
	/* migration 12: a limit's event row has its kind and count; with the
	 * recorded version set back, it runs again without failing on the
	 * columns it finds */
	CHECK(db_exec(db, &err, "INSERT INTO events(sandbox_id, at, kind, count)"
		      " VALUES('sb', 3, 'oom_kill', 7)", NULL) == 1);
	CHECK(db_exec(db, &err, "DELETE FROM schema_migrations WHERE version = 12", NULL) == 1);
	db_close(db);
	db = db_open(t, &err);
	CHECK(db != NULL);
	if (!db)
		return;
	CHECK(db_schema_version(db, &err) == latest);
	CHECK(q_int(db, "SELECT count FROM events WHERE kind = 'oom_kill'") == 7);
	CHECK(q_int(db, "SELECT count(*) FROM events WHERE kind IS NULL") == 2);
	db_close(db);
}

/* Several processes open one new database at once (the api, node and
 * gateway do): every open succeeds and each migration is recorded once.
 * SQLite refuses a switch to WAL at once while another connection creates
 * the file, a race one round in a few lost, so run it many rounds. */
struct opener {
	const char *target;
	pthread_barrier_t *bar;
	int ok;
	err_t err;
};

static void *open_racing(void *arg)
{
	struct opener *o = arg;
	struct db *db;

	pthread_barrier_wait(o->bar);
	db = db_open(o->target, &o->err);
	o->ok = db != NULL;
	db_close(db);
	return NULL;
}

static void test_migrations_racing(bool pg)
{
	enum { N = 6 };
	int rounds = pg ? 3 : 40;

	for (int round = 0; round < rounds; round++) {
		char t[256];
		pthread_t th[N];
		struct opener o[N];
		pthread_barrier_t bar;
		err_t err = { 0 };
		struct db *db;

		fresh(pg, t, sizeof(t));
		pthread_barrier_init(&bar, NULL, N);
		for (int i = 0; i < N; i++) {
			o[i] = (struct opener){ .target = t, .bar = &bar };
			pthread_create(&th[i], NULL, open_racing, &o[i]);
		}
		for (int i = 0; i < N; i++) {
			pthread_join(th[i], NULL);
			CHECK(o[i].ok);
			if (!o[i].ok)
				fprintf(stderr, "racing open, round %d: %s\n", round, o[i].err.msg);
		}
		pthread_barrier_destroy(&bar);
		db = db_open(t, &err);
		CHECK(db && q_int(db, "SELECT count(*) FROM schema_migrations") == db_schema_latest());
		db_close(db);
	}
}

/* The roles open one SQLite file as users of their own in one group (up.c,
 * users.c). After the last connection closed, the first opens make the -wal
 * and -shm files again; made under a umask that leaves the group without
 * write, one user's open could catch them in that state and go read-only
 * (seen in CI: a restart whose node and gateway failed with "attempt to
 * write a readonly database"). Three users race db_open on it, each round,
 * with the umask the roles get (DB_SHARED_UMASK): every open succeeds.
 * Under 022, more than half of the 120 opens failed here. Root only. */
static void test_open_across_users(void)
{
	enum { ROUNDS = 40, USERS = 3 };
	const gid_t group = 61000;
	char dir[300], t[340];
	int bad = 0;

	if (geteuid() != 0) {
		printf("test-db: not root: the open across users is not checked\n");
		return;
	}
	snprintf(dir, sizeof(dir), "%s/shared", tmp);
	CHECK(mkdir(dir, 02770) == 0 && chown(dir, 61001, group) == 0 && chmod(dir, 02770) == 0);
	for (int round = 0; round < ROUNDS; round++) {
		err_t err = { 0 };
		struct db *db;
		pid_t pids[USERS];
		int go[2];

		/* made, migrated and closed by root (as `up` does): no -wal, -shm */
		snprintf(t, sizeof(t), "%s/r%d.db", dir, round);
		db = db_open(t, &err);
		CHECK(db != NULL);
		db_close(db);
		CHECK(chown(t, 61001, group) == 0 && chmod(t, 0660) == 0);
		if (pipe(go) < 0) {
			CHECK(!"pipe");
			return;
		}
		for (int u = 0; u < USERS; u++) {
			pids[u] = fork();
			if (pids[u] == 0) {
				uid_t uid = 61001 + (uid_t)u;
				gid_t own = u == 0 ? group : 61001 + (gid_t)u;
				char c;
				close(go[1]);
				if (setgroups(1, &group) < 0 || setresgid(own, own, own) < 0 ||
				    setresuid(uid, uid, uid) < 0)
					_exit(3);
				umask(DB_SHARED_UMASK);
				if (read(go[0], &c, 1) != 1)
					_exit(4);
				db = db_open(t, &err);
				if (!db) {
					fprintf(stderr, "round %d, uid %u: %s\n", round, (unsigned)uid,
						err.msg);
					_exit(1);
				}
				db_close(db);
				_exit(0);
			}
		}
		close(go[0]);
		CHECK(write(go[1], "abc", USERS) == USERS);
		close(go[1]);
		for (int u = 0; u < USERS; u++) {
			int st = 0;
			if (pids[u] < 0 || waitpid(pids[u], &st, 0) < 0 || !WIFEXITED(st) ||
			    WEXITSTATUS(st) != 0)
				bad++;
		}
	}
	CHECK(bad == 0);
	if (bad)
		fprintf(stderr, "open across users: %d of %d opens failed\n", bad, ROUNDS * USERS);
}

/* "?" outside literals only; NULLs; affected rows; -EEXIST; transactions. */
static void test_statements(bool pg)
{
	char t[256];
	err_t err = { 0 };
	struct db_rows rows;
	struct db *db;

	fresh(pg, t, sizeof(t));
	db = db_open(t, &err);
	CHECK(db != NULL);
	if (!db)
		return;
	CHECK(db_query(db, &rows, &err,
		       "SELECT '?' AS a, ? AS b, 'it''s ?' AS c, ? AS d /* ? */ -- ?\n, 'x' AS e",
		       "si", "v?", (int64_t)-5) == 0);
	CHECK(rows.n_rows == 1 && rows.n_cols == 5);
	CHECK(rows.n_rows == 1 && !strcmp(db_cell(&rows, 0, 0), "?"));
	CHECK(rows.n_rows == 1 && !strcmp(db_cell(&rows, 0, 1), "v?"));
	CHECK(rows.n_rows == 1 && !strcmp(db_cell(&rows, 0, 2), "it's ?"));
	CHECK(rows.n_rows == 1 && db_cell_int(&rows, 0, 3) == -5);
	db_rows_free(&rows);
	/* a parameter count that does not match the type string */
	CHECK(db_query(db, &rows, &err, "SELECT ?, ?", "s", "a") < 0);

	CHECK(db_exec(db, &err, "INSERT INTO tenants(id, name, created_at) VALUES(?, ?, ?)", "ssi",
		      "t1", "one", (int64_t)1) == 1);
	CHECK(db_exec(db, &err, "INSERT INTO tenants(id, name, created_at) VALUES(?, ?, ?)", "ssi",
		      "t2", "two", (int64_t)2) == 1);
	CHECK(db_exec(db, &err, "INSERT INTO tenants(id, name, created_at) VALUES(?, ?, ?)", "ssi",
		      "t3", "one", (int64_t)3) == -EEXIST);
	CHECK(err.code == EEXIST);
	CHECK(db_exec(db, &err, "INSERT INTO tenants(id, name, created_at) VALUES(?, ?, ?)"
		      " ON CONFLICT DO NOTHING", "ssi", "t3", "one", (int64_t)3) == 0);
	CHECK(db_exec(db, &err, "UPDATE tenants SET created_at = created_at + 10", NULL) == 2);
	/* NULL parameters, and "? IS NULL" on both */
	CHECK(db_exec(db, &err, "INSERT INTO api_keys(id, tenant_id, hash, name, created_at)"
		      " VALUES(?, ?, ?, ?, ?)", "ssssi", "k1", "t1", "h1", NULL, (int64_t)1) == 1);
	CHECK(db_query(db, &rows, &err, "SELECT id, name FROM api_keys WHERE (? IS NULL OR id = ?)"
		       " AND name IS NULL", "ss", NULL, NULL) == 0);
	CHECK(rows.n_rows == 1 && db_cell(&rows, 0, 1) == NULL);
	db_rows_free(&rows);
	CHECK(q_int(db, "SELECT count(*) FROM tenants WHERE name = 'it''s'") == 0);
	/* 'n' goes untyped, so PostgreSQL takes a bigint column's type for it */
	CHECK(db_exec(db, &err, "INSERT INTO snapshots(id, sandbox_id, name, kind, size_bytes,"
		      " created_at) VALUES(?, ?, ?, ?, ?, ?)", "ssssni", "s1", "sb", "a", "disk",
		      (int64_t)7) == 1);
	CHECK(q_int(db, "SELECT count(*) FROM snapshots WHERE size_bytes IS NULL") == 1);

	/* transactions */
	CHECK(db_tx_begin(db, &err) == 0);
	CHECK(db_exec(db, &err, "INSERT INTO tenants(id, name, created_at) VALUES('t4', 'four', 4)",
		      NULL) == 1);
	db_tx_rollback(db);
	CHECK(q_int(db, "SELECT count(*) FROM tenants WHERE id = 't4'") == 0);
	CHECK(db_tx_begin(db, &err) == 0);
	CHECK(db_exec(db, &err, "INSERT INTO tenants(id, name, created_at) VALUES('t4', 'four', 4)",
		      NULL) == 1);
	CHECK(db_tx_commit(db, &err) == 0);
	CHECK(q_int(db, "SELECT count(*) FROM tenants WHERE id = 't4'") == 1);
	/* a failed statement in a transaction: rolled back as a whole */
	CHECK(db_tx_begin(db, &err) == 0);
	CHECK(db_exec(db, &err, "INSERT INTO tenants(id, name, created_at) VALUES('t5', 'five', 5)",
		      NULL) == 1);
	CHECK(db_exec(db, &err, "INSERT INTO tenants(id, name, created_at) VALUES('t6', 'four', 6)",
		      NULL) == -EEXIST);
	db_tx_rollback(db);
	CHECK(q_int(db, "SELECT count(*) FROM tenants") == 3);
	db_close(db);
}

/* Two connections racing one Idempotency-Key, the way node/create.c writes
 * a new sandbox (its row in a transaction): one row, the loser -EEXIST. */
struct racer {
	struct db *db;
	pthread_barrier_t *bar;
	int round, who, r;
};

static void *race_create(void *arg)
{
	struct racer *x = arg;
	char id[32], key[32];
	err_t err = { 0 };

	snprintf(id, sizeof(id), "sb-%d-%d", x->round, x->who);
	snprintf(key, sizeof(key), "key-%d", x->round);
	pthread_barrier_wait(x->bar);
	x->r = db_tx_begin(x->db, &err);
	if (x->r < 0)
		return NULL;
	x->r = db_exec(x->db, &err,
		       "INSERT INTO sandboxes(id, tenant_id, template, template_version, backend,"
		       " desired, observed, spec, idem_key, created_at, updated_at)"
		       " VALUES(?, 'ten', 'base', 1, 'ns', 'running', 'pending', '{}', ?, ?, ?)",
		       "ssii", id, key, wall_ms(), wall_ms());
	if (x->r >= 0)
		x->r = db_exec(x->db, &err, "INSERT INTO events(sandbox_id, at) VALUES(?, 1)", "s",
			       id);
	if (x->r >= 0) {
		usleep(2000);   /* hold the row a little, so the other waits on it */
		x->r = db_tx_commit(x->db, &err);
	} else {
		db_tx_rollback(x->db);
	}
	return NULL;
}

static void test_idempotency_race(bool pg)
{
	enum { ROUNDS = 30 };
	char t[256];
	err_t err = { 0 };
	struct db *a, *b;
	pthread_barrier_t bar;

	fresh(pg, t, sizeof(t));
	a = db_open(t, &err);
	b = db_open(t, &err);
	CHECK(a && b);
	if (!a || !b) {
		db_close(a);
		db_close(b);
		return;
	}
	pthread_barrier_init(&bar, NULL, 2);
	for (int round = 0; round < ROUNDS; round++) {
		struct racer x[2] = { { a, &bar, round, 0, 0 }, { b, &bar, round, 1, 0 } };
		pthread_t th[2];

		for (int i = 0; i < 2; i++)
			pthread_create(&th[i], NULL, race_create, &x[i]);
		for (int i = 0; i < 2; i++)
			pthread_join(th[i], NULL);
		CHECK((x[0].r >= 0) != (x[1].r >= 0));
		CHECK(x[0].r >= 0 || x[0].r == -EEXIST);
		CHECK(x[1].r >= 0 || x[1].r == -EEXIST);
	}
	pthread_barrier_destroy(&bar);
	CHECK(q_int(a, "SELECT count(*) FROM sandboxes") == ROUNDS);
	CHECK(q_int(a, "SELECT count(DISTINCT idem_key) FROM sandboxes") == ROUNDS);
	CHECK(q_int(a, "SELECT count(*) FROM events") == ROUNDS);
	db_close(a);
	db_close(b);
}

/* A file made by the code before migrations: its schema without
 * snapshots.scheduled/procs (they came by ALTER) and without the tables
 * added since, rows in it. Opening adopts it: the columns and tables that
 * are missing are added, the rows kept, the migrations recorded. */
static void test_adopt_old_sqlite(void)
{
	static const char old_schema[] =
		"PRAGMA journal_mode=WAL;"
		"CREATE TABLE tenants(id TEXT PRIMARY KEY, name TEXT UNIQUE NOT NULL,"
		" created_at INTEGER NOT NULL);"
		"CREATE TABLE sandboxes(id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL,"
		" template TEXT NOT NULL, template_version INTEGER NOT NULL, backend TEXT NOT NULL,"
		" desired TEXT NOT NULL, observed TEXT NOT NULL, gen INTEGER NOT NULL DEFAULT 1,"
		" spec TEXT NOT NULL, metadata TEXT NOT NULL DEFAULT '{}', idem_key TEXT, error TEXT,"
		" jail_pid INTEGER, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,"
		" UNIQUE(tenant_id, idem_key));"
		"CREATE TABLE snapshots(id TEXT PRIMARY KEY, sandbox_id TEXT NOT NULL,"
		" name TEXT NOT NULL, kind TEXT NOT NULL, size_bytes INTEGER,"
		" created_at INTEGER NOT NULL, UNIQUE(sandbox_id, name));"
		"CREATE TABLE templates(name TEXT NOT NULL, version INTEGER NOT NULL,"
		" status TEXT NOT NULL, source TEXT, error TEXT, created_at INTEGER NOT NULL,"
		" PRIMARY KEY(name, version));"
		"INSERT INTO templates VALUES('busybox', 1, 'ready', 'busybox', NULL, 1);"
		"INSERT INTO tenants VALUES('t1', 'admin', 1);"
		"INSERT INTO snapshots VALUES('s1', 'sb1', 'before', 'disk', NULL, 5);";
	char t[256];
	sqlite3 *h = NULL;
	err_t err = { 0 };
	struct db *db;
	struct db_rows rows;

	fresh(false, t, sizeof(t));
	CHECK(sqlite3_open(t, &h) == SQLITE_OK);
	CHECK(sqlite3_exec(h, old_schema, NULL, NULL, NULL) == SQLITE_OK);
	sqlite3_close(h);

	db = db_open(t, &err);
	CHECK(db != NULL);
	if (!db) {
		fprintf(stderr, "adopt: %s\n", err.msg);
		return;
	}
	CHECK(db_schema_version(db, &err) == db_schema_latest());
	CHECK(q_int(db, "SELECT count(*) FROM tenants") == 1);
	CHECK(db_query(db, &rows, &err, "SELECT id, scheduled, procs FROM snapshots", NULL) == 0);
	CHECK(rows.n_rows == 1 && !strcmp(db_cell(&rows, 0, 0), "s1"));
	CHECK(rows.n_rows == 1 && db_cell_int(&rows, 0, 1) == 0 && !db_cell(&rows, 0, 2));
	db_rows_free(&rows);
	/* migration 3 kept the template, as no node's yet, and keys by node */
	CHECK(q_int(db, "SELECT count(*) FROM templates WHERE node = '' AND name = 'busybox'"
		    " AND status = 'ready'") == 1);
	CHECK(db_exec(db, &err, "INSERT INTO templates(node, name, version, status, created_at)"
		      " VALUES('n2', 'busybox', 1, 'ready', 1)", NULL) == 1);
	CHECK(db_exec(db, &err, "INSERT INTO lineage(sandbox_id, parent) VALUES('a', 'b')",
		      NULL) == 1);
	CHECK(db_exec(db, &err, "INSERT INTO port_tokens(hash, tenant_id, sandbox_id, port,"
		      " expires_at, created_at, key_id) VALUES('h', 't', 's', 1, 2, 3, 'k')",
		      NULL) == 1);
	db_close(db);
	/* and a reopen finds nothing more to do */
	db = db_open(t, &err);
	CHECK(db && q_int(db, "SELECT count(*) FROM schema_migrations") == db_schema_latest());
	db_close(db);
}

/* PostgreSQL: a connection the server closed while it was idle is made
 * again before the next statement, which then runs. */
static void test_reconnect(void)
{
	char t[256];
	err_t err = { 0 };
	struct db *db, *killer;
	int64_t pid;
	int r;

	fresh(true, t, sizeof(t));
	db = db_open(t, &err);
	killer = db_open(t, &err);
	CHECK(db && killer);
	if (!db || !killer) {
		db_close(db);
		db_close(killer);
		return;
	}
	pid = q_int(db, "SELECT pg_backend_pid()");
	CHECK(db_exec(killer, &err, "SELECT pg_terminate_backend(CAST(? AS INTEGER))", "i", pid) ==
	      0);
	usleep(100 * 1000);
	r = db_exec(db, &err, "INSERT INTO tenants(id, name, created_at) VALUES('r', 'r', 1)", NULL);
	CHECK(r == 1);
	if (r != 1)
		fprintf(stderr, "after the backend was terminated: %s\n", err.msg);
	CHECK(q_int(db, "SELECT count(*) FROM schema_migrations") == db_schema_latest());
	CHECK(q_int(db, "SELECT pg_backend_pid()") != pid);
	CHECK(q_int(db, "SELECT count(*) FROM tenants WHERE id = 'r'") == 1);
	db_close(db);
	db_close(killer);
}

/* PostgreSQL: two transactions that lock two rows in opposite orders; the
 * server breaks the deadlock by failing one, which db_exec reports as
 * -EAGAIN (the caller rolls back and may retry), and the other commits. */
struct locker {
	struct db *db;
	pthread_barrier_t *bar;
	const char *first, *second;
	int r;
};

static void *lock_two(void *arg)
{
	struct locker *l = arg;
	err_t err = { 0 };

	l->r = db_tx_begin(l->db, &err);
	if (l->r < 0)
		return NULL;
	l->r = db_exec(l->db, &err, "UPDATE tenants SET created_at = created_at + 1 WHERE id = ?",
		       "s", l->first);
	pthread_barrier_wait(l->bar);
	if (l->r >= 0)
		l->r = db_exec(l->db, &err,
			       "UPDATE tenants SET created_at = created_at + 1 WHERE id = ?", "s",
			       l->second);
	if (l->r >= 0)
		l->r = db_tx_commit(l->db, &err);
	else
		db_tx_rollback(l->db);
	return NULL;
}

static void test_deadlock(void)
{
	char t[256];
	err_t err = { 0 };
	struct db *a, *b;
	pthread_barrier_t bar;
	pthread_t th[2];
	struct locker l[2];

	fresh(true, t, sizeof(t));
	a = db_open(t, &err);
	b = db_open(t, &err);
	CHECK(a && b);
	if (!a || !b) {
		db_close(a);
		db_close(b);
		return;
	}
	CHECK(db_exec(a, &err, "INSERT INTO tenants(id, name, created_at) VALUES('x', 'x', 0),"
		      " ('y', 'y', 0)", NULL) == 2);
	pthread_barrier_init(&bar, NULL, 2);
	l[0] = (struct locker){ a, &bar, "x", "y", 0 };
	l[1] = (struct locker){ b, &bar, "y", "x", 0 };
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, lock_two, &l[i]);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&bar);
	CHECK((l[0].r == -EAGAIN) != (l[1].r == -EAGAIN));
	CHECK(l[0].r >= 0 || l[1].r >= 0);
	/* the winner's two updates, and nothing of the loser's */
	CHECK(q_int(a, "SELECT sum(created_at) FROM tenants") == 2);
	db_close(a);
	db_close(b);
}

static void run_all(bool pg)
{
	test_migrations(pg);
	test_migrations_racing(pg);
	test_statements(pg);
	test_idempotency_race(pg);
}

static void stop_pg(void)
{
	char cmd[600];
	const char *src = getenv("AIRLOCK_SRC");

	db_close(pg_admin);
	pg_admin = NULL;
	if (!pgdir[0])
		return;
	snprintf(cmd, sizeof(cmd), "sh %s/tests/pg/pg-stop.sh %s", src ? src : ".", pgdir);
	if (system(cmd) != 0)
		fprintf(stderr, "pg-stop failed\n");
	pgdir[0] = 0;
}

static void cleanup(void)
{
	char cmd[300];

	stop_pg();
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", tmp);
}

/* Returns 0 with pg_url set, 77 when PostgreSQL is not installed, else 1. */
static int start_pg(void)
{
	const char *src = getenv("AIRLOCK_SRC");
	char cmd[600];
	FILE *f;
	int st;

	snprintf(pgdir, sizeof(pgdir), "%s/pg", tmp);
	snprintf(cmd, sizeof(cmd), "sh %s/tests/pg/pg-start.sh %s %d", src ? src : ".", pgdir,
		 (int)getpid());
	f = popen(cmd, "r");
	if (!f)
		return 1;
	if (!fgets(pg_url, sizeof(pg_url), f))
		pg_url[0] = 0;
	st = pclose(f);
	pg_url[strcspn(pg_url, "\n")] = 0;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
		pgdir[0] = 0;
		return 77;
	}
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 && pg_url[0] ? 0 : 1;
}

int main(void)
{
	err_t err = { 0 };
	int r;

	if (!mkdtemp(tmp)) {
		perror("mkdtemp");
		return 1;
	}
	atexit(cleanup);
	chmod(tmp, 0755);   /* the server's user (nobody) reaches pg/ below it */
	CHECK(db_target_is_postgres("postgres://u@h/d"));
	CHECK(db_target_is_postgres("postgresql:///d"));
	CHECK(db_target_is_postgres("host=/tmp dbname=x"));
	CHECK(!db_target_is_postgres("/var/lib/airlock/db/airlock.db"));
	CHECK(!db_target_is_postgres("sqlite:/tmp/x.db"));

	run_all(false);
	test_adopt_old_sqlite();
	test_open_across_users();

	r = start_pg();
	if (r == 77) {
		printf("test-db: PostgreSQL 15 not installed; SQLite checks only\n");
		return failures ? 1 : 77;
	}
	REQUIRE(r == 0, cleanup);
	pg_admin = db_open(pg_url, &err);
	if (!pg_admin)
		fprintf(stderr, "open %s: %s\n", pg_url, err.msg);
	REQUIRE(pg_admin != NULL, cleanup);
	CHECK(!strcmp(db_driver_name(pg_admin), "postgres"));
	{   /* the same database as a libpq conninfo string */
		char ci[200];
		int port = 0;
		struct db *db;

		CHECK(sscanf(pg_url, "postgresql://airlock@127.0.0.1:%d/", &port) == 1);
		snprintf(ci, sizeof(ci), "host=127.0.0.1 port=%d dbname=airlock user=airlock", port);
		db = db_open(ci, &err);
		CHECK(db && q_int(db, "SELECT count(*) FROM schema_migrations") == db_schema_latest());
		db_close(db);
	}
	run_all(true);
	test_reconnect();
	test_deadlock();
	return check_done("test-db");
}
