/* ca.h - the deployment's interception CA.
 *
 * For HTTPS to a host that has a credential bound, the gateway terminates TLS
 * with a certificate for that host signed by this CA, which every sandbox
 * trusts (the template build installs it, the node points SSL_CERT_FILE,
 * REQUESTS_CA_BUNDLE and NODE_EXTRA_CA_CERTS at it). `up` makes the CA once
 * per data dir: an EC P-256 key (root's, 0600) and a self-signed certificate
 * (public). Leaf certificates share one key made at load time, are valid for
 * a day either side of now, carry the host as their only SAN, and are cached
 * per host.
 */
#ifndef AIRLOCK_CA_H
#define AIRLOCK_CA_H

#include <openssl/ssl.h>

#include "../lib/err.h"

struct ca;

/* Create key_path (0600) and crt_path (0644) unless both exist. */
int ca_ensure(const char *key_path, const char *crt_path, err_t *err);
struct ca *ca_load(const char *key_path, const char *crt_path, err_t *err);
void ca_free(struct ca *ca);   /* accepts NULL */
/* A server SSL_CTX presenting a certificate for host (ALPN: http/1.1 only),
 * from a bounded cache. The caller owns one reference: SSL_CTX_free it after
 * SSL_new. NULL with err on failure. */
SSL_CTX *ca_server_ctx(struct ca *ca, const char *host, err_t *err);

#endif
