/* cmd-exec.c - exec, logs, ps, kill: processes inside a sandbox.
 *
 * exec streams the NDJSON answer of POST .../exec and writes stdout/stderr
 * locally as lines arrive. Around it, up to two helper threads:
 *   - stdin (-i): reads local stdin, POSTs each chunk to .../stdin, then eof;
 *   - signals: sigwait for WINCH (-t: resize the remote pty) and INT, TERM,
 *     HUP, QUIT (forward the first one to the remote process; a second one,
 *     or one before the process started, ends the CLI).
 * The signals are blocked before any thread starts so only that thread sees
 * them. With -t -i and a local tty, the tty is put in raw mode (keys,
 * including ^C, go to the remote pty) and restored on every way out.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <termios.h>

#include "cli.h"

/* --- the local terminal (process-wide by nature) --- */

static struct termios saved_tty;
static atomic_bool tty_is_raw;

static void tty_restore(void)
{
	if (atomic_exchange(&tty_is_raw, false))
		tcsetattr(0, TCSADRAIN, &saved_tty);
}

static void tty_make_raw(void)
{
	struct termios raw;

	if (!isatty(0) || tcgetattr(0, &saved_tty) < 0)
		return;
	raw = saved_tty;
	cfmakeraw(&raw);
	if (tcsetattr(0, TCSADRAIN, &raw) == 0) {
		atomic_store(&tty_is_raw, true);
		atexit(tty_restore);
	}
}

static void tty_size(int *rows, int *cols)
{
	struct winsize ws = { 0 };

	if ((ioctl(1, TIOCGWINSZ, &ws) < 0 || !ws.ws_row) &&
	    (ioctl(0, TIOCGWINSZ, &ws) < 0 || !ws.ws_row)) {
		ws.ws_row = 24;
		ws.ws_col = 80;
	}
	*rows = ws.ws_row;
	*cols = ws.ws_col;
}

/* --- output stream --- */

struct proc_stream {
	struct cli *cli;
	const char *sbx;        /* as typed, for messages */
	char *sbx_esc;          /* owned */
	bool want_stdin, tty;
	atomic_llong pid;       /* -1 until the start line */
	bool have_exit;
	int exit_code;
	long long stdout_offset;  /* next stdout byte, for a reconnect hint */
	bool threads;
	pthread_t stdin_thr;
	bool stdin_started;
	atomic_bool forwarded_signal;
};

/* Fire-and-forget POST to .../processes/PID/<what>; quiet on failure (the
 * process may simply have exited). Returns the HTTP status or -1. */
static int proc_post(struct proc_stream *ps, const char *what, const char *body)
{
	_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s/processes/%lld/%s", ps->sbx_esc,
						(long long)atomic_load(&ps->pid), what);
	_cleanup_free_ char *hdr = cli_headers(ps->cli, "Content-Type: application/json\r\n");
	struct http_resp resp;
	err_t err = { 0 };
	int status = -1;

	if (http_request(ps->cli->url, "POST", target, hdr, body, strlen(body), &resp, &err) == 0)
		status = resp.status;
	http_resp_free(&resp);
	return status;
}

static void *stdin_main(void *arg)
{
	struct proc_stream *ps = arg;
	char chunk[32768];

	for (;;) {
		ssize_t n = read(0, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			proc_post(ps, "stdin", "{\"data\":\"\",\"eof\":true}");
			return NULL;
		}
		_cleanup_free_ char *b64 = base64_encode(chunk, (size_t)n);
		_cleanup_free_ char *body = xasprintf("{\"data\":\"%s\"}", b64);
		int st = proc_post(ps, "stdin", body);
		if (st < 200 || st > 299)
			return NULL;   /* gone or closed: stop reading */
	}
}

static sigset_t exec_signals(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGWINCH);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGQUIT);
	return set;
}

