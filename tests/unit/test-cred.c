/* Credentials: sealed boxes, the local vault, validation, scope resolution,
 * placeholders. Uses a real SQLite file in a temp directory. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/cred/cred.h"
#include "../../src/cred/seal.h"
#include "../../src/cred/vault.h"
#include "check.h"

static void test_seal(void)
{
	struct seal_key k, other, pub_only;
	struct buf box, out;
	const char secret[] = "sk-live-0123456789";

	CHECK(seal_keygen(&k, NULL) == 0);
	CHECK(seal_keygen(&other, NULL) == 0);
	memset(&pub_only, 0, sizeof(pub_only));
	memcpy(pub_only.pub, k.pub, SEAL_KEY_LEN);
	buf_init(&box);
	buf_init(&out);
	CHECK(seal_box(&pub_only, "ref:1", 5, secret, strlen(secret), &box, NULL) == 0);
	CHECK(box.len == strlen(secret) + SEAL_OVERHEAD);
	CHECK(memmem(box.data, box.len, secret, strlen(secret)) == NULL);
	/* opens with the key and the same aad only */
	CHECK(seal_open(&k, "ref:1", 5, box.data, box.len, &out, NULL) == 0);
	CHECK(out.len == strlen(secret) && memcmp(out.data, secret, out.len) == 0);
	buf_reset(&out);
	CHECK(seal_open(&k, "ref:2", 5, box.data, box.len, &out, NULL) == -EBADMSG);
	CHECK(seal_open(&other, "ref:1", 5, box.data, box.len, &out, NULL) == -EBADMSG);
	CHECK(seal_open(&pub_only, "ref:1", 5, box.data, box.len, &out, NULL) == -ENOKEY);
	/* every single-byte change is caught */
	for (size_t i = 0; i < box.len; i++) {
		box.data[i] ^= 0x01;
		CHECK(seal_open(&k, "ref:1", 5, box.data, box.len, &out, NULL) < 0);
		box.data[i] ^= 0x01;
	}
	CHECK(seal_open(&k, "ref:1", 5, box.data, 10, &out, NULL) == -EBADMSG);
	CHECK(out.len == 0);
	/* two boxes of one secret differ (fresh ephemeral key and nonce) */
	{
		struct buf b2;
		buf_init(&b2);
		CHECK(seal_box(&k, "ref:1", 5, secret, strlen(secret), &b2, NULL) == 0);
		CHECK(b2.len == box.len && memcmp(b2.data, box.data, box.len) != 0);
		buf_free(&b2);
	}
	/* empty secret */
	buf_reset(&box);
	CHECK(seal_box(&k, "", 0, "", 0, &box, NULL) == 0);
	CHECK(seal_open(&k, "", 0, box.data, box.len, &out, NULL) == 0 && out.len == 0);
	buf_free(&box);
	buf_free(&out);
}

static json *parse(const char *s)
{
	return json_parse(s, strlen(s), NULL);
}

static int spec(const char *s, struct cred *c)
{
	json *j = parse(s);
	err_t err = { 0 };
	int r;

	memset(c, 0, sizeof(*c));
	r = j ? cred_parse_spec(j, c, &err) : -999;
	json_free(j);
	return r;
}

