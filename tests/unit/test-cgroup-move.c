/* test-cgroup-move.c - a warm jail's processes change cgroup without a
 * rename (cgroup_move), and the host facts nodemgr reads for cgroup v2.
 *
 * Fixtures: /proc/self/cgroup texts (is this a systemd service whose cgroup
 * may hold the sandboxes, cgroup_unit_path) and /proc/self/mountinfo texts
 * (the cgroup2 mount and its options, cgroup_mountinfo_cgroup2).
 *
 * Then on the real hierarchies, as root: the host's cgroup2 mount (a hybrid
 * host's bare /sys/fs/cgroup/unified, or /sys/fs/cgroup on a v2 host) and,
 * on a v1 host, the v1 hierarchies. On each, in a parent of its own
 * (airlock-cgmove-<pid>, removed at exit even on failure): rename(2) of a
 * v2 cgroup fails with EPERM (why cgroup_move moves there); a frozen v2 cgroup's
 * tasks move and run again; a process forking children that exit at once
 * moves with every child; a zombie is no obstacle; the old cgroup is gone. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../src/lib/util.h"
#include "../../src/nodemgr/cgroup/cgroup.h"
#include "check.h"

static pid_t kids[8];
static int nkids;
static struct cgroups cur;     /* the hierarchy under test */
static bool have_cur;

static void kill_kids(void)
{
	for (int i = 0; i < nkids; i++)
		if (kids[i] > 0) {
			kill(kids[i], SIGKILL);
			waitpid(kids[i], NULL, 0);
			kids[i] = 0;
		}
	nkids = 0;
}

static void cleanup(void)
{
	err_t e = { 0 };

	kill_kids();
	if (!have_cur)
		return;
	/* thaw first: a frozen v1 cgroup's tasks cannot die */
	cgroup_freeze(&cur, "a", false, &e);
	cgroup_destroy(&cur, "a", &e);
	cgroup_destroy(&cur, "b", &e);
	cgroup_release(&cur);
	have_cur = false;
}

/* ---- fixtures ----------------------------------------------------------- */

static void test_unit_path(void)
{
	char out[256];

	/* a service with Delegate=yes on a v2 host */
	CHECK(cgroup_unit_path("0::/system.slice/airlockd.service\n", "0123abcd", out,
			       sizeof(out)) == 1);
	CHECK(!strcmp(out, "/system.slice/airlockd.service"));
	/* a restarted role, already in the leaf */
	CHECK(cgroup_unit_path("0::/system.slice/airlockd.service/daemons\n", "x", out,
			       sizeof(out)) == 1);
	CHECK(!strcmp(out, "/system.slice/airlockd.service"));
	/* a hybrid host lists v1 lines first */
	CHECK(cgroup_unit_path("4:memory:/system.slice/a.service\n0::/system.slice/a.service\n",
			       "x", out, sizeof(out)) == 1);
	CHECK(!strcmp(out, "/system.slice/a.service"));
	/* a templated unit under its own slice */
	CHECK(cgroup_unit_path("0::/system.slice/system-airlockd.slice/airlockd@b.service", "x",
			       out, sizeof(out)) == 1);
	CHECK(!strcmp(out, "/system.slice/system-airlockd.slice/airlockd@b.service"));
	/* not systemd's service: no INVOCATION_ID, a session scope, the root */
	CHECK(cgroup_unit_path("0::/system.slice/airlockd.service\n", NULL, out, sizeof(out)) == 0);
	CHECK(cgroup_unit_path("0::/system.slice/airlockd.service\n", "", out, sizeof(out)) == 0);
	CHECK(cgroup_unit_path("0::/user.slice/user-0.slice/session-3.scope\n", "x", out,
			       sizeof(out)) == 0);
	CHECK(cgroup_unit_path("0::/\n", "x", out, sizeof(out)) == 0);
	CHECK(cgroup_unit_path("", "x", out, sizeof(out)) == 0);
	CHECK(cgroup_unit_path("1:name=systemd:/system.slice/a.service\n", "x", out,
			       sizeof(out)) == 0);
	/* nothing but a plain absolute path */
	CHECK(cgroup_unit_path("0::/system.slice/../a.service\n", "x", out, sizeof(out)) == 0);
	CHECK(cgroup_unit_path("0::/system.slice//a.service\n", "x", out, sizeof(out)) == 0);
	CHECK(cgroup_unit_path("0::system.slice/a.service\n", "x", out, sizeof(out)) == 0);
	CHECK(cgroup_unit_path("0::/a b.service\n", "x", out, sizeof(out)) == 0);
	CHECK(cgroup_unit_path("0::/.service\n", "x", out, sizeof(out)) == 0);
	CHECK(cgroup_unit_path("0::/daemons\n", "x", out, sizeof(out)) == 0);
	/* too long for out */
	CHECK(cgroup_unit_path("0::/system.slice/airlockd.service\n", "x", out, 10) == 0);
}

