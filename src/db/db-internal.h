/* db-internal.h - what db.c, the drivers and the migrations share. */
#ifndef AIRLOCK_DB_INTERNAL_H
#define AIRLOCK_DB_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>

#include "db.h"

enum db_kind { DB_SQLITE, DB_POSTGRES };

/* A driver. Every op runs with db->mu held by db.c. */
struct db_driver {
	const char *name;
	enum db_kind kind;
	/* Connect or open; fills db->h. On failure db->h may be set (close frees it). */
	int (*open)(struct db *db, const char *target, err_t *err);
	void (*close)(struct db *db);
	/* One statement with "?" parameters; out NULL: returns rows changed. */
	int (*run)(struct db *db, struct db_rows *out, err_t *err, const char *sql,
		   const char *types, va_list ap);
	/* Several statements without parameters (a migration's text). */
	int (*script)(struct db *db, const char *sql, err_t *err);
	/* migrate: begin the transaction the migrations run in, holding the lock
	 * that makes a second process opening the same database wait for it. */
	int (*begin)(struct db *db, bool migrate, err_t *err);
	int (*commit)(struct db *db, err_t *err);
	void (*rollback)(struct db *db);
	/* SQL with two "?" (table, column) that returns a row when the column exists. */
	const char *has_column_sql;
};

struct db {
	const struct db_driver *drv;
	void *h;              /* sqlite3 * or PGconn * */
	bool in_tx;           /* between db_tx_begin and commit/rollback */
	int64_t reconnected_ms;   /* db_reconnected_ms(); atomic */
	pthread_mutex_t mu;   /* recursive: held across a transaction */
};

extern const struct db_driver db_sqlite_driver;
extern const struct db_driver db_pg_driver;

/* Helpers for the drivers: the running op's varargs (db.c). */
int db_run_locked(struct db *db, struct db_rows *out, err_t *err, const char *sql,
		  const char *types, ...);

/* Apply what the database lacks of the migrations (db-migrate.c). */
int db_migrate(struct db *db, err_t *err);

#endif
