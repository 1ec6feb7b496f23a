/* cmd-files.c - `airlock files ...`: files inside a sandbox. */
#include <errno.h>
#include <string.h>

#include "cli.h"

#define MAX_WRITE (16u << 20)   /* the API's limit for file writes */

/* "/v1/sandboxes/<sbx>/<what>?path=<path>" with both escaped. Caller owns. */
static char *files_target(const char *sbx, const char *what, const char *path)
{
	_cleanup_free_ char *s = cli_escape(sbx), *p = cli_escape(path);

	return xasprintf("/v1/sandboxes/%s/%s?path=%s", s, what, p);
}

static int files_read(struct cli *cli, int argc, char **argv)
{
	_cleanup_free_ char *target = NULL;
	int r;

	if ((r = cli_only_common(cli, argc, argv, "files read", 2, 2)))
		return r;
	target = files_target(argv[optind], "files", argv[optind + 1]);
	return cli_stream_to_fd(cli, "GET", target, 1);
}

static int files_write(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "mode", required_argument, NULL, 'm' },
		CLI_COMMON_OPTS,
		{ 0 },
	};
	_cleanup_free_ char *target = NULL;
	const char *mode = NULL;
	struct http_resp resp;
	struct buf data;
	char chunk[65536];
	int opt, r;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
		if (opt == 'm')
			mode = optarg;
		else if ((r = cli_common_opt(cli, opt, "files write")))
			return r;
	}
	if (argc - optind != 2)
		return cli_usage("files write", "usage: airlock files write SBX PATH [--mode 0644] < data");
	if (mode && (strlen(mode) < 3 || strlen(mode) > 4 || strspn(mode, "01234567") != strlen(mode)))
		return cli_usage("files write", "--mode needs an octal mode like 0644");
	target = files_target(argv[optind], "files", argv[optind + 1]);
	if (mode) {
		char *t = xasprintf("%s&mode=%s", target, mode);
		free(target);
		target = t;
	}
	buf_init(&data);
	for (;;) {
		ssize_t n = read(0, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			buf_free(&data);
			return cli_fail("io", "cannot read stdin: %s", strerror(errno));
		}
		if (n == 0)
			break;
		if (data.len + (size_t)n > MAX_WRITE) {
			buf_free(&data);
			return cli_fail("body_too_large", "stdin is larger than the %u MiB limit",
					MAX_WRITE >> 20);
		}
		buf_add(&data, chunk, (size_t)n);
	}
	r = cli_call(cli, "PUT", target, "application/octet-stream", data.data, data.len, NULL,
		     &resp);
	buf_free(&data);
	if (r == 0)
		http_resp_free(&resp);
	return r;
}

static int files_ls(struct cli *cli, int argc, char **argv)
{
	static const char *const head[] = { "TYPE", "MODE", "SIZE", "MTIME", "NAME" };
	static const char *const fields[] = { "type", "mode", "size", "mtime", "name" };
	_cleanup_free_ char *target = NULL;
	int r;

	if ((r = cli_only_common(cli, argc, argv, "files ls", 2, 2)))
		return r;
	target = files_target(argv[optind], "files/list", argv[optind + 1]);
	return cli_list_table(cli, target, "entries", "entries", 5, head, fields);
}

static int files_stat(struct cli *cli, int argc, char **argv)
{
	_cleanup_free_ char *target = NULL, *raw = NULL;
	json *resp = NULL;
	int r;

	if ((r = cli_only_common(cli, argc, argv, "files stat", 2, 2)))
		return r;
	target = files_target(argv[optind], "files/stat", argv[optind + 1]);
	if ((r = cli_call_json(cli, "GET", target, NULL, NULL, &resp, &raw)))
		return r;
	if (cli->json || !resp || resp->type != JSON_OBJ)
		cli_print_raw(raw);
	else
		cli_print_fields(resp);
	json_free(resp);
	return 0;
}

/* `VERB SBX PATH [-r]`: the target of route for PATH, with `&rec` when -r
 * was given (caller frees), or NULL and *rc set (usage, --help). */
static char *path_target_r(struct cli *cli, int argc, char **argv, const char *verb,
			   const char *route, const char *rec, int *rc)
{
	static const struct option opts[] = {
		{ "recursive", no_argument, NULL, 'r' },
		CLI_COMMON_OPTS,
		{ 0 },
	};
	bool recursive = false;
	char *target;
	int opt;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "rh", opts, NULL)) != -1) {
		if (opt == 'r')
			recursive = true;
		else if ((*rc = cli_common_opt(cli, opt, verb)))
			return NULL;
	}
	if (argc - optind != 2) {
		*rc = cli_usage(verb, "usage: airlock %s SBX PATH [-r]", verb);
		return NULL;
	}
	target = files_target(argv[optind], route, argv[optind + 1]);
	if (recursive) {
		char *t = xasprintf("%s&%s", target, rec);
		free(target);
		target = t;
	}
	return target;
}

