/* s3-internal.h - the s3 driver's parts: a small HTTP/1.1 client with
 * timeouts and kept-alive connections (s3-http.c) and the parsers of what an
 * S3 server answers (s3-xml.c, and the response head in s3-http.c). Every
 * byte they parse comes from the network: a broken or hostile server may
 * make a request fail, never crash us (tests/fuzz/fuzz-s3xml.c). */
#ifndef AIRLOCK_OBJSTORE_S3_INTERNAL_H
#define AIRLOCK_OBJSTORE_S3_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "objstore-internal.h"
#include "../lib/util.h"

/* HTTP */

#define S3_HTTP_MAX_IDLE 16
#define S3_HTTP_MAX_HEAD (64u << 10)

struct s3_http {
	char *host, *port;          /* where to connect; owned */
	int timeout_ms;             /* connect, and each wait for the peer */
	pthread_mutex_t mu;
	int idle[S3_HTTP_MAX_IDLE]; /* kept-alive connections, none mid-response */
	int n_idle;
};

void s3_http_init(struct s3_http *h, const char *host, const char *port, int timeout_ms);
void s3_http_fini(struct s3_http *h);

struct s3_http_resp {
	int status;
	bool has_length, chunked, close;
	uint64_t content_length;
	char meta_sha256[OBJSTORE_SHA256_HEX];  /* x-amz-meta-sha256 or "" */
	char etag[128];                         /* ETag as sent or "" */
	struct buf body;        /* the body when it did not go to a sink */
	bool delivered;         /* some body bytes went to the sink */
	bool sink_failed;       /* the error came from the caller's sink or
				 * source, not the server: do not retry */
};
void s3_http_resp_free(struct s3_http_resp *r);

/* One request. head: the request line and headers, "\r\n"-terminated lines
 * but without the final empty line (added here). body: NULL for none, else
 * sent as it is read, a MiB at a time (no copy of a whole object in
 * memory); a source that fails to read is sink_failed. A 2xx
 * answer's body goes to sink when there is one, else (and for every other
 * status) into resp->body, at most max_body bytes (-EMSGSIZE past it).
 * Returns 0 when a whole response arrived (any status), or a transport
 * error: -EHOSTUNREACH (refused, unreachable, no such host), -ETIMEDOUT,
 * -ECONNRESET / -EPIPE / -EPROTO (broken or malformed answer), or the
 * sink's error (resp->sink_failed). */
int s3_http_do(struct s3_http *h, const char *head, const struct os_src *body,
	       bool is_head, const struct os_sink *sink, size_t max_body,
	       struct s3_http_resp *resp, err_t *err);

/* Read one response from fd (bounded by timeout_ms per wait) as
 * s3_http_do does. Exposed for the fuzz target. */
int s3_http_read_fd(int fd, int timeout_ms, bool is_head, const struct os_sink *sink,
		    size_t max_body, struct s3_http_resp *resp);

/* Parse a response head (status line and headers, up to and including the
 * empty line) of n bytes into r. 0, or -EPROTO when malformed. Exposed for
 * the fuzz target. */
int s3_http_parse_head(const char *p, size_t n, struct s3_http_resp *r);

/* XML */

/* The Code and Message of an <Error> document ("" when absent). */
void s3_xml_error(const char *p, size_t n, char *code, size_t code_len, char *msg,
		  size_t msg_len);
/* The UploadId of an InitiateMultipartUploadResult: 0, or -EPROTO. */
int s3_xml_upload_id(const char *p, size_t n, char *out, size_t out_len);
/* Is this a CompleteMultipartUploadResult (true), not an <Error>? */
bool s3_xml_complete_ok(const char *p, size_t n);
/* A ListObjectsV2 page: fn for each <Contents> with a Key and a Size, in
 * document order; *truncated and the NextContinuationToken into token.
 * Returns 0, fn's non-zero return, or -EPROTO (not a ListBucketResult, a
 * Contents without a key or with a bad size, a truncated page without a
 * token). */
typedef int (*s3_xml_list_fn)(void *arg, const char *key, uint64_t size);
int s3_xml_list(const char *p, size_t n, s3_xml_list_fn fn, void *arg, bool *truncated,
		char *token, size_t token_len);

#endif
