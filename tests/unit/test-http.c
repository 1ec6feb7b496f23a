/* test-http: the real server on TCP and unix sockets, driven by the real
 * client and by raw sockets for what the client never sends (garbage,
 * chunked bodies, pipelining). Exit 0 = pass. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "../../src/lib/http-internal.h"
#include "../../src/lib/http.h"
#include "../../src/lib/json.h"
#include "../../src/lib/peer.h"
#include "check.h"


/* Shared between handlers (server threads) and the test thread. */
struct ctx {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool client_saw_first;
	bool stream_timed_out;
	bool peer_close_seen;
};

static bool wait_flag(struct ctx *x, bool *flag, int ms)
{
	struct timespec ts;
	bool v;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&x->mu);
	while (!*flag && pthread_cond_timedwait(&x->cv, &x->mu, &ts) == 0)
		;
	v = *flag;
	pthread_mutex_unlock(&x->mu);
	return v;
}

static void set_flag(struct ctx *x, bool *flag)
{
	pthread_mutex_lock(&x->mu);
	*flag = true;
	pthread_cond_broadcast(&x->cv);
	pthread_mutex_unlock(&x->mu);
}

static void h_echo(struct http_req *req, struct http_conn *c)
{
	struct buf b;
	struct jw w;
	char *q = http_query_param(req, "q");
	char *flag = http_query_param(req, "flag");

	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "method");
	jw_str(&w, req->method);
	jw_key(&w, "path");
	jw_str(&w, req->path);
	jw_key(&w, "query");
	jw_str(&w, req->query);
	jw_key(&w, "q");
	jw_str(&w, q);
	jw_key(&w, "flag");
	jw_str(&w, flag);
	jw_key(&w, "body");
	jw_strn(&w, req->body, req->body_len);
	jw_key(&w, "peer");
	jw_str(&w, req->peer);
	jw_key(&w, "x_hdr");
	jw_str(&w, http_req_header(req, "x-custom"));
	jw_end(&w);
	http_respond_json(c, 200, b.data);
	buf_free(&b);
	free(q);
	free(flag);
}

/* Writes one chunk, then waits until the client has seen it before the
 * next: passes only if the client delivers data incrementally. */
static void h_stream(struct ctx *x, struct http_conn *c)
{
	http_stream_begin(c, 200, "application/x-ndjson", NULL);
	http_stream_write(c, "first\n", 6);
	if (!wait_flag(x, &x->client_saw_first, 5000))
		set_flag(x, &x->stream_timed_out);
	http_stream_write(c, "second\n", 7);
	http_stream_end(c);
}

static void h_wait_close(struct ctx *x, struct http_conn *c)
{
	http_stream_begin(c, 200, "text/plain", NULL);
	http_stream_write(c, "x", 1);
	for (int k = 0; k < 500; k++) {
		if (http_conn_peer_closed(c)) {
			/* writes to a gone peer fail instead of raising SIGPIPE */
			int r = 0;
			for (int n = 0; n < 50 && r == 0; n++)
				r = http_stream_write(c, "more", 4);
			if (r == -EPIPE)
				set_flag(x, &x->peer_close_seen);
			return;
		}
		usleep(10000);
	}
}

static void handler(void *arg, struct http_req *req, struct http_conn *c)
{
	struct ctx *x = arg;

	if (strcmp(req->path, "/hello") == 0)
		http_respond(c, 200, "text/plain", "hello", 5, "X-Test: yes\r\n");
	else if (strcmp(req->path, "/auth") == 0) {   /* as if it had a valid key */
		http_conn_set_authenticated(c);
		http_respond(c, 200, "text/plain", "hello", 5, NULL);
	}
	else if (strcmp(req->path, "/echo") == 0 || strcmp(req->path, "/a b/é") == 0)
		h_echo(req, c);
	else if (strcmp(req->path, "/stream") == 0)
		h_stream(x, c);
	else if (strcmp(req->path, "/wait-close") == 0)
		h_wait_close(x, c);
	else if (strcmp(req->path, "/noresp") == 0)
		return;
	else if (strcmp(req->path, "/empty") == 0)
		http_respond(c, 204, NULL, NULL, 0, NULL);
	else if (strcmp(req->path, "/uid") == 0) {
		char b[32];
		int n = snprintf(b, sizeof(b), "%d", req->peer_uid == HTTP_NO_UID ? -1
									    : (int)req->peer_uid);
		http_respond(c, 200, "text/plain", b, (size_t)n, NULL);
	} else
		http_respond_error(c, 404, "not_found", "no route for %s", req->path);
}

