/* proto-msg.c - typed encoders/decoders for the messages with several fields.
 *
 * Decoders take frames whose payload comes from the other side of the channel:
 * on the node that is a sandbox, so every value is range-checked and every
 * count is limited before anything is allocated for it.
 */
#include "proto.h"

#include <errno.h>
#include <string.h>

#include "../lib/ident.h"

/* ---- EXEC ---------------------------------------------------------------- */

int proto_enc_exec(struct buf *out, uint32_t req_id, const struct proto_exec *x)
{
	struct proto_enc e;
	size_t n;

	if (!x->argv || !x->argv[0])
		return -EINVAL;
	for (n = 0; x->argv[n]; n++)
		;
	if (n > PROTO_MAX_ARGV)
		return -E2BIG;
	for (n = 0; x->env && x->env[n]; n++)
		;
	if (n > PROTO_MAX_ENV)
		return -E2BIG;
	proto_enc_begin(&e, out, PT_EXEC, 0, req_id);
	for (size_t i = 0; x->argv[i]; i++)
		proto_enc_str(&e, PTAG_ARG, x->argv[i]);
	for (size_t i = 0; x->env && x->env[i]; i++)
		proto_enc_str(&e, PTAG_ENV, x->env[i]);
	if (x->cwd)
		proto_enc_str(&e, PTAG_CWD, x->cwd);
	proto_enc_u32(&e, PTAG_UID, x->uid);
	proto_enc_u32(&e, PTAG_GID, x->gid);
	if (x->pty) {
		proto_enc_u8(&e, PTAG_PTY, 1);
		proto_enc_u16(&e, PTAG_ROWS, x->rows);
		proto_enc_u16(&e, PTAG_COLS, x->cols);
	}
	if (x->stdin_open)
		proto_enc_u8(&e, PTAG_STDIN_OPEN, 1);
	return proto_enc_end(&e);
}

void proto_exec_free(struct proto_exec *x)
{
	if (!x)
		return;
	for (size_t i = 0; x->argv && x->argv[i]; i++)
		free(x->argv[i]);
	for (size_t i = 0; x->env && x->env[i]; i++)
		free(x->env[i]);
	free(x->argv);
	free(x->env);
	free(x->cwd);
	memset(x, 0, sizeof(*x));
}

/* An ARG/ENV entry (untrusted): a C string, so no NUL inside. Its length is
 * already bounded by the frame size. */
static char *dup_entry(const struct proto_field *fld)
{
	if (fld->len && memchr(fld->val, '\0', fld->len))
		return NULL;
	return xstrndup((const char *)fld->val, fld->len);
}

int proto_dec_exec(const struct proto_frame *f, struct proto_exec *x)
{
	struct proto_iter it;
	struct proto_field fld;
	size_t na = 0, ne = 0;
	bool have_env = false;
	int r;

	memset(x, 0, sizeof(*x));
	/* Pass 1: count, so the arrays are sized once and the limits apply
	 * before any allocation proportional to the input. */
	proto_iter_init(&it, f->payload, f->len);
	while ((r = proto_iter_next(&it, &fld)) > 0) {
		if (fld.tag == PTAG_ARG)
			na++;
		else if (fld.tag == PTAG_ENV) {
			ne++;
			have_env = true;
		}
	}
	if (r < 0)
		return r;
	if (na == 0)
		return -EINVAL;
	if (na > PROTO_MAX_ARGV || ne > PROTO_MAX_ENV)
		return -E2BIG;
	x->argv = xcalloc(na + 1, sizeof(char *));
	if (have_env)
		x->env = xcalloc(ne + 1, sizeof(char *));
	proto_iter_init(&it, f->payload, f->len);
	while ((r = proto_iter_next(&it, &fld)) > 0) {
		char *s;
		if (fld.tag != PTAG_ARG && fld.tag != PTAG_ENV)
			continue;
		if (!(s = dup_entry(&fld))) {
			r = -EBADMSG;
			break;
		}
		if (fld.tag == PTAG_ARG)
			x->argv[x->argc++] = s;
		else
			x->env[x->envc++] = s;
	}
	if (r < 0)
		goto fail;
	r = proto_get_str(f->payload, f->len, PTAG_CWD, PROTO_MAX_PATH, &x->cwd);
	if (r < 0 && r != -ENOENT)
		goto fail;
	/* Absent uid/gid mean root: the usual identity inside a sandbox. */
	if ((r = proto_get_u32(f->payload, f->len, PTAG_UID, &x->uid)) < 0 && r != -ENOENT)
		goto fail;
	if ((r = proto_get_u32(f->payload, f->len, PTAG_GID, &x->gid)) < 0 && r != -ENOENT)
		goto fail;
	x->pty = proto_get_flag(f->payload, f->len, PTAG_PTY);
	if ((r = proto_get_u16(f->payload, f->len, PTAG_ROWS, &x->rows)) < 0 && r != -ENOENT)
		goto fail;
	if ((r = proto_get_u16(f->payload, f->len, PTAG_COLS, &x->cols)) < 0 && r != -ENOENT)
		goto fail;
	x->stdin_open = proto_get_flag(f->payload, f->len, PTAG_STDIN_OPEN);
	return 0;
fail:
	proto_exec_free(x);
	return r;
}

