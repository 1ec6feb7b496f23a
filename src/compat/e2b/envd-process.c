/* envd-process.c - envd's process.Process service on Airlock's exec and
 * process operations: Start and Connect stream (envd-stream.c), the others
 * are unary. A process is named by its pid (ProcessSelector); Airlock
 * processes have no tags. */
#include <stdio.h>
#include <string.h>

#include "envd-internal.h"

/* The shell wrapper for "/bin/bash -l -c CMD" (what commands.run sends):
 * templates without bash (busybox) run the same arguments with /bin/sh. */
static const char BASH_OR_SH[] =
	"if [ -x /bin/bash ]; then exec /bin/bash \"$@\"; fi; exec /bin/sh \"$@\"";

void envd_process_start(struct envd_ctx *x, const json *msg)
{
	const json *pc = json_get(msg, "process"), *pty = json_get(msg, "pty");
	const json *args = pc ? json_get(pc, "args") : NULL, *envs = pc ? json_get(pc, "envs") : NULL;
	const char *cmd = pc ? json_get_str(pc, "cmd") : NULL, *cwd = pc ? json_get_str(pc, "cwd") : NULL;
	_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s/exec", x->id);
	struct envd_stream s = { .kind = S_EXEC };
	char user[64];
	bool bad = false;
	struct buf b;
	struct jw w;

	if (!cmd || !*cmd || (args && args->type != JSON_ARR) ||
	    (envs && envs->type != JSON_OBJ)) {
		envd_stream_refuse(x->c, "invalid_argument",
				   "process.cmd is required; args is a list, envs an object");
		return;
	}
	if (!envd_call_user(x->req, user, sizeof(user))) {
		envd_stream_refuse(x->c, "invalid_argument", "bad user name");
		return;
	}
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "cmd");
	jw_arr(&w);
	if (!strcmp(cmd, "/bin/bash")) {
		jw_str(&w, "/bin/sh");
		jw_str(&w, "-c");
		jw_str(&w, BASH_OR_SH);
		jw_str(&w, "sh");
	} else {
		jw_str(&w, cmd);
	}
	for (size_t i = 0; args && i < args->n; i++) {
		if (args->items[i]->type != JSON_STR)
			bad = true;
		else
			jw_str(&w, args->items[i]->str);
	}
	jw_end(&w);
	if (envs && envs->n) {
		jw_key(&w, "env");
		jw_value(&w, envs);
	}
	if (cwd && *cwd) {
		jw_key(&w, "cwd");
		jw_str(&w, cwd);
	}
	if (strcmp(user, "root") != 0) {
		jw_key(&w, "user");
		jw_str(&w, user);
	}
	jw_key(&w, "stdin");
	jw_bool(&w, json_get_bool(msg, "stdin", false, &bad));
	if (pty && pty->type == JSON_OBJ) {
		const json *sz = json_get(pty, "size");
		jw_key(&w, "pty");
		jw_obj(&w);
		jw_key(&w, "rows");
		jw_int(&w, sz ? json_get_int(sz, "rows", 24, &bad) : 24);
		jw_key(&w, "cols");
		jw_int(&w, sz ? json_get_int(sz, "cols", 80, &bad) : 80);
		jw_end(&w);
		s.pty = true;
	}
	jw_end(&w);
	if (bad) {
		envd_stream_refuse(x->c, "invalid_argument", "a field of the request has the wrong type");
	} else {
		envd_relay_stream(x, &s, "POST", target, b.data);
	}
	buf_free(&b);
}

/* Does process pid have a terminal (its output is then "pty" data)? */
static bool process_has_pty(struct envd_ctx *x, int64_t pid)
{
	_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s/processes?limit=1000", x->id);
	_cleanup_(json_freep) json *j = NULL;
	struct http_resp r;
	bool pty = false;

	if (e2b_node(x->a, x->who->tenant, "GET", target, NULL, NULL, 0, &r) == 200)
		j = json_parse(r.body.data, r.body.len, NULL);
	http_resp_free(&r);
	const json *ps = j ? json_get(j, "processes") : NULL;
	for (size_t i = 0; ps && ps->type == JSON_ARR && i < ps->n; i++)
		if (json_get_int(ps->items[i], "pid", 0, NULL) == pid) {
			const json *p = json_get(ps->items[i], "pty");
			pty = p && (p->type == JSON_OBJ || (p->type == JSON_BOOL && p->b));
		}
	return pty;
}

void envd_process_connect(struct envd_ctx *x, const json *msg)
{
	const json *sel = json_get(msg, "process");
	bool bad = false;
	int64_t pid = sel && sel->type == JSON_OBJ ? json_get_int(sel, "pid", 0, &bad) : 0;
	struct envd_stream s = { .kind = S_EXEC, .skip_start = true };
	char pids[24];

	if (bad || pid <= 0 || pid > 0xffffffffLL) {
		envd_stream_refuse(x->c, "invalid_argument", "process.pid must be a positive integer "
				   "(tag selectors are not supported)");
		return;
	}
	snprintf(pids, sizeof(pids), "%lld", (long long)pid);
	s.pid = pids;   /* on_head writes the start message with it */
	s.pty = process_has_pty(x, pid);
	_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s/processes/%s/output?offset=0"
						"&follow=1", x->id, pids);
	envd_relay_stream(x, &s, "GET", target, NULL);
}

