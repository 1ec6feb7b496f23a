/* test-api-e2b.c - the E2B API's byte formats (src/compat/e2b/e2b-wire.c):
 * Connect envelopes in and out, the multipart boundary of a Content-Type,
 * and multipart/form-data bodies as undici's FormData writes them (what the
 * e2b SDK sends), with the malformed cases each answered by an error. */
#include "../../src/compat/e2b/e2b-wire.h"
#include "check.h"

static struct multipart_part parts[MULTIPART_MAX_PARTS];

static int parse(const char *body, const char *boundary)
{
	err_t err = { 0 };

	return multipart_parse(body, strlen(body), boundary, parts, MULTIPART_MAX_PARTS, &err);
}

static void test_envelope(void)
{
	struct buf b;
	const char *js;
	size_t jn;
	err_t err = { 0 };

	buf_init(&b);
	connect_frame_append(&b, 0, "{\"a\":1}", 7);
	CHECK(b.len == 12 && (unsigned char)b.data[0] == 0 && b.data[4] == 7);
	CHECK(connect_unwrap_request(b.data, b.len, &js, &jn, &err) == 0);
	CHECK(jn == 7 && memcmp(js, "{\"a\":1}", 7) == 0);
	/* one byte more or less than announced, two messages, flags */
	CHECK(connect_unwrap_request(b.data, b.len - 1, &js, &jn, &err) == -EINVAL);
	connect_frame_append(&b, 0, "{}", 2);
	CHECK(connect_unwrap_request(b.data, b.len, &js, &jn, &err) == -EINVAL);
	CHECK(strstr(err.msg, "exactly one message") != NULL);
	buf_reset(&b);
	connect_frame_append(&b, CONNECT_FLAG_COMPRESSED, "{}", 2);
	CHECK(connect_unwrap_request(b.data, b.len, &js, &jn, &err) == -EINVAL);
	buf_reset(&b);
	connect_frame_append(&b, CONNECT_FLAG_END, "{}", 2);
	CHECK(connect_unwrap_request(b.data, b.len, &js, &jn, &err) == -EINVAL);
	CHECK(connect_unwrap_request("\0\0\0", 3, &js, &jn, &err) == -EINVAL);
	/* a length of 2^32-1 with nothing behind it */
	CHECK(connect_unwrap_request("\0\xff\xff\xff\xff", 5, &js, &jn, &err) == -EINVAL);
	/* empty message: fine (protobuf JSON "{}" may be sent as nothing) */
	CHECK(connect_unwrap_request("\0\0\0\0\0", 5, &js, &jn, &err) == 0 && jn == 0);
	buf_free(&b);
}

static void test_boundary(void)
{
	char out[80];
	err_t err = { 0 };

	CHECK(multipart_boundary("multipart/form-data; boundary=----formdata-undici-0123",
				 out, sizeof(out), &err) == 0 &&
	      !strcmp(out, "----formdata-undici-0123"));
	CHECK(multipart_boundary("Multipart/Form-Data;charset=utf-8; boundary=\"a:b\"", out,
				 sizeof(out), &err) == 0 && !strcmp(out, "a:b"));
	CHECK(multipart_boundary("multipart/form-data; boundary=x; foo=bar", out, sizeof(out),
				 &err) == 0 && !strcmp(out, "x"));
	CHECK(multipart_boundary("multipart/form-data", out, sizeof(out), &err) == -EINVAL);
	CHECK(multipart_boundary("multipart/form-data; boundary=", out, sizeof(out), &err) ==
	      -EINVAL);
	CHECK(multipart_boundary("multipart/form-data; boundary=\"open", out, sizeof(out), &err) ==
	      -EINVAL);
	CHECK(multipart_boundary("multipart/form-data; boundary=a\rb", out, sizeof(out), &err) ==
	      -EINVAL);
	CHECK(multipart_boundary("text/plain; boundary=x", out, sizeof(out), &err) == -EINVAL);
	CHECK(multipart_boundary(NULL, out, sizeof(out), &err) == -EINVAL);
	/* 71 characters: over RFC 2046's 70 */
	char ct[128];
	snprintf(ct, sizeof(ct), "multipart/form-data; boundary=%071d", 0);
	CHECK(multipart_boundary(ct, out, sizeof(out), &err) == -EINVAL);
}

