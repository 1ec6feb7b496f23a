/* cli.h - shared by the files of the `airlock` CLI.
 *
 * Every verb is `int cmd_x(struct cli *cli, int argc, char **argv)` and returns
 * the process exit code: 0 ok, or one of the EXIT_* codes below (the error
 * already printed as "airlock: <message> (<code>)"); `exec` and `logs`
 * return the remote process's status instead. argv[0] is the verb.
 */
#ifndef AIRLOCK_CLI_H
#define AIRLOCK_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

#include "../lib/http.h"
#include "../lib/json.h"
#include "../lib/util.h"

/* The CLI's own failures use 125..127, as docker's do, so a script can tell
 * them from what a remote command returned (`airlock exec` passes that
 * through; a command is rarely made to exit 125..127 on purpose).
 *   125  the CLI or the request failed: a usage error, a bad config, an error
 *        answer of the API (404, 409, 5xx, ...), a broken stream
 *   126  the API refused the key: 401 (no or a bad key) or 403 (not admin)
 *   127  the server could not be reached (connect, TLS or read failure)
 * README ("CLI") and docs/API.md ("Errors") document the same table. */
#define EXIT_FAIL 125
#define EXIT_USAGE 125
#define EXIT_AUTH 126
#define EXIT_UNREACHABLE 127

struct cli {
	/* from flags; borrowed from argv */
	const char *config_flag;
	const char *url_flag;
	const char *cacert_flag;
	bool json;
	/* resolved lazily by cli_load(); owned */
	bool loaded;
	char *url;
	char *key;
	/* key came from CLI_DEFAULT_CONFIG, read only because no config was
	 * named (no --config, AIRLOCK_CONFIG or user config) and no
	 * AIRLOCK_API_KEY set: the admin key `airlockd up` writes there */
	bool key_from_default;
};

/* The config read when none is named: DATA/cli.json, which `airlockd up`
 * writes (root:root 0600) with the admin key for root's own CLI. */
#define CLI_DEFAULT_CONFIG "/var/lib/airlock/cli.json"

/* Options every verb accepts besides its own: --json, --config F, --url U,
 * --cacert F.
 * Put CLI_COMMON_OPTS at the end of a verb's long options (before the zero
 * entry) and pass unhandled option chars to cli_common_opt(). */
#define OPT_JSON 1001
#define OPT_CONFIG 1002
#define OPT_URL 1003
#define OPT_CACERT 1004
#define CLI_COMMON_OPTS                                                                   \
	{ "json", no_argument, NULL, OPT_JSON }, { "config", required_argument, NULL, OPT_CONFIG }, \
	{ "url", required_argument, NULL, OPT_URL },                                      \
	{ "cacert", required_argument, NULL, OPT_CACERT }, { "help", no_argument, NULL, 'h' }
/* Returns 0 if handled, else prints a usage error for verb and returns EXIT_USAGE. */
int cli_common_opt(struct cli *cli, int opt, const char *verb);

/* --- client.c --- */

/* For verbs with only the common options and between want_min and want_max
 * (-1: any number) positional arguments, left at argv[optind...].
 * Returns 0 or an exit code. */
int cli_only_common(struct cli *cli, int argc, char **argv, const char *verb, int want_min,
		    int want_max);
/* Parse a whole decimal integer in [min, max]. */
bool cli_parse_int(const char *s, long long min, long long max, long long *out);
/* Print an object's top-level fields as "key: value" lines. */
void cli_print_fields(const json *o);

/* Resolve url and key from flags, env and the config file. Returns 0 or
 * EXIT_FAIL. */
