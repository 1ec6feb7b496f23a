/* cmd-admin.c - template, tenant, key, health, node. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

/* --- templates --- */

static int template_ls(struct cli *cli, int argc, char **argv)
{
	static const char *const head[] = { "NAME", "VERSION", "STATUS", "SOURCE", "CREATED" };
	static const char *const fields[] = { "name", "version", "status", "source", "created_at" };
	int r;

	if ((r = cli_only_common(cli, argc, argv, "template ls", 0, 0)))
		return r;
	return cli_list_table(cli, "/v1/templates", "templates", "template list", 5, head, fields);
}

struct build {
	struct cli *cli;
	bool done;
	bool bar;   /* a progress line is shown (stderr is a terminal) */
	int64_t step, steps;   /* the builder's step under way (0: none said) */
};

static int build_line(void *arg, char *line, size_t len)
{
	struct build *b = arg;
	err_t err = { 0 };
	const char *ev;
	json *j;
	int r = 0;

	if (b->cli->json) {
		fwrite(line, 1, len, stdout);
		fputc('\n', stdout);
		fflush(stdout);
	}
	j = json_parse(line, len, &err);
	if (!j || j->type != JSON_OBJ || !(ev = json_get_str(j, "event"))) {
		json_free(j);
		return cli_fail("bad_response", "invalid line in the build stream");
	}
	if (strcmp(ev, "progress") == 0) {
		const char *l = json_get_str(j, "line");

		bool bad = false;
		int64_t step = json_get_int(j, "step", 0, &bad), steps = json_get_int(j, "steps", 0, &bad);
		int64_t layer = json_get_int(j, "layer", 0, &bad);
		int64_t layers = json_get_int(j, "layers", 0, &bad);

		/* numbered steps: the bar shows those finished; within an
		 * image's import step, the layers applied count towards the
		 * next (the bar's units: steps x layers) */
		if (!bad && step > 0 && steps >= step && steps <= 1000) {
			b->step = step;
			b->steps = steps;
			cli_progress_set((uint64_t)step - 1, (uint64_t)steps, "steps", NULL);
		} else if (!bad && layer > 0 && layers >= layer && layers <= 1000 && b->step) {
			char phase[24];

			snprintf(phase, sizeof(phase), "layer %d/%d", (int)layer, (int)layers);
			cli_progress_set((uint64_t)((b->step - 1) * layers + layer - 1),
					 (uint64_t)(b->steps * layers), "", phase);
		}
		/* on a terminal the progress line shows the newest; the whole
		 * log still goes to a stdout that is not the terminal */
		if (l)
			cli_progress_note(l);
		if (!b->cli->json && l && !(b->bar && isatty(1))) {
			printf("%s\n", l);
			fflush(stdout);
		}
	} else if (strcmp(ev, "done") == 0) {
		const json *t = json_get(j, "template");
		b->done = true;
		cli_progress_done(0, NULL);
		if (!b->cli->json) {
			_cleanup_free_ char *name = cli_field(t, "name"), *ver = cli_field(t, "version");
			printf("template %s version %s ready\n", name, ver);
		}
	} else if (strcmp(ev, "error") == 0) {
		const json *e = json_get(j, "error");
		const char *code = e ? json_get_str(e, "code") : NULL;
		const char *msg = e ? json_get_str(e, "message") : NULL;
		r = cli_fail(code ? code : "internal", "%s", msg ? msg : "the build failed");
	}
	json_free(j);
	return r;
}

/* Paths are read by the node; on the same machine make them absolute so
 * they do not depend on the CLI's working directory. */
static void write_path(struct jw *w, const char *p)
{
	char abs[PATH_MAX];

	jw_str(w, realpath(p, abs) ? abs : p);
}

/* --from-image REF: skopeo (Debian's package) copies the image into an
 * OCI layout archive in a fresh directory under $TMPDIR, which the build
 * then reads like --from-oci. The node reads it with its own uid, so the
 * directory and the archive are made readable to others (0755/0644) for
 * the length of the build; they are removed after it. *out: the archive. */
static bool in_path(const char *prog)
{
	const char *path = getenv("PATH");

	for (const char *p = path ? path : ""; *p;) {
		size_t n = strcspn(p, ":");
		_cleanup_free_ char *f = xasprintf("%.*s/%s", (int)n, p, prog);
		if (n && access(f, X_OK) == 0)
			return true;
		p += n;
		p += strspn(p, ":");
	}
	return false;
}

