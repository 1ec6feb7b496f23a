/* fuzz-node-ports: the node's rewrite of a service's answer head, bytes that
 * come from inside a sandbox. Nothing may crash or read past the input; a
 * rewritten head keeps the status line and ends with a blank line, and never
 * carries the service's Keep-Alive. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/node/node-internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* An exact-size copy: ASan then sees any read past the end. */
	char *h = malloc(size ? size : 1);
	struct buf out;

	memcpy(h, data, size);
	buf_init(&out);
	int status = ports_rewrite_head(h, size, &out);
	if (status >= 0) {
		if (status < 100 || status > 999 || out.len < 12 || memcmp(out.data, h, 12) != 0)
			abort();
		if (memmem(out.data, out.len, "\nKeep-Alive:", 12))
			abort();
	} else if (out.len) {
		abort();
	}
	buf_free(&out);
	free(h);
	return 0;
}
