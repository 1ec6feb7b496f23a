/* cmd-network.c - `airlock network`: a sandbox's egress policy and its gateway's
 * decision log.
 *   network SBX                  the policy in force (and the address)
 *   network set SBX POLICY       POLICY: allow-all, deny-all or JSON
 *   network log SBX              the decisions, oldest first */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

char *cli_policy_json(const char *arg)
{
	err_t err = { 0 };
	json *j;

	if (!strcmp(arg, "allow-all") || !strcmp(arg, "deny-all"))
		return xasprintf("\"%s\"", arg);
	j = json_parse(arg, strlen(arg), &err);
	if (!j)
		return NULL;
	json_free(j);
	return xstrdup(arg);
}

int cmd_network(struct cli *cli, int argc, char **argv)
{
	static const char *const head[] = { "TIME_MS", "PROTO", "HOST", "IP", "PORT", "DECISION",
					    "RULE" };
	static const char *const fields[] = { "time_ms", "proto", "host", "ip", "port", "decision",
					      "rule" };
	const char *sub = argc >= 2 ? argv[1] : "";
	_cleanup_free_ char *id = NULL, *target = NULL, *raw = NULL, *body = NULL;
	json *resp = NULL;
	int r;

	if (!strcmp(sub, "log")) {
		if ((r = cli_only_common(cli, argc - 1, argv + 1, "network log", 1, 1)))
			return r;
		id = cli_escape(argv[1 + optind]);
		target = xasprintf("/v1/sandboxes/%s/network/log", id);
		return cli_list_table(cli, target, "entries", "decisions", 7, head, fields);
	}
	if (!strcmp(sub, "set")) {
		if ((r = cli_only_common(cli, argc - 1, argv + 1, "network set", 2, 2)))
			return r;
		id = cli_escape(argv[1 + optind]);
		body = cli_policy_json(argv[2 + optind]);
		if (!body)
			return cli_usage("network set", "POLICY is allow-all, deny-all or JSON");
		target = xasprintf("/v1/sandboxes/%s/network", id);
		r = cli_call_json(cli, "PATCH", target, body, NULL, &resp, &raw);
	} else {
		if ((r = cli_only_common(cli, argc, argv, "network", 1, 1)))
			return r;
		id = cli_escape(argv[optind]);
		target = xasprintf("/v1/sandboxes/%s/network", id);
		r = cli_call_json(cli, "GET", target, NULL, NULL, &resp, &raw);
	}
	if (r == 0) {
		if (cli->json)
			cli_print_raw(raw);
		else if (resp)
			cli_print_pretty(resp, stdout);
	}
	json_free(resp);
	return r;
}
