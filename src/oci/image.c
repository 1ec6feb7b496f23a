/* image.c - find the layers and the config of an image archive, and apply
 * them.
 *
 * Two forms, told apart by their files:
 *   docker save   manifest.json: [{"Config": PATH, "Layers": [PATH, ...]}]
 *   OCI layout    index.json -> (image index ->)* image manifest ->
 *                 {"config": {"digest"}, "layers": [{"digest"}, ...]}, each
 *                 blob at blobs/<alg>/<hex>
 * (docker 25 and later write both; manifest.json is read first.) The
 * archive is indexed once (names of its regular files, their offsets and
 * sizes); every JSON document is read with a size limit and parsed by
 * src/lib/json.c; a digest must look like one before it becomes a name. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <sys/utsname.h>

#include "../lib/sha256.h"
#include "oci.h"

#define INDEX_MAX 100000
#define INDEX_DEPTH 4

struct member {
	char *name;        /* cleaned (oci_clean_path) */
	char *link;        /* a symlink member: its target, resolved (archive_find); else NULL */
	uint64_t off, size;
};

struct archive {
	int fd;
	struct member *m;
	size_t n;
};

static void archive_free(struct archive *ar)
{
	for (size_t i = 0; i < ar->n; i++) {
		free(ar->m[i].name);
		free(ar->m[i].link);
	}
	free(ar->m);
}

/* dir/target with "." and ".." taken lexically, never above the archive's
 * top; NULL when it would go there. Only names inside the archive are
 * formed here: nothing on a file system is looked up. */
static char *join_lexical(const char *member, const char *target)
{
	_cleanup_free_ char *dir = xstrdup(member);
	char *slash = strrchr(dir, '/');
	struct buf out;
	const char *p;

	if (target[0] == '/')
		return NULL;
	if (slash)
		*slash = '\0';
	else
		dir[0] = '\0';
	_cleanup_free_ char *all = *dir ? xasprintf("%s/%s", dir, target) : xstrdup(target);
	buf_init(&out);
	for (p = all; *p;) {
		size_t n = strcspn(p, "/");
		if (n == 2 && !strncmp(p, "..", 2)) {
			char *up;
			if (!out.len) {
				buf_free(&out);
				return NULL;
			}
			up = strrchr(out.data, '/');
			out.len = up ? (size_t)(up - out.data) : 0;
			out.data[out.len] = '\0';
		} else if (n && !(n == 1 && *p == '.')) {
			if (out.len)
				buf_addc(&out, '/');
			buf_add(&out, p, n);
		}
		p += n;
		p += strspn(p, "/");
	}
	if (!out.len) {
		buf_free(&out);
		return NULL;
	}
	return buf_steal(&out);
}

/* Index the regular files of the outer tar, and its symlinks as names for
 * other members (older `docker save` links a layer it already wrote:
 * <id>/layer.tar -> ../<other>/layer.tar). Nothing else is kept. */
static int archive_index(struct archive *ar, int fd, err_t *err)
{
	struct oci_stream *s;
	struct tar_reader tr;
	struct tar_entry *e;
	char clean[TAR_NAME_MAX + 1];
	struct stat st;
	int r;

	memset(ar, 0, sizeof(*ar));
	if (fstat(fd, &st) < 0)
		return err_sys(err, "image archive");
	if (!(s = oci_stream_open(fd, 0, (uint64_t)st.st_size, err)))
		return -err->code;
	if (strcmp(oci_stream_kind(s), "tar")) {
		const char *kind = oci_stream_kind(s);
		/* members are found by their offsets in the file */
		r = err_set(err, EINVAL, "the image archive is compressed (%s): give the tar", kind);
		oci_stream_close(s);
		return r;
	}
	ar->fd = fd;
	tar_init(&tr, oci_stream_read, s);
	while ((r = tar_next(&tr, &e, err)) > 0) {
		char *link = NULL;

		if ((e->type != '0' && e->type != '2') || oci_clean_path(e->name, clean) < 0)
			continue;
		if (e->type == '2' && !(link = join_lexical(clean, e->linkname)))
			continue;
		if (ar->n >= INDEX_MAX) {
			r = err_set(err, EFBIG, "more than %d files in the image archive", INDEX_MAX);
			break;
		}
		ar->m = xrealloc(ar->m, (ar->n + 1) * sizeof(*ar->m));
		ar->m[ar->n].name = xstrdup(clean);
		ar->m[ar->n].link = link;
		ar->m[ar->n].off = tar_data_offset(&tr);
		ar->m[ar->n].size = e->size;
		ar->n++;
	}
	tar_free(&tr);
	oci_stream_close(s);
	if (r < 0) {
		archive_free(ar);
		memset(ar, 0, sizeof(*ar));
		return err_wrap(err, "image archive");
	}
	return 0;
}

