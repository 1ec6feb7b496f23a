/* template-xfer.c - a template moved between nodes as a btrfs send stream
 * (the node carries the stream to and from the object store; nodemgr has
 * no network client and gets the stream's file as an fd).
 *
 *   export  the full `btrfs send` of templates/<name>/<ver> into the fd,
 *           after giving the template its own uuid as received uuid if it
 *           has none (pool_subvol_ensure_received): that received uuid is
 *           the template's identity, and the stream carries it
 *   find    the local version of <name> with a given identity
 *   import  `btrfs receive` of the fd into templates/<name>/.recv-XXXXXX,
 *           checked (exactly one subvolume, made from scratch, read-only,
 *           received uuid = the identity the node expects), then renamed to
 *           templates/<name>/<v>, v one above every version of the name
 *
 * Why the received uuid: receive gives the new subvolume the stream's uuid
 * as received uuid, and the stream's uuid is the sent subvolume's received
 * uuid when it has one. So every node's copy of one build has the same
 * identity, and a sandbox's disk stream made on any of them (`send -p
 * template`, snapshot/export.c) names its parent by it; `btrfs receive` finds that
 * parent by received uuid, so the stream applies on every node holding a
 * copy.
 *
 * The stream given to import is untrusted bytes parsed as root: the node
 * checked its size and SHA-256 against its manifest first, and receive runs
 * confined to the temporary directory (pool_receive_new: --chroot for what
 * it writes, and that directory as its mount root for the parents and
 * clone sources it looks up by uuid, so no other subvolume of the pool can
 * be written, snapshotted or cloned from) and stops at its first error. What it made is then checked before anything else can see it:
 * nothing lists or uses a name starting with '.' (tmpl_list,
 * mgr_template_superseded), and the rename into place is the only step that
 * publishes it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../lib/log.h"
#include "../../lib/util.h"
#include "../../pool/pool.h"
#include "../core/nodemgr-internal.h"
#include "templates.h"

/* Picking an import's version and renaming into it, one at a time, so two
 * imports of a name never pick the same version. Held only for that (not
 * during the receive). */
static pthread_mutex_t import_mu = PTHREAD_MUTEX_INITIALIZER;

static int wait_child(void *arg, pid_t pid, int *status)
{
	return mgr_wait_child(arg, pid, status, -1);
}

/* A version's directory entry: "<n>" (the subvolume) or "<n>.vm" (its vm
 * cache, which may outlive a deleted version while a clone maps it). 0 for
 * anything else. */
static unsigned long entry_version(const char *name, bool *is_vm)
{
	char *end;
	unsigned long v;

	if (name[0] < '0' || name[0] > '9')
		return 0;
	errno = 0;
	v = strtoul(name, &end, 10);
	if (errno || v > UINT32_MAX)
		return 0;
	*is_vm = !strcmp(end, ".vm");
	return *end && !*is_vm ? 0 : v;
}

/* The identity of a template subvolume: its received uuid, else its uuid. */
static const char *identity(const struct pool_subvol_ids *ids)
{
	return ids->received_uuid[0] ? ids->received_uuid : ids->uuid;
}

int tmpl_export(struct nm_server *s, const char *name, uint32_t version, int fd,
		char uuid[37], int64_t *size, err_t *err)
{
	_cleanup_free_ char *src = xasprintf("%s/templates/%s/%u", s->pool, name, version);
	struct pool_subvol_ids ids;
	uint64_t t0 = now_us();
	struct stat st;
	int r;

	uuid[0] = '\0';
	*size = -1;
	if ((r = mgr_artifact_fd_check(fd, true, err)) < 0)
		return r;
	if (pool_is_subvol(src) != 1)
		return err_set(err, ENOENT, "template %s/%u not found", name, version);
	if ((r = pool_subvol_ids(src, &ids, err)) < 0)
		return r;
	/* Read-only means finished (template.c): a build still running is not
	 * sent. */
	if (!ids.readonly)
		return err_set(err, EBUSY, "template %s/%u is not finished", name, version);
	if ((r = mgr_template_ensure_received(src, err)) < 0 ||
	    (r = pool_subvol_ids(src, &ids, err)) < 0)
		return err_wrap(err, "template %s/%u", name, version);
	if (!ids.received_uuid[0])
		return err_set(err, EIO, "template %s/%u has no received uuid", name, version);
	if (ftruncate(fd, 0) < 0 || lseek(fd, 0, SEEK_SET) < 0)
		return err_sys(err, "truncate stream fd");
	struct pool_waiter w = { wait_child, s };
	if ((r = pool_send(src, NULL, fd, &w, err)) < 0)
		return err_wrap(err, "template %s/%u: send", name, version);
	if (fstat(fd, &st) < 0)
		return err_sys(err, "fstat stream fd");
	*size = st.st_size;
	memcpy(uuid, ids.received_uuid, 37);
	log_info("template %s/%u: exported as %s, %lld bytes in %.1f ms", name, version, uuid,
		 (long long)*size, (now_us() - t0) / 1000.0);
	return 0;
}

