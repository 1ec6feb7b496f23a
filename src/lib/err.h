/* err.h - errors are values, with context.
 *
 * A function that can fail returns a negative int (-errno style) and fills an
 * err_t owned by the caller. The message carries context added on the way up:
 *
 *     if (open(...) < 0) return err_sys(err, "cannot open `%s`", path);
 *     if (f(..., err) < 0) return err_wrap(err, "create sandbox %s", id);
 *
 * err_t is a plain struct with no heap memory: nothing to free.
 */
#ifndef AIRLOCK_ERR_H
#define AIRLOCK_ERR_H

#include <stddef.h>

typedef struct err {
	int code;       /* positive errno value, or 0 when unset */
	char msg[512];  /* human-readable, with context */
} err_t;

/* Set code and message; returns -code (or -EIO when code is 0). */
int err_set(err_t *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Like err_set with code = errno captured at entry; appends ": strerror". */
int err_sys(err_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefix context: "ctx: previous message". Returns -e->code. */
int err_wrap(err_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void err_clear(err_t *e);

#endif
