#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../gateway/gateway.h"
#include "../lib/http.h"
#include "../lib/util.h"

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

int config_set(struct airlockd_config *c, const char *key, const char *val, err_t *err)
{
	if (!strcmp(key, "data_dir")) {
		if (val[0] != '/')
			return err_set(err, EINVAL, "data_dir: must be an absolute path");
		return set_str(c->data_dir, sizeof(c->data_dir), key, val, err);
	}
	if (!strcmp(key, "listen"))
		return set_str(c->listen, sizeof(c->listen), key, val, err);
	if (!strcmp(key, "db")) {
		if (!val[0])
			return err_set(err, EINVAL, "db: empty (sqlite, sqlite:PATH or a postgresql:// URL)");
		return set_str(c->db, sizeof(c->db), key, val, err);
	}
	if (!strcmp(key, "node_name")) {
		size_t n = strlen(val);
		bool ok = n >= 1 && n <= 64 && (islower((unsigned char)val[0]) ||
						 isdigit((unsigned char)val[0]));
		for (const char *p = val; ok && *p; p++)
			ok = islower((unsigned char)*p) || isdigit((unsigned char)*p) || *p == '-' ||
			     *p == '.' || *p == '_';
		if (!ok)
			return err_set(err, EINVAL, "node_name: `%s` is not [a-z0-9][a-z0-9._-]{0,63}",
				       val);
		return set_str(c->node_name, sizeof(c->node_name), key, val, err);
	}
	if (!strcmp(key, "tls_cert"))
		return set_str(c->tls_cert, sizeof(c->tls_cert), key, val, err);
	if (!strcmp(key, "tls_key"))
		return set_str(c->tls_key, sizeof(c->tls_key), key, val, err);
	if (!strcmp(key, "advertise_url")) {
		if (*val && strncmp(val, "http://", 7) && strncmp(val, "https://", 8))
			return err_set(err, EINVAL, "advertise_url: `%s` is not http(s)://HOST:PORT",
				       val);
		return set_str(c->advertise_url, sizeof(c->advertise_url), key, val, err);
	}
	if (!strcmp(key, "heartbeat_timeout_s")) {
		int r = set_u32(&c->heartbeat_timeout_s, key, val, err);
		if (r == 0 && c->heartbeat_timeout_s < 3)
			r = err_set(err, EINVAL, "heartbeat_timeout_s: at least 3");
		return r;
	}
	if (!strcmp(key, "user"))
		return set_str(c->user, sizeof(c->user), key, val, err);
	if (!strcmp(key, "gateway_user"))
		return set_str(c->gateway_user, sizeof(c->gateway_user), key, val, err);
	if (!strcmp(key, "api_user"))
		return set_str(c->api_user, sizeof(c->api_user), key, val, err);
	if (!strcmp(key, "pool_size_mb"))
		return set_u64(&c->pool_size_mb, key, val, 1ull << 40, err);
	if (!strcmp(key, "default_backend"))
		return set_str(c->default_backend, sizeof(c->default_backend), key, val, err);
	if (!strcmp(key, "default_template"))
		return set_str(c->default_template, sizeof(c->default_template), key, val, err);
	if (!strcmp(key, "templates"))
		return set_str(c->templates, sizeof(c->templates), key, val, err);
	if (!strcmp(key, "default_memory_mb"))
		return set_u32(&c->default_memory_mb, key, val, err);
	if (!strcmp(key, "default_cpu_millis"))
		return set_u32(&c->default_cpu_millis, key, val, err);
	if (!strcmp(key, "default_pids"))
		return set_u32(&c->default_pids, key, val, err);
	if (!strcmp(key, "default_disk_mb"))
		return set_u32(&c->default_disk_mb, key, val, err);
	if (!strcmp(key, "ready_timeout_ms"))
		return set_u32(&c->ready_timeout_ms, key, val, err);
	if (!strcmp(key, "vm_start_concurrency")) {
		if (set_u32(&c->vm_start_concurrency, key, val, err) < 0)
			return -1;
		if (c->vm_start_concurrency > 1024)
			return err_set(err, EINVAL, "vm_start_concurrency: at most 1024");
		return 0;
	}
	if (!strcmp(key, "snapshot_disk_interval_s"))
		return set_u32(&c->snapshot_disk_interval_s, key, val, err);
	if (!strcmp(key, "snapshot_full_interval_s"))
		return set_u32(&c->snapshot_full_interval_s, key, val, err);
	if (!strcmp(key, "snapshot_keep_all_s"))
		return set_u32(&c->snapshot_keep_all_s, key, val, err);
	if (!strcmp(key, "snapshot_keep_hourly_s"))
		return set_u32(&c->snapshot_keep_hourly_s, key, val, err);
	if (!strcmp(key, "snapshot_keep_daily_s"))
		return set_u32(&c->snapshot_keep_daily_s, key, val, err);
	if (!strcmp(key, "object_store"))
		return set_str(c->object_store, sizeof(c->object_store), key, val, err);
	if (!strcmp(key, "s3_access_key"))
		return set_str(c->s3_access_key, sizeof(c->s3_access_key), key, val, err);
	if (!strcmp(key, "s3_secret_key"))
		return set_str(c->s3_secret_key, sizeof(c->s3_secret_key), key, val, err);
	if (!strcmp(key, "suspend_after_idle"))
		return set_u32(&c->suspend_after_idle_s, key, val, err);
	if (!strcmp(key, "idle_timeout_s"))
		return set_u32(&c->idle_timeout_s, key, val, err);
	if (!strcmp(key, "tenant_key_dir")) {
		if (val[0] != '/')
			return err_set(err, EINVAL, "tenant_key_dir: must be an absolute path");
		return set_str(c->tenant_key_dir, sizeof(c->tenant_key_dir), key, val, err);
	}
	if (!strcmp(key, "kms_cache_ttl"))
		return set_u32(&c->kms_cache_ttl_s, key, val, err);
	if (!strcmp(key, "encrypt_artifacts")) {
		/* off only for the control test and the benchmark's baseline */
		if (strcmp(val, "true") && strcmp(val, "false"))
			return err_set(err, EINVAL, "%s: `%s` is not true|false", key, val);
		c->encrypt_artifacts = !strcmp(val, "true");
		return 0;
	}
	if (!strcmp(key, "suspend_reclaim")) {
		/* off: the guest keeps its page cache over a suspend (and the
		 * memory artifact holds it); the benchmark's and tests' baseline */
		if (strcmp(val, "true") && strcmp(val, "false"))
			return err_set(err, EINVAL, "%s: `%s` is not true|false", key, val);
		c->suspend_reclaim = !strcmp(val, "true");
		return 0;
	}
	if (!strcmp(key, "debug_clock")) {
		if (strcmp(val, "true") && strcmp(val, "false"))
			return err_set(err, EINVAL, "%s: `%s` is not true|false", key, val);
		c->debug_clock = !strcmp(val, "true");
		return 0;
	}
	if (!strcmp(key, "max_sandboxes"))
		return set_u32(&c->max_sandboxes, key, val, err);
	if (!strcmp(key, "max_sandbox_pids"))
		return set_u32(&c->max_sandbox_pids, key, val, err);
	if (!strcmp(key, "max_sandbox_memory_mb"))
		return set_u32(&c->max_sandbox_memory_mb, key, val, err);
	if (!strcmp(key, "max_sandbox_cpus"))
		return set_u32(&c->max_sandbox_cpus, key, val, err);
	if (!strcmp(key, "max_sandbox_disk_mb"))
		return set_u32(&c->max_sandbox_disk_mb, key, val, err);
	if (!strcmp(key, "max_pids_all_sandboxes"))
		return set_u32(&c->max_pids_all_sandboxes, key, val, err);
	if (!strcmp(key, "max_snapshots"))
		return set_u32(&c->max_snapshots, key, val, err);
	if (!strcmp(key, "rate_per_s"))
		return set_double(&c->rate_per_s, key, val, err);
	if (!strcmp(key, "rate_burst"))
		return set_double(&c->rate_burst, key, val, err);
	if (!strcmp(key, "ports_domain")) {
		for (const char *p = val; *p; p++)
			if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' ||
			      *p == '.'))
				return err_set(err, EINVAL, "ports_domain: `%s` is not a lowercase "
					       "DNS name", val);
		return set_str(c->ports_domain, sizeof(c->ports_domain), key, val, err);
	}
	if (!strcmp(key, "cgroup_favordynmods")) {
		if (strcmp(val, "true") && strcmp(val, "false"))
			return err_set(err, EINVAL, "%s: `%s` is not true|false", key, val);
		c->cgroup_favordynmods = !strcmp(val, "true");
		return 0;
	}
	if (!strcmp(key, "network")) {
		if (strcmp(val, "true") && strcmp(val, "false"))
			return err_set(err, EINVAL, "%s: `%s` is not true|false", key, val);
		c->network = !strcmp(val, "true");
		return 0;
	}
	if (!strcmp(key, "net_cidr"))
		return set_str(c->net_cidr, sizeof(c->net_cidr), key, val, err);
	if (!strcmp(key, "gateway_proxy_port") || !strcmp(key, "gateway_dns_port")) {
		uint64_t v;
		int r = set_u64(&v, key, val, 65535, err);
		if (r == 0)
			*(key[8] == 'p' ? &c->gateway_proxy_port : &c->gateway_dns_port) = (uint32_t)v;
		return r;
	}
	if (!strcmp(key, "gateway_max_conns")) {
		/* a sandbox's live connections through the gateway */
		uint64_t v;
		int r = set_u64(&v, key, val, GATEWAY_WORKERS_MAX, err);
		if (r == 0 && v == 0)
			r = err_set(err, EINVAL, "%s: must be 1..%d", key, GATEWAY_WORKERS_MAX);
		if (r == 0)
			c->gateway_max_conns = (uint32_t)v;
		return r;
	}
	if (!strcmp(key, "api_max_inflight")) {
		/* 0: no cap; at most all of the server's connections */
		uint64_t v;
		int r = set_u64(&v, key, val, HTTP_MAX_CONNS, err);
		if (r == 0)
			c->api_max_inflight = (uint32_t)v;
		return r;
	}
	if (!strcmp(key, "api_max_conns_per_client")) {
		uint64_t v;
		int r = set_u64(&v, key, val, HTTP_MAX_CONNS, err);
		if (r == 0)
			c->api_max_conns_per_client = (uint32_t)v;
		return r;
	}
	if (!strcmp(key, "api_body_budget_mb")) {
		uint64_t v;
		int r = set_u64(&v, key, val, 1 << 20, err);
		if (r == 0)
			c->api_body_budget_mb = (uint32_t)v;
		return r;
	}
	if (!strcmp(key, "api_head_timeout_s")) {
		uint64_t v;
		int r = set_u64(&v, key, val, 3600, err);
		if (r == 0 && v == 0)
			r = err_set(err, EINVAL, "%s: must be 1..3600", key);
		if (r == 0)
			c->api_head_timeout_s = (uint32_t)v;
		return r;
	}
	if (!strcmp(key, "gateway_dns_max_pending")) {
		uint64_t v;
		int r = set_u64(&v, key, val, GATEWAY_DNS_MAX_PENDING_MAX, err);
		if (r == 0 && v == 0)
			r = err_set(err, EINVAL, "%s: must be 1..%d", key,
				    GATEWAY_DNS_MAX_PENDING_MAX);
		if (r == 0)
			c->gateway_dns_max_pending = (uint32_t)v;
		return r;
	}
	if (!strcmp(key, "gateway_dns_servers"))
		return set_str(c->gateway_dns_servers, sizeof(c->gateway_dns_servers), key, val,
			       err);
	if (!strcmp(key, "gateway_hosts"))
		return set_str(c->gateway_hosts, sizeof(c->gateway_hosts), key, val, err);
	if (!strcmp(key, "gateway_upstream_ca"))
		return set_str(c->gateway_upstream_ca, sizeof(c->gateway_upstream_ca), key, val, err);
	if (!strcmp(key, "network_allow_private_cidrs"))
		return set_str(c->network_allow_private_cidrs,
			       sizeof(c->network_allow_private_cidrs), key, val, err);
	if (!strcmp(key, "vm_accel")) {
		if (strcmp(val, "auto") && strcmp(val, "kvm") && strcmp(val, "tcg"))
			return err_set(err, EINVAL, "%s: `%s` is not auto|kvm|tcg", key, val);
		return set_str(c->vm_accel, sizeof(c->vm_accel), key, val, err);
	}
	if (!strcmp(key, "vm_dir")) {
		if (val[0] && val[0] != '/')
			return err_set(err, EINVAL, "vm_dir: must be an absolute path");
		return set_str(c->vm_dir, sizeof(c->vm_dir), key, val, err);
	}
	if (!strcmp(key, "vm_snapshots")) {
		if (strcmp(val, "true") && strcmp(val, "false"))
			return err_set(err, EINVAL, "%s: `%s` is not true|false", key, val);
		c->vm_snapshots = !strcmp(val, "true");
		return 0;
	}
	if (!strcmp(key, "console_log_max")) {
		/* A guest writes its serial console without end: its log keeps
		 * the newest this many bytes (nodemgr/vm-console.c). */
		if (set_u64(&c->console_log_max, key, val, UINT64_MAX / 2, err) < 0)
			return -err->code;
		if (c->console_log_max < 4096)
			return err_set(err, EINVAL, "%s: at least 4096 (bytes)", key);
		return 0;
	}
	if (!strcmp(key, "vm_warm_pool"))
		return set_u32(&c->vm_warm_pool, key, val, err);
	if (!strcmp(key, "vm_fork_pool"))
		return set_u32(&c->vm_fork_pool, key, val, err);
	if (!strcmp(key, "ns_warm_pool")) {
		/* Each waiting jail holds a uid range, a veth and its processes. */
		if (set_u32(&c->ns_warm_pool, key, val, err) < 0)
			return -err->code;
		if (c->ns_warm_pool > 64)
			return err_set(err, EINVAL, "%s: at most 64", key);
		return 0;
	}
	if (!strcmp(key, "ns_warm_pool_max")) {
		/* The most a burst may grow a template's pool to (warmsize.h). */
		if (set_u32(&c->ns_warm_pool_max, key, val, err) < 0)
			return -err->code;
		if (c->ns_warm_pool_max > 256)
			return err_set(err, EINVAL, "%s: at most 256", key);
		return 0;
	}
	if (!strcmp(key, "vm_warm_pool_max")) {
		/* Each parked QEMU holds its guest's RAM. */
		if (set_u32(&c->vm_warm_pool_max, key, val, err) < 0)
			return -err->code;
		if (c->vm_warm_pool_max > 64)
			return err_set(err, EINVAL, "%s: at most 64", key);
		return 0;
	}
	if (!strcmp(key, "warm_pool_half_life_s")) {
		if (set_u32(&c->warm_pool_half_life_s, key, val, err) < 0)
			return -err->code;
		if (c->warm_pool_half_life_s > 86400)
			return err_set(err, EINVAL, "%s: at most 86400", key);
		return 0;
	}
	if (!strcmp(key, "log_format")) {
		if (strcmp(val, "text") && strcmp(val, "json"))
			return err_set(err, EINVAL, "log_format: `%s` is not text|json", val);
		c->log_json = !strcmp(val, "json");
		return 0;
	}
	if (!strcmp(key, "log_level")) {
		static const char *names[] = { "error", "warn", "info", "debug" };
		for (int i = 0; i < 4; i++)
			if (!strcmp(val, names[i])) {
				c->log_level = i;
				return 0;
			}
		return err_set(err, EINVAL, "log_level: `%s` is not error|warn|info|debug", val);
	}
	return err_set(err, EINVAL, "unknown setting `%s`", key);
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
		if (!strchr(line, '\n') && !feof(f))
			return err_set(err, EINVAL, "%s:%d: line too long", name, lineno);
		s = trim(line);
		if (!*s || *s == '#')
			continue;
		eq = strchr(s, '=');
		if (!eq)
			return err_set(err, EINVAL, "%s:%d: expected `key = value`", name, lineno);
		*eq = '\0';
		r = config_set(c, trim(s), trim(eq + 1), err);
		if (r < 0) {
			err_wrap(err, "%s:%d", name, lineno);
			return r;
		}
	}
	return 0;
}

int config_load(struct airlockd_config *c, const char *path, err_t *err)
{
	FILE *f = fopen(path, "re");
	int r;

	if (!f)
		return err_sys(err, "config `%s`", path);
	r = config_read(c, f, path, err);
	fclose(f);
	return r;
}
