/* gateway.c - the gateway's sandbox table, its admin socket and its main
 * loop. See gateway.h for the model and proxy.c / dns.c for the data paths. */
#include "gateway-internal.h"
#include "gw-cred.h"
#include "mitmloop.h"
#include "tlsrelay.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../lib/http.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/keycap.h"
#include "../lib/peer.h"
#include "../lib/relay.h"
#include "../lib/util.h"

/* ---- table and decisions ---------------------------------------------- */

static unsigned addr_bucket(uint32_t ip)
{
	return (ip * 2654435761u) >> 20;   /* the top 12 bits: GW_SBX_BUCKETS */
}

static unsigned id_bucket(const char *id)
{
	uint32_t h = 2166136261u;          /* FNV-1a */
	for (; *id; id++)
		h = (h ^ (uint8_t)*id) * 16777619u;
	return h % GW_SBX_BUCKETS;
}

struct gw_sbx *gw_find_locked(struct gw *g, uint32_t ip)
{
	for (struct gw_sbx *s = g->by_addr[addr_bucket(ip)]; s; s = s->next_addr)
		if (s->addr == ip)
			return s;
	return NULL;
}

struct gw_sbx *gw_find_id_locked(struct gw *g, const char *id)
{
	for (struct gw_sbx *s = g->by_id[id_bucket(id)]; s; s = s->next_id)
		if (strcmp(s->id, id) == 0)
			return s;
	return NULL;
}

static void sbx_link_locked(struct gw *g, struct gw_sbx *s)
{
	struct gw_sbx **a = &g->by_addr[addr_bucket(s->addr)], **i = &g->by_id[id_bucket(s->id)];

	s->next_addr = *a;
	*a = s;
	s->next_id = *i;
	*i = s;
}

static void sbx_unlink_locked(struct gw *g, struct gw_sbx *s)
{
	struct gw_sbx **pp;

	for (pp = &g->by_addr[addr_bucket(s->addr)]; *pp; pp = &(*pp)->next_addr)
		if (*pp == s) {
			*pp = s->next_addr;
			break;
		}
	for (pp = &g->by_id[id_bucket(s->id)]; *pp; pp = &(*pp)->next_id)
		if (*pp == s) {
			*pp = s->next_id;
			break;
		}
}

struct gw_bytes *gw_bytes_new(void)
{
	struct gw_bytes *b = xcalloc(1, sizeof(*b));
	b->refs = 1;
	return b;
}

struct gw_bytes *gw_bytes_ref(struct gw_bytes *b)
{
	__atomic_add_fetch(&b->refs, 1, __ATOMIC_RELAXED);
	return b;
}

void gw_bytes_unref(struct gw_bytes *b)
{
	if (b && __atomic_sub_fetch(&b->refs, 1, __ATOMIC_ACQ_REL) == 0)
		free(b);
}

/* An entry for sandbox id at ip, its policy still to be parsed. */
static struct gw_sbx *sbx_new(const char *id, uint32_t ip)
{
	struct gw_sbx *s = xcalloc(1, sizeof(*s));

	snprintf(s->id, sizeof(s->id), "%s", id);
	s->addr = ip;
	s->bytes = gw_bytes_new();
	pthread_mutex_init(&s->log_mu, NULL);
	return s;
}

static void sbx_free(struct gw_sbx *s)
{
	if (!s)
		return;
	gw_bytes_unref(s->bytes);
	policy_free(&s->pol);
	pthread_mutex_destroy(&s->log_mu);
	free(s->log);
	free(s);
}

bool gw_decide_log(struct gw *g, struct gw_sbx *s, const char *proto, const struct dest *d)
{
	char rule[96];
	bool allow = policy_decide(&s->pol, &g->env, d, rule, sizeof(rule));

	gw_log(s, proto, d, allow, rule);
	return allow;
}

