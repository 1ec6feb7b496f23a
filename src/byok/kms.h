/* kms.h - a tenant's key, its providers, and the data keys wrapped by it
 * (BYOK, docs/DESIGN.md "Bring your own key").
 *
 * Every artifact set a node seals (envelope.h) has a fresh random data key.
 * It is stored only wrapped by the tenant's key, in data_keys (db migration
 * 7), under a random reference that the sealed objects' headers carry. The
 * tenant's key lives with a provider:
 *   local    key files under the node's data dir (DATA/keys/<tenant>/<key>.vN,
 *            32 random bytes, 0600 in a 0700 directory, made on first use by
 *            the daemon that uses them); versioned: rotate adds vN+1 and
 *            retires the older ones (their files deleted once unused).
 *   transit  a key service in the shape of HashiCorp Vault's Transit API
 *            (POST {url}/v1/transit/{encrypt,decrypt,rewrap}/{name}), token
 *            read from token_file at each call; over verified https, unix:,
 *            or plain http to loopback only unless insecure_http
 *            (kms-transit.c, its settings checked in kms-conf.c).
 * A tenant with no row in tenant_encryption gets local with key "default".
 *
 * Unwrapped data keys live only in this process, each in its own page that
 * is MADV_DONTDUMP and mlocked (when the limit allows), wiped with
 * OPENSSL_cleanse when freed, and cached for at most cache_ttl_s seconds:
 * after a revocation, the key service's refusal is seen within that time.
 * A refusal (key disabled or deleted) is -EKEYREVOKED, and only an answer
 * that came over an authenticated channel (kms_conf_check) and says so in
 * the service's own shape is one; anything else is -ENOKEY (unavailable:
 * asked again, cached keys kept).
 */
#ifndef AIRLOCK_CRYPT_KMS_H
#define AIRLOCK_CRYPT_KMS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "../db/db.h"
#include "../lib/err.h"
#include "envelope.h"

/* A data key in its own non-dumpable page. */
struct dkey {
	uint8_t k[CRYPT_KEY_LEN];
};
struct dkey *dkey_new(void);
void dkey_free(struct dkey *k);      /* wipes; accepts NULL */

/* A tenant's encryption settings (tenant_encryption's row). */
struct kms_conf {
	char provider[16];                  /* "local" | "transit" */
	char key_id[128];                   /* local */
	char url[256], key_name[128], token_file[512];   /* transit */
	/* transit over https: the CAs to trust (PEM; "": the system's), the
	 * server certificate's SHA-256 (64 hex; "": no pin), a client
	 * certificate and its key (PEM files; both or neither) */
	char ca_file[512], pin_sha256[65], client_cert[512], client_key[512];
	/* transit over plain http to a host that is not loopback: the
	 * operator's explicit choice, shown by the API (and the doctor) */
	bool insecure_http;
	bool configured;                    /* false: the local default */
};

struct kms;
struct kms_provider {
	const char *name;
	/* *wrapped: text the provider can unwrap later (caller frees). */
	int (*wrap)(struct kms *k, const char *tenant, const struct kms_conf *c,
		    const uint8_t dk[CRYPT_KEY_LEN], char **wrapped, err_t *err);
	int (*unwrap)(struct kms *k, const char *tenant, const struct kms_conf *c,
		      const char *wrapped, uint8_t dk[CRYPT_KEY_LEN], err_t *err);
	/* The same data key under the key's newest version. */
	int (*rewrap)(struct kms *k, const char *tenant, const struct kms_conf *c,
		      const char *wrapped, char **out, err_t *err);
};

struct kms_cache_ent;
struct kms_reserve;
struct kms {
	struct db *db;
	char *key_dir;                      /* DATA/keys: the local provider's */
	unsigned cache_ttl_s;
	int transit_timeout_ms;             /* each wait for the key service (5000) */
	pthread_mutex_t mu;
	struct kms_cache_ent *cache;        /* data keys and tenant checks */
	struct kms_reserve *reserves;       /* under mu: kms_revoked_begin */
};

int kms_init(struct kms *k, struct db *db, const char *key_dir, unsigned cache_ttl_s,
	     err_t *err);
void kms_fini(struct kms *k);
const struct kms_provider *kms_provider_find(const char *name);
extern const struct kms_provider kms_local, kms_transit;

int kms_conf_get(struct kms *k, const char *tenant, struct kms_conf *c, err_t *err);
/* Validate a conf a client sent (names, URL shape, transport): transit
 * speaks https (verified), unix:, or plain http only to loopback
 * (127.0.0.0/8, [::1], localhost) unless insecure_http is set. Every call
 * to the key service checks the conf again, so a row written before these
 * rules is never used over plain http to another host. */