/* ---- HELLO --------------------------------------------------------------- */

int proto_enc_hello(struct buf *out, uint32_t req_id, const struct proto_hello *h)
{
	struct proto_enc e;

	proto_enc_begin(&e, out, PT_HELLO, 0, req_id);
	proto_enc_u32(&e, PTAG_VERSION, h->version);
	if (h->boot_id[0])
		proto_enc_str(&e, PTAG_BOOT_ID, h->boot_id);
	return proto_enc_end(&e);
}

int proto_dec_hello(const struct proto_frame *f, struct proto_hello *h)
{
	int r;

	memset(h, 0, sizeof(*h));
	r = proto_get_u32(f->payload, f->len, PTAG_VERSION, &h->version);
	if (r < 0)
		return r == -ENOENT ? -EBADMSG : r;
	r = proto_get_strbuf(f->payload, f->len, PTAG_BOOT_ID, h->boot_id, sizeof(h->boot_id));
	if (r < 0 && r != -ENOENT)
		return r;
	return 0;
}

/* ---- ERROR --------------------------------------------------------------- */

int proto_enc_error(struct buf *out, uint32_t req_id, int err, const char *msg)
{
	struct proto_enc e;
	size_t n = msg ? strlen(msg) : 0;

	proto_enc_begin(&e, out, PT_ERROR, 0, req_id);
	proto_enc_u32(&e, PTAG_ERRNO, err > 0 ? (uint32_t)err : EIO);
	if (n)
		proto_enc_bytes(&e, PTAG_MSG, msg, n > PROTO_MAX_MSG ? PROTO_MAX_MSG : n);
	return proto_enc_end(&e);
}

int proto_dec_error(const struct proto_frame *f, struct proto_error *e)
{
	struct proto_field fld;
	int r;

	memset(e, 0, sizeof(*e));
	r = proto_get_u32(f->payload, f->len, PTAG_ERRNO, &e->err);
	if (r < 0 && r != -ENOENT)
		return r;
	/* An untrusted errno is only a number: keep it in a sane range so it
	 * can be returned as -errno without colliding with "success". */
	if (e->err == 0 || e->err > 4095)
		e->err = EIO;
	if (proto_find(f->payload, f->len, PTAG_MSG, &fld) == 0) {
		size_t n = fld.len > PROTO_MAX_MSG ? PROTO_MAX_MSG : fld.len;
		memcpy(e->msg, fld.val, n);
		e->msg[n] = '\0';
		/* Make it printable: a sandbox controls these bytes. */
		for (size_t i = 0; i < n; i++)
			if ((unsigned char)e->msg[i] < 0x20 || e->msg[i] == 0x7f)
				e->msg[i] = '?';
	}
	return 0;
}

/* ---- OUTPUT / EXIT ------------------------------------------------------- */

int proto_enc_output(struct buf *out, const struct proto_output *o)
{
	struct proto_enc e;

	proto_enc_begin(&e, out, PT_OUTPUT, 0, 0);
	proto_enc_u32(&e, PTAG_PID, o->pid);
	proto_enc_u8(&e, PTAG_FD, o->fd);
	proto_enc_u64(&e, PTAG_OFFSET, o->offset);
	proto_enc_bytes(&e, PTAG_DATA, o->data, o->len);
	return proto_enc_end(&e);
}

