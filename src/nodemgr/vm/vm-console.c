/* vm-console.c - a vm sandbox's serial console and its log,
 * DATA/run/vm/<id>/console.log: a clone's log starts with its template
 * boot's (vm_console_seed), and the node gets a read-only fd on it
 * (vm_console_open).
 *
 * The guest writes its ttyS0 as fast as it likes, for as long as it lives;
 * QEMU writing that to a file itself would let a guest fill the host's
 * disk. So QEMU's serial is a socket (chardev socket,fd=7) whose other end
 * the console pump, one nodemgr thread, reads and appends to the log,
 * keeping it at most console_log_max bytes (vm_console_attach): when the
 * next bytes would pass the bound, the newest half of the bound is moved
 * to the file's start and the file is cut there, so the log always holds
 * the newest output in order, at least half of the bound of it, and the
 * node reads it as before. Moving half at a time costs one more write per
 * byte on average. A guest that writes faster than the pump keeps up waits
 * on its UART (the socket's buffer is full), not on the host's memory.
 *
 * nodemgr never parses what the guest wrote: the pump and the seed only
 * copy bytes from a socket or a log file to a log file.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../lib/log.h"
#include "../../lib/util.h"
#include "../jail/jail.h"
#include "../core/nodemgr-internal.h"
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
	j = mgr_jail_find_locked(s, id);
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

/* ---- the console pump -------------------------------------------------- */

#define PUMP_READ (64u << 10)

/* One QEMU's serial: the host end of its socket and its log. */
struct con {
	int sock, log;
	uint64_t size;     /* of the log, as we wrote it */
};

struct pump {
	int ep;
	uint64_t max;
};

/* Write p[0, n) at off of fd, whole; false on an error (the log is best
 * effort: a full disk drops console bytes, never the guest). */
static bool pwrite_all(int fd, const char *p, size_t n, off_t off)
{
	while (n) {
		ssize_t k = pwrite(fd, p, n, off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return false;
		p += k;
		n -= (size_t)k;
		off += k;
	}
	return true;
}

/* Append p[0, n) to c's log, keeping it within max (see the top). */
static void con_append(struct con *c, uint64_t max, const char *p, size_t n)
{
	uint64_t keep = max / 2;
	_cleanup_free_ char *tail = NULL;

	if (c->size + n <= max) {
		if (pwrite_all(c->log, p, n, (off_t)c->size))
			c->size += n;
		return;
	}
	if (n >= keep) {            /* these bytes alone fill the kept half */
		p += n - keep;
		n = keep;
		keep = 0;
	} else {
		keep -= n;          /* the newest bytes of the log to keep */
		if (keep > c->size)
			keep = c->size;
	}
	if (keep) {
		tail = xmalloc(keep);
		if (pread(c->log, tail, keep, (off_t)(c->size - keep)) != (ssize_t)keep)
			keep = 0;
	}
	if ((keep && !pwrite_all(c->log, tail, keep, 0)) || !pwrite_all(c->log, p, n, (off_t)keep) ||
	    ftruncate(c->log, (off_t)(keep + n)) < 0) {
		(void)!ftruncate(c->log, 0);   /* never past the bound, even half-written */
		c->size = 0;
		return;
	}
	c->size = keep + n;
}

static void con_close(struct pump *pm, struct con *c)
{
	epoll_ctl(pm->ep, EPOLL_CTL_DEL, c->sock, NULL);
	close(c->sock);
	close(c->log);
	free(c);
}

/* The pump's thread: for nodemgr's life. Reads each serial socket as bytes
 * come (level-triggered, one read per wake-up each, so one busy guest does
 * not starve the others) until QEMU closes it. */
static void *pump_main(void *arg)
{
	struct pump *pm = arg;
	char *buf = xmalloc(PUMP_READ);
	struct epoll_event ev[16];

	for (;;) {
		int n = epoll_wait(pm->ep, ev, ARRAY_SIZE(ev), -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			log_err("console pump: epoll_wait: %s", strerror(errno));
			break;
		}
		for (int i = 0; i < n; i++) {
			struct con *c = ev[i].data.ptr;
			ssize_t k = read(c->sock, buf, PUMP_READ);
			if (k > 0)
				con_append(c, pm->max, buf, (size_t)k);
			else if (k == 0 || (errno != EAGAIN && errno != EINTR))
				con_close(pm, c);
		}
	}
	free(buf);
	return NULL;
}

int vm_console_pump_start(struct nm_server *s, uint64_t max, err_t *err)
{
	struct pump *pm = xcalloc(1, sizeof(*pm));
	pthread_attr_t attr;
	pthread_t th;

	pm->max = max < VM_CONSOLE_LOG_MIN ? VM_CONSOLE_LOG_MIN : max;
	pm->ep = epoll_create1(EPOLL_CLOEXEC);
	if (pm->ep < 0) {
		free(pm);
		return err_sys(err, "epoll_create1");
	}
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&th, &attr, pump_main, pm) != 0) {
		pthread_attr_destroy(&attr);
		close(pm->ep);
		free(pm);
		return err_set(err, EAGAIN, "console pump: pthread_create failed");
	}
	pthread_attr_destroy(&attr);
	s->vm->console_ep = pm->ep;
	s->vm->console_max = pm->max;
	return 0;
}

int vm_console_log_open(const char *run, uid_t uid, err_t *err)
{
	_cleanup_free_ char *path = xasprintf("%s/console.log", run);
	struct stat st;
	int fd;

	/* Before QEMU exists: the run dir holds what nodemgr put there (the
	 * seed, or nothing). Still no links, and only a regular file. */
	fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, uid ? 0600 : 0644);
	if (fd < 0)
		return err_sys(err, "open %s", path);
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
	    (uid && fchown(fd, uid, uid) < 0)) {
		close(fd);
		return err_set(err, EPERM, "%s is not a regular file of its own", path);
	}
	return fd;
}

int vm_console_attach(struct nm_server *s, int sock, int log, err_t *err)
{
	struct con *c = xcalloc(1, sizeof(*c));
	struct epoll_event ev = { .events = EPOLLIN };
	struct stat st;
	int fl = fcntl(sock, F_GETFL);

	c->sock = sock;
	c->log = log;
	c->size = fstat(log, &st) == 0 ? (uint64_t)st.st_size : 0;
	ev.data.ptr = c;
	if (c->size > s->vm->console_max)   /* a seed past a small bound */
		con_append(c, s->vm->console_max, "", 0);
	if (fl < 0 || fcntl(sock, F_SETFL, fl | O_NONBLOCK) < 0 ||
	    epoll_ctl(s->vm->console_ep, EPOLL_CTL_ADD, sock, &ev) < 0) {
		int e = errno;
		close(sock);
		close(log);
		free(c);
		errno = e;
		return err_sys(err, "console pump: add");
	}
	return 0;
}
