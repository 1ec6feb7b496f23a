/* jail-seccomp.c - the jail's syscall filter.
 *
 * An allowlist, in the manner of the container runtimes' default profiles:
 * the calls an ordinary Linux program makes (files, processes, threads,
 * memory, signals, time, sockets, terminals, SysV/POSIX IPC, inotify and
 * epoll) are allowed; every other call fails with ENOSYS, so a syscall
 * added to the kernel later is closed until it is listed here, and a
 * program sees "not implemented" and falls back as it would on an older
 * kernel.
 *
 * Calls that are known and refused fail with EPERM instead (a clearer
 * answer for things a program may try on purpose): module loading, kexec,
 * BPF, tracing other processes and reading or steering their memory
 * (ptrace, process_vm_*, process_madvise, pidfd_getfd, kcmp), the keyring,
 * every mount API, namespace changes, swap/reboot/syslog/acct, userfaultfd
 * and io_uring (frequent sources of kernel bugs), file handles
 * (open_by_handle_at escapes a chroot), port I/O and quotas. Also:
 *   - clone/unshare with CLONE_NEWUSER: no nested user namespace, so no
 *     fresh set of capabilities to reach more kernel code with;
 *   - clone3 is not listed, so it fails with ENOSYS (its flags are in
 *     memory seccomp cannot read), and libc falls back to clone, which is
 *     filtered;
 *   - socket(AF_VSOCK): no way to the hypervisor's sockets;
 *   - btrfs ioctls (type 0x94): no subvolume creation or snapshots inside
 *     the sandbox's own subvolume (that would block deleting it);
 *   - TIOCSTI/TIOCLINUX: no typing into a terminal;
 *   - personality() only with the flags programs use (query, the Linux
 *     default, ADDR_NO_RANDOMIZE, UNAME26), not READ_IMPLIES_EXEC and co.
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
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../lib/util.h"
#include "jail.h"

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

/* Allowed without conditions. */
static const char *const allowed[] = {
	/* files and directories */
	"access", "chdir", "chmod", "chown", "close", "close_range", "copy_file_range", "creat",
	"dup", "dup2", "dup3", "faccessat", "faccessat2", "fadvise64", "fallocate", "fchdir",
	"fchmod", "fchmodat", "fchown", "fchownat", "fcntl", "fdatasync", "fgetxattr",
	"flistxattr", "flock", "fremovexattr", "fsetxattr", "fstat", "fstatfs", "fsync",
	"ftruncate", "futimesat", "getcwd", "getdents", "getdents64", "getxattr", "lchown",
	"lgetxattr", "link", "linkat", "listxattr", "llistxattr", "lremovexattr", "lseek",
	"lsetxattr", "lstat", "mkdir", "mkdirat", "mknod", "mknodat", "newfstatat", "open",
	"openat", "openat2", "pread64", "preadv", "preadv2", "pwrite64", "pwritev", "pwritev2",
	"read", "readahead", "readlink", "readlinkat", "readv", "removexattr", "rename",
	"renameat", "renameat2", "rmdir", "sendfile", "setxattr", "splice", "stat", "statfs",
	"statx", "symlink", "symlinkat", "sync", "sync_file_range", "syncfs", "tee", "truncate",
	"umask", "unlink", "unlinkat", "utime", "utimensat", "utimes", "vmsplice", "write",
	"writev", "fchmodat2", "cachestat", "chroot", "fanotify_mark", "inotify_add_watch", "inotify_init",
	"inotify_init1", "inotify_rm_watch", "io_setup", "io_destroy", "io_submit",
	"io_cancel", "io_getevents", "io_pgetevents", "ioprio_get", "ioprio_set",
	/* processes, threads, credentials */
	"execve", "execveat", "exit", "exit_group", "fork", "vfork", "wait4", "waitid",
	"kill", "tgkill", "tkill", "getpid", "getppid", "gettid", "getpgid", "getpgrp",
	"setpgid", "getsid", "setsid", "getuid", "geteuid", "getgid", "getegid", "getresuid",
	"getresgid", "getgroups", "setuid", "setgid", "setreuid", "setregid", "setresuid",
	"setresgid", "setgroups", "setfsuid", "setfsgid", "capget", "capset", "prctl",
	"arch_prctl", "set_tid_address", "set_robust_list", "get_robust_list", "rseq",
	"futex", "futex_waitv", "getpriority", "setpriority", "sched_yield",
	"sched_getaffinity", "sched_setaffinity", "sched_getattr", "sched_setattr",
	"sched_getparam", "sched_setparam", "sched_getscheduler", "sched_setscheduler",
	"sched_get_priority_max", "sched_get_priority_min", "sched_rr_get_interval",
	"getrlimit", "setrlimit", "prlimit64", "getrusage", "times", "uname", "sysinfo",
	"getcpu", "pidfd_open", "pidfd_send_signal", "seccomp", "landlock_create_ruleset",
	"landlock_add_rule", "landlock_restrict_self", "restart_syscall", "sethostname",
	"setdomainname", "membarrier", "modify_ldt", "set_thread_area", "get_thread_area",
	"getrandom",
	/* memory */
	"brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "mincore", "mlock",
	"mlock2", "mlockall", "munlock", "munlockall", "msync", "memfd_create",
	"remap_file_pages", "pkey_alloc", "pkey_free", "pkey_mprotect", "process_mrelease",
	"memfd_secret", "mseal",
	/* signals and time */
	"rt_sigaction", "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn",
	"rt_sigsuspend", "rt_sigtimedwait", "rt_tgsigqueueinfo", "sigaltstack", "signalfd",
	"signalfd4", "pause", "alarm", "getitimer", "setitimer", "nanosleep",
	"clock_nanosleep", "clock_gettime", "clock_getres", "gettimeofday", "time",
	"adjtimex", "clock_adjtime", /* reading; setting the clock needs CAP_SYS_TIME */
	"timer_create", "timer_delete", "timer_getoverrun", "timer_gettime",
	"timer_settime", "timerfd_create", "timerfd_gettime", "timerfd_settime",
	/* waiting on many */
	"epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait",
	"epoll_pwait2", "epoll_ctl_old", "epoll_wait_old", "eventfd", "eventfd2", "poll", "ppoll", "select", "pselect6",
	"pipe", "pipe2",
	/* sockets (socket itself: below, without AF_VSOCK) */
	"accept", "accept4", "bind", "connect", "getpeername", "getsockname", "getsockopt",
	"setsockopt", "listen", "recvfrom", "recvmsg", "recvmmsg", "sendto", "sendmsg",
	"sendmmsg", "shutdown", "socketpair",
	/* System V and POSIX IPC (the sandbox has its own IPC namespace) */
	"msgctl", "msgget", "msgrcv", "msgsnd", "semctl", "semget", "semop", "semtimedop",
	"shmat", "shmctl", "shmdt", "shmget", "mq_open", "mq_unlink", "mq_timedsend",
	"mq_timedreceive", "mq_notify", "mq_getsetattr",
};

