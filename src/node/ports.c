/* ports.c - a sandbox's TCP ports for its owner: the HTTP reverse proxy
 * (/v1/sandboxes/{id}/ports/{port}/{path...}, WebSocket included) and the
 * raw TCP tunnel (/v1/sandboxes/{id}/tunnel/{port} with Upgrade: airlock-tcp).
 *
 * The node reaches the port through the guest agent's channel (PORT_* frames,
 * src/guestproto/proto.h), not by the sandbox's network address: the channel
 * exists for both backends already, the host needs no route into the
 * sandbox, nothing listens on any interface, and the gateway's rules stay
 * one-way (out of the sandbox only).
 *
 * Both forms end as one byte pipe between the connection the api made to us
 * and a guest stream: after PORT_OPEN succeeds we take the HTTP connection
 * over (http_conn_takeover) and relay until both directions ended.
 *   - proxy: we write the request, rewritten for the sandbox (Host, hop-by-hop
 *     headers, Connection: close or the Upgrade), then the sandbox's answer
 *     goes back with its head rewritten (ports_rewrite_head: the service's
 *     hop-by-hop headers replaced by ours) and the rest byte for byte: a
 *     streamed body, or after a 101 WebSocket frames both ways.
 *   - tunnel: we answer 101 ourselves and relay raw bytes.
 * Errors before the takeover are ordinary JSON answers: 404 for another
 * tenant's sandbox, 502 `bad_gateway` when nothing listens on the port.
 *
 * A relay does not keep its sandbox from being deleted or rolled back: the
 * teardown resets every stream (guestconn_ports_abort) before it waits for
 * the channel's users, so a long-lived tunnel ends instead of blocking it.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "../lib/http-cookie.h"
#include "../lib/log.h"
#include "node-internal.h"

#define RELAY_CHUNK (64u * 1024)

/* Request headers that describe this hop only (RFC 9110 7.6.1), or that we
 * set ourselves; the rest go to the sandbox unchanged. */
static bool hop_header(const char *name, const char *connection)
{
	static const char *const hop[] = {
		"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization",
		"Proxy-Authenticate", "TE", "Trailer", "Transfer-Encoding", "Upgrade", "Host",
		"Content-Length",
		/* We already answered 100-continue and read the body. */
		"Expect",
	};
	for (size_t i = 0; i < ARRAY_SIZE(hop); i++)
		if (strcasecmp(name, hop[i]) == 0)
			return true;
	/* Ours (identity, routing): never shown to the sandbox. */
	if (strncasecmp(name, "X-Airlock-", 10) == 0)
		return true;
	/* Headers the client named in Connection are hop-by-hop too. */
	return connection && http_has_token(connection, name);
}

static bool value_ok(const char *v)
{
	for (; *v; v++)
		if ((unsigned char)*v < 0x20 && *v != '\t')
			return false;
	return true;
}

/* The request as the service in the sandbox gets it. */
static void build_request(struct buf *out, const struct http_req *req, const char *target,
			  uint16_t port, const char *prefix)
{
	const char *conn = http_req_header(req, "Connection");
	const char *upg = http_req_header(req, "Upgrade");
	bool upgrade = upg && conn && http_has_token(conn, "upgrade") && value_ok(upg);

	buf_printf(out, "%s %s HTTP/1.1\r\nHost: localhost:%u\r\n", req->method, target, port);
	for (size_t i = 0; i < req->n_headers; i++) {
		const struct http_header *h = &req->headers[i];
		if (hop_header(h->name, conn) || !value_ok(h->value))
			continue;
		buf_printf(out, "%s: %s\r\n", h->name, h->value);
	}
	if (prefix)
		buf_printf(out, "X-Forwarded-Prefix: %s\r\n", prefix);
	if (upgrade)
		buf_printf(out, "Connection: Upgrade\r\nUpgrade: %s\r\n", upg);
	else
		/* One request per stream: the answer ends when the service
		 * closes, which is what lets us pass it on unparsed. */
		buf_adds(out, "Connection: close\r\n");
	if (req->body_len || strcmp(req->method, "POST") == 0 || strcmp(req->method, "PUT") == 0 ||
	    strcmp(req->method, "PATCH") == 0)
		buf_printf(out, "Content-Length: %zu\r\n", req->body_len);
	buf_adds(out, "\r\n");
}

