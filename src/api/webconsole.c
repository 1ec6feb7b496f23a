/* webconsole.c - the web console's static files: GET /console, /console/{path...}.
 *
 * The console is a client of this same API (docs/CONSOLE.md): a page and its
 * scripts, built into the binary from console/static. They are served without
 * a key because they hold no data; every call the page makes carries the key
 * the user typed (Authorization: Bearer). The headers make the page hard to
 * turn against its user:
 *   - Content-Security-Policy: scripts only from this origin (no inline script,
 *     no eval), fetch/XHR only to this origin, no plugins, no framing, forms
 *     post nowhere. Styles also allow inline ones: xterm.js writes <style>
 *     elements for its renderer (CSS cannot run script).
 *   - X-Content-Type-Options: nosniff, so a file is only ever what its type says.
 *   - index.html is never cached (a new binary's page replaces it at once);
 *     the other files are revalidated too: they have no content hash in
 *     their names, so a long cache would mix versions after an upgrade.
 *   - Referrer-Policy: no-referrer; X-Frame-Options: DENY for old browsers. */
#include <string.h>

#include "../lib/util.h"
#include "api-internal.h"

#define CSP "Content-Security-Policy: default-src 'none'; script-src 'self'; " \
	    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self'; " \
	    "connect-src 'self'; base-uri 'none'; form-action 'none'; " \
	    "frame-ancestors 'none'\r\n"
#define COMMON_HEADERS CSP \
	"X-Content-Type-Options: nosniff\r\n" \
	"Referrer-Policy: no-referrer\r\n" \
	"X-Frame-Options: DENY\r\n"

static const char *content_type_of(const char *path)
{
	static const struct { const char *ext, *type; } types[] = {
		{ ".html", "text/html; charset=utf-8" },
		{ ".js", "text/javascript; charset=utf-8" },
		{ ".mjs", "text/javascript; charset=utf-8" },
		{ ".css", "text/css; charset=utf-8" },
		{ ".svg", "image/svg+xml" },
		{ ".png", "image/png" },
		{ ".txt", "text/plain; charset=utf-8" },
	};
	const char *dot = strrchr(path, '.');

	for (size_t i = 0; dot && i < ARRAY_SIZE(types); i++)
		if (strcmp(dot, types[i].ext) == 0)
			return types[i].type;
	return "application/octet-stream";
}

static const struct airlock_asset *asset_find(const char *rel)
{
	for (size_t i = 0; i < airlock_console_assets_n; i++)
		if (strcmp(airlock_console_assets[i].path, rel) == 0)
			return &airlock_console_assets[i];
	return NULL;
}

void api_console_serve(struct http_req *req, struct http_conn *c)
{
	const char *p = req->path + strlen("/console");
	const struct airlock_asset *a;

	/* "/console" and "/console/" are the page; its links are absolute
	 * (/console/app.js), so both work. Everything else names a file. */
	if (*p == '/')
		p++;
	a = asset_find(*p ? p : "index.html");
	if (!a) {
		http_respond_error(c, 404, "not_found", "no such console file");
		return;
	}
	http_respond(c, 200, content_type_of(a->path), a->data, a->len,
		     strcmp(a->path, "index.html") == 0 ? COMMON_HEADERS "Cache-Control: no-store\r\n"
							: COMMON_HEADERS "Cache-Control: no-cache\r\n");
}
