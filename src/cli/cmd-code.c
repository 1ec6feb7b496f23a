/* cmd-code.c - run-code and code-context: the code interpreter of a sandbox
 * (a `code-interpreter` template; docs/API.md, "Code interpreter").
 *
 * run-code POSTs a cell to /v1/sandboxes/{id}/code and follows its NDJSON
 * answer, E2B's code-interpreter lines: stdout/stderr text goes to our
 * stdout/stderr as it comes, a result's text to stdout, its PNG/JPEG/SVG to
 * a new file (the path printed), an error's name, value and traceback to
 * stderr. The lines come from the sandbox: they are parsed by json.h (the
 * fuzzed parser), images by base64_decode, and a file's name is always
 * ours (result-N.EXT in the chosen directory, made with O_EXCL so nothing
 * there is overwritten), never a name from the sandbox.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

/* A cell's code at most (stdin or -c): the API's body limit is far above
 * any cell a person writes; this keeps a mistaken `< bigfile` short. */
#define CODE_MAX (4u << 20)

struct cell {
	struct cli *cli;
	const char *out_dir;   /* borrowed */
	int n_files;           /* result-N: the next N to try */
	bool ended;            /* end_of_execution came */
	bool error;            /* an error line came */
	long long count;       /* number_of_executions; -1: none */
};

/* Write data to a new file out_dir/result-N.ext (the first N free); print
 * its path. Returns 0 or an exit code. */
static int save_result(struct cell *c, const char *ext, const void *data, size_t len)
{
	for (int tries = 0; tries < 10000; tries++) {
		_cleanup_free_ char *path =
			xasprintf("%s/result-%d.%s", c->out_dir, ++c->n_files, ext);
		int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);

		if (fd < 0 && errno == EEXIST)
			continue;
		if (fd < 0)
			return cli_fail("io", "cannot create %s: %s", path, strerror(errno));
		if (write_all(fd, data, len) < 0) {
			int e = errno;
			close(fd);
			return cli_fail("io", "cannot write %s: %s", path, strerror(e));
		}
		close(fd);
		printf("%s: %s\n", ext, path);
		return 0;
	}
	return cli_fail("io", "no free result-N.%s name in %s", ext, c->out_dir);
}

static void print_text(const char *s, FILE *f)
{
	size_t n = strlen(s);

	fputs(s, f);
	if (n && s[n - 1] != '\n')
		fputc('\n', f);
}

/* A result line: images to files; the text (else markdown, latex, html or
 * json, as text) to stdout. */
static int on_result(struct cell *c, const json *j)
{
	static const char *const images[] = { "png", "jpeg" };
	static const char *const texts[] = { "text", "markdown", "latex", "html" };
	bool image = false;
	int r;

	for (size_t i = 0; i < ARRAY_SIZE(images); i++) {
		const char *b64 = json_get_str(j, images[i]);
		_cleanup_(buf_free) struct buf clean = { 0 };
		struct buf bytes;

		if (!b64)
			continue;
		/* Jupyter's base64 may come in lines */
		for (const char *p = b64; *p; p++)
			if (!strchr(" \t\r\n", *p))
				buf_addc(&clean, *p);
		buf_init(&bytes);
		if (base64_decode(clean.data ? clean.data : "", clean.len, &bytes) < 0) {
			buf_free(&bytes);
			return cli_fail("bad_response", "a %s result is not valid base64", images[i]);
		}
		r = save_result(c, images[i], bytes.data ? bytes.data : "", bytes.len);
		buf_free(&bytes);
		if (r)
			return r;
		image = true;
	}
	const char *svg = json_get_str(j, "svg");
	if (svg) {
		if ((r = save_result(c, "svg", svg, strlen(svg))))
			return r;
		image = true;
	}
	/* A figure's text is only "<Figure size ...>": the file says more. */
	if (image)
		return 0;
	for (size_t i = 0; i < ARRAY_SIZE(texts); i++) {
		const char *t = json_get_str(j, texts[i]);
		if (t) {
			print_text(t, stdout);
			return 0;
		}
	}
	const json *data = json_get(j, "json");
	if (data) {
		_cleanup_free_ char *t = cli_json_text(data);
		print_text(t, stdout);
	}
	return 0;
}

/* An error line: the traceback, else "Name: value" (a string, or an array of
 * lines as some kernels give it), to stderr. */
static void on_error(struct cell *c, const json *j)
{
	const char *name = json_get_str(j, "name"), *value = json_get_str(j, "value");
	const json *tb = json_get(j, "traceback");

	bool any = false;

	c->error = true;
	fflush(stdout);
	if (tb && tb->type == JSON_STR && tb->str[0]) {
		print_text(tb->str, stderr);
		any = true;
	} else if (tb && tb->type == JSON_ARR) {
		for (size_t i = 0; i < tb->n; i++)
			if (tb->items[i]->type == JSON_STR) {
				print_text(tb->items[i]->str, stderr);
				any = true;
			}
	}
	/* a traceback ends with that line already */
	if (!any)
		fprintf(stderr, "%s: %s\n", name ? name : "Error", value ? value : "");
}

