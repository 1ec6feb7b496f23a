/* network.c - the node's side of the sandbox network: each sandbox's
 * egress policy (kept in its spec row) and telling the gateway which
 * address belongs to which sandbox and policy. Its endpoints are
 * ../network-api.c. Both backends have the same network: an ns jail's eth0
 * holds the odd address of its slot's /31, and a vm guest's traffic leaves
 * QEMU's network namespace from that address (nodemgr's net.c translates
 * the guest's fixed one), so the gateway sees the same source. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/log.h"
#include "../../policy/policy.h"
#include "network.h"

bool sandbox_net_on(struct node *n, struct sandbox *sb)
{
	return n->cfg->gateway_sock && sb->be;
}

char *sandbox_net_policy_locked(struct sandbox *sb)
{
	struct policy p;
	struct buf b;
	struct jw w;
	char msg[256];

	if (policy_parse(sb->network, &p, msg, sizeof(msg)) < 0)
		policy_parse(NULL, &p, msg, sizeof(msg));
	buf_init(&b);
	jw_init(&w, &b);
	policy_write(&w, &p);
	policy_free(&p);
	return buf_steal(&b);
}

/* How long a create waits for a gateway that is not there (restarting). */
#define NET_PUSH_WAIT_MS 5000

int sandbox_net_push(struct node *n, struct sandbox *sb, const char *addr, err_t *err)
{
	_cleanup_free_ char *pol = NULL, *body = NULL, *target = NULL;
	struct http_resp resp;
	char a[16];
	int r;

	if (!sandbox_net_on(n, sb))
		return 0;
	pthread_mutex_lock(&sb->mu);
	if (addr)
		snprintf(sb->addr, sizeof(sb->addr), "%s", addr);
	snprintf(a, sizeof(a), "%s", sb->addr);
	pol = sandbox_net_policy_locked(sb);
	pthread_mutex_unlock(&sb->mu);
	/* nodemgr gives no address when its sandbox network is off. */
	if (!a[0])
		return err_set(err, EOPNOTSUPP, "sandbox %s: the sandbox network is off in nodemgr",
			       sb->id);
	body = xasprintf("{\"addr\":\"%s\",\"network\":%s}", a, pol);
	target = xasprintf("/sandboxes/%s", sb->id);
	/* A gateway being restarted (by up's supervisor: within a second)
	 * is waited for, not taken for a failed create: the PUT is
	 * idempotent, so it is tried again until NET_PUSH_WAIT_MS. */
	for (uint64_t end = now_ms() + NET_PUSH_WAIT_MS;;) {
		memset(&resp, 0, sizeof(resp));
		r = http_request(n->cfg->gateway_sock, "PUT", target,
				 "Content-Type: application/json\r\n", body, strlen(body), &resp, err);
		if (r == 0 || now_ms() >= end)
			break;
		http_resp_free(&resp);
		log_debug("sandbox %s: gateway: %s; trying again", sb->id, err->msg);
		*err = (err_t){ 0 };
		usleep(100 * 1000);
	}
	if (r == 0 && resp.status != 204)
		r = err_set(err, EIO, "gateway answered %d", resp.status);
	http_resp_free(&resp);
	return r < 0 ? err_wrap(err, "tell the gateway") : 0;
}

void sandbox_net_forget(struct node *n, struct sandbox *sb)
{
	_cleanup_free_ char *target = NULL;
	struct http_resp resp;
	err_t err = { 0 };

	if (!sandbox_net_on(n, sb))
		return;
	target = xasprintf("/sandboxes/%s", sb->id);
	memset(&resp, 0, sizeof(resp));
	if (http_request(n->cfg->gateway_sock, "DELETE", target, NULL, NULL, 0, &resp, &err) < 0)
		log_warn("sandbox %s: gateway forget: %s", sb->id, err.msg);
	http_resp_free(&resp);
}
