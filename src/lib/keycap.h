/* keycap.h - a cap on how many of something each key holds at once: the
 * gateway's live connections per sandbox address, the api's requests in
 * progress per tenant. Thread-safe. An entry exists only while its count is
 * above 0, so their number is bounded by what is held, not by what clients
 * send.
 */
#ifndef AIRLOCK_KEYCAP_H
#define AIRLOCK_KEYCAP_H

#include <stdbool.h>
#include <stddef.h>

struct keycap;

/* max 0: no cap (NULL, on which every take succeeds). */
struct keycap *keycap_new(unsigned max);
void keycap_free(struct keycap *q);               /* accepts NULL */
/* Count one more for key (n bytes); false (nothing counted) when it holds
 * max already. */
bool keycap_take(struct keycap *q, const void *key, size_t n);
void keycap_give(struct keycap *q, const void *key, size_t n);

#endif
