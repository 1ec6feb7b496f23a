/* cmd-doctor.c - `airlock doctor`: what this host can do, with fixes.
 *
 * By default the checks run here, in this process (src/doctor, the same code
 * nodemgr runs): the doctor is for the operator of the host, works before
 * any server is up, and should run as root (/dev/kvm, nftables). With
 * --remote it asks the server instead (GET /v1/node/doctor, admin key), whose
 * nodemgr runs them on the node. Exit 0 when the default backend can run,
 * 1 when it cannot, 125..127 as every verb when the doctor itself fails.
 * Locally the config is not read: --ports-domain (and --api-url, else the
 * CLI's own server URL) ask for the check that the server's doctor does
 * from its config.
 */
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "../doctor/doctor.h"
#include "../lib/resource.h"
#include "cli.h"

#define DEFAULT_DATA_DIR "/var/lib/airlock"
/* airlockd's config, checked for secrets others can read (--server-config). */
#define DEFAULT_SERVER_CONFIG "/etc/airlock/airlockd.conf"

static void print_report(const json *rep)
{
	const json *checks = json_get(rep, "checks");
	const json *be = json_get(rep, "backends");
	const char *def = json_get_str(rep, "default_backend");

	printf("%-13s %-6s %s\n", "CHECK", "STATUS", "DETAIL");
	for (size_t i = 0; checks && checks->type == JSON_ARR && i < checks->n; i++) {
		const json *c = checks->items[i];
		const char *fix = json_get_str(c, "fix");
		_cleanup_free_ char *name = cli_field(c, "name"), *st = cli_field(c, "status"),
				    *detail = cli_field(c, "detail");
		printf("%-13s %-6s %s\n", name, st, detail);
		if (fix)
			printf("%-13s %-6s fix: %s\n", "", "", fix);
	}
	for (size_t i = 0; be && be->type == JSON_OBJ && i < be->n; i++) {
		const json *b = be->items[i];
		const json *miss = json_get(b, "missing");
		bool can = json_get_bool(b, "can_run", false, NULL);
		const char *accel = json_get_str(b, "accel");
		_cleanup_free_ char *m = miss ? cli_json_text(miss) : xstrdup("[]");

		printf("backend %s: %s", be->keys[i], can ? "can run" : "cannot run, missing ");
		if (!can)
			fputs(m, stdout);
		if (accel)
			printf(" (acceleration: %s, %s)", accel, json_get_str(b, "accel_reason")
								  ? json_get_str(b, "accel_reason")
								  : "");
		printf("%s\n", def && !strcmp(def, be->keys[i]) ? "  <- default" : "");
	}
}

int cmd_doctor(struct cli *cli, int argc, char **argv)
{
	enum { OPT_REMOTE = 1, OPT_DATA_DIR, OPT_VM_DIR, OPT_BACKEND, OPT_VM_ACCEL, OPT_SERVER_CONFIG,
	       OPT_PORTS_DOMAIN, OPT_API_URL };
	static const struct option opts[] = {
		{ "remote", no_argument, NULL, OPT_REMOTE },
		{ "data-dir", required_argument, NULL, OPT_DATA_DIR },
		{ "vm-dir", required_argument, NULL, OPT_VM_DIR },
		{ "backend", required_argument, NULL, OPT_BACKEND },
		{ "vm-accel", required_argument, NULL, OPT_VM_ACCEL },
		{ "server-config", required_argument, NULL, OPT_SERVER_CONFIG },
		{ "ports-domain", required_argument, NULL, OPT_PORTS_DOMAIN },
		{ "api-url", required_argument, NULL, OPT_API_URL },
		CLI_COMMON_OPTS,
		{ 0 },
	};
	_cleanup_free_ char *vm_dir_default = airlock_resource("vm");
	struct doctor_opts o = { .data_dir = DEFAULT_DATA_DIR, .vm_dir = vm_dir_default,
				 .vm_accel = "auto", .default_backend = "ns",
				 .config_path = DEFAULT_SERVER_CONFIG };
	_cleanup_free_ char *raw = NULL;
	bool remote = false;
	json *rep = NULL;
	err_t err = { 0 };
	int opt, r;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case OPT_REMOTE: remote = true; break;
		case OPT_DATA_DIR: o.data_dir = optarg; break;
		case OPT_VM_DIR: o.vm_dir = optarg; break;
		case OPT_BACKEND: o.default_backend = optarg; break;
		case OPT_VM_ACCEL: o.vm_accel = optarg; break;
		case OPT_SERVER_CONFIG: o.config_path = optarg; break;
		case OPT_PORTS_DOMAIN: o.ports_domain = optarg; break;
		case OPT_API_URL: o.api_url = optarg; break;
		default:
			if ((r = cli_common_opt(cli, opt, "doctor")))
				return r;
		}
	}
	if (optind < argc)
		return cli_usage("doctor", "unexpected argument `%s`", argv[optind]);
	if (strcmp(o.default_backend, "ns") != 0 && strcmp(o.default_backend, "vm") != 0)
		return cli_usage("doctor", "--backend is ns or vm");
	if (o.ports_domain && !o.api_url && !remote && cli_load(cli) == 0)
		o.api_url = cli->url;
	if (remote) {
		if ((r = cli_call_json(cli, "GET", "/v1/node/doctor", NULL, NULL, &rep, &raw)))
			return r;
	} else {
		struct buf b;
		buf_init(&b);
		doctor_run(&o, &b);
		raw = buf_steal(&b);
		rep = json_parse(raw, strlen(raw), &err);
	}
	if (!rep || rep->type != JSON_OBJ) {
		json_free(rep);
		return cli_fail("bad_response", "the doctor's report is not a JSON object");
	}
	if (cli->json)
		cli_print_raw(raw);
	else
		print_report(rep);
	r = json_get_bool(rep, "ok", false, NULL) ? 0 : 1;
	json_free(rep);
	return r;
}
