/* e2b-wire.c - Connect envelopes and multipart/form-data, bytes only.
 * Everything here reads untrusted client bytes: every length is checked
 * against what is there before it is used. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "e2b-wire.h"

int connect_unwrap_request(const char *body, size_t len, const char **json, size_t *json_len,
			   err_t *err)
{
	const unsigned char *p = (const unsigned char *)body;
	uint32_t n;

	if (len < CONNECT_HEADER_LEN)
		return err_set(err, EINVAL, "the request is not a Connect envelope (%zu bytes)", len);
	if (p[0] != 0)
		return err_set(err, EINVAL, "envelope flags 0x%02x: compressed or end-of-stream "
				 "request messages are not accepted", p[0]);
	n = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
	if (n != len - CONNECT_HEADER_LEN)
		return err_set(err, EINVAL, "envelope length %u, but %zu bytes follow its header "
				 "(exactly one message is expected)", n, len - CONNECT_HEADER_LEN);
	*json = body + CONNECT_HEADER_LEN;
	*json_len = n;
	return 0;
}

void connect_frame_append(struct buf *out, uint8_t flags, const char *json, size_t n)
{
	unsigned char h[CONNECT_HEADER_LEN] = { flags, (unsigned char)(n >> 24),
						(unsigned char)(n >> 16), (unsigned char)(n >> 8),
						(unsigned char)n };
	buf_add(out, h, sizeof(h));
	buf_add(out, json, n);
}

/* RFC 2046 bchars, minus space (we never need it and it complicates
 * trimming). */
static bool bchar(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       strchr("'()+_,-./:=?", ch);
}

int multipart_boundary(const char *ct, char *out, size_t cap, err_t *err)
{
	const char *p;
	size_t n = 0;

	if (!ct || strncasecmp(ct, "multipart/form-data", 19) != 0)
		return err_set(err, EINVAL, "Content-Type must be multipart/form-data or "
				 "application/octet-stream");
	for (p = ct + 19; (p = strchr(p, ';')); ) {
		p++;
		p += strspn(p, " \t");
		if (strncasecmp(p, "boundary=", 9) == 0)
			break;
	}
	if (!p)
		return err_set(err, EINVAL, "multipart Content-Type without a boundary");
	p += 9;
	bool quoted = *p == '"';
	p += quoted;
	while (*p && *p != '"' && *p != ';' && n + 1 < cap && n < 70) {
		if (!bchar(*p))
			return err_set(err, EINVAL, "bad character in the multipart boundary");
		out[n++] = *p++;
	}
	if (n == 0 || (quoted && *p != '"') || (!quoted && *p && *p != ';' && *p != ' '))
		return err_set(err, EINVAL, "multipart boundary must be 1..70 characters");
	out[n] = '\0';
	return 0;
}

/* A parameter's value from a Content-Disposition line [v, end): quoted
 * (backslash escapes) or a token. FormData writers escape `"`, CR and LF
 * in file names as %22, %0D, %0A: those three are decoded, nothing else. */
static bool disposition_param(const char *v, const char *end, const char *name, char *out,
			      size_t cap)
{
	size_t nl = strlen(name);

	for (const char *p = v; p < end; p++) {
		if ((p == v || p[-1] == ';' || p[-1] == ' ' || p[-1] == '\t') &&
		    (size_t)(end - p) > nl && strncasecmp(p, name, nl) == 0 && p[nl] == '=') {
			const char *s = p + nl + 1;
			size_t n = 0;
			bool q = s < end && *s == '"';

			s += q;
			while (s < end && (q ? *s != '"' : (*s != ';' && *s != ' '))) {
				char ch = *s++;

				if (q && ch == '\\' && s < end)
					ch = *s++;
				else if (ch == '%' && end - s >= 2 &&
					 (!strncasecmp(s, "22", 2) || !strncasecmp(s, "0a", 2) ||
					  !strncasecmp(s, "0d", 2))) {
					ch = (char)(hexval(s[0]) << 4 | hexval(s[1]));
					s += 2;
				}
				if (n + 1 >= cap || ch == '\0')
					return false;
				out[n++] = ch;
			}
			if (q && s >= end)
				return false;
			out[n] = '\0';
			return true;
		}
	}
	return false;
}

