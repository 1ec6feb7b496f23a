/* gateway-internal.h - shared by the gateway's files. */
#ifndef AIRLOCK_GATEWAY_INTERNAL_H
#define AIRLOCK_GATEWAY_INTERNAL_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "gateway.h"
#include "../policy/policy.h"
#include "sniff.h"

#define GW_LOG_KEEP 1000          /* decisions kept per sandbox */
#define GW_SBX_BUCKETS 4096       /* sandbox index: by address and by id */
#define GW_MAX_HOSTS_IPS 8
#define FIRST_BYTE_MS 1000        /* server-speaks-first protocols wait this long */

struct gw_logent {
	int64_t at;                   /* wall ms */
	char proto[8];                /* "tcp", "tls", "http", "dns" */
	char host[SNIFF_HOST_MAX + 1];/* SNI / Host / DNS name, "" when none */
	uint32_t ip;                  /* host order; 0 = none */
	bool v6;                      /* the address is ip6, not ip */
	struct in6_addr ip6;
	uint16_t port;
	bool allow;
	char rule[96];
};

/* Bytes relayed for one sandbox (its id's, across policy changes): in =
 * to the sandbox, out = from it. Shared by the sandbox's entry and each of
 * its relayed connections (refs, atomic), so a connection that outlives a
 * DELETE still has somewhere to count. */
struct gw_bytes {
	int refs;
	uint64_t in, out;
};
struct gw_bytes *gw_bytes_new(void);
struct gw_bytes *gw_bytes_ref(struct gw_bytes *b);
void gw_bytes_unref(struct gw_bytes *b);

/* One sandbox the node told us about. Entries are replaced whole on PUT
 * and freed on DELETE under gw->lock (write); readers hold it for read
 * while they decide. The log has its own mutex. */
struct gw_sbx {
	struct gw_sbx *next_addr;     /* chains of gw->by_addr and gw->by_id */
	struct gw_sbx *next_id;
	char id[65];
	uint32_t addr;                /* host order */
	struct policy pol;
	pthread_mutex_t log_mu;
	struct gw_logent *log;        /* ring, grown up to GW_LOG_KEEP */
	size_t log_head, log_n, log_cap;
	struct gw_bytes *bytes;       /* never NULL */
};

struct gw_host {
	char *name;
	uint32_t ip;                  /* host order */
};

struct gw_cred;
struct mitm_loop;
struct resolver;

/* What a name resolves to (resolve.c): host-order IPv4 and IPv6
 * addresses, and the seconds the answer may still be kept. */
struct gw_addrs {
	uint32_t v4[GW_MAX_HOSTS_IPS];
	size_t n4;
	struct in6_addr v6[GW_MAX_HOSTS_IPS];
	size_t n6;
	uint32_t ttl;
};

/* A sandbox's DNS query waiting for its answer (dns.c, resolve.c). */
struct gw_udp_query {
	uint32_t src;                 /* host order */
	struct sockaddr_in peer;
	struct dns_query q;
	uint8_t query[512];
	size_t len;
};

/* Counters since the gateway started, added to atomically: what the
 * admin socket's GET /stats answers. The times are sums in microseconds:
 * from accept to a decided first read (sniff), from there to the
 * decision, and of every upstream connect (dial). */
struct gw_stats {
	uint64_t conns;               /* accepted from a known sandbox */
	uint64_t denied;              /* of those, refused */
	uint64_t over_limit;          /* reset at accept: the sandbox had max_conns */
	uint64_t dials, dial_fails;
	uint64_t sniff_us, decide_us, dial_us;
	uint64_t bytes_in, bytes_out; /* relayed to sandboxes, from them */
};

