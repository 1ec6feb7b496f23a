/* pooldir.c - what the rooms above share about the pool's directories: a
 * subvolume's delete while a dead jail may still pin it, a template's
 * identity made once (pool_subvol_ensure_received), whether a template
 * version is still the one to warm, and the retiring of the jails and
 * QEMUs parked for one. The ns warm pool (jail room), the vm pools (vm
 * room) and the template verbs (templates room) each need these, so they
 * live below all three. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/log.h"
#include "../../lib/util.h"
#include "../../pool/pool.h"
#include "nodemgr-internal.h"

/* Delete the sandbox subvolume. Right after the jail died its mount
 * namespace may still pin the subvolume for a moment: retry EBUSY. */
int mgr_subvol_delete_retry(const char *path, err_t *err)
{
	for (int i = 0;; i++) {
		int r = pool_subvol_delete(path, err);
		if (r == 0 || err->code != EBUSY || i >= 500)
			return r;
		usleep(1000);
	}
}

/* One template made writable for a moment at a time (snap_suspend_export,
 * tmpl_export). */
static pthread_mutex_t mark_mu = PTHREAD_MUTEX_INITIALIZER;

int mgr_template_ensure_received(const char *path, err_t *err)
{
	int r;

	pthread_mutex_lock(&mark_mu);
	r = pool_subvol_ensure_received(path, err);
	pthread_mutex_unlock(&mark_mu);
	return r;
}

/* Is key, a pool key (nswarm.c "ns:NAME/VER", vm-pool.c "NAME/VER/mM-cC"
 * and "fork:NAME/VER/mM-cC"), of template name at version, or (older)
 * below it? */
static bool key_of(const char *key, const char *name, uint32_t version, bool older)
{
	size_t n = strlen(name);
	unsigned long v;
	char *end;

	if (!strncmp(key, "ns:", 3))
		key += 3;
	else if (!strncmp(key, "fork:", 5))
		key += 5;
	if (strncmp(key, name, n) || key[n] != '/' || key[n + 1] < '0' || key[n + 1] > '9')
		return false;
	errno = 0;
	v = strtoul(key + n + 1, &end, 10);
	if (errno || (*end && *end != '/'))
		return false;
	return older ? v < version : v == version;
}

bool mgr_template_superseded(struct nm_server *s, const char *name, uint32_t version)
{
	_cleanup_free_ char *dir = xasprintf("%s/templates/%s", s->pool, name);
	DIR *d = opendir(dir);
	struct dirent *de;
	bool present = false, newer = false;

	while (d && (de = readdir(d))) {
		char *end;
		unsigned long v = strtoul(de->d_name, &end, 10);

		if (!de->d_name[0] || de->d_name[0] == '.' || *end)
			continue;   /* "." "..", and <ver>.vm */
		present |= v == version;
		newer |= v > version && v <= UINT32_MAX;
	}
	if (d)
		closedir(d);
	return !present || newer;
}

void mgr_template_retire_pools(struct nm_server *s, const char *name, uint32_t version,
			       bool older)
{
	unsigned n = 0;

	for (;;) {
		struct jail *j;

		pthread_mutex_lock(&s->lock);
		for (j = s->jails; j; j = j->next)
			if (j->hidden && !j->busy && key_of(j->warm_key, name, version, older))
				break;
		if (j)
			j->busy = true;
		pthread_mutex_unlock(&s->lock);
		if (!j)
			break;
		s->discard_parked[j->vm](s, j);
		n++;
	}
	if (n)
		log_info("template %s: %u parked jail(s) of %s version %u retired", name, n,
			 older ? "a version before" : "its", version);
}

