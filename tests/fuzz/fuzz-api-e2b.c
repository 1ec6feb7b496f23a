/* fuzz-api-e2b: the E2B API's parsers of client bytes (src/compat/e2b/
 * e2b-wire.c): a Connect stream request's envelope, a multipart
 * Content-Type's boundary, and a multipart/form-data body. The first input
 * byte picks how the rest is split: with a boundary taken from the input's
 * first line, the remainder is the body. Nothing may crash or read out of
 * bounds; an accepted envelope's message must lie inside the input, every
 * part's data inside the body, and the number of parts within the cap. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/compat/e2b/e2b-wire.h"

static struct multipart_part parts[MULTIPART_MAX_PARTS];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *in = (const char *)data;
	const char *js;
	size_t jn;
	err_t err = { 0 };

	if (connect_unwrap_request(in, size, &js, &jn, &err) == 0 &&
	    (js < in || js + jn > in + size || jn + CONNECT_HEADER_LEN != size))
		abort();

	/* first line: a Content-Type; the rest: a body */
	const char *nl = memchr(in, '\n', size);
	size_t hn = nl ? (size_t)(nl - in) : size;
	char *ct = malloc(hn + 1), boundary[80];
	memcpy(ct, in, hn);
	ct[hn] = '\0';
	if (multipart_boundary(ct, boundary, sizeof(boundary), &err) == 0) {
		size_t bl = strlen(boundary);
		if (bl == 0 || bl > 70)
			abort();
		const char *body = nl ? nl + 1 : in + size;
		size_t blen = (size_t)(in + size - body);
		/* a copy of exactly blen bytes, so reads past it are caught */
		char *b = malloc(blen ? blen : 1);
		memcpy(b, body, blen);
		int n = multipart_parse(b, blen, boundary, parts, MULTIPART_MAX_PARTS, &err);
		if (n > MULTIPART_MAX_PARTS)
			abort();
		for (int i = 0; i < n; i++)
			if (parts[i].data < b || parts[i].data + parts[i].len > b + blen ||
			    !parts[i].name[0])
				abort();
		free(b);
	}
	/* the multipart parser on any bytes with a fixed boundary */
	int n = multipart_parse(in, size, "XyZ", parts, 4, &err);
	if (n > 4)
		abort();
	free(ct);
	return 0;
}
