/* auth.c - API keys: generation, hashing, lookup with a short-lived cache.
 *
 * A key is "al_" + 32 lowercase hex (128 random bits). Only its SHA-256 is
 * stored, so a DB dump reveals no usable key; since the key has full entropy,
 * a plain (unsalted) hash is enough and makes lookup a single indexed query.
 *
 * The cache is direct-mapped (a fixed number of slots indexed by the hash),
 * so its memory is bounded no matter how many garbage keys a client tries,
 * and a lookup is one SHA-256 plus one mutex. Negative answers are cached too,
 * so a flood of unknown keys does not become a flood of DB queries. A key
 * revoked (or a tenant deleted) through this api empties the cache
 * (auth_cache_clear), so it is refused at once here; another api on the
 * same database (a cluster) learns it when its entry expires, within
 * AUTH_CACHE_TTL_MS.
 */
#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "../lib/log.h"
#include "../lib/util.h"
#include "api-internal.h"

#define CACHE_SLOTS 4096  /* power of two */

struct cache_slot {
	char hash[65];          /* "" when empty */
	bool found;
	struct api_principal who;
	uint64_t expires_ms;
};

struct auth_cache {
	pthread_mutex_t mu;
	/* Bumped by auth_cache_clear: a lookup whose query began before a
	 * clear does not store its (maybe stale) answer after it. */
	uint64_t gen;
	struct cache_slot slots[CACHE_SLOTS];
};

void api_key_hash(const char *key, char out[65])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;

	if (!EVP_Digest(key, strlen(key), md, &n, EVP_sha256(), NULL) || n != 32)
		abort(); /* only fails on OOM or a broken libcrypto */
	for (unsigned i = 0; i < 32; i++) {
		out[2 * i] = hex[md[i] >> 4];
		out[2 * i + 1] = hex[md[i] & 15];
	}
	out[64] = '\0';
}

bool api_key_well_formed(const char *s)
{
	size_t pl = strlen(API_KEY_PREFIX);

	if (!s || strncmp(s, API_KEY_PREFIX, pl) != 0 || strlen(s) != pl + API_KEY_HEX)
		return false;
	for (s += pl; *s; s++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
			return false;
	return true;
}

struct auth_cache *auth_cache_new(void)
{
	struct auth_cache *c = xcalloc(1, sizeof(*c));

	pthread_mutex_init(&c->mu, NULL);
	return c;
}

void auth_cache_free(struct auth_cache *c)
{
	if (!c)
		return;
	pthread_mutex_destroy(&c->mu);
	free(c);
}

void auth_cache_clear(struct auth_cache *c)
{
	pthread_mutex_lock(&c->mu);
	c->gen++;
	for (size_t i = 0; i < CACHE_SLOTS; i++)
		c->slots[i].expires_ms = 0;
	pthread_mutex_unlock(&c->mu);
}

static unsigned slot_of(const char *hash)
{
	unsigned v = 0;

	/* The hash is uniform: its first 16 bits are as good as any. */
	sscanf(hash, "%4x", &v);
	return v & (CACHE_SLOTS - 1);
}

int auth_lookup(struct api *a, const char *key, struct api_principal *who, err_t *err)
{
	struct cache_slot *s;
	struct db_rows rows;
	char hash[65];
	uint64_t gen;
	bool found;
	int r;

	/* Anything that is not shaped like our keys cannot match: answer
	 * without hashing, caching or touching the DB. */
	if (!api_key_well_formed(key))
		return 0;
	api_key_hash(key, hash);
	s = &a->cache->slots[slot_of(hash)];

	pthread_mutex_lock(&a->cache->mu);
	if (strcmp(s->hash, hash) == 0 && s->expires_ms > now_ms()) {
		found = s->found;
		if (found)
			*who = s->who;
		pthread_mutex_unlock(&a->cache->mu);
		return found ? 1 : 0;
	}
	gen = a->cache->gen;
	pthread_mutex_unlock(&a->cache->mu);

	r = db_query(a->db, &rows, err,
		     "SELECT id, tenant_id, admin FROM api_keys WHERE hash = ? AND revoked = 0",
		     "s", hash);
	if (r < 0)
		return r;
	found = rows.n_rows > 0;
	memset(who, 0, sizeof(*who));
	if (found) {
		snprintf(who->key_id, sizeof(who->key_id), "%s", db_cell(&rows, 0, 0));
		snprintf(who->tenant, sizeof(who->tenant), "%s", db_cell(&rows, 0, 1));
		who->admin = db_cell_int(&rows, 0, 2) != 0;
	}
	db_rows_free(&rows);

	pthread_mutex_lock(&a->cache->mu);
	if (a->cache->gen == gen) {
		memcpy(s->hash, hash, sizeof(hash));
		s->found = found;
		s->who = *who;
		s->expires_ms = now_ms() + AUTH_CACHE_TTL_MS;
	}
	pthread_mutex_unlock(&a->cache->mu);
	return found ? 1 : 0;
}

int api_key_create(struct db *db, const char *tenant_id, const char *name, bool admin,
		   char **key_out, char **id_out, err_t *err)
{
	_cleanup_free_ char *key = random_id(API_KEY_PREFIX, API_KEY_HEX / 2);
	_cleanup_free_ char *id = random_id("key_", 8);
	char hash[65];
	int r;

	api_key_hash(key, hash);
	r = db_exec(db, err,
		    "INSERT INTO api_keys(id, tenant_id, hash, name, admin, created_at)"
		    " VALUES(?, ?, ?, ?, ?, ?)",
		    "ssssii", id, tenant_id, hash, name, (int64_t)(admin ? 1 : 0), wall_ms());
	if (r < 0)
		return err_wrap(err, "create key for tenant %s", tenant_id);
	*key_out = TAKE_PTR(key);
	*id_out = TAKE_PTR(id);
	return 0;
}
