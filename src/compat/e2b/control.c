/* control.c - E2B's control API (E2B_API_URL = <api>/e2b) on Airlock's
 * sandbox operations. Every call becomes one or two requests to the local
 * node as the caller's tenant, so the node's ownership rules apply (another
 * tenant's sandbox is 404). Answers are E2B's shapes (docs/E2B.md). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "../../lib/log.h"
#include "e2b-internal.h"

/* "YYYY-MM-DDTHH:MM:SS[.mmm]Z" -> ms since the epoch; 0 when not that. */
static int64_t iso_ms(const char *s)
{
	struct tm tm = { 0 };
	int ms = 0;

	if (!s || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
			 &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6)
		return 0;
	if (s[19] == '.')
		sscanf(s + 20, "%3d", &ms);
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (int64_t)timegm(&tm) * 1000 + ms;
}

/* Airlock's states as E2B's two (running, paused); NULL: not listed. */
static const char *e2b_state(const char *st)
{
	static const char *const running[] = { "pending", "starting", "running", "restoring",
					       "rolling_back" };
	static const char *const paused[] = { "paused", "suspending", "suspended" };

	for (size_t i = 0; st && i < ARRAY_SIZE(running); i++)
		if (!strcmp(st, running[i]))
			return "running";
	for (size_t i = 0; st && i < ARRAY_SIZE(paused); i++)
		if (!strcmp(st, paused[i]))
			return "paused";
	return NULL;
}

/* An Airlock sandbox object as E2B's ListedSandbox / SandboxDetail. */
static void write_sandbox(struct jw *w, const json *sb, const char *state)
{
	const json *lim = json_get(sb, "limits");
	const json *md = json_get(sb, "metadata");
	const char *created = json_get_str(sb, "created_at");
	const char *ends = json_get_str(sb, "ends_at");
	char end[ISO_TIME_MAX];

	jw_obj(w);
	jw_key(w, "sandboxID");
	jw_str(w, json_get_str(sb, "id"));
	jw_key(w, "templateID");
	jw_str(w, json_get_str(sb, "template"));
	jw_key(w, "alias");
	jw_str(w, json_get_str(sb, "template"));
	jw_key(w, "clientID");
	jw_str(w, "airlock");
	jw_key(w, "startedAt");
	jw_str(w, created);
	/* E2B has no "never": a sandbox without a timeout ends in 100 years */
	iso_time(iso_ms(created) + 100LL * 365 * 86400 * 1000, end);
	jw_key(w, "endAt");
	jw_str(w, ends ? ends : end);
	jw_key(w, "state");
	jw_str(w, state);
	jw_key(w, "cpuCount");
	jw_int(w, lim && json_get(lim, "cpus") ? (int64_t)(json_get(lim, "cpus")->num + 0.999) : 1);
	jw_key(w, "memoryMB");
	jw_int(w, lim ? json_get_int(lim, "memory_mb", 0, NULL) : 0);
	jw_key(w, "diskSizeMB");
	jw_int(w, lim ? json_get_int(lim, "disk_mb", 0, NULL) : 0);
	jw_key(w, "envdVersion");
	jw_str(w, E2B_ENVD_VERSION);
	jw_key(w, "metadata");
	if (md && md->type == JSON_OBJ)
		jw_value(w, md);
	else
		jw_raw(w, "{}");
	jw_end(w);
}

/* The node's error, passed on with its status in E2B's form. */
static void node_error(struct http_conn *c, int st, const struct http_resp *r)
{
	if (st < 0) {
		e2b_error(c, 503, "node unavailable");
		return;
	}
	_cleanup_free_ char *m = e2b_node_message(r);
	e2b_error(c, st, "%s", m);
}

/* The Sandbox answer of create and connect: id, a fresh envd token, the
 * ports domain (the SDK's getHost builds {port}-{id}.<domain> from it). */
