/* fuzz-dns: a UDP datagram a sandbox sends to the gateway's DNS port. A
 * query that parses is answered (with and without records) exactly as the
 * gateway would, and the answer must stay within its buffer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/gateway/sniff.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dns_query q;
	uint8_t *p, out[1024];
	uint32_t a[8] = { 0x0100007f, 0x02000a0a };

	if (size > 2048)
		return 0;
	p = malloc(size ? size : 1);
	memcpy(p, data, size);
	if (sniff_dns_query(p, size, &q) == 0) {
		if (q.qend > size || strlen(q.name) > SNIFF_HOST_MAX)
			abort();
		int n = dns_build_answer(p, &q, 0, a, 8, 30, out, sizeof(out));
		if (n > (int)sizeof(out))
			abort();
		n = dns_build_answer(p, &q, 5, NULL, 0, 0, out, sizeof(out));
		if (n > (int)sizeof(out))
			abort();
	}
	free(p);
	return 0;
}
