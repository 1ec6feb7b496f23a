/* test-byok-transit: the transit key provider's channel and its answers
 * (src/byok/kms-transit.c, kms.c's conf check, lib/tls.c's client
 * options), against a stand-in key service in this process: a loopback
 * server, plain or TLS, that answers what each case sets. Certificates
 * come from the openssl CLI, made here in a temp dir.
 *
 * - config: plain http:// only to loopback unless insecure_http; the TLS
 *   settings only with https://; no packet is sent by these cases.
 * - https with the right CA (and the right pin, and a client certificate
 *   the server asks for) works; a wrong CA, a wrong pin, a certificate
 *   for another name are refused naming the check, before the token or
 *   the data key is sent.
 * - a revocation only from the service's own answer over a channel that
 *   is authenticated: a 403 from a server that fails the CA check, a
 *   proxy's HTML 403, a 400 that only mentions "not found" are
 *   unavailable (-ENOKEY), never revoked.
 * - the reserve a revocation seals under (kms_revoked_begin). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../src/byok/kms.h"
#include "../../src/lib/tls.h"
#include "../../src/lib/util.h"
#include "check.h"

static char dir[] = "/tmp/airlock-transit-XXXXXX";

static void cleanup(void)
{
	_cleanup_free_ char *cmd = xasprintf("rm -rf '%s'", dir);
	(void)!system(cmd);
}

static char *path(const char *name)
{
	return xasprintf("%s/%s", dir, name);
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd);
}

/* A CA, and a certificate it signs for the subjectAltName san. */
static void make_ca(const char *name)
{
	REQUIRE(sh("cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
		   "-keyout %s.key -out %s.pem -days 2 -subj '/CN=%s' -addext "
		   "basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign "
		   ">/dev/null 2>&1", dir, name, name, name) == 0, cleanup);
}

static void make_cert(const char *name, const char *ca, const char *san, const char *eku)
{
	REQUIRE(sh("cd %s && printf 'subjectAltName=%s\\nextendedKeyUsage=%s\\n' > %s.ext && "
		   "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout %s.key "
		   "-out %s.csr -subj /CN=%s >/dev/null 2>&1 && openssl x509 -req -in %s.csr -CA "
		   "%s.pem -CAkey %s.key -CAcreateserial -out %s.pem -days 2 -extfile %s.ext "
		   ">/dev/null 2>&1", dir, san, eku, name, name, name, name, name, ca, ca, name,
		   name) == 0, cleanup);
}

/* The SHA-256 of a certificate's DER, in hex. */
static void cert_sha(const char *name, char out[65])
{
	_cleanup_free_ char *cmd = xasprintf("openssl x509 -in %s/%s.pem -outform DER | "
					     "sha256sum", dir, name);
	FILE *f = popen(cmd, "r");

	REQUIRE(f && fscanf(f, "%64s", out) == 1, cleanup);
	pclose(f);
}

/* ---- the stand-in key service ------------------------------------------- */

struct server {
	int lfd, port;
	struct tls_ctx *tls;         /* NULL: plain http */
	int status;
	const char *body;
	int requests;                /* requests read whole */
	bool token_seen;
	volatile int stop;
	pthread_t th;
};

static void serve_one(struct server *s, int fd)
{
	char buf[8192];
	size_t len = 0;
	char *end = NULL;
	err_t err = { 0 };

	if (s->tls) {
		int pfd = tls_server_wrap(s->tls, fd, now_ms() + 5000, &err);
		if (pfd < 0) {
			close(fd);
			return;
		}
		fd = pfd;
	}
	/* the head and the small body the client sends in one go */
	while (len < sizeof(buf) - 1) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		ssize_t n;
		if (poll(&pf, 1, 5000) <= 0)
			break;
		if ((n = recv(fd, buf + len, sizeof(buf) - 1 - len, 0)) <= 0)
			break;
		len += (size_t)n;
		buf[len] = '\0';
		if ((end = strstr(buf, "\r\n\r\n"))) {
			const char *cl = strcasestr(buf, "Content-Length: ");
			size_t want = cl ? strtoul(cl + 16, NULL, 10) : 0;
			if (len >= (size_t)(end + 4 - buf) + want)
				break;
		}
	}
	if (end) {
		char head[256];
		int hn;
		s->requests++;
		s->token_seen = s->token_seen || strcasestr(buf, "X-Vault-Token:");
		hn = snprintf(head, sizeof(head), "HTTP/1.1 %d X\r\nContent-Type: application/json"
			      "\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", s->status,
			      strlen(s->body));
		(void)!send(fd, head, (size_t)hn, MSG_NOSIGNAL);
		(void)!send(fd, s->body, strlen(s->body), MSG_NOSIGNAL);
	}
	close(fd);
}

