/* metrics.c - GET /metrics (admin, through the api) in the Prometheus text
 * format (version 0.0.4): what the node knows, gathered at scrape time.
 *
 *   airlock_sandboxes{state,backend}          gauge: sandboxes in the map
 *   airlock_tenant_sandboxes{tenant}          gauge: live ones per tenant
 *   airlock_op_duration_seconds{op}           histogram: successful create
 *                                             (request to answer), exec (to
 *                                             the process started), snapshot
 *                                             create and fork (to the answer)
 *   airlock_node_*                            capacity: cpus, memory, pool
 *   airlock_gateway_*                         the gateway's GET /stats
 *   airlock_credential_audit_total{decision}  the gateway's credential audit
 *                                             rows (decision "injected" is one
 *                                             injection), from the database
 *
 * The histograms live in struct node (reset when the node restarts, as a
 * Prometheus counter may); the rest is read fresh on each scrape.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "../lib/log.h"
#include "node-internal.h"

/* Bucket bounds, microseconds: 5 ms to 60 s. */
static const uint64_t bounds_us[OP_BUCKETS] = {
	5000,	 10000,	  25000,   50000,   100000,   250000,   500000,
	1000000, 2500000, 5000000, 10000000, 20000000, 30000000, 60000000,
};
static const char *const op_names[OP__COUNT] = { "create", "exec", "snapshot", "fork" };

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

void handle_metrics(struct node *n, struct http_conn *c)
{
	struct buf b;

	buf_init(&b);
	sandboxes(n, &b);
	histograms(n, &b);
	capacity(n, &b);
	gateway(n, &b);
	credential_audit(n, &b);
	http_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len, NULL);
	buf_free(&b);
}
