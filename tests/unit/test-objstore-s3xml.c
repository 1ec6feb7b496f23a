/* test-objstore-s3xml: what the s3 driver reads from a server, without a
 * server: the XML readers (ListObjectsV2 page, Error, Initiate/Complete
 * MultipartUpload) and the response-head parser, on well-formed answers
 * (values, entities, CDATA, comments, attributes) and on broken ones, which
 * must be refused (-EPROTO), never half-read. fuzz-s3xml throws random bytes
 * at the same code; this pins down what it must answer. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../../src/objstore/s3-internal.h"
#include "check.h"

struct got {
	char keys[8][64];
	uint64_t sizes[8];
	int n;
};

static int collect(void *arg, const char *key, uint64_t size)
{
	struct got *g = arg;

	if (g->n < 8) {
		snprintf(g->keys[g->n], sizeof(g->keys[0]), "%s", key);
		g->sizes[g->n] = size;
	}
	g->n++;
	return 0;
}

static int list(const char *doc, struct got *g, bool *truncated, char *token, size_t tl)
{
	memset(g, 0, sizeof(*g));
	return s3_xml_list(doc, strlen(doc), collect, g, truncated, token, tl);
}

static void test_list(void)
{
	struct got g;
	bool tr = false;
	char tok[64];

	const char *page =
		"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
		"<Name>b</Name><Prefix>a/</Prefix><!-- a comment <Contents> -->"
		"<IsTruncated>true</IsTruncated><NextContinuationToken>t/k=</NextContinuationToken>"
		"<Contents><Key>a/x&amp;y</Key><ETag>&quot;e&quot;</ETag><Size>5</Size></Contents>"
		"<Contents><Key><![CDATA[a/<z>]]></Key><Size>9999999999999999999</Size></Contents>"
		"<Contents><Key>a/&#x41;&#66;</Key><Size>0</Size><Owner><ID>1</ID></Owner></Contents>"
		"</ListBucketResult>\n";
	CHECK(list(page, &g, &tr, tok, sizeof(tok)) == 0);
	CHECK(g.n == 3 && tr && strcmp(tok, "t/k=") == 0);
	CHECK(strcmp(g.keys[0], "a/x&y") == 0 && g.sizes[0] == 5);
	CHECK(strcmp(g.keys[1], "a/<z>") == 0 && g.sizes[1] == 9999999999999999999ull);
	CHECK(strcmp(g.keys[2], "a/AB") == 0 && g.sizes[2] == 0);

	CHECK(list("<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>", &g, &tr,
		   tok, sizeof(tok)) == 0 && g.n == 0 && !tr);

	/* refused, and no key handed out from a page that is not whole */
	static const char *bad[] = {
		"",
		"<ListBucketResult>",                                   /* truncated */
		"<ListBucketResult><Contents><Key>a</Key><Size>1</Size></Contents>",
		"<ListBucketResult><Contents><Key>a</Key><Size>1</Size></Contents></Wrong>",
		"<Error><Code>x</Code></Error>",                        /* not a list */
		"<ListBucketResult><Contents><Key>a</Key></Contents></ListBucketResult>",
		"<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>",
		"<ListBucketResult><Contents><Key>a</Key><Size>-1</Size></Contents></ListBucketResult>",
		"<ListBucketResult><Contents><Key>a</Key><Size>99999999999999999999</Size></Contents></ListBucketResult>",
		"<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>", /* no token */
		"<ListBucketResult><IsTruncated>yes</IsTruncated></ListBucketResult>",
		"<ListBucketResult><Contents><Key>a&bogus;</Key><Size>1</Size></Contents></ListBucketResult>",
		"<ListBucketResult><Contents><Key>&#0;</Key><Size>1</Size></Contents></ListBucketResult>",
		"<ListBucketResult><Contents><Key>&#xD800;</Key><Size>1</Size></Contents></ListBucketResult>",
		"<ListBucketResult></ListBucketResult><ListBucketResult></ListBucketResult>",
		"text<ListBucketResult></ListBucketResult>",
		("<ListBucketResult><NextContinuationToken>0123456789012345678901234567890123456789"
		 "0123456789012345678901234567890123456789</NextContinuationToken></ListBucketResult>"),
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		int r = list(bad[i], &g, &tr, tok, sizeof(tok));
		CHECK(r == -EPROTO && g.n == 0);
		if (r != -EPROTO || g.n)
			fprintf(stderr, "bad list %zu accepted: %s\n", i, bad[i]);
	}
	/* nesting deeper than the scanner allows */
	char deep[2000] = "";
	for (int i = 0; i < 40; i++)
		strcat(deep, "<a>");
	for (int i = 0; i < 40; i++)
		strcat(deep, "</a>");
	CHECK(s3_xml_complete_ok(deep, strlen(deep)) == false);
}

