/* test-objstore-sigv4: the signer against AWS's published Signature V4 test
 * suite. Each vector is the suite's signed request (request line, headers,
 * the expected Authorization, body), its canonical request and its string
 * to sign; the test signs the request with every header but Authorization
 * and compares all three steps. Credentials AKIDEXAMPLE /
 * wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY, region us-east-1, service
 * "service", 20150830T123600Z.
 *
 * Source of the vectors: the "aws-sig-v4-test-suite" as vendored by
 * github.com/awslabs/aws-c-auth, tests/aws-signing-test-suite/v4/<name>/
 * header-signed-request.txt, header-canonical-request.txt and
 * header-string-to-sign.txt (commit 495329c2433034bd8fd53fc6ba9e0202d3fac876),
 * copied verbatim as data. Only vectors whose request needs no path
 * normalisation (S3 never normalises) are used. */
#include <stdio.h>
#include <string.h>

#include "../../src/objstore/objstore-internal.h"
#include "../../src/objstore/sigv4.h"
#include "check.h"

struct vector {
	const char *name;
	const char *signed_request;
	const char *creq;
	const char *sts;
};

static const struct vector vectors[] = {
	{ "get-vanilla",
	  "GET / HTTP/1.1\n"
	  "Host:example.amazonaws.com\n"
	  "X-Amz-Date:20150830T123600Z\n"
	  "Authorization:AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31\n"
	  "\n",
	  "GET\n"
	  "/\n"
	  "\n"
	  "host:example.amazonaws.com\n"
	  "x-amz-date:20150830T123600Z\n"
	  "\n"
	  "host;x-amz-date\n"
	  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	  "AWS4-HMAC-SHA256\n"
	  "20150830T123600Z\n"
	  "20150830/us-east-1/service/aws4_request\n"
	  "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63" },
	{ "get-vanilla-query-order-key-case",
	  "GET /?Param2=value2&Param1=value1 HTTP/1.1\n"
	  "Host:example.amazonaws.com\n"
	  "X-Amz-Date:20150830T123600Z\n"
	  "Authorization:AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500\n"
	  "\n",
	  "GET\n"
	  "/\n"
	  "Param1=value1&Param2=value2\n"
	  "host:example.amazonaws.com\n"
	  "x-amz-date:20150830T123600Z\n"
	  "\n"
	  "host;x-amz-date\n"
	  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	  "AWS4-HMAC-SHA256\n"
	  "20150830T123600Z\n"
	  "20150830/us-east-1/service/aws4_request\n"
	  "816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0" },
	{ "get-vanilla-query-unreserved",
	  "GET /?-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz=-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz HTTP/1.1\n"
	  "Host:example.amazonaws.com\n"
	  "X-Amz-Date:20150830T123600Z\n"
	  "Authorization:AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197\n"
	  "\n",
	  "GET\n"
	  "/\n"
	  "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz=-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz\n"
	  "host:example.amazonaws.com\n"
	  "x-amz-date:20150830T123600Z\n"
	  "\n"
	  "host;x-amz-date\n"
	  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	  "AWS4-HMAC-SHA256\n"
	  "20150830T123600Z\n"
	  "20150830/us-east-1/service/aws4_request\n"
	  "c30d4703d9f799439be92736156d47ccfb2d879ddf56f5befa6d1d6aab979177" },
	{ "get-vanilla-empty-query-key",
	  "GET /?Param1=value1 HTTP/1.1\n"
	  "Host:example.amazonaws.com\n"
	  "X-Amz-Date:20150830T123600Z\n"
	  "Authorization:AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb\n"
	  "\n",
	  "GET\n"
	  "/\n"
	  "Param1=value1\n"
	  "host:example.amazonaws.com\n"
	  "x-amz-date:20150830T123600Z\n"
	  "\n"
	  "host;x-amz-date\n"
	  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	  "AWS4-HMAC-SHA256\n"
	  "20150830T123600Z\n"
	  "20150830/us-east-1/service/aws4_request\n"
	  "1e24db194ed7d0eec2de28d7369675a243488e08526e8c1c73571282f7c517ab" },
	{ "get-header-value-trim",
	  "GET / HTTP/1.1\n"
	  "Host:example.amazonaws.com\n"
	  "My-Header1: value1\n"
	  "My-Header2: \"a   b   c\"\n"
	  "X-Amz-Date:20150830T123600Z\n"
	  "Authorization:AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;my-header1;my-header2;x-amz-date, Signature=acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736\n"
	  "\n",
	  "GET\n"
	  "/\n"
	  "\n"
	  "host:example.amazonaws.com\n"
	  "my-header1:value1\n"
	  "my-header2:\"a b c\"\n"
	  "x-amz-date:20150830T123600Z\n"
	  "\n"
	  "host;my-header1;my-header2;x-amz-date\n"
	  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	  "AWS4-HMAC-SHA256\n"
	  "20150830T123600Z\n"
	  "20150830/us-east-1/service/aws4_request\n"
	  "a726db9b0df21c14f559d0a978e563112acb1b9e05476f0a6a1c7d68f28605c7" },
	{ "get-header-key-duplicate",
	  "GET / HTTP/1.1\n"
	  "Host:example.amazonaws.com\n"
	  "My-Header1:value2\n"
	  "My-Header1:value2\n"
	  "My-Header1:value1\n"
	  "X-Amz-Date:20150830T123600Z\n"
	  "Authorization:AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;my-header1;x-amz-date, Signature=c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea\n"
	  "\n",
	  "GET\n"
	  "/\n"
	  "\n"
	  "host:example.amazonaws.com\n"
	  "my-header1:value2,value2,value1\n"
	  "x-amz-date:20150830T123600Z\n"
	  "\n"
	  "host;my-header1;x-amz-date\n"
	  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	  "AWS4-HMAC-SHA256\n"
	  "20150830T123600Z\n"
	  "20150830/us-east-1/service/aws4_request\n"
	  "dc7f04a3abfde8d472b0ab1a418b741b7c67174dad1551b4117b15527fbe966c" },
	{ "get-space-unnormalized",
	  "GET /example space/ HTTP/1.1\n"
	  "Host:example.amazonaws.com\n"
	  "X-Amz-Date:20150830T123600Z\n"
	  "Authorization:AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741\n"
	  "\n",
	  "GET\n"
	  "/example%20space/\n"
	  "\n"
	  "host:example.amazonaws.com\n"
	  "x-amz-date:20150830T123600Z\n"
	  "\n"
	  "host;x-amz-date\n"
	  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	  "AWS4-HMAC-SHA256\n"
	  "20150830T123600Z\n"
	  "20150830/us-east-1/service/aws4_request\n"
	  "63ee75631ed7234ae61b5f736dfc7754cdccfedbff4b5128a915706ee9390d86" },
	{ "get-slashes-unnormalized",
	  "GET //example// HTTP/1.1\n"
	  "Host:example.amazonaws.com\n"
	  "X-Amz-Date:20150830T123600Z\n"
	  "Authorization:AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=87cca117541a147f6df867677d98a7d80dff226d2bfca9e4ffa899665623c7e5\n"
	  "\n",
	  "GET\n"
	  "//example//\n"
	  "\n"
	  "host:example.amazonaws.com\n"
	  "x-amz-date:20150830T123600Z\n"
	  "\n"
	  "host;x-amz-date\n"
	  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	  "AWS4-HMAC-SHA256\n"
	  "20150830T123600Z\n"
	  "20150830/us-east-1/service/aws4_request\n"
	  "528ec3105ee1f34ab014bb0a1a45da0ed2742a4fea3555149e5b4d5d201eb240" },
	{ "get-utf8",
	  "GET /\xe1\x88\xb4 HTTP/1.1\n"
	  "Host:example.amazonaws.com\n"
	  "X-Amz-Date:20150830T123600Z\n"
	  "Authorization:AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85\n"
	  "\n",
	  "GET\n"
	  "/%E1%88%B4\n"
	  "\n"
	  "host:example.amazonaws.com\n"
	  "x-amz-date:20150830T123600Z\n"
	  "\n"
	  "host;x-amz-date\n"
	  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	  "AWS4-HMAC-SHA256\n"
	  "20150830T123600Z\n"
	  "20150830/us-east-1/service/aws4_request\n"
	  "2a0a97d02205e45ce2e994789806b19270cfbbb0921b278ccf58f5249ac42102" },
	{ "post-vanilla",
	  "POST / HTTP/1.1\n"
	  "Host:example.amazonaws.com\n"
	  "X-Amz-Date:20150830T123600Z\n"
	  "Authorization:AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b\n"
	  "\n",
	  "POST\n"
	  "/\n"
	  "\n"
	  "host:example.amazonaws.com\n"
	  "x-amz-date:20150830T123600Z\n"
	  "\n"
	  "host;x-amz-date\n"
	  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	  "AWS4-HMAC-SHA256\n"
	  "20150830T123600Z\n"
	  "20150830/us-east-1/service/aws4_request\n"
	  "553f88c9e4d10fc9e109e2aeb65f030801b70c2f6468faca261d401ae622fc87" },
	{ "post-vanilla-query",
	  "POST /?Param1=value1 HTTP/1.1\n"
	  "Host:example.amazonaws.com\n"
	  "X-Amz-Date:20150830T123600Z\n"
	  "Authorization:AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11\n"
	  "\n",
	  "POST\n"
	  "/\n"
	  "Param1=value1\n"
	  "host:example.amazonaws.com\n"
	  "x-amz-date:20150830T123600Z\n"
	  "\n"
	  "host;x-amz-date\n"
	  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	  "AWS4-HMAC-SHA256\n"
	  "20150830T123600Z\n"
	  "20150830/us-east-1/service/aws4_request\n"
	  "9d659678c1756bb3113e2ce898845a0a79dbbc57b740555917687f1b3340fbbd" },
	{ "post-header-key-case",
	  "POST / HTTP/1.1\n"
	  "Host:example.amazonaws.com\n"
	  "X-Amz-Date:20150830T123600Z\n"
	  "Authorization:AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b\n"
	  "\n",
	  "POST\n"
	  "/\n"
	  "\n"
	  "host:example.amazonaws.com\n"
	  "x-amz-date:20150830T123600Z\n"
	  "\n"
	  "host;x-amz-date\n"
	  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	  "AWS4-HMAC-SHA256\n"
	  "20150830T123600Z\n"
	  "20150830/us-east-1/service/aws4_request\n"
	  "553f88c9e4d10fc9e109e2aeb65f030801b70c2f6468faca261d401ae622fc87" },
	{ "post-header-key-sort",
	  "POST / HTTP/1.1\n"
	  "Host:example.amazonaws.com\n"
	  "My-Header1:value1\n"
	  "X-Amz-Date:20150830T123600Z\n"
	  "Authorization:AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;my-header1;x-amz-date, Signature=c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c\n"
	  "\n",
	  "POST\n"
	  "/\n"
	  "\n"
	  "host:example.amazonaws.com\n"
	  "my-header1:value1\n"
	  "x-amz-date:20150830T123600Z\n"
	  "\n"
	  "host;my-header1;x-amz-date\n"
	  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	  "AWS4-HMAC-SHA256\n"
	  "20150830T123600Z\n"
	  "20150830/us-east-1/service/aws4_request\n"
	  "9368318c2967cf6de74404b30c65a91e8f6253e0a8659d6d5319f1a812f87d65" },
	{ "post-header-value-case",
	  "POST / HTTP/1.1\n"
	  "Host:example.amazonaws.com\n"
	  "My-Header1:VALUE1\n"
	  "X-Amz-Date:20150830T123600Z\n"
	  "Authorization:AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;my-header1;x-amz-date, Signature=cdbc9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d\n"
	  "\n",
	  "POST\n"
	  "/\n"
	  "\n"
	  "host:example.amazonaws.com\n"
	  "my-header1:VALUE1\n"
	  "x-amz-date:20150830T123600Z\n"
	  "\n"
	  "host;my-header1;x-amz-date\n"
	  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	  "AWS4-HMAC-SHA256\n"
	  "20150830T123600Z\n"
	  "20150830/us-east-1/service/aws4_request\n"
	  "d51ced243e649e3de6ef63afbbdcbca03131a21a7103a1583706a64618606a93" },
	{ "post-x-www-form-urlencoded",
	  "POST / HTTP/1.1\n"
	  "Content-Type:application/x-www-form-urlencoded\n"
	  "Host:example.amazonaws.com\n"
	  "Content-Length:13\n"
	  "X-Amz-Date:20150830T123600Z\n"
	  "x-amz-content-sha256:9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e\n"
	  "Authorization:AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=content-length;content-type;host;x-amz-content-sha256;x-amz-date, Signature=d3875051da38690788ef43de4db0d8f280229d82040bfac253562e56c3f20e0b\n"
	  "\n"
	  "Param1=value1",
	  "POST\n"
	  "/\n"
	  "\n"
	  "content-length:13\n"
	  "content-type:application/x-www-form-urlencoded\n"
	  "host:example.amazonaws.com\n"
	  "x-amz-content-sha256:9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e\n"
	  "x-amz-date:20150830T123600Z\n"
	  "\n"
	  "content-length;content-type;host;x-amz-content-sha256;x-amz-date\n"
	  "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e",
	  "AWS4-HMAC-SHA256\n"
	  "20150830T123600Z\n"
	  "20150830/us-east-1/service/aws4_request\n"
	  "b1edd1d03544c25390e32085d55b57acc9a3961bb59415ff86c45c3d89d16cfb" },
	{ "post-x-www-form-urlencoded-parameters",
	  "POST / HTTP/1.1\n"
	  "Content-Type:application/x-www-form-urlencoded; charset=utf-8\n"
	  "Host:example.amazonaws.com\n"
	  "Content-Length:13\n"
	  "X-Amz-Date:20150830T123600Z\n"
	  "x-amz-content-sha256:9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e\n"
	  "Authorization:AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=content-length;content-type;host;x-amz-content-sha256;x-amz-date, Signature=328d1b9eaadca9f5818ef05e8392801e091653bafec24fcab71e7344e7f51422\n"
	  "\n"
	  "Param1=value1",
	  "POST\n"
	  "/\n"
	  "\n"
	  "content-length:13\n"
	  "content-type:application/x-www-form-urlencoded; charset=utf-8\n"
	  "host:example.amazonaws.com\n"
	  "x-amz-content-sha256:9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e\n"
	  "x-amz-date:20150830T123600Z\n"
	  "\n"
	  "content-length;content-type;host;x-amz-content-sha256;x-amz-date\n"
	  "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e",
	  "AWS4-HMAC-SHA256\n"
	  "20150830T123600Z\n"
	  "20150830/us-east-1/service/aws4_request\n"
	  "a89f1a5b53e37702ee6363ce1da3ce8f54386f3c8f352ae652153c2982a0bc4d" },
};