int tmpl_find(struct nm_server *s, const char *name, const char *uuid, uint32_t *version,
	      err_t *err)
{
	_cleanup_free_ char *dir = xasprintf("%s/templates/%s", s->pool, name);
	DIR *d = opendir(dir);
	struct dirent *de;
	unsigned long best = 0;

	*version = 0;
	while (d && (de = readdir(d))) {
		struct pool_subvol_ids ids;
		err_t e = { 0 };
		bool is_vm = false;
		unsigned long v = entry_version(de->d_name, &is_vm);

		if (!v || is_vm || v <= best)
			continue;
		_cleanup_free_ char *sub = xasprintf("%s/%s", dir, de->d_name);
		/* Only finished (read-only) versions count, as in tmpl_list. */
		if (pool_is_subvol(sub) != 1 || pool_subvol_ids(sub, &ids, &e) < 0 ||
		    !ids.readonly || strcmp(identity(&ids), uuid))
			continue;
		best = v;
	}
	if (d)
		closedir(d);
	if (!best)
		return err_set(err, ENOENT, "no version of template %s is %s", name, uuid);
	*version = (uint32_t)best;
	return 0;
}

/* Remove what a failed import made under tmp: subvolumes (a hostile stream
 * may make several), then anything else, then tmp itself. Depth-bounded:
 * a receive makes subvolumes at the top of tmp and files inside them. */
static void remove_tree(const char *path, int depth)
{
	err_t e = { 0 };
	DIR *d;
	struct dirent *de;

	if (pool_is_subvol(path) == 1) {
		if (pool_subvol_delete(path, &e) < 0)
			log_warn("template import cleanup: %s", e.msg);
		return;
	}
	if (depth > 0 && (d = opendir(path))) {
		while ((de = readdir(d))) {
			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			_cleanup_free_ char *sub = xasprintf("%s/%s", path, de->d_name);
			struct stat st;
			if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
				remove_tree(sub, depth - 1);
			else if (unlink(sub) < 0)
				log_warn("template import cleanup: unlink %s: %s", sub, strerror(errno));
		}
		closedir(d);
	}
	if (rmdir(path) < 0 && errno != ENOENT)
		log_warn("template import cleanup: rmdir %s: %s", path, strerror(errno));
}

/* The one subvolume a receive made in tmp, checked: nothing else is there,
 * it was made from scratch (a full stream, not a snapshot of another
 * subvolume), it is read-only and its received uuid is uuid. *sub gets its
 * path (caller frees). -EPROTO otherwise. */
static int received_one(const char *tmp, const char *uuid, char **sub, err_t *err)
{
	struct pool_subvol_ids ids;
	DIR *d = opendir(tmp);
	struct dirent *de;
	struct stat st;
	char *found = NULL;
	int n = 0, r;

	*sub = NULL;
	if (!d)
		return err_sys(err, "open %s", tmp);
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (n++ == 0)
			found = xasprintf("%s/%s", tmp, de->d_name);
	}
	closedir(d);
	if (n != 1) {
		free(found);
		return err_set(err, EPROTO, "the stream made %d entries, not one subvolume", n);
	}
	/* lstat: a stream can make a symlink beside its subvolume (a command
	 * before its first subvolume writes at the top of tmp), and one
	 * pointing at another subvolume of the pool must not pass for it. */
	if (lstat(found, &st) < 0 || !S_ISDIR(st.st_mode) || pool_is_subvol(found) != 1) {
		free(found);
		return err_set(err, EPROTO, "the stream made no subvolume");
	}
	if ((r = pool_subvol_ids(found, &ids, err)) < 0) {
		free(found);
		return r;
	}
	if (ids.parent_uuid[0]) {
		free(found);
		return err_set(err, EPROTO, "the stream is not a full one (it made a snapshot of %s)",
			       ids.parent_uuid);
	}
	if (strcmp(ids.received_uuid, uuid)) {
		free(found);
		return err_set(err, EPROTO, "the stream's subvolume is %s, not %s",
			       ids.received_uuid[0] ? ids.received_uuid : "(none)", uuid);
	}
	/* receive makes it read-only when the stream ends; a stream cut short
	 * after its last command would leave it writable. */
	if (!ids.readonly) {
		free(found);
		return err_set(err, EPROTO, "the stream did not finish its subvolume");
	}
	*sub = found;
	return 0;
}

/* One above every version of name in dir (subvolumes and vm caches, so a
 * cache left by a deleted version is never taken for the new one's), and
 * at least min_version. 0 when that would not fit. */
