/* sniff.c - SNI, Host and DNS query parsers (see sniff.h). Untrusted input:
 * every read is bounds-checked against len through the small cursor below. */
#include "sniff.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

struct cur {
	const uint8_t *p;
	size_t len, off;
	int bad;
};

static uint32_t get(struct cur *c, size_t n)
{
	uint32_t v = 0;

	if (c->bad || n > c->len - c->off) {
		c->bad = 1;
		return 0;
	}
	for (size_t i = 0; i < n; i++)
		v = v << 8 | c->p[c->off + i];
	c->off += n;
	return v;
}

static void skip(struct cur *c, size_t n)
{
	if (c->bad || n > c->len - c->off)
		c->bad = 1;
	else
		c->off += n;
}

int sniff_is_tls(const uint8_t *p, size_t len)
{
	/* handshake record, SSL 3.0 .. TLS 1.3 record versions */
	return len >= 1 && p[0] == 0x16 && (len < 2 || p[1] == 3);
}

int sniff_tls_sni(const uint8_t *p, size_t len, char out[SNIFF_HOST_MAX + 1])
{
	struct cur c = { p, len, 0, 0 };
	size_t rec_len, hs_len, ext_end;

	if (len < 5)
		return sniff_is_tls(p, len) ? 0 : -1;
	if (p[0] != 0x16 || p[1] != 3)
		return -1;
	rec_len = (size_t)p[3] << 8 | p[4];
	if (rec_len < 4 || rec_len > 16384)
		return -1;
	if (len < 5 + rec_len)
		return 0;
	/* Only the first record: a ClientHello split over several records
	 * (rare; huge post-quantum key shares) is decided on the IP. */
	c.len = 5 + rec_len;
	c.off = 5;
	if (get(&c, 1) != 1)
		return -1;
	hs_len = get(&c, 3);
	if (c.bad || hs_len > c.len - c.off)
		return -1;
	c.len = c.off + hs_len;
	skip(&c, 2 + 32);                /* client_version, random */
	skip(&c, get(&c, 1));            /* session_id */
	skip(&c, get(&c, 2));            /* cipher_suites */
	skip(&c, get(&c, 1));            /* compression_methods */
	if (c.bad || c.off == c.len)
		return -1;                   /* no extensions */
	ext_end = get(&c, 2);
	if (c.bad || ext_end > c.len - c.off)
		return -1;
	ext_end += c.off;
	while (!c.bad && c.off + 4 <= ext_end) {
		uint32_t type = get(&c, 2), elen = get(&c, 2);
		size_t end = c.off + elen;
		if (c.bad || end > ext_end)
			return -1;
		if (type != 0) {
			c.off = end;
			continue;
		}
		size_t list = get(&c, 2);
		if (c.bad || c.off + list > end)
			return -1;
		while (!c.bad && c.off + 3 <= end) {
			uint32_t nt = get(&c, 1), nl = get(&c, 2);
			if (c.bad || nl > end - c.off)
				return -1;
			if (nt == 0) {
				if (nl == 0 || nl > SNIFF_HOST_MAX)
					return -1;
				memcpy(out, c.p + c.off, nl);
				out[nl] = '\0';
				if (memchr(out, '\0', nl))
					return -1;
				return policy_host_valid(out) ? 1 : -1;
			}
			c.off += nl;
		}
		return -1;
	}
	return -1;
}

int sniff_is_http(const uint8_t *p, size_t len)
{
	static const char *const methods[] = { "GET ", "POST ", "PUT ", "HEAD ", "DELETE ",
					       "OPTIONS ", "PATCH ", "CONNECT ", "TRACE " };

	for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
		size_t m = strlen(methods[i]);
		size_t n = len < m ? len : m;
		if (n && memcmp(p, methods[i], n) == 0)
			return 1;
	}
	return 0;
}

