/* cmd-credential.c - `airlock credential`: the credential manager from the shell.
 * A value is read from stdin (one line; a trailing newline is dropped),
 * never taken from the command line, where ps and shell history would see it. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#define USAGE_CREATE "usage: airlock credential create NAME --host H [--host H2 ...] [--env VAR]\n" \
	"         [--header NAME [--format 'Bearer {value}'] | --basic USER | --query PARAM]\n"  \
	"         [--project LABEL | --sandbox ID] [--path-prefix P] [--method M ...]\n"         \
	"         [--scheme https|http ...] [--port N ...]\n"                                  \
	"         [--replace-in headers|body|target ...]\n"                                   \
	"         [--rate-per-minute N] [--expires 2026-12-31T23:59:59Z]   (value on stdin)\n" \
	"  --scheme, --port: where the value may go; default https to 443 only\n"             \
	"  (--scheme http sends it readable on the wire; its default port is 80)\n"           \
	"  --replace-in: also replace the placeholder there (an upstream that echoes\n"          \
	"  its request then hands the value back); default: only where injected"

/* "schemes" and "ports" as --scheme and --port gave them (none: the
 * server's defaults). A port that is not a plain number goes as -1, so the
 * server's 400 names the field. */
static void write_transport(struct jw *w, const char *const *schemes, size_t n_schemes,
			    const char *const *ports, size_t n_ports)
{
	if (n_schemes) {
		jw_key(w, "schemes");
		jw_arr(w);
		for (size_t i = 0; i < n_schemes; i++)
			jw_str(w, schemes[i]);
		jw_end(w);
	}
	if (n_ports) {
		jw_key(w, "ports");
		jw_arr(w);
		for (size_t i = 0; i < n_ports; i++) {
			const char *p = ports[i];
			jw_raw(w, *p && strlen(p) <= 5 && strspn(p, "0123456789") == strlen(p) ?
				      p : "-1");
		}
		jw_end(w);
	}
}

/* The value from stdin: at most 8 KiB, one trailing newline dropped. */
static int read_value(struct buf *v)
{
	char chunk[1024];
	ssize_t k;

	while ((k = read(0, chunk, sizeof(chunk))) > 0) {
		buf_add(v, chunk, (size_t)k);
		if (v->len > 8193) {
			fprintf(stderr, "airlock: the value is longer than 8192 bytes\n");
			return EXIT_FAIL;
		}
	}
	if (k < 0 || !v->len) {
		fprintf(stderr, "airlock: give the value on stdin\n");
		return EXIT_FAIL;
	}
	if (v->data[v->len - 1] == '\n')
		v->data[--v->len] = '\0';
	if (v->len && v->data[v->len - 1] == '\r')
		v->data[--v->len] = '\0';
	return 0;
}

static void scrub(struct buf *b)
{
	if (b->data)
		explicit_bzero(b->data, b->len);
	buf_free(b);
}

