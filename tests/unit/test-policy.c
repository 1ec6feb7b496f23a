/* test-policy: egress policy parsing and decisions, and the gateway's
 * sniffers on real inputs (a ClientHello from the fuzz corpus, HTTP heads,
 * DNS queries). */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/policy/policy.h"
#include "../../src/gateway/sniff.h"
#include "../../src/lib/util.h"
#include "check.h"

static uint32_t ip4(const char *s)
{
	struct in_addr a;

	inet_pton(AF_INET, s, &a);
	return ntohl(a.s_addr);
}

static bool decide(const char *policy_json, const struct policy_env *env, const char *host,
		   const char *ip, uint16_t port, char *rule, size_t rcap)
{
	err_t err = { 0 };
	json *j = policy_json ? json_parse(policy_json, strlen(policy_json), &err) : NULL;
	struct policy p;
	char msg[256];
	struct dest d = { .host = host, .ip = ip4(ip), .port = port };
	bool r;

	CHECK(!policy_json || j);
	CHECK(policy_parse(j, &p, msg, sizeof(msg)) == 0);
	r = policy_decide(&p, env, &d, rule, rcap);
	policy_free(&p);
	json_free(j);
	return r;
}

static bool decide6(const char *policy_json, const struct policy_env *env, const char *host,
		    const char *ip, uint16_t port, char *rule, size_t rcap)
{
	err_t err = { 0 };
	json *j = policy_json ? json_parse(policy_json, strlen(policy_json), &err) : NULL;
	struct policy p;
	struct in6_addr a;
	char msg[256];
	struct dest d = { .host = host, .port = port, .ip6 = &a };
	bool r;

	CHECK(inet_pton(AF_INET6, ip, &a) == 1);
	CHECK(!policy_json || j);
	CHECK(policy_parse(j, &p, msg, sizeof(msg)) == 0);
	r = policy_decide(&p, env, &d, rule, rcap);
	policy_free(&p);
	json_free(j);
	return r;
}

/* IPv6 destinations: special ranges, the operator's IPv6 allow list, and
 * no IPv4 cidr rule matching them. */
static void test_policy6(void)
{
	struct cidr4 *v4;
	struct cidr6 *v6, c;
	size_t n4, n6;
	struct policy_env env = { 0 };
	char rule[96];

	CHECK(cidr_parse_list("10.9.0.0/16, fd00:a1::/32", &v4, &n4, &v6, &n6) == 0);
	CHECK(n4 == 1 && n6 == 1 && v6[0].len == 32);
	free(v4);
	free(v6);
	CHECK(cidr_parse_list("10.9.0.0/16,fd00::/129", &v4, &n4, &v6, &n6) < 0);
	CHECK(cidr6_parse("fd00:a1::5/16", &c) == 0 && c.net[2] == 0 && c.len == 16);
	CHECK(cidr6_parse("nonsense/8", &c) < 0);
	CHECK(cidr_parse_list("10.9.0.0/16, fd00:a1::/32", &v4, &n4, &v6, &n6) == 0);
	env.allow_private = v4;
	env.n_allow_private = n4;
	env.allow_private6 = v6;
	env.n_allow_private6 = n6;

	CHECK(decide6(NULL, &env, "v6.example", "2606:2800:220:1::1", 443, rule, sizeof(rule)));
	CHECK(!strcmp(rule, "default"));
	CHECK(!decide6(NULL, &env, NULL, "::1", 80, rule, sizeof(rule)));
	CHECK(!strcmp(rule, "loopback"));
	CHECK(!decide6(NULL, &env, NULL, "::ffff:10.9.1.2", 80, rule, sizeof(rule)));
	CHECK(!strcmp(rule, "private"));
	CHECK(!decide6(NULL, &env, NULL, "fe80::1", 80, rule, sizeof(rule)));
	CHECK(!strcmp(rule, "link-local"));
	CHECK(!decide6(NULL, &env, NULL, "fd00:b1::1", 80, rule, sizeof(rule)));
	CHECK(!strcmp(rule, "private"));
	CHECK(!decide6(NULL, &env, NULL, "64:ff9b::a09:102", 80, rule, sizeof(rule)));
	/* the operator's IPv6 allow list */
	CHECK(decide6(NULL, &env, NULL, "fd00:a1:5::2", 80, rule, sizeof(rule)));
	/* deny rules by name and port apply; cidrs are IPv4 and match nothing */
	CHECK(!decide6("{\"deny\":{\"domains\":[\"v6.example\"]}}", &env, "v6.example",
		       "2606:2800:220:1::1", 443, rule, sizeof(rule)));
	CHECK(!decide6("{\"deny\":{\"ports\":[443]}}", &env, NULL, "2606:2800:220:1::1", 443,
		       rule, sizeof(rule)));
	CHECK(!decide6("{\"default\":\"deny\",\"allow\":{\"cidrs\":[\"0.0.0.0/0\"]}}", &env,
		       NULL, "2606:2800:220:1::1", 443, rule, sizeof(rule)));
	CHECK(decide6("{\"default\":\"deny\",\"allow\":{\"domains\":[\"v6.example\"]}}",
		      &env, "v6.example", "2606:2800:220:1::1", 443, rule, sizeof(rule)));
	CHECK(!strcmp(rule, "allow.domains v6.example"));
	free(v4);
	free(v6);
}

