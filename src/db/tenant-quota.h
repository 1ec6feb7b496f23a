/* tenant-quota.h - what a tenant may hold, and what it holds now.
 *
 * The quota is one row of `tenant_quotas` (set by an admin through the api,
 * PUT /v1/tenants/{t}/quota); no row, or 0 in a field, means no limit.
 * Usage is counted from the DB rows every time, never from counters kept in
 * memory: the rows are what survives a restart and what every process sees.
 * A sandbox counts from its row's insert until it is deleted (failed and
 * stopped ones hold their disk, so they count); its limits are those of its
 * row's spec. Snapshots count while their row exists: all of them for bytes,
 * only the ones a client took (scheduled = 0) for the count, since the
 * scheduler's are thinned by retention (docs/API.md, "Quotas"). A snapshot
 * whose size is unknown (size_bytes NULL) counts its sandbox's disk_mb, the
 * most its delta can be. A suspended sandbox's objects in the store (its
 * suspensions row's bytes) count toward snapshot_mb too: they are its
 * saved state, in storage the platform pays for.
 *
 * To make a check and the insert it guards one step, call tenant_usage_get
 * and tenant_quota_check inside the transaction (db_tx_begin: BEGIN
 * IMMEDIATE, so no other writer, in this process or another, can insert in
 * between).
 */
#ifndef AIRLOCK_DB_TENANT_QUOTA_H
#define AIRLOCK_DB_TENANT_QUOTA_H

#include <stdbool.h>
#include <stdint.h>

#include "db.h"

/* 0 = no limit. */
struct tenant_quota {
	uint64_t sandboxes;
	uint64_t memory_mb, cpu_millis, disk_mb;   /* sums of the live sandboxes' limits */
	uint64_t snapshots;                        /* snapshots clients took */
	uint64_t snapshot_mb;                      /* bytes of all snapshots (size_bytes) and
						      of suspended sandboxes' objects */
};

struct tenant_usage {
	uint64_t sandboxes, memory_mb, cpu_millis, disk_mb, snapshots, snapshot_bytes;
};

/* The tenant's quota, all zeros when none was set. */
int tenant_quota_get(struct db *db, const char *tenant_id, struct tenant_quota *q, err_t *err);
/* Replace the tenant's quota (all zeros removes the row). */
int tenant_quota_set(struct db *db, const char *tenant_id, const struct tenant_quota *q,
		     err_t *err);
/* What the tenant holds now, counted from the rows. */
int tenant_usage_get(struct db *db, const char *tenant_id, struct tenant_usage *u, err_t *err);
/* What one sandbox holds toward snapshot_mb: its snapshots (unknown sizes
 * at disk_mb) and its suspension's objects. A suspend replaces all of it
 * (the local snapshots' rows go, a new suspensions row comes). */
int sandbox_stored_bytes(struct db *db, const char *sandbox_id, uint64_t disk_mb,
			 uint64_t *bytes, err_t *err);
/* Does q limit any field add asks for? When not, the check cannot refuse,
 * and the caller skips tenant_usage_get: that reads every live sandbox row
 * of the tenant (and parses its spec), O(the tenant's sandboxes) per create,
 * the only per-create cost that grew with a full node. */
bool tenant_quota_binds(const struct tenant_quota *q, const struct tenant_usage *add);
/* Would usage u plus add stay within q? Only the fields add asks for are
 * checked. 0, or -EDQUOT with a message that names the quota's field, its
 * value and the usage. Before a snapshot, whose size is not known yet, ask
 * for 1 byte: refused once snapshot_mb is used up. */
int tenant_quota_check(const struct tenant_quota *q, const struct tenant_usage *u,
		       const struct tenant_usage *add, err_t *err);

#endif