static void *signal_main(void *arg)
{
	struct proc_stream *ps = arg;
	sigset_t set = exec_signals();
	int sig;

	for (;;) {
		if (sigwait(&set, &sig) != 0)
			continue;
		if (sig == SIGWINCH) {
			if (ps->tty && atomic_load(&ps->pid) >= 0) {
				int rows, cols;
				tty_size(&rows, &cols);
				_cleanup_free_ char *b =
					xasprintf("{\"rows\":%d,\"cols\":%d}", rows, cols);
				proc_post(ps, "resize", b);
			}
			continue;
		}
		/* The first INT/TERM/HUP/QUIT goes to the remote process, whose
		 * exit line then ends the CLI with its status; a second one (or
		 * one before the process exists) ends the CLI right away. The
		 * remote process outlives us in that case. */
		if (atomic_load(&ps->pid) >= 0 && !atomic_exchange(&ps->forwarded_signal, true)) {
			_cleanup_free_ char *b = xasprintf("{\"signal\":%d}", sig);
			proc_post(ps, "signal", b);
			continue;
		}
		tty_restore();
		fflush(stdout);
		_exit(128 + sig);
	}
	return NULL;
}

static int on_line(void *arg, char *line, size_t len)
{
	struct proc_stream *ps = arg;
	err_t err = { 0 };
	json *j;
	const char *type;
	int r = 0;

	if (ps->cli->json) {
		fwrite(line, 1, len, stdout);
		fputc('\n', stdout);
		fflush(stdout);
	}
	j = json_parse(line, len, &err);
	if (!j || j->type != JSON_OBJ || !(type = json_get_str(j, "type"))) {
		json_free(j);
		return cli_fail("bad_response", "invalid line in the output stream: %s",
				err.msg[0] ? err.msg : "no type");
	}
	if (strcmp(type, "start") == 0) {
		atomic_store(&ps->pid, json_get_int(j, "pid", -1, NULL));
		if (ps->want_stdin && !ps->stdin_started && atomic_load(&ps->pid) >= 0) {
			ps->stdin_started =
				pthread_create(&ps->stdin_thr, NULL, stdin_main, ps) == 0;
		}
	} else if (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0) {
		const char *data = json_get_str(j, "data");
		bool out = type[3] == 'o';
		struct buf bytes;

		buf_init(&bytes);
		if (!data || base64_decode(data, strlen(data), &bytes) < 0) {
			r = cli_fail("bad_response", "bad data in the output stream");
		} else if (!ps->cli->json) {
			if (write_all(out ? 1 : 2, bytes.data, bytes.len) < 0 && out)
				r = EXIT_FAIL;  /* our stdout is gone (e.g. a closed pipe): stop */
		}
		if (out)
			ps->stdout_offset = json_get_int(j, "offset", ps->stdout_offset, NULL) +
					    (long long)bytes.len;
		buf_free(&bytes);
	} else if (strcmp(type, "dropped") == 0) {
		if (!ps->cli->json)
			fprintf(stderr, "airlock: %s bytes %lld..%lld were no longer buffered\n",
				json_get_str(j, "stream") ? json_get_str(j, "stream") : "output",
				(long long)json_get_int(j, "from", 0, NULL),
				(long long)json_get_int(j, "to", 0, NULL));
	} else if (strcmp(type, "exit") == 0) {
		const json *sig = json_get(j, "signal");
		ps->have_exit = true;
		if (sig && sig->type == JSON_NUM)
			ps->exit_code = 128 + (int)sig->i;
		else
			ps->exit_code = (int)json_get_int(j, "exit_code", 1, NULL);
	} else if (strcmp(type, "error") == 0) {
		const json *e = json_get(j, "error");
		const char *code = e ? json_get_str(e, "code") : NULL;
		const char *msg = e ? json_get_str(e, "message") : NULL;
		r = cli_fail(code ? code : "internal", "%s", msg ? msg : "the process failed");
	}
	/* Unknown types are skipped: newer servers may add some. */
	json_free(j);
	return r;
}

