/* tmplstore.c - template versions in the object store, so that a suspended
 * sandbox can come back on a node that never built its template.
 *
 * A disk artifact is a `btrfs send -p <template>` stream: it can only be
 * received on top of that very template build, found by its identity (the
 * template subvolume's received uuid, nodemgr). So a suspend first
 * publishes its template version once: a full send stream under
 *
 *     templates/<name>/<uuid>.btrfs
 *
 * (kept; its uuid is recorded in the templates row and named by every
 * manifest that needs it). A restore looks for a local version with that
 * identity (nm_template_find) and, when there is none, downloads the stream
 * (checked against the digest stored with it), has nodemgr receive it as a
 * new local version of the name, and records that version (source
 * `store`). Restores that need the same identity at once share one
 * download: the first fetches, the others wait for its result.
 *
 * A vm sandbox's memory artifact is a difference from a RAM file (its
 * "base": the template's memory snapshot of its shape on the node that
 * suspended it), which every node boots for itself. So the base travels
 * too, by content: a suspend publishes it once as
 *
 *     templates/<name>/mem-<sha256 of the RAM file>.zst
 *
 * and the manifest names its digest and the object's. A restore asks
 * nodemgr for a base with that digest (its own template file, or one it
 * received before); when there is none it downloads the object (checked
 * against the manifest's object digest), and nodemgr decompresses it into
 * its own cache, keeping it only when the content's SHA-256 is the one
 * named (vm-base.c). Same single flight as the template streams.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/log.h"
#include "../../lib/pipe.h"
#include "../../objstore/objstore.h"
#include "../cluster/cluster.h"
#include "tmplstore.h"

struct tfetch {
	struct tfetch *next;
	char key[80];   /* "t:<uuid>" or "m:<sha256>" */
	bool done;
	int rc;
	uint32_t version;
	err_t err;
	int waiters;
	pthread_cond_t cv;
};

static char *object_key(const char *name, const char *uuid)
{
	return xasprintf("templates/%s/%s.btrfs", name, uuid);
}

/* A staging file for a stream, open read-write and already unlinked. */
static int staging_fd(struct node *n, const char *what, err_t *err)
{
	_cleanup_free_ char *rnd = random_id("t-", 8);
	_cleanup_free_ char *path = xasprintf("%s/%s.%s", n->cfg->staging_dir, rnd, what);
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);

	if (fd < 0)
		return err_sys(err, "open %s", path);
	unlink(path);
	return fd;
}

