/* client.c - configuration, requests, errors and output helpers of the CLI. */
#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "../lib/tls.h"
#include "cli.h"

#define DEFAULT_URL "http://127.0.0.1:7070"

int cli_fail(const char *code, const char *fmt, ...)
{
	va_list ap;

	cli_progress_end();
	fflush(stdout);
	fputs("airlock: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (%s)\n", code);
	return EXIT_FAIL;
}

int cli_usage(const char *verb, const char *fmt, ...)
{
	va_list ap;

	cli_progress_end();
	fputs("airlock: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (verb)
		fprintf(stderr, "Try 'airlock %s --help'.\n", verb);
	else
		fputs("Try 'airlock --help'.\n", stderr);
	return EXIT_USAGE;
}

int cli_common_opt(struct cli *cli, int opt, const char *verb)
{
	switch (opt) {
	case OPT_JSON:
		cli->json = true;
		return 0;
	case OPT_CONFIG:
		cli->config_flag = optarg;
		return 0;
	case OPT_URL:
		cli->url_flag = optarg;
		return 0;
	case OPT_CACERT:
		cli->cacert_flag = optarg;
		return 0;
	case 'h':
		cli_print_verb_usage(stdout, verb);
		exit(0);
	default:
		/* getopt already printed what was wrong */
		fprintf(stderr, "Try 'airlock %s --help'.\n", verb);
		return EXIT_USAGE;
	}
}

/* The user's own config: $XDG_CONFIG_HOME/airlock/config.json, else
 * ~/.config/airlock/config.json (XDG base directories: a relative
 * XDG_CONFIG_HOME is ignored). NULL when there is no home. Caller owns. */
static char *user_config_path(void)
{
	const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");

	if (xdg && xdg[0] == '/')
		return xasprintf("%s/airlock/config.json", xdg);
	if (home && home[0] == '/')
		return xasprintf("%s/.config/airlock/config.json", home);
	return NULL;
}

/* Which config file: --config, else $AIRLOCK_CONFIG, else the user's own
 * when it exists, else the one `airlockd up` writes. Documented in the
 * usage text and README ("CLI"). *explicit_path: a missing file is an
 * error (only the last default may be absent). Caller owns. */
static char *config_path(const struct cli *cli, bool *explicit_path)
{
	const char *p = cli->config_flag ? cli->config_flag : getenv("AIRLOCK_CONFIG");
	char *user;

	*explicit_path = true;
	if (p && *p)
		return xstrdup(p);
	user = user_config_path();
	if (user && access(user, F_OK) == 0)
		return user;
	free(user);
	*explicit_path = false;
	return xstrdup(CLI_DEFAULT_CONFIG);
}

/* https: the server is verified against ca_file (PEM) when given, else
 * the system's CAs, and its certificate must name the URL's host. */
static int setup_tls(const char *ca_file)
{
	err_t err = { 0 };
	struct tls_ctx *t = tls_client_ctx(ca_file, &err);

	if (!t)
		return cli_fail("bad_config", "%s", err.msg);
	http_client_set_tls(t);   /* for the life of the process */
	return 0;
}

int cli_load(struct cli *cli)
{
	_cleanup_free_ char *path = NULL, *ca_file = NULL;
	const char *env;
	bool explicit_path;
	struct buf b;
	int r;

	if (cli->loaded)
		return 0;
	path = config_path(cli, &explicit_path);
	buf_init(&b);
	r = read_file(path, 1 << 20, &b);
	if (r < 0 && explicit_path) {
		buf_free(&b);
		return cli_fail("bad_config", "cannot read config `%s`: %s", path, strerror(-r));
	}
	if (r == 0) {
		err_t err = { 0 };
		json *j = json_parse(b.data ? b.data : "", b.len, &err);
		const char *s;

		if (!j || j->type != JSON_OBJ) {
			json_free(j);
			buf_free(&b);
			return cli_fail("bad_config", "config `%s` is not a JSON object%s%s", path,
					err.msg[0] ? ": " : "", err.msg);
		}
		if ((s = json_get_str(j, "url")))
			cli->url = xstrdup(s);
		if ((s = json_get_str(j, "api_key"))) {
			cli->key = xstrdup(s);
			cli->key_from_default = !explicit_path;
		}
		if ((s = json_get_str(j, "ca_file"))) {
			/* relative: to the config file's directory */
			const char *slash = strrchr(path, '/');
			free(ca_file);
			ca_file = s[0] == '/' || !slash ? xstrdup(s)
							: xasprintf("%.*s/%s", (int)(slash - path), path, s);
		}
		json_free(j);
	}
	buf_free(&b);

	if ((env = getenv("AIRLOCK_URL")) && *env) {
		free(cli->url);
		cli->url = xstrdup(env);
	}
	if ((env = getenv("AIRLOCK_API_KEY")) && *env) {
		free(cli->key);
		cli->key = xstrdup(env);
		cli->key_from_default = false;
	}
	if (cli->url_flag) {
		free(cli->url);
		cli->url = xstrdup(cli->url_flag);
	}
	if (!cli->url)
		cli->url = xstrdup(DEFAULT_URL);
	for (size_t n = strlen(cli->url); n > 1 && cli->url[n - 1] == '/'; n--)
		cli->url[n - 1] = '\0';
	if (cli->key && strpbrk(cli->key, "\r\n"))
		return cli_fail("bad_config", "the API key contains a line break");
	if ((env = getenv("AIRLOCK_CA_FILE")) && *env) {
		free(ca_file);
		ca_file = xstrdup(env);
	}
	if (cli->cacert_flag) {
		free(ca_file);
		ca_file = xstrdup(cli->cacert_flag);
	}
	if (strncmp(cli->url, "https://", 8) == 0 && (r = setup_tls(ca_file)))
		return r;
	cli->loaded = true;
	return 0;
}

char *cli_headers(struct cli *cli, const char *extra)
{
	struct buf b;

	buf_init(&b);
	if (cli->key)
		buf_printf(&b, "Authorization: Bearer %s\r\n", cli->key);
	if (extra)
		buf_adds(&b, extra);
	buf_addc(&b, '\0');   /* never NULL, even when empty */
	b.len--;
	return buf_steal(&b);
}

int cli_fail_resp(int status, const char *body, size_t len)
{
	err_t err = { 0 };
	json *j = body && len ? json_parse(body, len, &err) : NULL;
	const json *e = j ? json_get(j, "error") : NULL;
	const char *code = e ? json_get_str(e, "code") : NULL;
	const char *msg = e ? json_get_str(e, "message") : NULL;
	char fallback[32];
	int r;

	if (code) {
		r = cli_fail(code, "%s", msg ? msg : code);
	} else {
		snprintf(fallback, sizeof(fallback), "http_%d", status);
		r = cli_fail(fallback, "the server answered HTTP %d", status);
	}
	if (status == 401)
		fprintf(stderr, "airlock: check the API key (AIRLOCK_API_KEY, --config, "
			"~/.config/airlock/config.json or %s)\n", CLI_DEFAULT_CONFIG);
	json_free(j);
	return status == 401 || status == 403 ? EXIT_AUTH : r;
}

static int fail_transport(struct cli *cli, const err_t *err)
{
	cli_fail("unavailable", "cannot reach %s: %s", cli->url, err->msg);
	return EXIT_UNREACHABLE;
}

int cli_call(struct cli *cli, const char *method, const char *target,
	     const char *content_type, const void *body, size_t len, const char *extra_headers,
	     struct http_resp *out)
{
	_cleanup_free_ char *ct = content_type ? xasprintf("Content-Type: %s\r\n", content_type)
					       : NULL;
	_cleanup_free_ char *extra = xasprintf("%s%s", ct ? ct : "",
					       extra_headers ? extra_headers : "");
	_cleanup_free_ char *hdr = NULL;
	err_t err = { 0 };
	int r;

	memset(out, 0, sizeof(*out));
	if ((r = cli_load(cli)))
		return r;
	hdr = cli_headers(cli, extra);
	if (http_request(cli->url, method, target, hdr, body, len, out, &err) < 0) {
		http_resp_free(out);
		return fail_transport(cli, &err);
	}
	if (out->status < 200 || out->status > 299) {
		r = cli_fail_resp(out->status, out->body.data, out->body.len);
		http_resp_free(out);
		return r;
	}
	return 0;
}

int cli_call_json(struct cli *cli, const char *method, const char *target,
		  const char *json_body, const char *extra_headers, json **out, char **raw)
{
	struct http_resp resp;
	err_t err = { 0 };
	int r;

	if (out)
		*out = NULL;
	if (raw)
		*raw = NULL;
	if ((r = cli_call(cli, method, target, json_body ? "application/json" : NULL, json_body,
			  json_body ? strlen(json_body) : 0, extra_headers, &resp)))
		return r;
	if (out && resp.body.len) {
		*out = json_parse(resp.body.data, resp.body.len, &err);
		if (!*out) {
			http_resp_free(&resp);
			return cli_fail("bad_response", "the server sent invalid JSON: %s", err.msg);
		}
	}
	if (raw)
		*raw = xstrdup(resp.body.data ? resp.body.data : "");
	http_resp_free(&resp);
	return 0;
}

/* --- streaming --- */

/* The longest NDJSON line a stream may send: an exec chunk is far below
 * it, a code cell's PNG result is the largest line there is. */
#define CLI_STREAM_LINE_MAX (64u << 20)

struct stream {
	int status;
	bool ok;
	cli_line_fn on_line;
	void *arg;
	int fd;             /* raw mode: >= 0 */
	int stopped;        /* what on_line returned */
	struct buf line;    /* NDJSON: the unfinished line */
	struct buf errbody; /* non-2xx: the error answer */
};

static int s_head(void *arg, const struct http_resp *head)
{
	struct stream *s = arg;

	s->status = head->status;
	s->ok = head->status >= 200 && head->status <= 299;
	return 0;
}

static int s_data(void *arg, const void *p, size_t n)
{
	struct stream *s = arg;
	const char *c = p, *end = c + n;

	if (!s->ok) {
		if (s->errbody.len < (1 << 20))
			buf_add(&s->errbody, p, n);
		return 0;
	}
	if (s->fd >= 0) {
		if (write_all(s->fd, p, n) < 0) {
			s->stopped = cli_fail("io", "cannot write output: %s", strerror(errno));
			return s->stopped;
		}
		return 0;
	}
	while (c < end) {
		const char *nl = memchr(c, '\n', (size_t)(end - c));
		/* A stream's lines carry bytes of a sandbox (output, a code
		 * cell's images): bounded, so that one endless line cannot grow
		 * the CLI without end. */
		if ((size_t)((nl ? nl : end) - c) + s->line.len > CLI_STREAM_LINE_MAX) {
			s->stopped = cli_fail("bad_response", "a line of the stream is longer than %u MiB",
					      CLI_STREAM_LINE_MAX >> 20);
			return s->stopped;
		}
		if (!nl) {
			buf_add(&s->line, c, (size_t)(end - c));
			break;
		}
		buf_add(&s->line, c, (size_t)(nl - c));
		c = nl + 1;
		if (s->line.len) {
			int r = s->on_line(s->arg, s->line.data, s->line.len);
			buf_reset(&s->line);
			if (r) {
				s->stopped = r;
				return r;
			}
		}
	}
	return 0;
}

static int stream_run(struct cli *cli, const char *method, const char *target,
		      const char *json_body, struct stream *s)
{
	static const struct http_stream_cbs cbs = { .on_head = s_head, .on_data = s_data };
	_cleanup_free_ char *hdr = NULL;
	err_t err = { 0 };
	int r, ret = 0;

	if ((r = cli_load(cli)))
		return r;
	hdr = cli_headers(cli, json_body ? "Content-Type: application/json\r\n" : NULL);
	buf_init(&s->line);
	buf_init(&s->errbody);
	r = http_request_stream(cli->url, method, target, hdr, json_body,
				json_body ? strlen(json_body) : 0, &cbs, s, &err);
	if (s->stopped) {
		ret = s->stopped;
	} else if (r < 0 && !s->status) {
		ret = fail_transport(cli, &err);
	} else if (!s->ok) {
		ret = cli_fail_resp(s->status, s->errbody.data, s->errbody.len);
	} else if (r < 0) {
		ret = cli_fail("unavailable", "the connection broke: %s", err.msg);
	} else if (s->line.len && s->on_line) {
		ret = s->on_line(s->arg, s->line.data, s->line.len);  /* last line, no '\n' */
	}
	buf_free(&s->line);
	buf_free(&s->errbody);
	return ret;
}

int cli_stream_lines(struct cli *cli, const char *method, const char *target,
		     const char *json_body, cli_line_fn on_line, void *arg)
{
	struct stream s = { .on_line = on_line, .arg = arg, .fd = -1 };

	return stream_run(cli, method, target, json_body, &s);
}

int cli_stream_to_fd(struct cli *cli, const char *method, const char *target, int fd)
{
	struct stream s = { .fd = fd };

	return stream_run(cli, method, target, NULL, &s);
}

/* Parse a whole decimal integer in [min, max]. */
bool cli_parse_int(const char *s, long long min, long long max, long long *out)
{
	char *end;

	errno = 0;
	*out = strtoll(s, &end, 10);
	return s[0] && !*end && !errno && *out >= min && *out <= max;
}

/* Shared by verbs that take exactly `want` positional arguments and only
 * the common options. Returns 0 or an exit code. */
int cli_only_common(struct cli *cli, int argc, char **argv, const char *verb, int want_min,
		       int want_max)
{
	static const struct option opts[] = { CLI_COMMON_OPTS, { 0 } };
	int opt, r;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1)
		if ((r = cli_common_opt(cli, opt, verb)))
			return r;
	if (argc - optind < want_min)
		return cli_usage(verb, "missing argument");
	if (want_max >= 0 && argc - optind > want_max)
		return cli_usage(verb, "unexpected argument `%s`", argv[optind + want_max]);
	return 0;
}

