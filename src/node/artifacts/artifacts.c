/* artifacts.c - a suspended sandbox's artifact set (artifacts.h): where
 * each object is, the manifest that names them, written by a suspend and
 * read back, with every field checked, by a restore; the jobs that move
 * the artifacts side by side; and the sweep of a sandbox's objects. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../byok/kms.h"
#include "../../lib/log.h"
#include "../../lib/sha256.h"
#include "artifacts.h"

const struct art_kind art_table[N_ARTIFACTS] = {
	{ "disk", NM_ARTIFACT_DISK },
	{ "memory", NM_ARTIFACT_MEM },
	{ "vmstate", NM_ARTIFACT_VMSTATE },
};

char *art_key(const struct sandbox *sb, const char *snap, const char *name)
{
	return xasprintf("sandboxes/%s/%s/%s", sb->id, snap, name);
}

char *art_staging_path(struct node *n, const struct sandbox *sb, const char *snap,
		       const char *name)
{
	return xasprintf("%s/%s-%s.%s", n->cfg->staging_dir, sb->id, snap, name);
}

int art_store_err(err_t *err, const char *what)
{
	int code = err->code;

	err_wrap(err, "object store: %s", what);
	if (code != EBADMSG && code != ENOENT)
		err->code = EHOSTUNREACH;
	return -err->code;
}

void art_delete_all(struct node *n, struct sandbox *sb, const char *snap)
{
	for (size_t i = 0; i <= N_ARTIFACTS; i++) {
		_cleanup_free_ char *key =
			art_key(sb, snap, i < N_ARTIFACTS ? art_table[i].name : "manifest.json");
		err_t e = { 0 };
		if (objstore_delete(n->os, key, &e) < 0)
			log_warn("sandbox %s: delete %s: %s", sb->id, key, e.msg);
	}
}

struct crypt_ctx art_seal_ctx(const struct sandbox *sb, const char *snap, const char *name)
{
	return (struct crypt_ctx){ sb->tenant, sb->id, name, snap };
}

char *art_manifest_text(struct node *n, struct sandbox *sb, const char *snap,
			const struct art arts[N_ARTIFACTS], const char *tuuid, const char *tsha,
			const struct mbase *mb)
{
	char cpus[32];
	struct buf b;
	struct jw w;

	(void)n;
	buf_init(&b);
	jw_init(&w, &b);
	jw_obj(&w);
	jw_key(&w, "format");
	jw_int(&w, 1);
	jw_key(&w, "sandbox");
	jw_str(&w, sb->id);
	jw_key(&w, "snapshot");
	jw_str(&w, snap);
	jw_key(&w, "kind");
	jw_str(&w, backend_suspend_kind(sb->be));
	jw_key(&w, "backend");
	jw_str(&w, sb->backend_name);
	jw_key(&w, "template");
	jw_obj(&w);
	jw_key(&w, "name");
	jw_str(&w, sb->template_name);
	jw_key(&w, "version");
	jw_uint(&w, sb->template_version);
	if (tuuid && tuuid[0]) {
		/* its build, published at templates/<name>/<uuid>.btrfs */
		jw_key(&w, "uuid");
		jw_str(&w, tuuid);
		/* the stream's digest: pinned, with the manifest, by the row */
		jw_key(&w, "sha256");
		jw_str(&w, tsha);
	}
	jw_end(&w);
	jw_key(&w, "shape");
	jw_obj(&w);
	jw_key(&w, "memory_mb");
	jw_uint(&w, sb->limits.memory_mb);
	jw_key(&w, "cpus");
	snprintf(cpus, sizeof(cpus), "%g", sb->limits.cpu_millis / 1000.0);
	jw_raw(&w, cpus);
	jw_key(&w, "disk_mb");
	jw_uint(&w, sb->limits.disk_mb);
	jw_end(&w);
	if (mb->sha[0]) {
		/* vm: the memory's base, published at
		 * templates/<name>/mem-<sha256>.zst; both digests pinned, with
		 * the manifest, by the row */
		jw_key(&w, "memory_base");
		jw_obj(&w);
		jw_key(&w, "sha256");
		jw_str(&w, mb->sha);
		jw_key(&w, "object_sha256");
		jw_str(&w, mb->osha);
		jw_key(&w, "object_size");
		jw_uint(&w, mb->osize);
		jw_end(&w);
	}
	jw_key(&w, "created_at");
	jw_int(&w, wall_ms());
	jw_key(&w, "artifacts");
	jw_obj(&w);
	for (size_t i = 0; i < N_ARTIFACTS; i++) {
		if (!arts[i].present)
			continue;
		jw_key(&w, art_table[i].name);
		jw_obj(&w);
		jw_key(&w, "size");
		jw_uint(&w, arts[i].size);
		jw_key(&w, "sha256");
		jw_str(&w, arts[i].sha);
		jw_end(&w);
	}
	jw_end(&w);
	jw_end(&w);
	return b.data;
}

