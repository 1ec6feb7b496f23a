/* test-phases: the step timer behind a fork's Server-Timing header
 * (src/lib/phases.c): steps summed by name, the slowest of several
 * children kept, both renderings, and the bounds (PHASES_MAX names, a
 * buffer too small). */
#include <stdio.h>
#include <string.h>

#include "../../src/lib/phases.h"
#include "check.h"

int main(void)
{
	struct phases a, b;
	char out[256], tiny[12];

	phases_start(&a);
	phases_add(&a, "capture", 12345);
	phases_add(&a, "take", 4000);
	phases_add(&a, "capture", 1000);   /* the same name sums */
	CHECK(a.n == 2);
	CHECK(phases_get(&a, "capture") == 13345);
	CHECK(phases_get(&a, "nope") == 0);
	phases_server_timing(&a, out, sizeof(out));
	CHECK(!strcmp(out, "capture;dur=13.35, take;dur=4.00"));
	phases_text(&a, out, sizeof(out));
	CHECK(!strcmp(out, "capture 13.35 ms, take 4.00 ms"));

	/* A mark measures from the previous one (or the start). */
	phases_start(&b);
	phases_mark(&b, "row");
	CHECK(b.n == 1 && phases_get(&b, "row") < 1000000);

	/* The slowest child's step, each by name; a step only one has. */
	phases_start(&b);
	phases_add(&b, "take", 9000);
	phases_add(&b, "hello", 0);
	phases_add(&b, "capture", 100);
	phases_max(&a, &b);
	CHECK(phases_get(&a, "take") == 9000);
	CHECK(phases_get(&a, "capture") == 13345);
	CHECK(a.n == 3 && !strcmp(a.p[2].name, "hello"));

	/* Bounds: names past PHASES_MAX dropped; output always terminated. */
	phases_start(&b);
	static const char *names[PHASES_MAX + 2] = {
		"a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "b0", "b1", "b2",
		"b3", "b4", "b5", "b6", "b7", "b8", "b9", "c0", "c1", "c2", "c3", "c4", "c5",
	};
	for (int i = 0; i < PHASES_MAX + 2; i++)
		phases_add(&b, names[i], 1000);
	CHECK(b.n == PHASES_MAX && phases_get(&b, names[PHASES_MAX]) == 0);
	phases_server_timing(&a, tiny, sizeof(tiny));
	CHECK(strlen(tiny) == sizeof(tiny) - 1);

	if (failures)
		return 1;
	printf("test-phases: ok\n");
	return 0;
}