static void test_multipart(void)
{
	int n;

	/* two files as undici writes them, %22 in a name, empty second file */
	n = parse("--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/tmp/a%22b.txt\"\r\n"
		  "Content-Type: application/octet-stream\r\n\r\nhello\r\n"
		  "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/tmp/c\"\r\n\r\n"
		  "\r\n--B--\r\n", "B");
	CHECK(n == 2);
	CHECK(!strcmp(parts[0].filename, "/tmp/a\"b.txt") && !strcmp(parts[0].name, "file"));
	CHECK(parts[0].len == 5 && !memcmp(parts[0].data, "hello", 5));
	CHECK(!strcmp(parts[1].filename, "/tmp/c") && parts[1].len == 0);
	/* a preamble, data holding CRLF and a near-boundary, no filename */
	n = parse("preamble\r\n--B\r\nContent-Disposition: form-data; name=x\r\n\r\n"
		  "a\r\n--Bc\r\n--B--", "Bc");
	CHECK(n == -EINVAL);   /* "--B--" does not close a "Bc" body: a part without a head */
	n = parse("preamble\r\n--Bc\r\nContent-Disposition: form-data; name=x\r\n\r\n"
		  "a\r\n--B\r\n--Bc--", "Bc");
	CHECK(n == 1 && parts[0].len == 6 && !memcmp(parts[0].data, "a\r\n--B", 6) &&
	      parts[0].filename[0] == '\0' && !strcmp(parts[0].name, "x"));
	/* quoted-pair in a file name */
	n = parse("--B\r\nContent-Disposition: form-data; name=\"f\"; filename=\"a\\\"b\"\r\n\r\nz\r\n--B--",
		  "B");
	CHECK(n == 1 && !strcmp(parts[0].filename, "a\"b"));
	/* no closing delimiter, no boundary, a head without its blank line,
	 * a part without Content-Disposition, another disposition */
	CHECK(parse("--B\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nabc", "B") == -EINVAL);
	CHECK(parse("nothing here", "B") == -EINVAL);
	CHECK(parse("--B\r\nContent-Disposition: form-data; name=\"f\"\r\nabc\r\n--B--", "B") ==
	      -EINVAL);
	CHECK(parse("--B\r\nContent-Type: text/plain\r\n\r\nabc\r\n--B--", "B") == -EINVAL);
	CHECK(parse("--B\r\nContent-Disposition: attachment; name=\"f\"\r\n\r\nabc\r\n--B--", "B") ==
	      -EINVAL);
	CHECK(parse("--B\r\nContent-Disposition: form-data; name=\"f\"; filename=\"open\r\n\r\nx\r\n--B--",
		    "B") == -EINVAL);
	CHECK(parse("--B", "B") == -EINVAL);
	CHECK(parse("--B--", "B") == 0);
	/* more parts than the cap */
	struct buf b;
	err_t err = { 0 };
	buf_init(&b);
	for (int i = 0; i < MULTIPART_MAX_PARTS + 1; i++)
		buf_printf(&b, "--B\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\n%d\r\n", i);
	buf_adds(&b, "--B--");
	CHECK(multipart_parse(b.data, b.len, "B", parts, MULTIPART_MAX_PARTS, &err) == -EINVAL);
	CHECK(strstr(err.msg, "more than") != NULL);
	buf_free(&b);
}

int main(void)
{
	test_envelope();
	test_boundary();
	test_multipart();
	return check_done("test-api-e2b");
}