int tmplstore_publish(struct node *n, const char *name, uint32_t version, char uuid[37],
		      char sha[OBJSTORE_SHA256_HEX], err_t *err)
{
	_cleanup_free_ char *key = NULL;
	struct db_rows rows;
	uint64_t size = 0;
	int64_t sent = 0;
	int fd, r;

	if (!n->os)
		return err_set(err, EOPNOTSUPP, "no object store");
	uuid[0] = '\0';
	if (db_query(n->db, &rows, err,
		     "SELECT uuid FROM templates WHERE node=? AND name=? AND version=?", "ssi",
		     node_me(n), name, (int64_t)version) < 0)
		return -err->code;
	if (rows.n_rows == 1 && db_cell(&rows, 0, 0) && strlen(db_cell(&rows, 0, 0)) == 36)
		snprintf(uuid, 37, "%s", db_cell(&rows, 0, 0));
	db_rows_free(&rows);
	if (uuid[0]) {
		key = object_key(name, uuid);
		r = objstore_head(n->os, key, &size, sha, err);
		if (r == 0)
			return 0;   /* published before */
		if (r != -ENOENT)
			return r;
	}
	/* One publish at a time: the first suspend of each version pays it
	 * (or the publisher, when it became ready). */
	pthread_mutex_lock(&n->tpub_mu);
	if (db_query(n->db, &rows, err,
		     "SELECT uuid FROM templates WHERE node=? AND name=? AND version=?", "ssi",
		     node_me(n), name, (int64_t)version) == 0) {
		bool have = rows.n_rows == 1 && db_cell(&rows, 0, 0) &&
			    strlen(db_cell(&rows, 0, 0)) == 36;
		if (have)
			snprintf(uuid, 37, "%s", db_cell(&rows, 0, 0));
		db_rows_free(&rows);
		free(key);
		key = have ? object_key(name, uuid) : NULL;
		if (key && objstore_head(n->os, key, &size, sha, err) == 0) {
			r = 0;   /* published meanwhile (the publisher, or another suspend) */
			goto out;
		}
	}
	if ((fd = staging_fd(n, "btrfs", err)) < 0) {
		r = fd;
		goto out;
	}
	r = nm_template_export(n->cfg->nm_sock, name, version, fd, uuid, &sent, err);
	if (r == 0) {
		free(key);
		key = object_key(name, uuid);
		if (objstore_head(n->os, key, &size, sha, err) == 0) {
			r = 0;   /* another node published the same build */
		} else if (lseek(fd, 0, SEEK_SET) < 0) {
			r = err_sys(err, "rewind the template stream");
		} else {
			r = objstore_put_fd(n->os, key, fd, (uint64_t)sent, sha, err);
			if (r == 0)
				log_info("template %s/%u published as %s (%lld bytes)", name, version,
					 key, (long long)sent);
		}
	}
	close(fd);
	/* fenced as every write of the node's own rows (model/state.h) */
	if (r == 0)
		r = state_fenced(n->db, NULL,
				 db_exec(n->db, err,
					 "UPDATE templates SET uuid=? WHERE node=? AND name=? AND"
					 " version=? AND " STATE_FENCE_SELF_SQL,
					 "sssi" STATE_FENCE_SELF_TYPES, uuid, node_me(n), name,
					 (int64_t)version, STATE_FENCE_SELF_ARGS(state_fence())),
				 err);
	if (r > 0)
		r = 0;
out:
	pthread_mutex_unlock(&n->tpub_mu);
	return r < 0 ? err_wrap(err, "publish template %s/%u", name, version) : 0;
}

/* Download the stream and have nodemgr receive it as a new local version. */
static int fetch(struct node *n, const char *name, const char *uuid, const char *want_sha,
		 uint32_t *version, err_t *err)
{
	char sha[OBJSTORE_SHA256_HEX] = "";
	_cleanup_free_ char *key = object_key(name, uuid);
	struct db_rows rows;
	uint32_t next = 1;
	uint64_t size = 0;
	uint64_t t0 = now_us();
	int fd, r;

	if ((fd = staging_fd(n, "btrfs", err)) < 0)
		return fd;
	r = objstore_get_fd(n->os, key, fd, &size, sha, err);
	if (r == 0 && want_sha && want_sha[0] && strcmp(sha, want_sha) != 0)
		r = err_set(err, EBADMSG, "SHA-256 %.16s… is not the %.16s… its manifest names", sha,
			    want_sha);
	if (r < 0) {
		close(fd);
		return err_wrap(err, "template %s (%s)", name, uuid);
	}
	/* Local versions are numbered per node (the table's highest + 1). */
	if (db_query(n->db, &rows, err, "SELECT MAX(version) FROM templates WHERE node=? AND name=?",
		     "ss", node_me(n), name) == 0) {
		if (rows.n_rows == 1 && db_cell(&rows, 0, 0))
			next = (uint32_t)db_cell_int(&rows, 0, 0) + 1;
		db_rows_free(&rows);
	}
	if (lseek(fd, 0, SEEK_SET) < 0)
		r = err_sys(err, "rewind the template stream");
	else
		r = nm_template_import(n->cfg->nm_sock, name, uuid, next, fd, version, err);
	close(fd);
	if (r < 0)
		return r;
	r = db_exec(n->db, err,
		    "INSERT INTO templates(node, name, version, status, source, created_at, uuid)"
		    " SELECT ?,?,?,'ready','store',?,? WHERE " STATE_FENCE_SELF_SQL,
		    "ssiis" STATE_FENCE_SELF_TYPES, node_me(n), name, (int64_t)*version, wall_ms(),
		    uuid, STATE_FENCE_SELF_ARGS(state_fence()));
	if ((r = state_fenced(n->db, NULL, r, err)) < 0)
		return r;
	__atomic_add_fetch(&n->tstore_fetches, 1, __ATOMIC_RELAXED);
	log_info("template %s (%s) fetched from the object store as version %u: %llu bytes in "
		 "%.1f ms", name, uuid, *version, (unsigned long long)size,
		 (now_us() - t0) / 1000.0);
	cluster_poke(n);
	return 0;
}