static void *serve(void *arg)
{
	struct server *s = arg;

	while (!s->stop) {
		struct pollfd pf = { .fd = s->lfd, .events = POLLIN };
		int fd;
		if (poll(&pf, 1, 100) <= 0)
			continue;
		if ((fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0)
			serve_one(s, fd);
	}
	return NULL;
}

/* A server with a certificate (NULL: plain), optionally asking for a
 * client certificate of client_ca. */
static void server_start(struct server *s, const char *cert, const char *client_ca)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	err_t err = { 0 };

	memset(s, 0, sizeof(*s));
	s->status = 200;
	s->body = "{\"data\":{\"ciphertext\":\"vault:v1:AAAA\"}}";
	if (cert) {
		_cleanup_free_ char *c = xasprintf("%s/%s.pem", dir, cert);
		_cleanup_free_ char *k = xasprintf("%s/%s.key", dir, cert);
		s->tls = tls_server_ctx(c, k, &err);
		REQUIRE(s->tls, cleanup);
		if (client_ca) {
			_cleanup_free_ char *ca = xasprintf("%s/%s.pem", dir, client_ca);
			SSL_CTX *ctx = (SSL_CTX *)s->tls;
			REQUIRE(SSL_CTX_load_verify_locations(ctx, ca, NULL) == 1, cleanup);
			SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
		}
	}
	s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	REQUIRE(s->lfd >= 0 && bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
		listen(s->lfd, 16) == 0 && getsockname(s->lfd, (struct sockaddr *)&sa, &sl) == 0,
		cleanup);
	s->port = ntohs(sa.sin_port);
	REQUIRE(pthread_create(&s->th, NULL, serve, s) == 0, cleanup);
}

static void server_stop(struct server *s)
{
	s->stop = 1;
	pthread_join(s->th, NULL);
	close(s->lfd);
	tls_ctx_free(s->tls);
}

/* ---- the cases ---------------------------------------------------------- */

static struct kms k;
static char token_file[256];

static void conf_for(struct kms_conf *c, const char *url)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->provider, sizeof(c->provider), "transit");
	snprintf(c->url, sizeof(c->url), "%s", url);
	snprintf(c->key_name, sizeof(c->key_name), "k1");
	snprintf(c->token_file, sizeof(c->token_file), "%s", token_file);
}

static int wrap(const struct kms_conf *c, err_t *err)
{
	uint8_t dk[CRYPT_KEY_LEN] = { 1 };
	char *w = NULL;
	int r;

	memset(err, 0, sizeof(*err));
	r = kms_transit.wrap(&k, "t-1", c, dk, &w, err);
	free(w);
	if (getenv("TEST_VERBOSE"))
		fprintf(stderr, "wrap %s: %d %s\n", c->url, r, err->msg);
	return r;
}

