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
 * vm templates are not published: a vm's memory artifact is a difference
 * from the template's memory snapshot, which each node boots for itself,
 * so a vm sandbox comes back on the node that suspended it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../lib/log.h"
#include "../objstore/objstore.h"
#include "node-internal.h"

struct tfetch {
	struct tfetch *next;
	char uuid[37];
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
	/* One publish at a time: the first suspend of each version pays it. */
	pthread_mutex_lock(&n->tstore_mu);
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
	if (r == 0 && db_exec(n->db, err,
			      "UPDATE templates SET uuid=? WHERE node=? AND name=? AND version=?",
			      "sssi", uuid, node_me(n), name, (int64_t)version) < 0)
		r = -err->code;
out:
	pthread_mutex_unlock(&n->tstore_mu);
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
	if (db_exec(n->db, err,
		    "INSERT INTO templates(node, name, version, status, source, created_at, uuid)"
		    " VALUES(?,?,?,'ready','store',?,?)",
		    "ssiis", node_me(n), name, (int64_t)*version, wall_ms(), uuid) < 0)
		return -err->code;
	__atomic_add_fetch(&n->tstore_fetches, 1, __ATOMIC_RELAXED);
	log_info("template %s (%s) fetched from the object store as version %u: %llu bytes in "
		 "%.1f ms", name, uuid, *version, (unsigned long long)size,
		 (now_us() - t0) / 1000.0);
	cluster_poke(n);
	return 0;
}

int tmplstore_fetch(struct node *n, const char *name, const char *uuid, const char *sha,
		    uint32_t *version, err_t *err)
{
	struct tfetch *f;
	int r;

	if (!n->os)
		return err_set(err, EOPNOTSUPP, "no object store");
	r = nm_template_find(n->cfg->nm_sock, name, uuid, version, err);
	if (r != -ENOENT)
		return r;
	/* Not here: one download per identity, whoever asks meanwhile waits. */
	pthread_mutex_lock(&n->tstore_mu);
	for (f = n->tfetches; f; f = f->next)
		if (!strcmp(f->uuid, uuid))
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
	snprintf(f->uuid, sizeof(f->uuid), "%s", uuid);
	pthread_cond_init(&f->cv, NULL);
	f->next = n->tfetches;
	n->tfetches = f;
	pthread_mutex_unlock(&n->tstore_mu);

	/* Found meanwhile (another path received it)? Then no download. */
	r = nm_template_find(n->cfg->nm_sock, name, uuid, version, err);
	if (r == -ENOENT)
		r = fetch(n, name, uuid, sha, version, err);

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
