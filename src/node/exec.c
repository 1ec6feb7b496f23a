/* Process sessions: exec, the process table, output streaming, stdin,
 * signals, resize and exec timeouts.
 *
 * Output flows: guest → channel reader thread → proc_on_output() appends to
 * the process's ring (sb->mu) and broadcasts its condvar → every streaming
 * handler waiting on it wakes, copies what is new out of the ring, drops the
 * lock and writes NDJSON lines. Nothing on this path sleeps or polls; the
 * one timed wait (1 s, and only while no output arrives) lets an idle
 * stream notice that its client went away.
 *
 * A process outlives its HTTP stream. The table keeps every running process
 * and the last NODE_PROC_KEEP exited ones per sandbox.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "../lib/log.h"
#include "node-internal.h"

/* ---- the table (all under sb->mu) -------------------------------------- */

static struct proc *proc_new_locked(struct sandbox *sb, uint32_t pid)
{
	struct proc *p = xcalloc(1, sizeof(*p)), **pp;
	pthread_condattr_t ca;
	size_t cap = sb->node->cfg->out_buffer_bytes ? sb->node->cfg->out_buffer_bytes : 1u << 20;

	p->serial = sb->next_serial++;
	p->pid = pid;
	p->running = true;
	p->started_at = wall_ms();
	ring_init(&p->out[0], cap);
	ring_init(&p->out[1], cap);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->cv, &ca);
	pthread_condattr_destroy(&ca);
	p->refs = 1;
	p->in_table = true;
	for (pp = &sb->procs; *pp; pp = &(*pp)->next)
		;
	*pp = p;
	return p;
}

static void proc_free(struct proc *p)
{
	if (p->argv)
		for (char **a = p->argv; *a; a++)
			free(*a);
	free(p->argv);
	ring_free(&p->out[0]);
	ring_free(&p->out[1]);
	pthread_cond_destroy(&p->cv);
	free(p);
}

static void proc_unref_locked(struct proc *p)
{
	if (--p->refs == 0)
		proc_free(p);
}

/* Drop the oldest exited records beyond the limit. */
static void evict_locked(struct sandbox *sb)
{
	struct proc **pp = &sb->procs;

	while (sb->n_exited > NODE_PROC_KEEP && *pp) {
		struct proc *p = *pp;
		if (p->running) {
			pp = &p->next;
			continue;
		}
		*pp = p->next;
		p->next = NULL;
		p->in_table = false;
		sb->n_exited--;
		if (!p->claimed)
			sb->n_strays--;
		proc_unref_locked(p);
	}
}

static void mark_exited_locked(struct sandbox *sb, struct proc *p, int exit_code, int sig)
{
	if (!p->running)
		return;
	p->running = false;
	p->exit_code = sig > 0 ? -1 : exit_code;
	p->signal = sig > 0 ? sig : 0;
	sb->n_exited++;
	pthread_cond_broadcast(&p->cv);
}

/* The newest running record for pid: the one the guest's events are about. */
static struct proc *find_running_locked(struct sandbox *sb, uint32_t pid)
{
	struct proc *found = NULL;

	for (struct proc *p = sb->procs; p; p = p->next)
		if (p->pid == pid && p->running)
			found = p;
	return found;
}

/* The newest record for pid, for the API. */
static struct proc *find_any_locked(struct sandbox *sb, uint32_t pid)
{
	struct proc *found = NULL;

	for (struct proc *p = sb->procs; p; p = p->next)
		if (p->pid == pid && p->claimed)
			found = p;
	return found;
}

/* A record for an event about a pid the node has not registered yet (the
 * output can overtake the exec reply). A guest could invent pids, so these
 * strays are bounded. */
static struct proc *stray_locked(struct sandbox *sb, uint32_t pid)
{
	if (sb->n_strays >= NODE_PROC_STRAYS)
		return NULL;
	sb->n_strays++;
	return proc_new_locked(sb, pid);
}

void proc_on_output(struct sandbox *sb, uint32_t pid, int fd, uint64_t off, const void *data,
		    size_t len)
{
	struct proc *p;

	if (fd != 1 && fd != 2)
		return;
	pthread_mutex_lock(&sb->mu);
	p = find_running_locked(sb, pid);
	if (!p)
		p = stray_locked(sb, pid);
	if (p) {
		ring_write_at(&p->out[fd - 1], off, data, len);
		pthread_cond_broadcast(&p->cv);
	}
	pthread_mutex_unlock(&sb->mu);
}

