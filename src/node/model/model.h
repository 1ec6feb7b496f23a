/* model.h - the sandbox model, the bottom room of src/node: struct sandbox
 * and the node that holds them (its config, map and per-state counts),
 * references, the JSON form and the row's transactions, the guest channel
 * and a guest coming up, the clocks, the reaper, and the hooks by which
 * each feature adds its fields and channel callbacks (struct
 * sandbox_feature). The model names no feature: a feature's code sits
 * above it and registers itself (node.c); test-node-model checks that no
 * object of this room references a symbol defined above it. The features'
 * data kept in the sandbox and the node (policy.h, the process list, the
 * suspension, the template publisher's queue) is plain data here.
 *
 * Locking, outermost first:
 *   node->sched_mu (one scheduler pass at a time; snap/schedule.c)
 *   node->tmpl_mu  (template builds; never held across a build)
 *   node->mu       (the sandbox map and counters; short)
 *   sb->mu         (one sandbox: state, channel pointer, process table, rings)
 *   node->jan_mu   (timer list; leaf)
 *   the db handle's own mutex (leaf; taken inside db_* calls)
 * No guestconn_* or nm_* / backend call is ever made while holding sb->mu or
 * node->mu: those calls wait on replies that the channel's reader thread
 * delivers, and the reader's callbacks take sb->mu.
 */
#ifndef AIRLOCK_NODE_MODEL_H
#define AIRLOCK_NODE_MODEL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "../../backend/backend.h"
#include "../../byok/kms.h"
#include "../../db/db.h"
#include "../../guestconn/guestconn.h"
#include "../../lib/err.h"
#include "../../lib/http.h"
#include "../../lib/json.h"
#include "../../lib/util.h"
#include "config.h"
#include "policy.h"
#include "state.h"
#include "theap.h"

#define NODE_BUCKETS 256

/* Event reasons of re-adopting a paused sandbox after a node restart: it is
 * thawed to say HELLO, then paused again. The TTL replay skips the pair. */
#define REASON_READOPT_RESUME "resumed to re-adopt after restart"
#define REASON_READOPT_PAUSE "paused again after restart"

struct proc;
struct tbuild;
struct tconfig;
struct tfetch;
struct pubjob;
struct tenant_order;

struct sandbox {
	struct sandbox *hnext;  /* hash chain, under node->mu */
	struct sandbox *ihnext; /* chain of node->idem (when idem_key), under node->mu */
	bool counted;           /* in node->state_n (in the map), under node->count_mu */
	int refs;               /* atomic; the map holds one */
	struct node *node;

	/* Immutable after creation. */
	char id[65];
	char *tenant, *template_name, *backend_name, *idem_key;
	char *home;   /* its row's node when that is another (a row read for an answer) */
	const struct backend_ops *be;     /* NULL when the row names an unknown backend */
	uint32_t template_version;
	struct nm_limits limits;
	json *env;              /* object of strings, or NULL */
	/* The template image's defaults for exec: {"workdir", "user",
	 * "entrypoint", "cmd"} (templates.c, template_image_config), or NULL.
	 * Its env is merged into env at create. Kept in the row's spec. */
	json *image;
	json *metadata;         /* object of strings */
	uint32_t timeout_s;
	int64_t created_at;     /* wall ms */
	char *parent;           /* fork: the parent's id (lineage table), or NULL */
	json *recovered_from;   /* {snapshot, kind, at} of the last crash recovery, under mu */
	int64_t recovered_ms;   /* wall ms of this process's last recovery of it (reaper only) */
	struct sb_policy pol;   /* snapshots, retention, idle, on_timeout (schedule.h) */
	/* The egress policy as given (NULL = the default), and the sandbox's
	 * address on the node's network ("" = none); both under mu. */
	json *network;
	char addr[16];

