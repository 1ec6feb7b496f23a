/* validate.c - the only gate between wire bytes and paths. Every id and name
 * that reaches a path passes one of these first; none allows '/', a leading
 * '.', or anything outside a small alphabet. */
#include <stdbool.h>
#include <string.h>

#include "nodemgr-internal.h"

static bool bounded(const char *s, size_t cap, size_t *len)
{
	const char *nul = memchr(s, '\0', cap);

	if (!nul)
		return false;
	*len = (size_t)(nul - s);
	return *len > 0 && *len <= 64;
}

static bool lower_digit(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* [a-z0-9-]{1,64} */
bool mgr_valid_sandbox_id(const char *s, size_t cap)
{
	size_t n;

	if (!bounded(s, cap, &n))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!lower_digit(s[i]) && s[i] != '-')
			return false;
	return true;
}

/* [a-z0-9][a-z0-9._-]{0,63} */
bool mgr_valid_template_name(const char *s, size_t cap)
{
	size_t n;

	if (!bounded(s, cap, &n) || !lower_digit(s[0]))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!lower_digit(s[i]) && s[i] != '.' && s[i] != '_' && s[i] != '-')
			return false;
	return true;
}

/* [A-Za-z0-9-.]{1,64}, not starting with '-' or '.' */
bool mgr_valid_hostname(const char *s, size_t cap)
{
	size_t n;

	if (!bounded(s, cap, &n) || s[0] == '-' || s[0] == '.')
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!lower_digit(c) && !(c >= 'A' && c <= 'Z') && c != '-' && c != '.')
			return false;
	}
	return true;
}

/* A uuid as text: [0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12} */
bool mgr_valid_uuid(const char *s, size_t cap)
{
	const char *nul = memchr(s, '\0', cap);

	if (!nul || nul - s != 36)
		return false;
	for (size_t i = 0; i < 36; i++) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (s[i] != '-')
				return false;
		} else if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) {
			return false;
		}
	}
	return true;
}
