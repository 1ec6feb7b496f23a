/* proc-table.c - a sandbox's process table: one record per process that
 * exec started (and a bounded few "strays" for pids the guest reports
 * output for before the exec reply), all under sb->mu. The guest channel's
 * callbacks land here (proc_on_output, proc_on_exit), as do exec timeouts
 * (the reaper) and teardown (procs_mark_lost). exec.c registers records,
 * processes.c reads them, proc-image.c carries them across a full snapshot.
 *
 * A process outlives its HTTP stream. The table keeps every running process
 * and the last NODE_PROC_KEEP exited ones per sandbox.
 */
#include <errno.h>
#include <signal.h>
#include <time.h>

#include "../../lib/log.h"
#include "proc.h"

/* ---- the table (all under sb->mu) -------------------------------------- */

struct proc *proc_new_locked(struct sandbox *sb, uint32_t pid)
{
	struct proc *p = xcalloc(1, sizeof(*p));
	pthread_condattr_t ca;
	size_t cap = sb->node->cfg->out_buffer_bytes ? sb->node->cfg->out_buffer_bytes : 1u << 20;

	p->serial = sb->next_serial++;
	p->pid = pid;
	p->running = true;
	p->started_at = wall_ms();
	ring_init(&p->out[0], cap);
	ring_init(&p->out[1], cap);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->cv, &ca);
	pthread_condattr_destroy(&ca);
	p->refs = 1;
	p->in_table = true;
	/* Appended at the tail in O(1): the table holds up to NODE_PROC_KEEP
	 * exited records, and an exec must not walk them all. */
	p->prev = sb->procs_tail;
	if (sb->procs_tail)
		sb->procs_tail->next = p;
	else
		sb->procs = p;
	sb->procs_tail = p;
	return p;
}

/* Take p out of the table's list (the table's reference stays with the
 * caller). */
static void proc_unlink_locked(struct sandbox *sb, struct proc *p)
{
	if (p->prev)
		p->prev->next = p->next;
	else
		sb->procs = p->next;
	if (p->next)
		p->next->prev = p->prev;
	else
		sb->procs_tail = p->prev;
	p->next = p->prev = NULL;
	p->in_table = false;
}

static void proc_free(struct proc *p)
{
	if (p->argv)
		for (char **a = p->argv; *a; a++)
			free(*a);
	free(p->argv);
	ring_free(&p->out[0]);
	ring_free(&p->out[1]);
	pthread_cond_destroy(&p->cv);
	free(p);
}

void proc_unref_locked(struct proc *p)
{
	if (--p->refs == 0)
		proc_free(p);
}

/* Drop the oldest exited records beyond the limit. */
static void evict_locked(struct sandbox *sb)
{
	struct proc *p = sb->procs;

	while (sb->n_exited > NODE_PROC_KEEP && p) {
		struct proc *next = p->next;
		if (p->running) {
			p = next;
			continue;
		}
		proc_unlink_locked(sb, p);
		sb->n_exited--;
		if (!p->claimed)
			sb->n_strays--;
		proc_unref_locked(p);
		p = next;
	}
}

void proc_mark_exited_locked(struct sandbox *sb, struct proc *p, int exit_code, int sig)
{
	if (!p->running)
		return;
	p->running = false;
	p->exit_code = sig > 0 ? -1 : exit_code;
	p->signal = sig > 0 ? sig : 0;
	sb->n_exited++;
	pthread_cond_broadcast(&p->cv);
}

/* The newest running record for pid: the one the guest's events are about.
 * From the newest end, so the exec just made is found at once. */
static struct proc *find_running_locked(struct sandbox *sb, uint32_t pid)
{
	for (struct proc *p = sb->procs_tail; p; p = p->prev)
		if (p->pid == pid && p->running)
			return p;
	return NULL;
}

/* The newest record for pid, for the API. */
struct proc *proc_find_locked(struct sandbox *sb, uint32_t pid)
{
	for (struct proc *p = sb->procs_tail; p; p = p->prev)
		if (p->pid == pid && p->claimed)
			return p;
	return NULL;
}

struct proc *proc_find_stray_locked(struct sandbox *sb, uint32_t pid)
{
	/* Usually there is none: no walk through the exited records then. */
	if (sb->n_strays == 0)
		return NULL;
	for (struct proc *p = sb->procs_tail; p; p = p->prev)
		if (p->pid == pid && !p->claimed)
			return p;
	return NULL;
}

