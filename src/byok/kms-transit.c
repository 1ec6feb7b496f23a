/* kms-transit.c - the transit key provider: a key service spoken to in the
 * shape of HashiCorp Vault's Transit secrets engine (kms.h):
 *
 *   POST {url}/v1/transit/encrypt/{name}  {"plaintext":"<b64>"}
 *        -> {"data":{"ciphertext":"vault:vN:..."}}
 *   POST {url}/v1/transit/decrypt/{name}  {"ciphertext":"vault:vN:..."}
 *        -> {"data":{"plaintext":"<b64>"}}
 *   POST {url}/v1/transit/rewrap/{name}   {"ciphertext":"vault:vN:..."}
 *        -> {"data":{"ciphertext":"vault:vM:..."}}
 *
 * with the header X-Vault-Token, read from token_file at each call (so the
 * token can be replaced without a restart; it is never logged nor kept).
 * Each wait for an answer lasts at most transit_timeout_ms and a whole
 * answer twice that, of at most 64 KiB (the service is the tenant's and may
 * be hostile: it can delay a call, never hold a thread or fill memory); a
 * connect error, a timeout or a 5xx is retried three times with backoff
 * (100, 200, 400 ms). Connecting itself is not timed (the URL is the
 * admin's).
 *
 * The channel is authenticated before anything is sent (kms_conf_check,
 * again at each call: a row older than the rule is refused here): https
 * with the chain checked against ca_file or the system's CAs, the name
 * against the URL's host, and the pin when one is set (tls.h), TLS 1.2 or
 * later, with the client certificate when one is set; or a unix socket;
 * or plain http to loopback; or plain http elsewhere only when the
 * operator set insecure_http. A certificate that fails a check is not
 * retried (it would fail again) and its error names the check.
 *
 * A revocation is decided only from an answer in the service's own shape
 * over that channel: 403, or 400 whose errors say "disabled", "deleted" or
 * "not found", each with a JSON body {"errors":[strings]}: -EKEYREVOKED.
 * Any other failure (down, TLS refused, 5xx after the tries, another 4xx,
 * a 403 that is a proxy's HTML page, a bad answer): -ENOKEY (503
 * key_unavailable: asked again later, cached keys kept), never mistaken
 * for a revocation. */
#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../lib/http.h"
#include "../lib/json.h"
#include "../lib/tls.h"
#include "kms.h"

#define TRANSIT_TRIES 4
#define TOKEN_MAX 4096
#define TRANSIT_BODY_MAX (64u * 1024)

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int read_token(const struct kms_conf *c, struct buf *hdr, err_t *err)
{
	struct buf tok;
	int r;

	buf_init(&tok);
	if ((r = read_file(c->token_file, TOKEN_MAX, &tok)) < 0) {
		buf_free(&tok);
		/* a missing token is the key unavailable, not a missing resource */
		return err_set(err, ENOKEY, "key service token_file %s: %s", c->token_file,
			       strerror(-r));
	}
	while (tok.len && (tok.data[tok.len - 1] == '\n' || tok.data[tok.len - 1] == '\r' ||
			   tok.data[tok.len - 1] == ' '))
		tok.len--;
	for (size_t i = 0; i < tok.len; i++)
		if ((unsigned char)tok.data[i] < 0x21 || (unsigned char)tok.data[i] > 0x7e) {
			OPENSSL_cleanse(tok.data, tok.len);
			buf_free(&tok);
			return err_set(err, ENOKEY, "key service token_file %s: not one printable "
				       "token", c->token_file);
		}
	buf_adds(hdr, "X-Vault-Token: ");
	buf_add(hdr, tok.data, tok.len);
	buf_adds(hdr, "\r\nContent-Type: application/json\r\n");
	OPENSSL_cleanse(tok.data, tok.len);
	buf_free(&tok);
	return 0;
}

/* Is this answer the service refusing the key itself (disabled, deleted,
 * or the token no longer allowed)? Only in Vault's shape: a JSON object
 * whose "errors" is a non-empty array of strings. A page from something
 * in between (a proxy's 403, an HTML 400) is not a revocation. */