static void test_policy(void)
{
	struct cidr4 allow_priv;
	struct policy_env env = { 0 };
	char rule[96];

	cidr4_parse("10.9.0.0/16", &allow_priv);
	cidr4_parse("10.213.0.0/16", &env.sandbox_net);
	env.allow_private = &allow_priv;
	env.n_allow_private = 1;

	/* the default: allow-all minus private ranges */
	CHECK(decide(NULL, &env, "example.com", "93.184.216.34", 443, rule, sizeof(rule)));
	CHECK(!strcmp(rule, "default"));
	CHECK(!decide(NULL, &env, NULL, "192.168.1.1", 80, rule, sizeof(rule)));
	CHECK(!strcmp(rule, "private"));
	CHECK(!decide(NULL, &env, NULL, "169.254.169.254", 80, rule, sizeof(rule)));
	CHECK(!strcmp(rule, "link-local"));
	CHECK(!decide(NULL, &env, NULL, "127.0.0.1", 80, rule, sizeof(rule)));
	/* the operator's private allow list; the sandbox network never */
	CHECK(decide(NULL, &env, NULL, "10.9.1.2", 80, rule, sizeof(rule)));
	CHECK(!decide(NULL, &env, NULL, "10.213.0.3", 80, rule, sizeof(rule)));
	CHECK(!strcmp(rule, "host"));

	/* lists; deny wins */
	const char *pol = "{\"allow\":{\"domains\":[\"api.example.com\",\"*.example.org\"],"
			  "\"cidrs\":[\"203.0.113.0/24\"]},"
			  "\"deny\":{\"domains\":[\"bad.example.org\"],\"ports\":[25]}}";
	CHECK(decide(pol, &env, "api.example.com", "1.2.3.4", 443, rule, sizeof(rule)));
	CHECK(!strcmp(rule, "allow.domains api.example.com"));
	CHECK(!decide(pol, &env, "example.com", "1.2.3.4", 443, rule, sizeof(rule)));
	CHECK(decide(pol, &env, "a.b.example.org", "1.2.3.4", 443, rule, sizeof(rule)));
	CHECK(!decide(pol, &env, "example.org", "1.2.3.4", 443, rule, sizeof(rule)));
	CHECK(!decide(pol, &env, "bad.example.org", "1.2.3.4", 443, rule, sizeof(rule)));
	CHECK(!strcmp(rule, "deny.domains bad.example.org"));
	CHECK(decide(pol, &env, NULL, "203.0.113.9", 22, rule, sizeof(rule)));
	CHECK(!decide(pol, &env, NULL, "203.0.113.9", 25, rule, sizeof(rule)));
	CHECK(!strcmp(rule, "deny.ports 25"));
	CHECK(!decide(pol, &env, NULL, "198.51.100.1", 443, rule, sizeof(rule)));
	/* allow.ports restricts every allow */
	CHECK(!decide("{\"default\":\"allow\",\"allow\":{\"ports\":[443]}}", &env, "x.com",
		      "1.2.3.4", 80, rule, sizeof(rule)));
	CHECK(!strcmp(rule, "allow.ports"));
	CHECK(!decide("\"deny-all\"", &env, "x.com", "1.2.3.4", 443, rule, sizeof(rule)));
	CHECK(decide("\"allow-all\"", &env, "x.com", "1.2.3.4", 443, rule, sizeof(rule)));

	/* the name gate: decided before any lookup */
	{
		err_t err = { 0 };
		json *j = json_parse(pol, strlen(pol), &err);
		struct policy p;
		char msg[256];
		CHECK(j && policy_parse(j, &p, msg, sizeof(msg)) == 0);
		CHECK(policy_name_gate(&p, "api.example.com", rule, sizeof(rule)));
		CHECK(policy_name_gate(&p, "x.example.org", rule, sizeof(rule)));
		CHECK(!policy_name_gate(&p, "exfil-data.attacker.test", rule, sizeof(rule)));
		CHECK(!strcmp(rule, "default"));
		CHECK(!policy_name_gate(&p, "bad.example.org", rule, sizeof(rule)));
		CHECK(!strcmp(rule, "deny.domains bad.example.org"));
		policy_free(&p);
		json_free(j);
		CHECK(policy_parse(NULL, &p, msg, sizeof(msg)) == 0);
		CHECK(policy_name_gate(&p, "anything.test", rule, sizeof(rule)));
		policy_free(&p);
	}

	/* bad input */
	static const char *const bad[] = {
		"{\"default\":\"maybe\"}", "{\"allow\":{\"domains\":[\"a b\"]}}",
		"{\"allow\":{\"cidrs\":[\"1.2.3.4/33\"]}}", "{\"allow\":{\"ports\":[70000]}}",
		"{\"x\":1}", "[]", "\"allow-some\"", "{\"allow\":{\"domains\":[\"*.\"]}}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err_t err = { 0 };
		json *j = json_parse(bad[i], strlen(bad[i]), &err);
		struct policy p;
		char msg[256] = "";
		CHECK(j && policy_parse(j, &p, msg, sizeof(msg)) < 0 && msg[0]);
		json_free(j);
	}
}

