/* envd-fs.c - envd's filesystem.Filesystem service and its HTTP file
 * endpoints (GET and POST /files) on Airlock's file operations. Paths are
 * resolved as envd does (envd_resolve_path: a relative one is under the
 * call's user's home); entries are envd's EntryInfo. WatchDir streams
 * (envd-stream.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "envd-internal.h"

#define LIST_MAX_ENTRIES 10000        /* ListDir with depth > 1 ... */
#define LIST_MAX_DIRS 256             /* ... and the directories it lists */

static const char *file_type(const char *t)
{
	if (!t)
		return "FILE_TYPE_UNSPECIFIED";
	if (!strcmp(t, "file"))
		return "FILE_TYPE_FILE";
	if (!strcmp(t, "dir"))
		return "FILE_TYPE_DIRECTORY";
	if (!strcmp(t, "symlink"))
		return "FILE_TYPE_SYMLINK";
	return "FILE_TYPE_UNSPECIFIED";
}

/* EntryInfo from the node's stat or list item (path given apart). */
static void write_entry(struct jw *w, const json *st, const char *path)
{
	const char *t = json_get_str(st, "type"), *mode_s = json_get_str(st, "mode");
	const char *slash = strrchr(path, '/');
	unsigned mode = mode_s ? (unsigned)strtoul(mode_s, NULL, 8) & 07777 : 0;
	char perms[11] = "----------", size[24];
	static const char rwx[] = "rwxrwxrwx";

	perms[0] = t && !strcmp(t, "dir") ? 'd' : t && !strcmp(t, "symlink") ? 'L' : '-';
	for (int i = 0; i < 9; i++)
		if (mode & (0400u >> i))
			perms[i + 1] = rwx[i];
	snprintf(size, sizeof(size), "%lld", (long long)json_get_int(st, "size", 0, NULL));
	jw_obj(w);
	jw_key(w, "name");
	jw_str_lossy(w, slash && slash[1] ? slash + 1 : path);
	jw_key(w, "type");
	jw_str(w, file_type(t));
	jw_key(w, "path");
	jw_str_lossy(w, path);
	jw_key(w, "size");
	jw_str(w, size);   /* int64: a string in protobuf JSON */
	jw_key(w, "mode");
	/* Go's fs.FileMode, as envd reports it: the type bits above the perms */
	jw_uint(w, mode | (t && !strcmp(t, "dir") ? 1u << 31 : 0) |
			   (t && !strcmp(t, "symlink") ? 1u << 27 : 0));
	jw_key(w, "permissions");
	jw_str(w, perms);
	jw_key(w, "owner");
	jw_str(w, "");
	jw_key(w, "group");
	jw_str(w, "");
	if (json_get_str(st, "mtime")) {
		jw_key(w, "modifiedTime");
		jw_str(w, json_get_str(st, "mtime"));
	}
	jw_end(w);
}

/* The node's stat of path: 200 and *out, or the status (answered). */
static int node_stat(struct envd_ctx *x, const char *path, json **out, bool answer)
{
	_cleanup_free_ char *t = envd_files_target(x->id, "/stat", path, NULL);
	struct http_resp r;
	int st = e2b_node(x->a, x->who->tenant, "GET", t, NULL, NULL, 0, &r);

	*out = NULL;
	if (st == 200 && !(*out = json_parse(r.body.data, r.body.len, NULL)))
		st = 500;
	if (st != 200 && answer)
		envd_rpc_node_error(x->c, st, &r);
	http_resp_free(&r);
	return st;
}

/* {"entry": EntryInfo} of path. */
void envd_answer_entry(struct envd_ctx *x, const char *path)
{
	_cleanup_(json_freep) json *st = NULL;
	struct buf b;
	struct jw w;

	if (node_stat(x, path, &st, true) != 200)
		return;
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "entry");
	write_entry(&w, st, path);
	jw_end(&w);
	envd_rpc_ok(x->c, b.data, b.len);
	buf_free(&b);
}