/* The last member of that name (a later one in a tar wins), through at
 * most 8 symlink members; a regular file or NULL. */
static const struct member *archive_find(const struct archive *ar, const char *name)
{
	for (int hops = 0; hops <= 8; hops++) {
		const struct member *m = NULL;

		for (size_t i = ar->n; i-- > 0 && !m;)
			if (!strcmp(ar->m[i].name, name))
				m = &ar->m[i];
		if (!m || !m->link)
			return m;
		name = m->link;
	}
	return NULL;
}

static json *read_json(const struct archive *ar, const char *name, const char *what, err_t *err)
{
	const struct member *m = archive_find(ar, name);
	_cleanup_free_ char *d = NULL;
	json *j;

	if (!m)
		return err_set(err, ENOENT, "%s `%s` is not in the archive", what, name), NULL;
	if (m->size > OCI_JSON_MAX)
		return err_set(err, EFBIG, "%s `%s` is over %u bytes", what, name, OCI_JSON_MAX),
		       NULL;
	d = xmalloc((size_t)m->size + 1);
	if (pread(ar->fd, d, (size_t)m->size, (off_t)m->off) != (ssize_t)m->size)
		return err_set(err, EIO, "read %s", name), NULL;
	{
		_cleanup_free_ char *want = oci_blob_digest(name);
		unsigned char md[32];
		char hex[65];
		unsigned int n = 0;

		if (want) {
			if (!EVP_Digest(d, (size_t)m->size, md, &n, EVP_sha256(), NULL) || n != 32)
				return err_set(err, EIO, "sha256"), NULL;
			hex_encode(md, 32, hex);
			if (strcmp(hex, want + 7))
				return err_set(err, EBADMSG, "%s `%s`: its content does not match"
					       " its digest", what, name), NULL;
		}
	}
	j = json_parse(d, (size_t)m->size, err);
	if (!j)
		err_wrap(err, "%s `%s`", what, name);
	return j;
}

/* "sha256:<64 hex>" as "blobs/sha256/<hex>"; NULL for anything else (the
 * only algorithm checked, oci_stream_verify: a blob is never used unchecked). */
static char *blob_path(const char *digest)
{
	if (!digest || strncmp(digest, "sha256:", 7) || strlen(digest + 7) != 64 ||
	    strspn(digest + 7, "0123456789abcdef") != 64)
		return NULL;
	return xasprintf("blobs/sha256/%s", digest + 7);
}

struct plan {
	char *config;              /* archive name of the config blob */
	char *layers[OCI_MAX_LAYERS];
	size_t n_layers;
};

static void plan_free(struct plan *p)
{
	free(p->config);
	for (size_t i = 0; i < p->n_layers; i++)
		free(p->layers[i]);
}

static int plan_layer(struct plan *p, char *name, err_t *err)
{
	if (p->n_layers >= OCI_MAX_LAYERS) {
		free(name);
		return err_set(err, EFBIG, "more than %d layers", OCI_MAX_LAYERS);
	}
	p->layers[p->n_layers++] = name;
	return 0;
}

