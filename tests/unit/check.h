/* check.h - the assertion every unit test uses: a failed CHECK reports the
 * place and the condition and counts a failure, but the test goes on, so one
 * run shows every broken case. main() returns failures ? 1 : 0. */
#ifndef AIRLOCK_TEST_CHECK_H
#define AIRLOCK_TEST_CHECK_H

#include <stdio.h>

static int failures;

#define CHECK(cond)                                                                 \
	do {                                                                        \
		if (!(cond)) {                                                      \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, \
				#cond);                                             \
			failures++;                                                 \
		}                                                                   \
	} while (0)

#endif
