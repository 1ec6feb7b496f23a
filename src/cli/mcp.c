/* mcp.c - the protocol core of `airlock mcp` (see mcp.h): JSON-RPC 2.0
 * messages in, answers out, tools that call the Airlock API.
 *
 * Each tool is described once, in the tables below: its arguments' names,
 * types and descriptions give both the JSON Schema that tools/list shows
 * and the checks tools/call makes before any request leaves. A bad argument
 * is a JSON-RPC error (-32602); an error answer of the API is a tool result
 * with isError, so the agent reads what went wrong.
 */
#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "cli.h"
#include "mcp.h"

/* JSON-RPC 2.0 error codes */
#define RPC_PARSE_ERROR -32700
#define RPC_INVALID_REQUEST -32600
#define RPC_METHOD_NOT_FOUND -32601
#define RPC_INVALID_PARAMS -32602

/* An NDJSON line of the exec stream is a base64 chunk of output: far
 * below this; a longer one is a broken stream. */
#define MAX_STREAM_LINE (8u << 20)
#define MAX_ERROR_BODY (64u << 10)

/* The protocol versions this server speaks; the first is its own. */
static const char *const protocol_versions[] = { MCP_PROTOCOL_VERSION, "2025-03-26",
						 "2024-11-05", NULL };

/* ------------------------------------------------------------ messages */

static void put_id(struct jw *w, const json *id)
{
	jw_key(w, "id");
	if (id)
		jw_value(w, id);
	else
		jw_null(w);
}

static char *rpc_error(struct mcp_server *s, const json *id, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static char *rpc_error(struct mcp_server *s, const json *id, int code, const char *fmt, ...)
{
	_cleanup_free_ char *msg = NULL;
	struct buf b;
	struct jw w;
	va_list ap;

	va_start(ap, fmt);
	buf_init(&b);
	buf_vprintf(&b, fmt, ap);
	va_end(ap);
	msg = buf_steal(&b);
	if (s->log)
		fprintf(s->log, "airlock mcp: error %d: %s\n", code, msg);
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "jsonrpc");
	jw_str(&w, "2.0");
	put_id(&w, id);
	jw_key(&w, "error");
	jw_obj(&w);
	jw_key(&w, "code");
	jw_int(&w, code);
	jw_key(&w, "message");
	jw_str_lossy(&w, msg);   /* may quote an agent's bytes */
	jw_end(&w);
	jw_end(&w);
	return buf_steal(&b);
}

/* {"jsonrpc":"2.0","id":..,"result":<result>} around an object's JSON text. */
static char *rpc_result(const json *id, const char *result)
{
	struct buf b;
	struct jw w;

	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "jsonrpc");
	jw_str(&w, "2.0");
	put_id(&w, id);
	jw_key(&w, "result");
	jw_raw(&w, result);
	jw_end(&w);
	return buf_steal(&b);
}

/* --------------------------------------------------------- tool tables */

enum arg_type {
	A_STR,      /* a string */
	A_ID,       /* a sandbox or snapshot id or name: [A-Za-z0-9_.-], no leading '.' */
	A_INT,      /* an integer >= 0 */
	A_STRMAP,   /* an object of strings */
	A_NETWORK,  /* "allow-all", "deny-all" or a policy object */
	A_CMD,      /* a string (run by sh -c) or an array of strings */
};

struct arg_spec {
	const char *name;
	enum arg_type type;
	bool required;
	const char *desc;
	const char *const *values;   /* A_STR: the allowed values (NULL-terminated), or NULL */
	long long max;               /* A_INT: the largest value (0: 2^31) */
};

struct call;
struct tool {
	const char *name;
	const char *title;
	const char *desc;
	const struct arg_spec *args;   /* ends with a zero entry */
	bool read_only, destructive;
	void (*run)(struct call *c);
};

#define ARG_SANDBOX                                                                  \
	{ "sandbox", A_ID, true, "The sandbox id (as sandbox_create or sandbox_list give it).", \
	  NULL, 0 }

static const char *const kinds[] = { "disk", "full", NULL };
static const char *const encodings[] = { "utf-8", "base64", NULL };
/* docs/openapi.yaml's sandbox states */
static const char *const states[] = {
	"creating", "starting", "running", "pausing", "paused", "resuming", "suspending",
	"suspended", "restoring", "rolling_back", "stopping", "deleting", "deleted", "failed",
	"lost", NULL,
};

