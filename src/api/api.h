/* api.h - `airlockd api`: the API gateway.
 *
 * It authenticates (API keys, stored as SHA-256 hashes), rate-limits per key,
 * serves the admin endpoints (tenants, keys) itself and forwards everything
 * under /v1/sandboxes, /v1/templates and /v1/node to the node's HTTP control
 * socket, adding X-Airlock-Tenant and X-Airlock-Admin. Streaming answers
 * (NDJSON) are relayed chunk by chunk. See docs/API.md.
 *
 * The api keeps no state beyond short-lived caches, so several may run on one DB.
 */
#ifndef AIRLOCK_API_H
#define AIRLOCK_API_H

#include <stddef.h>
#include <stdio.h>

#include "../lib/err.h"

struct tls_ctx;

struct api_config {
	const char *listen;     /* "HOST:PORT" (port 0 = any) or "unix:/path" */
	const char *db_path;    /* db_open target: SQLite file or PostgreSQL URL (migrated on open) */
	const char *node_sock;  /* http client base of the node, e.g. "unix:DATA/run/node.sock" */
	size_t max_body;        /* request body limit; 0 = 16 MiB (file writes) */
	double rate_per_s;      /* per-key token bucket refill; <= 0 disables rate limiting */
	double rate_burst;      /* bucket size; <= 0 means max(1, rate_per_s) */
	unsigned max_inflight;  /* requests to sandboxes in progress per tenant; 0 = no cap */
	const char *ports_domain; /* NULL/"": no host-routed port URLs; else {port}-{id}.<this> */
	const char *addr_file;  /* NULL, or a file to write the bound address to ("127.0.0.1:43111\n") */
	const char *vault_pub;  /* the vault's public key file; NULL: /v1/credentials answers 503 */
	const char *node_name;  /* this node in the nodes table; NULL: no cluster routing */
	const char *advertise_url; /* where other apis reach this one; NULL: http://<bound> */
	unsigned heartbeat_timeout_s; /* a node silent this long is lost; 0: never */
	unsigned max_conns_per_client; /* connections at once per client IP; 0 = no cap */
	size_t body_budget;     /* bytes of request bodies in flight, all clients; 0 = no cap */
	int head_timeout_ms;    /* a request head must arrive within it; 0 = 10 s */
	struct tls_ctx *tls;    /* NULL: plain HTTP; else TLS (lib/tls.h), borrowed */
};

/* Serve until SIGTERM or SIGINT arrives, then stop and return 0.
 * It blocks SIGTERM/SIGINT in the calling thread (and so in every thread it
 * starts) and waits for them with sigwait: call it from the main thread of a
 * process, or block those signals in every other thread first. SIGPIPE is
 * ignored process-wide. cfg and its strings are borrowed for the call. */
int api_run(const struct api_config *cfg, err_t *err);

/* First-run bootstrap, called by `airlockd up` before the api starts.
 * If no usable admin key exists, or cli_json_path is missing, it makes sure
 * tenant "admin" exists, creates a fresh admin key and writes
 * cli_json_path = {"url":url,"api_key":key} atomically with mode 0600.
 * Otherwise it changes nothing, so calling it on every start is safe.
 * Returns 0 or -errno with err filled. */
int api_bootstrap(const char *db_path, const char *cli_json_path, const char *url, err_t *err);

/* `airlockd routes`: every public route, "METHOD /path/{param}" a line, from
 * the table the api answers by (src/lib/routes.def), then the registered
 * compatibility prefixes. */
void api_routes_print(FILE *f);

#endif
