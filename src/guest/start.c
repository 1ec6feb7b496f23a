/* start.c - a template's own start program: /etc/airlock/start, run once
 * when the agent comes up (not after a vm restore or fork: those go on from
 * a memory image where it ran already).
 *
 * This is how a template brings a service up with the sandbox (the
 * code-interpreter template's code service, scripts/code-interpreter).
 * It is the tenant's own file and runs inside the sandbox, as root there
 * (the sandbox's root, which the jail maps to an unprivileged host uid, or
 * the VM's), with the same policy as everything else inside; it is never
 * given the channel. It gets a clean environment, /dev/null for 0-2, its
 * own session, and every other fd closed.
 *
 * ns: started and left to run; the agent serves its channel at once, so a
 * warm jail's warm-up exec is not held up, and the service is up by the
 * time the jail is taken (or soon after, for a cold create).
 * vm: the agent waits (at most START_WAIT_MS) for the program to exit before
 * it says HELLO, so the template's memory snapshot, taken after READY,
 * holds the service already started, and every clone resumes it warm. A
 * program that outlives the wait is left running. */
#include "guest.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define START_PATH "/etc/airlock/start"
#define START_WAIT_MS 25000   /* below the node's wait for READY (30 s) */

void agent_start_program(bool wait)
{
	char *argv[] = { START_PATH, NULL };
	char *envp[] = { "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			 "HOME=/root", "LANG=C.UTF-8", NULL };
	uint64_t t0;
	pid_t pid;

	if (access(START_PATH, X_OK) < 0)
		return;
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "airlock-guest: %s: fork: %s\n", START_PATH, strerror(errno));
		return;
	}
	if (pid == 0) {
		sigset_t none;
		int null = open("/dev/null", O_RDWR);

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);
		setsid();
		if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0)
			_exit(126);
		close_range(3, ~0u, 0);
		if (chdir("/") < 0)
			_exit(126);
		execve(START_PATH, argv, envp);
		_exit(127);
	}
	if (!wait)
		return;
	t0 = now_ms();
	for (;;) {
		struct timespec ts = { 0, 20 * 1000000L };
		pid_t r = waitpid(pid, NULL, WNOHANG);

		if (r == pid || (r < 0 && errno != EINTR))
			return;
		if (now_ms() - t0 >= START_WAIT_MS) {
			fprintf(stderr, "airlock-guest: %s still runs after %d ms; going on\n",
				START_PATH, START_WAIT_MS);
			return;
		}
		nanosleep(&ts, NULL);
	}
}
