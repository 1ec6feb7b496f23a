/* json.h - a small JSON DOM parser with hard limits, and a streaming writer.
 *
 * The parser takes untrusted bytes (API bodies): it enforces a nesting depth
 * limit (JSON_MAX_DEPTH), rejects invalid UTF-8 escapes, trailing garbage,
 * duplicate keys and NUL bytes inside strings, and never reads past len.
 * Numbers are kept as double plus a flag telling whether they were integers
 * that fit in int64.
 */
#ifndef AIRLOCK_JSON_H
#define AIRLOCK_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "util.h"

#define JSON_MAX_DEPTH 32

enum json_type { JSON_NULL, JSON_BOOL, JSON_NUM, JSON_STR, JSON_ARR, JSON_OBJ };

typedef struct json json;
struct json {
	enum json_type type;
	bool b;
	double num;
	bool is_int;     /* num was written as an integer and fits int64 */
	int64_t i;       /* valid when is_int */
	char *str;       /* JSON_STR: NUL-terminated, never contains NUL */
	size_t str_len;
	size_t n;        /* JSON_ARR / JSON_OBJ: number of items */
	json **items;    /* JSON_ARR items / JSON_OBJ values */
	char **keys;     /* JSON_OBJ keys (same order as items) */
};

/* Parse; returns a tree the caller owns (json_free), or NULL and fills err. */
json *json_parse(const char *s, size_t len, err_t *err);
void json_free(json *j);                       /* accepts NULL */

/* Lookups return borrowed pointers (NULL when absent or wrong type). */
const json *json_get(const json *obj, const char *key);
const char *json_get_str(const json *obj, const char *key);
/* Returns def when absent; returns def and sets *bad=true when wrong type. */
int64_t json_get_int(const json *obj, const char *key, int64_t def, bool *bad);
bool json_get_bool(const json *obj, const char *key, bool def, bool *bad);

/* Check that obj is an object whose keys are all in the NULL-terminated list
 * `allowed`. Returns 0, or -EINVAL with err naming the first unknown field. */
int json_check_keys(const json *obj, const char *const *allowed, err_t *err);

/* Streaming writer into a struct buf. Commas are inserted automatically.
 *     struct jw w; jw_init(&w, &buf);
 *     jw_obj(&w); jw_key(&w, "id"); jw_str(&w, id); jw_end(&w);
 */
struct jw {
	struct buf *b;
	int depth;
	bool first[JSON_MAX_DEPTH + 1];
	bool after_key;
};
void jw_init(struct jw *w, struct buf *b);   /* borrowed buf */
void jw_obj(struct jw *w);
void jw_arr(struct jw *w);
void jw_end(struct jw *w);                   /* closes the innermost obj/arr */
void jw_key(struct jw *w, const char *k);
void jw_str(struct jw *w, const char *s);    /* NULL writes null */
void jw_strn(struct jw *w, const char *s, size_t n); /* escapes, bytes >= 0x80 passed through */
/* Untrusted bytes (file names from a sandbox): invalid UTF-8 becomes U+FFFD,
 * so the output is always valid JSON text. */
void jw_str_lossy(struct jw *w, const char *s);
void jw_strn_lossy(struct jw *w, const char *s, size_t n);   /* may hold NULs */
/* Is s[0..n) valid UTF-8 (the strict form the parser accepts) without NUL
 * bytes, i.e. text a JSON string can carry as is? */
bool json_utf8_valid(const char *s, size_t n);
void jw_int(struct jw *w, int64_t v);
void jw_uint(struct jw *w, uint64_t v);
/* Shortest text that reads back to v; NaN and infinities are written as null. */
void jw_double(struct jw *w, double v);
void jw_bool(struct jw *w, bool v);
void jw_null(struct jw *w);
void jw_raw(struct jw *w, const char *json_text); /* already-valid JSON value */
/* Write a parsed value back out (for echoing metadata maps etc). */
void jw_value(struct jw *w, const json *v);
/* A deep copy (NULL stays NULL); caller owns. */
json *json_dup(const json *v);

#endif