void gw_log(struct gw_sbx *s, const char *proto, const struct dest *d, bool allow,
	    const char *rule)
{
	struct gw_logent *e;

	pthread_mutex_lock(&s->log_mu);
	/* Grow until GW_LOG_KEEP (the ring only wraps at full size, so the
	 * head is still 0 while it grows): a quiet sandbox costs little. */
	if (s->log_n == s->log_cap && s->log_cap < GW_LOG_KEEP) {
		s->log_cap = s->log_cap ? s->log_cap * 2 : 16;
		if (s->log_cap > GW_LOG_KEEP)
			s->log_cap = GW_LOG_KEEP;
		s->log = xrealloc(s->log, s->log_cap * sizeof(*s->log));
	}
	e = &s->log[(s->log_head + s->log_n) % GW_LOG_KEEP];
	if (s->log_n == GW_LOG_KEEP)
		s->log_head = (s->log_head + 1) % GW_LOG_KEEP;
	else
		s->log_n++;
	memset(e, 0, sizeof(*e));
	e->at = wall_ms();
	snprintf(e->proto, sizeof(e->proto), "%s", proto);
	snprintf(e->host, sizeof(e->host), "%s", d->host ? d->host : "");
	e->ip = d->ip6 ? 0 : d->ip;
	e->v6 = d->ip6 != NULL;
	if (d->ip6)
		e->ip6 = *d->ip6;
	e->port = d->port;
	e->allow = allow;
	snprintf(e->rule, sizeof(e->rule), "%s", rule);
	pthread_mutex_unlock(&s->log_mu);
	{
		struct in_addr a = { htonl(d->ip) };
		char ip[INET6_ADDRSTRLEN];
		if (d->ip6)
			inet_ntop(AF_INET6, d->ip6, ip, sizeof(ip));
		else
			inet_ntop(AF_INET, &a, ip, sizeof(ip));
		log_debug("%s %s %s %s:%u %s (%s)", s->id, proto, d->host ? d->host : "-", ip,
			  d->port, allow ? "allow" : "deny", rule);
	}
}

int gw_name_gate(struct gw *g, uint32_t src, const char *proto, const struct dest *d)
{
	struct gw_sbx *s;
	char rule[96];
	int pass = -1;

	pthread_rwlock_rdlock(&g->lock);
	if ((s = gw_find_locked(g, src))) {
		pass = policy_name_gate(&s->pol, d->host, rule, sizeof(rule));
		if (!pass)
			gw_log(s, proto, d, false, rule);
	}
	pthread_rwlock_unlock(&g->lock);
	return pass;
}

/* ---- admin socket (the node) ------------------------------------------ */

static int parse_addr(const char *s, uint32_t *ip)
{
	struct in_addr a;

	if (!s || inet_pton(AF_INET, s, &a) != 1)
		return -1;
	*ip = ntohl(a.s_addr);
	return 0;
}

static void handle_put(struct gw *g, const char *id, struct http_req *req, struct http_conn *c)
{
	static const char *const keys[] = { "addr", "network", NULL };
	err_t err = { 0 };
	char msg[256];
	json *body = json_parse(req->body, req->body_len, &err);
	struct gw_sbx *s, *old, *stale;
	uint32_t ip;

	if (!body || body->type != JSON_OBJ || json_check_keys(body, keys, &err) < 0 ||
	    parse_addr(json_get_str(body, "addr"), &ip) < 0) {
		http_respond_error(c, 400, "bad_request", "want {\"addr\", \"network\"}");
		json_free(body);
		return;
	}
	s = sbx_new(id, ip);
	if (policy_parse(json_get(body, "network"), &s->pol, msg, sizeof(msg)) < 0) {
		http_respond_error(c, 400, "invalid_field", "%s", msg);
		sbx_free(s);
		json_free(body);
		return;
	}
	json_free(body);
	/* Replace the entry of this id (a policy change keeps its log) and
	 * any stale entry that still holds this address. */
	pthread_rwlock_wrlock(&g->lock);
	if ((old = gw_find_id_locked(g, id)))
		sbx_unlink_locked(g, old);
	if ((stale = gw_find_locked(g, ip))) {
		sbx_unlink_locked(g, stale);
		sbx_free(stale);
	}
	if (old) {
		/* the same sandbox: its byte counts go on */
		gw_bytes_unref(s->bytes);
		s->bytes = old->bytes;
		old->bytes = NULL;
		pthread_mutex_lock(&old->log_mu);
		free(s->log);
		s->log = old->log;
		s->log_head = old->log_head;
		s->log_n = old->log_n;
		s->log_cap = old->log_cap;
		old->log = NULL;
		pthread_mutex_unlock(&old->log_mu);
		sbx_free(old);
	}
	sbx_link_locked(g, s);
	pthread_rwlock_unlock(&g->lock);
	http_respond(c, 204, NULL, NULL, 0, NULL);
}

