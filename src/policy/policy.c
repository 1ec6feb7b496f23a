/* policy.c - egress policy parsing and decisions (see policy.h). */
#include "policy.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/util.h"

/* Ranges that are never the public internet: denied unless the operator
 * lists them in network_allow_private_cidrs. */
static const struct {
	const char *cidr;
	const char *why;
} special[] = {
	{ "0.0.0.0/8", "private" },      { "10.0.0.0/8", "private" },
	{ "100.64.0.0/10", "private" },  { "127.0.0.0/8", "loopback" },
	{ "169.254.0.0/16", "link-local" }, { "172.16.0.0/12", "private" },
	{ "192.0.0.0/24", "private" },   { "192.168.0.0/16", "private" },
	{ "198.18.0.0/15", "private" },  { "224.0.0.0/3", "multicast" },
};

int policy_host_valid(char *h)
{
	size_t n = strlen(h), label = 0;

	if (n && h[n - 1] == '.')
		h[--n] = '\0';
	if (n == 0 || n > POLICY_HOST_MAX || h[0] == '.')
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)tolower((unsigned char)h[i]);
		h[i] = (char)ch;
		if (ch == '.') {
			if (label == 0)
				return 0;
			label = 0;
			continue;
		}
		if (!(isalnum(ch) || ch == '-' || ch == '_') || ++label > 63)
			return 0;
	}
	return 1;
}

int cidr4_parse(const char *s, struct cidr4 *c)
{
	char ip[32];
	const char *slash = strchr(s, '/');
	size_t n = slash ? (size_t)(slash - s) : strlen(s);
	long bits = 32;
	struct in_addr a;

	if (n == 0 || n >= sizeof(ip))
		return -1;
	memcpy(ip, s, n);
	ip[n] = '\0';
	if (inet_pton(AF_INET, ip, &a) != 1)
		return -1;
	if (slash) {
		char *end;
		bits = strtol(slash + 1, &end, 10);
		if (end == slash + 1 || *end || bits < 0 || bits > 32)
			return -1;
	}
	c->mask = bits ? 0xffffffffu << (32 - bits) : 0;
	c->net = ntohl(a.s_addr) & c->mask;
	return 0;
}

