/* heartbeat.c - this node's row in the nodes table.
 *
 * At start the node registers: state `up`, its generation one higher than
 * the row had (a node that comes back is a new generation), started_at.
 * Then every CLUSTER_BEAT_MS it writes heartbeat_at and its capacity as
 * JSON, which the apis' placement reads (api/placement.c):
 *
 *   {"cpus","memory_mb","mem_free_mb","committed_mb","disk_free_mb",
 *    "sandboxes","backends":["ns","vm"],"templates":["name/ver",...]}
 *
 * committed_mb is the memory limits of its live sandboxes; mem_free_mb is
 * the host's MemAvailable. A clean stop writes state `down`. A node that
 * stops beating is marked `lost` by whoever sees it first (api/placement.c).
 *
 * Fencing, on PostgreSQL's own primitives:
 *   - the name: a session-level advisory lock on the node's name, taken at
 *     registration on a connection of its own (n->lock_db) and held for
 *     the process's life. A second process under the same name cannot
 *     take it and does not start; a process whose session died has lost
 *     it, which its next beat sees (the connection made again is another
 *     session, without the lock): it takes the lock again, and goes on
 *     only if its epoch still stands (nobody started under its name
 *     meanwhile), else it is fenced.
 *   - the epoch: every start draws a new one (PostgreSQL: the sequence
 *     node_epoch, so no two processes ever draw one; SQLite, one host and
 *     so one node: max+1 in the registering transaction) and writes it as
 *     the row's generation. Every state write of a sandbox is conditioned
 *     on the row naming this node and the nodes row still holding this
 *     epoch, not lost (model/state.c state_set_fence).
 *   - a beat renews only a row that is `up` at this epoch: a node marked
 *     lost is never set back to up by a beat. A beat that finds its epoch
 *     gone (lost, or a newer process registered) or its lock gone fences
 *     the process: it stops serving and exits without touching a sandbox
 *     (node.c), as if killed; `up` starts it again, and the new process
 *     registers a new epoch and reconciles only the rows that name it
 *     (reconcile.c), so a sandbox moved elsewhere meanwhile is not run
 *     twice; its leftovers here are destroyed as leaks.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/log.h"
#include "cluster.h"

#define CLUSTER_BEAT_MS 2000

static uint64_t mem_available_mb(void)
{
	FILE *f = fopen("/proc/meminfo", "re");
	char line[128];
	unsigned long long kb = 0;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb >> 10;
}

static void capacity_json(struct node *n, struct buf *b)
{
	struct nm_node_info info = { 0 };
	struct db_rows rows = { 0 };
	uint64_t committed = 0;
	size_t live = 0;
	err_t err = { 0 };
	struct jw w;

	/* Fresh every beat: the pool's free space changes. */
	if (nm_node_info(n->cfg->nm_sock, &info, &err) < 0)
		log_debug("heartbeat: node manager: %s", err.msg);
	pthread_mutex_lock(&n->mu);
	for (int bk = 0; bk < NODE_BUCKETS; bk++)
		for (struct sandbox *sb = n->buckets[bk]; sb; sb = sb->hnext)
			if (state_is_live(sb->state)) {
				live++;
				committed += sb->limits.memory_mb;
			}
	pthread_mutex_unlock(&n->mu);

	jw_init(&w, b);
	jw_obj(&w);
	jw_key(&w, "cpus");
	jw_uint(&w, info.cpus);
	jw_key(&w, "memory_mb");
	jw_uint(&w, info.mem_total_mb);
	jw_key(&w, "mem_free_mb");
	jw_uint(&w, mem_available_mb());
	jw_key(&w, "committed_mb");
	jw_uint(&w, committed);
	jw_key(&w, "disk_free_mb");
	jw_uint(&w, info.pool_free_mb);
	jw_key(&w, "sandboxes");
	jw_uint(&w, live);
	jw_key(&w, "backends");
	jw_arr(&w);
	jw_str(&w, "ns");
	if (info.vm_accel[0])
		jw_str(&w, "vm");
	jw_end(&w);
	jw_key(&w, "templates");
	jw_arr(&w);
	if (db_query(n->db, &rows, &err,
		     "SELECT name, MAX(version) FROM templates WHERE node=? AND status='ready'"
		     " GROUP BY name ORDER BY name", "s", n->cfg->node_name) == 0) {
		for (int i = 0; i < rows.n_rows; i++) {
			char t[96];
			snprintf(t, sizeof(t), "%s/%lld", db_cell(&rows, i, 0),
				 (long long)db_cell_int(&rows, i, 1));
			jw_str(&w, t);
		}
		db_rows_free(&rows);
	}
	jw_end(&w);
	jw_end(&w);
}