	pthread_mutex_t mu;
	pthread_cond_t cv;      /* state changes; gc_users reaching 0 */
	enum sb_state state;
	char *error;            /* reason of failed */
	bool deleting;          /* a teardown owns the sandbox */
	bool lc_busy;           /* a pause, resume, snapshot or rollback is at the backend */
	bool chan_closed;
	struct guestconn *gc;   /* NULL unless running */
	int gc_users;           /* threads inside guestconn_* with gc */
	struct proc *procs;     /* oldest first; procs_tail is the newest */
	struct proc *procs_tail;
	size_t n_exited, n_strays;
	uint64_t next_serial;
	struct sb_sched sched;  /* scheduler and TTL bookkeeping */
	struct sb_limits lim;   /* limits that bit (node/limits) */
	/* Suspended (suspend.c), under mu: its snapshot in the object store,
	 * the bytes stored and the manifest's SHA-256 (hex); susp_resume: a
	 * suspend cut off by a restart found it running (reconcile only). */
	char *susp_snap;
	int64_t susp_bytes;
	char susp_sha[65];
	char susp_key[33];      /* the data key its artifacts are sealed under ("" = none) */
	/* vm: the RAM file (by SHA-256) its memory was last rebuilt on by a
	 * restore, which the next suspend diffs against when this node has it
	 * ("": the template's own); a hint only, not kept across restarts */
	char mem_base[65];
	bool susp_resume;
	/* A long operation under way (suspend, restore, fork of many), shown
	 * by GET as "progress" so a client can draw how far it is; under mu.
	 * op NULL: none. Strings are static. total 0: not known yet. */
	struct {
		const char *op, *phase, *unit;
		uint64_t done, total;
	} prog;
};

/* metrics.c: latency histograms of the node's operations (GET /metrics).
 * Counters are updated with relaxed atomics, read without a lock. */
enum node_op { OP_CREATE, OP_EXEC, OP_SNAPSHOT, OP_FORK, OP__COUNT };
#define OP_BUCKETS 14
struct op_histo {
	uint64_t le[OP_BUCKETS];   /* observations <= metrics_bounds_us[i] */
	uint64_t count, sum_us;
};

enum timer_kind {
	TIMER_SANDBOX_TIMEOUT,
	TIMER_PROC_TIMEOUT,
	TIMER_CHAN_CLOSED,
	TIMER_SCHEDULE,
	TIMER_LIMITS,
	TIMER_STORE_SWEEP,
};

struct timer {
	uint64_t due_ms;        /* CLOCK_MONOTONIC */
	enum timer_kind kind;
	char sb_id[65];
	uint64_t serial;        /* TIMER_PROC_TIMEOUT; TIMER_STORE_SWEEP: the attempt */
};

struct node {
	const struct node_config *cfg;
	struct db *db;
	struct backend_ctx bctx;
	struct http_server *http;
	int stopping;           /* atomic */
	int stop_fd;            /* eventfd, readable once the node stops: cancels template builds */

	pthread_mutex_t mu;
	struct sandbox *buckets[NODE_BUCKETS];
	/* The map's sandboxes that have an Idempotency-Key, by (tenant, key):
	 * a create with a key finds an earlier one without a walk of all. */
	struct sandbox *idem[NODE_BUCKETS];
	/* Each tenant's sandboxes of the map in list order, (created_at,
	 * id) ascending: a page of GET /v1/sandboxes starts at its cursor by
	 * a binary search instead of sorting every sandbox (sandbox.c). */
	struct tenant_order *orders[NODE_BUCKETS];
	/* How many sandboxes of the map are in each state, kept by every
	 * state change and map insert or unlink (sandbox.c) under count_mu,
	 * which is innermost: max_sandboxes and /v1/node read them in O(1). */
	pthread_mutex_t count_mu;
	size_t state_n[SB__COUNT];
	/* vm guests between their start (create, rollback, fork child,
	 * restore) and their READY (guest.c vmstart_enter): at most
	 * vmstart_max at once, the rest wait their turn. */
	pthread_mutex_t vmstart_mu;
	pthread_cond_t vmstart_cv;
	unsigned vmstart_busy, vmstart_waiting, vmstart_max;

	pthread_mutex_t info_mu;
	bool have_info;
	struct nm_node_info info;

	pthread_mutex_t tmpl_mu;
	struct tbuild *builds;
	struct tconfig *tconfigs;  /* under tmpl_mu: image defaults per template version */