/* One download per key at a time: find says whether it is here (0) or
 * not (-ENOENT); work fetches it. Whoever asks meanwhile waits for the
 * first one's result. */
typedef int (*flight_fn)(struct node *n, void *arg, uint32_t *version, err_t *err);

static int single_flight(struct node *n, const char *key, flight_fn find, flight_fn work,
			 void *arg, uint32_t *version, err_t *err)
{
	struct tfetch *f;
	int r;

	r = find(n, arg, version, err);
	if (r != -ENOENT)
		return r;
	pthread_mutex_lock(&n->tstore_mu);
	for (f = n->tfetches; f; f = f->next)
		if (!strcmp(f->key, key))
			break;
	if (f) {
		f->waiters++;
		while (!f->done)
			pthread_cond_wait(&f->cv, &n->tstore_mu);
		r = f->rc;
		*version = f->version;
		if (r < 0)
			*err = f->err;
		if (--f->waiters == 0) {
			/* done, so the fetcher has unlinked it: the last waiter frees it */
			pthread_cond_destroy(&f->cv);
			free(f);
		}
		pthread_mutex_unlock(&n->tstore_mu);
		return r;
	}
	f = xcalloc(1, sizeof(*f));
	snprintf(f->key, sizeof(f->key), "%s", key);
	pthread_cond_init(&f->cv, NULL);
	f->next = n->tfetches;
	n->tfetches = f;
	pthread_mutex_unlock(&n->tstore_mu);

	/* Found meanwhile (another path received it)? Then no download. */
	r = find(n, arg, version, err);
	if (r == -ENOENT)
		r = work(n, arg, version, err);

	pthread_mutex_lock(&n->tstore_mu);
	for (struct tfetch **pp = &n->tfetches; *pp; pp = &(*pp)->next)
		if (*pp == f) {
			*pp = f->next;
			break;
		}
	f->next = NULL;
	f->done = true;
	f->rc = r;
	f->version = *version;
	if (r < 0)
		f->err = *err;
	pthread_cond_broadcast(&f->cv);
	if (f->waiters == 0) {
		pthread_cond_destroy(&f->cv);
		free(f);
	}
	pthread_mutex_unlock(&n->tstore_mu);
	return r;
}

struct tmpl_want {
	const char *name, *uuid, *sha;
};

static int tmpl_find(struct node *n, void *arg, uint32_t *version, err_t *err)
{
	struct tmpl_want *w = arg;

	return nm_template_find(n->cfg->nm_sock, w->name, w->uuid, version, err);
}

static int tmpl_work(struct node *n, void *arg, uint32_t *version, err_t *err)
{
	struct tmpl_want *w = arg;

	return fetch(n, w->name, w->uuid, w->sha, version, err);
}

int tmplstore_fetch(struct node *n, const char *name, const char *uuid, const char *sha,
		    uint32_t *version, err_t *err)
{
	struct tmpl_want w = { name, uuid, sha };
	char key[80];

	if (!n->os)
		return err_set(err, EOPNOTSUPP, "no object store");
	snprintf(key, sizeof(key), "t:%s", uuid);
	return single_flight(n, key, tmpl_find, tmpl_work, &w, version, err);
}

