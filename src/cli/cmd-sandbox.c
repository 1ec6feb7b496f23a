/* cmd-sandbox.c - create, ls, get, rm, pause, resume, suspend, restore, connect. */
#include <errno.h>
#include <string.h>

#include "cli.h"

/* A list of K=V flags: later ones win, like the shell. */
struct kv_list {
	const char **items;
	size_t n;
};

static int kv_add(struct kv_list *l, const char *s, const char *flag, const char *verb)
{
	const char *eq = strchr(s, '=');

	if (!eq || eq == s)
		return cli_usage(verb, "%s needs KEY=VALUE, got `%s`", flag, s);
	l->items = xrealloc(l->items, sizeof(char *) * (l->n + 1));
	l->items[l->n++] = s;
	return 0;
}

static void kv_write(struct jw *w, const struct kv_list *l)
{
	jw_obj(w);
	for (size_t i = 0; i < l->n; i++) {
		size_t klen = (size_t)(strchr(l->items[i], '=') - l->items[i]);
		bool later = false;
		for (size_t j = i + 1; j < l->n && !later; j++)
			later = strncmp(l->items[j], l->items[i], klen + 1) == 0;
		if (later)
			continue;
		_cleanup_free_ char *k = xstrndup(l->items[i], klen);
		jw_key(w, k);
		jw_str(w, l->items[i] + klen + 1);
	}
	jw_end(w);
}

int cmd_create(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "template", required_argument, NULL, 'T' },
		{ "backend", required_argument, NULL, 'b' },
		{ "memory", required_argument, NULL, 'm' },
		{ "cpus", required_argument, NULL, 'c' },
		{ "pids", required_argument, NULL, 'p' },
		{ "disk", required_argument, NULL, 'd' },
		{ "env", required_argument, NULL, 'e' },
		{ "meta", required_argument, NULL, 'M' },
		{ "timeout", required_argument, NULL, 't' },
		{ "idempotency-key", required_argument, NULL, 'k' },
		{ "network", required_argument, NULL, 'n' },
		{ "node", required_argument, NULL, 'N' },
		CLI_COMMON_OPTS,
		{ 0 },
	};
	const char *tmpl = NULL, *backend = NULL, *idem = NULL, *cpus = NULL, *node = NULL;
	long long memory = -1, pids = -1, disk = -1, timeout = -1, v;
	_cleanup_free_ char *raw = NULL, *extra = NULL, *network = NULL;
	struct kv_list env = { 0 }, meta = { 0 };
	struct buf body;
	struct jw w;
	json *resp = NULL;
	int opt, r = 0;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (opt) {
		case 'T': tmpl = optarg; break;
		case 'b': backend = optarg; break;
		case 'e': r = kv_add(&env, optarg, "--env", "create"); break;
		case 'M': r = kv_add(&meta, optarg, "--meta", "create"); break;
		case 'k': idem = optarg; break;
		case 'N': node = optarg; break;
		case 'n':
			free(network);
			if (!(network = cli_policy_json(optarg)))
				r = cli_usage("create", "--network is allow-all, deny-all or JSON");
			break;
		case 'c': {
			char *end;
			double d = strtod(optarg, &end);
			if (!optarg[0] || *end || !(d > 0) || d > 1024)
				r = cli_usage("create", "--cpus needs a positive number");
			cpus = optarg;
			break;
		}
		case 'm': case 'p': case 'd': case 't':
			if (!cli_parse_int(optarg, opt == 't' ? 0 : 1, 1LL << 40, &v)) {
				r = cli_usage("create", "--%s needs a %s integer",
					      opt == 'm' ? "memory" : opt == 'p' ? "pids"
							   : opt == 'd' ? "disk" : "timeout",
					      opt == 't' ? "non-negative" : "positive");
				break;
			}
			*(opt == 'm' ? &memory : opt == 'p' ? &pids : opt == 'd' ? &disk : &timeout) = v;
			break;
		default: r = cli_common_opt(cli, opt, "create"); break;
		}
		if (r)
			goto out;
	}
	if (optind < argc) {
		r = cli_usage("create", "unexpected argument `%s`", argv[optind]);
		goto out;
	}
	if (idem && (strpbrk(idem, "\r\n") || !*idem)) {
		r = cli_usage("create", "invalid --idempotency-key");
		goto out;
	}

	buf_init(&body);
	jw_init(&w, &body);
	jw_obj(&w);
	if (tmpl) {
		jw_key(&w, "template");
		jw_str(&w, tmpl);
	}
	if (node) {
		jw_key(&w, "node");
		jw_str(&w, node);
	}
	if (backend) {
		jw_key(&w, "backend");
		jw_str(&w, backend);
	}
	if (memory > 0 || cpus || pids > 0 || disk > 0) {
		jw_key(&w, "limits");
		jw_obj(&w);
		if (memory > 0) {
			jw_key(&w, "memory_mb");
			jw_int(&w, memory);
		}
		if (cpus) {
			_cleanup_free_ char *num = xasprintf("%.6g", strtod(cpus, NULL));
			jw_key(&w, "cpus");
			jw_raw(&w, num);
		}
		if (pids > 0) {
			jw_key(&w, "pids");
			jw_int(&w, pids);
		}
		if (disk > 0) {
			jw_key(&w, "disk_mb");
			jw_int(&w, disk);
		}
		jw_end(&w);
	}
	if (env.n) {
		jw_key(&w, "env");
		kv_write(&w, &env);
	}
	if (meta.n) {
		jw_key(&w, "metadata");
		kv_write(&w, &meta);
	}
	if (timeout >= 0) {
		jw_key(&w, "timeout_s");
		jw_int(&w, timeout);
	}
	if (network) {
		jw_key(&w, "network");
		jw_raw(&w, network);
	}
	jw_end(&w);
	if (idem)
		extra = xasprintf("Idempotency-Key: %s\r\n", idem);
	r = cli_call_json(cli, "POST", "/v1/sandboxes", body.data, extra, &resp, &raw);
	buf_free(&body);
	if (r == 0) {
		if (cli->json)
			cli_print_raw(raw);
		else if (resp && json_get_str(resp, "id"))
			printf("%s\n", json_get_str(resp, "id"));
		else
			r = cli_fail("bad_response", "the answer carries no sandbox id");
	}
	json_free(resp);