static void config_checks(void)
{
	static const struct {
		const char *url;
		bool insecure;
		int want;
	} cases[] = {
		{ "https://kms.example:8200", false, 0 },
		{ "https://10.1.2.3", false, 0 },
		{ "http://127.0.0.1:8200", false, 0 },
		{ "http://127.9.9.9:1", false, 0 },
		{ "http://localhost:8200", false, 0 },
		{ "http://[::1]:8200", false, 0 },
		{ "unix:/run/kms.sock", false, 0 },
		{ "http://10.1.2.3:8200", false, -EINVAL },
		{ "http://kms.example:8200", false, -EINVAL },
		{ "http://128.0.0.1", false, -EINVAL },
		{ "http://localhost.evil.example", false, -EINVAL },
		{ "http://[::2]:1", false, -EINVAL },
		{ "http://10.1.2.3:8200", true, 0 },
		{ "https://kms.example", true, -EINVAL },     /* insecure on https: a mistake */
		{ "https://kms.example/v1", false, -EINVAL },
		{ "https://", false, -EINVAL },
		{ "ftp://kms.example", false, -EINVAL },
		{ "http://127.0.0.1:80@kms.example", false, -EINVAL },
		{ "http://localhost@kms.example", false, -EINVAL },
		{ "https://user@kms.example", false, -EINVAL },
		{ "https://kms.example:84x", false, -EINVAL },
		{ "https://kms.example:", false, -EINVAL },
		{ "https://[::1", false, -EINVAL },
		{ "https://[fe80::1]:8200", false, 0 },
		{ "http://127.0.0.1?x", false, -EINVAL },
	};
	struct kms_conf c;
	err_t err = { 0 };

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		conf_for(&c, cases[i].url);
		c.insecure_http = cases[i].insecure;
		memset(&err, 0, sizeof(err));
		int r = kms_conf_check(&c, &err);
		if (r != cases[i].want)
			fprintf(stderr, "url %s insecure %d: %d %s\n", cases[i].url,
				cases[i].insecure, r, err.msg);
		CHECK(r == cases[i].want);
	}
	conf_for(&c, "http://10.1.2.3:8200");
	CHECK(kms_conf_check(&c, &err) == -EINVAL && strstr(err.msg, "insecure_http"));
	c.insecure_http = true;
	CHECK(strcmp(kms_transport(&c), "http-insecure") == 0);
	conf_for(&c, "http://127.0.0.1:1");
	CHECK(strcmp(kms_transport(&c), "http-loopback") == 0);
	/* the TLS settings: with https only, well formed */
	snprintf(c.ca_file, sizeof(c.ca_file), "/etc/ca.pem");
	CHECK(kms_conf_check(&c, &err) == -EINVAL);
	conf_for(&c, "https://kms.example");
	CHECK(strcmp(kms_transport(&c), "https") == 0);
	snprintf(c.ca_file, sizeof(c.ca_file), "/etc/ca.pem");
	CHECK(kms_conf_check(&c, &err) == 0);
	snprintf(c.client_cert, sizeof(c.client_cert), "/etc/c.pem");
	CHECK(kms_conf_check(&c, &err) == -EINVAL);   /* no key */
	snprintf(c.client_key, sizeof(c.client_key), "/etc/c.key");
	CHECK(kms_conf_check(&c, &err) == 0);
	snprintf(c.pin_sha256, sizeof(c.pin_sha256), "abc");
	CHECK(kms_conf_check(&c, &err) == -EINVAL);
	memset(c.pin_sha256, 'a', 64);
	CHECK(kms_conf_check(&c, &err) == 0);
	c.pin_sha256[10] = 'g';
	CHECK(kms_conf_check(&c, &err) == -EINVAL);
	/* a row from before the rule: the provider refuses to use it, and
	 * sends nothing (the address is not even dialled: TEST-NET-1) */
	conf_for(&c, "http://192.0.2.1:8200");
	CHECK(wrap(&c, &err) == -ENOKEY && strstr(err.msg, "not used"));
}