	/* tmpl/tmplstore.c: downloads in flight (tstore_mu); one publish at a time
	 * (tpub_mu, held through an upload, so never by a download's wait). */
	pthread_mutex_t tstore_mu, tpub_mu;
	struct tfetch *tfetches;
	uint64_t tstore_fetches;   /* atomic: templates fetched from the store */
	/* tmpl/tmplstore.c: the publisher, which uploads template versions when they
	 * become ready and vm memory bases when they are first used. */
	pthread_mutex_t pub_mu;
	pthread_cond_t pub_cv;
	pthread_t pub_thread;
	bool pub_init, pub_started, pub_stop;
	struct pubjob *pub_q;
	char *pub_done[64];        /* keys published (or found) since start, a ring */
	unsigned pub_done_next;

	/* cluster/heartbeat.c: this node's row in the nodes table and its heartbeat.
	 * generation is this process's epoch. lock_db (PostgreSQL only, owned)
	 * is the session that holds the advisory lock on the node's name for
	 * the process's whole life. fenced: set once this process learnt it no
	 * longer owns its name (main then exits without touching a sandbox). */
	int64_t generation;
	struct db *lock_db;
	int fenced;
	pthread_mutex_t beat_mu;
	pthread_cond_t beat_cv;    /* CLOCK_MONOTONIC */
	pthread_t beat_thread;
	bool beat_init, beat_started, beat_stop, beat_now;

	pthread_mutex_t jan_mu;
	pthread_cond_t jan_cv;  /* CLOCK_MONOTONIC */
	struct theap timers;    /* of struct timer *, earliest due_ms first */
	bool jan_stop;
	void (*jan_fire)(struct node *n, const struct timer *t);   /* reaper_start */
	bool jan_started;
	pthread_t janitor;

	struct objstore *os;       /* NULL: no object store, no suspend */
	/* BYOK (byok.c, src/byok/kms.h): tenants' keys, data keys and their
	 * cache; the revocation watch's thread. */
	struct kms kms;
	pthread_t kms_watch;
	bool kms_watch_started;
	int kms_watch_stop;        /* atomic */

	pthread_mutex_t sched_mu;  /* one scheduler pass at a time; outermost */
	int64_t sched_offset_ms;   /* atomic: the debug clock's advance */

	struct op_histo ops[OP__COUNT];   /* metrics.c */
	/* creates whose jail came from a warm pool (hit) or was made then
	 * (miss), by backend (ns, vm): atomic, metrics_pool_create */
	uint64_t pool_hits[2], pool_misses[2];
	/* limits that bit, by enum sb_limit_kind, since this process started
	 * (node/limits; atomic, metrics.c) */
	uint64_t limit_hits[LIMIT__COUNT];
};

/* This node's name in the shared database ("" when it has none). */
static inline const char *node_me(const struct node *n)
{
	return n->cfg->node_name ? n->cfg->node_name : "";
}

/* Are artifacts sealed (config encrypt_artifacts; off only for the control
 * test and the benchmark's baseline)? */
static inline bool byok_on(const struct node *n)
{
	return n->cfg->encrypt_artifacts;
}

/* The database is this host's alone (SQLite), not shared with other nodes. */
static inline bool node_db_is_private(const struct node *n)
{
	return strcmp(db_driver_name(n->db), "sqlite") == 0;
}

static inline bool node_stopping(struct node *n)
{
	return __atomic_load_n(&n->stopping, __ATOMIC_ACQUIRE) != 0;
}

/* A feature's hooks on the model; each may be NULL. The node registers its
 * features once at start (node.c: node_features), before any sandbox
 * exists, and the model calls them in that order. */
struct sandbox_feature {
	const char *name;
	/* Its keys of the sandbox's JSON form; sb->mu held. */
	void (*render_locked)(struct jw *w, struct sandbox *sb);
	/* A sandbox loaded from its row: its fields from the row's spec object
	 * (NULL when the row has none or it is unreadable: its defaults). */
	void (*load)(struct node *n, struct sandbox *sb, const json *spec);
	/* The guest channel's callbacks, on its reader thread: they only touch
	 * memory and queue work. Every value was parsed from untrusted guest
	 * bytes by src/guestproto. */
	void (*on_output)(struct sandbox *sb, uint32_t pid, int fd, uint64_t off,
			  const void *data, size_t len);
	void (*on_exit)(struct sandbox *sb, uint32_t pid, int exit_code, int sig);
	/* The guest is being replaced (sandbox_gc_retire), sb->mu held: why
	 * the old one's work is lost, procs the process image of the snapshot
	 * the new one starts from (NULL: none). */
	void (*retire_locked)(struct sandbox *sb, const char *why, const char *procs);
	/* The last reference is gone: free its fields. */
	void (*free)(struct sandbox *sb);
};