int cli_load(struct cli *cli);
/* Print "airlock: <message> (<code>)" to stderr; returns EXIT_FAIL. */
int cli_fail(const char *code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print "airlock: <message>" and a hint to stderr; returns EXIT_USAGE. */
int cli_usage(const char *verb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print the error carried by a non-2xx answer; returns EXIT_AUTH for 401
 * and 403, else EXIT_FAIL. */
int cli_fail_resp(int status, const char *body, size_t len);

/* Header lines for a request: Authorization plus extra ("Name: v\r\n"...).
 * Caller owns. */
char *cli_headers(struct cli *cli, const char *extra);

/* One request with a complete answer. Returns 0 when the status is 2xx and
 * fills *out (caller frees with http_resp_free); otherwise prints the error
 * and returns its exit code (*out is freed): EXIT_UNREACHABLE, EXIT_AUTH or
 * EXIT_FAIL. content_type may be NULL. */
int cli_call(struct cli *cli, const char *method, const char *target,
	     const char *content_type, const void *body, size_t len, const char *extra_headers,
	     struct http_resp *out);
/* cli_call with a JSON body (or NULL) and a JSON answer. *out is set to the
 * parsed answer (caller frees; NULL for an empty body). With raw != NULL the
 * answer text is also returned (caller owns). Returns 0 or an exit code. */
int cli_call_json(struct cli *cli, const char *method, const char *target,
		  const char *json_body, const char *extra_headers, json **out, char **raw);

/* Streaming: on_line is called for each NDJSON line (without '\n') of a 2xx
 * answer; returning non-zero stops the request. Errors are printed. Returns
 * 0 when the stream ended, an exit code on error, or what on_line returned. */
typedef int (*cli_line_fn)(void *arg, char *line, size_t len);
int cli_stream_lines(struct cli *cli, const char *method, const char *target,
		     const char *json_body, cli_line_fn on_line, void *arg);
/* Streaming raw bytes of a 2xx answer to fd. Returns 0 or an exit code. */
int cli_stream_to_fd(struct cli *cli, const char *method, const char *target, int fd);

/* Percent-encode for a query value or path segment. Caller owns. */
char *cli_escape(const char *s);

/* After cli_call_json: on success print the answer's "id" (the whole JSON
 * with --json or when it has none). Frees resp; returns r. */
int cli_print_id(struct cli *cli, int r, json *resp, const char *raw);
/* Print a JSON text as the server sent it, plus a newline. */
void cli_print_raw(const char *text);
/* The --env K=V options as a JSON object's members (the last K=... wins). */
void cli_jw_env(struct jw *w, const char *const *env, size_t n_env);
/* Indented JSON for humans. */
void cli_print_pretty(const json *j, FILE *f);
/* Compact JSON text of a value; caller owns. */
char *cli_json_text(const json *j);
/* A field of an object as display text: strings as is, numbers, bools,
 * null/absent as "-", arrays and objects as compact JSON; "a.b" is field
 * b of field a. Caller owns. */
char *cli_field(const json *obj, const char *key);

/* A simple left-aligned table. */
struct table {
	size_t n_cols, n_rows;
	char **cells;    /* owned, row-major, header row first */
};
void table_init(struct table *t, size_t n_cols, const char *const *header);
/* Adds a row; takes ownership of the n_cols strings in cells (NULL = "-"). */
void table_add(struct table *t, char **cells);
void table_print(struct table *t, FILE *f);   /* and frees it */
void table_free(struct table *t);
/* GET target and print the array under `key`: the server's JSON with --json,
 * else a table of the named fields (head[i] over fields[i]). `what` names
 * the list in the error when the answer has none. Returns the exit code. */
int cli_list_table(struct cli *cli, const char *target, const char *key, const char *what,
		   size_t n_cols, const char *const *head, const char *const *fields);

/* --- progress.c: one line on stderr while a long call runs, only when
 * stderr is a terminal (and AIRLOCK_NO_PROGRESS is unset): a bar with the
 * percentage where a total is known, else a spinner; time so far, the
 * phase, the last note. One at a time; starting another ends the first.
 * end erases the line, done leaves it at 100%; cli_fail and cli_usage end
 * it before they print. --- */
void cli_progress_start(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cli_progress_note(const char *msg);
/* How far: done of total (0: not known) in unit ("bytes" is shown in MiB,
 * anything else as a count of it), in phase (may be NULL). A known total
 * makes the line a bar with the percentage. */
void cli_progress_set(uint64_t done, uint64_t total, const char *unit, const char *phase);
/* While the call runs, poll GET /v1/sandboxes/{id} and show its
 * "progress" when that is of op (suspend, restore, fork). */
void cli_progress_follow(struct cli *cli, const char *sandbox_id, const char *op);
/* The call succeeded: show it at 100% (of total, counted in unit, when
 * not 0, else of the last figure) and leave that line. */
void cli_progress_done(uint64_t total, const char *unit);
void cli_progress_end(void);

/* Verbs. */
int cmd_create(struct cli *cli, int argc, char **argv);
int cmd_ls(struct cli *cli, int argc, char **argv);
int cmd_top(struct cli *cli, int argc, char **argv);
int cmd_get(struct cli *cli, int argc, char **argv);
int cmd_rm(struct cli *cli, int argc, char **argv);
int cmd_pause(struct cli *cli, int argc, char **argv);
int cmd_suspend(struct cli *cli, int argc, char **argv);
int cmd_restore(struct cli *cli, int argc, char **argv);
int cmd_resume(struct cli *cli, int argc, char **argv);
int cmd_connect(struct cli *cli, int argc, char **argv);
int cmd_snapshot(struct cli *cli, int argc, char **argv);
int cmd_rollback(struct cli *cli, int argc, char **argv);
int cmd_fork(struct cli *cli, int argc, char **argv);
int cmd_exec(struct cli *cli, int argc, char **argv);
int cmd_ps(struct cli *cli, int argc, char **argv);
int cmd_logs(struct cli *cli, int argc, char **argv);
int cmd_console(struct cli *cli, int argc, char **argv);
int cmd_events(struct cli *cli, int argc, char **argv);
int cmd_port_forward(struct cli *cli, int argc, char **argv);
int cmd_desktop(struct cli *cli, int argc, char **argv);
int cmd_network(struct cli *cli, int argc, char **argv);
int cmd_credential(struct cli *cli, int argc, char **argv);
/* cmd-network.c: a --network / `network set` argument as JSON text (caller
 * owns): allow-all and deny-all as strings, else the JSON as given; NULL
 * when it is not JSON. */
char *cli_policy_json(const char *arg);
int cmd_kill(struct cli *cli, int argc, char **argv);
int cmd_files(struct cli *cli, int argc, char **argv);
int cmd_template(struct cli *cli, int argc, char **argv);
int cmd_tenant(struct cli *cli, int argc, char **argv);
int cmd_key(struct cli *cli, int argc, char **argv);
int cmd_health(struct cli *cli, int argc, char **argv);
int cmd_node(struct cli *cli, int argc, char **argv);
int cmd_doctor(struct cli *cli, int argc, char **argv);
int cmd_mcp(struct cli *cli, int argc, char **argv);
/* cmd-code.c: the code interpreter */
int cmd_run_code(struct cli *cli, int argc, char **argv);
int cmd_code_context(struct cli *cli, int argc, char **argv);

int cmd_help(struct cli *cli, int argc, char **argv);
int cmd_completion(struct cli *cli, int argc, char **argv);

/* The verb table (main.c): name, handler, and the subcommands it takes
 * (space-separated; NULL: none), which completion offers. */
struct cli_verb {
	const char *name;
	int (*fn)(struct cli *, int, char **);
	const char *subs;
};
extern const struct cli_verb cli_verbs[];
extern const size_t cli_n_verbs;
/* The whole usage text, as `airlock --help` prints it. */
const char *cli_usage_text(void);

/* The usage text (main.c). */
void cli_print_usage(FILE *f);
/* The lines of the usage text about one verb (its first word counts:
 * "snapshot create" prints every `snapshot` line). */
void cli_print_verb_usage(FILE *f, const char *verb);

#endif
