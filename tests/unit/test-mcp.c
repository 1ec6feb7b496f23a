/* test-mcp: the line framing and JSON-RPC answers of `airlock mcp`'s core
 * (src/cli/mcp.c, mcp-tools.c), with a transport that must not be called (only
 * tools/call reaches the API; test_mcp.py drives that end to end); and
 * run_code's reading of a code stream, from a canned one cut in pieces
 * (test_code_clients.py drives it against the real service). */
#include "check.h"

#include "../../src/cli/mcp.h"

static int never_request(void *arg, const char *method, const char *target, const char *ct,
			 const void *body, size_t len, struct http_resp *out, err_t *err)
{
	CHECK(!"no request expected");
	return -1;
}

static int never_stream(void *arg, const char *method, const char *target, const char *body,
			const struct http_stream_cbs *cbs, void *cbarg, err_t *err)
{
	CHECK(!"no request expected");
	return -1;
}

struct answers {
	int n;
	char text[8][512];
};

static void collect(void *arg, const char *msg, size_t len)
{
	struct answers *a = arg;

	CHECK(strlen(msg) == len && !memchr(msg, '\n', len));
	if (a->n < 8)
		snprintf(a->text[a->n], sizeof(a->text[0]), "%s", msg);
	a->n++;
}

static const struct mcp_transport none = { never_request, never_stream, NULL };

static void test_framing(void)
{
	struct mcp_server s;
	struct answers a = { 0 };
	const char *ping = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r\n";

	mcp_init(&s, "t", &none, NULL);
	/* one message cut anywhere is one answer */
	for (size_t cut = 0; cut <= strlen(ping); cut++) {
		a.n = 0;
		mcp_feed(&s, ping, cut, collect, &a);
		mcp_feed(&s, ping + cut, strlen(ping) - cut, collect, &a);
		CHECK(a.n == 1);
		CHECK(strcmp(a.text[0], "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}") == 0);
	}
	/* blank lines and a notification: no answer; a last line without '\n'
	 * is answered at EOF */
	a.n = 0;
	const char *note = "\n  \n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n";
	const char *last = "{\"jsonrpc\":\"2.0\",\"id\":\"z\",\"method\":\"ping\"}";
	mcp_feed(&s, note, strlen(note), collect, &a);
	CHECK(a.n == 0);
	mcp_feed(&s, last, strlen(last), collect, &a);
	CHECK(a.n == 0);
	mcp_finish(&s, collect, &a);
	CHECK(a.n == 1 && strstr(a.text[0], "\"id\":\"z\""));

	/* a line past the limit: one error, the rest of it dropped, then on */
	size_t big = MCP_MAX_LINE + 10;
	char *junk = malloc(big);
	memset(junk, 'x', big);
	a.n = 0;
	mcp_feed(&s, junk, big / 2, collect, &a);
	mcp_feed(&s, junk, big - big / 2, collect, &a);
	CHECK(a.n == 1 && strstr(a.text[0], "-32700") && strstr(a.text[0], "too long"));
	mcp_feed(&s, "xyz\n", 4, collect, &a);   /* still the long line: dropped */
	CHECK(a.n == 1);
	mcp_feed(&s, ping, strlen(ping), collect, &a);
	CHECK(a.n == 2 && strstr(a.text[1], "\"result\":{}"));
	free(junk);
	mcp_free(&s);
}

static void expect(struct mcp_server *s, const char *msg, const char *want)
{
	char *a = mcp_handle(s, msg, strlen(msg));

	if (!want) {
		CHECK(a == NULL);
	} else if (!a || !strstr(a, want)) {
		fprintf(stderr, "for %s\n  got %s\n  want %s\n", msg, a ? a : "(none)", want);
		failures++;
	}
	free(a);
}

