/* test-api.c - `airlockd api` against a temp SQLite DB and a fake node.
 *
 * The api runs in a child process (api_run waits for SIGTERM), listening on
 * 127.0.0.1:0 and reporting its address through addr_file. The fake node is
 * an HTTP server on a unix socket in this process: it is the outer boundary
 * of this unit (the real node is covered end to end elsewhere). It echoes
 * what it received and streams NDJSON on cue, so the test can tell whether
 * the api relays a stream as it is produced and aborts it when the client
 * goes away.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "../../src/api/api-internal.h"
#include "../../src/api/api.h"
#include "../../src/db/db.h"
#include "../../src/lib/http.h"
#include "../../src/lib/json.h"
#include "../../src/lib/log.h"
#include "../../src/lib/util.h"

static int failures;

#define CHECK(cond, ...)                                                      \
	do {                                                                  \
		if (!(cond)) {                                                \
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                         \
			fputc('\n', stderr);                                  \
			failures++;                                           \
		}                                                             \
	} while (0)

static char tmpdir[64];
static char base[128];           /* "http://127.0.0.1:PORT" of the api */

/* ---------------------------------------------------------- fake node */

struct fake {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool release;            /* the test saw the first chunk */
	bool finished_early;     /* the stream ended without being released */
	bool upstream_aborted;   /* a write failed: the api dropped us */
	int hits;
};
static struct fake fake = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static void fake_echo(struct http_req *req, struct http_conn *c)
{
	struct buf b;
	struct jw w;
	int n_tenant = 0;

	for (size_t i = 0; i < req->n_headers; i++)
		if (strcasecmp(req->headers[i].name, "X-Airlock-Tenant") == 0)
			n_tenant++;
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "tenant");
	jw_str(&w, http_req_header(req, "X-Airlock-Tenant"));
	jw_key(&w, "admin");
	jw_str(&w, http_req_header(req, "X-Airlock-Admin"));
	jw_key(&w, "n_tenant");
	jw_int(&w, n_tenant);
	jw_key(&w, "method");
	jw_str(&w, req->method);
	jw_key(&w, "target");
	jw_str(&w, req->target);
	jw_key(&w, "idem");
	jw_str(&w, http_req_header(req, "Idempotency-Key"));
	jw_key(&w, "ctype");
	jw_str(&w, http_req_header(req, "Content-Type"));
	jw_key(&w, "auth");
	jw_str(&w, http_req_header(req, "Authorization"));
	jw_key(&w, "body");
	jw_strn(&w, req->body, req->body_len);
	jw_end(&w);
	http_respond(c, 200, "application/json", b.data, b.len, "X-Node-Extra: yes\r\n");
	buf_free(&b);
}

static void fake_handler(void *ctx, struct http_req *req, struct http_conn *c)
{
	static const char line1[] = "{\"type\":\"start\",\"pid\":12}\n";
	static const char line2[] = "{\"type\":\"exit\",\"exit_code\":0}\n";

	pthread_mutex_lock(&fake.mu);
	fake.hits++;
	pthread_mutex_unlock(&fake.mu);

	if (strcmp(req->path, "/v1/sandboxes/s1/exec") == 0) {
		/* First line, then wait until the test has seen it. If the api
		 * buffered, the test never sees it and we time out. */
		struct timespec dl;
		bool released;

		http_stream_begin(c, 200, "application/x-ndjson", NULL);
		http_stream_write(c, line1, sizeof(line1) - 1);
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += 5;
		pthread_mutex_lock(&fake.mu);
		while (!fake.release)
			if (pthread_cond_timedwait(&fake.cv, &fake.mu, &dl) == ETIMEDOUT)
				break;
		released = fake.release;
		if (!released)
			fake.finished_early = true;
		pthread_mutex_unlock(&fake.mu);
		http_stream_write(c, line2, sizeof(line2) - 1);
		http_stream_end(c);
		return;
	}
	if (strcmp(req->path, "/v1/sandboxes/s2/exec") == 0) {
		/* Endless output until the api stops reading. */
		char line[64];
		http_stream_begin(c, 200, "application/x-ndjson", NULL);
		for (int i = 0; i < 500; i++) {
			int n = snprintf(line, sizeof(line), "{\"type\":\"stdout\",\"n\":%d}\n", i);
			if (http_stream_write(c, line, (size_t)n) < 0) {
				pthread_mutex_lock(&fake.mu);
				fake.upstream_aborted = true;
				pthread_cond_broadcast(&fake.cv);
				pthread_mutex_unlock(&fake.mu);
				break;
			}
			usleep(20 * 1000);
		}
		http_stream_end(c);
		return;
	}
	if (strcmp(req->path, "/v1/sandboxes/s3") == 0 && strcmp(req->method, "DELETE") == 0) {
		http_respond(c, 204, NULL, NULL, 0, NULL);
		return;
	}
	if (strcmp(req->path, "/v1/sandboxes/missing") == 0) {
		http_respond_error(c, 404, "not_found", "sandbox missing not found");
		return;
	}
	fake_echo(req, c);
}

