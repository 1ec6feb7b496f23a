/* proc.c - processes started by EXEC: spawn, stdin, signals, resize, output,
 * reaping and EXIT.
 *
 * Process life cycle, as the node sees it:
 *   EXEC -> EXEC_OK{pid}   (or ERROR{errno} when the program could not be
 *                           started: exec errors travel over a CLOEXEC status
 *                           pipe, so they are never disguised as exit 127)
 *   OUTPUT*                (per fd, offsets from 0, in order)
 *   EXIT                   after the process was reaped AND its output pipes
 *                          reached EOF (pty: EIO), so no output follows EXIT.
 *                          If other processes keep the pipes open after the
 *                          exit (a daemonised grandchild), we wait at most
 *                          EXIT_LINGER_MS, drain what is there and report.
 * The agent is a subreaper (or init): it reaps every zombie, but only the
 * processes in a->procs are reported.
 */
#include "guest.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <termios.h>

#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

extern char **environ;

static struct proc *proc_find(struct agent *a, uint32_t pid)
{
	for (struct proc *p = a->procs; p; p = p->next)
		if ((uint32_t)p->pid == pid)
			return p;
	return NULL;
}

uint32_t proc_count_live(const struct agent *a)
{
	uint32_t n = 0;
	for (const struct proc *p = a->procs; p; p = p->next)
		if (!p->exited)
			n++;
	return n;
}

/* utime + stime + cutime + cstime of a live pid from /proc/<pid>/stat, in
 * clock ticks; 0 when it cannot be read (it just exited). The fields after
 * the command name, which may itself hold spaces and ')', start after the
 * last ')'. */
static uint64_t pid_cpu_ticks(pid_t pid)
{
	char path[40], line[1024], *p;
	unsigned long long ut, st;
	long long cut, cst;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, line, sizeof(line) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	line[n] = 0;
	p = strrchr(line, ')');
	/* state ppid pgrp session tty tpgid flags minflt cminflt majflt
	 * cmajflt utime stime cutime cstime */
	if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %lld %lld",
			 &ut, &st, &cut, &cst) != 4)
		return 0;
	return ut + st + (uint64_t)(cut > 0 ? cut : 0) + (uint64_t)(cst > 0 ? cst : 0);
}

uint64_t proc_cpu_ms(const struct agent *a)
{
	struct rusage ru;
	uint64_t ticks = 0, ms = 0;
	long hz = sysconf(_SC_CLK_TCK);

	/* Everything the agent reaped (as init or subreaper, that is every
	 * process of the sandbox that ended), plus the live ones it started. */
	if (getrusage(RUSAGE_CHILDREN, &ru) == 0)
		ms = (uint64_t)ru.ru_utime.tv_sec * 1000 + (uint64_t)ru.ru_utime.tv_usec / 1000 +
		     (uint64_t)ru.ru_stime.tv_sec * 1000 + (uint64_t)ru.ru_stime.tv_usec / 1000;
	for (const struct proc *p = a->procs; p; p = p->next)
		if (!p->exited)
			ticks += pid_cpu_ticks(p->pid);
	return ms + (hz > 0 ? ticks * 1000 / (uint64_t)hz : 0);
}

