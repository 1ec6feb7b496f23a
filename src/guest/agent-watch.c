/* agent-watch.c - file watches: inotify on a path (and, recursive, every
 * directory under it) reported to the host as WATCH_EVENT frames (proto.h).
 *
 * One inotify instance per watch, so two watches of one directory never
 * share (or change each other's) inotify watch descriptors. Each instance
 * keeps a table wd -> path relative to the watched root.
 *
 * What the kernel reports becomes:
 *   IN_CREATE                       create (a new directory is watched too,
 *                                   and what is already in it reported as
 *                                   created: it may have been filled before
 *                                   our watch was in place)
 *   IN_MODIFY                       write (repeats for one path coalesced)
 *   IN_DELETE, IN_DELETE_SELF(root) remove
 *   IN_MOVED_FROM + IN_MOVED_TO     rename, when the two are adjacent with
 *                                   one cookie; alone: remove / create
 *   IN_Q_OVERFLOW                   overflow
 * Bounds: PROTO_WATCH_MAX watches per agent, PROTO_WATCH_MAX_DIRS directories
 * per watch (beyond: an overflow event, the new directory goes unwatched).
 * Backpressure: the loop reads the inotify fds only while the channel keeps
 * up (below OUT_HIGH queued); a host that does not read lets the kernel's
 * queue fill, which ends in IN_Q_OVERFLOW: an overflow event, never memory.
 */
#include "guest.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define DIR_MASK (IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | \
		  IN_DELETE_SELF | IN_EXCL_UNLINK)
#define FILE_MASK (IN_MODIFY | IN_DELETE_SELF | IN_MOVE_SELF)
#define MAX_DEPTH 128
#define MOVE_WAIT_MS 20          /* for an IN_MOVED_TO behind an IN_MOVED_FROM */

struct wdent {
	int wd;
	char *rel;              /* "" for the root */
};

struct gwatch {
	struct gwatch *next;
	uint32_t id;            /* chosen by the host */
	int fd;                 /* inotify, non-blocking */
	bool recursive;
	bool root_dir;
	char *root;             /* absolute, as the host gave it */
	struct wdent *wds;
	size_t n_wds, cap_wds;
	bool pend;              /* an IN_MOVED_FROM waits for its IN_MOVED_TO */
	uint32_t pend_cookie;
	char *pend_from;
	bool pend_dir;
	char *last_write;       /* path of the last event when it was a write */
};

static void send_event(struct agent *a, struct gwatch *w, uint8_t kind, const char *path,
		       const char *path2, bool dir)
{
	struct proto_watch m = { .type = PT_WATCH_EVENT, .id = w->id, .kind = kind,
				 .path = (char *)path, .path2 = (char *)path2, .dir = dir };

	if (kind == PW_WRITE) {
		if (w->last_write && strcmp(w->last_write, path) == 0)
			return;   /* a burst of writes to one file: one event */
		free(w->last_write);
		w->last_write = xstrdup(path);
	} else {
		free(w->last_write);
		w->last_write = NULL;
	}
	/* Names longer than the protocol carries cannot be reported. */
	if (proto_enc_watch(&a->out, 0, &m) < 0 && kind != PW_OVERFLOW) {
		m.kind = PW_OVERFLOW;
		(void)proto_enc_watch(&a->out, 0, &m);
	}
}

static char *join(const char *a, const char *b)
{
	if (!*a)
		return xstrdup(b);
	if (!*b)
		return xstrdup(a);
	return xasprintf("%s/%s", a, b);
}

static struct wdent *find_wd(struct gwatch *w, int wd)
{
	for (size_t i = 0; i < w->n_wds; i++)
		if (w->wds[i].wd == wd)
			return &w->wds[i];
	return NULL;
}

static void drop_wd_at(struct gwatch *w, size_t i)
{
	free(w->wds[i].rel);
	w->wds[i] = w->wds[--w->n_wds];
}

/* Watch directory `rel` (relative to the root). 0, -ENOSPC over the limit,
 * or -errno. inotify gives an existing wd again for the same inode; its path
 * is then updated. */
static int add_dir(struct gwatch *w, const char *rel)
{
	_cleanup_free_ char *abs = join(w->root, rel);
	struct wdent *e;
	int wd;

	if (w->n_wds >= PROTO_WATCH_MAX_DIRS)
		return -ENOSPC;
	wd = inotify_add_watch(w->fd, abs, DIR_MASK | IN_ONLYDIR | IN_DONT_FOLLOW);
	if (wd < 0)
		return -errno;
	if ((e = find_wd(w, wd))) {
		free(e->rel);
		e->rel = xstrdup(rel);
		return 0;
	}
	if (w->n_wds == w->cap_wds) {
		w->cap_wds = w->cap_wds ? 2 * w->cap_wds : 16;
		w->wds = xrealloc(w->wds, w->cap_wds * sizeof(*w->wds));
	}
	w->wds[w->n_wds++] = (struct wdent){ .wd = wd, .rel = xstrdup(rel) };
	return 0;
}

