/* main.c - `airlock`, the command-line client. Thin: parse the global flags,
 * pick the verb, hand over. Each verb group lives in its own file. */
#include <string.h>

#include "cli.h"

static const char usage[] =
	"Usage: airlock [--json] [--config FILE] [--url URL] COMMAND [ARGS]\n"
	"\n"
	"Sandboxes:\n"
	"  create [--template T] [--backend B] [--memory MB] [--cpus N] [--pids N]\n"
	"         [--disk MB] [--env K=V]... [--meta K=V]... [--timeout S]\n"
	"         [--network allow-all|deny-all|JSON]\n"
	"         [--idempotency-key K]           create a sandbox, print its id\n"
	"  ls [--state S] [--template T] [--meta K=V]...   list sandboxes\n"
	"  get SBX                                show one sandbox\n"
	"  rm SBX...                              delete sandboxes\n"
	"  pause SBX | resume SBX                 freeze / thaw a sandbox (memory kept)\n"
	"  suspend SBX                            into the object store; frees the node (vm: memory\n"
	"                                         kept; ns: files kept, processes end)\n"
	"  restore SBX                            back from the object store (resume does it too)\n"
	"  connect SBX                            make it ready to use (resumes a paused one)\n"
	"  snapshot create SBX [--name N] [--full]\n"
	"                                         disk snapshot (--full: memory too, vm), print its id\n"
	"  snapshot ls SBX | snapshot rm SBX SNAP list / delete snapshots\n"
	"  rollback SBX SNAP                      back to a snapshot (disk: processes restart;\n"
	"                                         full: they carry on)\n"
	"  fork SBX [--count N] [--from SNAP]     N copy-on-write children, print their ids\n"
	"\n"
	"Processes:\n"
	"  exec [-i] [-t] [--env K=V]... [--cwd D] [--user U] [--timeout S] SBX [--] CMD [ARGS...]\n"
	"                                         run a command, stream its output; exits with\n"
	"                                         its exit code (128+signal when killed)\n"
	"      -i  keep stdin open and forward local stdin\n"
	"      -t  allocate a terminal (local tty in raw mode, window size forwarded)\n"
	"  ps SBX                                 list processes\n"
	"  logs SBX PID [--offset N] [--no-follow]   replay and follow a process's output\n"
	"  kill SBX PID [--signal SIG]            signal a process (default TERM)\n"
	"  console SBX                            the last 64 KiB of a vm sandbox's serial console\n"
	"  events SBX                             the sandbox's lifecycle log (time, from, to, reason)\n"
	"  port-forward SBX [LOCAL:]REMOTE        listen on 127.0.0.1:LOCAL (0: any free port) and\n"
	"                                         tunnel each connection to port REMOTE in SBX\n"
	"  credential create NAME --host H [...]  a secret the gateway injects (value on stdin)\n"
	"  credential ls | rotate ID | rm ID | audit\n"
	"  network SBX | network set SBX POLICY | network log SBX\n"
	"                                         egress policy (allow-all, deny-all or JSON) and decisions\n"
	"\n"
	"Files (inside a sandbox):\n"
	"  files read SBX PATH                    write the file to stdout\n"
	"  files write SBX PATH [--mode 0644]     replace the file with stdin\n"
	"  files ls SBX PATH                      list a directory\n"
	"  files stat SBX PATH                    show file metadata\n"
	"  files rm SBX PATH [-r]                 remove (recursively with -r)\n"
	"  files mkdir SBX PATH                   create a directory and its parents\n"
	"  files mv SBX FROM TO                   rename\n"
	"\n"
	"Templates:\n"
	"  template ls\n"
	"  template build NAME (--from debian:bookworm [--packages p1,p2] | --from-dir DIR\n"
	"                       | --from-tar FILE)   build, printing progress\n"
	"\n"
	"Administration (admin key):\n"
	"  tenant create NAME ; tenant ls\n"
	"  key create --tenant T [--admin] [--name N]   print a new key (shown once)\n"
	"  node                                   node info\n"
	"  health                                 is the API up?\n"
	"\n"
	"Global flags:\n"
	"  --json           print the server's JSON instead of tables\n"
	"  --config FILE    config file (default $AIRLOCK_CONFIG, else /var/lib/airlock/cli.json)\n"
	"  --url URL        API address (overrides $AIRLOCK_URL and the config file)\n"
	"Environment: AIRLOCK_URL and AIRLOCK_API_KEY override the config file.\n"
	"Exit status: 0 ok, 1 error (\"airlock: <message> (<code>)\"), 2 usage error;\n"
	"exec and logs exit with the remote process's status.\n";

void cli_print_usage(FILE *f)
{
	fputs(usage, f);
}

static const struct verb {
	const char *name;
	int (*fn)(struct cli *, int, char **);
} verbs[] = {
	{ "create", cmd_create }, { "ls", cmd_ls },	     { "list", cmd_ls },
	{ "get", cmd_get },	  { "rm", cmd_rm },	     { "delete", cmd_rm },
	{ "exec", cmd_exec },	  { "ps", cmd_ps },	     { "logs", cmd_logs },
	{ "kill", cmd_kill },	  { "files", cmd_files },   { "template", cmd_template },
	{ "tenant", cmd_tenant }, { "key", cmd_key },	     { "health", cmd_health },
	{ "node", cmd_node },	  { "pause", cmd_pause },   { "resume", cmd_resume },
	{ "connect", cmd_connect }, { "console", cmd_console },
	{ "suspend", cmd_suspend }, { "restore", cmd_restore },
	{ "events", cmd_events },
	{ "port-forward", cmd_port_forward },
	{ "network", cmd_network },
	{ "credential", cmd_credential },
	{ "snapshot", cmd_snapshot }, { "rollback", cmd_rollback },
	{ "fork", cmd_fork },
};

int main(int argc, char **argv)
{
	struct cli cli = { 0 };
	int i, r;

	/* Global flags before the verb; verbs accept them too (CLI_COMMON_OPTS). */
	for (i = 1; i < argc && argv[i][0] == '-'; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--json") == 0) {
			cli.json = true;
		} else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			fputs(usage, stdout);
			return 0;
		} else if ((strcmp(a, "--config") == 0 || strcmp(a, "--url") == 0) && i + 1 < argc) {
			*(a[2] == 'c' ? &cli.config_flag : &cli.url_flag) = argv[++i];
		} else if (strncmp(a, "--config=", 9) == 0) {
			cli.config_flag = a + 9;
		} else if (strncmp(a, "--url=", 6) == 0) {
			cli.url_flag = a + 6;
		} else {
			return cli_usage(NULL, "unknown or incomplete option `%s`", a);
		}
	}
	if (i >= argc) {
		fputs(usage, stderr);
		return EXIT_USAGE;
	}
	for (size_t v = 0; v < ARRAY_SIZE(verbs); v++) {
		if (strcmp(argv[i], verbs[v].name) != 0)
			continue;
		r = verbs[v].fn(&cli, argc - i, argv + i);
		fflush(stdout);
		free(cli.url);
		free(cli.key);
		return r;
	}
	return cli_usage(NULL, "unknown command `%s`", argv[i]);
}