static const struct arg_spec create_args[] = {
	{ "template", A_STR, false,
	  "Template name (default \"debian\"; `airlock template ls` lists them).", NULL, 0 },
	{ "backend", A_STR, false,
	  "\"ns\" (Linux namespaces, fast) or \"vm\" (a microVM); default: the node's default.",
	  NULL, 0 },
	{ "env", A_STRMAP, false, "Environment variables every command in the sandbox gets.", NULL,
	  0 },
	{ "metadata", A_STRMAP, false, "String labels, returned as is and usable as list filters.",
	  NULL, 0 },
	{ "network", A_NETWORK, false,
	  "Egress policy: \"allow-all\", \"deny-all\" or a policy object such as "
	  "{\"allow\":{\"domains\":[\"pypi.org\"]}}.",
	  NULL, 0 },
	{ "ttl", A_INT, false,
	  "Seconds of running time after which the sandbox is deleted (0: never).", NULL, 0 },
	{ 0 },
};
static const struct arg_spec list_args[] = {
	{ "state", A_STR, false, "Only sandboxes in this state.", states, 0 },
	{ "template", A_STR, false, "Only sandboxes of this template.", NULL, 0 },
	{ "limit", A_INT, false, "Page size, 1..1000 (default 100).", NULL, 1000 },
	{ "next_token", A_STR, false, "The next_token of the previous page.", NULL, 0 },
	{ 0 },
};
static const struct arg_spec sandbox_args[] = { ARG_SANDBOX, { 0 } };
static const struct arg_spec exec_args[] = {
	ARG_SANDBOX,
	{ "cmd", A_CMD, true,
	  "The command: a string is run by `sh -c`; an array is the argv, run as is.", NULL, 0 },
	{ "cwd", A_STR, false, "Working directory.", NULL, 0 },
	{ "env", A_STRMAP, false, "Extra environment variables.", NULL, 0 },
	{ "timeout_s", A_INT, false,
	  "Kill the command after this many seconds (default 600, 0: no limit).", NULL, 0 },
	{ 0 },
};
static const struct arg_spec read_args[] = {
	ARG_SANDBOX,
	{ "path", A_STR, true, "Absolute path of the file in the sandbox.", NULL, 0 },
	{ "max_bytes", A_INT, false, "Return at most this many bytes (default and limit 4 MiB).",
	  NULL, MCP_READ_MAX },
	{ 0 },
};
static const struct arg_spec write_args[] = {
	ARG_SANDBOX,
	{ "path", A_STR, true,
	  "Absolute path of the file in the sandbox; missing parent directories are created.",
	  NULL, 0 },
	{ "content", A_STR, true,
	  "The new content of the whole file (at most 16 MiB once decoded).", NULL, 0 },
	{ "encoding", A_STR, false,
	  "How content is written: \"utf-8\" text (default) or \"base64\" for binary data.",
	  encodings, 0 },
	{ "mode", A_STR, false, "Octal permission bits such as \"0755\" (default 0644).", NULL, 0 },
	{ 0 },
};
static const struct arg_spec list_files_args[] = {
	ARG_SANDBOX,
	{ "path", A_STR, true, "Absolute path of a directory in the sandbox.", NULL, 0 },
	{ 0 },
};
static const struct arg_spec snap_args[] = {
	ARG_SANDBOX,
	{ "name", A_ID, false,
	  "Snapshot name, [a-z0-9][a-z0-9._-]{0,63}, unique in the sandbox (default: its id).",
	  NULL, 0 },
	{ "kind", A_STR, false,
	  "\"disk\" (default: the files) or \"full\" (memory too; vm backend only).", kinds, 0 },
	{ 0 },
};
static const struct arg_spec rollback_args[] = {
	ARG_SANDBOX,
	{ "snapshot", A_ID, true, "The snapshot's id or name.", NULL, 0 },
	{ 0 },
};

static void run_create(struct call *c);
static void run_list(struct call *c);
static void run_delete(struct call *c);
static void run_exec(struct call *c);
static void run_read(struct call *c);
static void run_write(struct call *c);
static void run_list_files(struct call *c);
static void run_snapshot(struct call *c);
static void run_snapshot_list(struct call *c);
static void run_rollback(struct call *c);