static void test_spec(void)
{
	struct cred c;

	CHECK(spec("{\"name\":\"openai\",\"env\":\"OPENAI_API_KEY\",\"inject\":{\"type\":\"header\"},"
		   "\"hosts\":[\"API.openai.com\",\"*.example.com\"]}", &c) == 0);
	CHECK(c.inject == CRED_HEADER && strcmp(c.header, "Authorization") == 0 &&
	      strcmp(c.format, "Bearer {value}") == 0);
	CHECK(c.n_hosts == 2 && strcmp(c.hosts[0], "api.openai.com") == 0);
	cred_free(&c);
	CHECK(spec("{\"name\":\"gh\",\"inject\":{\"type\":\"basic\",\"username\":\"x-access-token\"},"
		   "\"hosts\":[\"github.com\"],\"methods\":[\"get\"],\"path_prefix\":\"/repos/\","
		   "\"rate_limit\":{\"per_minute\":5},\"expires_at\":\"2030-01-02T03:04:05Z\"}",
		   &c) == 0);
	CHECK(c.inject == CRED_BASIC && strcmp(c.methods[0], "GET") == 0 && c.rate_per_min == 5);
	CHECK(c.expires_at == 1893553445000LL);
	CHECK(c.replace_in == 0);    /* default: only where inject says */
	cred_free(&c);
	CHECK(spec("{\"name\":\"e\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],"
		   "\"replace_in\":[\"target\",\"headers\",\"body\"]}", &c) == 0);
	CHECK(c.replace_in == (CRED_REPLACE_HEADERS | CRED_REPLACE_BODY | CRED_REPLACE_TARGET));
	cred_free(&c);
	CHECK(spec("{\"name\":\"e\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],"
		   "\"replace_in\":[]}", &c) == 0 && c.replace_in == 0);
	cred_free(&c);
	/* schemes and ports: https to 443 unless named; a scheme's own port
	 * when only schemes are */
	CHECK(spec("{\"name\":\"t\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"]}",
		   &c) == 0);
	CHECK(c.transport.schemes == CRED_SCHEME_HTTPS && c.transport.n_ports == 1 &&
	      c.transport.ports[0] == 443);
	CHECK(cred_transport_ok(&c.transport, CRED_SCHEME_HTTPS, 443));
	CHECK(!cred_transport_ok(&c.transport, CRED_SCHEME_HTTP, 443));
	CHECK(!cred_transport_ok(&c.transport, CRED_SCHEME_HTTPS, 8443));
	CHECK(!cred_transport_ok(&c.transport, CRED_SCHEME_HTTP | CRED_SCHEME_HTTPS, 443));
	CHECK(!cred_transport_ok(&c.transport, 0, 443));
	cred_free(&c);
	CHECK(spec("{\"name\":\"t\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],"
		   "\"schemes\":[\"https\",\"http\"]}", &c) == 0);
	CHECK(c.transport.schemes == (CRED_SCHEME_HTTP | CRED_SCHEME_HTTPS) &&
	      c.transport.n_ports == 2 && c.transport.ports[0] == 80 && c.transport.ports[1] == 443);
	CHECK(cred_transport_ok(&c.transport, CRED_SCHEME_HTTP, 80));
	cred_free(&c);
	CHECK(spec("{\"name\":\"t\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],"
		   "\"schemes\":[\"http\"],\"ports\":[8080, 80],\"methods\":null}", &c) == 0);
	CHECK(c.transport.schemes == CRED_SCHEME_HTTP && c.transport.n_ports == 2);
	CHECK(cred_transport_ok(&c.transport, CRED_SCHEME_HTTP, 8080) &&
	      !cred_transport_ok(&c.transport, CRED_SCHEME_HTTPS, 8080));
	cred_free(&c);
	CHECK(spec("{\"name\":\"t\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],"
		   "\"schemes\":null,\"ports\":[8443]}", &c) == 0);
	CHECK(c.transport.schemes == CRED_SCHEME_HTTPS &&
	      cred_transport_ok(&c.transport, CRED_SCHEME_HTTPS, 8443) &&
	      !cred_transport_ok(&c.transport, CRED_SCHEME_HTTPS, 443));
	cred_free(&c);
	{
		/* what the API shows */
		struct buf b;
		struct jw w;

		CHECK(spec("{\"name\":\"t\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],"
			   "\"schemes\":[\"https\",\"http\"],\"ports\":[443,80]}", &c) == 0);
		c.id = xstrdup("cred_t");
		buf_init(&b);
		jw_init(&w, &b);
		cred_write(&w, &c);
		CHECK(strstr(b.data, "\"schemes\":[\"http\",\"https\"],\"ports\":[443,80]") != NULL);
		buf_free(&b);
		cred_free(&c);
	}
	/* each of these is refused with a message */
	static const char *const bad[] = {
		"{\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"]}",
		"{\"name\":\"a b\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"]}",
		"{\"name\":\"a\",\"hosts\":[\"a.com\"]}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"magic\"},\"hosts\":[\"a.com\"]}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\",\"format\":\"Bearer\"},\"hosts\":[\"a.com\"]}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\",\"format\":\"{value}\\r\\nX: {value}\"},\"hosts\":[\"a.com\"]}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\",\"header\":\"Bad Header\"},\"hosts\":[\"a.com\"]}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"basic\"},\"hosts\":[\"a.com\"]}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"query\"},\"hosts\":[\"a.com\"]}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[]}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a..com\"]}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"*\"]}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],\"env\":\"1X\"}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],\"path_prefix\":\"x\"}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],\"expires_at\":\"tomorrow\"}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],\"rate_limit\":{\"per_minute\":-1}}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\",\"extra\":1},\"hosts\":[\"a.com\"]}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],\"replace_in\":[\"query\"]}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],\"replace_in\":[\"body\",\"body\"]}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],\"replace_in\":\"body\"}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],\"replace_in\":[1]}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],\"path_prefix\":\"/a/%2F\"}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],\"path_prefix\":\"/a?b\"}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],\"path_prefix\":\"/a//b\"}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],\"schemes\":[]}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],\"schemes\":\"http\"}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],\"schemes\":[\"ftp\"]}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],\"schemes\":[\"HTTP\"]}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],\"schemes\":[\"http\",\"http\"]}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],\"schemes\":[1]}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],\"ports\":[]}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],\"ports\":443}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],\"ports\":[0]}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],\"ports\":[65536]}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],\"ports\":[-443]}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],\"ports\":[443.5]}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],\"ports\":[\"443\"]}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],\"ports\":[443,443]}",
		"{\"name\":\"a\",\"inject\":{\"type\":\"header\"},\"hosts\":[\"a.com\"],\"ports\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		int r = spec(bad[i], &c);
		if (r != -EINVAL)
			fprintf(stderr, "bad spec %zu accepted (%d)\n", i, r);
		CHECK(r == -EINVAL);
		cred_free(&c);
	}
}