int proto_dec_output(const struct proto_frame *f, struct proto_output *o)
{
	int r;

	memset(o, 0, sizeof(*o));
	if ((r = proto_get_u32(f->payload, f->len, PTAG_PID, &o->pid)) < 0 ||
	    (r = proto_get_u8(f->payload, f->len, PTAG_FD, &o->fd)) < 0 ||
	    (r = proto_get_u64(f->payload, f->len, PTAG_OFFSET, &o->offset)) < 0 ||
	    (r = proto_get_bytes(f->payload, f->len, PTAG_DATA, &o->data, &o->len)) < 0)
		return -EBADMSG;
	if (o->fd != 1 && o->fd != 2)
		return -EBADMSG;
	/* offset + len must not wrap: the node uses it to place the data. */
	if (o->offset > UINT64_MAX - o->len)
		return -EBADMSG;
	return 0;
}

int proto_enc_exit(struct buf *out, const struct proto_exit *x)
{
	struct proto_enc e;

	proto_enc_begin(&e, out, PT_EXIT, 0, 0);
	proto_enc_u32(&e, PTAG_PID, x->pid);
	if (x->signal > 0)
		proto_enc_u32(&e, PTAG_EXIT_SIGNAL, (uint32_t)x->signal);
	else
		proto_enc_u32(&e, PTAG_EXIT_CODE, (uint32_t)x->code);
	return proto_enc_end(&e);
}

int proto_dec_exit(const struct proto_frame *f, struct proto_exit *x)
{
	uint32_t v;

	memset(x, 0, sizeof(*x));
	x->code = -1;
	if (proto_get_u32(f->payload, f->len, PTAG_PID, &x->pid) < 0)
		return -EBADMSG;
	if (proto_get_u32(f->payload, f->len, PTAG_EXIT_SIGNAL, &v) == 0) {
		if (v == 0 || v > 127)
			return -EBADMSG;
		x->signal = (int32_t)v;
		return 0;
	}
	if (proto_get_u32(f->payload, f->len, PTAG_EXIT_CODE, &v) < 0 || v > 255)
		return -EBADMSG;
	x->code = (int32_t)v;
	return 0;
}

/* ---- STAT / STATUS ------------------------------------------------------- */

void proto_enc_stat_fields(struct proto_enc *e, const struct proto_stat *st)
{
	proto_enc_u8(e, PTAG_TYPE, (uint8_t)st->type);
	proto_enc_u64(e, PTAG_SIZE, st->size);
	proto_enc_u32(e, PTAG_MODE, st->mode);
	proto_enc_i64(e, PTAG_MTIME, st->mtime_ms);
	proto_enc_u32(e, PTAG_UID, st->uid);
	proto_enc_u32(e, PTAG_GID, st->gid);
}

int proto_dec_stat_fields(const void *p, size_t n, struct proto_stat *st)
{
	uint8_t t;

	memset(st, 0, sizeof(*st));
	if (proto_get_u8(p, n, PTAG_TYPE, &t) < 0 ||
	    proto_get_u64(p, n, PTAG_SIZE, &st->size) < 0 ||
	    proto_get_u32(p, n, PTAG_MODE, &st->mode) < 0 ||
	    proto_get_i64(p, n, PTAG_MTIME, &st->mtime_ms) < 0 ||
	    proto_get_u32(p, n, PTAG_UID, &st->uid) < 0 ||
	    proto_get_u32(p, n, PTAG_GID, &st->gid) < 0)
		return -EBADMSG;
	if (t != 'f' && t != 'd' && t != 'l' && t != 'o')
		return -EBADMSG;
	st->type = (char)t;
	st->mode &= 07777;
	return 0;
}

int proto_enc_status(struct buf *out, uint32_t req_id, const struct proto_status *s)
{
	struct proto_enc e;

	proto_enc_begin(&e, out, PT_STATUS_OK, 0, req_id);
	proto_enc_i64(&e, PTAG_LAST_ACTIVITY, s->last_activity_ms);
	proto_enc_u64(&e, PTAG_UPTIME, s->uptime_ms);
	proto_enc_u32(&e, PTAG_NPROCS, s->n_procs);
	proto_enc_u64(&e, PTAG_CPU_MS, s->cpu_ms);
	return proto_enc_end(&e);
}

