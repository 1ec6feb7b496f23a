/* desktop-stream.c - GET /v1/sandboxes/{id}/desktop/stream.
 *
 * Two steps: the node starts x11vnc and websockify (noVNC's page) in the
 * sandbox (src/node/desktop), then this api gives the owner a port token
 * for noVNC's port (as POST .../port-tokens does) and the URL of noVNC's
 * page under the host-routed port URL, with the token in its query: the
 * first request trades it for a host-only cookie (portfwd.c), which the
 * page's WebSocket then carries. So a browser opens the desktop with no
 * API key, and the URL opens that port of that sandbox only, until the
 * token expires. Without `ports_domain` there is no such URL (`url` is
 * null): the stream is then reached through the owner's /ports/ proxy.
 */
#include <stdio.h>
#include <string.h>

#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/util.h"
#include "api-internal.h"

#define NOVNC_PORT 6080
#define STREAM_TTL_S 3600

/* The port of this request's Host header ("h:7070" -> ":7070"), so the URL
 * reaches the same listener; "" for none. */
static void host_port(const struct http_req *req, char *out, size_t n)
{
	const char *h = http_req_header(req, "Host"), *colon;
	size_t k;

	out[0] = '\0';
	if (!h || !(colon = strrchr(h, ':')) || strchr(colon, ']'))
		return;
	k = strspn(colon + 1, "0123456789");
	if (k == 0 || k > 5 || colon[1 + k] != '\0')
		return;
	snprintf(out, n, ":%.*s", (int)k, colon + 1);
}

void api_desktop_stream(struct api *a, struct http_req *req, struct http_conn *c,
			const struct api_principal *who, const char *sandbox_id)
{
	_cleanup_free_ char *hdr = NULL, *target = NULL, *token = NULL;
	struct http_resp resp;
	err_t err = { 0 };
	char peer[200], ts[ISO_TIME_MAX], port[8];
	int64_t exp;
	int r;

	if (strcmp(req->method, "GET") != 0) {
		api_method_not_allowed(c, "GET");
		return;
	}
	/* A sandbox of another node: its api does both steps. */
	r = api_cluster_route(a, req, c, who, peer, sizeof(peer));
	if (r < 0)
		return;
	if (r > 0) {
		api_forward(a, req, c, who);
		return;
	}
	if (!api_inflight_take(a, c, who))
		return;
	hdr = xasprintf("X-Airlock-Tenant: %s\r\nX-Airlock-Admin: %d\r\n", who->tenant,
			who->admin ? 1 : 0);
	target = xasprintf("/v1/sandboxes/%s/desktop/stream", sandbox_id);
	memset(&resp, 0, sizeof(resp));
	r = http_request(a->cfg->node_sock, "GET", target, hdr, NULL, 0, &resp, &err);
	api_inflight_give(a, who);
	if (r < 0) {
		log_warn("desktop stream %s: node unavailable: %s", sandbox_id, err.msg);
		http_respond_error(c, 503, "unavailable", "the node is unavailable");
		return;
	}
	if (resp.status != 200) {
		/* The node's own error (404 another tenant's, 409 no desktop, ...) */
		http_respond(c, resp.status, "application/json", resp.body.data, resp.body.len,
			     NULL);
		http_resp_free(&resp);
		return;
	}
	http_resp_free(&resp);
	if (api_port_token_mint(a, c, who, sandbox_id, NOVNC_PORT, STREAM_TTL_S, &token, &exp) < 0)
		return;

	struct buf out;
	struct jw w;
	buf_init(&out);
	jw_init(&w, &out);
	jw_obj(&w);
	jw_key(&w, "url");
	if (a->cfg->ports_domain && *a->cfg->ports_domain) {
		const char *fp = http_req_header(req, "X-Forwarded-Proto");
		bool https = a->cfg->tls || (fp && strcmp(fp, "https") == 0);
		_cleanup_free_ char *url = NULL;

		host_port(req, port, sizeof(port));
		url = xasprintf("%s://%d-%s.%s%s/vnc.html?autoconnect=true&resize=scale"
				"&airlock_token=%s",
				https ? "https" : "http", NOVNC_PORT, sandbox_id, a->cfg->ports_domain,
				port, token);
		jw_str(&w, url);
	} else {
		jw_null(&w);
	}
	jw_key(&w, "token");
	jw_str(&w, token);
	jw_key(&w, "expires_at");
	iso_time(exp, ts);
	jw_str(&w, ts);
	jw_key(&w, "port");
	jw_int(&w, NOVNC_PORT);
	jw_key(&w, "path");
	jw_str(&w, "/vnc.html");
	jw_end(&w);
	http_respond(c, 200, "application/json", out.data, out.len, "Cache-Control: no-store\r\n");
	buf_free(&out);
}
