/* cgroup-host.c - what nodemgr reads of the host's cgroup setup (the cgroup2
 * mount, the systemd unit it runs in) and the one change it makes to it,
 * favordynmods, put back as found. The texts parsed here come from the
 * kernel (/proc/self/mountinfo, /proc/self/cgroup) and from nodemgr's own
 * run dir, never from a sandbox. */
#include "cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "../../lib/log.h"
#include "../../lib/util.h"

/* The mount's own flags (mountinfo's 6th field) as mount(2) wants them.
 * A remount that leaves one out clears it: without this, the favordynmods
 * remount took nosuid, nodev and noexec off the host's /sys/fs/cgroup. */
static unsigned long mount_flags(const char *opts)
{
	static const struct { const char *name; unsigned long flag; } map[] = {
		{ "ro", MS_RDONLY },         { "nosuid", MS_NOSUID },
		{ "nodev", MS_NODEV },       { "noexec", MS_NOEXEC },
		{ "noatime", MS_NOATIME },   { "nodiratime", MS_NODIRATIME },
		{ "relatime", MS_RELATIME }, { "strictatime", MS_STRICTATIME },
	};
	unsigned long flags = 0;

	for (const char *o = opts; *o;) {
		size_t len = strcspn(o, ",");
		for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
			if (strlen(map[i].name) == len && !strncmp(o, map[i].name, len))
				flags |= map[i].flag;
		o += len;
		o += *o == ',';
	}
	return flags;
}

int cgroup_mountinfo_cgroup2(char *text, char **mountpoint, char **opts, unsigned long *mflags)
{
	char *line, *save = NULL;

	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		/* id parent maj:min root mountpoint opts [tags] - fstype source superopts */
		char *sep = strstr(line, " - "), *f[6] = { 0 }, *fs, *src, *sup, *p = line, *o, *w;
		int i;

		if (!sep)
			continue;
		*sep = '\0';
		for (i = 0; i < 6 && p; i++)
			f[i] = strsep(&p, " ");
		fs = strtok_r(sep + 3, " ", &p);
		src = fs ? strtok_r(NULL, " ", &p) : NULL;
		sup = src ? strtok_r(NULL, " ", &p) : NULL;
		if (!fs || strcmp(fs, "cgroup2") != 0 || !f[4] || !*f[4] || !sup)
			continue;
		/* Keep the filesystem's own options; drop rw/ro (mount flags).
		 * In place: the result is never longer than sup. */
		w = sup;
		for (o = sup; *o;) {
			size_t n = strcspn(o, ",");
			bool flag = (n == 2 && (!strncmp(o, "rw", 2) || !strncmp(o, "ro", 2)));
			if (!flag && n) {
				if (w != sup)
					*w++ = ',';
				memmove(w, o, n);
				w += n;
			}
			o += n;
			if (*o == ',')
				o++;
		}
		*w = '\0';
		*mountpoint = f[4];
		*opts = sup;
		*mflags = f[5] ? mount_flags(f[5]) : 0;
		return 0;
	}
	return -ENOENT;
}

static bool has_opt(const char *opts, const char *name)
{
	size_t n = strlen(name);

	for (const char *o = opts; *o;) {
		size_t len = strcspn(o, ",");
		if (len == n && !strncmp(o, name, n))
			return true;
		o += len;
		o += *o == ',';
	}
	return false;
}

/* The cgroup2 mount now: mountpoint and options (caller frees both), and
 * the mount's own flags, which every remount of it passes again. */
static int cgroup2_now(char **mp, char **opts, unsigned long *mflags, err_t *err)
{
	struct buf b;
	char *m, *o;
	int r;

	buf_init(&b);
	if (read_file("/proc/self/mountinfo", 1 << 20, &b) < 0 || !b.data) {
		buf_free(&b);
		return err_sys(err, "read /proc/self/mountinfo");
	}
	r = cgroup_mountinfo_cgroup2(b.data, &m, &o, mflags);
	if (r == 0) {
		*mp = xstrdup(m);
		*opts = xstrdup(o);
	} else {
		err_set(err, ENOENT, "no cgroup2 mount");
	}
	buf_free(&b);
	return r;
}

/* The record: "<mountpoint>\n<options as found>\n", written whole
 * (rename of a temp file) before the remount, so a crash leaves either no
 * record and no change, or the record. */
