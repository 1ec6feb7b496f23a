/* db-migrate.c - the schema as numbered migrations, for both drivers.
 *
 * Each migration runs once per database, in order, and is recorded in
 * schema_migrations(version, applied_at). db_migrate applies the missing
 * ones in a single transaction that holds the driver's migration lock
 * (SQLite: BEGIN IMMEDIATE; PostgreSQL: pg_advisory_xact_lock), so the api,
 * node and gateway opening one database at the same moment do not race:
 * the first applies, the others wait and then find them recorded.
 *
 * To change the schema, append a migration; never edit a shipped one. Its
 * text must be valid for both drivers, or give pg its own text. Integers are
 * BIGINT (timestamps are ms since the epoch, past int4) except where SQLite
 * needs the word INTEGER: INTEGER PRIMARY KEY AUTOINCREMENT, whose
 * PostgreSQL form is an identity column.
 *
 * A database made before migrations existed (SQLite only: tables, no
 * schema_migrations) is adopted by migration 1: its CREATE TABLE IF NOT
 * EXISTS leaves the tables that exist alone and makes the ones that are
 * missing, and its columns step adds the columns that old code added later
 * (snapshots.scheduled, snapshots.procs), each only when it is missing. */
#include "db-internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../lib/log.h"
#include "../lib/util.h"

/* Migration 1: the schema of the first release, per driver only in its
 * integer words (I) and its auto-numbered keys (SERIAL). ROWID: PostgreSQL
 * has no implicit rowid, and snapshot listings order ties of created_at by
 * insertion, so there the table gets an identity column of that name. */
