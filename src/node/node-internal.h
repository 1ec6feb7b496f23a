/* node-internal.h - shared by the node's features and handlers (the files
 * directly in src/node); not a public API. The model below them, which
 * this header includes, is model/model.h (its locking order too). */
#ifndef AIRLOCK_NODE_INTERNAL_H
#define AIRLOCK_NODE_INTERNAL_H

#include "cluster/cluster.h"
#include "exec/exec.h"
#include "files/files.h"
#include "http/handler.h"
#include "limits/limits.h"
#include "life/lifecycle.h"
#include "metrics/metrics.h"
#include "model/model.h"
#include "net/network.h"
#include "node.h"
#include "proc/proc.h"
#include "quota/quota.h"
#include "snap/snap.h"
#include "suspend/suspend.h"
#include "tmpl/tmplstore.h"
#include "wake/wake.h"

/* nodeinfo.c: the node manager's answer about the node's size (asked once,
 * then kept), and GET /v1/node (admin). */
int node_info_get(struct node *n, struct nm_node_info *out, err_t *err);
void handle_node(struct node *n, struct http_conn *c);
/* GET /v1/node/doctor (admin): nodemgr's host checks (src/doctor). */
void handle_node_doctor(struct node *n, struct http_conn *c);

/* network-api.c: the /network endpoints and the gateway's start-up list. */
void handle_network(struct node *n, struct sandbox *sb, bool log, struct http_req *req,
		    struct http_conn *c);
void handle_internal_network(struct node *n, struct http_conn *c);

/* ready-deps.c: GET /internal/ready, nodemgr's and the gateway's status as the
 * node sees them (200 all up, 503 otherwise), each probe time-bounded. */
void handle_internal_ready(struct node *n, struct http_conn *c);

/* sandboxes.c: list and get. */
void handle_sandboxes_list(struct node *n, struct http_req *req, struct http_conn *c,
			   const char *tenant);
void handle_sandbox_get(struct node *n, struct sandbox *sb, struct http_conn *c);

/* create.c */
void handle_sandboxes_create(struct node *n, struct http_req *req, struct http_conn *c,
			     const char *tenant);

/* timeout.c: POST /v1/sandboxes/{id}/timeout */
void handle_sandbox_timeout(struct node *n, struct sandbox *sb, struct http_req *req,
			    struct http_conn *c);
/* lifecycle-api.c: op "pause", "resume", "connect", "suspend", "restore". */
void handle_sandbox_lifecycle(struct node *n, struct sandbox *sb, const char *op,
			      struct http_conn *c);

/* byok.c: the create gate (-EKEYREVOKED
 * when the tenant's key service refuses its key); the revocation watch; the
 * /v1/tenants/{t}/encryption routes (admin). */
int byok_create_gate(struct node *n, const char *tenant, err_t *err);
void byok_start(struct node *n);
void byok_stop(struct node *n);
/* GET /v1/node/doctor: nodemgr's report plus the tenants' key services'
 * checks (insecure_http shows there). Caller frees. */
char *byok_doctor_amend(struct node *n, const char *report);
void handle_tenant_encryption(struct node *n, struct http_req *req, struct http_conn *c,
			      const char *tenant, bool rotate);
/* lifecycle-api.c: POST .../suspend and .../restore (op). */
void handle_sandbox_suspend(struct node *n, struct sandbox *sb, const char *op,
			    struct http_conn *c);
/* lifecycle-api.c: DELETE /v1/sandboxes/{id}. */
void handle_sandbox_delete(struct node *n, const char *id, const char *tenant,
			   struct http_conn *c);

/* ports.c: /v1/sandboxes/{id}/ports/{port}/... and /tunnel/{port}. Returns
 * false when the request is not one of those (it is then routed as usual). */
bool ports_route(struct node *n, struct http_req *req, struct http_conn *c, const char *tenant);
/* Send our own HTTP/1.1 request (head and body, whole, with Connection:
 * close) to port in sb through the guest channel and relay the service's
 * answer to c as the proxy does (its head rewritten, its body byte for
 * byte, in bounded chunks). A paused sandbox is resumed. While nothing
 * listens, asks again for up to wait_refused_ms. Returns 0 when it answered
 * c (the relay, or an error), -ECONNREFUSED when nothing listens (c not
 * answered: the caller says what that means). Used by code/code.c. */
int ports_relay(struct node *n, struct sandbox *sb, uint16_t port, const struct buf *request,
		uint64_t wait_refused_ms, struct http_conn *c);
/* A service's answer head h[0..n) (untrusted, through its blank line) with
 * its hop-by-hop headers replaced by ours, appended to out. Returns the
 * status, or -1 when it is no HTTP/1.x answer head (out unchanged then).
 * Fuzzed: tests/fuzz/fuzz-node-ports.c. */
int ports_rewrite_head(const char *h, size_t n, struct buf *out);

/* code.c: a sandbox's code interpreter, the service of the code-interpreter
 * template (scripts/code-interpreter) on the sandbox's loopback port
 * CODE_PORT, reached through ports_relay. */
#define CODE_PORT 49999   /* E2B's: @e2b/code-interpreter reaches it there too */
#define CODE_YOUNG_MS 60000        /* a sandbox this young may still be starting it */
#define CODE_START_WAIT_MS 5000    /* how long a refused connect is tried again then */
/* Created less than CODE_YOUNG_MS ago. */
bool code_sandbox_young(const struct sandbox *sb);
/* POST /v1/sandboxes/{id}/code. */
void handle_code_execute(struct node *n, struct sandbox *sb, struct http_req *req,
			 struct http_conn *c);
/* /v1/sandboxes/{id}/code/contexts[/{cid}[/restart]]: cid NULL for the
 * collection; restart: the .../restart row. */
void handle_code_contexts(struct node *n, struct sandbox *sb, const char *cid, bool restart,
			  struct http_req *req, struct http_conn *c);

/* console-log.c: GET .../console (501 when the backend has none) */
void handle_console(struct node *n, struct sandbox *sb, struct http_conn *c);
void handle_events(struct node *n, struct sandbox *sb, struct http_req *req, struct http_conn *c);
/* GET /v1/sandboxes/events: the tenant's transitions as Server-Sent Events. */
void handle_sandboxes_events(struct node *n, struct http_req *req, struct http_conn *c,
			     const char *tenant);

/* fork.c: POST .../fork (501 when the backend cannot fork). */
void handle_fork(struct node *n, struct sandbox *sb, struct http_req *req, struct http_conn *c);

/* reconcile.c */
void node_reconcile(struct node *n);

/* timers.c: what a reaper's timer does (the fire of reaper_start). */
void node_timer_fire(struct node *n, const struct timer *t);

#endif
