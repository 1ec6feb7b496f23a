/* desktop-input.c - a mouse or keyboard request body, checked field by
 * field, turned into xdotool's argv.
 *
 * The words end up on a command line inside the sandbox (as argv, never
 * through a shell), so each one is either fixed text, a number printed
 * here, a key name from a small charset, or the text to type behind `--`
 * (so it is never read as an option). Pure: no I/O, no allocation;
 * tests/unit/test-desktop.c and tests/fuzz/fuzz-desktop.c call it.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "desktop.h"

struct words {
	const char **v;
	size_t n, cap;
	char *buf;
	size_t used, bufcap;
	bool full;
};

static void add(struct words *w, const char *s)
{
	if (w->n + 1 >= w->cap) {
		w->full = true;
		return;
	}
	w->v[w->n++] = s;
	w->v[w->n] = NULL;
}

/* A copy of s in the buffer, added as a word. */
static void add_copy(struct words *w, const char *s, size_t len)
{
	if (w->used + len + 1 > w->bufcap) {
		w->full = true;
		return;
	}
	memcpy(w->buf + w->used, s, len);
	w->buf[w->used + len] = '\0';
	add(w, w->buf + w->used);
	w->used += len + 1;
}

static void add_num(struct words *w, long v)
{
	char tmp[24];
	int k = snprintf(tmp, sizeof(tmp), "%ld", v);

	add_copy(w, tmp, (size_t)k);
}

/* An integer field in lo..hi: 1 present, 0 absent, -1 bad (msg filled). */
static int int_field(const json *body, const char *key, long lo, long hi, long *out, char *msg,
		     size_t sz)
{
	const json *v = json_get(body, key);

	if (!v)
		return 0;
	if (v->type != JSON_NUM || !v->is_int || v->i < lo || v->i > hi) {
		snprintf(msg, sz, "`%s` must be an integer in %ld..%ld", key, lo, hi);
		return -1;
	}
	*out = (long)v->i;
	return 1;
}

/* A string field that must be one of the NULL-terminated names: its index,
 * def when absent, -1 when bad (msg filled). */
static int enum_field(const json *body, const char *key, const char *const *names, int def,
		      char *msg, size_t sz)
{
	const json *v = json_get(body, key);

	if (!v)
		return def;
	for (int i = 0; v->type == JSON_STR && names[i]; i++)
		if (strcmp(v->str, names[i]) == 0 && strlen(names[i]) == v->str_len)
			return i;
	snprintf(msg, sz, "`%s` must be one of:", key);
	for (int i = 0; names[i]; i++) {
		size_t l = strlen(msg);
		snprintf(msg + l, sz - l, "%s %s", i ? "," : "", names[i]);
	}
	return -1;
}