static void handle_delete(struct gw *g, const char *id, struct http_conn *c)
{
	struct gw_sbx *gone;

	pthread_rwlock_wrlock(&g->lock);
	if ((gone = gw_find_id_locked(g, id)))
		sbx_unlink_locked(g, gone);
	pthread_rwlock_unlock(&g->lock);
	sbx_free(gone);
	http_respond(c, 204, NULL, NULL, 0, NULL);
}

static void handle_log(struct gw *g, const char *id, struct http_conn *c)
{
	struct buf b;
	struct jw w;
	struct gw_sbx *s;

	buf_init(&b);
	jw_init(&w, &b);
	pthread_rwlock_rdlock(&g->lock);
	s = gw_find_id_locked(g, id);
	if (!s) {
		pthread_rwlock_unlock(&g->lock);
		http_respond_error(c, 404, "not_found", "no sandbox `%s` at the gateway", id);
		buf_free(&b);
		return;
	}
	jw_obj(&w);
	jw_key(&w, "entries");
	jw_arr(&w);
	pthread_mutex_lock(&s->log_mu);
	for (size_t i = 0; i < s->log_n; i++) {
		const struct gw_logent *e = &s->log[(s->log_head + i) % GW_LOG_KEEP];
		struct in_addr a = { htonl(e->ip) };
		char ip[INET6_ADDRSTRLEN];
		if (e->v6)
			inet_ntop(AF_INET6, &e->ip6, ip, sizeof(ip));
		else
			inet_ntop(AF_INET, &a, ip, sizeof(ip));
		jw_obj(&w);
		jw_key(&w, "time_ms");
		jw_int(&w, e->at);
		jw_key(&w, "proto");
		jw_str(&w, e->proto);
		jw_key(&w, "host");
		jw_str(&w, e->host[0] ? e->host : NULL);
		jw_key(&w, "ip");
		jw_str(&w, e->ip || e->v6 ? ip : NULL);
		jw_key(&w, "port");
		jw_uint(&w, e->port);
		jw_key(&w, "decision");
		jw_str(&w, e->allow ? "allow" : "deny");
		jw_key(&w, "rule");
		jw_str(&w, e->rule);
		jw_end(&w);
	}
	pthread_mutex_unlock(&s->log_mu);
	pthread_rwlock_unlock(&g->lock);
	jw_end(&w);
	jw_end(&w);
	http_respond_json(c, 200, b.data);
	buf_free(&b);
}

/* GET /sandboxes/<id>/stats: the bytes relayed for it since its first PUT
 * (kept across policy changes). */
static void handle_sbx_stats(struct gw *g, const char *id, struct http_conn *c)
{
	struct gw_sbx *s;
	uint64_t in = 0, out = 0;
	char body[128];

	pthread_rwlock_rdlock(&g->lock);
	s = gw_find_id_locked(g, id);
	if (s) {
		in = __atomic_load_n(&s->bytes->in, __ATOMIC_RELAXED);
		out = __atomic_load_n(&s->bytes->out, __ATOMIC_RELAXED);
	}
	pthread_rwlock_unlock(&g->lock);
	if (!s) {
		http_respond_error(c, 404, "not_found", "no sandbox `%s` at the gateway", id);
		return;
	}
	snprintf(body, sizeof(body), "{\"bytes_in\":%" PRIu64 ",\"bytes_out\":%" PRIu64 "}", in,
		 out);
	http_respond_json(c, 200, body);
}

