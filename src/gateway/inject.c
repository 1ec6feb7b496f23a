/* Credential injection: request-head parsing and rewriting. */
#include "inject.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>
#include <strings.h>

#include "../lib/json.h"
#include "../cred/cred.h"

/* ---- the request head ------------------------------------------------- */

static bool tchar(char c)
{
	return isalnum((unsigned char)c) || strchr("!#$%&'*+-.^_`|~", c);
}

void head_free(struct http_head *h)
{
	free(h->method);
	free(h->target);
	free(h->version);
	for (size_t i = 0; i < h->n; i++) {
		free(h->f[i].name);
		free(h->f[i].value);
	}
	free(h->f);
	if (h->body.data)
		explicit_bzero(h->body.data, h->body.len);
	buf_free(&h->body);
	for (size_t i = 0; i < h->n_subst; i++) {
		explicit_bzero(h->subst[i].value, strlen(h->subst[i].value));
		free(h->subst[i].value);
		free(h->subst[i].ph);
	}
	free(h->subst);
	memset(h, 0, sizeof(*h));
}

/* ---- a streamed body's replacements ----------------------------------- */

void subst_init(struct subst_stream *s, const struct http_head *h)
{
	s->h = h;
	buf_init(&s->pend);
}

void subst_feed(struct subst_stream *s, const void *p, size_t n, bool final, struct buf *out)
{
	const struct http_head *h = s->h;
	size_t i = 0, from = 0;

	buf_add(&s->pend, p, n);
	while (i < s->pend.len) {
		const char *at = s->pend.data + i;
		size_t left = s->pend.len - i;
		bool partial = false;
		long match = -1;

		for (size_t k = 0; k < h->n_subst && match < 0; k++) {
			size_t pl = strlen(h->subst[k].ph);
			if (left >= pl && !memcmp(at, h->subst[k].ph, pl))
				match = (long)k;
			else if (left < pl && !memcmp(at, h->subst[k].ph, left))
				partial = true;
		}
		if (match >= 0) {
			const struct body_subst *b = &h->subst[match];
			buf_add(out, s->pend.data + from, i - from);
			buf_add(out, b->value, strlen(b->value));
			i += strlen(b->ph);
			from = i;
			continue;
		}
		/* the rest might begin a placeholder: it waits for more */
		if (partial && !final)
			break;
		i++;
	}
	buf_add(out, s->pend.data + from, i - from);
	if (i) {
		memmove(s->pend.data, s->pend.data + i, s->pend.len - i);
		s->pend.len -= i;
	}
}

void subst_free(struct subst_stream *s)
{
	if (s->pend.data)
		explicit_bzero(s->pend.data, s->pend.len);
	buf_free(&s->pend);
}

/* Room for one more field. */
static struct head_field *head_add(struct http_head *h)
{
	if (h->n == h->cap) {
		h->cap = h->cap ? h->cap * 2 : 16;
		h->f = xrealloc(h->f, h->cap * sizeof(*h->f));
	}
	return &h->f[h->n++];
}

/* One line of buf[0..len) ending in CRLF (a bare LF is refused: request
 * smuggling lives in such differences). Returns its length without CRLF, or
 * -1 when incomplete, -2 when malformed. */
static long line_end(const char *buf, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if (buf[i] == '\n')
			return -2;
		if (buf[i] == '\r') {
			if (i + 1 >= len)
				return -1;
			return buf[i + 1] == '\n' ? (long)i : -2;
		}
		if (buf[i] == '\0')
			return -2;
	}
	return -1;
}