static const struct tool tools[] = {
	{ "sandbox_create", "Create a sandbox",
	  "Create an isolated Linux sandbox and wait until it is running. Returns its id and "
	  "state; pass the id to the other tools. Delete it with sandbox_delete when done.",
	  create_args, false, false, run_create },
	{ "sandbox_list", "List sandboxes",
	  "List your sandboxes (id, state, template, metadata, ...), oldest first, one page at "
	  "a time.",
	  list_args, true, false, run_list },
	{ "sandbox_delete", "Delete a sandbox",
	  "Delete a sandbox with its files, processes and snapshots.", sandbox_args, false, true,
	  run_delete },
	{ "exec", "Run a command",
	  "Run a command in a sandbox and wait for it to end. Returns stdout, stderr (text; "
	  "invalid UTF-8 shows as U+FFFD) and exit_code (128+signal when it was killed, with "
	  "`signal`). Each stream keeps its first 64 KiB; stdout_truncated/stderr_truncated say "
	  "when more was written.",
	  exec_args, false, false, run_exec },
	{ "files_read", "Read a file",
	  "Read a file of a sandbox. UTF-8 text comes back as is (encoding \"utf-8\"), anything "
	  "else as base64 (encoding \"base64\"). Returns at most max_bytes; `truncated` says when "
	  "the file is longer.",
	  read_args, true, false, run_read },
	{ "files_write", "Write a file",
	  "Replace (or create) a file in a sandbox, atomically. Content is UTF-8 text, or base64 "
	  "with encoding \"base64\".",
	  write_args, false, false, run_write },
	{ "files_list", "List a directory",
	  "List a directory of a sandbox: name, type (file, dir, symlink, other), size, mode and "
	  "mtime of each entry.",
	  list_files_args, true, false, run_list_files },
	{ "snapshot_create", "Snapshot a sandbox",
	  "Take a snapshot of a sandbox's files (kind \"disk\") or of its memory too (\"full\", "
	  "vm only), to come back to later with rollback.",
	  snap_args, false, false, run_snapshot },
	{ "snapshot_list", "List snapshots", "List a sandbox's snapshots, oldest first.", sandbox_args,
	  true, false, run_snapshot_list },
	{ "rollback", "Roll back to a snapshot",
	  "Put a sandbox back to a snapshot: its files become the snapshot's. After a disk "
	  "snapshot every process of the sandbox is ended and it starts afresh.",
	  rollback_args, false, true, run_rollback },
};

static const struct tool *find_tool(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(tools); i++)
		if (strcmp(tools[i].name, name) == 0)
			return &tools[i];
	return NULL;
}

/* --------------------------------------------------------- tools/list */

static void write_arg_schema(struct jw *w, const struct arg_spec *a)
{
	jw_obj(w);
	switch (a->type) {
	case A_STR:
	case A_ID:
		jw_key(w, "type");
		jw_str(w, "string");
		if (a->type == A_ID) {
			jw_key(w, "pattern");
			jw_str(w, "^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$");
		}
		if (a->values) {
			jw_key(w, "enum");
			jw_arr(w);
			for (const char *const *v = a->values; *v; v++)
				jw_str(w, *v);
			jw_end(w);
		}
		break;
	case A_INT:
		jw_key(w, "type");
		jw_str(w, "integer");
		jw_key(w, "minimum");
		jw_int(w, 0);
		jw_key(w, "maximum");
		jw_int(w, a->max ? a->max : 1LL << 31);
		break;
	case A_STRMAP:
		jw_key(w, "type");
		jw_str(w, "object");
		jw_key(w, "additionalProperties");
		jw_obj(w);
		jw_key(w, "type");
		jw_str(w, "string");
		jw_end(w);
		break;
	case A_NETWORK:
		jw_key(w, "type");
		jw_arr(w);
		jw_str(w, "string");
		jw_str(w, "object");
		jw_end(w);
		break;
	case A_CMD:
		jw_key(w, "type");
		jw_arr(w);
		jw_str(w, "string");
		jw_str(w, "array");
		jw_end(w);
		jw_key(w, "items");
		jw_obj(w);
		jw_key(w, "type");
		jw_str(w, "string");
		jw_end(w);
		jw_key(w, "minItems");
		jw_int(w, 1);
		jw_key(w, "minLength");
		jw_int(w, 1);
		break;
	}
	jw_key(w, "description");
	jw_str(w, a->desc);
	jw_end(w);
}

