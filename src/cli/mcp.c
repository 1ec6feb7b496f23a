/* mcp.c - the protocol core of `airlock mcp` (see mcp.h): JSON-RPC 2.0
 * messages in, answers out, split into lines with a bound. The tools are
 * mcp-tools.c's (their table, schemas and checks) and mcp-run.c's (what
 * each does against the API).
 */
#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "mcp-internal.h"
#include "mcp.h"

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

char *mcp_rpc_error(struct mcp_server *s, const json *id, int code, const char *fmt, ...)
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
char *mcp_rpc_result(const json *id, const char *result)
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
/* ----------------------------------------------------------- methods */

static char *initialize(struct mcp_server *s, const json *id, const json *params)
{
	const char *asked = params ? json_get_str(params, "protocolVersion") : NULL;
	const char *version = MCP_PROTOCOL_VERSION;
	_cleanup_(buf_free) struct buf b = { 0 };
	struct jw w;

	if (!asked)
		return mcp_rpc_error(s, id, RPC_INVALID_PARAMS,
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
	return mcp_rpc_result(id, b.data);
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
		return mcp_rpc_error(s, NULL, RPC_INVALID_REQUEST,
				     "batches are not supported: send one message per line");
	if (msg->type != JSON_OBJ)
		return mcp_rpc_error(s, NULL, RPC_INVALID_REQUEST, "a message must be a JSON object");
	id = json_get(msg, "id");
	method = json_get(msg, "method");
	params = json_get(msg, "params");
	if (id && id->type != JSON_STR && !(id->type == JSON_NUM && id->is_int))
		return mcp_rpc_error(s, NULL, RPC_INVALID_REQUEST,
				     "id must be a string or an integer");
	if (!method) {
		/* a client's response (we send no requests): nothing to answer */
		if (json_get(msg, "result") || json_get(msg, "error"))
			return NULL;
		return mcp_rpc_error(s, id, RPC_INVALID_REQUEST, "the message has no method");
	}
	if (!is_str(json_get(msg, "jsonrpc"), "2.0"))
		return id ? mcp_rpc_error(s, id, RPC_INVALID_REQUEST, "jsonrpc must be \"2.0\"") : NULL;
	if (method->type != JSON_STR)
		return id ? mcp_rpc_error(s, id, RPC_INVALID_REQUEST, "method must be a string") : NULL;
	if (!id)
		return NULL;   /* a notification (initialized, cancelled, ...): never answered */
	if (params && params->type == JSON_NULL)
		params = NULL;
	if (params && params->type != JSON_OBJ)
		return mcp_rpc_error(s, id, RPC_INVALID_PARAMS, "params must be an object");
	if (strcmp(method->str, "initialize") == 0)
		return initialize(s, id, params);
	if (strcmp(method->str, "ping") == 0)
		return mcp_rpc_result(id, "{}");
	if (strcmp(method->str, "tools/list") == 0)
		return mcp_tools_list(id);
	if (strcmp(method->str, "tools/call") == 0)
		return mcp_tools_call(s, id, params);
	return mcp_rpc_error(s, id, RPC_METHOD_NOT_FOUND, "method not found: %s", method->str);
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
		return mcp_rpc_error(s, NULL, RPC_PARSE_ERROR, "parse error: %s", err.msg);
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
			char *a = mcp_rpc_error(s, NULL, RPC_PARSE_ERROR,
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
