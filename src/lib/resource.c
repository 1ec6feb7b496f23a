/* resource.c - where the files that ship beside the programs are.
 *
 * Found from this executable's own path, so that a build tree, an install
 * and a relocated install work alike and no build or source path is
 * compiled in:
 *
 *   install:    PREFIX/bin/airlockd  PREFIX/lib/airlock/{airlock-guest,scripts,vm}
 *   build tree: build/bin/airlockd   build/bin/airlock-guest  build/vm
 *               build/lib/airlock/scripts (copied there by the build)
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "resource.h"
#include "util.h"

/* The directory of /proc/self/exe, or "." when it cannot be read. */
static char *exe_dir(void)
{
	char buf[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
	char *slash;

	if (n <= 0)
		return xstrdup(".");
	buf[n] = '\0';
	slash = strrchr(buf, '/');
	if (slash)
		*slash = '\0';
	return xstrdup(buf[0] ? buf : "/");
}

/* p if it exists, made canonical (no "bin/.."), else NULL; frees p. */
static char *existing(char *p)
{
	char *real = realpath(p, NULL);

	free(p);
	return real;
}

char *airlock_resource(const char *name)
{
	_cleanup_free_ char *dir = exe_dir();
	const char *where[] = { "%s/../lib/airlock/%s", "%s/%s", "%s/../%s" };
	char *found;

	for (size_t i = 0; i < ARRAY_SIZE(where); i++)
		if ((found = existing(xasprintf(where[i], dir, name))))
			return found;
	/* Not there: the installed place, so that an error names it. */
	return xasprintf(where[0], dir, name);
}