static void run(const struct vector *v)
{
	_cleanup_free_ char *req = xstrdup(v->signed_request);
	struct sigv4_header h[16];
	size_t n = 0;
	const char *want_auth = NULL, *body = "";
	char *line, *save = NULL, *method, *target, *query = NULL, *sp;
	struct buf creq, sh, sts;
	char payload[OBJSTORE_SHA256_HEX], sig[65];
	struct sigv4_scope scope = { "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
				     "us-east-1", "service", "20150830T123600Z" };

	/* the body follows the first empty line */
	char *blank = strstr(req, "\n\n");
	if (blank) {
		blank[1] = '\0';
		body = blank + 2;
	}
	line = strtok_r(req, "\n", &save);
	method = line;
	sp = strchr(line, ' ');
	*sp = '\0';
	target = sp + 1;
	sp = strrchr(target, ' ');  /* " HTTP/1.1"; the path may hold a space */
	*sp = '\0';
	if ((query = strchr(target, '?')))
		*query++ = '\0';
	while ((line = strtok_r(NULL, "\n", &save))) {
		char *colon = strchr(line, ':');
		*colon = '\0';
		if (strcmp(line, "Authorization") == 0) {
			want_auth = colon + 1;
			continue;
		}
		h[n].name = line;
		h[n++].value = colon + 1;
	}
	sha256_of(body, strlen(body), payload);

	struct sigv4_req r = { method, target, query, h, n, payload };
	buf_init(&creq);
	buf_init(&sh);
	buf_init(&sts);
	sigv4_canonical_request(&r, &creq, &sh);
	sigv4_string_to_sign(&scope, creq.data, &sts);
	sigv4_signature(&scope, sts.data, sig);
	_cleanup_free_ char *auth = sigv4_authorization(&scope, &r);

	int ok = strcmp(creq.data, v->creq) == 0 && strcmp(sts.data, v->sts) == 0 && want_auth &&
		 strcmp(auth, want_auth) == 0 && strstr(want_auth, sig);
	CHECK(ok);
	if (!ok)
		fprintf(stderr, "%s:\n--- canonical request\n%s\n--- want\n%s\n--- string to sign\n%s\n"
			"--- want\n%s\n--- authorization\n%s\n--- want\n%s\n",
			v->name, creq.data, v->creq, sts.data, v->sts, auth, want_auth);
	buf_free(&creq);
	buf_free(&sh);
	buf_free(&sts);
}

