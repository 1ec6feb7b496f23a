/* Files inside a sandbox, through the guest agent. Paths are absolute paths
 * in the sandbox; the guest resolves them inside its own root, so nothing
 * here touches the host filesystem. Guest errno values map to HTTP statuses
 * via node_errno_to_http (ENOENT 404, EISDIR/ENOTDIR/EINVAL 400, EEXIST 409,
 * EFBIG 413, EACCES/EPERM 403). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../http/handler.h"
#include "../wake/wake.h"
#include "files.h"

static bool path_ok(const char *p)
{
	return p && p[0] == '/' && strlen(p) <= 4096;
}

static const char *type_name(char t)
{
	switch (t) {
	case 'f': return "file";
	case 'd': return "dir";
	case 'l': return "symlink";
	default: return "other";
	}
}

static void render_stat(struct jw *w, const struct guest_stat *st)
{
	char mode[16], t[ISO_TIME_MAX];

	jw_key(w, "type");
	jw_str(w, type_name(st->type));
	jw_key(w, "size");
	jw_uint(w, st->size);
	jw_key(w, "mode");
	snprintf(mode, sizeof(mode), "%04o", st->mode & 07777);
	jw_str(w, mode);
	jw_key(w, "mtime");
	iso_time(st->mtime_ms, t);
	jw_str(w, t);
}

static int do_stat(struct guestconn *gc, const char *path, struct http_conn *c, err_t *err)
{
	struct guest_stat st;
	struct buf b;
	struct jw w;
	int r = guestconn_stat(gc, path, &st, err);

	if (r < 0)
		return r;
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "path");
	jw_str(&w, path);
	render_stat(&w, &st);
	jw_end(&w);
	http_respond_json(c, 200, b.data);
	buf_free(&b);
	return 0;
}

static int do_list(struct guestconn *gc, const char *path, struct http_conn *c, err_t *err)
{
	struct guest_dirent *ents = NULL;
	size_t n = 0;
	struct buf b;
	struct jw w;
	int r = guestconn_list(gc, path, &ents, &n, err);

	if (r < 0)
		return r;
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "entries");
	jw_arr(&w);
	for (size_t i = 0; i < n; i++) {
		jw_obj(&w);
		jw_key(&w, "name");
		jw_str(&w, ents[i].name);
		render_stat(&w, &ents[i].st);
		jw_end(&w);
	}
	jw_end(&w);
	jw_end(&w);
	guest_dirents_free(ents, n);
	http_respond_json(c, 200, b.data);
	buf_free(&b);
	return 0;
}

static bool parse_mode(const char *s, uint32_t *mode)
{
	char *end;
	unsigned long v;

	if (!s || !*s || strlen(s) > 5)
		return false;
	v = strtoul(s, &end, 8);
	if (*end || v > 07777)
		return false;
	*mode = (uint32_t)v;
	return true;
}

void handle_files(struct node *n, struct sandbox *sb, const char *sub, struct http_req *req,
		  struct http_conn *c)
{
	static const char *const mkdir_keys[] = { "path", "parents", NULL };
	static const char *const rename_keys[] = { "from", "to", NULL };
	_cleanup_free_ char *path = NULL;
	struct guestconn *gc = NULL;
	json *body = NULL;
	err_t err = { 0 };
	int r = 0;
	bool answered = false;

	if (strcmp(sub, "mkdir") == 0 || strcmp(sub, "rename") == 0) {
		body = node_body_object(req, c, strcmp(sub, "mkdir") == 0 ? mkdir_keys
									  : rename_keys);
		if (!body)
			return;
	} else {
		path = http_query_param(req, "path");
		if (!path_ok(path)) {
			http_respond_error(c, 400, "invalid_field",
					   "`path` must be an absolute path");
			return;
		}
	}
	/* A paused sandbox is resumed first, without the client asking. */
	gc = sandbox_gc_use(n, sb, "resumed for files", &err);
	if (!gc) {
		sandbox_respond_err(c, sb, &err);
		json_free(body);
		return;
	}

	if (strcmp(sub, "stat") == 0) {
		r = do_stat(gc, path, c, &err);
		answered = r == 0;
	} else if (strcmp(sub, "list") == 0) {
		r = do_list(gc, path, c, &err);
		answered = r == 0;
	} else if (strcmp(sub, "mkdir") == 0) {
		const json *p = json_get(body, "path");
		bool bad = false, parents = json_get_bool(body, "parents", true, &bad);

		if (!p || p->type != JSON_STR || !path_ok(p->str) || bad) {
			http_respond_error(c, 400, "invalid_field",
					   "`path` must be an absolute path, `parents` a boolean");
			answered = true;
		} else {
			r = guestconn_mkdir(gc, p->str, parents, &err);
		}
	} else if (strcmp(sub, "rename") == 0) {
		const json *from = json_get(body, "from"), *to = json_get(body, "to");

		if (!from || !to || from->type != JSON_STR || to->type != JSON_STR ||
		    !path_ok(from->str) || !path_ok(to->str)) {
			http_respond_error(c, 400, "invalid_field",
					   "`from` and `to` must be absolute paths");
			answered = true;
		} else {
			r = guestconn_rename(gc, from->str, to->str, &err);
		}
	} else if (strcmp(req->method, "GET") == 0) {
		struct buf data;

		buf_init(&data);
		r = guestconn_file_read(gc, path, NODE_FILE_MAX, &data, &err);
		if (r == 0) {
			http_respond(c, 200, "application/octet-stream", data.data, data.len, NULL);
			answered = true;
		}
		buf_free(&data);
	} else if (strcmp(req->method, "PUT") == 0) {
		_cleanup_free_ char *m = http_query_param(req, "mode");
		uint32_t mode = 0644;

		if (m && !parse_mode(m, &mode)) {
			http_respond_error(c, 400, "invalid_field", "`mode` must be octal, e.g. 0644");
			answered = true;
		} else if (req->body_len > NODE_FILE_MAX) {
			http_respond_error(c, 413, "body_too_large", "files are limited to 16 MiB");
			answered = true;
		} else {
			r = guestconn_file_write(gc, path, req->body, req->body_len, mode, &err);
		}
	} else { /* DELETE */
		_cleanup_free_ char *rec = http_query_param(req, "recursive");
		bool recursive = rec && (strcmp(rec, "1") == 0 || strcmp(rec, "true") == 0);

		r = guestconn_remove(gc, path, recursive, &err);
	}
	sandbox_gc_put(sb);

	if (r < 0)
		node_respond_err(c, &err);
	else if (!answered)
		http_respond(c, 204, NULL, NULL, 0, NULL);
	json_free(body);
}
