/* fuzz-page: the list parameters a client sends (`limit`, `next_token`).
 * The input is split at its first newline into limit and token. Nothing may
 * crash or read out of bounds; an accepted limit is 1..PAGE_MAX; an accepted
 * token re-encodes to itself (so the id in it is what a token carries). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/lib/page.h"
#include "../../src/lib/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1), *nl;
	const char *why = NULL;
	struct page p;

	memcpy(s, data, size);
	s[size] = '\0';
	nl = strchr(s, '\n');
	if (nl)
		*nl = '\0';
	if (page_parse(&p, s, nl ? nl + 1 : NULL, false, &why) == 0) {
		if (p.limit < 1 || p.limit > PAGE_MAX)
			abort();
		if (p.has_cursor) {
			char *t = page_token(p.after_ms, p.after_id);
			struct page q;

			if (page_parse(&q, NULL, t, false, &why) != 0 || q.after_ms != p.after_ms ||
			    strcmp(q.after_id, p.after_id) != 0)
				abort();
			free(t);
		}
	} else if (!why) {
		abort();
	}
	(void)page_iso_ms(s);
	free(s);
	return 0;
}
