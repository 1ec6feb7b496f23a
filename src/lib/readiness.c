/* readiness.c - a daemon's answer, and one component's readiness as JSON
 * (readiness.h). */
#include "readiness.h"

#include <errno.h>
#include <string.h>

#include "http.h"

int readiness_http_answers(const char *base, const char *target, int timeout_ms, err_t *err)
{
	struct http_resp resp;
	int r;

	memset(&resp, 0, sizeof(resp));
	r = http_request_timeout(base, "GET", target, NULL, NULL, 0, timeout_ms, &resp, err);
	if (r == 0 && resp.status <= 0)
		r = err_set(err, EPROTO, "%s: no status in the answer to GET %s", base, target);
	http_resp_free(&resp);
	return r;
}

void readiness_component(struct jw *w, const char *name, const char *status, const char *error)
{
	jw_key(w, name);
	jw_obj(w);
	jw_key(w, "status");
	jw_str(w, status);
	if (error) {
		jw_key(w, "error");
		jw_str(w, error);
	}
	jw_end(w);
}
