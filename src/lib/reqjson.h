/* reqjson.h - the one way an HTTP handler reads a JSON object body.
 *
 * Shared by the api and the node so both answer bad bodies the same way:
 * 413 body_too_large beyond max_len (0 = no limit here), 400 invalid_json for
 * an empty, malformed or non-object body, 400 unknown_field for a key not in
 * `allowed` (NULL-terminated; NULL allows any). On error the response is
 * already sent and NULL is returned; on success the caller owns the tree. */
#ifndef AIRLOCK_REQJSON_H
#define AIRLOCK_REQJSON_H

#include "http.h"
#include "json.h"

json *http_json_object_body(struct http_req *req, struct http_conn *c,
			    const char *const *allowed, size_t max_len);

#endif