static void tls_cases(void)
{
	_cleanup_free_ char *ca = path("ca.pem"), *other = path("other.pem");
	_cleanup_free_ char *cc = path("client.pem"), *ck = path("client.key");
	char url[64], pin[65], wrong_pin[65];
	struct server s;
	struct kms_conf c;
	err_t err = { 0 };

	cert_sha("server", pin);
	cert_sha("other", wrong_pin);

	/* right CA: works */
	server_start(&s, "server", NULL);
	snprintf(url, sizeof(url), "https://127.0.0.1:%d", s.port);
	conf_for(&c, url);
	snprintf(c.ca_file, sizeof(c.ca_file), "%s", ca);
	CHECK(wrap(&c, &err) == 0);
	CHECK(s.requests == 1 && s.token_seen);
	/* by name too */
	snprintf(url, sizeof(url), "https://localhost:%d", s.port);
	snprintf(c.url, sizeof(c.url), "%s", url);
	CHECK(wrap(&c, &err) == 0);
	/* the right pin: works; a wrong one: refused, naming the pin */
	snprintf(c.pin_sha256, sizeof(c.pin_sha256), "%s", pin);
	CHECK(wrap(&c, &err) == 0);
	snprintf(c.pin_sha256, sizeof(c.pin_sha256), "%s", wrong_pin);
	s.requests = 0;
	CHECK(wrap(&c, &err) == -ENOKEY && strstr(err.msg, "pinned"));
	CHECK(s.requests == 0);
	c.pin_sha256[0] = '\0';
	/* a wrong CA (and the system's, which do not know the test CA):
	 * refused naming the certificate, nothing sent */
	snprintf(c.ca_file, sizeof(c.ca_file), "%s", other);
	CHECK(wrap(&c, &err) == -ENOKEY && strstr(err.msg, "certificate"));
	c.ca_file[0] = '\0';
	CHECK(wrap(&c, &err) == -ENOKEY && strstr(err.msg, "certificate"));
	CHECK(s.requests == 0 && !strstr(err.msg, "tries"));   /* not retried */
	/* authenticated refusals, in the service's shape: revoked */
	snprintf(c.ca_file, sizeof(c.ca_file), "%s", ca);
	s.status = 403;
	s.body = "{\"errors\":[\"permission denied\"]}";
	CHECK(wrap(&c, &err) == -EKEYREVOKED);
	s.status = 400;
	s.body = "{\"errors\":[\"encryption key not found\"]}";
	CHECK(wrap(&c, &err) == -EKEYREVOKED);
	/* not in its shape: unavailable */
	s.status = 403;
	s.body = "<html><body>403 Forbidden</body></html>";
	CHECK(wrap(&c, &err) == -ENOKEY);
	s.status = 400;
	s.body = "<html>key not found, disabled, deleted</html>";
	CHECK(wrap(&c, &err) == -ENOKEY);
	s.body = "{\"errors\":\"key disabled\"}";
	CHECK(wrap(&c, &err) == -ENOKEY);
	s.body = "{\"errors\":[\"bad request\"]}";
	CHECK(wrap(&c, &err) == -ENOKEY);
	server_stop(&s);

	/* a certificate for another name: refused naming the certificate */
	server_start(&s, "elsewhere", NULL);
	snprintf(url, sizeof(url), "https://127.0.0.1:%d", s.port);
	conf_for(&c, url);
	snprintf(c.ca_file, sizeof(c.ca_file), "%s", ca);
	CHECK(wrap(&c, &err) == -ENOKEY && strstr(err.msg, "certificate") &&
	      strstr(err.msg, "mismatch"));
	CHECK(s.requests == 0);
	server_stop(&s);

	/* a spoofed revocation: a server with a certificate of another CA
	 * answering 403 in the service's own shape is not believed */
	server_start(&s, "spoof", NULL);
	s.status = 403;
	s.body = "{\"errors\":[\"key is disabled\"]}";
	snprintf(url, sizeof(url), "https://127.0.0.1:%d", s.port);
	conf_for(&c, url);
	snprintf(c.ca_file, sizeof(c.ca_file), "%s", ca);
	CHECK(wrap(&c, &err) == -ENOKEY);
	CHECK(s.requests == 0 && !s.token_seen);
	server_stop(&s);

	/* a server that asks for a client certificate */
	server_start(&s, "server", "clientca");
	snprintf(url, sizeof(url), "https://127.0.0.1:%d", s.port);
	conf_for(&c, url);
	snprintf(c.ca_file, sizeof(c.ca_file), "%s", ca);
	CHECK(wrap(&c, &err) == -ENOKEY);
	CHECK(s.requests == 0);
	snprintf(c.client_cert, sizeof(c.client_cert), "%s", cc);
	snprintf(c.client_key, sizeof(c.client_key), "%s", ca);   /* not its key */
	CHECK(wrap(&c, &err) == -ENOKEY && strstr(err.msg, "client"));
	snprintf(c.client_key, sizeof(c.client_key), "%s", ck);
	CHECK(wrap(&c, &err) == 0);
	CHECK(s.requests == 1);
	server_stop(&s);

	/* plain http on loopback: a 400 that merely mentions "not found" is
	 * not a revocation (before, any such body was) */
	server_start(&s, NULL, NULL);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", s.port);
	conf_for(&c, url);
	s.status = 400;
	s.body = "<html>404 page not found</html>";
	CHECK(wrap(&c, &err) == -ENOKEY);
	s.body = "{\"errors\":[\"key is disabled\"]}";
	CHECK(wrap(&c, &err) == -EKEYREVOKED);
	server_stop(&s);
}

