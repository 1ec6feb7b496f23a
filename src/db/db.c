/* db.c - the driver-neutral half of db.h: choosing the driver, the mutex,
 * transactions and result rows. */
#include "db-internal.h"

#include <errno.h>
#include <string.h>

#include "../lib/util.h"

bool db_target_is_postgres(const char *t)
{
	return t && (!strncmp(t, "postgres://", 11) || !strncmp(t, "postgresql://", 13) ||
		     strstr(t, "host=") || strstr(t, "dbname="));
}

const char *db_driver_name(const struct db *db)
{
	return db->drv->name;
}

int64_t db_reconnected_ms(const struct db *db)
{
	return __atomic_load_n(&db->reconnected_ms, __ATOMIC_RELAXED);
}

struct db *db_open(const char *target, err_t *err)
{
	struct db *db = xcalloc(1, sizeof(*db));
	pthread_mutexattr_t a;

	pthread_mutexattr_init(&a);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&db->mu, &a);
	pthread_mutexattr_destroy(&a);
	if (db_target_is_postgres(target)) {
		db->drv = &db_pg_driver;
	} else {
		db->drv = &db_sqlite_driver;
		if (!strncmp(target, "sqlite:", 7))
			target += 7;
	}
	if (db->drv->open(db, target, err) < 0 || db_migrate(db, err) < 0) {
		db_close(db);
		return NULL;
	}
	return db;
}

void db_close(struct db *db)
{
	if (!db)
		return;
	if (db->h)
		db->drv->close(db);
	pthread_mutex_destroy(&db->mu);
	free(db);
}

int db_run_locked(struct db *db, struct db_rows *out, err_t *err, const char *sql,
		  const char *types, ...)
{
	va_list ap;
	int r;

	va_start(ap, types);
	r = db->drv->run(db, out, err, sql, types, ap);
	va_end(ap);
	return r;
}

int db_exec(struct db *db, err_t *err, const char *sql, const char *types, ...)
{
	va_list ap;
	int r;

	va_start(ap, types);
	pthread_mutex_lock(&db->mu);
	r = db->drv->run(db, NULL, err, sql, types, ap);
	pthread_mutex_unlock(&db->mu);
	va_end(ap);
	return r;
}

int db_query(struct db *db, struct db_rows *out, err_t *err, const char *sql, const char *types,
	     ...)
{
	va_list ap;
	int r;

	va_start(ap, types);
	pthread_mutex_lock(&db->mu);
	r = db->drv->run(db, out, err, sql, types, ap);
	pthread_mutex_unlock(&db->mu);
	va_end(ap);
	return r;
}

void db_rows_free(struct db_rows *r)
{
	if (!r || !r->cells)
		return;
	for (int i = 0; i < r->n_rows * r->n_cols; i++)
		free(r->cells[i]);
	free(r->cells);
	memset(r, 0, sizeof(*r));
}

const char *db_cell(const struct db_rows *r, int row, int col)
{
	if (row < 0 || row >= r->n_rows || col < 0 || col >= r->n_cols)
		return NULL;
	return r->cells[row * r->n_cols + col];
}

int64_t db_cell_int(const struct db_rows *r, int row, int col)
{
	const char *s = db_cell(r, row, col);
	return s ? strtoll(s, NULL, 10) : 0;
}

int db_tx_begin(struct db *db, err_t *err)
{
	int r;

	pthread_mutex_lock(&db->mu);
	r = db->drv->begin(db, false, err);
	if (r < 0) {
		pthread_mutex_unlock(&db->mu);
		return r;
	}
	db->in_tx = true;
	return 0;
}

int db_tx_commit(struct db *db, err_t *err)
{
	int r = db->drv->commit(db, err);

	if (r < 0)
		db->drv->rollback(db);
	db->in_tx = false;
	pthread_mutex_unlock(&db->mu);
	return r;
}

void db_tx_rollback(struct db *db)
{
	db->drv->rollback(db);
	db->in_tx = false;
	pthread_mutex_unlock(&db->mu);
}
