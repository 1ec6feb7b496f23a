/* seal.h - sealed boxes for the credential vault.
 *
 * A secret is sealed to the node's vault public key (X25519) and opened only
 * with the private key. So the process that stores secrets (the api, which
 * parses internet-facing input) can encrypt but never decrypt; only the
 * gateway, which injects them, holds the private key.
 *
 * Box layout (all sizes in bytes):
 *   version (1, = 1) | ephemeral X25519 public key (32) | nonce (12) |
 *   AES-256-GCM ciphertext (n) | tag (16)
 * The AES key is HKDF-SHA256(ikm = X25519(eph, recipient), salt = eph_pub ||
 * recipient_pub, info = "airlock-vault-v1"). The caller's aad (e.g. the
 * credential id and version) is authenticated, so a box cannot be moved to
 * another record.
 */
#ifndef AIRLOCK_SEAL_H
#define AIRLOCK_SEAL_H

#include <stddef.h>
#include <stdint.h>

#include "../lib/err.h"
#include "../lib/util.h"

#define SEAL_KEY_LEN 32
#define SEAL_OVERHEAD (1 + 32 + 12 + 16)

struct seal_key {
	uint8_t pub[SEAL_KEY_LEN];
	uint8_t priv[SEAL_KEY_LEN];
	int have_priv;
};

/* A fresh key pair. */
int seal_keygen(struct seal_key *k, err_t *err);
/* The public key for a private one (fills pub, sets have_priv). */
int seal_from_private(struct seal_key *k, const uint8_t priv[SEAL_KEY_LEN], err_t *err);

/* Append the box of plain to out. */
int seal_box(const struct seal_key *k, const void *aad, size_t aad_len, const void *plain,
	     size_t n, struct buf *out, err_t *err);
/* Open box into out (appended). -EBADMSG when the box is malformed, was made
 * for another key or aad, or was tampered with; -ENOKEY without the private key. */
int seal_open(const struct seal_key *k, const void *aad, size_t aad_len, const void *box,
	      size_t n, struct buf *out, err_t *err);

/* Key files: 32 raw bytes. The private file is created 0600, the public one 0644. */
int seal_key_load_public(struct seal_key *k, const char *path, err_t *err);
int seal_key_load_private(struct seal_key *k, const char *path, err_t *err);
/* Load the private key file, or create it (0600, its directory 0700) on first
 * use; then (re)write the public key file from it. */
int seal_key_ensure(struct seal_key *k, const char *priv_path, const char *pub_path, err_t *err);

#endif
