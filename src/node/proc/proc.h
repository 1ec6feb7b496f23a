/* proc.h - the room node/proc: a sandbox's process table (proc-table.c),
 * its image across a full snapshot (proc-image.c) and the output rings
 * (ring.h). Above the model (model/model.h), below the handlers that start
 * processes and stream them (../exec/). All but the callbacks with sb->mu
 * held.
 */
#ifndef AIRLOCK_NODE_PROC_H
#define AIRLOCK_NODE_PROC_H

#include "../model/model.h"
#include "ring.h"

#define NODE_PROC_KEEP 256              /* exited processes kept per sandbox */
#define NODE_PROC_STRAYS 16             /* records for pids the node never exec'd */

/* One process started by exec (or a stray record for a pid the guest reported
 * output for before the exec reply arrived; exec claims it). All fields are
 * protected by the owning sandbox's mu. */
struct proc {
	struct proc *next;      /* table order: oldest first */
	struct proc *prev;      /* newer to older: lookups start at the newest */
	uint64_t serial;        /* unique per sandbox; timers refer to it */
	uint32_t pid;
	bool claimed;           /* exec filled argv etc. */
	char **argv;            /* NULL-terminated, owned; NULL for strays */
	bool pty;
	int64_t started_at;     /* wall ms */
	bool running;
	int exit_code;          /* valid when !running && signal == 0 */
	int signal;             /* > 0 when killed by a signal */
	const char *lost;       /* static text when ended because the sandbox went away */
	struct ring out[2];     /* [0] stdout, [1] stderr */
	pthread_cond_t cv;      /* broadcast on output and exit (with sb->mu) */
	int refs;               /* the table holds one while in_table */
	bool in_table;
};

/* proc-table.c */
void proc_on_output(struct sandbox *sb, uint32_t pid, int fd, uint64_t off, const void *data,
		    size_t len);
void proc_on_exit(struct sandbox *sb, uint32_t pid, int exit_code, int sig);
/* A new running record for pid at the end of the table; the table holds
 * its one reference. */
struct proc *proc_new_locked(struct sandbox *sb, uint32_t pid);
void proc_unref_locked(struct proc *p);
/* Mark p exited (sig > 0: killed by it) and wake its streams. */
void proc_mark_exited_locked(struct sandbox *sb, struct proc *p, int exit_code, int sig);
/* The newest record for pid that exec claimed (for the API), or NULL. */
struct proc *proc_find_locked(struct sandbox *sb, uint32_t pid);
/* The newest stray record for pid (output came before the exec reply), or
 * NULL: exec claims it. */
struct proc *proc_find_stray_locked(struct sandbox *sb, uint32_t pid);
/* The record of a process the node just started: the stray one its early
 * output made, claimed, or a new one. */
struct proc *proc_claim_locked(struct sandbox *sb, uint32_t pid);
void procs_mark_lost(struct sandbox *sb, const char *why);    /* holds sb->mu */
void procs_free_all(struct sandbox *sb);
void proc_on_timeout(struct node *n, const char *sb_id, uint64_t serial);
void procs_wake_all(struct node *n);
/* proc-image.c: the running processes as JSON (pid, argv, pty, start,
 * stream offsets; caller frees; takes sb->mu), kept with a full snapshot;
 * and (sb->mu held) back into the table after a rollback to it, as running
 * records whose output goes on from those offsets (NULL or bad text
 * restores nothing). */
char *procs_image(struct sandbox *sb);
void procs_restore_locked(struct sandbox *sb, const char *image);
/* Its hooks on the model: output and exits, retirement, freeing. */
extern const struct sandbox_feature proc_feature;

#endif
