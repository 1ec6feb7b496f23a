/* mgr-limits.c - NM_SANDBOX_LIMITS: how often each sandbox hit its limits
 * and whether its jail's init is gone (nm.h, nm_sandbox_limits).
 *
 * The node asks for every sandbox at once on its timer (every few
 * seconds), so the cost is one connection and, per sandbox with a jail,
 * two or three small kernel files read (cgroup-limits.c) and a stat; only
 * sandboxes with something to tell are answered, one ITEM each. The files
 * are the kernel's; nothing here reads what a sandbox wrote. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "../lib/log.h"
#include "../lib/util.h"
#include "cgroup/cgroup-limits.h"
#include "mgr.h"

struct seen {
	char id[65];
	bool gone;
	int sig;
};

int mgr_sandbox_limits(struct nm_server *s, const char *id, char ***items, err_t *err)
{
	struct seen *v = NULL;
	size_t n = 0, k = 0;

	*items = NULL;
	pthread_mutex_lock(&s->lock);
	for (struct jail *j = s->jails; j; j = j->next) {
		/* a jail still being made (busy, never started) has nothing yet */
		if (j->hidden || (j->busy && !j->alive && !j->init_reaped))
			continue;
		if (*id && strcmp(j->id, id))
			continue;
		v = xrealloc(v, (n + 1) * sizeof(*v));
		snprintf(v[n].id, sizeof(v[n].id), "%s", j->id);
		v[n].gone = j->init_reaped;
		v[n].sig = j->init_reaped && WIFSIGNALED(j->init_status)
				   ? WTERMSIG(j->init_status) : 0;
		n++;
	}
	pthread_mutex_unlock(&s->lock);
	if (*id && !n) {
		free(v);
		return err_set(err, ENOENT, "no jail for sandbox %s", id);
	}
	*items = xcalloc(n + 1, sizeof(**items));
	for (size_t i = 0; i < n; i++) {
		struct cgroup_hits h;
		err_t e = { 0 };

		if (cgroup_hits(&s->cg, v[i].id, &h, &e) < 0) {
			/* destroyed meanwhile: nothing to count */
			log_debug("sandbox %s: limits: %s", v[i].id, e.msg);
			memset(&h, 0, sizeof(h));
		}
		if (!*id && !h.oom_kill && !h.pids_max && !v[i].gone)
			continue;
		(*items)[k++] = xasprintf("%s %" PRIu64 " %" PRIu64 " %" PRIu64 " %d %d", v[i].id,
					  h.gen, h.oom_kill, h.pids_max, v[i].gone ? 1 : 0, v[i].sig);
	}
	free(v);
	return 0;
}
