/* cluster.h - the room node/cluster (heartbeat.c): this node's row in the
 * nodes table, its heartbeat, and which suspended sandboxes moved to
 * another node. Above the model only. */
#ifndef AIRLOCK_NODE_CLUSTER_H
#define AIRLOCK_NODE_CLUSTER_H

#include "../model/model.h"

/* Register this node (state up, next generation) and write its
 * first heartbeat; then beat in the background until cluster_stop, which
 * writes state down. */
int cluster_register(struct node *n, err_t *err);
int cluster_start(struct node *n, err_t *err);
/* sb is suspended and its row names another node (it moved there): out of
 * the map (the caller's reference stays); true when so. */
bool cluster_forget_if_moved(struct node *n, struct sandbox *sb);
/* Beat now rather than at the next tick (a template became ready). */
void cluster_poke(struct node *n);
void cluster_stop(struct node *n);

#endif
