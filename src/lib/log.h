/* log.h - leveled logging to stderr. The level and format are named
 * singletons set once at startup (log_init, log_set_json), read everywhere.
 * Messages are one line each:
 *   text: 2026-12-02T02:58:01.123Z node info [req-id]: message
 *   json: {"ts":"2026-12-02T02:58:01.123Z","level":"info","component":"node",
 *          "request_id":"req-id","msg":"message"}
 * The request id (absent when none) is per thread: the HTTP servers run
 * one thread per connection, so a handler sets it for the request it
 * serves, and nodemgr for the verb it runs (src/nmclient carries it). */
#ifndef AIRLOCK_LOG_H
#define AIRLOCK_LOG_H

#include <stdbool.h>
#include <stddef.h>

enum log_level { LOG_ERR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG };

#define LOG_REQUEST_ID_MAX 64

void log_init(const char *component, enum log_level level);
/* One JSON object per line instead of text. */
void log_set_json(bool json);
void log_msg(enum log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The calling thread's request id: NULL or "" clears it; an id that is not
 * log_request_id_ok is dropped (cleared). */
void log_set_request_id(const char *id);
/* "" when the thread has none. */
const char *log_request_id(void);
/* 1..64 bytes of [A-Za-z0-9._-]: safe in a header, a log line and JSON. */
bool log_request_id_ok(const char *id);
/* A fresh random id (16 hex digits) into out (cap >= 17). */
void log_new_request_id(char *out, size_t cap);

#define log_err(...) log_msg(LOG_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
