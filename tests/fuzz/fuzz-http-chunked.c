/* fuzz-http-chunked: the incremental chunked-body decoder (http-chunked.c)
 * that both the server (request bodies from clients, a sandbox's included
 * through the ports proxy) and the client (answers of S3, a KMS, a node)
 * run on bytes a peer controls. Differential: the input decoded in one piece
 * and in pieces (sizes picked by the input's first byte) must agree on the
 * result, the bytes consumed and the body emitted; the body never exceeds
 * the cap. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/lib/http-internal.h"

#define MAX_BODY 4096

struct out {
	char buf[MAX_BODY];
	size_t len;
};

static int emit(void *arg, const char *p, size_t n)
{
	struct out *o = arg;

	if (n > sizeof(o->buf) - o->len)
		abort();   /* past the cap it was given */
	memcpy(o->buf + o->len, p, n);
	o->len += n;
	return 0;
}

/* Feeds data in pieces of `step` bytes (0: all at once) until the body ends
 * or fails. Returns the decoder's result; *used is what it consumed. */
static int decode(const uint8_t *data, size_t size, size_t step, struct out *o, size_t *used)
{
	struct dechunk d;
	size_t off = 0;

	http_dechunk_init(&d, MAX_BODY);
	o->len = 0;
	while (off < size) {
		size_t n = step ? step : size;
		size_t u = 0;
		int r;

		if (n > size - off)
			n = size - off;
		r = http_dechunk_feed(&d, (const char *)data + off, n, &u, emit, o);
		if (u > n)
			abort();
		off += u;
		if (r < 0) {
			*used = off;
			return r;
		}
		if (d.state == DC_DONE)
			break;
		if (u < n)
			abort();   /* consumed less without having finished */
	}
	*used = off;
	return d.state == DC_DONE ? 1 : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct out whole, pieces;
	size_t used_whole, used_pieces, step;
	int r_whole, r_pieces;

	if (!size)
		return 0;
	step = (size_t)(data[0] % 7) + 1;
	data++, size--;
	r_whole = decode(data, size, 0, &whole, &used_whole);
	r_pieces = decode(data, size, step, &pieces, &used_pieces);
	if (r_whole != r_pieces)
		abort();
	if (r_whole == 1 && used_whole != used_pieces)
		abort();
	/* the same body, whether or not it ended */
	if (r_whole >= 0 && (whole.len != pieces.len || memcmp(whole.buf, pieces.buf, whole.len)))
		abort();
	return 0;
}
