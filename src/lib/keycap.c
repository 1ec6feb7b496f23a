/* keycap.c - see keycap.h. */
#include "keycap.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define QUOTA_CHAINS 256   /* power of two */

struct ent {
	struct ent *next;
	unsigned held;
	size_t n;
	unsigned char key[];
};

struct keycap {
	pthread_mutex_t mu;
	unsigned max;
	struct ent *chains[QUOTA_CHAINS];
};

struct keycap *keycap_new(unsigned max)
{
	struct keycap *q;

	if (max == 0)
		return NULL;
	q = xcalloc(1, sizeof(*q));
	pthread_mutex_init(&q->mu, NULL);
	q->max = max;
	return q;
}

void keycap_free(struct keycap *q)
{
	if (!q)
		return;
	for (size_t i = 0; i < QUOTA_CHAINS; i++)
		while (q->chains[i]) {
			struct ent *e = q->chains[i];
			q->chains[i] = e->next;
			free(e);
		}
	pthread_mutex_destroy(&q->mu);
	free(q);
}

/* The link that points at key's entry (or at NULL, where it would go);
 * under q->mu. */
static struct ent **find(struct keycap *q, const void *key, size_t n)
{
	const unsigned char *k = key;
	uint32_t h = 2166136261u;   /* FNV-1a */
	struct ent **pp;

	for (size_t i = 0; i < n; i++)
		h = (h ^ k[i]) * 16777619u;
	for (pp = &q->chains[h & (QUOTA_CHAINS - 1)]; *pp; pp = &(*pp)->next)
		if ((*pp)->n == n && memcmp((*pp)->key, key, n) == 0)
			break;
	return pp;
}

bool keycap_take(struct keycap *q, const void *key, size_t n)
{
	struct ent **pp, *e;
	bool ok = true;

	if (!q)
		return true;
	pthread_mutex_lock(&q->mu);
	pp = find(q, key, n);
	if (!(e = *pp)) {
		e = xcalloc(1, sizeof(*e) + n);
		e->n = n;
		memcpy(e->key, key, n);
		*pp = e;
	}
	if (e->held < q->max)
		e->held++;
	else
		ok = false;
	pthread_mutex_unlock(&q->mu);
	return ok;
}

void keycap_give(struct keycap *q, const void *key, size_t n)
{
	struct ent **pp, *e;

	if (!q)
		return;
	pthread_mutex_lock(&q->mu);
	pp = find(q, key, n);
	if ((e = *pp) && --e->held == 0) {
		*pp = e->next;
		free(e);
	}
	pthread_mutex_unlock(&q->mu);
}
