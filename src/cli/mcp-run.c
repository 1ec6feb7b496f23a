/* mcp-run.c - what each tool of `airlock mcp` does (mcp-tools.c has
 * their table): the API requests, whole or streamed, and the result object
 * each writes; a failure is recorded in the call, the first one wins.
 */
#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "cli.h"
#include "mcp-internal.h"
#include "mcp.h"

/* An NDJSON line of the exec stream is a base64 chunk of output: far
 * below this; a longer one is a broken stream. */
#define MAX_STREAM_LINE (8u << 20)
#define MAX_ERROR_BODY (64u << 10)

/* ------------------------------------------------------- tool calls */

static void fail(struct mcp_call *c, int status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void fail(struct mcp_call *c, int status, const char *code, const char *fmt, ...)
{
	struct buf b;
	va_list ap;

	if (c->failed)
		return;   /* the first failure is the one to report */
	buf_init(&b);
	va_start(ap, fmt);
	buf_vprintf(&b, fmt, ap);
	va_end(ap);
	c->failed = true;
	c->status = status;
	c->code = xstrdup(code);
	c->message = buf_steal(&b);
}

/* An error answer: {"error":{"code","message"}} when the server sent one. */
static void fail_answer(struct mcp_call *c, int status, const char *body, size_t len)
{
	json *j = body && len ? json_parse(body, len, NULL) : NULL;
	const json *e = j ? json_get(j, "error") : NULL;
	const char *code = e ? json_get_str(e, "code") : NULL;
	const char *msg = e ? json_get_str(e, "message") : NULL;

	if (code)
		fail(c, status, code, "%s", msg ? msg : code);
	else
		fail(c, status, "http_error", "the server answered HTTP %d", status);
	json_free(j);
}

static void fail_transport(struct mcp_call *c, const err_t *err)
{
	fail(c, 0, "unavailable", "cannot reach the Airlock API: %s", err->msg[0] ? err->msg : "?");
}

/* Levels of nesting of v (a scalar is 1). */
static int depth_of(const json *v)
{
	int d = 0;

	for (size_t i = 0; (v->type == JSON_OBJ || v->type == JSON_ARR) && i < v->n; i++) {
		int k = depth_of(v->items[i]);
		if (k > d)
			d = k;
	}
	return d + 1;
}

/* An answer's values go 3 levels down in ours (message, result,
 * structuredContent): past this, the client's parser (ours too) could
 * refuse what we send. The API's answers are far shallower. */
#define MAX_ANSWER_DEPTH (JSON_MAX_DEPTH - 4)

/* One request with a whole answer. Returns true on 2xx, with *out the parsed
 * JSON answer (NULL for an empty body) when out is not NULL. */
static bool api(struct mcp_call *c, const char *method, const char *target, const char *ctype,
		const void *body, size_t len, json **out)
{
	struct http_resp resp;
	err_t err = { 0 };
	bool ok = false;

	if (out)
		*out = NULL;
	memset(&resp, 0, sizeof(resp));
	if (c->s->t.request(c->s->t.arg, method, target, ctype, body, len, &resp, &err) < 0) {
		fail_transport(c, &err);
	} else if (resp.status < 200 || resp.status > 299) {
		fail_answer(c, resp.status, resp.body.data, resp.body.len);
	} else if (out && resp.body.len) {
		*out = json_parse(resp.body.data, resp.body.len, &err);
		if (*out && (*out)->type == JSON_OBJ && depth_of(*out) <= MAX_ANSWER_DEPTH) {
			ok = true;
		} else {
			json_free(*out);
			*out = NULL;
			fail(c, resp.status, "bad_response",
			     "the server's answer is not a JSON object (or nests too deep)");
		}
	} else {
		ok = true;
	}
	http_resp_free(&resp);
	return ok;
}

static bool api_json(struct mcp_call *c, const char *method, const char *target, const char *body,
		     json **out)
{
	return api(c, method, target, body ? "application/json" : NULL, body, body ? strlen(body) : 0,
		   out);
}

static const char *arg_str(struct mcp_call *c, const char *name)
{
	return json_get_str(c->args, name);
}

/* "/v1/sandboxes/<sandbox><suffix>"; caller owns. */
static char *sbx_target(struct mcp_call *c, const char *suffix)
{
	_cleanup_free_ char *id = cli_escape(arg_str(c, "sandbox"));

	return xasprintf("/v1/sandboxes/%s%s", id, suffix);
}

/* Copy the named fields of obj (those present) into the result. */
static void copy_fields(struct mcp_call *c, const json *obj, const char *const *names)
{
	for (size_t i = 0; i < obj->n; i++) {
		bool want = !names;
		for (const char *const *n = names; n && *n && !want; n++)
			want = strcmp(*n, obj->keys[i]) == 0;
		if (want) {
			jw_key(&c->w, obj->keys[i]);
			jw_value(&c->w, obj->items[i]);
		}
	}
}

/* Add the argument `from` to a body under the name `to`, when given. */
static void body_arg(struct mcp_call *c, struct jw *w, const char *from, const char *to)
{
	const json *v = json_get(c->args, from);

	if (v) {
		jw_key(w, to);
		jw_value(w, v);
	}
}

void mcp_run_create(struct mcp_call *c)
{
	static const char *const keep[] = { "id", "state", "template", "backend", NULL };
	_cleanup_(buf_free) struct buf b = { 0 };
	json *resp = NULL;
	struct jw w;

	jw_init(&w, &b);
	jw_obj(&w);
	body_arg(c, &w, "template", "template");
	body_arg(c, &w, "backend", "backend");
	body_arg(c, &w, "env", "env");
	body_arg(c, &w, "metadata", "metadata");
	body_arg(c, &w, "network", "network");
	body_arg(c, &w, "ttl", "timeout_s");
	jw_end(&w);
	if (api_json(c, "POST", "/v1/sandboxes", b.data, &resp) && resp)
		copy_fields(c, resp, keep);
	json_free(resp);
}

void mcp_run_list(struct mcp_call *c)
{
	static const char *const params[] = { "state", "template", "next_token", NULL };
	_cleanup_(buf_free) struct buf t = { 0 };
	json *resp = NULL;

	buf_adds(&t, "/v1/sandboxes");
	for (const char *const *p = params; *p; p++) {
		const char *v = arg_str(c, *p);
		if (v) {
			_cleanup_free_ char *e = cli_escape(v);
			buf_printf(&t, "%c%s=%s", t.len > 13 ? '&' : '?', *p, e);
		}
	}
	if (json_get(c->args, "limit"))
		buf_printf(&t, "%climit=%lld", t.len > 13 ? '&' : '?',
			   (long long)json_get_int(c->args, "limit", 100, NULL));
	if (api_json(c, "GET", t.data, NULL, &resp) && resp)
		copy_fields(c, resp, NULL);
	json_free(resp);
}

void mcp_run_delete(struct mcp_call *c)
{
	_cleanup_free_ char *target = sbx_target(c, "");

	if (api(c, "DELETE", target, NULL, NULL, 0, NULL)) {
		jw_key(&c->w, "id");
		jw_str(&c->w, arg_str(c, "sandbox"));
		jw_key(&c->w, "deleted");
		jw_bool(&c->w, true);
	}
}

void mcp_run_snapshot(struct mcp_call *c)
{
	_cleanup_free_ char *target = sbx_target(c, "/snapshots");
	_cleanup_(buf_free) struct buf b = { 0 };
	json *resp = NULL;
	struct jw w;

	jw_init(&w, &b);
	jw_obj(&w);
	body_arg(c, &w, "name", "name");
	body_arg(c, &w, "kind", "kind");
	jw_end(&w);
	if (api_json(c, "POST", target, b.data, &resp) && resp)
		copy_fields(c, resp, NULL);
	json_free(resp);
}

void mcp_run_snapshot_list(struct mcp_call *c)
{
	_cleanup_free_ char *target = sbx_target(c, "/snapshots");
	json *resp = NULL;

	if (api_json(c, "GET", target, NULL, &resp) && resp)
		copy_fields(c, resp, NULL);
	json_free(resp);
}

void mcp_run_rollback(struct mcp_call *c)
{
	static const char *const keep[] = { "id", "state", NULL };
	_cleanup_free_ char *target = sbx_target(c, "/rollback");
	_cleanup_(buf_free) struct buf b = { 0 };
	json *resp = NULL;
	struct jw w;

	jw_init(&w, &b);
	jw_obj(&w);
	body_arg(c, &w, "snapshot", "snapshot");
	jw_end(&w);
	if (api_json(c, "POST", target, b.data, &resp) && resp) {
		copy_fields(c, resp, keep);
		jw_key(&c->w, "snapshot");
		jw_str(&c->w, arg_str(c, "snapshot"));
	}
	json_free(resp);
}

/* "/v1/sandboxes/<sandbox>/<what>?path=<path>"; caller owns. */
static char *files_target(struct mcp_call *c, const char *what)
{
	_cleanup_free_ char *p = cli_escape(arg_str(c, "path"));
	_cleanup_free_ char *suffix = xasprintf("/%s?path=%s", what, p);

	return sbx_target(c, suffix);
}

void mcp_run_list_files(struct mcp_call *c)
{
	_cleanup_free_ char *target = files_target(c, "files/list");
	json *resp = NULL;

	if (api_json(c, "GET", target, NULL, &resp) && resp) {
		jw_key(&c->w, "path");
		jw_str(&c->w, arg_str(c, "path"));
		copy_fields(c, resp, NULL);
	}
	json_free(resp);
}

static bool is_mode(const char *m)
{
	size_t n = strlen(m);

	return n >= 3 && n <= 4 && strspn(m, "01234567") == n;
}

void mcp_run_write(struct mcp_call *c)
{
	_cleanup_free_ char *target = files_target(c, "files");
	const char *content = arg_str(c, "content"), *enc = arg_str(c, "encoding");
	const char *mode = arg_str(c, "mode");
	_cleanup_(buf_free) struct buf data = { 0 };
	const json *cv = json_get(c->args, "content");
	const char *bytes = content;
	size_t len = cv->str_len;

	if (mode && !is_mode(mode)) {
		fail(c, 0, "invalid_argument", "mode must be octal, like \"0644\"");
		return;
	}
	if (enc && strcmp(enc, "base64") == 0) {
		/* base64 as some tools wrap it, in lines: drop the white space */
		_cleanup_(buf_free) struct buf b64 = { 0 };
		for (size_t i = 0; i < cv->str_len; i++)
			if (!strchr(" \t\r\n", content[i]))
				buf_addc(&b64, content[i]);
		if (base64_decode(b64.data ? b64.data : "", b64.len, &data) < 0) {
			fail(c, 0, "invalid_argument", "content is not valid base64");
			return;
		}
		bytes = data.data ? data.data : "";
		len = data.len;
	}
	if (len > MCP_WRITE_MAX) {
		fail(c, 0, "body_too_large", "the content is larger than the 16 MiB limit");
		return;
	}
	if (mode) {
		char *t = xasprintf("%s&mode=%s", target, mode);
		free(target);
		target = t;
	}
	if (api(c, "PUT", target, "application/octet-stream", bytes, len, NULL)) {
		jw_key(&c->w, "path");
		jw_str(&c->w, arg_str(c, "path"));
		jw_key(&c->w, "size");
		jw_uint(&c->w, len);
	}
}

/* --- streamed answers: files_read and exec --- */

struct stream {
	struct mcp_call *c;
	int status;
	bool ok;
	struct buf errbody;   /* a non-2xx answer, up to MAX_ERROR_BODY */
	bool stopped;         /* we ended the request on purpose */
};

static int stream_head(struct stream *st, const struct http_resp *head)
{
	st->status = head->status;
	st->ok = head->status >= 200 && head->status <= 299;
	return 0;
}

/* Keep an error answer's body (bounded); true when the data was that. */
static bool stream_error_data(struct stream *st, const void *p, size_t n)
{
	size_t room = MAX_ERROR_BODY - st->errbody.len;

	if (st->ok)
		return false;
	buf_add(&st->errbody, p, n < room ? n : room);
	return true;
}

/* After the request: record a failure of the stream itself. Returns true
 * when the answer was a 2xx that arrived (whole, or until we stopped). */
static bool stream_end(struct stream *st, int r, const err_t *err)
{
	if (r < 0 && !st->status) {
		fail_transport(st->c, err);
		return false;
	}
	if (!st->ok) {
		fail_answer(st->c, st->status, st->errbody.data, st->errbody.len);
		return false;
	}
	if (r < 0 && !st->stopped) {
		fail(st->c, st->status, "unavailable", "the connection broke: %s", err->msg);
		return false;
	}
	return !st->c->failed;
}

struct read_stream {
	struct stream st;
	struct buf data;
	size_t max;
	bool truncated;
};

static int read_head(void *arg, const struct http_resp *head)
{
	return stream_head(arg, head);
}

static int read_data(void *arg, const void *p, size_t n)
{
	struct read_stream *rs = arg;
	size_t room = rs->max - rs->data.len;

	if (stream_error_data(&rs->st, p, n))
		return 0;
	buf_add(&rs->data, p, n < room ? n : room);
	if (n > room) {
		/* longer than wanted: stop reading rather than fetch the rest */
		rs->truncated = true;
		rs->st.stopped = true;
		return 1;
	}
	return 0;
}

void mcp_run_read(struct mcp_call *c)
{
	static const struct http_stream_cbs cbs = { .on_head = read_head, .on_data = read_data };
	_cleanup_free_ char *target = files_target(c, "files");
	struct read_stream rs = { .st = { .c = c } };
	err_t err = { 0 };
	int r;

	rs.max = (size_t)json_get_int(c->args, "max_bytes", MCP_READ_MAX, NULL);
	r = c->s->t.stream(c->s->t.arg, "GET", target, NULL, &cbs, &rs, &err);
	if (stream_end(&rs.st, r, &err)) {
		const char *d = rs.data.data ? rs.data.data : "";
		bool text = json_utf8_valid(d, rs.data.len);

		/* a cut may split a character of a text file: end before it */
		for (size_t k = 1; !text && rs.truncated && k <= 3 && k <= rs.data.len; k++)
			if ((text = json_utf8_valid(d, rs.data.len - k)))
				rs.data.len -= k;

		jw_key(&c->w, "path");
		jw_str(&c->w, arg_str(c, "path"));
		jw_key(&c->w, "encoding");
		jw_str(&c->w, text ? "utf-8" : "base64");
		jw_key(&c->w, "content");
		if (text) {
			jw_strn(&c->w, rs.data.data ? rs.data.data : "", rs.data.len);
		} else {
			_cleanup_free_ char *b64 = base64_encode(rs.data.data ? rs.data.data : "", rs.data.len);
			jw_str(&c->w, b64);
		}
		jw_key(&c->w, "size");
		jw_uint(&c->w, rs.data.len);
		jw_key(&c->w, "truncated");
		jw_bool(&c->w, rs.truncated);
	}
	buf_free(&rs.data);
	buf_free(&rs.st.errbody);
}

struct exec_stream {
	struct stream st;
	struct buf line;
	struct buf out[2];      /* stdout, stderr: the first MCP_EXEC_MAX_OUTPUT bytes */
	uint64_t total[2];      /* bytes seen */
	bool truncated[2];
	bool started, exited;
	int64_t pid, exit_code, signal;
	char *reason;
};

static void exec_output(struct exec_stream *es, int which, const json *line)
{
	const char *data = json_get_str(line, "data");
	struct buf bytes;

	buf_init(&bytes);
	if (!data || base64_decode(data, strlen(data), &bytes) < 0) {
		fail(es->st.c, es->st.status, "bad_response", "bad data in the output stream");
	} else {
		size_t room = MCP_EXEC_MAX_OUTPUT - es->out[which].len;
		buf_add(&es->out[which], bytes.data, bytes.len < room ? bytes.len : room);
		if (bytes.len > room)
			es->truncated[which] = true;
		es->total[which] += bytes.len;
	}
	buf_free(&bytes);
}

/* One NDJSON line of the exec stream. Returns non-zero to stop. */
static int exec_line(struct exec_stream *es, const char *p, size_t n)
{
	json *j = json_parse(p, n, NULL);
	const char *type = j ? json_get_str(j, "type") : NULL;

	if (!type) {
		json_free(j);
		fail(es->st.c, es->st.status, "bad_response", "invalid line in the output stream");
		return 1;
	}
	if (strcmp(type, "start") == 0) {
		es->started = true;
		es->pid = json_get_int(j, "pid", -1, NULL);
	} else if (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0) {
		exec_output(es, type[3] == 'e', j);
	} else if (strcmp(type, "dropped") == 0) {
		const char *s = json_get_str(j, "stream");
		es->truncated[s && strcmp(s, "stderr") == 0] = true;
	} else if (strcmp(type, "exit") == 0) {
		const json *sig = json_get(j, "signal");
		const char *reason = json_get_str(j, "reason");
		es->exited = true;
		es->signal = sig && sig->type == JSON_NUM && sig->is_int ? sig->i : -1;
		es->exit_code = es->signal >= 0 ? 128 + es->signal : json_get_int(j, "exit_code", -1, NULL);
		if (reason) {
			free(es->reason);
			es->reason = xstrdup(reason);
		}
	} else if (strcmp(type, "error") == 0) {
		const json *e = json_get(j, "error");
		const char *code = e ? json_get_str(e, "code") : NULL;
		const char *msg = e ? json_get_str(e, "message") : NULL;
		fail(es->st.c, es->st.status, code ? code : "internal", "%s",
		     msg ? msg : "the process failed");
	}
	/* other types: newer servers may add some */
	json_free(j);
	return es->st.c->failed;
}

static int exec_head(void *arg, const struct http_resp *head)
{
	return stream_head(arg, head);
}

static int exec_data(void *arg, const void *p, size_t n)
{
	struct exec_stream *es = arg;
	const char *s = p, *end = s + n;

	if (stream_error_data(&es->st, p, n))
		return 0;
	while (s < end) {
		const char *nl = memchr(s, '\n', (size_t)(end - s));
		size_t take = (size_t)((nl ? nl : end) - s);

		if (es->line.len + take > MAX_STREAM_LINE) {
			fail(es->st.c, es->st.status, "bad_response", "a line of the output stream is too long");
			return 1;
		}
		buf_add(&es->line, s, take);
		if (!nl)
			break;
		s = nl + 1;
		if (es->line.len && exec_line(es, es->line.data, es->line.len))
			return 1;
		buf_reset(&es->line);
	}
	return 0;
}

static void exec_body(struct mcp_call *c, struct buf *b)
{
	const json *cmd = json_get(c->args, "cmd");
	struct jw w;

	jw_init(&w, b);
	jw_obj(&w);
	jw_key(&w, "cmd");
	if (cmd->type == JSON_STR) {
		jw_arr(&w);
		jw_str(&w, "sh");
		jw_str(&w, "-c");
		jw_strn(&w, cmd->str, cmd->str_len);
		jw_end(&w);
	} else {
		jw_value(&w, cmd);
	}
	body_arg(c, &w, "cwd", "cwd");
	body_arg(c, &w, "env", "env");
	/* The server answers one request at a time: a command that never ends
	 * would block every later call, so there is a default limit. */
	jw_key(&w, "timeout_s");
	jw_int(&w, json_get_int(c->args, "timeout_s", 600, NULL));
	jw_end(&w);
}

void mcp_run_exec(struct mcp_call *c)
{
	static const struct http_stream_cbs cbs = { .on_head = exec_head, .on_data = exec_data };
	static const char *const names[] = { "stdout", "stderr" };
	_cleanup_free_ char *target = sbx_target(c, "/exec");
	_cleanup_(buf_free) struct buf body = { 0 };
	struct exec_stream es = { .st = { .c = c }, .pid = -1, .exit_code = -1, .signal = -1 };
	err_t err = { 0 };
	int r;

	exec_body(c, &body);
	r = c->s->t.stream(c->s->t.arg, "POST", target, body.data, &cbs, &es, &err);
	if (stream_end(&es.st, r, &err)) {
		if (es.line.len && !es.exited)
			exec_line(&es, es.line.data, es.line.len);   /* a last line without '\n' */
		if (!es.exited && es.started)
			fail(c, es.st.status, "unavailable",
			     "the output stream ended before the process (pid %lld) exited",
			     (long long)es.pid);
		else if (!es.exited)
			fail(c, es.st.status, "unavailable",
			     "the output stream ended before the process started");
	}
	if (!c->failed) {
		for (int i = 0; i < 2; i++) {
			_cleanup_free_ char *k = xasprintf("%s_truncated", names[i]);
			jw_key(&c->w, names[i]);
			jw_strn_lossy(&c->w, es.out[i].data ? es.out[i].data : "", es.out[i].len);
			jw_key(&c->w, k);
			jw_bool(&c->w, es.truncated[i]);
		}
		jw_key(&c->w, "exit_code");
		jw_int(&c->w, es.exit_code);
		if (es.signal >= 0) {
			jw_key(&c->w, "signal");
			jw_int(&c->w, es.signal);
		}
		if (es.reason) {
			jw_key(&c->w, "reason");
			jw_str_lossy(&c->w, es.reason);
		}
		jw_key(&c->w, "pid");
		jw_int(&c->w, es.pid);
	}
	free(es.reason);
	buf_free(&es.line);
	buf_free(&es.out[0]);
	buf_free(&es.out[1]);
	buf_free(&es.st.errbody);
}

/* --- run_code: a cell of the code interpreter --- */

/* What run_code keeps of a cell: each text format of a result up to
 * MCP_CODE_MAX_TEXT, images (PNG, JPEG) up to MCP_CODE_MAX_IMAGES of at
 * most MCP_CODE_MAX_IMAGE base64 bytes each; what is past that is counted
 * as dropped. The lines come from the sandbox: json.h parses them. */
#define MCP_CODE_MAX_TEXT (64u << 10)
#define MCP_CODE_MAX_IMAGES 8
#define MCP_CODE_MAX_IMAGE (4u << 20)

struct code_stream {
	struct stream st;
	struct buf line;
	struct buf out[2];      /* stdout, stderr text: the first MCP_EXEC_MAX_OUTPUT bytes */
	bool truncated[2];
	struct buf results;     /* the results array's items, JSON, comma-separated */
	size_t n_results, dropped_images;
	struct buf error;       /* the error object, JSON; empty: none */
	int64_t count;
	bool ended, unexpected;
};

static void code_text(struct code_stream *cs, int which, const json *j)
{
	const char *t = json_get_str(j, "text");
	size_t n = t ? strlen(t) : 0, room = MCP_EXEC_MAX_OUTPUT - cs->out[which].len;

	buf_add(&cs->out[which], t ? t : "", n < room ? n : room);
	if (n > room)
		cs->truncated[which] = true;
}

static void code_result(struct code_stream *cs, const json *j)
{
	static const char *const texts[] = { "text", "markdown", "html", "latex", "svg", NULL };
	static const char *const images[][2] = { { "png", "image/png" }, { "jpeg", "image/jpeg" } };
	struct mcp_call *c = cs->st.c;
	struct buf item;
	struct jw w;

	buf_init(&item);
	jw_init(&w, &item);
	jw_obj(&w);
	for (const char *const *k = texts; *k; k++) {
		const json *v = json_get(j, *k);
		if (v && v->type == JSON_STR) {
			jw_key(&w, *k);
			jw_strn_lossy(&w, v->str, v->str_len < MCP_CODE_MAX_TEXT ? v->str_len : MCP_CODE_MAX_TEXT);
		}
	}
	const json *data = json_get(j, "json");
	if (data && depth_of(data) <= MAX_ANSWER_DEPTH - 2) {
		jw_key(&w, "json");
		jw_value(&w, data);
	}
	for (size_t i = 0; i < ARRAY_SIZE(images); i++) {
		const json *v = json_get(j, images[i][0]);
		if (!v || v->type != JSON_STR)
			continue;
		jw_key(&w, images[i][0]);
		struct buf bytes, clean;
		bool ok = false;
		buf_init(&bytes);
		buf_init(&clean);
		/* Jupyter's base64 may come in lines: the image content gets it without */
		for (size_t k = 0; k < v->str_len; k++)
			if (!strchr(" \t\r\n", v->str[k]))
				buf_addc(&clean, v->str[k]);
		buf_addc(&clean, '\0');
		clean.len--;
		if (c->n_images < MCP_CODE_MAX_IMAGES && clean.len <= MCP_CODE_MAX_IMAGE)
			ok = base64_decode(clean.data, clean.len, &bytes) == 0 && bytes.len;
		buf_free(&bytes);
		if (ok) {
			/* the image itself goes in an image content; here its index */
			c->images = xrealloc(c->images, sizeof(*c->images) * (c->n_images + 1));
			c->images[c->n_images].mime = images[i][1];
			c->images[c->n_images].data = buf_steal(&clean);
			jw_str(&w, "(image content)");
			c->n_images++;
		} else {
			jw_str(&w, "(dropped: too many or too large, or not base64)");
			cs->dropped_images++;
		}
		buf_free(&clean);
	}
	jw_key(&w, "is_main_result");
	jw_bool(&w, json_get_bool(j, "is_main_result", false, NULL));
	jw_end(&w);
	if (cs->n_results++)
		buf_addc(&cs->results, ',');
	buf_add(&cs->results, item.data, item.len);
	buf_free(&item);
}

static void code_error(struct code_stream *cs, const json *j)
{
	const json *tb = json_get(j, "traceback");
	struct jw w;

	buf_reset(&cs->error);
	jw_init(&w, &cs->error);
	jw_obj(&w);
	jw_key(&w, "name");
	jw_str_lossy(&w, json_get_str(j, "name") ? json_get_str(j, "name") : "");
	jw_key(&w, "value");
	jw_str_lossy(&w, json_get_str(j, "value") ? json_get_str(j, "value") : "");
	jw_key(&w, "traceback");
	if (tb && tb->type == JSON_STR) {
		jw_strn_lossy(&w, tb->str, tb->str_len < MCP_CODE_MAX_TEXT ? tb->str_len : MCP_CODE_MAX_TEXT);
	} else {
		struct buf t;
		buf_init(&t);
		for (size_t i = 0; tb && tb->type == JSON_ARR && i < tb->n; i++)
			if (tb->items[i]->type == JSON_STR && t.len < MCP_CODE_MAX_TEXT) {
				buf_add(&t, tb->items[i]->str, tb->items[i]->str_len);
				buf_addc(&t, '\n');
			}
		jw_strn_lossy(&w, t.data ? t.data : "", t.len < MCP_CODE_MAX_TEXT ? t.len : MCP_CODE_MAX_TEXT);
		buf_free(&t);
	}
	jw_end(&w);
}

/* One NDJSON line of the code stream. Returns non-zero to stop. */
static int code_line(struct code_stream *cs, const char *p, size_t n)
{
	json *j = json_parse(p, n, NULL);
	const char *type = j && j->type == JSON_OBJ ? json_get_str(j, "type") : NULL;
	const json *e;

	if (!type) {
		json_free(j);
		fail(cs->st.c, cs->st.status, "bad_response", "invalid line in the code stream");
		return 1;
	}
	if (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0) {
		code_text(cs, type[3] == 'e', j);
	} else if (strcmp(type, "result") == 0) {
		code_result(cs, j);
	} else if (strcmp(type, "error") == 0 && (e = json_get(j, "error")) && e->type == JSON_OBJ) {
		/* Airlock's own error line, not the cell's */
		const char *code = json_get_str(e, "code"), *msg = json_get_str(e, "message");
		fail(cs->st.c, cs->st.status, code ? code : "internal", "%s", msg ? msg : "the cell failed");
	} else if (strcmp(type, "error") == 0) {
		code_error(cs, j);
	} else if (strcmp(type, "number_of_executions") == 0) {
		cs->count = json_get_int(j, "execution_count", -1, NULL);
	} else if (strcmp(type, "end_of_execution") == 0) {
		cs->ended = true;
	} else if (strcmp(type, "unexpected_end_of_execution") == 0) {
		fail(cs->st.c, cs->st.status, "unavailable", "the code service ended the cell unexpectedly");
	}
	json_free(j);
	return cs->st.c->failed || cs->ended;
}

static int code_head(void *arg, const struct http_resp *head)
{
	return stream_head(arg, head);
}

static int code_data(void *arg, const void *p, size_t n)
{
	struct code_stream *cs = arg;
	const char *s = p, *end = s + n;

	if (stream_error_data(&cs->st, p, n))
		return 0;
	while (s < end) {
		const char *nl = memchr(s, '\n', (size_t)(end - s));
		size_t take = (size_t)((nl ? nl : end) - s);

		if (cs->line.len + take > MAX_STREAM_LINE) {
			fail(cs->st.c, cs->st.status, "bad_response", "a line of the code stream is too long");
			return 1;
		}
		buf_add(&cs->line, s, take);
		if (!nl)
			break;
		s = nl + 1;
		if (cs->line.len && code_line(cs, cs->line.data, cs->line.len)) {
			cs->st.stopped = true;
			return 1;
		}
		buf_reset(&cs->line);
	}
	return 0;
}

void mcp_run_code(struct mcp_call *c)
{
	static const struct http_stream_cbs cbs = { .on_head = code_head, .on_data = code_data };
	static const char *const names[] = { "stdout", "stderr" };
	_cleanup_free_ char *target = sbx_target(c, "/code");
	_cleanup_(buf_free) struct buf body = { 0 };
	struct code_stream cs = { .st = { .c = c }, .count = -1 };
	err_t err = { 0 };
	struct jw w;
	int r;

	jw_init(&w, &body);
	jw_obj(&w);
	body_arg(c, &w, "code", "code");
	body_arg(c, &w, "language", "language");
	body_arg(c, &w, "context_id", "context_id");
	body_arg(c, &w, "env", "env_vars");
	/* one call at a time: a cell that never ends would block the next ones */
	jw_key(&w, "timeout_ms");
	jw_int(&w, json_get_int(c->args, "timeout_s", 600, NULL) * 1000);
	jw_end(&w);

	r = c->s->t.stream(c->s->t.arg, "POST", target, body.data, &cbs, &cs, &err);
	if (stream_end(&cs.st, r, &err)) {
		if (cs.line.len && !cs.ended)
			code_line(&cs, cs.line.data, cs.line.len);   /* a last line without '\n' */
		if (!cs.ended)
			fail(c, cs.st.status, "unavailable", "the code stream ended before the cell did");
	}
	if (!c->failed) {
		for (int i = 0; i < 2; i++) {
			_cleanup_free_ char *k = xasprintf("%s_truncated", names[i]);
			jw_key(&c->w, names[i]);
			jw_strn_lossy(&c->w, cs.out[i].data ? cs.out[i].data : "", cs.out[i].len);
			jw_key(&c->w, k);
			jw_bool(&c->w, cs.truncated[i]);
		}
		jw_key(&c->w, "results");
		buf_addc(&cs.results, '\0');
		cs.results.len--;
		_cleanup_free_ char *arr = xasprintf("[%s]", cs.results.data);
		jw_raw(&c->w, arr);
		if (cs.dropped_images) {
			jw_key(&c->w, "images_dropped");
			jw_uint(&c->w, cs.dropped_images);
		}
		jw_key(&c->w, "error");
		if (cs.error.len) {
			buf_addc(&cs.error, '\0');
			jw_raw(&c->w, cs.error.data);
		} else {
			jw_null(&c->w);
		}
		jw_key(&c->w, "execution_count");
		if (cs.count >= 0)
			jw_int(&c->w, cs.count);
		else
			jw_null(&c->w);
	}
	buf_free(&cs.line);
	buf_free(&cs.out[0]);
	buf_free(&cs.out[1]);
	buf_free(&cs.results);
	buf_free(&cs.error);
	buf_free(&cs.st.errbody);
}