int sniff_http_host(const uint8_t *p, size_t len, char out[SNIFF_HOST_MAX + 1])
{
	const uint8_t *end = NULL;
	size_t i, line;

	if (!sniff_is_http(p, len))
		return -1;
	for (i = 0; i + 3 < len; i++)
		if (p[i] == '\r' && p[i + 1] == '\n' && p[i + 2] == '\r' && p[i + 3] == '\n') {
			end = p + i;
			break;
		}
	if (!end)
		return 0;
	/* Walk header lines after the request line. */
	for (line = 0; p + line < end && p[line] != '\n'; line++)
		;
	line++;
	while (p + line < end) {
		size_t s = line, e = line;
		while (p + e < end && p[e] != '\r')
			e++;
		line = e + 2;
		if (e - s > 5 && strncasecmp((const char *)p + s, "host:", 5) == 0) {
			size_t v = s + 5, ve;
			while (v < e && (p[v] == ' ' || p[v] == '\t'))
				v++;
			ve = v;
			/* name ends at ':' (port) or whitespace; IPv6 literals
			 * ("[...]") are not names: decided on the IP. */
			while (ve < e && p[ve] != ':' && p[ve] != ' ' && p[ve] != '\t')
				ve++;
			if (ve == v || ve - v > SNIFF_HOST_MAX)
				return -1;
			memcpy(out, p + v, ve - v);
			out[ve - v] = '\0';
			if (memchr(out, '\0', ve - v))
				return -1;
			return policy_host_valid(out) ? 1 : -1;
		}
	}
	return -1;
}

int sniff_dns_query(const uint8_t *p, size_t len, struct dns_query *q)
{
	struct cur c = { p, len, 0, 0 };
	size_t n = 0;

	memset(q, 0, sizeof(*q));
	if (len < 12 || len > 512)
		return -1;
	q->id = (uint16_t)get(&c, 2);
	q->flags = (uint16_t)get(&c, 2);
	/* QR=0 (a query), OPCODE=0 (standard) */
	if (q->flags & 0x8000 || (q->flags >> 11 & 0xf) != 0)
		return -1;
	if (get(&c, 2) != 1)             /* QDCOUNT */
		return -1;
	skip(&c, 6);                     /* AN, NS, AR counts: EDNS OPT ignored */
	for (;;) {
		uint32_t l = get(&c, 1);
		if (c.bad || (l & 0xc0))     /* no compression in a question */
			return -1;
		if (l == 0)
			break;
		if (l > 63 || n + l + 1 > SNIFF_HOST_MAX || l > c.len - c.off)
			return -1;
		if (n)
			q->name[n++] = '.';
		memcpy(q->name + n, c.p + c.off, l);
		n += l;
		c.off += l;
	}
	q->name[n] = '\0';
	q->qtype = (uint16_t)get(&c, 2);
	q->qclass = (uint16_t)get(&c, 2);
	if (c.bad || n == 0 || memchr(q->name, '\0', n))
		return -1;
	if (!policy_host_valid(q->name))
		return -1;
	q->qend = c.off;
	return 0;
}

int dns_build_answer(const uint8_t *query, const struct dns_query *q, int rcode,
		     const uint32_t *a, size_t n, uint32_t ttl, uint8_t *out, size_t cap)
{
	size_t off = q->qend;

	if (off + n * 16 > cap || off < 12)
		return -1;
	memcpy(out, query, off);
	/* QR=1, keep opcode and RD, RA=1, rcode */
	uint16_t flags = (uint16_t)(0x8000 | (q->flags & 0x0100) | 0x0080 | (rcode & 0xf));
	out[2] = (uint8_t)(flags >> 8);
	out[3] = (uint8_t)flags;
	out[6] = (uint8_t)(n >> 8);
	out[7] = (uint8_t)n;
	memset(out + 8, 0, 4);           /* no authority, no additional (drops OPT) */
	for (size_t i = 0; i < n; i++) {
		uint8_t *r = out + off;
		r[0] = 0xc0;                 /* pointer to the question name at 12 */
		r[1] = 12;
		r[2] = 0, r[3] = 1;          /* A */
		r[4] = 0, r[5] = 1;          /* IN */
		r[6] = (uint8_t)(ttl >> 24), r[7] = (uint8_t)(ttl >> 16);
		r[8] = (uint8_t)(ttl >> 8), r[9] = (uint8_t)ttl;
		r[10] = 0, r[11] = 4;
		memcpy(r + 12, &a[i], 4);
		off += 16;
	}
	return (int)off;
}
