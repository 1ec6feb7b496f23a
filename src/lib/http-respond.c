/* http-respond.c - what a handler sends on its connection: one complete
 * response (http_respond*), a chunked stream (http_stream_*), or nothing
 * more once it took the connection over. c->state tracks how far the one
 * response to the current request got; http-server.c sends a 500 when a
 * handler returns without one.
 */
#include "http-internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "json.h"

/* ---------------------------------------------------------------- responses */

static const char *reason(int status)
{
	static const struct { int code; const char *text; } t[] = {
		{ 100, "Continue" }, { 200, "OK" }, { 201, "Created" }, { 202, "Accepted" },
		{ 204, "No Content" }, { 206, "Partial Content" }, { 301, "Moved Permanently" },
		{ 302, "Found" }, { 304, "Not Modified" }, { 400, "Bad Request" },
		{ 401, "Unauthorized" }, { 403, "Forbidden" }, { 404, "Not Found" },
		{ 405, "Method Not Allowed" }, { 408, "Request Timeout" }, { 409, "Conflict" },
		{ 411, "Length Required" },
		{ 413, "Content Too Large" }, { 415, "Unsupported Media Type" },
		{ 422, "Unprocessable Content" }, { 429, "Too Many Requests" },
		{ 500, "Internal Server Error" }, { 501, "Not Implemented" },
		{ 502, "Bad Gateway" }, { 503, "Service Unavailable" }, { 504, "Gateway Timeout" },
		{ 507, "Insufficient Storage" },
	};
	for (size_t k = 0; k < ARRAY_SIZE(t); k++)
		if (t[k].code == status)
			return t[k].text;
	return "Status";
}

static void start_head(struct http_conn *c, struct buf *h, int status, const char *ctype,
		       const char *extra)
{
	if (server_stopping(c->srv))
		c->keep_alive = false;
	buf_printf(h, "HTTP/1.1 %d %s\r\n", status, reason(status));
	if (ctype)
		buf_printf(h, "Content-Type: %s\r\n", ctype);
	if (extra && *extra) {
		buf_adds(h, extra);
		if (extra[strlen(extra) - 1] != '\n')
			buf_adds(h, "\r\n");
	}
	buf_adds(h, c->req_hdr);
	if (!c->keep_alive)
		buf_adds(h, "Connection: close\r\n");
	else if (c->http10)
		buf_adds(h, "Connection: keep-alive\r\n");
}

static int conn_send(struct http_conn *c, struct iovec *iov, size_t n)
{
	struct iovec all[8];

	if (c->broken)
		return -EPIPE;
	/* a held stream head goes out with the first bytes after it */
	if (c->held.len && n < ARRAY_SIZE(all)) {
		all[0] = (struct iovec){ .iov_base = c->held.data, .iov_len = c->held.len };
		memcpy(all + 1, iov, n * sizeof(*iov));
		iov = all;
		n++;
	}
	int r = http_send_iov(c->fd, iov, n);
	buf_reset(&c->held);
	if (r < 0) {
		c->broken = true;
		return -EPIPE;
	}
	return 0;
}

int http_respond(struct http_conn *c, int status, const char *content_type,
		 const void *body, size_t len, const char *extra_headers)
{
	_cleanup_(buf_free) struct buf h = { 0 };
	/* RFC 9110 8.6: no Content-Length and no body on 1xx, 204 and 304 */
	bool bodyless = status < 200 || status == 204 || status == 304;

	if (c->state != RESP_NONE)
		return -EALREADY;
	c->state = RESP_DONE;
	start_head(c, &h, status, content_type, extra_headers);
	if (!bodyless)
		buf_printf(&h, "Content-Length: %zu\r\n", len);
	buf_adds(&h, "\r\n");
	struct iovec iov[2] = {
		{ .iov_base = h.data, .iov_len = h.len },
		{ .iov_base = (void *)body, .iov_len = len },
	};
	return conn_send(c, iov, bodyless || c->is_head || !len ? 1 : 2);
}

int http_respond_json(struct http_conn *c, int status, const char *json_body)
{
	return http_respond(c, status, "application/json", json_body, strlen(json_body), NULL);
}

int http_respond_created(struct http_conn *c, const char *location, const char *json_body)
{
	_cleanup_free_ char *extra = NULL;

	/* ids are server-made ([a-z0-9_-]); refuse anything that could end the line */
	if (strpbrk(location, "\r\n"))
		return http_respond_json(c, 201, json_body);
	extra = xasprintf("Location: %s\r\n", location);
	return http_respond(c, 201, "application/json", json_body, strlen(json_body), extra);
}

void http_write_error(struct jw *w, const char *code, const char *msg)
{
	jw_key(w, "error");
	jw_obj(w);
	jw_key(w, "code");
	jw_str(w, code);
	jw_key(w, "message");
	jw_str(w, msg);
	jw_end(w);
}