long head_parse(const char *buf, size_t len, struct http_head *h)
{
	size_t pos = 0, lim = len < HEAD_MAX ? len : HEAD_MAX;
	const char *sp1, *sp2, *line;
	long n;

	memset(h, 0, sizeof(*h));
	n = line_end(buf, lim);
	if (n == -1)
		return len >= HEAD_MAX ? -E2BIG : 0;
	if (n < 0)
		return -EINVAL;
	line = buf;
	sp1 = memchr(line, ' ', (size_t)n);
	sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(line + n - sp1 - 1)) : NULL;
	if (!sp1 || !sp2 || sp1 == line || sp2 == sp1 + 1 || line + n - sp2 - 1 != 8 ||
	    strncmp(sp2 + 1, "HTTP/1.", 7) != 0 || (sp2[8] != '0' && sp2[8] != '1'))
		return -EINVAL;
	for (const char *p = line; p < sp1; p++)
		if (!tchar(*p))
			return -EINVAL;
	for (const char *p = sp1 + 1; p < sp2; p++)
		if ((unsigned char)*p <= 0x20 || *p == 0x7f)
			return -EINVAL;
	h->method = xstrndup(line, (size_t)(sp1 - line));
	h->target = xstrndup(sp1 + 1, (size_t)(sp2 - sp1 - 1));
	h->version = xstrndup(sp2 + 1, 8);
	pos = (size_t)n + 2;
	for (;;) {
		const char *colon, *v, *e;

		n = line_end(buf + pos, lim - pos);
		if (n == -1) {
			head_free(h);
			return len >= HEAD_MAX ? -E2BIG : 0;
		}
		if (n < 0)
			goto bad;
		if (n == 0)
			return (long)(pos + 2);
		line = buf + pos;
		if (h->n >= HEAD_MAX_FIELDS) {
			head_free(h);
			return -E2BIG;
		}
		colon = memchr(line, ':', (size_t)n);
		if (!colon || colon == line)
			goto bad;   /* also refuses obsolete line folding (leading space) */
		for (const char *p = line; p < colon; p++)
			if (!tchar(*p))
				goto bad;
		v = colon + 1;
		e = line + n;
		while (v < e && (*v == ' ' || *v == '\t'))
			v++;
		while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
			e--;
		for (const char *p = v; p < e; p++)
			if (((unsigned char)*p < 0x20 && *p != '\t') || *p == 0x7f)
				goto bad;
		struct head_field *f = head_add(h);
		f->name = xstrndup(line, (size_t)(colon - line));
		f->value = xstrndup(v, (size_t)(e - v));
		pos += (size_t)n + 2;
	}
bad:
	head_free(h);
	return -EINVAL;
}

void head_write(const struct http_head *h, struct buf *out)
{
	buf_printf(out, "%s %s %s\r\n", h->method, h->target, h->version);
	for (size_t i = 0; i < h->n; i++)
		buf_printf(out, "%s: %s\r\n", h->f[i].name, h->f[i].value);
	buf_adds(out, "\r\n");
}

const char *head_get(const struct http_head *h, const char *name)
{
	for (size_t i = 0; i < h->n; i++)
		if (strcasecmp(h->f[i].name, name) == 0)
			return h->f[i].value;
	return NULL;
}

void head_set(struct http_head *h, const char *name, const char *value)
{
	size_t j = 0;
	bool done = false;

	for (size_t i = 0; i < h->n; i++) {
		if (strcasecmp(h->f[i].name, name) == 0) {
			if (!done) {
				free(h->f[i].value);
				h->f[i].value = xstrdup(value);
				h->f[j++] = h->f[i];
				done = true;
			} else {
				free(h->f[i].name);
				free(h->f[i].value);
			}
			continue;
		}
		h->f[j++] = h->f[i];
	}
	h->n = j;
	if (!done) {
		struct head_field *f = head_add(h);
		f->name = xstrdup(name);
		f->value = xstrdup(value);
	}
}

void head_del(struct http_head *h, const char *name)
{
	size_t j = 0;

	for (size_t i = 0; i < h->n; i++) {
		if (strcasecmp(h->f[i].name, name) == 0) {
			free(h->f[i].name);
			free(h->f[i].value);
			continue;
		}
		h->f[j++] = h->f[i];
	}
	h->n = j;
}

