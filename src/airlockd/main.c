/* airlockd - the Airlock daemons in one binary.
 *
 *   airlockd up        root: prepare DATA, start nodemgr + node + api, supervise
 *   airlockd nodemgr   root: privileged verbs (normally started by `up`)
 *   airlockd node      drops to the airlock user: sandbox manager
 *   airlockd gateway   drops to the airlock user: egress proxy and DNS
 *   airlockd api       drops to the airlock user: HTTP API
 *
 * main() stays thin: parse the configuration, then call the component's run
 * function. Supervision lives in up.c. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../api/api.h"
#include "../compat/e2b/e2b.h"
#include "../lib/log.h"
#include "../lib/util.h"
#include "airlock-version.h"   /* generated: <build>/gen */
#include "airlockd.h"

static void usage(FILE *f)
{
	fputs("usage: airlockd up|nodemgr|gateway|node|api [--config FILE] [--data-dir DIR] [--listen ADDR]\n"
	      "                [--templates a,b] [--db sqlite|URL] [--node-name NAME]\n"
	      "                [--set key=value]...\n"
	      "       airlockd version\n"
	      "       airlockd routes          (the public API routes, one \"METHOD /path\" a line)\n",
	      f);
}

int main(int argc, char **argv)
{
	struct airlockd_config cfg;
	const char *cmd;
	err_t err = { 0 };

	/* Other products' APIs the api serves under their prefixes. */
	e2b_register();
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	cmd = argv[1];
	if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
		puts("airlockd " AIRLOCK_VERSION);
		return 0;
	}
	if (!strcmp(cmd, "routes")) {
		api_routes_print(stdout);
		return 0;
	}
	if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help")) {
		usage(stdout);
		return 0;
	}
	config_defaults(&cfg);
	if (airlockd_parse_args(&cfg, argc - 1, argv + 1, &err) < 0) {
		fprintf(stderr, "airlockd: %s\n", err.msg);
		usage(stderr);
		return 2;
	}
	log_init(cmd, (enum log_level)cfg.log_level);
	log_set_json(cfg.log_json);
	int r;
	if (!strcmp(cmd, "up"))
		r = airlockd_up(&cfg, &err);
	else if (!strcmp(cmd, "nodemgr"))
		r = airlockd_nodemgr(&cfg, &err);
	else if (!strcmp(cmd, "node"))
		r = airlockd_node(&cfg, &err);
	else if (!strcmp(cmd, "gateway"))
		r = airlockd_gateway(&cfg, &err);
	else if (!strcmp(cmd, "api"))
		r = airlockd_api(&cfg, &err);
	else {
		usage(stderr);
		return 2;
	}
	if (r < 0) {
		log_err("%s", err.msg);
		return 1;
	}
	return 0;
}
