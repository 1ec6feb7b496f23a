/* cgroup.c - per-sandbox cgroups on v1 (one directory per controller) or v2. */
#include "cgroup.h"

#include <sys/mount.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/log.h"
#include "../../lib/util.h"

/* v1 controllers we use; the freezer (first) is what destroy sweeps through.
 * cpuacct (last: CPU time for the sandbox's metrics) only when it is a
 * hierarchy of its own (cg->v1_cpuacct); mounted with cpu ("cpu,cpuacct")
 * its files are in the cpu directory, and a second mkdir/rename/rmdir of
 * the same directory would fail. */
static const char *const v1_ctrls[] = { "freezer", "memory", "cpu", "pids", "cpuacct" };

static size_t v1_n(const struct cgroups *cg)
{
	return ARRAY_SIZE(v1_ctrls) - (cg->v1_cpuacct ? 0 : 1);
}

static void sleep_us(long us)
{
	struct timespec ts = { .tv_sec = 0, .tv_nsec = us * 1000 };
	nanosleep(&ts, NULL);
}

char *cgroup_file(const struct cgroups *cg, const char *ctrl, const char *id, const char *file)
{
	if (cg->v2)
		return xasprintf("%s/%s%s%s%s%s", cg->root, cg->parent, id ? "/" : "",
				 id ? id : "", file ? "/" : "", file ? file : "");
	/* v1 callers always name the controller; "" only keeps an optimising
	 * build from seeing a NULL %s on the v2 callers' inlined paths. */
	return xasprintf("%s/%s/%s%s%s%s%s", cg->root, ctrl ? ctrl : "", cg->parent,
			 id ? "/" : "", id ? id : "", file ? "/" : "", file ? file : "");
}

static int move_procs(const char *from_dir, const char *to_dir, err_t *err);

static int write_str(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	int r;

	if (fd < 0)
		return -errno;
	r = write_all(fd, val, strlen(val));
	close(fd);
	return r;
}

static int set_file(const struct cgroups *cg, const char *ctrl, const char *id,
		    const char *file, const char *val, err_t *err)
{
	_cleanup_free_ char *p = cgroup_file(cg, ctrl, id, file);
	int r = write_str(p, val);

	if (r < 0) {
		errno = -r;
		return err_sys(err, "write `%s` to %s", val, p);
	}
	return 0;
}

/* The systemd unit this process runs in (cgroup_unit_path), when its
 * cgroup is ours to write (Delegate=yes). */
static bool unit_path(char *out, size_t cap)
{
	struct buf b;
	bool yes = false;

	buf_init(&b);
	if (read_file("/proc/self/cgroup", 1 << 16, &b) == 0 && b.data &&
	    cgroup_unit_path(b.data, getenv("INVOCATION_ID"), out, cap) == 1) {
		_cleanup_free_ char *dir = xasprintf("/sys/fs/cgroup%s", out);
		_cleanup_free_ char *procs = xasprintf("%s/cgroup.procs", dir);
		_cleanup_free_ char *ctl = xasprintf("%s/cgroup.subtree_control", dir);
		/* Root may write any cgroup: what says the unit's is ours is
		 * the mark systemd puts on a Delegate=yes unit's cgroup. */
		for (int i = 0; i < 2 && !yes; i++) {
			char v[8] = "";
			yes = getxattr(dir, i ? "user.delegate" : "trusted.delegate", v,
				       sizeof(v) - 1) == 1 && v[0] == '1';
		}
		yes = yes && access(procs, W_OK) == 0 && access(ctl, W_OK) == 0;
		if (!yes)
			log_info("cgroup: systemd unit %s is not delegated to us (Delegate=yes?)", out);
	}
	buf_free(&b);
	return yes;
}

/* Move every process of the unit's cgroup udir into its leaf udir/daemons
 * and enable the controllers in udir, so that udir/<parent> can have them:
 * a v2 cgroup that passes controllers down may hold no process of its own.
 * airlockd up and every role it forked later start in the leaf. A process
 * forked while we move makes the write EBUSY: move again. */