/* path_prefix matches whole segments after normalising both sides. */
static void test_path_match(void)
{
	static const struct {
		const char *prefix, *target;
		bool match;
	} cases[] = {
		{ "/v1", "/v1", true },
		{ "/v1", "/v1/", true },
		{ "/v1", "/v1/chat?x=1", true },
		{ "/v1", "/v1?x=/v10", true },
		{ "/v1/", "/v1/chat", true },
		{ "/v1/", "/v1", true },
		{ "/v1", "/v10", false },
		{ "/v1", "/v1x/y", false },
		{ "/v1", "/v1/../admin", false },
		{ "/v1", "/v1/%2e%2e/admin", false },
		{ "/v1", "/v1/%2E%2E/admin", false },
		{ "/v1", "/v1/.%2e/admin", false },
		{ "/v1", "/v1/x/../../admin", false },
		{ "/v1", "/v1/x/../y", true },
		{ "/v1", "/./v1/./x", true },
		{ "/v1", "/admin/../v1/x", true },
		{ "/v1", "/../v1/x", true },        /* above the root stays at the root */
		{ "/v1", "/%76%31/x", true },       /* unreserved decoded */
		{ "/v1", "/V1/x", false },
		{ "/v1", "/v1%2Fx", false },        /* encoded slash: never */
		{ "/v1", "/v1/x%2f..%2f..%2fadmin", false },
		{ "/v1", "/v1/x%5C..", false },
		{ "/v1", "/v1\\..\\admin", false },
		{ "/v1", "/v1/..;/admin", false },  /* path parameters: never */
		{ "/v1", "/v1;x/y", false },
		{ "/v1", "/v1//../admin", false },  /* empty segment: never */
		{ "/v1", "//v1/x", false },
		{ "/v1", "/v1/%252e%252e/admin", false },   /* a server may decode twice */
		{ "/v1", "/v1/%zz", false },
		{ "/v1", "/v1/%0", false },
		{ "/v1", "/v1/%00", false },
		{ "/v1", "http://a.com/v1/x", false },  /* absolute-form */
		{ "/v1", "*", false },
		{ "/v1", "", false },
		{ "/a%20b", "/a%20b/c", true },
		{ "/a%2ab", "/a%2Ab/c", true },     /* hex case is not a difference */
		{ "/a b", "/a%20b", false },
		{ "/v1/../v2", "/v2/x", true },     /* the prefix is normalised too */
		{ "/", "/anything", true },
		{ "/", "/", true },
		{ "/repos/", "/repos/a/b", true },
		{ "/repos/", "/repository", false },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		bool m = cred_path_match(cases[i].prefix, cases[i].target);
		if (m != cases[i].match)
			fprintf(stderr, "path case %zu: %s vs %s: %d\n", i, cases[i].prefix,
				cases[i].target, m);
		CHECK(m == cases[i].match);
	}
	CHECK(cred_path_prefix_ok("/v1/"));
	CHECK(!cred_path_prefix_ok("/v1%2F"));
	CHECK(!cred_path_prefix_ok("v1"));
}