const char *desktop_mouse_argv(const json *body, const char **argv, size_t cap, char *buf,
			       size_t bufcap, char *msg, size_t msgsz)
{
	enum { MOVE, CLICK, DOUBLE, RIGHT, MIDDLE, DRAG, SCROLL };
	static const char *const actions[] = { "move", "click", "double_click", "right_click",
					       "middle_click", "drag", "scroll", NULL };
	static const char *const buttons[] = { "left", "middle", "right", NULL };
	static const char *const dirs[] = { "up", "down", "left", "right", NULL };
	static const char *const btn_word[] = { "1", "2", "3" };
	static const char *const dir_word[] = { "4", "5", "6", "7" };
	struct words w = { .v = argv, .cap = cap, .buf = buf, .bufcap = bufcap };
	long x = 0, y = 0, tx = 0, ty = 0, amount = 1;
	int hx, hy, htx, hty, ha, action, button, dir;

	if (cap)
		argv[0] = NULL;
	if (!json_get(body, "action")) {
		snprintf(msg, msgsz, "`action` is required");
		return "invalid_field";
	}
	if ((action = enum_field(body, "action", actions, -1, msg, msgsz)) < 0)
		return "invalid_field";
	if ((hx = int_field(body, "x", 0, DESKTOP_COORD_MAX, &x, msg, msgsz)) < 0 ||
	    (hy = int_field(body, "y", 0, DESKTOP_COORD_MAX, &y, msg, msgsz)) < 0 ||
	    (htx = int_field(body, "to_x", 0, DESKTOP_COORD_MAX, &tx, msg, msgsz)) < 0 ||
	    (hty = int_field(body, "to_y", 0, DESKTOP_COORD_MAX, &ty, msg, msgsz)) < 0 ||
	    (ha = int_field(body, "amount", 1, 100, &amount, msg, msgsz)) < 0)
		return "invalid_field";
	if (hx != hy) {
		snprintf(msg, msgsz, "give both `x` and `y`, or neither");
		return "invalid_field";
	}
	if (!hx && (action == MOVE || action == DRAG)) {
		snprintf(msg, msgsz, "`%s` needs `x` and `y`", actions[action]);
		return "invalid_field";
	}
	if ((htx || hty) != (action == DRAG) || htx != hty) {
		snprintf(msg, msgsz, action == DRAG ? "`drag` needs `to_x` and `to_y`"
						    : "`to_x` and `to_y` are for `drag` only");
		return "invalid_field";
	}
	if (ha && action != SCROLL) {
		snprintf(msg, msgsz, "`amount` is for `scroll` only");
		return "invalid_field";
	}
	if (json_get(body, "button") && action != CLICK) {
		snprintf(msg, msgsz, "`button` is for `click` only");
		return "invalid_field";
	}
	if (json_get(body, "direction") && action != SCROLL) {
		snprintf(msg, msgsz, "`direction` is for `scroll` only");
		return "invalid_field";
	}
	if ((button = enum_field(body, "button", buttons, 0, msg, msgsz)) < 0 ||
	    (dir = enum_field(body, "direction", dirs, 1, msg, msgsz)) < 0)
		return "invalid_field";

	if (hx) {
		add(&w, "mousemove");
		add_num(&w, x);
		add_num(&w, y);
	}
	switch (action) {
	case MOVE:
		break;
	case CLICK:
		add(&w, "click");
		add(&w, btn_word[button]);
		break;
	case DOUBLE:
		add(&w, "click");
		add(&w, "--repeat");
		add(&w, "2");
		add(&w, "1");
		break;
	case RIGHT:
		add(&w, "click");
		add(&w, "3");
		break;
	case MIDDLE:
		add(&w, "click");
		add(&w, "2");
		break;
	case DRAG:
		add(&w, "mousedown");
		add(&w, "1");
		add(&w, "mousemove");
		add_num(&w, tx);
		add_num(&w, ty);
		add(&w, "mouseup");
		add(&w, "1");
		break;
	case SCROLL:
		add(&w, "click");
		add(&w, "--repeat");
		add_num(&w, amount);
		add(&w, dir_word[dir]);
		break;
	}
	if (w.full) {
		snprintf(msg, msgsz, "internal: argv too small");
		return "internal";
	}
	return NULL;
}

/* Friendly names (E2B's, lower case) for X keysyms; anything else in the
 * charset goes to xdotool as it is (a keysym such as `Return` or `F5`, or
 * one of its own aliases: ctrl, alt, shift, super). */
static const char *keysym_of(const char *name, size_t len)
{
	static const char *const map[][2] = {
		{ "enter", "Return" },     { "return", "Return" },  { "esc", "Escape" },
		{ "escape", "Escape" },    { "backspace", "BackSpace" }, { "tab", "Tab" },
		{ "space", "space" },      { "up", "Up" },          { "down", "Down" },
		{ "left", "Left" },        { "right", "Right" },    { "delete", "Delete" },
		{ "del", "Delete" },       { "home", "Home" },      { "end", "End" },
		{ "page_up", "Page_Up" },  { "page_down", "Page_Down" }, { "insert", "Insert" },
		{ "control", "ctrl" },     { "cmd", "super" },      { "win", "super" },
		{ "meta", "Meta_L" },      { "menu", "Menu" },
	};
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (strlen(map[i][0]) == len && strncasecmp(name, map[i][0], len) == 0)
			return map[i][1];
	return NULL;
}

static bool key_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       ch == '_';
}