/* Print an object's top-level fields as "key: value" lines. */
void cli_print_fields(const json *o)
{
	size_t w = 0;

	for (size_t i = 0; i < o->n; i++)
		if (strlen(o->keys[i]) > w)
			w = strlen(o->keys[i]);
	for (size_t i = 0; i < o->n; i++) {
		_cleanup_free_ char *v = cli_field(o, o->keys[i]);
		printf("%s:%*s %s\n", o->keys[i], (int)(w - strlen(o->keys[i])), "", v);
	}
}

/* --- output --- */

int cli_print_id(struct cli *cli, int r, json *resp, const char *raw)
{
	if (r == 0) {
		if (cli->json || !resp || !json_get_str(resp, "id"))
			cli_print_raw(raw);
		else
			printf("%s\n", json_get_str(resp, "id"));
	}
	json_free(resp);
	return r;
}

void cli_print_raw(const char *text)
{
	size_t n = strlen(text);

	fputs(text, stdout);
	if (!n || text[n - 1] != '\n')
		fputc('\n', stdout);
}

void cli_jw_env(struct jw *w, const char *const *env, size_t n_env)
{
	jw_obj(w);
	for (size_t i = 0; i < n_env; i++) {
		size_t kl = (size_t)(strchr(env[i], '=') - env[i]);
		bool later = false;

		for (size_t k = i + 1; k < n_env && !later; k++)
			later = strncmp(env[k], env[i], kl + 1) == 0;
		if (later)
			continue;
		_cleanup_free_ char *k = xstrndup(env[i], kl);
		jw_key(w, k);
		jw_str(w, env[i] + kl + 1);
	}
	jw_end(w);
}

