/* kms.c - tenant keys, data keys and their cache (kms.h). */
#include "kms.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../lib/ident.h"
#include "../lib/log.h"
#include "../lib/util.h"

/* ---- key memory --------------------------------------------------------- */

struct dkey *dkey_new(void)
{
	long pg = sysconf(_SC_PAGESIZE);
	void *p = mmap(NULL, (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		abort();
	/* never in a core dump; never swapped when the memlock limit allows */
	(void)madvise(p, (size_t)pg, MADV_DONTDUMP);
	(void)mlock(p, (size_t)pg);
	return p;
}

void dkey_free(struct dkey *k)
{
	long pg = sysconf(_SC_PAGESIZE);

	if (!k)
		return;
	OPENSSL_cleanse(k, sizeof(*k));
	(void)munlock(k, (size_t)pg);
	munmap(k, (size_t)pg);
}

/* ---- cache: data keys by ref, and tenant checks ------------------------- */

struct kms_cache_ent {
	struct kms_cache_ent *next;
	char tenant[CRYPT_NAME_MAX + 1];
	char ref[2 * CRYPT_REF_LEN + 1];     /* "" for a tenant check */
	struct dkey *key;                    /* NULL for a tenant check */
	int check;                           /* a tenant check's result (0 or -errno) */
	int64_t expires;                     /* wall ms */
};

static void ent_free(struct kms_cache_ent *e)
{
	dkey_free(e->key);
	free(e);
}

/* Drop what expired (and, when tenant, all of that tenant's). k->mu held. */
static void cache_prune_locked(struct kms *k, const char *tenant)
{
	struct kms_cache_ent **pp = &k->cache;
	int64_t now = wall_ms();

	while (*pp) {
		struct kms_cache_ent *e = *pp;
		if (e->expires <= now || (tenant && strcmp(e->tenant, tenant) == 0)) {
			*pp = e->next;
			ent_free(e);
		} else {
			pp = &e->next;
		}
	}
}

static struct kms_cache_ent *cache_find_locked(struct kms *k, const char *tenant, const char *ref)
{
	cache_prune_locked(k, NULL);
	for (struct kms_cache_ent *e = k->cache; e; e = e->next)
		if (strcmp(e->tenant, tenant) == 0 && strcmp(e->ref, ref) == 0)
			return e;
	return NULL;
}

static void cache_put(struct kms *k, const char *tenant, const char *ref, const struct dkey *dk,
		      int check)
{
	struct kms_cache_ent *e;

	if (!k->cache_ttl_s)
		return;
	e = xcalloc(1, sizeof(*e));
	snprintf(e->tenant, sizeof(e->tenant), "%s", tenant);
	snprintf(e->ref, sizeof(e->ref), "%s", ref);
	if (dk) {
		e->key = dkey_new();
		memcpy(e->key->k, dk->k, CRYPT_KEY_LEN);
	}
	e->check = check;
	e->expires = wall_ms() + (int64_t)k->cache_ttl_s * 1000;
	pthread_mutex_lock(&k->mu);
	e->next = k->cache;
	k->cache = e;
	pthread_mutex_unlock(&k->mu);
}

void kms_cache_flush(struct kms *k, const char *tenant)
{
	pthread_mutex_lock(&k->mu);
	if (tenant) {
		cache_prune_locked(k, tenant);
	} else {
		while (k->cache) {
			struct kms_cache_ent *e = k->cache;
			k->cache = e->next;
			ent_free(e);
		}
	}
	pthread_mutex_unlock(&k->mu);
}

/* ---- the reserve: sealing after a revocation (kms.h) -------------------- */

struct kms_reserve {
	struct kms_reserve *next;
	char tenant[CRYPT_NAME_MAX + 1];
	char provider[16];
	struct dkey *key;
	char *wrapped;                       /* the provider's text, as a data key's */
	int64_t made;                        /* wall ms */
	bool sealing;                        /* between kms_revoked_begin and _end */
};

/* Long enough to outlive the check that sees the revocation (the last good
 * one is at most a TTL old, and that one is cached a TTL more), bounded so
 * a tenant whose sandboxes are gone does not leave a key here for ever. */
static int64_t reserve_life_ms(const struct kms *k)
{
	return ((int64_t)4 * k->cache_ttl_s + 60) * 1000;
}

static void reserve_free(struct kms_reserve *r)
{
	dkey_free(r->key);
	free(r->wrapped);
	free(r);
}

/* The tenant's reserve's link, or NULL; drops the expired ones on the way
 * (never one in use). k->mu held. */
static struct kms_reserve **reserve_find_locked(struct kms *k, const char *tenant)
{
	int64_t now = wall_ms();

	for (struct kms_reserve **pp = &k->reserves; *pp;) {
		struct kms_reserve *r = *pp;
		if (!r->sealing && now - r->made > reserve_life_ms(k)) {
			*pp = r->next;
			reserve_free(r);
			continue;
		}
		if (strcmp(r->tenant, tenant) == 0)
			return pp;
		pp = &r->next;
	}
	return NULL;
}

/* A probe the provider wrapped becomes the tenant's reserve (consumes dk
 * and wrapped), unless its reserve is in use. */
static void reserve_put(struct kms *k, const char *tenant, const char *provider,
			struct dkey *dk, char *wrapped)
{
	struct kms_reserve **pp, *r = NULL;

	pthread_mutex_lock(&k->mu);
	pp = reserve_find_locked(k, tenant);
	if (!pp || !(*pp)->sealing) {
		if (pp) {
			struct kms_reserve *old = *pp;
			*pp = old->next;
			reserve_free(old);
		}
		r = xcalloc(1, sizeof(*r));
		snprintf(r->tenant, sizeof(r->tenant), "%s", tenant);
		snprintf(r->provider, sizeof(r->provider), "%s", provider);
		r->key = dk;
		r->wrapped = wrapped;
		r->made = wall_ms();
		r->next = k->reserves;
		k->reserves = r;
	}
	pthread_mutex_unlock(&k->mu);
	if (!r) {
		dkey_free(dk);
		free(wrapped);
	}
}

/* While the tenant is sealing: a copy of its reserve (caller frees both). */
static bool reserve_use(struct kms *k, const char *tenant, struct dkey **dk, char **wrapped,
			char provider[16])
{
	struct kms_reserve **pp;
	bool ok = false;

	pthread_mutex_lock(&k->mu);
	pp = reserve_find_locked(k, tenant);
	if (pp && (*pp)->sealing) {
		*dk = dkey_new();
		memcpy((*dk)->k, (*pp)->key->k, CRYPT_KEY_LEN);
		*wrapped = xstrdup((*pp)->wrapped);
		snprintf(provider, 16, "%s", (*pp)->provider);
		ok = true;
	}
	pthread_mutex_unlock(&k->mu);
	return ok;
}

static void kms_reserve_drop(struct kms *k, const char *tenant)
{
	struct kms_reserve **pp, *r = NULL;

	pthread_mutex_lock(&k->mu);
	if ((pp = reserve_find_locked(k, tenant))) {
		r = *pp;
		*pp = r->next;
	}
	pthread_mutex_unlock(&k->mu);
	if (r)
		reserve_free(r);
}

bool kms_revoked_begin(struct kms *k, const char *tenant)
{
	struct kms_reserve **pp;

	pthread_mutex_lock(&k->mu);
	if ((pp = reserve_find_locked(k, tenant)))
		(*pp)->sealing = true;
	pthread_mutex_unlock(&k->mu);
	return pp != NULL;
}

void kms_revoked_end(struct kms *k, const char *tenant)
{
	kms_reserve_drop(k, tenant);
	kms_cache_flush(k, tenant);
}

int kms_init(struct kms *k, struct db *db, const char *key_dir, unsigned cache_ttl_s,
	     err_t *err)
{
	memset(k, 0, sizeof(*k));
	k->db = db;
	k->key_dir = xstrdup(key_dir);
	k->cache_ttl_s = cache_ttl_s;
	k->transit_timeout_ms = 5000;
	pthread_mutex_init(&k->mu, NULL);
	return 0;
}

void kms_fini(struct kms *k)
{
	if (!k->key_dir)
		return;
	kms_cache_flush(k, NULL);
	while (k->reserves) {
		struct kms_reserve *r = k->reserves;
		k->reserves = r->next;
		reserve_free(r);
	}
	free(k->key_dir);
	k->key_dir = NULL;
	pthread_mutex_destroy(&k->mu);
}

/* ---- configuration ------------------------------------------------------ */

/* An optional text column: NULL when empty. */
static const char *opt(const char *v)
{
	return v[0] ? v : NULL;
}

const struct kms_provider *kms_provider_find(const char *name)
{
	if (name && strcmp(name, "local") == 0)
		return &kms_local;
	if (name && strcmp(name, "transit") == 0)
		return &kms_transit;
	return NULL;
}

int kms_conf_get(struct kms *k, const char *tenant, struct kms_conf *c, err_t *err)
{
	struct db_rows rows;
	int r;

	memset(c, 0, sizeof(*c));
	snprintf(c->provider, sizeof(c->provider), "local");
	snprintf(c->key_id, sizeof(c->key_id), "default");
	r = db_query(k->db, &rows, err,
		     "SELECT provider, key_id, url, key_name, token_file, ca_file, pin_sha256,"
		     " client_cert, client_key, insecure_http FROM tenant_encryption"
		     " WHERE tenant_id=?", "s", tenant);
	if (r < 0)
		return err_wrap(err, "tenant %s: encryption settings", tenant);
	if (rows.n_rows == 1) {
		const char *v;
		c->configured = true;
		snprintf(c->provider, sizeof(c->provider), "%s", db_cell(&rows, 0, 0));
		c->key_id[0] = '\0';
		if ((v = db_cell(&rows, 0, 1)))
			snprintf(c->key_id, sizeof(c->key_id), "%s", v);
		if ((v = db_cell(&rows, 0, 2)))
			snprintf(c->url, sizeof(c->url), "%s", v);
		if ((v = db_cell(&rows, 0, 3)))
			snprintf(c->key_name, sizeof(c->key_name), "%s", v);
		if ((v = db_cell(&rows, 0, 4)))
			snprintf(c->token_file, sizeof(c->token_file), "%s", v);
		if ((v = db_cell(&rows, 0, 5)))
			snprintf(c->ca_file, sizeof(c->ca_file), "%s", v);
		if ((v = db_cell(&rows, 0, 6)))
			snprintf(c->pin_sha256, sizeof(c->pin_sha256), "%s", v);
		if ((v = db_cell(&rows, 0, 7)))
			snprintf(c->client_cert, sizeof(c->client_cert), "%s", v);
		if ((v = db_cell(&rows, 0, 8)))
			snprintf(c->client_key, sizeof(c->client_key), "%s", v);
		c->insecure_http = db_cell_int(&rows, 0, 9) != 0;
	}
	db_rows_free(&rows);
	if (!kms_provider_find(c->provider))
		return err_set(err, EINVAL, "tenant %s: unknown key provider `%s`", tenant,
			       c->provider);
	return 0;
}

/* ---- data keys ---------------------------------------------------------- */

int kms_data_key_new(struct kms *k, const char *tenant, const char *sandbox,
		     const char *snapshot, uint8_t ref[CRYPT_REF_LEN], struct dkey **dk,
		     err_t *err)
{
	struct kms_conf c;
	const struct kms_provider *p;
	_cleanup_free_ char *wrapped = NULL;
	char hex[2 * CRYPT_REF_LEN + 1];
	struct dkey *key;
	int r;

	if ((r = kms_conf_get(k, tenant, &c, err)) < 0)
		return r;
	p = kms_provider_find(c.provider);
	random_bytes(ref, CRYPT_REF_LEN);
	crypt_ref_hex(ref, hex);
	/* Sealing after a revocation: the key wrapped while the tenant's key
	 * was good (the provider would refuse now); a reference of its own. */
	if (!reserve_use(k, tenant, &key, &wrapped, c.provider)) {
		key = dkey_new();
		random_bytes(key->k, CRYPT_KEY_LEN);
		if ((r = p->wrap(k, tenant, &c, key->k, &wrapped, err)) < 0) {
			dkey_free(key);
			return err_wrap(err, "tenant %s: wrap a data key (%s)", tenant,
					c.provider);
		}
	}
	r = db_exec(k->db, err,
		    "INSERT INTO data_keys(id, tenant_id, sandbox_id, snapshot_id, provider,"
		    " wrapped, created_at) VALUES(?,?,?,?,?,?,?)",
		    "ssssssi", hex, tenant, sandbox, snapshot, c.provider, wrapped, wall_ms());
	if (r < 0) {
		dkey_free(key);
		return err_wrap(err, "record a data key");
	}
	/* local: a rotation may have retired the version it was wrapped under
	 * (or a reserve made before it) between the wrap and the row: then it
	 * is wrapped again here, from the key in hand, under the newest.
	 * Checked after the row is in, so a retirement either finds the row
	 * or has taken the version out of use before this looks. */
	if (strcmp(c.provider, "local") == 0 && !kms_local_live(k, tenant, c.key_id, wrapped)) {
		_cleanup_free_ char *again = NULL;
		r = p->wrap(k, tenant, &c, key->k, &again, err);
		if (r >= 0)
			r = db_exec(k->db, err, "UPDATE data_keys SET wrapped=? WHERE id=?", "ss",
				    again, hex);
		if (r < 0) {
			dkey_free(key);
			return err_wrap(err, "rewrap a data key after a rotation");
		}
	}
	cache_put(k, tenant, hex, key, 0);
	*dk = key;
	return 0;
}

int kms_data_key_get(struct kms *k, const char *tenant, const uint8_t ref[CRYPT_REF_LEN],
		     struct dkey **dk, err_t *err)
{
	char hex[2 * CRYPT_REF_LEN + 1];
	struct kms_cache_ent *e;
	struct kms_conf c;
	struct db_rows rows;
	struct dkey *key;
	int r;

	crypt_ref_hex(ref, hex);
	pthread_mutex_lock(&k->mu);
	if ((e = cache_find_locked(k, tenant, hex)) && e->key) {
		key = dkey_new();
		memcpy(key->k, e->key->k, CRYPT_KEY_LEN);
		pthread_mutex_unlock(&k->mu);
		*dk = key;
		return 0;
	}
	pthread_mutex_unlock(&k->mu);
	if ((r = kms_conf_get(k, tenant, &c, err)) < 0)
		return r;
	/* The row must be this tenant's: a header naming another tenant's
	 * key is refused here, before any provider is asked. */
	r = db_query(k->db, &rows, err,
		     "SELECT provider, wrapped FROM data_keys WHERE id=? AND tenant_id=?", "ss",
		     hex, tenant);
	if (r < 0)
		return err_wrap(err, "data key %s", hex);
	if (rows.n_rows != 1) {
		db_rows_free(&rows);
		return err_set(err, EBADMSG, "data key %.8s… is not one of tenant %s's", hex,
			       tenant);
	}
	if (strcmp(db_cell(&rows, 0, 0), c.provider) != 0) {
		r = err_set(err, ENOKEY, "data key %.8s… was wrapped by the %s provider; the "
			    "tenant now uses %s (rotate to rewrap)", hex, db_cell(&rows, 0, 0),
			    c.provider);
		db_rows_free(&rows);
		return r;
	}
	key = dkey_new();
	r = kms_provider_find(c.provider)->unwrap(k, tenant, &c, db_cell(&rows, 0, 1), key->k, err);
	db_rows_free(&rows);
	if (r < 0) {
		dkey_free(key);
		return err_wrap(err, "tenant %s: unwrap data key %.8s… (%s)", tenant, hex,
				c.provider);
	}
	cache_put(k, tenant, hex, key, 0);
	*dk = key;
	return 0;
}

void kms_data_key_forget(struct kms *k, const uint8_t ref[CRYPT_REF_LEN])
{
	char hex[2 * CRYPT_REF_LEN + 1];
	struct kms_cache_ent **pp;
	err_t err = { 0 };

	crypt_ref_hex(ref, hex);
	pthread_mutex_lock(&k->mu);
	for (pp = &k->cache; *pp;) {
		struct kms_cache_ent *e = *pp;
		if (strcmp(e->ref, hex) == 0) {
			*pp = e->next;
			ent_free(e);
		} else {
			pp = &e->next;
		}
	}
	pthread_mutex_unlock(&k->mu);
	if (db_exec(k->db, &err, "DELETE FROM data_keys WHERE id=?", "s", hex) < 0)
		log_warn("forget data key %.8s…: %s", hex, err.msg);
}

int kms_tenant_check(struct kms *k, const char *tenant, err_t *err)
{
	struct kms_cache_ent *e;
	struct kms_conf c;
	_cleanup_free_ char *wrapped = NULL;
	struct dkey *probe;
	int r;

	pthread_mutex_lock(&k->mu);
	if ((e = cache_find_locked(k, tenant, "")) && !e->key) {
		r = e->check;
		pthread_mutex_unlock(&k->mu);
		if (r < 0)
			return err_set(err, -r, "tenant %s: its key service refused the key "
				       "(checked within the last %u s)", tenant, k->cache_ttl_s);
		return 0;
	}
	pthread_mutex_unlock(&k->mu);
	if ((r = kms_conf_get(k, tenant, &c, err)) < 0)
		return r;
	/* A wrap of random bytes: the cheapest call every provider has; its
	 * result is the tenant's reserve (kms_revoked_begin) from now on. */
	probe = dkey_new();
	random_bytes(probe->k, CRYPT_KEY_LEN);
	r = kms_provider_find(c.provider)->wrap(k, tenant, &c, probe->k, &wrapped, err);
	if (r == 0)
		reserve_put(k, tenant, c.provider, probe, TAKE_PTR(wrapped));
	else
		dkey_free(probe);
	/* Only a definite answer is cached; an unreachable service is asked
	 * again next time. */
	if (r == 0 || r == -EKEYREVOKED)
		cache_put(k, tenant, "", NULL, r);
	return r < 0 ? err_wrap(err, "tenant %s: key check (%s)", tenant, c.provider) : 0;
}

const char *kms_state(struct kms *k, const char *tenant, unsigned *version)
{
	struct kms_conf c;
	err_t err = { 0 };
	int r;

	*version = 0;
	if (kms_conf_get(k, tenant, &c, &err) < 0)
		return "unknown";
	if (strcmp(c.provider, "local") == 0)
		*version = kms_local_version(k, tenant, c.key_id);
	kms_cache_flush(k, tenant);
	r = kms_tenant_check(k, tenant, &err);
	return r == 0 ? "enabled" : r == -EKEYREVOKED ? "revoked" : "unreachable";
}

int kms_rotate(struct kms *k, const char *tenant, unsigned *n, err_t *err)
{
	const struct kms_provider *p;
	struct kms_conf c;
	struct db_rows rows;
	unsigned v;
	int r;

	*n = 0;
	if ((r = kms_conf_get(k, tenant, &c, err)) < 0)
		return r;
	p = kms_provider_find(c.provider);
	/* local: rotate makes the next version; transit: the key service
	 * rotates its key, this rewraps under whatever version is newest. */
	if (strcmp(c.provider, "local") == 0 &&
	    (r = kms_local_rotate(k, tenant, c.key_id, &v, err)) < 0)
		return r;
	r = db_query(k->db, &rows, err,
		     "SELECT id, wrapped FROM data_keys WHERE tenant_id=? AND provider=?", "ss",
		     tenant, c.provider);
	if (r < 0)
		return r;
	for (int i = 0; i < rows.n_rows && r == 0; i++) {
		_cleanup_free_ char *out = NULL;
		r = p->rewrap(k, tenant, &c, db_cell(&rows, i, 1), &out, err);
		if (r < 0) {
			err_wrap(err, "rewrap data key %.8s…", db_cell(&rows, i, 0));
			break;
		}
		r = db_exec(k->db, err, "UPDATE data_keys SET wrapped=?, rotated_at=? WHERE id=?",
			    "sis", out, wall_ms(), db_cell(&rows, i, 0));
		if (r >= 0) {
			(*n)++;
			r = 0;
		}
	}
	db_rows_free(&rows);
	/* local: the old versions go once nothing is wrapped under them (a
	 * data key made while this ran included). */
	if (r == 0 && strcmp(c.provider, "local") == 0) {
		unsigned gone = 0;
		r = kms_local_retire(k, tenant, &c, &gone, err);
	}
	kms_cache_flush(k, tenant);
	kms_reserve_drop(k, tenant);
	return r < 0 ? err_wrap(err, "tenant %s: rotate", tenant) : 0;
}

/* ---- a new provider or key for a tenant --------------------------------- */

int kms_conf_set(struct kms *k, const char *tenant, const struct kms_conf *nc, unsigned *n,
		 err_t *err)
{
	const struct kms_provider *np = kms_provider_find(nc->provider);
	struct kms_conf old;
	struct db_rows rows;
	char **out = NULL;
	int r;

	*n = 0;
	if ((r = kms_conf_check(nc, err)) < 0)
		return r;
	if ((r = kms_conf_get(k, tenant, &old, err)) < 0)
		return r;
	/* The new key must answer before anything is moved to it. */
	{
		struct dkey *probe = dkey_new();
		_cleanup_free_ char *w = NULL;
		random_bytes(probe->k, CRYPT_KEY_LEN);
		r = np->wrap(k, tenant, nc, probe->k, &w, err);
		dkey_free(probe);
		if (r < 0)
			return err_wrap(err, "the new key (%s)", nc->provider);
	}
	/* Every data key, unwrapped by the old key and wrapped by the new one,
	 * all in memory first: a failure changes nothing. */
	r = db_query(k->db, &rows, err, "SELECT id, wrapped, provider FROM data_keys WHERE tenant_id=?",
		     "s", tenant);
	if (r < 0)
		return r;
	out = xcalloc((size_t)rows.n_rows + 1, sizeof(*out));
	for (int i = 0; i < rows.n_rows && r == 0; i++) {
		struct dkey *dk = dkey_new();
		const struct kms_provider *op = kms_provider_find(db_cell(&rows, i, 2));
		r = !op || strcmp(op->name, old.provider) != 0
			    ? err_set(err, ENOKEY, "data key %.8s… is not under the tenant's current key",
				      db_cell(&rows, i, 0))
			    : op->unwrap(k, tenant, &old, db_cell(&rows, i, 1), dk->k, err);
		if (r == 0)
			r = np->wrap(k, tenant, nc, dk->k, &out[i], err);
		dkey_free(dk);
	}
	for (int i = 0; i < rows.n_rows && r == 0; i++) {
		r = db_exec(k->db, err, "UPDATE data_keys SET wrapped=?, provider=?, rotated_at=?"
			    " WHERE id=?", "ssis", out[i], nc->provider, wall_ms(), db_cell(&rows, i, 0));
		r = r < 0 ? r : 0;
		if (r == 0)
			(*n)++;
	}
	for (int i = 0; i < rows.n_rows; i++)
		free(out[i]);
	free(out);
	db_rows_free(&rows);
	if (r == 0)
		r = db_exec(k->db, err,
			    "INSERT INTO tenant_encryption(tenant_id, provider, key_id, url, key_name,"
			    " token_file, ca_file, pin_sha256, client_cert, client_key, insecure_http,"
			    " updated_at) VALUES(?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(tenant_id) DO"
			    " UPDATE SET provider=excluded.provider, key_id=excluded.key_id,"
			    " url=excluded.url, key_name=excluded.key_name,"
			    " token_file=excluded.token_file, ca_file=excluded.ca_file,"
			    " pin_sha256=excluded.pin_sha256, client_cert=excluded.client_cert,"
			    " client_key=excluded.client_key, insecure_http=excluded.insecure_http,"
			    " updated_at=excluded.updated_at",
			    "ssssssssssii", tenant, nc->provider, opt(nc->key_id), opt(nc->url),
			    opt(nc->key_name), opt(nc->token_file), opt(nc->ca_file),
			    opt(nc->pin_sha256), opt(nc->client_cert), opt(nc->client_key),
			    (int64_t)(nc->insecure_http ? 1 : 0), wall_ms());
	kms_reserve_drop(k, tenant);
	kms_cache_flush(k, tenant);
	return r < 0 ? err_wrap(err, "tenant %s: set its key", tenant) : 0;
}
