/* forward.c - forward /v1/sandboxes*, /v1/templates* and /v1/node to the node.
 *
 * The request goes out over the node's unix socket with the original method,
 * target and body, plus a fixed list of the client's headers and the two
 * identity headers only the api may set (X-Airlock-Tenant, X-Airlock-Admin).
 * Nothing else the client sent is passed on, so a client cannot speak for
 * another tenant.
 *
 * The answer comes back either buffered (a complete response with a length:
 * small JSON, file contents) or relayed piece by piece when the node streams
 * (chunked; NDJSON for exec output, logs and template builds), so a client
 * sees exec output as it is produced. When the client goes away mid-stream,
 * the next write fails and the upstream request is aborted; the node keeps
 * the process running and its output buffered for a later reconnect.
 */
#include <errno.h>
#include <string.h>
#include <strings.h>

#include "../lib/log.h"
#include "../lib/util.h"
#include "api-internal.h"

/* A buffered (non-streamed) answer larger than this is refused rather than
 * held in memory: file reads are limited to 16 MiB by the node. */
#define MAX_BUFFERED (64u << 20)

/* A streamed answer is passed on per read from the node, not per chunk:
 * what one read brought (the head with the exec's start line; the last
 * output with the exit line and the end) leaves in one send, so the
 * client wakes once for it. Held bytes past this go out at once. */
#define RELAY_HOLD (64u << 10)

struct relay {
	struct http_conn *c;
	bool head_seen, streaming, client_gone, too_big;
	bool head_sent;         /* streaming: the head went to the client */
	int status;
	char *content_type;     /* owned; NULL when the node sent none */
	struct buf extra;       /* response headers to pass on, "Name: value\r\n"... */
	struct buf body;        /* buffered mode: all of it; streaming: held bytes */
};

/* Header values are put on the wire verbatim: refuse CR, LF and other
 * control bytes so nothing can be smuggled into the next header. */
static bool header_value_ok(const char *v, size_t max)
{
	size_t n = 0;

	for (; *v; v++, n++)
		if ((unsigned char)*v < 0x20 || *v == 0x7f)
			return false;
	return n <= max;
}

/* Response headers that describe framing or the hop itself are the api's
 * business; the rest (Retry-After, Allow, Location, ...) are passed on. */
static bool hop_header(const char *name)
{
	static const char *const hop[] = {
		"Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Content-Type",
		"Date", "Server", "Upgrade", "TE", "Trailer", "Proxy-Authenticate",
		"Proxy-Connection", "X-Airlock-Tenant", "X-Airlock-Admin",
	};
	for (size_t i = 0; i < ARRAY_SIZE(hop); i++)
		if (strcasecmp(name, hop[i]) == 0)
			return true;
	return false;
}

static int on_head(void *arg, const struct http_resp *head)
{
	struct relay *rl = arg;
	const char *ct = http_resp_header(head, "Content-Type");
	const char *te = http_resp_header(head, "Transfer-Encoding");

	rl->head_seen = true;
	rl->status = head->status;
	rl->content_type = ct && header_value_ok(ct, 256) ? xstrdup(ct) : NULL;
	for (size_t i = 0; i < head->n_headers; i++) {
		const struct http_header *h = &head->headers[i];
		if (hop_header(h->name) || !header_value_ok(h->name, 64) ||
		    !header_value_ok(h->value, 1024))
			continue;
		buf_printf(&rl->extra, "%s: %s\r\n", h->name, h->value);
	}
	/* The node streams exactly when it answers without a length. */
	/* A streamed answer's head is held until the first flush (relay_flush),
	 * which comes before the relay waits on the node for anything. */
	rl->streaming = (te && strcasestr(te, "chunked")) ||
			(ct && strncasecmp(ct, "application/x-ndjson", 20) == 0);
	return 0;
}

/* Streaming: send the head if not yet sent, with what is held; end the
 * stream too when `end`. Returns non-zero (abort the upstream request)
 * when the client has gone. */
static int relay_flush_end(struct relay *rl, bool end)
{
	struct http_conn *c = rl->c;
	int r = 0;

	if (!rl->head_sent && end) {
		/* the whole answer in one send */
		rl->head_sent = true;
		http_stream_hold(c, rl->status, rl->content_type,
				 rl->extra.len ? rl->extra.data : NULL);
		r = http_stream_end_with(c, rl->body.data, rl->body.len);
	} else if (!rl->head_sent) {
		rl->head_sent = true;
		r = http_stream_begin_with(c, rl->status, rl->content_type,
					   rl->extra.len ? rl->extra.data : NULL, rl->body.data,
					   rl->body.len);
	} else if (end) {
		r = http_stream_end_with(c, rl->body.data, rl->body.len);
	} else if (rl->body.len) {
		r = http_stream_write(c, rl->body.data, rl->body.len);
	}
	buf_reset(&rl->body);
	if (r < 0) {
		rl->client_gone = true;
		return 1;
	}
	return 0;
}

static int relay_flush(void *arg)
{
	struct relay *rl = arg;

	return rl->streaming ? relay_flush_end(rl, false) : 0;
}

static int on_data(void *arg, const void *p, size_t n)
{
	struct relay *rl = arg;

	if (rl->streaming) {
		buf_add(&rl->body, p, n);
		return rl->body.len >= RELAY_HOLD ? relay_flush_end(rl, false) : 0;
	}
	if (rl->body.len + n > MAX_BUFFERED) {
		rl->too_big = true;
		return 1;
	}
	buf_add(&rl->body, p, n);
	return 0;
}

/* A quiet stream (a process that prints nothing for a while) must still
 * notice a client that hung up, or it would hold a thread and a node
 * connection until the process next writes. */