/* ---- rate limits: a fixed one-minute window per (sandbox, credential) --- */

struct rl_slot {
	struct rl_slot *next;
	char *key;
	int64_t window;      /* minute number */
	uint32_t count;
};

struct inject_rl {
	pthread_mutex_t mu;
	struct rl_slot *slots;
	size_t n;
};

struct inject_rl *inject_rl_new(void)
{
	struct inject_rl *rl = xcalloc(1, sizeof(*rl));

	pthread_mutex_init(&rl->mu, NULL);
	return rl;
}

/* Count one use; false when past limit this minute. */
static bool rl_take(struct inject_rl *rl, const char *sandbox_id, const char *cred_id,
		    uint32_t limit, int64_t now_ms)
{
	_cleanup_free_ char *key = xasprintf("%s/%s", sandbox_id, cred_id);
	int64_t window = now_ms / 60000;
	struct rl_slot **pp, *s;
	bool ok;

	if (!limit)
		return true;
	pthread_mutex_lock(&rl->mu);
	/* Forget counters of past minutes, then find ours. */
	for (pp = &rl->slots; (s = *pp);) {
		if (s->window != window) {
			*pp = s->next;
			free(s->key);
			free(s);
			rl->n--;
		} else {
			pp = &s->next;
		}
	}
	for (s = rl->slots; s && strcmp(s->key, key) != 0; s = s->next)
		;
	if (!s) {
		s = xcalloc(1, sizeof(*s));
		s->key = TAKE_PTR(key);
		s->window = window;
		s->next = rl->slots;
		rl->slots = s;
		rl->n++;
	}
	ok = s->count < limit;
	if (ok)
		s->count++;
	pthread_mutex_unlock(&rl->mu);
	return ok;
}

/* ---- injection --------------------------------------------------------- */

/* Binary-safe: every from in b becomes to. The old bytes are wiped: they
 * may hold an earlier credential's value. */
static void buf_replace_all(struct buf *b, const char *from, const char *to)
{
	size_t fl = strlen(from);
	const char *p = b->data, *end = b->data + b->len, *hit;
	struct buf o;

	if (!b->len || !memmem(b->data, b->len, from, fl))
		return;
	buf_init(&o);
	while ((hit = memmem(p, (size_t)(end - p), from, fl))) {
		buf_add(&o, p, (size_t)(hit - p));
		buf_adds(&o, to);
		p = hit + fl;
	}
	buf_add(&o, p, (size_t)(end - p));
	explicit_bzero(b->data, b->len);
	buf_free(b);
	*b = o;
}

/* The same on a string of ours (a target or a field value): a buf whose
 * bytes are the string, its NUL the buf's own. */
static void str_replace_all(char **s, const char *from, const char *to)
{
	size_t n = strlen(*s);
	struct buf b = { .data = *s, .len = n, .cap = n + 1 };

	buf_replace_all(&b, from, to);
	*s = b.data;
}

static char *pct_encode(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	struct buf b;

	buf_init(&b);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (isalnum(c) || strchr("-._~", c)) {
			buf_addc(&b, (char)c);
		} else {
			buf_addc(&b, '%');
			buf_addc(&b, hex[c >> 4]);
			buf_addc(&b, hex[c & 15]);
		}
	}
	return buf_steal(&b);
}

static bool path_matches(const struct cred *c, const struct http_head *h)
{
	if (c->n_methods) {
		bool ok = false;
		for (size_t i = 0; i < c->n_methods && !ok; i++)
			ok = strcmp(c->methods[i], h->method) == 0;
		if (!ok)
			return false;
	}
	/* whole segments, dots resolved; an absolute-form target never matches */
	return !c->path_prefix || cred_path_match(c->path_prefix, h->target);
}

static bool cred_applies(const struct cred *c, const char *host, const struct http_head *h)
{
	bool host_ok = false;

	for (size_t i = 0; i < c->n_hosts && !host_ok; i++)
		host_ok = host_match(c->hosts[i], host);
	return host_ok && path_matches(c, h);
}