static void test_sniff(void)
{
	char host[SNIFF_HOST_MAX + 1];
	struct buf b;
	const char *h1 = "GET / HTTP/1.1\r\nUser-Agent: x\r\nHOST: Allowed.Test:8080\r\n\r\n";

	CHECK(sniff_http_host((const uint8_t *)h1, strlen(h1), host) == 1);
	CHECK(!strcmp(host, "allowed.test"));
	CHECK(sniff_http_host((const uint8_t *)h1, 20, host) == 0);
	CHECK(sniff_http_host((const uint8_t *)"GET / HTTP/1.1\r\n\r\n", 18, host) == -1);
	CHECK(sniff_http_host((const uint8_t *)"SSH-2.0\r\n", 9, host) == -1);

	buf_init(&b);
	if (read_file(AIRLOCK_SOURCE_DIR "/tests/fuzz/corpus/sni/tls13", 65536, &b) == 0) {
		CHECK(sniff_tls_sni((const uint8_t *)b.data, b.len, host) == 1);
		CHECK(!strcmp(host, "allowed.test"));
		CHECK(sniff_tls_sni((const uint8_t *)b.data, 40, host) == 0);
	} else {
		CHECK(!"corpus/sni/tls13 readable");
	}
	buf_free(&b);
	buf_init(&b);
	if (read_file(AIRLOCK_SOURCE_DIR "/tests/fuzz/corpus/sni/nosni", 65536, &b) == 0)
		CHECK(sniff_tls_sni((const uint8_t *)b.data, b.len, host) == -1);
	buf_free(&b);

	/* DNS: parse a query for allowed.test, answer it */
	static const uint8_t q[] = { 0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
				     7, 'a', 'l', 'l', 'o', 'w', 'e', 'd', 4, 't', 'e', 's', 't', 0,
				     0, 1, 0, 1 };
	struct dns_query dq;
	uint8_t out[512];
	uint32_t a = htonl(ip4("10.9.0.2"));
	CHECK(sniff_dns_query(q, sizeof(q), &dq) == 0);
	CHECK(!strcmp(dq.name, "allowed.test") && dq.qtype == 1 && dq.qend == sizeof(q));
	int n = dns_build_answer(q, &dq, 0, &a, 1, 30, out, sizeof(out));
	CHECK(n == (int)sizeof(q) + 16);
	CHECK(out[0] == 0x12 && (out[2] & 0x80) && out[7] == 1 && !memcmp(out + n - 4, &a, 4));
	n = dns_build_answer(q, &dq, 5, NULL, 0, 0, out, sizeof(out));
	CHECK(n == (int)sizeof(q) && (out[3] & 0xf) == 5 && out[7] == 0);
	CHECK(sniff_dns_query(q, 20, &dq) < 0);
}

int main(void)
{
	test_policy();
	test_policy6();
	test_sniff();
	return failures ? 1 : 0;
}
