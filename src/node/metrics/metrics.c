/* metrics.c - GET /metrics (admin, through the api) in the Prometheus text
 * format (version 0.0.4): what the node knows, gathered at scrape time.
 *
 *   airlock_sandboxes{state,backend}          gauge: sandboxes in the map
 *   airlock_tenant_sandboxes{tenant}          gauge: live ones per tenant
 *   airlock_op_duration_seconds{op}           histogram: successful create
 *                                             (request to answer), exec (to
 *                                             the process started), snapshot
 *                                             create and fork (to the answer)
 *   airlock_warm_pool_creates_total{backend,result}
 *                                             counter: creates whose jail a
 *                                             warm pool gave (hit) or not
 *   airlock_warm_pool_ready{kind,template}    gauge: parked jails/QEMUs now
 *   airlock_warm_pool_target{kind,template}   gauge: the size that pool aims at now
 *                                             (nodemgr's NM_POOL_LEVELS)
 *   airlock_node_*                            capacity: cpus, memory, pool
 *   airlock_gateway_*                         the gateway's GET /stats, bytes
 *                                             relayed included
 *   airlock_snapshots{kind}, airlock_snapshot_bytes{kind}
 *                                             gauges: this node's snapshot
 *                                             rows and the sum of their
 *                                             size_bytes, from the database
 *   airlock_sandbox_limit_hits_total{kind}    counter: processes the kernel's
 *                                             OOM killer ended (oom_kill) and
 *                                             forks refused at a pids limit
 *                                             (pids_limit), summed over the
 *                                             node's sandboxes (node/limits)
 *   airlock_credential_audit_total{decision}  the gateway's credential audit
 *                                             rows (decision "injected" is one
 *                                             injection), from the database
 *
 * The histograms live in struct node (reset when the node restarts, as a
 * Prometheus counter may); the rest is read fresh on each scrape.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "../../lib/log.h"
#include "../http/handler.h"
#include "metrics.h"

/* Bucket bounds, microseconds: 5 ms to 60 s. */
static const uint64_t bounds_us[OP_BUCKETS] = {
	5000,	 10000,	  25000,   50000,   100000,   250000,   500000,
	1000000, 2500000, 5000000, 10000000, 20000000, 30000000, 60000000,
};
static const char *const op_names[OP__COUNT] = { "create", "exec", "snapshot", "fork" };
static const char *const pool_backends[2] = { "ns", "vm" };

void metrics_pool_create(struct node *n, const char *backend, bool hit)
{
	for (int i = 0; i < 2; i++)
		if (backend && !strcmp(backend, pool_backends[i]))
			__atomic_add_fetch(hit ? &n->pool_hits[i] : &n->pool_misses[i], 1,
					   __ATOMIC_RELAXED);
}

void metrics_observe(struct node *n, enum node_op op, uint64_t us)
{
	struct op_histo *h = &n->ops[op];

	/* cumulative buckets, as the format wants them */
	for (int i = 0; i < OP_BUCKETS; i++)
		if (us <= bounds_us[i])
			__atomic_add_fetch(&h->le[i], 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&h->sum_us, us, __ATOMIC_RELAXED);
	__atomic_add_fetch(&h->count, 1, __ATOMIC_RELAXED);
}

/* A label value: tenant ids and names are [a-z0-9_-], but escape anyway. */
static void label_value(struct buf *b, const char *v)
{
	for (; v && *v; v++) {
		if (*v == '\\' || *v == '"')
			buf_printf(b, "\\%c", *v);
		else if (*v == '\n')
			buf_adds(b, "\\n");
		else
			buf_addc(b, *v);
	}
}

