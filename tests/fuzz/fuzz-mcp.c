/* fuzz-mcp: the core of `airlock mcp` (src/cli/mcp*.c) on arbitrary bytes
 * from both of its sides: an agent's messages, and the API's answers to
 * the tool calls they make. It must never crash, and every answer it emits
 * must be one line of JSON: an object with "jsonrpc":"2.0" and exactly one
 * of result or error.
 *
 * Input: byte 0 picks the API's status (and bit 7 an unreachable server),
 * byte 1 the size of the pieces the messages are fed in; then the body every
 * API request gets, up to a line "--"; then the agent's messages. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/cli/mcp.h"

struct canned {
	int status;
	bool unreachable;
	const char *body;
	size_t len;
	size_t piece;
};

static int fake_request(void *arg, const char *method, const char *target, const char *ctype,
			const void *body, size_t len, struct http_resp *out, err_t *err)
{
	struct canned *c = arg;

	if (c->unreachable) {
		err_set(err, -ECONNREFUSED, "connect: refused");
		return -1;
	}
	out->status = c->status;
	buf_add(&out->body, c->body, c->len);
	return 0;
}

static int fake_stream(void *arg, const char *method, const char *target, const char *json_body,
		       const struct http_stream_cbs *cbs, void *cbarg, err_t *err)
{
	struct canned *c = arg;
	struct http_resp head = { .status = c->status };
	int r;

	if (c->unreachable) {
		err_set(err, -ECONNREFUSED, "connect: refused");
		return -1;
	}
	if ((r = cbs->on_head(cbarg, &head)))
		return r;
	/* the body in pieces, as a network would cut it */
	for (size_t off = 0; off < c->len; off += c->piece) {
		size_t n = c->len - off < c->piece ? c->len - off : c->piece;
		if ((r = cbs->on_data(cbarg, c->body + off, n)))
			return r;
	}
	return 0;
}

static void check_answer(void *arg, const char *msg, size_t len)
{
	err_t err = { 0 };
	json *j;

	if (memchr(msg, '\n', len) || strlen(msg) != len) {
		fprintf(stderr, "answer with a newline or NUL:\n%s\n", msg);
		abort();
	}
	/* Our parser refuses \u0000, by design; a command's output may hold
	 * NULs and sends them so (valid JSON). \u0001 in their place keeps
	 * the text valid JSON whatever precedes it. */
	char *text = malloc(len + 1);
	memcpy(text, msg, len + 1);
	for (char *z = text; (z = strstr(z, "\\u0000")); z += 6)
		z[5] = '1';
	j = json_parse(text, len, &err);
	free(text);
	if (!j || j->type != JSON_OBJ) {
		fprintf(stderr, "answer is not a JSON object (%s):\n%s\n", err.msg, msg);
		abort();
	}
	const char *v = json_get_str(j, "jsonrpc");
	bool has_result = json_get(j, "result") != NULL, has_error = json_get(j, "error") != NULL;
	if (!v || strcmp(v, "2.0") != 0 || has_result == has_error || !json_get(j, "id")) {
		fprintf(stderr, "not a JSON-RPC answer:\n%s\n", msg);
		abort();
	}
	json_free(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int statuses[] = { 200, 201, 204, 404, 409, 500, 401, 302 };
	struct canned c = { 0 };
	struct mcp_server s;
	const char *p = (const char *)data, *end = p + size, *sep;
	char *copy;

	if (size < 2)
		return 0;
	c.status = statuses[data[0] % 8];
	c.unreachable = data[0] & 0x80;
	c.piece = (size_t)(data[1] % 64) + 1;
	p += 2;
	sep = memmem(p, (size_t)(end - p), "\n--\n", 4);
	if (sep) {
		c.body = p;
		c.len = (size_t)(sep - p);
		p = sep + 4;
	} else {
		c.body = "";
	}
	const struct mcp_transport t = { fake_request, fake_stream, &c };
	mcp_init(&s, "fuzz", &t, NULL);
	/* an exact-size copy so ASan catches any read past the end */
	size_t n = (size_t)(end - p);
	copy = malloc(n ? n : 1);
	memcpy(copy, p, n);
	for (size_t off = 0; off < n; off += c.piece)
		mcp_feed(&s, copy + off, n - off < c.piece ? n - off : c.piece, check_answer, NULL);
	mcp_finish(&s, check_answer, NULL);
	/* and the whole input as one message, as mcp_handle gets it */
	char *a = mcp_handle(&s, copy, n);
	if (a) {
		check_answer(NULL, a, strlen(a));
		free(a);
	}
	free(copy);
	mcp_free(&s);
	return 0;
}
