/* exec.c - POST /v1/sandboxes/{id}/exec: check the request, resolve its
 * user in the sandbox's /etc/passwd, build the environment, start the
 * process through the guest agent, register it in the table (proc/proc-table.c)
 * and stream its output (processes.c) until it exits. An exec timeout is a
 * reaper timer (proc_on_timeout). The process outlives the stream.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "../../lib/log.h"
#include "../http/handler.h"
#include "../metrics/metrics.h"
#include "../wake/wake.h"
#include "exec.h"

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
	bool have_uid, have_gid, pty, stdin_open;
	uint32_t uid, gid;
	char user_buf[65];      /* user, when it is the image's default */
	uint16_t rows, cols;
	uint32_t timeout_s;
};

static const char *parse_exec(const json *body, struct exec_req *er, char *msg, size_t sz)
{
	static const char *const pty_keys[] = { "rows", "cols", NULL };
	const json *v;
	err_t err = { 0 };

	/* No cmd: the template image's default command (image_defaults). */
	v = json_get(body, "cmd");
	if (v && v->type == JSON_NULL)
		v = NULL;
	if (v && (v->type != JSON_ARR || v->n == 0 || v->n > 4096)) {
		snprintf(msg, sz, "`cmd` must be a non-empty array of strings");
		return "invalid_field";
	}
	for (size_t i = 0; v && i < v->n; i++)
		if (v->items[i]->type != JSON_STR) {
			snprintf(msg, sz, "`cmd[%zu]` must be a string", i);
			return "invalid_field";
		}
	if (v && v->items[0]->str_len == 0) {
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

/* A template built from an image brings Docker's defaults (docs/API.md,
 * exec): with no `cmd`, its Entrypoint followed by its Cmd (what `docker
 * run IMAGE` runs); with no `cwd`, its WorkingDir; with neither `user` nor
 * `uid`, its User ("name", "name:group" (the group is not used: the
 * user's own is), "uid" or "uid:gid"). The request's own always win.
 * Returns the argv to run (caller owns), or NULL with msg filled. */
static char **image_defaults(const struct sandbox *sb, struct exec_req *er, char *msg, size_t sz)
{
	const json *img = sb->image, *ep = img ? json_get(img, "entrypoint") : NULL;
	const json *cmd = er->cmd ? er->cmd : img ? json_get(img, "cmd") : NULL;
	size_t n = 0, k = 0;
	char **argv;

	if (!er->cmd && ep)
		n += ep->n;
	if (cmd)
		n += cmd->n;
	if (n == 0 || n > 8192) {
		snprintf(msg, sz, er->cmd || !img ? "`cmd` must be a non-empty array of strings"
						  : "no `cmd`, and the template's image has no default"
						    " command");
		return NULL;
	}
	argv = xcalloc(n + 1, sizeof(char *));
	for (size_t i = 0; !er->cmd && ep && i < ep->n; i++)
		argv[k++] = xstrdup(ep->items[i]->str);
	for (size_t i = 0; cmd && i < cmd->n; i++)
		argv[k++] = xstrdup(cmd->items[i]->str);
	if (!argv[0][0]) {
		snprintf(msg, sz, "the default command's first word is empty");
		for (size_t i = 0; i < k; i++)
			free(argv[i]);
		free(argv);
		return NULL;
	}
	if (!er->cwd && img)
		er->cwd = json_get_str(img, "workdir");
	if (!er->user && !er->have_uid && img && json_get_str(img, "user")) {
		const char *u = json_get_str(img, "user");
		char *end;
		unsigned long uid = strtoul(u, &end, 10);

		if (end != u && (*end == '\0' || *end == ':') && uid < UINT32_MAX) {
			er->have_uid = true;
			er->uid = (uint32_t)uid;
			if (*end == ':') {
				char *gend;
				unsigned long gid = strtoul(end + 1, &gend, 10);
				if (gend != end + 1 && !*gend && gid < UINT32_MAX) {
					er->have_gid = true;
					er->gid = (uint32_t)gid;
				}
			}
		} else {
			snprintf(er->user_buf, sizeof(er->user_buf), "%.*s",
				 (int)strcspn(u, ":"), u);
			er->user = er->user_buf;
		}
	}
	return argv;
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
	argv = image_defaults(sb, &er, msg, sizeof(msg));
	if (!argv) {
		http_respond_error(c, 400, "invalid_field", "%s", msg);
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
		if (er.have_gid)
			gid = er.gid;
	}

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
		/* The guest could not fork (EAGAIN): where the limits bind
		 * the guest's processes (ns), that is the sandbox's pids
		 * limit. 409, not 429 or 503: nothing will change until
		 * processes in the sandbox exit, so a client must not retry
		 * blindly. (The errno is the guest's word: a guest that
		 * lies only gets this answer for its own sandbox.) */
		else if (err.code == EAGAIN && backend_can(sb->be, BACKEND_CAP_GUEST_LIMITS))
			http_respond_error(c, 409, "pids_limit",
					   "the sandbox has reached its pids limit (%u): cannot start"
					   " `%s` (%s)",
					   sb->limits.pids, argv[0], err.msg);
		else
			node_respond_err(c, &err);
		goto out;
	}

	metrics_observe(n, OP_EXEC, t_ok - t_req);
	/* Register (or claim the record early output already created). */
	pthread_mutex_lock(&sb->mu);
	p = proc_claim_locked(sb, pid);
	p->argv = TAKE_PTR(argv);
	p->pty = er.pty;
	p->refs++;
	if ((sb->state != SB_RUNNING && sb->state != SB_PAUSED) || sb->deleting) {
		/* Torn down while the exec was in flight. */
		p->lost = "the sandbox went away";
		proc_mark_exited_locked(sb, p, -1, SIGKILL);
	}
	pthread_mutex_unlock(&sb->mu);
	if (er.timeout_s)
		reaper_add(n, now_ms() + (uint64_t)er.timeout_s * 1000, TIMER_PROC_TIMEOUT, sb->id,
			   p->serial);

	buf_init(&out);
	buf_printf(&out, "{\"type\":\"start\",\"pid\":%u}\n", pid);
	/* The head goes with the start line (proc_stream's first write),
	 * and with the exit line too when the process has already exited:
	 * one send, one wakeup of the api. */
	http_stream_hold(c, 200, "application/x-ndjson", NULL);
	proc_stream(n, sb, p, c, off, true, &out);
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
