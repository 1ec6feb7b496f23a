/* node-internal.h - shared between the files of src/node; not a public API.
 *
 * Locking, outermost first:
 *   node->sched_mu (one scheduler pass at a time; schedule.c)
 *   node->tmpl_mu  (template builds; never held across a build)
 *   node->mu       (the sandbox map and counters; short)
 *   sb->mu         (one sandbox: state, channel pointer, process table, rings)
 *   node->jan_mu   (timer list; leaf)
 *   the db handle's own mutex (leaf; taken inside db_* calls)
 * No guestconn_* or nm_* / backend call is ever made while holding sb->mu or
 * node->mu: those calls wait on replies that the channel's reader thread
 * delivers, and the reader's callbacks take sb->mu.
 */
#ifndef AIRLOCK_NODE_INTERNAL_H
#define AIRLOCK_NODE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "../backend/backend.h"
#include "../guestconn/guestconn.h"
#include "../byok/kms.h"
#include "../db/db.h"
#include "../lib/err.h"
#include "../lib/http.h"
#include "../lib/json.h"
#include "../lib/util.h"
#include "node.h"
#include "ring.h"
#include "schedule.h"
#include "state.h"
#include "theap.h"

#define NODE_JSON_MAX (1u << 20)        /* JSON request bodies */
#define NODE_FILE_MAX (16u << 20)       /* file reads and writes */
#define NODE_PROC_KEEP 256              /* exited processes kept per sandbox */
#define NODE_PROC_STRAYS 16             /* records for pids the node never exec'd */
#define NODE_BUCKETS 256
#define NODE_CHUNK (48u * 1024)         /* raw bytes per stdout/stderr line */
/* Event reasons of re-adopting a paused sandbox after a node restart: it is
 * thawed to say HELLO, then paused again. The TTL replay skips the pair. */
#define REASON_READOPT_RESUME "resumed to re-adopt after restart"
#define REASON_READOPT_PAUSE "paused again after restart"

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

enum timer_kind { TIMER_SANDBOX_TIMEOUT, TIMER_PROC_TIMEOUT, TIMER_CHAN_CLOSED, TIMER_SCHEDULE };

struct timer {
	uint64_t due_ms;        /* CLOCK_MONOTONIC */
	enum timer_kind kind;
	char sb_id[65];
	uint64_t serial;        /* TIMER_PROC_TIMEOUT */
};

struct tbuild;

/* metrics.c: latency histograms of the node's operations (GET /metrics).
 * Counters are updated with relaxed atomics, read without a lock. */
enum node_op { OP_CREATE, OP_EXEC, OP_SNAPSHOT, OP_FORK, OP__COUNT };
#define OP_BUCKETS 14
struct op_histo {
	uint64_t le[OP_BUCKETS];   /* observations <= metrics_bounds_us[i] */
	uint64_t count, sum_us;
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
	 * restore) and their READY (create.c vmstart_enter): at most
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

	/* tmplstore.c: downloads in flight (tstore_mu); one publish at a time
	 * (tpub_mu, held through an upload, so never by a download's wait). */
	pthread_mutex_t tstore_mu, tpub_mu;
	struct tfetch *tfetches;
	uint64_t tstore_fetches;   /* atomic: templates fetched from the store */
	/* tmplstore.c: the publisher, which uploads template versions when they
	 * become ready and vm memory bases when they are first used. */
	pthread_mutex_t pub_mu;
	pthread_cond_t pub_cv;
	pthread_t pub_thread;
	bool pub_init, pub_started, pub_stop;
	struct pubjob *pub_q;
	char *pub_done[64];        /* keys published (or found) since start, a ring */
	unsigned pub_done_next;

	/* cluster.c: this node's row in the nodes table and its heartbeat. */
	int64_t generation;
	pthread_mutex_t beat_mu;
	pthread_cond_t beat_cv;    /* CLOCK_MONOTONIC */
	pthread_t beat_thread;
	bool beat_init, beat_started, beat_stop, beat_now;

	pthread_mutex_t jan_mu;
	pthread_cond_t jan_cv;  /* CLOCK_MONOTONIC */
	struct theap timers;    /* of struct timer *, earliest due_ms first */
	bool jan_stop;
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
};

