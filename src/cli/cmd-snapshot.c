/* cmd-snapshot.c - `snapshot create|ls|rm`, `rollback` and `fork`. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static int snap_create(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "name", required_argument, NULL, 'n' },
		{ "full", no_argument, NULL, 'F' },
		CLI_COMMON_OPTS,
		{ 0 },
	};
	_cleanup_free_ char *raw = NULL, *id = NULL, *target = NULL;
	const char *name = NULL;
	bool full = false;
	struct buf body;
	struct jw w;
	json *resp = NULL;
	int opt, r = 0;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (opt == 'n')
			name = optarg;
		else if (opt == 'F')
			full = true;
		else if ((r = cli_common_opt(cli, opt, "snapshot create")))
			return r;
	}
	if (optind + 1 != argc)
		return cli_usage("snapshot create",
				 "usage: airlock snapshot create SBX [--name N] [--full]");
	buf_init(&body);
	jw_init(&w, &body);
	jw_obj(&w);
	if (name) {
		jw_key(&w, "name");
		jw_str(&w, name);
	}
	if (full) {
		jw_key(&w, "kind");
		jw_str(&w, "full");
	}
	jw_end(&w);
	id = cli_escape(argv[optind]);
	target = xasprintf("/v1/sandboxes/%s/snapshots", id);
	r = cli_call_json(cli, "POST", target, body.data, NULL, &resp, &raw);
	if (r == 0) {
		if (cli->json || !resp || resp->type != JSON_OBJ)
			cli_print_raw(raw);
		else
			printf("%s\n", json_get_str(resp, "id") ? json_get_str(resp, "id") : "");
	}
	json_free(resp);
	buf_free(&body);
	return r;
}

static int snap_ls(struct cli *cli, int argc, char **argv)
{
	static const char *const head[] = { "ID", "NAME", "KIND", "SIZE", "CREATED" };
	static const char *const fields[] = { "id", "name", "kind", "size_bytes", "created_at" };
	_cleanup_free_ char *id = NULL, *target = NULL;
	int r;

	if ((r = cli_only_common(cli, argc, argv, "snapshot ls", 1, 1)))
		return r;
	id = cli_escape(argv[optind]);
	target = xasprintf("/v1/sandboxes/%s/snapshots", id);
	return cli_list_table(cli, target, "snapshots", "snapshot list", 5, head, fields);
}

static int snap_rm(struct cli *cli, int argc, char **argv)
{
	_cleanup_free_ char *id = NULL, *snap = NULL, *target = NULL, *raw = NULL;
	json *resp = NULL;
	int r;

	if ((r = cli_only_common(cli, argc, argv, "snapshot rm", 2, 2)))
		return r;
	id = cli_escape(argv[optind]);
	snap = cli_escape(argv[optind + 1]);
	target = xasprintf("/v1/sandboxes/%s/snapshots/%s", id, snap);
	r = cli_call_json(cli, "DELETE", target, NULL, NULL, &resp, &raw);
	json_free(resp);
	return r;
}

int cmd_snapshot(struct cli *cli, int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "create") == 0)
		return snap_create(cli, argc - 1, argv + 1);
	if (argc >= 2 && (strcmp(argv[1], "ls") == 0 || strcmp(argv[1], "list") == 0))
		return snap_ls(cli, argc - 1, argv + 1);
	if (argc >= 2 && (strcmp(argv[1], "rm") == 0 || strcmp(argv[1], "delete") == 0))
		return snap_rm(cli, argc - 1, argv + 1);
	return cli_usage("snapshot",
			 "usage: airlock snapshot create SBX [--name N] [--full] | ls SBX | "
			 "rm SBX SNAP");
}

/* POST .../rollback {snapshot}: answers the sandbox, shown like `get`. */
int cmd_rollback(struct cli *cli, int argc, char **argv)
{
	_cleanup_free_ char *raw = NULL, *id = NULL, *target = NULL;
	struct buf body;
	struct jw w;
	json *resp = NULL;
	int r;

	if ((r = cli_only_common(cli, argc, argv, "rollback", 2, 2)))
		return r;
	buf_init(&body);
	jw_init(&w, &body);
	jw_obj(&w);
	jw_key(&w, "snapshot");
	jw_str(&w, argv[optind + 1]);
	jw_end(&w);
	id = cli_escape(argv[optind]);
	target = xasprintf("/v1/sandboxes/%s/rollback", id);
	r = cli_call_json(cli, "POST", target, body.data, NULL, &resp, &raw);
	if (r == 0) {
		if (cli->json || !resp || resp->type != JSON_OBJ)
			cli_print_raw(raw);
		else
			cli_print_fields(resp);
	}
	json_free(resp);
	buf_free(&body);
	return r;
}

/* POST .../fork {count, from_snapshot}: prints the children's ids, one a
 * line (the whole answer with --json). */
int cmd_fork(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "count", required_argument, NULL, 'c' },
		{ "from", required_argument, NULL, 'f' },
		CLI_COMMON_OPTS,
		{ 0 },
	};
	_cleanup_free_ char *raw = NULL, *id = NULL, *target = NULL;
	const char *from = NULL;
	long count = 1;
	struct buf body;
	struct jw w;
	json *resp = NULL;
	char *end;
	int opt, r = 0;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (opt == 'c') {
			count = strtol(optarg, &end, 10);
			if (*end || end == optarg)
				return cli_usage("fork", "fork: --count needs a number");
		} else if (opt == 'f') {
			from = optarg;
		} else if ((r = cli_common_opt(cli, opt, "fork"))) {
			return r;
		}
	}
	if (optind + 1 != argc)
		return cli_usage("fork", "usage: airlock fork SBX [--count N] [--from SNAP]");
	buf_init(&body);
	jw_init(&w, &body);
	jw_obj(&w);
	jw_key(&w, "count");
	jw_int(&w, count);
	if (from) {
		jw_key(&w, "from_snapshot");
		jw_str(&w, from);
	}
	jw_end(&w);
	id = cli_escape(argv[optind]);
	target = xasprintf("/v1/sandboxes/%s/fork", id);
	if ((r = cli_load(cli))) {
		buf_free(&body);
		return r;
	}
	cli_progress_start("forking %s", argv[optind]);
	if (count > 0)
		cli_progress_set(0, (uint64_t)count, "sandboxes", NULL);
	cli_progress_follow(cli, argv[optind], "fork");
	r = cli_call_json(cli, "POST", target, body.data, NULL, &resp, &raw);
	if (r == 0)
		cli_progress_done(0, NULL);
	cli_progress_end();
	if (r == 0) {
		const json *kids = resp ? json_get(resp, "sandboxes") : NULL;
		if (cli->json || !kids || kids->type != JSON_ARR) {
			cli_print_raw(raw);
		} else {
			for (size_t i = 0; i < kids->n; i++) {
				const char *kid = json_get_str(kids->items[i], "id");
				printf("%s\n", kid ? kid : "");
			}
		}
	}
	json_free(resp);
	buf_free(&body);
	return r;
}
