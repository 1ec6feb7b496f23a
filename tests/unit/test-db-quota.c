/* test-db-quota: tenant quotas and usage from the rows (src/db/tenant-quota.h).
 * Usage counts the live sandboxes' limits from their spec, not deleted ones,
 * not other tenants'; snapshots by client (scheduled = 0) for the count and
 * all for the bytes, one of unknown size at its sandbox's disk_mb, and a
 * suspended sandbox's objects in the store toward the bytes too; each
 * quota field refuses with EDQUOT naming it; and the
 * pattern the node uses (usage, check and insert in one BEGIN IMMEDIATE
 * transaction) holds a quota exactly under 8 threads on two handles of one
 * file (as two processes would). Exit 0 = pass. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/db/tenant-quota.h"
#include "check.h"

#define THREADS 8
#define TRIES 25
#define QUOTA 60

static struct db *handles[2];
static atomic_int admitted, seq;

static int insert_sandbox(struct db *db, const char *tenant, const char *id, const char *observed,
			  err_t *err)
{
	static const char spec[] =
		"{\"limits\":{\"memory_mb\":64,\"cpu_millis\":500,\"pids\":100,\"disk_mb\":100}}";

	int r = db_exec(db, err,
			"INSERT INTO sandboxes(id, tenant_id, template, template_version, backend,"
			" desired, observed, spec, created_at, updated_at)"
			" VALUES(?,?,'busybox',1,'ns','running',?,?,0,0)",
			"ssss", id, tenant, observed, spec);

	return r < 0 ? r : 0;
}

/* One create as the node makes it: count, check, insert, one transaction. */
static void *creator(void *arg)
{
	struct db *db = handles[(intptr_t)arg % 2];
	struct tenant_usage add = { .sandboxes = 1, .memory_mb = 64 };

	for (int i = 0; i < TRIES; i++) {
		struct tenant_quota q;
		struct tenant_usage u;
		err_t err = { 0 };
		char id[32];
		int r;

		snprintf(id, sizeof(id), "sb-race-%d", atomic_fetch_add(&seq, 1));
		if (db_tx_begin(db, &err) < 0) {
			fprintf(stderr, "begin: %s\n", err.msg);
			continue;
		}
		r = tenant_quota_get(db, "ten_race", &q, &err);
		if (r == 0)
			r = tenant_usage_get(db, "ten_race", &u, &err);
		/* widen the window a racy version would lose in */
		usleep(200);
		if (r == 0)
			r = tenant_quota_check(&q, &u, &add, &err);
		if (r == 0)
			r = insert_sandbox(db, "ten_race", id, "running", &err);
		if (r == 0) {
			if (db_tx_commit(db, &err) == 0)
				atomic_fetch_add(&admitted, 1);
		} else {
			db_tx_rollback(db);
		}
	}
	return NULL;
}

