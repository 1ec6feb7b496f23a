#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "util.h"

/* Set once at startup by log_init / log_set_json; read-only afterwards. */
static const char *log_component = "airlock";
static enum log_level log_level = LOG_INFO;
static bool log_json;

static __thread char request_id[LOG_REQUEST_ID_MAX + 1];

void log_init(const char *component, enum log_level level)
{
	log_component = component;
	log_level = level;
}

void log_set_json(bool json)
{
	log_json = json;
}

bool log_request_id_ok(const char *id)
{
	size_t n = 0;

	if (!id)
		return false;
	for (; id[n]; n++) {
		char ch = id[n];
		if (n >= LOG_REQUEST_ID_MAX ||
		    !((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-'))
			return false;
	}
	return n > 0;
}

void log_set_request_id(const char *id)
{
	if (id && log_request_id_ok(id))
		memcpy(request_id, id, strlen(id) + 1);
	else
		request_id[0] = '\0';
}

const char *log_request_id(void)
{
	return request_id;
}

void log_new_request_id(char *out, size_t cap)
{
	unsigned char r[8];

	random_bytes(r, sizeof(r));
	for (size_t i = 0; i < sizeof(r) && 2 * i + 2 < cap; i++)
		snprintf(out + 2 * i, 3, "%02x", r[i]);
}

/* s into line at *n as a JSON string body (no quotes): ", \ and control
 * bytes escaped; other bytes as they are (a message is our own text, with
 * ids and paths in it). Stops when the line is full. */
static void json_escape(char *line, size_t cap, size_t *n, const char *s)
{
	for (; *s && *n + 8 < cap; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			*n += (size_t)snprintf(line + *n, cap - *n, "\\%c", ch);
		else if (ch < 0x20 || ch == 0x7f)
			*n += (size_t)snprintf(line + *n, cap - *n, "\\u%04x", ch);
		else
			line[(*n)++] = (char)ch;
	}
	line[*n] = '\0';
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
	static const char *names[] = { "error", "warn", "info", "debug" };
	char line[2560], msg[2048], ts[80];
	struct timespec now;
	struct tm tm;
	va_list ap;
	size_t n;

	if (lvl > log_level)
		return;
	clock_gettime(CLOCK_REALTIME, &now);
	gmtime_r(&now.tv_sec, &tm);
	/* ISO 8601, UTC, milliseconds: sortable and unambiguous across days */
	snprintf(ts, sizeof(ts), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
		 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
		 now.tv_nsec / 1000000);
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (log_json) {
		n = (size_t)snprintf(line, sizeof(line),
				     "{\"ts\":\"%s\",\"level\":\"%s\",\"component\":\"%s\",", ts,
				     names[lvl], log_component);
		if (request_id[0])   /* [A-Za-z0-9._-] only: nothing to escape */
			n += (size_t)snprintf(line + n, sizeof(line) - n, "\"request_id\":\"%s\",",
					      request_id);
		n += (size_t)snprintf(line + n, sizeof(line) - n, "\"msg\":\"");
		json_escape(line, sizeof(line) - 3, &n, msg);
		snprintf(line + n, sizeof(line) - n, "\"}");
	} else if (request_id[0]) {
		snprintf(line, sizeof(line) - 1, "%s %s %s [%s]: %s", ts, log_component, names[lvl],
			 request_id, msg);
	} else {
		snprintf(line, sizeof(line) - 1, "%s %s %s: %s", ts, log_component, names[lvl], msg);
	}
	/* one write per line so concurrent threads do not interleave */
	strncat(line, "\n", sizeof(line) - strlen(line) - 1);
	fputs(line, stderr);
}