void proc_on_exit(struct sandbox *sb, uint32_t pid, int exit_code, int sig)
{
	struct proc *p;

	pthread_mutex_lock(&sb->mu);
	p = find_running_locked(sb, pid);
	if (!p)
		p = stray_locked(sb, pid);
	if (p) {
		mark_exited_locked(sb, p, exit_code, sig);
		evict_locked(sb);
	}
	pthread_mutex_unlock(&sb->mu);
}

void procs_mark_lost(struct sandbox *sb, const char *why)
{
	for (struct proc *p = sb->procs; p; p = p->next) {
		if (!p->running)
			continue;
		p->lost = why;
		mark_exited_locked(sb, p, -1, SIGKILL);
	}
	evict_locked(sb);
}

void procs_free_all(struct sandbox *sb)
{
	struct proc *p;

	while ((p = sb->procs)) {
		sb->procs = p->next;
		p->in_table = false;
		proc_unref_locked(p);
	}
}

void procs_wake_all(struct node *n)
{
	pthread_mutex_lock(&n->mu);
	for (int b = 0; b < NODE_BUCKETS; b++)
		for (struct sandbox *sb = n->buckets[b]; sb; sb = sb->hnext) {
			pthread_mutex_lock(&sb->mu);
			for (struct proc *p = sb->procs; p; p = p->next)
				pthread_cond_broadcast(&p->cv);
			pthread_mutex_unlock(&sb->mu);
		}
	pthread_mutex_unlock(&n->mu);
}

void proc_on_timeout(struct node *n, const char *sb_id, uint64_t serial)
{
	struct sandbox *sb = sandbox_find(n, sb_id, NULL);
	struct guestconn *gc;
	uint32_t pid = 0;
	err_t err = { 0 };

	if (!sb)
		return;
	pthread_mutex_lock(&sb->mu);
	for (struct proc *p = sb->procs; p; p = p->next)
		if (p->serial == serial && p->running)
			pid = p->pid;
	pthread_mutex_unlock(&sb->mu);
	if (pid && (gc = sandbox_gc_get(sb))) {
		if (guestconn_signal(gc, pid, SIGKILL, &err) < 0 && err.code != ESRCH)
			log_warn("sandbox %s: kill pid %u after timeout: %s", sb->id, pid, err.msg);
		sandbox_gc_put(sb);
	}
	sandbox_unref(sb);
}

/* ---- streaming -------------------------------------------------------- */

static const char *const stream_names[2] = { "stdout", "stderr" };

static void line_data(struct buf *out, int s, uint64_t off, const char *p, size_t n)
{
	_cleanup_free_ char *b64 = base64_encode(p, n);

	buf_printf(out, "{\"type\":\"%s\",\"offset\":%llu,\"data\":\"%s\"}\n", stream_names[s],
		   (unsigned long long)off, b64);
}

static void line_exit(struct buf *out, const struct proc *p)
{
	struct jw w;

	jw_init(&w, out);
	jw_obj(&w);
	jw_key(&w, "type");
	jw_str(&w, "exit");
	if (p->signal > 0) {
		jw_key(&w, "signal");
		jw_int(&w, p->signal);
	} else {
		jw_key(&w, "exit_code");
		jw_int(&w, p->exit_code);
	}
	if (p->lost) {
		jw_key(&w, "reason");
		jw_str(&w, p->lost);
	}
	jw_end(&w);
	buf_addc(out, '\n');
}

/* Wait for news about p. Returns true when a whole second passed without
 * any, which is when the caller checks whether its client is still there. */
static bool wait_output(struct proc *p, struct sandbox *sb)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += 1;
	return pthread_cond_timedwait(&p->cv, &sb->mu, &ts) == ETIMEDOUT;
}

/* Stream p's output from off[0] (stdout) / off[1] (stderr) until the exit
 * line (or, without follow, until what is buffered is sent). The response
 * has begun; lines already in `out` go first. Returns when done or when the
 * client is gone; the process is never touched. */
static void stream_proc_body(struct node *n, struct sandbox *sb, struct proc *p,
			     struct http_conn *c, uint64_t off[2], bool follow, struct buf *out)
{
	char *chunk[2] = { xmalloc(NODE_CHUNK), xmalloc(NODE_CHUNK) };
	bool quit = false;

