/* proto.c - frame header, field encoding and the bounds-checked field decoder.
 *
 * Everything on the decode side treats its input as untrusted bytes from a
 * sandbox: lengths are checked against what is left before any read, in
 * size_t arithmetic that cannot overflow (u32 lengths against size_t).
 */
#include "proto.h"

#include <errno.h>
#include <string.h>

static void put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static uint64_t get_le64(const uint8_t *p)
{
	return (uint64_t)get_le32(p) | (uint64_t)get_le32(p + 4) << 32;
}

const char *proto_type_name(unsigned type)
{
	switch (type) {
	case PT_HELLO: return "HELLO";
	case PT_READY: return "READY";
	case PT_ERROR: return "ERROR";
	case PT_OK: return "OK";
	case PT_EXEC: return "EXEC";
	case PT_EXEC_OK: return "EXEC_OK";
	case PT_STDIN: return "STDIN";
	case PT_SIGNAL: return "SIGNAL";
	case PT_RESIZE: return "RESIZE";
	case PT_OUTPUT: return "OUTPUT";
	case PT_EXIT: return "EXIT";
	case PT_READ: return "READ";
	case PT_DATA: return "DATA";
	case PT_WRITE: return "WRITE";
	case PT_STAT: return "STAT";
	case PT_STAT_OK: return "STAT_OK";
	case PT_LIST: return "LIST";
	case PT_LIST_OK: return "LIST_OK";
	case PT_MKDIR: return "MKDIR";
	case PT_REMOVE: return "REMOVE";
	case PT_RENAME: return "RENAME";
	case PT_STATUS: return "STATUS";
	case PT_STATUS_OK: return "STATUS_OK";
	case PT_RESET: return "RESET";
	case PT_SYNC: return "SYNC";
	case PT_RECLAIM: return "RECLAIM";
	case PT_PORT_OPEN: return "PORT_OPEN";
	case PT_PORT_DATA: return "PORT_DATA";
	case PT_PORT_CREDIT: return "PORT_CREDIT";
	case PT_PORT_SHUT: return "PORT_SHUT";
	case PT_PORT_CLOSE: return "PORT_CLOSE";
	case PT_WATCH_START: return "WATCH_START";
	case PT_WATCH_EVENT: return "WATCH_EVENT";
	case PT_WATCH_STOP: return "WATCH_STOP";
	}
	return "?";
}

/* ---- encoding ------------------------------------------------------------ */

void proto_enc_begin(struct proto_enc *e, struct buf *out, unsigned type, uint16_t flags,
		     uint32_t req_id)
{
	uint8_t h[PROTO_HDR_LEN];

	put_le32(h, PROTO_MAGIC);
	h[4] = PROTO_VERSION;
	h[5] = (uint8_t)type;
	put_le16(h + 6, flags);
	put_le32(h + 8, req_id);
	put_le32(h + 12, 0);   /* patched by proto_enc_end */
	e->out = out;
	e->start = out->len;
	buf_add(out, h, sizeof(h));
}

void proto_enc_bytes(struct proto_enc *e, uint16_t tag, const void *p, size_t n)
{
	uint8_t h[PROTO_FIELD_HDR_LEN];

	/* Lengths above u32 cannot be represented; clamp so that proto_enc_end
	 * reports -EMSGSIZE instead of writing a lying length. */
	put_le16(h, tag);
	put_le32(h + 2, n > UINT32_MAX ? UINT32_MAX : (uint32_t)n);
	buf_add(e->out, h, sizeof(h));
	if (n)
		buf_add(e->out, p, n);
}

void proto_enc_str(struct proto_enc *e, uint16_t tag, const char *s)
{
	proto_enc_bytes(e, tag, s, strlen(s));
}

void proto_enc_u8(struct proto_enc *e, uint16_t tag, uint8_t v)
{
	proto_enc_bytes(e, tag, &v, 1);
}