static int unit_adopt(const char *udir, err_t *err)
{
	_cleanup_free_ char *leaf = xasprintf("%s/%s", udir, CGROUP_DAEMONS_LEAF);
	_cleanup_free_ char *ctl = xasprintf("%s/cgroup.subtree_control", udir);
	int r = 0;

	if (mkdir(leaf, 0755) < 0 && errno != EEXIST)
		return err_sys(err, "mkdir %s", leaf);
	for (int i = 0; i < 20; i++) {
		if ((r = move_procs(udir, leaf, err)) < 0)
			return r;
		if ((r = write_str(ctl, "+memory +cpu +pids")) == 0)
			return 0;
		if (r != -EBUSY)
			break;
	}
	errno = -r;
	return err_sys(err, "enable controllers in %s", ctl);
}

int cgroup_init(struct cgroups *cg, const char *parent, err_t *err)
{
	memset(cg, 0, sizeof(*cg));
	snprintf(cg->root, sizeof(cg->root), "/sys/fs/cgroup");
	if (!parent)
		parent = "airlock";
	if (!*parent || strchr(parent, '/') || parent[0] == '.' ||
	    strlen(parent) >= sizeof(cg->parent))
		return err_set(err, EINVAL, "bad cgroup parent `%s`", parent);
	snprintf(cg->parent, sizeof(cg->parent), "%s", parent);
	struct buf b;
	buf_init(&b);
	/* v2 only when the unified hierarchy at the root has the memory
	 * controller: a hybrid host (v2 mounted at /sys/fs/cgroup/unified with
	 * nothing in it) is treated as v1. */
	if (read_file("/sys/fs/cgroup/cgroup.controllers", 4096, &b) == 0 &&
	    strstr(b.data ? b.data : "", "memory"))
		cg->v2 = true;
	buf_free(&b);
	if (cg->v2) {
		_cleanup_free_ char *dir = NULL, *sub = NULL, *top = NULL;
		char unit[sizeof(cg->root) - 16];

		if (unit_path(unit, sizeof(unit))) {
			err_t e = { 0 };
			_cleanup_free_ char *udir = xasprintf("%s%s", cg->root, unit);

			if (unit_adopt(udir, &e) == 0) {
				snprintf(cg->root, sizeof(cg->root), "%s", udir);
				log_info("cgroup: under the systemd unit %s: daemons in %s/%s, "
					 "sandboxes in %s/%s", unit, unit, CGROUP_DAEMONS_LEAF, unit,
					 cg->parent);
			} else {
				log_warn("cgroup: systemd unit %s: %s; sandboxes go beside it", unit,
					 e.msg);
			}
		}
		dir = cgroup_file(cg, NULL, NULL, NULL);
		sub = cgroup_file(cg, NULL, NULL, "cgroup.subtree_control");
		top = xasprintf("%s/cgroup.subtree_control", cg->root);
		if (write_str(top, "+memory +cpu +pids") < 0)
			log_warn("cgroup: enable controllers at the root: %s", strerror(errno));
		if (mkdir(dir, 0755) < 0 && errno != EEXIST)
			return err_sys(err, "mkdir %s", dir);
		if (write_str(sub, "+memory +cpu +pids") < 0)
			return err_sys(err, "enable controllers in %s", sub);
		return 0;
	}
	{
		struct stat acct, cpu;
		/* its own hierarchy: a different superblock than cpu's */
		cg->v1_cpuacct = stat("/sys/fs/cgroup/cpuacct", &acct) == 0 &&
				 stat("/sys/fs/cgroup/cpu", &cpu) == 0 && acct.st_dev != cpu.st_dev;
	}
	for (size_t i = 0; i < v1_n(cg); i++) {
		_cleanup_free_ char *dir = cgroup_file(cg, v1_ctrls[i], NULL, NULL);
		if (mkdir(dir, 0755) < 0 && errno != EEXIST)
			return err_sys(err, "mkdir %s (cgroup v1 %s controller mounted?)", dir,
				       v1_ctrls[i]);
	}
	return 0;
}

int cgroup_set_parent_pids(const struct cgroups *cg, uint32_t max, uint32_t *out, err_t *err)
{
	char v[16];

	if (!max) {
		unsigned long pid_max = 0;
		struct buf b;

		buf_init(&b);
		if (read_file("/proc/sys/kernel/pid_max", 64, &b) == 0 && b.data)
			pid_max = strtoul(b.data, NULL, 10);
		buf_free(&b);
		if (pid_max < 1024)
			return err_set(err, EIO, "cannot read /proc/sys/kernel/pid_max");
		max = (uint32_t)(pid_max / 4 * 3);
	}
	snprintf(v, sizeof(v), "%u", max);
	if (set_file(cg, cg->v2 ? NULL : "pids", NULL, "pids.max", v, err) < 0)
		return -err->code;
	if (out)
		*out = max;
	return 0;
}

