/* quota.h - a cap on how many of something each key holds at once: the
 * gateway's live connections per sandbox address, the api's requests in
 * progress per tenant. Thread-safe. An entry exists only while its count is
 * above 0, so their number is bounded by what is held, not by what clients
 * send.
 */
#ifndef AIRLOCK_QUOTA_H
#define AIRLOCK_QUOTA_H

#include <stdbool.h>
#include <stddef.h>

struct quota;

/* max 0: no cap (NULL, on which every take succeeds). */
struct quota *quota_new(unsigned max);
void quota_free(struct quota *q);               /* accepts NULL */
/* Count one more for key (n bytes); false (nothing counted) when it holds
 * max already. */
bool quota_take(struct quota *q, const void *key, size_t n);
void quota_give(struct quota *q, const void *key, size_t n);

#endif