/* Run the stream and turn its end into an exit code. */
static int run_stream(struct proc_stream *ps, const char *method, const char *target,
		      const char *body, bool follow)
{
	int r = cli_stream_lines(ps->cli, method, target, body, on_line, ps);

	fflush(stdout);
	if (r)
		return r;
	if (ps->have_exit)
		return ps->exit_code;
	if (!follow)
		return 0;
	if (atomic_load(&ps->pid) >= 0)
		return cli_fail("unavailable",
				"the output stream ended before the process exited; reconnect with "
				"`airlock logs %s %lld --offset %lld`",
				ps->sbx, (long long)atomic_load(&ps->pid), ps->stdout_offset);
	return cli_fail("unavailable", "the output stream ended before the process started");
}

static void start_signal_thread(struct proc_stream *ps)
{
	sigset_t set = exec_signals();
	pthread_t t;

	pthread_sigmask(SIG_BLOCK, &set, NULL);
	if (pthread_create(&t, NULL, signal_main, ps) == 0) {
		pthread_detach(t);
		ps->threads = true;
	}
}

/* Leave without waiting for helper threads (one may be blocked reading a
 * tty): restore the terminal, flush and _exit. */
static __attribute__((noreturn)) void finish(struct proc_stream *ps, int code)
{
	tty_restore();
	fflush(stdout);
	fflush(stderr);
	_exit(code);
}

int cmd_exec(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "interactive", no_argument, NULL, 'i' },
		{ "tty", no_argument, NULL, 't' },
		{ "env", required_argument, NULL, 'e' },
		{ "cwd", required_argument, NULL, 'w' },
		{ "user", required_argument, NULL, 'u' },
		{ "timeout", required_argument, NULL, 'T' },
		CLI_COMMON_OPTS,
		{ 0 },
	};
	struct proc_stream ps = { .cli = cli, .pid = -1 };
	const char *cwd = NULL, *user = NULL;
	long long timeout = -1, uid;
	const char **env = NULL;
	size_t n_env = 0;
	_cleanup_free_ char *target = NULL;
	struct buf body;
	struct jw w;
	int opt, r = 0;

	optind = 0;
	/* '+': options end at SBX; everything after it is the command. */
	while ((opt = getopt_long(argc, argv, "+itw:u:e:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'i': ps.want_stdin = true; break;
		case 't': ps.tty = true; break;
		case 'w': cwd = optarg; break;
		case 'u': user = optarg; break;
		case 'e':
			if (!strchr(optarg, '=') || optarg[0] == '=') {
				free(env);
				return cli_usage("exec", "--env needs KEY=VALUE");
			}
			env = xrealloc(env, sizeof(char *) * (n_env + 1));
			env[n_env++] = optarg;
			break;
		case 'T':
			if (!cli_parse_int(optarg, 0, 1LL << 31, &timeout)) {
				free(env);
				return cli_usage("exec", "--timeout needs a non-negative integer");
			}
			break;
		default:
			if ((r = cli_common_opt(cli, opt, "exec"))) {
				free(env);
				return r;
			}
		}
	}
	if (optind < argc && strcmp(argv[optind], "--") == 0)
		optind++;
	if (optind >= argc) {
		free(env);
		return cli_usage("exec", "missing sandbox id");
	}
	ps.sbx = argv[optind++];
	if (optind < argc && strcmp(argv[optind], "--") == 0)
		optind++;
	/* No command: the server runs the template image's default one
	 * (Entrypoint + Cmd), or says there is none. */
	if ((r = cli_load(cli))) {
		free(env);
		return r;
	}

	buf_init(&body);
	jw_init(&w, &body);
	jw_obj(&w);
	if (optind < argc) {
		jw_key(&w, "cmd");
		jw_arr(&w);
		for (int i = optind; i < argc; i++)
			jw_str(&w, argv[i]);
		jw_end(&w);
	}
	if (n_env) {
		jw_key(&w, "env");
		cli_jw_env(&w, env, n_env);
	}
	free(env);
	if (cwd) {
		jw_key(&w, "cwd");
		jw_str(&w, cwd);
	}
	if (user && cli_parse_int(user, 0, 0xfffffffeLL, &uid)) {
		jw_key(&w, "uid");
		jw_int(&w, uid);
	} else if (user) {
		jw_key(&w, "user");
		jw_str(&w, user);
	}
	if (ps.tty) {
		int rows, cols;
		tty_size(&rows, &cols);
		jw_key(&w, "pty");
		jw_obj(&w);
		jw_key(&w, "rows");
		jw_int(&w, rows);
		jw_key(&w, "cols");
		jw_int(&w, cols);
		jw_end(&w);
	}
	if (ps.want_stdin) {
		jw_key(&w, "stdin");
		jw_bool(&w, true);
	}
	if (timeout >= 0) {
		jw_key(&w, "timeout_s");
		jw_int(&w, timeout);
	}
	jw_end(&w);

	ps.sbx_esc = cli_escape(ps.sbx);
	target = xasprintf("/v1/sandboxes/%s/exec", ps.sbx_esc);
	start_signal_thread(&ps);
	if (ps.tty && ps.want_stdin)
		tty_make_raw();
	r = run_stream(&ps, "POST", target, body.data, true);
	buf_free(&body);
	free(ps.sbx_esc);
	if (ps.threads || ps.stdin_started)
		finish(&ps, r);
	tty_restore();
	return r;
}