int kms_conf_check(const struct kms_conf *c, err_t *err);
/* How a transit conf reaches its service, for the API and the doctor:
 * "https", "unix", "http-loopback", "http-insecure" ("" for local). */
const char *kms_transport(const struct kms_conf *c);
/* Names (key ids, key names, tenants) are checked with lib/ident.h's
 * ident_key_ok. */

/* Switch the tenant to key nc: every data key of the tenant is unwrapped
 * by the old key and wrapped by the new one (in memory first: a failure
 * changes nothing), then the row is written. *n: data keys moved. */
int kms_conf_set(struct kms *k, const char *tenant, const struct kms_conf *nc, unsigned *n,
		 err_t *err);

/* A fresh data key for (tenant, sandbox, snapshot): wrapped by the tenant's
 * key and recorded in data_keys under *ref. *dk: caller frees (dkey_free). */
int kms_data_key_new(struct kms *k, const char *tenant, const char *sandbox,
		     const char *snapshot, uint8_t ref[CRYPT_REF_LEN], struct dkey **dk,
		     err_t *err);
/* The data key of ref, which must be the tenant's: from the cache (at most
 * cache_ttl_s old) or unwrapped by the tenant's provider. */
int kms_data_key_get(struct kms *k, const char *tenant, const uint8_t ref[CRYPT_REF_LEN],
		     struct dkey **dk, err_t *err);
/* Drop the data keys of a snapshot (its artifacts are gone). */
void kms_data_key_forget(struct kms *k, const uint8_t ref[CRYPT_REF_LEN]);
/* Is the tenant's key usable now? Asks the provider at most once per
 * cache_ttl_s (a wrap of a random probe); -EKEYREVOKED when refused. */
int kms_tenant_check(struct kms *k, const char *tenant, err_t *err);
/* A revocation seals, it does not destroy (docs/DESIGN.md "Bring your
 * own key": the window). Each check of a tenant's key that succeeds keeps
 * its probe as the tenant's reserve: a data key wrapped while the key was
 * good, in its own page, for at most 4 * cache_ttl_s + 60 s. When a check
 * is refused, the node suspends the tenant's running sandboxes under it:
 * between kms_revoked_begin (true when there is a reserve) and
 * kms_revoked_end, kms_data_key_new hands the tenant the reserve (a new
 * reference, the same wrapping) instead of asking the provider, which
 * would refuse. kms_revoked_end drops the reserve and every cached data
 * key of the tenant. */
bool kms_revoked_begin(struct kms *k, const char *tenant);
void kms_revoked_end(struct kms *k, const char *tenant);
/* Rewrap every data key of the tenant under its key's newest version;
 * *n gets how many. The data is not touched. local: a new version first,
 * and the older versions are retired after (kms_local_retire: their key
 * files deleted), so a rotation takes the old key out of use for good. */
int kms_rotate(struct kms *k, const char *tenant, unsigned *n, err_t *err);
/* The state of the tenant's key for GET .../encryption ("enabled",
 * "revoked", "unreachable") and, for local, its newest version. */
const char *kms_state(struct kms *k, const char *tenant, unsigned *version);
/* The doctor's checks of the tenants' key services (GET /v1/node/doctor):
 * into w, an open JSON array, one object {"name":"kms","status","detail",
 * "fix"?} per tenant whose service is reached over plain http to another
 * host (insecure_http: warn) or whose settings are no longer used (a row
 * older than kms_conf_check's rules: warn), else one "ok" summary. Reads
 * the settings only: no key service is asked. */
struct jw;
void kms_doctor_checks(struct kms *k, struct jw *w);
/* Forget every cached key and check (tests; a provider change). */
void kms_cache_flush(struct kms *k, const char *tenant);

/* local provider's files (kms-local.c) */
int kms_local_rotate(struct kms *k, const char *tenant, const char *key_id, unsigned *version,
		     err_t *err);
unsigned kms_local_version(struct kms *k, const char *tenant, const char *key_id);
/* The version a local wrapping names ("local:vN:…"), 0 when it is none. */
unsigned kms_local_wrapped_version(const char *wrapped);
/* Is the version wrapped names still live (not retired nor retiring)? */
bool kms_local_live(struct kms *k, const char *tenant, const char *key_id, const char *wrapped);
/* Retire every version older than the newest: each is renamed out of use,
 * every data key of the tenant still wrapped under one is rewrapped under
 * the newest, then their files are deleted (*retired: how many). A failed
 * rewrap puts them back and fails. A data key made meanwhile is safe
 * either way: kms_data_key_new rewraps its own when its version is no
 * longer live after its row is in. */
int kms_local_retire(struct kms *k, const char *tenant, const struct kms_conf *c,
		     unsigned *retired, err_t *err);

#endif
