/* test-ident: the identifier rules of lib/ident.h, at their edges: empty,
 * the longest allowed and one more, the first byte, '.' and "..", '/',
 * uppercase, non-ASCII, control bytes. Exit 0 = pass. */
#include <string.h>

#include "../../src/lib/ident.h"
#include "check.h"

/* n copies of ch, with head in front (caller's buffer of 80). */
static const char *rep(char *out, const char *head, char ch, size_t n)
{
	size_t h = strlen(head);

	memcpy(out, head, h);
	memset(out + h, ch, n);
	out[h + n] = '\0';
	return out;
}

/* What every rule refuses; and a leading '-' unless dash_first. */
static void refused_by_all(bool (*ok)(const char *), bool dash_first)
{
	char b[80];

	CHECK(!ok(NULL));
	CHECK(!ok(""));
	CHECK(!ok(rep(b, "", 'a', IDENT_MAX + 1)));
	CHECK(!ok("a/b"));
	CHECK(!ok("/a"));
	CHECK(!ok("a b"));
	CHECK(!ok("a\n"));
	CHECK(!ok("a\t"));
	CHECK(!ok("caf\xc3\xa9"));
	CHECK(!ok("\xff"));
	CHECK(!ok("."));
	CHECK(!ok(".."));
	CHECK(!ok(".a"));
	CHECK(ok("-a") == dash_first);
	CHECK(!ok("a:b"));
	CHECK(!ok("a%2f"));
	CHECK(!ok("a\\b"));
}

static void test_name(void)
{
	char b[80];

	refused_by_all(ident_name_ok, false);
	CHECK(ident_name_ok("a"));
	CHECK(ident_name_ok("0"));
	CHECK(ident_name_ok("base"));
	CHECK(ident_name_ok("python-3.12_slim"));
	CHECK(ident_name_ok("a.."));
	CHECK(ident_name_ok(rep(b, "", 'a', IDENT_MAX)));
	CHECK(ident_name_ok(rep(b, "a", '-', IDENT_MAX - 1)));
	CHECK(!ident_name_ok(rep(b, "a", '-', IDENT_MAX)));
	CHECK(!ident_name_ok("Base"));
	CHECK(!ident_name_ok("baSe"));
	CHECK(!ident_name_ok("-a"));
	CHECK(!ident_name_ok("_a"));
	CHECK(!ident_name_ok("a@b"));
}

static void test_name_anycase(void)
{
	char b[80];

	refused_by_all(ident_name_anycase_ok, false);
	CHECK(ident_name_anycase_ok("a"));
	CHECK(ident_name_anycase_ok("Acme"));
	CHECK(ident_name_anycase_ok("ACME_prod-1.eu"));
	CHECK(ident_name_anycase_ok(rep(b, "Z", '.', IDENT_MAX - 1)));
	CHECK(!ident_name_anycase_ok(rep(b, "Z", '.', IDENT_MAX)));
	CHECK(!ident_name_anycase_ok("-a"));
	CHECK(!ident_name_anycase_ok("_a"));
	CHECK(!ident_name_anycase_ok("a+b"));
}

static void test_sandbox_id(void)
{
	char b[80];

	refused_by_all(ident_sandbox_id_ok, true);
	CHECK(ident_sandbox_id_ok("a"));
	CHECK(ident_sandbox_id_ok("sb-3f2a9c"));
	CHECK(ident_sandbox_id_ok("-"));   /* the node makes ids; nodemgr's rule allowed this */
	CHECK(ident_sandbox_id_ok(rep(b, "", '0', IDENT_MAX)));
	CHECK(!ident_sandbox_id_ok("sb_1"));
	CHECK(!ident_sandbox_id_ok("sb.1"));
	CHECK(!ident_sandbox_id_ok("SB-1"));
}

static void test_hostname(void)
{
	char b[80];

	refused_by_all(ident_hostname_ok, false);
	CHECK(ident_hostname_ok("a"));
	CHECK(ident_hostname_ok("Box-1.example"));
	CHECK(ident_hostname_ok("a.."));
	CHECK(ident_hostname_ok(rep(b, "", 'a', IDENT_MAX)));
	CHECK(!ident_hostname_ok("-a"));
	CHECK(!ident_hostname_ok("a_b"));
	CHECK(!ident_hostname_ok("a\x7f"));
}

static bool key64(const char *s)
{
	return ident_key_ok(s, IDENT_MAX);
}

static void test_key(void)
{
	char b[300];

	refused_by_all(key64, true);
	CHECK(ident_key_ok("a", 1));
	CHECK(!ident_key_ok("ab", 1));
	CHECK(!ident_key_ok("", 255));
	CHECK(!ident_key_ok(NULL, 255));
	CHECK(ident_key_ok("Tenant_1.key-A", 64));
	CHECK(ident_key_ok("-a", 64));
	CHECK(ident_key_ok("_a", 64));
	CHECK(ident_key_ok("a..", 64));
	CHECK(!ident_key_ok(".a", 64));
	CHECK(!ident_key_ok("a/b", 255));
	memset(b, 'k', 255);
	b[255] = '\0';
	CHECK(ident_key_ok(b, 255));
	CHECK(!ident_key_ok(b, 254));
	b[0] = '.';
	CHECK(!ident_key_ok(b, 255));
}

static void test_uuid(void)
{
	CHECK(ident_uuid_ok("0f8fad5b-d9cb-469f-a165-70867728950e"));
	CHECK(!ident_uuid_ok(NULL));
	CHECK(!ident_uuid_ok(""));
	CHECK(!ident_uuid_ok("0F8FAD5B-D9CB-469F-A165-70867728950E"));
	CHECK(!ident_uuid_ok("0f8fad5b-d9cb-469f-a165-70867728950e0"));
	CHECK(!ident_uuid_ok("0f8fad5b-d9cb-469f-a165-70867728950"));
	CHECK(!ident_uuid_ok("0f8fad5bd-9cb-469f-a165-70867728950e"));
	CHECK(!ident_uuid_ok("0f8fad5b-d9cb-469f-a165-70867728950g"));
	CHECK(!ident_uuid_ok("../../../../../../../../../../../etc"));
}

int main(void)
{
	test_name();
	test_name_anycase();
	test_sandbox_id();
	test_hostname();
	test_key();
	test_uuid();
	return failures ? 1 : 0;
}