/* ---- raw socket helpers ---- */

static int raw_connect(const char *addr)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	char host[64];
	int port, fd;

	if (sscanf(addr, "%63[^:]:%d", host, &port) != 2)
		return -1;
	sa.sin_port = htons((uint16_t)port);
	inet_pton(AF_INET, host, &sa.sin_addr);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static void raw_send(int fd, const char *s)
{
	CHECK(send(fd, s, strlen(s), MSG_NOSIGNAL) == (ssize_t)strlen(s));
}

/* Reads into b until `until` appears `count` times, EOF, or 5 s pass.
 * Returns true on EOF. */
static bool raw_read(int fd, struct buf *b, const char *until, int count)
{
	char tmp[4096];

	for (;;) {
		int seen = 0;
		for (const char *p = b->data; until && p && (p = strstr(p, until)); p++)
			seen++;
		if (until && seen >= count)
			return false;
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		if (poll(&pf, 1, 5000) <= 0)
			return false;
		ssize_t n = recv(fd, tmp, sizeof(tmp), 0);
		if (n <= 0)
			return true;
		buf_add(b, tmp, (size_t)n);
	}
}

/* Sends req on a fresh connection and reads until the server closes. */
static void raw_exchange(const char *addr, const char *req, struct buf *out)
{
	int fd = raw_connect(addr);

	CHECK(fd >= 0);
	buf_init(out);
	if (fd < 0)
		return;
	raw_send(fd, req);
	CHECK(raw_read(fd, out, NULL, 0));   /* the server must close */
	close(fd);
}

/* ---- client-driven tests ---- */

static void test_basic(const char *base)
{
	struct http_resp r;
	err_t err = { 0 };

	CHECK(http_request(base, "GET", "/hello", NULL, NULL, 0, &r, &err) == 0);
	CHECK(r.status == 200);
	CHECK(r.body.len == 5 && strcmp(r.body.data, "hello") == 0);
	CHECK(http_resp_header(&r, "x-test") && strcmp(http_resp_header(&r, "X-TEST"), "yes") == 0);
	http_resp_free(&r);

	CHECK(http_request(base, "HEAD", "/hello", NULL, NULL, 0, &r, &err) == 0);
	CHECK(r.status == 200 && r.body.len == 0);
	http_resp_free(&r);

	CHECK(http_request(base, "GET", "/empty", NULL, NULL, 0, &r, &err) == 0);
	CHECK(r.status == 204 && r.body.len == 0);
	http_resp_free(&r);

	const char *body = "{\"k\":\"v\"}";
	CHECK(http_request(base, "POST", "/ec%68o?q=a+b%21%2B&flag&z=1", "X-Custom: hi\r\n", body,
			   strlen(body), &r, &err) == 0);
	CHECK(r.status == 200);
	json *j = json_parse(r.body.data, r.body.len, &err);
	CHECK(j != NULL);
	CHECK(j && strcmp(json_get_str(j, "method"), "POST") == 0);
	CHECK(j && strcmp(json_get_str(j, "path"), "/echo") == 0);
	CHECK(j && strcmp(json_get_str(j, "query"), "q=a+b%21%2B&flag&z=1") == 0);
	CHECK(j && strcmp(json_get_str(j, "q"), "a b!+") == 0);
	CHECK(j && strcmp(json_get_str(j, "flag"), "") == 0);
	CHECK(j && strcmp(json_get_str(j, "body"), body) == 0);
	CHECK(j && strcmp(json_get_str(j, "x_hdr"), "hi") == 0);
	CHECK(j && json_get_str(j, "peer") != NULL);
	json_free(j);
	http_resp_free(&r);

	CHECK(http_request(base, "GET", "/a%20b/%C3%A9", NULL, NULL, 0, &r, &err) == 0);
	CHECK(r.status == 200);
	http_resp_free(&r);

	CHECK(http_request(base, "GET", "/nope", NULL, NULL, 0, &r, &err) == 0);
	CHECK(r.status == 404);
	CHECK(strstr(r.body.data, "\"code\":\"not_found\"") != NULL);
	http_resp_free(&r);

	CHECK(http_request(base, "GET", "/noresp", NULL, NULL, 0, &r, &err) == 0);
	CHECK(r.status == 500);
	CHECK(strstr(r.body.data, "\"code\":\"internal\"") != NULL);
	http_resp_free(&r);
}

struct stream_state {
	struct ctx *x;
	int status;
	struct buf data;
	bool saw_first_before_second;
};