#define SCHEMA_1(I, SERIAL, ROWID)                                                               \
	"CREATE TABLE IF NOT EXISTS tenants("                                                    \
	"  id TEXT PRIMARY KEY, name TEXT UNIQUE NOT NULL, created_at " I " NOT NULL);"          \
	"CREATE TABLE IF NOT EXISTS api_keys("                                                   \
	"  id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL REFERENCES tenants(id),"                \
	"  hash TEXT UNIQUE NOT NULL, name TEXT, admin " I " NOT NULL DEFAULT 0,"               \
	"  created_at " I " NOT NULL, revoked " I " NOT NULL DEFAULT 0);"                       \
	"CREATE TABLE IF NOT EXISTS templates("                                                  \
	"  name TEXT NOT NULL, version " I " NOT NULL, status TEXT NOT NULL,"                   \
	"  source TEXT, error TEXT, created_at " I " NOT NULL,"                                  \
	"  PRIMARY KEY(name, version));"                                                          \
	/* idem_key: UNIQUE per tenant, the race between two creates with one          \
	 * Idempotency-Key (on any node) is decided by the INSERT (node/create.c). */  \
	"CREATE TABLE IF NOT EXISTS sandboxes("                                                  \
	"  id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, template TEXT NOT NULL,"               \
	"  template_version " I " NOT NULL, backend TEXT NOT NULL,"                             \
	"  desired TEXT NOT NULL, observed TEXT NOT NULL, gen " I " NOT NULL DEFAULT 1,"        \
	"  spec TEXT NOT NULL, metadata TEXT NOT NULL DEFAULT '{}',"                            \
	"  idem_key TEXT, error TEXT, jail_pid " I ","                                           \
	"  created_at " I " NOT NULL, updated_at " I " NOT NULL,"                                \
	"  UNIQUE(tenant_id, idem_key));"                                                         \
	"CREATE INDEX IF NOT EXISTS sandboxes_tenant ON sandboxes(tenant_id);"                  \
	"CREATE TABLE IF NOT EXISTS events("                                                     \
	"  id " SERIAL ", sandbox_id TEXT NOT NULL, at " I " NOT NULL,"                          \
	"  from_state TEXT, to_state TEXT, reason TEXT);"                                       \
	/* Disk snapshots of a sandbox (node). size_bytes: data written since the      \
	 * previous snapshot, NULL when unknown. scheduled: 1 when the snapshot        \
	 * scheduler took it (only those are pruned by retention). procs: a full       \
	 * snapshot's process table (node, proc-image.c's image). */                   \
	"CREATE TABLE IF NOT EXISTS snapshots(" ROWID                                            \
	"  id TEXT PRIMARY KEY, sandbox_id TEXT NOT NULL, name TEXT NOT NULL,"                  \
	"  kind TEXT NOT NULL, size_bytes " I ", created_at " I " NOT NULL,"                    \
	"  scheduled " I " NOT NULL DEFAULT 0, procs TEXT,"                                      \
	"  UNIQUE(sandbox_id, name));"                                                            \
	"CREATE INDEX IF NOT EXISTS snapshots_sandbox ON snapshots(sandbox_id, created_at);"    \
	/* Credentials (api writes; node reads bindings and makes placeholders;        \
	 * the gateway reads, opens secrets and audits). The values are only in       \
	 * vault_secrets, as sealed boxes (src/cred/seal.h). spec: inject, hosts,      \
	 * path_prefix, methods, rate_limit as JSON. expires_at 0 = never. */          \
	"CREATE TABLE IF NOT EXISTS credentials("                                                \
	"  id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, name TEXT NOT NULL, env TEXT,"         \
	"  spec TEXT NOT NULL, expires_at " I " NOT NULL DEFAULT 0, version " I " NOT NULL,"    \
	"  created_at " I " NOT NULL, rotated_at " I ", revoked_at " I ","                       \
	"  UNIQUE(tenant_id, name));"                                                             \
	"CREATE TABLE IF NOT EXISTS credential_bindings("                                        \
	"  cred_id TEXT NOT NULL, kind TEXT NOT NULL, value TEXT NOT NULL,"                     \
	"  PRIMARY KEY(cred_id, kind, value));"                                                  \
	"CREATE TABLE IF NOT EXISTS vault_secrets("                                              \
	"  ref TEXT PRIMARY KEY, box TEXT NOT NULL, created_at " I " NOT NULL);"                 \
	"CREATE TABLE IF NOT EXISTS credential_placeholders("                                    \
	"  sandbox_id TEXT NOT NULL, cred_id TEXT NOT NULL, placeholder TEXT UNIQUE NOT NULL,"  \
	"  created_at " I " NOT NULL, PRIMARY KEY(sandbox_id, cred_id));"                        \
	"CREATE TABLE IF NOT EXISTS credential_audit("                                           \
	"  id " SERIAL ", at " I " NOT NULL, tenant_id TEXT NOT NULL,"                           \
	"  sandbox_id TEXT, cred_id TEXT, host TEXT, method TEXT, path TEXT,"                   \
	"  decision TEXT NOT NULL, detail TEXT);"                                                \
	"CREATE INDEX IF NOT EXISTS credential_audit_tenant ON credential_audit(tenant_id, at);"\
	/* Where a sandbox came from (node): parent = the sandbox it was forked        \
	 * from; recovered_from = JSON {snapshot, kind, at} of its last crash          \
	 * recovery. */                                                                 \
	"CREATE TABLE IF NOT EXISTS lineage("                                                    \
	"  sandbox_id TEXT PRIMARY KEY, parent TEXT, recovered_from TEXT);"                     \
	/* Access tokens of host-routed port URLs (api/portfwd.c): SHA-256 only. */    \
	"CREATE TABLE IF NOT EXISTS port_tokens("                                                \
	"  hash TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, sandbox_id TEXT NOT NULL,"           \
	"  port " I " NOT NULL, expires_at " I " NOT NULL, created_at " I " NOT NULL);"

/* Columns that databases older than migrations may lack (they were added by
 * an ALTER whose failure was ignored). */
static const struct {
	const char *table, *column, *def;
} schema_1_columns[] = {
	{ "snapshots", "scheduled", "BIGINT NOT NULL DEFAULT 0" },
	{ "snapshots", "procs", "TEXT" },
};

