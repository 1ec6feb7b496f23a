/* test-http-cookie: a sandbox service's Set-Cookie made host-only (no
 * Domain attribute however it is spelled, the rest byte for byte), the
 * fields dropped whole (the proxy's own cookie name, control characters,
 * oversize), and the check that ports_domain is a site apart from the
 * API's host (lib/http-cookie.h). Exit 0 = pass. */
#include <string.h>

#include "../../src/lib/http-cookie.h"
#include "../../src/lib/util.h"
#include "check.h"

/* The rewritten value, or NULL when the field is dropped (caller frees). */
static char *rw(const char *v, size_t n)
{
	struct buf b;

	buf_init(&b);
	if (!http_setcookie_rewrite(v, n, HTTP_PORT_TOKEN_COOKIE, &b)) {
		CHECK(b.len == 0);
		buf_free(&b);
		return NULL;
	}
	buf_addc(&b, '\0');
	return buf_steal(&b);
}

static void same(const char *in, const char *want)
{
	char *got = rw(in, strlen(in));

	if (!got || strcmp(got, want) != 0) {
		fprintf(stderr, "rewrite of [%s]: [%s], want [%s]\n", in, got ? got : "(dropped)",
			want);
		failures++;
	}
	free(got);
}

static void dropped(const char *in, size_t n)
{
	char *got = rw(in, n);

	if (got) {
		fprintf(stderr, "rewrite of [%.*s]: [%s], want it dropped\n", (int)n, in, got);
		failures++;
	}
	free(got);
}

static void test_domain_removed(void)
{
	same("x=1; Domain=ports.test; Path=/", "x=1; Path=/");
	same("x=1; Path=/; Domain=.ports.test", "x=1; Path=/");
	same("x=1;domain=ports.test", "x=1");
	same("x=1; DOMAIN =ports.test ;Path=/", "x=1;Path=/");
	same("x=1;\tDomain\t=\tports.test; HttpOnly", "x=1; HttpOnly");
	same("x=1; Domain", "x=1");
	same("x=1; Domain=a.ports.test; Secure; Domain=ports.test; SameSite=Lax",
	     "x=1; Secure; SameSite=Lax");
	/* A quoted ';' is still a separator to a browser. */
	same("x=\"a;Domain=ports.test\"; Path=/", "x=\"a; Path=/");
	/* What is no Domain attribute stays. */
	same("x=1", "x=1");
	same("Domain=ports.test; Path=/", "Domain=ports.test; Path=/");
	same("x=1; Domainx=1; Path=/domain=y", "x=1; Domainx=1; Path=/domain=y");
	same("x=1; Max-Age=60; HttpOnly; SameSite=Strict", "x=1; Max-Age=60; HttpOnly; SameSite=Strict");
	same("__Host-s=abc; Path=/; Secure", "__Host-s=abc; Path=/; Secure");
	same("x=1;;; Domain=p.test;", "x=1;;;");
	same("", "");
}

static void test_dropped_whole(void)
{
	/* The proxy's cookie is never the service's to set. */
	dropped("airlock_port_token=alp_x; Path=/", 32);
	dropped(" AIRLOCK_PORT_TOKEN =alp_x", 26);
	same("airlock_port_token_x=1", "airlock_port_token_x=1");
	/* Control characters: browsers ignore or cut such a cookie. */
	dropped("x=1\r; Domain=ports.test", 23);
	dropped("x=1\n; Domain=ports.test", 23);
	dropped("x=1\0; Domain=ports.test", 23);
	dropped("x=1\x7f; Domain=ports.test", 23);
	same("x=1\t; Path=/", "x=1\t; Path=/");
	/* Oversize. */
	char *big = xmalloc(HTTP_SETCOOKIE_MAX + 2);
	memset(big, 'a', HTTP_SETCOOKIE_MAX + 1);
	big[0] = 'x', big[1] = '=';
	dropped(big, HTTP_SETCOOKIE_MAX + 1);
	big[HTTP_SETCOOKIE_MAX] = '\0';
	char *got = rw(big, HTTP_SETCOOKIE_MAX);
	CHECK(got && strlen(got) == HTTP_SETCOOKIE_MAX);
	free(got);
	free(big);
}

static bool sep(const char *ports, const char *api)
{
	char why[512] = "";
	bool ok = http_site_separate(ports, api, why, sizeof(why));

	CHECK(ok == !*why);
	return ok;
}

static void test_site(void)
{
	/* Separate registrable domains. */
	CHECK(sep("sbx-example.net", "api.example.com"));
	CHECK(sep("ports.test", "127.0.0.1"));
	CHECK(sep("ports.test", "[::1]"));
	CHECK(sep("ports.test", ""));
	CHECK(sep("ports.test", NULL));
	CHECK(sep("ports.test", "localhost"));
	CHECK(sep("a.example.net", "example.com"));
	/* Not separate. */
	CHECK(!sep("localhost", "127.0.0.1"));
	CHECK(!sep("ports", "api.example.com"));
	CHECK(!sep("", "api.example.com"));
	CHECK(!sep("api.example.com", "api.example.com"));
	CHECK(!sep("api.example.com.", "API.Example.com"));
	CHECK(!sep("example.com", "api.example.com"));
	CHECK(!sep("sbx.api.example.com", "api.example.com"));
	CHECK(!sep("sbx.example.com", "api.example.com"));
	CHECK(!sep("sbx.example.co.uk", "api.other.co.uk"));   /* said with its PSL caveat */
	CHECK(!sep("p.localhost", "localhost"));
	char why[256];
	CHECK(!http_site_separate("sbx.example.com", "api.example.com", why, sizeof(why)));
	CHECK(strstr(why, "`example.com`") != NULL);
}

static void test_url_host(void)
{
	char h[64];

	http_url_host("https://API.example.com:7070/x", h, sizeof(h));
	CHECK(strcmp(h, "api.example.com") == 0);
	http_url_host("http://api.example.com", h, sizeof(h));
	CHECK(strcmp(h, "api.example.com") == 0);
	http_url_host("0.0.0.0:7070", h, sizeof(h));
	CHECK(strcmp(h, "0.0.0.0") == 0);
	http_url_host("[::1]:7070", h, sizeof(h));
	CHECK(strcmp(h, "[::1]") == 0);
	http_url_host("unix:/run/api.sock", h, sizeof(h));
	CHECK(strcmp(h, "") == 0);
	http_url_host(NULL, h, sizeof(h));
	CHECK(strcmp(h, "") == 0);
	http_url_host("http://a-very-long-host-name.example.com", h, 8);
	CHECK(strcmp(h, "") == 0);
}

int main(void)
{
	test_domain_removed();
	test_dropped_whole();
	test_site();
	test_url_host();
	return check_done("test-http-cookie");
}