void cgroup_release(const struct cgroups *cg)
{
	if (cg->v2) {
		_cleanup_free_ char *dir = cgroup_file(cg, NULL, NULL, NULL);
		rmdir(dir);
		return;
	}
	for (size_t i = 0; i < v1_n(cg); i++) {
		_cleanup_free_ char *dir = cgroup_file(cg, v1_ctrls[i], NULL, NULL);
		rmdir(dir);
	}
}

const char *cgroup_mode(const struct cgroups *cg)
{
	return cg->v2 ? "v2" : "v1";
}

int cgroup_create(const struct cgroups *cg, const char *id, const struct cgroup_limits *l,
		  err_t *err)
{
	if (cg->v2) {
		_cleanup_free_ char *dir = cgroup_file(cg, NULL, id, NULL);
		if (mkdir(dir, 0755) < 0)
			return err_sys(err, "mkdir %s", dir);
		return cgroup_set_limits(cg, id, l, err);
	}
	for (size_t i = 0; i < v1_n(cg); i++) {
		_cleanup_free_ char *dir = cgroup_file(cg, v1_ctrls[i], id, NULL);
		if (mkdir(dir, 0755) < 0 && errno != EEXIST)
			return err_sys(err, "mkdir %s", dir);
	}
	return cgroup_set_limits(cg, id, l, err);
}

int cgroup_set_limits(const struct cgroups *cg, const char *id, const struct cgroup_limits *l,
		      err_t *err)
{
	char v[64];

	if (cg->v2) {
		if (l->memory_bytes) {
			snprintf(v, sizeof(v), "%" PRIu64, l->memory_bytes);
			if (set_file(cg, NULL, id, "memory.max", v, err) < 0)
				return -err->code;
			/* No swap: the limit is the memory the sandbox gets. */
			_cleanup_free_ char *sw = cgroup_file(cg, NULL, id, "memory.swap.max");
			if (access(sw, F_OK) == 0 &&
			    set_file(cg, NULL, id, "memory.swap.max", "0", err) < 0)
				return -err->code;
		}
		if (l->cpu_millis) {
			snprintf(v, sizeof(v), "%u 100000", l->cpu_millis * 100);
			if (set_file(cg, NULL, id, "cpu.max", v, err) < 0)
				return -err->code;
		}
		if (l->pids) {
			snprintf(v, sizeof(v), "%u", l->pids);
			if (set_file(cg, NULL, id, "pids.max", v, err) < 0)
				return -err->code;
		}
		return 0;
	}
	if (l->memory_bytes) {
		_cleanup_free_ char *sw = cgroup_file(cg, "memory", id, "memory.memsw.limit_in_bytes");
		bool memsw = access(sw, F_OK) == 0;
		snprintf(v, sizeof(v), "%" PRIu64, l->memory_bytes);
		/* memsw = memory + swap; equal to the memory limit means no swap.
		 * The kernel keeps memsw >= memory at every step: raising an
		 * existing limit (a warm jail's) must write memsw first, lowering
		 * it memory first. Try memsw first; on EINVAL it was a lowering. */
		if (memsw && write_str(sw, v) == 0)
			memsw = false;
		if (set_file(cg, "memory", id, "memory.limit_in_bytes", v, err) < 0)
			return -err->code;
		if (memsw && set_file(cg, "memory", id, "memory.memsw.limit_in_bytes", v, err) < 0)
			return -err->code;
	}
	if (l->cpu_millis) {
		snprintf(v, sizeof(v), "%u", l->cpu_millis * 100);
		if (set_file(cg, "cpu", id, "cpu.cfs_period_us", "100000", err) < 0 ||
		    set_file(cg, "cpu", id, "cpu.cfs_quota_us", v, err) < 0)
			return -err->code;
	}
	if (l->pids) {
		snprintf(v, sizeof(v), "%u", l->pids);
		if (set_file(cg, "pids", id, "pids.max", v, err) < 0)
			return -err->code;
	}
	return 0;
}

