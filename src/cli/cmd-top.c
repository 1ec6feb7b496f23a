/* cmd-top.c - `airlock top`: the caller's live sandboxes and what each uses
 * (GET /v1/sandboxes, then GET /v1/sandboxes/{id}/metrics for each running
 * or paused one). On a terminal the table is redrawn every --interval
 * seconds (2) until Ctrl-C, with CPU% over the last interval; --once (and
 * --json) prints it once. Not on a terminal, tables follow each other. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define TOP_MAX 4096   /* sandboxes remembered for CPU% between rounds */

struct prev {
	char id[65];
	double cpu;
};

static volatile sig_atomic_t top_stop;

static void on_int(int sig)
{
	(void)sig;
	top_stop = 1;
}

/* 1536 -> "1.5K": binary units, as top does. */
static char *human(double v)
{
	static const char units[] = "BKMGTP";
	int u = 0;

	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	return u ? xasprintf("%.1f%c", v, units[u]) : xasprintf("%.0f", v);
}

static double num(const json *o, const char *key, bool *have)
{
	const json *v = o ? json_get(o, key) : NULL;

	*have = v && v->type == JSON_NUM;
	return *have ? v->num : 0;
}

/* "-" when absent or null. */
static char *num_cell(const json *o, const char *key)
{
	bool have;
	double v = num(o, key, &have);

	return have ? human(v) : xstrdup("-");
}

static double prev_cpu(const struct prev *p, size_t n, const char *id, bool *found)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(p[i].id, id)) {
			*found = true;
			return p[i].cpu;
		}
	*found = false;
	return 0;
}

/* One round: the table (or, with --json, a JSON array of the metrics
 * answers). prev/n_prev: the last round's CPU seconds, replaced by this
 * round's; dt: seconds since it (0: none). */
static int round_once(struct cli *cli, struct prev *prev, size_t *n_prev, double dt)
{
	static const char *const head[] = { "ID",	"STATE",     "BACKEND", "CPU-S",  "CPU%",
					    "MEM",	"MEM-PEAK",  "DISK",    "NET-IN", "NET-OUT" };
	struct prev *now = xcalloc(TOP_MAX, sizeof(*now));
	size_t n_now = 0;
	json *list = NULL;
	const json *sbs;
	struct table t;
	struct buf js;
	int r;

	if ((r = cli_call_json(cli, "GET", "/v1/sandboxes?limit=1000", NULL, NULL, &list, NULL))) {
		free(now);
		return r;
	}
	sbs = list ? json_get(list, "sandboxes") : NULL;
	if (!sbs || sbs->type != JSON_ARR) {
		json_free(list);
		free(now);
		return cli_fail("bad_response", "the answer carries no sandboxes");
	}
	table_init(&t, ARRAY_SIZE(head), head);
	buf_init(&js);
	buf_addc(&js, '[');
	for (size_t i = 0; i < sbs->n; i++) {
		const json *sb = sbs->items[i];
		const char *id = json_get_str(sb, "id"), *state = json_get_str(sb, "state");
		_cleanup_free_ char *eid = NULL, *target = NULL, *raw = NULL;
		json *m = NULL;
		bool have, found;
		double cpu;
		char **row;

		if (!id || !state || (strcmp(state, "running") && strcmp(state, "paused")))
			continue;
		eid = cli_escape(id);
		target = xasprintf("/v1/sandboxes/%s/metrics", eid);
		/* a sandbox that went away meanwhile is skipped, not an error */
		if (cli_call_json(cli, "GET", target, NULL, NULL, &m, &raw) != 0) {
			json_free(m);
			continue;
		}
		if (cli->json) {
			if (js.len > 1)
				buf_addc(&js, ',');
			buf_adds(&js, raw);
			json_free(m);
			continue;
		}
		row = xcalloc(ARRAY_SIZE(head), sizeof(*row));
		row[0] = xstrdup(id);
		row[1] = xstrdup(state);
		row[2] = cli_field(m, "backend");
		cpu = num(m, "cpu_seconds", &have);
		row[3] = have ? xasprintf("%.2f", cpu) : xstrdup("-");
		double before = prev_cpu(prev, *n_prev, id, &found);
		row[4] = have && found && dt > 0 ? xasprintf("%.0f", 100.0 * (cpu - before) / dt)
						 : xstrdup("-");
		row[5] = num_cell(m, "memory_bytes");
		row[6] = num_cell(m, "memory_peak_bytes");
		row[7] = num_cell(m, "disk_used_bytes");
		const json *net = json_get(m, "network");
		row[8] = num_cell(net && net->type == JSON_OBJ ? net : NULL, "bytes_in");
		row[9] = num_cell(net && net->type == JSON_OBJ ? net : NULL, "bytes_out");
		table_add(&t, row);
		free(row);
		if (have && n_now < TOP_MAX) {
			snprintf(now[n_now].id, sizeof(now[n_now].id), "%s", id);
			now[n_now++].cpu = cpu;
		}
		json_free(m);
	}
	buf_addc(&js, ']');
	if (cli->json) {
		puts(js.data);
		table_free(&t);
	} else {
		table_print(&t, stdout);
	}
	fflush(stdout);
	buf_free(&js);
	json_free(list);
	memcpy(prev, now, n_now * sizeof(*now));
	*n_prev = n_now;
	free(now);
	return 0;
}

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int cmd_top(struct cli *cli, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "once", no_argument, NULL, '1' },
		{ "interval", required_argument, NULL, 'n' },
		CLI_COMMON_OPTS,
		{ 0 },
	};
	struct prev *prev = NULL;
	size_t n_prev = 0;
	long long every = 2;
	bool once = false, tty;
	double last = 0;
	int opt, r = 0;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		if (opt == '1')
			once = true;
		else if (opt == 'n') {
			if (!cli_parse_int(optarg, 1, 3600, &every))
				return cli_usage("top", "--interval takes whole seconds, 1 to 3600");
		} else if ((r = cli_common_opt(cli, opt, "top")))
			return r;
	}
	if (optind < argc)
		return cli_usage("top", "unexpected argument `%s`", argv[optind]);
	if ((r = cli_load(cli)))
		return r;
	tty = isatty(STDOUT_FILENO);
	if (cli->json)
		once = true;
	prev = xcalloc(TOP_MAX, sizeof(*prev));
	signal(SIGINT, on_int);
	for (;;) {
		double now = mono_s();
		if (tty && !once)
			fputs("\033[H\033[2J", stdout);   /* home, clear */
		r = round_once(cli, prev, &n_prev, last ? now - last : 0);
		last = now;
		if (r || once || top_stop)
			break;
		if (!tty)
			putchar('\n');
		for (long long i = 0; i < every * 10 && !top_stop; i++)
			usleep(100000);
		if (top_stop)
			break;
	}
	free(prev);
	return r;
}