/* ------------------------------------------------------------ helpers */

static int req(const char *method, const char *target, const char *key, const char *extra,
	       const char *body, struct http_resp *out)
{
	_cleanup_free_ char *hdr = xasprintf("%s%s%s%s", key ? "Authorization: Bearer " : "",
					     key ? key : "", key ? "\r\n" : "",
					     extra ? extra : "");
	err_t err = { 0 };
	int r = http_request(base, method, target, hdr, body, body ? strlen(body) : 0, out, &err);

	if (r < 0) {
		fprintf(stderr, "request %s %s failed: %s\n", method, target, err.msg);
		memset(out, 0, sizeof(*out));
		return -1;
	}
	return out->status;
}

/* Status of a request, and the error code of its JSON body (or ""). */
static int req_code(const char *method, const char *target, const char *key, const char *body,
		    char *code, size_t code_len)
{
	struct http_resp r;
	int st = req(method, target, key, NULL, body, &r);

	code[0] = '\0';
	if (st > 0 && r.body.len) {
		json *j = json_parse(r.body.data, r.body.len, NULL);
		const json *e = j ? json_get(j, "error") : NULL;
		if (e && json_get_str(e, "code"))
			snprintf(code, code_len, "%s", json_get_str(e, "code"));
		json_free(j);
	}
	http_resp_free(&r);
	return st;
}

static json *body_json(const struct http_resp *r)
{
	err_t err = { 0 };
	json *j = r->body.len ? json_parse(r->body.data, r->body.len, &err) : NULL;

	if (!j)
		fprintf(stderr, "bad JSON (%s): %.200s\n", err.msg, r->body.data ? r->body.data : "");
	return j;
}

static char *read_key(const char *path)
{
	struct buf b;
	char *key = NULL;

	buf_init(&b);
	if (read_file(path, 4096, &b) == 0) {
		json *j = json_parse(b.data, b.len, NULL);
		if (j && json_get_str(j, "api_key"))
			key = xstrdup(json_get_str(j, "api_key"));
		json_free(j);
	}
	buf_free(&b);
	return key;
}

/* ------------------------------------------------------------- tests */