#define KEYS_MAX_LEN 256
#define KEYS_MAX_COMBOS 16
#define KEYS_MAX_NAMES 8
#define KEY_NAME_MAX 32

const char *desktop_keyboard_argv(const json *body, const char **argv, size_t cap, char *buf,
				  size_t bufcap, char *msg, size_t msgsz)
{
	const json *text = json_get(body, "type"), *keys = json_get(body, "keys");
	struct words w = { .v = argv, .cap = cap, .buf = buf, .bufcap = bufcap };
	long delay = 12;
	int hd;

	if (cap)
		argv[0] = NULL;
	if (!text == !keys) {
		snprintf(msg, msgsz, "give exactly one of `type` (text) and `keys` (e.g. \"ctrl+c\")");
		return "invalid_field";
	}
	if ((hd = int_field(body, "delay_ms", 0, 1000, &delay, msg, msgsz)) < 0)
		return "invalid_field";
	if (text) {
		if (text->type != JSON_STR || text->str_len == 0 ||
		    text->str_len > DESKTOP_TEXT_MAX || strlen(text->str) != text->str_len) {
			snprintf(msg, msgsz, "`type` must be a string of 1..%d bytes", DESKTOP_TEXT_MAX);
			return "invalid_field";
		}
		for (size_t i = 0; i < text->str_len; i++) {
			unsigned char ch = (unsigned char)text->str[i];
			if ((ch < 0x20 && ch != '\n' && ch != '\t') || ch == 0x7f) {
				snprintf(msg, msgsz, "`type` holds a control character (only \\n"
						     " and \\t are typed)");
				return "invalid_field";
			}
		}
		add(&w, "type");
		add(&w, "--delay");
		add_num(&w, delay);
		add(&w, "--");
		add(&w, text->str);
	} else {
		const char *s = keys->str;
		size_t combos = 0;

		if (hd) {
			snprintf(msg, msgsz, "`delay_ms` is for `type` only");
			return "invalid_field";
		}
		if (keys->type != JSON_STR || keys->str_len == 0 || keys->str_len > KEYS_MAX_LEN ||
		    strlen(keys->str) != keys->str_len) {
			snprintf(msg, msgsz, "`keys` must be a string of 1..%d bytes", KEYS_MAX_LEN);
			return "invalid_field";
		}
		add(&w, "key");
		/* COMBO[ COMBO...], COMBO = NAME[+NAME...], NAME = [A-Za-z0-9_]{1,32} */
		while (*s) {
			char combo[KEYS_MAX_NAMES * (KEY_NAME_MAX + 1) + 1];
			size_t cl = 0, names = 0;

			if (++combos > KEYS_MAX_COMBOS) {
				snprintf(msg, msgsz, "`keys`: at most %d combinations",
					 KEYS_MAX_COMBOS);
				return "invalid_field";
			}
			for (;;) {
				size_t len = 0;
				const char *sym;

				while (key_char(s[len]))
					len++;
				if (len == 0 || len > KEY_NAME_MAX || ++names > KEYS_MAX_NAMES) {
					snprintf(msg, msgsz,
						 "`keys` must be key names (letters, digits, _; up to"
						 " %d each) joined by + (at most %d), combinations"
						 " separated by one space, e.g. \"ctrl+c\" or"
						 " \"Return\"",
						 KEY_NAME_MAX, KEYS_MAX_NAMES);
					return "invalid_field";
				}
				sym = keysym_of(s, len);
				if (cl)
					combo[cl++] = '+';
				if (sym) {
					memcpy(combo + cl, sym, strlen(sym));
					cl += strlen(sym);
				} else {
					memcpy(combo + cl, s, len);
					cl += len;
				}
				s += len;
				if (*s != '+')
					break;
				s++;
			}
			add_copy(&w, combo, cl);
			if (*s == ' ' && s[1])
				s++;
			else if (*s) {
				snprintf(msg, msgsz,
					 "`keys`: combinations are separated by one space"
					 " (e.g. \"ctrl+a Delete\")");
				return "invalid_field";
			}
		}
	}
	if (w.full) {
		snprintf(msg, msgsz, "internal: argv too small");
		return "internal";
	}
	return NULL;
}