char *cli_json_text(const json *j)
{
	struct buf b;
	struct jw w;

	buf_init(&b);
	jw_init(&w, &b);
	jw_value(&w, j);
	buf_addc(&b, '\0');
	b.len--;
	return buf_steal(&b);
}

static void pretty(const json *j, FILE *f, int depth)
{
	if ((j->type == JSON_OBJ || j->type == JSON_ARR) && j->n > 0) {
		bool obj = j->type == JSON_OBJ;
		fputc(obj ? '{' : '[', f);
		for (size_t i = 0; i < j->n; i++) {
			fprintf(f, "%s\n%*s", i ? "," : "", 2 * (depth + 1), "");
			if (obj) {
				struct buf b;
				struct jw w;
				buf_init(&b);
				jw_init(&w, &b);
				jw_str(&w, j->keys[i]);
				fprintf(f, "%s: ", b.data);
				buf_free(&b);
			}
			pretty(j->items[i], f, depth + 1);
		}
		fprintf(f, "\n%*s%c", 2 * depth, "", obj ? '}' : ']');
		return;
	}
	_cleanup_free_ char *t = cli_json_text(j);
	fputs(t, f);
}

void cli_print_pretty(const json *j, FILE *f)
{
	pretty(j, f, 0);
	fputc('\n', f);
}