static void handle_stats(struct gw *g, struct http_conn *c)
{
	static const struct { const char *key; size_t off; } fields[] = {
		{ "connections", offsetof(struct gw_stats, conns) },
		{ "over_limit", offsetof(struct gw_stats, over_limit) },
		{ "denied", offsetof(struct gw_stats, denied) },
		{ "dials", offsetof(struct gw_stats, dials) },
		{ "dial_fails", offsetof(struct gw_stats, dial_fails) },
		{ "sniff_us", offsetof(struct gw_stats, sniff_us) },
		{ "decide_us", offsetof(struct gw_stats, decide_us) },
		{ "dial_us", offsetof(struct gw_stats, dial_us) },
		{ "bytes_in", offsetof(struct gw_stats, bytes_in) },
		{ "bytes_out", offsetof(struct gw_stats, bytes_out) },
	};
	struct buf b;
	struct jw w;

	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		jw_key(&w, fields[i].key);
		jw_uint(&w, __atomic_load_n((uint64_t *)((char *)&g->stats + fields[i].off),
					    __ATOMIC_RELAXED));
	}
	/* and what is held now: pairs on the relay loop, worker threads
	 * and those of them waiting for a connection */
	jw_key(&w, "relayed");
	jw_uint(&w, relay_loop_pairs(g->relay));
	jw_key(&w, "intercepted");
	jw_uint(&w, tls_loop_pairs(g->tls));
	jw_key(&w, "intercepting");
	jw_uint(&w, mitm_loop_conns(g->mitm));
	jw_key(&w, "workers");
	jw_uint(&w, (uint64_t)__atomic_load_n(&g->workers, __ATOMIC_RELAXED));
	jw_key(&w, "workers_idle");
	jw_uint(&w, (uint64_t)__atomic_load_n(&g->workers_idle, __ATOMIC_RELAXED));
	jw_key(&w, "pid");
	jw_uint(&w, (uint64_t)getpid());
	jw_end(&w);
	http_respond_json(c, 200, b.data);
	buf_free(&b);
}

static void admin_handler(void *ctx, struct http_req *req, struct http_conn *c)
{
	struct gw *g = ctx;
	const char *p = req->path ? req->path : "";
	char id[65];
	const char *rest;
	size_t n;

	/* Every route here is the node's: PUT and DELETE say which address is
	 * which sandbox, and so whose credentials its connections get; the
	 * log and the stats are its tenants'. The api shares the socket's
	 * group but reaches the gateway only through the node; root (up, the
	 * bench and tests reading GET /stats) passes (peer.h). */
	if (!peer_allow(&g->cfg->peers, req, c, PEER_NODE))
		return;
	if (strcmp(p, "/health") == 0) {
		http_respond_json(c, 200, "{\"ok\":true}");
		return;
	}
	if (strcmp(p, "/stats") == 0 && strcmp(req->method, "GET") == 0) {
		handle_stats(g, c);
		return;
	}
	if (strncmp(p, "/sandboxes/", 11) != 0) {
		http_respond_error(c, 404, "not_found", "no such endpoint");
		return;
	}
	p += 11;
	rest = strchr(p, '/');
	n = rest ? (size_t)(rest - p) : strlen(p);
	if (n == 0 || n >= sizeof(id)) {
		http_respond_error(c, 404, "not_found", "bad sandbox id");
		return;
	}
	memcpy(id, p, n);
	id[n] = '\0';
	if (!rest && strcmp(req->method, "PUT") == 0)
		handle_put(g, id, req, c);
	else if (!rest && strcmp(req->method, "DELETE") == 0)
		handle_delete(g, id, c);
	else if (rest && strcmp(rest, "/log") == 0 && strcmp(req->method, "GET") == 0)
		handle_log(g, id, c);
	else if (rest && strcmp(rest, "/stats") == 0 && strcmp(req->method, "GET") == 0)
		handle_sbx_stats(g, id, c);
	else
		http_respond_error(c, 404, "not_found", "no such endpoint");
}

/* ---- start-up --------------------------------------------------------- */

