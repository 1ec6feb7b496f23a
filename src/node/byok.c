/* byok.c - the node's side of BYOK (docs/DESIGN.md "Bring your own key";
 * the keys themselves: src/byok/kms.h):
 *
 *   GET  /v1/tenants/{t}/encryption          provider, key, state (admin)
 *   PUT  /v1/tenants/{t}/encryption          set the provider and key (admin)
 *   POST /v1/tenants/{t}/encryption/rotate   rewrap every data key (admin)
 *
 * (the api resolves {t} to the tenant's id and forwards), the create gate
 * (a tenant whose key service refuses its key gets 403 key_revoked), and
 * the revocation watch: every kms_cache_ttl seconds, each tenant with live
 * sandboxes here has its key checked; when refused, they are suspended,
 * sealed under a data key wrapped before the refusal (seal_tenant). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../lib/ident.h"
#include "../lib/log.h"
#include "node-internal.h"

int byok_create_gate(struct node *n, const char *tenant, err_t *err)
{
	int r;

	if (!byok_on(n))
		return 0;
	r = kms_tenant_check(&n->kms, tenant, err);
	if (r == -EKEYREVOKED)
		return err_wrap(err, "key_revoked: new sandboxes cannot start");
	return r;
}

/* ---- the revocation watch ---------------------------------------------- */

/* The key service refused the tenant's key, in an answer it authenticated
 * (kms-transit.c): every running or paused sandbox of the tenant is
 * suspended, sealed under the tenant's reserve (a data key wrapped while
 * the key was good, kms_revoked_begin), so nothing of it is lost and all
 * of it restores once the key is back; then the reserve and every cached
 * key of the tenant are dropped. A running sandbox that cannot be sealed
 * (no reserve: the node has not seen the key good since it started; the
 * backend cannot suspend; the store fails) is paused, with an event that
 * says why, never destroyed; a paused one is left paused. Sandboxes in a
 * lifecycle step are left to the next round (a suspend or restore under
 * way fails on its own key). */
static void seal_tenant(struct node *n, const char *tenant)
{
	static const char why[] = SUSPEND_WHY_REVOKED ": the tenant's key service refused its key; "
				  "sealed and suspended";
	bool reserve = kms_revoked_begin(&n->kms, tenant);
	struct sandbox **v = NULL;
	size_t nv = 0, cap = 0;

	pthread_mutex_lock(&n->mu);
	for (int b = 0; b < NODE_BUCKETS; b++)
		for (struct sandbox *sb = n->buckets[b]; sb; sb = sb->hnext) {
			bool take;
			/* n->mu before sb->mu */
			pthread_mutex_lock(&sb->mu);
			take = sb->tenant && strcmp(sb->tenant, tenant) == 0 &&
			       (sb->state == SB_RUNNING || (sb->state == SB_PAUSED && reserve)) &&
			       !sb->deleting && !sb->lc_busy;
			if (take)
				sandbox_ref(sb);
			pthread_mutex_unlock(&sb->mu);
			if (!take)
				continue;
			if (nv == cap) {
				cap = cap ? 2 * cap : 8;
				v = xrealloc(v, cap * sizeof(*v));
			}
			v[nv++] = sb;
		}
	pthread_mutex_unlock(&n->mu);
	for (size_t i = 0; i < nv; i++) {
		struct sandbox *sb = v[i];
		err_t err = { 0 }, e2 = { 0 };
		bool running;

		if (!reserve)
			err_set(&err, ENOKEY, "no key wrapped before the revocation to seal it under");
		else if (sandbox_suspend(n, sb, why, NULL, &err) == 0) {
			log_warn("sandbox %s: suspended (sealed): key_revoked", sb->id);
			sandbox_unref(sb);
			continue;
		}
		pthread_mutex_lock(&sb->mu);
		running = sb->state == SB_RUNNING && !sb->deleting;
		pthread_mutex_unlock(&sb->mu);
		if (running) {
			char reason[300];
			snprintf(reason, sizeof(reason), "key_revoked: paused, not sealed: %.240s",
				 err.msg);
			if (sandbox_pause_why(n, sb, reason, &e2) < 0)
				log_err("sandbox %s: key_revoked: cannot pause: %s", sb->id, e2.msg);
			else
				log_warn("sandbox %s: paused (not sealed: %s): key_revoked", sb->id,
					 err.msg);
		}
		sandbox_unref(sb);
	}
	free(v);
	kms_revoked_end(&n->kms, tenant);
}

