/* gw-cred.h - the gateway's side of credential injection (src/cred).
 *
 * For a connection the policy allowed:
 *   - plain HTTP: when the sandbox has a credential for the Host that allows
 *     plain HTTP to the port dialled, or the sniffed bytes carry a
 *     placeholder, the whole request head is read and
 *     rewritten (cred_inject) before it goes upstream, with
 *     "Connection: close" so the next request comes through here again;
 *   - TLS: when the sandbox has a credential for the SNI name that allows
 *     https to the port dialled, the gateway
 *     terminates TLS with a certificate from the deployment CA, rewrites the
 *     request head the same way, and talks verified TLS upstream (mitm.h),
 *     all on event loops (mitmloop.h, tlsrelay.h), holding no thread.
 *     Every other TLS connection is relayed untouched.
 * Which sandbox belongs to which tenant and project is read from the shared
 * DB once per sandbox; which hosts have credentials is cached for a second
 * (injection itself always reads the current state, so a revoked or expired
 * credential is never injected).
 */
#ifndef AIRLOCK_GATEWAY_CRED_H
#define AIRLOCK_GATEWAY_CRED_H

#include <stdbool.h>
#include <stddef.h>

#include "../lib/err.h"
#include "../lib/util.h"
#include "gateway.h"
#include "mitmloop.h"
#include "tlsrelay.h"

struct gw_cred;

/* What every placeholder starts with (cred.h's CRED_PLACEHOLDER_PREFIX). */
#define CRED_PLACEHOLDER_MARK "airlock-ph-"

/* NULL with err when a key, the CA or the DB cannot be used. */
struct gw_cred *gw_cred_open(const struct gateway_config *cfg, err_t *err);
/* Does the sandbox have a credential whose hosts match host and that may go
 * over scheme (CRED_SCHEME_HTTP or CRED_SCHEME_HTTPS) to port? */
bool gw_cred_wants(struct gw_cred *gc, const char *sandbox_id, const char *host, unsigned scheme,
		   int port);
/* Plain HTTP to host (as sniffed) on port: 0 with out = what to send
 * upstream (then, when *stream was set, stream the body with
 * mitm_stream_plain: mitm.h); 1 with out = the answer for the sandbox
 * (429, or 421/400 when the request names another origin); -errno for a
 * malformed head (answer 400). */
struct mitm_stream;
int gw_cred_http(struct gw_cred *gc, const char *sandbox_id, const char *host, int port,
		 int fd, const void *pre, size_t n, struct buf *out, struct mitm_stream **stream);
/* TLS interception of one connection, set up on ml (mitmloop.h) and then
 * carried by its relay loop; fd is the sandbox's side (pre, n: the
 * sniffed bytes), up a non-blocking socket whose connect() to the real
 * host is under way. Both are consumed: done(done_arg, fd, up) closes
 * them when the connection is over, however it ends; dialed(done_arg, ok)
 * (may be NULL) says how the connect ended. A setup that fails is logged. */
void gw_cred_tls_start(struct gw_cred *gc, struct mitm_loop *ml, const char *sandbox_id,
		       const char *host, int port, int fd, const void *pre, size_t n, int up,
		       mitm_dialed_fn dialed, tls_loop_done_fn done, void *done_arg);

#endif
