/* kms-conf.c - a tenant's transit settings checked (kms.h kms_conf_check):
 * how the node may reach the tenant's key service, which the data keys and
 * the token travel to in clear inside each request; and the doctor's view
 * of the same (kms_doctor_checks). */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "../lib/ident.h"
#include "../lib/json.h"
#include "kms.h"

/* Is host (of a URL: a name, an IPv4 address, or an IPv6 one in brackets)
 * this machine's loopback? Only an address the kernel keeps on lo (or the
 * name the resolver maps to it) is: nothing there crosses a network. */
static bool host_is_loopback(const char *host, size_t n)
{
	char h[64];
	struct in_addr a4;

	if (n == 0 || n >= sizeof(h))
		return false;
	memcpy(h, host, n);
	h[n] = '\0';
	if (strcasecmp(h, "localhost") == 0 || strcmp(h, "[::1]") == 0)
		return true;
	return inet_pton(AF_INET, h, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127;
}

/* The host part of "scheme://host[:port]" (IPv6 in brackets kept). */
static void url_host(const char *hp, const char **host, size_t *n)
{
	const char *end = hp[0] == '[' ? strchr(hp, ']') : NULL;

	*host = hp;
	if (end)
		*n = (size_t)(end - hp) + 1;
	else
		*n = strcspn(hp, ":");
}

/* "host[:port]" with nothing else: a name or IPv4 address of
 * [A-Za-z0-9.-], or an IPv6 address in brackets, and a port of digits.
 * No userinfo ("127.0.0.1:80@elsewhere" names elsewhere to some parsers
 * while the loopback rule would read 127.0.0.1). */
static bool authority_ok(const char *a)
{
	size_t hn;

	if (a[0] == '[') {
		const char *end = strchr(a, ']');
		if (!end || strspn(a + 1, "0123456789abcdefABCDEF:.") != (size_t)(end - a - 1))
			return false;
		hn = (size_t)(end - a) + 1;
	} else {
		hn = strspn(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-");
	}
	if (hn == 0)
		return false;
	if (!a[hn])
		return true;
	return a[hn] == ':' && a[hn + 1] && strlen(a + hn + 1) <= 5 &&
	       strspn(a + hn + 1, "0123456789") == strlen(a + hn + 1);
}

static bool is_path(const char *p)
{
	return p[0] == '/';
}

const char *kms_transport(const struct kms_conf *c)
{
	const char *h;
	size_t n;

	if (strcmp(c->provider, "transit") != 0)
		return "";
	if (strncmp(c->url, "https://", 8) == 0)
		return "https";
	if (strncmp(c->url, "unix:", 5) == 0)
		return "unix";
	url_host(c->url + 7, &h, &n);
	return host_is_loopback(h, n) ? "http-loopback" : "http-insecure";
}

static int transit_tls_check(const struct kms_conf *c, bool https, err_t *err)
{
	static const char hexd[] = "0123456789abcdefABCDEF";

	if (!https && (c->ca_file[0] || c->pin_sha256[0] || c->client_cert[0] ||
		       c->client_key[0]))
		return err_set(err, EINVAL, "ca_file, pin_sha256, client_cert and client_key are "
			       "for an https:// url only");
	if (https && c->insecure_http)
		return err_set(err, EINVAL, "insecure_http: for an http:// url only (an https:// "
			       "one is always verified)");
	if ((c->ca_file[0] && !is_path(c->ca_file)) ||
	    (c->client_cert[0] && !is_path(c->client_cert)) ||
	    (c->client_key[0] && !is_path(c->client_key)))
		return err_set(err, EINVAL, "ca_file, client_cert, client_key: absolute paths");
	if (!c->client_cert[0] != !c->client_key[0])
		return err_set(err, EINVAL, "client_cert and client_key: both or neither");
	if (c->pin_sha256[0] && (strlen(c->pin_sha256) != 64 ||
				 strspn(c->pin_sha256, hexd) != 64))
		return err_set(err, EINVAL, "pin_sha256: the SHA-256 of the server's certificate "
			       "(DER), 64 hex digits");
	return 0;
}

int kms_conf_check(const struct kms_conf *c, err_t *err)
{
	if (strcmp(c->provider, "local") == 0) {
		if (!ident_key_ok(c->key_id, 64))
			return err_set(err, EINVAL, "key_id: 1-64 of [A-Za-z0-9._-], not starting "
				       "with a dot");
		return 0;
	}
	if (strcmp(c->provider, "transit") == 0) {
		const char *u = c->url, *h;
		bool https = strncmp(u, "https://", 8) == 0, http = strncmp(u, "http://", 7) == 0;
		size_t n;
		int r;

		if (!https && !http && strncmp(u, "unix:/", 6) != 0)
			return err_set(err, EINVAL, "url: https://host[:port] of the key service (or "
				       "unix:/path, or http:// to a loopback address)");
		if ((https || http) && !authority_ok(u + (https ? 8 : 7)))
			return err_set(err, EINVAL, "url: %s://host[:port], without a path",
				       https ? "https" : "http");
		if (http && !c->insecure_http) {
			url_host(u + 7, &h, &n);
			if (!host_is_loopback(h, n))
				return err_set(err, EINVAL, "url: plain http:// is only for a loopback "
					       "address (127.0.0.0/8, [::1], localhost): the data keys "
					       "and the token would cross the network in clear; use "
					       "https://, or set insecure_http");
		}
		if ((r = transit_tls_check(c, https, err)) < 0)
			return r;
		if (!ident_key_ok(c->key_name, 128))
			return err_set(err, EINVAL, "key_name: 1-128 of [A-Za-z0-9._-]");
		if (!is_path(c->token_file))
			return err_set(err, EINVAL, "token_file: an absolute path");
		return 0;
	}
	return err_set(err, EINVAL, "provider: `local` or `transit`");
}

static void doctor_check(struct jw *w, const char *status, const char *detail, const char *fix)
{
	jw_obj(w);
	jw_key(w, "name");
	jw_str(w, "kms");
	jw_key(w, "status");
	jw_str(w, status);
	jw_key(w, "detail");
	jw_str(w, detail);
	if (fix) {
		jw_key(w, "fix");
		jw_str(w, fix);
	}
	jw_end(w);
}

void kms_doctor_checks(struct kms *k, struct jw *w)
{
	struct db_rows rows;
	unsigned ok = 0, warned = 0;
	err_t err = { 0 };
	char detail[1200];

	if (db_query(k->db, &rows, &err, "SELECT tenant_id FROM tenant_encryption WHERE"
		     " provider='transit' ORDER BY tenant_id", NULL) < 0) {
		snprintf(detail, sizeof(detail), "cannot read the tenants' key settings: %.400s",
			 err.msg);
		doctor_check(w, "warn", detail, NULL);
		return;
	}
	for (int i = 0; i < rows.n_rows; i++) {
		const char *t = db_cell(&rows, i, 0);
		struct kms_conf c;
		err_t e = { 0 };

		if (kms_conf_get(k, t, &c, &e) < 0)
			continue;
		if (kms_conf_check(&c, &e) < 0) {
			snprintf(detail, sizeof(detail), "tenant %s: key service %s is not used "
				 "(unavailable): %.300s", t, c.url, e.msg);
			doctor_check(w, "warn", detail, "PUT /v1/tenants/{t}/encryption with an "
				     "https:// url (docs/API.md, Tenant encryption)");
			warned++;
		} else if (strcmp(kms_transport(&c), "http-insecure") == 0) {
			snprintf(detail, sizeof(detail), "tenant %s: key service %s over plain http "
				 "(insecure_http): its data keys and token cross the network in "
				 "clear, and a revocation is taken from an answer nothing "
				 "authenticates", t, c.url);
			doctor_check(w, "warn", detail, "use an https:// url (with ca_file or "
				     "pin_sha256) and drop insecure_http");
			warned++;
		} else {
			ok++;
		}
	}
	db_rows_free(&rows);
	if (!warned) {
		snprintf(detail, sizeof(detail), "tenants' transit key services: %u, each over "
			 "https, unix or loopback", ok);
		doctor_check(w, "ok", detail, NULL);
	}
}