int main(void)
{
	struct buf b;

	for (size_t i = 0; i < ARRAY_SIZE(vectors); i++)
		run(&vectors[i]);
	printf("%zu vectors of the AWS SigV4 test suite\n", ARRAY_SIZE(vectors));

	/* the encoder: unreserved bytes stay, '/' only where asked, the rest %XX */
	buf_init(&b);
	sigv4_uri_encode("a/b c~d-e_f.g+h*i%", 0, &b);
	CHECK(strcmp(b.data, "a/b%20c~d-e_f.g%2Bh%2Ai%25") == 0);
	buf_reset(&b);
	sigv4_uri_encode("a/b", 1, &b);
	CHECK(strcmp(b.data, "a%2Fb") == 0);
	buf_free(&b);

	/* lib/sha256: FIPS 180-2's "abc", and what passes for a digest */
	char d[SHA256_HEX_LEN];
	sha256_of("abc", 3, d);
	CHECK(strcmp(d, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0);
	CHECK(sha256_hex_ok(d));
	d[10] = 'A';
	CHECK(!sha256_hex_ok(d));
	d[10] = '0';
	CHECK(sha256_hex_ok(d));
	d[63] = '\0';
	CHECK(!sha256_hex_ok(d));
	CHECK(!sha256_hex_ok(""));
	CHECK(!sha256_hex_ok(NULL));
	return check_done("test-objstore-sigv4");
}