static int docker_plan(const struct archive *ar, struct plan *p, err_t *err)
{
	json *mf = read_json(ar, "manifest.json", "manifest", err);
	const json *img, *cfg, *layers;
	char clean[TAR_NAME_MAX + 1];
	int r = 0;

	if (!mf)
		return -err->code;
	img = mf->type == JSON_ARR && mf->n ? mf->items[0] : NULL;
	cfg = img && img->type == JSON_OBJ ? json_get(img, "Config") : NULL;
	layers = img && img->type == JSON_OBJ ? json_get(img, "Layers") : NULL;
	if (!cfg || cfg->type != JSON_STR || !layers || layers->type != JSON_ARR) {
		json_free(mf);
		return err_set(err, EINVAL, "manifest.json: want [{\"Config\": ..., \"Layers\": [...]}]");
	}
	if (oci_clean_path(cfg->str, clean) < 0) {
		json_free(mf);
		return err_set(err, EINVAL, "manifest.json: bad Config name");
	}
	p->config = xstrdup(clean);
	for (size_t i = 0; i < layers->n && r == 0; i++) {
		const json *l = layers->items[i];
		if (l->type != JSON_STR || oci_clean_path(l->str, clean) < 0)
			r = err_set(err, EINVAL, "manifest.json: bad Layers[%zu]", i);
		else
			r = plan_layer(p, xstrdup(clean), err);
	}
	json_free(mf);
	return r;
}

/* The Go names of this machine's architecture, as image platforms use. */
static const char *host_arch(void)
{
	static char other[sizeof(((struct utsname *)0)->machine)];
	struct utsname u;

	if (uname(&u) < 0 || !strcmp(u.machine, "x86_64"))
		return "amd64";
	if (!strcmp(u.machine, "aarch64"))
		return "arm64";
	snprintf(other, sizeof(other), "%s", u.machine);
	return other;
}

/* From an index's manifests, the one for linux on this architecture, else
 * the only one (or the first without a platform). */
static const json *pick_manifest(const json *list)
{
	const json *first = NULL;

	for (size_t i = 0; i < list->n; i++) {
		const json *d = list->items[i], *pl;
		const char *os, *arch;

		if (d->type != JSON_OBJ)
			continue;
		pl = json_get(d, "platform");
		if (!pl || pl->type != JSON_OBJ) {
			if (!first)
				first = d;
			continue;
		}
		os = json_get_str(pl, "os");
		arch = json_get_str(pl, "architecture");
		if (os && arch && !strcmp(os, "linux") && !strcmp(arch, host_arch()))
			return d;
	}
	return first ? first : list->n == 1 ? list->items[0] : NULL;
}

static int oci_plan(const struct archive *ar, struct plan *p, err_t *err)
{
	json *doc = read_json(ar, "index.json", "index", err);
	int r = 0;

	if (!doc)
		return -err->code;
	for (int depth = 0;; depth++) {
		const json *list = json_get(doc, "manifests"), *cfg, *layers, *pick;
		_cleanup_free_ char *path = NULL;

		if (list && list->type == JSON_ARR) {       /* an index: go down */
			if (depth >= INDEX_DEPTH) {
				r = err_set(err, ELOOP, "image indexes nested too deep");
				break;
			}
			pick = pick_manifest(list);
			path = pick ? blob_path(json_get_str(pick, "digest")) : NULL;
			if (!path) {
				r = err_set(err, EINVAL, "no usable manifest for linux/%s in the index",
					    host_arch());
				break;
			}
			json_free(doc);
			doc = read_json(ar, path, "manifest", err);
			if (!doc)
				return -err->code;
			continue;
		}
		cfg = json_get(doc, "config");
		layers = json_get(doc, "layers");
		if (!cfg || cfg->type != JSON_OBJ || !layers || layers->type != JSON_ARR ||
		    !(p->config = blob_path(json_get_str(cfg, "digest")))) {
			r = err_set(err, EINVAL, "image manifest: want config.digest and layers[]");
			break;
		}
		for (size_t i = 0; i < layers->n && r == 0; i++) {
			const json *l = layers->items[i];
			char *lp = l->type == JSON_OBJ ? blob_path(json_get_str(l, "digest")) : NULL;
			if (!lp)
				r = err_set(err, EINVAL, "image manifest: layers[%zu].digest is not"
					    " sha256:<hex>", i);
			else
				r = plan_layer(p, lp, err);
		}
		break;
	}
	json_free(doc);
	return r;
}