static int cell_line(void *arg, char *line, size_t len)
{
	struct cell *c = arg;
	err_t err = { 0 };
	json *j;
	const char *type;
	int r = 0;

	j = json_parse(line, len, &err);
	if (!j || j->type != JSON_OBJ || !(type = json_get_str(j, "type"))) {
		json_free(j);
		return cli_fail("bad_response", "invalid line in the code stream: %s",
				err.msg[0] ? err.msg : "no type");
	}
	if (c->cli->json) {
		fwrite(line, 1, len, stdout);
		fputc('\n', stdout);
		fflush(stdout);
	}
	if (strcmp(type, "number_of_executions") == 0) {
		c->count = json_get_int(j, "execution_count", -1, NULL);
	} else if (strcmp(type, "end_of_execution") == 0) {
		c->ended = true;
	} else if (strcmp(type, "unexpected_end_of_execution") == 0) {
		r = cli_fail("unavailable", "the code service ended the cell unexpectedly");
	} else if (strcmp(type, "error") == 0 && json_get(j, "error") &&
		   json_get(j, "error")->type == JSON_OBJ) {
		/* Airlock's own error line (the API's error shape), not a cell's */
		const json *e = json_get(j, "error");
		const char *code = json_get_str(e, "code"), *msg = json_get_str(e, "message");
		r = cli_fail(code ? code : "internal", "%s", msg ? msg : "the cell failed");
	} else if (c->cli->json) {
		if (strcmp(type, "error") == 0)
			c->error = true;
	} else if (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0) {
		const char *t = json_get_str(j, "text");
		FILE *f = type[3] == 'o' ? stdout : stderr;
		if (t) {
			fputs(t, f);
			fflush(f);
		}
	} else if (strcmp(type, "result") == 0) {
		r = on_result(c, j);
		fflush(stdout);
	} else if (strcmp(type, "error") == 0) {
		on_error(c, j);
	}
	/* Unknown types are skipped: newer servers may add some. */
	json_free(j);
	return r;
}

/* Read all of fd 0, up to CODE_MAX. Returns 0 or an exit code. */
static int read_code(struct buf *b)
{
	char chunk[65536];

	for (;;) {
		ssize_t n = read(0, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return cli_fail("io", "cannot read the code from stdin: %s", strerror(errno));
		if (n == 0)
			return 0;
		if (b->len + (size_t)n > CODE_MAX)
			return cli_usage("run-code", "the code is longer than %u bytes", CODE_MAX);
		buf_add(b, chunk, (size_t)n);
	}
}

int cmd_run_code(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "language", required_argument, NULL, 'l' },
		{ "context", required_argument, NULL, 'C' },
		{ "env", required_argument, NULL, 'e' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "out", required_argument, NULL, 'o' },
		{ "code", required_argument, NULL, 'c' },
		CLI_COMMON_OPTS,
		{ 0 },
	};
	struct cell c = { .cli = cli, .out_dir = ".", .count = -1 };
	const char *language = NULL, *context = NULL, *code = NULL;
	long long timeout = -1;
	_cleanup_free_ const char **env = NULL;
	size_t n_env = 0;
	_cleanup_(buf_free) struct buf src = { 0 };
	_cleanup_(buf_free) struct buf body = { 0 };
	_cleanup_free_ char *sbx = NULL, *target = NULL;
	struct stat st;
	struct jw w;
	int opt, r;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "l:C:e:o:c:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'l': language = optarg; break;
		case 'C': context = optarg; break;
		case 'o': c.out_dir = optarg; break;
		case 'c': code = optarg; break;
		case 'e':
			if (!strchr(optarg, '=') || optarg[0] == '=')
				return cli_usage("run-code", "--env needs KEY=VALUE");
			env = xrealloc(env, sizeof(char *) * (n_env + 1));
			env[n_env++] = optarg;
			break;
		case 'T':
			if (!cli_parse_int(optarg, 1, 86400, &timeout))
				return cli_usage("run-code", "--timeout needs seconds, 1..86400");
			break;
		default:
			if ((r = cli_common_opt(cli, opt, "run-code")))
				return r;
		}
	}
	if (optind >= argc)
		return cli_usage("run-code", "missing sandbox id");
	if (argc - optind > 1)
		return cli_usage("run-code", "unexpected argument `%s` (the code comes from stdin or -c)",
				 argv[optind + 1]);
	if (stat(c.out_dir, &st) < 0 || !S_ISDIR(st.st_mode))
		return cli_usage("run-code", "--out %s is not a directory", c.out_dir);
	if (!code) {
		if ((r = read_code(&src)))
			return r;
		buf_addc(&src, '\0');
		code = src.data;
	}
	if (!json_utf8_valid(code, strlen(code)))
		return cli_usage("run-code", "the code is not valid UTF-8");
	if ((r = cli_load(cli)))
		return r;

	jw_init(&w, &body);
	jw_obj(&w);
	jw_key(&w, "code");
	jw_str(&w, code);
	if (language) {
		jw_key(&w, "language");
		jw_str(&w, language);
	}
	if (context) {
		jw_key(&w, "context_id");
		jw_str(&w, context);
	}
	if (n_env) {
		jw_key(&w, "env_vars");
		cli_jw_env(&w, env, n_env);
	}
	if (timeout > 0) {
		jw_key(&w, "timeout_ms");
		jw_int(&w, timeout * 1000);
	}
	jw_end(&w);

	sbx = cli_escape(argv[optind]);
	target = xasprintf("/v1/sandboxes/%s/code", sbx);
	r = cli_stream_lines(cli, "POST", target, body.data, cell_line, &c);
	fflush(stdout);
	if (r)
		return r;
	if (!c.ended)
		return cli_fail("unavailable", "the code stream ended before the cell did");
	return c.error ? 1 : 0;
}