/* This node's name in the shared database ("" when it has none). */
static inline const char *node_me(const struct node *n)
{
	return n->cfg->node_name ? n->cfg->node_name : "";
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

/* reply.c: answering, shared by the handlers. */
void node_respond_err(struct http_conn *c, const err_t *e);
void node_errno_to_http(int code, int *status, const char **ecode);
/* 409 `conflict` with the sandbox's current state next to the error:
 * {"error":{"code":"conflict","message"},"state":"paused"}. */
void node_respond_conflict(struct http_conn *c, enum sb_state st, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Answer an error about sb: 409 with its state for -EBUSY, else as
 * node_respond_err. */
void sandbox_respond_err(struct http_conn *c, struct sandbox *sb, const err_t *e);

/* request.c: reading a request, shared by the handlers. */
/* Parse a JSON object body (size-limited); on failure answers 400/413 and
 * returns NULL. allowed: NULL-terminated list of keys. Caller owns. */
json *node_body_object(struct http_req *req, struct http_conn *c, const char *const *allowed);

/* nodeinfo.c: the node manager's answer about the node's size (asked once,
 * then kept), and GET /v1/node (admin). */
int node_info_get(struct node *n, struct nm_node_info *out, err_t *err);
void handle_node(struct node *n, struct http_conn *c);
/* GET /v1/node/doctor (admin): nodemgr's host checks (src/doctor). */
void handle_node_doctor(struct node *n, struct http_conn *c);

/* network.c: tell the gateway sb's address and policy (ns only; a no-op
 * for other backends or with the network off), or forget it; the
 * /network endpoints and the gateway's start-up list. push: addr is the
 * address the backend gave when it started or adopted sb, which sb keeps
 * from then on; NULL: the one sb has (a new policy). */
int sandbox_net_push(struct node *n, struct sandbox *sb, const char *addr, err_t *err);
void sandbox_net_forget(struct node *n, struct sandbox *sb);
void handle_network(struct node *n, struct sandbox *sb, bool log, struct http_req *req,
		    struct http_conn *c);
void handle_internal_network(struct node *n, struct http_conn *c);

/* metrics.c: count one successful operation that took us microseconds;
 * GET /metrics (admin) in the Prometheus text format. */
void metrics_observe(struct node *n, enum node_op op, uint64_t us);
void handle_metrics(struct node *n, struct http_conn *c);
/* A create's jail is up: count it as a warm-pool hit or miss. */
void metrics_pool_create(struct node *n, const char *backend, bool hit);
/* GET /v1/sandboxes/{id}/metrics (owner): the sandbox's use now. */
void handle_sandbox_metrics(struct node *n, struct sandbox *sb, struct http_conn *c);

/* ready.c: GET /internal/ready, nodemgr's and the gateway's status as the
 * node sees them (200 all up, 503 otherwise), each probe time-bounded. */
void handle_internal_ready(struct node *n, struct http_conn *c);

/* sandbox.c: the map, the JSON form, the row, the guest channel, loading,
 * list and get. */
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
 * (never past a known total), end. */
void sandbox_progress_set(struct sandbox *sb, const char *op, const char *phase,
			  const char *unit, uint64_t done, uint64_t total);
void sandbox_progress_total(struct sandbox *sb, const char *phase, uint64_t total);
void sandbox_progress_add(struct sandbox *sb, uint64_t n);
void sandbox_progress_end(struct sandbox *sb);
void sandbox_respond(struct http_conn *c, int status, struct sandbox *sb);
/* A sandbox whose first write (create's or fork's) rolled back, so it has
 * no row: pending or starting → deleted in memory only (state_set), which
 * wakes whoever waits on it (a repeated Idempotency-Key), and out of the
 * map. The caller still holds its own reference. */
/* Set key of the sandbox's spec row to v (NULL: remove it), the rest kept:
 * what a restarted node rebuilds the sandbox from. */
int sandbox_spec_set(struct node *n, struct sandbox *sb, const char *key, const json *v,
		     err_t *err);
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
extern const struct guestconn_cbs sandbox_guest_cbs;
/* Load a row (columns: SANDBOX_COLS) into a new, unmapped sandbox. */
#define SANDBOX_COLS "id, tenant_id, template, template_version, backend, desired, observed," \
	" spec, metadata, idem_key, error, created_at, node"
struct sandbox *sandbox_from_row(struct node *n, const struct db_rows *rows, int row);
/* Does tenant own a row for id that is retired (observed = deleted)? */
bool sandbox_is_deleted(struct node *n, const char *id, const char *tenant);
void handle_sandboxes_list(struct node *n, struct http_req *req, struct http_conn *c,
			   const char *tenant);
void handle_sandbox_get(struct node *n, struct sandbox *sb, struct http_conn *c);

/* create.c */
void handle_sandboxes_create(struct node *n, struct http_req *req, struct http_conn *c,
			     const char *tenant);
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

/* lifecycle.c: operations on a sandbox after its create (state.c decides
 * what is legal; an illegal request fails with -EBUSY naming the current
 * state, an unsupported one with -EOPNOTSUPP). resume with why = NULL is
 * the client's explicit resume, which is a conflict on a running sandbox;
 * with a reason (connect, exec) a running sandbox is fine and costs one
 * lock. */
int sandbox_pause(struct node *n, struct sandbox *sb, err_t *err);
/* The same with the event's reason (the scheduler: "idle", the TTL: "timeout"). */
int sandbox_pause_why(struct node *n, struct sandbox *sb, const char *why, err_t *err);
int sandbox_resume(struct node *n, struct sandbox *sb, const char *why, err_t *err);
/* The channel of a sandbox that is running or paused, resuming a paused one
 * first (why: the event's reason, e.g. "resumed for exec"). NULL with err
 * set otherwise: -EBUSY naming the state (409), or the backend's error.
 * Pair with sandbox_gc_put. */
struct guestconn *sandbox_gc_use(struct node *n, struct sandbox *sb, const char *why,
				 err_t *err);
/* timeout.c: POST /v1/sandboxes/{id}/timeout */
void handle_sandbox_timeout(struct node *n, struct sandbox *sb, struct http_req *req,
			    struct http_conn *c);
void handle_sandbox_lifecycle(struct node *n, struct sandbox *sb, const char *op,
			      struct http_conn *c);
/* Tear down and retire (delete) or mark failed. Returns 0 or -errno. */
int sandbox_delete(struct node *n, struct sandbox *sb, const char *reason, err_t *err);
void sandbox_fail(struct node *n, struct sandbox *sb, const char *reason);

/* byok.c: artifact sealing on? (config encrypt_artifacts; off only for the
 * control test and the benchmark's baseline); the create gate (-EKEYREVOKED
 * when the tenant's key service refuses its key); the revocation watch; the
 * /v1/tenants/{t}/encryption routes (admin). */
bool byok_on(const struct node *n);
int byok_create_gate(struct node *n, const char *tenant, err_t *err);
void byok_start(struct node *n);
void byok_stop(struct node *n);
/* GET /v1/node/doctor: nodemgr's report plus the tenants' key services'
 * checks (insecure_http shows there). Caller frees. */
char *byok_doctor_amend(struct node *n, const char *report);
void handle_tenant_encryption(struct node *n, struct http_req *req, struct http_conn *c,
			      const char *tenant, bool rotate);
/* sb → failed with reason (its row, an events row and sb->error): memory
 * follows even when the row cannot be written. sb is live or stopped. The
 * caller holds sb->mu, or (reconcile) nobody else can reach sb yet. */
void sandbox_mark_failed(struct node *n, struct sandbox *sb, const char *reason);
void sandbox_on_timeout(struct node *n, const char *id);
void sandbox_on_chan_closed(struct node *n, const char *id);
void sandbox_schedule_timeout(struct node *n, struct sandbox *sb);
void sandbox_stop_all(struct node *n);
void handle_sandbox_delete(struct node *n, const char *id, const char *tenant,
			   struct http_conn *c);

/* ports.c: /v1/sandboxes/{id}/ports/{port}/... and /tunnel/{port}. Returns
 * false when the request is not one of those (it is then routed as usual). */
bool ports_route(struct node *n, struct http_req *req, struct http_conn *c, const char *tenant);
/* A service's answer head h[0..n) (untrusted, through its blank line) with
 * its hop-by-hop headers replaced by ours, appended to out. Returns the
 * status, or -1 when it is no HTTP/1.x answer head (out unchanged then).
 * Fuzzed: tests/fuzz/fuzz-node-ports.c. */
int ports_rewrite_head(const char *h, size_t n, struct buf *out);

/* proc-table.c: the process table (all but the callbacks with sb->mu held). */
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
/* exec.c */
void handle_exec(struct node *n, struct sandbox *sb, struct http_req *req, struct http_conn *c);
/* processes.c: stream p's output as NDJSON from off[0] (stdout) and off[1]
 * (stderr); with follow until its exit line, else what is buffered. The
 * response has begun; lines already in out go first. */
void proc_stream(struct node *n, struct sandbox *sb, struct proc *p, struct http_conn *c,
		 uint64_t off[2], bool follow, struct buf *out);
void handle_processes(struct node *n, struct sandbox *sb, struct http_req *req,
		      struct http_conn *c);
/* rest: "output", "stdin", "signal", "resize" */
void handle_process(struct node *n, struct sandbox *sb, uint32_t pid, const char *rest,
		    struct http_req *req, struct http_conn *c);

/* files.c; sub: "" (GET/PUT/DELETE), "stat", "list", "mkdir", "rename" */
void handle_files(struct node *n, struct sandbox *sb, const char *sub, struct http_req *req,
		  struct http_conn *c);
/* files-watch.c: GET .../files/watch (NDJSON until the client leaves). */
void handle_files_watch(struct node *n, struct sandbox *sb, struct http_req *req,
			struct http_conn *c);

/* console.c: GET .../console (501 when the backend has none) */
void handle_console(struct node *n, struct sandbox *sb, struct http_conn *c);
void handle_events(struct node *n, struct sandbox *sb, struct http_req *req, struct http_conn *c);
/* GET /v1/sandboxes/events: the tenant's transitions as Server-Sent Events. */
void handle_sandboxes_events(struct node *n, struct http_req *req, struct http_conn *c,
			     const char *tenant);

/* snapshots.c: .../snapshots (snap NULL: POST create, GET list) and
 * .../snapshots/{snap} (DELETE); POST .../rollback. 501 when the backend
 * has no disk snapshots. */
void handle_snapshots(struct node *n, struct sandbox *sb, const char *snap, struct http_req *req,
		      struct http_conn *c);
void handle_rollback(struct node *n, struct sandbox *sb, struct http_req *req,
		     struct http_conn *c);
/* The one way a snapshot is made (the API and the scheduler): kind "disk"
 * (anything else -EOPNOTSUPP for now), named name (NULL: its id; -EEXIST
 * when taken), stamped with sched_now(); scheduled marks it for retention.
 * Holds lc_busy while the backend works (-EBUSY naming the state unless
 * running or paused). *out_id (may be NULL; caller owns) gets its id. */
int snapshot_take(struct node *n, struct sandbox *sb, const char *name, const char *kind,
		  bool scheduled, char **out_id, err_t *err);
/* The process table kept with snapshot snap_id (NULL: none, as for every
 * disk snapshot). Caller frees. */
char *snapshot_procs(struct node *n, const char *snap_id);
/* Snapshot ref (id or name) of sb: rows holds one row of SNAP_COLS (id
 * first; caller frees), or -ENOENT naming it. */
int snapshot_find(struct node *n, struct sandbox *sb, const char *ref, struct db_rows *rows,
		  err_t *err);
/* Delete snapshot snap_id of sb: the backend's copy, then the row. */
int snapshot_remove(struct node *n, struct sandbox *sb, const char *snap_id, err_t *err);

/* ---- quotas (quota.c) --------------------------------------------------- */

/* Limits over the node's maxima per sandbox (config max_sandbox_*): -1
 * with msg naming the limit and the maximum; else 0. */
int quota_check_limits(const struct node *n, const struct nm_limits *l, char *msg, size_t sz);
/* May tenant hold one more sandbox with limits l? 0, or -EDQUOT naming the
 * quota. Counts the rows: call it in the transaction that inserts the row. */
int quota_admit_sandbox(struct node *n, const char *tenant, const struct nm_limits *l,
			err_t *err);
/* May sb hold one more snapshot (scheduled: the scheduler's)? size < 0
 * before it is taken, else its size (its row not in yet). Checks
 * max_snapshots, full snapshots' bytes against sb's disk_mb, and the
 * tenant's snapshots and snapshot_mb. 0, or -EDQUOT naming the limit. */
int quota_admit_snapshot(struct node *n, struct sandbox *sb, bool scheduled, bool full,
			 int64_t size, err_t *err);

/* recover.c: the guest channel of a running or paused sandbox closed by
 * itself (cause): roll it back to its latest full, else disk, snapshot.
 * false when it has none (or the backend cannot): the caller fails it. */
bool sandbox_recover(struct node *n, struct sandbox *sb, const char *cause);
/* fork.c: POST .../fork (501 when the backend cannot fork). */
void handle_fork(struct node *n, struct sandbox *sb, struct http_req *req, struct http_conn *c);
/* templates.c */
/* Newest ready version of name; builds a built-in (debian, busybox) on
 * demand, sharing one build among concurrent callers. -ENOENT if unknown. */
int template_resolve(struct node *n, const char *name, uint32_t *version, err_t *err);
/* The image defaults of template name/version (a build from an image
 * records them; docs/DESIGN.md "Templates from OCI images"), checked: an
 * object with "env" (object of strings), "workdir" (absolute path), "user"
 * (name or uid[:gid]), "entrypoint" and "cmd" (arrays of strings), each
 * optional. *out is a copy the caller owns, NULL when there are none.
 * Asked of nodemgr once per version, then cached. */
int template_image_config(struct node *n, const char *name, uint32_t version, json **out,
			  err_t *err);
/* tmplstore.c: publish: make sure template name/version is in the object
 * store (the first call uploads its full stream), *uuid its identity.
 * fetch: the local version of name whose identity is uuid, downloaded and
 * received first when there is none (one download per identity at a time);
 * sha (may be NULL or ""): the stream's SHA-256 the manifest names, checked. */
int tmplstore_publish(struct node *n, const char *name, uint32_t version, char uuid[37],
		      char sha[65], err_t *err);
int tmplstore_fetch(struct node *n, const char *name, const char *uuid, const char *sha,
		    uint32_t *version, err_t *err);
/* vm memory bases (tmplstore.c): publish: make sure the RAM file a vm
 * memory artifact of spec's template and shape is a difference from is in
 * the store (want: its SHA-256 as the export answered; NULL: the template's
 * current one), sha its digest, osha and osize the object's. fetch: make
 * sure the base sha is here (nodemgr's template file or its cache),
 * downloading the object, which must be osize bytes with SHA-256 osha, into
 * nodemgr's cache first (one download per base at a time). */
/* The publisher (when there is an object store): queue a template
 * version (a build just became ready) or the memory base of a vm spec's
 * template and shape (a vm sandbox was created from it) for upload off the
 * request path; each is published at most once (a HEAD when it is there).
 * start also queues every ready version this node has not published. */
void tmplstore_start(struct node *n);
void tmplstore_stop(struct node *n);
void tmplstore_queue_template(struct node *n, const char *name, uint32_t version);
void tmplstore_queue_base(struct node *n, const struct nm_sandbox_spec *spec);
int membase_publish(struct node *n, const struct nm_sandbox_spec *spec, const char *want,
		    char sha[65], char osha[65], uint64_t *osize, err_t *err);
int membase_fetch(struct node *n, const struct nm_sandbox_spec *spec, const char *sha,
		  const char *osha, uint64_t osize, err_t *err);
/* move.c: take over a suspended sandbox whose row names another node
 * (lost, down, or the request asked for this one): the row's node is
 * swapped to this one (compare-and-set), and it is loaded here, suspended.
 * A new reference, or NULL with err (-ENOENT: no such suspended sandbox of
 * tenant; -EBUSY: another node took it first; -EOPNOTSUPP: this node has
 * no object store or not the sandbox's backend). */
struct sandbox *suspend_claim(struct node *n, const char *id, const char *tenant, err_t *err);

/* cluster.c: register this node (state up, next generation) and write its
 * first heartbeat; then beat in the background until cluster_stop, which
 * writes state down. */
int cluster_register(struct node *n, err_t *err);
int cluster_start(struct node *n, err_t *err);
/* sb is suspended and its row names another node (it moved there): out of
 * the map (the caller's reference stays); true when so. */
bool cluster_forget_if_moved(struct node *n, struct sandbox *sb);
/* Beat now rather than at the next tick (a template became ready). */
void cluster_poke(struct node *n);
void cluster_stop(struct node *n);

/* admin: show the templates' sources and errors (host paths) too. */
void handle_templates_list(struct node *n, struct http_req *req, struct http_conn *c,
			   bool admin);
void handle_templates_create(struct node *n, struct http_req *req, struct http_conn *c);
void handle_templates_delete(struct node *n, const char *name, struct http_conn *c);
void templates_reconcile(struct node *n);
void templates_cleanup(struct node *n);

/* suspend.c: suspend to the object store, restore from it. sandbox_suspend
 * and sandbox_restore fail with -EBUSY naming the state, -EOPNOTSUPP when
 * the backend cannot, -EHOSTUNREACH when the store cannot be used (503),
 * -EBADMSG when an artifact does not match its manifest (the message
 * names it). With c (the request that asked), the answer (200, the
 * sandbox) goes as soon as the sandbox is suspended and restorable, or
 * running again; the rest (a suspend frees the node's jail, subvolume and
 * address; a restore drops its snapshot and objects) follows on the
 * caller's thread. A suspend holds the sandbox's lifecycle until then. */
const char *sandbox_suspend_kind(const struct sandbox *sb);
int sandbox_suspend(struct node *n, struct sandbox *sb, const char *why, struct http_conn *c,
		    err_t *err);
int sandbox_restore(struct node *n, struct sandbox *sb, const char *why, struct http_conn *c,
		    err_t *err);
void handle_sandbox_suspend(struct node *n, struct sandbox *sb, const char *op,
			    struct http_conn *c);
/* The backend's step before a memory snapshot (vm: the guest drops its
 * page cache and zeroes its free pages), on a running sandbox; best
 * effort. Before a suspend, and before the idle pause that the second
 * idle tier will suspend (a paused guest cannot do it). */
void suspend_reclaim(struct node *n, struct sandbox *sb);
/* "suspend", and when suspended "snapshot_id" and "suspended_bytes". */
void suspend_render_locked(struct jw *w, struct sandbox *sb);
/* A loaded row's suspensions row into sb (reconcile). */
void suspend_load(struct node *n, struct sandbox *sb);
/* Delete sb's objects in the store (keep_current: but its restorable one). */
void suspend_forget_objects(struct node *n, struct sandbox *sb, bool keep_current);
/* At start: a suspending row goes back to paused (susp_resume says whether
 * it ran), a restoring one back to suspended. */
void suspend_reconcile(struct node *n, struct sandbox *sb);
/* false when the request said auto_restore=false on a suspended sandbox
 * (answered 409). */
bool suspend_gate(struct sandbox *sb, struct http_req *req, struct http_conn *c);

/* reconcile.c */
void node_reconcile(struct node *n);

/* reaper.c: one thread runs every timed or deferred action. */
int reaper_start(struct node *n, err_t *err);
void reaper_stop(struct node *n);
/* due_ms on CLOCK_MONOTONIC (0 = now). */
void reaper_add(struct node *n, uint64_t due_ms, enum timer_kind kind, const char *sb_id,
		uint64_t serial);

#endif