	pthread_mutex_lock(&sb->mu);
	while (!quit) {
		size_t got[2] = { 0, 0 };
		uint64_t at[2];
		bool any = false, ended;

		for (int s = 0; s < 2; s++) {
			struct ring *r = &p->out[s];
			uint64_t o = off[s];

			at[s] = off[s];
			if (o >= r->end)
				continue;
			got[s] = ring_read(r, &o, chunk[s], NODE_CHUNK);
			if (o > off[s]) {
				buf_printf(out,
					   "{\"type\":\"dropped\",\"stream\":\"%s\",\"from\":%llu,"
					   "\"to\":%llu}\n",
					   stream_names[s], (unsigned long long)off[s],
					   (unsigned long long)o);
				any = true;
			}
			at[s] = o;
			off[s] = o + got[s];
			any = any || got[s];
		}
		ended = !p->running;
		if (!any && out->len == 0) {
			if (ended) {
				line_exit(out, p);
				quit = true;
			} else if (!follow || node_stopping(n)) {
				break;
			} else {
				if (wait_output(p, sb) && http_conn_peer_closed(c))
					break;
				continue;
			}
		}
		pthread_mutex_unlock(&sb->mu);
		for (int s = 0; s < 2; s++)
			if (got[s])
				line_data(out, s, at[s], chunk[s], got[s]);
		if (out->len && http_stream_write(c, out->data, out->len) < 0) {
			/* The client went away; the process carries on. */
			free(chunk[0]);
			free(chunk[1]);
			return;
		}
		buf_reset(out);
		pthread_mutex_lock(&sb->mu);
	}
	pthread_mutex_unlock(&sb->mu);
	if (out->len)
		http_stream_write(c, out->data, out->len);
	http_stream_end(c);
	free(chunk[0]);
	free(chunk[1]);
}

/* A client following a process's output keeps the sandbox from being
 * paused as idle (schedule.c), however quiet the process is. */
static void stream_proc(struct node *n, struct sandbox *sb, struct proc *p, struct http_conn *c,
			uint64_t off[2], bool follow, struct buf *out)
{
	if (follow) {
		pthread_mutex_lock(&sb->mu);
		sb->sched.streams++;
		pthread_mutex_unlock(&sb->mu);
	}
	stream_proc_body(n, sb, p, c, off, follow, out);
	if (follow) {
		pthread_mutex_lock(&sb->mu);
		sb->sched.streams--;
		pthread_mutex_unlock(&sb->mu);
		sched_touch(sb);  /* the idle time starts when the client leaves */
	}
}

/* ---- exec ------------------------------------------------------------- */

struct envv {
	char **v;
	size_t n, cap;
};

static void env_set(struct envv *e, const char *k, const char *val)
{
	size_t kl = strlen(k);

	for (size_t i = 0; i < e->n; i++)
		if (strncmp(e->v[i], k, kl) == 0 && e->v[i][kl] == '=') {
			free(e->v[i]);
			e->v[i] = xasprintf("%s=%s", k, val);
			return;
		}
	if (e->n + 2 > e->cap) {
		e->cap = e->cap ? e->cap * 2 : 16;
		e->v = xrealloc(e->v, e->cap * sizeof(char *));
	}
	e->v[e->n++] = xasprintf("%s=%s", k, val);
	e->v[e->n] = NULL;
}

static void strv_free(char **v)
{
	if (!v)
		return;
	for (char **a = v; *a; a++)
		free(*a);
	free(v);
}

/* Look `name` up in the sandbox's /etc/passwd. The file comes from inside
 * the sandbox: it is size-limited by the read and parsed field by field,
 * never trusted beyond yielding numbers and a home path. */
