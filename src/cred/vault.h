/* vault.h - where credential values live: a small pluggable interface.
 *
 * A vault stores opaque secrets under a reference (e.g. "cred_ab12:3" for
 * version 3 of a credential) and hands them back only to a process that can
 * open them. The one backend today, "local", keeps sealed boxes (seal.h) in
 * the shared DB: the plaintext is never written anywhere, the api needs only
 * the public key to store, and only the holder of the private key (the
 * gateway) can read. Other backends (an external KMS-backed store, HashiCorp
 * Vault, a cloud secret manager) implement the same three calls.
 */
#ifndef AIRLOCK_VAULT_H
#define AIRLOCK_VAULT_H

#include <stddef.h>

#include "../db/db.h"
#include "../lib/err.h"
#include "../lib/util.h"
#include "seal.h"

struct vault;

struct vault_ops {
	const char *name;
	/* Store secret under ref (replacing nothing: refs are never reused). */
	int (*put)(struct vault *v, const char *ref, const void *secret, size_t n, err_t *err);
	/* Append the secret to out. -ENOENT when there is none, -ENOKEY when this
	 * process may only store. */
	int (*get)(struct vault *v, const char *ref, struct buf *out, err_t *err);
	/* Forget ref (absent is fine). */
	int (*del)(struct vault *v, const char *ref, err_t *err);
	void (*close)(struct vault *v);
};

struct vault {
	const struct vault_ops *ops;
	struct db *db;             /* local: borrowed */
	struct seal_key key;       /* local: public always, private only for readers */
};

/* The local backend on db with key (copied). */
struct vault *vault_local_open(struct db *db, const struct seal_key *key);

static inline int vault_put(struct vault *v, const char *ref, const void *s, size_t n, err_t *err)
{
	return v->ops->put(v, ref, s, n, err);
}
static inline int vault_get(struct vault *v, const char *ref, struct buf *out, err_t *err)
{
	return v->ops->get(v, ref, out, err);
}
static inline int vault_del(struct vault *v, const char *ref, err_t *err)
{
	return v->ops->del(v, ref, err);
}
void vault_close(struct vault *v);   /* accepts NULL */

#endif
