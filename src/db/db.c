/* SQLite driver for db.h. */
#include "db.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <string.h>

#include "../lib/util.h"

struct db {
	sqlite3 *h;
	pthread_mutex_t mu;   /* recursive: held across a transaction */
};

/* One schema for every process. Ownership of tables:
 *   api:  tenants, api_keys
 *   node: sandboxes, templates, events, snapshots, processes are in memory only
 *   api:  credentials, credential_bindings, vault_secrets (see below)
 * Timestamps are ms since the epoch. */
static const char schema[] =
	"PRAGMA journal_mode=WAL;"
	"PRAGMA synchronous=NORMAL;"
	"CREATE TABLE IF NOT EXISTS tenants("
	"  id TEXT PRIMARY KEY, name TEXT UNIQUE NOT NULL, created_at INTEGER NOT NULL);"
	"CREATE TABLE IF NOT EXISTS api_keys("
	"  id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL REFERENCES tenants(id),"
	"  hash TEXT UNIQUE NOT NULL, name TEXT, admin INTEGER NOT NULL DEFAULT 0,"
	"  created_at INTEGER NOT NULL, revoked INTEGER NOT NULL DEFAULT 0);"
	"CREATE TABLE IF NOT EXISTS templates("
	"  name TEXT NOT NULL, version INTEGER NOT NULL, status TEXT NOT NULL,"
	"  source TEXT, error TEXT, created_at INTEGER NOT NULL,"
	"  PRIMARY KEY(name, version));"
	"CREATE TABLE IF NOT EXISTS sandboxes("
	"  id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, template TEXT NOT NULL,"
	"  template_version INTEGER NOT NULL, backend TEXT NOT NULL,"
	"  desired TEXT NOT NULL, observed TEXT NOT NULL, gen INTEGER NOT NULL DEFAULT 1,"
	"  spec TEXT NOT NULL, metadata TEXT NOT NULL DEFAULT '{}',"
	"  idem_key TEXT, error TEXT, jail_pid INTEGER,"
	"  created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,"
	"  UNIQUE(tenant_id, idem_key));"
	"CREATE INDEX IF NOT EXISTS sandboxes_tenant ON sandboxes(tenant_id);"
	"CREATE TABLE IF NOT EXISTS events("
	"  id INTEGER PRIMARY KEY AUTOINCREMENT, sandbox_id TEXT NOT NULL, at INTEGER NOT NULL,"
	"  from_state TEXT, to_state TEXT, reason TEXT);"
	/* Disk snapshots of a sandbox (node). size_bytes: data written since the
	 * previous snapshot, NULL when unknown. scheduled: 1 when the snapshot
	 * scheduler took it (only those are pruned by retention). */
	"CREATE TABLE IF NOT EXISTS snapshots("
	"  id TEXT PRIMARY KEY, sandbox_id TEXT NOT NULL, name TEXT NOT NULL,"
	"  kind TEXT NOT NULL, size_bytes INTEGER, created_at INTEGER NOT NULL,"
	"  scheduled INTEGER NOT NULL DEFAULT 0,"
	"  UNIQUE(sandbox_id, name));"
	"CREATE INDEX IF NOT EXISTS snapshots_sandbox ON snapshots(sandbox_id, created_at);"
	/* Credentials (api writes; node reads bindings and makes placeholders;
	 * the gateway reads, opens secrets and audits). The values are only in
	 * vault_secrets, as sealed boxes (src/cred/seal.h). spec: inject, hosts,
	 * path_prefix, methods, rate_limit as JSON. expires_at 0 = never. */
	"CREATE TABLE IF NOT EXISTS credentials("
	"  id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, name TEXT NOT NULL, env TEXT,"
	"  spec TEXT NOT NULL, expires_at INTEGER NOT NULL DEFAULT 0, version INTEGER NOT NULL,"
	"  created_at INTEGER NOT NULL, rotated_at INTEGER, revoked_at INTEGER,"
	"  UNIQUE(tenant_id, name));"
	"CREATE TABLE IF NOT EXISTS credential_bindings("
	"  cred_id TEXT NOT NULL, kind TEXT NOT NULL, value TEXT NOT NULL,"
	"  PRIMARY KEY(cred_id, kind, value));"
	"CREATE TABLE IF NOT EXISTS vault_secrets("
	"  ref TEXT PRIMARY KEY, box TEXT NOT NULL, created_at INTEGER NOT NULL);"
	"CREATE TABLE IF NOT EXISTS credential_placeholders("
	"  sandbox_id TEXT NOT NULL, cred_id TEXT NOT NULL, placeholder TEXT UNIQUE NOT NULL,"
	"  created_at INTEGER NOT NULL, PRIMARY KEY(sandbox_id, cred_id));"
	"CREATE TABLE IF NOT EXISTS credential_audit("
	"  id INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL, tenant_id TEXT NOT NULL,"
	"  sandbox_id TEXT, cred_id TEXT, host TEXT, method TEXT, path TEXT,"
	"  decision TEXT NOT NULL, detail TEXT);"
	"CREATE INDEX IF NOT EXISTS credential_audit_tenant ON credential_audit(tenant_id, at);"
	/* Where a sandbox came from (node): parent = the sandbox it was forked
	 * from; recovered_from = JSON {snapshot, kind, at} of its last crash
	 * recovery. A table of its own, so older databases need no migration. */
	"CREATE TABLE IF NOT EXISTS lineage("
	"  sandbox_id TEXT PRIMARY KEY, parent TEXT, recovered_from TEXT);"
	/* A suspended sandbox's restorable snapshot in the object store (node,
	 * src/node/suspend.c): the row exists only while the sandbox is
	 * suspended (written in the transaction that moves it there, removed
	 * by its restore or delete). manifest_sha: the SHA-256 of the manifest
	 * as uploaded, so a manifest replaced in the store is refused.
	 * prev_state: running or paused, what it was. procs: the process
	 * table's image when the memory was kept (vm). A table of
	 * its own, so older databases need no migration. */
	"CREATE TABLE IF NOT EXISTS suspensions("
	"  sandbox_id TEXT PRIMARY KEY, snapshot_id TEXT NOT NULL, bytes INTEGER NOT NULL,"
	"  manifest_sha TEXT NOT NULL, prev_state TEXT NOT NULL, created_at INTEGER NOT NULL,"
	"  procs TEXT);"
	/* Access tokens of host-routed port URLs (api/portfwd.c): SHA-256 only. */
	"CREATE TABLE IF NOT EXISTS port_tokens("
	"  hash TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, sandbox_id TEXT NOT NULL,"
	"  port INTEGER NOT NULL, expires_at INTEGER NOT NULL, created_at INTEGER NOT NULL);";