static int cred_create(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "host", required_argument, NULL, 'H' },
		{ "env", required_argument, NULL, 'e' },
		{ "header", required_argument, NULL, 'd' },
		{ "format", required_argument, NULL, 'f' },
		{ "basic", required_argument, NULL, 'b' },
		{ "query", required_argument, NULL, 'q' },
		{ "project", required_argument, NULL, 'p' },
		{ "sandbox", required_argument, NULL, 's' },
		{ "path-prefix", required_argument, NULL, 'P' },
		{ "method", required_argument, NULL, 'm' },
		{ "replace-in", required_argument, NULL, 'R' },
		{ "scheme", required_argument, NULL, 'S' },
		{ "port", required_argument, NULL, 'O' },
		{ "rate-per-minute", required_argument, NULL, 'r' },
		{ "expires", required_argument, NULL, 'x' },
		CLI_COMMON_OPTS,
		{ 0 },
	};
	const char *hosts[32], *methods[16], *replace_in[3], *schemes[2], *ports[16];
	const char *env = NULL, *header = NULL, *format = NULL, *basic = NULL, *query = NULL;
	const char *project = NULL, *sandbox = NULL, *prefix = NULL, *rate = NULL, *expires = NULL;
	size_t n_hosts = 0, n_methods = 0, n_replace = 0, n_schemes = 0, n_ports = 0;
	_cleanup_free_ char *raw = NULL;
	struct buf value, body;
	json *resp = NULL;
	struct jw w;
	int opt, r;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'H':
			if (n_hosts == 32)
				return cli_usage("credential create", "at most 32 --host");
			hosts[n_hosts++] = optarg;
			break;
		case 'm':
			if (n_methods == 16)
				return cli_usage("credential create", "at most 16 --method");
			methods[n_methods++] = optarg;
			break;
		case 'R':
			if (n_replace == ARRAY_SIZE(replace_in))
				return cli_usage("credential create", "at most 3 --replace-in");
			replace_in[n_replace++] = optarg;
			break;
		case 'S':
			if (n_schemes == ARRAY_SIZE(schemes))
				return cli_usage("credential create", "at most 2 --scheme");
			schemes[n_schemes++] = optarg;
			break;
		case 'O':
			if (n_ports == ARRAY_SIZE(ports))
				return cli_usage("credential create", "at most 16 --port");
			ports[n_ports++] = optarg;
			break;
		case 'e': env = optarg; break;
		case 'd': header = optarg; break;
		case 'f': format = optarg; break;
		case 'b': basic = optarg; break;
		case 'q': query = optarg; break;
		case 'p': project = optarg; break;
		case 's': sandbox = optarg; break;
		case 'P': prefix = optarg; break;
		case 'r': rate = optarg; break;
		case 'x': expires = optarg; break;
		default:
			if ((r = cli_common_opt(cli, opt, "credential create")))
				return r;
		}
	}
	if (optind != argc - 1 || !n_hosts || (!!basic + !!query + !!(header || format)) > 1 ||
	    (project && sandbox))
		return cli_usage("credential create", USAGE_CREATE);
	buf_init(&value);
	if (read_value(&value)) {
		scrub(&value);
		return EXIT_FAIL;
	}
	buf_init(&body);
	jw_init(&w, &body);
	jw_obj(&w);
	jw_key(&w, "name");
	jw_str(&w, argv[optind]);
	jw_key(&w, "value");
	jw_strn(&w, value.data, value.len);
	scrub(&value);
	if (env) {
		jw_key(&w, "env");
		jw_str(&w, env);
	}
	jw_key(&w, "inject");
	jw_obj(&w);
	jw_key(&w, "type");
	if (basic) {
		jw_str(&w, "basic");
		jw_key(&w, "username");
		jw_str(&w, basic);
	} else if (query) {
		jw_str(&w, "query");
		jw_key(&w, "param");
		jw_str(&w, query);
	} else {
		jw_str(&w, "header");
		if (header) {
			jw_key(&w, "header");
			jw_str(&w, header);
		}
		if (format) {
			jw_key(&w, "format");
			jw_str(&w, format);
		}
	}
	jw_end(&w);
	jw_key(&w, "hosts");
	jw_arr(&w);
	for (size_t i = 0; i < n_hosts; i++)
		jw_str(&w, hosts[i]);
	jw_end(&w);
	write_transport(&w, schemes, n_schemes, ports, n_ports);
	if (n_methods) {
		jw_key(&w, "methods");
		jw_arr(&w);
		for (size_t i = 0; i < n_methods; i++)
			jw_str(&w, methods[i]);
		jw_end(&w);
	}
	if (n_replace) {
		jw_key(&w, "replace_in");
		jw_arr(&w);
		for (size_t i = 0; i < n_replace; i++)
			jw_str(&w, replace_in[i]);
		jw_end(&w);
	}
	if (prefix) {
		jw_key(&w, "path_prefix");
		jw_str(&w, prefix);
	}
	if (rate) {
		jw_key(&w, "rate_limit");
		jw_obj(&w);
		jw_key(&w, "per_minute");
		jw_raw(&w, strspn(rate, "0123456789") == strlen(rate) && *rate ? rate : "-1");
		jw_end(&w);
	}
	if (expires) {
		jw_key(&w, "expires_at");
		jw_str(&w, expires);
	}
	if (project || sandbox) {
		jw_key(&w, "bindings");
		jw_arr(&w);
		jw_obj(&w);
		jw_key(&w, project ? "project" : "sandbox");
		jw_str(&w, project ? project : sandbox);
		jw_end(&w);
		jw_end(&w);
	}
	jw_end(&w);
	r = cli_call_json(cli, "POST", "/v1/credentials", body.data, NULL, &resp, &raw);
	scrub(&body);
	return cli_print_id(cli, r, resp, raw);
}

