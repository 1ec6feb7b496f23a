#include "reqjson.h"

json *http_json_object_body(struct http_req *req, struct http_conn *c,
			    const char *const *allowed, size_t max_len)
{
	err_t err = { 0 };
	json *j;

	if (max_len && req->body_len > max_len) {
		http_respond_error(c, 413, "body_too_large", "JSON bodies are limited to %zu bytes",
				   max_len);
		return NULL;
	}
	if (req->body_len == 0) {
		http_respond_error(c, 400, "invalid_json", "a JSON object body is required");
		return NULL;
	}
	/* Untrusted bytes: json_parse enforces depth and size limits. */
	j = json_parse(req->body, req->body_len, &err);
	if (!j) {
		http_respond_error(c, 400, "invalid_json", "invalid JSON body: %s", err.msg);
		return NULL;
	}
	if (j->type != JSON_OBJ) {
		json_free(j);
		http_respond_error(c, 400, "invalid_json", "the body must be a JSON object");
		return NULL;
	}
	if (allowed && json_check_keys(j, allowed, &err) < 0) {
		json_free(j);
		http_respond_error(c, 400, "unknown_field", "%s", err.msg);
		return NULL;
	}
	return j;
}
