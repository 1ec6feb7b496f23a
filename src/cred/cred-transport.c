/* A credential's schemes and ports: see cred.h.
 *
 * The sandbox chooses both: whether it speaks TLS (the gateway sees a
 * ClientHello or a plain request head) and which port it dials (the
 * gateway dials the credential's host on that same port). Before these
 * existed a credential went into plain HTTP on any port, readable by
 * anyone on the path to the host, and into any service of the host a
 * sandbox could reach (a debug port that echoes, an admin console). Now it
 * goes only where its owner said, https to 443 unless told otherwise. */
#include "cred-internal.h"

#include <errno.h>
#include <string.h>

#include "../lib/util.h"

/* Bit k of schemes is scheme_names[k], whose own port is scheme_ports[k]. */
static const char *const scheme_names[] = { "http", "https" };
static const uint16_t scheme_ports[] = { 80, 443 };
_Static_assert(CRED_SCHEME_HTTP == 1u << 0 && CRED_SCHEME_HTTPS == 1u << 1,
	       "scheme_names is indexed by the CRED_SCHEME_* bits");

/* schemes: absent or null = https only; else an array of distinct names
 * from scheme_names. ports: absent or null = the schemes' own ports; else
 * 1 to CRED_PORTS_MAX distinct integers 1..65535. Plain HTTP is never a
 * default: it has to be asked for by name. */
int cred_transport_parse(const json *schemes, const json *ports, struct cred_transport *t,
			 err_t *err)
{
	memset(t, 0, sizeof(*t));
	if (!schemes || schemes->type == JSON_NULL) {
		t->schemes = CRED_SCHEME_HTTPS;
	} else {
		if (schemes->type != JSON_ARR || schemes->n == 0 ||
		    schemes->n > ARRAY_SIZE(scheme_names))
			goto bad_schemes;
		for (size_t i = 0; i < schemes->n; i++) {
			size_t k;

			if (schemes->items[i]->type != JSON_STR)
				goto bad_schemes;
			for (k = 0; k < ARRAY_SIZE(scheme_names); k++)
				if (strcmp(schemes->items[i]->str, scheme_names[k]) == 0)
					break;
			if (k == ARRAY_SIZE(scheme_names) || (t->schemes & (1u << k)))
				goto bad_schemes;
			t->schemes |= 1u << k;
		}
	}
	if (!ports || ports->type == JSON_NULL) {
		for (size_t k = 0; k < ARRAY_SIZE(scheme_names); k++)
			if (t->schemes & (1u << k))
				t->ports[t->n_ports++] = scheme_ports[k];
		return 0;
	}
	if (ports->type != JSON_ARR || ports->n == 0 || ports->n > CRED_PORTS_MAX)
		goto bad_ports;
	for (size_t i = 0; i < ports->n; i++) {
		const json *p = ports->items[i];

		if (p->type != JSON_NUM || !p->is_int || p->i < 1 || p->i > 65535)
			goto bad_ports;
		for (size_t j = 0; j < t->n_ports; j++)
			if (t->ports[j] == p->i)
				goto bad_ports;
		t->ports[t->n_ports++] = (uint16_t)p->i;
	}
	return 0;
bad_schemes:
	memset(t, 0, sizeof(*t));
	return err_set(err, EINVAL, "field `schemes` must be an array of distinct values among "
			  "\"https\" and \"http\" (default [\"https\"]; plain HTTP only when "
			  "named)");
bad_ports:
	memset(t, 0, sizeof(*t));
	return err_set(err, EINVAL, "field `ports` must be an array of 1 to %d distinct port "
			  "numbers from 1 to 65535 (default: 443 for https, 80 for http)",
			  CRED_PORTS_MAX);
}

int cred_parse_transport(const json *body, struct cred_transport *t, err_t *err)
{
	return cred_transport_parse(json_get(body, "schemes"), json_get(body, "ports"), t, err);
}

bool cred_transport_ok(const struct cred_transport *t, unsigned scheme, int port)
{
	/* exactly one scheme asked about, and that one listed */
	if (!scheme || (scheme & (scheme - 1)) || !(t->schemes & scheme))
		return false;
	for (size_t i = 0; i < t->n_ports; i++)
		if (t->ports[i] == port)
			return true;
	return false;
}

void cred_transport_write(struct jw *w, const struct cred_transport *t, bool ports)
{
	jw_arr(w);
	if (ports) {
		for (size_t i = 0; i < t->n_ports; i++)
			jw_uint(w, t->ports[i]);
	} else {
		for (size_t k = 0; k < ARRAY_SIZE(scheme_names); k++)
			if (t->schemes & (1u << k))
				jw_str(w, scheme_names[k]);
	}
	jw_end(w);
}

char *cred_transport_text(const struct cred_transport *t, bool ports)
{
	struct buf b;
	struct jw w;

	buf_init(&b);
	jw_init(&w, &b);
	cred_transport_write(&w, t, ports);
	return buf_steal(&b);
}

/* The columns were written by cred_transport_text, or by migration 8's
 * defaults for rows from before it (["https"], [443]). Anything else in
 * them is skipped rather than guessed at: a credential whose columns hold
 * nothing usable goes into no request at all. */
void cred_transport_read(const char *schemes, const char *ports, struct cred_transport *t)
{
	json *s = schemes ? json_parse(schemes, strlen(schemes), NULL) : NULL;
	json *p = ports ? json_parse(ports, strlen(ports), NULL) : NULL;

	memset(t, 0, sizeof(*t));
	for (size_t i = 0; s && s->type == JSON_ARR && i < s->n; i++)
		for (size_t k = 0; k < ARRAY_SIZE(scheme_names); k++)
			if (s->items[i]->type == JSON_STR &&
			    strcmp(s->items[i]->str, scheme_names[k]) == 0)
				t->schemes |= 1u << k;
	for (size_t i = 0; p && p->type == JSON_ARR && i < p->n && t->n_ports < CRED_PORTS_MAX;
	     i++) {
		const json *v = p->items[i];
		if (v->type == JSON_NUM && v->is_int && v->i >= 1 && v->i <= 65535)
			t->ports[t->n_ports++] = (uint16_t)v->i;
	}
	json_free(s);
	json_free(p);
}