static void answer_sandbox(struct api *a, struct http_conn *c, int status, const json *sb,
			   const struct api_principal *who)
{
	const char *id = json_get_str(sb, "id");
	_cleanup_free_ char *token = id ? e2b_token_issue(a, who, id) : NULL;
	struct buf b;
	struct jw w;

	if (!token) {
		e2b_error(c, 500, "cannot issue the envd access token");
		return;
	}
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "sandboxID");
	jw_str(&w, id);
	jw_key(&w, "templateID");
	jw_str(&w, json_get_str(sb, "template"));
	jw_key(&w, "alias");
	jw_str(&w, json_get_str(sb, "template"));
	jw_key(&w, "clientID");
	jw_str(&w, "airlock");
	jw_key(&w, "envdVersion");
	jw_str(&w, E2B_ENVD_VERSION);
	jw_key(&w, "envdAccessToken");
	jw_str(&w, token);
	/* @e2b/code-interpreter sends only this with its context calls: the
	 * same token (e2b.c takes either header). */
	jw_key(&w, "trafficAccessToken");
	jw_str(&w, token);
	jw_key(&w, "domain");
	jw_str(&w, a->cfg->ports_domain && *a->cfg->ports_domain ? a->cfg->ports_domain : NULL);
	jw_end(&w);
	http_respond(c, status, "application/json", b.data, b.len, NULL);
	buf_free(&b);
}

/* Parse the body as a JSON object ("" or absent: {}); NULL when answered. */
static json *body_object(struct http_req *req, struct http_conn *c)
{
	err_t err = { 0 };
	json *j;

	if (req->body_len == 0)
		return json_parse("{}", 2, &err);
	j = json_parse(req->body, req->body_len, &err);
	if (!j) {
		e2b_error(c, 400, "invalid JSON body: %s", err.msg);
		return NULL;
	}
	if (j->type != JSON_OBJ) {
		json_free(j);
		e2b_error(c, 400, "the body must be a JSON object");
		return NULL;
	}
	return j;
}

/* A field that is absent, null, false or an empty object: what the SDK
 * sends for options it was not given. */
static bool unset(const json *v)
{
	return !v || v->type == JSON_NULL || (v->type == JSON_BOOL && !v->b) ||
	       ((v->type == JSON_OBJ || v->type == JSON_ARR) && v->n == 0);
}

static void create(struct api *a, struct http_req *req, struct http_conn *c,
		   const struct api_principal *who)
{
	static const char *const allowed[] = {
		"templateID", "metadata", "envVars", "timeout", "autoPause", "secure",
		"allow_internet_access", "network", "iam", "mcp", "autoPauseMemory",
		"autoResume", "volumeMounts", NULL };
	/* accepted only when unset: Airlock has its own network policy etc. */
	static const char *const unsupported[] = { "network", "iam", "mcp", "volumeMounts",
						   "autoResume", NULL };
	_cleanup_(json_freep) json *body = body_object(req, c);
	_cleanup_(json_freep) json *sb = NULL;
	struct http_resp r;
	err_t err = { 0 };
	bool bad = false;
	struct buf nb;
	struct jw w;

	if (!body)
		return;
	if (json_check_keys(body, allowed, &err) < 0) {
		e2b_error(c, 400, "%s", err.msg);
		return;
	}
	for (size_t i = 0; unsupported[i]; i++)
		if (!unset(json_get(body, unsupported[i]))) {
			e2b_error(c, 400, "`%s` is not supported by Airlock's E2B API "
				  "(docs/E2B.md)", unsupported[i]);
			return;
		}
	const json *ai = json_get(body, "allow_internet_access");
	if (ai && !(ai->type == JSON_BOOL && ai->b) && ai->type != JSON_NULL) {
		e2b_error(c, 400, "`allow_internet_access: false` is not supported: use "
			  "Airlock's network policy (docs/API.md)");
		return;
	}
	const char *tmpl = json_get_str(body, "templateID");
	/* @e2b/code-interpreter's default template is Airlock's built-in
	 * code-interpreter (docs/E2B.md). */
	if (tmpl && !strcmp(tmpl, E2B_CODE_TEMPLATE))
		tmpl = "code-interpreter";
	int64_t timeout = json_get_int(body, "timeout", 300, &bad);
	bool pause = json_get_bool(body, "autoPause", false, &bad);
	const json *md = json_get(body, "metadata"), *env = json_get(body, "envVars");
	if (bad || !tmpl || !*tmpl || timeout < 0 || timeout > 10LL * 365 * 86400 ||
	    (md && md->type != JSON_OBJ && md->type != JSON_NULL) ||
	    (env && env->type != JSON_OBJ && env->type != JSON_NULL)) {
		e2b_error(c, 400, "templateID (a template name) is required; timeout is seconds "
			  "0..10 years; metadata and envVars are objects of strings");
		return;
	}
	buf_init(&nb);
	jw_init(&w, &nb);
	jw_obj(&w);
	jw_key(&w, "template");
	jw_str(&w, tmpl);
	if (md && md->type == JSON_OBJ) {
		jw_key(&w, "metadata");
		jw_value(&w, md);
	}
	if (env && env->type == JSON_OBJ) {
		jw_key(&w, "env");
		jw_value(&w, env);
	}
	jw_key(&w, "timeout_s");
	jw_int(&w, timeout);
	jw_key(&w, "on_timeout");
	jw_str(&w, pause ? "pause" : "delete");
	jw_end(&w);
	int st = e2b_node(a, who->tenant, "POST", "/v1/sandboxes", "application/json", nb.data,
			  nb.len, &r);
	buf_free(&nb);
	if (st != 201 && st != 200) {
		node_error(c, st, &r);
		http_resp_free(&r);
		return;
	}
	sb = json_parse(r.body.data, r.body.len, NULL);
	http_resp_free(&r);
	if (!sb || !json_get_str(sb, "id")) {
		e2b_error(c, 500, "unexpected answer from the node");
		return;
	}
	answer_sandbox(a, c, 201, sb, who);
}

