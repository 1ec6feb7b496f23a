/* ident.h - the rules for identifiers that reach paths, logs and the guest:
 * each written once, used by the api, the node, nodemgr and the guest alike.
 *
 * Every rule is ASCII only (a byte >= 0x80 never passes, so neither does any
 * UTF-8 character), allows no '/', no space and no control character, and
 * bounds the length, so an identifier that passes is safe as one path
 * component and as one token in a log line. NULL never passes. */
#ifndef AIRLOCK_IDENT_H
#define AIRLOCK_IDENT_H

#include <stdbool.h>
#include <stddef.h>

#define IDENT_MAX 64   /* the bound of every rule but ident_key_ok's */

/* [a-z0-9][a-z0-9._-]{0,63}: template, snapshot and node names. A template's
 * name is a directory of the pool (templates/<name>/<version>); the rule
 * leaves no room for "." or "..". */
bool ident_name_ok(const char *s);

/* [A-Za-z0-9][A-Za-z0-9._-]{0,63}: tenant and credential names, and the
 * project or sandbox a credential is bound to. They appear in logs and CLI
 * tables, so no spaces or control characters; uppercase is allowed, as it
 * always was for these. */
bool ident_name_anycase_ok(const char *s);

/* [a-z0-9-]{1,64}: sandbox and snapshot ids, as nodemgr checks them on every
 * verb before building a path from one (no '.', so no "." or ".."). */
bool ident_sandbox_id_ok(const char *s);

/* [A-Za-z0-9][A-Za-z0-9.-]{0,63}: RFC 1123 characters, no leading '-' or
 * '.'. The guest hands it to sethostname(2); shells and logs inside the
 * sandbox print it. */
bool ident_hostname_ok(const char *s);

/* [A-Za-z0-9_-][A-Za-z0-9._-]{0,max-1}: names of keys in a KMS (key ids,
 * key names, the tenant a data key belongs to); file and URL safe, and no
 * leading '.' so never "." or "..". The only rule whose bound is the
 * caller's: the KMS names its keys up to 64, 128 or 255 bytes. */
bool ident_key_ok(const char *s, size_t max);

/* A uuid as text, lowercase: [0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12} */
bool ident_uuid_ok(const char *s);

#endif
