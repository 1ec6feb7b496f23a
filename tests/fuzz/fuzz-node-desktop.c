/* fuzz-node-desktop: the desktop's mouse and keyboard bodies (a tenant's
 * request) turned into xdotool's argv (src/node/desktop/desktop-input.c).
 * Nothing may crash or read past the input; an accepted body gives a
 * NULL-terminated argv whose words are xdotool's own commands and options,
 * numbers, key names of [A-Za-z0-9_+], or, behind "--", the text to type:
 * no word the tool could take for an option it was not given. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/node/node-internal.h"

static bool fixed_word(const char *w)
{
	static const char *const ok[] = { "mousemove", "click", "--repeat", "mousedown", "mouseup",
					  "type", "--delay", "key", NULL };
	for (size_t i = 0; ok[i]; i++)
		if (strcmp(w, ok[i]) == 0)
			return true;
	return false;
}

static void check_argv(const char **v, bool keyboard)
{
	bool text_next = false;
	size_t n = 0;

	for (; v[n]; n++) {
		const char *w = v[n];

		if (n >= 40)
			abort();
		if (text_next) {        /* the text, after "--": anything but control bytes */
			for (const unsigned char *p = (const unsigned char *)w; *p; p++)
				if ((*p < 0x20 && *p != '\n' && *p != '\t') || *p == 0x7f)
					abort();
			if (v[n + 1])
				abort();
			text_next = false;
			continue;
		}
		if (strcmp(w, "--") == 0) {
			if (!keyboard)
				abort();
			text_next = true;
			continue;
		}
		if (fixed_word(w))
			continue;
		if (!*w || w[0] == '-')
			abort();
		for (const char *p = w; *p; p++)
			if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
			      (*p >= '0' && *p <= '9') || *p == '_' || *p == '+'))
				abort();
	}
	if (n == 0 || text_next)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *argv[40];
	char buf[512], msg[256];
	json *j = json_parse((const char *)data, size, NULL);

	if (!j)
		return 0;
	if (j->type == JSON_OBJ) {
		if (!desktop_mouse_argv(j, argv, 40, buf, sizeof(buf), msg, sizeof(msg)))
			check_argv(argv, false);
		if (!desktop_keyboard_argv(j, argv, 40, buf, sizeof(buf), msg, sizeof(msg)))
			check_argv(argv, true);
	}
	json_free(j);
	return 0;
}
