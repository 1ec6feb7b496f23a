/* test-log: the log line formats (text: ISO 8601 UTC with milliseconds;
 * json: one object a line, whatever the message holds), the request id's
 * pattern and that it is per thread. Exit 0 = pass. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../../src/lib/json.h"
#include "../../src/lib/log.h"
#include "check.h"

static FILE *cap;   /* stderr goes here */

/* The lines written since the last call (caller frees). */
static char *captured(void)
{
	static long at;
	long end;
	char *s;

	fflush(stderr);
	fseek(cap, 0, SEEK_END);
	end = ftell(cap);
	s = xcalloc(1, (size_t)(end - at) + 1);
	fseek(cap, at, SEEK_SET);
	if (fread(s, 1, (size_t)(end - at), cap) != (size_t)(end - at))
		s[0] = '\0';
	at = end;
	return s;
}

static bool iso_ts(const char *p)
{
	int y, mo, d, h, mi, sec, ms, n = 0;

	return sscanf(p, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ%n", &y, &mo, &d, &h, &mi, &sec, &ms, &n) ==
		       7 &&
	       n == 24 && y >= 2020 && mo >= 1 && mo <= 12;
}

static void *other_thread(void *arg)
{
	(void)arg;
	log_info("from another thread");
	return NULL;
}

int main(void)
{
	char id[LOG_REQUEST_ID_MAX + 2], *s;
	pthread_t th;
	json *j;
	err_t err = { 0 };

	cap = tmpfile();
	if (!cap || dup2(fileno(cap), STDERR_FILENO) < 0)
		return 1;
	setvbuf(stderr, NULL, _IONBF, 0);

	/* the id's pattern */
	CHECK(log_request_id_ok("a"));
	CHECK(log_request_id_ok("A-z.0_9"));
	memset(id, 'x', LOG_REQUEST_ID_MAX);
	id[LOG_REQUEST_ID_MAX] = '\0';
	CHECK(log_request_id_ok(id));
	id[LOG_REQUEST_ID_MAX] = 'x';
	id[LOG_REQUEST_ID_MAX + 1] = '\0';
	CHECK(!log_request_id_ok(id));
	CHECK(!log_request_id_ok(""));
	CHECK(!log_request_id_ok(NULL));
	CHECK(!log_request_id_ok("a b"));
	CHECK(!log_request_id_ok("a\"b"));
	CHECK(!log_request_id_ok("a\r\nX: y"));
	CHECK(!log_request_id_ok("caf\xc3\xa9"));
	log_new_request_id(id, sizeof(id));
	CHECK(strlen(id) == 16 && strspn(id, "0123456789abcdef") == 16);

	/* text */
	log_init("node", LOG_INFO);
	log_info("hello %d", 42);
	s = captured();
	CHECK(iso_ts(s));
	CHECK(strcmp(s + 24, " node info: hello 42\n") == 0);
	free(s);
	log_set_request_id("req-1");
	log_warn("with id");
	s = captured();
	CHECK(iso_ts(s) && strcmp(s + 24, " node warn [req-1]: with id\n") == 0);
	free(s);
	log_set_request_id("bad id");   /* dropped, not kept */
	CHECK(log_request_id()[0] == '\0');
	log_debug("below the level");
	s = captured();
	CHECK(s[0] == '\0');
	free(s);

	/* json: every byte of the message survives, the line parses */
	log_set_json(true);
	log_set_request_id("req.2");
	log_err("quote \" backslash \\ newline \n tab \t bell \a end");
	s = captured();
	CHECK(strchr(s, '\n') == s + strlen(s) - 1);   /* one line */
	j = json_parse(s, strlen(s) - 1, &err);
	CHECK(j != NULL);
	if (j) {
		CHECK(iso_ts(json_get_str(j, "ts")) && strlen(json_get_str(j, "ts")) == 24);
		CHECK(strcmp(json_get_str(j, "level"), "error") == 0);
		CHECK(strcmp(json_get_str(j, "component"), "node") == 0);
		CHECK(strcmp(json_get_str(j, "request_id"), "req.2") == 0);
		CHECK(strcmp(json_get_str(j, "msg"),
			     "quote \" backslash \\ newline \n tab \t bell \a end") == 0);
		json_free(j);
	}
	free(s);

	/* the id is the thread's own */
	pthread_create(&th, NULL, other_thread, NULL);
	pthread_join(th, NULL);
	s = captured();
	j = json_parse(s, strlen(s) - 1, &err);
	CHECK(j && !json_get(j, "request_id") &&
	      strcmp(json_get_str(j, "msg"), "from another thread") == 0);
	json_free(j);
	free(s);
	CHECK(strcmp(log_request_id(), "req.2") == 0);

	/* a message longer than a line is cut, and the line still parses */
	{
		char big[4000];
		memset(big, '"', sizeof(big) - 1);
		big[sizeof(big) - 1] = '\0';
		log_info("%s", big);
		s = captured();
		j = json_parse(s, strlen(s) - 1, &err);
		CHECK(j != NULL);
		json_free(j);
		free(s);
	}
	return failures ? 1 : 0;
}