static int files_rm(struct cli *cli, int argc, char **argv)
{
	int r = 0;
	_cleanup_free_ char *target = path_target_r(cli, argc, argv, "files rm", "files",
						    "recursive=1", &r);
	struct http_resp resp;

	if (!target)
		return r;
	if ((r = cli_call(cli, "DELETE", target, NULL, NULL, 0, NULL, &resp)))
		return r;
	http_resp_free(&resp);
	return 0;
}

static int files_post(struct cli *cli, const char *sbx, const char *what, const char *body)
{
	_cleanup_free_ char *s = cli_escape(sbx);
	_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s/files/%s", s, what);

	return cli_call_json(cli, "POST", target, body, NULL, NULL, NULL);
}

static int files_mkdir(struct cli *cli, int argc, char **argv)
{
	struct buf b;
	struct jw w;
	int r;

	if ((r = cli_only_common(cli, argc, argv, "files mkdir", 2, 2)))
		return r;
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "path");
	jw_str(&w, argv[optind + 1]);
	jw_key(&w, "parents");
	jw_bool(&w, true);
	jw_end(&w);
	r = files_post(cli, argv[optind], "mkdir", b.data);
	buf_free(&b);
	return r;
}

static int files_mv(struct cli *cli, int argc, char **argv)
{
	struct buf b;
	struct jw w;
	int r;

	if ((r = cli_only_common(cli, argc, argv, "files mv", 3, 3)))
		return r;
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "from");
	jw_str(&w, argv[optind + 1]);
	jw_key(&w, "to");
	jw_str(&w, argv[optind + 2]);
	jw_end(&w);
	r = files_post(cli, argv[optind], "rename", b.data);
	buf_free(&b);
	return r;
}

/* One event line of the watch stream as text: "create /x/a", "rename
 * /x/a -> /x/b", "overflow" (a trailing '/' for directories). */
static int watch_line(void *arg, char *line, size_t len)
{
	struct cli *cli = arg;
	json *ev;

	if (cli->json) {
		fwrite(line, 1, len, stdout);
		putchar('\n');
		fflush(stdout);
		return 0;
	}
	if (!(ev = json_parse(line, len, NULL)))
		return 0;
	const char *type = json_get_str(ev, "type");
	const char *path = json_get_str(ev, "path");
	const char *from = json_get_str(ev, "from");
	bool bad = false, dir = json_get_bool(ev, "dir", false, &bad);
	if (type && strcmp(type, "start") == 0)
		fprintf(stderr, "watching %s\n", path ? path : "?");
	else if (type && strcmp(type, "rename") == 0)
		printf("rename %s%s -> %s%s\n", from ? from : "?", dir ? "/" : "",
		       path ? path : "?", dir ? "/" : "");
	else if (type && path)
		printf("%s %s%s\n", type, path, dir ? "/" : "");
	else if (type)
		printf("%s\n", type);
	fflush(stdout);
	json_free(ev);
	return 0;
}

static int files_watch(struct cli *cli, int argc, char **argv)
{
	int r = 0;
	_cleanup_free_ char *target = path_target_r(cli, argc, argv, "files watch", "files/watch",
						    "recursive=true", &r);

	if (!target)
		return r;
	return cli_stream_lines(cli, "GET", target, NULL, watch_line, cli);
}

int cmd_files(struct cli *cli, int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(struct cli *, int, char **);
	} subs[] = {
		{ "read", files_read },	  { "cat", files_read },   { "write", files_write },
		{ "ls", files_ls },	  { "stat", files_stat },  { "rm", files_rm },
		{ "mkdir", files_mkdir }, { "mv", files_mv },	   { "watch", files_watch },
	};

	if (argc < 2)
		return cli_usage("files", "missing subcommand (read, write, ls, stat, rm, mkdir, mv, watch)");
	for (size_t i = 0; i < ARRAY_SIZE(subs); i++)
		if (strcmp(argv[1], subs[i].name) == 0)
			return subs[i].fn(cli, argc - 1, argv + 1);
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		cli_print_verb_usage(stdout, "files");
		return 0;
	}
	return cli_usage("files", "unknown subcommand `%s`", argv[1]);
}
