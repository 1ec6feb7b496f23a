/* fuzz-json: json_parse on arbitrary bytes must never crash or read out of
 * bounds, and whatever it accepts must survive a write/parse round trip.
 * The first write may normalise (e.g. -0.0 becomes "-0", which reparses
 * as the integer 0), so the property checked is that the second and third
 * generations are identical. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/lib/json.h"

static char *write_value(const json *j)
{
	struct buf b;
	struct jw w;

	buf_init(&b);
	jw_init(&w, &b);
	jw_value(&w, j);
	return buf_steal(&b);
}

/* Parses text that our own writer produced; failure is a bug. */
static char *rewrite(const char *text)
{
	err_t err = { 0 };
	json *j = json_parse(text, strlen(text), &err);

	if (!j) {
		fprintf(stderr, "writer output does not parse: %s\n%s\n", err.msg, text);
		abort();
	}
	char *out = write_value(j);
	json_free(j);
	return out;
}

static void exercise_lookups(const json *j)
{
	static const char *const keys[] = { "cmd", "env", "a", "", NULL };
	bool bad = false;
	err_t err;

	json_get_str(j, "cmd");
	json_get_int(j, "timeout_s", 0, &bad);
	json_get_bool(j, "stdin", false, &bad);
	json_check_keys(j, keys, &err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	err_t err = { 0 };
	/* an exact-size copy so ASan catches any read past len */
	char *copy = malloc(size ? size : 1);

	if (size)
		memcpy(copy, data, size);
	json *j = json_parse(copy, size, &err);
	free(copy);
	if (!j)
		return 0;
	exercise_lookups(j);
	char *gen1 = write_value(j);
	json_free(j);
	char *gen2 = rewrite(gen1);
	char *gen3 = rewrite(gen2);
	if (strcmp(gen2, gen3) != 0) {
		fprintf(stderr, "round trip not stable:\n%s\n%s\n", gen2, gen3);
		abort();
	}
	free(gen1);
	free(gen2);
	free(gen3);
	return 0;
}