/* Entries of dir (depth levels) into w; false when answered (an error). */
static bool list_into(struct envd_ctx *x, struct jw *w, const char *dir, unsigned depth,
		      size_t *count, size_t *dirs, bool top)
{
	_cleanup_free_ char *t = envd_files_target(x->id, "/list", dir, NULL);
	_cleanup_(json_freep) json *j = NULL;
	struct http_resp r;
	int st;

	++*dirs;   /* one node request per directory: bounded per call */
	st = e2b_node(x->a, x->who->tenant, "GET", t, NULL, NULL, 0, &r);
	if (st != 200) {
		if (top) {
			envd_rpc_node_error(x->c, st, &r);
			http_resp_free(&r);
			return false;
		}
		http_resp_free(&r);
		return true;   /* a subdirectory that went away meanwhile */
	}
	j = json_parse(r.body.data, r.body.len, NULL);
	http_resp_free(&r);
	const json *es = j ? json_get(j, "entries") : NULL;
	for (size_t i = 0; es && es->type == JSON_ARR && i < es->n; i++) {
		const char *name = json_get_str(es->items[i], "name");
		if (!name || ++*count > LIST_MAX_ENTRIES)
			continue;
		_cleanup_free_ char *path = xasprintf("%s%s%s", dir,
						      dir[strlen(dir) - 1] == '/' ? "" : "/", name);
		write_entry(w, es->items[i], path);
		const char *t2 = json_get_str(es->items[i], "type");
		if (depth > 1 && t2 && !strcmp(t2, "dir") && *dirs < LIST_MAX_DIRS &&
		    !list_into(x, w, path, depth - 1, count, dirs, false))
			return false;
	}
	return true;
}

void envd_fs_list(struct envd_ctx *x, const json *msg)
{
	_cleanup_free_ char *path = envd_req_path(x, msg, "path");
	bool bad = false;
	int64_t depth = json_get_int(msg, "depth", 1, &bad);
	size_t count = 0, dirs = 0;
	struct buf b;
	struct jw w;

	if (!path)
		return;
	if (bad || depth < 0 || depth > 64) {
		envd_rpc_error(x->c, "invalid_argument", "depth must be 1..64");
		return;
	}
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "entries");
	jw_arr(&w);
	if (list_into(x, &w, path, depth ? (unsigned)depth : 1, &count, &dirs, true)) {
		jw_end(&w);
		jw_end(&w);
		envd_rpc_ok(x->c, b.data, b.len);
	}
	buf_free(&b);
}

void envd_fs_mkdir(struct envd_ctx *x, const json *msg)
{
	_cleanup_free_ char *path = envd_req_path(x, msg, "path");
	_cleanup_(json_freep) json *st = NULL;
	_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s/files/mkdir", x->id);
	struct http_resp r;
	struct buf b;
	struct jw w;

	if (!path)
		return;
	if (node_stat(x, path, &st, false) == 200) {
		envd_rpc_error(x->c, "already_exists", "%s exists", path);
		return;
	}
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "path");
	jw_str(&w, path);
	jw_key(&w, "parents");
	jw_bool(&w, true);
	jw_end(&w);
	int s = e2b_node(x->a, x->who->tenant, "POST", target, "application/json", b.data, b.len,
			 &r);
	buf_free(&b);
	if (s >= 200 && s < 300)
		envd_answer_entry(x, path);
	else
		envd_rpc_node_error(x->c, s, &r);
	http_resp_free(&r);
}

void envd_fs_move(struct envd_ctx *x, const json *msg)
{
	_cleanup_free_ char *from = envd_req_path(x, msg, "source");
	_cleanup_free_ char *to = from ? envd_req_path(x, msg, "destination") : NULL;
	_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s/files/rename", x->id);
	struct http_resp r;
	struct buf b;
	struct jw w;

	if (!to)
		return;
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "from");
	jw_str(&w, from);
	jw_key(&w, "to");
	jw_str(&w, to);
	jw_end(&w);
	int s = e2b_node(x->a, x->who->tenant, "POST", target, "application/json", b.data, b.len,
			 &r);
	buf_free(&b);
	if (s >= 200 && s < 300)
		envd_answer_entry(x, to);
	else
		envd_rpc_node_error(x->c, s, &r);
	http_resp_free(&r);
}

void envd_fs_remove(struct envd_ctx *x, const json *msg)
{
	_cleanup_free_ char *path = envd_req_path(x, msg, "path");

	if (!path)
		return;
	_cleanup_free_ char *target = envd_files_target(x->id, "", path, "&recursive=1");
	envd_node_then_empty(x, "DELETE", target, NULL);
}

void envd_fs_watch(struct envd_ctx *x, const json *msg)
{
	const char *p = json_get_str(msg, "path");
	struct envd_stream s = { .kind = S_WATCH };
	char user[64];
	bool bad = false;
	bool rec = json_get_bool(msg, "recursive", false, &bad);

	if (!p || !*p || bad || !envd_call_user(x->req, user, sizeof(user))) {
		envd_stream_refuse(x->c, "invalid_argument", "path is required; recursive is a boolean");
		return;
	}
	_cleanup_free_ char *path = envd_resolve_path(p, user);
	_cleanup_free_ char *target = envd_files_target(x->id, "/watch", path,
							rec ? "&recursive=true" : NULL);
	s.root = path;
	envd_relay_stream(x, &s, "GET", target, NULL);
}