static uint32_t next_version(const char *dir, uint32_t min_version)
{
	unsigned long top = min_version ? min_version - 1 : 0;
	DIR *d = opendir(dir);
	struct dirent *de;

	while (d && (de = readdir(d))) {
		bool is_vm = false;
		unsigned long v = entry_version(de->d_name, &is_vm);
		if (v > top)
			top = v;
	}
	if (d)
		closedir(d);
	return top >= UINT32_MAX ? 0 : (uint32_t)top + 1;
}

int tmpl_import(struct nm_server *s, const char *name, const char *uuid,
		uint32_t min_version, int fd, uint32_t *version, err_t *err)
{
	_cleanup_free_ char *namedir = xasprintf("%s/templates/%s", s->pool, name);
	_cleanup_free_ char *tmp = xasprintf("%s/.recv-XXXXXX", namedir);
	_cleanup_free_ char *sub = NULL, *dst = NULL;
	struct pool_subvol_ids ids;
	uint64_t t0 = now_us();
	uint32_t v = 0;
	int r;

	*version = 0;
	if ((r = mgr_artifact_fd_check(fd, false, err)) < 0)
		return r;
	/* Twice: a failed import or a delete of the name may remove namedir
	 * (when it holds nothing) between the mkdir and the mkdtemp. */
	for (int i = 0;; i++) {
		if (mkdir(namedir, 0700) < 0 && errno != EEXIST)
			return err_sys(err, "mkdir %s", namedir);
		memcpy(tmp + strlen(tmp) - 6, "XXXXXX", 6);
		if (mkdtemp(tmp))
			break;
		if (errno != ENOENT || i == 1) {
			r = err_sys(err, "mkdtemp %s", tmp);
			rmdir(namedir);
			return r;
		}
	}
	if (lseek(fd, 0, SEEK_SET) < 0) {
		r = err_sys(err, "rewind stream fd");
		goto fail;
	}
	struct pool_waiter w = { wait_child, s };
	if ((r = pool_receive_new(tmp, fd, &w, err)) < 0 ||
	    (r = received_one(tmp, uuid, &sub, err)) < 0)
		goto fail;
	/* btrfs refuses to rename a read-only subvolume: writable for the
	 * rename (still in tmp, which nothing lists), read-only again at its
	 * place (tmpl_list skips it until then), and checked again. */
	if ((r = pool_subvol_set_readonly(sub, false, err)) < 0)
		goto fail;
	pthread_mutex_lock(&import_mu);
	v = next_version(namedir, min_version);
	if (!v) {
		r = err_set(err, EOVERFLOW, "no version left for template %s", name);
	} else {
		dst = xasprintf("%s/%u", namedir, v);
		/* NOREPLACE: a build of the same name that chose v itself
		 * (the node numbers builds) keeps its subvolume. */
		if (renameat2(AT_FDCWD, sub, AT_FDCWD, dst, RENAME_NOREPLACE) < 0)
			r = err_sys(err, "rename the received template to %s", dst);
	}
	pthread_mutex_unlock(&import_mu);
	if (r < 0) {
		pool_subvol_set_readonly(sub, true, &(err_t){ 0 });
		goto fail;
	}
	if ((r = pool_subvol_set_readonly(dst, true, err)) < 0 ||
	    (r = pool_subvol_ids(dst, &ids, err)) < 0 ||
	    !ids.readonly || strcmp(ids.received_uuid, uuid)) {
		err_t e2 = { 0 };
		if (r == 0)
			r = err_set(err, EIO, "%s lost its identity when made read-only", dst);
		if (pool_subvol_delete(dst, &e2) < 0)
			log_warn("template %s/%u cleanup: %s", name, v, e2.msg);
		goto fail;
	}
	if (rmdir(tmp) < 0)
		log_warn("template %s/%u: remove %s: %s", name, v, tmp, strerror(errno));
	*version = v;
	log_info("template %s/%u: imported %s in %.1f ms", name, v, uuid, (now_us() - t0) / 1000.0);
	return 0;
fail:
	remove_tree(tmp, 3);
	rmdir(namedir); /* only when no version of the name is there */
	return err_wrap(err, "template %s: import %s", name, uuid);
}

/* What one name's walk found so far: did it remove a leftover? */
static void sweep_one(void *arg, const char *name, const char *namedir, const char *entry)
{
	bool *swept = arg;

	if (!entry) {
		if (*swept)
			rmdir(namedir); /* only when no version of the name is there */
		*swept = false;
		return;
	}
	if (strncmp(entry, ".recv-", 6))
		return;
	_cleanup_free_ char *tmp = xasprintf("%s/%s", namedir, entry);
	log_info("template %s: removing %s, left by an interrupted import", name, entry);
	remove_tree(tmp, 3);
	*swept = true;
}

void tmpl_import_sweep(struct nm_server *s)
{
	bool swept = false;

	/* Before nodemgr listens, so no import is running: every .recv-*
	 * is what an import cut off by a crash left. */
	tmpl_each(s, sweep_one, &swept);
}
