#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* Set once at startup by log_init; read-only afterwards. */
static const char *log_component = "airlock";
static enum log_level log_level = LOG_INFO;

void log_init(const char *component, enum log_level level)
{
	log_component = component;
	log_level = level;
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
	static const char *names[] = { "error", "warn", "info", "debug" };
	char line[2048];
	struct timespec ts;
	struct tm tm;
	va_list ap;
	int n;

	if (lvl > log_level)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = snprintf(line, sizeof(line), "%02d:%02d:%02d.%03ld %s %s: ", tm.tm_hour, tm.tm_min,
		     tm.tm_sec, ts.tv_nsec / 1000000, log_component, names[lvl]);
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	/* one write per line so concurrent threads do not interleave */
	strncat(line, "\n", sizeof(line) - strlen(line) - 1);
	fputs(line, stderr);
}
