/* ratelimit.c - token buckets: one per API key, and one per client address
 * for the checks that run before any credential is known.
 *
 * Per key (ratelimit_new): buckets are created on first use by an
 * authenticated key, so their number is bounded by the number of keys in
 * the DB, not by what clients send.
 *
 * Per client (ratelimit_new_capped, ratelimit_client_key): the buckets are
 * made for whatever address connects, so their number is capped. When the
 * table is full, buckets that have refilled to their burst are dropped (a
 * fresh one is the same thing); if none has, every further newcomer shares
 * one overflow bucket until some do, so a client with very many addresses
 * slows newcomers down but cannot grow memory or get unlimited checks. A
 * client is its IPv4 address, or its IPv6 /64 (one host's usual share: a
 * client that owns a /64 would otherwise have 2^64 buckets).
 *
 * Each bucket refills continuously at rate tokens/s up to burst; a request
 * takes one token. Chains are chosen by a hash seeded at random, so nobody
 * can pick keys that all land in one chain. State is per api process: with
 * N api instances behind a load balancer a key gets up to N times the rate.
 */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "../lib/util.h"
#include "api-internal.h"

#define RL_BUCKETS 1024   /* hash chains; power of two */
#define RL_OVERFLOW "(overflow)"
#define SWEEP_US 100000   /* a full table is swept at most this often */

struct bucket {
	struct bucket *next;
	char key_id[64];
	double tokens;
	uint64_t last_us;
};

struct ratelimit {
	pthread_mutex_t mu;
	double rate, burst;
	unsigned seed;
	size_t max, n;            /* max 0: uncapped */
	uint64_t swept_us;        /* the last sweep: at most one per SWEEP_US */
	struct bucket *chains[RL_BUCKETS];
};

struct ratelimit *ratelimit_new_capped(double rate_per_s, double burst, size_t max_buckets)
{
	struct ratelimit *rl;

	if (!(rate_per_s > 0))
		return NULL;
	rl = xcalloc(1, sizeof(*rl));
	pthread_mutex_init(&rl->mu, NULL);
	rl->rate = rate_per_s;
	rl->burst = burst > 0 ? burst : (rate_per_s > 1 ? rate_per_s : 1);
	rl->max = max_buckets;
	random_bytes(&rl->seed, sizeof(rl->seed));
	return rl;
}

struct ratelimit *ratelimit_new(double rate_per_s, double burst)
{
	return ratelimit_new_capped(rate_per_s, burst, 0);
}

void ratelimit_free(struct ratelimit *rl)
{
	if (!rl)
		return;
	for (size_t i = 0; i < RL_BUCKETS; i++) {
		struct bucket *b = rl->chains[i];
		while (b) {
			struct bucket *n = b->next;
			free(b);
			b = n;
		}
	}
	pthread_mutex_destroy(&rl->mu);
	free(rl);
}

static unsigned hash_str(unsigned seed, const char *s)
{
	unsigned h = 2166136261u ^ seed;   /* FNV-1a, seeded */

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	h ^= h >> 15;
	return h & (RL_BUCKETS - 1);
}

static void refill(const struct ratelimit *rl, struct bucket *b, uint64_t now)
{
	b->tokens += (double)(now - b->last_us) / 1e6 * rl->rate;
	if (b->tokens > rl->burst)
		b->tokens = rl->burst;
	b->last_us = now;
}

/* Under rl->mu, a capped table at its cap: drop the buckets that have
 * refilled to their burst. */
static void sweep(struct ratelimit *rl, uint64_t now)
{
	/* Each sweep reads every bucket: while a client with many addresses
	 * keeps the table full, newcomers go to the overflow bucket between
	 * sweeps instead of each paying for one. */
	if (rl->swept_us && now - rl->swept_us < SWEEP_US)
		return;
	rl->swept_us = now;
	for (size_t i = 0; i < RL_BUCKETS; i++) {
		for (struct bucket **pp = &rl->chains[i]; *pp;) {
			struct bucket *b = *pp;
			refill(rl, b, now);
			if (b->tokens >= rl->burst && strcmp(b->key_id, RL_OVERFLOW) != 0) {
				*pp = b->next;
				free(b);
				rl->n--;
			} else {
				pp = &b->next;
			}
		}
	}
}