static void test_hosts(void)
{
	CHECK(host_match("api.openai.com", "api.openai.com"));
	CHECK(host_match("api.openai.com", "API.OpenAI.com."));
	CHECK(!host_match("api.openai.com", "api.openai.com.evil.net"));
	CHECK(!host_match("api.openai.com", "xapi.openai.com"));
	CHECK(host_match("*.example.com", "a.b.example.com"));
	CHECK(!host_match("*.example.com", "example.com"));
	CHECK(!host_match("*.example.com", "badexample.com"));
}

static struct cred mk(const char *id, const char *name, const char *env, int64_t created,
		      enum cred_scope kind, const char *value)
{
	struct cred c = { 0 };
	c.id = xstrdup(id);
	c.tenant = xstrdup("ten_a");
	c.name = xstrdup(name);
	c.env = env ? xstrdup(env) : NULL;
	c.inject = CRED_HEADER;
	c.header = xstrdup("Authorization");
	c.format = xstrdup("Bearer {value}");
	c.hosts = xcalloc(1, sizeof(char *));
	c.hosts[0] = xstrdup("api.example.com");
	c.n_hosts = 1;
	c.version = 1;
	c.created_at = created;
	c.binds = xcalloc(1, sizeof(*c.binds));
	c.binds[0].kind = kind;
	c.binds[0].value = value ? xstrdup(value) : NULL;
	c.n_binds = 1;
	return c;
}

static bool resolved_has(struct cred *v, size_t n, const char *id)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(v[i].id, id) == 0)
			return true;
	return false;
}

