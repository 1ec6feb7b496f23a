/* check.h - the assertion every unit test uses: a failed CHECK reports the
 * place and the condition and counts a failure, but the test goes on, so one
 * run shows every broken case. main() returns failures ? 1 : 0. */
#ifndef AIRLOCK_TEST_CHECK_H
#define AIRLOCK_TEST_CHECK_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures __attribute__((unused));

#define CHECK(cond)                                                                 \
	do {                                                                        \
		if (!(cond)) {                                                      \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, \
				#cond);                                             \
			failures++;                                                 \
		}                                                                   \
	} while (0)

/* REQUIRE: for a test that cannot go on after a failure (a pool to unmount,
 * a child to kill): reports like CHECK, with errno, runs cleanup() and
 * exits 1. */
#define REQUIRE(cond, cleanup)                                                      \
	do {                                                                        \
		if (!(cond)) {                                                      \
			fprintf(stderr, "%s:%d: REQUIRE failed: %s (errno %s)\n",     \
				__FILE__, __LINE__, #cond, strerror(errno));        \
			cleanup();                                                  \
			exit(1);                                                    \
		}                                                                   \
	} while (0)

/* The end of main(): every failure counted, or "<name>: ok". */
static inline int check_done(const char *name)
{
	if (failures) {
		fprintf(stderr, "%s: %d failure(s)\n", name, failures);
		return 1;
	}
	printf("%s: ok\n", name);
	return 0;
}

#endif
