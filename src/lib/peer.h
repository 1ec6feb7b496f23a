/* peer.h - which of Airlock's daemons is at the other end of a unix socket.
 *
 * node.sock and gateway.sock are 0660 for the group the api, the node and
 * the gateway share, so the file's mode lets each of them connect to both.
 * Which of them may call a route is decided by the peer's uid, which the
 * kernel vouches for (SO_PEERCRED, taken by the http server at accept:
 * http_req.peer_uid), against the uids the roles run as. nodemgr.sock does
 * the same with its own rule (root and the node; src/nodemgr/server.c).
 *
 * Roles that run as one user (a run without root, where no role drops to a
 * user of its own) share a uid, and that uid holds each of their roles: the
 * check then separates Airlock from other users, not its roles from each
 * other, which is all such a run has to offer. Root (uid 0) passes every
 * check: it is `up` itself and the operator, who can already read every
 * role's memory, keys and database. */
#ifndef AIRLOCK_PEER_H
#define AIRLOCK_PEER_H

#include <stdbool.h>
#include <sys/types.h>

#include "http.h"

enum peer_role {
	PEER_API = 1 << 0,
	PEER_NODE = 1 << 1,
	PEER_GATEWAY = 1 << 2,
};

/* The uid each role runs as. Zero-initialised (set false): every role is
 * this process's own uid, as in a run without root. (uid_t)-1: the role
 * has no user here (the gateway of an instance without a sandbox network),
 * and no peer holds it. */
struct peer_uids {
	bool set;
	uid_t api, node, gateway;
};

/* The roles uid holds, PEER_* bits: several when roles share a user, none
 * for HTTP_NO_UID. (Root needs none: peer_allow passes it by its uid.) */
unsigned peer_roles(const struct peer_uids *u, uid_t uid);

/* May the peer of req call it, being one of the roles allowed (or root)?
 * When not: answers 403 forbidden (JSON), logs a line naming the peer's
 * uid and the route, and returns false. u and req are borrowed. */
bool peer_allow(const struct peer_uids *u, const struct http_req *req, struct http_conn *c,
		unsigned allowed);

#endif