/* ---- vm memory bases ------------------------------------------------------ */

static char *base_key(const char *name, const char *sha)
{
	return xasprintf("templates/%s/mem-%s.zst", name, sha);
}

int membase_publish(struct node *n, const struct nm_sandbox_spec *spec, const char *want,
		    char sha[65], char osha[65], uint64_t *osize, err_t *err)
{
	_cleanup_free_ char *key = NULL;
	char got[65] = "";
	uint64_t size = 0;
	int64_t bytes = 0;
	uint64_t t0 = now_us();
	int fd, r;

	if (!n->os)
		return err_set(err, EOPNOTSUPP, "no object store");
	if (want && want[0]) {
		if (sha != want)
			snprintf(sha, 65, "%s", want);
	} else if ((r = nm_vm_base_find(n->cfg->nm_sock, spec, "", sha, &size, err)) < 0) {
		return r;
	}
	key = base_key(spec->template_name, sha);
	if (objstore_head(n->os, key, osize, osha, err) == 0)
		return 0;   /* published before */
	/* One publish at a time: the first suspend of each base pays it.
	 * Asked again under the lock: a publish running here (the one when
	 * the template became ready) is done then, and a store whose objects
	 * appear before their metadata (s3rver) showed this one half made. */
	pthread_mutex_lock(&n->tpub_mu);
	*err = (err_t){ 0 };
	if ((r = objstore_head(n->os, key, osize, osha, err)) != -ENOENT)
		goto out;   /* published meanwhile (0), or the store failed */
	if ((fd = staging_fd(n, "mem", err)) < 0) {
		r = fd;
		goto out;
	}
	r = nm_vm_base_export(n->cfg->nm_sock, spec, fd, got, &size, &bytes, err);
	if (r == 0 && strcmp(got, sha) != 0)
		r = err_set(err, EAGAIN, "the template's memory snapshot was made again meanwhile");
	if (r == 0) {
		if (objstore_head(n->os, key, osize, osha, err) == 0) {
			r = 0;   /* another suspend here published it meanwhile */
		} else if (lseek(fd, 0, SEEK_SET) < 0) {
			r = err_sys(err, "rewind the memory base");
		} else {
			r = objstore_put_fd(n->os, key, fd, (uint64_t)bytes, osha, err);
			*osize = (uint64_t)bytes;
			if (r == 0)
				log_info("memory base %.16s… of %s/%u published as %s: %llu bytes of "
					 "RAM as %lld in %.1f ms", sha, spec->template_name,
					 spec->template_version, key, (unsigned long long)size,
					 (long long)bytes, (now_us() - t0) / 1000.0);
		}
	}
	close(fd);
out:
	pthread_mutex_unlock(&n->tpub_mu);
	return r < 0 ? err_wrap(err, "publish memory base %.16s…", sha) : 0;
}

struct base_want {
	const struct nm_sandbox_spec *spec;
	const char *sha, *osha;
	uint64_t osize;
};

static int base_find(struct node *n, void *arg, uint32_t *version, err_t *err)
{
	struct base_want *w = arg;

	(void)version;
	return nm_vm_base_find(n->cfg->nm_sock, w->spec, w->sha, NULL, NULL, err);
}

/* One fetch of a memory base: the download and nodemgr's import of it. */
struct base_pipe {
	struct node *n;
	struct base_want *w;
	const char *key;
	uint64_t size;
};

static int base_get(void *arg, int fd, err_t *err)
{
	struct base_pipe *p = arg;
	char sha[OBJSTORE_SHA256_HEX] = "";
	int r = objstore_get_fd(p->n->os, p->key, fd, &p->size, sha, err);

	/* the object the manifest pins */
	if (r == 0 && (strcmp(sha, p->w->osha) != 0 || p->size != p->w->osize))
		r = err_set(err, EBADMSG, "%s: %llu bytes with SHA-256 %.16s…, the manifest names "
			    "%llu bytes %.16s…", p->key, (unsigned long long)p->size, sha,
			    (unsigned long long)p->w->osize, p->w->osha);
	return r;
}