/* Migration 2: the nodes that share the database, by name (--node-name;
 * node/cluster/heartbeat.c, api/placement.c). state: starting, up, down or lost;
 * generation: bumped by each (re)start; started_at, heartbeat_at: ms since
 * the epoch; capacity: JSON (node/cluster/heartbeat.c); url: where other apis reach
 * this node's api. */
#define SCHEMA_2(I)                                                                              \
	"CREATE TABLE IF NOT EXISTS nodes("                                                      \
	"  name TEXT PRIMARY KEY, url TEXT, state TEXT NOT NULL,"                                \
	"  generation " I " NOT NULL DEFAULT 0, started_at " I ", heartbeat_at " I ","          \
	"  capacity TEXT NOT NULL DEFAULT '{}');"

/* Migration 3: what lives in one node's pool is that node's. templates gets
 * the node's name in its key (a table rebuild: SQLite cannot change a
 * primary key in place; this text is valid in both dialects), and sandboxes
 * the node that runs each. '' and NULL: rows from before node names, which
 * the first node to start claims (node/tmpl/templates.c, node/reconcile.c). */
#define SCHEMA_3(I)                                                                              \
	"CREATE TABLE templates_v3("                                                             \
	"  node TEXT NOT NULL DEFAULT '', name TEXT NOT NULL, version " I " NOT NULL,"          \
	"  status TEXT NOT NULL, source TEXT, error TEXT, created_at " I " NOT NULL,"           \
	"  PRIMARY KEY(node, name, version));"                                                    \
	"INSERT INTO templates_v3(node, name, version, status, source, error, created_at)"      \
	"  SELECT '', name, version, status, source, error, created_at FROM templates;"         \
	"DROP TABLE templates;"                                                                  \
	"ALTER TABLE templates_v3 RENAME TO templates;"                                          \
	"ALTER TABLE sandboxes ADD COLUMN node TEXT;"                                            \
	"CREATE INDEX IF NOT EXISTS sandboxes_node ON sandboxes(node);"

/* Migration 4: a tenant's quota (api writes, node reads; tenant-quota.h):
 * 0 = no limit; no row = no limits at all. */
#define SCHEMA_4(I)                                                                              \
	"CREATE TABLE IF NOT EXISTS tenant_quotas("                                              \
	"  tenant_id TEXT PRIMARY KEY, sandboxes " I " NOT NULL DEFAULT 0,"                      \
	"  memory_mb " I " NOT NULL DEFAULT 0, cpu_millis " I " NOT NULL DEFAULT 0,"            \
	"  disk_mb " I " NOT NULL DEFAULT 0, snapshots " I " NOT NULL DEFAULT 0,"               \
	"  snapshot_mb " I " NOT NULL DEFAULT 0);"

/* Migration 5: a suspended sandbox's restorable snapshot in the object
 * store (node/suspend/suspend.c). The row exists only while the sandbox is
 * suspended: written in the transaction that moves it there, once every
 * artifact is verified in the store; removed by its restore or delete.
 * manifest_sha: the SHA-256 of the manifest as uploaded, so a manifest
 * replaced in the store is refused. prev_state: running or paused, what it
 * was. procs: the process table's image when the memory was kept (vm). */
#define SCHEMA_5(I)                                                                              \
	"CREATE TABLE IF NOT EXISTS suspensions("                                                \
	"  sandbox_id TEXT PRIMARY KEY, snapshot_id TEXT NOT NULL, bytes " I " NOT NULL,"       \
	"  manifest_sha TEXT NOT NULL, prev_state TEXT NOT NULL, created_at " I " NOT NULL,"    \
	"  procs TEXT);"

/* Migration 6: a template version's identity in the object store
 * (node/tmpl/tmplstore.c): the received uuid of its subvolume, once published
 * or fetched; NULL before. */
#define SCHEMA_6 "ALTER TABLE templates ADD COLUMN uuid TEXT;"

