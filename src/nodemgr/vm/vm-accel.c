/* vm-accel.c - KVM or TCG for the vm backend, decided once at start-up.
 *
 * It lives in nodemgr (not in the unprivileged backend) because only
 * nodemgr opens /dev/kvm and runs QEMU; GET /v1/node reports the choice and
 * its reason through nm_node_info.
 *
 * Order: the config (vm_accel = kvm|tcg) wins. Otherwise KVM is used only
 * when a test guest of a few bytes runs on /dev/kvm (doctor_kvm_probe: a
 * TCG guest that shows SVM has a /dev/kvm that opens but runs nothing) and
 * KVM is not PVM-only: a PVM-only host (kvm_pvm loaded,
 * no kvm_intel / kvm_amd) runs only PVM-enabled guest kernels, and a stock
 * Debian kernel hangs right after "Probing EDD" (docs: TERRAIN). Anywhere
 * else the real test is a boot: the guest kernel under -enable-kvm must get
 * to running /init within a timeout. The result is remembered in
 * DATA/run/accel.json, keyed by the kernel's size and mtime, so the probe
 * runs once per kernel.
 *
 * The probe QEMU runs as root but with -sandbox on, no disk, no network,
 * our own kernel and initramfs only, and is killed after the timeout; its
 * console is matched against one fixed string and never parsed further.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../doctor/doctor.h"
#include "../../lib/json.h"
#include "../../lib/log.h"
#include "../../lib/util.h"
#include "../core/nodemgr-internal.h"

#define PROBE_TIMEOUT_MS 15000

/* Boot the kernel under KVM; true when the console shows /init starting. */
static bool probe_boot(const char *kernel, const char *initrd, char *why, size_t cap)
{
	int p[2];
	pid_t c;
	char tail[256] = "";
	size_t tl = 0;
	bool ok = false;
	uint64_t t0 = now_ms(), dl = t0 + PROBE_TIMEOUT_MS;

	if (pipe2(p, O_CLOEXEC) < 0) {
		snprintf(why, cap, "probe: pipe: %s", strerror(errno));
		return false;
	}
	c = fork();
	if (c < 0) {
		snprintf(why, cap, "probe: fork: %s", strerror(errno));
		close(p[0]);
		close(p[1]);
		return false;
	}
	if (c == 0) {
		int dn = open("/dev/null", O_RDWR);
		dup2(dn, 0);
		dup2(p[1], 1);
		dup2(dn, 2);
		execl("/usr/bin/qemu-system-x86_64", "qemu-system-x86_64", "-M", "microvm",
		      "-enable-kvm", "-cpu", "host", "-m", "256", "-nodefaults", "-no-user-config",
		      "-display", "none", "-no-reboot", "-sandbox", "on,spawn=deny", "-kernel", kernel,
		      "-initrd", initrd, "-append", "console=ttyS0 panic=-1", "-serial", "stdio",
		      (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	/* "Run /init as init process" is printed by the kernel just before it
	 * starts the initramfs' init: the kernel got through its boot. */
	for (;;) {
		uint64_t now = now_ms();
		struct pollfd pfd = { .fd = p[0], .events = POLLIN };
		char b[4096];
		ssize_t n;

		if (now >= dl)
			break;
		if (poll(&pfd, 1, (int)(dl - now)) <= 0)
			continue;
		n = read(p[0], b, sizeof(b));
		if (n <= 0)
			break;
		for (ssize_t i = 0; i < n; i++) {
			if (tl == sizeof(tail) - 1) {
				memmove(tail, tail + 128, tl - 128);
				tl -= 128;
			}
			tail[tl++] = b[i] ? b[i] : ' ';
			tail[tl] = '\0';
		}
		if (strstr(tail, "Run /init as init process")) {
			ok = true;
			break;
		}
	}
	close(p[0]);
	kill(c, SIGKILL);
	/* nodemgr is a subreaper; at start-up (before the reaper runs) we
	 * collect our own child here. */
	waitpid(c, NULL, 0);
	if (ok)
		snprintf(why, cap, "probe: a stock kernel booted under kvm in %" PRIu64 " ms",
			 now_ms() - t0);
	else
		snprintf(why, cap, "probe: the guest kernel did not boot under kvm within %d s",
			 PROBE_TIMEOUT_MS / 1000);
	return ok;
}

void vm_accel_detect(struct nm_server *s, char *accel, size_t acap, char *reason, size_t rcap)
{
	const char *want = s->cfg->vm_accel ? s->cfg->vm_accel : "auto";
	_cleanup_free_ char *kernel = xasprintf("%s/vmlinuz", s->cfg->vm_dir);
	_cleanup_free_ char *initrd = xasprintf("%s/initramfs.cpio.gz", s->cfg->vm_dir);
	_cleanup_free_ char *cache = xasprintf("%s/run/accel.json", s->cfg->data_dir);
	_cleanup_free_ char *key = NULL;
	struct buf b;

	if (!strcmp(want, "kvm") || !strcmp(want, "tcg")) {
		snprintf(accel, acap, "%s", want);
		snprintf(reason, rcap, "config: vm_accel = %s", want);
		return;
	}
	snprintf(accel, acap, "tcg");
	/* absent, a test guest does not run, or PVM-only: TCG without a boot
	 * probe (the same test `airlock doctor` reports, src/doctor) */
	if (doctor_kvm_state(reason, rcap) != DOCTOR_KVM_USABLE)
		return;
	/* Remembered probe result for this kernel? (read the same way by the
	 * doctor, so the two say one thing) */
	if (!(key = doctor_accel_key(s->cfg->vm_dir))) {
		snprintf(reason, rcap, "no guest kernel to probe kvm with");
		return;
	}
	if (doctor_accel_remembered(s->cfg->data_dir, s->cfg->vm_dir, accel, acap, reason, rcap))
		return;
	buf_init(&b);
	snprintf(accel, acap, "%s", probe_boot(kernel, initrd, reason, rcap) ? "kvm" : "tcg");
	struct jw w;
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "accel");
	jw_str(&w, accel);
	jw_key(&w, "reason");
	jw_str(&w, reason);
	jw_key(&w, "kernel");
	jw_str(&w, key);
	jw_end(&w);
	if (write_file(cache, b.data, b.len, 0644) < 0)
		log_warn("write %s: %s", cache, strerror(errno));
	buf_free(&b);
}
