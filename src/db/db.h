/* db.h - the desired-state store, behind a small interface.
 *
 * Two drivers sit behind it (struct db_driver in db-internal.h):
 *   SQLite      (db-sqlite.c) a file in WAL mode with a busy timeout, opened
 *               by the api, node and gateway processes of one host.
 *   PostgreSQL  (db-pg.c, libpq) one database that several hosts' processes
 *               share.
 * The interface is SQL with positional parameters ("?") and a type string.
 * The SQL at call sites is the dialect both accept (ON CONFLICT, IS DISTINCT
 * FROM, an alias on every subquery in FROM); the PostgreSQL driver only turns
 * "?" into $1..$n. Every call is serialised by a mutex in struct db, so one
 * handle may be shared by threads. Query results are fully materialised, as
 * text (libpq's text format for PostgreSQL): no statement outlives a call.
 *
 * Parameter type string, one letter per "?":
 *   's' const char * (NULL binds NULL)   'i' int64_t   'n' NULL (no vararg)
 * PostgreSQL is told 's' is text and 'i' bigint, so "? IS NULL" needs no cast
 * with those; 'n' goes untyped (PostgreSQL takes the type of the column it is
 * written to), so write a NULL that is only compared as 's' with NULL.
 *
 * The schema is a numbered list of migrations (db-migrate.c), applied on open
 * in one transaction and recorded in schema_migrations(version, applied_at).
 */
#ifndef AIRLOCK_DB_H
#define AIRLOCK_DB_H

#include <stdbool.h>
#include <stdint.h>

#include "../lib/err.h"

struct db;

/* The file-creation mask of every process of another user that opens the
 * same SQLite database through a shared group (the api, node and gateway
 * roles): SQLite creates the -wal and -shm files with the process's umask
 * applied and only then sets the database file's mode (0660) on them, and
 * another user's open in between falls back to read-only ("attempt to
 * write a readonly database"). Group-writable from the start, there is no
 * such moment. */
#define DB_SHARED_UMASK 0007

/* target: "postgres://...", "postgresql://..." or a libpq conninfo string
 * (one that holds "host=" or "dbname=") opens PostgreSQL; "sqlite:PATH" or
 * a plain PATH opens (and creates) an SQLite file. Applies the migrations
 * that the database lacks before returning. Caller owns the handle. */
struct db *db_open(const char *target, err_t *err);
void db_close(struct db *db);                      /* accepts NULL */
bool db_target_is_postgres(const char *target);
const char *db_driver_name(const struct db *db);    /* "sqlite" or "postgres" */
/* now_ms() when the handle last made its connection again after losing it
 * (PostgreSQL: a restart, a network cut); 0 never. The database was out of
 * reach before that, for this process at least. */
int64_t db_reconnected_ms(const struct db *db);

/* Run a statement; returns the number of rows changed (>= 0) or -errno.
 *   -EEXIST  a UNIQUE/constraint violation (SQLSTATE class 23)
 *   -EAGAIN  PostgreSQL inside a transaction: a serialization failure or a
 *            deadlock (40001, 40P01); the caller rolls back and may retry.
 *            Outside a transaction the driver retries those itself.
 *   -EBUSY   SQLite: the file stayed locked past the busy timeout
 *   -ENOTCONN a PostgreSQL connection lost during the call, or not made
 *            again (the next call reconnects; a transaction in progress
 *            is lost with it). One the server closed while idle (a
 *            restart) is made again before the statement is sent.
 *   -EIO     anything else */
int db_exec(struct db *db, err_t *err, const char *sql, const char *types, ...);

struct db_rows {
	int n_rows, n_cols;
	char **cells;     /* n_rows * n_cols; NULL for SQL NULL; all values as text */
};
/* Returns 0 and fills *out (caller frees with db_rows_free) or -errno. */
int db_query(struct db *db, struct db_rows *out, err_t *err, const char *sql, const char *types,
	     ...);
void db_rows_free(struct db_rows *r);
const char *db_cell(const struct db_rows *r, int row, int col);     /* NULL for SQL NULL */
int64_t db_cell_int(const struct db_rows *r, int row, int col);     /* 0 for NULL */

/* Transactions. db_tx_begin holds the handle's mutex until commit/rollback,
 * so other threads wait. After any failed statement inside one, roll back.
 *
 * SQLite: BEGIN IMMEDIATE, so the write lock is taken at once: transactions
 * of all processes are serial.
 * PostgreSQL: BEGIN ISOLATION LEVEL READ COMMITTED. Not SERIALIZABLE, because
 * no call site reads a row and writes it back on what it read while another
 * process may write the same row: a sandbox's rows are written only by the
 * node that runs it, and what two processes do race on (a create's
 * Idempotency-Key, a tenant's or credential's name, a placeholder) is decided
 * by a UNIQUE constraint that the losing INSERT waits on and then fails with
 * -EEXIST. SERIALIZABLE would add -EAGAIN at commit to every call site for no
 * case that needs it. A later call site that reads then writes a shared row
 * takes the row lock with SELECT ... FOR UPDATE (SQLite has only the whole
 * file lock, which BEGIN IMMEDIATE already holds; write it only in SQL sent to
 * PostgreSQL, db_driver_name tells which). */
int db_tx_begin(struct db *db, err_t *err);
int db_tx_commit(struct db *db, err_t *err);
void db_tx_rollback(struct db *db);

/* The highest migration version this build knows, and the one the database
 * is at (0 when none): for tests and `airlockd` diagnostics. */
int db_schema_latest(void);
int db_schema_version(struct db *db, err_t *err);

#endif