static int lookup_user(struct guestconn *gc, const char *name, uint32_t *uid, uint32_t *gid,
		       char **home, err_t *err)
{
	struct buf b;
	int r;

	buf_init(&b);
	r = guestconn_file_read(gc, "/etc/passwd", 1u << 20, &b, err);
	if (r < 0) {
		buf_free(&b);
		return err_wrap(err, "cannot read /etc/passwd to resolve user `%s`", name);
	}
	r = err_set(err, EINVAL, "no user `%s` in the sandbox", name);
	for (char *line = b.data, *next; line && *line; line = next) {
		char *f[7] = { 0 };
		int nf = 0;

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		for (char *s = line; nf < 7; nf++) {
			f[nf] = s;
			s = strchr(s, ':');
			if (!s) {
				nf++;
				break;
			}
			*s++ = '\0';
		}
		if (nf < 6 || strcmp(f[0], name) != 0)
			continue;
		char *e1, *e2;
		unsigned long u = strtoul(f[2], &e1, 10), g = strtoul(f[3], &e2, 10);
		if (*e1 || *e2 || u > UINT32_MAX - 1 || g > UINT32_MAX - 1)
			break;
		*uid = (uint32_t)u;
		*gid = (uint32_t)g;
		*home = xstrdup(f[5] && *f[5] ? f[5] : "/");
		r = 0;
		break;
	}
	buf_free(&b);
	return r;
}

struct exec_req {
	const json *cmd, *env;
	const char *cwd, *user;
	bool have_uid, pty, stdin_open;
	uint32_t uid;
	uint16_t rows, cols;
	uint32_t timeout_s;
};

static const char *parse_exec(const json *body, struct exec_req *er, char *msg, size_t sz)
{
	static const char *const pty_keys[] = { "rows", "cols", NULL };
	const json *v;
	err_t err = { 0 };

	v = json_get(body, "cmd");
	if (!v || v->type != JSON_ARR || v->n == 0 || v->n > 4096) {
		snprintf(msg, sz, "`cmd` must be a non-empty array of strings");
		return "invalid_field";
	}
	for (size_t i = 0; i < v->n; i++)
		if (v->items[i]->type != JSON_STR) {
			snprintf(msg, sz, "`cmd[%zu]` must be a string", i);
			return "invalid_field";
		}
	if (v->items[0]->str_len == 0) {
		snprintf(msg, sz, "`cmd[0]` must not be empty");
		return "invalid_field";
	}
	er->cmd = v;
	if ((v = json_get(body, "env"))) {
		if (v->type != JSON_OBJ || v->n > 1024) {
			snprintf(msg, sz, "`env` must be an object of strings");
			return "invalid_field";
		}
		for (size_t i = 0; i < v->n; i++)
			if (v->items[i]->type != JSON_STR || !*v->keys[i] ||
			    strchr(v->keys[i], '=')) {
				snprintf(msg, sz, "`env` must map names (without '=') to strings");
				return "invalid_field";
			}
		er->env = v;
	}
	if ((v = json_get(body, "cwd"))) {
		if (v->type != JSON_STR || v->str[0] != '/' || v->str_len > 4096) {
			snprintf(msg, sz, "`cwd` must be an absolute path");
			return "invalid_field";
		}
		er->cwd = v->str;
	}
	if ((v = json_get(body, "user"))) {
		if (v->type != JSON_STR || v->str_len == 0 || v->str_len > 64) {
			snprintf(msg, sz, "`user` must be a user name");
			return "invalid_field";
		}
		er->user = v->str;
	}
	if ((v = json_get(body, "uid"))) {
		if (v->type != JSON_NUM || !v->is_int || v->i < 0 || v->i > 0xfffffffeLL) {
			snprintf(msg, sz, "`uid` must be a non-negative integer");
			return "invalid_field";
		}
		if (er->user) {
			snprintf(msg, sz, "give `user` or `uid`, not both");
			return "invalid_field";
		}
		er->have_uid = true;
		er->uid = (uint32_t)v->i;
	}
	er->rows = 24;
	er->cols = 80;
	if ((v = json_get(body, "pty")) && v->type != JSON_NULL) {
		const json *d;
		if (v->type != JSON_OBJ) {
			snprintf(msg, sz, "`pty` must be an object {rows, cols}");
			return "invalid_field";
		}
		if (json_check_keys(v, pty_keys, &err) < 0) {
			snprintf(msg, sz, "pty: %.200s", err.msg);
			return "unknown_field";
		}
		er->pty = true;
		for (int k = 0; k < 2; k++) {
			d = json_get(v, pty_keys[k]);
			if (!d)
				continue;
			if (d->type != JSON_NUM || !d->is_int || d->i < 1 || d->i > 65535) {
				snprintf(msg, sz, "`pty.%s` must be an integer in 1..65535",
					 pty_keys[k]);
				return "invalid_field";
			}
			if (k == 0)
				er->rows = (uint16_t)d->i;
			else
				er->cols = (uint16_t)d->i;
		}
	}
	if ((v = json_get(body, "stdin"))) {
		if (v->type != JSON_BOOL) {
			snprintf(msg, sz, "`stdin` must be a boolean");
			return "invalid_field";
		}
		er->stdin_open = v->b;
	}
	if ((v = json_get(body, "timeout_s"))) {
		if (v->type != JSON_NUM || !v->is_int || v->i < 0 || v->i > 10LL * 365 * 86400) {
			snprintf(msg, sz, "`timeout_s` must be a non-negative integer");
			return "invalid_field";
		}
		er->timeout_s = (uint32_t)v->i;
	}
	return NULL;
}

