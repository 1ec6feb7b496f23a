/* fuzz-cred-head: head_parse on arbitrary bytes (a sandbox controls every
 * byte of the requests the gateway rewrites). Must never crash or read past
 * size; an accepted head must write back to bytes that parse to the same
 * head, so a rewrite can never change how the request is framed; a field
 * set is there even when the client sent the most fields it may. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/gateway/inject.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http_head h, again;
	struct buf out;
	long n, m;

	n = head_parse((const char *)data, size, &h);
	if (n <= 0)
		return 0;
	if ((size_t)n > size || h.n > HEAD_MAX_FIELDS || !h.method[0] || !h.target[0])
		abort();
	head_set(&h, "Authorization", "Bearer x");
	buf_init(&out);
	head_write(&h, &out);
	if (!head_get(&h, "Authorization"))
		abort();    /* a field set is never lost, however many came */
	if (h.n > HEAD_MAX_FIELDS) {
		/* one more than a client may send: the rewrite only */
		head_free(&h);
		buf_free(&out);
		return 0;
	}
	m = head_parse(out.data, out.len, &again);
	if (m != (long)out.len || again.n != h.n || strcmp(again.target, h.target) != 0)
		abort();
	for (size_t i = 0; i < h.n; i++)
		if (strcmp(again.f[i].name, h.f[i].name) || strcmp(again.f[i].value, h.f[i].value))
			abort();
	head_free(&again);
	head_free(&h);
	buf_free(&out);
	return 0;
}
