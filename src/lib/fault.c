/* fault.c - see fault.h. Only compiled to something with AIRLOCK_TEST_FAULTS. */
#include "fault.h"

#ifdef AIRLOCK_TEST_FAULTS
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

static void die_here(const char *name)
{
	log_err("fault point %s: SIGKILL (pid %d)", name, (int)getpid());
	kill(getpid(), SIGKILL);
	_exit(137);  /* not reached */
}

/* AIRLOCK_FAULT: a comma-separated list of NAME or NAME:FILE. */
static bool env_list_fires(const char *list, const char *name)
{
	size_t len = strlen(name);

	for (const char *p = list; p && *p;) {
		const char *end = strchr(p, ',');
		size_t n = end ? (size_t)(end - p) : strlen(p);

		if (n >= len && strncmp(p, name, len) == 0) {
			if (n == len)
				return true;
			if (p[len] == ':') {
				_cleanup_free_ char *file = xstrndup(p + len + 1, n - len - 1);
				if (unlink(file) == 0)
					return true;
			}
		}
		p = end ? end + 1 : NULL;
	}
	return false;
}

/* DIR/NAME.held holds our pid until a test removes it. */
static void hold(const char *dir, const char *name)
{
	_cleanup_free_ char *held = xasprintf("%s/%s.held", dir, name);
	_cleanup_free_ char *tmp = xasprintf("%s/.%s.held.%d", dir, name, (int)getpid());
	char pid[32];
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	int n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());

	if (fd < 0 || write(fd, pid, (size_t)n) != n || rename(tmp, held) < 0) {
		log_err("fault point %s: cannot write %s: %s", name, held, strerror(errno));
		if (fd >= 0)
			close(fd);
		unlink(tmp);
		return;
	}
	close(fd);
	log_warn("fault point %s: held (pid %d)", name, (int)getpid());
	for (int i = 0; i < 12000 && access(held, F_OK) == 0; i++)
		usleep(10000);
	unlink(held);
	log_warn("fault point %s: released", name);
}

void fault_point(const char *name)
{
	const char *list = getenv("AIRLOCK_FAULT");
	const char *dir = getenv("AIRLOCK_FAULT_DIR");
	char what[16] = "";

	if (list && env_list_fires(list, name))
		die_here(name);
	if (dir && *dir) {
		_cleanup_free_ char *path = xasprintf("%s/%s", dir, name);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		ssize_t n;

		if (fd < 0)
			return;
		n = read(fd, what, sizeof(what) - 1);
		close(fd);
		/* Whoever removes it owns it: two threads at one point fire once. */
		if (unlink(path) < 0)
			return;
		what[n > 0 ? n : 0] = '\0';
		what[strcspn(what, "\r\n")] = '\0';
		if (strcmp(what, "hold") == 0)
			hold(dir, name);
		else
			die_here(name);
	}
}
#endif