static void test_mountinfo(void)
{
	char hybrid[] =
		"31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
		"37 31 0:33 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer\n"
		"41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
	char v2[] = "25 21 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - "
		    "cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n";
	char v2fav[] = "25 21 0:22 / /sys/fs/cgroup rw shared:4 - cgroup2 cgroup2 "
		       "ro,nsdelegate,favordynmods\n";
	char none[] = "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755\n"
		      "bad line without separator\n"
		      "41 31 0:38 / - cgroup2\n";
	char *mp, *opts;
	unsigned long fl;

	CHECK(cgroup_mountinfo_cgroup2(hybrid, &mp, &opts, &fl) == 0);
	CHECK(!strcmp(mp, "/sys/fs/cgroup/unified") && !strcmp(opts, ""));
	CHECK(fl == MS_RELATIME);
	CHECK(cgroup_mountinfo_cgroup2(v2, &mp, &opts, &fl) == 0);
	CHECK(!strcmp(mp, "/sys/fs/cgroup") && !strcmp(opts, "nsdelegate,memory_recursiveprot"));
	/* Debian 12's own: a remount without these flags would clear them */
	CHECK(fl == (MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RELATIME));
	CHECK(cgroup_mountinfo_cgroup2(v2fav, &mp, &opts, &fl) == 0);
	CHECK(!strcmp(opts, "nsdelegate,favordynmods") && fl == 0);
	CHECK(cgroup_mountinfo_cgroup2(none, &mp, &opts, &fl) == -ENOENT);
}

/* ---- the real hierarchies ----------------------------------------------- */

/* Does /proc/pid/cgroup put pid in <parent>/<id> (v2: the 0:: line; v1: the
 * freezer, memory and pids lines)? */
static bool in_cgroup(pid_t pid, const char *id)
{
	char p[64], want[160], *text = NULL;
	struct buf b;
	int found = 0, need = cur.v2 ? 1 : 3;

	snprintf(p, sizeof(p), "/proc/%d/cgroup", (int)pid);
	snprintf(want, sizeof(want), "/%s/%s", cur.parent, id);
	buf_init(&b);
	if (read_file(p, 1 << 16, &b) == 0 && b.data)
		text = b.data;
	for (char *l = text, *e; l && *l; l = e ? e + 1 : NULL) {
		char *path;
		e = strchr(l, '\n');
		if (e)
			*e = '\0';
		path = strrchr(l, ':');
		if (!path)
			continue;
		path++;
		bool ours = cur.v2 ? !strncmp(l, "0::", 3)
				   : (strstr(l, ":freezer:") || strstr(l, ":memory:") ||
				      strstr(l, ":pids:"));
		size_t n = strlen(path), w = strlen(want);
		if (ours && n >= w && !strcmp(path + n - w, want))
			found++;
	}
	buf_free(&b);
	return found == need;
}

static bool dir_gone(const char *id)
{
	char *d = cgroup_file(&cur, cur.v2 ? NULL : "freezer", id, NULL);
	bool gone = access(d, F_OK) < 0 && errno == ENOENT;

	free(d);
	return gone;
}

static pid_t spawn(void (*body)(int), int fd)
{
	pid_t pid = fork();

	REQUIRE(pid >= 0, cleanup);
	if (pid == 0) {
		body(fd);
		_exit(0);
	}
	kids[nkids++] = pid;
	return pid;
}

/* writes a byte every 5 ms: it runs, or it is frozen */
static void ticker(int fd)
{
	for (;;) {
		if (write(fd, "t", 1) < 0 && errno != EAGAIN)
			_exit(1);
		usleep(5000);
	}
}

/* forks children that exit at once, as fast as it can */
static void forker(int fd)
{
	(void)fd;
	for (;;) {
		pid_t c = fork();
		if (c == 0)
			_exit(0);
		if (c > 0)
			waitpid(c, NULL, 0);
	}
}

/* leaves one exited child unreaped: a zombie */
static void zombie_parent(int fd)
{
	(void)fd;
	usleep(10000);  /* the test attaches us meanwhile: the zombie is in there */
	if (fork() == 0)
		_exit(0);
	for (;;)
		pause();
}

static void attach(const char *id, pid_t pid)
{
	err_t e = { 0 };

	REQUIRE(cgroup_attach(&cur, id, pid, &e) == 0, cleanup);
}

/* bytes from the ticker within ms? */
static bool ticks(int fd, int ms)
{
	char buf[256];
	struct pollfd p = { .fd = fd, .events = POLLIN };

	while (read(fd, buf, sizeof(buf)) > 0)
		;  /* what came before */
	return poll(&p, 1, ms) == 1;
}

