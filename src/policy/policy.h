/* policy.h - a sandbox's egress policy: parse it from the API's JSON and
 * decide one destination against it. Shared by the node (which validates
 * what a client sends) and the gateway (which enforces it).
 *
 * JSON form (docs/API.md), or the strings "allow-all" / "deny-all":
 *   {"default": "allow" | "deny",
 *    "allow": {"domains": ["api.example.com", "*.example.org"],
 *              "cidrs": ["203.0.113.0/24"], "ports": [443, 80]},
 *    "deny":  {"domains": [...], "cidrs": [...], "ports": [...]}}
 * Order of a decision (the first that matches wins):
 *   1. deny.domains / deny.cidrs / deny.ports          -> deny
 *   2. the sandbox network, the host's own addresses   -> deny (always)
 *   3. private, loopback, link-local and other special
 *      ranges not in the operator's allow list         -> deny
 *   4. allow.ports given and the port is not in it     -> deny
 *   5. default "allow"                                 -> allow
 *   6. allow.domains / allow.cidrs                     -> allow
 *   7. otherwise                                       -> deny
 * "*.example.org" matches every name below example.org, not example.org. */
#ifndef AIRLOCK_POLICY_H
#define AIRLOCK_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <netinet/in.h>

#include "../lib/json.h"

#define POLICY_MAX_ITEMS 256
#define POLICY_HOST_MAX 253      /* a DNS name in text form */

/* A host name we are willing to look up and log: 1..253 bytes of
 * [a-z0-9-_.], labels 1..63, no leading/trailing dot. Lower-cases in place. */
int policy_host_valid(char *h);

struct cidr4 {
	uint32_t net, mask;   /* host order */
};

struct rule_set {
	char **domains;       /* lower-case; "*.x" for wildcards */
	size_t n_domains;
	struct cidr4 *cidrs;
	size_t n_cidrs;
	uint16_t *ports;
	size_t n_ports;
};

struct policy {
	bool default_allow;
	struct rule_set allow, deny;
};

/* Parse v (the "network" value) into *p. Returns 0, or -1 with msg filled
 * (for a 400). NULL v gives the default policy (allow-all minus private). */
int policy_parse(const json *v, struct policy *p, char *msg, size_t msz);
void policy_free(struct policy *p);     /* accepts a zeroed policy */
/* Writes the canonical JSON of p (an object). */
void policy_write(struct jw *w, const struct policy *p);

/* An IPv6 range: the first len bits of net. */
struct cidr6 {
	uint8_t net[16];
	unsigned len;
};

/* Parse "a.b.c.d/n" (or a bare address = /32). */
int cidr4_parse(const char *s, struct cidr4 *c);
/* Parse a comma-separated CIDR list; -1 on a bad item. Caller frees *out. */
int cidr4_parse_list(const char *s, struct cidr4 **out, size_t *n);
/* Parse "x:y::z/n" (or a bare address = /128). */
int cidr6_parse(const char *s, struct cidr6 *c);
/* A comma-separated list of IPv4 and IPv6 CIDRs (network_allow_private_cidrs),
 * each to its own list; -1 on a bad item. Caller frees both. */
int cidr_parse_list(const char *s, struct cidr4 **v4, size_t *n4, struct cidr6 **v6,
		    size_t *n6);

/* What the gateway knows about the destination. host may be NULL (no SNI,
 * no Host, no DNS name); ip in host order; port 0 = not checked (DNS).
 * ip6 non-NULL: the destination is that IPv6 address (ip is then unused).
 * The policy's cidrs are IPv4: an IPv6 destination matches none of them,
 * so it is allowed by "default" allow or by allow.domains only, and the
 * special IPv6 ranges (loopback, ULA, link-local, mapped, NAT64, 6to4,
 * Teredo, documentation, multicast) are denied unless the operator lists
 * them. */
struct dest {
	const char *host;
	uint32_t ip;
	uint16_t port;
	const struct in6_addr *ip6;
};

/* Operator facts that no sandbox policy can override (step 2 and 3). */
struct policy_env {
	const struct cidr4 *allow_private;  /* operator's explicit allow list */
	size_t n_allow_private;
	struct cidr4 sandbox_net;           /* the sandbox address range */
	const struct cidr6 *allow_private6; /* its IPv6 entries */
	size_t n_allow_private6;
	/* true when ip is one of the host's own addresses (may be NULL) */
	bool (*is_local)(void *arg, uint32_t ip);
	bool (*is_local6)(void *arg, const struct in6_addr *ip);
	void *arg;
};

/* Decide; *rule (static text or a pointer into p, borrowed) says which step
 * matched, e.g. "deny.domains *.evil.test", "private", "default". */
bool policy_decide(const struct policy *p, const struct policy_env *env, const struct dest *d,
		   char *rule, size_t rcap);

/* Whether a destination named host could be allowed at all, decided on
 * the name alone (deny.domains; with default deny, allow.domains). The
 * gateway asks this before it resolves a name, so a sandbox that may not
 * reach a name cannot make the host's resolver look it up (a DNS
 * exfiltration channel). With default deny a name is reached only through
 * allow.domains; allow.cidrs open connections made to an IP. */
bool policy_name_gate(const struct policy *p, const char *host, char *rule, size_t rcap);

#endif