static void test_units(const char *db_path)
{
	struct api a = { 0 };
	struct api_principal who;
	err_t err = { 0 };
	char hash[65];
	_cleanup_free_ char *key = NULL, *id = NULL;

	/* key format and hashing */
	api_key_hash("abc", hash);
	CHECK(strcmp(hash, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0,
	      "sha256(abc) = %s", hash);
	CHECK(api_key_well_formed("al_0123456789abcdef0123456789abcdef"), "well formed");
	CHECK(!api_key_well_formed("al_0123456789abcdef0123456789abcdeF"), "uppercase");
	CHECK(!api_key_well_formed("al_0123"), "short");
	CHECK(!api_key_well_formed(NULL), "NULL");

	/* token bucket: burst 3, then refused with a Retry-After */
	struct ratelimit *rl = ratelimit_new(1.0, 3);
	unsigned retry = 0;
	CHECK(ratelimit_take(rl, "k", &retry) && ratelimit_take(rl, "k", &retry) &&
	      ratelimit_take(rl, "k", &retry), "burst");
	CHECK(!ratelimit_take(rl, "k", &retry) && retry == 1, "limited, retry %u", retry);
	CHECK(ratelimit_take(rl, "other", &retry), "buckets are per key");
	ratelimit_free(rl);
	CHECK(ratelimit_new(0, 10) == NULL, "rate 0 disables");

	/* per client: IPv4 by address, IPv6 by /64, v4-mapped as IPv4 */
	char ck[64];
	ratelimit_client_key("192.0.2.7:5555", ck, sizeof(ck));
	CHECK(!strcmp(ck, "192.0.2.7"), "v4 %s", ck);
	ratelimit_client_key("[2001:db8:1:2:aaaa::1]:80", ck, sizeof(ck));
	CHECK(!strcmp(ck, "2001:db8:1:2::/64"), "v6 %s", ck);
	ratelimit_client_key("[2001:db8:1:2:ffff:1:2:3]:81", ck, sizeof(ck));
	CHECK(!strcmp(ck, "2001:db8:1:2::/64"), "same /64 %s", ck);
	ratelimit_client_key("[::ffff:192.0.2.9]:1", ck, sizeof(ck));
	CHECK(!strcmp(ck, "192.0.2.9"), "mapped %s", ck);
	ratelimit_client_key("unix", ck, sizeof(ck));
	CHECK(!strcmp(ck, "unix"), "unix %s", ck);

	/* a give pays a take back; capped: past the cap newcomers share one
	 * bucket, and idle (full) buckets make room again */
	rl = ratelimit_new_capped(0.001, 2, 3);
	CHECK(ratelimit_take(rl, "a", &retry) && ratelimit_take(rl, "a", &retry) &&
	      !ratelimit_take(rl, "a", &retry), "a spent");
	ratelimit_give(rl, "a");
	CHECK(ratelimit_take(rl, "a", &retry) && !ratelimit_take(rl, "a", &retry), "given back");
	CHECK(ratelimit_take(rl, "b", &retry) && ratelimit_take(rl, "c", &retry), "b, c");
	/* a, b, c fill the cap; d and e share the overflow bucket (burst 2) */
	CHECK(ratelimit_take(rl, "d", &retry) && ratelimit_take(rl, "e", &retry), "overflow");
	CHECK(!ratelimit_take(rl, "f", &retry), "overflow shared, spent");
	ratelimit_free(rl);
	rl = ratelimit_new_capped(1000, 1, 2);
	for (int i = 0; i < 100; i++) {
		char k[16];
		snprintf(k, sizeof(k), "c%d", i);
		if (!ratelimit_take(rl, k, &retry))
			usleep(5000);
	}
	usleep(150000);   /* past a sweep's interval */
	CHECK(ratelimit_take(rl, "new", &retry), "idle buckets dropped for a newcomer");
	ratelimit_free(rl);

	/* lookup: valid, cached (and cheap), unknown */
	a.db = db_open(db_path, &err);
	CHECK(a.db, "db_open: %s", err.msg);
	if (!a.db)
		return;
	a.cache = auth_cache_new();
	db_exec(a.db, &err, "INSERT INTO tenants(id, name, created_at) VALUES('ten_u', 'unit', 0)",
		NULL);
	CHECK(api_key_create(a.db, "ten_u", "k", false, &key, &id, &err) == 0, "%s", err.msg);
	CHECK(auth_lookup(&a, key, &who, &err) == 1 && strcmp(who.tenant, "ten_u") == 0 &&
	      !who.admin && strcmp(who.key_id, id) == 0, "lookup");
	uint64_t t0 = now_us();
	for (int i = 0; i < 10000; i++)
		auth_lookup(&a, key, &who, &err);
	uint64_t per = (now_us() - t0) / 10000;
	printf("cached auth lookup: %llu us\n", (unsigned long long)per);
	CHECK(per < 100, "cached lookup takes %llu us", (unsigned long long)per);
	CHECK(auth_lookup(&a, "al_00000000000000000000000000000000", &who, &err) == 0, "unknown");
	CHECK(auth_lookup(&a, "nope", &who, &err) == 0, "garbage");
	auth_cache_free(a.cache);
	db_close(a.db);
}

static void test_port_parsers(void)
{
	unsigned port = 0;
	char id[65];
	char *s;

	CHECK(ports_parse_host("8080-sb-ab12.ports.test", "ports.test", &port, id, sizeof(id)), "port parsers");
	CHECK(port == 8080 && !strcmp(id, "sb-ab12"), "port parsers");
	CHECK(ports_parse_host("80-SB-X.Ports.Test:7070", "ports.test", &port, id, sizeof(id)), "port parsers");
	CHECK(port == 80 && !strcmp(id, "sb-x"), "port parsers");
	CHECK(!ports_parse_host("0-sb.ports.test", "ports.test", &port, id, sizeof(id)), "port parsers");
	CHECK(!ports_parse_host("65536-sb.ports.test", "ports.test", &port, id, sizeof(id)), "port parsers");
	CHECK(!ports_parse_host("8080-sb.other.test", "ports.test", &port, id, sizeof(id)), "port parsers");
	CHECK(!ports_parse_host("8080-sb.xports.test", "ports.test", &port, id, sizeof(id)), "port parsers");
	CHECK(!ports_parse_host("8080-.ports.test", "ports.test", &port, id, sizeof(id)), "port parsers");
	CHECK(!ports_parse_host("ports.test", "ports.test", &port, id, sizeof(id)), "port parsers");
	CHECK(!ports_parse_host("8080-a_b.ports.test", "ports.test", &port, id, sizeof(id)), "port parsers");
	CHECK(!ports_parse_host("8080-a.b.ports.test", "ports.test", &port, id, sizeof(id)), "port parsers");

	s = ports_cookie_get("a=b; airlock_port_token=alp_1; c=d", "airlock_port_token");
	CHECK(s && !strcmp(s, "alp_1"), "port parsers");
	free(s);
	CHECK(ports_cookie_get("a=b", "airlock_port_token") == NULL, "port parsers");
	s = ports_cookie_nth("airlock_port_token=x; a=b; airlock_port_token=alp_2", "airlock_port_token", 1);
	CHECK(s && !strcmp(s, "alp_2"), "port parsers");
	free(s);
	CHECK(ports_cookie_nth("airlock_port_token=x", "airlock_port_token", 1) == NULL, "port parsers");
	s = ports_cookie_without_token("a=b; airlock_port_token=alp_1; c=d");
	CHECK(s && !strcmp(s, "a=b; c=d"), "port parsers");
	free(s);
	CHECK(ports_cookie_without_token("airlock_port_token=alp_1") == NULL, "port parsers");
	s = ports_query_without_token("x=1&airlock_token=t&y=2");
	CHECK(!strcmp(s, "x=1&y=2"), "port parsers");
	free(s);
	s = ports_query_without_token("airlock_token=t");
	CHECK(!strcmp(s, ""), "port parsers");
	free(s);
}

static void test_bootstrap(const char *db_path, const char *cli_path)
{
	err_t err = { 0 };
	struct stat st;
	_cleanup_free_ char *k1 = NULL, *k1b = NULL, *k2 = NULL;

	CHECK(api_bootstrap(db_path, cli_path, "http://127.0.0.1:7070", &err) == 0, "%s", err.msg);
	CHECK(stat(cli_path, &st) == 0 && (st.st_mode & 0777) == 0600, "cli.json mode %o",
	      st.st_mode & 0777);
	k1 = read_key(cli_path);
	CHECK(k1 && api_key_well_formed(k1), "key in cli.json");
	/* idempotent: nothing changes */
	CHECK(api_bootstrap(db_path, cli_path, "http://127.0.0.1:7070", &err) == 0, "%s", err.msg);
	k1b = read_key(cli_path);
	CHECK(k1 && k1b && strcmp(k1, k1b) == 0, "second bootstrap kept the key");
	/* file gone but keys exist: a fresh admin key, same admin tenant */
	unlink(cli_path);
	CHECK(api_bootstrap(db_path, cli_path, "http://127.0.0.1:7070", &err) == 0, "%s", err.msg);
	k2 = read_key(cli_path);
	CHECK(k2 && k1 && strcmp(k1, k2) != 0, "new key after the file was removed");

	struct db *db = db_open(db_path, &err);
	struct db_rows rows;
	if (db && db_query(db, &rows, &err,
			   "SELECT count(*), (SELECT count(*) FROM api_keys WHERE admin = 1)"
			   " FROM tenants WHERE name = 'admin'", NULL) == 0) {
		CHECK(db_cell_int(&rows, 0, 0) == 1, "one admin tenant");
		CHECK(db_cell_int(&rows, 0, 1) == 2, "two admin keys");
		db_rows_free(&rows);
	}
	db_close(db);
}

static pid_t start_api(const char *db_path, const char *node_base, const char *addr_path)
{
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		struct api_config cfg = {
			.listen = "127.0.0.1:0",
			.db_path = db_path,
			.node_sock = node_base,
			.max_body = 4 << 20,
			.rate_per_s = 20,
			.rate_burst = 60,
			.addr_file = addr_path,
		};
		err_t err = { 0 };
		int r = api_run(&cfg, &err);
		if (r < 0)
			fprintf(stderr, "api_run: %s\n", err.msg);
		exit(r == 0 ? 0 : 1);  /* exit, not _exit: LeakSanitizer checks the api */
	}
	for (int i = 0; i < 500; i++) {
		struct buf b;
		buf_init(&b);
		if (read_file(addr_path, 256, &b) == 0 && b.len > 1) {
			b.data[strcspn(b.data, "\n")] = '\0';
			snprintf(base, sizeof(base), "http://%s", b.data);
			buf_free(&b);
			return pid;
		}
		buf_free(&b);
		usleep(10 * 1000);
	}
	fprintf(stderr, "api did not start\n");
	kill(pid, SIGKILL);
	exit(1);
}