static int base_put(void *arg, int fd, err_t *err)
{
	struct base_pipe *p = arg;

	return nm_vm_base_import(p->n->cfg->nm_sock, p->w->spec, p->w->sha, fd, err);
}

/* The download goes into nodemgr's decompression as it arrives (a file
 * first, then the import, took the two one after the other). nodemgr
 * decompresses at most the shape's RAM into a temporary file and keeps it
 * only if what came out has the digest the manifest names, so a corrupted
 * object is never used; the object's own digest fails the fetch too. */
static int base_work(struct node *n, void *arg, uint32_t *version, err_t *err)
{
	struct base_want *w = arg;
	_cleanup_free_ char *key = base_key(w->spec->template_name, w->sha);
	struct base_pipe p = { n, w, key, 0 };
	uint64_t t0 = now_us();
	int r;

	(void)version;
	if ((r = pipe_run(base_get, &p, base_put, &p, 1 << 20, NULL, NULL, err)) < 0)
		return r;
	__atomic_add_fetch(&n->tstore_fetches, 1, __ATOMIC_RELAXED);
	log_info("memory base %.16s… of template %s fetched from the object store: %llu bytes in "
		 "%.1f ms", w->sha, w->spec->template_name, (unsigned long long)p.size,
		 (now_us() - t0) / 1000.0);
	return 0;
}

int membase_fetch(struct node *n, const struct nm_sandbox_spec *spec, const char *sha,
		  const char *osha, uint64_t osize, err_t *err)
{
	struct base_want w = { spec, sha, osha, osize };
	uint32_t v = 0;
	char key[80];
	int r;

	if (!n->os)
		return err_set(err, EOPNOTSUPP, "no object store");
	snprintf(key, sizeof(key), "m:%s", sha);
	r = single_flight(n, key, base_find, base_work, &w, &v, err);
	return r < 0 ? err_wrap(err, "memory base %.16s…", sha) : 0;
}

/* ---- the publisher -------------------------------------------------------- */

struct pubjob {
	struct pubjob *next;
	bool base;
	char name[65];
	uint32_t version;
	struct nm_sandbox_spec spec;   /* base: the template and shape */
	char key[120];
};

static bool pub_seen_locked(struct node *n, const char *key)
{
	for (size_t i = 0; i < ARRAY_SIZE(n->pub_done); i++)
		if (n->pub_done[i] && !strcmp(n->pub_done[i], key))
			return true;
	for (struct pubjob *j = n->pub_q; j; j = j->next)
		if (!strcmp(j->key, key))
			return true;
	return false;
}

static void pub_queue(struct node *n, struct pubjob *j)
{
	pthread_mutex_lock(&n->pub_mu);
	if (!n->pub_started || n->pub_stop || pub_seen_locked(n, j->key)) {
		pthread_mutex_unlock(&n->pub_mu);
		free(j);
		return;
	}
	struct pubjob **pp = &n->pub_q;
	while (*pp)
		pp = &(*pp)->next;
	*pp = j;
	pthread_cond_broadcast(&n->pub_cv);
	pthread_mutex_unlock(&n->pub_mu);
}

void tmplstore_queue_template(struct node *n, const char *name, uint32_t version)
{
	struct pubjob *j;

	if (!n->os)
		return;
	j = xcalloc(1, sizeof(*j));
	snprintf(j->name, sizeof(j->name), "%s", name);
	j->version = version;
	snprintf(j->key, sizeof(j->key), "t:%s/%u", name, version);
	pub_queue(n, j);
}