static void test_db(void)
{
	char dir[] = "/tmp/airlock-test-cred-XXXXXX";
	_cleanup_free_ char *path = NULL;
	struct cred *v = NULL;
	size_t n = 0;
	struct seal_key k;
	struct vault *vault, *store_only;
	struct buf out;
	err_t err = { 0 };
	struct db *db;

	CHECK(mkdtemp(dir) != NULL);
	path = xasprintf("%s/db", dir);
	db = db_open(path, &err);
	CHECK(db != NULL);
	if (!db)
		return;
	struct cred cs[] = {
		mk("cred_t", "t", "KEY", 1000, CRED_SCOPE_TENANT, NULL),
		mk("cred_p", "p", "KEY", 900, CRED_SCOPE_PROJECT, "alpha"),
		mk("cred_s", "s", "KEY", 800, CRED_SCOPE_SANDBOX, "sbx_1"),
		mk("cred_o", "other", "OTHER", 700, CRED_SCOPE_TENANT, NULL),
		mk("cred_x", "expired", "EXP", 600, CRED_SCOPE_TENANT, NULL),
		mk("cred_r", "revoked", "REV", 500, CRED_SCOPE_TENANT, NULL),
	};
	cs[4].expires_at = wall_ms() - 1000;
	for (size_t i = 0; i < ARRAY_SIZE(cs); i++)
		CHECK(cred_insert(db, &cs[i], &err) == 0);
	CHECK(db_exec(db, &err, "UPDATE credentials SET revoked_at = 1 WHERE id = 'cred_r'", NULL) == 1);
	/* duplicate name in one tenant */
	CHECK(cred_insert(db, &cs[0], &err) == -EEXIST);

	/* most specific wins per env name */
	CHECK(cred_resolve(db, "ten_a", "sbx_1", "alpha", &v, &n, &err) == 0);
	CHECK(n == 2 && resolved_has(v, n, "cred_s") && resolved_has(v, n, "cred_o"));
	cred_list_free(v, n);
	CHECK(cred_resolve(db, "ten_a", "sbx_2", "alpha", &v, &n, &err) == 0);
	CHECK(n == 2 && resolved_has(v, n, "cred_p"));
	cred_list_free(v, n);
	CHECK(cred_resolve(db, "ten_a", "sbx_2", NULL, &v, &n, &err) == 0);
	CHECK(n == 2 && resolved_has(v, n, "cred_t") && !resolved_has(v, n, "cred_x") &&
	      !resolved_has(v, n, "cred_r"));
	cred_list_free(v, n);
	CHECK(cred_resolve(db, "ten_b", "sbx_1", "alpha", &v, &n, &err) == 0 && n == 0);
	cred_list_free(v, n);

	/* load: tenant-scoped; the stored spec reads back */
	{
		struct cred c;
		CHECK(cred_load(db, "cred_p", "ten_b", &c, &err) == -ENOENT);
		CHECK(cred_load(db, "cred_p", "ten_a", &c, &err) == 0);
		CHECK(strcmp(c.format, "Bearer {value}") == 0 && c.n_binds == 1 &&
		      c.binds[0].kind == CRED_SCOPE_PROJECT && strcmp(c.binds[0].value, "alpha") == 0);
		cred_free(&c);
	}

	/* schemes and ports are stored and read back */
	{
		struct cred c = mk("cred_h", "h", "H", 400, CRED_SCOPE_TENANT, NULL), back;

		c.transport = (struct cred_transport){ .schemes = CRED_SCHEME_HTTP, .n_ports = 2,
						      .ports = { 80, 8080 } };
		CHECK(cred_insert(db, &c, &err) == 0);
		CHECK(cred_load(db, "cred_h", "ten_a", &back, &err) == 0);
		CHECK(back.transport.schemes == CRED_SCHEME_HTTP && back.transport.n_ports == 2 &&
		      back.transport.ports[0] == 80 && back.transport.ports[1] == 8080);
		cred_free(&back);
		cred_free(&c);
	}

	/* placeholders: stable per sandbox and credential, unique otherwise */
	{
		_cleanup_free_ char *a = cred_placeholder(db, "sbx_1", "cred_s", &err);
		_cleanup_free_ char *b = cred_placeholder(db, "sbx_1", "cred_s", &err);
		_cleanup_free_ char *c2 = cred_placeholder(db, "sbx_2", "cred_s", &err);
		CHECK(a && b && c2 && strcmp(a, b) == 0 && strcmp(a, c2) != 0);
		CHECK(a && strncmp(a, CRED_PLACEHOLDER_PREFIX, strlen(CRED_PLACEHOLDER_PREFIX)) == 0);
	}

	/* the vault: a store-only vault cannot read back; the reader can */
	CHECK(seal_keygen(&k, NULL) == 0);
	vault = vault_local_open(db, &k);
	k.have_priv = 0;
	memset(k.priv, 0, sizeof(k.priv));
	store_only = vault_local_open(db, &k);
	buf_init(&out);
	CHECK(vault_put(store_only, "cred_s:1", "hunter2-secret", 14, &err) == 0);
	CHECK(vault_get(store_only, "cred_s:1", &out, &err) == -ENOKEY);
	CHECK(vault_get(vault, "cred_s:1", &out, &err) == 0);
	CHECK(out.len == 14 && memcmp(out.data, "hunter2-secret", 14) == 0);
	CHECK(vault_get(vault, "cred_s:2", &out, &err) == -ENOENT);
	CHECK(vault_put(store_only, "cred_s:1", "again", 5, &err) == -EEXIST);
	/* a box copied to another reference does not open */
	CHECK(db_exec(db, &err, "INSERT INTO vault_secrets(ref, box, created_at) SELECT 'cred_t:1',"
		      " box, 0 FROM vault_secrets WHERE ref = 'cred_s:1'", NULL) == 1);
	CHECK(vault_get(vault, "cred_t:1", &out, &err) == -EBADMSG);
	CHECK(vault_del(vault, "cred_s:1", &err) == 0);
	CHECK(vault_get(vault, "cred_s:1", &out, &err) == -ENOENT);
	buf_free(&out);
	vault_close(vault);
	vault_close(store_only);

	for (size_t i = 0; i < ARRAY_SIZE(cs); i++)
		cred_free(&cs[i]);
	db_close(db);
	{
		_cleanup_free_ char *cmd = xasprintf("rm -rf '%s'", dir);
		CHECK(system(cmd) == 0);
	}
}