static void test_auth(const char *admin_key)
{
	char code[64];

	CHECK(req_code("GET", "/v1/health", NULL, NULL, code, sizeof(code)) == 200, "health");
	CHECK(req_code("POST", "/v1/health", NULL, "{}", code, sizeof(code)) == 405, "health 405");
	CHECK(req_code("GET", "/v1/tenants", NULL, NULL, code, sizeof(code)) == 401 &&
	      strcmp(code, "unauthorized") == 0, "no key: %s", code);
	CHECK(req_code("GET", "/v1/tenants", "al_00000000000000000000000000000000", NULL, code,
		       sizeof(code)) == 401, "unknown key");
	CHECK(req_code("GET", "/v1/tenants", "garbage", NULL, code, sizeof(code)) == 401,
	      "garbage key");
	struct http_resp r;
	CHECK(req("GET", "/v1/tenants", NULL, "Authorization: Basic Zm9vOmJhcg==\r\n", NULL, &r) ==
	      401, "basic auth");
	CHECK(http_resp_header(&r, "WWW-Authenticate") != NULL, "WWW-Authenticate");
	http_resp_free(&r);
	CHECK(req_code("GET", "/v1/tenants", admin_key, NULL, code, sizeof(code)) == 200,
	      "admin lists tenants");
	CHECK(req_code("GET", "/v1/nope", admin_key, NULL, code, sizeof(code)) == 404 &&
	      strcmp(code, "not_found") == 0, "unknown path");
	CHECK(req_code("GET", "/v1/sandboxesX", admin_key, NULL, code, sizeof(code)) == 404,
	      "prefix is segment-exact");
	CHECK(req_code("GET", "/v1/sandboxes/../tenants", admin_key, NULL, code, sizeof(code)) ==
	      404, "dot segments");
	CHECK(req_code("DELETE", "/v1/tenants", admin_key, NULL, code, sizeof(code)) == 405 &&
	      strcmp(code, "method_not_allowed") == 0, "405: %s", code);
	CHECK(req_code("PATCH", "/v1/keys", admin_key, NULL, code, sizeof(code)) == 405, "keys 405");
	CHECK(req_code("GET", "/v1/keys/key_x", admin_key, NULL, code, sizeof(code)) == 405,
	      "a key has DELETE only");
}