/* Is the media type (parameters after ';' aside) application/json or any
 * type ending in +json? */
static bool json_type(const char *ct)
{
	size_t n = strcspn(ct, ";");

	while (n && (ct[n - 1] == ' ' || ct[n - 1] == '\t'))
		n--;
	return (n == 16 && strncasecmp(ct, "application/json", 16) == 0) ||
	       (n > 5 && strncasecmp(ct + n - 5, "+json", 5) == 0);
}

/* value as the body spells it: percent-encoded in a form, with a JSON
 * string's escapes in JSON (the placeholder sits inside a string), else as
 * it is. Caller frees (and wipes: it is the value). */
static char *body_spelling(const struct http_head *h, const char *value)
{
	const char *ct = head_get(h, "Content-Type");

	if (ct && strncasecmp(ct, "application/x-www-form-urlencoded", 33) == 0 &&
	    (ct[33] == '\0' || ct[33] == ';' || ct[33] == ' '))
		return pct_encode(value);
	if (ct && json_type(ct)) {
		struct buf b;
		struct jw w;
		char *s;

		buf_init(&b);
		jw_init(&w, &b);
		jw_str(&w, value);
		s = xstrndup(b.data + 1, b.len - 2);   /* without the quotes */
		explicit_bzero(b.data, b.len);
		buf_free(&b);
		return s;
	}
	return xstrdup(value);
}

/* Replace ph by value where the credential's replace_in says (CRED_REPLACE_*):
 * in every header value, inside "Basic" credentials too; in the target; in
 * the body when it is here. Nowhere by default: each place is one an
 * upstream that echoes its request could hand the value back from. */
static void replace_placeholder(struct http_head *h, unsigned where, const char *ph,
				const char *value)
{
	_cleanup_free_ char *enc = pct_encode(value);

	if ((where & CRED_REPLACE_BODY) && h->has_body && h->body.len &&
	    memmem(h->body.data, h->body.len, ph, strlen(ph))) {
		char *b = body_spelling(h, value);
		buf_replace_all(&h->body, ph, b);
		explicit_bzero(b, strlen(b));
		free(b);
	}
	if ((where & CRED_REPLACE_BODY) && h->body_streams && strlen(ph)) {
		/* replaced as the body streams by (subst_feed) */
		h->subst = xrealloc(h->subst, (h->n_subst + 1) * sizeof(*h->subst));
		h->subst[h->n_subst].ph = xstrdup(ph);
		h->subst[h->n_subst].value = body_spelling(h, value);
		h->n_subst++;
	}

	if (where & CRED_REPLACE_TARGET)
		str_replace_all(&h->target, ph, enc);
	for (size_t i = 0; (where & CRED_REPLACE_HEADERS) && i < h->n; i++) {
		str_replace_all(&h->f[i].value, ph, value);
		if (strcasecmp(h->f[i].name, "Authorization") == 0 &&
		    strncasecmp(h->f[i].value, "Basic ", 6) == 0) {
			const char *b64 = h->f[i].value + 6;
			struct buf dec;

			buf_init(&dec);
			if (base64_decode(b64, strlen(b64), &dec) == 0 && dec.len &&
			    !memchr(dec.data, '\0', dec.len) && strstr(dec.data, ph)) {
				char *plain = buf_steal(&dec);
				_cleanup_free_ char *re = NULL;
				str_replace_all(&plain, ph, value);
				re = base64_encode(plain, strlen(plain));
				explicit_bzero(plain, strlen(plain));
				free(plain);
				free(h->f[i].value);
				h->f[i].value = xasprintf("Basic %s", re);
			}
			buf_free(&dec);
		}
	}
}