int cmd_logs(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "offset", required_argument, NULL, 'o' },
		{ "no-follow", no_argument, NULL, 'n' },
		CLI_COMMON_OPTS,
		{ 0 },
	};
	struct proc_stream ps = { .cli = cli, .pid = -1 };
	long long offset = 0, pid;
	bool follow = true;
	_cleanup_free_ char *target = NULL;
	int opt, r;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'o':
			if (!cli_parse_int(optarg, 0, 1LL << 62, &offset))
				return cli_usage("logs", "--offset needs a non-negative integer");
			break;
		case 'n': follow = false; break;
		default:
			if ((r = cli_common_opt(cli, opt, "logs")))
				return r;
		}
	}
	if (argc - optind != 2)
		return cli_usage("logs", "usage: airlock logs SBX PID [--offset N] [--no-follow]");
	if (!cli_parse_int(argv[optind + 1], 1, 1LL << 31, &pid))
		return cli_usage("logs", "PID must be a positive integer");
	ps.sbx = argv[optind];
	ps.sbx_esc = cli_escape(ps.sbx);
	ps.stdout_offset = offset;
	target = xasprintf("/v1/sandboxes/%s/processes/%lld/output?offset=%lld&follow=%d",
			   ps.sbx_esc, pid, offset, follow ? 1 : 0);
	r = run_stream(&ps, "GET", target, NULL, follow);
	free(ps.sbx_esc);
	return r;
}

int cmd_ps(struct cli *cli, int argc, char **argv)
{
	static const char *const head[] = { "PID", "STATUS", "PTY", "STARTED", "CMD" };
	_cleanup_free_ char *raw = NULL, *id = NULL, *target = NULL;
	json *resp = NULL;
	const json *list;
	int r;

	if ((r = cli_only_common(cli, argc, argv, "ps", 1, 1)))
		return r;
	id = cli_escape(argv[optind]);
	target = xasprintf("/v1/sandboxes/%s/processes", id);
	if ((r = cli_call_json(cli, "GET", target, NULL, NULL, &resp, &raw)))
		return r;
	if (cli->json) {
		cli_print_raw(raw);
		json_free(resp);
		return 0;
	}
	list = resp ? json_get(resp, "processes") : NULL;
	if (!list || list->type != JSON_ARR) {
		json_free(resp);
		return cli_fail("bad_response", "the answer carries no process list");
	}
	struct table t;
	table_init(&t, 5, head);
	for (size_t i = 0; i < list->n; i++) {
		const json *p = list->items[i], *cmd = json_get(p, "cmd");
		const json *sig = json_get(p, "signal");
		struct buf c;
		char *status;

		if (json_get_bool(p, "running", false, NULL))
			status = xstrdup("running");
		else if (sig && sig->type == JSON_NUM)
			status = xasprintf("killed (%lld)", (long long)sig->i);
		else
			status = xasprintf("exited (%lld)",
					   (long long)json_get_int(p, "exit_code", 0, NULL));
		buf_init(&c);
		for (size_t k = 0; cmd && cmd->type == JSON_ARR && k < cmd->n; k++)
			if (cmd->items[k]->type == JSON_STR)
				buf_printf(&c, "%s%s", k ? " " : "", cmd->items[k]->str);
		buf_addc(&c, '\0');
		char *row[5] = { cli_field(p, "pid"), status,
				 xstrdup(json_get_bool(p, "pty", false, NULL) ? "yes" : "no"),
				 cli_field(p, "started_at"), buf_steal(&c) };
		table_add(&t, row);
	}
	table_print(&t, stdout);
	json_free(resp);
	return 0;
}

