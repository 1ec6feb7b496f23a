/* fuzz-qmp: QMP replies as nodemgr meets them from a QEMU that may be
 * running hostile guest code. Each line goes through qmp_parse_msg, and the
 * whole input is also replayed as a stream through the real client
 * (greeting, capabilities, one command) over a socketpair whose peer then
 * hangs up. Nothing may crash, leak, read out of bounds or hang. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../src/qmp/qmp.h"

static void parse_lines(const uint8_t *data, size_t size)
{
	size_t start = 0;

	for (size_t i = 0; i <= size; i++) {
		if (i < size && data[i] != '\n')
			continue;
		size_t len = i - start;
		/* an exact-size copy so ASan catches any read past len */
		char *line = malloc(len ? len : 1);
		struct qmp_msg m;
		err_t err = { 0 };

		memcpy(line, data + start, len);
		if (qmp_parse_msg(line, len, &m, &err) == 0) {
			if (m.type == QMP_MSG_RETURN && !m.ret)
				abort();
			qmp_msg_free(&m);
		}
		free(line);
		start = i + 1;
	}
}

static void replay_stream(const uint8_t *data, size_t size)
{
	int sv[2];
	struct qmp *q = NULL;
	err_t err = { 0 };
	json *ret = NULL;

	if (size > 65536 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return;
	if (write(sv[1], data, size) != (ssize_t)size) {
		close(sv[0]);
		close(sv[1]);
		return;
	}
	shutdown(sv[1], SHUT_WR);  /* EOF after the data: no call can wait */
	if (qmp_open_fd(sv[0], 1000, &q, &err) == 0) {
		const char *const *names;
		if (qmp_exec(q, "query-status", NULL, -1, 1000, &ret, &err) == 0)
			json_free(ret);
		ret = NULL;
		if (qmp_wait_event(q, "MIGRATION", 1000, &ret, &err) == 0)
			json_free(ret);
		(void)qmp_events(q, &names);
		qmp_close(q);
	}
	close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	parse_lines(data, size);
	replay_stream(data, size);
	return 0;
}
