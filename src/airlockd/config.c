#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../gateway/gateway.h"
#include "../lib/http.h"
#include "../lib/ident.h"
#include "../lib/secret.h"
#include "../lib/util.h"
#include "airlockd.h"

/* The host name, lower-cased, with what a node name may not hold turned
 * into '-' ("node" when there is none). */
static void default_node_name(char *out, size_t cap)
{
	char host[256] = "";
	size_t n = 0;

	if (gethostname(host, sizeof(host) - 1) < 0)
		host[0] = '\0';
	for (const char *p = host; *p && n + 1 < cap && n < 64; p++) {
		char ch = (char)tolower((unsigned char)*p);
		bool ok = isalnum((unsigned char)ch) || ((ch == '-' || ch == '.' || ch == '_') && n);

		out[n++] = ok ? ch : '-';
	}
	out[n] = '\0';
	if (!n || !isalnum((unsigned char)out[0]))
		snprintf(out, cap, "node");
}

void config_defaults(struct airlockd_config *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->data_dir, sizeof(c->data_dir), "/var/lib/airlock");
	snprintf(c->listen, sizeof(c->listen), "127.0.0.1:7070");
	snprintf(c->db, sizeof(c->db), "sqlite");
	snprintf(c->user, sizeof(c->user), "airlock");
	c->pool_size_mb = 64 * 1024;
	snprintf(c->default_backend, sizeof(c->default_backend), "ns");
	snprintf(c->default_template, sizeof(c->default_template), "debian");
	snprintf(c->templates, sizeof(c->templates), "busybox,debian");
	c->default_memory_mb = 512;
	c->default_cpu_millis = 1000;
	c->default_pids = 512;
	c->default_disk_mb = 4096;
	c->max_sandboxes = 1000;
	/* A sandbox's pids share the host's pid_max (32768 by default): one
	 * must not be able to take them all. The rest: a large share of a
	 * small host, below the node's size checked at each create. */
	c->max_sandbox_pids = 4096;
	c->max_sandbox_memory_mb = 16384;
	c->max_sandbox_cpus = 16;
	c->max_sandbox_disk_mb = 65536;
	c->max_snapshots = 64;
	c->rate_per_s = 200;
	c->rate_burst = 400;
	c->log_level = 2;
	snprintf(c->vm_accel, sizeof(c->vm_accel), "auto");
	c->vm_warm_pool = 2;
	c->vm_fork_pool = 1;
	c->console_log_max = 1u << 20;
	c->gateway_max_conns = GATEWAY_MAX_CONNS_DEFAULT;
	c->gateway_dns_max_pending = GATEWAY_DNS_MAX_PENDING_DEFAULT;
	c->api_max_inflight = HTTP_MAX_CONNS / 4;
	c->api_max_conns_per_client = 64;
	c->api_body_budget_mb = 256;
	c->api_head_timeout_s = HTTP_HEAD_TIMEOUT_MS / 1000;
	c->ns_warm_pool = 2;
	c->ns_warm_pool_max = 32;
	c->vm_warm_pool_max = 8;
	c->warm_pool_half_life_s = 30;
	c->vm_snapshots = true;
	c->cgroup_favordynmods = true;
	/* A clone under TCG on a busy 2-core host can take seconds to answer. */
	c->ready_timeout_ms = 30000;
	c->snapshot_disk_interval_s = 60;
	c->snapshot_full_interval_s = 900;
	c->snapshot_keep_all_s = 3600;
	c->snapshot_keep_hourly_s = 86400;
	c->snapshot_keep_daily_s = 7 * 86400;
	/* Off by default: a server waiting for connections uses no CPU and
	 * would look idle. */
	c->idle_timeout_s = 0;
	c->network = true;
	c->heartbeat_timeout_s = 15;
	default_node_name(c->node_name, sizeof(c->node_name));
	c->suspend_after_idle_s = 1800;
	c->kms_cache_ttl_s = 60;
	c->encrypt_artifacts = true;
	c->suspend_reclaim = true;
}