void tmplstore_queue_base(struct node *n, const struct nm_sandbox_spec *spec)
{
	struct pubjob *j;

	if (!n->os)
		return;
	j = xcalloc(1, sizeof(*j));
	j->base = true;
	j->spec = *spec;
	snprintf(j->name, sizeof(j->name), "%s", spec->template_name);
	j->version = spec->template_version;
	snprintf(j->key, sizeof(j->key), "m:%s/%u/%llu/%u", spec->template_name,
		 spec->template_version, (unsigned long long)spec->limits.memory_mb,
		 spec->limits.cpu_millis);
	pub_queue(n, j);
}

static void *pub_main(void *arg)
{
	struct node *n = arg;

	pthread_mutex_lock(&n->pub_mu);
	for (;;) {
		struct pubjob *j;
		char uuid[37], sha[OBJSTORE_SHA256_HEX], osha[OBJSTORE_SHA256_HEX];
		uint64_t osize = 0;
		err_t err = { 0 };
		int r;

		while (!n->pub_stop && !n->pub_q)
			pthread_cond_wait(&n->pub_cv, &n->pub_mu);
		if (n->pub_stop)
			break;
		j = n->pub_q;
		n->pub_q = j->next;
		pthread_mutex_unlock(&n->pub_mu);
		if (j->base)
			r = membase_publish(n, &j->spec, NULL, sha, osha, &osize, &err);
		else
			r = tmplstore_publish(n, j->name, j->version, uuid, sha, &err);
		pthread_mutex_lock(&n->pub_mu);
		if (r == 0 || r == -ENOENT) {
			/* done (or nothing to publish: no memory snapshot of that
			 * shape; a suspend publishes what it needs anyway) */
			unsigned i = n->pub_done_next++ % ARRAY_SIZE(n->pub_done);
			free(n->pub_done[i]);
			n->pub_done[i] = xstrdup(j->key);
		} else {
			/* a suspend publishes it when it needs it (the fallback) */
			log_warn("publisher: %s", err.msg);
		}
		free(j);
	}
	pthread_mutex_unlock(&n->pub_mu);
	return NULL;
}

void tmplstore_start(struct node *n)
{
	struct db_rows rows;
	err_t err = { 0 };

	pthread_mutex_init(&n->pub_mu, NULL);
	pthread_cond_init(&n->pub_cv, NULL);
	n->pub_init = true;
	if (!n->os)
		return;
	if (pthread_create(&n->pub_thread, NULL, pub_main, n) != 0) {
		log_warn("publisher: cannot start its thread; templates go at their first suspend");
		return;
	}
	n->pub_started = true;
	/* every ready version of this node not published yet (a build of an
	 * earlier run, or one the store was down for) */
	if (db_query(n->db, &rows, &err,
		     "SELECT name, version FROM templates WHERE node=? AND status='ready' AND"
		     " (uuid IS NULL OR uuid='')", "s", node_me(n)) < 0) {
		log_warn("publisher: %s", err.msg);
		return;
	}
	for (int i = 0; i < rows.n_rows; i++)
		if (db_cell(&rows, i, 0) && db_cell(&rows, i, 1))
			tmplstore_queue_template(n, db_cell(&rows, i, 0),
						 (uint32_t)db_cell_int(&rows, i, 1));
	db_rows_free(&rows);
}

void tmplstore_stop(struct node *n)
{
	if (!n->pub_init)
		return;
	if (n->pub_started) {
		pthread_mutex_lock(&n->pub_mu);
		n->pub_stop = true;
		pthread_cond_broadcast(&n->pub_cv);
		pthread_mutex_unlock(&n->pub_mu);
		pthread_join(n->pub_thread, NULL);
		n->pub_started = false;
	}
	while (n->pub_q) {
		struct pubjob *j = n->pub_q;
		n->pub_q = j->next;
		free(j);
	}
	for (size_t i = 0; i < ARRAY_SIZE(n->pub_done); i++) {
		free(n->pub_done[i]);
		n->pub_done[i] = NULL;
	}
	pthread_cond_destroy(&n->pub_cv);
	pthread_mutex_destroy(&n->pub_mu);
}