static void write_tool(struct jw *w, const struct tool *t)
{
	jw_obj(w);
	jw_key(w, "name");
	jw_str(w, t->name);
	jw_key(w, "title");
	jw_str(w, t->title);
	jw_key(w, "description");
	jw_str(w, t->desc);
	jw_key(w, "inputSchema");
	jw_obj(w);
	jw_key(w, "type");
	jw_str(w, "object");
	jw_key(w, "properties");
	jw_obj(w);
	for (const struct arg_spec *a = t->args; a->name; a++) {
		jw_key(w, a->name);
		write_arg_schema(w, a);
	}
	jw_end(w);
	jw_key(w, "required");
	jw_arr(w);
	for (const struct arg_spec *a = t->args; a->name; a++)
		if (a->required)
			jw_str(w, a->name);
	jw_end(w);
	jw_key(w, "additionalProperties");
	jw_bool(w, false);
	jw_end(w);
	jw_key(w, "annotations");
	jw_obj(w);
	jw_key(w, "readOnlyHint");
	jw_bool(w, t->read_only);
	jw_key(w, "destructiveHint");
	jw_bool(w, t->destructive);
	jw_key(w, "openWorldHint");
	jw_bool(w, false);
	jw_end(w);
	jw_end(w);
}

static char *tools_list(const json *id)
{
	_cleanup_(buf_free) struct buf b = { 0 };
	struct jw w;

	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "tools");
	jw_arr(&w);
	for (size_t i = 0; i < ARRAY_SIZE(tools); i++)
		write_tool(&w, &tools[i]);
	jw_end(&w);
	jw_end(&w);
	return rpc_result(id, b.data);
}

/* ------------------------------------------------- argument checks */

static bool is_id(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 128 || s[0] == '.')
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
		      ch == '_' || ch == '.' || ch == '-'))
			return false;
	}
	return true;
}

static bool all_strings(const json *v, bool obj)
{
	if (v->type != (obj ? JSON_OBJ : JSON_ARR))
		return false;
	for (size_t i = 0; i < v->n; i++)
		if (v->items[i]->type != JSON_STR)
			return false;
	return true;
}

/* Why v is not a valid `a`, or NULL when it is. */
static const char *arg_problem(const struct arg_spec *a, const json *v)
{
	switch (a->type) {
	case A_STR:
		if (v->type != JSON_STR)
			return "must be a string";
		if (a->required && !v->str[0])
			return "must not be empty";
		if (a->values) {
			for (const char *const *x = a->values; *x; x++)
				if (strcmp(*x, v->str) == 0)
					return NULL;
			return "is not one of the allowed values";
		}
		return NULL;
	case A_ID:
		if (v->type != JSON_STR)
			return "must be a string";
		return is_id(v->str) ? NULL
				     : "must be an id: 1 to 128 of [A-Za-z0-9_.-], not starting with '.'";
	case A_INT:
		if (v->type != JSON_NUM || !v->is_int)
			return "must be an integer";
		if (v->i < 0 || v->i > (a->max ? a->max : 1LL << 31))
			return "is out of range";
		return NULL;
	case A_STRMAP:
		return all_strings(v, true) ? NULL : "must be an object of strings";
	case A_NETWORK:
		return v->type == JSON_STR || v->type == JSON_OBJ ? NULL
								 : "must be a string or an object";
	case A_CMD:
		if (v->type == JSON_STR)
			return v->str[0] ? NULL : "must not be empty";
		if (!all_strings(v, false) || v->n == 0)
			return "must be a string or a non-empty array of strings";
		return NULL;
	}
	return "has an unknown type";
}

/* NULL when args fit the tool, else the message of a -32602 (caller owns). */
static char *check_args(const struct tool *t, const json *args)
{
	for (size_t i = 0; i < args->n; i++) {
		const struct arg_spec *a = t->args;
		while (a->name && strcmp(a->name, args->keys[i]) != 0)
			a++;
		if (!a->name)
			return xasprintf("tool %s has no argument `%s`", t->name, args->keys[i]);
		const char *why = arg_problem(a, args->items[i]);
		if (why)
			return xasprintf("argument `%s` of %s %s", a->name, t->name, why);
	}
	for (const struct arg_spec *a = t->args; a->name; a++)
		if (a->required && !json_get(args, a->name))
			return xasprintf("tool %s needs the argument `%s`", t->name, a->name);
	return NULL;
}

/* ------------------------------------------------------- tool calls */

