/* fuzz-sni: the first bytes of a sandbox's TCP connection as the gateway's
 * proxy sniffs them for a TLS ClientHello. Every prefix is tried too, as the
 * proxy calls the parser again each time more bytes arrive. Nothing may
 * crash, read out of bounds, or return a name that is not a valid host. */
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
		uint8_t *p = malloc(n ? n : 1);  /* exact size: ASan sees overreads */
		memcpy(p, data, n);
		(void)sniff_is_tls(p, n);
		if (sniff_tls_sni(p, n, host) == 1) {
			char copy[SNIFF_HOST_MAX + 1];
			memcpy(copy, host, sizeof(copy));
			if (strlen(host) > SNIFF_HOST_MAX || !policy_host_valid(copy))
				abort();
		}
		free(p);
	}
	return 0;
}
