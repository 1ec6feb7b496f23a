/* code.c - POST /v1/sandboxes/{id}/code and /v1/sandboxes/{id}/code/contexts:
 * Airlock's own API to a sandbox's code interpreter.
 *
 * The interpreter is a service inside the sandbox (scripts/code-interpreter/
 * airlock-code.py, started with the sandbox by the code-interpreter
 * template's /etc/airlock/start) on 127.0.0.1:CODE_PORT. We check the
 * request here (4xx for what is not one), write it again as our own request
 * to the service, and relay its answer back through ports.c: the NDJSON
 * lines of an execution reach the client exactly as the service wrote
 * them, as they come, and the node holds no more than a relay chunk of
 * them at a time. What the service says is the sandbox's, not ours: we
 * never parse it (ports.c only rewrites its answer head).
 *
 * A sandbox whose template has no code service answers 409
 * `no_code_service`: nothing listens on the port. Right after a create the
 * service may not listen yet, so a young sandbox is asked again for a
 * moment before we say so. */
#include <errno.h>
#include <string.h>

#include "node-internal.h"

#define CODE_TIMEOUT_MAX_MS 86400000LL
#define CODE_ENV_MAX 1024

static const char *const languages[] = { "python", "javascript", "bash", NULL };

static bool language_ok(const char *s)
{
	for (size_t i = 0; languages[i]; i++)
		if (!strcmp(s, languages[i]))
			return true;
	return false;
}

/* Context ids are the service's (UUIDs); anything else is no context. */
static bool cid_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 64)
		return false;
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f') || *s == '-'))
			return false;
	return true;
}

static bool env_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 256 || (*s >= '0' && *s <= '9'))
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '_'))
			return false;
	return true;
}

bool code_sandbox_young(const struct sandbox *sb)
{
	int64_t age = wall_ms() - sb->created_at;

	return age >= 0 && age < CODE_YOUNG_MS;
}

/* Send method target (with body, may be NULL) to the service and relay
 * its answer; 409 when the sandbox has none. */
static void code_call(struct node *n, struct sandbox *sb, const char *method, const char *target,
		      const struct buf *body, struct http_conn *c)
{
	_cleanup_(buf_free) struct buf rq = { 0 };

	buf_printf(&rq, "%s %s HTTP/1.1\r\nHost: localhost:%u\r\nConnection: close\r\n", method,
		   target, CODE_PORT);
	if (body)
		buf_printf(&rq, "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
			   body->len);
	else
		buf_adds(&rq, "Content-Length: 0\r\n\r\n");
	if (body)
		buf_add(&rq, body->data, body->len);
	if (ports_relay(n, sb, CODE_PORT, &rq, code_sandbox_young(sb) ? CODE_START_WAIT_MS : 0,
			c) == -ECONNREFUSED)
		http_respond_error(c, 409, "no_code_service",
				   "sandbox %s has no code interpreter (nothing listens on its port"
				   " %u); create it from the code-interpreter template", sb->id,
				   CODE_PORT);
}

void handle_code_execute(struct node *n, struct sandbox *sb, struct http_req *req,
			 struct http_conn *c)
{
	static const char *const keys[] = { "code", "language", "context_id", "env_vars",
					    "timeout_ms", NULL };
	_cleanup_(buf_free) struct buf out = { 0 };
	const json *code, *lang, *cid, *env, *tmo;
	struct jw w;
	json *body;