/* Watch every directory under `rel` (itself already watched). With `report`,
 * say "create" for each entry found: they appeared before our watch did.
 * Returns -ENOSPC when the limit stopped the walk. */
static int add_tree(struct agent *a, struct gwatch *w, const char *rel, bool report, int depth)
{
	_cleanup_free_ char *abs = join(w->root, rel);
	struct dirent *de;
	DIR *d;
	int r = 0;

	if (depth > MAX_DEPTH || !(d = opendir(abs)))
		return 0;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		_cleanup_free_ char *sub = join(rel, de->d_name);
		bool dir = de->d_type == DT_DIR;
		if (de->d_type == DT_UNKNOWN) {
			struct stat st;
			dir = fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			      S_ISDIR(st.st_mode);
		}
		if (report)
			send_event(a, w, PW_CREATE, sub, NULL, dir);
		if (!dir)
			continue;
		if (add_dir(w, sub) == -ENOSPC || add_tree(a, w, sub, report, depth + 1) == -ENOSPC) {
			r = -ENOSPC;
			break;
		}
	}
	closedir(d);
	return r;
}

/* A directory left the tree: forget its watches (and those below it). */
static void drop_subtree(struct gwatch *w, const char *rel)
{
	size_t n = strlen(rel);

	for (size_t i = 0; i < w->n_wds;) {
		const char *p = w->wds[i].rel;
		if (*rel && strncmp(p, rel, n) == 0 && (p[n] == '\0' || p[n] == '/')) {
			inotify_rm_watch(w->fd, w->wds[i].wd);
			drop_wd_at(w, i);
		} else {
			i++;
		}
	}
}

/* A directory moved inside the tree: its watches keep their wds. */
static void rename_subtree(struct gwatch *w, const char *from, const char *to)
{
	size_t n = strlen(from);

	for (size_t i = 0; i < w->n_wds; i++) {
		char *p = w->wds[i].rel;
		if (*from && strncmp(p, from, n) == 0 && (p[n] == '\0' || p[n] == '/')) {
			w->wds[i].rel = xasprintf("%s%s", to, p + n);
			free(p);
		}
	}
}

static void new_dir(struct agent *a, struct gwatch *w, const char *rel)
{
	if (!w->recursive)
		return;
	int r = add_dir(w, rel);
	if (r == 0)
		r = add_tree(a, w, rel, true, 0);
	if (r == -ENOSPC)
		send_event(a, w, PW_OVERFLOW, NULL, NULL, false);
}

/* An IN_MOVED_FROM whose IN_MOVED_TO did not follow: moved out of the tree. */
static void flush_pending(struct agent *a, struct gwatch *w)
{
	if (!w->pend)
		return;
	w->pend = false;
	send_event(a, w, PW_REMOVE, w->pend_from, NULL, w->pend_dir);
	if (w->pend_dir)
		drop_subtree(w, w->pend_from);
	free(w->pend_from);
	w->pend_from = NULL;
}

static void handle_event(struct agent *a, struct gwatch *w, const struct inotify_event *ev)
{
	bool dir = ev->mask & IN_ISDIR;
	struct wdent *e;

	if (ev->mask & IN_Q_OVERFLOW) {
		flush_pending(a, w);
		send_event(a, w, PW_OVERFLOW, NULL, NULL, false);
		return;
	}
	if (!(e = find_wd(w, ev->wd)))
		return;
	if (ev->mask & IN_IGNORED) {
		drop_wd_at(w, (size_t)(e - w->wds));
		return;
	}
	_cleanup_free_ char *path = join(e->rel, ev->len ? ev->name : "");
	if (w->pend && !((ev->mask & IN_MOVED_TO) && ev->cookie == w->pend_cookie))
		flush_pending(a, w);
	if (ev->mask & IN_MOVED_FROM) {
		w->pend = true;
		w->pend_cookie = ev->cookie;
		w->pend_from = xstrdup(path);
		w->pend_dir = dir;
	} else if (ev->mask & IN_MOVED_TO) {
		if (w->pend) {
			w->pend = false;
			send_event(a, w, PW_RENAME, w->pend_from, path, dir);
			if (dir)
				rename_subtree(w, w->pend_from, path);
			free(w->pend_from);
			w->pend_from = NULL;
		} else {
			send_event(a, w, PW_CREATE, path, NULL, dir);
			if (dir)
				new_dir(a, w, path);
		}
	} else if (ev->mask & IN_CREATE) {
		send_event(a, w, PW_CREATE, path, NULL, dir);
		if (dir)
			new_dir(a, w, path);
	} else if (ev->mask & IN_MODIFY) {
		send_event(a, w, PW_WRITE, path, NULL, dir);
	} else if (ev->mask & IN_DELETE) {
		send_event(a, w, PW_REMOVE, path, NULL, dir);
	} else if ((ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) && !*e->rel) {
		/* The watched path itself went away (a subdirectory's own
		 * removal is reported by its parent). */
		send_event(a, w, PW_REMOVE, "", NULL, w->root_dir);
	}
}

/* Read what the kernel has (bounded per call by the buffer). Returns the
 * number of bytes read, 0 when there was nothing. */
