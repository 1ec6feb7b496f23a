/* test-guest: runs the real airlock-guest ($AIRLOCK_BIN/airlock-guest) as a
 * plain child over a socketpair and drives it through guestconn: exec with
 * output/exit/offsets, stdin, pty and resize, signals, exec errors, every
 * file operation, large files and output, malformed frames, re-adoption
 * (a second HELLO) and status. Exit 77 when the binary is missing. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "../../src/guestconn/guestconn.h"
#include "../../src/guestproto/proto.h"
#include "check.h"


#define CHECK_OK(expr)                                                              \
	do {                                                                        \
		err_clear(&err);                                                    \
		if ((expr) < 0) {                                                   \
			fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__,     \
				#expr, err.msg);                                    \
			failures++;                                                 \
		}                                                                   \
	} while (0)

#define CHECK_ERR(expr, want)                                                       \
	do {                                                                        \
		err_clear(&err);                                                    \
		int r_ = (expr);                                                    \
		if (r_ >= 0 || err.code != (want)) {                                \
			fprintf(stderr, "%s:%d: %s: want errno %d, got r=%d code=%d (%s)\n", \
				__FILE__, __LINE__, #expr, want, r_, err.code, err.msg); \
			failures++;                                                 \
		}                                                                   \
	} while (0)

/* ---- what the callbacks saw ---------------------------------------------- */

struct rec {
	uint32_t pid;
	struct buf out[2];
	bool bad_offset;
	bool exited;
	int code, sig;
};

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct rec recs[128];
	int n;
	bool closed;
} S = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static struct rec *rec_get(uint32_t pid)
{
	for (int i = 0; i < S.n; i++)
		if (S.recs[i].pid == pid)
			return &S.recs[i];
	if (S.n == (int)ARRAY_SIZE(S.recs))
		abort();
	struct rec *r = &S.recs[S.n++];
	memset(r, 0, sizeof(*r));
	r->pid = pid;
	buf_init(&r->out[0]);
	buf_init(&r->out[1]);
	return r;
}

static void on_output(void *arg, uint32_t pid, int fd, uint64_t off, const void *data, size_t len)
{
	pthread_mutex_lock(&S.mu);
	struct rec *r = rec_get(pid);
	if (fd < 1 || fd > 2 || off != r->out[fd - 1].len || r->exited)
		r->bad_offset = true;
	else
		buf_add(&r->out[fd - 1], data, len);
	pthread_cond_broadcast(&S.cv);
	pthread_mutex_unlock(&S.mu);
}

static void on_exit_cb(void *arg, uint32_t pid, int code, int sig)
{
	pthread_mutex_lock(&S.mu);
	struct rec *r = rec_get(pid);
	r->exited = true;
	r->code = code;
	r->sig = sig;
	pthread_cond_broadcast(&S.cv);
	pthread_mutex_unlock(&S.mu);
}

static void on_closed(void *arg, const char *reason)
{
	pthread_mutex_lock(&S.mu);
	S.closed = true;
	pthread_cond_broadcast(&S.cv);
	pthread_mutex_unlock(&S.mu);
}

static const struct guestconn_cbs cbs = { on_output, on_exit_cb, on_closed };

/* Wait until pid exited; returns the record (stable: never moved). */
static struct rec *wait_exit(uint32_t pid, int timeout_s)
{
	struct timespec ts;
	struct rec *r;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += timeout_s;
	pthread_mutex_lock(&S.mu);
	r = rec_get(pid);
	while (!r->exited)
		if (pthread_cond_timedwait(&S.cv, &S.mu, &ts) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&S.mu);
	if (!r->exited)
		fprintf(stderr, "  pid %u did not exit in %d s\n", pid, timeout_s);
	return r;
}

/* Wait until stream fd of pid contains needle. */
static bool wait_output(uint32_t pid, int fd, const char *needle, int timeout_s)
{
	struct timespec ts;
	bool found;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += timeout_s;
	pthread_mutex_lock(&S.mu);
	struct rec *r = rec_get(pid);
	while (!(found = r->out[fd - 1].data && strstr(r->out[fd - 1].data, needle)))
		if (pthread_cond_timedwait(&S.cv, &S.mu, &ts) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&S.mu);
	return found;
}

/* ---- spawning the guest -------------------------------------------------- */

static char guest_path[4096];

/* own_ns: run the guest in its own UTS and mount namespaces with a tmpfs on
 * /etc, so that RESET's sethostname and /etc/machine-id never touch the
 * host's. */