struct watch_job {
	struct node *n;
	const char *tenant;
	bool started;
	pthread_t th;
};

static void *watch_tenant(void *arg)
{
	struct watch_job *j = arg;
	err_t err = { 0 };

	/* only a refusal is acted on: an unreachable service, or an answer
	 * that is not the service's own (-ENOKEY), leaves everything running */
	if (kms_tenant_check(&j->n->kms, j->tenant, &err) == -EKEYREVOKED)
		seal_tenant(j->n, j->tenant);
	return NULL;
}

static void watch_once(struct node *n)
{
	char (*tenants)[CRYPT_NAME_MAX + 1] = NULL;
	size_t nt = 0, cap = 0;

	pthread_mutex_lock(&n->mu);
	for (int b = 0; b < NODE_BUCKETS; b++)
		for (struct sandbox *sb = n->buckets[b]; sb; sb = sb->hnext) {
			bool seen = false;
			if (!sb->tenant || !state_is_live(sb->state) || sb->state == SB_SUSPENDED)
				continue;
			for (size_t i = 0; i < nt && !seen; i++)
				seen = strcmp(tenants[i], sb->tenant) == 0;
			if (seen)
				continue;
			if (nt == cap) {
				cap = cap ? 2 * cap : 8;
				tenants = xrealloc(tenants, cap * sizeof(*tenants));
			}
			snprintf(tenants[nt++], sizeof(tenants[0]), "%s", sb->tenant);
		}
	pthread_mutex_unlock(&n->mu);
	/* one thread per tenant: a key service that is slow (each call is
	 * bounded, kms-transit.c) delays only its own tenant's check */
	{
		struct watch_job *jobs = xcalloc(nt ? nt : 1, sizeof(*jobs));
		for (size_t i = 0; i < nt; i++) {
			jobs[i] = (struct watch_job){ .n = n, .tenant = tenants[i] };
			jobs[i].started = pthread_create(&jobs[i].th, NULL, watch_tenant,
							 &jobs[i]) == 0;
			if (!jobs[i].started)
				watch_tenant(&jobs[i]);
		}
		for (size_t i = 0; i < nt; i++)
			if (jobs[i].started)
				pthread_join(jobs[i].th, NULL);
		free(jobs);
	}
	free(tenants);
}

static void *watch_main(void *arg)
{
	struct node *n = arg;
	unsigned ttl = n->cfg->kms_cache_ttl_s ? n->cfg->kms_cache_ttl_s : 1;
	uint64_t next = now_ms() + (uint64_t)ttl * 1000;

	while (!__atomic_load_n(&n->kms_watch_stop, __ATOMIC_ACQUIRE)) {
		struct timespec ts = { 0, 200 * 1000000L };
		nanosleep(&ts, NULL);
		if (now_ms() < next)
			continue;
		watch_once(n);
		next = now_ms() + (uint64_t)ttl * 1000;
	}
	return NULL;
}

void byok_start(struct node *n)
{
	if (!byok_on(n))
		return;
	if (pthread_create(&n->kms_watch, NULL, watch_main, n) == 0)
		n->kms_watch_started = true;
	else
		log_err("byok: cannot start the revocation watch");
}

void byok_stop(struct node *n)
{
	if (!n->kms_watch_started)
		return;
	__atomic_store_n(&n->kms_watch_stop, 1, __ATOMIC_RELEASE);
	pthread_join(n->kms_watch, NULL);
	n->kms_watch_started = false;
}

/* ---- the doctor ---------------------------------------------------------- */

/* nodemgr's report (a JSON object whose "checks" is an array), with the
 * tenants' key services' checks (kms_doctor_checks) at the end of
 * "checks". Returns a new string (caller frees); the report as it was when
 * it is not that shape. */
