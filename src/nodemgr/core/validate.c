/* validate.c - the only gate between wire bytes and paths. Every id and name
 * that reaches a path passes one of these first; none allows '/', a leading
 * '.', or anything outside a small alphabet. */
#include <stdbool.h>
#include <string.h>

#include "../../lib/ident.h"
#include "nodemgr-internal.h"

/* The rules are lib/ident.h's, the same the node and the guest apply; here
 * each string also comes in a fixed-size wire field, so its NUL must lie
 * within cap before the rule may read it. */
static bool terminated(const char *s, size_t cap)
{
	return memchr(s, '\0', cap) != NULL;
}

/* [a-z0-9-]{1,64} */
bool mgr_valid_sandbox_id(const char *s, size_t cap)
{
	return terminated(s, cap) && ident_sandbox_id_ok(s);
}

/* [a-z0-9][a-z0-9._-]{0,63} */
bool mgr_valid_template_name(const char *s, size_t cap)
{
	return terminated(s, cap) && ident_name_ok(s);
}

/* [A-Za-z0-9-.]{1,64}, not starting with '-' or '.' */
bool mgr_valid_hostname(const char *s, size_t cap)
{
	return terminated(s, cap) && ident_hostname_ok(s);
}

/* A uuid as text: [0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12} */
bool mgr_valid_uuid(const char *s, size_t cap)
{
	return terminated(s, cap) && ident_uuid_ok(s);
}