static ssize_t read_events(struct agent *a, struct gwatch *w)
{
	char *buf = (char *)a->iobuf;
	ssize_t n = read(w->fd, buf, PROTO_CHUNK);

	if (n <= 0)
		return 0;
	for (ssize_t off = 0; off + (ssize_t)sizeof(struct inotify_event) <= n;) {
		const struct inotify_event *ev = (const void *)(buf + off);
		off += (ssize_t)sizeof(*ev) + ev->len;
		if (off > n)
			break;
		handle_event(a, w, ev);
	}
	return n;
}

void watch_io(struct agent *a, struct gwatch *w)
{
	agent_touch(a);
	read_events(a, w);
	/* A move's two halves are queued by one rename(2), but a read may
	 * fall between them (another CPU): give the second half a moment.
	 * When nothing more comes, the IN_MOVED_FROM that waits is a move out
	 * of the tree. */
	for (int i = 0; w->pend && i < 8; i++) {
		if (read_events(a, w) > 0)
			continue;
		struct pollfd p = { .fd = w->fd, .events = POLLIN };
		if (poll(&p, 1, MOVE_WAIT_MS) <= 0)
			break;
	}
	flush_pending(a, w);
}

static void watch_free(struct agent *a, struct gwatch *w)
{
	for (struct gwatch **pp = &a->watches; *pp; pp = &(*pp)->next) {
		if (*pp == w) {
			*pp = w->next;
			a->n_watches--;
			break;
		}
	}
	if (w->fd >= 0)
		close(w->fd);
	for (size_t i = 0; i < w->n_wds; i++)
		free(w->wds[i].rel);
	free(w->wds);
	free(w->root);
	free(w->pend_from);
	free(w->last_write);
	free(w);
}

static struct gwatch *find(struct agent *a, uint32_t id)
{
	for (struct gwatch *w = a->watches; w; w = w->next)
		if (w->id == id)
			return w;
	return NULL;
}

void watch_start(struct agent *a, const struct proto_frame *f)
{
	struct proto_watch m;
	struct gwatch *w;
	struct stat st;
	int r;

	agent_touch(a);
	if (proto_dec_watch(f, &m) < 0 || m.type != PT_WATCH_START) {
		proto_watch_free(&m);
		agent_send_error(a, f->req_id, EINVAL, "WATCH_START: bad fields");
		return;
	}
	if (find(a, m.id)) {
		agent_send_error(a, f->req_id, EEXIST, "watch %u exists", m.id);
		proto_watch_free(&m);
		return;
	}
	if (a->n_watches >= PROTO_WATCH_MAX) {
		agent_send_error(a, f->req_id, EMFILE, "more than %d watches", PROTO_WATCH_MAX);
		proto_watch_free(&m);
		return;
	}
	if (stat(m.path, &st) < 0) {
		agent_send_error(a, f->req_id, errno, "%s: %s", m.path, strerror(errno));
		proto_watch_free(&m);
		return;
	}
	w = xcalloc(1, sizeof(*w));
	w->id = m.id;
	w->root_dir = S_ISDIR(st.st_mode);
	w->recursive = m.recursive && w->root_dir;
	w->root = m.path;
	m.path = NULL;
	proto_watch_free(&m);
	w->next = a->watches;
	a->watches = w;
	a->n_watches++;
	w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (w->fd < 0) {
		r = -errno;
		goto fail;
	}
	if (S_ISDIR(st.st_mode)) {
		r = add_dir(w, "");
		if (r == 0 && w->recursive)
			r = add_tree(a, w, "", false, 0);
	} else {
		int wd = inotify_add_watch(w->fd, w->root, FILE_MASK);
		r = wd < 0 ? -errno : 0;
		if (r == 0) {
			w->wds = xcalloc(1, sizeof(*w->wds));
			w->wds[0] = (struct wdent){ .wd = wd, .rel = xstrdup("") };
			w->n_wds = w->cap_wds = 1;
		}
	}
	if (r < 0)
		goto fail;
	agent_send_ok(a, f->req_id);
	return;
fail:
	if (r == -ENOSPC)
		agent_send_error(a, f->req_id, ENOSPC, "more than %d directories under %s",
				 PROTO_WATCH_MAX_DIRS, w->root);
	else
		agent_send_error(a, f->req_id, -r, "watch %s: %s", w->root, strerror(-r));
	watch_free(a, w);
}

void watch_stop(struct agent *a, const struct proto_frame *f)
{
	struct proto_watch m;
	struct gwatch *w;

	if (proto_dec_watch(f, &m) == 0 && (w = find(a, m.id)))
		watch_free(a, w);
	proto_watch_free(&m);
}

int watch_fd(const struct gwatch *w)
{
	return w->fd;
}

struct gwatch *watch_next(const struct gwatch *w)
{
	return w->next;
}

bool watch_alive(const struct agent *a, const struct gwatch *w)
{
	for (struct gwatch *x = a->watches; x; x = x->next)
		if (x == w)
			return true;
	return false;
}

void watch_reset_all(struct agent *a)
{
	while (a->watches)
		watch_free(a, a->watches);
}
