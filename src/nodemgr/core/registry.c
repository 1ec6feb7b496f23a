/* registry.c - the registry of every jail nodemgr holds, ns or vm (struct
 * jail in s->jails, its slot and its state file under DATA/run/nodemgr):
 * claim an id and a slot, publish the started process, hand a warm jail
 * over to a sandbox id, and mark a jail busy for a verb; and the exit
 * statuses the reaper (server.c) collected. Every entry changes under
 * s->lock; the state transitions are the ones drawn above struct jail
 * (nodemgr-internal.h). Every room above uses it, so it is at the bottom. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/log.h"
#include "../../lib/util.h"
#include "../../qmp/qmp.h"
#include "nodemgr-internal.h"


static unsigned jail_bucket(const char *id)
{
	unsigned h = 2166136261u;

	for (; *id; id++)
		h = (h ^ (unsigned char)*id) * 16777619u;
	return h % NM_JAIL_BUCKETS;
}

static void by_id_add(struct nm_server *s, struct jail *j)
{
	unsigned b = jail_bucket(j->id);

	j->hnext = s->by_id[b];
	s->by_id[b] = j;
}

static void by_id_del(struct nm_server *s, struct jail *j)
{
	for (struct jail **pp = &s->by_id[jail_bucket(j->id)]; *pp; pp = &(*pp)->hnext)
		if (*pp == j) {
			*pp = j->hnext;
			break;
		}
}

struct jail *mgr_jail_find_locked(struct nm_server *s, const char *id)
{
	for (struct jail *j = s->by_id[jail_bucket(id)]; j; j = j->hnext)
		if (!strcmp(j->id, id))
			return j;
	return NULL;
}

void mgr_jail_unlink_locked(struct nm_server *s, struct jail *j)
{
	by_id_del(s, j);
	*j->pprev = j->next;
	if (j->next)
		j->next->pprev = j->pprev;
	if (j->slot >= 0)
		s->slots[j->slot] = 0;
	if (j->chan_fd >= 0)
		close(j->chan_fd);
	if (j->pidfd >= 0)
		close(j->pidfd);
	qmp_close(j->qmp);
	free(j);
}

uint64_t mgr_proc_stat_field(pid_t pid, int field)
{
	char path[64];
	struct buf b;
	uint64_t t = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	buf_init(&b);
	if (read_file(path, 4096, &b) == 0 && b.data) {
		/* comm may hold spaces and ')': fields start after the last ')'. */
		char *p = strrchr(b.data, ')');
		for (int f = 2; p && *p && f < field; p++)
			if (*p == ' ')
				f++;
		if (p)
			t = strtoull(p, NULL, 10);
	}
	buf_free(&b);
	return t;
}

char *mgr_jail_state_path(struct nm_server *s, const char *id)
{
	return xasprintf("%s/%s.state", s->run_dir, id);
}

/* The state file tells a later nodemgr run which cgroup to sweep (and which
 * pid/start time it had). Not fsync'd: after a crash the cgroup sweep finds
 * the same leftovers anyway. */
static void state_write(struct nm_server *s, const struct jail *j)
{
	_cleanup_free_ char *p = mgr_jail_state_path(s, j->id);
	_cleanup_free_ char *line = xasprintf("id=%s\nslot=%d\npid=%d\nstart=%" PRIu64 "\n",
					      j->id, j->slot, (int)j->pid, j->start_time);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	if (fd < 0 || write_all(fd, line, strlen(line)) < 0)
		log_warn("write %s: %s", p, strerror(errno));
	if (fd >= 0)
		close(fd);
}

struct jail *mgr_jail_claim(struct nm_server *s, const char *id, err_t *err)
{
	struct jail *j;
	int slot = -1;

	pthread_mutex_lock(&s->lock);
	if (mgr_jail_find_locked(s, id)) {
		pthread_mutex_unlock(&s->lock);
		err_set(err, EEXIST, "sandbox %s exists", id);
		return NULL;
	}
	for (int i = 0; i < NM_MAX_SLOTS; i++)
		if (!s->slots[i]) {
			slot = i;
			break;
		}
	if (slot < 0) {
		pthread_mutex_unlock(&s->lock);
		err_set(err, ENOSPC, "no free uid range (%d jails)", NM_MAX_SLOTS);
		return NULL;
	}
	j = xcalloc(1, sizeof(*j));
	snprintf(j->id, sizeof(j->id), "%s", id);
	j->slot = slot;
	j->pid = -1;
	j->pidfd = j->chan_fd = -1;
	j->busy = true;
	s->slots[slot] = 1;
	j->next = s->jails;
	j->pprev = &s->jails;
	if (s->jails)
		s->jails->pprev = &j->next;
	s->jails = j;
	by_id_add(s, j);
	pthread_mutex_unlock(&s->lock);
	return j;
}

void mgr_jail_unclaim(struct nm_server *s, struct jail *j)
{
	pthread_mutex_lock(&s->lock);
	mgr_jail_unlink_locked(s, j);
	pthread_mutex_unlock(&s->lock);
}

