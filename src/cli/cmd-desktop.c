/* cmd-desktop.c - `airlock desktop screenshot|move|click|type|key|stream SBX ...`:
 * the desktop endpoints (docs/API.md, "Desktop"). The server checks every
 * value; here only the shape of the command line. */
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static char *desk_target(const char *sbx, const char *what)
{
	_cleanup_free_ char *id = cli_escape(sbx);

	return xasprintf("/v1/sandboxes/%s/desktop/%s", id, what);
}

/* POST a JSON body; 0 or an exit code. */
static int desk_post(struct cli *cli, const char *sbx, const char *what, const char *body)
{
	_cleanup_free_ char *target = desk_target(sbx, what);
	struct http_resp resp;
	int r = cli_call(cli, "POST", target, "application/json", body, strlen(body), NULL, &resp);

	if (r == 0)
		http_resp_free(&resp);
	return r;
}

/* screenshot SBX FILE ("-": stdout) */
static int desk_screenshot(struct cli *cli, int argc, char **argv)
{
	_cleanup_free_ char *target = NULL;
	const char *file;
	int r, fd;

	if ((r = cli_only_common(cli, argc, argv, "desktop screenshot", 2, 2)))
		return r;
	file = argv[optind + 1];
	target = desk_target(argv[optind], "screenshot");
	if (strcmp(file, "-") == 0)
		return cli_stream_to_fd(cli, "POST", target, 1);
	fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return cli_fail("io", "cannot write %s: %m", file);
	r = cli_stream_to_fd(cli, "POST", target, fd);
	close(fd);
	if (r == 0)
		printf("%s\n", file);
	return r;
}

/* move SBX X Y ; click SBX [X Y] [--button B] [--double] */
static int desk_pointer(struct cli *cli, int argc, char **argv, bool click)
{
	static const struct option opts[] = {
		{ "button", required_argument, NULL, 'b' },
		{ "double", no_argument, NULL, 'd' },
		CLI_COMMON_OPTS,
		{ 0 },
	};
	const char *verb = click ? "desktop click" : "desktop move";
	const char *button = NULL;
	bool dbl = false;
	long long x = 0, y = 0;
	_cleanup_free_ char *body = NULL;
	int opt, r, n;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "b:dh", opts, NULL)) != -1) {
		if (opt == 'b' && click)
			button = optarg;
		else if (opt == 'd' && click)
			dbl = true;
		else if ((r = cli_common_opt(cli, opt, verb)))
			return r;
	}
	n = argc - optind;
	if (!(n == 3 || (click && n == 1)))
		return cli_usage(verb, click ? "usage: airlock desktop click SBX [X Y] [--button left|"
					       "middle|right] [--double]"
					     : "usage: airlock desktop move SBX X Y");
	if (n == 3 && (!cli_parse_int(argv[optind + 1], 0, 16383, &x) ||
		       !cli_parse_int(argv[optind + 2], 0, 16383, &y)))
		return cli_usage(verb, "X and Y are pixels, 0..16383");
	if (button && strcmp(button, "left") && strcmp(button, "middle") && strcmp(button, "right"))
		return cli_usage(verb, "--button is left, middle or right");
	if (button && dbl)
		return cli_usage(verb, "--double clicks the left button; give one of them");
	{
		_cleanup_free_ char *pos =
			n == 3 ? xasprintf(",\"x\":%lld,\"y\":%lld", x, y) : xstrdup("");
		if (!click)
			body = xasprintf("{\"action\":\"move\"%s}", pos);
		else if (dbl)
			body = xasprintf("{\"action\":\"double_click\"%s}", pos);
		else
			body = xasprintf("{\"action\":\"click\",\"button\":\"%s\"%s}",
					 button ? button : "left", pos);
	}
	return desk_post(cli, argv[optind], "mouse", body);
}

/* type SBX TEXT ; key SBX COMBO... */
static int desk_keys(struct cli *cli, int argc, char **argv, bool type)
{
	const char *verb = type ? "desktop type" : "desktop key";
	struct buf b;
	struct jw w;
	int r;

	if ((r = cli_only_common(cli, argc, argv, verb, 2, type ? 2 : 17)))
		return r;
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, type ? "type" : "keys");
	if (type) {
		jw_str(&w, argv[optind + 1]);
	} else {
		struct buf k;
		buf_init(&k);
		for (int i = optind + 1; i < argc; i++)
			buf_printf(&k, "%s%s", i > optind + 1 ? " " : "", argv[i]);
		jw_str(&w, k.data);
		buf_free(&k);
	}
	jw_end(&w);
	r = desk_post(cli, argv[optind], "keyboard", b.data);
	buf_free(&b);
	return r;
}

/* stream SBX: print the URL (the whole answer with --json) */
static int desk_stream(struct cli *cli, int argc, char **argv)
{
	_cleanup_free_ char *target = NULL, *raw = NULL;
	json *resp = NULL;
	int r;

	if ((r = cli_only_common(cli, argc, argv, "desktop stream", 1, 1)))
		return r;
	target = desk_target(argv[optind], "stream");
	r = cli_call_json(cli, "GET", target, NULL, NULL, &resp, &raw);
	if (r == 0) {
		const char *url = resp ? json_get_str(resp, "url") : NULL;
		if (cli->json || !url)
			cli_print_raw(raw);
		else
			printf("%s\n", url);
	}
	json_free(resp);
	return r;
}

int cmd_desktop(struct cli *cli, int argc, char **argv)
{
	if (argc < 2)
		return cli_usage("desktop", "missing subcommand (screenshot, move, click, type, key,"
					    " stream)");
	if (strcmp(argv[1], "screenshot") == 0)
		return desk_screenshot(cli, argc - 1, argv + 1);
	if (strcmp(argv[1], "move") == 0 || strcmp(argv[1], "click") == 0)
		return desk_pointer(cli, argc - 1, argv + 1, argv[1][0] == 'c');
	if (strcmp(argv[1], "type") == 0 || strcmp(argv[1], "key") == 0)
		return desk_keys(cli, argc - 1, argv + 1, argv[1][0] == 't');
	if (strcmp(argv[1], "stream") == 0)
		return desk_stream(cli, argc - 1, argv + 1);
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		cli_print_verb_usage(stdout, "desktop");
		return 0;
	}
	return cli_usage("desktop", "unknown subcommand `%s`", argv[1]);
}