static int set_str(char *dst, size_t cap, const char *key, const char *val, err_t *err)
{
	if (strlen(val) >= cap)
		return err_set(err, EINVAL, "%s: value too long (max %zu)", key, cap - 1);
	memcpy(dst, val, strlen(val) + 1);
	return 0;
}

static int set_u64(uint64_t *dst, const char *key, const char *val, uint64_t max, err_t *err)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(val, &end, 10);
	if (errno || end == val || *end || val[0] == '-' || v > max)
		return err_set(err, EINVAL, "%s: `%s` is not a number in 0..%llu", key, val,
			       (unsigned long long)max);
	*dst = v;
	return 0;
}

static int set_u32(uint32_t *dst, const char *key, const char *val, err_t *err)
{
	uint64_t v = 0;
	int r = set_u64(&v, key, val, UINT32_MAX, err);

	if (r == 0)
		*dst = (uint32_t)v;
	return r;
}

static int set_double(double *dst, const char *key, const char *val, err_t *err)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(val, &end);
	if (errno || end == val || *end || !(v > 0) || v > 1e9)
		return err_set(err, EINVAL, "%s: `%s` is not a positive number", key, val);
	*dst = v;
	return 0;
}

/* The value parsers of the table below. Each gets its row: the field at
 * k->off (k->size bytes) and the bounds k->lo, k->hi where it has them. */
#define FIELD(c, k, type) ((type *)(void *)((char *)(c) + (k)->off))

static int kv_str(const struct config_key *k, struct airlockd_config *c, const char *val,
		  err_t *err)
{
	return set_str(FIELD(c, k, char), k->size, k->key, val, err);
}

/* An absolute path; k->lo = 1: or empty. */
static int kv_path(const struct config_key *k, struct airlockd_config *c, const char *val,
		   err_t *err)
{
	if (val[0] != '/' && !(k->lo && !val[0]))
		return err_set(err, EINVAL, "%s: must be an absolute path", k->key);
	return kv_str(k, c, val, err);
}

static int kv_bool(const struct config_key *k, struct airlockd_config *c, const char *val,
		   err_t *err)
{
	if (strcmp(val, "true") && strcmp(val, "false"))
		return err_set(err, EINVAL, "%s: `%s` is not true|false", k->key, val);
	*FIELD(c, k, bool) = !strcmp(val, "true");
	return 0;
}

static int kv_double(const struct config_key *k, struct airlockd_config *c, const char *val,
		     err_t *err)
{
	return set_double(FIELD(c, k, double), k->key, val, err);
}

/* A uint32_t field: any 32-bit number; then (stored already, as before the
 * table) at least k->lo and at most k->hi when they are set. */
static int kv_u32(const struct config_key *k, struct airlockd_config *c, const char *val,
		  err_t *err)
{
	uint32_t *dst = FIELD(c, k, uint32_t);
	int r = set_u32(dst, k->key, val, err);

	if (r < 0)
		return r;
	if (k->lo && *dst < k->lo)
		return err_set(err, EINVAL, "%s: at least %llu", k->key, (unsigned long long)k->lo);
	if (k->hi && *dst > k->hi)
		return err_set(err, EINVAL, "%s: at most %llu", k->key, (unsigned long long)k->hi);
	return 0;
}

/* A uint32_t field parsed as a number in 0..k->hi (the bound is in the
 * parse error); k->lo = 1: 0 is refused as "must be 1..hi". Stored only
 * when it is good. */
static int kv_u32_range(const struct config_key *k, struct airlockd_config *c, const char *val,
			err_t *err)
{
	uint64_t v;
	int r = set_u64(&v, k->key, val, k->hi, err);

	if (r == 0 && k->lo && v < k->lo)
		r = err_set(err, EINVAL, "%s: must be %llu..%llu", k->key, (unsigned long long)k->lo,
			    (unsigned long long)k->hi);
	if (r == 0)
		*FIELD(c, k, uint32_t) = (uint32_t)v;
	return r;
}