static void test_others(void)
{
	char code[32], msg[64], id[64];
	const char *e = "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code>"
			"<Message>The key &lt;k&gt; does not exist</Message></Error>";

	s3_xml_error(e, strlen(e), code, sizeof(code), msg, sizeof(msg));
	CHECK(strcmp(code, "NoSuchKey") == 0 && strcmp(msg, "The key <k> does not exist") == 0);
	s3_xml_error("garbage", 7, code, sizeof(code), msg, sizeof(msg));
	CHECK(code[0] == '\0' && msg[0] == '\0');

	const char *init = "<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key>"
			   "<UploadId>abc-123</UploadId></InitiateMultipartUploadResult>";
	CHECK(s3_xml_upload_id(init, strlen(init), id, sizeof(id)) == 0 && strcmp(id, "abc-123") == 0);
	CHECK(s3_xml_upload_id(e, strlen(e), id, sizeof(id)) == -EPROTO);
	const char *noid = "<InitiateMultipartUploadResult></InitiateMultipartUploadResult>";
	CHECK(s3_xml_upload_id(noid, strlen(noid), id, sizeof(id)) == -EPROTO);

	const char *done = "\n  <CompleteMultipartUploadResult><ETag>\"x-2\"</ETag>"
			   "</CompleteMultipartUploadResult>";
	CHECK(s3_xml_complete_ok(done, strlen(done)));
	CHECK(!s3_xml_complete_ok(e, strlen(e)));  /* 200 with an <Error> inside */
}

static void test_head(void)
{
	struct s3_http_resp r = { 0 };
	const char *h = "HTTP/1.1 200 OK\r\nContent-Length: 42\r\nETag: \"abc\"\r\n"
			"X-Amz-Meta-Sha256: 2CF24DBA5FB0A30E26E83B2AC5B9E29E1B161E5C1FA7425E73043362938B9824\r\n\r\n";

	CHECK(s3_http_parse_head(h, strlen(h), &r) == 0);
	CHECK(r.status == 200 && r.has_length && r.content_length == 42 && !r.close);
	CHECK(strcmp(r.etag, "\"abc\"") == 0);
	CHECK(strcmp(r.meta_sha256,
		     "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824") == 0);
	h = "HTTP/1.1 503 Slow Down\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
	CHECK(s3_http_parse_head(h, strlen(h), &r) == 0 && r.status == 503 && r.chunked && r.close);
	static const char *bad[] = {
		"HTTP/1.1 200 OK\r\n",                                  /* no end */
		"HTTP/2 200 OK\r\n\r\n",
		"HTTP/1.1 20 OK\r\n\r\n",
		"HTTP/1.1 999 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
		"HTTP/1.1 200 OK\r\n\r\nextra",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		CHECK(s3_http_parse_head(bad[i], strlen(bad[i]), &r) == -EPROTO);
	}
}

int main(void)
{
	test_list();
	test_others();
	test_head();
	return check_done("test-objstore-s3xml");
}
