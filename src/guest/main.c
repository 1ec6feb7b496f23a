/* airlock-guest: the agent inside every sandbox (PID 1 there).
 *
 * As PID 1 with no channel handed over it is init of a microVM (vminit.c):
 * it mounts the sandbox's disk, switches root into it and serves the
 * virtio-serial port. Otherwise it is
 * started with the channel on fd 3 (AIRLOCK_CHANNEL_FD overrides). With the ns
 * backend the node manager has already built the jail (namespaces, mounts,
 * /proc, /dev) before exec'ing us; we only prepare the process environment and
 * serve the channel. Also runs as an ordinary child process (the unit tests do
 * that over a socketpair): it then becomes a child subreaper so that orphans
 * of the processes it started are still reaped by it.
 */
#include "guest.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>

#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

static int parse_fd(const char *s)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || end == s || v < 0 || v > 65535)
		return -1;
	return (int)v;
}

int main(int argc, char **argv)
{
	struct agent a = { 0 };
	const char *env_fd = getenv("AIRLOCK_CHANNEL_FD");
	sigset_t mask;
	int fl;

	(void)argc;
	(void)argv;
	if (vm_detect()) {
		/* Returning from PID 1 panics the kernel: the host sees the VM
		 * go away, with our reason on the console just before. */
		if ((a.chan_fd = vm_init()) < 0)
			return 1;
		a.vm_port = true;
	} else {
		a.chan_fd = env_fd ? parse_fd(env_fd) : 3;
	}
	if (a.chan_fd < 0 || (fl = fcntl(a.chan_fd, F_GETFL)) < 0) {
		fprintf(stderr, "airlock-guest: no channel on fd %s\n", env_fd ? env_fd : "3");
		return 1;
	}
	/* Keep fds 0-2 occupied so that no fd we open lands there (the exec
	 * path relies on it when it dup2()s into 0-2). */
	for (int fd = 0; fd < 3; fd++) {
		if (fcntl(fd, F_GETFD) < 0) {
			int n = open("/dev/null", O_RDWR);
			if (n >= 0 && n != fd) {
				dup2(n, fd);
				close(n);
			}
		}
	}
	(void)fcntl(a.chan_fd, F_SETFL, fl | O_NONBLOCK);
	(void)fcntl(a.chan_fd, F_SETFD, FD_CLOEXEC);

	a.pid1 = getpid() == 1;
	if (!a.pid1)
		(void)prctl(PR_SET_CHILD_SUBREAPER, 1);
	/* Dispositions are inherited across exec: whatever our starter
	 * ignored, every process we start would too. Put them all back to
	 * the default once, here, so that an exec's child has only SIGPIPE
	 * to restore (proc.c, child_exec) instead of a sigaction per signal
	 * in every exec. The agent installs no handlers. */
	for (int s = 1; s < NSIG; s++)
		signal(s, SIG_DFL);
	/* Everything asynchronous arrives through the signalfd; SIGPIPE is
	 * ignored so a vanished reader is an EPIPE, not our death. */
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	if (a.vm_port)
		sigaddset(&mask, SIGIO);
	if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0 ||
	    (a.sig_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC)) < 0) {
		fprintf(stderr, "airlock-guest: signalfd: %s\n", strerror(errno));
		return 1;
	}
	if (a.vm_port && vm_port_async(a.chan_fd) < 0)
		fprintf(stderr, "airlock-guest: no SIGIO on the port (%s); polling for the host\n",
			strerror(errno));

	umask(022);
	if (a.pid1 || !getenv("PATH"))
		setenv("PATH", DEFAULT_PATH, 1);
	int mr = mkdir_p("/work", 0755);
	if (mr < 0)
		fprintf(stderr, "airlock-guest: cannot create /work: %s\n", strerror(-mr));

	char *id = random_id("", 16);
	snprintf(a.boot_id, sizeof(a.boot_id), "%s", id);
	free(id);
	a.start_ms = now_ms();
	a.last_activity_ms = wall_ms();
	a.chan_up = true;
	proto_rx_init(&a.rx);
	buf_init(&a.out);
	/* The template's own start program (start.c): only as the sandbox's
	 * init, never as the unit tests' child process. */
	if (a.pid1)
		agent_start_program(a.vm_port);

	int r = agent_run(&a);

	file_reset_transfers(&a);
	port_reset_all(&a);
	proto_rx_free(&a.rx);
	buf_free(&a.out);
	close(a.sig_fd);
	return r < 0 ? 1 : 0;
}
