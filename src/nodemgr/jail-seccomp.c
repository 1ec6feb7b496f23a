/* jail-seccomp.c - the jail's syscall filter.
 *
 * Default allow; the calls below fail with EPERM. They are the kernel
 * surfaces a process in a user namespace can still reach and no sandboxed
 * workload needs: module loading, kexec, BPF, tracing other processes and
 * reading their memory, the keyring, every mount API, namespace changes,
 * swap/reboot/syslog/acct, userfaultfd and io_uring (frequent sources of
 * kernel bugs), file handles (open_by_handle_at escapes a chroot), port I/O
 * and quotas. Also:
 *   - clone/unshare with CLONE_NEWUSER: no nested user namespace, so no
 *     fresh set of capabilities to reach more kernel code with;
 *   - clone3 fails with ENOSYS (its flags are in memory seccomp cannot
 *     read), so libc falls back to clone, which is filtered;
 *   - btrfs ioctls (type 0x94): no subvolume creation or snapshots inside
 *     the sandbox's own subvolume (that would block deleting it);
 *   - TIOCSTI/TIOCLINUX: no typing into a terminal.
 * Syscalls this libseccomp does not know are skipped (they are not on this
 * architecture). Other architectures' ABIs are killed (libseccomp default).
 *
 * The filter is compiled once at startup into a BPF program; the jail
 * applies it with prctl right before exec, so the child needs no allocation.
 */
#include <errno.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../lib/util.h"
#include "jail.h"

static const char *const blocked[] = {
	"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
	"bpf", "ptrace", "process_vm_readv", "process_vm_writev", "keyctl", "add_key",
	"request_key", "mount", "umount", "umount2", "fsopen", "fsmount", "fsconfig",
	"fspick", "move_mount", "open_tree", "open_tree_attr", "mount_setattr",
	"pivot_root", "perf_event_open", "setns", "swapon", "swapoff", "reboot", "syslog",
	"acct", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
	"open_by_handle_at", "name_to_handle_at", "iopl", "ioperm", "lookup_dcookie",
	"quotactl", "quotactl_fd", "nfsservctl", "uselib", "vm86", "vm86old",
};

int jail_seccomp_build(struct sock_fprog *prog, err_t *err)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
	int r, fd = -1;
	struct stat st;

	if (!ctx)
		return err_set(err, ENOMEM, "seccomp_init");
	for (size_t i = 0; i < ARRAY_SIZE(blocked); i++) {
		int nr = seccomp_syscall_resolve_name(blocked[i]);
		if (nr == __NR_SCMP_ERROR)
			continue;
		if ((r = seccomp_rule_add(ctx, eperm, nr, 0)) < 0) {
			err_set(err, -r, "seccomp rule %s", blocked[i]);
			goto out;
		}
	}
	if ((r = seccomp_rule_add(ctx, eperm, SCMP_SYS(clone), 1,
				  SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER))) < 0 ||
	    (r = seccomp_rule_add(ctx, eperm, SCMP_SYS(unshare), 1,
				  SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER))) < 0 ||
	    (r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0)) < 0 ||
	    (r = seccomp_rule_add(ctx, eperm, SCMP_SYS(ioctl), 1,
				  SCMP_A1(SCMP_CMP_MASKED_EQ, 0xff00, 0x9400))) < 0 ||
	    (r = seccomp_rule_add(ctx, eperm, SCMP_SYS(ioctl), 1,
				  SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffff, TIOCSTI))) < 0 ||
	    (r = seccomp_rule_add(ctx, eperm, SCMP_SYS(ioctl), 1,
				  SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffff, TIOCLINUX))) < 0) {
		err_set(err, -r, "seccomp argument rules");
		goto out;
	}
	fd = memfd_create("seccomp", MFD_CLOEXEC);
	if (fd < 0) {
		r = err_sys(err, "memfd_create");
		goto out;
	}
	if ((r = seccomp_export_bpf(ctx, fd)) < 0) {
		err_set(err, -r, "seccomp_export_bpf");
		goto out;
	}
	if (fstat(fd, &st) < 0 || st.st_size <= 0 ||
	    st.st_size % (off_t)sizeof(struct sock_filter) != 0) {
		r = err_set(err, EIO, "seccomp: bad exported program");
		goto out;
	}
	prog->len = (unsigned short)(st.st_size / (off_t)sizeof(struct sock_filter));
	prog->filter = xmalloc((size_t)st.st_size);
	if ((r = (int)pread(fd, prog->filter, (size_t)st.st_size, 0)) != (int)st.st_size) {
		free(prog->filter);
		prog->filter = NULL;
		r = err_set(err, EIO, "seccomp: read exported program");
		goto out;
	}
	r = 0;
out:
	if (fd >= 0)
		close(fd);
	seccomp_release(ctx);
	return r;
}

int jail_seccomp_apply(const struct sock_fprog *prog)
{
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog, 0, 0) < 0)
		return -errno;
	return 0;
}