/* ---- the relay between the api's connection and a guest stream ---------- */

struct pipe_state {
	int fd;                 /* client (the api's connection), non-blocking */
	struct gstream *st;
	char *up;               /* client -> guest, waiting for credit */
	size_t up_len, up_off;
	bool up_eof, up_shut;
	char *down;             /* guest -> client */
	size_t down_len, down_off, down_cap;
	bool down_eof, down_shut;
	bool head_pending;      /* proxy: the service's answer head is still to be rewritten */
	struct buf head;        /* its bytes so far */
};

#define MAX_RESP_HEAD (16u * 1024)
#define MAX_CONN_LIST 1024     /* of the service's Connection list, looked at */

/* Response headers that describe the service's hop: replaced by ours.
 * name[0..n): without the blanks a browser trims before the colon; conn:
 * the service's Connection list (NUL-terminated, NULL: none). */
static bool resp_hop_header(const char *name, size_t n, const char *conn, bool upgrade)
{
	static const char *const hop[] = {
		"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "TE",
	};
	char nm[128];

	for (size_t i = 0; i < ARRAY_SIZE(hop); i++)
		if (strlen(hop[i]) == n && strncasecmp(name, hop[i], n) == 0)
			return true;
	if (!upgrade && n == 7 && strncasecmp(name, "Upgrade", 7) == 0)
		return true;
	/* A name longer than any token we keep of the list is not in it. */
	if (!conn || n >= sizeof(nm))
		return false;
	memcpy(nm, name, n);
	nm[n] = '\0';
	return strcasecmp(nm, "Upgrade") != 0 && http_has_token(conn, nm);
}

/* One field of an answer head: its first line, and the lines after it that
 * begin with SP or HT (obs-fold, RFC 9112 5.2), which browsers join to it.
 * A field is kept or dropped whole: a folded line left behind would join
 * whatever field we emitted before it (a Set-Cookie we had rewritten). */
struct field {
	const char *start, *end;   /* end: past the last line's '\n' */
	const char *colon;         /* NULL: the first line has none */
	size_t name_n;             /* the name before the colon, blanks trimmed */
	bool folded;
};

/* The field at l (not the blank line); false when its first line does not
 * end before end. */
static bool next_field(const char *l, const char *end, struct field *f)
{
	const char *e = memchr(l, '\n', (size_t)(end - l));

	if (!e)
		return false;
	f->start = l;
	f->colon = memchr(l, ':', (size_t)(e - l));
	f->name_n = f->colon ? (size_t)(f->colon - l) : 0;
	/* "Set-Cookie :" is Set-Cookie to a browser that trims the name. */
	while (f->name_n && (l[f->name_n - 1] == ' ' || l[f->name_n - 1] == '\t'))
		f->name_n--;
	f->folded = false;
	for (const char *nx = e + 1; nx < end && (*nx == ' ' || *nx == '\t'); nx = e + 1) {
		const char *e2 = memchr(nx, '\n', (size_t)(end - nx));
		if (!e2)
			break;
		e = e2;
		f->folded = true;
	}
	f->end = e + 1;
	return true;
}

/* The value of f (which has a colon), its lines joined by a space as RFC
 * 9112 5.2 asks of a proxy, without line ends; appended to out. */
static void field_value(const struct field *f, struct buf *out)
{
	for (const char *p = f->colon + 1; p < f->end;) {
		const char *e = memchr(p, '\n', (size_t)(f->end - p));
		size_t len = (size_t)(e - p);
		if (len && p[len - 1] == '\r')
			len--;
		if (p != f->colon + 1)
			buf_addc(out, ' ');
		buf_add(out, p, len);
		p = e + 1;
	}
}