static int pull_image(const char *ref, char **out)
{
	const char *tmp = getenv("TMPDIR");
	_cleanup_free_ char *dir = xasprintf("%s/airlock-image-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	_cleanup_free_ char *archive = NULL, *dest = NULL;
	int st;
	pid_t pid;

	if (!in_path("skopeo"))
		return cli_fail("unavailable", "--from-image needs skopeo (apt-get install skopeo);"
				" or save the image yourself and give --from-oci FILE");
	if (!strchr(ref, ':') && !strchr(ref, '/'))
		return cli_usage("template build", "--from-image wants a transport and a name, e.g."
				 " docker://debian:bookworm-slim");
	if (!mkdtemp(dir))
		return cli_fail("internal", "mkdtemp: %s", strerror(errno));
	chmod(dir, 0755);
	archive = xasprintf("%s/image.tar", dir);
	dest = xasprintf("oci-archive:%s", archive);
	fprintf(stderr, "copying %s with skopeo\n", ref);
	pid = fork();
	if (pid == 0) {
		/* a bare name is a registry reference, as docker takes it */
		_cleanup_free_ char *src = strstr(ref, "://") || !strncmp(ref, "oci:", 4) ||
						   !strncmp(ref, "oci-archive:", 12) ||
						   !strncmp(ref, "docker-archive:", 15)
					   ? xstrdup(ref) : xasprintf("docker://%s", ref);
		execlp("skopeo", "skopeo", "copy", "--quiet", src, dest, (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		unlink(archive);
		rmdir(dir);
		return cli_fail("bad_request", "skopeo could not copy %s", ref);
	}
	chmod(archive, 0644);
	*out = TAKE_PTR(archive);
	return 0;
}

static void remove_pulled(const char *archive)
{
	_cleanup_free_ char *dir = xstrdup(archive);
	char *slash = strrchr(dir, '/');

	unlink(archive);
	if (slash) {
		*slash = '\0';
		rmdir(dir);
	}
}

static int template_build(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "from", required_argument, NULL, 'f' },
		{ "packages", required_argument, NULL, 'p' },
		{ "from-dir", required_argument, NULL, 'd' },
		{ "from-tar", required_argument, NULL, 't' },
		{ "from-oci", required_argument, NULL, 'o' },
		{ "from-image", required_argument, NULL, 'i' },
		CLI_COMMON_OPTS,
		{ 0 },
	};
	const char *from = NULL, *packages = NULL, *dir = NULL, *tar = NULL, *oci = NULL;
	const char *image = NULL;
	_cleanup_free_ char *pulled = NULL;
	struct build b = { .cli = cli };
	struct buf body;
	struct jw w;
	int opt, r;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'f': from = optarg; break;
		case 'p': packages = optarg; break;
		case 'd': dir = optarg; break;
		case 't': tar = optarg; break;
		case 'o': oci = optarg; break;
		case 'i': image = optarg; break;
		default:
			if ((r = cli_common_opt(cli, opt, "template build")))
				return r;
		}
	}
	if (argc - optind != 1)
		return cli_usage("template build", "usage: airlock template build NAME (--from IMAGE "
				 "[--packages p1,p2] | --from-dir DIR | --from-tar FILE | --from-oci FILE"
				 " | --from-image REF)");
	if (!!from + !!dir + !!tar + !!oci + !!image != 1)
		return cli_usage("template build", "give exactly one of --from, --from-dir, --from-tar,"
				 " --from-oci, --from-image");
	if (packages && !from)
		return cli_usage("template build", "--packages goes with --from");
	if (image) {
		if ((r = pull_image(image, &pulled)))
			return r;
		oci = pulled;
	}

	buf_init(&body);
	jw_init(&w, &body);
	jw_obj(&w);
	jw_key(&w, "name");
	jw_str(&w, argv[optind]);
	if (from) {
		jw_key(&w, "from");
		jw_str(&w, from);
	}
	if (packages) {
		jw_key(&w, "packages");
		jw_arr(&w);
		for (const char *p = packages; *p;) {
			size_t n = strcspn(p, ", ");
			if (n)
				jw_strn(&w, p, n);
			p += n;
			p += strspn(p, ", ");
		}
		jw_end(&w);
	}
	if (dir) {
		jw_key(&w, "from_dir");
		write_path(&w, dir);
	}
	if (tar) {
		jw_key(&w, "from_tar");
		write_path(&w, tar);
	}
	if (oci) {
		jw_key(&w, "from_oci");
		write_path(&w, oci);
	}
	jw_end(&w);
	b.bar = isatty(2) && !getenv("AIRLOCK_NO_PROGRESS");
	cli_progress_start("building %s", argv[optind]);
	r = cli_stream_lines(cli, "POST", "/v1/templates", body.data, build_line, &b);
	cli_progress_end();
	buf_free(&body);
	if (pulled)
		remove_pulled(pulled);
	if (r == 0 && !b.done)
		r = cli_fail("unavailable", "the build stream ended without a result");
	return r;
}

