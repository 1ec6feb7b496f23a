/* main.c - `airlock`, the command-line client. Thin: parse the global flags,
 * pick the verb, hand over. Each verb group lives in its own file. */
#include <string.h>

#include "airlock-version.h"   /* generated: <build>/gen */
#include "../lib/tls.h"
#include "cli.h"

static const char usage[] =
	"Usage: airlock [--json] [--config FILE] [--url URL] [--cacert FILE] COMMAND [ARGS]\n"
	"\n"
	"Sandboxes:\n"
	"  create [--template T] [--backend B] [--memory MB] [--cpus N] [--pids N]\n"
	"         [--disk MB] [--env K=V]... [--meta K=V]... [--timeout S]\n"
	"         [--network allow-all|deny-all|JSON] [--node NAME]\n"
	"         [--idempotency-key K]           create a sandbox, print its id\n"
	"  ls [--state S] [--template T] [--meta K=V]...   list sandboxes\n"
	"  get SBX                                show one sandbox\n"
	"  top [--once] [--interval S]            live CPU, memory, disk and network use of\n"
	"                                         your running sandboxes (every 2 s)\n"
	"  rm SBX...                              delete sandboxes\n"
	"  pause SBX | resume SBX                 freeze / thaw a sandbox (memory kept)\n"
	"  suspend SBX                            into the object store; frees the node (vm: memory\n"
	"                                         kept; ns: files kept, processes end)\n"
	"  restore SBX [--node NAME]              back from the object store, on NAME if given (resume too)\n"
	"  connect SBX                            make it ready to use (resumes a paused one)\n"
	"  snapshot create SBX [--name N] [--full]\n"
	"                                         disk snapshot (--full: memory too, vm), print its id\n"
	"  snapshot ls SBX | snapshot rm SBX SNAP list / delete snapshots\n"
	"  rollback SBX SNAP                      back to a snapshot (disk: processes restart;\n"
	"                                         full: they carry on)\n"
	"  fork SBX [--count N] [--from SNAP]     N copy-on-write children, print their ids\n"
	"\n"
	"Processes:\n"
	"  exec [-i] [-t] [--env K=V]... [--cwd D] [--user U] [--timeout S] SBX [--] [CMD [ARGS...]]\n"
	"                                         run a command, stream its output; exits with\n"
	"                                         its exit code (128+signal when killed); no CMD:\n"
	"                                         the image's Entrypoint + Cmd (OCI templates)\n"
	"      -i  keep stdin open and forward local stdin\n"
	"      -t  allocate a terminal (local tty in raw mode, window size forwarded)\n"
	"  ps SBX                                 list processes\n"
	"  logs SBX PID [--offset N] [--no-follow]   replay and follow a process's output\n"
	"  kill SBX PID [--signal SIG]            signal a process (default TERM)\n"
	"  console SBX                            the last 64 KiB of a vm sandbox's serial console\n"
	"  events SBX                             the sandbox's lifecycle log (time, from, to, reason)\n"
	"  port-forward SBX [LOCAL:]REMOTE        listen on 127.0.0.1:LOCAL (0: any free port) and\n"
	"                                         tunnel each connection to port REMOTE in SBX\n"
	"  desktop screenshot SBX FILE            a PNG of the sandbox's desktop (template desktop;\n"
	"                                         started on first use); FILE - for stdout\n"
	"  desktop move SBX X Y | desktop click SBX [X Y] [--button B] [--double]\n"
	"  desktop type SBX TEXT | desktop key SBX COMBO...   e.g. key SBX ctrl+c Return\n"
	"  desktop stream SBX                     start the VNC stream; print noVNC's URL (with a\n"
	"                                         port token: treat it as a secret)\n"
	"  credential create NAME --host H [...]  a secret the gateway injects (value on stdin)\n"
	"  credential ls | rotate ID | rm ID | audit\n"
	"  network SBX | network set SBX POLICY | network log SBX\n"
	"                                         egress policy (allow-all, deny-all or JSON) and decisions\n"
	"\n"
	"Code interpreter (a code-interpreter sandbox):\n"
	"  run-code SBX [--language L] [--context C] [--env K=V]... [--timeout S]\n"
	"           [--out DIR] [-c CODE]         run a cell (the code from stdin, or CODE) in a\n"
	"                                         kernel that keeps its state; stdout/stderr as they\n"
	"                                         come, text results on stdout, PNG/JPEG/SVG results\n"
	"                                         written to DIR/result-N.EXT (default .), each path\n"
	"                                         printed; an error's traceback on stderr, exit 1;\n"
	"                                         --json: the raw lines\n"
	"  code-context create SBX [--language L] [--cwd D]\n"
	"                                         a new context (its own kernel), print its id\n"
	"  code-context ls SBX | restart SBX CID | rm SBX CID\n"
	"                                         list / restart (state lost) / remove contexts\n"
	"\n"
	"Files (inside a sandbox):\n"
	"  files read SBX PATH                    write the file to stdout\n"
	"  files write SBX PATH [--mode 0644]     replace the file with stdin\n"
	"  files ls SBX PATH                      list a directory\n"
	"  files stat SBX PATH                    show file metadata\n"
	"  files rm SBX PATH [-r]                 remove (recursively with -r)\n"
	"  files mkdir SBX PATH                   create a directory and its parents\n"
	"  files mv SBX FROM TO                   rename\n"
	"  files watch SBX PATH [-r]              print changes as they happen (create, write,\n"
	"                                         remove, rename, overflow); -r: subdirectories too\n"
	"\n"
	"Templates:\n"
	"  template ls\n"
	"  template build NAME (--from debian:bookworm [--packages p1,p2] | --from-dir DIR\n"
	"                       | --from-tar FILE | --from-oci IMAGE | --from-image REF)\n"
	"                                         build, printing progress. IMAGE: a `docker save`\n"
	"                                         tar or an OCI layout (dir or tar); REF: copied\n"
	"                                         first with skopeo (e.g. docker://debian:12)\n"
	"  template rm NAME                       delete every version (admin; not while in use)\n"
	"\n"
	"Administration (admin key):\n"
	"  tenant create NAME ; tenant ls\n"
	"  tenant rm T...                         delete tenants with no sandboxes (their keys,\n"
	"                                         credentials and quota go too)\n"
	"  tenant quota T [--sandboxes N] [--memory-mb N] [--cpus X] [--disk-mb N]\n"
	"               [--snapshots N] [--snapshot-mb N]   show, or change (0 = no limit)\n"
	"  tenant encryption show T ; tenant encryption rotate T   BYOK: key state; rewrap\n"
	"  tenant encryption set T --provider local [--key-id K]\n"
	"  tenant encryption set T --provider transit --url U --key-name N --token-file F\n"
	"  key create --tenant T [--admin] [--name N]   print a new key (shown once)\n"
	"  key ls [--tenant T]                    list keys (never the keys themselves)\n"
	"  key rm ID...                           revoke keys (refused at once; not the last admin key)\n"
	"  node                                   this node's info\n"
	"  node ls                                the cluster's nodes: state, heartbeat, capacity\n"
	"  health                                 is the API up?\n"
	"  doctor [--remote] [--backend ns|vm] [--data-dir D] [--vm-dir D] [--server-config F]\n"
	"                                         what this host can do, with the fix for each\n"
	"                                         gap; exit 1 when the default backend cannot run\n"
	"                                         (checks run here, as root; --remote: the server's);\n"
	"                                         warns when airlockd's config (F, default\n"
	"                                         /etc/airlock/airlockd.conf) has a secret others read\n"
	"         [--ports-domain NAME [--api-url URL]]  also: is NAME a site apart from the API's\n"
	"                                         host (the server's doctor checks its config)\n"
	"\n"
	"Agents:\n"
	"  mcp                                    serve the Model Context Protocol on stdin/stdout:\n"
	"                                         sandboxes, exec, files, snapshots and rollback as\n"
	"                                         tools for an MCP client (docs/MCP.md); logs to stderr\n"
	"\n"
	"  version                                this client's version\n"
	"  help [--man]                           this text (--man: as a man page, roff)\n"
	"  completion bash                        a bash completion script; load it with\n"
	"                                         source <(airlock completion bash)\n"
	"\n"
	"Global flags:\n"
	"  --json           print the server's JSON instead of tables\n"
	"  --config FILE    config file; without it: $AIRLOCK_CONFIG, else\n"
	"                   $XDG_CONFIG_HOME/airlock/config.json (~/.config/...) when it\n"
	"                   exists, else /var/lib/airlock/cli.json\n"
	"  --url URL        API address, http:// or https:// (overrides $AIRLOCK_URL and\n"
	"                   the config file)\n"
	"  --cacert FILE    https: the CA (PEM) the server's certificate must chain to,\n"
	"                   besides its name matching the URL's host (overrides\n"
	"                   $AIRLOCK_CA_FILE and the config's ca_file; default: the\n"
	"                   system's CAs)\n"
	"Environment: AIRLOCK_URL, AIRLOCK_API_KEY and AIRLOCK_CA_FILE override the config\n"
	"file.\n"
	"Exit status: 0 ok; 125 usage error, bad config or an error answer of the API\n"
	"(\"airlock: <message> (<code>)\"); 126 key refused (401, 403); 127 server\n"
	"unreachable. exec and logs exit with the remote process's status.\n";