int cgroup_attach(const struct cgroups *cg, const char *id, pid_t pid, err_t *err)
{
	char v[32];

	snprintf(v, sizeof(v), "%d", (int)pid);
	if (cg->v2)
		return set_file(cg, NULL, id, "cgroup.procs", v, err);
	for (size_t i = 0; i < v1_n(cg); i++)
		if (set_file(cg, v1_ctrls[i], id, "cgroup.procs", v, err) < 0)
			return -err->code;
	return 0;
}

/* Has the freeze (or thaw) of airlock/<id> completed? v1: freezer.state
 * reads FROZEN (FREEZING while tasks are still on their way; reading it is
 * what lets the kernel notice the end). v2: cgroup.events says `frozen 1`. */
static bool freeze_done(const struct cgroups *cg, const char *path, bool freeze)
{
	struct buf b;
	bool done = false;

	buf_init(&b);
	if (read_file(path, 4096, &b) == 0 && b.data) {
		if (!cg->v2) {
			done = strncmp(b.data, freeze ? "FROZEN" : "THAWED", 6) == 0;
		} else {
			const char *f = strstr(b.data, "frozen ");
			done = f && f[7] == (freeze ? '1' : '0');
		}
	}
	buf_free(&b);
	return done;
}

int cgroup_freeze(const struct cgroups *cg, const char *id, bool freeze, err_t *err)
{
	_cleanup_free_ char *ctl = cg->v2 ? cgroup_file(cg, NULL, id, "cgroup.freeze")
					  : cgroup_file(cg, "freezer", id, "freezer.state");
	_cleanup_free_ char *st = cg->v2 ? cgroup_file(cg, NULL, id, "cgroup.events")
					 : xstrdup(ctl);
	const char *val = cg->v2 ? (freeze ? "1" : "0") : (freeze ? "FROZEN" : "THAWED");
	int r = write_str(ctl, val);

	if (r < 0) {
		errno = -r;
		return err_sys(err, "write `%s` to %s", val, ctl);
	}
	/* Usually done at once; a task in the middle of a syscall takes until
	 * it reaches a freezable point. Spin briefly, then back off. */
	for (int i = 0; i < 6000; i++) {
		if (freeze_done(cg, st, freeze))
			return 0;
		sleep_us(i < 200 ? 20 : 1000);
	}
	if (freeze)
		write_str(ctl, cg->v2 ? "0" : "THAWED");
	return err_set(err, ETIMEDOUT, "cgroup %s did not %s within 5 s", id,
		       freeze ? "freeze" : "thaw");
}

/* Read the pids in a cgroup.procs file into pids[]; returns the count. */
static int read_procs(const char *path, pid_t *pids, int max)
{
	struct buf b;
	int n = 0;

	buf_init(&b);
	if (read_file(path, 1 << 20, &b) < 0 || !b.data) {
		buf_free(&b);
		return 0;
	}
	for (char *s = b.data, *e; *s && n < max; s = e) {
		long v = strtol(s, &e, 10);
		if (e == s)
			break;
		if (v > 0)
			pids[n++] = (pid_t)v;
		while (*e == '\n')
			e++;
	}
	buf_free(&b);
	return n;
}

/* Kill everything in the cgroup until cgroup.procs stays empty.
 * v2 with cgroup.kill: the kernel kills atomically, including forks in
 * flight. Otherwise freeze first, so no task can fork or exit while we read
 * its pid (a frozen task's pid cannot be reused), SIGKILL each, then thaw so
 * the signals are delivered. Returns 0 once empty, -EBUSY after ~5 s. */
static int kill_all(const struct cgroups *cg, const char *id)
{
	_cleanup_free_ char *procs = cg->v2 ? cgroup_file(cg, NULL, id, "cgroup.procs")
					    : cgroup_file(cg, "freezer", id, "cgroup.procs");
	_cleanup_free_ char *killf = cg->v2 ? cgroup_file(cg, NULL, id, "cgroup.kill") : NULL;
	_cleanup_free_ char *freeze = cg->v2 ? cgroup_file(cg, NULL, id, "cgroup.freeze")
					     : cgroup_file(cg, "freezer", id, "freezer.state");
	bool have_kill = killf && access(killf, F_OK) == 0;
	pid_t pids[1024];

	for (int round = 0; round < 5000; round++) {
		int n = read_procs(procs, pids, (int)ARRAY_SIZE(pids));
		if (n == 0)
			return 0;
		if (round % 50 == 0) {
			if (have_kill) {
				write_str(killf, "1");
			} else {
				write_str(freeze, cg->v2 ? "1" : "FROZEN");
				n = read_procs(procs, pids, (int)ARRAY_SIZE(pids));
				for (int i = 0; i < n; i++)
					kill(pids[i], SIGKILL);
				write_str(freeze, cg->v2 ? "0" : "THAWED");
			}
		}
		sleep_us(round < 100 ? 100 : 1000);
	}
	return -EBUSY;
}

