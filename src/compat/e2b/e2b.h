/* e2b.h - the E2B-compatible API (src/compat/e2b): its prefix and entry points.
 *
 * Everything under E2B_PREFIX is E2B's, not Airlock's: the control API
 * (E2B_API_URL = <api>/e2b) and envd, the in-sandbox API
 * (E2B_SANDBOX_URL = <api>/e2b/envd). docs/E2B.md is the reference. */
#ifndef AIRLOCK_E2B_H
#define AIRLOCK_E2B_H

#include <stdbool.h>

#define E2B_PREFIX "/e2b"

struct api;
struct http_req;
struct http_conn;

/* Register E2B_PREFIX with the api (api_compat_register): called once by
 * airlockd at start, before the api serves or prints its routes. */
void e2b_register(void);

/* What the api calls for a path under E2B_PREFIX: e2b_head_check (a
 * request that announces a body is authenticated before the body is read:
 * true to go on, false when answered with 401 or 413) and e2b_handle
 * (serve it, authentication included). */
bool e2b_head_check(struct api *a, struct http_req *req, struct http_conn *c);
void e2b_handle(struct api *a, struct http_req *req, struct http_conn *c);

#endif