#define USAGE_ROTATE "usage: airlock credential rotate ID [--scheme https|http ...] [--port N ...]\n" \
	"         (the new value on stdin; --scheme/--port change where it may go)"

static int cred_rotate(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "scheme", required_argument, NULL, 'S' },
		{ "port", required_argument, NULL, 'O' },
		CLI_COMMON_OPTS,
		{ 0 },
	};
	_cleanup_free_ char *raw = NULL, *target = NULL, *id = NULL;
	const char *schemes[2], *ports[16];
	size_t n_schemes = 0, n_ports = 0;
	struct buf value, body;
	json *resp = NULL;
	struct jw w;
	int opt, r;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'S':
			if (n_schemes == ARRAY_SIZE(schemes))
				return cli_usage("credential rotate", "at most 2 --scheme");
			schemes[n_schemes++] = optarg;
			break;
		case 'O':
			if (n_ports == ARRAY_SIZE(ports))
				return cli_usage("credential rotate", "at most 16 --port");
			ports[n_ports++] = optarg;
			break;
		default:
			if ((r = cli_common_opt(cli, opt, "credential rotate")))
				return r;
		}
	}
	if (optind != argc - 1)
		return cli_usage("credential rotate", USAGE_ROTATE);
	buf_init(&value);
	if (read_value(&value)) {
		scrub(&value);
		return EXIT_FAIL;
	}
	buf_init(&body);
	jw_init(&w, &body);
	jw_obj(&w);
	jw_key(&w, "value");
	jw_strn(&w, value.data, value.len);
	write_transport(&w, schemes, n_schemes, ports, n_ports);
	jw_end(&w);
	scrub(&value);
	id = cli_escape(argv[optind]);
	target = xasprintf("/v1/credentials/%s/rotate", id);
	r = cli_call_json(cli, "POST", target, body.data, NULL, &resp, &raw);
	scrub(&body);
	return cli_print_id(cli, r, resp, raw);
}

static int cred_rm(struct cli *cli, int argc, char **argv)
{
	_cleanup_free_ char *raw = NULL, *target = NULL, *id = NULL;
	json *resp = NULL;
	int r;

	if ((r = cli_only_common(cli, argc, argv, "credential rm", 1, 1)))
		return r;
	id = cli_escape(argv[optind]);
	target = xasprintf("/v1/credentials/%s", id);
	r = cli_call_json(cli, "DELETE", target, NULL, NULL, &resp, &raw);
	return cli_print_id(cli, r, resp, raw);
}

int cmd_credential(struct cli *cli, int argc, char **argv)
{
	static const char *const head[] = { "ID", "NAME", "ENV", "HOSTS", "SCHEMES", "PORTS",
					    "STATUS", "VERSION" };
	static const char *const fields[] = { "id", "name", "env", "hosts", "schemes", "ports",
					      "status", "version" };
	static const char *const ahead[] = { "AT", "SANDBOX", "CREDENTIAL", "HOST", "METHOD",
					     "PATH", "DECISION" };
	static const char *const afields[] = { "at", "sandbox", "credential", "host", "method",
					       "path", "decision" };
	const char *sub = argc >= 2 ? argv[1] : "";
	int r;

	if (!strcmp(sub, "create"))
		return cred_create(cli, argc - 1, argv + 1);
	if (!strcmp(sub, "rotate"))
		return cred_rotate(cli, argc - 1, argv + 1);
	if (!strcmp(sub, "rm") || !strcmp(sub, "revoke"))
		return cred_rm(cli, argc - 1, argv + 1);
	if (!strcmp(sub, "ls") || !strcmp(sub, "list")) {
		if ((r = cli_only_common(cli, argc - 1, argv + 1, "credential ls", 0, 0)))
			return r;
		return cli_list_table(cli, "/v1/credentials", "credentials", "credential list",
				      ARRAY_SIZE(head), head, fields);
	}
	if (!strcmp(sub, "audit")) {
		if ((r = cli_only_common(cli, argc - 1, argv + 1, "credential audit", 0, 0)))
			return r;
		return cli_list_table(cli, "/v1/credentials/audit", "records", "audit log", 7,
				      ahead, afields);
	}
	return cli_usage("credential", "usage: airlock credential create|ls|rotate|rm|audit ...\n%s",
			 USAGE_CREATE);
}