static int rmdir_retry(const char *dir, err_t *err)
{
	for (int i = 0; i < 200; i++) {
		if (rmdir(dir) == 0 || errno == ENOENT)
			return 0;
		if (errno != EBUSY)
			break;
		sleep_us(500);
	}
	return err_sys(err, "rmdir %s", dir);
}

int cgroup_destroy(const struct cgroups *cg, const char *id, err_t *err)
{
	int r = 0;

	if (kill_all(cg, id) < 0)
		log_warn("cgroup %s: processes still present after kill", id);
	if (cg->v2) {
		_cleanup_free_ char *dir = cgroup_file(cg, NULL, id, NULL);
		return rmdir_retry(dir, err);
	}
	for (size_t i = 0; i < v1_n(cg); i++) {
		_cleanup_free_ char *dir = cgroup_file(cg, v1_ctrls[i], id, NULL);
		if (rmdir_retry(dir, err) < 0)
			r = -err->code;
	}
	return r;
}

/* Write every pid listed in from_dir's cgroup.procs to to_dir's, until a
 * read lists none. A pid that exited in between is ESRCH (or silently not
 * moved, when exiting: the next reads wait for it to leave the list). */
static int move_procs(const char *from_dir, const char *to_dir, err_t *err)
{
	_cleanup_free_ char *src = xasprintf("%s/cgroup.procs", from_dir);
	_cleanup_free_ char *dst = xasprintf("%s/cgroup.procs", to_dir);
	_cleanup_close_ int fd = open(dst, O_WRONLY | O_CLOEXEC);
	pid_t pids[1024];

	if (fd < 0)
		return err_sys(err, "open %s", dst);
	if (access(src, R_OK) < 0)
		return err_sys(err, "open %s", src);
	for (int round = 0; round < 1200; round++) {
		int n = read_procs(src, pids, (int)ARRAY_SIZE(pids));
		if (n == 0)
			return 0;
		for (int i = 0; i < n; i++) {
			char v[16];
			int len = snprintf(v, sizeof(v), "%d", (int)pids[i]);
			if (write(fd, v, (size_t)len) < 0 && errno != ESRCH)
				return err_sys(err, "move pid %d into %s", (int)pids[i], to_dir);
		}
		/* Only an exiting task (or a fork storm) lists again. */
		if (round > 0)
			sleep_us(round < 200 ? 100 : 2000);
	}
	return err_set(err, EBUSY, "%s still lists processes after moving them", src);
}

int cgroup_move(const struct cgroups *cg, const char *from, const char *to,
		const struct cgroup_limits *l, err_t *err)
{
	int r;

	if (!cg->v2) {
		/* v1 renames: on a create's path, 4 renames cost less than 4
		 * mkdirs, the moves and 4 rmdirs (bench/ab: +0.6 ms a create) */
		for (size_t i = 0; i < v1_n(cg); i++) {
			_cleanup_free_ char *a = cgroup_file(cg, v1_ctrls[i], from, NULL);
			_cleanup_free_ char *b = cgroup_file(cg, v1_ctrls[i], to, NULL);
			if (rename(a, b) < 0)
				return err_sys(err, "rename cgroup %s to %s", a, b);
		}
		return cgroup_set_limits(cg, to, l, err);
	}
	/* v2 refuses rename(2): a new cgroup, the processes moved into it */
	_cleanup_free_ char *a = cgroup_file(cg, NULL, from, NULL);
	_cleanup_free_ char *b = cgroup_file(cg, NULL, to, NULL);
	if ((r = cgroup_create(cg, to, l, err)) < 0 || (r = move_procs(a, b, err)) < 0)
		return r;
	return rmdir_retry(a, err);
}

