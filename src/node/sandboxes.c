/* GET /v1/sandboxes (a page of the tenant's sandboxes, filtered) and GET
 * /v1/sandboxes/{id}: the handlers over the model's map and JSON form
 * (model/sandbox.c). */
#include <stdio.h>
#include <string.h>

#include "../lib/page.h"
#include "node-internal.h"

struct list_filter {
	int state;               /* -1 = any */
	const char *template_name;
	const char *keys[16], *vals[16];
	size_t n_meta;
	char *owned[40];
	size_t n_owned;
	const char *bad;
};

static bool filter_param(void *arg, const char *k, const char *v)
{
	struct list_filter *f = arg;

	if (f->n_owned + 2 > ARRAY_SIZE(f->owned)) {
		f->bad = "too many query parameters";
		return true;
	}
	if (strcmp(k, "state") == 0) {
		f->state = state_parse(v);
		if (f->state < 0)
			f->bad = "unknown state";
	} else if (strcmp(k, "template") == 0) {
		f->template_name = f->owned[f->n_owned++] = xstrdup(v);
	} else if (strncmp(k, "metadata.", 9) == 0) {
		if (f->n_meta == ARRAY_SIZE(f->keys)) {
			f->bad = "too many metadata filters";
			return true;
		}
		f->keys[f->n_meta] = f->owned[f->n_owned++] = xstrdup(k + 9);
		f->vals[f->n_meta++] = f->owned[f->n_owned++] = xstrdup(v);
	}
	/* Other parameters are ignored. */
	return true;
}

static bool filter_match(const struct list_filter *f, struct sandbox *sb)
{
	bool ok;

	pthread_mutex_lock(&sb->mu);
	ok = sb->state != SB_DELETED && (f->state < 0 || (int)sb->state == f->state);
	pthread_mutex_unlock(&sb->mu);
	if (!ok)
		return false;
	if (f->template_name && strcmp(f->template_name, sb->template_name) != 0)
		return false;
	for (size_t i = 0; i < f->n_meta; i++) {
		const char *v = sb->metadata ? json_get_str(sb->metadata, f->keys[i]) : NULL;
		if (!v || strcmp(v, f->vals[i]) != 0)
			return false;
	}
	return true;
}

void handle_sandboxes_list(struct node *n, struct http_req *req, struct http_conn *c,
			   const char *tenant)
{
	enum { BATCH = 64 };
	struct list_filter f = { .state = -1 };
	struct sandbox *v[BATCH];
	struct page pg;
	struct buf b;
	struct jw w;
	bool cursor;
	int64_t ms;
	char id[PAGE_ID_MAX + 1];
	size_t k;

	http_query_each(req->query, filter_param, &f);
	if (f.bad) {
		http_respond_error(c, 400, "invalid_field", "%s", f.bad);
		goto out;
	}
	if (page_from_req(&pg, req, false, c) < 0)
		goto out;
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "sandboxes");
	jw_arr(&w);
	/* Keyset page: the first `limit` matches after the cursor, in
	 * (created_at, id) order; one more match means there is a next page.
	 * Taken in batches from the tenant's ordered index, each from the last
	 * key seen, so sandboxes made or deleted meanwhile move nothing. */
	cursor = pg.has_cursor;
	ms = pg.after_ms;
	snprintf(id, sizeof(id), "%s", pg.after_id);
	do {
		k = sandbox_list_take(n, tenant, cursor, ms, id, v, BATCH);
		for (size_t i = 0; i < k; i++) {
			if (filter_match(&f, v[i]) && page_take(&pg, v[i]->created_at, v[i]->id))
				sandbox_render(&w, v[i]);
			cursor = true;
			ms = v[i]->created_at;
			snprintf(id, sizeof(id), "%s", v[i]->id);
			sandbox_unref(v[i]);
		}
	} while (k == BATCH && !pg.more);
	jw_end(&w);
	page_write_next(&pg, &w);
	jw_end(&w);
	http_respond_json(c, 200, b.data);
	buf_free(&b);
out:
	for (size_t i = 0; i < f.n_owned; i++)
		free(f.owned[i]);
}

void handle_sandbox_get(struct node *n, struct sandbox *sb, struct http_conn *c)
{
	sandbox_respond(c, 200, sb);
}