int proto_dec_status(const struct proto_frame *f, struct proto_status *s)
{
	int r;

	memset(s, 0, sizeof(*s));
	if (proto_get_i64(f->payload, f->len, PTAG_LAST_ACTIVITY, &s->last_activity_ms) < 0 ||
	    proto_get_u64(f->payload, f->len, PTAG_UPTIME, &s->uptime_ms) < 0 ||
	    proto_get_u32(f->payload, f->len, PTAG_NPROCS, &s->n_procs) < 0)
		return -EBADMSG;
	/* Optional: an older agent does not send it; a malformed one is an
	 * error like any other field's. */
	r = proto_get_u64(f->payload, f->len, PTAG_CPU_MS, &s->cpu_ms);
	if (r < 0 && r != -ENOENT)
		return -EBADMSG;
	if (r < 0)
		s->cpu_ms = 0;
	return 0;
}

/* ---- RESET --------------------------------------------------------------- */

/* A wall clock outside [2020, 2200) is a host bug, not a time to set. */
#define RESET_WALL_MIN_S 1577836800ull
#define RESET_WALL_MAX_S 7258118400ull

/* The hostname rule is lib/ident.h's, the one nodemgr applies too. */
_Static_assert(PROTO_HOSTNAME_MAX == IDENT_MAX, "a hostname's bound is ident.h's");

bool proto_machine_id_ok(const char *s)
{
	bool nonzero = false;

	if (strlen(s) != PROTO_MACHINE_ID_LEN)
		return false;
	for (size_t i = 0; i < PROTO_MACHINE_ID_LEN; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
		nonzero |= s[i] != '0';
	}
	return nonzero;
}

/* A unicast IPv4 address a guest could have or route to. */
static bool unicast_ok(uint32_t a)
{
	return a != 0 && (a >> 24) != 127 && (a >> 28) != 0xe && (a >> 28) != 0xf;
}

static bool reset_net_ok(const struct proto_reset *x)
{
	uint32_t mask;

	if (!x->net_addr)
		return !x->net_gateway && !x->net_dns && !x->net_prefix;
	if (x->net_prefix < 1 || x->net_prefix > 32 || !unicast_ok(x->net_addr) ||
	    !unicast_ok(x->net_gateway) || !unicast_ok(x->net_dns) ||
	    x->net_gateway == x->net_addr)
		return false;
	mask = x->net_prefix == 32 ? ~0u : ~(~0u >> x->net_prefix);
	if ((x->net_addr & mask) != (x->net_gateway & mask) && x->net_prefix < 32)
		return false;
	/* On a /30 or wider, not the subnet's own network or broadcast. */
	if (x->net_prefix < 31) {
		uint32_t host = ~mask;
		if ((x->net_addr & host) == 0 || (x->net_addr & host) == host ||
		    (x->net_gateway & host) == 0 || (x->net_gateway & host) == host)
			return false;
	}
	return true;
}

static bool reset_ok(const struct proto_reset *x)
{
	if (!reset_net_ok(x))
		return false;
	if (x->wall_ns && (x->wall_ns / 1000000000ull < RESET_WALL_MIN_S ||
			   x->wall_ns / 1000000000ull >= RESET_WALL_MAX_S))
		return false;
	if (x->entropy_len < PROTO_RESET_ENTROPY_MIN || x->entropy_len > PROTO_RESET_ENTROPY_MAX)
		return false;
	return ident_hostname_ok(x->hostname) && proto_machine_id_ok(x->machine_id);
}

int proto_enc_reset(struct buf *out, uint32_t req_id, const struct proto_reset *x)
{
	struct proto_enc e;

	if (!reset_ok(x))
		return -EINVAL;
	proto_enc_begin(&e, out, PT_RESET, 0, req_id);
	proto_enc_u64(&e, PTAG_WALLCLOCK, x->wall_ns);
	proto_enc_bytes(&e, PTAG_ENTROPY, x->entropy, x->entropy_len);
	proto_enc_str(&e, PTAG_HOSTNAME, x->hostname);
	proto_enc_str(&e, PTAG_MACHINE_ID, x->machine_id);
	if (x->net_addr) {
		proto_enc_u32(&e, PTAG_NET_ADDR, x->net_addr);
		proto_enc_u8(&e, PTAG_NET_PREFIX, x->net_prefix);
		proto_enc_u32(&e, PTAG_NET_GATEWAY, x->net_gateway);
		proto_enc_u32(&e, PTAG_NET_DNS, x->net_dns);
	}
	return proto_enc_end(&e);
}

