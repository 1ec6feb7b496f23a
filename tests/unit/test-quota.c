/* test-quota: a key holds at most max; keys are independent, by their
 * bytes (a string and a 4-byte address alike); a give makes room again; a
 * NULL quota (max 0) never refuses; threads taking and giving at once end
 * with nothing held. Exit 0 = pass. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../../src/lib/quota.h"
#include "check.h"

static struct quota *shared;

static void *churn(void *arg)
{
	const char *key = arg;

	for (int i = 0; i < 20000; i++)
		if (quota_take(shared, key, strlen(key)))
			quota_give(shared, key, strlen(key));
	return NULL;
}

int main(void)
{
	struct quota *q = quota_new(2);
	uint32_t addr = 0x0a000002, other = 0x0a000003;

	CHECK(quota_take(q, "ten_a", 5) && quota_take(q, "ten_a", 5));
	CHECK(!quota_take(q, "ten_a", 5));            /* at the cap */
	CHECK(quota_take(q, "ten_ab", 6));            /* another key, a prefix apart */
	CHECK(quota_take(q, &addr, sizeof(addr)) && quota_take(q, &addr, sizeof(addr)));
	CHECK(!quota_take(q, &addr, sizeof(addr)));
	CHECK(quota_take(q, &other, sizeof(other)));
	quota_give(q, "ten_a", 5);
	CHECK(quota_take(q, "ten_a", 5));             /* room again */
	CHECK(!quota_take(q, "ten_a", 5));
	quota_free(q);

	CHECK(quota_new(0) == NULL);
	CHECK(quota_take(NULL, "x", 1));
	quota_give(NULL, "x", 1);

	/* four threads on two keys, cap 1: afterwards both are free again */
	pthread_t t[4];
	shared = quota_new(1);
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, churn, (void *)(i % 2 ? "k1" : "k2"));
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	CHECK(quota_take(shared, "k1", 2) && quota_take(shared, "k2", 2));
	CHECK(!quota_take(shared, "k1", 2));
	quota_free(shared);
	return check_done("test-quota");
}