int cidr4_parse_list(const char *s, struct cidr4 **out, size_t *n)
{
	_cleanup_free_ char *copy = xstrdup(s);
	char *save = NULL;

	*out = NULL;
	*n = 0;
	for (char *t = strtok_r(copy, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
		*out = xrealloc(*out, (*n + 1) * sizeof(**out));
		if (cidr4_parse(t, &(*out)[*n]) < 0) {
			free(*out);
			*out = NULL;
			*n = 0;
			return -1;
		}
		(*n)++;
	}
	return 0;
}

int cidr6_parse(const char *s, struct cidr6 *c)
{
	char addr[INET6_ADDRSTRLEN];
	const char *slash = strchr(s, '/');
	size_t n = slash ? (size_t)(slash - s) : strlen(s);
	char *end;
	long len = 128;

	if (n == 0 || n >= sizeof(addr))
		return -1;
	memcpy(addr, s, n);
	addr[n] = '\0';
	if (inet_pton(AF_INET6, addr, c->net) != 1)
		return -1;
	if (slash) {
		len = strtol(slash + 1, &end, 10);
		if (!slash[1] || *end || len < 0 || len > 128)
			return -1;
	}
	c->len = (unsigned)len;
	/* the host bits are cleared, as cidr4_parse does */
	for (unsigned i = c->len; i < 128; i++)
		c->net[i / 8] &= (uint8_t)~(0x80u >> (i % 8));
	return 0;
}

int cidr_parse_list(const char *s, struct cidr4 **v4, size_t *n4, struct cidr6 **v6,
		    size_t *n6)
{
	_cleanup_free_ char *copy = xstrdup(s);
	char *save = NULL;
	int r = 0;

	*v4 = NULL;
	*v6 = NULL;
	*n4 = *n6 = 0;
	for (char *t = strtok_r(copy, ", ", &save); t && r == 0; t = strtok_r(NULL, ", ", &save)) {
		if (strchr(t, ':')) {
			*v6 = xrealloc(*v6, (*n6 + 1) * sizeof(**v6));
			if ((r = cidr6_parse(t, &(*v6)[*n6])) == 0)
				(*n6)++;
		} else {
			*v4 = xrealloc(*v4, (*n4 + 1) * sizeof(**v4));
			if ((r = cidr4_parse(t, &(*v4)[*n4])) == 0)
				(*n4)++;
		}
	}
	if (r < 0) {
		free(*v4);
		free(*v6);
		*v4 = NULL;
		*v6 = NULL;
		*n4 = *n6 = 0;
	}
	return r;
}

static bool in_cidr6(const struct cidr6 *c, const struct in6_addr *ip)
{
	const uint8_t *a = ip->s6_addr;
	unsigned full = c->len / 8, rest = c->len % 8;

	if (memcmp(a, c->net, full))
		return false;
	return !rest || ((a[full] ^ c->net[full]) & (uint8_t)(0xff00u >> rest)) == 0;
}

static bool in_cidr(const struct cidr4 *c, uint32_t ip)
{
	return (ip & c->mask) == c->net;
}

static void rules_free(struct rule_set *r)
{
	for (size_t i = 0; i < r->n_domains; i++)
		free(r->domains[i]);
	free(r->domains);
	free(r->cidrs);
	free(r->ports);
	memset(r, 0, sizeof(*r));
}

void policy_free(struct policy *p)
{
	if (!p)
		return;
	rules_free(&p->allow);
	rules_free(&p->deny);
}

static int fail(char *msg, size_t msz, const char *fmt, const char *a)
{
	snprintf(msg, msz, fmt, a);
	return -1;
}

static int parse_rules(const json *v, const char *name, struct rule_set *r, char *msg,
		       size_t msz)
{
	static const char *const keys[] = { "domains", "cidrs", "ports", NULL };
	err_t err = { 0 };
	const json *a;

	if (v->type != JSON_OBJ)
		return fail(msg, msz, "`network.%s` must be an object", name);
	if (json_check_keys(v, keys, &err) < 0) {
		snprintf(msg, msz, "network.%s: %s", name, err.msg);
		return -1;
	}
	if ((a = json_get(v, "domains"))) {
		if (a->type != JSON_ARR || a->n > POLICY_MAX_ITEMS)
			return fail(msg, msz, "`network.%s.domains` must be an array of at most 256 names", name);
		r->domains = xcalloc(a->n ? a->n : 1, sizeof(char *));
		for (size_t i = 0; i < a->n; i++) {
			const json *d = a->items[i];
			char h[POLICY_HOST_MAX + 1];
			bool wild;
			if (d->type != JSON_STR || d->str_len > POLICY_HOST_MAX)
				return fail(msg, msz, "`network.%s.domains` holds a bad name", name);
			wild = d->str[0] == '*' && d->str[1] == '.';
			snprintf(h, sizeof(h), "%s", d->str + (wild ? 2 : 0));
			if (!policy_host_valid(h))
				return fail(msg, msz, "`network.%s.domains` holds a bad name", name);
			r->domains[r->n_domains++] = xasprintf("%s%s", wild ? "*." : "", h);
		}
	}
	if ((a = json_get(v, "cidrs"))) {
		if (a->type != JSON_ARR || a->n > POLICY_MAX_ITEMS)
			return fail(msg, msz, "`network.%s.cidrs` must be an array of at most 256 CIDRs", name);
		r->cidrs = xcalloc(a->n ? a->n : 1, sizeof(*r->cidrs));
		for (size_t i = 0; i < a->n; i++) {
			const json *d = a->items[i];
			if (d->type != JSON_STR || cidr4_parse(d->str, &r->cidrs[r->n_cidrs]) < 0)
				return fail(msg, msz, "`network.%s.cidrs` holds a bad IPv4 CIDR", name);
			r->n_cidrs++;
		}
	}
	if ((a = json_get(v, "ports"))) {
		if (a->type != JSON_ARR || a->n > POLICY_MAX_ITEMS)
			return fail(msg, msz, "`network.%s.ports` must be an array of at most 256 ports", name);
		r->ports = xcalloc(a->n ? a->n : 1, sizeof(*r->ports));
		for (size_t i = 0; i < a->n; i++) {
			const json *d = a->items[i];
			if (d->type != JSON_NUM || !d->is_int || d->i < 1 || d->i > 65535)
				return fail(msg, msz, "`network.%s.ports` holds a bad port", name);
			r->ports[r->n_ports++] = (uint16_t)d->i;
		}
	}
	return 0;
}

int policy_parse(const json *v, struct policy *p, char *msg, size_t msz)
{
	static const char *const keys[] = { "default", "allow", "deny", NULL };
	err_t err = { 0 };
	const json *d;

	memset(p, 0, sizeof(*p));
	p->default_allow = true;
	if (!v)
		return 0;
	if (v->type == JSON_STR) {
		if (!strcmp(v->str, "allow-all"))
			return 0;
		if (!strcmp(v->str, "deny-all")) {
			p->default_allow = false;
			return 0;
		}
		return fail(msg, msz, "`network` must be an object, \"allow-all\" or \"deny-all\"%s", "");
	}
	if (v->type != JSON_OBJ)
		return fail(msg, msz, "`network` must be an object, \"allow-all\" or \"deny-all\"%s", "");
	if (json_check_keys(v, keys, &err) < 0) {
		snprintf(msg, msz, "network: %s", err.msg);
		return -1;
	}
	if ((d = json_get(v, "default"))) {
		if (d->type != JSON_STR || (strcmp(d->str, "allow") && strcmp(d->str, "deny")))
			return fail(msg, msz, "`network.default` must be \"allow\" or \"deny\"%s", "");
		p->default_allow = !strcmp(d->str, "allow");
	} else {
		/* A policy that lists what it allows means "only that". */
		p->default_allow = json_get(v, "allow") == NULL;
	}
	if ((d = json_get(v, "allow")) && parse_rules(d, "allow", &p->allow, msg, msz) < 0)
		goto bad;
	if ((d = json_get(v, "deny")) && parse_rules(d, "deny", &p->deny, msg, msz) < 0)
		goto bad;
	return 0;
bad:
	policy_free(p);
	return -1;
}

static void write_rules(struct jw *w, const struct rule_set *r)
{
	char ip[INET_ADDRSTRLEN + 4];

	jw_obj(w);
	jw_key(w, "domains");
	jw_arr(w);
	for (size_t i = 0; i < r->n_domains; i++)
		jw_str(w, r->domains[i]);
	jw_end(w);
	jw_key(w, "cidrs");
	jw_arr(w);
	for (size_t i = 0; i < r->n_cidrs; i++) {
		struct in_addr a = { htonl(r->cidrs[i].net) };
		int bits = __builtin_popcount(r->cidrs[i].mask);
		inet_ntop(AF_INET, &a, ip, sizeof(ip));
		char *s = xasprintf("%s/%d", ip, bits);
		jw_str(w, s);
		free(s);
	}
	jw_end(w);
	jw_key(w, "ports");
	jw_arr(w);
	for (size_t i = 0; i < r->n_ports; i++)
		jw_uint(w, r->ports[i]);
	jw_end(w);
	jw_end(w);
}

void policy_write(struct jw *w, const struct policy *p)
{
	jw_obj(w);
	jw_key(w, "default");
	jw_str(w, p->default_allow ? "allow" : "deny");
	jw_key(w, "allow");
	write_rules(w, &p->allow);
	jw_key(w, "deny");
	write_rules(w, &p->deny);
	jw_end(w);
}

static const char *match_domain(const struct rule_set *r, const char *host)
{
	if (!host)
		return NULL;
	for (size_t i = 0; i < r->n_domains; i++)
		if (host_match(r->domains[i], host))
			return r->domains[i];
	return NULL;
}

static const struct cidr4 *match_cidr(const struct rule_set *r, uint32_t ip)
{
	for (size_t i = 0; i < r->n_cidrs; i++)
		if (in_cidr(&r->cidrs[i], ip))
			return &r->cidrs[i];
	return NULL;
}

static bool match_port(const struct rule_set *r, uint16_t port)
{
	for (size_t i = 0; i < r->n_ports; i++)
		if (r->ports[i] == port)
			return true;
	return false;
}

static void cidr_text(const struct cidr4 *c, char *out, size_t cap)
{
	struct in_addr a = { htonl(c->net) };
	char ip[INET_ADDRSTRLEN];

	inet_ntop(AF_INET, &a, ip, sizeof(ip));
	snprintf(out, cap, "%s/%d", ip, __builtin_popcount(c->mask));
}

/* IPv6 ranges that are never the public internet (or that carry an IPv4
 * address the IPv4 rules would have to judge): denied unless listed. */
static const struct {
	const char *cidr;
	const char *why;
} special6[] = {
	{ "::1/128", "loopback" },      { "::/8", "private" },         /* unspecified, mapped */
	{ "64:ff9b::/96", "private" },  { "64:ff9b:1::/48", "private" }, /* NAT64 */
	{ "100::/64", "private" },      { "2001::/23", "private" },    /* Teredo, benchmarking */
	{ "2001:db8::/32", "private" }, { "2002::/16", "private" },    /* documentation, 6to4 */
	{ "fc00::/7", "private" },      { "fe80::/10", "link-local" },
	{ "fec0::/10", "private" },     { "ff00::/8", "multicast" },
};

/* Step 2 and 3 for an IPv4 destination: the sandboxes and the host itself
 * are never destinations; special ranges only where the operator allowed
 * them. true: refused, *rule says why. */
static bool refused_ip4(const struct policy_env *env, uint32_t ip, char *rule, size_t rcap)
{
	if (env && (in_cidr(&env->sandbox_net, ip) || (env->is_local && env->is_local(env->arg, ip)))) {
		snprintf(rule, rcap, "host");
		return true;
	}
	for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++) {
		struct cidr4 sc;
		bool ok = false;
		cidr4_parse(special[i].cidr, &sc);
		if (!in_cidr(&sc, ip))
			continue;
		for (size_t k = 0; env && k < env->n_allow_private; k++)
			ok = ok || in_cidr(&env->allow_private[k], ip);
		if (!ok) {
			snprintf(rule, rcap, "%s", special[i].why);
			return true;
		}
		break;
	}
	return false;
}