/* Add f (static storage) to the features (once: a second add of the same
 * one is ignored). */
void sandbox_feature_add(const struct sandbox_feature *f);

/* sandbox.c */
struct sandbox *sandbox_new(struct node *n, const char *id);
void sandbox_ref(struct sandbox *sb);
void sandbox_unref(struct sandbox *sb);
/* Ref'd sandbox of this tenant (tenant NULL = any), or NULL. */
struct sandbox *sandbox_find(struct node *n, const char *id, const char *tenant);
void sandbox_map_insert(struct node *n, struct sandbox *sb);   /* takes the map's ref */
void sandbox_map_insert_locked(struct node *n, struct sandbox *sb);   /* n->mu held */
/* Insert sb (the map takes its ref) unless a sandbox with its id is there:
 * then that one, with a new reference for the caller, and sb stays out. */
struct sandbox *sandbox_map_insert_unique(struct node *n, struct sandbox *sb);
void sandbox_map_remove(struct node *n, struct sandbox *sb);
/* The map's sandbox of (tenant, Idempotency-Key), or NULL; n->mu held, no
 * reference taken. */
struct sandbox *sandbox_find_idem_locked(struct node *n, const char *tenant, const char *key);
/* Unlink sb from the map (n->mu held); true if it was there. The map's
 * reference passes to the caller. */
bool sandbox_map_unlink_locked(struct node *n, struct sandbox *sb);
void sandbox_counts(struct node *n, size_t counts[SB__COUNT]);
/* The state setter (state.h) of every node: assigns a sandbox's state and
 * moves it between the node's per-state counts. */
void sandbox_state_setter(enum sb_state *cur, enum sb_state to);
/* How many sandboxes of the map are live (state_is_live), for the node's
 * max_sandboxes. Caller holds n->mu. */
size_t sandbox_live_locked(struct node *n);
/* The jail spec nodemgr is asked for sb with: its id, template and limits
 * (the rest zero). */
void sandbox_jail_spec(const struct sandbox *sb, struct nm_sandbox_spec *spec);
void sandbox_render(struct jw *w, struct sandbox *sb);       /* takes sb->mu */
/* sb->prog (each takes sb->mu): start or move to a phase (done and total
 * as given), move to a phase keeping done (total now known), add to done
 * (never past a known total). */
void sandbox_progress_set(struct sandbox *sb, const char *op, const char *phase,
			  const char *unit, uint64_t done, uint64_t total);
void sandbox_progress_total(struct sandbox *sb, const char *phase, uint64_t total);
void sandbox_progress_add(struct sandbox *sb, uint64_t n);
void sandbox_respond(struct http_conn *c, int status, struct sandbox *sb);
/* Set key of the sandbox's spec row to v (NULL: remove it), the rest kept:
 * what a restarted node rebuilds the sandbox from. */
int sandbox_spec_set(struct node *n, struct sandbox *sb, const char *key, const json *v,
		     err_t *err);
/* A sandbox whose first write (create's or fork's) rolled back, so it has
 * no row: pending or starting → deleted in memory only (state_set), which
 * wakes whoever waits on it (a repeated Idempotency-Key), and out of the
 * map. The caller still holds its own reference. */
void sandbox_forget(struct node *n, struct sandbox *sb);
/* One transaction around a sandbox's row and its move along the table:
 * write() runs inside it, writing the row and calling state_transition with
 * STATE_IN_TX, so the row and the events row land together or not at all.
 * Committed when write returns >= 0, rolled back otherwise. Returns 0, or
 * write's or the DB's error (-errno). A transition made inside has moved
 * sb->state even when the transaction then rolls back; the caller decides
 * what memory says then. */
int sandbox_tx(struct node *n, struct sandbox *sb,
	       int (*write)(struct node *n, struct sandbox *sb, const void *arg, err_t *err),
	       const void *arg, err_t *err);