struct proc *proc_claim_locked(struct sandbox *sb, uint32_t pid)
{
	struct proc *p = proc_find_stray_locked(sb, pid);

	if (p)
		sb->n_strays--;
	else
		p = proc_new_locked(sb, pid);
	p->claimed = true;
	return p;
}

/* A record for an event about a pid the node has not registered yet (the
 * output can overtake the exec reply). A guest could invent pids, so these
 * strays are bounded. */
static struct proc *stray_locked(struct sandbox *sb, uint32_t pid)
{
	if (sb->n_strays >= NODE_PROC_STRAYS)
		return NULL;
	sb->n_strays++;
	return proc_new_locked(sb, pid);
}

void proc_on_output(struct sandbox *sb, uint32_t pid, int fd, uint64_t off, const void *data,
		    size_t len)
{
	struct proc *p;

	if (fd != 1 && fd != 2)
		return;
	pthread_mutex_lock(&sb->mu);
	p = find_running_locked(sb, pid);
	if (!p)
		p = stray_locked(sb, pid);
	if (p) {
		ring_write_at(&p->out[fd - 1], off, data, len);
		pthread_cond_broadcast(&p->cv);
	}
	pthread_mutex_unlock(&sb->mu);
}

void proc_on_exit(struct sandbox *sb, uint32_t pid, int exit_code, int sig)
{
	struct proc *p;

	pthread_mutex_lock(&sb->mu);
	p = find_running_locked(sb, pid);
	if (!p)
		p = stray_locked(sb, pid);
	if (p) {
		proc_mark_exited_locked(sb, p, exit_code, sig);
		evict_locked(sb);
	}
	pthread_mutex_unlock(&sb->mu);
}

void procs_mark_lost(struct sandbox *sb, const char *why)
{
	for (struct proc *p = sb->procs; p; p = p->next) {
		if (!p->running)
			continue;
		p->lost = why;
		proc_mark_exited_locked(sb, p, -1, SIGKILL);
	}
	evict_locked(sb);
}

void procs_free_all(struct sandbox *sb)
{
	struct proc *p;

	while ((p = sb->procs)) {
		proc_unlink_locked(sb, p);
		proc_unref_locked(p);
	}
}

void procs_wake_all(struct node *n)
{
	pthread_mutex_lock(&n->mu);
	for (int b = 0; b < NODE_BUCKETS; b++)
		for (struct sandbox *sb = n->buckets[b]; sb; sb = sb->hnext) {
			pthread_mutex_lock(&sb->mu);
			for (struct proc *p = sb->procs; p; p = p->next)
				pthread_cond_broadcast(&p->cv);
			pthread_mutex_unlock(&sb->mu);
		}
	pthread_mutex_unlock(&n->mu);
}

void proc_on_timeout(struct node *n, const char *sb_id, uint64_t serial)
{
	struct sandbox *sb = sandbox_find(n, sb_id, NULL);
	struct guestconn *gc;
	uint32_t pid = 0;
	err_t err = { 0 };

	if (!sb)
		return;
	pthread_mutex_lock(&sb->mu);
	for (struct proc *p = sb->procs; p; p = p->next)
		if (p->serial == serial && p->running)
			pid = p->pid;
	pthread_mutex_unlock(&sb->mu);
	if (pid && (gc = sandbox_gc_get(sb))) {
		if (guestconn_signal(gc, pid, SIGKILL, &err) < 0 && err.code != ESRCH)
			log_warn("sandbox %s: kill pid %u after timeout: %s", sb->id, pid, err.msg);
		sandbox_gc_put(sb);
	}
	sandbox_unref(sb);
}

/* The guest is replaced: its running processes end as lost, those of the
 * snapshot's image it starts from come back. */
static void procs_retire_locked(struct sandbox *sb, const char *why, const char *procs)
{
	procs_mark_lost(sb, why);
	procs_restore_locked(sb, procs);
}

const struct sandbox_feature proc_feature = {
	.name = "processes",
	.on_output = proc_on_output,
	.on_exit = proc_on_exit,
	.retire_locked = procs_retire_locked,
	.free = procs_free_all,
};
