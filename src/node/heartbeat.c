/* heartbeat.c - this node's row in `nodes` (db migration 2): written at
 * start (state up, generation + 1), every HEARTBEAT_MS after with what the
 * node has free, and at stop (state down). Nothing reads it yet: it is what
 * placement across nodes that share a PostgreSQL database will read.
 *
 * Its own thread, not a reaper timer: a write to a database that is away
 * may block for the connect timeout, and sandbox timers must not wait. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "../lib/log.h"
#include "../lib/util.h"
#include "node-internal.h"

#define HEARTBEAT_MS 5000

/* {"mem_free_mb":..,"cpus":..,"disk_free_mb":..} of this host now. */
static void capacity(struct node *n, char *out, size_t len)
{
	unsigned long long mem_kb = 0, disk_mb = 0;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	struct statvfs vfs;
	char line[128];
	FILE *f = fopen("/proc/meminfo", "re");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &mem_kb) == 1)
			break;
	if (f)
		fclose(f);
	if (n->cfg->disk_path && statvfs(n->cfg->disk_path, &vfs) == 0)
		disk_mb = (unsigned long long)vfs.f_bavail * vfs.f_frsize >> 20;
	snprintf(out, len, "{\"mem_free_mb\":%llu,\"cpus\":%ld,\"disk_free_mb\":%llu}",
		 mem_kb >> 10, cpus > 0 ? cpus : 0, disk_mb);
}

static int beat(struct node *n, const char *state, bool start, err_t *err)
{
	char cap[160];

	capacity(n, cap, sizeof(cap));
	if (start)
		return db_exec(n->db, err,
			       "INSERT INTO nodes(name, state, last_heartbeat, capacity, generation)"
			       " VALUES(?, ?, ?, ?, 1) ON CONFLICT(name) DO UPDATE SET"
			       " state = excluded.state, last_heartbeat = excluded.last_heartbeat,"
			       " capacity = excluded.capacity, generation = nodes.generation + 1",
			       "ssis", n->cfg->node_name, state, wall_ms(), cap);
	return db_exec(n->db, err,
		       "UPDATE nodes SET state = ?, last_heartbeat = ?, capacity = ? WHERE name = ?",
		       "siss", state, wall_ms(), cap, n->cfg->node_name);
}

static void *heartbeat_main(void *arg)
{
	struct node *n = arg;

	pthread_mutex_lock(&n->hb_mu);
	while (!n->hb_stop) {
		struct timespec ts;
		err_t err = { 0 };

		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += HEARTBEAT_MS / 1000;
		pthread_cond_timedwait(&n->hb_cv, &n->hb_mu, &ts);
		if (n->hb_stop)
			break;
		pthread_mutex_unlock(&n->hb_mu);
		if (beat(n, "up", false, &err) < 0)
			log_warn("heartbeat: %s", err.msg);
		pthread_mutex_lock(&n->hb_mu);
	}
	pthread_mutex_unlock(&n->hb_mu);
	return NULL;
}

void heartbeat_start(struct node *n)
{
	pthread_condattr_t ca;
	err_t err = { 0 };

	if (!n->cfg->node_name)
		return;
	if (beat(n, "up", true, &err) < 0)
		log_warn("node %s: %s", n->cfg->node_name, err.msg);
	n->hb_inited = true;
	pthread_mutex_init(&n->hb_mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&n->hb_cv, &ca);
	pthread_condattr_destroy(&ca);
	n->hb_started = pthread_create(&n->hb_thread, NULL, heartbeat_main, n) == 0;
	if (!n->hb_started)
		log_warn("node %s: no heartbeat thread", n->cfg->node_name);
}

void heartbeat_stop(struct node *n)
{
	err_t err = { 0 };

	if (!n->hb_inited)
		return;
	if (n->hb_started) {
		pthread_mutex_lock(&n->hb_mu);
		n->hb_stop = true;
		pthread_cond_signal(&n->hb_cv);
		pthread_mutex_unlock(&n->hb_mu);
		pthread_join(n->hb_thread, NULL);
		n->hb_started = false;
	}
	pthread_cond_destroy(&n->hb_cv);
	pthread_mutex_destroy(&n->hb_mu);
	n->hb_inited = false;
	if (beat(n, "down", false, &err) < 0)
		log_warn("node %s: %s", n->cfg->node_name, err.msg);
}