/* Migration 7: BYOK (src/byok/kms.h). tenant_encryption: a tenant's key
 * provider and where its key is (never key material nor a token: token_file
 * is a path); no row = the local provider, key "default". data_keys: each
 * artifact set's data key, only as wrapped by the tenant's key (provider's
 * text), under the random id the sealed objects' headers carry; with the
 * sandbox and snapshot it was made for, so a header naming another
 * tenant's or snapshot's key is refused before any provider is asked.
 * suspensions.data_key: the id of the data key its artifacts are sealed
 * under (NULL: sealed by nothing, encrypt_artifacts = false), so a restore
 * insists on sealed objects of exactly that key. */
#define SCHEMA_7(I)                                                                              \
	"CREATE TABLE IF NOT EXISTS tenant_encryption("                                          \
	"  tenant_id TEXT PRIMARY KEY, provider TEXT NOT NULL, key_id TEXT, url TEXT,"          \
	"  key_name TEXT, token_file TEXT, updated_at " I " NOT NULL);"                           \
	"CREATE TABLE IF NOT EXISTS data_keys("                                                  \
	"  id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, sandbox_id TEXT NOT NULL,"             \
	"  snapshot_id TEXT NOT NULL, provider TEXT NOT NULL, wrapped TEXT NOT NULL,"           \
	"  created_at " I " NOT NULL, rotated_at " I ");"                                        \
	"CREATE INDEX IF NOT EXISTS data_keys_tenant ON data_keys(tenant_id);"                  \
	"ALTER TABLE suspensions ADD COLUMN data_key TEXT;"

/* Migration 8: where a credential may be injected (src/cred/cred-transport.c):
 * schemes and ports, JSON arrays. Rows from before it get the secure
 * defaults, https to port 443 only: until then the gateway put every
 * credential into plain HTTP on any port the sandbox dialled, and an owner
 * who needs plain HTTP says so again, explicitly (POST /v1/credentials with
 * "schemes":["http"]). */
#define SCHEMA_8                                                                                  \
	"ALTER TABLE credentials ADD COLUMN schemes TEXT NOT NULL DEFAULT '[\"https\"]';"         \
	"ALTER TABLE credentials ADD COLUMN ports TEXT NOT NULL DEFAULT '[443]';"

/* Migration 9: the transit key service over TLS (src/byok/kms.h): the CAs
 * to trust, a pinned certificate digest, a client certificate and key
 * (paths on the node, never their bytes), and the operator's explicit
 * choice of plain http to a host that is not loopback (0 or 1). */
#define SCHEMA_9                                                                                 \
	"ALTER TABLE tenant_encryption ADD COLUMN ca_file TEXT;"                                  \
	"ALTER TABLE tenant_encryption ADD COLUMN pin_sha256 TEXT;"                               \
	"ALTER TABLE tenant_encryption ADD COLUMN client_cert TEXT;"                              \
	"ALTER TABLE tenant_encryption ADD COLUMN client_key TEXT;"                               \
	"ALTER TABLE tenant_encryption ADD COLUMN insecure_http INTEGER NOT NULL DEFAULT 0;"

/* Migration 10: port and envd tokens (api/portfwd.c, compat/e2b).
 * port_tokens_sandbox: an envd token is checked among its sandbox's rows
 * (a check an unauthenticated client can cause), and a sandbox's tokens
 * are dropped with it, so neither reads the whole table. key_id (the C
 * step add_token_key): the API key that minted the token; a check joins
 * api_keys, so revoking the key (on any api of a cluster) ends its tokens
 * at the next request. Rows
 * from before name no key and are deleted: those port URLs need a new
 * token, and an E2B SDK client gets a new envd token from its next
 * Sandbox.connect. */
#define SCHEMA_10                                                                                 \
	"CREATE INDEX IF NOT EXISTS port_tokens_sandbox ON port_tokens(sandbox_id, port);"        \
	"DELETE FROM port_tokens;"

