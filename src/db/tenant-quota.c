/* tenant-quota.c - tenant quotas and usage from the rows (tenant-quota.h). */
#include "tenant-quota.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "../lib/json.h"
#include "../lib/util.h"

#define QUOTA_COLS "sandboxes, memory_mb, cpu_millis, disk_mb, snapshots, snapshot_mb"

int tenant_quota_get(struct db *db, const char *tenant_id, struct tenant_quota *q, err_t *err)
{
	struct db_rows rows;
	int r = db_query(db, &rows, err,
			 "SELECT " QUOTA_COLS " FROM tenant_quotas WHERE tenant_id=?", "s",
			 tenant_id);

	memset(q, 0, sizeof(*q));
	if (r < 0)
		return r;
	if (rows.n_rows) {
		q->sandboxes = (uint64_t)db_cell_int(&rows, 0, 0);
		q->memory_mb = (uint64_t)db_cell_int(&rows, 0, 1);
		q->cpu_millis = (uint64_t)db_cell_int(&rows, 0, 2);
		q->disk_mb = (uint64_t)db_cell_int(&rows, 0, 3);
		q->snapshots = (uint64_t)db_cell_int(&rows, 0, 4);
		q->snapshot_mb = (uint64_t)db_cell_int(&rows, 0, 5);
	}
	db_rows_free(&rows);
	return 0;
}

int tenant_quota_set(struct db *db, const char *tenant_id, const struct tenant_quota *q,
		     err_t *err)
{
	int r;

	if (!q->sandboxes && !q->memory_mb && !q->cpu_millis && !q->disk_mb && !q->snapshots &&
	    !q->snapshot_mb)
		r = db_exec(db, err, "DELETE FROM tenant_quotas WHERE tenant_id=?", "s", tenant_id);
	else
		r = db_exec(db, err,
			    "INSERT INTO tenant_quotas(tenant_id, " QUOTA_COLS
			    ") VALUES(?,?,?,?,?,?,?) ON CONFLICT(tenant_id) DO UPDATE SET"
			    " sandboxes=excluded.sandboxes, memory_mb=excluded.memory_mb,"
			    " cpu_millis=excluded.cpu_millis, disk_mb=excluded.disk_mb,"
			    " snapshots=excluded.snapshots, snapshot_mb=excluded.snapshot_mb",
			    "siiiiii", tenant_id, (int64_t)q->sandboxes, (int64_t)q->memory_mb,
			    (int64_t)q->cpu_millis, (int64_t)q->disk_mb, (int64_t)q->snapshots,
			    (int64_t)q->snapshot_mb);
	return r < 0 ? r : 0;
}

/* A snapshot whose size the backend could not find (size_bytes NULL)
 * counts at its upper bound: the delta of a sandbox's disk is at most what
 * its disk may hold (limits.disk_mb, the qgroup limit; at least 16 MiB by
 * create.c). Counted as 0 instead, a tenant at its snapshot_mb could keep
 * adding snapshots whose size is never found. */
struct disk_of {
	char *id;
	uint64_t disk_mb;
};

static uint64_t disk_mb_of(const struct disk_of *d, int n, const char *id)
{
	for (int i = 0; id && i < n; i++)
		if (strcmp(d[i].id, id) == 0)
			return d[i].disk_mb;
	return 0;
}

int tenant_usage_get(struct db *db, const char *tenant_id, struct tenant_usage *u, err_t *err)
{
	struct db_rows rows;
	struct disk_of *disks;
	int r, n_disks;

	memset(u, 0, sizeof(*u));
	/* A row counts until it is deleted; its limits are in its spec (our
	 * own JSON, summed here rather than in SQL, whose JSON functions
	 * differ between the drivers). */
	r = db_query(db, &rows, err,
		     "SELECT id, spec FROM sandboxes WHERE tenant_id=? AND observed <> 'deleted'",
		     "s", tenant_id);
	if (r < 0)
		return r;
	n_disks = rows.n_rows;
	disks = xcalloc((size_t)n_disks + 1, sizeof(*disks));
	for (int i = 0; i < rows.n_rows; i++) {
		const char *spec = db_cell(&rows, i, 1);
		json *j = spec ? json_parse(spec, strlen(spec), NULL) : NULL;
		const json *l = j ? json_get(j, "limits") : NULL;

		u->sandboxes++;
		disks[i].id = xstrdup(db_cell(&rows, i, 0) ? db_cell(&rows, i, 0) : "");
		if (l) {
			u->memory_mb += (uint64_t)json_get_int(l, "memory_mb", 0, NULL);
			u->cpu_millis += (uint64_t)json_get_int(l, "cpu_millis", 0, NULL);
			disks[i].disk_mb = (uint64_t)json_get_int(l, "disk_mb", 0, NULL);
			u->disk_mb += disks[i].disk_mb;
		}
		json_free(j);
	}
	db_rows_free(&rows);
	r = db_query(db, &rows, err,
		     "SELECT sandbox_id, count(CASE WHEN scheduled = 0 THEN 1 END),"
		     " COALESCE(SUM(size_bytes), 0), count(CASE WHEN size_bytes IS NULL THEN 1 END)"
		     " FROM snapshots WHERE sandbox_id IN"
		     " (SELECT id FROM sandboxes WHERE tenant_id=? AND observed <> 'deleted')"
		     " GROUP BY sandbox_id",
		     "s", tenant_id);
	if (r >= 0) {
		for (int i = 0; i < rows.n_rows; i++) {
			uint64_t unknown = (uint64_t)db_cell_int(&rows, i, 3);

			u->snapshots += (uint64_t)db_cell_int(&rows, i, 1);
			u->snapshot_bytes += (uint64_t)db_cell_int(&rows, i, 2);
			if (unknown)
				u->snapshot_bytes += unknown *
						     (disk_mb_of(disks, n_disks, db_cell(&rows, i, 0))
						      << 20);
		}
		db_rows_free(&rows);
		r = 0;
	}
	/* A suspended sandbox's artifacts in the object store are its state
	 * like a snapshot's (its local snapshots' rows went when it was
	 * suspended: nothing counts twice). */
	if (r >= 0)
		r = db_query(db, &rows, err,
			     "SELECT COALESCE(SUM(bytes), 0) FROM suspensions WHERE sandbox_id IN"
			     " (SELECT id FROM sandboxes WHERE tenant_id=? AND observed <> 'deleted')",
			     "s", tenant_id);
	if (r >= 0) {
		u->snapshot_bytes += (uint64_t)db_cell_int(&rows, 0, 0);
		db_rows_free(&rows);
		r = 0;
	}
	for (int i = 0; i < n_disks; i++)
		free(disks[i].id);
	free(disks);
	return r;
}