/* Returns a non-admin key of a new tenant "acme" (caller owns), and its id. */
static char *test_admin(const char *admin_key, char *tenant_id, size_t tid_len)
{
	char code[64];
	struct http_resp r;
	char *key = NULL;
	json *j;

	CHECK(req("POST", "/v1/tenants", admin_key, NULL, "{\"name\":\"acme\"}", &r) == 201,
	      "create tenant: %d %s", r.status, r.body.data);
	j = body_json(&r);
	CHECK(j && json_get_str(j, "id") && json_get_str(j, "created_at") &&
	      strcmp(json_get_str(j, "name"), "acme") == 0, "tenant object");
	snprintf(tenant_id, tid_len, "%s", j && json_get_str(j, "id") ? json_get_str(j, "id") : "");
	json_free(j);
	http_resp_free(&r);

	CHECK(req_code("POST", "/v1/tenants", admin_key, "{\"name\":\"acme\"}", code,
		       sizeof(code)) == 409 && strcmp(code, "conflict") == 0, "dup: %s", code);
	CHECK(req_code("POST", "/v1/tenants", admin_key, "{\"name\":", code, sizeof(code)) == 400 &&
	      strcmp(code, "invalid_json") == 0, "bad json: %s", code);
	CHECK(req_code("POST", "/v1/tenants", admin_key, "[1]", code, sizeof(code)) == 400 &&
	      strcmp(code, "invalid_json") == 0, "not an object: %s", code);
	CHECK(req_code("POST", "/v1/tenants", admin_key, "", code, sizeof(code)) == 400,
	      "empty body");
	CHECK(req_code("POST", "/v1/tenants", admin_key, "{\"name\":\"b\",\"x\":1}", code,
		       sizeof(code)) == 400 && strcmp(code, "unknown_field") == 0,
	      "unknown field: %s", code);
	CHECK(req_code("POST", "/v1/tenants", admin_key, "{\"name\":5}", code, sizeof(code)) ==
	      400 && strcmp(code, "invalid_field") == 0, "wrong type: %s", code);
	CHECK(req_code("POST", "/v1/tenants", admin_key, "{\"name\":\"a b\"}", code,
		       sizeof(code)) == 400 && strcmp(code, "invalid_field") == 0, "bad name");
	CHECK(req_code("POST", "/v1/tenants", admin_key, "{}", code, sizeof(code)) == 400 &&
	      strcmp(code, "invalid_field") == 0, "missing name");
	CHECK(req_code("POST", "/v1/keys", admin_key, "{\"tenant\":\"acme\",\"admin\":\"yes\"}",
		       code, sizeof(code)) == 400 && strcmp(code, "invalid_field") == 0,
	      "admin must be bool: %s", code);
	CHECK(req_code("POST", "/v1/keys", admin_key, "{\"tenant\":\"nope\"}", code,
		       sizeof(code)) == 404, "unknown tenant");
	CHECK(req_code("POST", "/v1/keys", admin_key, "{\"tenant\":\"acme\",\"zzz\":true}", code,
		       sizeof(code)) == 400 && strcmp(code, "unknown_field") == 0, "keys unknown");

	/* by name; then by id */
	CHECK(req("POST", "/v1/keys", admin_key, NULL, "{\"tenant\":\"acme\",\"name\":\"ci\"}",
		  &r) == 201, "create key: %d %s", r.status, r.body.data);
	j = body_json(&r);
	if (j && json_get_str(j, "key"))
		key = xstrdup(json_get_str(j, "key"));
	CHECK(key && api_key_well_formed(key), "key shape");
	CHECK(j && json_get_str(j, "tenant") && strcmp(json_get_str(j, "tenant"), tenant_id) == 0,
	      "key tenant");
	json_free(j);
	http_resp_free(&r);
	_cleanup_free_ char *by_id = xasprintf("{\"tenant\":\"%s\",\"admin\":false}", tenant_id);
	CHECK(req_code("POST", "/v1/keys", admin_key, by_id, code, sizeof(code)) == 201,
	      "key by tenant id");

	CHECK(req("GET", "/v1/tenants", admin_key, NULL, NULL, &r) == 200, "list");
	j = body_json(&r);
	const json *list = j ? json_get(j, "tenants") : NULL;
	CHECK(list && list->type == JSON_ARR && list->n == 3, "three tenants (unit, admin, acme)");
	json_free(j);
	http_resp_free(&r);

	/* the tenant's quota: GET and PUT by id or name, bad bodies 400 */
	_cleanup_free_ char *qpath = xasprintf("/v1/tenants/%s/quota", tenant_id);
	CHECK(req("GET", qpath, admin_key, NULL, NULL, &r) == 200, "quota get");
	j = body_json(&r);
	const json *qq = j ? json_get(j, "quota") : NULL;
	CHECK(qq && json_get(qq, "sandboxes") && json_get(qq, "sandboxes")->type == JSON_NULL,
	      "no limit by default");
	json_free(j);
	http_resp_free(&r);
	CHECK(req("PUT", "/v1/tenants/acme/quota", admin_key, NULL,
		  "{\"sandboxes\":3,\"cpus\":2.5,\"snapshot_mb\":null}", &r) == 200, "quota put");
	j = body_json(&r);
	qq = j ? json_get(j, "quota") : NULL;
	CHECK(qq && json_get(qq, "sandboxes") && json_get(qq, "sandboxes")->i == 3 &&
	      json_get(qq, "cpus") && json_get(qq, "cpus")->num == 2.5 &&
	      json_get(qq, "snapshot_mb")->type == JSON_NULL, "quota as put");
	CHECK(j && json_get(j, "usage") && json_get(json_get(j, "usage"), "sandboxes")->i == 0,
	      "usage");
	json_free(j);
	http_resp_free(&r);
	static const char *const bad_quota[] = { "{\"sandboxes\":-1}", "{\"sandboxes\":\"1\"}",
						 "{\"memory_mb\":1.5}", "{\"cpus\":-2}",
						 "{\"x\":1}", "[1]", "{\"disk_mb\":1e30}" };
	for (size_t i = 0; i < ARRAY_SIZE(bad_quota); i++)
		CHECK(req_code("PUT", qpath, admin_key, bad_quota[i], code, sizeof(code)) == 400,
		      "bad quota %s: %s", bad_quota[i], code);
	CHECK(req_code("GET", "/v1/tenants/nobody/quota", admin_key, NULL, code,
		       sizeof(code)) == 404, "unknown tenant");
	CHECK(req_code("GET", "/v1/tenants/acme", admin_key, NULL, code, sizeof(code)) == 405 &&
	      req_code("GET", "/v1/tenants/acme/quota/x", admin_key, NULL, code,
		       sizeof(code)) == 404 &&
	      req_code("GET", "/v1/tenants//quota", admin_key, NULL, code, sizeof(code)) != 200,
	      "other paths under /v1/tenants");
	CHECK(req_code("DELETE", qpath, admin_key, NULL, code, sizeof(code)) == 405, "405");
	CHECK(req_code("PUT", qpath, admin_key, "{}", code, sizeof(code)) == 200, "all limits off");

	/* a tenant key is not an admin */
	if (key) {
		CHECK(req_code("GET", qpath, key, NULL, code, sizeof(code)) == 403 &&
		      req_code("PUT", qpath, key, "{\"sandboxes\":99}", code, sizeof(code)) == 403,
		      "the quota is admin-only");
		CHECK(req_code("GET", "/v1/tenants", key, NULL, code, sizeof(code)) == 403 &&
		      strcmp(code, "forbidden") == 0, "403: %s", code);
		CHECK(req_code("POST", "/v1/keys", key, "{\"tenant\":\"acme\",\"admin\":true}",
			       code, sizeof(code)) == 403, "no self-promotion");
		CHECK(req_code("GET", "/v1/node", key, NULL, code, sizeof(code)) == 403,
		      "node is admin-only");
		CHECK(req_code("POST", "/v1/templates", key, "{\"name\":\"t\"}", code,
			       sizeof(code)) == 403, "template build is admin-only");
	}
	return key;
}