void handle_exec(struct node *n, struct sandbox *sb, struct http_req *req, struct http_conn *c)
{
	static const char *const keys[] = { "cmd", "env", "cwd", "user", "uid", "pty",
					    "stdin", "timeout_s", NULL };
	struct exec_req er = { 0 };
	struct exec_spec spec = { 0 };
	struct envv env = { 0 };
	struct guestconn *gc = NULL;
	_cleanup_free_ char *home = NULL;
	char **argv = NULL;
	struct proc *p = NULL;
	uint64_t off[2] = { 0, 0 };
	uint32_t pid = 0, uid = 0, gid = 0;
	const char *code;
	err_t err = { 0 };
	struct buf out;
	char msg[256];
	json *body;
	int r;
	uint64_t t_req = now_us();

	body = node_body_object(req, c, keys);
	if (!body)
		return;
	code = parse_exec(body, &er, msg, sizeof(msg));
	if (code) {
		http_respond_error(c, 400, code, "%s", msg);
		goto out;
	}
	/* A paused sandbox is resumed first, without the client asking. */
	gc = sandbox_gc_use(n, sb, "resumed for exec", &err);
	if (!gc) {
		sandbox_respond_err(c, sb, &err);
		goto out;
	}
	if (er.user && strcmp(er.user, "root") != 0) {
		if (lookup_user(gc, er.user, &uid, &gid, &home, &err) < 0) {
			http_respond_error(c, err.code == EINVAL ? 400 : 500,
					   err.code == EINVAL ? "invalid_field" : "internal", "%s",
					   err.msg);
			goto out;
		}
	} else if (er.have_uid) {
		uid = gid = er.uid;
	}

	argv = xcalloc(er.cmd->n + 1, sizeof(char *));
	for (size_t i = 0; i < er.cmd->n; i++)
		argv[i] = xstrdup(er.cmd->items[i]->str);
	/* Environment: NULL keeps the guest's default when nobody set one;
	 * otherwise a base (PATH, HOME, TERM) under the sandbox's env under the
	 * exec's own. */
	if ((sb->env && sb->env->n) || er.env || home) {
		env_set(&env, "PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
		env_set(&env, "HOME", home ? home : (uid == 0 ? "/root" : "/"));
		if (er.pty)
			env_set(&env, "TERM", "xterm-256color");
		for (size_t i = 0; sb->env && i < sb->env->n; i++)
			env_set(&env, sb->env->keys[i], sb->env->items[i]->str);
		for (size_t i = 0; er.env && i < er.env->n; i++)
			env_set(&env, er.env->keys[i], er.env->items[i]->str);
	}
	spec.argv = argv;
	spec.env = env.v;
	spec.cwd = er.cwd;
	spec.uid = uid;
	spec.gid = gid;
	spec.pty = er.pty;
	spec.rows = er.rows;
	spec.cols = er.cols;
	spec.stdin_open = er.stdin_open;
	uint64_t t_x = now_us();
	r = guestconn_exec(gc, &spec, &pid, &err);
	uint64_t t_ok = now_us();
	sandbox_gc_put(sb);
	gc = NULL;
	if (r < 0) {
		err_wrap(&err, "exec %s", argv[0]);
		/* A missing or unusable command is the request's fault, and must
		 * not read as "no such sandbox". */
		if (err.code == ENOENT || err.code == EACCES || err.code == ENOEXEC)
			http_respond_error(c, 400, "bad_request", "%s", err.msg);
		else
			node_respond_err(c, &err);
		goto out;
	}

	/* Register (or claim the record early output already created). */
	pthread_mutex_lock(&sb->mu);
	for (struct proc *q = sb->procs; q; q = q->next)
		if (q->pid == pid && !q->claimed)
			p = q;
	if (p)
		sb->n_strays--;
	else
		p = proc_new_locked(sb, pid);
	p->claimed = true;
	p->argv = TAKE_PTR(argv);
	p->pty = er.pty;
	p->refs++;
	if ((sb->state != SB_RUNNING && sb->state != SB_PAUSED) || sb->deleting) {
		/* Torn down while the exec was in flight. */
		p->lost = "the sandbox went away";
		mark_exited_locked(sb, p, -1, SIGKILL);
	}
	pthread_mutex_unlock(&sb->mu);
	if (er.timeout_s)
		reaper_add(n, now_ms() + (uint64_t)er.timeout_s * 1000, TIMER_PROC_TIMEOUT, sb->id,
			   p->serial);

	buf_init(&out);
	buf_printf(&out, "{\"type\":\"start\",\"pid\":%u}\n", pid);
	if (http_stream_begin(c, 200, "application/x-ndjson", NULL) == 0)
		stream_proc(n, sb, p, c, off, true, &out);
	log_debug("sandbox %s: exec %s: parsed %.2f ms, started %.2f ms, streamed to exit %.2f ms",
		  sb->id, p->argv[0], (t_x - t_req) / 1000.0, (t_ok - t_x) / 1000.0,
		  (now_us() - t_ok) / 1000.0);
	buf_free(&out);
	pthread_mutex_lock(&sb->mu);
	proc_unref_locked(p);
	pthread_mutex_unlock(&sb->mu);
out:
	if (gc)
		sandbox_gc_put(sb);
	strv_free(argv);
	strv_free(env.v);
	json_free(body);
}

/* ---- process endpoints -------------------------------------------------- */

void handle_processes(struct node *n, struct sandbox *sb, struct http_conn *c)
{
	struct buf b;
	struct jw w;
	char t[ISO_TIME_MAX];

	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "processes");
	jw_arr(&w);
	pthread_mutex_lock(&sb->mu);
	for (struct proc *p = sb->procs; p; p = p->next) {
		if (!p->claimed)
			continue;
		jw_obj(&w);
		jw_key(&w, "pid");
		jw_uint(&w, p->pid);
		jw_key(&w, "cmd");
		jw_arr(&w);
		for (char **a = p->argv; a && *a; a++)
			jw_str(&w, *a);
		jw_end(&w);
		jw_key(&w, "running");
		jw_bool(&w, p->running);
		jw_key(&w, "exit_code");
		if (p->running || p->signal > 0)
			jw_null(&w);
		else
			jw_int(&w, p->exit_code);
		jw_key(&w, "signal");
		if (p->running || p->signal == 0)
			jw_null(&w);
		else
			jw_int(&w, p->signal);
		jw_key(&w, "started_at");
		iso_time(p->started_at, t);
		jw_str(&w, t);
		jw_key(&w, "pty");
		jw_bool(&w, p->pty);
		jw_end(&w);
	}
	pthread_mutex_unlock(&sb->mu);
	jw_end(&w);
	jw_end(&w);
	http_respond_json(c, 200, b.data);
	buf_free(&b);
}