struct call {
	struct mcp_server *s;
	const struct tool *tool;
	const json *args;
	struct buf out;   /* the result object, written through w */
	struct jw w;
	/* a failure: the API's error, or one of ours */
	bool failed;
	int status;       /* HTTP status; 0 when there was no answer */
	char *code, *message;
};

static void fail(struct call *c, int status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void fail(struct call *c, int status, const char *code, const char *fmt, ...)
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
static void fail_answer(struct call *c, int status, const char *body, size_t len)
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

static void fail_transport(struct call *c, const err_t *err)
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
static bool api(struct call *c, const char *method, const char *target, const char *ctype,
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

static bool api_json(struct call *c, const char *method, const char *target, const char *body,
		     json **out)
{
	return api(c, method, target, body ? "application/json" : NULL, body, body ? strlen(body) : 0,
		   out);
}

static const char *arg_str(struct call *c, const char *name)
{
	return json_get_str(c->args, name);
}

/* "/v1/sandboxes/<sandbox><suffix>"; caller owns. */
static char *sbx_target(struct call *c, const char *suffix)
{
	_cleanup_free_ char *id = cli_escape(arg_str(c, "sandbox"));

	return xasprintf("/v1/sandboxes/%s%s", id, suffix);
}

/* Copy the named fields of obj (those present) into the result. */
static void copy_fields(struct call *c, const json *obj, const char *const *names)
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
static void body_arg(struct call *c, struct jw *w, const char *from, const char *to)
{
	const json *v = json_get(c->args, from);

	if (v) {
		jw_key(w, to);
		jw_value(w, v);
	}
}

static void run_create(struct call *c)
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

static void run_list(struct call *c)
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

static void run_delete(struct call *c)
{
	_cleanup_free_ char *target = sbx_target(c, "");

	if (api(c, "DELETE", target, NULL, NULL, 0, NULL)) {
		jw_key(&c->w, "id");
		jw_str(&c->w, arg_str(c, "sandbox"));
		jw_key(&c->w, "deleted");
		jw_bool(&c->w, true);
	}
}

static void run_snapshot(struct call *c)
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

static void run_snapshot_list(struct call *c)
{
	_cleanup_free_ char *target = sbx_target(c, "/snapshots");
	json *resp = NULL;

	if (api_json(c, "GET", target, NULL, &resp) && resp)
		copy_fields(c, resp, NULL);
	json_free(resp);
}

static void run_rollback(struct call *c)
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
static char *files_target(struct call *c, const char *what)
{
	_cleanup_free_ char *p = cli_escape(arg_str(c, "path"));
	_cleanup_free_ char *suffix = xasprintf("/%s?path=%s", what, p);

	return sbx_target(c, suffix);
}

static void run_list_files(struct call *c)
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

static void run_write(struct call *c)
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
	struct call *c;
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

static void run_read(struct call *c)
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

static void exec_body(struct call *c, struct buf *b)
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

static void run_exec(struct call *c)
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

/* The CallToolResult: the object as JSON text in a text content, and the
 * same object as structuredContent; a failure has isError and names the
 * API's error code. */
static char *call_result(struct call *c)
{
	_cleanup_(buf_free) struct buf b = { 0 };
	_cleanup_(buf_free) struct buf err = { 0 };
	const char *obj = c->out.data;
	struct jw w;

	if (c->failed) {
		struct jw ew;
		jw_init(&ew, &err);
		jw_obj(&ew);
		jw_key(&ew, "error");
		jw_obj(&ew);
		jw_key(&ew, "code");
		jw_str_lossy(&ew, c->code);
		jw_key(&ew, "message");
		jw_str_lossy(&ew, c->message);
		jw_key(&ew, "status");
		if (c->status)
			jw_int(&ew, c->status);
		else
			jw_null(&ew);
		jw_end(&ew);
		jw_end(&ew);
		obj = err.data;
	}
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "content");
	jw_arr(&w);
	jw_obj(&w);
	jw_key(&w, "type");
	jw_str(&w, "text");
	jw_key(&w, "text");
	if (c->failed) {
		_cleanup_free_ char *t =
			c->status ? xasprintf("%s failed: Airlock API error %d %s: %s", c->tool->name,
					      c->status, c->code, c->message)
				  : xasprintf("%s failed: %s: %s", c->tool->name, c->code, c->message);
		jw_str_lossy(&w, t);
	} else {
		jw_str(&w, obj);
	}
	jw_end(&w);
	jw_end(&w);
	jw_key(&w, "structuredContent");
	jw_raw(&w, obj);
	jw_key(&w, "isError");
	jw_bool(&w, c->failed);
	jw_end(&w);
	return buf_steal(&b);
}

static char *tools_call(struct mcp_server *s, const json *id, const json *params)
{
	const char *name = params ? json_get_str(params, "name") : NULL;
	const json *args = params ? json_get(params, "arguments") : NULL;
	_cleanup_free_ char *why = NULL, *result = NULL;
	json *empty = NULL;
	const struct tool *t;
	struct call c = { .s = s };

	if (!name)
		return rpc_error(s, id, RPC_INVALID_PARAMS, "tools/call needs params.name, a string");
	if (!(t = find_tool(name)))
		return rpc_error(s, id, RPC_INVALID_PARAMS, "unknown tool `%s`", name);
	if (args && args->type == JSON_NULL)
		args = NULL;
	if (args && args->type != JSON_OBJ)
		return rpc_error(s, id, RPC_INVALID_PARAMS, "params.arguments must be an object");
	if (!args)
		args = empty = json_parse("{}", 2, NULL);
	if ((why = check_args(t, args))) {
		json_free(empty);
		return rpc_error(s, id, RPC_INVALID_PARAMS, "%s", why);
	}
	c.tool = t;
	c.args = args;
	buf_init(&c.out);
	jw_init(&c.w, &c.out);
	jw_obj(&c.w);
	t->run(&c);
	jw_end(&c.w);
	if (s->log) {
		if (c.failed && c.status)
			fprintf(s->log, "airlock mcp: %s: %s (%s, HTTP %d)\n", t->name, c.message, c.code,
				c.status);
		else if (c.failed)
			fprintf(s->log, "airlock mcp: %s: %s (%s)\n", t->name, c.message, c.code);
		else
			fprintf(s->log, "airlock mcp: %s: ok\n", t->name);
	}
	result = call_result(&c);
	buf_free(&c.out);
	free(c.code);
	free(c.message);
	json_free(empty);
	return rpc_result(id, result);
}

/* ----------------------------------------------------------- methods */

static char *initialize(struct mcp_server *s, const json *id, const json *params)
{
	const char *asked = params ? json_get_str(params, "protocolVersion") : NULL;
	const char *version = MCP_PROTOCOL_VERSION;
	_cleanup_(buf_free) struct buf b = { 0 };
	struct jw w;

	if (!asked)
		return rpc_error(s, id, RPC_INVALID_PARAMS,
				 "initialize needs params.protocolVersion, a string");
	/* the client's version when we speak it, else ours (the client decides) */
	for (const char *const *v = protocol_versions; *v; v++)
		if (strcmp(*v, asked) == 0)
			version = *v;
	s->initialized = true;
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "protocolVersion");
	jw_str(&w, version);
	jw_key(&w, "capabilities");
	jw_obj(&w);
	jw_key(&w, "tools");
	jw_obj(&w);
	jw_key(&w, "listChanged");
	jw_bool(&w, false);
	jw_end(&w);
	jw_end(&w);
	jw_key(&w, "serverInfo");
	jw_obj(&w);
	jw_key(&w, "name");
	jw_str(&w, "airlock");
	jw_key(&w, "title");
	jw_str(&w, "Airlock sandboxes");
	jw_key(&w, "version");
	jw_str(&w, s->version);
	jw_end(&w);
	jw_key(&w, "instructions");
	jw_str(&w, "Airlock runs untrusted code in isolated Linux sandboxes. Create one with "
		   "sandbox_create, run commands with exec, move files with files_read, files_write "
		   "and files_list, save and restore its state with snapshot_create and rollback, and "
		   "delete it with sandbox_delete when done.");
	jw_end(&w);
	return rpc_result(id, b.data);
}