static int template_rm(struct cli *cli, int argc, char **argv)
{
	_cleanup_free_ char *target = NULL, *name = NULL;
	int r;

	if ((r = cli_only_common(cli, argc, argv, "template rm", 1, 1)))
		return r;
	name = cli_escape(argv[optind]);
	target = xasprintf("/v1/templates/%s", name);
	return cli_call_json(cli, "DELETE", target, NULL, NULL, NULL, NULL);
}

int cmd_template(struct cli *cli, int argc, char **argv)
{
	if (argc >= 2 && (strcmp(argv[1], "ls") == 0 || strcmp(argv[1], "list") == 0))
		return template_ls(cli, argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "build") == 0)
		return template_build(cli, argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "rm") == 0)
		return template_rm(cli, argc - 1, argv + 1);
	return cli_usage("template",
			 "usage: airlock template ls | template build NAME ... | template rm NAME");
}

/* --- tenants and keys --- */

static int tenant_create(struct cli *cli, int argc, char **argv)
{
	_cleanup_free_ char *raw = NULL;
	json *resp = NULL;
	struct buf body;
	struct jw w;
	int r;

	if ((r = cli_only_common(cli, argc, argv, "tenant create", 1, 1)))
		return r;
	buf_init(&body);
	jw_init(&w, &body);
	jw_obj(&w);
	jw_key(&w, "name");
	jw_str(&w, argv[optind]);
	jw_end(&w);
	r = cli_call_json(cli, "POST", "/v1/tenants", body.data, NULL, &resp, &raw);
	buf_free(&body);
	return cli_print_id(cli, r, resp, raw);
}

static int tenant_ls(struct cli *cli, int argc, char **argv)
{
	static const char *const head[] = { "ID", "NAME", "CREATED" };
	static const char *const fields[] = { "id", "name", "created_at" };
	int r;

	if ((r = cli_only_common(cli, argc, argv, "tenant ls", 0, 0)))
		return r;
	return cli_list_table(cli, "/v1/tenants", "tenants", "tenant list", 3, head, fields);
}

/* An answer as it came (--json, or not JSON) or pretty; frees resp. 0. */
static int print_answer(struct cli *cli, json *resp, const char *raw)
{
	if (cli->json || !resp)
		cli_print_raw(raw);
	else
		cli_print_pretty(resp, stdout);
	json_free(resp);
	return 0;
}

/* tenant quota T [--sandboxes N] [--memory-mb N] [--cpus X] [--disk-mb N]
 * [--snapshots N] [--snapshot-mb N]: without options, print it; with some,
 * change those (0 = no limit) and keep the rest (GET, then PUT). */
