/* test-json: parser acceptance and every rejection class, lookups, writer
 * escaping and round trips. Exit 0 = pass. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../src/lib/json.h"
#include "check.h"


static json *parse(const char *s)
{
	err_t err = { 0 };
	json *j = json_parse(s, strlen(s), &err);
	if (!j)
		fprintf(stderr, "  parse(%s): %s\n", s, err.msg);
	return j;
}

/* Parses, writes back with jw_value, and compares with the expected text. */
static void roundtrip(const char *in, const char *want)
{
	struct buf b;
	struct jw w;
	json *j = parse(in);

	CHECK(j != NULL);
	if (!j)
		return;
	buf_init(&b);
	jw_init(&w, &b);
	jw_value(&w, j);
	if (strcmp(b.data, want) != 0) {
		fprintf(stderr, "  roundtrip(%s): got %s want %s\n", in, b.data, want);
		failures++;
	}
	json_free(j);
	buf_free(&b);
}

static void reject_n(const char *s, size_t len, const char *why)
{
	err_t err = { 0 };
	json *j = json_parse(s, len, &err);

	if (j) {
		fprintf(stderr, "  accepted invalid input (%s)\n", why);
		failures++;
		json_free(j);
		return;
	}
	CHECK(err.code == EINVAL);
	CHECK(err.msg[0] != '\0');
}

static void reject(const char *s)
{
	reject_n(s, strlen(s), s);
}

static void test_scalars(void)
{
	json *j = parse("  true ");
	CHECK(j && j->type == JSON_BOOL && j->b);
	json_free(j);
	j = parse("false");
	CHECK(j && j->type == JSON_BOOL && !j->b);
	json_free(j);
	j = parse("null");
	CHECK(j && j->type == JSON_NULL);
	json_free(j);
	j = parse("\"a\\u00e9\\ud83d\\ude00\\n\\/\"");
	CHECK(j && j->type == JSON_STR && j->str_len == 9);
	CHECK(j && strcmp(j->str, "a\xc3\xa9\xf0\x9f\x98\x80\n/") == 0);
	json_free(j);
	j = parse("\"raw \xe2\x82\xac utf8\"");
	CHECK(j && strcmp(j->str, "raw \xe2\x82\xac utf8") == 0);
	json_free(j);
}

static void test_numbers(void)
{
	json *j = parse("-9223372036854775808");
	CHECK(j && j->is_int && j->i == INT64_MIN);
	json_free(j);
	j = parse("9223372036854775807");
	CHECK(j && j->is_int && j->i == INT64_MAX);
	json_free(j);
	j = parse("9223372036854775808");   /* integral but does not fit */
	CHECK(j && !j->is_int && j->num > 9.2e18);
	json_free(j);
	j = parse("1.5e3");
	CHECK(j && !j->is_int && j->num == 1500.0);
	json_free(j);
	j = parse("0");
	CHECK(j && j->is_int && j->i == 0);
	json_free(j);
	j = parse("-0.25E-2");
	CHECK(j && !j->is_int && fabs(j->num + 0.0025) < 1e-12);
	json_free(j);

	reject("01");
	reject("+1");
	reject("1.");
	reject(".5");
	reject("1e");
	reject("1e+");
	reject("-");
	reject("0x10");
	reject("NaN");
	reject("Infinity");
	reject("1e999");
}

static void test_containers(void)
{
	json *j = parse("{\"a\":[1,2,{\"b\":null}],\"c\":{},\"d\":[]}");
	CHECK(j && j->type == JSON_OBJ && j->n == 3);
	const json *a = json_get(j, "a");
	CHECK(a && a->type == JSON_ARR && a->n == 3);
	CHECK(a && a->items[2]->type == JSON_OBJ);
	CHECK(json_get(j, "zz") == NULL);
	CHECK(json_get(a, "b") == NULL);   /* not an object */
	json_free(j);
}

static void test_depth(void)
{
	char deep[2 * (JSON_MAX_DEPTH + 1) + 1];
	size_t d = JSON_MAX_DEPTH;

	memset(deep, '[', d);
	memset(deep + d, ']', d);
	deep[2 * d] = '\0';
	json *j = parse(deep);
	CHECK(j != NULL);   /* exactly at the limit */
	json_free(j);

	d = JSON_MAX_DEPTH + 1;
	memset(deep, '[', d);
	memset(deep + d, ']', d);
	deep[2 * d] = '\0';
	reject(deep);

	/* a hostile body far deeper than the limit must fail, not recurse */
	static char huge[200001];
	memset(huge, '[', sizeof(huge) - 1);
	reject(huge);
	memset(huge, '{', sizeof(huge) - 1);
	reject(huge);
}