static int parse_hosts(struct gw *g, const char *s, err_t *err)
{
	_cleanup_free_ char *copy = xstrdup(s ? s : "");
	char *save = NULL;

	for (char *t = strtok_r(copy, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
		char *eq = strchr(t, '=');
		uint32_t ip;
		if (!eq)
			return err_set(err, EINVAL, "gateway_hosts: `%s` is not name=ip", t);
		*eq = '\0';
		if (!policy_host_valid(t) || parse_addr(eq + 1, &ip) < 0)
			return err_set(err, EINVAL, "gateway_hosts: bad name or IPv4 in `%s`", t);
		g->hosts = xrealloc(g->hosts, (g->n_hosts + 1) * sizeof(*g->hosts));
		g->hosts[g->n_hosts].name = xstrdup(t);
		g->hosts[g->n_hosts].ip = ip;
		g->n_hosts++;
	}
	return 0;
}

static int bind_port(int type, uint16_t port, err_t *err)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	int one = 1, fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return err_sys(err, "socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    (type == SOCK_STREAM && listen(fd, 1024) < 0)) {
		int r = err_sys(err, "gateway: bind port %u", port);
		close(fd);
		return r;
	}
	return fd;
}

/* Learn the policies of sandboxes that already run (a restarted gateway):
 * the node answers its internal list; it pushes every change after that. */
static void pull_from_node(struct gw *g)
{
	struct http_resp resp;
	err_t err = { 0 };
	json *j;

	if (!g->cfg->node_sock)
		return;
	memset(&resp, 0, sizeof(resp));
	if (http_request(g->cfg->node_sock, "GET", "/internal/network",
			 "X-Airlock-Tenant: gateway\r\n", NULL, 0, &resp, &err) < 0 ||
	    resp.status != 200) {
		log_info("gateway: no policies from the node yet (%s)", err.msg[0] ? err.msg : "status");
		http_resp_free(&resp);
		return;
	}
	j = json_parse(resp.body.data ? resp.body.data : "", resp.body.len, &err);
	const json *arr = j ? json_get(j, "sandboxes") : NULL;
	for (size_t i = 0; arr && arr->type == JSON_ARR && i < arr->n; i++) {
		const json *e = arr->items[i];
		const char *id = json_get_str(e, "id"), *addr = json_get_str(e, "addr");
		struct gw_sbx *s;
		uint32_t ip;
		char msg[256];
		if (!id || strlen(id) > 64 || parse_addr(addr, &ip) < 0)
			continue;
		s = sbx_new(id, ip);
		if (policy_parse(json_get(e, "network"), &s->pol, msg, sizeof(msg)) < 0) {
			sbx_free(s);
			continue;
		}
		pthread_rwlock_wrlock(&g->lock);
		if (gw_find_locked(g, ip) || gw_find_id_locked(g, id))
			sbx_free(s);
		else
			sbx_link_locked(g, s);
		pthread_rwlock_unlock(&g->lock);
	}
	json_free(j);
	http_resp_free(&resp);
}