static void set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		(void)fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void xclose(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* ---- spawn --------------------------------------------------------------- */

static bool env_has(char **env, size_t n, const char *key)
{
	size_t kl = strlen(key);
	for (size_t i = 0; i < n; i++)
		if (!strncmp(env[i], key, kl) && env[i][kl] == '=')
			return true;
	return false;
}

/* The process environment: what the node sent, plus defaults for PATH, HOME,
 * LANG (and TERM with a pty) when it did not set them. Caller frees the array
 * only (strings are borrowed or static). */
static char **build_env(const struct proto_exec *x)
{
	static char path[] = "PATH=" DEFAULT_PATH;
	static char home_root[] = "HOME=/root", home_other[] = "HOME=/";
	static char lang[] = "LANG=C.UTF-8", term[] = "TERM=xterm";
	char **env = xcalloc(x->envc + 5, sizeof(char *));
	size_t n = 0;

	for (size_t i = 0; i < x->envc; i++)
		env[n++] = x->env[i];
	if (!env_has(env, n, "PATH"))
		env[n++] = path;
	if (!env_has(env, n, "HOME"))
		env[n++] = x->uid == 0 ? home_root : home_other;
	if (!env_has(env, n, "LANG"))
		env[n++] = lang;
	if (x->pty && !env_has(env, n, "TERM"))
		env[n++] = term;
	env[n] = NULL;
	return env;
}

enum { STAGE_SETUP = 1, STAGE_IDS, STAGE_CWD, STAGE_EXEC };

struct child_fds {
	int in, out, err;     /* become 0, 1, 2 */
	int status;           /* CLOEXEC status pipe, write end */
	bool pty;
};

static void __attribute__((noreturn)) child_fail(int status_fd, int stage)
{
	int msg[2] = { errno, stage };
	(void)!write(status_fd, msg, sizeof(msg));
	_exit(127);
}

/* In the child, between spawn_child and exec: the parent is single-threaded
 * and asleep, so the usual libc calls are safe here. Never returns. */
static void __attribute__((noreturn))
child_exec(const struct child_fds *c, const struct proto_exec *x, char **env)
{
	sigset_t none;

	/* The agent handles nothing (no handler could run here on its
	 * memory) and ignores only SIGPIPE; main() reset the rest at start. */
	signal(SIGPIPE, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (setsid() < 0)
		child_fail(c->status, STAGE_SETUP);
	if (c->pty && ioctl(c->in, TIOCSCTTY, 0) < 0)
		child_fail(c->status, STAGE_SETUP);
	/* All sources are >= 3 (main() keeps 0-2 occupied), so dup2 never
	 * clobbers a source. */
	if (dup2(c->in, 0) < 0 || dup2(c->out, 1) < 0 || dup2(c->err, 2) < 0)
		child_fail(c->status, STAGE_SETUP);
	/* Pass exactly 0, 1, 2 (and the CLOEXEC status pipe until exec). */
	if (c->status > 3)
		close_range(3, (unsigned)c->status - 1, 0);
	close_range((unsigned)c->status + 1, ~0u, 0);

	if (geteuid() == 0) {
		if (setgroups(0, NULL) < 0 || setgid(x->gid) < 0 || setuid(x->uid) < 0)
			child_fail(c->status, STAGE_IDS);
	} else if ((x->gid != getgid() && setgid(x->gid) < 0) ||
		   (x->uid != getuid() && setuid(x->uid) < 0)) {
		child_fail(c->status, STAGE_IDS);
	}
	/* After the id switch, so a cwd the user cannot enter fails like it
	 * would for them. */
	if (chdir(x->cwd ? x->cwd : "/") < 0)
		child_fail(c->status, STAGE_CWD);
	/* execvp searches the PATH of environ: make that the child's own. */
	environ = env;
	execvp(x->argv[0], x->argv);
	child_fail(c->status, STAGE_EXEC);
}

/* Start child_exec the way posix_spawn does: vfork, so the child borrows
 * our memory and stack and we sleep until it has exec'd or exited. A fork
 * would copy the agent's page tables and then take a copy-on-write fault
 * for every page either side writes, all of it thrown away by the exec;
 * under TCG that is a few ms of every exec. The child gets its own signal
 * handlers, fd table, cwd and credentials, so what child_exec changes
 * stays its own, except memory: the one global it writes, environ, is put
 * back here (errno too is shared, and only read by us when vfork failed,
 * i.e. when no child ran). vfork rather than clone with a stack of our
 * own: AddressSanitizer knows vfork (build-asan runs this code) and loses
 * track of a stack it did not see allocated. */
static pid_t spawn_child(const struct child_fds *c, const struct proto_exec *x, char **env)
{
	char **volatile saved = environ;
	pid_t pid = vfork();

	if (pid == 0)
		child_exec(c, x, env);
	environ = saved;
	return pid;
}

static const char *stage_name(int stage)
{
	switch (stage) {
	case STAGE_IDS: return "cannot switch user";
	case STAGE_CWD: return "cannot enter working directory";
	case STAGE_EXEC: return "cannot execute";
	}
	return "cannot set up process";
}

static int open_pty(const struct proto_exec *x, int *master, int *slave)
{
	struct winsize ws = { .ws_row = x->rows ? x->rows : 24, .ws_col = x->cols ? x->cols : 80 };
	char name[128];

	*master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (*master < 0)
		return -errno;
	if (grantpt(*master) < 0 || unlockpt(*master) < 0 ||
	    ptsname_r(*master, name, sizeof(name)) != 0)
		return -errno;
	/* The parent keeps a slave fd open until the child has exec'd, so the
	 * master never sees EIO before the child's own slave fd exists. */
	*slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (*slave < 0)
		return -errno;
	if (ioctl(*slave, TIOCSWINSZ, &ws) < 0)
		return -errno;
	return 0;
}

void proc_exec(struct agent *a, const struct proto_frame *f)
{
	struct proto_exec x;
	int master = -1, slave = -1, sp[2] = { -1, -1 };
	int pin[2] = { -1, -1 }, pout[2] = { -1, -1 }, perr[2] = { -1, -1 };
	struct child_fds c = { 0 };
	char **env = NULL;
	int r, msg[2];
	pid_t pid;
	ssize_t n;

	r = proto_dec_exec(f, &x);
	if (r < 0) {
		agent_send_error(a, f->req_id, -r, "bad EXEC request: %s", strerror(-r));
		return;
	}
	agent_touch(a);
	if (x.cwd && x.cwd[0] != '/') {
		agent_send_error(a, f->req_id, EINVAL, "cwd must be absolute");
		goto out;
	}
	env = build_env(&x);
	r = 0;
	if (pipe2(sp, O_CLOEXEC) < 0)
		r = -errno;
	else if (x.pty) {
		r = open_pty(&x, &master, &slave);
		c.in = c.out = c.err = slave;
	} else {
		if (pipe2(pout, O_CLOEXEC) < 0 || pipe2(perr, O_CLOEXEC) < 0)
			r = -errno;
		else if (x.stdin_open) {
			if (pipe2(pin, O_CLOEXEC) < 0)
				r = -errno;
		} else if ((pin[0] = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) {
			r = -errno;
		}
		c.in = pin[0];
		c.out = pout[1];
		c.err = perr[1];
	}
	if (r < 0) {
		agent_send_error(a, f->req_id, -r, "cannot set up process I/O: %s", strerror(-r));
		goto out;
	}
	c.status = sp[1];
	c.pty = x.pty;

	pid = spawn_child(&c, &x, env);
	if (pid < 0) {
		agent_send_error(a, f->req_id, errno, "fork: %s", strerror(errno));
		goto out;
	}

	/* Parent: wait for exec (status pipe closes) or the child's errno. */
	xclose(&sp[1]);
	do
		n = read(sp[0], msg, sizeof(msg));
	while (n < 0 && errno == EINTR);
	if (n == (ssize_t)sizeof(msg)) {
		(void)waitpid(pid, NULL, 0);
		agent_send_error(a, f->req_id, msg[0] > 0 ? msg[0] : EIO, "%s `%s`: %s",
				 stage_name(msg[1]), x.argv[0], strerror(msg[0]));
		goto out;
	}

	struct proc *p = xcalloc(1, sizeof(*p));
	p->pid = pid;
	p->pty = x.pty;
	p->out_fd[0] = p->out_fd[1] = p->in_fd = -1;
	buf_init(&p->in_q);
	if (x.pty) {
		p->out_fd[0] = TAKE_FD(master);
		p->in_fd = fcntl(p->out_fd[0], F_DUPFD_CLOEXEC, 3);
		set_nonblock(p->out_fd[0]);
	} else {
		p->out_fd[0] = TAKE_FD(pout[0]);
		p->out_fd[1] = TAKE_FD(perr[0]);
		if (x.stdin_open)
			p->in_fd = TAKE_FD(pin[1]);
		for (int i = 0; i < 2; i++) {
			/* Bigger pipes: fewer wakeups for chatty processes. */
			(void)fcntl(p->out_fd[i], F_SETPIPE_SZ, 1 << 20);
			/* A fresh pipe's read end has no other status flag to
			 * keep: one F_SETFL, without the F_GETFL. */
			(void)fcntl(p->out_fd[i], F_SETFL, O_NONBLOCK);
		}
		if (p->in_fd >= 0)
			set_nonblock(p->in_fd);
	}
	p->next = a->procs;
	a->procs = p;

	struct proto_enc e;
	proto_enc_begin(&e, &a->out, PT_EXEC_OK, 0, f->req_id);
	proto_enc_u32(&e, PTAG_PID, (uint32_t)pid);
	(void)proto_enc_end(&e);
out:
	xclose(&sp[0]);
	xclose(&sp[1]);
	xclose(&master);
	xclose(&slave);
	for (int i = 0; i < 2; i++) {
		xclose(&pin[i]);
		xclose(&pout[i]);
		xclose(&perr[i]);
	}
	free(env);
	proto_exec_free(&x);
}

/* ---- stdin / signal / resize --------------------------------------------- */

static void ack_stdin(struct agent *a, struct proc *p, int err)
{
	for (size_t i = 0; i < p->n_acks; i++) {
		if (err)
			agent_send_error(a, p->acks[i], err, "stdin: %s", strerror(err));
		else
			agent_send_ok(a, p->acks[i]);
	}
	free(p->acks);
	p->acks = NULL;
	p->n_acks = 0;
}

static void stdin_close(struct agent *a, struct proc *p, int err)
{
	xclose(&p->in_fd);
	buf_free(&p->in_q);
	p->in_q_off = 0;
	p->in_eof = false;
	ack_stdin(a, p, err);
}

void proc_write_stdin(struct agent *a, struct proc *p)
{
	while (p->in_fd >= 0 && p->in_q.len > p->in_q_off) {
		ssize_t w = write(p->in_fd, p->in_q.data + p->in_q_off, p->in_q.len - p->in_q_off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				break;
			/* The reader is gone (EPIPE) or the pty went away. */
			stdin_close(a, p, errno);
			return;
		}
		p->in_q_off += (size_t)w;
	}
	if (p->in_fd < 0)
		return;
	if (p->in_q_off == p->in_q.len) {
		buf_reset(&p->in_q);
		p->in_q_off = 0;
		if (p->in_eof) {
			stdin_close(a, p, 0);
			return;
		}
	}
	if (p->in_q.len - p->in_q_off <= STDIN_HIGH)
		ack_stdin(a, p, 0);
}

void proc_stdin(struct agent *a, const struct proto_frame *f)
{
	const uint8_t *data = NULL;
	size_t len = 0;
	uint32_t pid;
	struct proc *p;

	if (proto_get_u32(f->payload, f->len, PTAG_PID, &pid) < 0) {
		agent_send_error(a, f->req_id, EBADMSG, "STDIN without pid");
		return;
	}
	(void)proto_get_bytes(f->payload, f->len, PTAG_DATA, &data, &len);
	bool eof = proto_get_flag(f->payload, f->len, PTAG_EOF);
	agent_touch(a);
	p = proc_find(a, pid);
	if (!p) {
		agent_send_error(a, f->req_id, ESRCH, "no process %u", pid);
		return;
	}
	if (p->in_fd < 0 || p->exited) {
		agent_send_error(a, f->req_id, EPIPE, "stdin of process %u is not open", pid);
		return;
	}
	buf_add(&p->in_q, data, len);
	if (eof) {
		/* A terminal has no half-close: EOF is the VEOF character
		 * (^D), as if typed. */
		if (p->pty)
			buf_addc(&p->in_q, 0x04);
		else
			p->in_eof = true;
	}
	/* The OK is deferred while much is queued: that is the backpressure
	 * on a writer faster than the process reads. */
	p->acks = xrealloc(p->acks, (p->n_acks + 1) * sizeof(*p->acks));
	p->acks[p->n_acks++] = f->req_id;
	proc_write_stdin(a, p);
}

void proc_signal(struct agent *a, const struct proto_frame *f)
{
	uint32_t pid, sig;
	struct proc *p;

	if (proto_get_u32(f->payload, f->len, PTAG_PID, &pid) < 0 ||
	    proto_get_u32(f->payload, f->len, PTAG_SIGNAL, &sig) < 0) {
		agent_send_error(a, f->req_id, EBADMSG, "SIGNAL needs pid and signal");
		return;
	}
	agent_touch(a);
	if (sig == 0 || sig >= (uint32_t)NSIG) {
		agent_send_error(a, f->req_id, EINVAL, "bad signal %u", sig);
		return;
	}
	/* Only processes we started: the node must not signal arbitrary pids
	 * (or the agent itself). */
	p = proc_find(a, pid);
	if (!p) {
		agent_send_error(a, f->req_id, ESRCH, "no process %u", pid);
		return;
	}
	/* The process leads its own session and group (setsid), so -pid
	 * reaches its children too. */
	if (kill(-p->pid, (int)sig) < 0 && (p->exited || kill(p->pid, (int)sig) < 0)) {
		agent_send_error(a, f->req_id, errno, "kill %u: %s", pid, strerror(errno));
		return;
	}
	agent_send_ok(a, f->req_id);
}

void proc_resize(struct agent *a, const struct proto_frame *f)
{
	uint32_t pid;
	uint16_t rows, cols;
	struct proc *p;

	if (proto_get_u32(f->payload, f->len, PTAG_PID, &pid) < 0 ||
	    proto_get_u16(f->payload, f->len, PTAG_ROWS, &rows) < 0 ||
	    proto_get_u16(f->payload, f->len, PTAG_COLS, &cols) < 0) {
		agent_send_error(a, f->req_id, EBADMSG, "RESIZE needs pid, rows and cols");
		return;
	}
	agent_touch(a);
	p = proc_find(a, pid);
	if (!p) {
		agent_send_error(a, f->req_id, ESRCH, "no process %u", pid);
		return;
	}
	if (!p->pty) {
		agent_send_error(a, f->req_id, ENOTTY, "process %u has no terminal", pid);
		return;
	}
	int fd = p->out_fd[0] >= 0 ? p->out_fd[0] : p->in_fd;
	struct winsize ws = { .ws_row = rows, .ws_col = cols };
	/* TIOCSWINSZ on the master also sends SIGWINCH to the foreground group. */
	if (fd < 0 || ioctl(fd, TIOCSWINSZ, &ws) < 0) {
		agent_send_error(a, f->req_id, fd < 0 ? ESRCH : errno, "resize %u failed", pid);
		return;
	}
	agent_send_ok(a, f->req_id);
}

/* ---- output, reaping, exit ----------------------------------------------- */

void proc_read_output(struct agent *a, struct proc *p, int i, bool ignore_cap)
{
	/* A final drain is bounded too: a writer that outlived the process
	 * could otherwise keep us here forever. */
	size_t budget = 8u << 20;

	while (p->out_fd[i] >= 0) {
		ssize_t n = read(p->out_fd[i], a->iobuf, PROTO_CHUNK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			/* EOF, or EIO on a pty master once every slave fd is
			 * closed: this stream is complete. */
			xclose(&p->out_fd[i]);
			if (p->pty)
				stdin_close(a, p, EPIPE);
			return;
		}
		if (a->chan_up) {
			struct proto_output o = {
				.pid = (uint32_t)p->pid, .fd = (uint8_t)(i + 1),
				.offset = p->off[i], .data = a->iobuf, .len = (size_t)n,
			};
			(void)proto_enc_output(&a->out, &o);
		}
		p->off[i] += (uint64_t)n;
		agent_touch(a);
		if (!ignore_cap || (size_t)n >= budget)
			return;
		budget -= (size_t)n;
	}
}

void proc_reap(struct agent *a)
{
	int status;
	pid_t pid;

	/* We are init (or a subreaper): reap everything, report only ours. */
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		struct proc *p = proc_find(a, (uint32_t)pid);
		if (p && !p->exited) {
			p->exited = true;
			p->status = status;
			p->exit_ms = now_ms();
		}
	}
}

static bool output_done(const struct proc *p)
{
	return p->out_fd[0] < 0 && p->out_fd[1] < 0;
}

int proc_next_timeout(const struct agent *a)
{
	uint64_t now = now_ms();
	int best = -1;

	for (const struct proc *p = a->procs; p; p = p->next) {
		if (!p->exited || output_done(p))
			continue;
		uint64_t due = p->exit_ms + EXIT_LINGER_MS;
		int t = due > now ? (int)(due - now) : 0;
		if (best < 0 || t < best)
			best = t;
	}
	return best;
}

static void proc_free(struct agent *a, struct proc *p)
{
	stdin_close(a, p, EPIPE);
	for (int i = 0; i < 2; i++)
		xclose(&p->out_fd[i]);
	free(p);
}

void proc_finish(struct agent *a)
{
	uint64_t now = now_ms();
	struct proc **pp = &a->procs;

	while (*pp) {
		struct proc *p = *pp;
		if (!p->exited) {
			pp = &p->next;
			continue;
		}
		if (!output_done(p)) {
			/* Someone else still holds the pipes. Give up waiting for
			 * EOF after the linger time, but not while output is held
			 * back by backpressure (that is our delay, not theirs). */
			bool room = !a->chan_up || agent_out_pending(a) < OUT_HIGH;
			if (now < p->exit_ms + EXIT_LINGER_MS || !room) {
				pp = &p->next;
				continue;
			}
			for (int i = 0; i < 2; i++) {
				proc_read_output(a, p, i, true);
				xclose(&p->out_fd[i]);
			}
		}
		struct proto_exit x = { .pid = (uint32_t)p->pid, .code = -1 };
		if (WIFSIGNALED(p->status))
			x.signal = WTERMSIG(p->status);
		else
			x.code = WEXITSTATUS(p->status);
		(void)proto_enc_exit(&a->out, &x);
		agent_touch(a);
		*pp = p->next;
		proc_free(a, p);
	}
}

void proc_kill_all(struct agent *a)
{
	while (a->procs) {
		struct proc *p = a->procs;
		if (!p->exited) {
			kill(-p->pid, SIGKILL);
			kill(p->pid, SIGKILL);
		}
		a->procs = p->next;
		proc_free(a, p);
	}
}

void proc_forget_acks(struct agent *a)
{
	for (struct proc *p = a->procs; p; p = p->next) {
		free(p->acks);
		p->acks = NULL;
		p->n_acks = 0;
	}
}
