/* e2b-internal.h - shared by the files of src/compat/e2b only. */
#ifndef AIRLOCK_E2B_INTERNAL_H
#define AIRLOCK_E2B_INTERNAL_H

#include "../../api/api-internal.h"
#include "../../lib/http.h"
#include "../../lib/json.h"
#include "e2b-wire.h"
#include "e2b.h"

/* What envd version we claim: it turns on the SDK's features we serve
 * (no default user name from 0.4.0, CloseStdin from 0.5.2) and keeps off
 * those we do not (file metadata 0.6.2, watch entries 0.6.3). */
#define E2B_ENVD_VERSION "0.5.7"
#define E2B_ENVD_PORT 49983
#define E2B_CODE_TEMPLATE "code-interpreter-v1"  /* @e2b/code-interpreter's default */
#define E2B_TOKEN_PREFIX "ale_"
#define E2B_TOKEN_HEX 40
#define E2B_MAX_JSON (1u << 20)

static inline void json_freep(json **j) { json_free(*j); }

/* control.c: E2B_API_URL (X-API-KEY) */
void e2b_control(struct api *a, struct http_req *req, struct http_conn *c,
		 const struct api_principal *who, const char *rest);
/* envd.c: E2B_SANDBOX_URL (X-Access-Token, E2b-Sandbox-Id) */
void e2b_envd(struct api *a, struct http_req *req, struct http_conn *c,
	      const struct api_principal *who, const char *sandbox_id, const char *rest);

/* e2b.c: helpers */
/* One request to the local node as tenant; *out filled (caller frees).
 * Returns the status, or -1 (answered nothing: the node is unreachable). */
int e2b_node(struct api *a, const char *tenant, const char *method, const char *target,
	     const char *content_type, const void *body, size_t len, struct http_resp *out);
/* The node's error message from its JSON answer; caller owns. */
char *e2b_node_message(const struct http_resp *r);
/* {"code":<status>,"message":...}: E2B's control-API and envd-HTTP errors. */
void e2b_error(struct http_conn *c, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Percent-encode s for a query value; caller owns. */
char *e2b_qenc(const char *s);
/* A fresh envd access token for sandbox_id (stored hashed), of who's
 * tenant and minted by who's API key: it stops working when that key is
 * revoked. Caller owns. NULL on a DB failure. */
char *e2b_token_issue(struct api *a, const struct api_principal *who, const char *sandbox_id);
void e2b_tokens_drop(struct api *a, const char *sandbox_id);

#endif