/* E2B's metadata filter, "k1=v1&k2=v2" (each part URL-encoded once more
 * by the SDK), as Airlock's metadata.<k>=<v> query parameters. */
static bool metadata_query(const char *q, struct buf *out)
{
	const char *p = q;

	/* what goes into the node's request line: URL-encoded bytes only */
	for (const char *s = q; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || strchr("%._~!*'()-=&", *s)))
			return false;
	while (*p) {
		size_t n = strcspn(p, "&");
		const char *eq = memchr(p, '=', n);
		if (!eq || eq == p)
			return false;
		buf_printf(out, "&metadata.%.*s=%.*s", (int)(eq - p), p, (int)(n - (size_t)(eq - p) - 1),
			   eq + 1);
		p += n + (p[n] == '&');
	}
	return true;
}

/* Does the query ask for E2B state st? No state= at all: every state.
 * The SDK repeats the parameter (state=running&state=paused); a comma
 * list is taken too. */
static bool state_wanted(const char *query, const char *st)
{
	bool any = false;

	for (const char *p = query; p && *p;) {
		size_t n = strcspn(p, "&");

		if (n > 6 && !strncmp(p, "state=", 6)) {
			any = true;
			for (const char *v = p + 6; v < p + n;) {
				size_t m = strcspn(v, ",&");
				if (m > (size_t)(p + n - v))
					m = (size_t)(p + n - v);
				if (m == strlen(st) && !strncmp(v, st, m))
					return true;
				v += m + 1;
			}
		}
		p += n + (p[n] == '&');
	}
	return !any;
}

/* The sandboxes of arr in E2B's states the query asks for. */
static void write_listed(struct jw *w, const struct http_req *req, const json *arr)
{
	for (size_t i = 0; i < arr->n; i++) {
		const char *s = e2b_state(json_get_str(arr->items[i], "state"));

		if (s && state_wanted(req->query, s))
			write_sandbox(w, arr->items[i], s);
	}
}