/* No NUL and no CR but before LF in p[0..n). Some browsers split header
 * lines at a bare CR: a field "X: 1<CR>Set-Cookie: ..." would carry a
 * cookie we never saw as one. RFC 9110 5.5 lets a recipient reject such a
 * field; we drop it (or, in the status line, the answer). */
static bool no_bare_cr(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] == '\0' || (p[i] == '\r' && (i + 1 == n || p[i + 1] != '\n')))
			return false;
	return true;
}

static bool blank_line(const char *l, const char *end)
{
	return l[0] == '\n' || (l[0] == '\r' && l + 1 < end && l[1] == '\n');
}

/* A Set-Cookie of the service, made host-only (lib/http-cookie.h): a
 * cookie for the parent domain would reach every other sandbox's host-routed
 * URL, and under the API path the API's own. Dropped when the rewriter
 * says so or past the count. */
static void emit_set_cookie(const struct field *f, unsigned *n_cookies, struct buf *out)
{
	_cleanup_(buf_free) struct buf v = { 0 };
	_cleanup_(buf_free) struct buf nv = { 0 };
	size_t a = 0, b;

	field_value(f, &v);
	buf_addc(&v, '\0');   /* data never NULL; the NUL is not part of the value */
	b = v.len - 1;
	while (a < b && (v.data[a] == ' ' || v.data[a] == '\t'))
		a++;
	while (b > a && (v.data[b - 1] == ' ' || v.data[b - 1] == '\t'))
		b--;
	if (*n_cookies >= HTTP_SETCOOKIE_MAX_COUNT ||
	    !http_setcookie_rewrite(v.data + a, b - a, HTTP_PORT_TOKEN_COOKIE, &nv))
		return;
	(*n_cookies)++;
	buf_adds(out, "Set-Cookie: ");
	if (nv.len)
		buf_add(out, nv.data, nv.len);
	buf_adds(out, "\r\n");
}

/* Rewrite one answer head h[0..n) (through its blank line) into out: the
 * service's hop-by-hop headers go, and ours say how this hop ends: the
 * connection closes after the answer (we relay it unparsed, so it ends when
 * the service closes), or it was upgraded (101). Its Set-Cookie fields lose
 * any Domain (emit_set_cookie); folded fields are unfolded; a line with no
 * colon, or with a NUL or a bare CR, goes. Returns the status, or -1 when
 * this is not an HTTP/1.x answer head (or its status line has a NUL or a
 * bare CR). */
int ports_rewrite_head(const char *h, size_t n, struct buf *out)
{
	_cleanup_(buf_free) struct buf conn = { 0 };
	const char *eol = memchr(h, '\n', n), *end = h + n;
	unsigned n_cookies = 0;
	struct field f;
	int status;

	/* Bytes from the sandbox: "HTTP/1.x NNN", nothing read beyond n. */
	if (!eol || eol - h < 12 || strncmp(h, "HTTP/1.", 7) != 0 || h[7] < '0' || h[7] > '9' ||
	    h[8] != ' ')
		return -1;
	status = 0;
	for (int i = 9; i < 12; i++) {
		if (h[i] < '0' || h[i] > '9')
			return -1;
		status = status * 10 + (h[i] - '0');
	}
	if (status < 100 || !no_bare_cr(h, (size_t)(eol + 1 - h)))
		return -1;
	bool upgrade = status == 101;
	/* First pass: the Connection fields name more hop-by-hop headers. */
	for (const char *l = eol + 1; l < end && !blank_line(l, end) && next_field(l, end, &f);
	     l = f.end) {
		if (f.colon && f.name_n == 10 && strncasecmp(l, "Connection", 10) == 0 &&
		    no_bare_cr(f.start, (size_t)(f.end - f.start))) {
			if (conn.len)
				buf_addc(&conn, ',');
			field_value(&f, &conn);
		}
	}
	/* Each field is looked up in the list: bound the work a service
	 * can make us do per field (a name past the bound stays; it is only
	 * the service's own header, passed on). */
	if (conn.len > MAX_CONN_LIST)
		conn.len = MAX_CONN_LIST;
	buf_addc(&conn, '\0');
	buf_add(out, h, (size_t)(eol + 1 - h));
	for (const char *l = eol + 1; l < end;) {
		if (blank_line(l, end)) {
			buf_adds(out, upgrade ? "Connection: Upgrade\r\n" : "Connection: close\r\n");
			buf_add(out, l, l[0] == '\n' ? 1 : 2);
			break;
		}
		if (!next_field(l, end, &f))
			break;
		l = f.end;
		/* No colon (or no name): browsers skip the line, and might or
		 * might not join folded lines to it. */
		if (!f.colon || !f.name_n || !no_bare_cr(f.start, (size_t)(f.end - f.start)) ||
		    resp_hop_header(f.start, f.name_n, conn.len > 1 ? conn.data : NULL, upgrade))
			continue;
		if (f.name_n == 10 && strncasecmp(f.start, "Set-Cookie", 10) == 0) {
			emit_set_cookie(&f, &n_cookies, out);
		} else if (!f.folded) {
			buf_add(out, f.start, (size_t)(f.end - f.start));
		} else {
			buf_add(out, f.start, (size_t)(f.colon + 1 - f.start));
			field_value(&f, out);
			buf_adds(out, "\r\n");
		}
	}
	return status;
}

