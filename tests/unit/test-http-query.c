/* test-http-query: query strings as every handler reads them (lib/http.h):
 * form decoding, the order and the end of the walk, and what a malformed
 * escape or %00 becomes. Exit 0 = pass. */
#include <string.h>

#include "../../src/lib/http.h"
#include "../../src/lib/util.h"
#include "check.h"

struct seen {
	struct buf b;   /* "k=v;" for each parameter, decoded */
	int stop_after; /* 0 = never */
	int n;
};

static bool collect(void *arg, const char *k, const char *v)
{
	struct seen *s = arg;

	buf_printf(&s->b, "%s=%s;", k, v);
	return ++s->n != s->stop_after;
}

/* The walk of q as "k=v;k=v;" (caller frees). */
static char *walk(const char *q, int stop_after)
{
	struct seen s = { .stop_after = stop_after };

	buf_init(&s.b);
	http_query_each(q, collect, &s);
	return buf_steal(&s.b);
}

static void check_walk(const char *q, int stop_after, const char *want)
{
	char *got = walk(q, stop_after);

	if (strcmp(got, want) != 0) {
		fprintf(stderr, "query \"%s\": got \"%s\", want \"%s\"\n", q ? q : "(null)", got, want);
		failures++;
	}
	free(got);
}

static void check_param(const char *q, const char *name, const char *want)
{
	struct http_req req = { .query = (char *)q };
	char *got = http_query_param(&req, name);

	if (want ? !got || strcmp(got, want) != 0 : got != NULL) {
		fprintf(stderr, "query \"%s\" [%s]: got %s, want %s\n", q, name, got ? got : "NULL",
			want ? want : "NULL");
		failures++;
	}
	free(got);
}

int main(void)
{
	check_walk(NULL, 0, "");
	check_walk("", 0, "");
	check_walk("a=1&b=2", 0, "a=1;b=2;");
	check_walk("a", 0, "a=;");
	check_walk("a=", 0, "a=;");
	check_walk("=x", 0, "=x;");
	check_walk("&&a=1&&", 0, "a=1;");
	check_walk("a=1=2", 0, "a=1=2;");
	check_walk("a=1&a=2", 0, "a=1;a=2;");
	check_walk("a=1&b=2&c=3", 2, "a=1;b=2;");
	check_walk("k+ey=hello+world%21", 0, "k ey=hello world!;");
	check_walk("p=%2Fetc%2fpasswd", 0, "p=/etc/passwd;");
	check_walk("p=%00x", 0, "p=%00x;");
	check_walk("p=%zz&q=%4", 0, "p=%zz;q=%4;");
	check_walk("p=%41", 0, "p=A;");
	check_walk("p=%", 0, "p=%;");
	check_walk("p=%2", 0, "p=%2;");
	check_walk("p=%26&q=%3D", 0, "p=&;q==;");
	check_walk("p=%c3%a9", 0, "p=\xc3\xa9;");

	check_param("a=1&b=2", "b", "2");
	check_param("a=1&a=2", "a", "1");
	check_param("a&b=", "a", "");
	check_param("a&b=", "b", "");
	check_param("a=1", "b", NULL);
	check_param("", "a", NULL);
	check_param("na%6De=x", "name", "x");
	check_param("a+b=1", "a b", "1");
	return failures ? 1 : 0;
}