static void list(struct api *a, struct http_req *req, struct http_conn *c,
		 const struct api_principal *who)
{
	_cleanup_free_ char *limit = http_query_param(req, "limit");
	_cleanup_free_ char *next = http_query_param(req, "nextToken");
	_cleanup_free_ char *mdq = http_query_param(req, "metadata");
	_cleanup_(json_freep) json *j = NULL;
	struct http_resp r;
	struct buf target, b, extra;
	struct jw w;

	buf_init(&target);
	buf_printf(&target, "/v1/sandboxes?limit=%s", limit && *limit ? limit : "100");
	for (const char *s = limit; s && *s; s++)
		if (*s < '0' || *s > '9') {
			buf_free(&target);
			e2b_error(c, 400, "limit must be a number");
			return;
		}
	if (next && *next) {
		_cleanup_free_ char *e = e2b_qenc(next);
		buf_printf(&target, "&next_token=%s", e);
	}
	if (mdq && *mdq && !metadata_query(mdq, &target)) {
		buf_free(&target);
		e2b_error(c, 400, "metadata must be key=value pairs joined by &");
		return;
	}
	int st = e2b_node(a, who->tenant, "GET", target.data, NULL, NULL, 0, &r);
	if (st != 200) {
		buf_free(&target);
		node_error(c, st, &r);
		http_resp_free(&r);
		return;
	}
	j = json_parse(r.body.data, r.body.len, NULL);
	http_resp_free(&r);
	const json *arr = j ? json_get(j, "sandboxes") : NULL;
	if (!arr || arr->type != JSON_ARR) {
		buf_free(&target);
		e2b_error(c, 500, "unexpected answer from the node");
		return;
	}
	buf_init(&b);
	jw_init(&w, &b);
	jw_arr(&w);
	write_listed(&w, req, arr);
	/* A cluster: each other up node's own list, through its api with the
	 * caller's key (X-Airlock-Forwarded: it answers for itself only). */
	char urls[16][200];
	size_t np = api_cluster_peer_urls(a, req, urls, ARRAY_SIZE(urls));
	for (size_t i = 0; i < np; i++) {
		_cleanup_free_ char *hdr = xasprintf("Authorization: Bearer %s\r\n"
						     "X-Airlock-Forwarded: %s\r\n",
						     http_req_header(req, "X-API-KEY"),
						     a->cfg->node_name);
		struct http_resp pr;
		err_t err = { 0 };
		memset(&pr, 0, sizeof(pr));
		if (http_request(urls[i], "GET", target.data, hdr, NULL, 0, &pr, &err) == 0 &&
		    pr.status == 200) {
			_cleanup_(json_freep) json *pj = json_parse(pr.body.data, pr.body.len, NULL);
			const json *pa = pj ? json_get(pj, "sandboxes") : NULL;
			if (pa && pa->type == JSON_ARR)
				write_listed(&w, req, pa);
		} else {
			log_warn("e2b list: %s: %s", urls[i], err.code ? err.msg : "not 200");
		}
		http_resp_free(&pr);
	}
	buf_free(&target);
	jw_end(&w);
	buf_init(&extra);
	/* The node's cursor pages its own list only: no cursor for a merged one. */
	const char *nt = np ? NULL : json_get_str(j, "next_token");
	if (nt && strlen(nt) < 512 && !strpbrk(nt, "\r\n"))
		buf_printf(&extra, "X-Next-Token: %s\r\n", nt);
	http_respond(c, 200, "application/json", b.data, b.len, extra.len ? extra.data : NULL);
	buf_free(&extra);
	buf_free(&b);
}

/* GET /v1/sandboxes/{id} of the node; NULL when answered (404, ...). */
static json *node_sandbox(struct api *a, struct http_conn *c, const struct api_principal *who,
			  const char *id, const char *method, const char *op)
{
	_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s%s", id, op);
	struct http_resp r;
	json *j;
	int st = e2b_node(a, who->tenant, method, target, op[0] ? "application/json" : NULL,
			  NULL, 0, &r);

	if (st != 200) {
		node_error(c, st, &r);
		http_resp_free(&r);
		return NULL;
	}
	j = json_parse(r.body.data, r.body.len, NULL);
	http_resp_free(&r);
	if (!j)
		e2b_error(c, 500, "unexpected answer from the node");
	return j;
}

static void get(struct api *a, struct http_conn *c, const struct api_principal *who,
		const char *id)
{
	_cleanup_(json_freep) json *sb = node_sandbox(a, c, who, id, "GET", "");
	const char *st;
	struct buf b;
	struct jw w;

	if (!sb)
		return;
	st = e2b_state(json_get_str(sb, "state"));
	buf_init(&b);
	jw_init(&w, &b);
	write_sandbox(&w, sb, st ? st : json_get_str(sb, "state"));
	http_respond(c, 200, "application/json", b.data, b.len, NULL);
	buf_free(&b);
}