/* A uint64_t field in 0..k->hi; k->lo: at least that (checked after it is
 * stored, as before the table). */
static int kv_u64(const struct config_key *k, struct airlockd_config *c, const char *val,
		  err_t *err)
{
	uint64_t *dst = FIELD(c, k, uint64_t);
	int r = set_u64(dst, k->key, val, k->hi, err);

	if (r < 0)
		return r;
	if (k->lo && *dst < k->lo)
		return err_set(err, EINVAL, "%s: at least %llu (bytes)", k->key,
			       (unsigned long long)k->lo);
	return 0;
}

/* `<secret>_file = PATH`: the secret at k->off is read from PATH now (not
 * world-readable, one line; lib/secret.h). Empty: nothing. A secret kept
 * out of the config file can be root's alone while the file is the
 * airlock group's to read. */
static int kv_secret_file(const struct config_key *k, struct airlockd_config *c, const char *val,
			  err_t *err)
{
	if (!val[0])
		return 0;
	if (val[0] != '/')
		return err_set(err, EINVAL, "%s: must be an absolute path", k->key);
	if (secret_read_file(val, FIELD(c, k, char), k->size, err) < 0)
		return err_wrap(err, "%s", k->key);
	return 0;
}

static int kv_db(const struct config_key *k, struct airlockd_config *c, const char *val,
		 err_t *err)
{
	if (!val[0])
		return err_set(err, EINVAL, "db: empty (sqlite, sqlite:PATH or a postgresql:// URL)");
	return kv_str(k, c, val, err);
}

static int kv_node_name(const struct config_key *k, struct airlockd_config *c, const char *val,
			err_t *err)
{
	if (!ident_name_ok(val))
		return err_set(err, EINVAL, "node_name: `%s` is not [a-z0-9][a-z0-9._-]{0,63}", val);
	return kv_str(k, c, val, err);
}

static int kv_advertise_url(const struct config_key *k, struct airlockd_config *c,
			    const char *val, err_t *err)
{
	if (*val && strncmp(val, "http://", 7) && strncmp(val, "https://", 8))
		return err_set(err, EINVAL, "advertise_url: `%s` is not http(s)://HOST:PORT", val);
	return kv_str(k, c, val, err);
}