/* The manifest is bytes from the store: checked against the digest the row
 * kept before it is parsed, then every field used is checked again. */
static bool uuid_text(const char *s)
{
	if (!s || strlen(s) != 36)
		return false;
	for (int i = 0; i < 36; i++)
		if ((i == 8 || i == 13 || i == 18 || i == 23)
			    ? s[i] != '-'
			    : !((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

/* BYOK: the sealed manifest's data key, which must be the one the row
 * names (want_key), unwrapped by the tenant's key; then the manifest
 * opened into *text. A suspend made with encrypt_artifacts = false has no
 * key in its row and a plaintext manifest. */
static int open_manifest(struct node *n, struct sandbox *sb, const char *snap,
			 const char *want_key, char **text, uint64_t *size, struct dkey **dk,
			 err_t *err)
{
	struct crypt_ctx cx = art_seal_ctx(sb, snap, "manifest.json");
	char hex[2 * CRYPT_REF_LEN + 1];
	struct crypt_head h;
	struct buf out;
	int r;

	if (!want_key[0])
		return 0;
	r = crypt_head_parse(*text, *size, &h, err);
	if (r <= 0)
		return r < 0 ? err_wrap(err, "artifact manifest.json")
			     : err_set(err, EBADMSG, "artifact manifest.json: truncated header");
	crypt_ref_hex(h.key_ref, hex);
	if (strcmp(hex, want_key) != 0)
		return err_set(err, EBADMSG, "artifact manifest.json: sealed under data key %.8s…, "
			       "not this suspend's %.8s…", hex, want_key);
	if ((r = kms_data_key_get(&n->kms, sb->tenant, h.key_ref, dk, err)) < 0)
		return r;
	buf_init(&out);
	if ((r = crypt_open_buf(*text, *size, (*dk)->k, &cx, &out, err)) < 0) {
		buf_free(&out);
		return r;
	}
	free(*text);
	*size = out.len;
	buf_addc(&out, '\0');
	*text = buf_steal(&out);
	return 0;
}

int art_manifest_read(struct node *n, struct sandbox *sb, const char *snap,
		      const char *want_sha, const char *want_key, struct art arts[N_ARTIFACTS],
		      char tuuid[37], char tsha[OBJSTORE_SHA256_HEX], struct mbase *mb,
		      struct dkey **dk, err_t *err)
{
	_cleanup_free_ char *key = art_key(sb, snap, "manifest.json");
	_cleanup_free_ char *text = NULL;
	char sha[OBJSTORE_SHA256_HEX];
	const json *a, *t, *b;
	uint64_t size = 0;
	json *m;
	int r = 0;

	if (objstore_get_buf(n->os, key, MANIFEST_MAX, &text, &size, err) < 0)
		return err_wrap(err, "artifact manifest.json");
	sha256_of(text, size, sha);
	/* the row pins the manifest: an older one replayed into the store
	 * (or any other) is refused before a byte of it is used */
	if (strcmp(sha, want_sha) != 0)
		return err_set(err, EBADMSG, "artifact manifest.json: SHA-256 %.16s… is not the "
			       "%.16s… recorded at suspend (replaced or replayed)", sha, want_sha);
	if ((r = open_manifest(n, sb, snap, want_key, &text, &size, dk, err)) < 0)
		return r;
	if (!(m = json_parse(text, size, err)))
		return err_wrap(err, "artifact manifest.json");
	t = json_get(m, "template");
	a = json_get(m, "artifacts");
	if (!json_get_str(m, "sandbox") || strcmp(json_get_str(m, "sandbox"), sb->id) ||
	    !json_get_str(m, "snapshot") || strcmp(json_get_str(m, "snapshot"), snap) ||
	    !t || !json_get_str(t, "name") || strcmp(json_get_str(t, "name"), sb->template_name) ||
	    !a || a->type != JSON_OBJ) {
		r = err_set(err, EBADMSG, "artifact manifest.json: not this sandbox's snapshot %s",
			    snap);
		goto out;
	}
	tuuid[0] = tsha[0] = '\0';
	if (json_get(t, "uuid")) {
		if (!uuid_text(json_get_str(t, "uuid")) || !sha256_hex_ok(json_get_str(t, "sha256"))) {
			r = err_set(err, EBADMSG, "artifact manifest.json: bad template uuid or digest");
			goto out;
		}
		snprintf(tuuid, 37, "%s", json_get_str(t, "uuid"));
		snprintf(tsha, OBJSTORE_SHA256_HEX, "%s", json_get_str(t, "sha256"));
	}
	memset(mb, 0, sizeof(*mb));
	if ((b = json_get(m, "memory_base"))) {
		const json *os = json_get(b, "object_size");
		if (b->type != JSON_OBJ || !sha256_hex_ok(json_get_str(b, "sha256")) ||
		    !sha256_hex_ok(json_get_str(b, "object_sha256")) || !os || os->type != JSON_NUM ||
		    !os->is_int || os->i <= 0 || (uint64_t)os->i > ARTIFACT_MAX) {
			r = err_set(err, EBADMSG, "artifact manifest.json: bad memory base");
			goto out;
		}
		snprintf(mb->sha, sizeof(mb->sha), "%s", json_get_str(b, "sha256"));
		snprintf(mb->osha, sizeof(mb->osha), "%s", json_get_str(b, "object_sha256"));
		mb->osize = (uint64_t)os->i;
	}
	for (size_t i = 0; i < N_ARTIFACTS; i++) {
		const json *e = json_get(a, art_table[i].name), *sz;
		if (!e)
			continue;
		sz = json_get(e, "size");
		if (e->type != JSON_OBJ || !sz || sz->type != JSON_NUM || !sz->is_int || sz->i < 0 ||
		    (uint64_t)sz->i > ARTIFACT_MAX || !sha256_hex_ok(json_get_str(e, "sha256"))) {
			r = err_set(err, EBADMSG, "artifact manifest.json: bad entry for %s",
				    art_table[i].name);
			goto out;
		}
		arts[i].present = true;
		arts[i].size = (uint64_t)sz->i;
		snprintf(arts[i].sha, sizeof(arts[i].sha), "%s", json_get_str(e, "sha256"));
	}
	if (!arts[0].present)
		r = err_set(err, EBADMSG, "artifact manifest.json: names no disk");
out:
	json_free(m);
	return r;
}

void art_job_start(struct art_job *j, void *(*fn)(void *))
{
	j->r = 0;
	j->started = false;
	if (!j->on)
		return;
	/* a thread each (this one's when none can be made) */
	if (pthread_create(&j->tid, NULL, fn, j) == 0)
		j->started = true;
	else
		fn(j);
}

int art_jobs_join(struct art_job *jobs, size_t nj, struct phases *ph,
		  const char *const names[N_ARTIFACTS], const char *const names2[N_ARTIFACTS],
		  err_t *err)
{
	int r = 0;

	for (size_t k = 0; k < nj; k++) {
		if (jobs[k].started)
			pthread_join(jobs[k].tid, NULL);
		if (jobs[k].us)
			phases_add(ph, names[jobs[k].i], jobs[k].us);
		if (jobs[k].up_us)
			phases_add(ph, names2[jobs[k].i], jobs[k].up_us);
		if (jobs[k].r < 0 && r == 0) {
			*err = jobs[k].err;
			r = jobs[k].r;
		}
	}
	return r;
}

void art_close_all(int fds[N_ARTIFACTS])
{
	for (size_t i = 0; i < N_ARTIFACTS; i++)
		if (fds[i] >= 0)
			close(TAKE_FD(fds[i]));
}

/* ---- sweeping a sandbox's objects -------------------------------------- */

/* Objects under sandboxes/<id>/ other than keep's (NULL: all of them). */
struct sweep {
	struct node *n;
	const char *keep;   /* "sandboxes/<id>/<snap>/" or NULL */
	int failed;         /* deletes that failed */
};

static int sweep_one(void *arg, const char *key, uint64_t size)
{
	struct sweep *sw = arg;
	err_t e = { 0 };

	(void)size;
	if (sw->keep && strncmp(key, sw->keep, strlen(sw->keep)) == 0)
		return 0;
	if (objstore_delete(sw->n->os, key, &e) < 0 && e.code != ENOENT) {
		log_warn("delete %s: %s", key, e.msg);
		sw->failed++;
	}
	return 0;
}

/* Every object under prefix but keep's; -EHOSTUNREACH when one stays. */
static int sweep_prefix(struct node *n, const char *id, const char *prefix, const char *keep)
{
	struct sweep sw = { n, keep, 0 };
	err_t e = { 0 };

	if (objstore_list(n->os, prefix, sweep_one, &sw, &e) < 0) {
		log_warn("sandbox %s: list its objects: %s", id, e.msg);
		return -EHOSTUNREACH;
	}
	return sw.failed ? -EHOSTUNREACH : 0;
}

void art_sweep_deleted(struct node *n, const char *id, unsigned attempt)
{
	_cleanup_free_ char *prefix = xasprintf("sandboxes/%s/", id);
	unsigned shift = attempt < 9 ? attempt : 9;
	uint64_t wait_ms = 1000ull << shift;

	if (!n->os || sweep_prefix(n, id, prefix, NULL) == 0) {
		if (attempt)
			log_info("sandbox %s: its objects deleted (try %u)", id, attempt + 1);
		return;
	}
	if (wait_ms > 300000)
		wait_ms = 300000;
	log_warn("sandbox %s: objects left in the store; trying again in %llu s", id,
		 (unsigned long long)(wait_ms / 1000));
	reaper_add(n, now_ms() + wait_ms, TIMER_STORE_SWEEP, id, attempt + 1);
}

int suspend_forget_objects(struct node *n, struct sandbox *sb, bool keep_current)
{
	_cleanup_free_ char *prefix = xasprintf("sandboxes/%s/", sb->id);
	_cleanup_free_ char *keep = NULL;
	struct state_fence f = state_fence();
	err_t e = { 0 };
	int r;

	if (!n->os)
		return 0;
	if (keep_current && sb->susp_snap)
		keep = xasprintf("sandboxes/%s/%s/", sb->id, sb->susp_snap);
	r = sweep_prefix(n, sb->id, prefix, keep);
	/* and the data keys of what went (a suspend cut off before its row
	 * left one behind) */
	if (state_fenced(n->db, sb->id,
			 db_exec(n->db, &e,
				 "DELETE FROM data_keys WHERE sandbox_id=? AND (? IS NULL OR id<>?)"
				 " AND " STATE_FENCE_OF_SQL,
				 "sss" STATE_FENCE_OF_TYPES, sb->id,
				 keep && sb->susp_key[0] ? sb->susp_key : NULL,
				 keep && sb->susp_key[0] ? sb->susp_key : NULL,
				 STATE_FENCE_OF_ARGS(f, sb->id)),
			 &e) < 0)
		log_warn("sandbox %s: forget its data keys: %s", sb->id, e.msg);
	return r;
}
