/* cgroup-limits.c - the limit counters of a sandbox's cgroup (see
 * cgroup-limits.h). Kept apart from cgroup.c: it only reads, and needs
 * nothing of how the cgroup was made or named but its directory. */
#include "cgroup-limits.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../lib/util.h"

/* A small kernel file read whole (b: caller frees, also on failure);
 * -ENOENT when it cannot be read or is empty. */
static int read_keyed(const char *path, struct buf *b)
{
	buf_init(b);
	return read_file(path, 1 << 14, b) == 0 && b->data ? 0 : -ENOENT;
}

static uint64_t dir_ino(const char *dir)
{
	struct stat st;

	return stat(dir, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* pids.events' max, 0 when the file is not there (pids not enabled). */
static void pids_events(const char *dir, struct cgroup_hits *out)
{
	_cleanup_free_ char *p = xasprintf("%s/pids.events", dir);
	struct buf b;

	if (read_keyed(p, &b) == 0 && !cgroup_keyed_u64(b.data, "max", &out->pids_max))
		out->pids_max = 0;
	buf_free(&b);
}

int cgroup_hits_v2_dir(const char *dir, struct cgroup_hits *out, err_t *err)
{
	_cleanup_free_ char *p = xasprintf("%s/memory.events", dir);
	struct buf b;

	memset(out, 0, sizeof(*out));
	if (read_keyed(p, &b) < 0) {
		buf_free(&b);
		return err_set(err, ENOENT, "cgroup %s: no memory.events", dir);
	}
	/* each may be absent on an older kernel (oom_kill: 4.13): 0 then */
	cgroup_keyed_u64(b.data, "oom_kill", &out->oom_kill);
	cgroup_keyed_u64(b.data, "oom", &out->oom);
	cgroup_keyed_u64(b.data, "max", &out->mem_max);
	buf_free(&b);
	pids_events(dir, out);
	out->gen = dir_ino(dir);
	return 0;
}

int cgroup_hits_v1_dirs(const char *memory_dir, const char *pids_dir, struct cgroup_hits *out,
			err_t *err)
{
	_cleanup_free_ char *oc = xasprintf("%s/memory.oom_control", memory_dir);
	_cleanup_free_ char *fc = xasprintf("%s/memory.failcnt", memory_dir);
	_cleanup_free_ char *msw = xasprintf("%s/memory.memsw.failcnt", memory_dir);
	uint64_t under = 0;
	struct buf b;

	memset(out, 0, sizeof(*out));
	if (read_keyed(oc, &b) < 0) {
		buf_free(&b);
		return err_set(err, ENOENT, "cgroup %s: no memory.oom_control", memory_dir);
	}
	cgroup_keyed_u64(b.data, "oom_kill", &out->oom_kill);
	cgroup_keyed_u64(b.data, "under_oom", &under);
	out->under_oom = under != 0;
	buf_free(&b);
	/* With swap accounting the memory+swap counter is charged first and
	 * is the one that fails (its own failcnt); either way it is a charge
	 * the limit refused, and no charge counts on both. */
	for (int i = 0; i < 2; i++) {
		uint64_t v = 0;
		if (cgroup_read_u64(i ? msw : fc, NULL, &v))
			out->mem_max += v;
	}
	pids_events(pids_dir, out);
	out->gen = dir_ino(memory_dir);
	return 0;
}

int cgroup_hits(const struct cgroups *cg, const char *id, struct cgroup_hits *out, err_t *err)
{
	if (cg->v2) {
		_cleanup_free_ char *dir = cgroup_file(cg, NULL, id, NULL);
		return cgroup_hits_v2_dir(dir, out, err);
	}
	_cleanup_free_ char *mem = cgroup_file(cg, "memory", id, NULL);
	_cleanup_free_ char *pids = cgroup_file(cg, "pids", id, NULL);
	return cgroup_hits_v1_dirs(mem, pids, out, err);
}