static int kv_ports_domain(const struct config_key *k, struct airlockd_config *c,
			   const char *val, err_t *err)
{
	for (const char *p = val; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.'))
			return err_set(err, EINVAL, "ports_domain: `%s` is not a lowercase DNS name",
				       val);
	return kv_str(k, c, val, err);
}

static int kv_vm_accel(const struct config_key *k, struct airlockd_config *c, const char *val,
		       err_t *err)
{
	if (strcmp(val, "auto") && strcmp(val, "kvm") && strcmp(val, "tcg"))
		return err_set(err, EINVAL, "%s: `%s` is not auto|kvm|tcg", k->key, val);
	return kv_str(k, c, val, err);
}

static int kv_log_format(const struct config_key *k, struct airlockd_config *c, const char *val,
			 err_t *err)
{
	(void)k;
	if (strcmp(val, "text") && strcmp(val, "json"))
		return err_set(err, EINVAL, "log_format: `%s` is not text|json", val);
	c->log_json = !strcmp(val, "json");
	return 0;
}

static int kv_log_level(const struct config_key *k, struct airlockd_config *c, const char *val,
			err_t *err)
{
	static const char *names[] = { "error", "warn", "info", "debug" };

	(void)k;
	for (int i = 0; i < 4; i++)
		if (!strcmp(val, names[i])) {
			c->log_level = i;
			return 0;
		}
	return err_set(err, EINVAL, "log_level: `%s` is not error|warn|info|debug", val);
}

#define AT(f) offsetof(struct airlockd_config, f), sizeof(((struct airlockd_config *)0)->f)
#define NOFIELD 0, 0

/* Every key the config file, `--set` and the flags take: its type and
 * default as docs/CONFIGURATION.md gives them (tests/unit/test-config-doc.c
 * checks that page, packaging/airlockd.conf and config_defaults against
 * this), its parser and field. A default in parentheses is worked out at
 * start; any other is the value config_defaults leaves. */
const struct config_key config_keys[] = {
	{ "data_dir", "path", "/var/lib/airlock", kv_path, AT(data_dir), 0, 0 },
	{ "listen", "address", "127.0.0.1:7070", kv_str, AT(listen), 0, 0 },
	{ "tls_cert", "path", "", kv_str, AT(tls_cert), 0, 0 },
	{ "tls_key", "path", "", kv_str, AT(tls_key), 0, 0 },
	{ "db", "string", "sqlite", kv_db, AT(db), 0, 0 },
	{ "db_password_file", "path", "", kv_secret_file, AT(db_password), 0, 0 },
	{ "node_name", "name", "(the hostname)", kv_node_name, AT(node_name), 0, 0 },
	{ "advertise_url", "URL", "", kv_advertise_url, AT(advertise_url), 0, 0 },
	{ "heartbeat_timeout_s", "integer >= 3", "15", kv_u32, AT(heartbeat_timeout_s), 3, 0 },
	{ "user", "string", "airlock", kv_str, AT(user), 0, 0 },
	{ "api_user", "string", "", kv_str, AT(api_user), 0, 0 },
	{ "gateway_user", "string", "", kv_str, AT(gateway_user), 0, 0 },
	{ "pool_size_mb", "integer", "65536", kv_u64, AT(pool_size_mb), 0, 1ull << 40 },
	{ "templates", "list", "busybox,debian", kv_str, AT(templates), 0, 0 },
	{ "default_template", "string", "debian", kv_str, AT(default_template), 0, 0 },
	{ "default_backend", "string", "ns", kv_str, AT(default_backend), 0, 0 },
	{ "default_memory_mb", "integer", "512", kv_u32, AT(default_memory_mb), 0, 0 },
	{ "default_cpu_millis", "integer", "1000", kv_u32, AT(default_cpu_millis), 0, 0 },
	{ "default_pids", "integer", "512", kv_u32, AT(default_pids), 0, 0 },
	{ "default_disk_mb", "integer", "4096", kv_u32, AT(default_disk_mb), 0, 0 },
	{ "ready_timeout_ms", "integer", "30000", kv_u32, AT(ready_timeout_ms), 0, 0 },
	{ "max_sandboxes", "integer", "1000", kv_u32, AT(max_sandboxes), 0, 0 },
	{ "max_sandbox_pids", "integer", "4096", kv_u32, AT(max_sandbox_pids), 0, 0 },
	{ "max_pids_all_sandboxes", "integer", "0", kv_u32, AT(max_pids_all_sandboxes), 0, 0 },
	{ "max_sandbox_memory_mb", "integer", "16384", kv_u32, AT(max_sandbox_memory_mb), 0, 0 },
	{ "max_sandbox_cpus", "integer", "16", kv_u32, AT(max_sandbox_cpus), 0, 0 },
	{ "max_sandbox_disk_mb", "integer", "65536", kv_u32, AT(max_sandbox_disk_mb), 0, 0 },
	{ "max_snapshots", "integer", "64", kv_u32, AT(max_snapshots), 0, 0 },
	{ "rate_per_s", "number", "200", kv_double, AT(rate_per_s), 0, 0 },
	{ "rate_burst", "number", "400", kv_double, AT(rate_burst), 0, 0 },
	{ "api_max_inflight", "integer 0..1024", "256", kv_u32_range, AT(api_max_inflight), 0,
	  HTTP_MAX_CONNS },
	{ "api_max_conns_per_client", "integer 0..1024", "64", kv_u32_range,
	  AT(api_max_conns_per_client), 0, HTTP_MAX_CONNS },
	{ "api_body_budget_mb", "integer 0..1048576", "256", kv_u32_range, AT(api_body_budget_mb),
	  0, 1 << 20 },
	{ "api_head_timeout_s", "integer 1..3600", "10", kv_u32_range, AT(api_head_timeout_s), 1,
	  3600 },
	{ "ports_domain", "DNS name", "", kv_ports_domain, AT(ports_domain), 0, 0 },
	{ "log_level", "error, warn, info or debug", "info", kv_log_level, NOFIELD, 0, 0 },
	{ "log_format", "text or json", "text", kv_log_format, NOFIELD, 0, 0 },
	{ "cgroup_favordynmods", "bool", "true", kv_bool, AT(cgroup_favordynmods), 0, 0 },
	{ "vm_accel", "auto, kvm or tcg", "auto", kv_vm_accel, AT(vm_accel), 0, 0 },
	{ "vm_dir", "path", "", kv_path, AT(vm_dir), 1, 0 },
	{ "vm_warm_pool", "integer", "2", kv_u32, AT(vm_warm_pool), 0, 0 },
	{ "vm_warm_pool_max", "integer 0..64", "8", kv_u32, AT(vm_warm_pool_max), 0, 64 },
	{ "vm_start_concurrency", "integer 0..1024", "0", kv_u32, AT(vm_start_concurrency), 0,
	  1024 },
	{ "vm_fork_pool", "integer", "1", kv_u32, AT(vm_fork_pool), 0, 0 },
	{ "console_log_max", "integer >= 4096", "1048576", kv_u64, AT(console_log_max), 4096,
	  UINT64_MAX / 2 },
	{ "ns_warm_pool", "integer 0..64", "2", kv_u32, AT(ns_warm_pool), 0, 64 },
	{ "ns_warm_pool_max", "integer 0..256", "32", kv_u32, AT(ns_warm_pool_max), 0, 256 },
	{ "warm_pool_half_life_s", "integer 0..86400", "30", kv_u32, AT(warm_pool_half_life_s), 0,
	  86400 },
	{ "vm_snapshots", "bool", "true", kv_bool, AT(vm_snapshots), 0, 0 },
	{ "snapshot_disk_interval_s", "integer", "60", kv_u32, AT(snapshot_disk_interval_s), 0, 0 },
	{ "snapshot_full_interval_s", "integer", "900", kv_u32, AT(snapshot_full_interval_s), 0,
	  0 },
	{ "snapshot_keep_all_s", "integer", "3600", kv_u32, AT(snapshot_keep_all_s), 0, 0 },
	{ "snapshot_keep_hourly_s", "integer", "86400", kv_u32, AT(snapshot_keep_hourly_s), 0, 0 },
	{ "snapshot_keep_daily_s", "integer", "604800", kv_u32, AT(snapshot_keep_daily_s), 0, 0 },
	{ "idle_timeout_s", "integer", "0", kv_u32, AT(idle_timeout_s), 0, 0 },
	{ "object_store", "URL", "", kv_str, AT(object_store), 0, 0 },
	{ "s3_access_key", "string", "", kv_str, AT(s3_access_key), 0, 0 },
	{ "s3_secret_key", "string", "", kv_str, AT(s3_secret_key), 0, 0 },
	{ "s3_access_key_file", "path", "", kv_secret_file, AT(s3_access_key), 0, 0 },
	{ "s3_secret_key_file", "path", "", kv_secret_file, AT(s3_secret_key), 0, 0 },
	{ "suspend_after_idle", "integer", "1800", kv_u32, AT(suspend_after_idle_s), 0, 0 },
	{ "suspend_reclaim", "bool", "true", kv_bool, AT(suspend_reclaim), 0, 0 },
	{ "kms_cache_ttl", "integer", "60", kv_u32, AT(kms_cache_ttl_s), 0, 0 },
	{ "tenant_key_dir", "path", "(DATA/tenant-keys)", kv_path, AT(tenant_key_dir), 0, 0 },
	{ "encrypt_artifacts", "bool", "true", kv_bool, AT(encrypt_artifacts), 0, 0 },
	{ "debug_clock", "bool", "false", kv_bool, AT(debug_clock), 0, 0 },
	{ "network", "bool", "true", kv_bool, AT(network), 0, 0 },
	{ "net_cidr", "CIDR", "", kv_str, AT(net_cidr), 0, 0 },
	{ "gateway_proxy_port", "integer 0..65535", "0", kv_u32_range, AT(gateway_proxy_port), 0,
	  65535 },
	{ "gateway_dns_port", "integer 0..65535", "0", kv_u32_range, AT(gateway_dns_port), 0,
	  65535 },
	{ "network_allow_private_cidrs", "list", "", kv_str, AT(network_allow_private_cidrs), 0,
	  0 },
	{ "gateway_max_conns", "integer 1..4096", "256", kv_u32_range, AT(gateway_max_conns), 1,
	  GATEWAY_WORKERS_MAX },
	{ "gateway_dns_servers", "list", "", kv_str, AT(gateway_dns_servers), 0, 0 },
	{ "gateway_dns_max_pending", "integer 1..1024", "16", kv_u32_range,
	  AT(gateway_dns_max_pending), 1, GATEWAY_DNS_MAX_PENDING_MAX },
	{ "gateway_hosts", "list", "", kv_str, AT(gateway_hosts), 0, 0 },
	{ "gateway_upstream_ca", "path", "", kv_str, AT(gateway_upstream_ca), 0, 0 },
};
const size_t config_keys_n = ARRAY_SIZE(config_keys);

const struct config_key *config_key_find(const char *key)
{
	for (size_t i = 0; i < config_keys_n; i++)
		if (!strcmp(config_keys[i].key, key))
			return &config_keys[i];
	return NULL;
}

char *data_path(const struct airlockd_config *cfg, const char *rel)
{
	return xasprintf("%s/%s", cfg->data_dir, rel);
}

int config_set(struct airlockd_config *c, const char *key, const char *val, err_t *err)
{
	const struct config_key *k = config_key_find(key);

	if (!k)
		return err_set(err, EINVAL, "unknown setting `%s`", key);
	return k->set(k, c, val, err);
}

static char *trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
		*--e = '\0';
	return s;
}

