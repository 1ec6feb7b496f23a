/* Unit test for src/node/model/theap.c, the reaper's timer heap: pops come out by
 * due time, ties in the order they were armed, under interleaved pushes and
 * pops; peek agrees with pop; an emptied heap is reusable; and 100,000
 * timers cost O(log n) each (a sorted list's O(n) insert would take tens of
 * seconds here; the bound is loose, for a noisy machine). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../../src/node/model/theap.h"
#include "check.h"

struct item {
	uint64_t due;
	int order;   /* push order */
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Pop everything; check nondecreasing due and push order among ties. */
static int drain_ordered(struct theap *h, size_t expect)
{
	struct item *prev = NULL, *it;
	size_t got = 0;
	int ok = 1;

	for (;;) {
		const struct theap_item *top = theap_peek(h);
		it = theap_pop(h);
		if (!it) {
			ok &= top == NULL;
			break;
		}
		ok &= top != NULL;
		if (prev && (it->due < prev->due || (it->due == prev->due && it->order < prev->order)))
			ok = 0;
		prev = it;
		got++;
	}
	return ok && got == expect;
}

int main(void)
{
	struct theap h = { 0 };
	enum { N = 5000, BIG = 100000 };
	struct item *items = calloc(BIG, sizeof(*items));
	double t0;

	CHECK(theap_peek(&h) == NULL && theap_pop(&h) == NULL);

	/* random due times with many ties */
	srand(42);
	for (int i = 0; i < N; i++) {
		items[i] = (struct item){ .due = (uint64_t)(rand() % 50), .order = i };
		theap_push(&h, items[i].due, &items[i]);
	}
	CHECK(h.n == N);
	CHECK(((struct item *)theap_peek(&h)->data)->due == 0);
	CHECK(drain_ordered(&h, N));

	/* interleaved: the reaper pops what is due while new timers arrive */
	{
		uint64_t clock = 0, last = 0;
		int order = 0, popped = 0, ok = 1;
		for (int round = 0; round < 2000; round++) {
			for (int k = 0; k < 3 && order < N; k++) {
				items[order] = (struct item){ .due = clock + (uint64_t)(rand() % 100),
							      .order = order };
				theap_push(&h, items[order].due, &items[order]);
				order++;
			}
			clock += 2;
			while (theap_peek(&h) && theap_peek(&h)->due_ms <= clock) {
				struct item *it = theap_pop(&h);
				ok &= it->due >= last && it->due <= clock;
				last = it->due;
				popped++;
			}
		}
		CHECK(ok);
		CHECK(drain_ordered(&h, (size_t)(order - popped)));
	}

	/* equal due times: first armed, first run */
	for (int i = 0; i < 10; i++) {
		items[i] = (struct item){ .due = 7, .order = i };
		theap_push(&h, 7, &items[i]);
	}
	for (int i = 0; i < 10; i++)
		CHECK(((struct item *)theap_pop(&h))->order == i);

	/* scale: 100,000 arms and pops */
	t0 = now_s();
	for (int i = 0; i < BIG; i++) {
		items[i] = (struct item){ .due = (uint64_t)rand(), .order = i };
		theap_push(&h, items[i].due, &items[i]);
	}
	CHECK(drain_ordered(&h, BIG));
	fprintf(stderr, "100000 timers armed and run in %.3f s\n", now_s() - t0);
	CHECK(now_s() - t0 < 5.0);

	theap_free(&h);
	CHECK(h.n == 0 && theap_peek(&h) == NULL);
	theap_push(&h, 1, &items[0]);
	CHECK(theap_pop(&h) == &items[0]);
	theap_free(&h);
	free(items);
	return failures ? 1 : 0;
}