struct gw {
	const struct gateway_config *cfg;
	struct gw_cred *cred;         /* credential injection; NULL = none */
	pthread_rwlock_t lock;        /* the sandbox index */
	struct gw_sbx *by_addr[GW_SBX_BUCKETS];
	struct gw_sbx *by_id[GW_SBX_BUCKETS];
	struct policy_env env;
	struct cidr4 *allow_private;
	struct cidr6 *allow_private6;
	struct gw_host *hosts;
	size_t n_hosts;
	int proxy_fd, dns_fd;
	bool defer_accept;            /* TCP_DEFER_ACCEPT set on proxy_fd */
	int stopping;                 /* atomic */
	pthread_mutex_t local_mu;     /* the host's own addresses, refreshed */
	uint32_t *local;              /* sorted */
	size_t n_local;
	struct in6_addr *local6;      /* sorted (memcmp order) */
	size_t n_local6;
	uint64_t local_at;            /* now_ms() of the last read */
	int local_nl;                 /* netlink: address changes; -1 */
	bool local_dirty;             /* changed since the last read */
	struct gw_stats stats;
	struct relay_loop *relay;     /* carries connections once dialled */
	struct tls_loop *tls;         /* carries intercepted TLS once its request is upstream */
	struct mitm_loop *mitm;       /* sets intercepted TLS up, until then */
	int workers, workers_idle;    /* atomic: proxy.c's pool */
	/* Live connections per sandbox address (max_conns each, keyed by
	 * the address in host order): one sandbox can never take every
	 * worker (a connection before its hand-off) or every fd from the
	 * rest. */
	struct keycap *conns;
	struct resolver *res;         /* resolve.c */
};

static inline void gw_count(uint64_t *counter, uint64_t n)
{
	__atomic_add_fetch(counter, n, __ATOMIC_RELAXED);
}

/* gateway.c */
/* Under gw->lock (read): the sandbox with source address ip, or NULL. */
/* The sandbox at a source address, or of an id (gw->lock held): O(1), a
 * connection or a DNS query looks one up, and a node with a thousand
 * sandboxes registers them one by one. */
struct gw_sbx *gw_find_locked(struct gw *g, uint32_t ip);
struct gw_sbx *gw_find_id_locked(struct gw *g, const char *id);
/* Decide d for s (rdlock held by the caller), and log it. */
bool gw_decide_log(struct gw *g, struct gw_sbx *s, const char *proto, const struct dest *d);
/* Append one decision to s's log (caller holds gw->lock for read). */
void gw_log(struct gw_sbx *s, const char *proto, const struct dest *d, bool allow,
	    const char *rule);
/* The name gate (policy_name_gate) for the sandbox at source address src,
 * logged when it refuses d->host: 1 pass, 0 refused, -1 no such sandbox.
 * Takes gw->lock itself. A name refused here is never resolved, so the
 * host's resolver cannot carry a sandbox's data out (DNS and proxy alike). */
int gw_name_gate(struct gw *g, uint32_t src, const char *proto, const struct dest *d);

/* resolve.c: the gateway's own resolution (gateway_hosts, a TTL cache,
 * then c-ares on the loop of gw_dns_main). */
int gw_resolver_init(struct gw *g, err_t *err);
/* For a proxy worker: resolve name for the sandbox at src, waiting for
 * this connection only. 0 with *out filled (maybe empty), or -1 when the
 * sandbox has its cap of lookups waiting (logged as proto, refused). */
int gw_resolve(struct gw *g, uint32_t src, const char *proto, const char *name,
	       struct gw_addrs *out);
/* On the loop thread, for a sandbox's query: 0 answered from what is
 * known (*out), 1 answered later (gw_dns_answer), 2 a retransmission of a
 * waiting query (drop it), -1 over the sandbox's cap (logged). */
int gw_resolve_async(struct gw *g, struct gw_udp_query *uq, struct gw_addrs *out);

/* localaddr.c: the host's own IPv4 addresses (never a destination).
 * gw_local_init reads them and subscribes to their changes; gw_local_wait
 * (proxy.c's main thread, in its loop) waits up to ms for a change and
 * reads them again after one, at most once a second; gw_local_is is
 * policy_env's is_local: a search in the last list, never a wait for it. */
void gw_local_init(struct gw *g);
void gw_local_wait(struct gw *g, int ms);
bool gw_local_is(void *arg, uint32_t ip);
bool gw_local_is6(void *arg, const struct in6_addr *ip);

/* tcpbytes.c: the payload bytes a TCP socket received and sent (first
 * transmissions), from TCP_INFO; -1 when the kernel does not say. */
int gw_sock_bytes(int fd, uint64_t *received, uint64_t *sent);

/* proxy.c: accept loop (worker threads, then the relay loop). */
void *gw_proxy_main(void *arg);
/* resolve.c: the thread of the resolver's loop, which serves the DNS socket. */
void *gw_dns_main(void *arg);
/* dns.c, on that loop: read the sandboxes' queries; answer one with a. */
void gw_dns_readable(struct gw *g);
void gw_dns_answer(struct gw *g, const struct gw_udp_query *uq, const struct gw_addrs *a);

#endif
