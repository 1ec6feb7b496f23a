/* gateway.h - `airlockd gateway`, the network gateway (unprivileged).
 *
 * Every TCP connection a sandbox opens is redirected here by nodemgr's
 * nftables table (transparent proxy, SO_ORIGINAL_DST), and every UDP/53
 * datagram to the DNS port. The gateway identifies the sandbox by source
 * address, reads the TLS SNI or the HTTP Host header, applies the sandbox's
 * policy (policy.h), logs the decision, and makes the upstream connection
 * itself. The node tells it which address belongs to which sandbox and
 * policy over a unix HTTP socket (admin_sock) that no sandbox can reach:
 *   PUT    /sandboxes/{id}      {"addr": "10.x.y.z", "network": <policy>}
 *   DELETE /sandboxes/{id}
 *   GET    /sandboxes/{id}/log  {"entries": [...]} (oldest first)
 *   GET    /stats               counters since start (gateway-internal.h)
 *   GET    /health
 */
#ifndef AIRLOCK_GATEWAY_H
#define AIRLOCK_GATEWAY_H

#include <stdint.h>

#include "../lib/err.h"
#include "../lib/peer.h"

struct seal_key;
struct ca;

#define GATEWAY_WORKERS_MAX 4096      /* proxy threads: a connection until its hand-off */
#define GATEWAY_MAX_CONNS_DEFAULT 256 /* live connections per sandbox */
#define GATEWAY_DNS_MAX_PENDING_DEFAULT 16 /* lookups waiting per sandbox */
#define GATEWAY_DNS_MAX_PENDING_MAX 1024

struct gateway_config {
	const char *admin_sock;       /* "unix:DATA/run/gateway.sock" */
	uint16_t proxy_port;          /* TCP, all interfaces; sandbox sources only */
	uint16_t dns_port;            /* UDP */
	const char *sandbox_net;      /* CIDR of the sandbox addresses (always denied) */
	const char *allow_private;    /* comma-separated CIDRs the operator allows */
	const char *hosts;            /* "name=ip,name=ip": answered before the host resolver */
	const char *node_sock;        /* "unix:DATA/run/node.sock": policies pulled at start */
	unsigned max_conns;           /* live TCP connections per sandbox, 1..GATEWAY_WORKERS_MAX */
	/* Name resolution: upstream servers "ip[:port],..." (NULL or "": the
	 * host's /etc/resolv.conf), and the lookups a sandbox may have waiting
	 * at once (0: the default). */
	const char *dns_servers;
	unsigned dns_max_pending;
	/* Credential injection (cred.h); all NULL: none. The keys are loaded by
	 * `up` as root before it drops privileges and handed over here. */
	const char *db_path;
	const struct seal_key *vault_key;   /* with the private half */
	struct ca *ca;                      /* the interception CA */
	const char *upstream_ca;            /* extra CA file trusted upstream (NULL: none) */
	/* The roles' uids: admin_sock answers the node's alone (and root's);
	 * zero: every role is this process's uid. */
	struct peer_uids peers;
};

/* Serve until SIGTERM/SIGINT. cfg is borrowed for the duration. */
int gateway_run(const struct gateway_config *cfg, err_t *err);

#endif