static void test_answers(void)
{
	struct mcp_server s;

	mcp_init(&s, "9.9", &none, NULL);
	expect(&s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2024-11-05\"}}",
	       "\"protocolVersion\":\"2024-11-05\"");
	expect(&s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2030-01-01\"}}",
	       "\"protocolVersion\":\"" MCP_PROTOCOL_VERSION "\"");
	expect(&s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2030-01-01\"}}",
	       "\"serverInfo\":{\"name\":\"airlock\",\"title\":\"Airlock sandboxes\",\"version\":\"9.9\"}");
	CHECK(s.initialized);
	expect(&s, "nope", "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,");
	expect(&s, "[]", "\"code\":-32600,\"message\":\"batches are not supported");
	expect(&s, "{\"jsonrpc\":\"2.0\",\"id\":-5,\"method\":\"x/y\"}",
	       "{\"jsonrpc\":\"2.0\",\"id\":-5,\"error\":{\"code\":-32601,");
	expect(&s, "{\"jsonrpc\":\"2.0\",\"id\":\"q\",\"method\":\"tools/call\",\"params\":{\"name\":\"exec\",\"arguments\":{\"sandbox\":\"a/b\",\"cmd\":\"x\"}}}",
	       "\"id\":\"q\",\"error\":{\"code\":-32602,\"message\":\"argument `sandbox` of exec");
	expect(&s, "{\"jsonrpc\":\"2.0\",\"id\":\"q\",\"method\":\"tools/call\",\"params\":{\"name\":\"files_read\",\"arguments\":{\"sandbox\":\"a\",\"path\":\"/x\",\"max_bytes\":5000000}}}",
	       "`max_bytes` of files_read is out of range");
	expect(&s, "{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":{\"name\":\"exec\"}}", NULL);
	expect(&s, "{\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":1,\"message\":\"m\"}}", NULL);
	expect(&s, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/list\"}", "\"name\":\"rollback\"");
	mcp_free(&s);
}

/* A code stream as E2B's service sends it: text, a PNG result (the 1x1
 * PNG's first bytes are enough for the base64 check), an error. */
static const char code_stream[] =
	"{\"type\":\"stdout\",\"text\":\"hi\\n\"}\n"
	"{\"type\":\"stderr\",\"text\":\"w\"}\n"
	"{\"type\":\"result\",\"text\":\"<Figure>\",\"png\":\"iVBORw0K\\nGgo=\",\"is_main_result\":false}\n"
	"{\"type\":\"result\",\"png\":\"not base64!\",\"is_main_result\":false}\n"
	"{\"type\":\"result\",\"text\":\"2\",\"html\":\"<b>2</b>\",\"is_main_result\":true}\n"
	"{\"type\":\"error\",\"name\":\"NameError\",\"value\":\"x\",\"traceback\":[\"l1\",\"l2\"]}\n"
	"{\"type\":\"number_of_executions\",\"execution_count\":7}\n"
	"{\"type\":\"end_of_execution\"}\n";

static int code_stream_fn(void *arg, const char *method, const char *target, const char *body,
			  const struct http_stream_cbs *cbs, void *cbarg, err_t *err)
{
	struct http_resp head = { .status = 200 };
	size_t n = strlen(code_stream);

	CHECK(strcmp(method, "POST") == 0 && strcmp(target, "/v1/sandboxes/sb1/code") == 0);
	CHECK(strstr(body, "\"code\":\"1+1\"") && strstr(body, "\"env_vars\":{\"A\":\"b\"}") &&
	      strstr(body, "\"timeout_ms\":5000"));
	if (cbs->on_head(cbarg, &head))
		return 0;
	for (size_t off = 0; off < n; off += 7)
		if (cbs->on_data(cbarg, code_stream + off, n - off < 7 ? n - off : 7))
			return 0;
	return 0;
}

static void test_run_code(void)
{
	const struct mcp_transport t = { never_request, code_stream_fn, NULL };
	struct mcp_server s;
	const char *msg = "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":{\"name\":"
			  "\"run_code\",\"arguments\":{\"sandbox\":\"sb1\",\"code\":\"1+1\",\"env\":{\"A\":"
			  "\"b\"},\"timeout_s\":5}}}";
	char *a;

	mcp_init(&s, "test", &t, NULL);
	a = mcp_handle(&s, msg, strlen(msg));
	CHECK(a);
	json *j = json_parse(a, strlen(a), NULL);
	const json *r = j ? json_get(j, "result") : NULL;
	const json *content = r ? json_get(r, "content") : NULL;
	const json *sc = r ? json_get(r, "structuredContent") : NULL;
	CHECK(content && content->type == JSON_ARR && content->n == 2);
	if (content && content->n == 2) {
		CHECK(strcmp(json_get_str(content->items[1], "type"), "image") == 0);
		CHECK(strcmp(json_get_str(content->items[1], "mimeType"), "image/png") == 0);
		CHECK(strcmp(json_get_str(content->items[1], "data"), "iVBORw0KGgo=") == 0);
	}
	CHECK(sc && strcmp(json_get_str(sc, "stdout"), "hi\n") == 0 &&
	      strcmp(json_get_str(sc, "stderr"), "w") == 0);
	CHECK(sc && json_get_int(sc, "execution_count", -1, NULL) == 7);
	CHECK(sc && json_get_int(sc, "images_dropped", -1, NULL) == 1);
	const json *res = sc ? json_get(sc, "results") : NULL;
	CHECK(res && res->n == 3 && strcmp(json_get_str(res->items[2], "html"), "<b>2</b>") == 0);
	const json *e = sc ? json_get(sc, "error") : NULL;
	CHECK(e && strcmp(json_get_str(e, "name"), "NameError") == 0 &&
	      strcmp(json_get_str(e, "traceback"), "l1\nl2\n") == 0);
	CHECK(r && !json_get_bool(r, "isError", true, NULL));
	json_free(j);
	free(a);
	mcp_free(&s);
}

int main(void)
{
	test_framing();
	test_answers();
	test_run_code();
	return check_done("test-mcp");
}
