/* db-sqlite.c - the SQLite driver of db.h: one file in WAL mode, shared by
 * the processes of one host. */
#include "db-internal.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../lib/util.h"

/* How long a statement waits for another connection's lock. */
enum { BUSY_MS = 10000 };

static sqlite3 *H(struct db *db)
{
	return db->h;
}

/* A read-only database is almost always a file this process may not
 * write: say whose each file is. */
static void readonly_why(struct db *db, char *out, size_t len)
{
	const char *path = sqlite3_db_filename(H(db), "main");
	static const char *const sfx[] = { "", "-wal", "-shm" };
	size_t o = 0;

	o += (size_t)snprintf(out, len, " (extended code %d; this process %u:%u",
			      sqlite3_extended_errcode(H(db)), (unsigned)geteuid(),
			      (unsigned)getegid());
	for (size_t i = 0; path && i < 3 && o < len; i++) {
		_cleanup_free_ char *p = xasprintf("%s%s", path, sfx[i]);
		struct stat st;
		if (stat(p, &st) == 0)
			o += (size_t)snprintf(out + o, len - o, "; %s %u:%u %04o", i ? sfx[i] : "file",
					      (unsigned)st.st_uid, (unsigned)st.st_gid,
					      (unsigned)(st.st_mode & 07777));
		else
			o += (size_t)snprintf(out + o, len - o, "; %s absent", i ? sfx[i] : "file");
	}
	if (o < len)
		snprintf(out + o, len - o, ")");
}

static int sq_error(struct db *db, err_t *err, int rc, const char *what)
{
	char why[600] = "";
	int code = EIO;

	if ((rc & 0xff) == SQLITE_CONSTRAINT)
		code = EEXIST;
	else if ((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED)
		code = EBUSY;
	else if ((rc & 0xff) == SQLITE_READONLY)
		readonly_why(db, why, sizeof(why));
	return err_set(err, code, "db: %s: %s%s", what, sqlite3_errmsg(H(db)), why);
}

static int sq_script(struct db *db, const char *sql, err_t *err)
{
	char *msg = NULL;
	int rc = sqlite3_exec(H(db), sql, NULL, NULL, &msg);

	if (rc == SQLITE_OK)
		return 0;
	err_set(err, (rc & 0xff) == SQLITE_BUSY ? EBUSY : EIO, "db: %s", msg ? msg : "?");
	sqlite3_free(msg);
	return -(err->code);
}

static int sq_open(struct db *db, const char *path, err_t *err)
{
	sqlite3 *h = NULL;
	int rc = sqlite3_open_v2(path, &h,
				 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
				 NULL);

	db->h = h;
	if (rc != SQLITE_OK)
		return err_set(err, EIO, "db: cannot open `%s`: %s", path,
			       h ? sqlite3_errmsg(h) : "out of memory");
	sqlite3_busy_timeout(h, BUSY_MS);
	/* Outside any transaction: SQLite cannot switch to WAL inside one. While
	 * another connection creates the same new file, the switch fails at once
	 * with SQLITE_BUSY without calling the busy handler, so wait here. */
	for (uint64_t t0 = now_us();;) {
		int r = sq_script(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", err);
		if (r == 0)
			return 0;
		/* by the clock: an attempt may itself have waited in the handler */
		if (r != -EBUSY || now_us() - t0 >= BUSY_MS * 1000ull)
			return err_wrap(err, "`%s`", path);
		sqlite3_sleep(2);
	}
}

static void sq_close(struct db *db)
{
	sqlite3_close_v2(H(db));
	db->h = NULL;
}

static int bind_args(struct db *db, sqlite3_stmt *st, const char *types, va_list ap, err_t *err)
{
	int idx = 1;

	if (sqlite3_bind_parameter_count(st) != (int)(types ? strlen(types) : 0))
		return err_set(err, EINVAL, "db: %zu parameter types for the placeholders of `%s`",
			       types ? strlen(types) : 0, sqlite3_sql(st));
	for (const char *t = types ? types : ""; *t; t++, idx++) {
		int rc;
		if (*t == 's') {
			const char *s = va_arg(ap, const char *);
			rc = s ? sqlite3_bind_text(st, idx, s, -1, SQLITE_TRANSIENT)
			       : sqlite3_bind_null(st, idx);
		} else if (*t == 'i') {
			rc = sqlite3_bind_int64(st, idx, va_arg(ap, int64_t));
		} else if (*t == 'n') {
			rc = sqlite3_bind_null(st, idx);
		} else {
			return err_set(err, EINVAL, "db: bad parameter type '%c'", *t);
		}
		if (rc != SQLITE_OK)
			return sq_error(db, err, rc, "bind");
	}
	return 0;
}

static int sq_run(struct db *db, struct db_rows *out, err_t *err, const char *sql,
		  const char *types, va_list ap)
{
	sqlite3_stmt *st = NULL;
	int rc, r = 0, cap = 0;

	rc = sqlite3_prepare_v2(H(db), sql, -1, &st, NULL);
	if (rc != SQLITE_OK)
		return sq_error(db, err, rc, "prepare");
	r = bind_args(db, st, types, ap, err);
	if (r < 0)
		goto out;
	if (out) {
		memset(out, 0, sizeof(*out));
		out->n_cols = sqlite3_column_count(st);
	}
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (!out)
			continue;
		if (out->n_rows == cap) {
			cap = cap ? cap * 2 : 16;
			out->cells = xrealloc(out->cells,
					      sizeof(char *) * (size_t)cap * (size_t)out->n_cols);
		}
		for (int c = 0; c < out->n_cols; c++) {
			const unsigned char *v = sqlite3_column_text(st, c);
			out->cells[out->n_rows * out->n_cols + c] = v ? xstrdup((const char *)v) : NULL;
		}
		out->n_rows++;
	}
	if (rc != SQLITE_DONE) {
		r = sq_error(db, err, rc, "step");
		if (out)
			db_rows_free(out);
		goto out;
	}
	r = out ? 0 : sqlite3_changes(H(db));
out:
	sqlite3_finalize(st);
	return r;
}

/* IMMEDIATE takes the write lock at once (waiting up to the busy timeout),
 * so the migrations need no other lock: a second process waits here. */
static int sq_begin(struct db *db, bool migrate, err_t *err)
{
	int rc = sqlite3_exec(H(db), "BEGIN IMMEDIATE", NULL, NULL, NULL);

	(void)migrate;
	return rc == SQLITE_OK ? 0 : sq_error(db, err, rc, "begin");
}

static int sq_commit(struct db *db, err_t *err)
{
	int rc = sqlite3_exec(H(db), "COMMIT", NULL, NULL, NULL);

	return rc == SQLITE_OK ? 0 : sq_error(db, err, rc, "commit");
}

static void sq_rollback(struct db *db)
{
	sqlite3_exec(H(db), "ROLLBACK", NULL, NULL, NULL);
}

const struct db_driver db_sqlite_driver = {
	.name = "sqlite",
	.kind = DB_SQLITE,
	.open = sq_open,
	.close = sq_close,
	.run = sq_run,
	.script = sq_script,
	.begin = sq_begin,
	.commit = sq_commit,
	.rollback = sq_rollback,
	.has_column_sql = "SELECT 1 FROM pragma_table_info(?) WHERE name = ?",
};
