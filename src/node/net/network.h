/* network.h - the room node/net (network.c): the sandbox network as the
 * node keeps it. Above the model only. */
#ifndef AIRLOCK_NODE_NETWORK_H
#define AIRLOCK_NODE_NETWORK_H

#include "../model/model.h"

/* Tell the gateway sb's address and policy (a no-op with the network off
 * or an unknown backend), or forget it. push: addr is the address the
 * backend gave when it started or adopted sb, which sb keeps from then on;
 * NULL: the one sb has (a new policy). */
int sandbox_net_push(struct node *n, struct sandbox *sb, const char *addr, err_t *err);
void sandbox_net_forget(struct node *n, struct sandbox *sb);
/* Has the node a sandbox network (a gateway), and sb a backend? */
bool sandbox_net_on(struct node *n, struct sandbox *sb);
/* The canonical JSON of sb's policy (caller frees); sb->mu held. */
char *sandbox_net_policy_locked(struct sandbox *sb);

#endif