char *byok_doctor_amend(struct node *n, const char *report)
{
	err_t err = { 0 };
	json *j = json_parse(report, strlen(report), &err);
	struct buf b;
	struct jw w;

	if (!j || j->type != JSON_OBJ || !json_get(j, "checks") ||
	    json_get(j, "checks")->type != JSON_ARR) {
		json_free(j);
		return xstrdup(report);
	}
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	for (size_t i = 0; i < j->n; i++) {
		jw_key(&w, j->keys[i]);
		if (strcmp(j->keys[i], "checks") != 0) {
			jw_value(&w, j->items[i]);
			continue;
		}
		jw_arr(&w);
		for (size_t c = 0; c < j->items[i]->n; c++)
			jw_value(&w, j->items[i]->items[c]);
		kms_doctor_checks(&n->kms, &w);
		jw_end(&w);
	}
	jw_end(&w);
	json_free(j);
	return buf_steal(&b);
}

/* ---- the routes --------------------------------------------------------- */

static void respond_conf(struct node *n, struct http_conn *c, const char *tenant, int status,
			 const char *extra_key, unsigned extra)
{
	struct kms_conf conf;
	struct db_rows rows;
	unsigned version = 0;
	const char *state;
	int64_t keys = 0;
	err_t err = { 0 };
	struct buf b;
	struct jw w;

	if (kms_conf_get(&n->kms, tenant, &conf, &err) < 0) {
		node_respond_err(c, &err);
		return;
	}
	state = kms_state(&n->kms, tenant, &version);
	if (db_query(n->db, &rows, &err, "SELECT count(*) FROM data_keys WHERE tenant_id=?", "s",
		     tenant) == 0) {
		keys = db_cell_int(&rows, 0, 0);
		db_rows_free(&rows);
	}
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "tenant");
	jw_str(&w, tenant);
	jw_key(&w, "provider");
	jw_str(&w, conf.provider);
	jw_key(&w, "configured");
	jw_bool(&w, conf.configured);
	if (strcmp(conf.provider, "local") == 0) {
		jw_key(&w, "key_id");
		jw_str(&w, conf.key_id);
		jw_key(&w, "key_version");
		jw_uint(&w, version);
	} else {
		jw_key(&w, "url");
		jw_str(&w, conf.url);
		jw_key(&w, "key_name");
		jw_str(&w, conf.key_name);
		jw_key(&w, "token_file");
		jw_str(&w, conf.token_file);
		/* how the data keys and the token travel, and what checks the
		 * service: paths and a public digest, never a secret */
		jw_key(&w, "transport");
		jw_str(&w, kms_transport(&conf));
		jw_key(&w, "insecure_http");
		jw_bool(&w, conf.insecure_http);
		jw_key(&w, "ca_file");
		jw_str(&w, conf.ca_file[0] ? conf.ca_file : NULL);
		jw_key(&w, "pin_sha256");
		jw_str(&w, conf.pin_sha256[0] ? conf.pin_sha256 : NULL);
		jw_key(&w, "client_cert");
		jw_str(&w, conf.client_cert[0] ? conf.client_cert : NULL);
		jw_key(&w, "client_key");
		jw_str(&w, conf.client_key[0] ? conf.client_key : NULL);
		if (strcmp(kms_transport(&conf), "http-insecure") == 0) {
			jw_key(&w, "warning");
			jw_str(&w, "insecure_http: the data keys and the token cross the network "
				   "in clear, and a revocation is taken from an answer nothing "
				   "authenticates");
		}
	}
	jw_key(&w, "state");
	jw_str(&w, state);
	jw_key(&w, "data_keys");
	jw_int(&w, keys);
	jw_key(&w, "encrypt_artifacts");
	jw_bool(&w, byok_on(n));
	if (extra_key) {
		jw_key(&w, extra_key);
		jw_uint(&w, extra);
	}
	jw_end(&w);
	http_respond_json(c, status, b.data);
	buf_free(&b);
}

static bool take_str(const json *body, const char *key, char *out, size_t cap, bool need,
		     struct http_conn *c)
{
	const json *v = json_get(body, key);

	if (!v && !need)
		return true;
	if (!v || v->type != JSON_STR || v->str_len == 0 || v->str_len >= cap ||
	    strlen(v->str) != v->str_len) {
		http_respond_error(c, 400, "invalid_field", "field `%s` is required: a string of "
				   "at most %zu bytes", key, cap - 1);
		return false;
	}
	snprintf(out, cap, "%s", v->str);
	return true;
}

