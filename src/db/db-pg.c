/* db-pg.c - the PostgreSQL driver of db.h, over libpq.
 *
 * One connection per handle (db.c's mutex serialises it). Statements go with
 * PQexecParams in text format: "?" becomes $1..$n, 's' is sent as text and
 * 'i' as bigint, results come back as text like SQLite's. A connection the
 * server closed while idle is made again before the next statement is sent
 * (outside a transaction); one lost during a call fails that call with
 * -ENOTCONN (the node answers 503 `unavailable`: retryable, not internal)
 * (it may or may not have run, so it is not resent) and is made again by the
 * next. */
#include "db-internal.h"

#include <errno.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../lib/util.h"

#define OID_INT8 20
#define OID_TEXT 25
#define RETRIES 5   /* a serialization failure or deadlock outside a transaction */

static PGconn *H(struct db *db)
{
	return db->h;
}

/* "?" -> "$n" outside '...' literals, "..." identifiers and comments. A
 * doubled quote inside a literal ('it''s') closes and reopens it, which the
 * toggle below reads the same way. E'' strings and $$ quoting are not used
 * by any call site and not handled. Returns the parameter count. */
static int translate(const char *sql, struct buf *out)
{
	int n = 0;

	for (const char *p = sql; *p; p++) {
		if (*p == '\'' || *p == '"') {
			const char *e = strchr(p + 1, *p);
			size_t len = e ? (size_t)(e - p) + 1 : strlen(p);
			buf_add(out, p, len);
			p += len - 1;
		} else if (p[0] == '-' && p[1] == '-') {
			size_t len = strcspn(p, "\n");
			buf_add(out, p, len);
			p += len - 1;
		} else if (p[0] == '/' && p[1] == '*') {
			const char *e = strstr(p + 2, "*/");
			size_t len = e ? (size_t)(e - p) + 2 : strlen(p);
			buf_add(out, p, len);
			p += len - 1;
		} else if (*p == '?') {
			buf_printf(out, "$%d", ++n);
		} else {
			buf_addc(out, *p);
		}
	}
	return n;
}

/* SQLSTATE -> errno: class 23 (integrity, 23505 unique among them) as
 * EEXIST, like the SQLite driver's SQLITE_CONSTRAINT; 40001 serialization
 * failure and 40P01 deadlock as EAGAIN; class 08 and a dead connection
 * (a server restarted or out of reach) as ENOTCONN; the rest EIO. */
static int pg_code(struct db *db, const PGresult *res)
{
	const char *st = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	if (PQstatus(H(db)) != CONNECTION_OK || (st && !strncmp(st, "08", 2)))
		return ENOTCONN;
	if (!st)
		return EIO;
	if (!strncmp(st, "23", 2))
		return EEXIST;
	if (!strcmp(st, "40001") || !strcmp(st, "40P01"))
		return EAGAIN;
	return EIO;
}

static int pg_error(struct db *db, err_t *err, const PGresult *res, const char *what)
{
	const char *msg = res ? PQresultErrorMessage(res) : NULL;
	char m[400];
	size_t n;

	if (!msg || !*msg)
		msg = PQerrorMessage(H(db));
	snprintf(m, sizeof(m), "%s", msg);
	for (char *p = m; *p; p++)   /* libpq's continuation lines: "\n\t..." */
		if (*p == '\n' || *p == '\t')
			*p = ' ';
	n = strlen(m);
	while (n && (m[n - 1] == '\n' || m[n - 1] == ' '))
		m[--n] = 0;
	return err_set(err, pg_code(db, res), "db: %s: %s", what, m);
}

static void ignore_notice(void *arg, const char *msg)
{
	(void)arg;
	(void)msg;
}

static int pg_open(struct db *db, const char *target, err_t *err)
{
	/* Defaults that the target's own settings override (they come later in
	 * the list): a server that does not answer fails a connect in 10 s
	 * instead of holding the handle's mutex for the kernel's TCP timeout;
	 * and a server gone silent mid-call (a host down, packets dropped, no
	 * FIN or RST) fails the call in about 20 s (keepalives, and
	 * tcp_user_timeout for data not acknowledged) instead of two hours,
	 * during which every caller of the handle would wait on its mutex. */
	static const char *const keys[] = { "connect_timeout", "keepalives", "keepalives_idle",
					    "keepalives_interval", "keepalives_count",
					    "tcp_user_timeout", "application_name", "dbname",
					    NULL };
	const char *const vals[] = { "10", "1", "10", "3", "3", "20000", "airlock", target, NULL };
	PGconn *c = PQconnectdbParams(keys, vals, 1);

	db->h = c;
	if (!c)
		return err_set(err, ENOMEM, "db: postgres: out of memory");
	if (PQstatus(c) != CONNECTION_OK)
		return pg_error(db, err, NULL, "postgres connect");
	PQsetErrorVerbosity(c, PQERRORS_TERSE);
	/* Notices (e.g. "relation already exists, skipping") are not errors. */
	PQsetNoticeProcessor(c, ignore_notice, NULL);
	return 0;
}

static void pg_close(struct db *db)
{
	PQfinish(H(db));
	db->h = NULL;
}

/* Reconnect a dropped connection, unless a transaction was open on it: that
 * transaction is gone and its caller must see every statement fail until it
 * rolls back. A connection that drops during a call fails that call (it may
 * or may not have run, so it is not resent). */