struct guestconn *sandbox_gc_get(struct sandbox *sb);          /* NULL unless running */
void sandbox_gc_put(struct sandbox *sb);
/* Detach sb's channel once no thread uses it any more (port relays are
 * ended rather than waited for); caller closes it. sb->mu held. */
struct guestconn *sandbox_gc_take_locked(struct sandbox *sb);
/* sb's guest is gone (a rollback or crash recovery replaces it): its
 * running processes end as lost (why), those of a full snapshot's image
 * come back (procs, NULL: none), and its channel is detached once no thread
 * uses it (port relays are ended) and closed, so no callback of the old
 * guest runs after this; chan_closed is cleared for the next guest. */
void sandbox_gc_retire(struct sandbox *sb, const char *why, const char *procs);
/* The guest channel's callbacks (arg: the sandbox), which hand output and
 * exits to the features' hooks and a close to the reaper. */
extern const struct guestconn_cbs sandbox_guest_cbs;
/* Load a row (columns: SANDBOX_COLS) into a new, unmapped sandbox. */
#define SANDBOX_COLS "id, tenant_id, template, template_version, backend, desired, observed," \
	" spec, metadata, idem_key, error, created_at, node"
struct sandbox *sandbox_from_row(struct node *n, const struct db_rows *rows, int row);
/* Does tenant own a row for id that is retired (observed = deleted)? */
bool sandbox_is_deleted(struct node *n, const char *id, const char *tenant);
/* Refs to up to max of tenant's sandboxes after (ms, id) (all of them from
 * the start when !cursor), in list order, into v; how many. */
size_t sandbox_list_take(struct node *n, const char *tenant, bool cursor, int64_t ms,
			 const char *id, struct sandbox **v, size_t max);

/* reaper.c: one thread runs every timed or deferred action; fire is what
 * a due timer does (the node's, timers.c). */
int reaper_start(struct node *n, void (*fire)(struct node *n, const struct timer *t), err_t *err);
void reaper_stop(struct node *n);
/* due_ms on CLOCK_MONOTONIC (0 = now). */
void reaper_add(struct node *n, uint64_t due_ms, enum timer_kind kind, const char *sb_id,
		uint64_t serial);

/* clock.c: a sandbox's clocks (its sched fields, policy.h): the
 * scheduler's clock, activity, and the TTL's paused time. */
int64_t sched_now(struct node *n);
/* A client used the sandbox (exec, files, connect): counts as activity. */
void sched_touch(struct sandbox *sb);
/* sb->mu held: the sandbox moved to `to` (pause/resume accounting). */
void sched_on_state_locked(struct sandbox *sb, int to);
/* A sandbox loaded at a node start: its TTL clock (paused time, a fresh
 * budget after a timeout pause) rebuilt from its event log, so a restart
 * does not count paused time as active. -1 with err on a DB error. */
int sched_ttl_replay(struct node *n, struct sandbox *sb, err_t *err);
/* Wall ms at which the TTL runs out (sb->mu held); 0 when none. */
int64_t sched_ttl_deadline_locked(const struct sandbox *sb);

/* guest.c */
/* vm: a turn to start a guest (create, rollback, fork child, restore),
 * taken before the backend starts QEMU and given back once the guest is up
 * or failed; false (nothing to give back) for other backends. */
bool vmstart_enter(struct node *n, const struct sandbox *sb);
void vmstart_leave(struct node *n, bool taken);
/* A freshly started jail's guest comes up for sb (create, fork, rollback,
 * recovery): open the channel (consumes chan_fd), run the backend's
 * post-ready step, then record jail_pid and the move to running (reason
 * `why`) in one transaction and install sb->gc. On failure the channel is
 * closed and err says why, prefixed with `what`. */
int sandbox_guest_up(struct node *n, struct sandbox *sb, const struct nm_sandbox_spec *nspec,
		     int chan_fd, pid_t jail_pid, const char *why, const char *what, err_t *err);
/* The same, marking its steps in ph (when not NULL): "hello" (the guest
 * spoke), "reset" (the backend's post-ready step answered) and "ready"
 * (the move to running written). */
struct phases;
int sandbox_guest_up_timed(struct node *n, struct sandbox *sb, const struct nm_sandbox_spec *nspec,
			   int chan_fd, pid_t jail_pid, const char *why, const char *what,
			   struct phases *ph, err_t *err);

#endif