/* Known and refused: EPERM. */
static const char *const blocked[] = {
	"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
	"bpf", "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise",
	"pidfd_getfd", "kcmp", "keyctl", "add_key",
	"request_key", "mount", "umount", "umount2", "fsopen", "fsmount", "fsconfig",
	"fspick", "move_mount", "open_tree", "open_tree_attr", "mount_setattr",
	"pivot_root", "perf_event_open", "setns", "swapon", "swapoff", "reboot", "syslog",
	"acct", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
	"open_by_handle_at", "name_to_handle_at", "iopl", "ioperm", "lookup_dcookie",
	"quotactl", "quotactl_fd", "nfsservctl", "uselib", "vm86", "vm86old",
};

/* Add rule action for each name this libseccomp knows. */
static int add_all(scmp_filter_ctx ctx, uint32_t action, const char *const *names, size_t n,
		   err_t *err)
{
	for (size_t i = 0; i < n; i++) {
		int nr = seccomp_syscall_resolve_name(names[i]), r;
		if (nr == __NR_SCMP_ERROR)
			continue;
		if ((r = seccomp_rule_add(ctx, action, nr, 0)) < 0)
			return err_set(err, -r, "seccomp rule %s", names[i]);
	}
	return 0;
}

/* The calls allowed or refused by their arguments. */
static int add_conditional(scmp_filter_ctx ctx, err_t *err)
{
	const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
	/* personality(): query, and the flags programs set (setarch -R, uname26). */
	static const unsigned long persona[] = { 0xffffffffUL, PER_LINUX, ADDR_NO_RANDOMIZE,
						 UNAME26, ADDR_NO_RANDOMIZE | UNAME26 };
	int r;

	if ((r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
				  SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, 0))) < 0 ||
	    (r = seccomp_rule_add(ctx, eperm, SCMP_SYS(clone), 1,
				  SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER))) < 0 ||
	    (r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(unshare), 1,
				  SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, 0))) < 0 ||
	    (r = seccomp_rule_add(ctx, eperm, SCMP_SYS(unshare), 1,
				  SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER))) < 0 ||
	    (r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1,
				  SCMP_A0(SCMP_CMP_NE, AF_VSOCK, 0))) < 0 ||
	    (r = seccomp_rule_add(ctx, eperm, SCMP_SYS(socket), 1,
				  SCMP_A0(SCMP_CMP_EQ, AF_VSOCK, 0))) < 0 ||
	    (r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 0)) < 0 ||
	    (r = seccomp_rule_add(ctx, eperm, SCMP_SYS(ioctl), 1,
				  SCMP_A1(SCMP_CMP_MASKED_EQ, 0xff00, 0x9400))) < 0 ||
	    (r = seccomp_rule_add(ctx, eperm, SCMP_SYS(ioctl), 1,
				  SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffff, TIOCSTI))) < 0 ||
	    (r = seccomp_rule_add(ctx, eperm, SCMP_SYS(ioctl), 1,
				  SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffff, TIOCLINUX))) < 0)
		return err_set(err, -r, "seccomp argument rules");
	for (size_t i = 0; i < ARRAY_SIZE(persona); i++)
		if ((r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(personality), 1,
					  SCMP_A0(SCMP_CMP_EQ, persona[i], 0))) < 0)
			return err_set(err, -r, "seccomp rule personality");
	return 0;
}

int jail_seccomp_build(struct sock_fprog *prog, err_t *err)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(ENOSYS));
	int r, fd = -1;
	struct stat st;

	if (!ctx)
		return err_set(err, ENOMEM, "seccomp_init");
	if ((r = add_all(ctx, SCMP_ACT_ALLOW, allowed, ARRAY_SIZE(allowed), err)) < 0 ||
	    (r = add_all(ctx, SCMP_ACT_ERRNO(EPERM), blocked, ARRAY_SIZE(blocked), err)) < 0 ||
	    (r = add_conditional(ctx, err)) < 0)
		goto out;
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
