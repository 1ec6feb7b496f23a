/* node.h - `airlockd node`, the sandbox manager of one node (unprivileged).
 *
 * It serves the sandbox and template endpoints of docs/API.md on a unix HTTP
 * socket (the api daemon forwards authenticated requests with
 * X-Airlock-Tenant / X-Airlock-Admin), owns the `sandboxes`, `templates` and
 * `events` rows, asks the node manager for privileged work (src/nmclient/nm.h)
 * through the backend ops table, and talks to each sandbox's guest agent over
 * its channel (src/guestconn/guestconn.h).
 */
#ifndef AIRLOCK_NODE_H
#define AIRLOCK_NODE_H

#include "../lib/err.h"
#include "model/config.h"

/* Runs until SIGTERM/SIGINT (blocked in every thread and taken with
 * sigwait on the calling thread). On stop, running sandboxes are marked
 * stopped (the node manager kills the jails on its own shutdown) and 0 is
 * returned. cfg is borrowed for the duration of the call. */
int node_run(const struct node_config *cfg, err_t *err);

#endif