static void test_rejections(void)
{
	reject("");
	reject("   ");
	reject("tru");
	reject("nul");
	reject("{} x");            /* trailing garbage */
	reject("[1] [2]");
	reject("[1,]");            /* trailing comma */
	reject("{\"a\":1,}");
	reject("[1 2]");
	reject("{\"a\" 1}");
	reject("{a:1}");
	reject("{\"a\":1,\"a\":2}"); /* duplicate key */
	reject("{\"x\":1,\"b\":2,\"c\":3,\"d\":4,\"e\":5,\"b\":6}");
	reject("\"abc");           /* unterminated */
	reject("\"a\\x\"");        /* invalid escape */
	reject("\"a\\u12\"");      /* short \u */
	reject("\"a\\u12g4\"");
	reject("\"\\u0000\"");     /* NUL */
	reject("\"\\ud800\"");     /* lone high surrogate */
	reject("\"\\ud800\\u0041\""); /* high + non-low */
	reject("\"\\udc00\"");     /* lone low surrogate */
	reject("\"tab\there\"");   /* raw control char */
	reject("\"nl\nhere\"");
	reject("\"\xc3\"");        /* truncated UTF-8 */
	reject("\"\xc0\xaf\"");    /* overlong */
	reject("\"\xed\xa0\x80\""); /* UTF-8 encoded surrogate */
	reject("\"\xf4\x90\x80\x80\""); /* above U+10FFFF */
	reject("\"\xff\"");
	reject_n("\"a\0b\"", 5, "raw NUL in string");
	reject_n("[1]\0", 4, "NUL after value");
	/* the parser must stop at len even if the bytes go on */
	reject_n("[1,2]", 4, "truncated by len");
	reject_n("\"abc\"", 4, "string truncated by len");
	reject_n("tr", 2, "literal truncated by len");
	reject_n("\"\\ud83d\\ude00\"", 8, "surrogate pair truncated by len");
}

static void test_lookups(void)
{
	json *j = parse("{\"s\":\"x\",\"i\":42,\"f\":1.5,\"b\":true,\"n\":null}");
	bool bad = false;

	CHECK(j != NULL);
	CHECK(strcmp(json_get_str(j, "s"), "x") == 0);
	CHECK(json_get_str(j, "i") == NULL);
	CHECK(json_get_int(j, "i", 7, &bad) == 42 && !bad);
	CHECK(json_get_int(j, "missing", 7, &bad) == 7 && !bad);
	CHECK(json_get_int(j, "f", 7, &bad) == 7 && bad);
	bad = false;
	CHECK(json_get_int(j, "s", 7, &bad) == 7 && bad);
	bad = false;
	CHECK(json_get_bool(j, "b", false, &bad) && !bad);
	CHECK(json_get_bool(j, "missing", true, &bad) && !bad);
	CHECK(!json_get_bool(j, "i", false, &bad) && bad);
	bad = false;
	CHECK(json_get_int(j, "n", 3, &bad) == 3 && bad);
	CHECK(json_get_int(j, "i", 0, NULL) == 42);

	static const char *const ok[] = { "s", "i", "f", "b", "n", NULL };
	static const char *const few[] = { "s", "i", NULL };
	err_t err = { 0 };
	CHECK(json_check_keys(j, ok, &err) == 0);
	CHECK(json_check_keys(j, few, &err) == -EINVAL);
	CHECK(strstr(err.msg, "\"f\"") != NULL);
	json *arr = parse("[]");
	CHECK(json_check_keys(arr, ok, &err) == -EINVAL);
	json_free(arr);
	json_free(j);
}

