/* processes.c - the process endpoints of a sandbox and the streaming of a
 * process's output, which exec.c uses too:
 *   GET  /v1/sandboxes/{id}/processes                 the table
 *   GET  /v1/sandboxes/{id}/processes/{pid}/output    NDJSON, from offsets
 *   POST /v1/sandboxes/{id}/processes/{pid}/stdin     {data (base64), eof}
 *   POST /v1/sandboxes/{id}/processes/{pid}/signal    {signal}
 *   POST /v1/sandboxes/{id}/processes/{pid}/resize    {rows, cols}
 *
 * Output flows: guest → channel reader thread → proc_on_output()
 * (proc-table.c) appends to the process's ring (sb->mu) and broadcasts its
 * condvar → every streaming handler waiting on it wakes, copies what is new
 * out of the ring, drops the lock and writes NDJSON lines. Nothing on this
 * path sleeps or polls; the one timed wait (1 s, and only while no output
 * arrives) lets an idle stream notice that its client went away.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "../../lib/page.h"
#include "../http/handler.h"
#include "../wake/wake.h"
#include "exec.h"

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
static void proc_stream_body(struct node *n, struct sandbox *sb, struct proc *p,
			     struct http_conn *c, uint64_t off[2], bool follow, struct buf *out)
{
	char *chunk[2] = { xmalloc(NODE_CHUNK), xmalloc(NODE_CHUNK) };
	struct buf exit_line;
	bool quit = false;

	buf_init(&exit_line);
	pthread_mutex_lock(&sb->mu);
	for (;;) {
		size_t got[2] = { 0, 0 };
		uint64_t at[2];
		bool any = false;

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
		/* Exited, and all its output is in hand: the exit line goes
		 * with the last output and the stream's end, in one send. */
		if (!p->running && off[0] >= p->out[0].end && off[1] >= p->out[1].end) {
			line_exit(&exit_line, p);
			quit = true;
		} else if (!any && out->len == 0) {
			if (!follow || node_stopping(n))
				break;
			if (wait_output(p, sb) && http_conn_peer_closed(c))
				break;
			continue;
		}
		pthread_mutex_unlock(&sb->mu);
		for (int s = 0; s < 2; s++)
			if (got[s])
				line_data(out, s, at[s], chunk[s], got[s]);
		if (quit) {
			buf_add(out, exit_line.data, exit_line.len);
			goto end;
		}
		if (out->len && http_stream_write(c, out->data, out->len) < 0) {
			/* The client went away; the process carries on. */
			goto gone;
		}
		buf_reset(out);
		pthread_mutex_lock(&sb->mu);
	}
	pthread_mutex_unlock(&sb->mu);
end:
	http_stream_end_with(c, out->data, out->len);
gone:
	buf_free(&exit_line);
	free(chunk[0]);
	free(chunk[1]);
}

/* A client following a process's output keeps the sandbox from being
 * paused as idle (schedule.c), however quiet the process is. */
void proc_stream(struct node *n, struct sandbox *sb, struct proc *p, struct http_conn *c,
			uint64_t off[2], bool follow, struct buf *out)
{
	if (follow) {
		pthread_mutex_lock(&sb->mu);
		sb->sched.streams++;
		pthread_mutex_unlock(&sb->mu);
	}
	proc_stream_body(n, sb, p, c, off, follow, out);
	if (follow) {
		pthread_mutex_lock(&sb->mu);
		sb->sched.streams--;
		pthread_mutex_unlock(&sb->mu);
		sched_touch(sb);  /* the idle time starts when the client leaves */
	}
}

/* ---- process endpoints -------------------------------------------------- */

static int proc_cmp(const void *x, const void *y)
{
	const struct proc *a = *(struct proc *const *)x, *b = *(struct proc *const *)y;

	if (a->started_at != b->started_at)
		return a->started_at < b->started_at ? -1 : 1;
	return a->pid < b->pid ? -1 : a->pid > b->pid;
}

/* Oldest first; the page key is (started_at, pid zero-padded). */
void handle_processes(struct node *n, struct sandbox *sb, struct http_req *req,
		      struct http_conn *c)
{
	struct proc **v = NULL;
	size_t nv = 0, cap = 0;
	struct page pg;
	struct buf b;
	struct jw w;
	char t[ISO_TIME_MAX];

	(void)n;
	if (page_from_req(&pg, req, false, c) < 0)
		return;
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "processes");
	jw_arr(&w);
	pthread_mutex_lock(&sb->mu);
	for (struct proc *p = sb->procs; p; p = p->next) {
		if (!p->claimed)
			continue;
		if (nv == cap) {
			cap = cap ? cap * 2 : 16;
			v = xrealloc(v, cap * sizeof(*v));
		}
		v[nv++] = p;
	}
	if (nv)
		qsort(v, nv, sizeof(*v), proc_cmp);
	for (size_t i = 0; i < nv; i++) {
		struct proc *p = v[i];
		char key[16];

		snprintf(key, sizeof(key), "%010u", (unsigned)p->pid);
		if (!page_take(&pg, p->started_at, key))
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
	free(v);
	jw_end(&w);
	page_write_next(&pg, &w);
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
		if (sandbox_wake(n, sb, "resumed for process output", &err) < 0 &&
		    err.code != EBUSY) {
			sandbox_respond_err(c, sb, &err);
			return;
		}
	}
	buf_init(&out);
	if (http_stream_begin(c, 200, "application/x-ndjson", NULL) == 0)
		proc_stream(n, sb, p, c, off, follow, &out);
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
	p = proc_find_locked(sb, pid);
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