static bool is_str(const json *v, const char *s)
{
	return v && v->type == JSON_STR && strcmp(v->str, s) == 0;
}

/* The answer to one parsed message, or NULL for none. */
static char *dispatch(struct mcp_server *s, const json *msg)
{
	const json *id, *method, *params;

	if (msg->type == JSON_ARR)
		return rpc_error(s, NULL, RPC_INVALID_REQUEST,
				 "batches are not supported: send one message per line");
	if (msg->type != JSON_OBJ)
		return rpc_error(s, NULL, RPC_INVALID_REQUEST, "a message must be a JSON object");
	id = json_get(msg, "id");
	method = json_get(msg, "method");
	params = json_get(msg, "params");
	if (id && id->type != JSON_STR && !(id->type == JSON_NUM && id->is_int))
		return rpc_error(s, NULL, RPC_INVALID_REQUEST,
				 "id must be a string or an integer");
	if (!method) {
		/* a client's response (we send no requests): nothing to answer */
		if (json_get(msg, "result") || json_get(msg, "error"))
			return NULL;
		return rpc_error(s, id, RPC_INVALID_REQUEST, "the message has no method");
	}
	if (!is_str(json_get(msg, "jsonrpc"), "2.0"))
		return id ? rpc_error(s, id, RPC_INVALID_REQUEST, "jsonrpc must be \"2.0\"") : NULL;
	if (method->type != JSON_STR)
		return id ? rpc_error(s, id, RPC_INVALID_REQUEST, "method must be a string") : NULL;
	if (!id)
		return NULL;   /* a notification (initialized, cancelled, ...): never answered */
	if (params && params->type == JSON_NULL)
		params = NULL;
	if (params && params->type != JSON_OBJ)
		return rpc_error(s, id, RPC_INVALID_PARAMS, "params must be an object");
	if (strcmp(method->str, "initialize") == 0)
		return initialize(s, id, params);
	if (strcmp(method->str, "ping") == 0)
		return rpc_result(id, "{}");
	if (strcmp(method->str, "tools/list") == 0)
		return tools_list(id);
	if (strcmp(method->str, "tools/call") == 0)
		return tools_call(s, id, params);
	return rpc_error(s, id, RPC_METHOD_NOT_FOUND, "method not found: %s", method->str);
}