static void family(struct buf *b, const char *name, const char *type, const char *help)
{
	buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

struct tenant_count {
	char *tenant;
	uint64_t n;
};

static void sandboxes(struct node *n, struct buf *b)
{
	static const char *const backends[] = { "ns", "vm", "other" };
	uint64_t by[SB__COUNT][3] = { { 0 } };
	struct tenant_count *tc = NULL;
	size_t n_tc = 0, cap = 0;

	pthread_mutex_lock(&n->mu);
	for (int k = 0; k < NODE_BUCKETS; k++) {
		for (struct sandbox *sb = n->buckets[k]; sb; sb = sb->hnext) {
			pthread_mutex_lock(&sb->mu);
			enum sb_state st = sb->state;
			pthread_mutex_unlock(&sb->mu);
			if ((unsigned)st >= SB__COUNT)
				continue;
			int be = sb->backend_name && !strcmp(sb->backend_name, "ns")   ? 0
				 : sb->backend_name && !strcmp(sb->backend_name, "vm") ? 1
										       : 2;
			by[st][be]++;
			if (!state_is_live(st) || !sb->tenant)
				continue;
			size_t i = 0;
			while (i < n_tc && strcmp(tc[i].tenant, sb->tenant) != 0)
				i++;
			if (i == n_tc) {
				if (n_tc == cap) {
					cap = cap ? cap * 2 : 16;
					tc = xrealloc(tc, cap * sizeof(*tc));
				}
				tc[n_tc++] = (struct tenant_count){ xstrdup(sb->tenant), 0 };
			}
			tc[i].n++;
		}
	}
	pthread_mutex_unlock(&n->mu);

	family(b, "airlock_sandboxes", "gauge", "Sandboxes on this node by state and backend.");
	for (int st = 0; st < SB__COUNT; st++)
		for (int be = 0; be < 2; be++)   /* "other" only when there are some */
			buf_printf(b, "airlock_sandboxes{state=\"%s\",backend=\"%s\"} %" PRIu64 "\n",
				   state_name((enum sb_state)st), backends[be], by[st][be]);
	for (int st = 0; st < SB__COUNT; st++)
		if (by[st][2])
			buf_printf(b, "airlock_sandboxes{state=\"%s\",backend=\"other\"} %" PRIu64 "\n",
				   state_name((enum sb_state)st), by[st][2]);
	family(b, "airlock_tenant_sandboxes", "gauge", "Live sandboxes per tenant.");
	for (size_t i = 0; i < n_tc; i++) {
		buf_adds(b, "airlock_tenant_sandboxes{tenant=\"");
		label_value(b, tc[i].tenant);
		buf_printf(b, "\"} %" PRIu64 "\n", tc[i].n);
		free(tc[i].tenant);
	}
	free(tc);
}

static void histograms(struct node *n, struct buf *b)
{
	family(b, "airlock_op_duration_seconds", "histogram",
	       "Successful operations: create (to the answer), exec (to the process started), "
	       "snapshot create and fork (to the answer).");
	for (int op = 0; op < OP__COUNT; op++) {
		struct op_histo *h = &n->ops[op];
		uint64_t count = __atomic_load_n(&h->count, __ATOMIC_RELAXED);

		for (int i = 0; i < OP_BUCKETS; i++)
			buf_printf(b,
				   "airlock_op_duration_seconds_bucket{op=\"%s\",le=\"%g\"} %" PRIu64 "\n",
				   op_names[op], bounds_us[i] / 1e6,
				   __atomic_load_n(&h->le[i], __ATOMIC_RELAXED));
		buf_printf(b, "airlock_op_duration_seconds_bucket{op=\"%s\",le=\"+Inf\"} %" PRIu64 "\n",
			   op_names[op], count);
		buf_printf(b, "airlock_op_duration_seconds_sum{op=\"%s\"} %.6f\n", op_names[op],
			   __atomic_load_n(&h->sum_us, __ATOMIC_RELAXED) / 1e6);
		buf_printf(b, "airlock_op_duration_seconds_count{op=\"%s\"} %" PRIu64 "\n",
			   op_names[op], count);
	}
}

static uint64_t meminfo_kb(const char *key)
{
	struct buf m;
	uint64_t kb = 0;

	buf_init(&m);
	if (read_file("/proc/meminfo", 1 << 16, &m) == 0 && m.data) {
		const char *p = strstr(m.data, key);
		if (p)
			sscanf(p + strlen(key), ": %" SCNu64, &kb);
	}
	buf_free(&m);
	return kb;
}

static void capacity(struct node *n, struct buf *b)
{
	struct nm_node_info info;
	err_t err = { 0 };

	pthread_mutex_lock(&n->vmstart_mu);
	unsigned vs_busy = n->vmstart_busy, vs_wait = n->vmstart_waiting;
	pthread_mutex_unlock(&n->vmstart_mu);
	family(b, "airlock_vm_starts", "gauge",
	       "vm creates starting their guest now, and waiting for a turn (vm_start_concurrency).");
	buf_printf(b, "airlock_vm_starts{state=\"running\"} %u\n", vs_busy);
	buf_printf(b, "airlock_vm_starts{state=\"waiting\"} %u\n", vs_wait);
	family(b, "airlock_node_memory_available_bytes", "gauge", "MemAvailable of the host.");
	buf_printf(b, "airlock_node_memory_available_bytes %" PRIu64 "\n",
		   meminfo_kb("MemAvailable") * 1024);
	family(b, "airlock_node_memory_total_bytes", "gauge", "MemTotal of the host.");
	buf_printf(b, "airlock_node_memory_total_bytes %" PRIu64 "\n", meminfo_kb("MemTotal") * 1024);
	/* asked fresh: node_info_get keeps the first answer, and the pool's
	 * free space moves */
	if (nm_node_info(n->cfg->nm_sock, &info, &err) == 0) {
		family(b, "airlock_node_cpus", "gauge", "CPUs of the host.");
		buf_printf(b, "airlock_node_cpus %u\n", info.cpus);
		family(b, "airlock_node_pool_free_bytes", "gauge", "Free space in the btrfs pool.");
		buf_printf(b, "airlock_node_pool_free_bytes %" PRIu64 "\n", info.pool_free_mb << 20);
		family(b, "airlock_node_pool_total_bytes", "gauge", "Size of the btrfs pool.");
		buf_printf(b, "airlock_node_pool_total_bytes %" PRIu64 "\n", info.pool_total_mb << 20);
	}
}

static void gateway(struct node *n, struct buf *b)
{
	static const struct {
		const char *key, *name, *type, *help;
	} fields[] = {
		{ "connections", "airlock_gateway_connections_total", "counter",
		  "TCP connections from sandboxes the gateway decided on." },
		{ "denied", "airlock_gateway_denied_total", "counter",
		  "Of those, refused by the sandbox's policy." },
		{ "over_limit", "airlock_gateway_over_limit_total", "counter",
		  "Connections reset at accept: the sandbox held gateway_max_conns." },
		{ "dials", "airlock_gateway_dials_total", "counter", "Upstream connections dialled." },
		{ "dial_fails", "airlock_gateway_dial_failures_total", "counter",
		  "Upstream dials that failed." },
		{ "relayed", "airlock_gateway_relayed_connections", "gauge",
		  "Connections being relayed now." },
	};
	struct http_resp resp;
	err_t err = { 0 };
	json *st = NULL;

	if (!n->cfg->gateway_sock)
		return;   /* network = false: no gateway */
	if (http_request_timeout(n->cfg->gateway_sock, "GET", "/stats", NULL, NULL, 0, 1000, &resp,
				 &err) == 0) {
		if (resp.status == 200)
			st = json_parse(resp.body.data ? resp.body.data : "", resp.body.len, &err);
		http_resp_free(&resp);
	}
	family(b, "airlock_gateway_up", "gauge", "1 when the gateway answered GET /stats.");
	buf_printf(b, "airlock_gateway_up %d\n", st && st->type == JSON_OBJ);
	if (st && st->type == JSON_OBJ) {
		bool bad = false;
		int64_t in = json_get_int(st, "bytes_in", -1, &bad);
		int64_t out = json_get_int(st, "bytes_out", -1, &bad);
		if (!bad && in >= 0 && out >= 0) {
			family(b, "airlock_gateway_bytes_total", "counter",
			       "Bytes the gateway relayed: in = to sandboxes, out = from them.");
			buf_printf(b, "airlock_gateway_bytes_total{direction=\"in\"} %" PRId64 "\n", in);
			buf_printf(b, "airlock_gateway_bytes_total{direction=\"out\"} %" PRId64 "\n",
				   out);
		}
	}
	for (size_t i = 0; st && st->type == JSON_OBJ && i < ARRAY_SIZE(fields); i++) {
		bool bad = false;
		int64_t v = json_get_int(st, fields[i].key, -1, &bad);
		if (bad || v < 0)
			continue;
		family(b, fields[i].name, fields[i].type, fields[i].help);
		buf_printf(b, "%s %" PRId64 "\n", fields[i].name, v);
	}
	json_free(st);
}

/* Injections and refusals, as the gateway audits them (src/cred): kept in
 * the database, so these counters survive restarts. */
static void credential_audit(struct node *n, struct buf *b)
{
	struct db_rows rows;
	err_t err = { 0 };

	if (db_query(n->db, &rows, &err,
		     "SELECT decision, count(*) FROM credential_audit GROUP BY decision", NULL) < 0) {
		log_warn("metrics: credential audit: %s", err.msg);
		return;
	}
	family(b, "airlock_credential_audit_total", "counter",
	       "Credential audit rows by decision (injected: a secret put into a request).");
	for (int i = 0; i < rows.n_rows; i++) {
		buf_adds(b, "airlock_credential_audit_total{decision=\"");
		label_value(b, db_cell(&rows, i, 0));
		buf_printf(b, "\"} %" PRId64 "\n", db_cell_int(&rows, i, 1));
	}
	db_rows_free(&rows);
}

/* Limits that bit, since this process started (node/limits counts them
 * at its poll; no label per sandbox: their number is not bounded). */
static void limit_hits(struct node *n, struct buf *b)
{
	static const char *const kinds[LIMIT__COUNT] = LIMIT_KIND_NAMES;

	family(b, "airlock_sandbox_limit_hits_total", "counter",
	       "Limits that bit in sandboxes: processes the kernel's OOM killer ended (oom_kill), "
	       "forks refused at a pids limit (pids_limit).");
	for (int k = 0; k < LIMIT__COUNT; k++)
		buf_printf(b, "airlock_sandbox_limit_hits_total{kind=\"%s\"} %" PRIu64 "\n", kinds[k],
			   __atomic_load_n(&n->limit_hits[k], __ATOMIC_RELAXED));
}

/* Creates served by a warm pool or not, and what the pools hold now. */
static void warm_pools(struct node *n, struct buf *b)
{
	struct buf targets;
	char **items = NULL;
	err_t err = { 0 };

	family(b, "airlock_warm_pool_creates_total", "counter",
	       "Creates whose jail (ns) or QEMU (vm) a warm pool gave (hit) or that made one (miss).");
	for (int i = 0; i < 2; i++) {
		buf_printf(b, "airlock_warm_pool_creates_total{backend=\"%s\",result=\"hit\"} %" PRIu64
			   "\n", pool_backends[i], __atomic_load_n(&n->pool_hits[i], __ATOMIC_RELAXED));
		buf_printf(b, "airlock_warm_pool_creates_total{backend=\"%s\",result=\"miss\"} %" PRIu64
			   "\n", pool_backends[i], __atomic_load_n(&n->pool_misses[i], __ATOMIC_RELAXED));
	}
	if (nm_pool_levels(n->cfg->nm_sock, &items, &err) < 0) {
		log_warn("metrics: warm pool levels: %s", err.msg);
		return;
	}
	family(b, "airlock_warm_pool_ready", "gauge",
	       "Jails (kind ns), QEMUs (vm) and fork standbys (vm_fork) parked per template "
	       "(and vm shape), ready to be taken.");
	buf_init(&targets);
	for (size_t i = 0; items[i]; i++) {
		char kind[16], key[128];
		unsigned cnt;
		int target, got;
		/* nodemgr's own text: "<kind> <key> <n> [<target>]", keys
		 * without spaces */
		got = sscanf(items[i], "%15s %127s %u %d", kind, key, &cnt, &target);
		if (got >= 3) {
			buf_adds(b, "airlock_warm_pool_ready{kind=\"");
			label_value(b, kind);
			buf_adds(b, "\",template=\"");
			label_value(b, key);
			buf_printf(b, "\"} %u\n", cnt);
		}
		if (got == 4 && target >= 0) {
			buf_adds(&targets, "airlock_warm_pool_target{kind=\"");
			label_value(&targets, kind);
			buf_adds(&targets, "\",template=\"");
			label_value(&targets, key);
			buf_printf(&targets, "\"} %d\n", target);
		}
		free(items[i]);
	}
	free(items);
	family(b, "airlock_warm_pool_target", "gauge",
	       "The size a warm pool aims at now: its recent creates, between the configured "
	       "least (ns_warm_pool, vm_warm_pool) and most (ns_warm_pool_max, vm_warm_pool_max).");
	buf_add(b, targets.data, targets.len);
	buf_free(&targets);
}

/* This node's snapshots: how many and the bytes they hold (each row's
 * size_bytes: data written since the previous snapshot; unknown sizes
 * count 0). */
static void snapshot_bytes(struct node *n, struct buf *b)
{
	static const char *const kinds[] = { "disk", "full" };
	struct db_rows rows;
	err_t err = { 0 };

	if (db_query(n->db, &rows, &err,
		     "SELECT s.kind, count(*), coalesce(sum(s.size_bytes), 0) FROM snapshots s"
		     " JOIN sandboxes b ON b.id = s.sandbox_id"
		     " WHERE coalesce(b.node, '') = ? GROUP BY s.kind",
		     "s", node_me(n)) < 0) {
		log_warn("metrics: snapshots: %s", err.msg);
		return;
	}
	family(b, "airlock_snapshots", "gauge", "Snapshots of this node's sandboxes, by kind.");
	for (size_t k = 0; k < ARRAY_SIZE(kinds); k++) {
		int64_t cnt = 0;
		for (int i = 0; i < rows.n_rows; i++)
			if (db_cell(&rows, i, 0) && !strcmp(db_cell(&rows, i, 0), kinds[k]))
				cnt = db_cell_int(&rows, i, 1);
		buf_printf(b, "airlock_snapshots{kind=\"%s\"} %" PRId64 "\n", kinds[k], cnt);
	}
	family(b, "airlock_snapshot_bytes", "gauge",
	       "Sum of the snapshots' sizes (data written since the previous snapshot), by kind.");
	for (size_t k = 0; k < ARRAY_SIZE(kinds); k++) {
		int64_t sum = 0;
		for (int i = 0; i < rows.n_rows; i++)
			if (db_cell(&rows, i, 0) && !strcmp(db_cell(&rows, i, 0), kinds[k]))
				sum = db_cell_int(&rows, i, 2);
		buf_printf(b, "airlock_snapshot_bytes{kind=\"%s\"} %" PRId64 "\n", kinds[k], sum);
	}
	db_rows_free(&rows);
}

void handle_metrics(struct node *n, struct http_conn *c)
{
	struct buf b;

	buf_init(&b);
	sandboxes(n, &b);
	histograms(n, &b);
	limit_hits(n, &b);
	warm_pools(n, &b);
	capacity(n, &b);
	gateway(n, &b);
	snapshot_bytes(n, &b);
	credential_audit(n, &b);
	http_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len, NULL);
	buf_free(&b);
}

