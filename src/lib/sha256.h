/* sha256.h - SHA-256 over OpenSSL's EVP, as lowercase hex: the digests the
 * object store, the sealed artifacts, the memory bases and OCI blobs are
 * named and checked by. Each aborts only when OpenSSL cannot allocate (as
 * xmalloc does). */
#ifndef AIRLOCK_SHA256_H
#define AIRLOCK_SHA256_H

#include <openssl/evp.h>
#include <stdbool.h>
#include <stddef.h>

#define SHA256_HEX_LEN 65   /* 64 hex digits and a NUL */

EVP_MD_CTX *sha256_start(void);
void sha256_add(EVP_MD_CTX *c, const void *p, size_t n);
/* Finishes c (and frees it) into hex. */
void sha256_end_hex(EVP_MD_CTX *c, char hex[SHA256_HEX_LEN]);
/* The digest of n bytes at p. */
void sha256_of(const void *p, size_t n, char hex[SHA256_HEX_LEN]);
/* 64 lowercase hex digits and nothing more? (NULL: no) */
bool sha256_hex_ok(const char *s);
/* n bytes as 2n lowercase hex digits and a NUL. */
void hex_encode(const unsigned char *p, size_t n, char *out);

#endif