int main(void)
{
	char dir[] = "/tmp/test-db-quota-XXXXXX";
	struct tenant_quota q = { 0 }, got;
	struct tenant_usage u, add = { 0 };
	pthread_t th[THREADS];
	err_t err = { 0 };
	char path[128];

	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(path, sizeof(path), "%s/airlock.db", dir);
	handles[0] = db_open(path, &err);
	handles[1] = handles[0] ? db_open(path, &err) : NULL;
	if (!handles[0] || !handles[1]) {
		fprintf(stderr, "db_open: %s\n", err.msg);
		return 1;
	}
	struct db *db = handles[0];

	/* no row: no limit, all zeros */
	CHECK(tenant_quota_get(db, "ten_a", &got, &err) == 0 && got.sandboxes == 0 &&
	      got.snapshot_mb == 0);

	/* usage: live rows of this tenant only, limits from the spec */
	CHECK(insert_sandbox(db, "ten_a", "sb-1", "running", &err) == 0);
	CHECK(insert_sandbox(db, "ten_a", "sb-2", "failed", &err) == 0);
	CHECK(insert_sandbox(db, "ten_a", "sb-3", "deleted", &err) == 0);
	CHECK(insert_sandbox(db, "ten_b", "sb-4", "running", &err) == 0);
	CHECK(db_exec(db, &err,
		      "INSERT INTO snapshots(id, sandbox_id, name, kind, size_bytes, created_at,"
		      " scheduled) VALUES('sn-1','sb-1','a','disk',1000,0,0),"
		      " ('sn-2','sb-1','b','full',3000,0,1), ('sn-3','sb-2','c','disk',NULL,0,0),"
		      " ('sn-4','sb-3','d','disk',500,0,0), ('sn-5','sb-4','e','disk',700,0,0)",
		      "") >= 0);
	CHECK(tenant_usage_get(db, "ten_a", &u, &err) == 0);
	CHECK(u.sandboxes == 2 && u.memory_mb == 128 && u.cpu_millis == 1000 && u.disk_mb == 200);
	CHECK(u.snapshots == 2);           /* sn-1, sn-3: a client's; not sn-2 (scheduled) */
	/* sn-1 + sn-2, and sn-3 of unknown size at its sandbox's disk_mb (100);
	 * sn-4's sandbox is deleted */
	CHECK(u.snapshot_bytes == 4000 + (100u << 20));

	/* each field refuses, naming itself; a field add does not ask for is
	 * not checked */
	q = (struct tenant_quota){ .sandboxes = 2, .memory_mb = 192, .cpu_millis = 1500,
				   .disk_mb = 250, .snapshots = 2, .snapshot_mb = 101 };
	CHECK(tenant_quota_set(db, "ten_a", &q, &err) == 0);
	CHECK(tenant_quota_get(db, "ten_a", &got, &err) == 0 && got.cpu_millis == 1500 &&
	      got.snapshot_mb == 101);
	add = (struct tenant_usage){ .sandboxes = 1 };
	CHECK(tenant_quota_check(&got, &u, &add, &err) == -EDQUOT && strstr(err.msg, "`sandboxes`"));
	got.sandboxes = 0;
	add = (struct tenant_usage){ .sandboxes = 1, .memory_mb = 65, .cpu_millis = 500 };
	CHECK(tenant_quota_check(&got, &u, &add, &err) == -EDQUOT && strstr(err.msg, "`memory_mb`"));
	add.memory_mb = 64;
	CHECK(tenant_quota_check(&got, &u, &add, &err) == 0);
	add.cpu_millis = 501;
	CHECK(tenant_quota_check(&got, &u, &add, &err) == -EDQUOT && strstr(err.msg, "`cpus`"));
	add = (struct tenant_usage){ .disk_mb = 51 };
	CHECK(tenant_quota_check(&got, &u, &add, &err) == -EDQUOT && strstr(err.msg, "`disk_mb`"));
	add = (struct tenant_usage){ .snapshots = 1 };
	CHECK(tenant_quota_check(&got, &u, &add, &err) == -EDQUOT && strstr(err.msg, "`snapshots`"));
	add = (struct tenant_usage){ .snapshot_bytes = (1 << 20) - 4000 };
	CHECK(tenant_quota_check(&got, &u, &add, &err) == 0);
	add.snapshot_bytes++;
	CHECK(tenant_quota_check(&got, &u, &add, &err) == -EDQUOT &&
	      strstr(err.msg, "`snapshot_mb`"));
	/* A tenant at its snapshot_mb cannot add snapshots whose size is never
	 * found: each counts its sandbox's disk (100 MiB), so of a loop of them
	 * under 150 MiB, the node's pattern (1 byte before, the bound after,
	 * the row with size_bytes NULL) admits one. Counted as 0 it admitted
	 * all. */
	{
		struct tenant_quota uq = { .snapshot_mb = 150 };
		int taken = 0;

		CHECK(insert_sandbox(db, "ten_u", "sb-u1", "running", &err) == 0);
		for (int i = 0; i < 5; i++) {
			struct tenant_usage before = { .snapshot_bytes = 1 },
					    after = { .snapshot_bytes = 100u << 20 };
			char sql[200];

			if (tenant_usage_get(db, "ten_u", &u, &err) < 0 ||
			    tenant_quota_check(&uq, &u, &before, &err) < 0 ||
			    tenant_quota_check(&uq, &u, &after, &err) < 0)
				break;
			snprintf(sql, sizeof(sql),
				 "INSERT INTO snapshots(id, sandbox_id, name, kind, size_bytes,"
				 " created_at, scheduled) VALUES('sn-u%d','sb-u1','u%d','disk',NULL,0,0)",
				 i, i);
			CHECK(db_exec(db, &err, sql, "") >= 0);
			taken++;
		}
		CHECK(taken == 1 && err.code == EDQUOT && strstr(err.msg, "`snapshot_mb`"));
		CHECK(tenant_usage_get(db, "ten_u", &u, &err) == 0 &&
		      u.snapshot_bytes == 100u << 20);
	}
	/* A suspended sandbox's objects in the store count toward snapshot_mb
	 * (the bytes of its suspensions row); a deleted sandbox's do not. A
	 * suspend replaces what its sandbox holds: sandbox_stored_bytes. */
	{
		struct tenant_quota sq = { .snapshot_mb = 6 };
		struct tenant_usage one = { .snapshot_bytes = 1 };
		uint64_t mine = 0;

		CHECK(insert_sandbox(db, "ten_s", "sb-s1", "suspended", &err) == 0);
		CHECK(insert_sandbox(db, "ten_s", "sb-s2", "deleted", &err) == 0);
		CHECK(db_exec(db, &err,
			      "INSERT INTO suspensions(sandbox_id, snapshot_id, bytes, manifest_sha,"
			      " prev_state, created_at) VALUES('sb-s1','su-1',7000000,'x','running',0),"
			      " ('sb-s2','su-2',9000,'x','running',0)",
			      "") >= 0);
		CHECK(tenant_usage_get(db, "ten_s", &u, &err) == 0 && u.snapshot_bytes == 7000000);
		CHECK(tenant_quota_check(&sq, &u, &one, &err) == -EDQUOT &&
		      strstr(err.msg, "`snapshot_mb`"));
		CHECK(sandbox_stored_bytes(db, "sb-s1", 100, &mine, &err) == 0 && mine == 7000000);
		CHECK(sandbox_stored_bytes(db, "sb-2", 100, &mine, &err) == 0 &&
		      mine == 100u << 20);   /* sn-3, of unknown size */
	}
	/* binds: only a limited field that add asks for (the node skips the
	 * O(n) usage count otherwise) */
	add = (struct tenant_usage){ .sandboxes = 1, .memory_mb = 64 };
	CHECK(tenant_quota_binds(&got, &add));            /* memory_mb limited */
	got = (struct tenant_quota){ .snapshots = 3 };
	CHECK(!tenant_quota_binds(&got, &add));           /* a create adds no snapshot */
	add = (struct tenant_usage){ .snapshots = 1 };
	CHECK(tenant_quota_binds(&got, &add));
	got = (struct tenant_quota){ 0 };
	add = (struct tenant_usage){ .sandboxes = 1, .memory_mb = 64, .cpu_millis = 1,
				     .disk_mb = 1, .snapshots = 1, .snapshot_bytes = 1 };
	CHECK(!tenant_quota_binds(&got, &add));           /* no quota at all */
	/* all zeros removes the row */
	q = (struct tenant_quota){ 0 };
	CHECK(tenant_quota_set(db, "ten_a", &q, &err) == 0);
	CHECK(tenant_quota_get(db, "ten_a", &got, &err) == 0 && got.sandboxes == 0);

	/* the node's pattern under contention: exactly QUOTA admitted */
	q = (struct tenant_quota){ .sandboxes = QUOTA };
	CHECK(tenant_quota_set(db, "ten_race", &q, &err) == 0);
	for (intptr_t i = 0; i < THREADS; i++)
		pthread_create(&th[i], NULL, creator, (void *)i);
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	CHECK(tenant_usage_get(db, "ten_race", &u, &err) == 0);
	if (atomic_load(&admitted) != QUOTA || u.sandboxes != QUOTA)
		fprintf(stderr, "admitted %d, rows %llu, quota %d\n", atomic_load(&admitted),
			(unsigned long long)u.sandboxes, QUOTA);
	CHECK(atomic_load(&admitted) == QUOTA);
	CHECK(u.sandboxes == QUOTA && u.memory_mb == QUOTA * 64);

	db_close(handles[1]);
	db_close(handles[0]);
	snprintf(path, sizeof(path), "rm -rf '%s'", dir);
	if (system(path) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	return failures ? 1 : 0;
}