static int on_idle(void *arg)
{
	struct relay *rl = arg;

	if (rl->streaming && http_conn_peer_closed(rl->c)) {
		rl->client_gone = true;
		return 1;
	}
	return 0;
}

/* To the local node (peer NULL), or to another node's api at peer
 * (api/placement.c), which authenticates the client's key itself. */
static void forward(struct api *a, struct http_req *req, struct http_conn *c,
		    const struct api_principal *who, const char *peer)
{
	static const struct http_stream_cbs cbs = {
		.on_head = on_head, .on_data = on_data, .on_idle = on_idle, .idle_ms = 1000,
		.on_flush = relay_flush, .reuse = true,
	};
	const char *ct = http_req_header(req, "Content-Type");
	const char *idem = http_req_header(req, "Idempotency-Key");
	const char *accept = http_req_header(req, "Accept");
	/* where a reconnecting event stream resumes (GET /v1/sandboxes/events) */
	const char *last_id = http_req_header(req, "Last-Event-ID");
	struct relay rl = { .c = c };
	struct buf hdr;
	err_t err = { 0 };
	uint64_t t0 = now_us();
	int r;

	if ((ct && !header_value_ok(ct, 256)) || (accept && !header_value_ok(accept, 256)) ||
	    (last_id && !header_value_ok(last_id, 64))) {
		http_respond_error(c, 400, "bad_request", "invalid header value");
		return;
	}
	if (idem && (!header_value_ok(idem, 256) || !*idem)) {
		http_respond_error(c, 400, "bad_request",
				   "Idempotency-Key must be 1 to 256 printable characters");
		return;
	}

	buf_init(&hdr);
	/* Only these client headers cross to the node. The identity headers are
	 * written here from the authenticated key, never copied. */
	if (ct)
		buf_printf(&hdr, "Content-Type: %s\r\n", ct);
	if (accept)
		buf_printf(&hdr, "Accept: %s\r\n", accept);
	if (idem)
		buf_printf(&hdr, "Idempotency-Key: %s\r\n", idem);
	if (log_request_id()[0])   /* pattern-checked: one safe token */
		buf_printf(&hdr, "X-Request-Id: %s\r\n", log_request_id());
	if (last_id)
		buf_printf(&hdr, "Last-Event-ID: %s\r\n", last_id);
	if (peer)
		/* Authorization passed auth_lookup here: printable, one line. */
		buf_printf(&hdr, "Authorization: %s\r\nX-Airlock-Forwarded: %s\r\n",
			   http_req_header(req, "Authorization"), a->cfg->node_name);
	else
		buf_printf(&hdr, "X-Airlock-Tenant: %s\r\nX-Airlock-Admin: %d\r\n", who->tenant,
			   who->admin ? 1 : 0);
	buf_init(&rl.extra);
	buf_init(&rl.body);

	r = http_request_stream(peer ? peer : a->cfg->node_sock, req->method, req->target, hdr.data,
				req->body_len ? req->body : NULL, req->body_len, &cbs, &rl, &err);

	if (!rl.head_seen) {
		/* Nothing came back: the node is down, restarting, or its socket
		 * is missing. The request may or may not have been applied;
		 * clients retry creates with an Idempotency-Key. */
		log_warn("%s %s: node %s unavailable: %s", req->method, req->path,
			 peer ? peer : "(local)", r < 0 ? err.msg : "no answer");
		http_respond_error(c, 503, "unavailable", "node unavailable");
	} else if (rl.streaming) {
		if (rl.client_gone)
			log_debug("%s %s: client went away, upstream aborted", req->method,
				  req->path);
		else if (r < 0)
			log_warn("%s %s: node stream broke: %s", req->method, req->path, err.msg);
		/* Terminate the chunked answer only when the node's did end: left
		 * open, the server closes the connection and the client sees a
		 * cut-short body rather than a clean end. What is held goes
		 * out either way. */
		if (!rl.client_gone)
			relay_flush_end(&rl, r == 0);
	} else if (rl.too_big) {
		log_err("%s %s: node answer larger than %u bytes", req->method, req->path,
			MAX_BUFFERED);
		http_respond_error(c, 500, "internal", "answer too large");
	} else if (r < 0) {
		log_warn("%s %s: node answer broke: %s", req->method, req->path, err.msg);
		http_respond_error(c, 503, "unavailable", "node connection lost");
	} else {
		http_respond(c, rl.status, rl.content_type, rl.body.data, rl.body.len,
			     rl.extra.len ? rl.extra.data : NULL);
	}
	log_debug("%s %s -> %d (%s, %llu us)", req->method, req->path, rl.status,
		  rl.streaming ? "streamed" : "buffered", (unsigned long long)(now_us() - t0));
	free(rl.content_type);
	buf_free(&rl.extra);
	buf_free(&rl.body);
	buf_free(&hdr);
}

void api_forward(struct api *a, struct http_req *req, struct http_conn *c,
		 const struct api_principal *who)
{
	char peer[200];
	int r;

	if (!api_inflight_take(a, c, who))
		return;
	r = api_cluster_route(a, req, c, who, peer, sizeof(peer));
	if (r >= 0)
		forward(a, req, c, who, r ? peer : NULL);
	api_inflight_give(a, who);
}

void api_forward_to(struct api *a, struct http_req *req, struct http_conn *c,
		    const struct api_principal *who, const char *target)
{
	char *saved = req->target;

	if (!api_inflight_take(a, c, who))
		return;
	req->target = (char *)target;
	forward(a, req, c, who, NULL);
	req->target = saved;
	api_inflight_give(a, who);
}