int proto_dec_reset(const struct proto_frame *f, struct proto_reset *x)
{
	const uint8_t *ent;
	size_t n;
	int r;

	memset(x, 0, sizeof(*x));
	if (proto_get_u64(f->payload, f->len, PTAG_WALLCLOCK, &x->wall_ns) < 0 ||
	    proto_get_bytes(f->payload, f->len, PTAG_ENTROPY, &ent, &n) < 0)
		return -EBADMSG;
	if (n < PROTO_RESET_ENTROPY_MIN || n > PROTO_RESET_ENTROPY_MAX)
		return -EINVAL;
	memcpy(x->entropy, ent, n);
	x->entropy_len = n;
	/* Strings longer than their buffers are -EBADMSG (proto_get_strbuf). */
	r = proto_get_strbuf(f->payload, f->len, PTAG_HOSTNAME, x->hostname, sizeof(x->hostname));
	if (r == 0)
		r = proto_get_strbuf(f->payload, f->len, PTAG_MACHINE_ID, x->machine_id,
				     sizeof(x->machine_id));
	if (r == -ENOENT)
		return -EBADMSG;
	if (r < 0)
		return r;
	/* The network: all four fields or none (an older host sends none). */
	r = proto_get_u32(f->payload, f->len, PTAG_NET_ADDR, &x->net_addr);
	if (r == 0) {
		if (proto_get_u8(f->payload, f->len, PTAG_NET_PREFIX, &x->net_prefix) < 0 ||
		    proto_get_u32(f->payload, f->len, PTAG_NET_GATEWAY, &x->net_gateway) < 0 ||
		    proto_get_u32(f->payload, f->len, PTAG_NET_DNS, &x->net_dns) < 0)
			return -EBADMSG;
		if (!x->net_addr)
			return -EINVAL;
	} else if (r != -ENOENT) {
		return -EBADMSG;
	}
	return reset_ok(x) ? 0 : -EINVAL;
}

/* ---- PORT_* -------------------------------------------------------------- */

static bool is_port_type(unsigned t)
{
	return t >= PT_PORT_OPEN && t <= PT_PORT_CLOSE;
}

int proto_enc_port(struct buf *out, uint32_t req_id, const struct proto_port *m)
{
	struct proto_enc e;

	if (!is_port_type(m->type) || (m->type == PT_PORT_OPEN && m->port == 0) ||
	    (m->type == PT_PORT_DATA && (m->len == 0 || m->len > PROTO_CHUNK)) ||
	    (m->type == PT_PORT_CREDIT && (m->credit == 0 || m->credit > PROTO_PORT_WINDOW)))
		return -EINVAL;
	proto_enc_begin(&e, out, m->type, 0, m->type == PT_PORT_OPEN ? req_id : 0);
	proto_enc_u32(&e, PTAG_STREAM, m->stream);
	switch (m->type) {
	case PT_PORT_OPEN: proto_enc_u16(&e, PTAG_PORT, m->port); break;
	case PT_PORT_DATA: proto_enc_bytes(&e, PTAG_DATA, m->data, m->len); break;
	case PT_PORT_CREDIT: proto_enc_u32(&e, PTAG_CREDIT, m->credit); break;
	case PT_PORT_CLOSE: proto_enc_u32(&e, PTAG_ERRNO, m->err); break;
	}
	return proto_enc_end(&e);
}

/* Untrusted on the node's side: a guest could claim any stream, size or
 * credit; what it may claim is limited here, what it owns is checked by the
 * receiver's stream table. */
int proto_dec_port(const struct proto_frame *f, struct proto_port *m)
{
	memset(m, 0, sizeof(*m));
	if (!is_port_type(f->type))
		return -EBADMSG;
	m->type = f->type;
	if (proto_get_u32(f->payload, f->len, PTAG_STREAM, &m->stream) < 0)
		return -EBADMSG;
	switch (f->type) {
	case PT_PORT_OPEN:
		if (proto_get_u16(f->payload, f->len, PTAG_PORT, &m->port) < 0 || m->port == 0)
			return -EBADMSG;
		break;
	case PT_PORT_DATA:
		if (proto_get_bytes(f->payload, f->len, PTAG_DATA, &m->data, &m->len) < 0 ||
		    m->len == 0 || m->len > PROTO_CHUNK)
			return -EBADMSG;
		break;
	case PT_PORT_CREDIT:
		if (proto_get_u32(f->payload, f->len, PTAG_CREDIT, &m->credit) < 0 ||
		    m->credit == 0 || m->credit > PROTO_PORT_WINDOW)
			return -EBADMSG;
		break;
	case PT_PORT_CLOSE:
		/* Absent = clean close; a value that is no errno is EIO. */
		if (proto_get_u32(f->payload, f->len, PTAG_ERRNO, &m->err) == -EBADMSG)
			return -EBADMSG;
		if (m->err > 4095)
			m->err = EIO;
		break;
	}
	return 0;
}

