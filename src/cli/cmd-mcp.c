/* cmd-mcp.c - `airlock mcp`: a Model Context Protocol server on stdio.
 *
 * An MCP client (an agent's host, e.g. a desktop assistant) starts
 * `airlock mcp` and writes JSON-RPC messages to its stdin, one a line; the
 * answers go to stdout, one a line, and nothing else does: logs go to
 * stderr. The protocol lives in mcp.c; this file gives it the CLI's config
 * (url and key as for every verb, but the key must be one it was given:
 * see cmd_mcp) and HTTP client, and the stdio loop.
 * Requests are answered one at a time, in order.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>

#include "airlock-version.h"   /* generated: <build>/gen */
#include "cli.h"
#include "mcp.h"

static int do_request(void *arg, const char *method, const char *target, const char *content_type,
		      const void *body, size_t len, struct http_resp *out, err_t *err)
{
	struct cli *cli = arg;
	_cleanup_free_ char *ct = content_type ? xasprintf("Content-Type: %s\r\n", content_type) : NULL;
	_cleanup_free_ char *hdr = cli_headers(cli, ct);

	return http_request(cli->url, method, target, hdr, body, len, out, err) < 0 ? -1 : 0;
}

static int do_stream(void *arg, const char *method, const char *target, const char *json_body,
		     const struct http_stream_cbs *cbs, void *cbarg, err_t *err)
{
	struct cli *cli = arg;
	_cleanup_free_ char *hdr =
		cli_headers(cli, json_body ? "Content-Type: application/json\r\n" : NULL);

	return http_request_stream(cli->url, method, target, hdr, json_body,
				   json_body ? strlen(json_body) : 0, cbs, cbarg, err);
}

struct out {
	bool broken;   /* stdout is gone: the client left */
};

static void emit(void *arg, const char *msg, size_t len)
{
	struct out *o = arg;

	if (o->broken)
		return;
	if (fwrite(msg, 1, len, stdout) != len || fputc('\n', stdout) == EOF || fflush(stdout) != 0)
		o->broken = true;
}

int cmd_mcp(struct cli *cli, int argc, char **argv)
{
	const struct mcp_transport t = { .request = do_request, .stream = do_stream, .arg = cli };
	struct mcp_server s;
	struct out o = { 0 };
	char chunk[65536];
	int r;

	if ((r = cli_only_common(cli, argc, argv, "mcp", 0, 0)))
		return r;
	if ((r = cli_load(cli)))
		return r;
	/* The agent acts with this key's rights. Other verbs fall back on the
	 * file `up` writes for root's CLI, which holds the admin key: an agent
	 * host started as root with no config of its own would quietly get
	 * every tenant's sandboxes. So that file counts only when named
	 * (--config, AIRLOCK_CONFIG), and with no key at all we refuse too
	 * rather than serve tools that can only answer 401. */
	if (!cli->key || cli->key_from_default) {
		if (cli->key)
			cli_fail("key_required", "airlock mcp does not use the admin key of %s "
				 "unless a config names that file", CLI_DEFAULT_CONFIG);
		else
			cli_fail("key_required", "airlock mcp needs an API key; none was found");
		fputs("airlock: give the agent a key of its own (it acts with the key's rights): "
		      "AIRLOCK_API_KEY, or a config with \"api_key\" (--config FILE, "
		      "AIRLOCK_CONFIG or ~/.config/airlock/config.json); "
		      "`airlock key create --tenant T` makes one\n",
		      stderr);
		return EXIT_FAIL;
	}
	/* a client that closes our stdout ends us through a write error, not
	 * a signal */
	signal(SIGPIPE, SIG_IGN);
	fprintf(stderr, "airlock mcp: serving %s on stdio (MCP %s)\n", cli->url,
		MCP_PROTOCOL_VERSION);
	mcp_init(&s, AIRLOCK_VERSION, &t, stderr);
	while (!o.broken) {
		ssize_t n = read(0, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			mcp_free(&s);
			return cli_fail("io", "cannot read stdin: %s", strerror(errno));
		}
		if (n == 0) {
			mcp_finish(&s, emit, &o);
			break;
		}
		mcp_feed(&s, chunk, (size_t)n, emit, &o);
	}
	mcp_free(&s);
	return 0;
}
