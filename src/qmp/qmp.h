/* qmp.h - a small QMP (QEMU Machine Protocol) client over a unix socket.
 *
 * QEMU runs guest code, so a QEMU process is only semi-trusted: everything it
 * sends is parsed as untrusted bytes. Lines are limited to QMP_MAX_LINE, each
 * is parsed by src/lib/json (depth and size limits, fuzzed by
 * tests/fuzz/fuzz-qmp.c), and every wait has a deadline. A QEMU that sends
 * garbage or too much only makes its own call fail.
 *
 * Protocol: QEMU greets with {"QMP":{...}}; we send qmp_capabilities; then
 * each command {"execute":..,"arguments":..,"id":N} gets exactly one
 * {"return":..,"id":N} or {"error":{"class","desc"},"id":N}. Asynchronous
 * {"event":..} lines may come at any time: they are skipped while waiting,
 * and the last QMP_KEEP_EVENTS event names are kept for inspection.
 *
 * One struct qmp is used by one thread at a time.
 */
#ifndef AIRLOCK_QMP_H
#define AIRLOCK_QMP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../lib/err.h"
#include "../lib/json.h"

#define QMP_MAX_LINE (256u * 1024u)
#define QMP_KEEP_EVENTS 8

enum qmp_msg_type { QMP_MSG_GREETING = 1, QMP_MSG_RETURN, QMP_MSG_ERROR, QMP_MSG_EVENT };

/* One parsed message. val (caller owns through qmp_msg_free) is the whole
 * object; ret borrows its "return" value (RETURN). */
struct qmp_msg {
	enum qmp_msg_type type;
	json *val;
	const json *ret;
	bool has_id;
	int64_t id;
	char event[64];        /* EVENT: name, cut to fit */
	char err_class[64];    /* ERROR: class, cut to fit */
	char err_desc[256];    /* ERROR: desc, cut to fit */
};

/* Parse one line (without its line end) from QEMU. Untrusted input: returns
 * -EPROTO with err set for anything that is not one of the four message
 * shapes. On success *m is filled; free with qmp_msg_free. */
int qmp_parse_msg(const char *line, size_t len, struct qmp_msg *m, err_t *err);
void qmp_msg_free(struct qmp_msg *m);  /* accepts a zeroed message */

struct qmp;

/* Connect to the QMP socket at path, retrying until it accepts (QEMU may not
 * have created it yet) or timeout_ms passes; read the greeting and negotiate
 * capabilities. Caller owns *out (qmp_close). */
int qmp_connect(const char *path, int timeout_ms, struct qmp **out, err_t *err);
/* Same over an already connected socket; consumes fd (closed on failure). */
int qmp_open_fd(int fd, int timeout_ms, struct qmp **out, err_t *err);
void qmp_close(struct qmp *q);         /* accepts NULL */

/* Run one command. args_json: a JSON object text or NULL. pass_fd >= 0 is
 * sent with the command as SCM_RIGHTS (for getfd/add-fd; borrowed). On
 * success *ret (may be NULL) gets the "return" value, caller owns
 * (json_free). An error reply returns -EREMOTEIO with "class: desc" in err;
 * -ETIMEDOUT after timeout_ms; -EPIPE when QEMU closed the socket. */
int qmp_exec(struct qmp *q, const char *cmd, const char *args_json, int pass_fd,
	     int timeout_ms, json **ret, err_t *err);

/* Wait for an event called name that no earlier qmp_wait_event took: events
 * that arrived while a command waited for its reply count too (the last
 * QMP_KEEP_EVENTS are kept). *data (may be NULL) gets the event's "data"
 * object or NULL; caller owns (json_free). -ETIMEDOUT, -EPIPE as qmp_exec. */
int qmp_wait_event(struct qmp *q, const char *name, int timeout_ms, json **data, err_t *err);

/* Event names seen so far, oldest first (at most QMP_KEEP_EVENTS); borrowed,
 * valid until the next call on q. */
size_t qmp_events(const struct qmp *q, const char *const **names);
bool qmp_saw_event(const struct qmp *q, const char *name);

#endif