out:
	free(env.items);
	free(meta.items);
	return r;
}

int cmd_ls(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "state", required_argument, NULL, 's' },
		{ "template", required_argument, NULL, 'T' },
		{ "meta", required_argument, NULL, 'M' },
		CLI_COMMON_OPTS,
		{ 0 },
	};
	static const char *const head[] = { "ID", "TEMPLATE", "BACKEND", "STATE", "CREATED" };
	static const char *const fields[] = { "id", "template", "backend", "state", "created_at" };
	struct buf target;
	char sep = '?';
	int opt, r = 0;

	buf_init(&target);
	buf_adds(&target, "/v1/sandboxes");
	optind = 0;
	while ((opt = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		_cleanup_free_ char *k = NULL, *ek = NULL, *val = NULL;
		const char *eq;

		switch (opt) {
		case 's': case 'T':
			val = cli_escape(optarg);
			buf_printf(&target, "%c%s=%s", sep, opt == 's' ? "state" : "template", val);
			sep = '&';
			break;
		case 'M':
			eq = strchr(optarg, '=');
			if (!eq || eq == optarg) {
				r = cli_usage("ls", "--meta needs KEY=VALUE");
				break;
			}
			k = xstrndup(optarg, (size_t)(eq - optarg));
			ek = cli_escape(k);
			val = cli_escape(eq + 1);
			buf_printf(&target, "%cmetadata.%s=%s", sep, ek, val);
			sep = '&';
			break;
		default: r = cli_common_opt(cli, opt, "ls"); break;
		}
		if (r)
			goto out;
	}
	if (optind < argc) {
		r = cli_usage("ls", "unexpected argument `%s`", argv[optind]);
		goto out;
	}
	r = cli_list_table(cli, target.data, "sandboxes", "sandbox list", 5, head, fields);
out:
	buf_free(&target);
	return r;
}

int cmd_get(struct cli *cli, int argc, char **argv)
{
	_cleanup_free_ char *raw = NULL, *id = NULL, *target = NULL;
	json *resp = NULL;
	int r;

	if ((r = cli_only_common(cli, argc, argv, "get", 1, 1)))
		return r;
	id = cli_escape(argv[optind]);
	target = xasprintf("/v1/sandboxes/%s", id);
	r = cli_call_json(cli, "GET", target, NULL, NULL, &resp, &raw);
	if (r == 0) {
		if (cli->json || !resp || resp->type != JSON_OBJ)
			cli_print_raw(raw);
		else
			cli_print_fields(resp);
	}
	json_free(resp);
	return r;
}

/* The bytes a suspended sandbox holds in the object store, what its restore
 * downloads (the manifest aside): the restore's bar has its total before
 * the first poll. 0 when it is not suspended or the GET fails (the call
 * itself reports that). */
static uint64_t suspended_bytes(struct cli *cli, const char *id)
{
	_cleanup_free_ char *esc = cli_escape(id), *target = xasprintf("/v1/sandboxes/%s", esc);
	_cleanup_free_ char *hdr = cli_headers(cli, NULL);
	struct http_resp resp;
	err_t err = { 0 };
	uint64_t n = 0;

	if (http_request_timeout(cli->url, "GET", target, hdr, NULL, 0, 5000, &resp, &err) < 0)
		return 0;
	if (resp.status == 200 && resp.body.len) {
		json *j = json_parse(resp.body.data, resp.body.len, &err);
		const char *st = j ? json_get_str(j, "state") : NULL;
		bool bad = false;
		int64_t b = j ? json_get_int(j, "suspended_bytes", 0, &bad) : 0;

		if (st && !strcmp(st, "suspended") && !bad && b > 0)
			n = (uint64_t)b;
		json_free(j);
	}
	http_resp_free(&resp);
	return n;
}