/* Migration 11: the nodes' epochs. A node takes a new epoch at every start
 * and writes it as its row's generation; its sandbox writes are
 * conditioned on it (node/model/state.c). PostgreSQL: a sequence, so two
 * processes never draw one epoch, started above every generation already
 * written. SQLite is one host's file and so one node: there the epoch is
 * max+1 inside the registering transaction (node/cluster/heartbeat.c), and
 * this migration has nothing to make. */
#define SCHEMA_11_PG                                                                             \
	"CREATE SEQUENCE IF NOT EXISTS node_epoch;"                                              \
	"SELECT setval('node_epoch', (SELECT COALESCE(max(generation), 0) + 1 FROM nodes), false);"
#define SCHEMA_11_SQLITE "SELECT 1;"

/* Migration 12: limits that bite are events (node/limits/limits.c). kind:
 * NULL for a row of the lifecycle (every row before), "oom_kill" or
 * "pids_limit" for one of a limit; count: that kind's count in all when it
 * was written. Only C (add_event_kind), each column only when missing, so
 * a database whose recorded version was set back runs it again safely. */
#define SCHEMA_12 "SELECT 1;"

struct migration {
	int version;
	const char *sqlite, *pg;
	int (*after)(struct db *db, err_t *err);   /* NULL, or a step in C */
};

static int add_missing_columns(struct db *db, err_t *err);
static int add_token_key(struct db *db, err_t *err);
static int add_event_kind(struct db *db, err_t *err);

static const struct migration migrations[] = {
	{ 1,
	  SCHEMA_1("INTEGER", "INTEGER PRIMARY KEY AUTOINCREMENT", ""),
	  SCHEMA_1("BIGINT", "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
		   "rowid BIGINT GENERATED ALWAYS AS IDENTITY, "),
	  add_missing_columns },
	{ 2, SCHEMA_2("INTEGER"), SCHEMA_2("BIGINT"), NULL },
	{ 3, SCHEMA_3("INTEGER"), SCHEMA_3("BIGINT"), NULL },
	{ 4, SCHEMA_4("INTEGER"), SCHEMA_4("BIGINT"), NULL },
	{ 5, SCHEMA_5("INTEGER"), SCHEMA_5("BIGINT"), NULL },
	{ 6, SCHEMA_6, SCHEMA_6, NULL },
	{ 7, SCHEMA_7("INTEGER"), SCHEMA_7("BIGINT"), NULL },
	{ 8, SCHEMA_8, SCHEMA_8, NULL },
	{ 9, SCHEMA_9, SCHEMA_9, NULL },
	{ 10, SCHEMA_10, SCHEMA_10, add_token_key },
	{ 11, SCHEMA_11_SQLITE, SCHEMA_11_PG, NULL },
	{ 12, SCHEMA_12, SCHEMA_12, add_event_kind },
};
#define N_MIGRATIONS ((int)(sizeof(migrations) / sizeof(migrations[0])))

int db_schema_latest(void)
{
	return migrations[N_MIGRATIONS - 1].version;
}