/* Put the credential in its own place: the header, basic auth or the query. */
static void set_own(struct http_head *h, const struct cred *c, const char *value)
{
	if (c->inject == CRED_HEADER) {
		_cleanup_free_ char *v = xstrdup(c->format);
		str_replace_all(&v, "{value}", value);
		head_set(h, c->header, v);
		explicit_bzero(v, strlen(v));
	} else if (c->inject == CRED_BASIC) {
		_cleanup_free_ char *up = xasprintf("%s:%s", c->username, value);
		_cleanup_free_ char *b64 = base64_encode(up, strlen(up));
		_cleanup_free_ char *v = xasprintf("Basic %s", b64);
		head_set(h, "Authorization", v);
		explicit_bzero(up, strlen(up));
	} else {
		/* drop any existing param of that name, then append ours */
		_cleanup_free_ char *enc = pct_encode(value);
		char *q = strchr(h->target, '?');
		struct buf b;
		size_t pl = strlen(c->param);

		buf_init(&b);
		buf_add(&b, h->target, q ? (size_t)(q - h->target) : strlen(h->target));
		buf_addc(&b, '?');
		if (q) {
			const char *p = q + 1;
			while (*p) {
				const char *amp = strchr(p, '&');
				size_t n = amp ? (size_t)(amp - p) : strlen(p);
				if (!(n >= pl && strncmp(p, c->param, pl) == 0 &&
				      (n == pl || p[pl] == '='))) {
					buf_add(&b, p, n);
					buf_addc(&b, '&');
				}
				p += n + (amp ? 1 : 0);
			}
		}
		buf_printf(&b, "%s=%s", c->param, enc);
		free(h->target);
		h->target = buf_steal(&b);
	}
}

/* path: the request's path as the client sent it (before any value went in). */
static void audit(struct inject_ctx *ctx, const struct inject_who *who, const char *cred_id,
		  const struct http_head *h, const char *path, const char *decision,
		  const char *detail)
{
	err_t err = { 0 };

	cred_audit(ctx->db, who->tenant, who->sandbox_id, cred_id, who->host, h->method, path,
		   decision, detail, &err);
}

/* A credential put into the request, and the sandbox's placeholder for it. */
struct put_in {
	char *ph, *cred_id;
};

/* Audit each placeholder left in the head or the body read (after
 * injection): whose it is and why it was not replaced. injected[0..n_inj)
 * are the placeholders of the credentials put into this request: one of
 * those left is in a place its replace_in does not name. */
static void audit_leftovers(struct inject_ctx *ctx, const struct inject_who *who,
			    const struct http_head *h, const char *path,
			    const struct put_in *injected, size_t n_inj)
{
	char *seen_ph[8];
	struct buf all;
	const char *p;
	int seen = 0;

	buf_init(&all);
	buf_adds(&all, h->target);
	for (size_t i = 0; i < h->n; i++) {
		buf_addc(&all, '\n');
		buf_adds(&all, h->f[i].value);
	}
	if (h->has_body) {
		buf_addc(&all, '\n');
		buf_add(&all, h->body.data, h->body.len);
	}
	const char *end = all.data + all.len;
	size_t pl = strlen(CRED_PLACEHOLDER_PREFIX);
	for (p = all.data; seen < 8 && (p = memmem(p, (size_t)(end - p), CRED_PLACEHOLDER_PREFIX, pl));) {
		size_t n = pl;
		_cleanup_free_ char *ph = NULL;
		struct db_rows rows;
		err_t err = { 0 };
		bool dup = false;

		while (p + n < end && isxdigit((unsigned char)p[n]))
			n++;
		ph = xstrndup(p, n);
		p += n;
		for (int i = 0; i < seen && !dup; i++)
			dup = strcmp(seen_ph[i], ph) == 0;
		if (dup)            /* one record per placeholder and request */
			continue;
		seen_ph[seen++] = xstrdup(ph);
		for (size_t i = 0; i < n_inj; i++) {
			if (strcmp(injected[i].ph, ph) != 0)
				continue;
			audit(ctx, who, injected[i].cred_id, h, path, "not_replaced",
			      "placeholder outside the places the credential's replace_in names");
			dup = true;
			break;
		}
		if (dup)
			continue;
		if (db_query(ctx->db, &rows, &err,
			     "SELECT p.sandbox_id, p.cred_id, c.revoked_at, c.expires_at"
			     " FROM credential_placeholders p JOIN credentials c ON c.id = p.cred_id"
			     " WHERE p.placeholder = ?", "s", ph) < 0)
			continue;
		if (rows.n_rows == 0) {
			audit(ctx, who, NULL, h, path, "exfiltration_attempt", "unknown placeholder");
		} else if (strcmp(db_cell(&rows, 0, 0), who->sandbox_id) != 0) {
			audit(ctx, who, db_cell(&rows, 0, 1), h, path, "exfiltration_attempt",
			      "another sandbox's placeholder");
		} else if (db_cell(&rows, 0, 2)) {
			audit(ctx, who, db_cell(&rows, 0, 1), h, path, "revoked", "not injected");
		} else if (db_cell_int(&rows, 0, 3) && db_cell_int(&rows, 0, 3) <= ctx->now_ms) {
			audit(ctx, who, db_cell(&rows, 0, 1), h, path, "expired", "not injected");
		} else {
			audit(ctx, who, db_cell(&rows, 0, 1), h, path, "exfiltration_attempt",
			      "placeholder sent to a host, path or method it is not bound to");
		}
		db_rows_free(&rows);
	}
	for (int i = 0; i < seen; i++)
		free(seen_ph[i]);
	buf_free(&all);
}