/* The reserve (kms.h kms_revoked_begin), with the local provider on a
 * SQLite database: a good check keeps its probe; while the tenant is
 * sealing, each new data key is that key under a reference of its own,
 * and opens later through the provider (its wrapping was made while the
 * key was good); another tenant is not touched; after the end there is no
 * reserve and new keys are fresh again. */
static void reserve(void)
{
	_cleanup_free_ char *dbp = path("db.sqlite"), *kd = path("keys");
	uint8_t r1[CRYPT_REF_LEN], r2[CRYPT_REF_LEN], r3[CRYPT_REF_LEN];
	struct dkey *a = NULL, *b = NULL, *o = NULL, *g = NULL, *f = NULL;
	struct kms rk;
	err_t err = { 0 };
	struct db *db = db_open(dbp, &err);

	REQUIRE(db != NULL, cleanup);
	CHECK(kms_init(&rk, db, kd, 60, &err) == 0);
	CHECK(!kms_revoked_begin(&rk, "t-1"));   /* never seen good: nothing to seal under */
	CHECK(kms_tenant_check(&rk, "t-1", &err) == 0);
	CHECK(kms_revoked_begin(&rk, "t-1"));
	CHECK(kms_data_key_new(&rk, "t-1", "sb-a", "su-1", r1, &a, &err) == 0);
	CHECK(kms_data_key_new(&rk, "t-1", "sb-b", "su-2", r2, &b, &err) == 0);
	CHECK(a && b && memcmp(r1, r2, CRYPT_REF_LEN) != 0 &&
	      memcmp(a->k, b->k, CRYPT_KEY_LEN) == 0);
	CHECK(kms_data_key_new(&rk, "t-2", "sb-c", "su-3", r3, &o, &err) == 0);
	CHECK(o && memcmp(o->k, a->k, CRYPT_KEY_LEN) != 0);
	kms_revoked_end(&rk, "t-1");
	CHECK(!kms_revoked_begin(&rk, "t-1"));
	CHECK(kms_data_key_get(&rk, "t-1", r2, &g, &err) == 0 && g &&
	      memcmp(g->k, a->k, CRYPT_KEY_LEN) == 0);
	CHECK(kms_data_key_new(&rk, "t-1", "sb-a", "su-4", r3, &f, &err) == 0);
	CHECK(f && memcmp(f->k, a->k, CRYPT_KEY_LEN) != 0);
	dkey_free(a);
	dkey_free(b);
	dkey_free(o);
	dkey_free(g);
	dkey_free(f);
	kms_fini(&rk);
	db_close(db);
}

int main(void)
{
	err_t err = { 0 };
	FILE *f;

	/* as the daemons do: a peer gone is an error of the write, not a signal
	 * (a TLS relay writes with OpenSSL) */
	signal(SIGPIPE, SIG_IGN);
	if (system("openssl version >/dev/null 2>&1") != 0) {
		fprintf(stderr, "test-byok-transit: no openssl CLI, skipped\n");
		return 77;
	}
	REQUIRE(mkdtemp(dir), cleanup);
	make_ca("ca");
	make_ca("otherca");
	make_ca("clientca");
	make_cert("server", "ca", "IP:127.0.0.1,DNS:localhost", "serverAuth");
	make_cert("elsewhere", "ca", "DNS:kms.elsewhere.test", "serverAuth");
	make_cert("other", "otherca", "IP:127.0.0.1,DNS:localhost", "serverAuth");
	make_cert("spoof", "otherca", "IP:127.0.0.1,DNS:localhost", "serverAuth");
	make_cert("client", "clientca", "DNS:node.test", "clientAuth");
	snprintf(token_file, sizeof(token_file), "%s/token", dir);
	REQUIRE((f = fopen(token_file, "w")) && fputs("s.test-token\n", f) >= 0 && fclose(f) == 0,
		cleanup);
	REQUIRE(kms_init(&k, NULL, dir, 0, &err) == 0, cleanup);
	k.transit_timeout_ms = 2000;
	config_checks();
	tls_cases();
	reserve();
	kms_fini(&k);
	cleanup();
	return check_done("test-byok-transit");
}
