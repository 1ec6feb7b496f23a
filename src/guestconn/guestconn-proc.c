/* guestconn-proc.c - processes in the guest: exec, stdin, signal, resize.
 * Their output and exit come back unsolicited, through the reader thread to
 * the on_output and on_exit callbacks.
 */
#include "guestconn-internal.h"

#include <errno.h>

/* ---- processes ----------------------------------------------------------- */

int guestconn_exec(struct guestconn *gc, const struct exec_spec *spec, uint32_t *pid,
		   err_t *err)
{
	struct proto_exec x = {
		.argv = spec->argv, .env = spec->env, .cwd = (char *)spec->cwd,
		.uid = spec->uid, .gid = spec->gid, .pty = spec->pty,
		.rows = spec->rows, .cols = spec->cols, .stdin_open = spec->stdin_open,
	};
	struct waiter *w = gc_waiter_new(gc, W_SINGLE, PT_EXEC_OK);
	struct buf b;
	int r;

	buf_init(&b);
	r = proto_enc_exec(&b, w->req_id, &x);
	if (r < 0)
		r = err_set(err, -r, "exec: command line too large or empty");
	else
		r = gc_roundtrip(gc, w, &b, "exec", err);
	if (r == 0 && proto_get_u32(w->payload.data, w->payload.len, PTAG_PID, pid) < 0)
		r = err_set(err, EPROTO, "exec: guest answered without a pid");
	buf_free(&b);
	gc_waiter_free(gc, w);
	return r;
}

int guestconn_stdin(struct guestconn *gc, uint32_t pid, const void *p, size_t n, bool eof,
		    err_t *err)
{
	const uint8_t *c = p;

	/* Large writes go as several frames, each acknowledged: the guest
	 * holds the ack back while its queue for the process is full. */
	do {
		size_t chunk = n > PROTO_CHUNK ? PROTO_CHUNK : n;
		bool last = chunk == n;
		struct waiter *w = gc_waiter_new(gc, W_SINGLE, PT_OK);
		struct proto_enc e;
		struct buf b;
		int r;

		buf_init(&b);
		proto_enc_begin(&e, &b, PT_STDIN, 0, w->req_id);
		proto_enc_u32(&e, PTAG_PID, pid);
		proto_enc_bytes(&e, PTAG_DATA, c, chunk);
		if (last && eof)
			proto_enc_u8(&e, PTAG_EOF, 1);
		(void)proto_enc_end(&e);
		r = gc_roundtrip(gc, w, &b, "stdin", err);
		buf_free(&b);
		gc_waiter_free(gc, w);
		if (r < 0)
			return r;
		c += chunk;
		n -= chunk;
	} while (n > 0);
	return 0;
}

static void fill_signal(struct proto_enc *e, const void *ctx)
{
	const struct req_args *v = ctx;
	proto_enc_u32(e, PTAG_PID, v->a);
	proto_enc_u32(e, PTAG_SIGNAL, v->b);
}

int guestconn_signal(struct guestconn *gc, uint32_t pid, int sig, err_t *err)
{
	struct req_args v = { .a = pid, .b = (uint32_t)sig };
	if (sig <= 0)
		return err_set(err, EINVAL, "signal: bad signal %d", sig);
	return gc_simple(gc, PT_SIGNAL, "signal", err, fill_signal, &v);
}

static void fill_resize(struct proto_enc *e, const void *ctx)
{
	const struct req_args *v = ctx;
	proto_enc_u32(e, PTAG_PID, v->a);
	proto_enc_u16(e, PTAG_ROWS, v->c);
	proto_enc_u16(e, PTAG_COLS, v->d);
}

int guestconn_resize(struct guestconn *gc, uint32_t pid, uint16_t rows, uint16_t cols,
		     err_t *err)
{
	struct req_args v = { .a = pid, .c = rows, .d = cols };
	return gc_simple(gc, PT_RESIZE, "resize", err, fill_resize, &v);
}