static int tenant_quota(struct cli *cli, int argc, char **argv)
{
	static const char *const keys[] = { "sandboxes", "memory_mb", "cpus", "disk_mb",
					    "snapshots", "snapshot_mb" };
	static const struct option opts[] = {
		{ "sandboxes", required_argument, NULL, 0x100 },
		{ "memory-mb", required_argument, NULL, 0x101 },
		{ "cpus", required_argument, NULL, 0x102 },
		{ "disk-mb", required_argument, NULL, 0x103 },
		{ "snapshots", required_argument, NULL, 0x104 },
		{ "snapshot-mb", required_argument, NULL, 0x105 },
		CLI_COMMON_OPTS,
		{ 0 },
	};
	double val[ARRAY_SIZE(keys)];
	bool set[ARRAY_SIZE(keys)] = { 0 };
	_cleanup_free_ char *raw = NULL, *target = NULL;
	bool any = false;
	json *resp = NULL;
	int opt, r;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (opt >= 0x100 && opt < 0x100 + (int)ARRAY_SIZE(keys)) {
			char *end;
			double v = strtod(optarg, &end);
			bool cpus = opt == 0x102;
			if (end == optarg || *end || !(v >= 0) || v > 1e12 ||
			    (!cpus && v != (double)(uint64_t)v))
				return cli_usage("tenant quota", "--%s: `%s` is not %s >= 0",
						 opts[opt - 0x100].name, optarg,
						 cpus ? "a number" : "an integer");
			val[opt - 0x100] = v;
			set[opt - 0x100] = true;
			any = true;
			continue;
		}
		if ((r = cli_common_opt(cli, opt, "tenant quota")))
			return r;
	}
	if (argc - optind != 1)
		return cli_usage("tenant quota",
				 "usage: airlock tenant quota TENANT [--sandboxes N] "
				 "[--memory-mb N] [--cpus X] [--disk-mb N] [--snapshots N] "
				 "[--snapshot-mb N]   (0 = no limit)");
	target = xasprintf("/v1/tenants/%s/quota", argv[optind]);
	if ((r = cli_call_json(cli, "GET", target, NULL, NULL, &resp, &raw)))
		return r;
	if (any) {
		const json *q = resp ? json_get(resp, "quota") : NULL;
		struct buf body;
		struct jw w;

		buf_init(&body);
		jw_init(&w, &body);
		jw_obj(&w);
		for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
			const json *old = q ? json_get(q, keys[i]) : NULL;
			jw_key(&w, keys[i]);
			if (set[i] && strcmp(keys[i], "cpus") == 0)
				jw_double(&w, val[i]);
			else if (set[i])
				jw_uint(&w, (uint64_t)val[i]);
			else if (old)
				jw_value(&w, old);
			else
				jw_null(&w);
		}
		jw_end(&w);
		json_free(resp);
		resp = NULL;
		free(raw);
		raw = NULL;
		r = cli_call_json(cli, "PUT", target, body.data, NULL, &resp, &raw);
		buf_free(&body);
		if (r) {
			json_free(resp);
			return r;
		}
	}
	return print_answer(cli, resp, raw);
}

/* DELETE prefix/ID for each ID (verb: "tenant rm", "key rm"); the first
 * failure's exit code. */
static int delete_each(struct cli *cli, int argc, char **argv, const char *verb,
		       const char *prefix)
{
	int r, first = 0;

	if ((r = cli_only_common(cli, argc, argv, verb, 1, -1)))
		return r;
	for (int i = optind; i < argc; i++) {
		_cleanup_free_ char *id = cli_escape(argv[i]);
		_cleanup_free_ char *target = xasprintf("%s/%s", prefix, id);

		r = cli_call_json(cli, "DELETE", target, NULL, NULL, NULL, NULL);
		if (r && !first)
			first = r;
	}
	return first;
}

/* tenant rm T... */
static int tenant_rm(struct cli *cli, int argc, char **argv)
{
	return delete_each(cli, argc, argv, "tenant rm", "/v1/tenants");
}

/* tenant encryption set T --provider local [--key-id K]
 * tenant encryption set T --provider transit --url U --key-name N --token-file F
 *     [--ca-file F] [--pin-sha256 HEX] [--client-cert F --client-key F] [--insecure-http]
 * tenant encryption show T
 * tenant encryption rotate T
 * BYOK (docs/API.md "Tenant encryption"): no key material is ever shown. */