/* ---- WATCH_* ------------------------------------------------------------- */

static bool watch_path_ok(const char *s, bool absolute)
{
	return s && strlen(s) <= PROTO_MAX_PATH && (s[0] == '/') == absolute;
}

int proto_enc_watch(struct buf *out, uint32_t req_id, const struct proto_watch *m)
{
	struct proto_enc e;

	switch (m->type) {
	case PT_WATCH_START:
		if (!watch_path_ok(m->path, true))
			return -EINVAL;
		break;
	case PT_WATCH_EVENT:
		if (m->kind < PW_CREATE || m->kind > PW_OVERFLOW ||
		    (m->kind != PW_OVERFLOW && !watch_path_ok(m->path, false)) ||
		    (m->kind == PW_RENAME && !watch_path_ok(m->path2, false)))
			return -EINVAL;
		break;
	case PT_WATCH_STOP:
		break;
	default:
		return -EINVAL;
	}
	proto_enc_begin(&e, out, m->type, 0, m->type == PT_WATCH_START ? req_id : 0);
	proto_enc_u32(&e, PTAG_STREAM, m->id);
	if (m->type == PT_WATCH_START) {
		proto_enc_str(&e, PTAG_PATH, m->path);
		proto_enc_u8(&e, PTAG_RECURSIVE, m->recursive);
	} else if (m->type == PT_WATCH_EVENT) {
		proto_enc_u8(&e, PTAG_TYPE, m->kind);
		if (m->kind != PW_OVERFLOW)
			proto_enc_str(&e, PTAG_PATH, m->path);
		if (m->kind == PW_RENAME)
			proto_enc_str(&e, PTAG_PATH2, m->path2);
		proto_enc_u8(&e, PTAG_DIR, m->dir);
	}
	return proto_enc_end(&e);
}

/* Untrusted on the node's side: an event's paths are names the guest
 * reports; they are only ever shown to the owner (JSON-escaped there). */
int proto_dec_watch(const struct proto_frame *f, struct proto_watch *m)
{
	memset(m, 0, sizeof(*m));
	if (f->type < PT_WATCH_START || f->type > PT_WATCH_STOP)
		return -EBADMSG;
	m->type = f->type;
	if (proto_get_u32(f->payload, f->len, PTAG_STREAM, &m->id) < 0)
		return -EBADMSG;
	switch (f->type) {
	case PT_WATCH_START:
		if (proto_get_str(f->payload, f->len, PTAG_PATH, PROTO_MAX_PATH, &m->path) < 0 ||
		    m->path[0] != '/')
			return -EBADMSG;
		m->recursive = proto_get_flag(f->payload, f->len, PTAG_RECURSIVE);
		break;
	case PT_WATCH_EVENT:
		if (proto_get_u8(f->payload, f->len, PTAG_TYPE, &m->kind) < 0 ||
		    m->kind < PW_CREATE || m->kind > PW_OVERFLOW)
			return -EBADMSG;
		m->dir = proto_get_flag(f->payload, f->len, PTAG_DIR);
		if (m->kind == PW_OVERFLOW)
			break;
		if (proto_get_str(f->payload, f->len, PTAG_PATH, PROTO_MAX_PATH, &m->path) < 0 ||
		    m->path[0] == '/')
			return -EBADMSG;
		if (m->kind == PW_RENAME &&
		    (proto_get_str(f->payload, f->len, PTAG_PATH2, PROTO_MAX_PATH, &m->path2) < 0 ||
		     m->path2[0] == '/'))
			return -EBADMSG;
		break;
	}
	return 0;
}

void proto_watch_free(struct proto_watch *m)
{
	free(m->path);
	free(m->path2);
	m->path = m->path2 = NULL;
}
