/* db.h - the desired-state store, behind a small interface.
 *
 * Today the only driver is SQLite (WAL mode, busy timeout), opened by both the
 * api and the node processes on the same file. The interface is SQL with
 * positional parameters ("?") and a type string, so that a PostgreSQL driver
 * can sit behind the same calls later. Every call is serialised by a mutex in
 * struct db, so one handle may be shared by threads. Query results are fully
 * materialised: no statement outlives a call.
 *
 * Parameter type string, one letter per "?":
 *   's' const char * (NULL binds NULL)   'i' int64_t   'n' NULL (no vararg)
 *
 * The schema (all tables, both processes) lives in db.c and is created on open.
 */
#ifndef AIRLOCK_DB_H
#define AIRLOCK_DB_H

#include <stdbool.h>
#include <stdint.h>

#include "../lib/err.h"

struct db;
struct db *db_open(const char *path, err_t *err);  /* caller owns */
void db_close(struct db *db);                      /* accepts NULL */

/* Run a statement; returns the number of rows changed (>= 0) or -errno.
 * A UNIQUE/constraint violation returns -EEXIST. */
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

/* Transactions: BEGIN IMMEDIATE ... COMMIT. db_tx_begin holds the handle's
 * mutex until commit/rollback, so other threads wait. */
int db_tx_begin(struct db *db, err_t *err);
int db_tx_commit(struct db *db, err_t *err);
void db_tx_rollback(struct db *db);

#endif