char *mcp_handle(struct mcp_server *s, const char *msg, size_t len)
{
	err_t err = { 0 };
	json *j;
	char *answer;

	while (len && (msg[len - 1] == '\r' || msg[len - 1] == ' ' || msg[len - 1] == '\t'))
		len--;
	while (len && (msg[0] == ' ' || msg[0] == '\t' || msg[0] == '\r')) {
		msg++;
		len--;
	}
	if (!len)
		return NULL;   /* a blank line */
	if (!(j = json_parse(msg, len, &err)))
		return rpc_error(s, NULL, RPC_PARSE_ERROR, "parse error: %s", err.msg);
	answer = dispatch(s, j);
	json_free(j);
	return answer;
}

/* ------------------------------------------------------- line splitting */

void mcp_init(struct mcp_server *s, const char *version, const struct mcp_transport *t, FILE *log)
{
	memset(s, 0, sizeof(*s));
	s->version = version;
	s->t = *t;
	s->log = log;
	buf_init(&s->line);
}

void mcp_free(struct mcp_server *s)
{
	buf_free(&s->line);
}

static void answer(struct mcp_server *s, const char *msg, size_t len, mcp_emit_fn emit, void *arg)
{
	char *a = mcp_handle(s, msg, len);

	if (a) {
		emit(arg, a, strlen(a));
		free(a);
	}
}

void mcp_feed(struct mcp_server *s, const char *data, size_t n, mcp_emit_fn emit, void *arg)
{
	const char *p = data, *end = data + n;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t take = (size_t)((nl ? nl : end) - p);

		if (!s->skipping && s->line.len + take > MCP_MAX_LINE) {
			/* answered once, now; the rest of the line is dropped */
			char *a = rpc_error(s, NULL, RPC_PARSE_ERROR,
					    "message too long: the limit is %u bytes a line",
					    MCP_MAX_LINE);
			emit(arg, a, strlen(a));
			free(a);
			buf_free(&s->line);
			buf_init(&s->line);
			s->skipping = true;
		}
		if (!s->skipping)
			buf_add(&s->line, p, take);
		if (!nl)
			break;
		p = nl + 1;
		if (!s->skipping)
			answer(s, s->line.data ? s->line.data : "", s->line.len, emit, arg);
		s->skipping = false;
		buf_reset(&s->line);
	}
}

void mcp_finish(struct mcp_server *s, mcp_emit_fn emit, void *arg)
{
	if (!s->skipping && s->line.len)
		answer(s, s->line.data, s->line.len, emit, arg);
	s->skipping = false;
	buf_reset(&s->line);
}
