/* test-quota: a key holds at most max; keys are independent, by their
 * bytes (a string and a 4-byte address alike); a give makes room again; a
 * NULL quota (max 0) never refuses; threads taking and giving at once end
 * with nothing held. Exit 0 = pass. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../../src/lib/keycap.h"
#include "check.h"

static struct keycap *shared;

static void *churn(void *arg)
{
	const char *key = arg;

	for (int i = 0; i < 20000; i++)
		if (keycap_take(shared, key, strlen(key)))
			keycap_give(shared, key, strlen(key));
	return NULL;
}

int main(void)
{
	struct keycap *q = keycap_new(2);
	uint32_t addr = 0x0a000002, other = 0x0a000003;

	CHECK(keycap_take(q, "ten_a", 5) && keycap_take(q, "ten_a", 5));
	CHECK(!keycap_take(q, "ten_a", 5));            /* at the cap */
	CHECK(keycap_take(q, "ten_ab", 6));            /* another key, a prefix apart */
	CHECK(keycap_take(q, &addr, sizeof(addr)) && keycap_take(q, &addr, sizeof(addr)));
	CHECK(!keycap_take(q, &addr, sizeof(addr)));
	CHECK(keycap_take(q, &other, sizeof(other)));
	keycap_give(q, "ten_a", 5);
	CHECK(keycap_take(q, "ten_a", 5));             /* room again */
	CHECK(!keycap_take(q, "ten_a", 5));
	keycap_free(q);

	CHECK(keycap_new(0) == NULL);
	CHECK(keycap_take(NULL, "x", 1));
	keycap_give(NULL, "x", 1);

	/* four threads on two keys, cap 1: afterwards both are free again */
	pthread_t t[4];
	shared = keycap_new(1);
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, churn, (void *)(i % 2 ? "k1" : "k2"));
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	CHECK(keycap_take(shared, "k1", 2) && keycap_take(shared, "k2", 2));
	CHECK(!keycap_take(shared, "k1", 2));
	keycap_free(shared);
	return check_done("test-quota");
}
