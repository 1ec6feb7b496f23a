/* doctor.h - what this host can do for Airlock, with the fix for each gap.
 *
 * One set of checks, run in two places: by `airlock doctor` on the host
 * itself (as root, no server needed) and by nodemgr (root) for
 * GET /v1/node/doctor. The checks only read: files under /sys, /proc and
 * /dev, statfs/statvfs, and two programs' answers (`qemu-system-x86_64
 * --version`, `nft list tables`); nothing is loaded, mounted or changed.
 * One check runs something: KVM is judged by a test guest of a few bytes
 * run through the KVM API in a child process (kvm-probe.c), bounded.
 */
#ifndef AIRLOCK_DOCTOR_H
#define AIRLOCK_DOCTOR_H

#include <stdbool.h>
#include <stddef.h>

#include "../lib/util.h"

/* What /dev/kvm offers a stock guest kernel. */
enum doctor_kvm {
	DOCTOR_KVM_ABSENT,    /* no /dev/kvm, or it does not open */
	DOCTOR_KVM_BROKEN,    /* it opens, but a test guest does not run (doctor_kvm_probe) */
	DOCTOR_KVM_PVM_ONLY,  /* a test guest runs, but kvm_pvm without kvm_intel/kvm_amd:
			       * stock kernels hang */
	DOCTOR_KVM_USABLE,    /* a test guest runs (a boot probe has the last word) */
};
/* Classify the KVM device dev ("/dev/kvm"; another path in tests) by
 * running a test guest on it; why gets a sentence. Bounded: at most the
 * probe's timeout (DOCTOR_KVM_PROBE_MS) and a fork. */
enum doctor_kvm doctor_kvm_check(const char *dev, char *why, size_t cap);
/* doctor_kvm_check("/dev/kvm"); also vm-accel.c's first step. */
enum doctor_kvm doctor_kvm_state(char *why, size_t cap);

#define DOCTOR_KVM_PROBE_MS 2000
/* Run a tiny real-mode guest through the KVM API on dev (mov al,0x42;
 * out 0x10,al; hlt) and expect exit IO of 0x42 on port 0x10, then HLT.
 * 0 when it did; -errno with why saying what went wrong (-ETIMEDOUT: no
 * answer within timeout_ms, the child running it killed). */
int doctor_kvm_probe(const char *dev, int timeout_ms, char *why, size_t cap);
/* The same with other code, loaded at guest address 0x1000 and entered in
 * real mode there (tests: a guest that never exits, a wrong value). */
int doctor_kvm_run_code(const char *dev, const unsigned char *code, size_t len, int timeout_ms,
			char *why, size_t cap);

/* nodemgr's boot probe of the guest kernel under KVM is remembered in
 * DATA/run/accel.json for one kernel (vm-accel.c). doctor_accel_key: that
 * kernel's key ("size-mtime" of VM_DIR/vmlinuz), NULL without one; caller
 * frees. doctor_accel_remembered: true with accel ("kvm"|"tcg") and reason
 * when the file holds a decision for the kernel in vm_dir. */
char *doctor_accel_key(const char *vm_dir);
bool doctor_accel_remembered(const char *data_dir, const char *vm_dir, char *accel, size_t acap,
			     char *reason, size_t rcap);

struct doctor_opts {
	const char *data_dir;         /* DATA (pool, templates, pool.img) */
	const char *vm_dir;           /* holds vmlinuz and initramfs.cpio.gz */
	const char *vm_accel;         /* config: "auto" (or NULL), "kvm", "tcg" */
	const char *default_backend;  /* "ns" or "vm": decides "ok" */
	/* airlockd's config file, checked for secrets others can read
	 * (lib/secret.h); NULL: not checked. */
	const char *config_path;
	/* nodemgr's decision at start-up (vm-accel.c), when known: it is
	 * reported instead of the guess from doctor_kvm_state. NULL: unknown. */
	const char *accel_decided;
	const char *accel_reason;
	/* The config's ports_domain and where clients reach the API
	 * (advertise_url, else listen): the `ports_domain` check warns when the
	 * host-routed port URLs are not a site apart from the API's host.
	 * ports_domain NULL: no such check. */
	const char *ports_domain;
	const char *api_url;
};

/* Run every check and append the report to out as one JSON object:
 *   {"ok":bool,"default_backend":"ns",
 *    "backends":{"ns":{"can_run":bool,"missing":["cgroup",...]},
 *                "vm":{"can_run":bool,"accel":"kvm"|"tcg","accel_reason":"...",
 *                      "missing":[...]}},
 *    "checks":[{"name","status":"ok"|"warn"|"fail","detail","fix"?},...]}
 * "ok" is whether the default backend can run. Returns that too. */
bool doctor_run(const struct doctor_opts *o, struct buf *out);

#endif