static bool parse_u64(const char *s, uint64_t *out)
{
	char *end;

	if (!s || !*s || *s < '0' || *s > '9')
		return false;
	errno = 0;
	*out = strtoull(s, &end, 10);
	return errno == 0 && *end == '\0';
}

static void handle_output(struct node *n, struct sandbox *sb, struct proc *p,
			  struct http_req *req, struct http_conn *c)
{
	_cleanup_free_ char *o1 = http_query_param(req, "offset");
	_cleanup_free_ char *o2 = http_query_param(req, "stderr_offset");
	_cleanup_free_ char *f = http_query_param(req, "follow");
	uint64_t off[2] = { 0, 0 };
	bool follow = true;
	struct buf out;

	if ((o1 && !parse_u64(o1, &off[0])) || (o2 && !parse_u64(o2, &off[1]))) {
		http_respond_error(c, 400, "invalid_field", "offsets are non-negative integers");
		return;
	}
	if (f) {
		if (strcmp(f, "0") == 0 || strcmp(f, "false") == 0)
			follow = false;
		else if (strcmp(f, "1") != 0 && strcmp(f, "true") != 0) {
			http_respond_error(c, 400, "invalid_field", "follow is 0 or 1");
			return;
		}
	}
	/* Following a paused sandbox's process means waiting for it to run:
	 * resume it. A replay (follow=0) only reads the node's buffers, and a
	 * sandbox that is not paused or running still replays what it has. */
	if (follow) {
		err_t err = { 0 };
		if (sandbox_resume(n, sb, "resumed for process output", &err) < 0 &&
		    err.code != EBUSY) {
			sandbox_respond_err(c, sb, &err);
			return;
		}
	}
	buf_init(&out);
	if (http_stream_begin(c, 200, "application/x-ndjson", NULL) == 0)
		stream_proc(n, sb, p, c, off, follow, &out);
	buf_free(&out);
}