/* A credential stored before schemes and ports existed (migration 8) gets
 * the secure defaults, https to 443: the database is taken back to
 * version 7 with such a row in it, then opened again. */
static void test_old_rows(void)
{
	char dir[] = "/tmp/airlock-test-cred-old-XXXXXX";
	_cleanup_free_ char *path = NULL;
	err_t err = { 0 };
	struct cred c;
	struct db *db;

	CHECK(mkdtemp(dir) != NULL);
	path = xasprintf("%s/db", dir);
	db = db_open(path, &err);
	CHECK(db != NULL);
	if (!db)
		goto out;
	CHECK(db_exec(db, &err, "ALTER TABLE credentials DROP COLUMN schemes", NULL) >= 0);
	CHECK(db_exec(db, &err, "ALTER TABLE credentials DROP COLUMN ports", NULL) >= 0);
	/* and what the migrations after 8 added, so that reopening runs them
	 * again on a database at version 7 (the runner starts after the
	 * highest version recorded) */
	static const char *const after_8[] = { "ca_file", "pin_sha256", "client_cert",
					       "client_key", "insecure_http" };
	for (size_t i = 0; i < sizeof(after_8) / sizeof(after_8[0]); i++) {
		_cleanup_free_ char *q = xasprintf("ALTER TABLE tenant_encryption DROP COLUMN %s",
						   after_8[i]);
		CHECK(db_exec(db, &err, q, NULL) >= 0);
	}
	CHECK(db_exec(db, &err, "DELETE FROM schema_migrations WHERE version >= 8", NULL) >= 0);
	CHECK(db_exec(db, &err, "INSERT INTO credentials(id, tenant_id, name, env, spec, version,"
		      " created_at) VALUES('cred_old', 'ten_a', 'old', NULL, '{\"inject\":"
		      "{\"type\":\"header\",\"header\":\"Authorization\",\"format\":"
		      "\"Bearer {value}\"},\"hosts\":[\"a.com\"]}', 1, 1)", NULL) == 1);
	db_close(db);
	db = db_open(path, &err);
	CHECK(db != NULL);
	if (!db)
		goto out;
	CHECK(cred_load(db, "cred_old", NULL, &c, &err) == 0);
	CHECK(c.transport.schemes == CRED_SCHEME_HTTPS && c.transport.n_ports == 1 &&
	      c.transport.ports[0] == 443);
	CHECK(!cred_transport_ok(&c.transport, CRED_SCHEME_HTTP, 80));
	cred_free(&c);
	db_close(db);
out:
	{
		_cleanup_free_ char *cmd = xasprintf("rm -rf '%s'", dir);
		CHECK(system(cmd) == 0);
	}
}

int main(void)
{
	test_seal();
	test_spec();
	test_hosts();
	test_path_match();
	test_db();
	test_old_rows();
	if (failures)
		fprintf(stderr, "%d check(s) failed\n", failures);
	return failures ? 1 : 0;
}
