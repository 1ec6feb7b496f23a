/* ratelimit.c - one token bucket per API key.
 *
 * Buckets are created on first use by an authenticated key, so their number
 * is bounded by the number of keys in the DB, not by what clients send.
 * Each bucket refills continuously at rate tokens/s up to burst; a request
 * takes one token. State is per api process: with N api instances behind a
 * load balancer a key gets up to N times the rate.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "../lib/util.h"
#include "api-internal.h"

#define RL_BUCKETS 1024   /* hash chains; power of two */

struct bucket {
	struct bucket *next;
	char key_id[64];
	double tokens;
	uint64_t last_us;
};

struct ratelimit {
	pthread_mutex_t mu;
	double rate, burst;
	struct bucket *chains[RL_BUCKETS];
};

struct ratelimit *ratelimit_new(double rate_per_s, double burst)
{
	struct ratelimit *rl;

	if (!(rate_per_s > 0))
		return NULL;
	rl = xcalloc(1, sizeof(*rl));
	pthread_mutex_init(&rl->mu, NULL);
	rl->rate = rate_per_s;
	rl->burst = burst > 0 ? burst : (rate_per_s > 1 ? rate_per_s : 1);
	return rl;
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

static unsigned hash_str(const char *s)
{
	unsigned h = 2166136261u;   /* FNV-1a */

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h & (RL_BUCKETS - 1);
}

bool ratelimit_take(struct ratelimit *rl, const char *key_id, unsigned *retry_after_s)
{
	unsigned h = hash_str(key_id);
	uint64_t now = now_us();
	struct bucket *b;
	bool ok;

	if (!rl)
		return true;
	pthread_mutex_lock(&rl->mu);
	for (b = rl->chains[h]; b; b = b->next)
		if (strcmp(b->key_id, key_id) == 0)
			break;
	if (!b) {
		b = xcalloc(1, sizeof(*b));
		snprintf(b->key_id, sizeof(b->key_id), "%s", key_id);
		b->tokens = rl->burst;
		b->last_us = now;
		b->next = rl->chains[h];
		rl->chains[h] = b;
	}
	b->tokens += (double)(now - b->last_us) / 1e6 * rl->rate;
	if (b->tokens > rl->burst)
		b->tokens = rl->burst;
	b->last_us = now;
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
