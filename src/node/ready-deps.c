/* ready-deps.c - GET /internal/ready on the node socket: can the node reach the
 * daemons it depends on? The api's GET /v1/ready asks this, adds its own
 * database check and the node's own answer, and says which one is down.
 *
 * Each probe is one cheap request bounded by READY_PROBE_MS, so a stalled
 * daemon (stopped, or wedged on a lock) reads as down instead of hanging
 * the probe: a dead one is restarted by `up` within a second, a stalled
 * one is not, and that is what readiness must catch.
 */
#include <string.h>

#include "../lib/readiness.h"
#include "node-internal.h"

#define READY_PROBE_MS 1000

void handle_internal_ready(struct node *n, struct http_conn *c)
{
	struct http_resp resp;
	err_t err = { 0 };
	bool all_up = true;
	struct buf b;
	struct jw w;

	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	/* nodemgr: the verbs every sandbox operation needs */
	if (nm_ping(n->cfg->nm_sock, READY_PROBE_MS, &err) < 0) {
		readiness_component(&w, "nodemgr", "down", err.msg);
		all_up = false;
	} else {
		readiness_component(&w, "nodemgr", "up", NULL);
	}
	/* gateway: every sandbox's only way out (absent with network = false) */
	if (!n->cfg->gateway_sock) {
		readiness_component(&w, "gateway", "off", NULL);
	} else {
		memset(&err, 0, sizeof(err));
		if (http_request_timeout(n->cfg->gateway_sock, "GET", "/stats", NULL, NULL, 0,
					 READY_PROBE_MS, &resp, &err) < 0) {
			readiness_component(&w, "gateway", "down", err.msg);
			all_up = false;
		} else {
			if (resp.status == 200) {
				readiness_component(&w, "gateway", "up", NULL);
			} else {
				_cleanup_free_ char *m = xasprintf("GET /stats answered %d", resp.status);
				readiness_component(&w, "gateway", "down", m);
				all_up = false;
			}
			http_resp_free(&resp);
		}
	}
	jw_end(&w);
	http_respond_json(c, all_up ? 200 : 503, b.data);
	buf_free(&b);
}