int mgr_jail_publish(struct nm_server *s, struct jail *j, pid_t pid, int chan, int *chan_dup,
		     err_t *err)
{
	pthread_mutex_lock(&s->lock);
	j->pid = pid;
	j->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	j->start_time = mgr_proc_stat_field(pid, 22);
	j->chan_fd = chan;
	j->alive = true;
	j->init_reaped = false;
	/* The reaper may have collected the process before we knew its pid. */
	for (size_t i = 0; i < s->nexits; i++)
		if (s->exits[i].pid == pid) {
			j->init_reaped = true;
			j->init_status = s->exits[i].status;
			s->exits[i] = s->exits[--s->nexits];
			j->alive = false;
			if (j->chan_fd >= 0)
				close(j->chan_fd);
			j->chan_fd = -1;
			break;
		}
	if (!j->alive) {
		pthread_mutex_unlock(&s->lock);
		return err_set(err, ECHILD, "sandbox %s: process exited right after start", j->id);
	}
	*chan_dup = j->chan_fd >= 0 ? fcntl(j->chan_fd, F_DUPFD_CLOEXEC, 3) : -1;
	j->busy = false;
	state_write(s, j);
	pthread_mutex_unlock(&s->lock);
	if (*chan_dup < 0 && j->chan_fd >= 0)
		return err_sys(err, "dup channel");
	return 0;
}

int mgr_jail_rename(struct nm_server *s, struct jail *j, const char *id, err_t *err)
{
	_cleanup_free_ char *old_state = NULL;

	pthread_mutex_lock(&s->lock);
	if (mgr_jail_find_locked(s, id)) {
		pthread_mutex_unlock(&s->lock);
		return err_set(err, EEXIST, "sandbox %s exists", id);
	}
	old_state = mgr_jail_state_path(s, j->id);
	by_id_del(s, j);
	snprintf(j->id, sizeof(j->id), "%s", id);
	by_id_add(s, j);
	pthread_mutex_unlock(&s->lock);
	unlink(old_state);
	return 0;
}

int mgr_jail_activate(struct nm_server *s, struct jail *j, int *chan_dup, err_t *err)
{
	int r = 0;

	pthread_mutex_lock(&s->lock);
	if (!j->alive || j->chan_fd < 0) {
		r = err_set(err, ECHILD, "sandbox %s: qemu exited", j->id);
	} else if ((*chan_dup = fcntl(j->chan_fd, F_DUPFD_CLOEXEC, 3)) < 0) {
		r = err_sys(err, "dup channel");
	} else {
		j->hidden = false;
		j->warm_key[0] = '\0';
		j->busy = false;
		state_write(s, j);
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* mgr_jail_acquire (live: the init must not have exited) and mgr_jail_acquire_any. */
static struct jail *acquire(struct nm_server *s, const char *id, bool live, bool *is_vm,
			    err_t *err)
{
	struct jail *j;

	pthread_mutex_lock(&s->lock);
	j = mgr_jail_find_locked(s, id);
	if (!j || j->hidden || (live && !j->alive && !j->busy)) {
		err_set(err, ENOENT, live ? "no live jail for sandbox %s" : "no jail for sandbox %s",
			id);
		j = NULL;
	} else if (j->busy) {
		err_set(err, EBUSY, "sandbox %s is busy (being created, destroyed or changed)", id);
		j = NULL;
	} else {
		j->busy = true;
		if (is_vm)
			*is_vm = j->vm;
	}
	pthread_mutex_unlock(&s->lock);
	return j;
}

struct jail *mgr_jail_acquire(struct nm_server *s, const char *id, bool *is_vm, err_t *err)
{
	return acquire(s, id, true, is_vm, err);
}

struct jail *mgr_jail_acquire_any(struct nm_server *s, const char *id, bool *is_vm, err_t *err)
{
	return acquire(s, id, false, is_vm, err);
}

void mgr_jail_release(struct nm_server *s, struct jail *j)
{
	pthread_mutex_lock(&s->lock);
	j->busy = false;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

int mgr_wait_child(struct nm_server *s, pid_t pid, int *status, int timeout_ms)
{
	struct timespec dl;
	int r = 0;

	clock_gettime(CLOCK_REALTIME, &dl);
	if (timeout_ms >= 0) {
		dl.tv_sec += timeout_ms / 1000;
		dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
		if (dl.tv_nsec >= 1000000000L) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000L;
		}
	}
	pthread_mutex_lock(&s->lock);
	for (;;) {
		size_t i;
		for (i = 0; i < s->nexits && s->exits[i].pid != pid; i++)
			;
		if (i < s->nexits) {
			*status = s->exits[i].status;
			s->exits[i] = s->exits[--s->nexits];
			break;
		}
		if (timeout_ms < 0)
			pthread_cond_wait(&s->cond, &s->lock);
		else if (pthread_cond_timedwait(&s->cond, &s->lock, &dl) == ETIMEDOUT) {
			r = -ETIMEDOUT;
			break;
		}
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}
