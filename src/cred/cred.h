/* cred.h - credentials: what a secret is for, where it applies, who used it.
 *
 * A credential is a secret (kept in a vault, never here) plus how the gateway
 * injects it and where:
 *   inject   header  "NAME: FORMAT" with {value} in FORMAT ("Bearer {value}")
 *            basic   HTTP basic auth, the secret as password (username given)
 *            query   a query parameter
 *   hosts    exact names or "*.suffix" (any subdomain, not the apex)
 *   schemes, ports        how the request must travel: "https" (the default)
 *            and/or "http", to one of the ports (default: each scheme's own,
 *            443 and 80). The sandbox picks the port it dials and whether it
 *            speaks TLS, so a credential is put only into the transports its
 *            owner named: plain HTTP (readable on the wire) only on request.
 *   path_prefix, methods   optional narrowing (the prefix matches whole path
 *            segments, see cred_path_match)
 *   replace_in            where else the sandbox's placeholder is replaced by
 *            the value: "headers", "body", "target". Empty by default: the
 *            value goes only where `inject` says, so a host that echoes its
 *            request never hands it back.
 *   rate_limit            requests per minute per sandbox (0 = none); past it 429
 *   expires_at            never injected afterwards
 *   env      the environment variable that holds the sandbox's placeholder
 *
 * Bindings say which sandboxes get it: the whole tenant, every sandbox whose
 * metadata "project" is a label, or one sandbox. For each env name (or, for a
 * credential without one, each name) the most specific binding wins:
 * sandbox over project over tenant.
 */
#ifndef AIRLOCK_CRED_H
#define AIRLOCK_CRED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../db/db.h"
#include "../lib/err.h"
#include "../lib/json.h"

#define CRED_NAME_MAX 64
#define CRED_VALUE_MAX 8192
#define CRED_HOSTS_MAX 32
#define CRED_PORTS_MAX 16
#define CRED_PLACEHOLDER_PREFIX "airlock-ph-"

enum cred_inject { CRED_HEADER, CRED_BASIC, CRED_QUERY };
/* replace_in, a bit set. */
enum {
	CRED_REPLACE_HEADERS = 1u << 0,
	CRED_REPLACE_BODY = 1u << 1,
	CRED_REPLACE_TARGET = 1u << 2,
};
enum cred_scope { CRED_SCOPE_TENANT, CRED_SCOPE_PROJECT, CRED_SCOPE_SANDBOX };
/* schemes, a bit set. */
enum {
	CRED_SCHEME_HTTP = 1u << 0,
	CRED_SCHEME_HTTPS = 1u << 1,
};

/* Which transports a credential may go into: a request over scheme to port
 * gets it only when both are listed (cred_transport_ok). A zeroed one
 * admits nothing. */
struct cred_transport {
	unsigned schemes;        /* CRED_SCHEME_* */
	uint16_t ports[CRED_PORTS_MAX];
	size_t n_ports;
};

struct cred_binding {
	enum cred_scope kind;
	char *value;             /* project label or sandbox id; NULL for tenant */
};

struct cred {
	char *id, *tenant, *name, *env;
	enum cred_inject inject;
	char *header, *format;   /* header */
	char *username;          /* basic */
	char *param;             /* query */
	char **hosts;
	size_t n_hosts;
	struct cred_transport transport;
	char *path_prefix;       /* NULL = any */
	char **methods;          /* NULL = any */
	size_t n_methods;
	unsigned replace_in;     /* CRED_REPLACE_*; 0 = only where inject says */
	uint32_t rate_per_min;
	int64_t expires_at;      /* wall ms; 0 = never */
	uint32_t version;
	int64_t created_at, rotated_at, revoked_at;   /* 0 = not */
	struct cred_binding *binds;
	size_t n_binds;
};

void cred_free(struct cred *c);   /* the fields; accepts a zeroed struct */

/* Fill c's metadata from an API body (name, env, inject, hosts, schemes,
 * ports, path_prefix, methods, rate_limit, expires_at). Every problem is a
 * clear message in err (-EINVAL). value and bindings are not touched. */
int cred_parse_spec(const json *body, struct cred *c, err_t *err);
/* May a request over scheme (one CRED_SCHEME_* bit) to port carry the
 * credential? scheme and port are what the sandbox chose. */
bool cred_transport_ok(const struct cred_transport *t, unsigned scheme, int port);
/* schemes and ports of an API body (create, rotate): absent ones get their
 * defaults as in cred_parse_spec. A problem is a message in err (-EINVAL). */
int cred_parse_transport(const json *body, struct cred_transport *t, err_t *err);
/* t's schemes (ports false) or ports (ports true) as the JSON text the
 * credentials table stores. Caller owns. */
char *cred_transport_text(const struct cred_transport *t, bool ports);
/* Does the request target (origin-form, query aside) fall under prefix,
 * segment by segment? Both are compared after decoding percent-encoded
 * unreserved characters and removing "." and ".." segments (RFC 3986
 * 5.2.4), so "/v1" matches "/v1", "/v1/" and "/v1/x" but not "/v10" or
 * "/v1/../admin". A target that servers may read differently from us never
 * matches: one with an encoded '/', '\' or '%' (%2F, %5C, %25), a '\', a ';', an
 * empty segment ("//"), a bad or NUL escape, or not starting with '/'.
 * Untrusted input (target). */
bool cred_path_match(const char *prefix, const char *target);
/* Is prefix usable as a path_prefix (cred_path_match could match it)? */
bool cred_path_prefix_ok(const char *prefix);

/* A binding from {"tenant":true} | {"project":"x"} | {"sandbox":"sbx_..."}. */
int cred_parse_binding(const json *v, struct cred_binding *b, err_t *err);

/* The JSON the API shows (never a value). */
void cred_write(struct jw *w, const struct cred *c);

/* DB. cred_insert stores metadata and bindings (one transaction). */
int cred_insert(struct db *db, const struct cred *c, err_t *err);
/* Load one credential of tenant (tenant NULL = any). -ENOENT when absent. */
int cred_load(struct db *db, const char *id, const char *tenant, struct cred *c, err_t *err);
/* All of a tenant's credentials, newest first. */
int cred_list(struct db *db, const char *tenant, struct cred **out, size_t *n, err_t *err);
void cred_list_free(struct cred *v, size_t n);

/* The credentials that apply to a sandbox now (bound, not revoked, not
 * expired), most specific per env name. project may be NULL. */
int cred_resolve(struct db *db, const char *tenant, const char *sandbox_id, const char *project,
		 struct cred **out, size_t *n, err_t *err);

/* The vault reference of version v of credential id: "ID:v". */
char *cred_ref(const char *id, uint32_t version);


/* One audit record. Fields may be NULL. */
int cred_audit(struct db *db, const char *tenant, const char *sandbox_id, const char *cred_id,
	       const char *host, const char *method, const char *path, const char *decision,
	       const char *detail, err_t *err);

/* A sandbox's placeholder for credential cred_id: made once and stored, so it
 * stays the same for the sandbox's life. Caller owns. */
char *cred_placeholder(struct db *db, const char *sandbox_id, const char *cred_id, err_t *err);

#endif
