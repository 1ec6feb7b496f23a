#include "err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int ret_of(const err_t *e)
{
	return e->code > 0 ? -e->code : -EIO;
}

int err_set(err_t *e, int code, const char *fmt, ...)
{
	va_list ap;

	if (!e)
		return code > 0 ? -code : -EIO;
	e->code = code > 0 ? code : EIO;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	return ret_of(e);
}

int err_sys(err_t *e, const char *fmt, ...)
{
	int saved = errno;
	va_list ap;
	size_t n;

	if (!e)
		return saved > 0 ? -saved : -EIO;
	e->code = saved > 0 ? saved : EIO;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	n = strlen(e->msg);
	snprintf(e->msg + n, sizeof(e->msg) - n, ": %s", strerror(e->code));
	errno = saved;
	return ret_of(e);
}

int err_wrap(err_t *e, const char *fmt, ...)
{
	char prefix[256], old[sizeof(e->msg)];
	va_list ap;

	if (!e)
		return -EIO;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	memcpy(old, e->msg, sizeof(old));
	/* Build "prefix: old" and cut it to fit; the cut is intended. */
	size_t pl = strnlen(prefix, sizeof(prefix) - 1);
	if (pl > sizeof(e->msg) - 3)
		pl = sizeof(e->msg) - 3;
	memcpy(e->msg, prefix, pl);
	memcpy(e->msg + pl, ": ", 2);
	size_t room = sizeof(e->msg) - pl - 3;
	size_t ol = strnlen(old, sizeof(old) - 1);
	if (ol > room)
		ol = room;
	memcpy(e->msg + pl + 2, old, ol);
	e->msg[pl + 2 + ol] = '\0';
	if (e->code <= 0)
		e->code = EIO;
	return ret_of(e);
}

void err_clear(err_t *e)
{
	if (e) {
		e->code = 0;
		e->msg[0] = '\0';
	}
}
