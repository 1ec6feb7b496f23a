/* fuzz-hosthdr: the first bytes of a sandbox's TCP connection as the
 * gateway's proxy sniffs them for an HTTP request head and its Host header.
 * Every prefix is tried, as the proxy re-parses while bytes arrive. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/gateway/sniff.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char host[SNIFF_HOST_MAX + 1];

	if (size > 20000)
		return 0;
	for (size_t n = 0; n <= size; n += (n < 64 ? 1 : 97)) {
		uint8_t *p = malloc(n ? n : 1);
		memcpy(p, data, n);
		(void)sniff_is_http(p, n);
		if (sniff_http_host(p, n, host) == 1) {
			char copy[SNIFF_HOST_MAX + 1];
			memcpy(copy, host, sizeof(copy));
			if (strlen(host) > SNIFF_HOST_MAX || !policy_host_valid(copy))
				abort();
		}
		free(p);
	}
	return 0;
}