char *cli_field(const json *obj, const char *key)
{
	const char *dot = strchr(key, '.');
	const json *v;

	if (dot) {   /* "capacity.mem_free_mb": a field of a field */
		_cleanup_free_ char *outer = xstrndup(key, (size_t)(dot - key));
		return cli_field(obj ? json_get(obj, outer) : NULL, dot + 1);
	}
	v = obj && obj->type == JSON_OBJ ? json_get(obj, key) : NULL;

	if (!v || v->type == JSON_NULL)
		return xstrdup("-");
	if (v->type == JSON_STR)
		return xstrdup(v->str);
	return cli_json_text(v);
}

void table_init(struct table *t, size_t n_cols, const char *const *header)
{
	t->n_cols = n_cols;
	t->n_rows = 1;
	t->cells = xcalloc(n_cols, sizeof(char *));
	for (size_t i = 0; i < n_cols; i++)
		t->cells[i] = xstrdup(header[i]);
}

void table_add(struct table *t, char **cells)
{
	t->cells = xrealloc(t->cells, sizeof(char *) * t->n_cols * (t->n_rows + 1));
	for (size_t i = 0; i < t->n_cols; i++)
		t->cells[t->n_rows * t->n_cols + i] = cells[i] ? cells[i] : xstrdup("-");
	t->n_rows++;
}