/* The gateway's byte counts of sandbox id: 1 when it knows them, 0 when
 * there is no gateway or it does not know the sandbox, -1 when it failed. */
static int gateway_bytes(struct node *n, const char *id, int64_t *in, int64_t *out)
{
	_cleanup_free_ char *target = xasprintf("/sandboxes/%s/stats", id);
	struct http_resp resp;
	err_t err = { 0 };
	json *st = NULL;
	int r = -1;

	if (!n->cfg->gateway_sock)
		return 0;
	if (http_request_timeout(n->cfg->gateway_sock, "GET", target, NULL, NULL, 0, 1000, &resp,
				 &err) < 0)
		return -1;
	if (resp.status == 404)
		r = 0;
	else if (resp.status == 200 &&
		 (st = json_parse(resp.body.data ? resp.body.data : "", resp.body.len, &err)) &&
		 st->type == JSON_OBJ) {
		bool bad = false;
		*in = json_get_int(st, "bytes_in", -1, &bad);
		*out = json_get_int(st, "bytes_out", -1, &bad);
		r = bad || *in < 0 || *out < 0 ? -1 : 1;
	}
	json_free(st);
	http_resp_free(&resp);
	return r;
}

void handle_sandbox_metrics(struct node *n, struct sandbox *sb, struct http_conn *c)
{
	struct nm_sandbox_stats st;
	enum sb_state state;
	int64_t in = 0, out = 0;
	err_t err = { 0 };
	struct buf b;
	struct jw w;
	int g;

	pthread_mutex_lock(&sb->mu);
	state = sb->state;
	pthread_mutex_unlock(&sb->mu);
	/* only a sandbox with a jail has a cgroup to read */
	if (state != SB_RUNNING && state != SB_PAUSED) {
		http_respond_error(c, 409, "conflict", "sandbox %s is %s: no metrics", sb->id,
				   state_name(state));
		return;
	}
	if (nm_sandbox_stats(n->cfg->nm_sock, sb->id, &st, &err) < 0) {
		if (err.code == ENOENT)
			http_respond_error(c, 409, "conflict", "sandbox %s has no jail now", sb->id);
		else
			node_respond_err(c, &err);
		return;
	}
	g = gateway_bytes(n, sb->id, &in, &out);
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "id");
	jw_str(&w, sb->id);
	jw_key(&w, "backend");
	jw_str(&w, sb->backend_name);
	jw_key(&w, "state");
	jw_str(&w, state_name(state));
	jw_key(&w, "cpu_seconds");
	jw_double(&w, st.cpu_ns / 1e9);
	jw_key(&w, "memory_bytes");
	jw_uint(&w, st.mem_bytes);
	jw_key(&w, "memory_peak_bytes");
	if (st.mem_peak_known)
		jw_uint(&w, st.mem_peak_bytes);
	else
		jw_null(&w);
	jw_key(&w, "disk_used_bytes");
	jw_uint(&w, st.disk_bytes);
	jw_key(&w, "network");
	if (g == 1) {
		jw_obj(&w);
		jw_key(&w, "bytes_in");
		jw_uint(&w, (uint64_t)in);
		jw_key(&w, "bytes_out");
		jw_uint(&w, (uint64_t)out);
		jw_end(&w);
	} else {
		jw_null(&w);   /* no network, or the gateway did not answer */
	}
	jw_end(&w);
	http_respond_json(c, 200, b.data);
	buf_free(&b);
}