bool cluster_forget_if_moved(struct node *n, struct sandbox *sb)
{
	struct db_rows rows;
	bool moved = false;

	pthread_mutex_lock(&sb->mu);
	moved = sb->state == SB_SUSPENDED && !sb->lc_busy;
	pthread_mutex_unlock(&sb->mu);
	if (!moved || db_query(n->db, &rows, NULL, "SELECT node FROM sandboxes WHERE id=?", "s",
			       sb->id) < 0)
		return false;
	moved = rows.n_rows == 1 && db_cell(&rows, 0, 0) &&
		strcmp(db_cell(&rows, 0, 0), node_me(n)) != 0;
	if (moved)
		log_info("sandbox %s: taken over by node %s; forgotten here", sb->id,
			 db_cell(&rows, 0, 0));
	db_rows_free(&rows);
	pthread_mutex_lock(&sb->mu);
	moved = moved && sb->state == SB_SUSPENDED && !sb->lc_busy;
	pthread_mutex_unlock(&sb->mu);
	if (moved)
		sandbox_map_remove(n, sb);
	return moved;
}

/* A suspended sandbox that another node took over (suspend_claim there)
 * has nothing here but its entry in the map, which goes. */
static void drop_moved(struct node *n)
{
	struct sandbox **v = NULL;
	size_t nv = 0;

	pthread_mutex_lock(&n->mu);
	for (int bk = 0; bk < NODE_BUCKETS; bk++)
		for (struct sandbox *sb = n->buckets[bk]; sb; sb = sb->hnext)
			if (sb->state == SB_SUSPENDED) {
				v = xrealloc(v, (nv + 1) * sizeof(*v));
				sandbox_ref(sb);
				v[nv++] = sb;
			}
	pthread_mutex_unlock(&n->mu);
	for (size_t i = 0; i < nv; i++) {
		cluster_forget_if_moved(n, v[i]);
		sandbox_unref(v[i]);
	}
	free(v);
}

static bool on_postgres(const struct node *n)
{
	return strcmp(db_driver_name(n->db), "postgres") == 0;
}

/* The advisory lock's key: "airlock node " and the name folded into a
 * positive bigint (FNV-1a, 64 bits). Two names that fold to one key cannot
 * run on one database at once; the refusal names the name, which is
 * enough to rename one of them. */
