/* metrics.h - the room node/metrics (metrics.c): latency histograms of
 * the node's operations and GET /metrics; a sandbox's use now. */
#ifndef AIRLOCK_NODE_METRICS_H
#define AIRLOCK_NODE_METRICS_H

#include "../model/model.h"

/* Count one successful operation that took us microseconds;
 * GET /metrics (admin) in the Prometheus text format. */
void metrics_observe(struct node *n, enum node_op op, uint64_t us);
void handle_metrics(struct node *n, struct http_conn *c);
/* A create's jail is up: count it as a warm-pool hit or miss. */
void metrics_pool_create(struct node *n, const char *backend, bool hit);
/* GET /v1/sandboxes/{id}/metrics (owner): the sandbox's use now. */
void handle_sandbox_metrics(struct node *n, struct sandbox *sb, struct http_conn *c);

#endif
