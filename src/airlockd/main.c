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
#include <stdbool.h>
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

/* The roles `airlockd <cmd>` runs alone (`up` runs them all). */
static const struct {
	const char *cmd;
	unsigned role;   /* CONFIG_ROLE_*: the secrets it keeps */
	int (*run)(const struct airlockd_config *cfg, err_t *err);
} roles[] = {
	{ "nodemgr", CONFIG_ROLE_NODEMGR, airlockd_nodemgr },
	{ "node", CONFIG_ROLE_NODE, airlockd_node },
	{ "gateway", CONFIG_ROLE_GATEWAY, airlockd_gateway },
	{ "api", CONFIG_ROLE_API, airlockd_api },
};

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
	config_secrets_warn(&cfg);
	int r = 0;
	bool known = !strcmp(cmd, "up");
	if (known)
		r = airlockd_up(&cfg, &err);
	for (size_t i = 0; !known && i < ARRAY_SIZE(roles); i++)
		if ((known = !strcmp(cmd, roles[i].cmd))) {
			/* Started on its own, a role keeps only its secrets, as
			 * under `up`. */
			config_keep_secrets(&cfg, roles[i].role);
			r = roles[i].run(&cfg, &err);
		}
	if (!known) {
		usage(stderr);
		return 2;
	}
	if (r < 0) {
		log_err("%s", err.msg);
		return 1;
	}
	return 0;
}
