/* e2b.h - the E2B-compatible API, as the api (src/api/api.c) sees it.
 *
 * Everything under E2B_PREFIX is E2B's, not Airlock's: the control API
 * (E2B_API_URL = <api>/e2b) and envd, the in-sandbox API
 * (E2B_SANDBOX_URL = <api>/e2b/envd). docs/E2B.md is the reference. */
#ifndef AIRLOCK_E2B_H
#define AIRLOCK_E2B_H

#include <stdbool.h>

#include "../../api/api-internal.h"

#define E2B_PREFIX "/e2b"

/* Is path E2B_PREFIX or below it? */
bool e2b_path(const char *path);
/* The head hook's part: a request that announces a body is authenticated
 * before the body is read. true: go on; false: answered (401, 413). */
bool e2b_head_check(struct api *a, struct http_req *req, struct http_conn *c);
/* Serve a request under E2B_PREFIX (authentication included). */
void e2b_handle(struct api *a, struct http_req *req, struct http_conn *c);

#endif
