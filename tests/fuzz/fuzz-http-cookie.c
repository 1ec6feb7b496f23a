/* fuzz-http-cookie: the rewrite of a Set-Cookie value a sandbox's service
 * sent (lib/http-cookie.h). Nothing may crash or read past the input; what
 * it keeps has no Domain attribute (a second rewrite changes nothing), is
 * never longer than the input, and starts with the input's cookie pair. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/lib/http-cookie.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* An exact-size copy: ASan then sees any read past the end. */
	char *v = malloc(size ? size : 1);
	struct buf out, again;

	memcpy(v, data, size);
	buf_init(&out);
	buf_init(&again);
	if (http_setcookie_rewrite(v, size, HTTP_PORT_TOKEN_COOKIE, &out)) {
		const char *semi = memchr(v, ';', size);
		size_t pair = semi ? (size_t)(semi - v) : size;
		if (out.len > size || out.len < pair || (pair && memcmp(out.data, v, pair) != 0))
			abort();
		if (!http_setcookie_rewrite(out.data ? out.data : "", out.len,
					    HTTP_PORT_TOKEN_COOKIE, &again) ||
		    again.len != out.len || (out.len && memcmp(again.data, out.data, out.len)))
			abort();
	} else if (out.len) {
		abort();
	}
	buf_free(&again);
	buf_free(&out);
	free(v);
	return 0;
}