int cgroup_each(const struct cgroups *cg, void (*fn)(void *arg, const char *id), void *arg)
{
	/* On v1 a leftover may exist in any hierarchy: visit the union. The
	 * callback's cgroup_destroy is idempotent, so repeats are harmless. */
	size_t nctrl = cg->v2 ? 1 : v1_n(cg);

	for (size_t i = 0; i < nctrl; i++) {
		_cleanup_free_ char *dir = cgroup_file(cg, cg->v2 ? NULL : v1_ctrls[i], NULL, NULL);
		DIR *d = opendir(dir);
		struct dirent *de;

		if (!d)
			continue;
		while ((de = readdir(d))) {
			if (de->d_type != DT_DIR || de->d_name[0] == '.')
				continue;
			fn(arg, de->d_name);
		}
		closedir(d);
	}
	return 0;
}

bool cgroup_keyed_u64(const char *text, const char *key, uint64_t *out)
{
	const char *p = text;

	if (p && key) {
		size_t kn = strlen(key);
		for (; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
			if (!strncmp(p, key, kn) && p[kn] == ' ')
				break;
		p = p && *p ? p + kn : NULL;
	}
	return p && sscanf(p, " %" SCNu64, out) == 1;
}

bool cgroup_read_u64(const char *path, const char *key, uint64_t *out)
{
	struct buf b;
	bool ok;

	buf_init(&b);
	ok = read_file(path, 1 << 16, &b) == 0 && cgroup_keyed_u64(b.data, key, out);
	buf_free(&b);
	return ok;
}

/* CPU time of a v2 cgroup: cpu.stat's usage_usec, which cgroup2 keeps for
 * every cgroup even without the cpu controller enabled. */
int cgroup_v2_cpu_ns(const char *dir, uint64_t *ns)
{
	_cleanup_free_ char *cpu = xasprintf("%s/cpu.stat", dir);
	uint64_t usec;

	if (!cgroup_read_u64(cpu, "usage_usec", &usec))
		return -ENOENT;
	*ns = usec * 1000;
	return 0;
}

int cgroup_stats_v2_dir(const char *dir, struct cgroup_stats *out, err_t *err)
{
	_cleanup_free_ char *cur = xasprintf("%s/memory.current", dir);
	_cleanup_free_ char *peak = xasprintf("%s/memory.peak", dir);

	memset(out, 0, sizeof(*out));
	if (cgroup_v2_cpu_ns(dir, &out->cpu_ns) < 0 || !cgroup_read_u64(cur, NULL, &out->mem_bytes))
		return err_set(err, ENOENT, "cgroup %s: no cpu.stat usage_usec or memory.current",
			       dir);
	/* memory.peak is kernel 5.19+ */
	out->mem_peak_known = cgroup_read_u64(peak, NULL, &out->mem_peak_bytes);
	return 0;
}

int cgroup_stats_v1_dirs(const char *cpuacct_dir, const char *memory_dir, struct cgroup_stats *out,
			 err_t *err)
{
	_cleanup_free_ char *cpu = xasprintf("%s/cpuacct.usage", cpuacct_dir);
	_cleanup_free_ char *cur = xasprintf("%s/memory.usage_in_bytes", memory_dir);
	_cleanup_free_ char *peak = xasprintf("%s/memory.max_usage_in_bytes", memory_dir);

	memset(out, 0, sizeof(*out));
	if (!cgroup_read_u64(cur, NULL, &out->mem_bytes))
		return err_set(err, ENOENT, "cgroup %s: no memory.usage_in_bytes", memory_dir);
	out->mem_peak_known = cgroup_read_u64(peak, NULL, &out->mem_peak_bytes);
	if (!cgroup_read_u64(cpu, NULL, &out->cpu_ns))
		return err_set(err, ENOENT, "cgroup %s: no cpuacct.usage", cpuacct_dir);
	return 0;
}

int cgroup_stats(const struct cgroups *cg, const char *id, struct cgroup_stats *out, err_t *err)
{
	if (cg->v2) {
		_cleanup_free_ char *dir = cgroup_file(cg, NULL, id, NULL);
		return cgroup_stats_v2_dir(dir, out, err);
	}
	_cleanup_free_ char *cpu = cgroup_file(cg, cg->v1_cpuacct ? "cpuacct" : "cpu", id, NULL);
	_cleanup_free_ char *mem = cgroup_file(cg, "memory", id, NULL);
	return cgroup_stats_v1_dirs(cpu, mem, out, err);
}
