/* request.c - reading a request: a JSON object body within NODE_JSON_MAX.
 * Shared by every handler, below the router. (Query parameters and names:
 * lib/http.h and lib/ident.h, the same rules the api applies.)
 */
#include "../../lib/reqjson.h"
#include "handler.h"

json *node_body_object(struct http_req *req, struct http_conn *c, const char *const *allowed)
{
	return http_json_object_body(req, c, allowed, NODE_JSON_MAX);
}