static int tenant_encryption(struct cli *cli, int argc, char **argv)
{
	static const char *const keys[] = { "provider", "key_id", "url", "key_name", "token_file",
					    "ca_file", "pin_sha256", "client_cert", "client_key" };
	static const struct option opts[] = {
		{ "provider", required_argument, NULL, 0x100 },
		{ "key-id", required_argument, NULL, 0x101 },
		{ "url", required_argument, NULL, 0x102 },
		{ "key-name", required_argument, NULL, 0x103 },
		{ "token-file", required_argument, NULL, 0x104 },
		{ "ca-file", required_argument, NULL, 0x105 },
		{ "pin-sha256", required_argument, NULL, 0x106 },
		{ "client-cert", required_argument, NULL, 0x107 },
		{ "client-key", required_argument, NULL, 0x108 },
		{ "insecure-http", no_argument, NULL, 0x1ff },
		CLI_COMMON_OPTS,
		{ 0 },
	};
	static const char usage[] =
		"usage: airlock tenant encryption show TENANT | rotate TENANT |\n"
		"       set TENANT --provider local [--key-id K] |\n"
		"       set TENANT --provider transit --url https://HOST:PORT --key-name N "
		"--token-file PATH\n"
		"           [--ca-file PEM] [--pin-sha256 HEX] [--client-cert PEM --client-key PEM]\n"
		"           [--insecure-http (plain http:// to a host that is not loopback)]";
	const char *val[ARRAY_SIZE(keys)] = { 0 };
	_cleanup_free_ char *raw = NULL, *target = NULL;
	const char *verb = argc >= 2 ? argv[1] : "";
	bool insecure = false;
	json *resp = NULL;
	int opt, r;

	if (strcmp(verb, "show") && strcmp(verb, "set") && strcmp(verb, "rotate"))
		return cli_usage("tenant encryption", "%s", usage);
	argc--;
	argv++;
	optind = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (opt >= 0x100 && opt < 0x100 + (int)ARRAY_SIZE(keys)) {
			if (strcmp(verb, "set") != 0)
				return cli_usage("tenant encryption", "%s", usage);
			val[opt - 0x100] = optarg;
			continue;
		}
		if (opt == 0x1ff) {
			if (strcmp(verb, "set") != 0)
				return cli_usage("tenant encryption", "%s", usage);
			insecure = true;
			continue;
		}
		if ((r = cli_common_opt(cli, opt, "tenant encryption")))
			return r;
	}
	if (argc - optind != 1 || (strcmp(verb, "set") == 0 && !val[0]))
		return cli_usage("tenant encryption", "%s", usage);
	target = xasprintf("/v1/tenants/%s/encryption%s", argv[optind],
			   strcmp(verb, "rotate") == 0 ? "/rotate" : "");
	if (strcmp(verb, "set") == 0) {
		struct buf body;
		struct jw w;

		buf_init(&body);
		jw_init(&w, &body);
		jw_obj(&w);
		for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
			if (val[i]) {
				jw_key(&w, keys[i]);
				jw_str(&w, val[i]);
			}
		if (insecure) {
			jw_key(&w, "insecure_http");
			jw_bool(&w, true);
		}
		jw_end(&w);
		r = cli_call_json(cli, "PUT", target, body.data, NULL, &resp, &raw);
		buf_free(&body);
	} else {
		r = cli_call_json(cli, strcmp(verb, "rotate") == 0 ? "POST" : "GET", target,
				  strcmp(verb, "rotate") == 0 ? "{}" : NULL, NULL, &resp, &raw);
	}
	if (r) {
		json_free(resp);
		return r;
	}
	return print_answer(cli, resp, raw);
}

int cmd_tenant(struct cli *cli, int argc, char **argv)
{
	if (argc >= 2 && (strcmp(argv[1], "rm") == 0 || strcmp(argv[1], "delete") == 0))
		return tenant_rm(cli, argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "encryption") == 0)
		return tenant_encryption(cli, argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "quota") == 0)
		return tenant_quota(cli, argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "create") == 0)
		return tenant_create(cli, argc - 1, argv + 1);
	if (argc >= 2 && (strcmp(argv[1], "ls") == 0 || strcmp(argv[1], "list") == 0))
		return tenant_ls(cli, argc - 1, argv + 1);
	return cli_usage("tenant", "usage: airlock tenant create NAME | tenant ls | "
			 "tenant rm NAME... | tenant quota NAME [--sandboxes N ...] | "
			 "tenant encryption set|show|rotate NAME ...");
}

/* key ls [--tenant T] */
static int key_ls(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "tenant", required_argument, NULL, 'T' },
		CLI_COMMON_OPTS,
		{ 0 },
	};
	static const char *const head[] = { "ID", "NAME", "TENANT", "ADMIN", "CREATED" };
	static const char *const fields[] = { "id", "name", "tenant", "admin", "created_at" };
	_cleanup_free_ char *target = NULL;
	const char *tenant = NULL;
	int opt, r;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (opt == 'T')
			tenant = optarg;
		else if ((r = cli_common_opt(cli, opt, "key ls")))
			return r;
	}
	if (optind < argc)
		return cli_usage("key ls", "usage: airlock key ls [--tenant T]");
	if (tenant) {
		_cleanup_free_ char *t = cli_escape(tenant);
		target = xasprintf("/v1/keys?tenant=%s", t);
	} else {
		target = xstrdup("/v1/keys");
	}
	return cli_list_table(cli, target, "keys", "key list", ARRAY_SIZE(head), head, fields);
}

/* key rm ID...: revoke each. */
static int key_rm(struct cli *cli, int argc, char **argv)
{
	return delete_each(cli, argc, argv, "key rm", "/v1/keys");
}