/* A 502 of ours in place of the service's answer. */
static void bad_gateway(struct buf *out, const char *why)
{
	_cleanup_free_ char *body = xasprintf("{\"error\":{\"code\":\"bad_gateway\",\"message\":"
					      "\"%s\"}}", why);
	buf_printf(out, "HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json"
			"\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
		   strlen(body), body);
}

/* Proxy: hold the answer until its head is complete, then put the
 * rewritten head (and what followed it) into p->down. An answer that is no
 * HTTP/1.x, or whose head does not end within MAX_RESP_HEAD, gets a 502
 * instead: passed on unrewritten, its head would reach the browser with
 * the service's Set-Cookie as sent (browsers read heads more leniently than
 * ports_rewrite_head: "http/1.1", leading bytes, HTTP/0.9). */
static int filter_head(struct pipe_state *p)
{
	_cleanup_(buf_free) struct buf out = { 0 };

	buf_add(&p->head, p->down, p->down_len);
	p->down_len = p->down_off = 0;
	for (;;) {
		const char *h = p->head.data ? p->head.data : "";
		/* The head ends at the first blank line, "\r\n" or bare "\n"
		 * (some CGI servers pass their script's line ends on). */
		const char *e = memmem(h, p->head.len, "\r\n\r\n", 4);
		const char *e2 = memmem(h, p->head.len, "\n\n", 2);
		size_t hl = e ? (size_t)(e + 4 - h) : 0;
		int status = -1;

		if (e2 && (!e || e2 + 2 < e + 4))
			hl = (size_t)(e2 + 2 - h);
		if (!hl && p->head.len < MAX_RESP_HEAD && !p->down_eof)
			return 0;   /* more to come */
		if (!p->head.len && p->down_eof) {
			/* Closed without a word: say so, as for a closed port. */
			bad_gateway(&out, "the service closed the connection without an answer");
			p->head_pending = false;
			break;
		}
		if (hl)
			status = ports_rewrite_head(h, hl, &out);
		if (status < 0) {
			/* Not an answer we understand. The rest of it is
			 * dropped: the client's connection ends after ours. */
			bad_gateway(&out, hl ? "the service's answer is not HTTP/1.x"
					     : "the service's answer head is cut off or over 16 KiB");
			p->head_pending = false;
			p->down_eof = true;
			buf_reset(&p->head);
			break;
		}
		/* Interim answers (103, 100) come before the real one. */
		memmove(p->head.data, p->head.data + hl, p->head.len - hl);
		p->head.len -= hl;
		if (status >= 200 || status == 101) {
			buf_add(&out, p->head.data, p->head.len);
			buf_reset(&p->head);
			p->head_pending = false;
			break;
		}
	}
	if (out.len > p->down_cap) {
		p->down = xrealloc(p->down, out.len);
		p->down_cap = out.len;
	}
	memcpy(p->down, out.data, out.len);
	p->down_len = out.len;
	return 0;
}