int cred_inject(struct inject_ctx *ctx, const struct inject_who *who, struct http_head *h,
		enum inject_verdict *verdict, int *n_injected, err_t *err)
{
	_cleanup_free_ char *path = xstrndup(h->target, strcspn(h->target, "?"));
	struct cred *creds = NULL;
	struct put_in kept[16];   /* placeholders of the credentials put in */
	size_t n = 0, n_kept = 0;
	int r;

	*verdict = INJECT_FORWARD;
	*n_injected = 0;
	r = cred_resolve(ctx->db, who->tenant, who->sandbox_id, who->project, &creds, &n, err);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		struct cred *c = &creds[i];
		_cleanup_free_ char *ref = NULL, *ph = NULL;
		struct buf secret;

		if (c->expires_at && c->expires_at <= ctx->now_ms)
			continue;   /* cred_resolve used the real clock; tests move it */
		if (!cred_applies(c, who->host, h))
			continue;
		if (!rl_take(ctx->rl, who->sandbox_id, c->id, c->rate_per_min, ctx->now_ms)) {
			audit(ctx, who, c->id, h, path, "rate_limited", NULL);
			*verdict = INJECT_RATE_LIMITED;
			break;
		}
		ref = cred_ref(c->id, c->version);
		buf_init(&secret);
		r = vault_get(ctx->vault, ref, &secret, err);
		if (r < 0) {
			buf_free(&secret);
			audit(ctx, who, c->id, h, path, "error", "secret unavailable");
			continue;
		}
		ph = cred_placeholder(ctx->db, who->sandbox_id, c->id, err);
		if (ph)
			replace_placeholder(h, c->replace_in, ph, secret.data);
		if (ph && n_kept < ARRAY_SIZE(kept))
			kept[n_kept++] = (struct put_in){ xstrdup(ph), xstrdup(c->id) };
		set_own(h, c, secret.data);
		explicit_bzero(secret.data, secret.len);
		buf_free(&secret);
		audit(ctx, who, c->id, h, path, "injected", NULL);
		(*n_injected)++;
	}
	cred_list_free(creds, n);
	if (*verdict == INJECT_FORWARD)
		audit_leftovers(ctx, who, h, path, kept, n_kept);
	for (size_t i = 0; i < n_kept; i++) {
		free(kept[i].ph);
		free(kept[i].cred_id);
	}
	return 0;
}
