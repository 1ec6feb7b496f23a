/* tmp-pool.h - a btrfs loop pool in a temp dir for unit tests that need a
 * real one (root only): tmp_pool_make() mounts DIR/pool on DIR/pool.img,
 * tmp_pool_remove() unmounts it (the loop device autoclears) and removes
 * the dir. Safe to call twice and on a dir never made. */
#ifndef AIRLOCK_TEST_TMP_POOL_H
#define AIRLOCK_TEST_TMP_POOL_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../src/pool/pool.h"

static char tmpdir[] = "/tmp/airlock-test.XXXXXX";
static bool have_tmp;

static inline void tmp_pool_remove(void)
{
	err_t e = { 0 };
	char cmd[256];

	if (!have_tmp)
		return;
	if (pool_release(tmpdir, &e) < 0)
		fprintf(stderr, "cleanup: %s\n", e.msg);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "cleanup: %s failed\n", cmd);
	have_tmp = false;
}

/* 0, with *mounted telling whether this call mounted it; -1 with e set. */
static inline int tmp_pool_make(uint64_t size_mb, bool *mounted, err_t *e)
{
	if (!have_tmp) {
		if (!mkdtemp(tmpdir))
			return err_sys(e, "mkdtemp");
		have_tmp = true;
	}
	return pool_ensure(tmpdir, size_mb, mounted, e) < 0 ? -1 : 0;
}

#endif
