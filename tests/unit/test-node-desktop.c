/* test-node-desktop: the desktop's mouse and keyboard bodies into xdotool's
 * argv (src/node/desktop/desktop-input.c): the words for each action, and
 * the refusals. Exit 0 = pass. */
#include <string.h>

#include "../../src/node/node-internal.h"
#include "check.h"

/* The argv joined by '|', or "ERR:<code>" */
static void run(bool mouse, const char *body, const char *want)
{
	const char *argv[40];
	char buf[512], msg[256], got[2048] = "";
	json *j = json_parse(body, strlen(body), NULL);
	const char *code;

	if (!j) {
		fprintf(stderr, "bad test body %s\n", body);
		failures++;
		return;
	}
	code = mouse ? desktop_mouse_argv(j, argv, 40, buf, sizeof(buf), msg, sizeof(msg))
		     : desktop_keyboard_argv(j, argv, 40, buf, sizeof(buf), msg, sizeof(msg));
	if (code)
		snprintf(got, sizeof(got), "ERR:%s", code);
	else
		for (size_t i = 0; argv[i]; i++) {
			size_t l = strlen(got);
			snprintf(got + l, sizeof(got) - l, "%s%s", i ? "|" : "", argv[i]);
		}
	if (strcmp(got, want) != 0) {
		fprintf(stderr, "%s %s\n gave [%s]\n want [%s]%s%s\n", mouse ? "mouse" : "keyboard",
			body, got, want, code ? " msg: " : "", code ? msg : "");
		failures++;
	}
	json_free(j);
}

int main(void)
{
	run(true, "{\"action\":\"move\",\"x\":10,\"y\":20}", "mousemove|10|20");
	run(true, "{\"action\":\"click\"}", "click|1");
	run(true, "{\"action\":\"click\",\"button\":\"right\",\"x\":0,\"y\":16383}",
	    "mousemove|0|16383|click|3");
	run(true, "{\"action\":\"double_click\",\"x\":5,\"y\":6}", "mousemove|5|6|click|--repeat|2|1");
	run(true, "{\"action\":\"right_click\"}", "click|3");
	run(true, "{\"action\":\"middle_click\"}", "click|2");
	run(true, "{\"action\":\"drag\",\"x\":1,\"y\":2,\"to_x\":3,\"to_y\":4}",
	    "mousemove|1|2|mousedown|1|mousemove|3|4|mouseup|1");
	run(true, "{\"action\":\"scroll\"}", "click|--repeat|1|5");
	run(true, "{\"action\":\"scroll\",\"direction\":\"left\",\"amount\":100}", "click|--repeat|100|6");
	run(true, "{}", "ERR:invalid_field");
	run(true, "{\"action\":\"move\"}", "ERR:invalid_field");
	run(true, "{\"action\":\"move\",\"x\":1}", "ERR:invalid_field");
	run(true, "{\"action\":\"move\",\"x\":16384,\"y\":1}", "ERR:invalid_field");
	run(true, "{\"action\":\"move\",\"x\":-1,\"y\":1}", "ERR:invalid_field");
	run(true, "{\"action\":\"move\",\"x\":1.5,\"y\":1}", "ERR:invalid_field");
	run(true, "{\"action\":\"click\",\"button\":\"4\"}", "ERR:invalid_field");
	run(true, "{\"action\":\"drag\",\"x\":1,\"y\":2,\"to_x\":3}", "ERR:invalid_field");
	run(true, "{\"action\":\"click\",\"to_x\":3,\"to_y\":3}", "ERR:invalid_field");
	run(true, "{\"action\":\"scroll\",\"amount\":0}", "ERR:invalid_field");

	run(false, "{\"type\":\"hello world\"}", "type|--delay|12|--|hello world");
	run(false, "{\"type\":\"--help\",\"delay_ms\":0}", "type|--delay|0|--|--help");
	run(false, "{\"type\":\"a\\nb\\tc\"}", "type|--delay|12|--|a\nb\tc");
	run(false, "{\"keys\":\"ctrl+c\"}", "key|ctrl+c");
	run(false, "{\"keys\":\"Enter esc ctrl+Page_Down control+alt+Delete\"}",
	    "key|Return|Escape|ctrl+Page_Down|ctrl+alt+Delete");
	run(false, "{}", "ERR:invalid_field");
	run(false, "{\"type\":\"a\",\"keys\":\"b\"}", "ERR:invalid_field");
	run(false, "{\"type\":\"\"}", "ERR:invalid_field");
	run(false, "{\"type\":\"a\\u001bb\"}", "ERR:invalid_field");
	run(false, "{\"keys\":\"-x\"}", "ERR:invalid_field");
	run(false, "{\"keys\":\"a+\"}", "ERR:invalid_field");
	run(false, "{\"keys\":\"a  b\"}", "ERR:invalid_field");
	run(false, "{\"keys\":\"a \"}", "ERR:invalid_field");
	run(false, "{\"keys\":\"$(id)\"}", "ERR:invalid_field");
	run(false, "{\"keys\":\"a;b\"}", "ERR:invalid_field");
	run(false, "{\"keys\":\"a+b+c+d+e+f+g+h+i\"}", "ERR:invalid_field");
	run(false, "{\"keys\":\"Return\",\"delay_ms\":1}", "ERR:invalid_field");
	{
		/* 4096 bytes typed, 4097 refused */
		char body[4200];
		memcpy(body, "{\"type\":\"", 9);
		memset(body + 9, 'x', 4096);
		strcpy(body + 9 + 4096, "\"}");
		const char *argv[40];
		char buf[512], msg[256];
		json *j = json_parse(body, strlen(body), NULL);
		CHECK(j && !desktop_keyboard_argv(j, argv, 40, buf, sizeof(buf), msg, sizeof(msg)));
		json_free(j);
		memset(body + 9, 'x', 4097);
		strcpy(body + 9 + 4097, "\"}");
		j = json_parse(body, strlen(body), NULL);
		CHECK(j && desktop_keyboard_argv(j, argv, 40, buf, sizeof(buf), msg, sizeof(msg)));
		json_free(j);
	}
	return failures ? 1 : 0;
}