static int pg_ready(struct db *db, err_t *err)
{
	/* A server that closed the connection while it was idle (a restart, an
	 * idle timeout, pg_terminate_backend) has sent its FATAL and EOF:
	 * reading them (libpq's socket never blocks) marks the connection bad
	 * before this call sends anything, so it reconnects now and the
	 * statement runs once, instead of failing for the next call to
	 * reconnect. */
	for (int i = 0; i < 4 && PQstatus(H(db)) == CONNECTION_OK; i++) {
		struct pollfd p = { .fd = PQsocket(H(db)), .events = POLLIN };

		/* readable: a message, or EOF, which only the read after the
		 * one that takes the FATAL sees */
		if (poll(&p, 1, 0) <= 0 || !PQconsumeInput(H(db)))
			break;
	}
	if (PQstatus(H(db)) == CONNECTION_OK)
		return 0;
	if (db->in_tx)
		return err_set(err, ENOTCONN, "db: postgres: connection lost in a transaction");
	PQreset(H(db));
	if (PQstatus(H(db)) != CONNECTION_OK)
		return pg_error(db, err, NULL, "postgres reconnect");
	__atomic_store_n(&db->reconnected_ms, (int64_t)now_ms(), __ATOMIC_RELAXED);
	return 0;
}

static void fill_rows(const PGresult *res, struct db_rows *out)
{
	out->n_rows = PQntuples(res);
	out->n_cols = PQnfields(res);
	if (!out->n_rows || !out->n_cols)
		return;
	out->cells = xcalloc((size_t)out->n_rows * (size_t)out->n_cols, sizeof(char *));
	for (int r = 0; r < out->n_rows; r++)
		for (int c = 0; c < out->n_cols; c++)
			if (!PQgetisnull(res, r, c))
				out->cells[r * out->n_cols + c] = xstrdup(PQgetvalue(res, r, c));
}

static int pg_run(struct db *db, struct db_rows *out, err_t *err, const char *sql,
		  const char *types, va_list ap)
{
	size_t np = types ? strlen(types) : 0;
	_cleanup_free_ const char **vals = xcalloc(np + 1, sizeof(*vals));
	_cleanup_free_ Oid *oids = xcalloc(np + 1, sizeof(*oids));
	_cleanup_free_ char *nums = xcalloc(np + 1, 24);
	struct buf q;
	int r = 0;

	if (out)
		memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < np; i++) {
		if (types[i] == 's') {
			vals[i] = va_arg(ap, const char *);
			oids[i] = OID_TEXT;
		} else if (types[i] == 'i') {
			snprintf(nums + i * 24, 24, "%lld", (long long)va_arg(ap, int64_t));
			vals[i] = nums + i * 24;
			oids[i] = OID_INT8;
		} else if (types[i] != 'n') {
			return err_set(err, EINVAL, "db: bad parameter type '%c'", types[i]);
		}
	}
	buf_init(&q);
	if (translate(sql, &q) != (int)np) {
		r = err_set(err, EINVAL, "db: %zu parameter types for the placeholders of `%s`", np,
			    sql);
		goto out;
	}
	for (int attempt = 0;; attempt++) {
		PGresult *res;
		ExecStatusType st;

		r = pg_ready(db, err);
		if (r < 0)
			break;
		res = PQexecParams(H(db), q.data, (int)np, oids, vals, NULL, NULL, 0);
		st = PQresultStatus(res);
		if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
			if (out)
				fill_rows(res, out);
			else
				r = st == PGRES_COMMAND_OK ? atoi(PQcmdTuples(res)) : 0;
			PQclear(res);
			break;
		}
		r = pg_error(db, err, res, "postgres");
		PQclear(res);
		if (r != -EAGAIN || db->in_tx || attempt >= RETRIES)
			break;
		usleep((useconds_t)(1000 << attempt));
	}
out:
	buf_free(&q);
	return r;
}

static int pg_script(struct db *db, const char *sql, err_t *err)
{
	PGresult *res;
	int r = pg_ready(db, err);

	if (r < 0)
		return r;
	res = PQexec(H(db), sql);
	if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
		r = pg_error(db, err, res, "postgres");
	PQclear(res);
	return r;
}

/* The migrations' lock: a transaction-scoped advisory lock, so two processes
 * that open the database at once apply them one after the other, the second
 * finding them recorded. The key is "airlock" folded into a bigint. */
static int pg_begin(struct db *db, bool migrate, err_t *err)
{
	return pg_script(db,
			 migrate ? "BEGIN ISOLATION LEVEL READ COMMITTED;"
				   " SELECT pg_advisory_xact_lock(7020098257049086827)"
				 : "BEGIN ISOLATION LEVEL READ COMMITTED",
			 err);
}

static int pg_commit(struct db *db, err_t *err)
{
	PGresult *res = PQexec(H(db), "COMMIT");
	int r = 0;

	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		r = pg_error(db, err, res, "postgres commit");
	else if (!strcmp(PQcmdStatus(res), "ROLLBACK")) /* a statement in it had failed */
		r = err_set(err, EIO, "db: postgres commit: the transaction was aborted");
	PQclear(res);
	return r;
}

static void pg_rollback(struct db *db)
{
	if (PQstatus(H(db)) == CONNECTION_OK)
		PQclear(PQexec(H(db), "ROLLBACK"));
}

const struct db_driver db_pg_driver = {
	.name = "postgres",
	.kind = DB_POSTGRES,
	.open = pg_open,
	.close = pg_close,
	.run = pg_run,
	.script = pg_script,
	.begin = pg_begin,
	.commit = pg_commit,
	.rollback = pg_rollback,
	.has_column_sql = "SELECT 1 FROM information_schema.columns"
			  " WHERE table_schema = current_schema() AND table_name = ?"
			  " AND column_name = ?",
};
