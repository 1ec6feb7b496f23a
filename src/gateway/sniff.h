/* sniff.h - parsers for the first bytes a sandbox sends, and for its DNS
 * queries. Every input here comes from inside a sandbox (untrusted): each
 * parser reads only within len, has fixed output sizes, and is fuzzed
 * (tests/fuzz/fuzz-sni.c, fuzz-httphost.c, fuzz-dns.c).
 *
 * Return convention of the stream sniffers: 1 = found (out filled), 0 = need
 * more bytes, -1 = not this protocol or malformed (decide on the IP). */
#ifndef AIRLOCK_GATEWAY_SNIFF_H
#define AIRLOCK_GATEWAY_SNIFF_H

#include <stddef.h>
#include <stdint.h>

#include "../policy/policy.h"

#define SNIFF_HOST_MAX POLICY_HOST_MAX

/* A TLS record holding a ClientHello: the server_name (type host_name),
 * lower-cased, validated as a host name. -1 for a ClientHello without SNI
 * and for anything that is not TLS. */
int sniff_tls_sni(const uint8_t *p, size_t len, char out[SNIFF_HOST_MAX + 1]);

/* An HTTP/1.x request head: the Host header's name (port and trailing dot
 * stripped, lower-cased, validated). 0 until the head's "\r\n\r\n" arrived;
 * -1 for a complete head without a valid Host, or for what is not HTTP. */
int sniff_http_host(const uint8_t *p, size_t len, char out[SNIFF_HOST_MAX + 1]);

/* True when the first bytes look like a TLS handshake record / an HTTP
 * request line, so the proxy knows which sniffer to wait for. */
int sniff_is_tls(const uint8_t *p, size_t len);
int sniff_is_http(const uint8_t *p, size_t len);

/* One DNS query (RFC 1035): header with QDCOUNT 1, the question name
 * (uncompressed labels only, lower-cased), type and class. -1 when malformed
 * or not a standard query. *qend is the offset just after the question. */
struct dns_query {
	uint16_t id;
	uint16_t flags;
	uint16_t qtype, qclass;
	char name[SNIFF_HOST_MAX + 1];
	size_t qend;
};
int sniff_dns_query(const uint8_t *p, size_t len, struct dns_query *q);

/* Build an answer to q into out (cap bytes): rcode (0 = NOERROR, 5 =
 * REFUSED, 3 = NXDOMAIN) and n A records (IPv4, network order) with ttl.
 * Returns the length, or -1 when it does not fit. */
int dns_build_answer(const uint8_t *query, const struct dns_query *q, int rcode,
		     const uint32_t *a, size_t n, uint32_t ttl, uint8_t *out, size_t cap);

#endif
