/* peer.c - the role check on the internal sockets (peer.h). */
#include "peer.h"

#include <stdio.h>
#include <unistd.h>

#include "log.h"

unsigned peer_roles(const struct peer_uids *u, uid_t uid)
{
	struct peer_uids self;
	unsigned roles = 0;

	if (uid == HTTP_NO_UID)
		return 0;   /* not a unix peer, or the kernel would not say */
	if (!u->set) {
		uid_t me = getuid();
		self = (struct peer_uids){ true, me, me, me };
		u = &self;
	}
	if (uid == u->api)
		roles |= PEER_API;
	if (uid == u->node)
		roles |= PEER_NODE;
	if (uid == u->gateway)
		roles |= PEER_GATEWAY;
	return roles;
}

/* "api,node" for the log line; "none" for no role. */
static const char *roles_str(unsigned roles, char buf[32])
{
	static const char *const names[] = { "api", "node", "gateway" };
	size_t n = 0;

	buf[0] = '\0';
	for (unsigned i = 0; i < 3; i++)
		if (roles & (1u << i))
			n += (size_t)snprintf(buf + n, 32 - n, "%s%s", n ? "," : "", names[i]);
	return n ? buf : "none";
}

bool peer_allow(const struct peer_uids *u, const struct http_req *req, struct http_conn *c,
		unsigned allowed)
{
	unsigned held;
	char hb[32], ab[32];

	if (req->peer_uid == 0)
		return true;
	held = peer_roles(u, req->peer_uid);
	if (held & allowed)
		return true;
	/* The uid as the kernel gave it, so a compromised role is named in the
	 * log even when it sends whatever headers it likes. */
	log_warn("refusing %s %s from uid %d (role %s): only %s may call it", req->method,
		 req->path ? req->path : "", req->peer_uid == HTTP_NO_UID ? -1 : (int)req->peer_uid,
		 roles_str(held, hb), allowed ? roles_str(allowed, ab) : "root");
	http_respond_error(c, 403, "forbidden", "%s %s is not for this peer's role", req->method,
			   req->path ? req->path : "");
	return false;
}
