/* Unit test for nodemgr's jail registry (src/nodemgr/core/registry.c): the list of
 * every jail and its index by id stay one. Claims find their jail, a second
 * claim of an id is EEXIST, rename moves a jail to its new id (the old one
 * is free again), unclaim in any order leaves the rest findable and the
 * list whole, slots are reused; and 20,000 finds among 4,000 jails are fast
 * (the index is a hash, no walk of every jail; the bound is loose, for a
 * noisy machine). No root needed: nothing but memory is touched. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../src/nodemgr/core/nodemgr-internal.h"
#include "check.h"

enum { N = 4000 };

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static size_t list_len(struct nm_server *s)
{
	size_t n = 0;
	for (struct jail *j = s->jails; j; j = j->next)
		n++;
	return n;
}

static struct jail *find(struct nm_server *s, const char *id)
{
	struct jail *j;
	pthread_mutex_lock(&s->lock);
	j = mgr_jail_find_locked(s, id);
	pthread_mutex_unlock(&s->lock);
	return j;
}

int main(void)
{
	static struct nm_server srv;
	struct nm_server *s = &srv;
	static struct jail *js[N];
	char dir[] = "/tmp/test-nm-registry-XXXXXX", id[65];
	err_t err = { 0 };
	double t0;
	int ok = 1;

	if (!mkdtemp(dir))
		return 1;
	s->run_dir = dir;   /* rename unlinks <run_dir>/<old id>.state */
	pthread_mutex_init(&s->lock, NULL);

	for (int i = 0; i < N; i++) {
		snprintf(id, sizeof(id), "sb-%016x", i * 2654435761u);
		js[i] = mgr_jail_claim(s, id, &err);
		ok &= js[i] != NULL;
	}
	CHECK(ok);
	CHECK(list_len(s) == N);
	ok = 1;
	for (int i = 0; i < N; i++)
		ok &= find(s, js[i]->id) == js[i];
	CHECK(ok);
	CHECK(find(s, "sb-nope") == NULL);
	CHECK(mgr_jail_claim(s, js[7]->id, &err) == NULL && err.code == EEXIST);

	/* rename: found by the new id only; the old id can be claimed again */
	snprintf(id, sizeof(id), "%s", js[3]->id);
	CHECK(mgr_jail_rename(s, js[3], "sb-renamed", &err) == 0);
	CHECK(find(s, "sb-renamed") == js[3] && find(s, id) == NULL);
	CHECK(mgr_jail_rename(s, js[4], "sb-renamed", &err) == -EEXIST);
	{
		struct jail *again = mgr_jail_claim(s, id, &err);
		CHECK(again && find(s, id) == again);
		if (again)
			mgr_jail_unclaim(s, again);
	}

	/* unclaim the head, the tail and every third one between */
	mgr_jail_unclaim(s, js[N - 1]);   /* the newest: head of the list */
	mgr_jail_unclaim(s, js[0]);       /* the oldest: its tail */
	js[N - 1] = js[0] = NULL;
	for (int i = 3; i < N - 1; i += 3) {
		mgr_jail_unclaim(s, js[i]);
		js[i] = NULL;
	}
	ok = 1;
	size_t left = 0;
	for (int i = 0; i < N; i++)
		if (js[i]) {
			ok &= find(s, js[i]->id) == js[i];
			left++;
		}
	CHECK(ok);
	CHECK(list_len(s) == left);

	/* freed slots are reused */
	{
		struct jail *j = mgr_jail_claim(s, "sb-slot", &err);
		CHECK(j && j->slot == 0);
		if (j)
			mgr_jail_unclaim(s, j);
	}

	t0 = now_s();
	for (int r = 0; r < 5; r++)
		for (int i = 0; i < N; i++)
			if (js[i] && find(s, js[i]->id) != js[i])
				ok = 0;
	CHECK(ok);
	fprintf(stderr, "20000 finds among %zu jails in %.4f s\n", left, now_s() - t0);
	CHECK(now_s() - t0 < 1.0);

	for (int i = 0; i < N; i++)
		if (js[i])
			mgr_jail_unclaim(s, js[i]);
	CHECK(s->jails == NULL && list_len(s) == 0);
	rmdir(dir);
	return failures ? 1 : 0;
}