int sandbox_stored_bytes(struct db *db, const char *sandbox_id, uint64_t disk_mb,
			 uint64_t *bytes, err_t *err)
{
	struct db_rows rows;
	int r = db_query(db, &rows, err,
			 "SELECT COALESCE(SUM(size_bytes), 0),"
			 " count(CASE WHEN size_bytes IS NULL THEN 1 END),"
			 " (SELECT COALESCE(SUM(bytes), 0) FROM suspensions WHERE sandbox_id=?)"
			 " FROM snapshots WHERE sandbox_id=?",
			 "ss", sandbox_id, sandbox_id);

	*bytes = 0;
	if (r < 0)
		return r;
	*bytes = (uint64_t)db_cell_int(&rows, 0, 0) +
		 (uint64_t)db_cell_int(&rows, 0, 1) * (disk_mb << 20) +
		 (uint64_t)db_cell_int(&rows, 0, 2);
	db_rows_free(&rows);
	return 0;
}

static int over(err_t *err, const char *field, uint64_t limit, uint64_t used, uint64_t add,
		const char *unit)
{
	return err_set(err, EDQUOT,
		       "tenant quota `%s` exceeded: %" PRIu64 "%s in use, %" PRIu64
		       "%s more asked, the quota is %" PRIu64 "%s",
		       field, used, unit, add, unit, limit, unit);
}

bool tenant_quota_binds(const struct tenant_quota *q, const struct tenant_usage *add)
{
	return (q->sandboxes && add->sandboxes) || (q->memory_mb && add->memory_mb) ||
	       (q->cpu_millis && add->cpu_millis) || (q->disk_mb && add->disk_mb) ||
	       (q->snapshots && add->snapshots) || (q->snapshot_mb && add->snapshot_bytes);
}

int tenant_quota_check(const struct tenant_quota *q, const struct tenant_usage *u,
		       const struct tenant_usage *add, err_t *err)
{
	const uint64_t mib = 1 << 20;

	if (q->sandboxes && add->sandboxes && u->sandboxes + add->sandboxes > q->sandboxes)
		return over(err, "sandboxes", q->sandboxes, u->sandboxes, add->sandboxes, "");
	if (q->memory_mb && add->memory_mb && u->memory_mb + add->memory_mb > q->memory_mb)
		return over(err, "memory_mb", q->memory_mb, u->memory_mb, add->memory_mb, " MiB");
	if (q->cpu_millis && add->cpu_millis && u->cpu_millis + add->cpu_millis > q->cpu_millis)
		return over(err, "cpus", q->cpu_millis, u->cpu_millis, add->cpu_millis,
			    " millicpus");
	if (q->disk_mb && add->disk_mb && u->disk_mb + add->disk_mb > q->disk_mb)
		return over(err, "disk_mb", q->disk_mb, u->disk_mb, add->disk_mb, " MiB");
	if (q->snapshots && add->snapshots && u->snapshots + add->snapshots > q->snapshots)
		return over(err, "snapshots", q->snapshots, u->snapshots, add->snapshots, "");
	/* Bytes: before a snapshot, whose size is not known yet, the caller
	 * adds 1 (refused once the quota is used up); after it, its size. */
	if (q->snapshot_mb && add->snapshot_bytes &&
	    u->snapshot_bytes + add->snapshot_bytes > q->snapshot_mb * mib)
		return over(err, "snapshot_mb", q->snapshot_mb, u->snapshot_bytes / mib,
			    (add->snapshot_bytes + mib - 1) / mib, " MiB");
	return 0;
}