/* The same for an IPv6 destination (no sandbox is on IPv6). */
static bool refused_ip6(const struct policy_env *env, const struct in6_addr *ip6, char *rule,
			size_t rcap)
{
	if (env && env->is_local6 && env->is_local6(env->arg, ip6)) {
		snprintf(rule, rcap, "host");
		return true;
	}
	for (size_t i = 0; i < sizeof(special6) / sizeof(special6[0]); i++) {
		struct cidr6 sc;
		bool ok = false;
		cidr6_parse(special6[i].cidr, &sc);
		if (!in_cidr6(&sc, ip6))
			continue;
		for (size_t k = 0; env && k < env->n_allow_private6; k++)
			ok = ok || in_cidr6(&env->allow_private6[k], ip6);
		if (!ok) {
			snprintf(rule, rcap, "%s", special6[i].why);
			return true;
		}
		break;
	}
	return false;
}

bool policy_decide(const struct policy *p, const struct policy_env *env, const struct dest *d,
		   char *rule, size_t rcap)
{
	const char *dom;
	const struct cidr4 *c;
	char ct[32];

	/* 1: deny wins (cidr rules are IPv4) */
	if ((dom = match_domain(&p->deny, d->host))) {
		snprintf(rule, rcap, "deny.domains %s", dom);
		return false;
	}
	if (!d->ip6 && (c = match_cidr(&p->deny, d->ip))) {
		cidr_text(c, ct, sizeof(ct));
		snprintf(rule, rcap, "deny.cidrs %s", ct);
		return false;
	}
	if (d->port && match_port(&p->deny, d->port)) {
		snprintf(rule, rcap, "deny.ports %u", d->port);
		return false;
	}
	/* 2, 3: the sandboxes, the host, special ranges */
	if (d->ip6 ? refused_ip6(env, d->ip6, rule, rcap) : refused_ip4(env, d->ip, rule, rcap))
		return false;
	/* 4 */
	if (d->port && p->allow.n_ports && !match_port(&p->allow, d->port)) {
		snprintf(rule, rcap, "allow.ports");
		return false;
	}
	/* 5, 6, 7 */
	if (p->default_allow) {
		snprintf(rule, rcap, "default");
		return true;
	}
	if ((dom = match_domain(&p->allow, d->host))) {
		snprintf(rule, rcap, "allow.domains %s", dom);
		return true;
	}
	if (!d->ip6 && (c = match_cidr(&p->allow, d->ip))) {
		cidr_text(c, ct, sizeof(ct));
		snprintf(rule, rcap, "allow.cidrs %s", ct);
		return true;
	}
	snprintf(rule, rcap, "default");
	return false;
}

bool policy_name_gate(const struct policy *p, const char *host, char *rule, size_t rcap)
{
	const char *dom;

	if ((dom = match_domain(&p->deny, host))) {
		snprintf(rule, rcap, "deny.domains %s", dom);
		return false;
	}
	if (!p->default_allow && !match_domain(&p->allow, host)) {
		snprintf(rule, rcap, "default");
		return false;
	}
	return true;
}