static void kill_sandbox(struct api *a, struct http_conn *c, const struct api_principal *who,
			 const char *id)
{
	_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s", id);
	struct http_resp r;
	/* A deleted sandbox answers DELETE with 204 again; E2B says 404. */
	_cleanup_(json_freep) json *sb = node_sandbox(a, c, who, id, "GET", "");
	int st;

	if (!sb)
		return;
	st = e2b_node(a, who->tenant, "DELETE", target, NULL, NULL, 0, &r);
	if (st == 204 || st == 200) {
		e2b_tokens_drop(a, id);
		http_respond(c, 204, NULL, NULL, 0, NULL);
	} else {
		node_error(c, st, &r);
	}
	http_resp_free(&r);
}

static void pause_sandbox(struct api *a, struct http_conn *c, const struct api_principal *who,
			  const char *id)
{
	_cleanup_(json_freep) json *sb = node_sandbox(a, c, who, id, "POST", "/pause");

	if (sb)
		http_respond(c, 204, NULL, NULL, 0, NULL);
}

/* POST /v2/sandboxes/{id}/connect (and the older /sandboxes/{id}/resume):
 * resumes a paused sandbox, answers a running one as it is. */
static void connect_sandbox(struct api *a, struct http_req *req, struct http_conn *c,
			    const struct api_principal *who, const char *id)
{
	static const char *const allowed[] = { "timeout", "memory", "autoPause", NULL };
	_cleanup_(json_freep) json *body = body_object(req, c);
	err_t err = { 0 };

	if (!body)
		return;
	if (json_check_keys(body, allowed, &err) < 0) {
		e2b_error(c, 400, "%s", err.msg);
		return;
	}
	_cleanup_(json_freep) json *sb = node_sandbox(a, c, who, id, "POST", "/connect");
	if (sb)
		answer_sandbox(a, c, 200, sb, who);
}

/* POST /sandboxes/{id}/timeout {"timeout": seconds}: the node's
 * POST /v1/sandboxes/{id}/timeout (from now). */
static void set_timeout(struct api *a, struct http_req *req, struct http_conn *c,
			const struct api_principal *who, const char *id)
{
	_cleanup_(json_freep) json *body = body_object(req, c);
	_cleanup_free_ char *target = xasprintf("/v1/sandboxes/%s/timeout", id);
	_cleanup_free_ char *nb = NULL;
	struct http_resp r;
	bool bad = false;
	int64_t t;
	int st;

	if (!body)
		return;
	t = json_get_int(body, "timeout", -1, &bad);
	if (bad || t < 0 || t > 10LL * 365 * 86400 || body->n != 1) {
		e2b_error(c, 400, "body must be {\"timeout\": seconds} (at most 10 years)");
		return;
	}
	nb = xasprintf("{\"timeout_s\":%lld}", (long long)t);
	st = e2b_node(a, who->tenant, "POST", target, "application/json", nb, strlen(nb), &r);
	if (st == 200 || st == 204)
		http_respond(c, 204, NULL, NULL, 0, NULL);
	else
		node_error(c, st, &r);
	http_resp_free(&r);
}

/* GET /sandboxes/{id}/metrics: E2B keeps a series of samples; Airlock has
 * the sandbox's counters now (GET /v1/sandboxes/{id}/metrics), so this is
 * one sample, with CPU as the average share of the sandbox's CPUs since
 * it was created, and the totals from its limits. */