void envd_process_list(struct envd_ctx *x)
{
	_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s/processes?limit=1000", x->id);
	_cleanup_(json_freep) json *j = NULL;
	struct http_resp r;
	struct buf b;
	struct jw w;
	int st = e2b_node(x->a, x->who->tenant, "GET", target, NULL, NULL, 0, &r);

	if (st != 200) {
		envd_rpc_node_error(x->c, st, &r);
		http_resp_free(&r);
		return;
	}
	j = json_parse(r.body.data, r.body.len, NULL);
	http_resp_free(&r);
	const json *ps = j ? json_get(j, "processes") : NULL;
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "processes");
	jw_arr(&w);
	for (size_t i = 0; ps && ps->type == JSON_ARR && i < ps->n; i++) {
		const json *p = ps->items[i], *cmd = json_get(p, "cmd");
		if (!json_get_bool(p, "running", false, NULL))
			continue;
		jw_obj(&w);
		jw_key(&w, "config");
		jw_obj(&w);
		jw_key(&w, "cmd");
		jw_str(&w, cmd && cmd->n && cmd->items[0]->type == JSON_STR ? cmd->items[0]->str : "");
		jw_key(&w, "args");
		jw_arr(&w);
		for (size_t k = 1; cmd && cmd->type == JSON_ARR && k < cmd->n; k++)
			if (cmd->items[k]->type == JSON_STR)
				jw_str(&w, cmd->items[k]->str);
		jw_end(&w);
		jw_key(&w, "envs");
		jw_raw(&w, "{}");
		jw_end(&w);
		jw_key(&w, "pid");
		jw_int(&w, json_get_int(p, "pid", 0, NULL));
		jw_end(&w);
	}
	jw_end(&w);
	jw_end(&w);
	envd_rpc_ok(x->c, b.data, b.len);
	buf_free(&b);
}

/* The pid of a ProcessSelector; 0 when answered (tag selectors are not
 * served: Airlock processes have no tags). */
static int64_t selector_pid(struct envd_ctx *x, const json *msg)
{
	const json *sel = json_get(msg, "process");
	bool bad = false;
	int64_t pid;

	if (!sel || sel->type != JSON_OBJ) {
		envd_rpc_error(x->c, "invalid_argument", "field `process` (a selector) is required");
		return 0;
	}
	if (json_get(sel, "tag")) {
		envd_rpc_error(x->c, "unimplemented", "tag selectors are not supported by Airlock");
		return 0;
	}
	pid = json_get_int(sel, "pid", 0, &bad);
	if (bad || pid <= 0 || pid > 0xffffffffLL) {
		envd_rpc_error(x->c, "invalid_argument", "process.pid must be a positive integer");
		return 0;
	}
	return pid;
}

void envd_process_input(struct envd_ctx *x, const json *msg, bool eof)
{
	int64_t pid = selector_pid(x, msg);
	const json *in = json_get(msg, "input");
	const char *data = in ? json_get_str(in, "stdin") : NULL;
	struct buf dec;

	if (!pid)
		return;
	if (!data && in)
		data = json_get_str(in, "pty");
	if (!eof && !data) {
		envd_rpc_error(x->c, "invalid_argument", "input.stdin or input.pty (base64) is required");
		return;
	}
	buf_init(&dec);
	if (data && base64_decode(data, strlen(data), &dec) < 0) {
		buf_free(&dec);
		envd_rpc_error(x->c, "invalid_argument", "input is not base64");
		return;
	}
	buf_free(&dec);
	_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s/processes/%lld/stdin", x->id,
						(long long)pid);
	struct buf b;
	struct jw w;
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "data");
	jw_str(&w, data ? data : "");
	if (eof) {
		jw_key(&w, "eof");
		jw_bool(&w, true);
	}
	jw_end(&w);
	envd_node_then_empty(x, "POST", target, b.data);
	buf_free(&b);
}

void envd_process_signal(struct envd_ctx *x, const json *msg)
{
	int64_t pid = selector_pid(x, msg), sig = 0;
	const json *s = json_get(msg, "signal");

	if (!pid)
		return;
	if (s && s->type == JSON_STR && !strcmp(s->str, "SIGNAL_SIGKILL"))
		sig = 9;
	else if (s && s->type == JSON_STR && !strcmp(s->str, "SIGNAL_SIGTERM"))
		sig = 15;
	else if (s && s->is_int && (s->i == 9 || s->i == 15))
		sig = s->i;
	if (!sig) {
		envd_rpc_error(x->c, "invalid_argument", "signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM");
		return;
	}
	_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s/processes/%lld/signal", x->id,
						(long long)pid);
	_cleanup_free_ char *body = xasprintf("{\"signal\":%lld}", (long long)sig);
	envd_node_then_empty(x, "POST", target, body);
}

void envd_process_update(struct envd_ctx *x, const json *msg)
{
	int64_t pid = selector_pid(x, msg);
	const json *pty = json_get(msg, "pty"), *sz = pty ? json_get(pty, "size") : NULL;
	bool bad = false;

	if (!pid)
		return;
	if (!sz) {
		envd_rpc_ok(x->c, "{}", 2);
		return;
	}
	int64_t rows = json_get_int(sz, "rows", 0, &bad), cols = json_get_int(sz, "cols", 0, &bad);
	if (bad || rows < 1 || cols < 1 || rows > 65535 || cols > 65535) {
		envd_rpc_error(x->c, "invalid_argument", "pty.size rows and cols must be 1..65535");
		return;
	}
	_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s/processes/%lld/resize", x->id,
						(long long)pid);
	_cleanup_free_ char *body = xasprintf("{\"rows\":%lld,\"cols\":%lld}", (long long)rows,
					      (long long)cols);
	envd_node_then_empty(x, "POST", target, body);
}
