/* http-cookie.h - cookies a proxied service sets, and which names share a
 * site (and so share cookies).
 *
 * Host-routed port URLs ({port}-{id}.<ports_domain>) give every sandbox's
 * service a host of its own under one parent name. A browser lets any of
 * those hosts set a cookie for the parent (`Domain=<ports_domain>`), which
 * every sibling then receives: one tenant's page could fix or flood the
 * cookies of another's. The node therefore rewrites the Set-Cookie fields of
 * every proxied answer (src/node/ports.c) so that a service's cookies stay
 * on its own host name.
 */
#ifndef AIRLOCK_HTTP_COOKIE_H
#define AIRLOCK_HTTP_COOKIE_H

#include <stdbool.h>
#include <stddef.h>

#include "util.h"

/* A Set-Cookie value longer than this is dropped whole (browsers ignore a
 * cookie whose name and value pass 4096 bytes; attributes add at most a few
 * short ones), and an answer passes at most this many Set-Cookie fields. */
#define HTTP_SETCOOKIE_MAX 8192
#define HTTP_SETCOOKIE_MAX_COUNT 32

/* The cookie the api keeps a host-routed URL's port token in (src/api/
 * portfwd.c): the proxy's, never a service's to set. */
#define HTTP_PORT_TOKEN_COOKIE "airlock_port_token"

/* Rewrite one Set-Cookie field value v[0..n) (bytes from a sandbox; any
 * obs-fold already replaced by spaces) so that the cookie is host-only:
 * every `Domain` attribute, in any case and with any blanks around its name,
 * is removed, the rest is kept byte for byte. Appends the value to send to
 * out and returns true, or returns false (out unchanged) when the field
 * must be dropped whole:
 *   - longer than HTTP_SETCOOKIE_MAX;
 *   - with a control character other than HTAB (RFC 6265bis 5.6 has the
 *     browser ignore such a cookie; some truncate at CR/NUL instead, and a
 *     rewrite must never depend on which);
 *   - naming the cookie `reserved` (case-insensitively; NULL: none): a name
 *     the proxy in front of the service owns.
 * Fuzzed: tests/fuzz/fuzz-http-cookie.c. */
bool http_setcookie_rewrite(const char *v, size_t n, const char *reserved, struct buf *out);

/* Whether cookies of the host-routed port URLs can reach the API's own host
 * name, or each other beyond their own host: ports_domain must be a
 * registrable domain of its own. api_host: the API's host name as clients
 * reach it (advertise_url's host; an IP literal, "" or NULL checks only
 * ports_domain itself). Returns true when separate; false with a sentence
 * in why (cap bytes) when:
 *   - ports_domain is a single label (no registrable domain at all);
 *   - it equals api_host, or one is under the other;
 *   - they share a parent of two labels or more (same registrable domain
 *     unless that parent is a public suffix, which we cannot know without
 *     the Public Suffix List, so the sentence says so). */
bool http_site_separate(const char *ports_domain, const char *api_host, char *why, size_t cap);

/* The host of an http(s)://HOST[:PORT][/...] URL or a "HOST:PORT" listen
 * address into out (lowercase, brackets of an IPv6 literal kept); "" for
 * "unix:..." or what has no host. */
void http_url_host(const char *url, char *out, size_t cap);

#endif