static void encryption_put(struct node *n, struct http_req *req, struct http_conn *c,
			   const char *tenant)
{
	static const char *const allowed[] = { "provider", "key_id", "url", "key_name",
					       "token_file", "ca_file", "pin_sha256",
					       "client_cert", "client_key", "insecure_http", NULL };
	struct kms_conf conf = { 0 };
	json *body = node_body_object(req, c, allowed);
	unsigned moved = 0;
	err_t err = { 0 };
	bool ok;

	if (!body)
		return;
	ok = take_str(body, "provider", conf.provider, sizeof(conf.provider), true, c);
	if (ok && strcmp(conf.provider, "local") == 0) {
		ok = take_str(body, "key_id", conf.key_id, sizeof(conf.key_id), false, c);
		if (ok && !conf.key_id[0])
			snprintf(conf.key_id, sizeof(conf.key_id), "default");
	} else if (ok) {
		ok = take_str(body, "url", conf.url, sizeof(conf.url), true, c) &&
		     take_str(body, "key_name", conf.key_name, sizeof(conf.key_name), true, c) &&
		     take_str(body, "token_file", conf.token_file, sizeof(conf.token_file), true, c) &&
		     take_str(body, "ca_file", conf.ca_file, sizeof(conf.ca_file), false, c) &&
		     take_str(body, "pin_sha256", conf.pin_sha256, sizeof(conf.pin_sha256), false,
			      c) &&
		     take_str(body, "client_cert", conf.client_cert, sizeof(conf.client_cert),
			      false, c) &&
		     take_str(body, "client_key", conf.client_key, sizeof(conf.client_key), false,
			      c);
		if (ok) {
			bool bad = false;
			conf.insecure_http = json_get_bool(body, "insecure_http", false, &bad);
			if (bad) {
				http_respond_error(c, 400, "invalid_field",
						   "field `insecure_http`: true or false");
				ok = false;
			}
		}
	}
	json_free(body);
	if (!ok)
		return;
	if (kms_conf_set(&n->kms, tenant, &conf, &moved, &err) < 0) {
		if (err.code == EINVAL)
			http_respond_error(c, 400, "invalid_field", "%s", err.msg);
		else if (err.code == EKEYREVOKED)
			http_respond_error(c, 403, "key_revoked", "%s", err.msg);
		else
			http_respond_error(c, 502, "key_service", "%s", err.msg);
		return;
	}
	log_info("tenant %s: encryption set to %s (%u data keys rewrapped)", tenant, conf.provider,
		 moved);
	if (strcmp(kms_transport(&conf), "http-insecure") == 0)
		log_warn("tenant %s: insecure_http: its key service %s is reached over plain http",
			 tenant, conf.url);
	respond_conf(n, c, tenant, 200, "rewrapped", moved);
}

static void encryption_rotate(struct node *n, struct http_conn *c, const char *tenant)
{
	unsigned count = 0;
	err_t err = { 0 };

	if (kms_rotate(&n->kms, tenant, &count, &err) < 0) {
		if (err.code == EKEYREVOKED)
			http_respond_error(c, 403, "key_revoked", "%s", err.msg);
		else
			http_respond_error(c, 502, "key_service", "%s", err.msg);
		return;
	}
	log_info("tenant %s: rotated; %u data keys rewrapped", tenant, count);
	respond_conf(n, c, tenant, 200, "rewrapped", count);
}

void handle_tenant_encryption(struct node *n, struct http_req *req, struct http_conn *c,
			      const char *tenant, bool rotate)
{
	if (!ident_key_ok(tenant, CRYPT_NAME_MAX)) {
		http_respond_error(c, 400, "bad_request", "bad tenant id");
		return;
	}
	if (rotate) {
		if (!(strcmp(req->method, "POST") == 0))
			http_respond_error(c, 405, "method_not_allowed", "POST only");
		else
			encryption_rotate(n, c, tenant);
	} else if ((strcmp(req->method, "GET") == 0)) {
		respond_conf(n, c, tenant, 200, NULL, 0);
	} else if ((strcmp(req->method, "PUT") == 0)) {
		encryption_put(n, req, c, tenant);
	} else {
		http_respond_error(c, 405, "method_not_allowed", "GET or PUT");
	}
}
