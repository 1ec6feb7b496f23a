/* test-qmp: the QMP client against a real QEMU (microvm, not started: -S):
 * greeting and capabilities, query-status, stop/cont with their events, a
 * bad command's error object, fd passing (getfd), and parser rejections.
 * Exit 77 when qemu-system-x86_64 is not installed. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../src/qmp/qmp.h"
#include "check.h"

static const char *qemu_path(void)
{
	static const char *const cands[] = { "/usr/bin/qemu-system-x86_64",
					     "/usr/local/bin/qemu-system-x86_64" };
	for (size_t i = 0; i < sizeof(cands) / sizeof(cands[0]); i++)
		if (access(cands[i], X_OK) == 0)
			return cands[i];
	return NULL;
}

static const char *status_of(struct qmp *q)
{
	static char st[32];
	err_t err = { 0 };
	json *ret = NULL;

	st[0] = '\0';
	if (qmp_exec(q, "query-status", NULL, -1, 5000, &ret, &err) < 0) {
		fprintf(stderr, "  query-status: %s\n", err.msg);
		return st;
	}
	snprintf(st, sizeof(st), "%s", json_get_str(ret, "status") ? json_get_str(ret, "status") : "");
	json_free(ret);
	return st;
}

static void parser_cases(void)
{
	static const char *const bad[] = { "", "[]", "{}", "{\"return\":1,\"id\":\"x\"}",
					   "{\"error\":\"x\"}", "{\"event\":3}", "{\"QMP\":1}",
					   "{\"return\":{}} trailing", NULL };
	struct qmp_msg m;
	err_t err = { 0 };

	for (int i = 0; bad[i]; i++) {
		CHECK(qmp_parse_msg(bad[i], strlen(bad[i]), &m, &err) == -EPROTO);
	}
	const char *ok = "{\"error\":{\"class\":\"GenericError\",\"desc\":\"no\"},\"id\":7}";
	CHECK(qmp_parse_msg(ok, strlen(ok), &m, &err) == 0);
	CHECK(m.type == QMP_MSG_ERROR && m.has_id && m.id == 7);
	CHECK(!strcmp(m.err_class, "GenericError") && !strcmp(m.err_desc, "no"));
	qmp_msg_free(&m);
}

int main(void)
{
	const char *qemu = qemu_path();
	char dir[] = "/tmp/test-qmp-XXXXXX";
	char sock[128], arg[160];
	struct qmp *q = NULL;
	err_t err = { 0 };
	json *ret = NULL;
	pid_t pid;
	int st;

	parser_cases();
	if (!qemu) {
		fprintf(stderr, "qemu-system-x86_64 missing: skip\n");
		return failures ? 1 : 77;
	}
	if (!mkdtemp(dir))
		return 1;
	snprintf(sock, sizeof(sock), "%s/qmp.sock", dir);
	snprintf(arg, sizeof(arg), "unix:%s,server=on,wait=off", sock);
	pid = fork();
	if (pid == 0) {
		int dn = open("/dev/null", O_RDWR);
		dup2(dn, 0);
		execl(qemu, qemu, "-M", "microvm", "-nodefaults", "-no-user-config", "-nographic",
		      "-S", "-qmp", arg, (char *)NULL);
		_exit(127);
	}
	CHECK(qmp_connect(sock, 10000, &q, &err) == 0);
	if (!q) {
		fprintf(stderr, "  connect: %s\n", err.msg);
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		return 1;
	}
	CHECK(!strcmp(status_of(q), "prelaunch"));
	CHECK(qmp_exec(q, "cont", NULL, -1, 5000, NULL, &err) == 0);
	CHECK(!strcmp(status_of(q), "running"));
	CHECK(qmp_exec(q, "stop", NULL, -1, 5000, NULL, &err) == 0);
	CHECK(!strcmp(status_of(q), "paused"));
	/* the STOP event arrives around the stop reply; one more round trip
	 * makes sure it was read */
	CHECK(!strcmp(status_of(q), "paused"));
	CHECK(qmp_saw_event(q, "STOP"));
	CHECK(qmp_saw_event(q, "RESUME"));

	/* Errors come back as -EREMOTEIO with QEMU's class and text. */
	CHECK(qmp_exec(q, "no-such-command", NULL, -1, 5000, NULL, &err) == -EREMOTEIO);
	CHECK(strstr(err.msg, "CommandNotFound") != NULL);
	CHECK(qmp_exec(q, "migrate-set-capabilities", "{\"capabilities\":7}", -1, 5000, NULL,
		       &err) == -EREMOTEIO);
	CHECK(strstr(err.msg, "GenericError") != NULL);

	/* An fd travels with getfd. */
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	CHECK(qmp_exec(q, "getfd", "{\"fdname\":\"f\"}", fd, 5000, NULL, &err) == 0);
	CHECK(qmp_exec(q, "closefd", "{\"fdname\":\"f\"}", -1, 5000, NULL, &err) == 0);
	CHECK(qmp_exec(q, "closefd", "{\"fdname\":\"f\"}", -1, 5000, NULL, &err) == -EREMOTEIO);
	close(fd);

	/* Still in sync after the errors. */
	CHECK(qmp_exec(q, "query-name", NULL, -1, 5000, &ret, &err) == 0 && ret);
	json_free(ret);

	CHECK(qmp_exec(q, "quit", NULL, -1, 5000, NULL, &err) == 0);
	/* After quit the socket closes: a command fails, it does not hang. */
	CHECK(qmp_exec(q, "query-status", NULL, -1, 5000, NULL, &err) < 0);
	qmp_close(q);
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	unlink(sock);
	rmdir(dir);
	return failures ? 1 : 0;
}