/* POST /v1/sandboxes/{id}/<op> for pause, resume, suspend, restore and
 * connect: each answers
 * the sandbox, shown like `get`. */
static int lifecycle(struct cli *cli, int argc, char **argv, const char *op)
{
	_cleanup_free_ char *raw = NULL, *id = NULL, *target = NULL;
	json *resp = NULL;
	int r;

	if ((r = cli_only_common(cli, argc, argv, op, 1, 1)))
		return r;
	id = cli_escape(argv[optind]);
	target = xasprintf("/v1/sandboxes/%s/%s", id, op);
	/* suspend and resume move the sandbox to or from the object store
	 * (resume: when it is suspended, it is restored) */
	if (!strcmp(op, "suspend") || !strcmp(op, "resume")) {
		if ((r = cli_load(cli)))
			return r;
		uint64_t stored = 0;

		if (!strcmp(op, "resume") && isatty(2))
			stored = suspended_bytes(cli, argv[optind]);
		cli_progress_start("%s %s", !strcmp(op, "suspend") ? "suspending" : "resuming",
				   argv[optind]);
		if (stored)
			cli_progress_set(0, stored, "bytes", NULL);
		cli_progress_follow(cli, argv[optind], !strcmp(op, "suspend") ? "suspend" : "restore");
	}
	r = cli_call_json(cli, "POST", target, "{}", NULL, &resp, &raw);
	if (r == 0) {
		bool bad = false;
		int64_t stored = resp ? json_get_int(resp, "suspended_bytes", 0, &bad) : 0;
		/* a suspend's answer tells the bytes it stored in all */
		cli_progress_done(!strcmp(op, "suspend") && !bad && stored > 0 ? (uint64_t)stored : 0,
				  "bytes");
	}
	cli_progress_end();
	if (r == 0) {
		if (cli->json || !resp || resp->type != JSON_OBJ)
			cli_print_raw(raw);
		else
			cli_print_fields(resp);
	}
	json_free(resp);
	return r;
}

int cmd_pause(struct cli *cli, int argc, char **argv)
{
	return lifecycle(cli, argc, argv, "pause");
}

int cmd_resume(struct cli *cli, int argc, char **argv)
{
	return lifecycle(cli, argc, argv, "resume");
}

int cmd_suspend(struct cli *cli, int argc, char **argv)
{
	return lifecycle(cli, argc, argv, "suspend");
}

/* airlock restore SBX [--node NAME]: on the node it names, else where the
 * cluster places it (its own node when that is up). */
int cmd_restore(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "node", required_argument, NULL, 'N' },
		CLI_COMMON_OPTS,
		{ 0 },
	};
	_cleanup_free_ char *raw = NULL, *id = NULL, *target = NULL, *body = NULL;
	const char *node = NULL;
	json *resp = NULL;
	uint64_t stored;
	int opt, r = 0;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (opt == 'N')
			node = optarg;
		else if ((r = cli_common_opt(cli, opt, "restore")))
			return r;
	}
	if (optind + 1 != argc)
		return cli_usage("restore", "usage: airlock restore SBX [--node NAME]");
	if (node) {
		struct buf b;
		struct jw w;

		buf_init(&b);
		jw_init(&w, &b);
		jw_obj(&w);
		jw_key(&w, "node");
		jw_str(&w, node);
		jw_end(&w);
		body = buf_steal(&b);
	}
	id = cli_escape(argv[optind]);
	target = xasprintf("/v1/sandboxes/%s/restore", id);
	if ((r = cli_load(cli)))
		return r;
	stored = isatty(2) ? suspended_bytes(cli, argv[optind]) : 0;
	cli_progress_start("restoring %s", argv[optind]);
	if (stored)
		cli_progress_set(0, stored, "bytes", NULL);
	cli_progress_follow(cli, argv[optind], "restore");
	r = cli_call_json(cli, "POST", target, body ? body : "{}", NULL, &resp, &raw);
	if (r == 0)
		cli_progress_done(0, NULL);
	cli_progress_end();
	if (r == 0) {
		if (cli->json || !resp || resp->type != JSON_OBJ)
			cli_print_raw(raw);
		else
			cli_print_fields(resp);
	}
	json_free(resp);
	return r;
}

int cmd_connect(struct cli *cli, int argc, char **argv)
{
	return lifecycle(cli, argc, argv, "connect");
}

int cmd_rm(struct cli *cli, int argc, char **argv)
{
	int r, failed = 0;

	/* Every id is tried; the exit code is the last failure's. */
	if ((r = cli_only_common(cli, argc, argv, "rm", 1, -1)))
		return r;
	for (int i = optind; i < argc; i++) {
		_cleanup_free_ char *id = cli_escape(argv[i]);
		_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s", id);
		struct http_resp resp;

		if ((r = cli_call(cli, "DELETE", target, NULL, NULL, 0, NULL, &resp))) {
			failed = r;
			continue;
		}
		http_resp_free(&resp);
		if (!cli->json)
			printf("%s\n", argv[i]);
	}
	return failed;
}