/* Move what can move now; returns 0, or -errno when the relay must end. */
static int pipe_step(struct pipe_state *p)
{
	int r;

	/* guest -> client */
	for (;;) {
		if (p->down_off < p->down_len) {
			ssize_t w = send(p->fd, p->down + p->down_off, p->down_len - p->down_off,
					 MSG_NOSIGNAL);
			if (w < 0) {
				if (errno == EINTR)
					continue;
				if (errno == EAGAIN)
					break;
				return -errno;
			}
			p->down_off += (size_t)w;
			continue;
		}
		p->down_len = p->down_off = 0;
		if (p->down_eof) {
			if (!p->down_shut) {
				shutdown(p->fd, SHUT_WR);
				p->down_shut = true;
			}
			break;
		}
		ssize_t n = gstream_read(p->st, p->down, RELAY_CHUNK);
		if (n == -EAGAIN)
			break;
		/* A service that resets before any answer gets the 502 that
		 * filter_head writes for "closed without a word". */
		if (n < 0 && p->head_pending && !p->head.len)
			n = 0;
		if (n < 0)
			return (int)n;
		if (n == 0)
			p->down_eof = true;
		p->down_len = (size_t)n;
		if (p->head_pending && (r = filter_head(p)) < 0)
			return r;
	}
	/* client -> guest */
	for (;;) {
		if (p->up_off < p->up_len) {
			ssize_t w = gstream_write(p->st, p->up + p->up_off, p->up_len - p->up_off);
			if (w < 0)
				return (int)w;
			if (w == 0)
				break;    /* no credit: the guest's reader is behind */
			p->up_off += (size_t)w;
			continue;
		}
		p->up_len = p->up_off = 0;
		if (p->up_eof) {
			if (!p->up_shut) {
				if (gstream_shut(p->st) < 0)
					return -ECONNRESET;
				p->up_shut = true;
			}
			break;
		}
		ssize_t n = recv(p->fd, p->up, RELAY_CHUNK, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				break;
			return -errno;
		}
		if (n == 0)
			p->up_eof = true;
		p->up_len = (size_t)n;
	}
	return 0;
}

/* Relay until both directions ended or one side failed. `pending`: bytes
 * of the client that arrived behind the request. */
static int pipe_run(int fd, struct gstream *st, const struct buf *pending, bool proxy)
{
	struct pipe_state p = { .fd = fd, .st = st, .head_pending = proxy };
	int fl = fcntl(fd, F_GETFL), r = 0;
	bool hup = false;

	if (fl >= 0)
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	p.up = xmalloc(RELAY_CHUNK + pending->len);
	p.down = xmalloc(RELAY_CHUNK);
	p.down_cap = RELAY_CHUNK;
	buf_init(&p.head);
	if (pending->len) {
		memcpy(p.up, pending->data, pending->len);
		p.up_len = pending->len;
	}
	for (;;) {
		/* Clear first, then look: anything that arrives after the
		 * clear sets the eventfd again, so no wake-up is lost. */
		gstream_clear(st);
		if ((r = pipe_step(&p)) < 0)
			break;
		if (p.up_shut && p.down_shut)
			break;
		struct pollfd pf[2] = {
			{ .fd = gstream_fd(st), .events = POLLIN },
			{ .fd = fd },
		};
		if (p.down_off < p.down_len)
			pf[1].events |= POLLOUT;
		if (!p.up_eof && p.up_off >= p.up_len)
			pf[1].events |= POLLIN;
		if (hup && !(pf[1].events & POLLIN))
			pf[1].fd = -1;    /* would poll ready for ever */
		if (poll(pf, 2, -1) < 0 && errno != EINTR) {
			r = -errno;
			break;
		}
		if (pf[1].revents & (POLLHUP | POLLERR)) {
			hup = true;
			/* Gone both ways after its EOF: the answer has nobody
			 * to go to. */
			if (p.up_eof)
				break;
		}
	}
	free(p.up);
	free(p.down);
	buf_free(&p.head);
	return r;
}