/* `airlock version`: the client's own version; needs no server. */
static int cmd_version(struct cli *cli, int argc, char **argv)
{
	int r = cli_only_common(cli, argc, argv, "version", 0, 0);

	if (r)
		return r;
	if (cli->json)
		printf("{\"version\":\"%s\"}\n", AIRLOCK_VERSION);
	else
		puts("airlock " AIRLOCK_VERSION);
	return 0;
}

void cli_print_usage(FILE *f)
{
	fputs(usage, f);
}

/* Does this usage line ("  rm SBX...") introduce `verb`? */
static bool line_names(const char *line, size_t len, const char *verb)
{
	size_t n = strlen(verb);

	return len >= 2 + n && memcmp(line + 2, verb, n) == 0 && (len == 2 + n || line[2 + n] == ' ');
}

void cli_print_verb_usage(FILE *f, const char *verb)
{
	_cleanup_free_ char *first = xstrndup(verb, strcspn(verb, " "));
	/* aliases, and verbs that share a line with another */
	const char *word = !strcmp(first, "list")     ? "ls"
			   : !strcmp(first, "delete") ? "rm"
			   : !strcmp(first, "resume") ? "pause"
						      : first;
	bool printing = false, any = false;

	/* The lines of the full usage that name the verb, with the more
	 * indented lines that continue them. */
	for (const char *p = usage; *p;) {
		const char *nl = strchr(p, '\n');
		size_t len = (size_t)(nl - p);

		if (len > 2 && p[0] == ' ' && p[1] == ' ' && p[2] != ' ')
			printing = line_names(p, len, word);
		else if (len <= 2 || p[0] != ' ')
			printing = false;
		if (printing) {
			if (!any)
				fputs("Usage: airlock [--json] [--config FILE] [--url URL]\n", f);
			fprintf(f, "%.*s\n", (int)len, p);
			any = true;
		}
		p = nl + 1;
	}
	if (!any)
		fputs(usage, f);
	else
		fputs("Exit status: 0 ok, 125 error, 126 key refused, 127 server unreachable\n"
		      "(see airlock --help).\n",
		      f);
}

