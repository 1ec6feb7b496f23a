/* e2b-wire.h - the byte formats of E2B's envd protocol, parsed and written
 * without any I/O, so they can be fuzzed on their own
 * (tests/fuzz/fuzz-api-e2b.c).
 *
 * Connect enveloped messages (streaming RPCs): a flags byte, a big-endian
 * uint32 length, then that many bytes of JSON. Flag 0x02 marks the
 * end-of-stream message (a JSON object with "error"/"metadata"); 0x01 a
 * compressed one, which we never accept (we announce no compression).
 *
 * multipart/form-data (envd's POST /files): parts with their own head and
 * a filename, split on the boundary of the Content-Type header. */
#ifndef AIRLOCK_E2B_WIRE_H
#define AIRLOCK_E2B_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../lib/err.h"
#include "../../lib/util.h"

#define CONNECT_FLAG_COMPRESSED 0x01
#define CONNECT_FLAG_END 0x02
#define CONNECT_HEADER_LEN 5

/* The one request message of a server-streaming call: body must be exactly
 * one uncompressed, non-end envelope. *json points into body (borrowed),
 * *json_len its length. -EINVAL with err on anything else. */
int connect_unwrap_request(const char *body, size_t len, const char **json, size_t *json_len,
			   err_t *err);
/* Append one envelope with flags around json[0..n). */
void connect_frame_append(struct buf *out, uint8_t flags, const char *json, size_t n);

/* The boundary parameter of a multipart/form-data Content-Type, into out
 * (1..70 characters, RFC 2046). -EINVAL with err when absent or bad. */
int multipart_boundary(const char *content_type, char *out, size_t cap, err_t *err);

#define MULTIPART_MAX_PARTS 64
struct multipart_part {
	char filename[4096];   /* from Content-Disposition; "" when none */
	char name[64];         /* the form field's name */
	const char *data;      /* borrowed from the body */
	size_t len;
};
/* Split body on boundary into parts (at most max). Returns the number of
 * parts, or -EINVAL with err for a malformed body (no closing delimiter,
 * a part head over 8 KiB or without CRLFCRLF, more than max parts). */
int multipart_parse(const char *body, size_t len, const char *boundary,
		    struct multipart_part *parts, size_t max, err_t *err);

#endif