/* Under rl->mu: key_id's bucket, made when missing; past the cap, the
 * overflow one (itself beyond the cap: there is only one). */
static struct bucket *bucket_of(struct ratelimit *rl, const char *key_id, uint64_t now)
{
	unsigned h = hash_str(rl->seed, key_id);
	bool overflow = strcmp(key_id, RL_OVERFLOW) == 0;
	struct bucket *b;

	for (b = rl->chains[h]; b; b = b->next)
		if (strcmp(b->key_id, key_id) == 0)
			return b;
	if (rl->max && !overflow && rl->n >= rl->max) {
		sweep(rl, now);
		if (rl->n >= rl->max)
			return bucket_of(rl, RL_OVERFLOW, now);
	}
	b = xcalloc(1, sizeof(*b));
	snprintf(b->key_id, sizeof(b->key_id), "%s", key_id);
	b->tokens = rl->burst;
	b->last_us = now;
	b->next = rl->chains[h];
	rl->chains[h] = b;
	rl->n += !overflow;
	return b;
}

bool ratelimit_take(struct ratelimit *rl, const char *key_id, unsigned *retry_after_s)
{
	uint64_t now = now_us();
	struct bucket *b;
	bool ok;

	if (!rl)
		return true;
	pthread_mutex_lock(&rl->mu);
	b = bucket_of(rl, key_id, now);
	refill(rl, b, now);
	ok = b->tokens >= 1.0;
	if (ok) {
		b->tokens -= 1.0;
	} else if (retry_after_s) {
		/* Round up by hand: libm is not linked. */
		double wait = (1.0 - b->tokens) / rl->rate;
		unsigned s = wait > 86400 ? 86400 : (unsigned)wait;
		if ((double)s < wait)
			s++;
		*retry_after_s = s < 1 ? 1 : s;
	}
	pthread_mutex_unlock(&rl->mu);
	return ok;
}

void ratelimit_give(struct ratelimit *rl, const char *key_id)
{
	unsigned h;

	if (!rl)
		return;
	h = hash_str(rl->seed, key_id);
	pthread_mutex_lock(&rl->mu);
	for (struct bucket *b = rl->chains[h]; b; b = b->next)
		if (strcmp(b->key_id, key_id) == 0) {
			b->tokens = b->tokens + 1.0 > rl->burst ? rl->burst : b->tokens + 1.0;
			break;
		}
	pthread_mutex_unlock(&rl->mu);
}

void ratelimit_client_key(const char *peer, char *out, size_t n)
{
	unsigned char a6[16];
	char ip[INET6_ADDRSTRLEN + 4];
	size_t len;

	/* "1.2.3.4:5", "[2001:db8::1]:5" (http_format_peer), "unix" */
	if (peer[0] == '[') {
		len = strcspn(peer + 1, "]");
		snprintf(ip, sizeof(ip), "%.*s", (int)(len < sizeof(ip) ? len : 0), peer + 1);
		if (inet_pton(AF_INET6, ip, a6) == 1) {
			if (IN6_IS_ADDR_V4MAPPED((struct in6_addr *)a6)) {
				inet_ntop(AF_INET, a6 + 12, out, (socklen_t)n);
				return;
			}
			memset(a6 + 8, 0, 8);
			inet_ntop(AF_INET6, a6, ip, sizeof(ip));
			snprintf(out, n, "%s/64", ip);
			return;
		}
	}
	len = strcspn(peer, ":");
	snprintf(out, n, "%.*s", (int)len, peer);
}