void table_print(struct table *t, FILE *f)
{
	_cleanup_free_ size_t *w = xcalloc(t->n_cols, sizeof(size_t));

	for (size_t r = 0; r < t->n_rows; r++)
		for (size_t c = 0; c < t->n_cols; c++) {
			size_t n = strlen(t->cells[r * t->n_cols + c]);
			if (n > w[c])
				w[c] = n;
		}
	for (size_t r = 0; r < t->n_rows; r++) {
		for (size_t c = 0; c < t->n_cols; c++) {
			const char *s = t->cells[r * t->n_cols + c];
			if (c + 1 == t->n_cols)
				fprintf(f, "%s\n", s);
			else
				fprintf(f, "%-*s  ", (int)w[c], s);
		}
	}
	table_free(t);
}

void table_free(struct table *t)
{
	for (size_t i = 0; t->cells && i < t->n_rows * t->n_cols; i++)
		free(t->cells[i]);
	free(t->cells);
	t->cells = NULL;
}

int cli_list_table(struct cli *cli, const char *target, const char *key, const char *what,
		   size_t n_cols, const char *const *head, const char *const *fields)
{
	_cleanup_free_ char *raw = NULL;
	json *resp = NULL;
	const json *list;
	struct table t;
	int r;

	if ((r = cli_call_json(cli, "GET", target, NULL, NULL, &resp, &raw)))
		return r;
	if (cli->json) {
		cli_print_raw(raw);
		json_free(resp);
		return 0;
	}
	list = resp ? json_get(resp, key) : NULL;
	if (!list || list->type != JSON_ARR) {
		json_free(resp);
		return cli_fail("bad_response", "the answer carries no %s", what);
	}
	table_init(&t, n_cols, head);
	/* A table shows the whole list: follow next_token page by page (lists
	 * are keyset-paginated, so nothing repeats). --json prints one page. */
	for (int page = 0;; page++) {
		const char *next = json_get_str(resp, "next_token");
		_cleanup_free_ char *more = NULL;

		for (size_t i = 0; i < list->n; i++) {
			char **row = xcalloc(n_cols, sizeof(*row));
			for (size_t c = 0; c < n_cols; c++)
				row[c] = cli_field(list->items[i], fields[c]);
			table_add(&t, row);
			free(row);
		}
		if (!next || !*next || page == 10000)
			break;
		more = xasprintf("%s%climit=1000&next_token=%s", target,
				 strchr(target, '?') ? '&' : '?', next);
		json_free(resp);
		resp = NULL;
		free(raw);
		raw = NULL;
		if ((r = cli_call_json(cli, "GET", more, NULL, NULL, &resp, &raw))) {
			table_free(&t);
			return r;
		}
		list = resp ? json_get(resp, key) : NULL;
		if (!list || list->type != JSON_ARR) {
			json_free(resp);
			table_free(&t);
			return cli_fail("bad_response", "the answer carries no %s", what);
		}
	}
	table_print(&t, stdout);
	json_free(resp);
	return 0;
}
