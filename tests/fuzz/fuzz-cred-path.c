/* fuzz-cred-path: cred_path_match on arbitrary bytes (the target comes from
 * inside a sandbox; the prefix from a tenant). Input: PREFIX '\n' TARGET.
 * Must never crash or read past the strings; a match never holds for a
 * target with what a server may read differently (an encoded '/', '\' or '%',
 * a '\', a ';') in its path, and the root prefix then matches too. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../../src/cred/cred.h"
#include "../../src/lib/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = xstrndup((const char *)data, size);   /* stops at a NUL */
	char *nl = strchr(s, '\n');
	const char *prefix = s, *target = "";

	if (nl) {
		*nl = '\0';
		target = nl + 1;
	}
	if (cred_path_match(prefix, target)) {
		size_t n = strcspn(target, "?#");
		for (size_t i = 0; i < n; i++) {
			if (target[i] == '\\' || target[i] == ';')
				abort();
			if (strncasecmp(target + i, "%2f", 3) == 0 ||
			    strncasecmp(target + i, "%5c", 3) == 0 ||
			    strncasecmp(target + i, "%25", 3) == 0)
				abort();
		}
		if (!cred_path_match("/", target))
			abort();
	}
	(void)cred_path_prefix_ok(prefix);
	free(s);
	return 0;
}