static int64_t name_key(const char *name)
{
	static const char prefix[] = "airlock node ";
	uint64_t h = 1469598103934665603ull;

	for (const char *p = prefix; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	for (const char *p = name; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	return (int64_t)(h >> 1);
}

/* This process no longer owns its name: say why once and stop. SIGTERM
 * reaches node_run's sigwait, which sees n->fenced and exits as a killed
 * node would. Writes in flight meanwhile miss the fence in SQL. */
static void fence_off(struct node *n, const char *why)
{
	if (__atomic_exchange_n(&n->fenced, 1, __ATOMIC_ACQ_REL))
		return;
	log_err("node %s (epoch %lld) is fenced: %s; it stops serving and exits, and its next"
		" start takes a new epoch and reconciles",
		n->cfg->node_name, (long long)n->generation, why);
	kill(getpid(), SIGTERM);
}

/* The server ends lock_db's session, and frees the name, within about 20 s
 * of its client going silent (a host gone, a network that drops packets
 * rather than refusing them): by the kernel's defaults it would keep it
 * two hours, and a node fenced meanwhile could not start again under its
 * own name for all that time. Per session: set again on each session that
 * takes the lock. Best effort. */
static void lock_session_keepalive(struct node *n)
{
	static const char *const set[] = { "SET tcp_keepalives_idle = 10",
					    "SET tcp_keepalives_interval = 3",
					    "SET tcp_keepalives_count = 3",
					    "SET tcp_user_timeout = 20000" };
	err_t e = { 0 };

	for (size_t i = 0; i < sizeof(set) / sizeof(set[0]); i++)
		if (db_exec(n->lock_db, &e, set[i], "") < 0) {
			log_warn("node %s: keepalives of the session that holds its name: %s",
				 n->cfg->node_name, e.msg);
			return;
		}
}

/* PostgreSQL: try the name's lock on lock_db's session: 1 taken (or held
 * already by this session), 0 another session holds it, < 0 no answer. */
static int lock_name(struct node *n, err_t *err)
{
	struct db_rows rows;
	int r;

	r = db_query(n->lock_db, &rows, err, "SELECT pg_try_advisory_lock(?)", "i",
		     name_key(n->cfg->node_name));
	if (r < 0)
		return r;
	r = rows.n_rows == 1 && db_cell(&rows, 0, 0) && !strcmp(db_cell(&rows, 0, 0), "t");
	db_rows_free(&rows);
	return r;
}

/* PostgreSQL: is the name's lock still held by lock_db's session? 1 yes,
 * 0 no (the session died and the connection was made again: another
 * session), < 0 the database did not answer (asked again next beat: the
 * call after a lost connection makes a new one, which answers 0). */
static int name_held(struct node *n, err_t *err)
{
	int64_t key = name_key(n->cfg->node_name);
	struct db_rows rows;
	int r;

	r = db_query(n->lock_db, &rows, err,
		     "SELECT count(*) FROM pg_locks WHERE locktype='advisory' AND granted AND"
		     " pid=pg_backend_pid() AND objsubid=1 AND classid::bigint=? AND"
		     " objid::bigint=?",
		     "ii", key >> 32, key & 0xffffffffll);
	if (r < 0)
		return r;
	r = rows.n_rows == 1 && db_cell_int(&rows, 0, 0) > 0;
	db_rows_free(&rows);
	return r;
}

static int beat(struct node *n, err_t *err)
{
	struct db_rows rows;
	struct buf b;
	int r;

	if (__atomic_load_n(&n->fenced, __ATOMIC_ACQUIRE))
		return 0;
	if (n->lock_db && (r = name_held(n, err)) <= 0) {
		if (r < 0)
			return err_wrap(err, "node %s: its name's lock", n->cfg->node_name);
		/* The session ended (the server restarted, the connection
		 * broke) and the lock with it. Taken again, the UPDATE below
		 * proves the epoch still stands: anyone who started under this
		 * name meanwhile drew a newer one (and holds the lock, or held
		 * it), so this process goes on only if nobody did. */
		if ((r = lock_name(n, err)) < 0)
			return err_wrap(err, "node %s: lock its name again", n->cfg->node_name);
		if (r == 0) {
			fence_off(n, "its database session ended and another process holds its"
				     " name now");
			return 0;
		}
		log_warn("node %s: its database session ended; its name's lock taken again",
			 n->cfg->node_name);
		lock_session_keepalive(n);
	}
	drop_moved(n);
	buf_init(&b);
	capacity_json(n, &b);
	/* Renews only `up` at this epoch: a node the cluster marked lost does
	 * not come back by beating (its sandboxes may be elsewhere by now). */
	r = db_exec(n->db, err,
		    "UPDATE nodes SET heartbeat_at=?, capacity=? WHERE name=? AND generation=? AND"
		    " state='up'",
		    "issi", wall_ms(), b.data, n->cfg->node_name, n->generation);
	buf_free(&b);
	if (r != 0)
		return r < 0 ? r : 0;
	if (db_query(n->db, &rows, err, "SELECT generation, state FROM nodes WHERE name=?", "s",
		     n->cfg->node_name) < 0)
		return r;
	if (rows.n_rows == 1 && db_cell_int(&rows, 0, 0) != n->generation)
		fence_off(n, "another process registered under its name");
	else if (rows.n_rows == 1 && db_cell(&rows, 0, 1) && !strcmp(db_cell(&rows, 0, 1), "lost"))
		fence_off(n, "the cluster marked it lost");
	else
		fence_off(n, "its row in nodes is gone or no longer up");
	db_rows_free(&rows);
	return 0;
}

/* PostgreSQL: take the name for this process's life, on a connection of
 * its own (n->db may be made again after an error, which would drop a
 * session lock silently). */
static int take_name(struct node *n, err_t *err)
{
	int r;

	n->lock_db = db_open(n->cfg->db_path, err);
	if (!n->lock_db)
		return err_wrap(err, "node %s: the connection that holds its name",
				n->cfg->node_name);
	lock_session_keepalive(n);
	/* Tried for a few seconds: a predecessor under `up` that exited (it was
	 * fenced, or killed) leaves a server session that ends a moment after
	 * its socket closed, and its lock with it. */
	for (int tries = 0;; tries++) {
		if ((r = lock_name(n, err)) < 0)
			return err_wrap(err, "node %s: lock its name", n->cfg->node_name);
		if (r > 0 || tries >= 20)
			break;
		usleep(250 * 1000);
	}
	if (r == 0)
		return err_set(err, EADDRINUSE,
			       "node name `%s` is in use: another running process holds it on this"
			       " database (two nodes cannot share a name; give each its own"
			       " node_name)",
			       n->cfg->node_name);
	return 0;
}

int cluster_register(struct node *n, err_t *err)
{
	struct db_rows rows;
	int64_t now = wall_ms();
	int r;

	if (!n->cfg->node_name)
		return err_set(err, EINVAL, "node: no node name");
	if (on_postgres(n) && (r = take_name(n, err)) < 0)
		return r;
	if ((r = db_tx_begin(n->db, err)) < 0)
		return r;
	r = db_query(n->db, &rows, err,
		     on_postgres(n) ? "SELECT nextval('node_epoch')"
				    : "SELECT COALESCE(MAX(generation), 0) + 1 FROM nodes",
		     NULL);
	if (r >= 0) {
		n->generation = rows.n_rows == 1 ? db_cell_int(&rows, 0, 0) : 0;
		db_rows_free(&rows);
		r = db_exec(n->db, err,
			    "INSERT INTO nodes(name, state, generation, started_at, heartbeat_at)"
			    " VALUES(?,'up',?,?,?) ON CONFLICT(name) DO UPDATE SET state='up',"
			    " generation=excluded.generation, started_at=excluded.started_at,"
			    " heartbeat_at=excluded.heartbeat_at",
			    "siii", n->cfg->node_name, n->generation, now, now);
	}
	if (r < 0 || n->generation <= 0) {
		db_tx_rollback(n->db);
		if (r >= 0)
			r = err_set(err, EIO, "no epoch drawn");
		return err_wrap(err, "register node %s", n->cfg->node_name);
	}
	if ((r = db_tx_commit(n->db, err)) < 0)
		return err_wrap(err, "register node %s", n->cfg->node_name);
	state_set_fence(n->cfg->node_name, n->generation);
	log_info("node %s registered, epoch %lld", n->cfg->node_name, (long long)n->generation);
	return beat(n, err);
}

static void *beat_main(void *arg)
{
	struct node *n = arg;
	struct timespec ts;

	pthread_mutex_lock(&n->beat_mu);
	while (!n->beat_stop) {
		err_t err = { 0 };

		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += CLUSTER_BEAT_MS / 1000;
		ts.tv_nsec += (CLUSTER_BEAT_MS % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		while (!n->beat_stop && !n->beat_now &&
		       pthread_cond_timedwait(&n->beat_cv, &n->beat_mu, &ts) == 0)
			;
		if (n->beat_stop)
			break;
		n->beat_now = false;
		pthread_mutex_unlock(&n->beat_mu);
		if (beat(n, &err) < 0)
			log_warn("heartbeat: %s", err.msg);
		pthread_mutex_lock(&n->beat_mu);
	}
	pthread_mutex_unlock(&n->beat_mu);
	return NULL;
}

int cluster_start(struct node *n, err_t *err)
{
	pthread_condattr_t ca;

	pthread_mutex_init(&n->beat_mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&n->beat_cv, &ca);
	pthread_condattr_destroy(&ca);
	n->beat_init = true;
	if (pthread_create(&n->beat_thread, NULL, beat_main, n) != 0)
		return err_set(err, EAGAIN, "node: cannot start the heartbeat thread");
	n->beat_started = true;
	return 0;
}

void cluster_poke(struct node *n)
{
	if (!n->beat_init)
		return;
	pthread_mutex_lock(&n->beat_mu);
	n->beat_now = true;
	pthread_cond_broadcast(&n->beat_cv);
	pthread_mutex_unlock(&n->beat_mu);
}

void cluster_stop(struct node *n)
{
	err_t err = { 0 };

	if (!n->beat_init)
		return;
	pthread_mutex_lock(&n->beat_mu);
	n->beat_stop = true;
	pthread_cond_broadcast(&n->beat_cv);
	pthread_mutex_unlock(&n->beat_mu);
	if (n->beat_started)
		pthread_join(n->beat_thread, NULL);
	if (n->db && n->generation &&
	    db_exec(n->db, &err, "UPDATE nodes SET state='down' WHERE name=? AND generation=? AND"
		    " state='up'", "si",
		    n->cfg->node_name, n->generation) < 0)
		log_warn("node %s: %s", n->cfg->node_name, err.msg);
	pthread_cond_destroy(&n->beat_cv);
	pthread_mutex_destroy(&n->beat_mu);
}