static void test_forward(const char *key, const char *tenant_id, const char *admin_key)
{
	struct http_resp r;
	char code[64];
	json *j;

	/* identity comes from the key; the client's X-Airlock-* are not trusted */
	CHECK(req("POST", "/v1/sandboxes?x=1", key,
		  "X-Airlock-Tenant: ten_evil\r\nX-Airlock-Admin: 1\r\nIdempotency-Key: abc\r\n"
		  "Content-Type: application/json\r\nX-Other: 1\r\n",
		  "{\"template\":\"debian\"}", &r) == 200, "forward: %d", r.status);
	j = body_json(&r);
	CHECK(j && strcmp(json_get_str(j, "tenant") ?: "", tenant_id) == 0, "tenant %s",
	      j ? json_get_str(j, "tenant") : "?");
	CHECK(j && strcmp(json_get_str(j, "admin") ?: "", "0") == 0, "admin 0");
	CHECK(j && json_get_int(j, "n_tenant", -1, NULL) == 1, "exactly one tenant header");
	CHECK(j && strcmp(json_get_str(j, "method") ?: "", "POST") == 0, "method");
	CHECK(j && strcmp(json_get_str(j, "target") ?: "", "/v1/sandboxes?x=1") == 0, "target");
	CHECK(j && strcmp(json_get_str(j, "idem") ?: "", "abc") == 0, "idempotency key");
	CHECK(j && strcmp(json_get_str(j, "ctype") ?: "", "application/json") == 0, "ctype");
	CHECK(j && json_get_str(j, "auth") == NULL, "the API key is not passed on");
	CHECK(j && strcmp(json_get_str(j, "body") ?: "", "{\"template\":\"debian\"}") == 0,
	      "body");
	CHECK(http_resp_header(&r, "X-Node-Extra") != NULL, "node headers are relayed");
	json_free(j);
	http_resp_free(&r);

	CHECK(req("GET", "/v1/node", admin_key, NULL, NULL, &r) == 200, "node");
	j = body_json(&r);
	CHECK(j && strcmp(json_get_str(j, "admin") ?: "", "1") == 0, "admin 1 for /v1/node");
	json_free(j);
	http_resp_free(&r);

	CHECK(req("GET", "/v1/templates", key, NULL, NULL, &r) == 200, "templates forwarded");
	http_resp_free(&r);
	CHECK(req("DELETE", "/v1/sandboxes/s3", key, NULL, NULL, &r) == 204, "204 relayed");
	http_resp_free(&r);
	CHECK(req_code("GET", "/v1/sandboxes/missing", key, NULL, code, sizeof(code)) == 404 &&
	      strcmp(code, "not_found") == 0, "node errors relayed");
	CHECK(req_code("POST", "/v1/sandboxes", key, "x", code, sizeof(code)) == 200,
	      "the node, not the api, validates sandbox bodies");
}