static void test_writer(void)
{
	struct buf b;
	struct jw w;

	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "s");
	jw_str(&w, "q\"b\\c\n\t\r\x01\x1f\x7f/\xc3\xa9");
	jw_key(&w, "k\"ey");
	jw_arr(&w);
	jw_int(&w, -5);
	jw_uint(&w, UINT64_MAX);
	jw_bool(&w, true);
	jw_null(&w);
	jw_str(&w, NULL);
	jw_double(&w, 0.1);
	jw_double(&w, 1e300);
	jw_double(&w, NAN);
	jw_arr(&w);
	jw_end(&w);
	jw_obj(&w);
	jw_end(&w);
	jw_raw(&w, "{\"r\":[1]}");
	jw_end(&w);
	jw_key(&w, "e");
	jw_str(&w, "]}\"[{");
	jw_end(&w);
	const char *want = "{\"s\":\"q\\\"b\\\\c\\n\\t\\r\\u0001\\u001f\x7f/\xc3\xa9\","
			   "\"k\\\"ey\":[-5,18446744073709551615,true,null,null,0.1,1e+300,"
			   "null,[],{},{\"r\":[1]}],\"e\":\"]}\\\"[{\"}";
	if (strcmp(b.data, want) != 0) {
		fprintf(stderr, "  writer got  %s\n  writer want %s\n", b.data, want);
		failures++;
	}
	CHECK(w.depth == 0);

	/* the output must itself parse */
	err_t err = { 0 };
	json *j = json_parse(b.data, b.len, &err);
	CHECK(j != NULL);
	CHECK(j && strcmp(json_get_str(j, "e"), "]}\"[{") == 0);
	json_free(j);

	/* NUL is written as \u0000 (the parser refuses it, by design) */
	buf_reset(&b);
	jw_init(&w, &b);
	jw_strn(&w, "a\0b", 3);
	CHECK(strcmp(b.data, "\"a\\u0000b\"") == 0);

	/* Untrusted names: invalid UTF-8 (a stray byte, a truncated or an
	 * overlong sequence, a surrogate) becomes U+FFFD; valid stays, and
	 * what comes out parses. */
	buf_reset(&b);
	jw_init(&w, &b);
	jw_str_lossy(&w, "\xff\xc3\xa9\xe2\x82\xc0\xaf\xed\xa0\x80\"x\xe2\x82");
	CHECK(strcmp(b.data, "\"\xef\xbf\xbd\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
			     "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
			     "\\\"x\xef\xbf\xbd\xef\xbf\xbd\"") == 0);
	j = json_parse(b.data, b.len, &err);
	CHECK(j != NULL);
	json_free(j);

	/* with a length: NULs are carried (escaped), bad bytes replaced */
	buf_reset(&b);
	jw_init(&w, &b);
	jw_strn_lossy(&w, "a\0\xff", 3);
	CHECK(strcmp(b.data, "\"a\\u0000\xef\xbf\xbd\"") == 0);
	buf_free(&b);

	/* text a JSON string carries as is: strict UTF-8, no NUL */
	CHECK(json_utf8_valid("", 0));
	CHECK(json_utf8_valid("h\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 10));
	CHECK(!json_utf8_valid("a\0b", 3));
	CHECK(!json_utf8_valid("\xff", 1));
	CHECK(!json_utf8_valid("\xe2\x82", 2));        /* cut short */
	CHECK(!json_utf8_valid("\xc0\xaf", 2));        /* overlong */
	CHECK(!json_utf8_valid("\xed\xa0\x80", 3));    /* a surrogate */
}

/* A maximally nested parsed value echoed inside a wrapper goes deeper than
 * the writer's first[] array; commas and closers must still be right. */
static void test_writer_deep(void)
{
	char in[4 * JSON_MAX_DEPTH + 16];
	size_t d = JSON_MAX_DEPTH, n = 0;

	for (size_t k = 0; k < d; k++)
		n += (size_t)sprintf(in + n, "[1,");
	n += (size_t)sprintf(in + n, "2");
	for (size_t k = 0; k < d; k++)
		in[n++] = ']';
	in[n] = '\0';
	json *v = parse(in);
	CHECK(v != NULL);

	struct buf b;
	struct jw w;
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "a");
	jw_obj(&w);
	jw_key(&w, "v");
	jw_value(&w, v);
	jw_key(&w, "w");
	jw_int(&w, 3);
	jw_end(&w);
	jw_end(&w);
	struct buf want;
	buf_init(&want);
	buf_printf(&want, "{\"a\":{\"v\":%s,\"w\":3}}", in);
	CHECK(strcmp(b.data, want.data) == 0);
	buf_free(&want);
	buf_free(&b);
	json_free(v);
}

static void test_roundtrips(void)
{
	roundtrip(" { \"a\" : [ 1 , -2.5 , \"x\\u0001\" ] , \"b\" : { } } ",
		  "{\"a\":[1,-2.5,\"x\\u0001\"],\"b\":{}}");
	roundtrip("[true,false,null,[[]],{\"\":\"\"}]", "[true,false,null,[[]],{\"\":\"\"}]");
	roundtrip("\"\\ud83d\\ude00 \\\" \\\\ \\/\"", "\"\xf0\x9f\x98\x80 \\\" \\\\ /\"");
	roundtrip("[0.1,1e2,123456789012,1.7976931348623157e308]",
		  "[0.1,100,123456789012,1.7976931348623157e+308]");
	roundtrip("{\"cpus\":1.0}", "{\"cpus\":1}");
}

int main(void)
{
	test_scalars();
	test_numbers();
	test_containers();
	test_depth();
	test_rejections();
	test_lookups();
	test_writer();
	test_writer_deep();
	test_roundtrips();
	return check_done("test-json");
}
