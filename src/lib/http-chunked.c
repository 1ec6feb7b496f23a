/* http-chunked.c - the incremental decoder of chunked bodies: request
 * bodies on the server, response bodies on the client.
 *
 * The framing comes from the peer and is untrusted: a size line (with its
 * extensions) and the trailer each have a hard limit, a size has at most 15
 * hex digits, and the body never grows past the caller's max.
 */
#include "http-internal.h"

#include <errno.h>
#include <string.h>

#define HTTP_MAX_CHUNK_LINE 4096        /* chunk size line incl. extensions */
#define HTTP_MAX_TRAILER (16 * 1024)

/* ------------------------------------------------------------ dechunking */

void http_dechunk_init(struct dechunk *d, uint64_t max)
{
	memset(d, 0, sizeof(*d));
	d->max = max;
}

/* Size line: hex digits, then optional extensions (ignored), then CRLF. */
static int dc_size_byte(struct dechunk *d, char c)
{
	if (++d->line > HTTP_MAX_CHUNK_LINE)
		return -EINVAL;
	if (d->state == DC_SIZE) {
		int v = hexval((unsigned char)c);
		if (v >= 0) {
			if (++d->digits > 15)
				return -EFBIG;
			d->size = d->size << 4 | (uint64_t)v;
			return 0;
		}
		if (d->digits == 0)
			return -EINVAL;
		if (c == ';' || c == ' ' || c == '\t') {
			d->state = DC_EXT;
			return 0;
		}
	} else if (c != '\r' && ((unsigned char)c < 0x20 && c != '\t')) {
		return -EINVAL;
	}
	if (c == '\r') {
		d->state = DC_SIZE_LF;
		return 0;
	}
	return d->state == DC_EXT ? 0 : -EINVAL;
}

static int dc_control_byte(struct dechunk *d, char c)
{
	switch (d->state) {
	case DC_SIZE:
	case DC_EXT:
		return dc_size_byte(d, c);
	case DC_SIZE_LF:
		if (c != '\n')
			return -EINVAL;
		if (d->size == 0) {
			d->state = DC_TRAILER;
			return 0;
		}
		if (d->size > d->max - d->total)
			return -EFBIG;
		d->state = DC_DATA;
		return 0;
	case DC_DATA_CR:
		d->state = DC_DATA_LF;
		return c == '\r' ? 0 : -EINVAL;
	case DC_DATA_LF:
		if (c != '\n')
			return -EINVAL;
		d->state = DC_SIZE;
		d->size = 0;
		d->digits = 0;
		d->line = 0;
		return 0;
	case DC_TRAILER:
		d->state = c == '\r' ? DC_FINAL_LF : DC_TRAILER_LINE;
		return 0;
	case DC_TRAILER_LINE:
		if (++d->trailer > HTTP_MAX_TRAILER)
			return -EINVAL;
		if (c == '\r')
			d->state = DC_TRAILER_LF;
		else if ((unsigned char)c < 0x20 && c != '\t')
			return -EINVAL;
		return 0;
	case DC_TRAILER_LF:
		d->state = DC_TRAILER;
		return c == '\n' ? 0 : -EINVAL;
	case DC_FINAL_LF:
		if (c != '\n')
			return -EINVAL;
		d->state = DC_DONE;
		return 0;
	default:
		return -EINVAL;
	}
}

int http_dechunk_feed(struct dechunk *d, const char *p, size_t n, size_t *used,
		      emit_fn emit, void *arg)
{
	size_t k = 0;
	int r = 0;

	while (k < n && d->state != DC_DONE) {
		if (d->state == DC_DATA) {
			size_t take = n - k < d->size ? n - k : (size_t)d->size;
			d->size -= take;
			d->total += take;
			if (d->size == 0)
				d->state = DC_DATA_CR;
			r = emit(arg, p + k, take);
			k += take;
		} else {
			r = dc_control_byte(d, p[k++]);
		}
		if (r)
			break;
	}
	*used = k;
	return r;
}

int http_emit_to_buf(void *arg, const char *p, size_t n)
{
	buf_add(arg, p, n);
	return 0;
}