static int record_write(const char *record, const char *mp, const char *opts, err_t *err)
{
	_cleanup_free_ char *tmp = xasprintf("%s.tmp", record);
	_cleanup_free_ char *body = xasprintf("%s\n%s\n", mp, opts);
	_cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	if (fd < 0 || write_all(fd, body, strlen(body)) < 0 || fsync(fd) < 0 ||
	    rename(tmp, record) < 0) {
		err_sys(err, "write %s", record);
		unlink(tmp);
		return -err->code;
	}
	return 0;
}

int cgroup_favor_dynmods(const char *record, err_t *err)
{
	_cleanup_free_ char *mp = NULL, *opts = NULL, *want = NULL;
	unsigned long mflags;
	bool wrote = false;
	int r;

	if ((r = cgroup2_now(&mp, &opts, &mflags, err)) < 0)
		return r;
	if (has_opt(opts, "favordynmods"))
		return 0;  /* the host's own, or ours from before a crash (recorded then) */
	if (access(record, F_OK) < 0) {
		if ((r = record_write(record, mp, opts, err)) < 0)
			return r;
		wrote = true;
	}
	want = *opts ? xasprintf("%s,favordynmods", opts) : xstrdup("favordynmods");
	if (mount(NULL, mp, NULL, MS_REMOUNT | mflags, want) < 0) {
		r = err_sys(err, "remount %s with %s", mp, want);
		if (wrote)
			unlink(record);
		return r;
	}
	log_info("cgroup: %s remounted with favordynmods (was `%s`; put back at stop)", mp,
		 *opts ? opts : "");
	return 0;
}

void cgroup_favor_restore(const char *record)
{
	_cleanup_free_ char *mp = NULL, *opts = NULL;
	unsigned long mflags = 0;
	struct buf b;
	err_t e = { 0 };
	char *was_mp, *was_opts, *nl;

	buf_init(&b);
	if (read_file(record, 4096, &b) < 0 || !b.data) {
		buf_free(&b);
		return;
	}
	/* Our own file, but check its shape before a mount(2) with it. */
	was_mp = b.data;
	nl = strchr(was_mp, '\n');
	was_opts = nl ? nl + 1 : NULL;
	if (nl)
		*nl = '\0';
	if (was_opts && (nl = strchr(was_opts, '\n')))
		*nl = '\0';
	if (!was_opts || was_mp[0] != '/' || has_opt(was_opts, "favordynmods")) {
		log_warn("cgroup: %s is not a record of mount options; removed", record);
	} else if (cgroup2_now(&mp, &opts, &mflags, &e) < 0 || strcmp(mp, was_mp) != 0) {
		log_warn("cgroup: the cgroup2 mount %s is gone; nothing to put back", was_mp);
	} else if (has_opt(opts, "favordynmods") &&
		   mount(NULL, was_mp, NULL, MS_REMOUNT | mflags, was_opts) < 0) {
		log_warn("cgroup: put back %s's options `%s`: %s", was_mp, was_opts,
			 strerror(errno));
		buf_free(&b);
		return;  /* keep the record: the next start or stop tries again */
	} else {
		log_info("cgroup: %s options put back as found (`%s`)", was_mp, was_opts);
	}
	unlink(record);
	buf_free(&b);
}

int cgroup_unit_path(const char *self_cgroup, const char *invocation_id, char *out, size_t cap)
{
	const char *p = self_cgroup, *end, *last;
	size_t n, leaf = strlen(CGROUP_DAEMONS_LEAF);

	if (!invocation_id || !*invocation_id || !p)
		return 0;
	/* The v2 line: "0::<path>". On a v2 host it is the only one. */
	for (; p && strncmp(p, "0::", 3) != 0; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		;
	if (!p)
		return 0;
	p += 3;
	end = p + strcspn(p, "\n");
	n = (size_t)(end - p);
	if (n < 2 || p[0] != '/' || n >= cap)
		return 0;
	for (const char *c = p; c < end; c++)
		if (*c <= ' ' || *c >= 0x7f || (c[0] == '/' && (c[1] == '/' || c[1] == '.')))
			return 0;
	if (end[-1] == '/')
		return 0;
	/* a restart (up restarting its roles) finds us in the leaf already */
	if (n > leaf + 1 && end[-(long)leaf - 1] == '/' &&
	    !strncmp(end - leaf, CGROUP_DAEMONS_LEAF, leaf))
		n -= leaf + 1;
	for (last = p + n; last > p && last[-1] != '/'; last--)
		;
	if ((size_t)(p + n - last) <= strlen(".service") ||
	    strncmp(p + n - strlen(".service"), ".service", strlen(".service")) != 0)
		return 0;
	memcpy(out, p, n);
	out[n] = '\0';
	return 1;
}