void proto_enc_u16(struct proto_enc *e, uint16_t tag, uint16_t v)
{
	uint8_t b[2];
	put_le16(b, v);
	proto_enc_bytes(e, tag, b, sizeof(b));
}

void proto_enc_u32(struct proto_enc *e, uint16_t tag, uint32_t v)
{
	uint8_t b[4];
	put_le32(b, v);
	proto_enc_bytes(e, tag, b, sizeof(b));
}

void proto_enc_u64(struct proto_enc *e, uint16_t tag, uint64_t v)
{
	uint8_t b[8];
	put_le64(b, v);
	proto_enc_bytes(e, tag, b, sizeof(b));
}

void proto_enc_i64(struct proto_enc *e, uint16_t tag, int64_t v)
{
	proto_enc_u64(e, tag, (uint64_t)v);
}

size_t proto_enc_nest_begin(struct proto_enc *e, uint16_t tag)
{
	size_t mark = e->out->len;
	proto_enc_bytes(e, tag, NULL, 0);
	return mark;
}

void proto_enc_nest_end(struct proto_enc *e, size_t mark)
{
	size_t n = e->out->len - mark - PROTO_FIELD_HDR_LEN;
	put_le32((uint8_t *)e->out->data + mark + 2, n > UINT32_MAX ? UINT32_MAX : (uint32_t)n);
}

void proto_enc_set_flags(struct proto_enc *e, uint16_t flags)
{
	put_le16((uint8_t *)e->out->data + e->start + 6, flags);
}

size_t proto_enc_size(const struct proto_enc *e)
{
	return e->out->len - e->start;
}

void proto_enc_abort(struct proto_enc *e)
{
	e->out->len = e->start;
	if (e->out->data)
		e->out->data[e->out->len] = '\0';
}

int proto_enc_end(struct proto_enc *e)
{
	size_t n = proto_enc_size(e);

	if (n > PROTO_MAX_FRAME) {
		proto_enc_abort(e);
		return -EMSGSIZE;
	}
	put_le32((uint8_t *)e->out->data + e->start + 12, (uint32_t)(n - PROTO_HDR_LEN));
	return 0;
}

/* ---- decoding ------------------------------------------------------------ */

/* Untrusted bytes: a field header needs 6 bytes, then len bytes must remain. */
int proto_validate_fields(const uint8_t *p, size_t n, size_t *budget)
{
	while (n) {
		if (n < PROTO_FIELD_HDR_LEN)
			return -EBADMSG;
		uint32_t len = get_le32(p + 2);
		if ((size_t)len > n - PROTO_FIELD_HDR_LEN)
			return -EBADMSG;
		if (*budget == 0)
			return -EBADMSG;
		(*budget)--;
		p += PROTO_FIELD_HDR_LEN + len;
		n -= PROTO_FIELD_HDR_LEN + len;
	}
	return 0;
}

int proto_parse(const uint8_t *p, size_t n, struct proto_frame *f, size_t *frame_len)
{
	size_t budget = PROTO_MAX_FIELDS;
	uint32_t len;

	memset(f, 0, sizeof(*f));
	*frame_len = 0;
	if (n < PROTO_HDR_LEN)
		return -EAGAIN;
	/* Untrusted header: check magic first, so that garbage is never taken
	 * for a length; then the length before waiting for the payload. */
	if (get_le32(p) != PROTO_MAGIC)
		return -EPROTO;
	f->type = p[5];
	f->flags = get_le16(p + 6);
	f->req_id = get_le32(p + 8);
	len = get_le32(p + 12);
	if (len > PROTO_MAX_PAYLOAD)
		return -EMSGSIZE;
	if (n - PROTO_HDR_LEN < len)
		return -EAGAIN;
	*frame_len = PROTO_HDR_LEN + (size_t)len;
	f->len = len;
	f->payload = p + PROTO_HDR_LEN;
	if (p[4] != PROTO_VERSION)
		return -EPROTONOSUPPORT;
	return proto_validate_fields(f->payload, len, &budget);
}

