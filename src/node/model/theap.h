/* theap.h - the reaper's timers as a binary min-heap.
 *
 * The node arms one timer per sandbox with a timeout (and one per exec with
 * one), so with a thousand sandboxes a sorted list made every arm a walk of
 * a thousand entries under the reaper's lock. The heap makes arm and pop
 * O(log n) and the earliest due time O(1). Timers due at the same time run
 * in the order they were armed (as the list did), by a sequence number.
 *
 * Not thread-safe: the node holds jan_mu around every call. Depends only on
 * lib/util, so unit tests link it alone.
 */
#ifndef AIRLOCK_NODE_THEAP_H
#define AIRLOCK_NODE_THEAP_H

#include <stddef.h>
#include <stdint.h>

struct theap_item {
	uint64_t due_ms;
	uint64_t seq;       /* set by theap_push: ties run first-armed first */
	void *data;
};

struct theap {
	struct theap_item *v;
	size_t n, cap;
	uint64_t next_seq;
};

/* Add data due at due_ms. */
void theap_push(struct theap *h, uint64_t due_ms, void *data);
/* The earliest item, or NULL when empty (valid until the next push/pop). */
const struct theap_item *theap_peek(const struct theap *h);
/* Remove the earliest item and return its data (NULL when empty). */
void *theap_pop(struct theap *h);
/* Free the array (not the items' data); the heap is empty and reusable. */
void theap_free(struct theap *h);

#endif