static int on_head(void *arg, const struct http_resp *head)
{
	struct stream_state *s = arg;
	s->status = head->status;
	return 0;
}

static int on_data(void *arg, const void *p, size_t n)
{
	struct stream_state *s = arg;

	buf_add(&s->data, p, n);
	if (strstr(s->data.data, "first\n") && !strstr(s->data.data, "second")) {
		s->saw_first_before_second = true;
		set_flag(s->x, &s->x->client_saw_first);
	}
	return 0;
}

static int on_data_abort(void *arg, const void *p, size_t n)
{
	return 42;
}

static void test_stream(const char *base, struct ctx *x)
{
	struct stream_state s = { .x = x };
	struct http_stream_cbs cbs = { .on_head = on_head, .on_data = on_data };
	err_t err = { 0 };

	x->client_saw_first = x->stream_timed_out = false;
	buf_init(&s.data);
	CHECK(http_request_stream(base, "GET", "/stream", NULL, NULL, 0, &cbs, &s, &err) == 0);
	CHECK(s.status == 200);
	CHECK(s.saw_first_before_second);
	CHECK(!x->stream_timed_out);
	CHECK(s.data.data && strcmp(s.data.data, "first\nsecond\n") == 0);
	buf_free(&s.data);

	/* a callback's non-zero return aborts and is returned */
	x->client_saw_first = false;
	struct http_stream_cbs abort_cbs = { .on_head = on_head, .on_data = on_data_abort };
	CHECK(http_request_stream(base, "GET", "/stream", NULL, NULL, 0, &abort_cbs, &s,
				  &err) == 42);
	set_flag(x, &x->client_saw_first);   /* release the handler */

	/* the plain client collects a chunked response too */
	struct http_resp r;
	CHECK(http_request(base, "GET", "/stream", NULL, NULL, 0, &r, &err) == 0);
	CHECK(strcmp(r.body.data, "first\nsecond\n") == 0);
	http_resp_free(&r);
}

static void test_too_large(const char *addr, const char *base)
{
	static char big[4096];
	struct http_resp r;
	err_t err = { 0 };

	memset(big, 'a', sizeof(big));
	CHECK(http_request(base, "PUT", "/echo", NULL, big, sizeof(big), &r, &err) == 0);
	CHECK(r.status == 413);
	CHECK(strstr(r.body.data, "\"code\":\"body_too_large\"") != NULL);
	http_resp_free(&r);

	/* exactly at the limit is fine */
	CHECK(http_request(base, "PUT", "/echo", NULL, big, 1024, &r, &err) == 0);
	CHECK(r.status == 200);
	http_resp_free(&r);

	/* a chunked body crossing the limit */
	struct buf req, out;
	buf_init(&req);
	buf_printf(&req, "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
			 "400\r\n%1024s\r\n1\r\nx\r\n0\r\n\r\n", "");
	raw_exchange(addr, req.data, &out);
	CHECK(strncmp(out.data ? out.data : "", "HTTP/1.1 413 ", 13) == 0);
	buf_free(&out);
	buf_free(&req);
}

/* ---- raw-socket tests ---- */

static void expect_error(const char *addr, const char *req, const char *status, const char *code)
{
	struct buf out;

	raw_exchange(addr, req, &out);
	if (!out.data || strncmp(out.data, status, strlen(status)) != 0 ||
	    !strstr(out.data, code) || !strstr(out.data, "Connection: close")) {
		fprintf(stderr, "  request %.40s...: got %s\n", req, out.data ? out.data : "(nothing)");
		failures++;
	}
	buf_free(&out);
}