void proto_iter_init(struct proto_iter *it, const void *p, size_t n)
{
	it->p = p;
	it->left = p ? n : 0;
}

int proto_iter_next(struct proto_iter *it, struct proto_field *fld)
{
	if (it->left == 0)
		return 0;
	/* Untrusted: re-check bounds even though proto_parse validated the
	 * outer payload, because nested sequences reach here unvalidated. */
	if (it->left < PROTO_FIELD_HDR_LEN)
		return -EBADMSG;
	uint32_t len = get_le32(it->p + 2);
	if ((size_t)len > it->left - PROTO_FIELD_HDR_LEN)
		return -EBADMSG;
	fld->tag = get_le16(it->p);
	fld->len = len;
	fld->val = it->p + PROTO_FIELD_HDR_LEN;
	it->p += PROTO_FIELD_HDR_LEN + len;
	it->left -= PROTO_FIELD_HDR_LEN + len;
	return 1;
}

int proto_find(const void *p, size_t n, uint16_t tag, struct proto_field *fld)
{
	struct proto_iter it;
	int r;

	proto_iter_init(&it, p, n);
	while ((r = proto_iter_next(&it, fld)) > 0)
		if (fld->tag == tag)
			return 0;
	return r < 0 ? r : -ENOENT;
}

static int get_fixed(const void *p, size_t n, uint16_t tag, size_t want, const uint8_t **v)
{
	struct proto_field fld;
	int r = proto_find(p, n, tag, &fld);

	if (r < 0)
		return r;
	if (fld.len != want)
		return -EBADMSG;
	*v = fld.val;
	return 0;
}

int proto_get_u8(const void *p, size_t n, uint16_t tag, uint8_t *v)
{
	const uint8_t *b;
	int r = get_fixed(p, n, tag, 1, &b);
	if (r == 0)
		*v = b[0];
	return r;
}

int proto_get_u16(const void *p, size_t n, uint16_t tag, uint16_t *v)
{
	const uint8_t *b;
	int r = get_fixed(p, n, tag, 2, &b);
	if (r == 0)
		*v = get_le16(b);
	return r;
}

int proto_get_u32(const void *p, size_t n, uint16_t tag, uint32_t *v)
{
	const uint8_t *b;
	int r = get_fixed(p, n, tag, 4, &b);
	if (r == 0)
		*v = get_le32(b);
	return r;
}

int proto_get_u64(const void *p, size_t n, uint16_t tag, uint64_t *v)
{
	const uint8_t *b;
	int r = get_fixed(p, n, tag, 8, &b);
	if (r == 0)
		*v = get_le64(b);
	return r;
}

int proto_get_i64(const void *p, size_t n, uint16_t tag, int64_t *v)
{
	uint64_t u;
	int r = proto_get_u64(p, n, tag, &u);
	if (r == 0)
		*v = (int64_t)u;
	return r;
}

bool proto_get_flag(const void *p, size_t n, uint16_t tag)
{
	uint8_t v = 0;
	return proto_get_u8(p, n, tag, &v) == 0 && v != 0;
}

/* A string field is untrusted: bounded length, no embedded NUL (which would
 * make the C string differ from what was checked). */
static int check_str(const struct proto_field *fld, size_t max)
{
	if (fld->len > max)
		return -EBADMSG;
	if (fld->len && memchr(fld->val, '\0', fld->len))
		return -EBADMSG;
	return 0;
}

int proto_get_str(const void *p, size_t n, uint16_t tag, size_t max, char **s)
{
	struct proto_field fld;
	int r = proto_find(p, n, tag, &fld);

	if (r < 0)
		return r;
	r = check_str(&fld, max);
	if (r < 0)
		return r;
	*s = xstrndup((const char *)fld.val, fld.len);
	return 0;
}