/* GET /files?path=P: the file's bytes. */
void envd_files_read(struct envd_ctx *x)
{
	_cleanup_free_ char *p = http_query_param(x->req, "path"), *path = NULL, *t = NULL;
	char user[64];
	struct http_resp r;

	if (!p || !*p || !envd_call_user(x->req, user, sizeof(user))) {
		e2b_error(x->c, 400, "query parameter path is required");
		return;
	}
	path = envd_resolve_path(p, user);
	t = envd_files_target(x->id, "", path, NULL);
	int st = e2b_node(x->a, x->who->tenant, "GET", t, NULL, NULL, 0, &r);
	if (st == 200) {
		http_respond(x->c, 200, "application/octet-stream", r.body.data, r.body.len, NULL);
	} else if (st < 0) {
		e2b_error(x->c, 503, "node unavailable");
	} else {
		_cleanup_free_ char *m = e2b_node_message(&r);
		e2b_error(x->c, st, "%s", m);
	}
	http_resp_free(&r);
}

/* One file write; false when answered (an error). */
static bool write_one(struct envd_ctx *x, const char *path, const char *data, size_t len,
		      struct jw *w)
{
	_cleanup_free_ char *t = envd_files_target(x->id, "", path, NULL);
	struct http_resp r;
	int st = e2b_node(x->a, x->who->tenant, "PUT", t, "application/octet-stream", data, len,
			  &r);

	if (st < 200 || st >= 300) {
		if (st < 0) {
			e2b_error(x->c, 503, "node unavailable");
		} else {
			_cleanup_free_ char *m = e2b_node_message(&r);
			e2b_error(x->c, st, "%s: %s", path, m);
		}
		http_resp_free(&r);
		return false;
	}
	http_resp_free(&r);
	const char *slash = strrchr(path, '/');
	jw_obj(w);
	jw_key(w, "name");
	jw_str(w, slash ? slash + 1 : path);
	jw_key(w, "type");
	jw_str(w, "file");
	jw_key(w, "path");
	jw_str(w, path);
	jw_end(w);
	return true;
}

/* POST /files: multipart/form-data (one part per file, its name the path
 * unless ?path= names the one file) or application/octet-stream (?path=). */
void envd_files_write(struct envd_ctx *x)
{
	const char *ct = http_req_header(x->req, "Content-Type");
	const char *ce = http_req_header(x->req, "Content-Encoding");
	_cleanup_free_ char *qp = http_query_param(x->req, "path");
	_cleanup_free_ struct multipart_part *parts = NULL;
	char user[64], boundary[80];
	err_t err = { 0 };
	struct buf b;
	struct jw w;
	int n;

	if (ce && strcasecmp(ce, "identity") != 0) {
		e2b_error(x->c, 400, "Content-Encoding %s is not supported", ce);
		return;
	}
	if (!envd_call_user(x->req, user, sizeof(user))) {
		e2b_error(x->c, 400, "bad user name");
		return;
	}
	buf_init(&b);
	jw_init(&w, &b);
	jw_arr(&w);
	if (ct && !strncasecmp(ct, "application/octet-stream", 24)) {
		if (!qp || !*qp) {
			e2b_error(x->c, 400, "query parameter path is required");
			goto out;
		}
		_cleanup_free_ char *path = envd_resolve_path(qp, user);
		if (!write_one(x, path, x->req->body, x->req->body_len, &w))
			goto out;
	} else {
		if (multipart_boundary(ct, boundary, sizeof(boundary), &err) < 0) {
			e2b_error(x->c, 400, "%s", err.msg);
			goto out;
		}
		parts = xcalloc(MULTIPART_MAX_PARTS, sizeof(*parts));
		n = multipart_parse(x->req->body, x->req->body_len, boundary, parts,
				    MULTIPART_MAX_PARTS, &err);
		if (n < 0) {
			e2b_error(x->c, 400, "%s", err.msg);
			goto out;
		}
		if (n == 0 || (qp && *qp && n > 1)) {
			e2b_error(x->c, 400, "%s", n ? "?path= names one file, but the body has several"
						     : "no file in the body");
			goto out;
		}
		for (int i = 0; i < n; i++) {
			const char *p = qp && *qp ? qp : parts[i].filename;
			if (!*p) {
				e2b_error(x->c, 400, "part %d has no file name and there is no ?path=", i);
				goto out;
			}
			_cleanup_free_ char *path = envd_resolve_path(p, user);
			if (!write_one(x, path, parts[i].data, parts[i].len, &w))
				goto out;
		}
	}
	jw_end(&w);
	http_respond(x->c, 200, "application/json", b.data, b.len, NULL);
out:
	buf_free(&b);
}
