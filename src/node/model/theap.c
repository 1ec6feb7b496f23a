/* theap.c - the reaper's timer heap (theap.h). */
#include "theap.h"

#include "../../lib/util.h"

static int before(const struct theap_item *a, const struct theap_item *b)
{
	return a->due_ms < b->due_ms || (a->due_ms == b->due_ms && a->seq < b->seq);
}

static void swap(struct theap_item *a, struct theap_item *b)
{
	struct theap_item t = *a;
	*a = *b;
	*b = t;
}

void theap_push(struct theap *h, uint64_t due_ms, void *data)
{
	size_t i;

	if (h->n == h->cap) {
		h->cap = h->cap ? h->cap * 2 : 64;
		h->v = xrealloc(h->v, h->cap * sizeof(*h->v));
	}
	i = h->n++;
	h->v[i] = (struct theap_item){ .due_ms = due_ms, .seq = h->next_seq++, .data = data };
	while (i > 0 && before(&h->v[i], &h->v[(i - 1) / 2])) {
		swap(&h->v[i], &h->v[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
}

const struct theap_item *theap_peek(const struct theap *h)
{
	return h->n ? &h->v[0] : NULL;
}

void *theap_pop(struct theap *h)
{
	void *data;
	size_t i = 0;

	if (!h->n)
		return NULL;
	data = h->v[0].data;
	h->v[0] = h->v[--h->n];
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < h->n && before(&h->v[l], &h->v[m]))
			m = l;
		if (r < h->n && before(&h->v[r], &h->v[m]))
			m = r;
		if (m == i)
			break;
		swap(&h->v[i], &h->v[m]);
		i = m;
	}
	return data;
}

void theap_free(struct theap *h)
{
	free(h->v);
	h->v = NULL;
	h->n = h->cap = 0;
}
