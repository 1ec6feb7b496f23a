/* vm-console.c - a vm sandbox's serial console, the log its QEMU writes to
 * DATA/run/vm/<id>/console.log: a clone's log starts with its template
 * boot's (vm_console_seed), and the node gets a read-only fd on it
 * (vm_console_open). nodemgr never reads what the guest wrote there but to
 * copy it from one log file to another.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../lib/log.h"
#include "../lib/util.h"
#include "jail.h"
#include "nodemgr-internal.h"
#include "vm-internal.h"

#define CONSOLE_SEED_MAX (64u << 10)

/* A clone's console log starts as the last 64 KiB of the template boot's
 * log (the boot lines of the kernel it runs) and a line saying where the
 * restore happened. Best effort: a missing template log only makes the
 * console shorter. The file is the jail uid's, like the one QEMU makes. */
/* dst (new, mode 0600 owned by uid; 0644 root's when uid is 0) = the last
 * 64 KiB of src plus mark. src is a log a QEMU wrote: not followed if a
 * link, read only if a regular file. -1 with errno on failure. */
static int copy_tail_mark(const char *src, const char *dst, uid_t uid, const char *mark)
{
	_cleanup_close_ int in = open(src, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	_cleanup_close_ int out = -1;
	_cleanup_free_ char *data = NULL;
	struct stat st;
	ssize_t n = 0;

	if (in >= 0 && fstat(in, &st) == 0 && S_ISREG(st.st_mode)) {
		off_t off = st.st_size > (off_t)CONSOLE_SEED_MAX ? st.st_size - CONSOLE_SEED_MAX : 0;
		data = xmalloc(CONSOLE_SEED_MAX);
		n = pread(in, data, CONSOLE_SEED_MAX, off);
	}
	out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, uid ? 0600 : 0644);
	if (out < 0 || (uid && fchown(out, uid, uid) < 0) ||
	    (n > 0 && write(out, data, (size_t)n) != n) ||
	    (mark && write(out, mark, strlen(mark)) != (ssize_t)strlen(mark)))
		return -1;
	return 0;
}

int vm_console_copy_tail(const char *src, const char *dst, uid_t uid)
{
	return copy_tail_mark(src, dst, uid, NULL);
}

void vm_console_seed(const char *boot_log, const char *run, uid_t uid)
{
	_cleanup_free_ char *dst = xasprintf("%s/console.log", run);

	if (copy_tail_mark(boot_log, dst, uid,
			   "\n[airlock: restored from the template's memory snapshot]\n") < 0)
		log_warn("seed %s: %s", dst, strerror(errno));
}

int vm_console_open(struct nm_server *s, const char *id, int *fd, err_t *err)
{
	_cleanup_free_ char *path = NULL;
	struct jail *j;
	struct stat st;
	uid_t uid = 0;
	bool found = false;

	*fd = -1;
	if (!s->vm)
		return err_set(err, ENOTSUP, "vm backend not initialised");
	pthread_mutex_lock(&s->lock);
	j = jail_find_locked(s, id);
	if (j && j->vm && !j->hidden) {
		uid = NM_UID_BASE + (uid_t)j->slot * JAIL_ID_RANGE;
		found = true;
	}
	pthread_mutex_unlock(&s->lock);
	if (!found)
		return err_set(err, ENOENT, "no vm jail for sandbox %s", id);
	path = xasprintf("%s/%s/console.log", s->vm->run, id);
	/* The run dir belongs to the jail's uid: the name may be anything a
	 * QEMU escape put there, so no links, no FIFOs or devices (O_NONBLOCK
	 * keeps a FIFO from hanging us before fstat), and only its own file. */
	*fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (*fd < 0)
		return err_sys(err, "open %s", path);
	if (fstat(*fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != uid || st.st_nlink != 1) {
		close(*fd);
		*fd = -1;
		return err_set(err, EPERM, "%s is not the jail's own regular file", path);
	}
	return 0;
}