static bool revoked_answer(const struct http_resp *resp)
{
	json *j;
	const json *errs;
	bool shaped, said = false;
	err_t e = { 0 };

	if ((resp->status != 403 && resp->status != 400) || !resp->body.data)
		return false;
	if (!(j = json_parse(resp->body.data, resp->body.len, &e)))
		return false;
	errs = json_get(j, "errors");
	shaped = j->type == JSON_OBJ && errs && errs->type == JSON_ARR && errs->n > 0;
	for (size_t i = 0; shaped && i < errs->n; i++) {
		const char *m = errs->items[i]->str;
		if (errs->items[i]->type != JSON_STR) {
			shaped = false;
			break;
		}
		said = said || strstr(m, "disabled") || strstr(m, "deleted") ||
		       strstr(m, "not found");
	}
	json_free(j);
	return shaped && (resp->status == 403 || said);
}

/* The TLS context of an https url (NULL for the others): this tenant's
 * CA, pin and client certificate. */
static int transit_tls(struct kms *k, const struct kms_conf *c, struct tls_ctx **out,
		       err_t *err)
{
	uint8_t pin[32];
	struct tls_client_opts o = {
		.ca_file = c->ca_file[0] ? c->ca_file : NULL,
		.cert_file = c->client_cert[0] ? c->client_cert : NULL,
		.key_file = c->client_key[0] ? c->client_key : NULL,
		/* the relay of a service that never closes goes after this */
		.linger_ms = 2 * k->transit_timeout_ms,
	};

	*out = NULL;
	if (strncmp(c->url, "https://", 8) != 0)
		return 0;
	if (c->pin_sha256[0]) {
		for (int i = 0; i < 32; i++) {
			unsigned v;
			if (sscanf(c->pin_sha256 + 2 * i, "%2x", &v) != 1)
				return err_set(err, ENOKEY, "pin_sha256: not 64 hex digits");
			pin[i] = (uint8_t)v;
		}
		o.pin_sha256 = pin;
	}
	if (!(*out = tls_client_ctx_opts(&o, err))) {
		err_wrap(err, "key service %s", c->url);
		err->code = ENOKEY;   /* the key unavailable, not a bad request */
		return -ENOKEY;
	}
	return 0;
}

/* POST op with the JSON body; *field gets data.<field> (caller frees). */
static int transit_call(struct kms *k, const struct kms_conf *c, const char *op,
			const char *body, const char *field, char **out, err_t *err)
{
	_cleanup_free_ char *target = xasprintf("/v1/transit/%s/%s", op, c->key_name);
	struct tls_ctx *tls = NULL;
	struct http_resp resp;
	struct buf hdr;
	int r = 0, delay = 100;

	/* no token, no key leaves before the channel is one we may use */
	if (kms_conf_check(c, err) < 0) {
		err_wrap(err, "key service %s: not used", c->url);
		err->code = ENOKEY;
		return -ENOKEY;
	}
	if (transit_tls(k, c, &tls, err) < 0)
		return -ENOKEY;
	buf_init(&hdr);
	if ((r = read_token(c, &hdr, err)) < 0) {
		buf_free(&hdr);
		tls_ctx_free(tls);
		return r;
	}
	for (int attempt = 1;; attempt++) {
		err_t e = { 0 };
		memset(&resp, 0, sizeof(resp));
		/* the key service is the tenant's: bounded in time and size */
		r = http_request_bounded_tls(tls, c->url, "POST", target, hdr.data, body,
					     strlen(body), k->transit_timeout_ms,
					     2 * k->transit_timeout_ms, TRANSIT_BODY_MAX, &resp, &e);
		if (r >= 0 && resp.status < 500)
			break;
		/* an answer too large, or a certificate refused, is not
		 * retried: it would only come again */
		if (r == -EFBIG || r == -EPROTO) {
			r = err_set(err, ENOKEY, "key service %s: %s", c->url, e.msg);
			goto out;
		}
		if (attempt == TRANSIT_TRIES) {
			if (r < 0)
				r = err_set(err, ENOKEY, "key service %s: %s (%d tries)", c->url,
					    e.msg, attempt);
			else
				r = err_set(err, ENOKEY, "key service %s: %s answered %d (%d "
					    "tries)", c->url, op, resp.status, attempt);
			if (resp.status)
				http_resp_free(&resp);
			goto out;
		}
		if (r >= 0)
			http_resp_free(&resp);
		sleep_ms(delay);
		delay *= 2;
	}
	if (resp.status != 200) {
		if (revoked_answer(&resp))
			r = err_set(err, EKEYREVOKED, "key service refused key %s (%s answered %d: "
				    "disabled, deleted or not allowed)", c->key_name, op, resp.status);
		else
			r = err_set(err, ENOKEY, "key service: %s of key %s answered %d%s", op,
				    c->key_name, resp.status,
				    resp.status == 403 ? " (not in the service's shape: not taken "
							 "as a revocation)" : "");
	} else {
		json *j = json_parse(resp.body.data ? resp.body.data : "", resp.body.len, err);
		const char *v = j ? json_get_str(json_get(j, "data"), field) : NULL;
		if (!v)
			r = err_set(err, ENOKEY, "key service: %s answer has no data.%s", op, field);
		else
			*out = xstrdup(v);
		json_free(j);
	}
	if (resp.body.data)
		OPENSSL_cleanse(resp.body.data, resp.body.len);
	http_resp_free(&resp);
out:
	OPENSSL_cleanse(hdr.data, hdr.len);
	buf_free(&hdr);
	tls_ctx_free(tls);
	return r;
}

