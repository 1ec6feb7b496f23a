/* fuzz-http: http_parse_request on arbitrary bytes (the request head and
 * body a remote peer controls). Must never crash or read past size; what it
 * accepts must satisfy the invariants handlers rely on. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/lib/http.h"

static void check_accepted(const struct http_req *req, int n, size_t size)
{
	if ((size_t)n > size || req->path[0] != '/' || !req->query || !req->target)
		abort();
	if (req->body[req->body_len] != '\0' || req->n_headers > HTTP_MAX_HEADERS)
		abort();
	if (strlen(req->method) == 0 || strlen(req->method) >= sizeof(req->method))
		abort();
	for (size_t k = 0; k < req->n_headers; k++)
		if (!req->headers[k].name[0])
			abort();
	free(http_query_param(req, "path"));
	free(http_query_param(req, "offset"));
	free(http_query_param(req, ""));
	http_req_header(req, "content-type");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http_req req;
	err_t err = { 0 };
	/* an exact-size copy so ASan catches any read past size */
	char *copy = calloc(1, size ? size : 1);

	if (size)
		memcpy(copy, data, size);
	int n = http_parse_request(copy, size, 1 << 16, &req, &err);
	if (n > 0) {
		check_accepted(&req, n, size);
		http_req_free(&req);
	}
	free(copy);
	return 0;
}
