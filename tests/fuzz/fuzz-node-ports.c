/* fuzz-node-ports: the node's rewrite of a service's answer head, bytes that
 * come from inside a sandbox. Nothing may crash or read past the input; a
 * rewritten head keeps the status line and never carries the service's
 * Keep-Alive, nor a Set-Cookie with a Domain attribute (its value is what a
 * second rewrite leaves unchanged), nor more Set-Cookie fields than the
 * bound, nor a NUL or a bare CR. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/lib/http-cookie.h"
#include "../../src/node/node-internal.h"

/* Every "Set-Cookie: " line we wrote holds a value without Domain. */
static void check_cookies(const char *o, size_t n)
{
	static const char sc[] = "\nSet-Cookie: ";
	const char *p = o, *end = o + n;
	unsigned k = 0;

	while ((p = memmem(p, (size_t)(end - p), sc, sizeof(sc) - 1))) {
		const char *v = p + sizeof(sc) - 1;
		const char *e = memmem(v, (size_t)(end - v), "\r\n", 2);
		struct buf again;

		if (!e)
			abort();
		buf_init(&again);
		if (!http_setcookie_rewrite(v, (size_t)(e - v), NULL, &again) ||
		    again.len != (size_t)(e - v) || (again.len && memcmp(again.data, v, again.len)))
			abort();
		buf_free(&again);
		if (++k > HTTP_SETCOOKIE_MAX_COUNT)
			abort();
		p = e;
	}
}

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
		check_cookies(out.data, out.len);
		/* No NUL, no CR but before LF: nothing a browser could split
		 * into a line we did not rewrite. */
		for (size_t i = 0; i < out.len; i++)
			if (out.data[i] == '\0' ||
			    (out.data[i] == '\r' && (i + 1 == out.len || out.data[i + 1] != '\n')))
				abort();
	} else if (out.len) {
		abort();
	}
	buf_free(&out);
	free(h);
	return 0;
}
