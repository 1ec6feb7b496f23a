/* fixture-dir.h - files laid out as the kernel lays out a cgroup, in a
 * test's own temp directory: the readers' unit tests (test-cgroup-stats,
 * test-cgroup-limits) build their v1 and v2 fixtures with these. A failure
 * runs the test's cleanup() and exits (REQUIRE). Include after check.h and
 * the project's util.h. */
#ifndef AIRLOCK_TEST_FIXTURE_DIR_H
#define AIRLOCK_TEST_FIXTURE_DIR_H

/* dir/name holding text */
static inline void fixture_put(const char *dir, const char *name, const char *text,
			       void (*cleanup)(void))
{
	char *p = xasprintf("%s/%s", dir, name);

	REQUIRE(write_file(p, text, strlen(text), 0644) == 0, cleanup);
	free(p);
}

/* tmp/name made (and its parents); the caller frees the path */
static inline char *fixture_dir(const char *tmp, const char *name, void (*cleanup)(void))
{
	char *d = xasprintf("%s/%s", tmp, name);

	REQUIRE(mkdir_p(d, 0755) == 0, cleanup);
	return d;
}

#endif