int cmd_kill(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "signal", required_argument, NULL, 's' },
		CLI_COMMON_OPTS,
		{ 0 },
	};
	const char *sig = "TERM";
	long long pid, num;
	_cleanup_free_ char *id = NULL, *target = NULL, *body = NULL;
	int opt, r;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "s:h", opts, NULL)) != -1) {
		if (opt == 's')
			sig = optarg;
		else if ((r = cli_common_opt(cli, opt, "kill")))
			return r;
	}
	if (argc - optind != 2)
		return cli_usage("kill", "usage: airlock kill SBX PID [--signal SIG]");
	if (!cli_parse_int(argv[optind + 1], 1, 1LL << 31, &pid))
		return cli_usage("kill", "PID must be a positive integer");
	if (cli_parse_int(sig, 1, 64, &num)) {
		body = xasprintf("{\"signal\":%lld}", num);
	} else {
		char name[17];
		size_t n = 0;

		if (strncasecmp(sig, "SIG", 3) == 0)
			sig += 3;
		for (; sig[n]; n++) {
			char ch = sig[n];
			if (n + 1 >= sizeof(name) ||
			    !((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
			      (ch >= '0' && ch <= '9')))
				return cli_usage("kill", "bad signal `%s`", sig);
			name[n] = (ch >= 'a' && ch <= 'z') ? (char)(ch - 'a' + 'A') : ch;
		}
		if (!n)
			return cli_usage("kill", "bad signal");
		name[n] = '\0';
		body = xasprintf("{\"signal\":\"%s\"}", name);
	}
	id = cli_escape(argv[optind]);
	target = xasprintf("/v1/sandboxes/%s/processes/%lld/signal", id, pid);
	return cli_call_json(cli, "POST", target, body, NULL, NULL, NULL);
}

/* airlock console SBX: the last 64 KiB of a vm sandbox's serial console,
 * as the server sends it (text). */
int cmd_console(struct cli *cli, int argc, char **argv)
{
	_cleanup_free_ char *id = NULL, *target = NULL;
	int r;

	if ((r = cli_only_common(cli, argc, argv, "console", 1, 1)))
		return r;
	id = cli_escape(argv[optind]);
	target = xasprintf("/v1/sandboxes/%s/console", id);
	return cli_stream_to_fd(cli, "GET", target, 1);
}

/* airlock events SBX: the sandbox's lifecycle log, one transition a line. */
int cmd_events(struct cli *cli, int argc, char **argv)
{
	static const char *const head[] = { "AT", "FROM", "TO", "REASON" };
	static const char *const fields[] = { "at", "from", "to", "reason" };
	_cleanup_free_ char *id = NULL, *target = NULL;
	int r;

	if ((r = cli_only_common(cli, argc, argv, "events", 1, 1)))
		return r;
	id = cli_escape(argv[optind]);
	target = xasprintf("/v1/sandboxes/%s/events", id);
	return cli_list_table(cli, target, "events", "events", 4, head, fields);
}
