/* doctor.h - what this host can do for Airlock, with the fix for each gap.
 *
 * One set of checks, run in two places: by `airlock doctor` on the host
 * itself (as root, no server needed) and by nodemgr (root) for
 * GET /v1/node/doctor. The checks only read: files under /sys, /proc and
 * /dev, statfs/statvfs, and two programs' answers (`qemu-system-x86_64
 * --version`, `nft list tables`); nothing is loaded, mounted or changed.
 */
#ifndef AIRLOCK_DOCTOR_H
#define AIRLOCK_DOCTOR_H

#include <stdbool.h>
#include <stddef.h>

#include "../lib/util.h"

/* What /dev/kvm offers a stock guest kernel. */
enum doctor_kvm {
	DOCTOR_KVM_ABSENT,    /* no /dev/kvm, or it does not open */
	DOCTOR_KVM_PVM_ONLY,  /* kvm_pvm without kvm_intel/kvm_amd: stock kernels hang */
	DOCTOR_KVM_USABLE,    /* kvm_intel or kvm_amd (a boot probe has the last word) */
};
/* Classify /dev/kvm; why gets a sentence. Also vm-accel.c's first step. */
enum doctor_kvm doctor_kvm_state(char *why, size_t cap);

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