/* The verbs, with the subcommands each takes (for `airlock completion`;
 * the verb's own code parses them). */
const struct cli_verb cli_verbs[] = {
	{ "create", cmd_create, NULL },
	{ "ls", cmd_ls, NULL },
	{ "list", cmd_ls, NULL },
	{ "top", cmd_top, NULL },
	{ "get", cmd_get, NULL },
	{ "rm", cmd_rm, NULL },
	{ "delete", cmd_rm, NULL },
	{ "exec", cmd_exec, NULL },
	{ "ps", cmd_ps, NULL },
	{ "logs", cmd_logs, NULL },
	{ "kill", cmd_kill, NULL },
	{ "files", cmd_files, "read write ls stat rm mkdir mv watch" },
	{ "template", cmd_template, "ls build rm" },
	{ "tenant", cmd_tenant, "create ls rm quota" },
	{ "key", cmd_key, "create ls rm" },
	{ "health", cmd_health, NULL },
	{ "node", cmd_node, "ls" },
	{ "pause", cmd_pause, NULL },
	{ "resume", cmd_resume, NULL },
	{ "connect", cmd_connect, NULL },
	{ "console", cmd_console, NULL },
	{ "suspend", cmd_suspend, NULL },
	{ "restore", cmd_restore, NULL },
	{ "events", cmd_events, NULL },
	{ "port-forward", cmd_port_forward, NULL },
	{ "desktop", cmd_desktop, "screenshot move click type key stream" },
	{ "network", cmd_network, "set log" },
	{ "credential", cmd_credential, "create ls rotate rm audit" },
	{ "snapshot", cmd_snapshot, "create ls rm" },
	{ "rollback", cmd_rollback, NULL },
	{ "fork", cmd_fork, NULL },
	{ "version", cmd_version, NULL },
	{ "doctor", cmd_doctor, NULL },
	{ "help", cmd_help, NULL },
	{ "completion", cmd_completion, "bash" },
	{ "mcp", cmd_mcp, NULL },
	{ "run-code", cmd_run_code, NULL },
	{ "code-context", cmd_code_context, "create ls restart rm" },
};
const size_t cli_n_verbs = ARRAY_SIZE(cli_verbs);