	if (!(body = node_body_object(req, c, keys)))
		return;
	code = json_get(body, "code");
	lang = json_get(body, "language");
	cid = json_get(body, "context_id");
	env = json_get(body, "env_vars");
	tmo = json_get(body, "timeout_ms");
	if (!code || code->type != JSON_STR) {
		http_respond_error(c, 400, "invalid_field", "`code` (a string) is required");
		goto out;
	}
	if (lang && lang->type != JSON_NULL && (lang->type != JSON_STR || !language_ok(lang->str))) {
		http_respond_error(c, 400, "invalid_field",
				   "`language` must be one of python, javascript, bash");
		goto out;
	}
	if (cid && cid->type != JSON_NULL && (cid->type != JSON_STR || !cid_ok(cid->str))) {
		http_respond_error(c, 400, "invalid_field", "`context_id` is not a context id");
		goto out;
	}
	if (cid && cid->type == JSON_STR && lang && lang->type == JSON_STR) {
		http_respond_error(c, 400, "invalid_field",
				   "give `context_id` or `language`, not both");
		goto out;
	}
	if (env && env->type != JSON_NULL) {
		bool ok = env->type == JSON_OBJ && env->n <= CODE_ENV_MAX;
		for (size_t i = 0; ok && i < env->n; i++)
			ok = env_name_ok(env->keys[i]) && env->items[i]->type == JSON_STR;
		if (!ok) {
			http_respond_error(c, 400, "invalid_field",
					   "`env_vars` maps names ([A-Za-z_][A-Za-z0-9_]*) to strings");
			goto out;
		}
	}
	if (tmo && tmo->type != JSON_NULL &&
	    (tmo->type != JSON_NUM || !tmo->is_int || tmo->i < 0 || tmo->i > CODE_TIMEOUT_MAX_MS)) {
		http_respond_error(c, 400, "invalid_field", "`timeout_ms` must be 0..%lld",
				   CODE_TIMEOUT_MAX_MS);
		goto out;
	}
	/* Ours, written again: only the fields checked above go in. */
	jw_init(&w, &out);
	jw_obj(&w);
	jw_key(&w, "code");
	jw_strn(&w, code->str, code->str_len);
	if (lang && lang->type == JSON_STR) {
		jw_key(&w, "language");
		jw_str(&w, lang->str);
	}
	if (cid && cid->type == JSON_STR) {
		jw_key(&w, "context_id");
		jw_str(&w, cid->str);
	}
	if (env && env->type == JSON_OBJ && env->n) {
		jw_key(&w, "env_vars");
		jw_value(&w, env);
	}
	if (tmo && tmo->type == JSON_NUM && tmo->i > 0) {
		jw_key(&w, "timeout_ms");
		jw_int(&w, tmo->i);
	}
	jw_end(&w);
	code_call(n, sb, "POST", "/execute", &out, c);
out:
	json_free(body);
}

void handle_code_contexts(struct node *n, struct sandbox *sb, const char *cid, bool restart,
			  struct http_req *req, struct http_conn *c)
{
	_cleanup_(buf_free) struct buf out = { 0 };
	_cleanup_free_ char *target = NULL;

	if (cid && !cid_ok(cid)) {
		http_respond_error(c, 404, "not_found", "no context `%s`", cid);
		return;
	}
	if (restart) {
		target = xasprintf("/contexts/%s/restart", cid);
		code_call(n, sb, "POST", target, NULL, c);
	} else if (cid) {
		target = xasprintf("/contexts/%s", cid);
		code_call(n, sb, "DELETE", target, NULL, c);
	} else if (!strcmp(req->method, "GET")) {
		code_call(n, sb, "GET", "/contexts", NULL, c);
	} else {
		static const char *const keys[] = { "language", "cwd", NULL };
		const json *lang, *cwd;
		struct jw w;
		json *body = node_body_object(req, c, keys);

		if (!body)
			return;
		lang = json_get(body, "language");
		cwd = json_get(body, "cwd");
		if (lang && lang->type != JSON_NULL &&
		    (lang->type != JSON_STR || !language_ok(lang->str))) {
			http_respond_error(c, 400, "invalid_field",
					   "`language` must be one of python, javascript, bash");
		} else if (cwd && cwd->type != JSON_NULL &&
			   (cwd->type != JSON_STR || cwd->str[0] != '/' || cwd->str_len > 4096)) {
			http_respond_error(c, 400, "invalid_field",
					   "`cwd` must be an absolute path");
		} else {
			jw_init(&w, &out);
			jw_obj(&w);
			if (lang && lang->type == JSON_STR) {
				jw_key(&w, "language");
				jw_str(&w, lang->str);
			}
			if (cwd && cwd->type == JSON_STR) {
				jw_key(&w, "cwd");
				jw_strn(&w, cwd->str, cwd->str_len);
			}
			jw_end(&w);
			code_call(n, sb, "POST", "/contexts", &out, c);
		}
		json_free(body);
	}
}