int http_respond_error(struct http_conn *c, int status, const char *code, const char *fmt, ...)
{
	_cleanup_(buf_free) struct buf b = { 0 };
	_cleanup_free_ char *msg = NULL;
	struct jw w;
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(&msg, fmt, ap) < 0)
		msg = NULL;
	va_end(ap);
	jw_init(&w, &b);
	jw_obj(&w);
	http_write_error(&w, code, msg ? msg : "");
	jw_end(&w);
	return http_respond_json(c, status, b.data);
}

/* The iovecs of one chunk of n bytes at p (size line, data, CRLF) into
 * iov[0..3), or of the raw bytes for HTTP/1.0 (no chunked coding). Returns
 * how many were used; 0 for nothing to send (an empty chunk would end the
 * stream). size must hold 24 bytes. */
static size_t chunk_iov(const struct http_conn *c, struct iovec *iov, char *size, const void *p,
			size_t n)
{
	if (n == 0 || c->is_head)
		return 0;
	if (c->http10) {
		iov[0] = (struct iovec){ .iov_base = (void *)p, .iov_len = n };
		return 1;
	}
	int sl = snprintf(size, 24, "%zx\r\n", n);
	iov[0] = (struct iovec){ .iov_base = size, .iov_len = (size_t)sl };
	iov[1] = (struct iovec){ .iov_base = (void *)p, .iov_len = n };
	iov[2] = (struct iovec){ .iov_base = (void *)"\r\n", .iov_len = 2 };
	return 3;
}

/* HTTP/1.0 has no chunked coding: such a stream is the raw bytes, ended by
 * closing the connection. */
int http_stream_begin_with(struct http_conn *c, int status, const char *content_type,
			   const char *extra_headers, const void *p, size_t n)
{
	_cleanup_(buf_free) struct buf h = { 0 };
	struct iovec iov[4];
	char size[24];

	if (c->state != RESP_NONE)
		return -EALREADY;
	c->state = RESP_STREAM;
	if (c->http10)
		c->keep_alive = false;
	start_head(c, &h, status, content_type, extra_headers);
	if (!c->http10)
		buf_adds(&h, "Transfer-Encoding: chunked\r\n");
	buf_adds(&h, "\r\n");
	iov[0] = (struct iovec){ .iov_base = h.data, .iov_len = h.len };
	return conn_send(c, iov, 1 + chunk_iov(c, iov + 1, size, p, n));
}

void http_stream_hold(struct http_conn *c, int status, const char *content_type,
		      const char *extra_headers)
{
	if (c->state != RESP_NONE)
		return;
	c->state = RESP_STREAM;
	if (c->http10)
		c->keep_alive = false;
	buf_reset(&c->held);
	start_head(c, &c->held, status, content_type, extra_headers);
	if (!c->http10)
		buf_adds(&c->held, "Transfer-Encoding: chunked\r\n");
	buf_adds(&c->held, "\r\n");
}

int http_stream_begin(struct http_conn *c, int status, const char *content_type,
		      const char *extra_headers)
{
	return http_stream_begin_with(c, status, content_type, extra_headers, NULL, 0);
}

int http_stream_write(struct http_conn *c, const void *p, size_t n)
{
	struct iovec iov[3];
	char size[24];
	size_t k;

	if (c->state != RESP_STREAM)
		return -EINVAL;
	if (c->broken)
		return -EPIPE;
	k = chunk_iov(c, iov, size, p, n);
	return k ? conn_send(c, iov, k) : 0;
}

int http_stream_end_with(struct http_conn *c, const void *p, size_t n)
{
	struct iovec iov[4];
	char size[24];
	size_t k;

	if (c->state != RESP_STREAM)
		return -EINVAL;
	c->state = RESP_STREAM_DONE;
	if (c->broken)
		return -EPIPE;
	k = chunk_iov(c, iov, size, p, n);
	if (!c->http10 && !c->is_head)
		iov[k++] = (struct iovec){ .iov_base = (void *)"0\r\n\r\n", .iov_len = 5 };
	return k || c->held.len ? conn_send(c, iov, k) : 0;
}

int http_stream_end(struct http_conn *c)
{
	return http_stream_end_with(c, NULL, 0);
}

bool http_conn_answered(const struct http_conn *c)
{
	return c->state != RESP_NONE;
}

bool http_conn_peer_closed(struct http_conn *c)
{
	char ch;

	if (c->broken)
		return true;
	ssize_t r = recv(c->fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
	if (r == 0)
		return true;
	return r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

int http_conn_takeover(struct http_conn *c, struct buf *pending)
{
	c->state = RESP_DONE;
	c->keep_alive = false;
	if (pending && c->in.len)
		buf_add(pending, c->in.data, c->in.len);
	http_buf_consume(&c->in, c->in.len);
	return c->fd;
}

void http_conn_set_authenticated(struct http_conn *c)
{
	c->authenticated = true;
}

void http_conn_set_header(struct http_conn *c, const char *lines)
{
	snprintf(c->req_hdr, sizeof(c->req_hdr), "%s", lines ? lines : "");
}
