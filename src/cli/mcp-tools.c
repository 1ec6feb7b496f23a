/* mcp-tools.c - the tools of `airlock mcp` (mcp.h), described once.
 *
 * Each tool is described once, in the tables below: its arguments' names,
 * types and descriptions give both the JSON Schema that tools/list shows
 * and the checks tools/call makes before any request leaves. A bad argument
 * is a JSON-RPC error (-32602); an error answer of the API is a tool result
 * with isError, so the agent reads what went wrong. What each tool does is
 * mcp-run.c's.
 */
#include <string.h>

#include "../lib/ident.h"
#include "mcp-internal.h"
#include "mcp.h"

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

struct mcp_tool {
	const char *name;
	const char *title;
	const char *desc;
	const struct arg_spec *args;   /* ends with a zero entry */
	bool read_only, destructive;
	void (*run)(struct mcp_call *c);
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

static const struct arg_spec code_args[] = {
	ARG_SANDBOX,
	{ "code", A_STR, true, "The cell's code.", NULL, 0 },
	{ "language", A_STR, false,
	  "\"python\" (default), \"javascript\", \"bash\"...: that language's default context "
	  "(not with context_id).",
	  NULL, 0 },
	{ "context_id", A_STR, false,
	  "A context made with the API (`airlock code-context create`): its own kernel and cwd.",
	  NULL, 0 },
	{ "env", A_STRMAP, false, "Environment variables of this cell only.", NULL, 0 },
	{ "timeout_s", A_INT, false,
	  "Interrupt the kernel after this many seconds, its state kept (default 600).", NULL,
	  86400 },
	{ 0 },
};

static const struct mcp_tool tools[] = {
	{ "sandbox_create", "Create a sandbox",
	  "Create an isolated Linux sandbox and wait until it is running. Returns its id and "
	  "state; pass the id to the other tools. Delete it with sandbox_delete when done.",
	  create_args, false, false, mcp_run_create },
	{ "sandbox_list", "List sandboxes",
	  "List your sandboxes (id, state, template, metadata, ...), oldest first, one page at "
	  "a time.",
	  list_args, true, false, mcp_run_list },
	{ "sandbox_delete", "Delete a sandbox",
	  "Delete a sandbox with its files, processes and snapshots.", sandbox_args, false, true,
	  mcp_run_delete },
	{ "exec", "Run a command",
	  "Run a command in a sandbox and wait for it to end. Returns stdout, stderr (text; "
	  "invalid UTF-8 shows as U+FFFD) and exit_code (128+signal when it was killed, with "
	  "`signal`). Each stream keeps its first 64 KiB; stdout_truncated/stderr_truncated say "
	  "when more was written.",
	  exec_args, false, false, mcp_run_exec },
	{ "run_code", "Run code in a kernel",
	  "Run a cell in the code interpreter of a sandbox made from the `code-interpreter` "
	  "template (Python with numpy, pandas, matplotlib; JavaScript; bash); the kernel keeps "
	  "variables and imports between calls. Returns stdout, stderr (first 64 KiB each), "
	  "results (the cell's value and displays: text, markdown, html, latex, svg, json; PNG "
	  "and JPEG images, such as matplotlib charts, come as image contents), the error the "
	  "cell raised (name, value, traceback) or null, and execution_count.",
	  code_args, false, false, mcp_run_code },
	{ "files_read", "Read a file",
	  "Read a file of a sandbox. UTF-8 text comes back as is (encoding \"utf-8\"), anything "
	  "else as base64 (encoding \"base64\"). Returns at most max_bytes; `truncated` says when "
	  "the file is longer.",
	  read_args, true, false, mcp_run_read },
	{ "files_write", "Write a file",
	  "Replace (or create) a file in a sandbox, atomically. Content is UTF-8 text, or base64 "
	  "with encoding \"base64\".",
	  write_args, false, false, mcp_run_write },
	{ "files_list", "List a directory",
	  "List a directory of a sandbox: name, type (file, dir, symlink, other), size, mode and "
	  "mtime of each entry.",
	  list_files_args, true, false, mcp_run_list_files },
	{ "snapshot_create", "Snapshot a sandbox",
	  "Take a snapshot of a sandbox's files (kind \"disk\") or of its memory too (\"full\", "
	  "vm only), to come back to later with rollback.",
	  snap_args, false, false, mcp_run_snapshot },
	{ "snapshot_list", "List snapshots", "List a sandbox's snapshots, oldest first.", sandbox_args,
	  true, false, mcp_run_snapshot_list },
	{ "rollback", "Roll back to a snapshot",
	  "Put a sandbox back to a snapshot: its files become the snapshot's. After a disk "
	  "snapshot every process of the sandbox is ended and it starts afresh.",
	  rollback_args, false, true, mcp_run_rollback },
};

static const struct mcp_tool *find_tool(const char *name)
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

static void write_tool(struct jw *w, const struct mcp_tool *t)
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

char *mcp_tools_list(const json *id)
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
	return mcp_rpc_result(id, b.data);
}

/* ------------------------------------------------- argument checks */

/* An id the tool puts in a URL path: the KMS's key rule (lib/ident.h) up to
 * 128 bytes, so never "." or ".." and nothing to escape. */
static bool is_id(const char *s)
{
	return ident_key_ok(s, 128);
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
static char *check_args(const struct mcp_tool *t, const json *args)
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

/* ------------------------------------------------------- tools/call */

/* The CallToolResult: the object as JSON text in a text content, and the
 * same object as structuredContent; a failure has isError and names the
 * API's error code. */
static char *call_result(struct mcp_call *c)
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
	for (size_t i = 0; !c->failed && i < c->n_images; i++) {
		jw_obj(&w);
		jw_key(&w, "type");
		jw_str(&w, "image");
		jw_key(&w, "data");
		jw_str(&w, c->images[i].data);
		jw_key(&w, "mimeType");
		jw_str(&w, c->images[i].mime);
		jw_end(&w);
	}
	jw_end(&w);
	jw_key(&w, "structuredContent");
	jw_raw(&w, obj);
	jw_key(&w, "isError");
	jw_bool(&w, c->failed);
	jw_end(&w);
	return buf_steal(&b);
}

char *mcp_tools_call(struct mcp_server *s, const json *id, const json *params)
{
	const char *name = params ? json_get_str(params, "name") : NULL;
	const json *args = params ? json_get(params, "arguments") : NULL;
	_cleanup_free_ char *why = NULL, *result = NULL;
	json *empty = NULL;
	const struct mcp_tool *t;
	struct mcp_call c = { .s = s };

	if (!name)
		return mcp_rpc_error(s, id, RPC_INVALID_PARAMS, "tools/call needs params.name, a string");
	if (!(t = find_tool(name)))
		return mcp_rpc_error(s, id, RPC_INVALID_PARAMS, "unknown tool `%s`", name);
	if (args && args->type == JSON_NULL)
		args = NULL;
	if (args && args->type != JSON_OBJ)
		return mcp_rpc_error(s, id, RPC_INVALID_PARAMS, "params.arguments must be an object");
	if (!args)
		args = empty = json_parse("{}", 2, NULL);
	if ((why = check_args(t, args))) {
		json_free(empty);
		return mcp_rpc_error(s, id, RPC_INVALID_PARAMS, "%s", why);
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
	for (size_t i = 0; i < c.n_images; i++)
		free(c.images[i].data);
	free(c.images);
	free(c.code);
	free(c.message);
	json_free(empty);
	return mcp_rpc_result(id, result);
}
