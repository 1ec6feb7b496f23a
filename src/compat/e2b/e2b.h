/* e2b.h - the E2B-compatible API (src/compat/e2b): its prefix and entry points.
 *
 * Everything under E2B_PREFIX is E2B's, not Airlock's: the control API
 * (E2B_API_URL = <api>/e2b) and envd, the in-sandbox API
 * (E2B_SANDBOX_URL = <api>/e2b/envd). docs/E2B.md is the reference. */
#ifndef AIRLOCK_E2B_H
#define AIRLOCK_E2B_H

#include <stdbool.h>

#include "../../api/api-internal.h"

#define E2B_PREFIX "/e2b"

/* The api calls e2b_head_check (a request that announces a body is
 * authenticated before the body is read: true to go on, false when
 * answered with 401 or 413) and e2b_handle (serve a request under
 * E2B_PREFIX, authentication included); api-internal.h declares both, and
 * routes.c's api_compat table names them. */

#endif
