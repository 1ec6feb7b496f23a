/* guestconn-files.c - files in the guest: read, write, stat, list, mkdir,
 * remove, rename. Paths are checked here before they go out; what comes back
 * (file data, stat fields, directory listings) is untrusted and checked
 * where it is decoded.
 */
#include "guestconn-internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- files --------------------------------------------------------------- */

static int check_path(const char *path, const char *what, err_t *err)
{
	if (!path || path[0] != '/' || strlen(path) > PROTO_MAX_PATH)
		return err_set(err, EINVAL, "%s: path must be absolute and at most %d bytes",
			       what, PROTO_MAX_PATH);
	return 0;
}

int guestconn_file_read(struct guestconn *gc, const char *path, size_t max, struct buf *out,
			err_t *err)
{
	struct waiter *w;
	struct proto_enc e;
	struct buf b;
	int r;

	if (check_path(path, "read", err) < 0)
		return -EINVAL;
	w = gc_waiter_new(gc, W_READ, PT_DATA);
	w->max = max;
	buf_init(&b);
	proto_enc_begin(&e, &b, PT_READ, 0, w->req_id);
	proto_enc_str(&e, PTAG_PATH, path);
	proto_enc_u64(&e, PTAG_MAX, max);
	(void)proto_enc_end(&e);
	r = gc_roundtrip(gc, w, &b, path, err);
	if (r == 0)
		buf_add(out, w->payload.data, w->payload.len);
	buf_free(&b);
	gc_waiter_free(gc, w);
	return r;
}

int guestconn_file_write(struct guestconn *gc, const char *path, const void *p, size_t n,
			 uint32_t mode, err_t *err)
{
	const uint8_t *c = p;
	struct waiter *w;
	struct buf b;
	size_t off = 0;
	int r = 0;

	if (check_path(path, "write", err) < 0)
		return -EINVAL;
	w = gc_waiter_new(gc, W_SINGLE, PT_OK);
	buf_init(&b);
	/* Chunks under the same request id; the guest answers once, after the
	 * last one (or early with an ERROR, after which we stop sending). */
	do {
		size_t chunk = n - off > PROTO_CHUNK ? PROTO_CHUNK : n - off;
		bool last = off + chunk == n;
		struct proto_enc e;

		pthread_mutex_lock(&gc->mu);
		bool failed = w->done;
		pthread_mutex_unlock(&gc->mu);
		if (failed)
			break;
		buf_reset(&b);
		proto_enc_begin(&e, &b, PT_WRITE, last ? 0 : PROTO_F_MORE, w->req_id);
		if (off == 0) {
			proto_enc_str(&e, PTAG_PATH, path);
			proto_enc_u32(&e, PTAG_MODE, mode);
		}
		proto_enc_u64(&e, PTAG_OFFSET, off);
		proto_enc_bytes(&e, PTAG_DATA, c + off, chunk);
		(void)proto_enc_end(&e);
		r = gc_send_bytes(gc, b.data, b.len, err);
		off += chunk;
	} while (r == 0 && off < n);
	if (r < 0)
		r = err_wrap(err, "%s", path);
	else
		r = gc_waiter_wait(gc, w, path, err);
	buf_free(&b);
	gc_waiter_free(gc, w);
	return r;
}

static void fill_path(struct proto_enc *e, const void *ctx)
{
	const struct req_args *v = ctx;
	proto_enc_str(e, PTAG_PATH, v->s1);
	if (v->s2)
		proto_enc_str(e, PTAG_PATH2, v->s2);
}

static void stat_from_proto(const struct proto_stat *ps, struct guest_stat *st)
{
	st->type = ps->type;
	st->size = ps->size;
	st->mode = ps->mode;
	st->mtime_ms = ps->mtime_ms;
	st->uid = ps->uid;
	st->gid = ps->gid;
}

int guestconn_stat(struct guestconn *gc, const char *path, struct guest_stat *st, err_t *err)
{
	struct req_args v = { .s1 = path };
	struct proto_stat ps;
	struct waiter *w;
	struct proto_enc e;
	struct buf b;
	int r;

	if (check_path(path, "stat", err) < 0)
		return -EINVAL;
	w = gc_waiter_new(gc, W_SINGLE, PT_STAT_OK);
	buf_init(&b);
	proto_enc_begin(&e, &b, PT_STAT, 0, w->req_id);
	fill_path(&e, &v);
	(void)proto_enc_end(&e);
	r = gc_roundtrip(gc, w, &b, path, err);
	if (r == 0) {
		if (proto_dec_stat_fields(w->payload.data, w->payload.len, &ps) < 0)
			r = err_set(err, EPROTO, "%s: malformed stat from guest", path);
		else
			stat_from_proto(&ps, st);
	}
	buf_free(&b);
	gc_waiter_free(gc, w);
	return r;
}