static const struct {
	const char *name;
	int sig;
} signames[] = {
	{ "TERM", SIGTERM }, { "KILL", SIGKILL }, { "INT", SIGINT },   { "HUP", SIGHUP },
	{ "QUIT", SIGQUIT }, { "USR1", SIGUSR1 }, { "USR2", SIGUSR2 },
};

static int parse_signal(const json *v)
{
	if (!v)
		return -1;
	if (v->type == JSON_NUM && v->is_int && v->i >= 1 && v->i <= 64)
		return (int)v->i;
	if (v->type == JSON_STR) {
		const char *s = v->str;
		if (strncasecmp(s, "SIG", 3) == 0)
			s += 3;
		for (size_t i = 0; i < ARRAY_SIZE(signames); i++)
			if (strcasecmp(s, signames[i].name) == 0)
				return signames[i].sig;
	}
	return -1;
}

void handle_process(struct node *n, struct sandbox *sb, uint32_t pid, const char *rest,
		    struct http_req *req, struct http_conn *c)
{
	static const char *const stdin_keys[] = { "data", "eof", NULL };
	static const char *const signal_keys[] = { "signal", NULL };
	static const char *const resize_keys[] = { "rows", "cols", NULL };
	struct guestconn *gc = NULL;
	struct proc *p;
	json *body = NULL;
	err_t err = { 0 };
	bool running;
	int r = 0;

	pthread_mutex_lock(&sb->mu);
	p = find_any_locked(sb, pid);
	if (p)
		p->refs++;
	running = p && p->running;
	pthread_mutex_unlock(&sb->mu);
	if (!p) {
		http_respond_error(c, 404, "not_found", "no process %u", pid);
		return;
	}
	if (strcmp(rest, "output") == 0) {
		handle_output(n, sb, p, req, c);
		goto out;
	}

	body = node_body_object(req, c,
				strcmp(rest, "stdin") == 0    ? stdin_keys
				: strcmp(rest, "signal") == 0 ? signal_keys
							      : resize_keys);
	if (!body)
		goto out;
	if (!running) {
		http_respond_error(c, 409, "conflict", "process %u has exited", pid);
		goto out;
	}
	if (strcmp(rest, "stdin") == 0) {
		const json *d = json_get(body, "data");
		bool bad_eof = false, eof = json_get_bool(body, "eof", false, &bad_eof);
		struct buf data;

		if ((d && d->type != JSON_STR) || bad_eof) {
			http_respond_error(c, 400, "invalid_field",
					   "`data` must be base64 text and `eof` a boolean");
			goto out;
		}
		buf_init(&data);
		if (d && base64_decode(d->str, d->str_len, &data) < 0) {
			buf_free(&data);
			http_respond_error(c, 400, "invalid_field", "`data` is not valid base64");
			goto out;
		}
		if (!(gc = sandbox_gc_use(n, sb, "resumed for process stdin", &err))) {
			buf_free(&data);
			sandbox_respond_err(c, sb, &err);
			goto out;
		}
		r = guestconn_stdin(gc, pid, data.data ? data.data : "", data.len, eof, &err);
		buf_free(&data);
	} else if (strcmp(rest, "signal") == 0) {
		int sig = parse_signal(json_get(body, "signal"));

		if (sig < 0) {
			http_respond_error(c, 400, "invalid_field",
					   "`signal` must be 1..64 or one of TERM KILL INT HUP "
					   "QUIT USR1 USR2");
			goto out;
		}
		if (!(gc = sandbox_gc_use(n, sb, "resumed for process signal", &err))) {
			sandbox_respond_err(c, sb, &err);
			goto out;
		}
		r = guestconn_signal(gc, pid, sig, &err);
	} else {
		const json *rows = json_get(body, "rows"), *cols = json_get(body, "cols");

		if (!rows || !cols || rows->type != JSON_NUM || cols->type != JSON_NUM ||
		    !rows->is_int || !cols->is_int || rows->i < 1 || rows->i > 65535 ||
		    cols->i < 1 || cols->i > 65535) {
			http_respond_error(c, 400, "invalid_field",
					   "`rows` and `cols` must be integers in 1..65535");
			goto out;
		}
		if (!(gc = sandbox_gc_use(n, sb, "resumed for process resize", &err))) {
			sandbox_respond_err(c, sb, &err);
			goto out;
		}
		r = guestconn_resize(gc, pid, (uint16_t)rows->i, (uint16_t)cols->i, &err);
	}
	if (r < 0)
		node_respond_err(c, &err);
	else
		http_respond(c, 204, NULL, NULL, 0, NULL);
out:
	if (gc)
		sandbox_gc_put(sb);
	json_free(body);
	pthread_mutex_lock(&sb->mu);
	proc_unref_locked(p);
	pthread_mutex_unlock(&sb->mu);
}