const char *cli_usage_text(void)
{
	return usage;
}

int main(int argc, char **argv)
{
	struct cli cli = { 0 };
	int i, r;

	/* Global flags before the verb; verbs accept them too (CLI_COMMON_OPTS). */
	for (i = 1; i < argc && argv[i][0] == '-'; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--json") == 0) {
			cli.json = true;
		} else if (strcmp(a, "--version") == 0) {
			puts("airlock " AIRLOCK_VERSION);
			return 0;
		} else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			fputs(usage, stdout);
			return 0;
		} else if ((strcmp(a, "--config") == 0 || strcmp(a, "--url") == 0) && i + 1 < argc) {
			*(a[2] == 'c' ? &cli.config_flag : &cli.url_flag) = argv[++i];
		} else if (strcmp(a, "--cacert") == 0 && i + 1 < argc) {
			cli.cacert_flag = argv[++i];
		} else if (strncmp(a, "--cacert=", 9) == 0) {
			cli.cacert_flag = a + 9;
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
	for (size_t v = 0; v < cli_n_verbs; v++) {
		if (strcmp(argv[i], cli_verbs[v].name) != 0)
			continue;
		/* `airlock VERB --help`, also for the verbs with subcommands */
		if (i + 1 < argc && (!strcmp(argv[i + 1], "--help") || !strcmp(argv[i + 1], "-h"))) {
			cli_print_verb_usage(stdout, argv[i]);
			return 0;
		}
		r = cli_verbs[v].fn(&cli, argc - i, argv + i);
		fflush(stdout);
		tls_relays_wait(2000);   /* https: let the connections close */
		free(cli.url);
		free(cli.key);
		return r;
	}
	return cli_usage(NULL, "unknown command `%s`", argv[i]);
}
