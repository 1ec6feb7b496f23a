/* vm-internal.h - what the files of the vm backend's privileged half share
 * (private to src/nodemgr/vm/; the rooms above call the vm_* in vm.h):
 *
 *   vm-verbs.c    setup, the verbs (create, boot in place, freeze)
 *   vm-files.c    a guest's shape, the template cache's and run dir's paths,
 *                 reflinks and removals: every other file calls it
 *   vm-qemu.c     the jail child and QEMU's command line; vm_start
 *   vm-state.c    device and memory state over QMP: restore, full
 *                 snapshots, the template's memory snapshot
 *   vm-pool.c     parked QEMUs: the warm pool and the fork standbys
 *   vm-console.c  the serial console log
 *   vm-delta.c    a RAM file's pages (vm-delta.h)
 *   vm-suspend.c  a full snapshot's memory and devices as suspend artifacts
 *   vm-base.c     memory bases by content
 *   vm-accel.c    kvm or tcg
 */
#ifndef AIRLOCK_NODEMGR_VM_INTERNAL_H
#define AIRLOCK_NODEMGR_VM_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../../lib/err.h"
#include "../core/nodemgr-internal.h"
#include "../net/net.h"
#include "vm.h"

struct qmp;

#define VM_QMP_TIMEOUT_MS 10000

/* s->vm: set once by vm_init (vm-verbs.c); refilling under s->lock. */
struct nm_vm {
	char accel[8];
	char reason[160];
	char *kernel, *initrd, *qemu;
	char *capstone;  /* the libcapstone stand-in (src/qemushim/capstone.c), NULL if absent */
	char *romem;     /* src/qemushim/romem.c, preloaded where RAM maps a file private */
	char *run;       /* DATA/run/vm */
	char *root;      /* DATA/run/nodemgr/vmroot: each jail mounts its tmpfs here, in its own ns */
	gid_t kvm_gid;
	uint32_t tsc_khz;    /* host TSC rate, for the guest's tsc_early_khz (0 = unknown) */
	bool usable;
	bool refilling[2];   /* a refill thread runs, warm pool / fork standbys (under s->lock) */
	bool pending[2];     /* ... and pending_spec's pool is to be topped up after it */
	struct nm_sandbox_spec pending_spec[2];
	/* The warm pool's recent demand per template and shape (its warm
	 * key; the least recently used entry is reused), which sizes it
	 * (warmsize.h). Under s->lock. */
	struct vm_demand {
		char key[96];
		struct warm_demand d;
		uint64_t used_ms;
	} demand[16];
	int console_ep;      /* the console pump's epoll (vm-console.c) */
	uint64_t console_max;   /* the bound of each console.log */
};

/* A guest's RAM and vCPUs, from its spec's limits (vm_shape_of). */
struct vm_shape {
	uint32_t mem_mb, cpus;
};
void vm_shape_of(const struct nm_sandbox_spec *spec, struct vm_shape *sh);

/* How to start one QEMU (vm_start). */
struct vm_launch {
	const char *id;          /* jail id = cgroup name = run dir name */
	uid_t uid;
	const char *disk;        /* host path, read-write */
	const char *mem;         /* host path of the RAM file; NULL = anonymous RAM */
	bool mem_shared;         /* share=on (template boot) or off (clone) */
	bool incoming;           /* -incoming defer -S (clone) */
	bool devices_only;       /* incoming: the devices of a memory-delta snapshot */
	const char *run;         /* host run dir (console.log) */
	const char *hostname;    /* cold boot only: on the kernel command line */
	const char *boot_log;    /* clone: the template boot's console log, copied in first */
	bool background;         /* a fork standby: at nice 19 until taken (standby_go) */
	struct vm_shape sh;
};

/* vm-files.c */
/* pool/templates/<name>/<ver>.vm/m<MB>-c<N>-<tag>: the template's memory
 * snapshot for shape sh (caller frees). */
char *vm_cache_dir(struct nm_server *s, const struct nm_sandbox_spec *spec,
		   const struct vm_shape *sh);
/* The jail id of a template boot ("tmpl-<hash>"), stable per template and shape. */
void vm_template_jail_id(const struct nm_sandbox_spec *spec, const struct vm_shape *sh,
			 char *out, size_t cap);
/* dst = CoW copy of src (FICLONE). */
int vm_reflink(const char *src, const char *dst, err_t *err);
/* Remove name under dfd, a directory tree or not (no links followed). */
int vm_rm_rf_at(int dfd, const char *name);

/* The cgroup limits of a QEMU of shape sh (cpu_millis 0: its vCPUs). */
struct cgroup_limits vm_cgroup_limits(const struct vm_shape *sh, uint32_t cpu_millis);
/* vm-qemu.c: cgroup, run dir, QEMU in its jail (*qpid), its network, the
 * monitor (*q) and the host end of the guest channel (*chan); the caller
 * owns *q and *chan. On failure everything this made is gone (the
 * subvolume and the jail entry are the caller's); once it succeeded, the
 * caller's cleanup must nmnet_detach too. */
int vm_start(struct nm_server *s, const struct vm_launch *l, uint32_t cpu_millis,
	     pid_t *qpid, int *chan, struct qmp **q, err_t *err);

/* vm-state.c: load the saved device state vmstate into a QEMU waiting in
 * -incoming defer, then start its vCPUs. */
int vm_restore_state(struct qmp *q, const char *vmstate, err_t *err);
/* The migration capabilities a restore needs, set ahead (a fork standby
 * at park time); then vm_load_state does the rest of vm_restore_state. */
int vm_restore_caps(struct qmp *q, err_t *err);
int vm_load_state(struct qmp *q, const char *vmstate, err_t *err);
/* vm_template_save (vm-verbs.c) but the warm pool's refill: *saved tells
 * whether a memory snapshot was made (not when discard, or on failure). */
int vm_state_template_save(struct nm_server *s, const struct nm_sandbox_spec *spec, bool discard,
			   bool *saved, err_t *err);

/* vm-console.c: dst (new; 0600 owned by uid, 0644 root's when uid is 0) =
 * the last 64 KiB of the log src (-1 with errno on failure); seed: a
 * clone's console.log in run, from its template boot's log. */
int vm_console_copy_tail(const char *src, const char *dst, uid_t uid);
void vm_console_seed(const char *boot_log, const char *run, uid_t uid);
/* The console pump: one thread for nodemgr's life that copies each QEMU's
 * serial into its console.log, keeping each within max bytes (at least
 * VM_CONSOLE_LOG_MIN; sets s->vm->console_ep and console_max). */
#define VM_CONSOLE_LOG_MIN 4096u
int vm_console_pump_start(struct nm_server *s, uint64_t max, err_t *err);
/* run/console.log opened read-write for the pump (created, owned by uid): an fd
 * (caller owns), or -errno. Before QEMU starts. */
int vm_console_log_open(const char *run, uid_t uid, err_t *err);
/* Hand sock (the host end of QEMU's serial) and log to the pump, which
 * closes both once QEMU closed its end. Consumes both, also on failure. */
int vm_console_attach(struct nm_server *s, int sock, int log, err_t *err);

/* vm-pool.c: take a warm QEMU for a clone of spec (-EAGAIN when none
 * waits), top the warm pool up in the background, and at startup remove
 * what parked QEMUs of a previous run left. */
int vm_warm_take(struct nm_server *s, const struct nm_sandbox_spec *spec,
		 const struct vm_shape *sh, int *chan_dup, pid_t *pid, err_t *err);
void vm_warm_refill(struct nm_server *s, const struct nm_sandbox_spec *spec);
void vm_warm_sweep(struct nm_server *s);

#endif