/* ---- the table across a full snapshot ------------------------------------ */

char *procs_image(struct sandbox *sb)
{
	struct buf b;
	struct jw w;

	buf_init(&b);
	jw_init(&w, &b);
	jw_arr(&w);
	pthread_mutex_lock(&sb->mu);
	for (struct proc *p = sb->procs; p; p = p->next) {
		if (!p->running || !p->claimed)
			continue;
		jw_obj(&w);
		jw_key(&w, "pid");
		jw_uint(&w, p->pid);
		jw_key(&w, "argv");
		jw_arr(&w);
		for (char **a = p->argv; a && *a; a++)
			jw_str(&w, *a);
		jw_end(&w);
		jw_key(&w, "pty");
		jw_bool(&w, p->pty);
		jw_key(&w, "started_at");
		jw_int(&w, p->started_at);
		jw_key(&w, "stdout");
		jw_uint(&w, p->out[0].end);
		jw_key(&w, "stderr");
		jw_uint(&w, p->out[1].end);
		jw_end(&w);
	}
	pthread_mutex_unlock(&sb->mu);
	jw_end(&w);
	return buf_steal(&b);
}

void procs_restore_locked(struct sandbox *sb, const char *image)
{
	err_t err = { 0 };
	json *j = image ? json_parse(image, strlen(image), &err) : NULL;
	size_t n = 0;

	if (!j || j->type != JSON_ARR) {
		if (image)
			log_warn("sandbox %s: unreadable process table of a snapshot: %s", sb->id,
				 err.msg);
		json_free(j);
		return;
	}
	for (size_t i = 0; i < j->n && n < NODE_PROC_KEEP; i++) {
		const json *e = j->items[i], *argv = json_get(e, "argv");
		bool bad = false;
		int64_t pid = json_get_int(e, "pid", 0, &bad);
		int64_t out = json_get_int(e, "stdout", 0, &bad);
		int64_t errb = json_get_int(e, "stderr", 0, &bad);
		struct proc *p;

		if (bad || pid <= 0 || pid > UINT32_MAX || out < 0 || errb < 0 || !argv ||
		    argv->type != JSON_ARR || !argv->n)
			continue;
		p = proc_new_locked(sb, (uint32_t)pid);
		p->claimed = true;
		p->argv = xcalloc(argv->n + 1, sizeof(char *));
		for (size_t k = 0; k < argv->n; k++)
			p->argv[k] = xstrdup(argv->items[k]->type == JSON_STR ? argv->items[k]->str
									 : "");
		p->pty = json_get_bool(e, "pty", false, &bad);
		p->started_at = json_get_int(e, "started_at", p->started_at, &bad);
		/* Empty rings that start where the snapshot's streams stood: the
		 * restored guest goes on from those offsets. */
		ring_write_at(&p->out[0], (uint64_t)out, "", 0);
		ring_write_at(&p->out[1], (uint64_t)errb, "", 0);
		n++;
	}
	json_free(j);
}