#define PART_HEAD_MAX 8192

static int part_head(const char *h, size_t n, struct multipart_part *part, err_t *err)
{
	const char *p = h, *end = h + n;

	part->filename[0] = part->name[0] = '\0';
	while (p < end) {
		const char *eol = memmem(p, (size_t)(end - p), "\r\n", 2);
		const char *le = eol ? eol : end;

		if ((size_t)(le - p) > 20 && strncasecmp(p, "Content-Disposition:", 20) == 0) {
			const char *v = p + 20;

			v += strspn(v, " \t");
			if ((size_t)(le - v) < 9 || strncasecmp(v, "form-data", 9) != 0)
				return err_set(err, EINVAL, "a part that is not form-data");
			if (!disposition_param(v, le, "name", part->name, sizeof(part->name)))
				return err_set(err, EINVAL, "a form-data part without a usable name");
			if (memmem(v, (size_t)(le - v), "filename=", 9) &&
			    !disposition_param(v, le, "filename", part->filename,
					       sizeof(part->filename)))
				return err_set(err, EINVAL, "a part's file name is malformed or "
						 "longer than %zu bytes", sizeof(part->filename) - 1);
		}
		p = eol ? eol + 2 : end;
	}
	if (!part->name[0])
		return err_set(err, EINVAL, "a part without Content-Disposition");
	return 0;
}

int multipart_parse(const char *body, size_t len, const char *boundary,
		    struct multipart_part *parts, size_t max, err_t *err)
{
	char delim[80];
	size_t dl = (size_t)snprintf(delim, sizeof(delim), "\r\n--%s", boundary);
	const char *end = body + len, *p;
	size_t count = 0;

	if (dl >= sizeof(delim) || !boundary[0])
		return err_set(err, EINVAL, "bad multipart boundary");
	/* The first delimiter may open the body (no CRLF before it). */
	if (len >= dl - 2 && memcmp(body, delim + 2, dl - 2) == 0)
		p = body + dl - 2;
	else {
		p = memmem(body, len, delim, dl);
		if (!p)
			return err_set(err, EINVAL, "multipart body without its boundary");
		p += dl;
	}
	for (;;) {
		/* after a delimiter: "--" closes, else optional spaces and CRLF */
		if (end - p >= 2 && p[0] == '-' && p[1] == '-')
			return (int)count;
		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
		if (end - p < 2 || p[0] != '\r' || p[1] != '\n')
			return err_set(err, EINVAL, "multipart body cut short after a boundary");
		p += 2;
		if (count == max)
			return err_set(err, EINVAL, "more than %zu parts", max);
		size_t room = (size_t)(end - p) < PART_HEAD_MAX + 4 ? (size_t)(end - p)
								    : PART_HEAD_MAX + 4;
		const char *he = memmem(p, room, "\r\n\r\n", 4);
		if (!he && room >= 2 && p[0] == '\r' && p[1] == '\n')
			he = p - 2;   /* a part with no header lines at all */
		if (!he)
			return err_set(err, EINVAL, "a part's head is missing or over %d bytes",
				       PART_HEAD_MAX);
		struct multipart_part *part = &parts[count];
		if (part_head(p, he > p ? (size_t)(he - p) : 0, part, err) < 0)
			return -EINVAL;
		const char *data = he + 4;
		const char *next = memmem(data, (size_t)(end - data), delim, dl);
		if (!next)
			return err_set(err, EINVAL, "multipart body without its closing boundary");
		part->data = data;
		part->len = (size_t)(next - data);
		count++;
		p = next + dl;
	}
}