static pid_t spawn_guest_in(int *host_fd, bool own_ns)
{
	int sv[2];
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		perror("socketpair");
		exit(1);
	}
	pid = fork();
	if (pid == 0) {
		if (own_ns && (unshare(CLONE_NEWUTS | CLONE_NEWNS) < 0 ||
			       mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
			       mount("tmpfs", "/etc", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") < 0))
			_exit(125);
		if (sv[1] == 3)
			fcntl(3, F_SETFD, 0);
		else if (dup2(sv[1], 3) < 0)
			_exit(126);
		unsetenv("AIRLOCK_CHANNEL_FD");
		execl(guest_path, "airlock-guest", (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	*host_fd = sv[0];
	return pid;
}

static pid_t spawn_guest(int *host_fd)
{
	return spawn_guest_in(host_fd, false);
}

static void stop_guest(pid_t pid)
{
	int st = 0;
	kill(pid, SIGTERM);
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* ---- raw protocol: malformed frames, then adoption ----------------------- */

static int read_frame(int fd, struct proto_rx *rx, struct proto_frame *f)
{
	for (;;) {
		int r = proto_rx_next(rx, f);
		if (r != 0)
			return r;
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		if (poll(&pfd, 1, 10000) <= 0)
			return -ETIMEDOUT;
		if (proto_rx_fill(rx, fd) <= 0)
			return -EPIPE;
	}
}

static void expect_error(int fd, struct proto_rx *rx, uint32_t id, int code)
{
	struct proto_frame f;
	struct proto_error pe;

	CHECK(read_frame(fd, rx, &f) == 1);
	CHECK(f.type == PT_ERROR);
	CHECK(f.req_id == id);
	CHECK(proto_dec_error(&f, &pe) == 0);
	if ((int)pe.err != code)
		fprintf(stderr, "  error for id %u: errno %u (%s), want %d\n", id, pe.err, pe.msg,
			code);
	CHECK((int)pe.err == code);
}

static long rss_kb(pid_t pid)
{
	char path[64], line[256];
	long kb = -1;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6))
			kb = atol(line + 6);
	if (f)
		fclose(f);
	return kb;
}

static void test_raw_and_adopt(void)
{
	struct proto_rx rx;
	struct proto_frame f;
	struct proto_hello h;
	struct proto_enc e;
	struct buf b;
	int fd;
	err_t err = { 0 };
	pid_t gpid = spawn_guest(&fd);

	proto_rx_init(&rx);
	buf_init(&b);
	/* The guest speaks first: HELLO then READY, both with id 0. */
	CHECK(read_frame(fd, &rx, &f) == 1 && f.type == PT_HELLO && f.req_id == 0);
	CHECK(proto_dec_hello(&f, &h) == 0 && h.version == PROTO_VERSION && h.boot_id[0]);
	CHECK(read_frame(fd, &rx, &f) == 1 && f.type == PT_READY && f.req_id == 0);

	/* Garbage: one ERROR (id unknown: 0), then the guest resyncs. */
	const char junk[] = "this is certainly not a frame of the airlock protocol";
	CHECK(write_all(fd, junk, sizeof(junk)) == 0);
	expect_error(fd, &rx, 0, EPROTO);

	/* Good header, fields overrun the payload: ERROR with that id. */
	proto_enc_begin(&e, &b, PT_STAT, 0, 77);
	proto_enc_str(&e, PTAG_PATH, "/");
	CHECK(proto_enc_end(&e) == 0);
	b.data[PROTO_HDR_LEN + 2] = 100;   /* field length beyond the payload */
	CHECK(write_all(fd, b.data, b.len) == 0);
	expect_error(fd, &rx, 77, EBADMSG);

	/* Oversized declared length: refused from the header. */
	buf_reset(&b);
	proto_enc_begin(&e, &b, PT_STATUS, 0, 78);
	CHECK(proto_enc_end(&e) == 0);
	b.data[12] = b.data[13] = b.data[14] = b.data[15] = (char)0x7f;
	CHECK(write_all(fd, b.data, b.len) == 0);
	expect_error(fd, &rx, 78, EMSGSIZE);

	/* Unknown type. */
	buf_reset(&b);
	proto_enc_begin(&e, &b, 200, 0, 79);
	CHECK(proto_enc_end(&e) == 0);
	CHECK(write_all(fd, b.data, b.len) == 0);
	expect_error(fd, &rx, 79, ENOSYS);

	/* EXEC with a bad argument (embedded NUL). */
	buf_reset(&b);
	proto_enc_begin(&e, &b, PT_EXEC, 0, 80);
	proto_enc_bytes(&e, PTAG_ARG, "a\0b", 3);
	CHECK(proto_enc_end(&e) == 0);
	CHECK(write_all(fd, b.data, b.len) == 0);
	expect_error(fd, &rx, 80, EBADMSG);

	/* And it still answers. */
	buf_reset(&b);
	proto_enc_begin(&e, &b, PT_STATUS, 0, 81);
	CHECK(proto_enc_end(&e) == 0);
	CHECK(write_all(fd, b.data, b.len) == 0);
	CHECK(read_frame(fd, &rx, &f) == 1 && f.type == PT_STATUS_OK && f.req_id == 81);
	CHECK(proto_rx_pending(&rx) == 0);

	/* Backpressure: 64 MiB of output while we do not read. The guest must
	 * stop reading the pipe instead of buffering it all. */
	long rss0 = rss_kb(gpid);
	char *argv[] = { "head", "-c", "67108864", "/dev/zero", NULL };
	struct proto_exec x = { .argv = argv };
	buf_reset(&b);
	CHECK(proto_enc_exec(&b, 82, &x) == 0);
	CHECK(write_all(fd, b.data, b.len) == 0);
	usleep(1000 * 1000);
	long grown = rss_kb(gpid) - rss0;
	fprintf(stderr, "  guest RSS grew by %ld KiB while 64 MiB of output was not read\n",
		grown);
	CHECK(grown <= 24 * 1024);
	uint64_t total = 0;
	bool exited = false, in_order = true;
	while (!exited) {
		if (read_frame(fd, &rx, &f) != 1)
			break;
		struct proto_output o;
		if (f.type == PT_OUTPUT && proto_dec_output(&f, &o) == 0) {
			in_order &= o.offset == total && o.fd == 1;
			total += o.len;
		}
		exited = f.type == PT_EXIT;
	}
	CHECK(exited && in_order && total == 64u << 20);

	proto_rx_free(&rx);
	buf_free(&b);

	/* Adoption: the guest said hello long ago; guestconn_open asks it to
	 * say it again and gets the same boot id. */
	struct guest_hello gh;
	struct guestconn *gc = guestconn_open(fd, &cbs, NULL, 5000, &gh, &err);
	CHECK(gc != NULL);
	if (!gc) {
		fprintf(stderr, "  open: %s\n", err.msg);
		return;
	}
	CHECK(!strcmp(gh.boot_id, h.boot_id) && gh.version == PROTO_VERSION);
	struct guest_status st;
	CHECK_OK(guestconn_status(gc, &st, &err));
	guestconn_close(gc);

	/* With the channel gone, the guest (and its processes) live on. */
	usleep(100 * 1000);
	CHECK(waitpid(gpid, NULL, WNOHANG) == 0);
	stop_guest(gpid);
}

/* ---- the main session ---------------------------------------------------- */

static uint32_t run(struct guestconn *gc, struct exec_spec *spec)
{
	err_t err = { 0 };
	uint32_t pid = 0;
	CHECK_OK(guestconn_exec(gc, spec, &pid, &err));
	return pid;
}

static void test_exec(struct guestconn *gc)
{
	char *argv[] = { "sh", "-c", "echo hi; echo err >&2; exit 3", NULL };
	struct exec_spec spec = { .argv = argv };
	uint32_t pid = run(gc, &spec);
	struct rec *r = wait_exit(pid, 20);

	CHECK(r->exited && r->code == 3 && r->sig == 0);
	CHECK(!r->bad_offset);
	CHECK(r->out[0].len == 3 && !memcmp(r->out[0].data, "hi\n", 3));
	CHECK(r->out[1].len == 4 && !memcmp(r->out[1].data, "err\n", 4));

	/* given env (+ defaults for what is missing), cwd */
	char *argv2[] = { "sh", "-c", "echo $FOO:$HOME:$LANG:$(pwd)", NULL };
	char *env[] = { "FOO=bar", NULL };
	struct exec_spec spec2 = { .argv = argv2, .env = env, .cwd = "/tmp" };
	r = wait_exit(run(gc, &spec2), 20);
	CHECK(r->code == 0 && r->out[0].data && !strcmp(r->out[0].data, "bar:/root:C.UTF-8:/tmp\n"));

	/* a daemonised grandchild holding stdout does not hold EXIT forever */
	char *argv3[] = { "sh", "-c", "sleep 3 & echo started", NULL };
	struct exec_spec spec3 = { .argv = argv3 };
	uint64_t t0 = now_ms();
	r = wait_exit(run(gc, &spec3), 20);
	CHECK(r->exited && r->code == 0 && now_ms() - t0 < 2500);
	CHECK(r->out[0].data && !strcmp(r->out[0].data, "started\n"));
}

static void test_exec_errors(struct guestconn *gc)
{
	err_t err = { 0 };
	uint32_t pid;
	char *a1[] = { "/nonexistent/binary", NULL };
	char *a2[] = { "no-such-command-airlock", NULL };
	char *a3[] = { "true", NULL };
	struct exec_spec s1 = { .argv = a1 }, s2 = { .argv = a2 };
	struct exec_spec s3 = { .argv = a3, .cwd = "/nonexistent-dir" };

	CHECK_ERR(guestconn_exec(gc, &s1, &pid, &err), ENOENT);
	CHECK_ERR(guestconn_exec(gc, &s2, &pid, &err), ENOENT);
	CHECK_ERR(guestconn_exec(gc, &s3, &pid, &err), ENOENT);
	CHECK(strstr(err.msg, "working directory") != NULL);
	char *a4[] = { "/etc/passwd", NULL };
	struct exec_spec s4 = { .argv = a4 };
	CHECK_ERR(guestconn_exec(gc, &s4, &pid, &err), EACCES);
	CHECK_ERR(guestconn_signal(gc, 999999, SIGTERM, &err), ESRCH);
	CHECK_ERR(guestconn_stdin(gc, 999999, "x", 1, false, &err), ESRCH);
}

static void test_stdin(struct guestconn *gc)
{
	err_t err = { 0 };
	char *argv[] = { "cat", NULL };
	struct exec_spec spec = { .argv = argv, .stdin_open = true };
	uint32_t pid = run(gc, &spec);

	CHECK_OK(guestconn_stdin(gc, pid, "hello\n", 6, false, &err));
	CHECK(wait_output(pid, 1, "hello\n", 10));
	CHECK_OK(guestconn_stdin(gc, pid, "world", 5, true, &err));
	struct rec *r = wait_exit(pid, 20);
	CHECK(r->code == 0 && r->out[0].data && !strcmp(r->out[0].data, "hello\nworld"));

	/* stdin not open -> /dev/null: cat ends at once, and STDIN is refused */
	struct exec_spec s2 = { .argv = argv };
	r = wait_exit(run(gc, &s2), 20);
	CHECK(r->code == 0 && r->out[0].len == 0);

	/* 3 MiB through stdin (several frames, deferred acks) */
	size_t n = 3u << 20;
	char *big = xmalloc(n);
	for (size_t i = 0; i < n; i++)
		big[i] = (char)('a' + i % 26);
	char *wc[] = { "wc", "-c", NULL };
	struct exec_spec s3 = { .argv = wc, .stdin_open = true };
	pid = run(gc, &s3);
	CHECK_OK(guestconn_stdin(gc, pid, big, n, true, &err));
	r = wait_exit(pid, 30);
	CHECK(r->code == 0 && r->out[0].data && atol(r->out[0].data) == (long)n);

	/* A process that never reads: the guest holds the ack back once its
	 * queue is full, and the request times out instead of growing memory. */
	char *sl[] = { "sleep", "100", NULL };
	struct exec_spec s4 = { .argv = sl, .stdin_open = true };
	pid = run(gc, &s4);
	guestconn_set_timeout(gc, 500);
	CHECK_ERR(guestconn_stdin(gc, pid, big, n, false, &err), ETIMEDOUT);
	guestconn_set_timeout(gc, 0);
	CHECK_OK(guestconn_signal(gc, pid, SIGKILL, &err));
	r = wait_exit(pid, 20);
	CHECK(r->sig == SIGKILL);
	free(big);
}

static void test_pty(struct guestconn *gc)
{
	err_t err = { 0 };
	char *argv[] = { "tty", NULL };
	struct exec_spec spec = { .argv = argv, .pty = true, .rows = 24, .cols = 80 };
	struct rec *r = wait_exit(run(gc, &spec), 20);

	CHECK(r->code == 0 && r->out[0].data && !strncmp(r->out[0].data, "/dev/pts/", 9));
	CHECK(r->out[1].len == 0);

	char *a2[] = { "stty", "size", NULL };
	struct exec_spec s2 = { .argv = a2, .pty = true, .rows = 33, .cols = 99 };
	r = wait_exit(run(gc, &s2), 20);
	CHECK(r->code == 0 && r->out[0].data && strstr(r->out[0].data, "33 99"));

	char *a3[] = { "sh", "-c", "echo ready; read x; stty size", NULL };
	struct exec_spec s3 = { .argv = a3, .pty = true, .rows = 24, .cols = 80,
				.stdin_open = true };
	uint32_t pid = run(gc, &s3);
	CHECK(wait_output(pid, 1, "ready", 10));
	CHECK_OK(guestconn_resize(gc, pid, 50, 132, &err));
	CHECK_OK(guestconn_stdin(gc, pid, "go\n", 3, false, &err));
	r = wait_exit(pid, 20);
	CHECK(r->code == 0 && r->out[0].data && strstr(r->out[0].data, "50 132"));

	/* resize of a process without a terminal */
	char *a4[] = { "sleep", "100", NULL };
	struct exec_spec s4 = { .argv = a4 };
	pid = run(gc, &s4);
	CHECK_ERR(guestconn_resize(gc, pid, 10, 10, &err), ENOTTY);
	CHECK_OK(guestconn_signal(gc, pid, SIGKILL, &err));
	r = wait_exit(pid, 20);
	CHECK(r->exited && r->sig == SIGKILL && r->code < 0);
}

static void test_signal(struct guestconn *gc)
{
	err_t err = { 0 };
	/* The whole group gets it: sh and its sleep child. */
	char *argv[] = { "sh", "-c", "sleep 100; echo not-reached", NULL };
	struct exec_spec spec = { .argv = argv };
	uint32_t pid = run(gc, &spec);

	usleep(100 * 1000);
	CHECK_OK(guestconn_signal(gc, pid, SIGTERM, &err));
	struct rec *r = wait_exit(pid, 20);
	CHECK(r->exited && r->sig == SIGTERM);
	CHECK(r->out[0].len == 0);
}

static void test_files(struct guestconn *gc, const char *tmp)
{
	err_t err = { 0 };
	struct buf b;
	struct guest_stat st;
	struct guest_dirent *ents = NULL;
	size_t n = 0;
	char p[4096], q[4096];

	buf_init(&b);
	snprintf(p, sizeof(p), "%s/a/b/f.txt", tmp);
	CHECK_OK(guestconn_file_write(gc, p, "content\n", 8, 0640, &err));
	CHECK_OK(guestconn_file_read(gc, p, 1024, &b, &err));
	CHECK(b.len == 8 && !memcmp(b.data, "content\n", 8));
	buf_reset(&b);
	CHECK_ERR(guestconn_file_read(gc, p, 4, &b, &err), EFBIG);
	CHECK_OK(guestconn_stat(gc, p, &st, &err));
	CHECK(st.type == 'f' && st.size == 8 && st.mode == 0640);
	CHECK(st.mtime_ms > 0);
	/* overwrite is atomic and replaces */
	CHECK_OK(guestconn_file_write(gc, p, "", 0, 0600, &err));
	CHECK_OK(guestconn_stat(gc, p, &st, &err));
	CHECK(st.size == 0 && st.mode == 0600);

	snprintf(p, sizeof(p), "%s/a/b", tmp);
	CHECK_OK(guestconn_list(gc, p, &ents, &n, &err));
	CHECK(n == 1 && ents && !strcmp(ents[0].name, "f.txt") && ents[0].st.type == 'f');
	guest_dirents_free(ents, n);
	CHECK_ERR(guestconn_file_read(gc, p, 1024, &b, &err), EISDIR);
	CHECK_OK(guestconn_stat(gc, p, &st, &err));
	CHECK(st.type == 'd');

	snprintf(p, sizeof(p), "%s/d", tmp);
	CHECK_OK(guestconn_mkdir(gc, p, false, &err));
	CHECK_ERR(guestconn_mkdir(gc, p, false, &err), EEXIST);
	CHECK_OK(guestconn_mkdir(gc, p, true, &err));
	snprintf(p, sizeof(p), "%s/x/y/z", tmp);
	CHECK_ERR(guestconn_mkdir(gc, p, false, &err), ENOENT);
	CHECK_OK(guestconn_mkdir(gc, p, true, &err));

	snprintf(p, sizeof(p), "%s/a/b/f.txt", tmp);
	snprintf(q, sizeof(q), "%s/a/b/g.txt", tmp);
	CHECK_OK(guestconn_rename(gc, p, q, &err));
	CHECK_ERR(guestconn_stat(gc, p, &st, &err), ENOENT);
	CHECK_OK(guestconn_stat(gc, q, &st, &err));
	CHECK_ERR(guestconn_rename(gc, p, q, &err), ENOENT);

	snprintf(p, sizeof(p), "%s/a", tmp);
	CHECK_ERR(guestconn_remove(gc, p, false, &err), ENOTEMPTY);
	CHECK_OK(guestconn_remove(gc, p, true, &err));
	CHECK_ERR(guestconn_stat(gc, p, &st, &err), ENOENT);
	CHECK_ERR(guestconn_remove(gc, p, true, &err), ENOENT);

	/* recursive remove does not follow symlinks */
	snprintf(p, sizeof(p), "%s/keep/file", tmp);
	CHECK_OK(guestconn_file_write(gc, p, "x", 1, 0644, &err));
	snprintf(p, sizeof(p), "%s/s", tmp);
	CHECK_OK(guestconn_mkdir(gc, p, false, &err));
	snprintf(p, sizeof(p), "%s/keep", tmp);
	snprintf(q, sizeof(q), "%s/s/link", tmp);
	CHECK(symlink(p, q) == 0);
	CHECK_OK(guestconn_stat(gc, q, &st, &err));
	CHECK(st.type == 'l');
	snprintf(p, sizeof(p), "%s/s", tmp);
	CHECK_OK(guestconn_remove(gc, p, true, &err));
	snprintf(p, sizeof(p), "%s/keep/file", tmp);
	CHECK_OK(guestconn_stat(gc, p, &st, &err));

	/* a FIFO is not read (it would block the agent) */
	snprintf(p, sizeof(p), "%s/fifo", tmp);
	CHECK(mkfifo(p, 0600) == 0);
	CHECK_ERR(guestconn_file_read(gc, p, 1024, &b, &err), EINVAL);
	CHECK_OK(guestconn_stat(gc, p, &st, &err));
	CHECK(st.type == 'o');

	/* relative paths refused before they reach the guest */
	CHECK_ERR(guestconn_stat(gc, "relative", &st, &err), EINVAL);
	buf_free(&b);
}

static void test_big(struct guestconn *gc, const char *tmp)
{
	err_t err = { 0 };
	struct buf b;
	char p[4096];
	size_t sizes[] = { 4u << 20, (16u << 20) };

	buf_init(&b);
	for (size_t k = 0; k < ARRAY_SIZE(sizes); k++) {
		size_t n = sizes[k];
		char *data = xmalloc(n);
		random_bytes(data, n);
		snprintf(p, sizeof(p), "%s/big%zu", tmp, k);
		uint64_t t0 = now_ms();
		CHECK_OK(guestconn_file_write(gc, p, data, n, 0644, &err));
		buf_reset(&b);
		CHECK_OK(guestconn_file_read(gc, p, 16u << 20, &b, &err));
		CHECK(b.len == n && !memcmp(b.data, data, n));
		fprintf(stderr, "  %zu MiB write+read: %llu ms\n", n >> 20,
			(unsigned long long)(now_ms() - t0));
		free(data);
	}

	/* 10 MiB of output arrives complete and in order: compare with the
	 * file it was read from. */
	size_t n = 10u << 20;
	char *data = xmalloc(n);
	random_bytes(data, n);
	snprintf(p, sizeof(p), "%s/out10", tmp);
	CHECK_OK(guestconn_file_write(gc, p, data, n, 0644, &err));
	char *argv[] = { "head", "-c", "10485760", p, NULL };
	struct exec_spec spec = { .argv = argv };
	uint64_t t0 = now_ms();
	struct rec *r = wait_exit(run(gc, &spec), 60);
	CHECK(r->code == 0 && !r->bad_offset);
	CHECK(r->out[0].len == n && !memcmp(r->out[0].data, data, n));
	fprintf(stderr, "  10 MiB output: %llu ms\n", (unsigned long long)(now_ms() - t0));
	free(data);
	buf_free(&b);
}

/* Requests from several threads at once are matched to their own replies. */
struct conc_arg {
	struct guestconn *gc;
	const char *tmp;
	int id;
	int fails;
};

static void *conc_main(void *p)
{
	struct conc_arg *c = p;
	err_t err = { 0 };
	char path[4096], want[64];
	struct buf b;

	buf_init(&b);
	for (int i = 0; i < 40; i++) {
		struct guest_stat st;
		snprintf(path, sizeof(path), "%s/conc-%d-%d", c->tmp, c->id, i);
		snprintf(want, sizeof(want), "thread %d iteration %d", c->id, i);
		buf_reset(&b);
		if (guestconn_file_write(c->gc, path, want, strlen(want), 0644, &err) < 0 ||
		    guestconn_file_read(c->gc, path, 1024, &b, &err) < 0 ||
		    strcmp(b.data, want) != 0 ||
		    guestconn_stat(c->gc, path, &st, &err) < 0 || st.size != strlen(want) ||
		    guestconn_remove(c->gc, path, false, &err) < 0)
			c->fails++;
	}
	buf_free(&b);
	return NULL;
}

static void test_concurrent(struct guestconn *gc, const char *tmp)
{
	pthread_t th[4];
	struct conc_arg args[4];

	for (int i = 0; i < 4; i++) {
		args[i] = (struct conc_arg){ .gc = gc, .tmp = tmp, .id = i };
		pthread_create(&th[i], NULL, conc_main, &args[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		CHECK(args[i].fails == 0);
	}
}

static void test_status(struct guestconn *gc)
{
	err_t err = { 0 };
	struct guest_status st, st2;
	char *argv[] = { "sleep", "100", NULL };
	struct exec_spec spec = { .argv = argv };

	CHECK_OK(guestconn_status(gc, &st, &err));
	CHECK(st.n_procs == 0);
	CHECK(st.uptime_ms > 0);
	CHECK(st.last_activity_ms > wall_ms() - 60000 && st.last_activity_ms <= wall_ms());
	uint32_t pid = run(gc, &spec);
	CHECK_OK(guestconn_status(gc, &st2, &err));
	CHECK(st2.n_procs == 1 && st2.last_activity_ms >= st.last_activity_ms);
	CHECK_OK(guestconn_signal(gc, pid, SIGKILL, &err));
	wait_exit(pid, 20);
}

/* RECLAIM drops the page cache and zeroes free memory of a vm guest; an
 * agent that is not a vm's init (ns jails, this test: the host's kernel)
 * refuses it and touches nothing. */
static void test_reclaim_refused(struct guestconn *gc)
{
	err_t err = { 0 };

	CHECK(guestconn_reclaim(gc, &err) < 0);
	CHECK(strstr(err.msg, "only in a vm guest") != NULL);
	/* the agent carries on */
	struct guest_status st;
	CHECK_OK(guestconn_status(gc, &st, &err));
}

/* ---- RESET (clone reset) --------------------------------------------------
 * The guest runs in its own UTS and mount namespaces (spawn_guest_in), so
 * the hostname and /etc/machine-id it sets are its own. The clock is never
 * set here (wall clock 0 / set_clock false): that would move the host's;
 * test-vmboot sets it inside a VM. RNDADDENTROPY does reach the host's pool,
 * which is harmless. */

static void send_reset_raw(int fd, uint32_t id, uint64_t wall, size_t ent_len, const char *host,
			   const char *mid)
{
	struct proto_enc e;
	struct buf b;
	uint8_t ent[64];

	memset(ent, 7, sizeof(ent));
	buf_init(&b);
	proto_enc_begin(&e, &b, PT_RESET, 0, id);
	proto_enc_u64(&e, PTAG_WALLCLOCK, wall);
	proto_enc_bytes(&e, PTAG_ENTROPY, ent, ent_len);
	if (host)
		proto_enc_str(&e, PTAG_HOSTNAME, host);
	if (mid)
		proto_enc_str(&e, PTAG_MACHINE_ID, mid);
	CHECK(proto_enc_end(&e) == 0);
	CHECK(write_all(fd, b.data, b.len) == 0);
	buf_free(&b);
}

static void test_reset(void)
{
	const char *mid = "00112233445566778899aabbccddeeff";
	char host_before[256] = "", host_after[256] = "";
	struct proto_rx rx;
	struct proto_frame f;
	struct guest_hello hello;
	err_t err = { 0 };
	struct buf b;
	int fd;

	if (geteuid() != 0) {
		fprintf(stderr, "test-guest: not root, RESET not tested\n");
		return;
	}
	gethostname(host_before, sizeof(host_before));

	/* Raw frames: what the guest refuses, and changes nothing for. */
	pid_t gpid = spawn_guest_in(&fd, true);
	proto_rx_init(&rx);
	CHECK(read_frame(fd, &rx, &f) == 1 && f.type == PT_HELLO);
	CHECK(read_frame(fd, &rx, &f) == 1 && f.type == PT_READY);
	send_reset_raw(fd, 90, 1000000000ull, 64, "x", mid);       /* 1970: out of range */
	expect_error(fd, &rx, 90, EINVAL);
	send_reset_raw(fd, 91, 0, 16, "x", mid);                   /* too little entropy */
	expect_error(fd, &rx, 91, EINVAL);
	send_reset_raw(fd, 92, 0, 64, "x", NULL);                  /* no machine id */
	expect_error(fd, &rx, 92, EBADMSG);
	send_reset_raw(fd, 93, 0, 64, "bad/name", mid);
	expect_error(fd, &rx, 93, EINVAL);
	send_reset_raw(fd, 94, 0, 64, "raw-reset", mid);           /* good: OK */
	CHECK(read_frame(fd, &rx, &f) == 1 && f.type == PT_OK && f.req_id == 94);
	proto_rx_free(&rx);
	close(fd);
	stop_guest(gpid);

	/* The host side. */
	gpid = spawn_guest_in(&fd, true);
	struct guestconn *gc = guestconn_open(fd, &cbs, NULL, 5000, &hello, &err);
	CHECK(gc != NULL);
	if (!gc) {
		kill(gpid, SIGKILL);
		waitpid(gpid, NULL, 0);
		return;
	}
	struct guest_reset r = { .hostname = "reset-test-1", .machine_id = mid };
	CHECK_OK(guestconn_reset(gc, &r, &err));
	char *argv[] = { "uname", "-n", NULL };
	struct exec_spec spec = { .argv = argv };
	uint32_t pid = run(gc, &spec);
	CHECK(wait_output(pid, 1, "reset-test-1\n", 20));
	wait_exit(pid, 20);
	buf_init(&b);
	CHECK_OK(guestconn_file_read(gc, "/etc/machine-id", 4096, &b, &err));
	CHECK(b.len == 33 && !memcmp(b.data, mid, 32) && b.data[32] == '\n');
	struct guest_stat st;
	CHECK_OK(guestconn_stat(gc, "/etc/machine-id", &st, &err));
	CHECK(st.mode == 0444);

	/* Defaults: fresh machine id and entropy from the host. */
	uint8_t ent[100];
	memset(ent, 1, sizeof(ent));
	r = (struct guest_reset){ .hostname = "reset-test-2", .entropy = ent, .entropy_len = 100 };
	CHECK_OK(guestconn_reset(gc, &r, &err));
	buf_reset(&b);
	CHECK_OK(guestconn_file_read(gc, "/etc/machine-id", 4096, &b, &err));
	CHECK(b.len == 33 && memcmp(b.data, mid, 32) != 0 && strspn(b.data, "0123456789abcdef") == 32);
	buf_free(&b);

	/* Refused on the host side, nothing sent. */
	r = (struct guest_reset){ .hostname = "no spaces" };
	CHECK_ERR(guestconn_reset(gc, &r, &err), EINVAL);
	r = (struct guest_reset){ .hostname = "h", .entropy = ent, .entropy_len = 8 };
	CHECK_ERR(guestconn_reset(gc, &r, &err), EINVAL);
	r = (struct guest_reset){ .hostname = "h", .machine_id = "XYZ" };
	CHECK_ERR(guestconn_reset(gc, &r, &err), EINVAL);
	r = (struct guest_reset){ .hostname = "h", .wall_ns = 5 };
	CHECK_ERR(guestconn_reset(gc, &r, &err), EINVAL);
	r = (struct guest_reset){ .hostname = NULL };
	CHECK_ERR(guestconn_reset(gc, &r, &err), EINVAL);
	CHECK(guestconn_alive(gc));
	guestconn_close(gc);
	stop_guest(gpid);

	gethostname(host_after, sizeof(host_after));
	CHECK(!strcmp(host_before, host_after));
}

/* ---- port streams ---------------------------------------------------------
 * The guest here is a plain child in our network namespace: it connects to a
 * listener of ours on 127.0.0.1. */

static int listen_lo(uint16_t *port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sin);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	CHECK(fd >= 0);
	CHECK(bind(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0 && listen(fd, 4) == 0);
	CHECK(getsockname(fd, (struct sockaddr *)&sin, &sl) == 0);
	*port = ntohs(sin.sin_port);
	return fd;
}

/* Wait for something from the stream, then read into out (up to n). */
static ssize_t stream_read_wait(struct gstream *st, void *p, size_t n)
{
	for (;;) {
		gstream_clear(st);
		ssize_t r = gstream_read(st, p, n);
		if (r != -EAGAIN)
			return r;
		struct pollfd pfd = { .fd = gstream_fd(st), .events = POLLIN };
		if (poll(&pfd, 1, 10000) <= 0)
			return -ETIMEDOUT;
	}
}

static void test_ports(struct guestconn *gc)
{
	err_t err = { 0 };
	uint16_t port;
	int lfd = listen_lo(&port);

	/* A closed port: ECONNREFUSED from the guest's connect. */
	close(lfd);
	CHECK(guestconn_port_open(gc, port, &err) == NULL && err.code == ECONNREFUSED);

	lfd = listen_lo(&port);
	struct gstream *st = guestconn_port_open(gc, port, &err);
	CHECK(st != NULL);
	if (!st) {
		close(lfd);
		return;
	}
	int cfd = accept(lfd, NULL, NULL);
	CHECK(cfd >= 0);

	/* Service -> node: 24 MiB, 48 windows. The node reads slowly at first:
	 * the service's writes must block (flow control) rather than the
	 * guest buffering it all, and everything arrives in order. */
	size_t total = 24u << 20;
	uint8_t *data = xmalloc(total), *got = xmalloc(total);
	for (size_t i = 0; i < total; i++)
		data[i] = (uint8_t)(i * 7 + (i >> 13));
	int fl = fcntl(cfd, F_GETFL);
	fcntl(cfd, F_SETFL, fl | O_NONBLOCK);
	size_t sent = 0, have = 0;
	while (sent < total) {
		ssize_t w = write(cfd, data + sent, total - sent);
		if (w > 0) {
			sent += (size_t)w;
			continue;
		}
		break;   /* the socket buffers and one window are full */
	}
	/* With nothing read yet, the service could put at most its socket
	 * buffers (tcp_rmem + tcp_wmem maxima, about 10 MiB by default) plus
	 * one window into the pipe. */
	CHECK(sent < total);
	while (have < total) {
		while (sent < total) {
			ssize_t w = write(cfd, data + sent, total - sent);
			if (w <= 0)
				break;
			sent += (size_t)w;
		}
		ssize_t r = stream_read_wait(st, got + have, total - have);
		CHECK(r > 0);
		if (r <= 0)
			break;
		have += (size_t)r;
	}
	CHECK(have == total && memcmp(data, got, total) == 0);
	fcntl(cfd, F_SETFL, fl);

	/* Node -> service: 3 MiB within the credit the guest returns. */
	size_t up = 3u << 20, off = 0;
	have = 0;
	while (off < up || have < up) {
		if (off < up) {
			ssize_t w = gstream_write(st, data + off, up - off);
			CHECK(w >= 0);
			if (w < 0)
				break;
			off += (size_t)w;
		}
		struct pollfd pfd = { .fd = cfd, .events = POLLIN };
		if (have < up && poll(&pfd, 1, off < up ? 10 : 10000) > 0) {
			ssize_t r = read(cfd, got + have, up - have);
			CHECK(r > 0);
			if (r <= 0)
				break;
			have += (size_t)r;
		}
	}
	CHECK(have == up && memcmp(data, got, up) == 0);

	/* Half-close both ways: our SHUT is the service's EOF, its EOF ours. */
	CHECK(gstream_shut(st) == 0);
	char ch;
	CHECK(read(cfd, &ch, 1) == 0);
	CHECK(write(cfd, "bye", 3) == 3);
	shutdown(cfd, SHUT_WR);
	char bye[8];
	CHECK(stream_read_wait(st, bye, sizeof(bye)) == 3 && memcmp(bye, "bye", 3) == 0);
	CHECK(stream_read_wait(st, bye, sizeof(bye)) == 0);
	gstream_close(st);
	close(cfd);

	/* A reset by the node closes the guest's socket. */
	st = guestconn_port_open(gc, port, &err);
	CHECK(st != NULL);
	cfd = accept(lfd, NULL, NULL);
	gstream_close(st);
	CHECK(read(cfd, &ch, 1) <= 0);
	close(cfd);
	close(lfd);
	free(data);
	free(got);
}

int main(void)
{
	const char *bin = getenv("AIRLOCK_BIN");
	char tmp[] = "/tmp/airlock-test-guest-XXXXXX";
	err_t err = { 0 };
	struct guest_hello hello;
	int fd;

	snprintf(guest_path, sizeof(guest_path), "%s/airlock-guest", bin ? bin : ".");
	if (access(guest_path, X_OK) != 0) {
		fprintf(stderr, "test-guest: %s not built, skipping\n", guest_path);
		return 77;
	}
	signal(SIGPIPE, SIG_IGN);

	test_raw_and_adopt();
	test_reset();

	pid_t gpid = spawn_guest(&fd);
	struct guestconn *gc = guestconn_open(fd, &cbs, NULL, 5000, &hello, &err);
	if (!gc) {
		fprintf(stderr, "test-guest: open: %s\n", err.msg);
		kill(gpid, SIGKILL);
		return 1;
	}
	CHECK(hello.version == PROTO_VERSION && strlen(hello.boot_id) == 32);
	if (!mkdtemp(tmp)) {
		perror("mkdtemp");
		return 1;
	}

	test_exec(gc);
	test_exec_errors(gc);
	test_stdin(gc);
	test_pty(gc);
	test_signal(gc);
	test_files(gc, tmp);
	test_big(gc, tmp);
	test_concurrent(gc, tmp);
	test_status(gc);
	test_reclaim_refused(gc);
	test_ports(gc);
	CHECK(guestconn_alive(gc));
	CHECK(!S.closed);

	/* The guest going away is noticed: on_closed, requests fail. */
	kill(gpid, SIGKILL);
	waitpid(gpid, NULL, 0);
	pthread_mutex_lock(&S.mu);
	for (int i = 0; i < 100 && !S.closed; i++) {
		pthread_mutex_unlock(&S.mu);
		usleep(20 * 1000);
		pthread_mutex_lock(&S.mu);
	}
	pthread_mutex_unlock(&S.mu);
	CHECK(S.closed && !guestconn_alive(gc));
	struct guest_status st;
	CHECK_ERR(guestconn_status(gc, &st, &err), ECONNRESET);
	guestconn_close(gc);

	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
	(void)!system(cmd);
	for (int i = 0; i < S.n; i++) {
		buf_free(&S.recs[i].out[0]);
		buf_free(&S.recs[i].out[1]);
	}
	return check_done("test-guest");
}