int config_read(struct airlockd_config *c, FILE *f, const char *name, err_t *err)
{
	char line[4096];
	int lineno = 0, r = 0;

	while (fgets(line, sizeof(line), f)) {
		char *s, *eq;

		lineno++;
		if (!strchr(line, '\n') && !feof(f)) {
			r = err_set(err, EINVAL, "%s:%d: line too long", name, lineno);
			break;
		}
		s = trim(line);
		if (!*s || *s == '#')
			continue;
		eq = strchr(s, '=');
		if (!eq) {
			r = err_set(err, EINVAL, "%s:%d: expected `key = value`", name, lineno);
			break;
		}
		*eq = '\0';
		r = config_set(c, trim(s), trim(eq + 1), err);
		if (r < 0) {
			err_wrap(err, "%s:%d", name, lineno);
			break;
		}
	}
	/* The line may have held a secret: no copy outlives the parse (the
	 * roles are forked from this process). */
	explicit_bzero(line, sizeof(line));
	return r;
}

int config_load(struct airlockd_config *c, const char *path, err_t *err)
{
	char iobuf[BUFSIZ];
	FILE *f = fopen(path, "re");
	int r;

	if (!f)
		return err_sys(err, "config `%s`", path);
	/* Our buffer, wiped after: stdio's own would go back to the heap with
	 * the file's bytes in it, and every forked role would inherit them. */
	setvbuf(f, iobuf, _IOFBF, sizeof(iobuf));
	r = config_read(c, f, path, err);
	fclose(f);
	explicit_bzero(iobuf, sizeof(iobuf));
	if (r == 0)
		snprintf(c->config_path, sizeof(c->config_path), "%s", path);
	return r;
}