int proto_get_strbuf(const void *p, size_t n, uint16_t tag, char *s, size_t cap)
{
	struct proto_field fld;
	int r = proto_find(p, n, tag, &fld);

	if (r < 0)
		return r;
	if (cap == 0)
		return -EBADMSG;
	r = check_str(&fld, cap - 1);
	if (r < 0)
		return r;
	memcpy(s, fld.val, fld.len);
	s[fld.len] = '\0';
	return 0;
}

int proto_get_bytes(const void *p, size_t n, uint16_t tag, const uint8_t **v, size_t *len)
{
	struct proto_field fld;
	int r = proto_find(p, n, tag, &fld);

	if (r < 0)
		return r;
	*v = fld.val;
	*len = fld.len;
	return 0;
}

/* ---- stream receiver ----------------------------------------------------- */

void proto_rx_init(struct proto_rx *rx)
{
	buf_init(&rx->b);
	rx->off = 0;
	rx->resync = false;
}

void proto_rx_free(struct proto_rx *rx)
{
	buf_free(&rx->b);
	rx->off = 0;
	rx->resync = false;
}

static void rx_compact(struct proto_rx *rx)
{
	if (rx->off == 0)
		return;
	if (rx->off >= rx->b.len) {
		buf_reset(&rx->b);
		rx->off = 0;
		return;
	}
	/* Move the tail down only when it is cheap relative to what we free. */
	if (rx->off >= 65536 || rx->off * 2 >= rx->b.len) {
		memmove(rx->b.data, rx->b.data + rx->off, rx->b.len - rx->off);
		rx->b.len -= rx->off;
		rx->b.data[rx->b.len] = '\0';
		rx->off = 0;
	}
}

ssize_t proto_rx_fill(struct proto_rx *rx, int fd)
{
	const size_t want = 256 * 1024;
	ssize_t r;

	rx_compact(rx);
	if (rx->b.cap < rx->b.len + want + 1) {
		rx->b.cap = rx->b.len + want + 1;
		rx->b.data = xrealloc(rx->b.data, rx->b.cap);
	}
	do
		r = read(fd, rx->b.data + rx->b.len, want);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	rx->b.len += (size_t)r;
	rx->b.data[rx->b.len] = '\0';
	return r;
}

void proto_rx_feed(struct proto_rx *rx, const void *p, size_t n)
{
	rx_compact(rx);
	buf_add(&rx->b, p, n);
}

size_t proto_rx_pending(const struct proto_rx *rx)
{
	return rx->b.len - rx->off;
}

static const uint8_t magic_bytes[4] = { 'A', 'L', 'C', 'K' };

int proto_rx_next(struct proto_rx *rx, struct proto_frame *f)
{
	const uint8_t *base = (const uint8_t *)rx->b.data;
	size_t flen;
	int r;

	memset(f, 0, sizeof(*f));
	if (rx->resync) {
		/* Skipping garbage: find the next magic; keep a possible prefix
		 * of it at the end of the buffer for the next fill. */
		size_t avail = rx->b.len - rx->off;
		const uint8_t *hit = avail >= 4 ?
			memmem(base + rx->off, avail, magic_bytes, 4) : NULL;
		if (!hit) {
			if (avail > 3)
				rx->off = rx->b.len - 3;
			return 0;
		}
		rx->off = (size_t)(hit - base);
		rx->resync = false;
	}
	r = proto_parse(base + rx->off, rx->b.len - rx->off, f, &flen);
	if (r == -EAGAIN)
		return 0;
	if (r == 0) {
		rx->off += flen;
		return 1;
	}
	if (flen > 0) {
		/* Boundary known (bad fields or version): drop just this frame. */
		rx->off += flen;
		f->payload = NULL;
		f->len = 0;
		return r;
	}
	/* Boundary unknown: never trust the length, scan for the next magic. */
	rx->off += 1;
	rx->resync = true;
	return r;
}
