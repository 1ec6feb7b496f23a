/* netlink.h - the few rtnetlink requests the sandbox network needs (net.c),
 * sent directly instead of spawning `ip`: a create pays no process start.
 * Each call sends one request with NLM_F_ACK and waits for its answer.
 * Addresses are IPv4 in host order. */
#ifndef AIRLOCK_NODEMGR_NETLINK_H
#define AIRLOCK_NODEMGR_NETLINK_H

#include <stdint.h>

#include "../../lib/err.h"

/* A NETLINK_ROUTE socket (caller owns) in the network namespace of
 * netns_fd (-1: ours). Only the calling thread switches namespaces. */
int nmnet_nl_open(int netns_fd, err_t *err);
/* A veth pair: `name` here, `peer` in the namespace of peer_netns_fd. */
int nmnet_nl_veth_add(int sock, const char *name, const char *peer, int peer_netns_fd, err_t *err);
int nmnet_nl_link_del(int sock, const char *name, err_t *err);   /* -ENODEV when absent */
int nmnet_nl_link_up(int sock, const char *name, err_t *err);
int nmnet_nl_addr_add(int sock, const char *name, uint32_t addr, int prefix, err_t *err);
int nmnet_nl_route_default(int sock, const char *name, uint32_t gw, err_t *err);

#endif