static int db_error(struct db *db, err_t *err, int rc, const char *what)
{
	int code = EIO;

	if ((rc & 0xff) == SQLITE_CONSTRAINT)
		code = EEXIST;
	else if ((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED)
		code = EBUSY;
	return err_set(err, code, "db: %s: %s", what, sqlite3_errmsg(db->h));
}

struct db *db_open(const char *path, err_t *err)
{
	struct db *db = xcalloc(1, sizeof(*db));
	pthread_mutexattr_t a;
	char *msg = NULL;
	int rc;

	pthread_mutexattr_init(&a);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&db->mu, &a);
	pthread_mutexattr_destroy(&a);
	rc = sqlite3_open_v2(path, &db->h,
			     SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
	if (rc != SQLITE_OK) {
		err_set(err, EIO, "db: cannot open `%s`: %s", path,
			db->h ? sqlite3_errmsg(db->h) : "out of memory");
		db_close(db);
		return NULL;
	}
	sqlite3_busy_timeout(db->h, 10000);
	rc = sqlite3_exec(db->h, schema, NULL, NULL, &msg);
	if (rc != SQLITE_OK) {
		err_set(err, EIO, "db: schema on `%s`: %s", path, msg ? msg : "?");
		sqlite3_free(msg);
		db_close(db);
		return NULL;
	}
	/* Columns added after a table first shipped: the ALTER fails with
	 * "duplicate column" on a database that has them, which is fine. */
	(void)sqlite3_exec(db->h, "ALTER TABLE snapshots ADD COLUMN scheduled INTEGER NOT NULL"
			   " DEFAULT 0", NULL, NULL, NULL);
	/* procs: a full snapshot's process table (node, proc-image.c's image). */
	(void)sqlite3_exec(db->h, "ALTER TABLE snapshots ADD COLUMN procs TEXT", NULL, NULL, NULL);
	return db;
}

void db_close(struct db *db)
{
	if (!db)
		return;
	if (db->h)
		sqlite3_close_v2(db->h);
	pthread_mutex_destroy(&db->mu);
	free(db);
}

static int bind_args(struct db *db, sqlite3_stmt *st, const char *types, va_list ap, err_t *err)
{
	int idx = 1;

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
			return db_error(db, err, rc, "bind");
	}
	return 0;
}

static int run(struct db *db, struct db_rows *out, err_t *err, const char *sql, const char *types,
	       va_list ap)
{
	sqlite3_stmt *st = NULL;
	int rc, r = 0, cap = 0;

	rc = sqlite3_prepare_v2(db->h, sql, -1, &st, NULL);
	if (rc != SQLITE_OK)
		return db_error(db, err, rc, "prepare");
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
		r = db_error(db, err, rc, "step");
		if (out)
			db_rows_free(out);
		goto out;
	}
	r = out ? 0 : sqlite3_changes(db->h);
out:
	sqlite3_finalize(st);
	return r;
}

int db_exec(struct db *db, err_t *err, const char *sql, const char *types, ...)
{
	va_list ap;
	int r;

	va_start(ap, types);
	pthread_mutex_lock(&db->mu);
	r = run(db, NULL, err, sql, types, ap);
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
	r = run(db, out, err, sql, types, ap);
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
	int rc;

	pthread_mutex_lock(&db->mu);
	rc = sqlite3_exec(db->h, "BEGIN IMMEDIATE", NULL, NULL, NULL);
	if (rc != SQLITE_OK) {
		int r = db_error(db, err, rc, "begin");
		pthread_mutex_unlock(&db->mu);
		return r;
	}
	return 0;
}

int db_tx_commit(struct db *db, err_t *err)
{
	int rc = sqlite3_exec(db->h, "COMMIT", NULL, NULL, NULL);
	int r = 0;

	if (rc != SQLITE_OK) {
		r = db_error(db, err, rc, "commit");
		sqlite3_exec(db->h, "ROLLBACK", NULL, NULL, NULL);
	}
	pthread_mutex_unlock(&db->mu);
	return r;
}

void db_tx_rollback(struct db *db)
{
	sqlite3_exec(db->h, "ROLLBACK", NULL, NULL, NULL);
	pthread_mutex_unlock(&db->mu);
}
