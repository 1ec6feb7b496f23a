/* inject.h - credential injection into one HTTP/1.x request head.
 *
 * The gateway calls this for each plain-HTTP request and for each request
 * inside a TLS connection it intercepts, before forwarding it upstream. The
 * request head is looked at and rewritten (request line and headers), and
 * the body too when the caller read it whole (h->has_body: mitm.c does for
 * a Content-Length or chunked body of at most BODY_MAX). A larger body with
 * a Content-Length that the caller streams (h->body_streams: mitm.c) gets its replacements listed in h->subst for
 * subst_feed; any other body passes through untouched, so a placeholder in
 * it is never replaced.
 *
 * For the sandbox's credentials (cred_resolve) whose hosts, path prefix
 * (whole segments, cred_path_match) and methods match the request:
 *   - the credential's own header / basic auth / query parameter is set
 *     (replacing what the client sent), so the client's placeholder there,
 *     or none, ends up as the value;
 *   - only when its replace_in says so, the sandbox's placeholder for it is
 *     replaced elsewhere too: in every header value ("headers", raw, and
 *     inside "Authorization: Basic" after decoding), in the target
 *     ("target", percent-encoded), in the body ("body": percent-encoded for
 *     application/x-www-form-urlencoded, with a JSON string's escapes for
 *     application/json and any +json type, raw otherwise). By default it is
 *     not, so an upstream that echoes what it got (an LLM asked to repeat, a
 *     paste service) hands back only the placeholder; such a leftover is
 *     audited as "not_replaced".
 * Any placeholder that is not replaced — another sandbox's, one sent to a
 * host its credential is not bound to, or one of a revoked or expired
 * credential — stays as it is and is audited (decision "exfiltration_attempt",
 * "revoked" or "expired"). Each injection is audited as "injected"; past the
 * credential's per-sandbox rate limit the request is refused with 429 and
 * audited as "rate_limited".
 */
#ifndef AIRLOCK_INJECT_H
#define AIRLOCK_INJECT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "../db/db.h"
#include "../lib/err.h"
#include "../lib/util.h"
#include "../cred/vault.h"

#define HEAD_MAX (32u * 1024)    /* request line + headers */
#define BODY_MAX (1024u * 1024)  /* a body read whole for injection */
#define HEAD_MAX_FIELDS 100

struct head_field {
	char *name, *value;
};

/* A placeholder and the value as the body spells it (body_spelling). */
struct body_subst {
	char *ph, *value;
};

struct http_head {
	char *method, *target, *version;
	/* At most HEAD_MAX_FIELDS parsed; head_set may add more (the
	 * credential's header, Connection, ...): one never goes missing
	 * because the client sent many. */
	struct head_field *f;
	size_t n, cap;
	/* The body, when the caller read it whole; else it is not here and
	 * passes untouched. head_free wipes it (it may hold a value). */
	bool has_body;
	struct buf body;
	/* A body too large to read whole that the caller streams instead
	 * (body_streams, set before cred_inject): what a credential that
	 * opted in to "body" wants replaced in it is listed in subst, for the
	 * caller's subst_stream. head_free wipes the values. */
	bool body_streams;
	uint64_t stream_len;          /* its Content-Length */
	struct body_subst *subst;
	size_t n_subst;
};

/* Replacing h->subst in a body as its bytes come: a placeholder split
 * across two reads is found too (the last bytes that could begin one wait
 * for the next). The output may hold values: the caller wipes it. */
struct subst_stream {
	const struct http_head *h;
	struct buf pend;
};
void subst_init(struct subst_stream *s, const struct http_head *h);
/* Append p[0, n) to the stream, and to out what is decided of it; final:
 * the body ended, everything goes out. */
void subst_feed(struct subst_stream *s, const void *p, size_t n, bool final, struct buf *out);
void subst_free(struct subst_stream *s);

/* Parse a request head from buf[0..len). Returns the head's length (through
 * the blank line) when complete, 0 when more bytes are needed, -EINVAL when
 * malformed, -E2BIG past HEAD_MAX or HEAD_MAX_FIELDS. Untrusted input. */
long head_parse(const char *buf, size_t len, struct http_head *h);
void head_free(struct http_head *h);
void head_write(const struct http_head *h, struct buf *out);
const char *head_get(const struct http_head *h, const char *name);
/* Replace every field called name with one (or add it). */
void head_set(struct http_head *h, const char *name, const char *value);
/* Remove every field called name. */
void head_del(struct http_head *h, const char *name);

/* Per (sandbox, credential) request counters for rate limits. The gateway
 * keeps them for its life (gw_cred_open), so they have no free. */
struct inject_rl;
struct inject_rl *inject_rl_new(void);

struct inject_ctx {
	struct db *db;
	struct vault *vault;       /* must be able to read (the private key) */
	struct inject_rl *rl;
	int64_t now_ms;            /* wall clock; tests inject it */
};

struct inject_who {
	const char *tenant, *sandbox_id, *project;   /* project may be NULL */
	const char *host;          /* the destination (SNI or Host), no port */
};

enum inject_verdict { INJECT_FORWARD, INJECT_RATE_LIMITED };

/* Rewrite h in place. *n_injected counts credentials put in. */
int cred_inject(struct inject_ctx *ctx, const struct inject_who *who, struct http_head *h,
		enum inject_verdict *verdict, int *n_injected, err_t *err);

#endif