/* ---- handlers ------------------------------------------------------------- */

static bool parse_port(const char *s, size_t n, uint16_t *port)
{
	unsigned v = 0;

	if (n == 0 || n > 5)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (v == 0 || v > 65535 || s[0] == '0')
		return false;
	*port = (uint16_t)v;
	return true;
}

static void respond_open_error(struct http_conn *c, struct sandbox *sb, uint16_t port,
			       const err_t *e)
{
	switch (e->code) {
	case ECONNREFUSED:
	case ECONNRESET:
	case ETIMEDOUT:
	case EHOSTUNREACH:
	case ENETUNREACH:
	case EMFILE:
		http_respond_error(c, 502, "bad_gateway",
				   "cannot connect to port %u in sandbox %s: %s", port, sb->id,
				   strerror(e->code));
		return;
	}
	sandbox_respond_err(c, sb, e);
}

/* Open a stream to port; while nothing listens (ECONNREFUSED), ask again
 * every 50 ms for up to wait_ms: a service that starts with its sandbox may
 * not listen yet in its first moments. */
static struct gstream *port_open_waiting(struct guestconn *gc, uint16_t port, uint64_t wait_ms,
					 err_t *err)
{
	uint64_t until = now_ms() + wait_ms;
	struct gstream *st;

	while (!(st = guestconn_port_open(gc, port, err)) && err->code == ECONNREFUSED &&
	       now_ms() < until) {
		struct timespec ts = { 0, 50 * 1000000L };

		memset(err, 0, sizeof(*err));
		nanosleep(&ts, NULL);
	}
	return st;
}

/* tunnel: false = HTTP proxy of `target` (raw, starts with '/'); true = raw
 * TCP after a 101. */
static void serve_port(struct node *n, struct sandbox *sb, uint16_t port, const char *target,
		       const char *prefix, bool tunnel, struct http_req *req, struct http_conn *c)
{
	_cleanup_(buf_free) struct buf head = { 0 };
	_cleanup_(buf_free) struct buf pending = { 0 };
	struct guestconn *gc;
	struct gstream *st;
	err_t err = { 0 };
	int fd, r;

	if (tunnel) {
		const char *upg = http_req_header(req, "Upgrade");
		if (strcmp(req->method, "GET") != 0) {
			http_respond_error(c, 405, "method_not_allowed", "a tunnel is opened with GET");
			return;
		}
		if (!upg || strcasecmp(upg, "airlock-tcp") != 0) {
			http_respond_error(c, 400, "bad_request",
					   "a tunnel needs `Connection: Upgrade` and "
					   "`Upgrade: airlock-tcp`");
			return;
		}
	}
	if (!(gc = sandbox_gc_use(n, sb, "resumed for port forwarding", &err))) {
		sandbox_respond_err(c, sb, &err);
		return;
	}
	/* The code service starts with its sandbox (code.c): a young one
	 * is asked again for a moment, as on Airlock's own /code routes. */
	if (!(st = port_open_waiting(gc, port, port == CODE_PORT && code_sandbox_young(sb) ?
				     CODE_START_WAIT_MS : 0, &err))) {
		sandbox_gc_put(sb);
		respond_open_error(c, sb, port, &err);
		return;
	}
	fd = http_conn_takeover(c, &pending);
	if (tunnel) {
		static const char ok[] = "HTTP/1.1 101 Switching Protocols\r\n"
					 "Connection: Upgrade\r\nUpgrade: airlock-tcp\r\n\r\n";
		r = send(fd, ok, sizeof(ok) - 1, MSG_NOSIGNAL) < 0 ? -errno : 0;
	} else {
		/* The request goes into the front of what the client sends. */
		build_request(&head, req, target, port, prefix);
		buf_add(&head, req->body, req->body_len);
		buf_add(&head, pending.data, pending.len);
		buf_reset(&pending);
		buf_add(&pending, head.data, head.len);
		r = 0;
	}
	if (r == 0)
		r = pipe_run(fd, st, &pending, !tunnel);
	if (r < 0 && r != -ECONNRESET && r != -EPIPE)
		log_debug("port %u of %s: relay ended: %s", port, sb->id, strerror(-r));
	gstream_close(st);
	sandbox_gc_put(sb);
}

