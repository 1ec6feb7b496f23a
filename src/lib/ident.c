/* ident.c - identifier rules (ident.h). Each rule is a length bound and two
 * byte classes: one for the first byte, one for the others. */
#include <string.h>

#include "ident.h"

static bool lower_digit(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool alnum(unsigned char c)
{
	return lower_digit(c) || (c >= 'A' && c <= 'Z');
}

static bool name_rest(unsigned char c)
{
	return lower_digit(c) || c == '.' || c == '_' || c == '-';
}

static bool anycase_rest(unsigned char c)
{
	return alnum(c) || c == '.' || c == '_' || c == '-';
}

static bool id_byte(unsigned char c)
{
	return lower_digit(c) || c == '-';
}

static bool host_rest(unsigned char c)
{
	return alnum(c) || c == '.' || c == '-';
}

static bool key_first(unsigned char c)
{
	return alnum(c) || c == '_' || c == '-';
}

/* 1..max bytes, s[0] in first, the rest in rest. */
static bool match(const char *s, size_t max, bool (*first)(unsigned char),
		  bool (*rest)(unsigned char))
{
	size_t n = s ? strnlen(s, max + 1) : 0;

	if (n == 0 || n > max || !first((unsigned char)s[0]))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!rest((unsigned char)s[i]))
			return false;
	return true;
}

bool ident_name_ok(const char *s)
{
	return match(s, IDENT_MAX, lower_digit, name_rest);
}

bool ident_name_anycase_ok(const char *s)
{
	return match(s, IDENT_MAX, alnum, anycase_rest);
}

bool ident_sandbox_id_ok(const char *s)
{
	return match(s, IDENT_MAX, id_byte, id_byte);
}

bool ident_hostname_ok(const char *s)
{
	return match(s, IDENT_MAX, alnum, host_rest);
}

bool ident_key_ok(const char *s, size_t max)
{
	return match(s, max, key_first, anycase_rest);
}

bool ident_uuid_ok(const char *s)
{
	if (!s || strnlen(s, 37) != 36)
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