static void metrics(struct api *a, struct http_conn *c, const struct api_principal *who,
		    const char *id)
{
	_cleanup_(json_freep) json *sb = node_sandbox(a, c, who, id, "GET", "");
	_cleanup_(json_freep) json *m = sb ? node_sandbox(a, c, who, id, "GET", "/metrics") : NULL;
	const json *lim = sb ? json_get(sb, "limits") : NULL;
	int64_t now = wall_ms(), born = sb ? iso_ms(json_get_str(sb, "created_at")) : -1;
	double cpus = lim && json_get(lim, "cpus") ? json_get(lim, "cpus")->num : 1;
	double used = m && json_get(m, "cpu_seconds") ? json_get(m, "cpu_seconds")->num : 0;
	double pct = 0;
	char t[ISO_TIME_MAX];
	struct buf b;
	struct jw w;

	if (!m)
		return;
	if (born > 0 && now > born && cpus > 0)
		pct = 100.0 * used / ((double)(now - born) / 1000.0 * cpus);
	iso_time(now, t);
	buf_init(&b);
	jw_init(&w, &b);
	jw_arr(&w);
	jw_obj(&w);
	jw_key(&w, "timestamp");
	jw_str(&w, t);
	jw_key(&w, "cpuUsedPct");
	jw_double(&w, pct > 100 ? 100 : pct);
	jw_key(&w, "cpuCount");
	jw_int(&w, cpus < 1 ? 1 : (int64_t)(cpus + 0.999));
	jw_key(&w, "memUsed");
	jw_int(&w, json_get_int(m, "memory_bytes", 0, NULL));
	jw_key(&w, "memTotal");
	jw_int(&w, json_get_int(lim, "memory_mb", 0, NULL) << 20);
	jw_key(&w, "diskUsed");
	jw_int(&w, json_get_int(m, "disk_used_bytes", 0, NULL));
	jw_key(&w, "diskTotal");
	jw_int(&w, json_get_int(lim, "disk_mb", 0, NULL) << 20);
	jw_end(&w);
	jw_end(&w);
	http_respond(c, 200, "application/json", b.data, b.len, NULL);
	buf_free(&b);
}

/* rest: the path after /e2b. */
void e2b_control(struct api *a, struct http_req *req, struct http_conn *c,
		 const struct api_principal *who, const char *rest)
{
	const char *m = req->method, *p = rest, *op;
	char id[65];
	size_t n;

	if (!strncmp(p, "/v2/", 4))
		p += 3;   /* v1 and v2 of these paths take the same bodies here */
	if (!strcmp(p, "/sandboxes")) {
		if (!strcmp(m, "POST"))
			create(a, req, c, who);
		else if (!strcmp(m, "GET"))
			list(a, req, c, who);
		else
			e2b_error(c, 405, "method not allowed");
		return;
	}
	if (!strncmp(p, "/templates", 10) || !strncmp(p, "/snapshots", 10) ||
	    !strncmp(p, "/volumes", 8))
		goto not_supported;
	if (strncmp(p, "/sandboxes/", 11) != 0)
		goto not_found;
	p += 11;
	n = strcspn(p, "/");
	if (n == 0 || n >= sizeof(id))
		goto not_found;
	memcpy(id, p, n);
	id[n] = '\0';
	/* The path is percent-decoded: the id goes into the node's request
	 * line, so only the characters of our ids pass. */
	for (const char *s = id; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-' || *s == '_')) {
			e2b_error(c, 404, "no sandbox `%.64s`", id);
			return;
		}
	op = p + n;
	if (!*op && !strcmp(m, "GET"))
		get(a, c, who, id);
	else if (!*op && !strcmp(m, "DELETE"))
		kill_sandbox(a, c, who, id);
	else if (!strcmp(op, "/pause") && !strcmp(m, "POST"))
		pause_sandbox(a, c, who, id);
	else if ((!strcmp(op, "/connect") || !strcmp(op, "/resume")) && !strcmp(m, "POST"))
		connect_sandbox(a, req, c, who, id);
	else if (!strcmp(op, "/timeout") && !strcmp(m, "POST"))
		set_timeout(a, req, c, who, id);
	else if (!*op || !strcmp(op, "/pause") || !strcmp(op, "/connect") ||
		 !strcmp(op, "/resume") || !strcmp(op, "/timeout"))
		e2b_error(c, 405, "method not allowed");
	else if (!strcmp(op, "/metrics") && !strcmp(m, "GET"))
		metrics(a, c, who, id);
	else if (!strcmp(op, "/metrics"))
		e2b_error(c, 405, "method not allowed");
	else if (!strcmp(op, "/snapshots") || !strcmp(op, "/fork") ||
		 !strcmp(op, "/network") || !strcmp(op, "/refreshes"))
		goto not_supported;
	else
		goto not_found;
	return;
not_supported:
	/* E2B calls Airlock has no translation for: not a 404, which the SDK
	 * reads as "sandbox not found". */
	e2b_error(c, 501, "%s %s is not supported by Airlock's E2B API (docs/E2B.md); Airlock's "
		  "own API may have it (docs/API.md)", m, rest);
	return;
not_found:
	e2b_error(c, 404, "no such endpoint in Airlock's E2B API (docs/E2B.md): %s %s", m, rest);
}