struct stream_seen {
	int chunks;
	bool early_ok;    /* the first chunk came before the node finished */
	struct buf all;
};

static int s_data(void *arg, const void *p, size_t n)
{
	struct stream_seen *s = arg;

	buf_add(&s->all, p, n);
	if (s->chunks++ == 0) {
		pthread_mutex_lock(&fake.mu);
		s->early_ok = !fake.finished_early;
		fake.release = true;
		pthread_cond_broadcast(&fake.cv);
		pthread_mutex_unlock(&fake.mu);
	}
	return 0;
}

static void test_stream(const char *key)
{
	static const struct http_stream_cbs cbs = { .on_data = s_data };
	struct stream_seen s = { 0 };
	_cleanup_free_ char *hdr = xasprintf("Authorization: Bearer %s\r\n", key);
	err_t err = { 0 };

	buf_init(&s.all);
	int r = http_request_stream(base, "POST", "/v1/sandboxes/s1/exec", hdr, "{}", 2, &cbs, &s,
				    &err);
	CHECK(r == 0, "stream: %s", err.msg);
	CHECK(s.early_ok && !fake.finished_early, "first chunk arrived before the node finished");
	CHECK(s.all.data && strstr(s.all.data, "\"exit\""), "whole stream relayed");
	buf_free(&s.all);
}

/* A raw client that reads the start of a stream and hangs up: the api must
 * notice on its next write and abort the upstream request. */
static void test_client_gone(const char *key)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	char host[64], got[512];
	const char *colon;
	int fd, port;
	size_t n = 0;

	colon = strrchr(base, ':');
	snprintf(host, sizeof(host), "%.*s", (int)(colon - base - 7), base + 7);
	port = atoi(colon + 1);
	sa.sin_port = htons((uint16_t)port);
	inet_pton(AF_INET, host, &sa.sin_addr);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct timeval tv = { .tv_sec = 5 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	CHECK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect");
	_cleanup_free_ char *rq = xasprintf("POST /v1/sandboxes/s2/exec HTTP/1.1\r\nHost: x\r\n"
					    "Authorization: Bearer %s\r\nContent-Length: 2\r\n\r\n{}",
					    key);
	CHECK(write_all(fd, rq, strlen(rq)) == 0, "send");
	while (n < sizeof(got) - 1) {
		ssize_t k = read(fd, got + n, sizeof(got) - 1 - n);
		if (k <= 0)
			break;
		n += (size_t)k;
		got[n] = '\0';
		if (strstr(got, "\"n\":1}"))
			break;
	}
	CHECK(strstr(got, "200") && strstr(got, "chunked"), "stream started: %.100s", got);
	close(fd);

	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 5;
	pthread_mutex_lock(&fake.mu);
	while (!fake.upstream_aborted)
		if (pthread_cond_timedwait(&fake.cv, &fake.mu, &dl) == ETIMEDOUT)
			break;
	CHECK(fake.upstream_aborted, "upstream aborted after the client left");
	pthread_mutex_unlock(&fake.mu);
}