/* code-context create|ls|restart|rm SBX ... */
int cmd_code_context(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "language", required_argument, NULL, 'l' },
		{ "cwd", required_argument, NULL, 'w' },
		CLI_COMMON_OPTS,
		{ 0 },
	};
	static const char *const head[] = { "ID", "LANGUAGE", "CWD" };
	static const char *const fields[] = { "id", "language", "cwd" };
	const char *language = NULL, *cwd = NULL, *sub;
	_cleanup_free_ char *sbx = NULL, *target = NULL, *raw = NULL;
	int opt, r, npos;
	json *resp = NULL;

	if (argc < 2)
		return cli_usage("code-context", "missing subcommand: create, ls, restart or rm");
	sub = argv[1];
	optind = 0;
	argc--;
	argv++;
	while ((opt = getopt_long(argc, argv, "l:w:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'l': language = optarg; break;
		case 'w': cwd = optarg; break;
		default:
			if ((r = cli_common_opt(cli, opt, "code-context")))
				return r;
		}
	}
	npos = argc - optind;
	if (npos < 1)
		return cli_usage("code-context", "missing sandbox id");
	sbx = cli_escape(argv[optind]);

	if (strcmp(sub, "create") == 0) {
		_cleanup_(buf_free) struct buf body = { 0 };
		struct jw w;

		if (npos != 1)
			return cli_usage("code-context", "create takes one sandbox id");
		jw_init(&w, &body);
		jw_obj(&w);
		if (language) {
			jw_key(&w, "language");
			jw_str(&w, language);
		}
		if (cwd) {
			jw_key(&w, "cwd");
			jw_str(&w, cwd);
		}
		jw_end(&w);
		target = xasprintf("/v1/sandboxes/%s/code/contexts", sbx);
		r = cli_call_json(cli, "POST", target, body.data, NULL, &resp, &raw);
		return cli_print_id(cli, r, resp, raw);
	}
	if (language || cwd)
		return cli_usage("code-context", "--language and --cwd go with create");
	if (strcmp(sub, "ls") == 0) {
		if (npos != 1)
			return cli_usage("code-context", "ls takes one sandbox id");
		target = xasprintf("/v1/sandboxes/%s/code/contexts", sbx);
		if ((r = cli_call_json(cli, "GET", target, NULL, NULL, &resp, &raw)))
			return r;
		if (cli->json) {
			cli_print_raw(raw);
			json_free(resp);
			return 0;
		}
		/* {"contexts":[...]}, or the bare array E2B's service answers */
		const json *list = resp && resp->type == JSON_OBJ ? json_get(resp, "contexts") : resp;
		if (!list || list->type != JSON_ARR) {
			json_free(resp);
			return cli_fail("bad_response", "the answer carries no contexts");
		}
		struct table t;
		table_init(&t, ARRAY_SIZE(head), head);
		for (size_t i = 0; i < list->n; i++) {
			char **row = xcalloc(ARRAY_SIZE(head), sizeof(*row));
			for (size_t k = 0; k < ARRAY_SIZE(head); k++)
				row[k] = cli_field(list->items[i], fields[k]);
			table_add(&t, row);
			free(row);
		}
		table_print(&t, stdout);
		json_free(resp);
		return 0;
	}
	if (strcmp(sub, "restart") == 0 || strcmp(sub, "rm") == 0) {
		bool rm = sub[0] == 'r' && sub[1] == 'm';

		if (npos != 2)
			return cli_usage("code-context", "%s takes a sandbox id and a context id", sub);
		_cleanup_free_ char *cid = cli_escape(argv[optind + 1]);
		target = rm ? xasprintf("/v1/sandboxes/%s/code/contexts/%s", sbx, cid)
			    : xasprintf("/v1/sandboxes/%s/code/contexts/%s/restart", sbx, cid);
		r = cli_call_json(cli, rm ? "DELETE" : "POST", target, NULL, NULL, &resp, &raw);
		if (r == 0 && cli->json && raw && raw[0])
			cli_print_raw(raw);
		json_free(resp);
		return r;
	}
	return cli_usage("code-context", "unknown subcommand `%s`", sub);
}