/* ---- the config ---- */

static int str_array(const json *a, const char *field, struct jw *w, err_t *err)
{
	if (a->type != JSON_ARR || a->n > 4096)
		return err_set(err, EINVAL, "config %s: want an array of at most 4096 strings", field);
	for (size_t i = 0; i < a->n; i++)
		if (a->items[i]->type != JSON_STR || a->items[i]->str_len > 65536)
			return err_set(err, EINVAL, "config %s[%zu]: want a string", field, i);
	jw_arr(w);
	for (size_t i = 0; i < a->n; i++)
		jw_str(w, a->items[i]->str);
	jw_end(w);
	return 0;
}

int oci_config_normalize(const json *doc, struct buf *out, err_t *err)
{
	const json *c = doc && doc->type == JSON_OBJ ? json_get(doc, "config") : NULL, *v;
	struct jw w;
	int r = 0;

	buf_reset(out);
	jw_init(&w, out);
	jw_obj(&w);
	if (!doc || doc->type != JSON_OBJ) {
		r = err_set(err, EINVAL, "image config: not an object");
		goto out;
	}
	if (!c || c->type == JSON_NULL)
		goto out;   /* no defaults */
	if (c->type != JSON_OBJ) {
		r = err_set(err, EINVAL, "image config: `config` is not an object");
		goto out;
	}
	if ((v = json_get(c, "Env")) && v->type != JSON_NULL) {
		if (v->type != JSON_ARR || v->n > 1024) {
			r = err_set(err, EINVAL, "config Env: want at most 1024 \"K=V\" strings");
			goto out;
		}
		jw_key(&w, "env");
		jw_obj(&w);
		for (size_t i = 0; i < v->n; i++) {
			const json *s = v->items[i];
			const char *eq = s->type == JSON_STR ? strchr(s->str, '=') : NULL;
			char key[257];

			if (!eq || eq == s->str || eq - s->str > 256 || strlen(eq + 1) > 32768) {
				r = err_set(err, EINVAL, "config Env[%zu]: want \"K=V\"", i);
				goto out;
			}
			snprintf(key, sizeof(key), "%.*s", (int)(eq - s->str), s->str);
			/* A later duplicate wins, as in a shell; keep the first
			 * place and skip the earlier value. */
			bool later = false;
			for (size_t k = i + 1; k < v->n && !later; k++)
				later = v->items[k]->type == JSON_STR &&
					!strncmp(v->items[k]->str, s->str, (size_t)(eq - s->str + 1));
			if (later)
				continue;
			jw_key(&w, key);
			jw_str(&w, eq + 1);
		}
		jw_end(&w);
	}
	if ((v = json_get(c, "WorkingDir")) && v->type != JSON_NULL) {
		if (v->type != JSON_STR || v->str_len > 4096 || (v->str[0] && v->str[0] != '/')) {
			r = err_set(err, EINVAL, "config WorkingDir: want an absolute path");
			goto out;
		}
		if (v->str[0]) {
			jw_key(&w, "workdir");
			jw_str(&w, v->str);
		}
	}
	if ((v = json_get(c, "User")) && v->type != JSON_NULL) {
		if (v->type != JSON_STR || v->str_len > 64 || strpbrk(v->str, "\n/")) {
			r = err_set(err, EINVAL, "config User: want a user name or uid[:gid]");
			goto out;
		}
		if (v->str[0]) {
			jw_key(&w, "user");
			jw_str(&w, v->str);
		}
	}
	if ((v = json_get(c, "Entrypoint")) && v->type != JSON_NULL) {
		jw_key(&w, "entrypoint");
		if ((r = str_array(v, "Entrypoint", &w, err)) < 0)
			goto out;
	}
	if ((v = json_get(c, "Cmd")) && v->type != JSON_NULL) {
		jw_key(&w, "cmd");
		if ((r = str_array(v, "Cmd", &w, err)) < 0)
			goto out;
	}
out:
	jw_end(&w);
	return r;
}