void guest_dirents_free(struct guest_dirent *d, size_t n)
{
	if (!d)
		return;
	for (size_t i = 0; i < n; i++)
		free(d[i].name);
	free(d);
}

static int dirent_cmp(const void *x, const void *y)
{
	return strcmp(((const struct guest_dirent *)x)->name,
		      ((const struct guest_dirent *)y)->name);
}

/* Decode the accumulated LIST payloads (untrusted). */
static int decode_list(const struct buf *p, struct guest_dirent **ents, size_t *n)
{
	struct proto_iter it;
	struct proto_field fld;
	struct guest_dirent *d = NULL;
	size_t cnt = 0, cap = 0;
	int r;

	proto_iter_init(&it, p->data, p->len);
	while ((r = proto_iter_next(&it, &fld)) > 0) {
		struct proto_stat ps;
		char *name = NULL;
		if (fld.tag != PTAG_DIRENT)
			continue;
		if (proto_dec_stat_fields(fld.val, fld.len, &ps) < 0 ||
		    proto_get_str(fld.val, fld.len, PTAG_NAME, 255, &name) < 0 ||
		    !name[0] || strchr(name, '/')) {
			free(name);
			r = -EBADMSG;
			break;
		}
		if (cnt == cap) {
			cap = cap ? cap * 2 : 32;
			d = xrealloc(d, cap * sizeof(*d));
		}
		d[cnt].name = name;
		stat_from_proto(&ps, &d[cnt].st);
		cnt++;
	}
	if (r < 0) {
		guest_dirents_free(d, cnt);
		return r;
	}
	if (cnt)
		qsort(d, cnt, sizeof(*d), dirent_cmp);
	*ents = d;
	*n = cnt;
	return 0;
}

int guestconn_list(struct guestconn *gc, const char *path, struct guest_dirent **ents,
		   size_t *n, err_t *err)
{
	struct req_args v = { .s1 = path };
	struct waiter *w;
	struct proto_enc e;
	struct buf b;
	int r;

	*ents = NULL;
	*n = 0;
	if (check_path(path, "list", err) < 0)
		return -EINVAL;
	w = gc_waiter_new(gc, W_LIST, PT_LIST_OK);
	buf_init(&b);
	proto_enc_begin(&e, &b, PT_LIST, 0, w->req_id);
	fill_path(&e, &v);
	(void)proto_enc_end(&e);
	r = gc_roundtrip(gc, w, &b, path, err);
	if (r == 0 && decode_list(&w->payload, ents, n) < 0)
		r = err_set(err, EPROTO, "%s: malformed listing from guest", path);
	buf_free(&b);
	gc_waiter_free(gc, w);
	return r;
}

static void fill_path_flag(struct proto_enc *e, const void *ctx)
{
	const struct req_args *v = ctx;
	proto_enc_str(e, PTAG_PATH, v->s1);
	if (v->flag)
		proto_enc_u8(e, (uint16_t)v->a, 1);
}

int guestconn_mkdir(struct guestconn *gc, const char *path, bool parents, err_t *err)
{
	struct req_args v = { .s1 = path, .flag = parents, .a = PTAG_PARENTS };
	if (check_path(path, "mkdir", err) < 0)
		return -EINVAL;
	return gc_simple(gc, PT_MKDIR, path, err, fill_path_flag, &v);
}

int guestconn_remove(struct guestconn *gc, const char *path, bool recursive, err_t *err)
{
	struct req_args v = { .s1 = path, .flag = recursive, .a = PTAG_RECURSIVE };
	if (check_path(path, "remove", err) < 0)
		return -EINVAL;
	return gc_simple(gc, PT_REMOVE, path, err, fill_path_flag, &v);
}

int guestconn_rename(struct guestconn *gc, const char *from, const char *to, err_t *err)
{
	struct req_args v = { .s1 = from, .s2 = to };
	if (check_path(from, "rename", err) < 0 || check_path(to, "rename", err) < 0)
		return -EINVAL;
	return gc_simple(gc, PT_RENAME, from, err, fill_path, &v);
}
