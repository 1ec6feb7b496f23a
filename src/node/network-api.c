/* network-api.c - the sandbox network's endpoints (the network itself is
 * the room net/):
 *   GET   /v1/sandboxes/{id}/network       the policy in force
 *   PATCH /v1/sandboxes/{id}/network       replace it on a live sandbox
 *   GET   /v1/sandboxes/{id}/network/log   the gateway's decisions
 *   GET   /internal/network                every pushed sandbox (for a
 *                                          restarted gateway; the api never
 *                                          forwards this path)
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../lib/log.h"
#include "../policy/policy.h"
#include "node-internal.h"

static void respond_policy(struct http_conn *c, struct sandbox *sb)
{
	_cleanup_free_ char *pol = NULL, *body = NULL;

	pthread_mutex_lock(&sb->mu);
	pol = sandbox_net_policy_locked(sb);
	body = xasprintf("{\"network\":%s,\"addr\":%s%s%s}", pol, sb->addr[0] ? "\"" : "",
			 sb->addr[0] ? sb->addr : "null", sb->addr[0] ? "\"" : "");
	pthread_mutex_unlock(&sb->mu);
	http_respond_json(c, 200, body);
}

void handle_network(struct node *n, struct sandbox *sb, bool log, struct http_req *req,
		    struct http_conn *c)
{
	err_t err = { 0 };

	if (!sandbox_net_on(n, sb)) {
		http_respond_error(c, 501, "not_supported",
				   "sandbox %s has no network (the network is off on this node)",
				   sb->id);
		return;
	}
	if (log) {
		_cleanup_free_ char *target = xasprintf("/sandboxes/%s/log", sb->id);
		struct http_resp resp;
		memset(&resp, 0, sizeof(resp));
		if (strcmp(req->method, "GET") != 0) {
			http_respond_error(c, 405, "method_not_allowed", "%s is not allowed here",
					   req->method);
		} else if (http_request(n->cfg->gateway_sock, "GET", target, NULL, NULL, 0, &resp,
					&err) < 0) {
			http_respond_error(c, 503, "unavailable", "gateway: %s", err.msg);
		} else if (resp.status != 200) {
			http_respond_error(c, 503, "unavailable", "gateway answered %d", resp.status);
		} else {
			buf_addc(&resp.body, '\0');
			http_respond_json(c, 200, resp.body.data);
		}
		http_resp_free(&resp);
		return;
	}
	if (strcmp(req->method, "GET") == 0) {
		respond_policy(c, sb);
		return;
	}
	if (strcmp(req->method, "PATCH") != 0) {
		http_respond_error(c, 405, "method_not_allowed", "%s is not allowed here",
				   req->method);
		return;
	}
	{
		json *body = json_parse(req->body, req->body_len, &err);
		const json *v;
		struct policy p;
		char msg[256];
		json *old;
		enum sb_state st;

		if (!body) {
			http_respond_error(c, 400, "bad_json", "%s", err.msg);
			return;
		}
		/* The body is the policy itself, or {"network": policy}. */
		v = body->type == JSON_OBJ && json_get(body, "network") && body->n == 1
			    ? json_get(body, "network")
			    : body;
		if (policy_parse(v, &p, msg, sizeof(msg)) < 0) {
			http_respond_error(c, 400, "invalid_field", "%s", msg);
			json_free(body);
			return;
		}
		policy_free(&p);
		pthread_mutex_lock(&sb->mu);
		st = sb->state;
		pthread_mutex_unlock(&sb->mu);
		if (st != SB_RUNNING && st != SB_PAUSED) {
			node_respond_conflict(c, st, "sandbox %s is not running", sb->id);
			json_free(body);
			return;
		}
		if (sandbox_spec_set(n, sb, "network", v, &err) < 0) {
			node_respond_err(c, &err);
			json_free(body);
			return;
		}
		{
			json *copy = json_dup(v);
			pthread_mutex_lock(&sb->mu);
			old = sb->network;
			sb->network = copy;
			pthread_mutex_unlock(&sb->mu);
			json_free(old);
		}
		json_free(body);
		if (sandbox_net_push(n, sb, NULL, &err) < 0) {
			http_respond_error(c, 503, "unavailable", "%s", err.msg);
			return;
		}
		respond_policy(c, sb);
	}
}

void handle_internal_network(struct node *n, struct http_conn *c)
{
	struct buf b;
	struct jw w;

	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "sandboxes");
	jw_arr(&w);
	pthread_mutex_lock(&n->mu);
	for (int k = 0; k < NODE_BUCKETS; k++)
		for (struct sandbox *sb = n->buckets[k]; sb; sb = sb->hnext) {
			pthread_mutex_lock(&sb->mu);
			if (sb->addr[0] && state_is_live(sb->state)) {
				_cleanup_free_ char *pol = sandbox_net_policy_locked(sb);
				jw_obj(&w);
				jw_key(&w, "id");
				jw_str(&w, sb->id);
				jw_key(&w, "addr");
				jw_str(&w, sb->addr);
				jw_key(&w, "network");
				jw_raw(&w, pol);
				jw_end(&w);
			}
			pthread_mutex_unlock(&sb->mu);
		}
	pthread_mutex_unlock(&n->mu);
	jw_end(&w);
	jw_end(&w);
	http_respond_json(c, 200, b.data);
	buf_free(&b);
}
