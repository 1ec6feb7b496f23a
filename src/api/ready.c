/* ready.c - GET /v1/ready (no key): is every daemon a request needs up?
 *
 * /v1/health says only that the api process answers (liveness). Readiness
 * checks what serving takes: the database (a query through the api's own
 * handle), the node (a request over node.sock, bounded by READY_NODE_MS),
 * and, as the node sees them, nodemgr and the gateway (src/node/ready-deps.c).
 * 200 when all are up, else 503; either way the body names each component's
 * status ("up", "down", "off" when configured away, "unknown" when the node,
 * which would have asked, is down) and lists the ones that are down:
 *   {"status":"ready"|"not_ready","down":["gateway"],
 *    "components":{"database":{"status":"up"},"node":{...},
 *                  "nodemgr":{...},"gateway":{"status":"down","error":"..."}}}
 */
#include <errno.h>
#include <string.h>

#include "../lib/readiness.h"
#include "api-internal.h"

/* More than the node's own probes take together (two of 1 s each). */
#define READY_NODE_MS 3000

void api_handle_ready(struct api *a, struct http_conn *c)
{
	static const char *const behind_node[] = { "nodemgr", "gateway" };
	struct db_rows rows = { 0 };
	struct http_resp resp = { 0 };
	err_t db_err = { 0 }, node_err = { 0 }, perr = { 0 };
	json *node = NULL;
	const char *down[8];
	size_t n_down = 0;
	bool ready = true;   /* every component up (or off) */
	struct buf b;
	struct jw w;

	int db_r = db_query(a->db, &rows, &db_err, "SELECT 1", NULL);
	db_rows_free(&rows);
	int node_r = http_request_timeout(a->cfg->node_sock, "GET", "/internal/ready", NULL, NULL,
					  0, READY_NODE_MS, &resp, &node_err);
	if (node_r == 0) {
		node = json_parse(resp.body.data ? resp.body.data : "", resp.body.len, &perr);
		if (!node || node->type != JSON_OBJ) {
			json_free(node);
			node = NULL;
			node_r = err_set(&node_err, EPROTO, "bad answer to GET /internal/ready (HTTP %d)",
					 resp.status);
		}
		http_resp_free(&resp);
	}

	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "components");
	jw_obj(&w);
	readiness_component(&w, "database", db_r < 0 ? "down" : "up",
			    db_r < 0 ? db_err.msg : NULL);
	if (db_r < 0)
		down[n_down++] = "database";
	readiness_component(&w, "node", node_r < 0 ? "down" : "up",
			    node_r < 0 ? node_err.msg : NULL);
	if (node_r < 0)
		down[n_down++] = "node";
	for (size_t i = 0; i < ARRAY_SIZE(behind_node); i++) {
		const json *cj = node ? json_get(node, behind_node[i]) : NULL;
		const char *st = cj ? json_get_str(cj, "status") : NULL;

		if (!st) {
			readiness_component(&w, behind_node[i], "unknown", "the node did not say");
			ready = false;
			continue;
		}
		readiness_component(&w, behind_node[i], st, json_get_str(cj, "error"));
		if (strcmp(st, "up") != 0 && strcmp(st, "off") != 0)
			down[n_down++] = behind_node[i];
	}
	jw_end(&w);
	jw_key(&w, "down");
	jw_arr(&w);
	for (size_t i = 0; i < n_down; i++)
		jw_str(&w, down[i]);
	jw_end(&w);
	jw_key(&w, "status");
	ready = ready && n_down == 0;
	jw_str(&w, ready ? "ready" : "not_ready");
	jw_end(&w);
	json_free(node);
	http_respond_json(c, ready ? 200 : 503, b.data);
	buf_free(&b);
}