int ports_relay(struct node *n, struct sandbox *sb, uint16_t port, const struct buf *request,
		uint64_t wait_refused_ms, struct http_conn *c)
{
	_cleanup_(buf_free) struct buf pending = { 0 };
	struct guestconn *gc;
	struct gstream *st;
	err_t err = { 0 };
	int fd, r;

	if (!(gc = sandbox_gc_use(n, sb, "resumed for its code service", &err))) {
		sandbox_respond_err(c, sb, &err);
		return 0;
	}
	if (!(st = port_open_waiting(gc, port, wait_refused_ms, &err))) {
		sandbox_gc_put(sb);
		if (err.code == ECONNREFUSED)
			return -ECONNREFUSED;
		respond_open_error(c, sb, port, &err);
		return 0;
	}
	fd = http_conn_takeover(c, &pending);
	/* Ours first; whatever the client sent after its request follows. */
	{
		_cleanup_(buf_free) struct buf all = { 0 };
		buf_add(&all, request->data, request->len);
		buf_add(&all, pending.data, pending.len);
		r = pipe_run(fd, st, &all, true);
	}
	if (r < 0 && r != -ECONNRESET && r != -EPIPE)
		log_debug("port %u of %s: relay ended: %s", port, sb->id, strerror(-r));
	gstream_close(st);
	sandbox_gc_put(sb);
	return 0;
}

bool ports_route(struct node *n, struct http_req *req, struct http_conn *c, const char *tenant)
{
	static const char pre[] = "/v1/sandboxes/";
	const char *t = req->target, *id, *kind, *num, *rest;
	size_t id_len, num_len;
	bool tunnel;
	uint16_t port;
	char sid[65];

	if (strncmp(t, pre, sizeof(pre) - 1) != 0)
		return false;
	id = t + sizeof(pre) - 1;
	id_len = strcspn(id, "/?");
	if (id[id_len] != '/' || id_len == 0 || id_len >= sizeof(sid))
		return false;
	kind = id + id_len + 1;
	if (strncmp(kind, "ports/", 6) == 0)
		tunnel = false, num = kind + 6;
	else if (strncmp(kind, "tunnel/", 7) == 0)
		tunnel = true, num = kind + 7;
	else
		return false;
	num_len = strcspn(num, "/?");
	rest = num + num_len;
	if (tunnel && *rest)
		return false;
	memcpy(sid, id, id_len);
	sid[id_len] = '\0';
	if (!parse_port(num, num_len, &port)) {
		http_respond_error(c, 400, "bad_request", "port must be 1..65535");
		return true;
	}
	struct sandbox *sb = sandbox_find(n, sid, tenant);
	if (!sb) {
		http_respond_error(c, 404, "not_found", "no sandbox `%s`", sid);
		return true;
	}
	/* A suspended sandbox is restored by the port's first request, unless
	 * it says auto_restore=false (409). */
	if (!suspend_gate(sb, req, c)) {
		sandbox_unref(sb);
		return true;
	}
	/* The service sees its own paths: /v1/sandboxes/X/ports/8080/a?b -> /a?b. */
	_cleanup_free_ char *target = *rest == '/' ? xstrdup(rest) : xasprintf("/%s", rest);
	/* Under a host-routed URL ({port}-{id}.<domain>, the api says so) the
	 * service sits at the root; under the API path it has a prefix. */
	const char *hr = http_req_header(req, "X-Airlock-Host-Routed");
	_cleanup_free_ char *prefix = hr && strcmp(hr, "1") == 0
		? NULL : xasprintf("/v1/sandboxes/%s/ports/%u", sid, port);
	serve_port(n, sb, port, target, prefix, tunnel, req, c);
	sandbox_unref(sb);
	return true;
}