static int add_missing_columns(struct db *db, err_t *err)
{
	for (size_t i = 0; i < sizeof(schema_1_columns) / sizeof(schema_1_columns[0]); i++) {
		struct db_rows rows;
		char sql[200];
		bool have;
		int r = db_run_locked(db, &rows, err, db->drv->has_column_sql, "ss",
				      schema_1_columns[i].table, schema_1_columns[i].column);

		if (r < 0)
			return r;
		have = rows.n_rows > 0;
		db_rows_free(&rows);
		if (have)
			continue;
		log_info("db: adopting an older database: adding %s.%s", schema_1_columns[i].table,
			 schema_1_columns[i].column);
		snprintf(sql, sizeof(sql), "ALTER TABLE %s ADD COLUMN %s %s",
			 schema_1_columns[i].table, schema_1_columns[i].column,
			 schema_1_columns[i].def);
		r = db->drv->script(db, sql, err);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Migration 9's column, only when missing: a step in C because SQLite has
 * no ADD COLUMN IF NOT EXISTS, and a database whose recorded version was
 * set back (tests do) runs it again. */
static int add_token_key(struct db *db, err_t *err)
{
	struct db_rows rows;
	bool have;
	int r = db_run_locked(db, &rows, err, db->drv->has_column_sql, "ss", "port_tokens",
			      "key_id");

	if (r < 0)
		return r;
	have = rows.n_rows > 0;
	db_rows_free(&rows);
	if (!have && (r = db->drv->script(db, "ALTER TABLE port_tokens ADD COLUMN key_id TEXT"
					  " NOT NULL DEFAULT ''", err)) < 0)
		return r;
	return db->drv->script(db, "CREATE INDEX IF NOT EXISTS port_tokens_key"
			       " ON port_tokens(key_id)", err);
}

/* Migration 12's columns of events, each only when missing. */
static int add_event_kind(struct db *db, err_t *err)
{
	static const struct {
		const char *column, *sql;
	} cols[] = {
		{ "kind", "ALTER TABLE events ADD COLUMN kind TEXT" },
		{ "count", "ALTER TABLE events ADD COLUMN count BIGINT" },
	};

	for (size_t i = 0; i < sizeof(cols) / sizeof(cols[0]); i++) {
		struct db_rows rows;
		bool have;
		int r = db_run_locked(db, &rows, err, db->drv->has_column_sql, "ss", "events",
				      cols[i].column);

		if (r < 0)
			return r;
		have = rows.n_rows > 0;
		db_rows_free(&rows);
		if (!have && (r = db->drv->script(db, cols[i].sql, err)) < 0)
			return r;
	}
	return 0;
}

/* Inside the migration transaction: the highest version recorded. */
static int current_version(struct db *db, err_t *err)
{
	struct db_rows rows;
	int r = db_run_locked(db, &rows, err, "SELECT max(version) FROM schema_migrations", NULL);

	if (r < 0)
		return r;
	r = (int)db_cell_int(&rows, 0, 0);
	db_rows_free(&rows);
	return r;
}

int db_schema_version(struct db *db, err_t *err)
{
	int r;

	pthread_mutex_lock(&db->mu);
	r = current_version(db, err);
	pthread_mutex_unlock(&db->mu);
	return r;
}

static int apply(struct db *db, err_t *err)
{
	int r = db->drv->script(db,
				"CREATE TABLE IF NOT EXISTS schema_migrations("
				"  version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)",
				err);
	int have;

	if (r < 0)
		return r;
	have = current_version(db, err);
	if (have < 0)
		return have;
	for (int i = 0; i < N_MIGRATIONS; i++) {
		const struct migration *m = &migrations[i];
		char at[ISO_TIME_MAX];

		if (m->version <= have)
			continue;
		r = db->drv->script(db, db->drv->kind == DB_POSTGRES && m->pg ? m->pg : m->sqlite,
				    err);
		if (r >= 0 && m->after)
			r = m->after(db, err);
		iso_time(wall_ms(), at);
		if (r >= 0)
			r = db_run_locked(db, NULL, err,
					  "INSERT INTO schema_migrations(version, applied_at)"
					  " VALUES(?, ?)",
					  "is", (int64_t)m->version, at);
		if (r < 0)
			return err_wrap(err, "migration %d", m->version);
		log_info("db: applied migration %d", m->version);
	}
	return 0;
}

int db_migrate(struct db *db, err_t *err)
{
	int r;

	pthread_mutex_lock(&db->mu);
	r = db->drv->begin(db, true, err);
	if (r >= 0) {
		db->in_tx = true;
		r = apply(db, err);
		if (r >= 0)
			r = db->drv->commit(db, err);
		if (r < 0)
			db->drv->rollback(db);
		db->in_tx = false;
	}
	pthread_mutex_unlock(&db->mu);
	return r < 0 ? err_wrap(err, "db: schema") : 0;
}