/* ---- the import ---- */

int oci_import(int fd, int root, const struct oci_limits *lim, struct buf *config_out,
	       FILE *progress, err_t *err)
{
	struct archive ar;
	struct plan p = { 0 };
	struct oci_applier a;
	json *cfg = NULL;
	int r;

	if ((r = archive_index(&ar, fd, err)) < 0)
		return r;
	if (archive_find(&ar, "manifest.json"))
		r = docker_plan(&ar, &p, err);
	else if (archive_find(&ar, "index.json"))
		r = oci_plan(&ar, &p, err);
	else
		r = err_set(err, EINVAL, "neither a docker-save archive (manifest.json) nor an OCI"
			    " image layout (index.json)");
	if (r < 0)
		goto out;
	/* Every part must be there before anything is written. */
	if (!(cfg = read_json(&ar, p.config, "config", err))) {
		r = -err->code;
		goto out;
	}
	if ((r = oci_config_normalize(cfg, config_out, err)) < 0)
		goto out;
	for (size_t i = 0; i < p.n_layers; i++)
		if (!archive_find(&ar, p.layers[i])) {
			r = err_set(err, ENOENT, "the manifest names layer %zu `%s`, which is not in"
				    " the archive", i + 1, p.layers[i]);
			goto out;
		}
	oci_applier_init(&a, root, lim);
	for (size_t i = 0; i < p.n_layers && r == 0; i++) {
		const struct member *m = archive_find(&ar, p.layers[i]);
		struct oci_stream *s = oci_stream_open(fd, m->off, m->size, err);
		struct tar_reader tr;
		char label[300];

		if (!s) {
			r = -err->code;
			break;
		}
		snprintf(label, sizeof(label), "layer %zu (%.200s)", i + 1, p.layers[i]);
		{
			/* A blob of a layout is named by its digest: check it (after
			 * the layer is applied; a mismatch fails the whole build,
			 * which is then thrown away). */
			_cleanup_free_ char *want = oci_blob_digest(p.layers[i]);
			if (want && (r = oci_stream_expect(s, want, err)) < 0) {
				oci_stream_close(s);
				break;
			}
		}
		/* "layer I/N": the node passes it on as the build's progress */
		if (progress)
			fprintf(progress, "oci: applying layer %zu/%zu (%.200s), %s, %llu bytes\n",
				i + 1, p.n_layers, p.layers[i], oci_stream_kind(s),
				(unsigned long long)m->size), fflush(progress);
		tar_init(&tr, oci_stream_read, s);
		r = oci_apply_layer(&a, &tr, label, err);
		if (r == 0 && (r = oci_stream_verify(s, err)) < 0)
			err_wrap(err, "%s", label);
		tar_free(&tr);
		oci_stream_close(s);
	}
	if (r == 0 && progress)
		fprintf(progress, "oci: %zu layer(s), %llu entries, %llu bytes of files\n",
			p.n_layers, (unsigned long long)a.entries, (unsigned long long)a.bytes);
	oci_applier_free(&a);
out:
	json_free(cfg);
	plan_free(&p);
	archive_free(&ar);
	return r;
}