int gateway_run(const struct gateway_config *cfg, err_t *err)
{
	struct gw *g = xcalloc(1, sizeof(*g));
	struct http_server *admin = NULL;
	pthread_t proxy_t, dns_t;
	bool proxy_started = false, dns_started = false;
	sigset_t stop_set, old_set;
	int sig = 0, r = 0;

	g->cfg = cfg;
	g->proxy_fd = g->dns_fd = -1;
	pthread_rwlock_init(&g->lock, NULL);
	pthread_mutex_init(&g->local_mu, NULL);
	g->conns = keycap_new(cfg->max_conns ? cfg->max_conns : GATEWAY_MAX_CONNS_DEFAULT);
	sigemptyset(&stop_set);
	sigaddset(&stop_set, SIGTERM);
	sigaddset(&stop_set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &stop_set, &old_set);
	signal(SIGPIPE, SIG_IGN);
	raise_fd_limit();

	if (cidr4_parse(cfg->sandbox_net, &g->env.sandbox_net) < 0) {
		r = err_set(err, EINVAL, "gateway: bad sandbox network `%s`", cfg->sandbox_net);
		goto out;
	}
	if (cidr_parse_list(cfg->allow_private ? cfg->allow_private : "", &g->allow_private,
			    &g->env.n_allow_private, &g->allow_private6,
			    &g->env.n_allow_private6) < 0) {
		r = err_set(err, EINVAL, "network_allow_private_cidrs: bad CIDR in `%s`",
			    cfg->allow_private);
		goto out;
	}
	g->env.allow_private = g->allow_private;
	g->env.allow_private6 = g->allow_private6;
	g->env.is_local = gw_local_is;
	g->env.is_local6 = gw_local_is6;
	g->env.arg = g;
	if ((r = parse_hosts(g, cfg->hosts, err)) < 0)
		goto out;
	if (cfg->db_path && !(g->cred = gw_cred_open(cfg, err))) {
		r = -err->code;
		goto out;
	}
	if ((r = gw_resolver_init(g, err)) < 0)
		goto out;
	if ((g->proxy_fd = bind_port(SOCK_STREAM, cfg->proxy_port, err)) < 0 ||
	    (g->dns_fd = bind_port(SOCK_DGRAM, cfg->dns_port, err)) < 0) {
		r = -err->code;
		goto out;
	}
	/* Accept only once the first bytes are there (or after a second
	 * without any, a server-speaks-first protocol): the worker then
	 * sniffs at once instead of waking twice. */
	g->defer_accept = setsockopt(g->proxy_fd, IPPROTO_TCP, TCP_DEFER_ACCEPT,
				     &(int){ FIRST_BYTE_MS / 1000 }, sizeof(int)) == 0;
	/* A thread per CPU carries the relayed connections (up to 4: the
	 * splice work is the kernel's, and a few threads keep up with it). */
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	if (!(g->relay = relay_loop_start(cpus < 1 ? 1 : cpus > 4 ? 4 : (unsigned)cpus, err))) {
		r = -err->code;
		goto out;
	}
	/* Intercepted TLS: set up on a loop thread per CPU (up to 4: the
	 * handshakes are CPU work) with 4 threads for the credential hook
	 * (which reads the DB), then carried by the TLS loop. */
	if (g->cred && (!(g->tls = tls_loop_start(err)) ||
			!(g->mitm = mitm_loop_start(g->tls, &(struct mitm_loop_opts){
				.shards = cpus < 1 ? 1 : cpus > 4 ? 4 : (unsigned)cpus,
				.hook_threads = 4 }, err)))) {
		r = -err->code;
		goto out;
	}
	pull_from_node(g);
	gw_local_init(g);   /* then kept current by the proxy's main thread */
	if (pthread_create(&proxy_t, NULL, gw_proxy_main, g) != 0) {
		r = err_set(err, EAGAIN, "gateway: start proxy thread");
		goto out;
	}
	proxy_started = true;
	if (pthread_create(&dns_t, NULL, gw_dns_main, g) != 0) {
		r = err_set(err, EAGAIN, "gateway: start dns thread");
		goto out;
	}
	dns_started = true;
	admin = http_server_start(cfg->admin_sock, 1 << 20, admin_handler, g, err);
	if (!admin) {
		r = err_wrap(err, "gateway: listen on %s", cfg->admin_sock);
		goto out;
	}
	log_info("gateway: proxy tcp :%u, dns udp :%u, admin %s", cfg->proxy_port, cfg->dns_port,
		 cfg->admin_sock);
	while (sigwait(&stop_set, &sig) != 0 || (sig != SIGTERM && sig != SIGINT))
		;
	log_info("gateway stopping (signal %d)", sig);
out:
	__atomic_store_n(&g->stopping, 1, __ATOMIC_RELEASE);
	http_server_stop(admin);
	/* shutdown() wakes the threads blocked in accept/recvfrom. Connection
	 * threads are detached and end with their peers (the process exits). */
	if (g->proxy_fd >= 0)
		shutdown(g->proxy_fd, SHUT_RDWR);
	if (g->dns_fd >= 0)
		shutdown(g->dns_fd, SHUT_RDWR);
	if (proxy_started)
		pthread_join(proxy_t, NULL);
	if (dns_started)
		pthread_join(dns_t, NULL);
	pthread_sigmask(SIG_SETMASK, &old_set, NULL);
	/* The table and fds go with the process; live relays may still use them. */
	return r;
}