static void test_malformed(const char *addr)
{
	const char *bad = "\"code\":\"bad_request\"";

	expect_error(addr, "GARBAGE\r\n\r\n", "HTTP/1.1 400 ", bad);
	expect_error(addr, "GET / HTTP/1.1\r\nNo colon here\r\n\r\n", "HTTP/1.1 400 ", bad);
	expect_error(addr, "GET / HTTP/2.0\r\n\r\n", "HTTP/1.1 400 ", bad);
	expect_error(addr, "GET nope HTTP/1.1\r\n\r\n", "HTTP/1.1 400 ", bad);
	expect_error(addr, "GET /a%00b HTTP/1.1\r\n\r\n", "HTTP/1.1 400 ", bad);
	expect_error(addr, "GET /a%zz HTTP/1.1\r\n\r\n", "HTTP/1.1 400 ", bad);
	expect_error(addr, "GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n", "HTTP/1.1 400 ", bad);
	expect_error(addr, "GET / HTTP/1.1\r\nA : b\r\n\r\n", "HTTP/1.1 400 ", bad);
	expect_error(addr, "GET / HTTP/1.1\nHost: x\n\n\r\n\r\n", "HTTP/1.1 400 ", bad);
	expect_error(addr, "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
		     "HTTP/1.1 400 ", bad);
	expect_error(addr, "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", "HTTP/1.1 400 ", bad);
	expect_error(addr, "POST / HTTP/1.1\r\nContent-Length: 3\r\n"
			   "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "HTTP/1.1 400 ", bad);
	expect_error(addr, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		     "HTTP/1.1 400 ", bad);
	expect_error(addr, "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
		     "HTTP/1.1 501 ", "\"code\":\"not_supported\"");

	/* too many headers, and a head over 16 KiB */
	struct buf req;
	buf_init(&req);
	buf_adds(&req, "GET / HTTP/1.1\r\n");
	for (int k = 0; k < HTTP_MAX_HEADERS + 1; k++)
		buf_printf(&req, "H%d: v\r\n", k);
	buf_adds(&req, "\r\n");
	expect_error(addr, req.data, "HTTP/1.1 400 ", bad);
	buf_reset(&req);
	buf_printf(&req, "GET / HTTP/1.1\r\nBig: %20000d\r\n\r\n", 1);
	expect_error(addr, req.data, "HTTP/1.1 400 ", bad);
	buf_free(&req);
}

static void test_keepalive(const char *addr)
{
	struct buf out;
	int fd = raw_connect(addr);

	CHECK(fd >= 0);
	if (fd < 0)
		return;
	buf_init(&out);
	raw_send(fd, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
	CHECK(!raw_read(fd, &out, "hello", 1));
	raw_send(fd, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
	CHECK(!raw_read(fd, &out, "hello", 2));
	CHECK(strstr(out.data, "Connection: close") == NULL);

	/* pipelined: a chunked body, then a request with a body, in one write */
	buf_reset(&out);
	raw_send(fd, "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
		     "3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: t\r\n\r\n"
		     "PUT /echo HTTP/1.1\r\nContent-Length: 3\r\n\r\nxyz"
		     "GET /hello HTTP/1.1\r\nConnection: close\r\n\r\n");
	CHECK(raw_read(fd, &out, NULL, 0));
	CHECK(strstr(out.data, "\"body\":\"abcde\"") != NULL);
	CHECK(strstr(out.data, "\"body\":\"xyz\"") != NULL);
	CHECK(strstr(out.data, "Connection: close\r\n") != NULL);
	CHECK(out.len > 5 && strcmp(out.data + out.len - 5, "hello") == 0);
	close(fd);
	buf_free(&out);

	/* HTTP/1.0 closes by default; Expect: 100-continue gets its interim */
	raw_exchange(addr, "GET /hello HTTP/1.0\r\n\r\n", &out);
	CHECK(strncmp(out.data, "HTTP/1.1 200 ", 13) == 0);
	buf_free(&out);
	fd = raw_connect(addr);
	buf_init(&out);
	raw_send(fd, "PUT /echo HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n");
	CHECK(!raw_read(fd, &out, "100 Continue\r\n\r\n", 1));
	raw_send(fd, "ok");
	CHECK(!raw_read(fd, &out, "\"body\":\"ok\"", 1));
	close(fd);
	buf_free(&out);
}

static void test_peer_close(const char *addr, struct ctx *x)
{
	struct buf out;
	int fd = raw_connect(addr);

	CHECK(fd >= 0);
	if (fd < 0)
		return;
	buf_init(&out);
	x->peer_close_seen = false;
	raw_send(fd, "GET /wait-close HTTP/1.1\r\n\r\n");
	CHECK(!raw_read(fd, &out, "\r\n1\r\nx\r\n", 1));
	close(fd);
	CHECK(wait_flag(x, &x->peer_close_seen, 5000));
	buf_free(&out);
}

/* Parses a complete string; returns consumed bytes or the error. */
static int parse_str(const char *s)
{
	struct http_req req;
	err_t err = { 0 };
	int n = http_parse_request(s, strlen(s), 100, &req, &err);

	if (n > 0)
		http_req_free(&req);
	return n;
}

static void test_parser(void)
{
	struct http_req req;
	err_t err = { 0 };
	const char *full = "POST /p%2Fq?x=1 HTTP/1.1\r\nContent-Length: 4\r\nA:  b c \r\n\r\nbodyNEXT";

	CHECK(http_parse_request(full, 10, 100, &req, &err) == 0);
	CHECK(http_parse_request(full, strlen(full) - 5, 100, &req, &err) == 0);
	int n = http_parse_request(full, strlen(full), 100, &req, &err);
	CHECK(n == (int)strlen(full) - 4);
	if (n > 0) {
		CHECK(strcmp(req.path, "/p/q") == 0);
		CHECK(strcmp(req.target, "/p%2Fq?x=1") == 0);
		CHECK(strcmp(req.query, "x=1") == 0);
		CHECK(strcmp(http_req_header(&req, "a"), "b c") == 0);
		CHECK(req.body_len == 4 && strcmp(req.body, "body") == 0);
		http_req_free(&req);
	}
	CHECK(http_parse_request(full, strlen(full), 3, &req, &err) == -EFBIG);

	/* binary bodies keep their NUL bytes (found by fuzz-http) */
	static const char bin[] = "PUT / HTTP/1.1\r\nContent-Length: 5\r\n\r\na\0b\0c";
	n = http_parse_request(bin, sizeof(bin) - 1, 100, &req, &err);
	CHECK(n == (int)sizeof(bin) - 1);
	if (n > 0) {
		CHECK(req.body_len == 5 && memcmp(req.body, "a\0b\0c", 6) == 0);
		http_req_free(&req);
	}

	const char *chunked = "POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n"
			      "A\r\n0123456789\r\n0\r\n\r\n";
	CHECK(http_parse_request(chunked, strlen(chunked) - 1, 100, &req, &err) == 0);
	n = http_parse_request(chunked, strlen(chunked), 100, &req, &err);
	CHECK(n == (int)strlen(chunked));
	if (n > 0) {
		CHECK(req.body_len == 10 && strcmp(req.body, "0123456789") == 0);
		http_req_free(&req);
	}
	CHECK(http_parse_request(chunked, strlen(chunked), 9, &req, &err) == -EFBIG);
	CHECK(parse_str("GET / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n") == -ENOSYS);
	CHECK(parse_str("GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
			"Transfer-Encoding: chunked\r\n\r\n") == -ENOSYS);
	CHECK(parse_str("\r\n\r\nGET / HTTP/1.1\r\n\r\n") == 22);
	CHECK(parse_str("GET / HTTP/1.1\r\nX: a\x01\r\n\r\n") == -EINVAL);
	CHECK(parse_str("GET /\xc3\xa9 HTTP/1.1\r\n\r\n") == -EINVAL);
	CHECK(parse_str("GET http://x/ HTTP/1.1\r\n\r\n") == -EINVAL);
	CHECK(parse_str("GET / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n") ==
	      -EINVAL);
	CHECK(parse_str("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
			"fffffffffffffffff\r\n") == -EFBIG);
	CHECK(parse_str("TOOLONGMETHODNAME / HTTP/1.1\r\n\r\n") == -EINVAL);
	CHECK(http_parse_request("GET /a\0b HTTP/1.1\r\n\r\n", 21, 100, &req, &err) < 0);
}

/* GET /uid answers req->peer_uid: want's. */
static void check_uid(const char *base, int want)
{
	struct http_resp r;
	err_t err = { 0 };
	char w[32];

	memset(&r, 0, sizeof(r));
	snprintf(w, sizeof(w), "%d", want);
	CHECK(http_request(base, "GET", "/uid", NULL, NULL, 0, &r, &err) == 0);
	CHECK(r.status == 200 && r.body.len == strlen(w) && !memcmp(r.body.data, w, r.body.len));
	http_resp_free(&r);
}

/* peer.h: a uid holds each role that runs as it (root none here: it
 * passes by its uid), and, unset, every role is this process's. */
static void test_peer_roles(void)
{
	struct peer_uids u = { .set = true, .api = 1001, .node = 1000, .gateway = 1002 };
	struct peer_uids one = { .set = true, .api = 1000, .node = 1000, .gateway = (uid_t)-1 };
	struct peer_uids unset = { 0 };

	CHECK(peer_roles(&u, 1001) == PEER_API);
	CHECK(peer_roles(&u, 1000) == PEER_NODE);
	CHECK(peer_roles(&u, 1002) == PEER_GATEWAY);
	CHECK(peer_roles(&u, 0) == 0 && peer_roles(&u, 1003) == 0);
	CHECK(peer_roles(&u, HTTP_NO_UID) == 0);
	CHECK(peer_roles(&one, 1000) == (PEER_API | PEER_NODE));
	CHECK(peer_roles(&one, (uid_t)-1) == 0);   /* a role with no user: no one holds it */
	CHECK(peer_roles(&unset, getuid()) == (PEER_API | PEER_NODE | PEER_GATEWAY));
	CHECK(peer_roles(&unset, getuid() + 1) == 0);
}

/* ---- server setups ---- */

static void test_tcp(struct ctx *x)
{
	err_t err = { 0 };
	struct http_server *s = http_server_start("127.0.0.1:0", 1024, handler, x, &err);
	char base[160];

	CHECK(s != NULL);
	if (!s) {
		fprintf(stderr, "  start: %s\n", err.msg);
		return;
	}
	const char *addr = http_server_addr(s);
	CHECK(strncmp(addr, "127.0.0.1:", 10) == 0 && strcmp(addr, "127.0.0.1:0") != 0);
	snprintf(base, sizeof(base), "http://%s", addr);

	test_basic(base);
	test_stream(base, x);
	test_too_large(addr, base);
	test_malformed(addr);
	test_keepalive(addr);
	test_peer_close(addr, x);
	check_uid(base, -1);   /* no uid over TCP */

	/* stop must not hang on an idle keep-alive connection or a streaming
	 * handler waiting for its client */
	int idle = raw_connect(addr);
	int streaming = raw_connect(addr);
	struct buf out;
	buf_init(&out);
	raw_send(streaming, "GET /wait-close HTTP/1.1\r\n\r\n");
	CHECK(!raw_read(streaming, &out, "\r\n1\r\nx\r\n", 1));
	uint64_t t0 = now_ms();
	http_server_stop(s);
	CHECK(now_ms() - t0 < 2000);
	close(idle);
	close(streaming);
	buf_free(&out);
}

static void test_unix(struct ctx *x)
{
	char dir[] = "/tmp/test-http-XXXXXX";
	char path[100], listen_addr[160];
	err_t err = { 0 };
	struct stat st;

	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/api.sock", dir);
	snprintf(listen_addr, sizeof(listen_addr), "unix:%s", path);

	/* a stale socket file left by a crashed run */
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	CHECK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	close(fd);

	struct http_server *s = http_server_start(listen_addr, 1 << 20, handler, x, &err);
	CHECK(s != NULL);
	if (!s) {
		fprintf(stderr, "  start: %s\n", err.msg);
		return;
	}
	CHECK(strcmp(http_server_addr(s), listen_addr) == 0);
	CHECK(stat(path, &st) == 0 && S_ISSOCK(st.st_mode) && (st.st_mode & 0777) == 0660);

	/* a second server on a live socket is refused */
	struct http_server *s2 = http_server_start(listen_addr, 1024, handler, x, &err);
	CHECK(s2 == NULL && err.code == EADDRINUSE);
	http_server_stop(s2);

	test_basic(listen_addr);
	test_stream(listen_addr, x);
	/* the kernel's word for who connected: what node.sock and
	 * gateway.sock decide by (peer.h) */
	check_uid(listen_addr, (int)getuid());

	http_server_stop(s);
	CHECK(stat(path, &st) < 0 && errno == ENOENT);
	rmdir(dir);
}

static void test_ipv6(struct ctx *x)
{
	err_t err = { 0 };
	char base[160];
	struct http_server *s = http_server_start("[::1]:0", 1024, handler, x, &err);

	if (!s) {
		fprintf(stderr, "  (no IPv6 loopback, skipped: %s)\n", err.msg);
		return;
	}
	CHECK(strncmp(http_server_addr(s), "[::1]:", 6) == 0);
	snprintf(base, sizeof(base), "http://%s", http_server_addr(s));
	struct http_resp r;
	CHECK(http_request(base, "GET", "/hello", NULL, NULL, 0, &r, &err) == 0);
	CHECK(r.status == 200);
	http_resp_free(&r);
	http_server_stop(s);
}

/* ---- what a slow or unauthenticated peer can hold ---- */

static bool deny_hook(void *arg, struct http_req *req, struct http_conn *c)
{
	(void)arg;
	if (strcmp(req->path, "/deny") != 0)
		return true;
	CHECK(req->body_declared == 100000);
	http_respond_error(c, 401, "unauthorized", "no key");
	return false;
}

static bool exempt_loopback(void *arg, const char *ip)
{
	(void)arg;
	return strcmp(ip, "127.0.0.1") == 0;
}

static struct http_server *start_limited(struct ctx *x, unsigned per_client, bool exempt)
{
	struct http_server_opts o = { .max_body = 1 << 20, .head_timeout_ms = 300,
				      .max_conns_per_client = per_client, .body_budget = 1000,
				      .head_fn = deny_hook,
				      .exempt_fn = exempt ? exempt_loopback : NULL };
	err_t err = { 0 };
	struct http_server *s = http_server_start_opts("127.0.0.1:0", &o, handler, x, &err);

	CHECK(s != NULL);
	return s;
}

static void test_limits(struct ctx *x)
{
	struct http_server *s = start_limited(x, 0, false);
	struct buf out;
	uint64_t t0;
	int fd;

	if (!s)
		return;
	buf_init(&out);

	/* a head sent a byte at a time is cut at the deadline, not kept alive
	 * by each byte */
	fd = raw_connect(http_server_addr(s));
	raw_send(fd, "GET /hello HTTP/1.1\r\n");
	t0 = now_ms();
	while (now_ms() - t0 < 3000 && send(fd, "X", 1, MSG_NOSIGNAL) == 1) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		if (poll(&pf, 1, 50) > 0)
			break;
	}
	CHECK(raw_read(fd, &out, NULL, 0));
	CHECK(now_ms() - t0 < 1500);
	CHECK(out.data && strncmp(out.data, "HTTP/1.1 408 ", 13) == 0);
	close(fd);

	/* a silent connection is closed at the same deadline */
	buf_reset(&out);
	fd = raw_connect(http_server_addr(s));
	t0 = now_ms();
	CHECK(raw_read(fd, &out, NULL, 0));
	CHECK(now_ms() - t0 < 1500 && out.len == 0);
	close(fd);

	/* the hook answers from the head: the body is never waited for */
	buf_reset(&out);
	fd = raw_connect(http_server_addr(s));
	raw_send(fd, "POST /deny HTTP/1.1\r\nContent-Length: 100000\r\n\r\n");
	t0 = now_ms();
	CHECK(raw_read(fd, &out, NULL, 0));
	CHECK(now_ms() - t0 < 2000);
	CHECK(out.data && strncmp(out.data, "HTTP/1.1 401 ", 13) == 0);
	CHECK(out.data && strstr(out.data, "Connection: close\r\n"));
	close(fd);

	/* bodies in flight past the budget: 503 busy */
	buf_reset(&out);
	fd = raw_connect(http_server_addr(s));
	raw_send(fd, "POST /echo HTTP/1.1\r\nContent-Length: 2000\r\n\r\n");
	CHECK(raw_read(fd, &out, NULL, 0));
	CHECK(out.data && strncmp(out.data, "HTTP/1.1 503 ", 13) == 0);
	CHECK(out.data && strstr(out.data, "Retry-After: 1\r\n"));
	close(fd);

	/* within the budget, and past the hook, it all still works */
	buf_reset(&out);
	fd = raw_connect(http_server_addr(s));
	raw_send(fd, "POST /echo HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc");
	CHECK(!raw_read(fd, &out, "abc", 1));
	CHECK(out.data && strncmp(out.data, "HTTP/1.1 200 ", 13) == 0);
	close(fd);
	http_server_stop(s);

	/* per client address: past the cap, 429 at once from the accept thread */
	s = start_limited(x, 2, false);
	if (!s)
		goto out;
	int a = raw_connect(http_server_addr(s)), b = raw_connect(http_server_addr(s));
	buf_reset(&out);
	usleep(100 * 1000);
	fd = raw_connect(http_server_addr(s));
	CHECK(raw_read(fd, &out, NULL, 0));
	CHECK(out.data && strncmp(out.data, "HTTP/1.1 429 ", 13) == 0);
	/* the canned answer's Content-Length is right and its body JSON */
	const char *body = out.data ? strstr(out.data, "\r\n\r\n") : NULL;
	const char *cl = out.data ? strstr(out.data, "Content-Length: ") : NULL;
	err_t jerr = { 0 };
	CHECK(body && cl && (size_t)atoi(cl + 16) == strlen(body + 4));
	json *j = body ? json_parse(body + 4, strlen(body + 4), &jerr) : NULL;
	CHECK(j != NULL);
	json_free(j);
	close(fd);
	close(a);
	close(b);
	http_server_stop(s);

	/* an exempt address (another node's api) is not capped */
	s = start_limited(x, 1, true);
	if (!s)
		goto out;
	a = raw_connect(http_server_addr(s));
	fd = raw_connect(http_server_addr(s));
	buf_reset(&out);
	raw_send(fd, "GET /hello HTTP/1.1\r\n\r\n");
	CHECK(!raw_read(fd, &out, "hello", 1));
	CHECK(out.data && strncmp(out.data, "HTTP/1.1 200 ", 13) == 0);
	close(fd);
	close(a);
	http_server_stop(s);

	/* keep-alive quiet: short until the connection has authenticated */
	struct http_server_opts o = { .idle_timeout_ms = 5000, .unauth_idle_timeout_ms = 300 };
	err_t err = { 0 };
	s = http_server_start_opts("127.0.0.1:0", &o, handler, x, &err);
	CHECK(s != NULL);
	if (!s)
		goto out;
	a = raw_connect(http_server_addr(s));
	fd = raw_connect(http_server_addr(s));
	raw_send(a, "GET /hello HTTP/1.1\r\n\r\n");
	raw_send(fd, "GET /auth HTTP/1.1\r\n\r\n");
	buf_reset(&out);
	CHECK(!raw_read(a, &out, "hello", 1));
	buf_reset(&out);
	CHECK(!raw_read(fd, &out, "hello", 1));
	t0 = now_ms();
	buf_reset(&out);
	CHECK(raw_read(a, &out, NULL, 0) && out.len == 0);   /* closed, quietly */
	CHECK(now_ms() - t0 < 1500);
	usleep(700 * 1000);   /* the authenticated one outlives that */
	buf_reset(&out);
	raw_send(fd, "GET /hello HTTP/1.1\r\n\r\n");
	CHECK(!raw_read(fd, &out, "hello", 1));
	CHECK(out.data && strncmp(out.data, "HTTP/1.1 200 ", 13) == 0);
	close(fd);
	close(a);
	http_server_stop(s);
out:
	buf_free(&out);
}

static void client_key(const char *addr, char *out, size_t n)
{
	struct sockaddr_storage ss = { 0 };
	struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;

	if (inet_pton(AF_INET, addr, &a4->sin_addr) == 1)
		ss.ss_family = AF_INET;
	else if (inet_pton(AF_INET6, addr, &a6->sin6_addr) == 1)
		ss.ss_family = AF_INET6;
	else
		ss.ss_family = AF_UNIX;
	http_format_peer_client(&ss, out, n);
}

/* The per-client cap's key: a host picks any address of its /64 (privacy
 * addresses), so IPv6 clients are one client per /64. */
static void test_client_key(void)
{
	char a[48], b[48];

	client_key("2001:db8:1:2:aaaa:bbbb:cccc:1", a, sizeof(a));
	client_key("2001:db8:1:2::ffff", b, sizeof(b));
	CHECK(strcmp(a, b) == 0);
	CHECK(strcmp(a, "2001:db8:1:2::/64") == 0);
	client_key("2001:db8:1:3::ffff", b, sizeof(b));   /* the next /64 */
	CHECK(strcmp(b, "2001:db8:1:3::/64") == 0);
	client_key("::1", a, sizeof(a));
	CHECK(strcmp(a, "::/64") == 0);
	/* IPv4, plain or mapped, is still one address */
	client_key("10.0.0.2", a, sizeof(a));
	CHECK(strcmp(a, "10.0.0.2") == 0);
	client_key("::ffff:10.0.0.2", a, sizeof(a));
	CHECK(strcmp(a, "10.0.0.2") == 0);
	client_key("10.0.0.3", b, sizeof(b));
	CHECK(strcmp(a, b) != 0);
	/* a unix socket peer has none: never capped */
	client_key("unix", a, sizeof(a));
	CHECK(a[0] == '\0');
}

static void test_client_errors(void)
{
	struct http_resp r;
	err_t err = { 0 };

	CHECK(http_request("ftp://x", "GET", "/", NULL, NULL, 0, &r, &err) < 0);
	CHECK(http_request("unix:/nonexistent/sock", "GET", "/", NULL, NULL, 0, &r, &err) < 0);
	CHECK(err.msg[0] != '\0');
	CHECK(http_server_start("127.0.0.1", 0, handler, NULL, &err) == NULL);
	CHECK(http_server_start("127.0.0.1:99999", 0, handler, NULL, &err) == NULL);
}

int main(void)
{
	struct ctx x = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

	test_parser();
	test_client_key();
	test_peer_roles();
	test_client_errors();
	test_tcp(&x);
	test_unix(&x);
	test_ipv6(&x);
	test_limits(&x);
	return check_done("test-http");
}