static void test_rate_limit(const char *key)
{
	struct http_resp r;
	int st = 0, i;

	/* burst 60 at 20/s: well within 200 quick requests it must trip */
	for (i = 0; i < 200; i++) {
		st = req("GET", "/v1/tenants", key, NULL, NULL, &r);
		if (st == 429)
			break;
		http_resp_free(&r);
	}
	CHECK(st == 429, "429 after %d requests", i);
	if (st == 429) {
		const char *ra = http_resp_header(&r, "Retry-After");
		CHECK(ra && atoi(ra) >= 1, "Retry-After %s", ra ? ra : "(none)");
		CHECK(strstr(r.body.data, "rate_limited") != NULL, "code");
		http_resp_free(&r);
	}
}

/* max_body is 4 MiB here: JSON bodies stop at 1 MiB, file writes at 4. */
static void test_body_limit(const char *admin_key, const char *key, bool node_up)
{
	size_t n = (5u << 20);
	char *big = xmalloc(n + 1);
	char code[64];

	memset(big, ' ', n);
	big[n] = '\0';
	CHECK(req_code("POST", "/v1/tenants", admin_key, big, code, sizeof(code)) == 413,
	      "over max_body");
	big[2u << 20] = '\0';
	CHECK(req_code("POST", "/v1/tenants", admin_key, big, code, sizeof(code)) == 413 &&
	      strcmp(code, "body_too_large") == 0, "JSON over 1 MiB: %s", code);
	CHECK(req_code("POST", "/v1/sandboxes/s4/exec", key, big, code, sizeof(code)) == 413,
	      "forwarded JSON over 1 MiB");
	if (node_up)
		CHECK(req_code("PUT", "/v1/sandboxes/s4/files?path=/x", key, big, code,
			       sizeof(code)) == 200, "a 2 MiB file write is forwarded");
	free(big);
}

int main(void)
{
	char db_path[128], cli_path[128], node_path[128], node_base[140], addr_path[128];
	_cleanup_free_ char *admin_key = NULL, *key = NULL;
	char tenant_id[64] = "", code[64];
	struct http_server *node;
	err_t err = { 0 };
	int status;
	pid_t api;

	log_init("test-api", getenv("AIRLOCK_DEBUG") ? LOG_DEBUG : LOG_ERR);
	signal(SIGPIPE, SIG_IGN);
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test-api-XXXXXX");
	if (!mkdtemp(tmpdir))
		return 1;
	snprintf(db_path, sizeof(db_path), "%s/airlock.db", tmpdir);
	snprintf(cli_path, sizeof(cli_path), "%s/cli.json", tmpdir);
	snprintf(node_path, sizeof(node_path), "%s/node.sock", tmpdir);
	snprintf(node_base, sizeof(node_base), "unix:%s", node_path);
	snprintf(addr_path, sizeof(addr_path), "%s/api.addr", tmpdir);

	test_units(db_path);
	test_port_parsers();
	test_bootstrap(db_path, cli_path);
	admin_key = read_key(cli_path);
	if (!admin_key)
		return 1;

	/* fork before this process has threads (the fake node has some) */
	api = start_api(db_path, node_base, addr_path);
	test_auth(admin_key);
	key = test_admin(admin_key, tenant_id, sizeof(tenant_id));
	if (!key)
		key = xstrdup("al_00000000000000000000000000000000");

	/* no node yet: 503 */
	CHECK(req_code("GET", "/v1/sandboxes", key, NULL, code, sizeof(code)) == 503 &&
	      strcmp(code, "unavailable") == 0, "503 without node: %s", code);

	node = http_server_start(node_base, 8 << 20, fake_handler, NULL, &err);
	CHECK(node, "fake node: %s", err.msg);
	if (node) {
		test_forward(key, tenant_id, admin_key);
		test_stream(key);
		test_client_gone(key);
	}
	test_body_limit(admin_key, key, node != NULL);
	test_rate_limit(key);

	kill(api, SIGTERM);
	CHECK(waitpid(api, &status, 0) == api && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "api exits 0 on SIGTERM (status %#x)", status);
	http_server_stop(node);

	if (!failures) {
		_cleanup_free_ char *cmd = xasprintf("rm -rf '%s'", tmpdir);
		(void)!system(cmd);
		printf("test-api: all passed\n");
		return 0;
	}
	fprintf(stderr, "test-api: %d failure(s); files in %s\n", failures, tmpdir);
	return 1;
}