int cmd_key(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "tenant", required_argument, NULL, 'T' },
		{ "admin", no_argument, NULL, 'a' },
		{ "name", required_argument, NULL, 'n' },
		CLI_COMMON_OPTS,
		{ 0 },
	};
	const char *tenant = NULL, *name = NULL;
	_cleanup_free_ char *raw = NULL;
	bool admin = false;
	json *resp = NULL;
	struct buf body;
	struct jw w;
	int opt, r;

	if (argc >= 2 && (strcmp(argv[1], "ls") == 0 || strcmp(argv[1], "list") == 0))
		return key_ls(cli, argc - 1, argv + 1);
	if (argc >= 2 && (strcmp(argv[1], "rm") == 0 || strcmp(argv[1], "revoke") == 0))
		return key_rm(cli, argc - 1, argv + 1);
	if (argc < 2 || strcmp(argv[1], "create") != 0)
		return cli_usage("key", "usage: airlock key create --tenant T [--admin] [--name N] | "
				 "key ls [--tenant T] | key rm ID...");
	argc--;
	argv++;
	optind = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'T': tenant = optarg; break;
		case 'a': admin = true; break;
		case 'n': name = optarg; break;
		default:
			if ((r = cli_common_opt(cli, opt, "key create")))
				return r;
		}
	}
	if (!tenant || optind < argc)
		return cli_usage("key create", "usage: airlock key create --tenant T [--admin] [--name N]");
	buf_init(&body);
	jw_init(&w, &body);
	jw_obj(&w);
	jw_key(&w, "tenant");
	jw_str(&w, tenant);
	if (name) {
		jw_key(&w, "name");
		jw_str(&w, name);
	}
	if (admin) {
		jw_key(&w, "admin");
		jw_bool(&w, true);
	}
	jw_end(&w);
	r = cli_call_json(cli, "POST", "/v1/keys", body.data, NULL, &resp, &raw);
	buf_free(&body);
	if (r == 0) {
		if (cli->json || !resp || !json_get_str(resp, "key")) {
			cli_print_raw(raw);
		} else {
			printf("%s\n", json_get_str(resp, "key"));
			if (isatty(2))
				fprintf(stderr, "(key id %s; the key is not shown again)\n",
					json_get_str(resp, "id") ? json_get_str(resp, "id") : "?");
		}
	}
	json_free(resp);
	return r;
}

/* --- health, node --- */

int cmd_health(struct cli *cli, int argc, char **argv)
{
	_cleanup_free_ char *raw = NULL;
	json *resp = NULL;
	int r;

	if ((r = cli_only_common(cli, argc, argv, "health", 0, 0)))
		return r;
	if ((r = cli_call_json(cli, "GET", "/v1/health", NULL, NULL, &resp, &raw)))
		return r;
	if (cli->json || !resp || !json_get_str(resp, "status"))
		cli_print_raw(raw);
	else
		printf("%s\n", json_get_str(resp, "status"));
	json_free(resp);
	return 0;
}

/* airlock node ls: the cluster's nodes (GET /v1/nodes). */
static int node_ls(struct cli *cli, int argc, char **argv)
{
	static const char *const head[] = { "NAME", "STATE", "HEARTBEAT", "SANDBOXES",
					    "MEM_FREE_MB", "CPUS", "DISK_FREE_MB", "TEMPLATES" };
	static const char *const fields[] = { "name", "state", "last_heartbeat",
					      "capacity.sandboxes", "capacity.mem_free_mb",
					      "capacity.cpus", "capacity.disk_free_mb",
					      "capacity.templates" };
	int r;

	if ((r = cli_only_common(cli, argc, argv, "node ls", 0, 0)))
		return r;
	return cli_list_table(cli, "/v1/nodes", "nodes", "node list", ARRAY_SIZE(head), head,
			      fields);
}

int cmd_node(struct cli *cli, int argc, char **argv)
{
	_cleanup_free_ char *raw = NULL;
	json *resp = NULL;
	int r;

	if (argc >= 2 && (strcmp(argv[1], "ls") == 0 || strcmp(argv[1], "list") == 0))
		return node_ls(cli, argc - 1, argv + 1);

	if ((r = cli_only_common(cli, argc, argv, "node", 0, 0)))
		return r;
	if ((r = cli_call_json(cli, "GET", "/v1/node", NULL, NULL, &resp, &raw)))
		return r;
	return print_answer(cli, resp, raw);
}