static char *body_with(const char *key, const char *val)
{
	struct buf b;
	struct jw w;

	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, key);
	jw_str(&w, val);
	jw_end(&w);
	return buf_steal(&b);
}

static void free_wiped(char *s)
{
	if (s) {
		OPENSSL_cleanse(s, strlen(s));
		free(s);
	}
}

static int transit_wrap(struct kms *k, const char *tenant, const struct kms_conf *c,
			const uint8_t dk[CRYPT_KEY_LEN], char **wrapped, err_t *err)
{
	char *b64 = base64_encode(dk, CRYPT_KEY_LEN);
	char *body = body_with("plaintext", b64);
	int r = transit_call(k, c, "encrypt", body, "ciphertext", wrapped, err);

	free_wiped(b64);
	free_wiped(body);
	if (r == 0 && strncmp(*wrapped, "vault:v", 7) != 0) {
		free(*wrapped);
		*wrapped = NULL;
		return err_set(err, ENOKEY, "key service: encrypt answered no vault:vN: ciphertext");
	}
	return r;
}

static int transit_unwrap(struct kms *k, const char *tenant, const struct kms_conf *c,
			  const char *wrapped, uint8_t dk[CRYPT_KEY_LEN], err_t *err)
{
	_cleanup_free_ char *body = body_with("ciphertext", wrapped);
	char *b64 = NULL;
	struct buf raw;
	int r = transit_call(k, c, "decrypt", body, "plaintext", &b64, err);

	if (r < 0)
		return r;
	buf_init(&raw);
	if (base64_decode(b64, strlen(b64), &raw) < 0 || raw.len != CRYPT_KEY_LEN)
		r = err_set(err, ENOKEY, "key service: decrypt answered no 32-byte key");
	else
		memcpy(dk, raw.data, CRYPT_KEY_LEN);
	if (raw.data)
		OPENSSL_cleanse(raw.data, raw.len);
	buf_free(&raw);
	free_wiped(b64);
	return r;
}

static int transit_rewrap(struct kms *k, const char *tenant, const struct kms_conf *c,
			  const char *wrapped, char **out, err_t *err)
{
	_cleanup_free_ char *body = body_with("ciphertext", wrapped);

	return transit_call(k, c, "rewrap", body, "ciphertext", out, err);
}

const struct kms_provider kms_transit = {
	.name = "transit",
	.wrap = transit_wrap,
	.unwrap = transit_unwrap,
	.rewrap = transit_rewrap,
};