static void test_moves(void)
{
	struct cgroup_limits none = { 0 };
	err_t e = { 0 };
	int pfd[2];
	pid_t tk, fk, zp;

	printf("moves on %s (%s)\n", cur.root, cgroup_mode(&cur));
	REQUIRE(pipe2(pfd, O_CLOEXEC | O_NONBLOCK) == 0, cleanup);
	REQUIRE(cgroup_create(&cur, "a", &none, &e) == 0, cleanup);
	tk = spawn(ticker, pfd[1]);
	zp = spawn(zombie_parent, -1);
	attach("a", tk);
	attach("a", zp);
	usleep(20000);

	/* the old take's rename: refused by v2, which is why the move */
	if (cur.v2) {
		char *a = cgroup_file(&cur, NULL, "a", NULL), *b = cgroup_file(&cur, NULL, "b", NULL);
		errno = 0;
		CHECK(rename(a, b) < 0 && errno == EPERM);
		free(a);
		free(b);
	}

	/* v2, frozen: every task moves, and runs again (b is not frozen).
	 * v1 renames, which keeps a freeze: no take meets a frozen cgroup. */
	if (cur.v2) {
		REQUIRE(cgroup_freeze(&cur, "a", true, &e) == 0, cleanup);
		CHECK(!ticks(pfd[0], 50));
	}
	e = (err_t){ 0 };
	CHECK(cgroup_move(&cur, "a", "b", &none, &e) == 0);
	if (e.code)
		fprintf(stderr, "move: %s\n", e.msg);
	CHECK(dir_gone("a"));
	CHECK(in_cgroup(tk, "b") && in_cgroup(zp, "b"));
	CHECK(ticks(pfd[0], 1000));

	/* forking: the forker and every child it has then are in a; none
	 * stays behind, whatever was in flight */
	e = (err_t){ 0 };
	CHECK(cgroup_move(&cur, "b", "a", &none, &e) == 0);
	fk = spawn(forker, -1);
	attach("a", fk);
	usleep(50000);
	for (int round = 0; round < 20; round++) {
		const char *from = round % 2 ? "b" : "a", *to = round % 2 ? "a" : "b";
		e = (err_t){ 0 };
		CHECK(cgroup_move(&cur, from, to, &none, &e) == 0);
		if (e.code)
			fprintf(stderr, "move %s -> %s: %s\n", from, to, e.msg);
		CHECK(dir_gone(from));
		CHECK(in_cgroup(fk, to) && in_cgroup(tk, to) && in_cgroup(zp, to));
	}
	/* a: after an even number of rounds. Limits are written to the new one. */
	if (!cur.v2) {
		struct cgroup_limits l = { .pids = 77, .memory_bytes = 64 << 20 };
		char *pm = cgroup_file(&cur, "pids", "b", "pids.max");
		struct buf b;
		e = (err_t){ 0 };
		CHECK(cgroup_move(&cur, "a", "b", &l, &e) == 0);
		buf_init(&b);
		CHECK(read_file(pm, 64, &b) == 0 && b.data && atoi(b.data) == 77);
		buf_free(&b);
		free(pm);
		CHECK(in_cgroup(fk, "b") && dir_gone("a"));
	}
	/* a missing source is an error that names it, not a success */
	e = (err_t){ 0 };
	CHECK(cgroup_move(&cur, "nope", "c", &none, &e) < 0 && strstr(e.msg, "nope"));
	cgroup_destroy(&cur, "c", &e);
	close(pfd[0]);
	close(pfd[1]);
	cleanup();
}

/* The host's cgroup2 mount, when it is writable. */
static bool pick_v2(void)
{
	static const char *const roots[] = { "/sys/fs/cgroup/unified", "/sys/fs/cgroup" };

	for (size_t i = 0; i < ARRAY_SIZE(roots); i++) {
		char *f = xasprintf("%s/cgroup.procs", roots[i]);
		char *sub = xasprintf("%s/cgroup.subtree_control", roots[i]);
		bool ok = access(f, W_OK) == 0 && access(sub, F_OK) == 0;
		free(f);
		free(sub);
		if (!ok)
			continue;
		memset(&cur, 0, sizeof(cur));
		cur.v2 = true;
		snprintf(cur.root, sizeof(cur.root), "%s", roots[i]);
		snprintf(cur.parent, sizeof(cur.parent), "airlock-cgmove-%d", (int)getpid());
		char *d = cgroup_file(&cur, NULL, NULL, NULL);
		ok = mkdir(d, 0755) == 0;
		free(d);
		if (ok)
			return have_cur = true;
	}
	return false;
}

static bool pick_v1(void)
{
	char parent[64];
	err_t e = { 0 };

	snprintf(parent, sizeof(parent), "airlock-cgmove-%d", (int)getpid());
	if (cgroup_init(&cur, parent, &e) < 0 || cur.v2) {
		if (cur.v2)
			cgroup_release(&cur);
		return false;
	}
	return have_cur = true;
}

int main(void)
{
	test_unit_path();
	test_mountinfo();
	if (geteuid() != 0) {
		fprintf(stderr, "test-cgroup-move: not root, real hierarchies skipped\n");
		return check_done("test-cgroup-move");
	}
	if (pick_v2())
		test_moves();
	else
		fprintf(stderr, "test-cgroup-move: no writable cgroup2 mount\n");
	if (pick_v1())
		test_moves();
	return check_done("test-cgroup-move");
}
