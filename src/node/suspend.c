/* suspend.c - suspend a sandbox into the object store and restore it:
 *
 *   POST /v1/sandboxes/{id}/suspend              200 sandbox (suspended)
 *   POST /v1/sandboxes/{id}/restore              200 sandbox (running)
 *   POST /v1/sandboxes/{id}/resume               also restores a suspended one
 *   exec, connect, files, processes, ports       restore a suspended one first,
 *                                                unless ?auto_restore=false (409)
 *
 * Suspend, in this order (running|paused → suspending → suspended):
 *   1. suspending (its row), then the jail is paused (frozen);
 *   2. a snapshot su-… of its disk (vm: a full one, memory and devices);
 *   3. nodemgr writes each artifact into a file of DATA/staging the node
 *      opened and passed by fd: the disk as `btrfs send -p <template>`;
 *   4. each artifact is uploaded to sandboxes/<id>/<snap>/<name> and checked
 *      back with a HEAD (size + SHA-256);
 *   5. LAST the manifest (kind, template, backend, shape, and each
 *      artifact's size and SHA-256), uploaded and checked the same way;
 *   6. one transaction: the suspensions row (snapshot id, bytes, the
 *      manifest's SHA-256, the state to give back) and → suspended; the
 *      request is answered (restorable);
 *   7. only then the jail, subvolume, cgroup and address are freed (the
 *      template stays), with the sandbox's lifecycle still held.
 * A failure in 2-5 deletes what was uploaded and the snapshot, resumes the
 * jail if it ran, and goes back (suspending → running|paused). A restart
 * in 1-6 finds the row suspending and the jail whole: reconcile does the
 * same (suspend_reconcile). A manifest is only ever written after every
 * artifact it names was verified, and a row is only ever restorable after
 * its manifest was: no restorable row ever points at a partial upload.
 *
 * Restore (suspended → restoring → running): the manifest is fetched and
 * checked against the SHA-256 the row kept (a manifest swapped in the store
 * is refused), then each artifact is downloaded into staging and checked
 * against the manifest (size + SHA-256; a mismatch names the artifact)
 * and handed to nodemgr, which rebuilds snapshots/<id>/<snap> from the disk
 * stream (`btrfs receive` on the template). A sealed disk stream goes to
 * receive through a pipe as it arrives instead, each chunk opened before
 * its bytes are written (restore_stream). Then the sandbox starts from it as a fork of
 * itself (ns: a fresh init on the restored disk; processes do not survive
 * an ns suspend). Its network policy, credentials and port tokens are DB
 * state and apply again as they are. A failure removes what was built and
 * goes back to suspended; the objects stay, so a retry can succeed. After
 * a restore (and its answer) the snapshot and objects are deleted.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../crypt/envelope.h"
#include "../crypt/kms.h"
#include "../lib/fault.h"
#include "../lib/log.h"
#include "../lib/phases.h"
#include "../lib/pipe.h"
#include "../lib/sha256.h"
#include "../objstore/objstore.h"
#include "node-internal.h"

#define MANIFEST_MAX (64u * 1024)
#define ARTIFACT_MAX (1ull << 40)

/* The artifacts a manifest may name, and the file nodemgr makes of each. */
static const struct {
	const char *name;
	enum nm_artifact kind;
} artifacts[] = {
	{ "disk", NM_ARTIFACT_DISK },
	{ "memory", NM_ARTIFACT_MEM },
	{ "vmstate", NM_ARTIFACT_VMSTATE },
};
#define N_ARTIFACTS (sizeof(artifacts) / sizeof(artifacts[0]))

struct art {
	bool present;
	uint64_t size;
	char sha[OBJSTORE_SHA256_HEX];
};

/* vm: the RAM file the memory artifact is a difference from, by content
 * (sha: of the file; osha, osize: of its object in the store). */
struct mbase {
	char sha[OBJSTORE_SHA256_HEX], osha[OBJSTORE_SHA256_HEX];
	uint64_t osize;
};

const char *sandbox_suspend_kind(const struct sandbox *sb)
{
	if (!sb->be)
		return NULL;
	return sb->be->caps.suspend;
}

static char *obj_key(const struct sandbox *sb, const char *snap, const char *name)
{
	return xasprintf("sandboxes/%s/%s/%s", sb->id, snap, name);
}

static char *staging_path(struct node *n, const struct sandbox *sb, const char *snap,
			  const char *name)
{
	return xasprintf("%s/%s-%s.%s", n->cfg->staging_dir, sb->id, snap, name);
}

/* A store failure during a suspend: the sandbox stays, the client is told
 * the store is unavailable (503). */
static int store_err(err_t *err, const char *what)
{
	int code = err->code;

	err_wrap(err, "object store: %s", what);
	if (code != EBADMSG && code != ENOENT)
		err->code = EHOSTUNREACH;
	return -err->code;
}

static void delete_objects(struct node *n, struct sandbox *sb, const char *snap)
{
	for (size_t i = 0; i <= N_ARTIFACTS; i++) {
		_cleanup_free_ char *key =
			obj_key(sb, snap, i < N_ARTIFACTS ? artifacts[i].name : "manifest.json");
		err_t e = { 0 };
		if (objstore_delete(n->os, key, &e) < 0)
			log_warn("sandbox %s: delete %s: %s", sb->id, key, e.msg);
	}
}

/* ---- suspend ----------------------------------------------------------- */

/* The bytes' progress in the sandbox's as the store stores them. */
static void counted_stored(void *arg, uint64_t n)
{
	sandbox_progress_add(arg, n);
}

/* Upload the artifact staged in fd (BYOK: sealed already; hashed as it was
 * written there: a->size, a->sha) and check it back. */
static int upload(struct node *n, struct sandbox *sb, const char *snap, const char *name,
		  int fd, struct art *a, err_t *err)
{
	_cleanup_free_ char *key = obj_key(sb, snap, name);
	char sha[OBJSTORE_SHA256_HEX];
	uint64_t size = 0;

	if (objstore_put_hashed(n->os, key, fd, a->size, a->sha, counted_stored, sb, err) < 0)
		return store_err(err, name);
	FAULT_POINT("suspend_upload");
	if (objstore_head(n->os, key, &size, sha, err) < 0)
		return store_err(err, name);
	if (size != a->size || strcmp(sha, a->sha) != 0)
		return err_set(err, EHOSTUNREACH,
			       "object store: %s reads back as %llu bytes %.12s…, sent %llu %.12s…",
			       name, (unsigned long long)size, sha, (unsigned long long)a->size,
			       a->sha);
	a->present = true;
	return 0;
}

static char *manifest_text(struct node *n, struct sandbox *sb, const char *snap,
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
	jw_str(&w, sandbox_suspend_kind(sb));
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
		jw_key(&w, artifacts[i].name);
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

struct suspended_row {
	const char *snap, *manifest_sha, *procs, *data_key;
	int64_t bytes;
	enum sb_state prev;
};

/* Step 6: the restorable row and → suspended, together. The sandbox's
 * local snapshots go with its subvolume (step 7), so their rows go now. */
static int write_suspended(struct node *n, struct sandbox *sb, const void *arg, err_t *err)
{
	const struct suspended_row *row = arg;
	int r = db_exec(n->db, err,
			"INSERT INTO suspensions(sandbox_id, snapshot_id, bytes, manifest_sha,"
			" prev_state, created_at, procs, data_key) VALUES(?,?,?,?,?,?,?,?)"
			" ON CONFLICT(sandbox_id) DO UPDATE SET snapshot_id=excluded.snapshot_id,"
			" bytes=excluded.bytes, manifest_sha=excluded.manifest_sha,"
			" prev_state=excluded.prev_state, created_at=excluded.created_at,"
			" procs=excluded.procs, data_key=excluded.data_key",
			"ssississ", sb->id, row->snap, row->bytes, row->manifest_sha,
			state_name(row->prev), wall_ms(), row->procs, row->data_key);

	if (r >= 0)
		r = db_exec(n->db, err, "DELETE FROM snapshots WHERE sandbox_id=?", "s", sb->id);
	if (r >= 0)
		r = state_transition(n->db, sb->id, &sb->state, SB_SUSPENDED, "suspended",
				     STATE_IN_TX, err);
	return r < 0 ? r : 0;
}

/* What an artifact's AAD binds (envelope.h). */
static struct crypt_ctx seal_ctx(const struct sandbox *sb, const char *snap, const char *name)
{
	return (struct crypt_ctx){ sb->tenant, sb->id, name, snap };
}

/* One artifact's step, run side by side with the others': export
 * (nodemgr writes it into a pipe, staged sealed into fd), upload, download
 * (into fd) and import
 * (nodemgr rebuilds it from fd). A vm's disk (`btrfs send` and receive,
 * I/O) and memory (the page diff and zstd, CPU) take about as long as each
 * other, and the store's handle may be used by many threads (objstore.h). */
struct base_job;

struct art_job {
	struct node *n;
	struct sandbox *sb;
	const struct nm_sandbox_spec *spec;
	const char *snap;
	size_t i;
	bool on;            /* this artifact is there to work on */
	int fd;
	const struct dkey *dk;
	const uint8_t *ref;
	struct art *a;      /* upload: what was stored; download: what to expect */
	int64_t size;       /* export: nodemgr's size */
	char *base_sha;     /* export, import of the memory: its base's digest */
	struct mbase *mb;   /* suspend of the memory: its base, published */
	struct exports *ex; /* suspend: what all the jobs exported so far */
	struct base_job *base; /* restore of the memory: its base, being fetched */
	uint64_t us, up_us; /* suspend: export, upload; restore: download, import */
	int r;
	err_t err;
	pthread_t tid;
	bool started;
};

/* A suspend's artifacts go up each as soon as it is exported (a vm's
 * disk, a btrfs send, is ready well before its memory, a page diff and
 * zstd); the progress gets its total when the last export is done. */
struct exports {
	pthread_mutex_t mu;
	size_t left;        /* exports still running */
	uint64_t total;     /* the bytes the uploads will send */
};

/* The export is done (r: how): its bytes count in the progress total. */
static void exported(struct art_job *j, int r)
{
	struct exports *ex = j->ex;

	pthread_mutex_lock(&ex->mu);
	ex->total += r == 0 && j->on ? j->a->size : 0;
	if (--ex->left == 0)
		sandbox_progress_total(j->sb, "upload", ex->total);
	pthread_mutex_unlock(&ex->mu);
}

/* nodemgr writes the artifact into the pipe fd. */
static int export_into(void *arg, int fd, err_t *err)
{
	struct art_job *j = arg;

	return nm_suspend_export(j->n->cfg->nm_sock, j->spec, j->snap, artifacts[j->i].kind, fd,
				 &j->size, j->base_sha, err);
}

/* The plain bytes of in into out, hashed as they are written. */
static int copy_hashed(int in, int out, uint64_t *size, char sha[OBJSTORE_SHA256_HEX],
		       err_t *err)
{
	_cleanup_free_ uint8_t *b = xmalloc(1u << CRYPT_CHUNK_LOG2);
	EVP_MD_CTX *md = sha256_start();
	ssize_t k;
	int r = 0;

	*size = 0;
	while (r == 0 && (k = read(in, b, 1u << CRYPT_CHUNK_LOG2)) != 0) {
		if (k < 0 && errno != EINTR) {
			r = err_sys(err, "read the export");
		} else if (k > 0 && write_all(out, b, (size_t)k) < 0) {
			r = err_sys(err, "write the staged artifact");
		} else if (k > 0) {
			sha256_add(md, b, (size_t)k);
			*size += (uint64_t)k;
		}
	}
	sha256_end_hex(md, sha);
	return r;
}

/* An export's bytes as nodemgr writes them, sealed (BYOK: only sealed
 * bytes reach the node's disk) into the staging file and hashed on the
 * way: the upload then starts with the object's digest, instead of a pass
 * over it first. */
static int stage_export(void *arg, int in, err_t *err)
{
	struct art_job *j = arg;
	struct crypt_ctx cx = seal_ctx(j->sb, j->snap, artifacts[j->i].name);

	if (j->dk)
		return crypt_seal_fd(in, j->fd, j->dk->k, j->ref, &cx, &j->a->size, j->a->sha, err);
	return copy_hashed(in, j->fd, &j->a->size, j->a->sha, err);
}

/* One artifact of a suspend: export (nodemgr writes it into a pipe, staged
 * as it comes), then (memory) its base published, then the upload. */
static void *suspend_job(void *arg)
{
	struct art_job *j = arg;
	struct node *n = j->n;
	uint64_t t0, tail = 0;

	j->r = pipe_run(export_into, j, stage_export, j, 1 << CRYPT_CHUNK_LOG2, &j->us, &tail,
			&j->err);
	j->us += tail;
	/* a full snapshot saved as a stream has no RAM file: its memory is in
	 * the vmstate artifact, and it has no base */
	if (j->r == 0 && j->mb && j->size == 0) {
		j->on = false;
		j->mb->sha[0] = '\0';
	}
	exported(j, j->r);
	if (j->r < 0 || !j->on)
		return NULL;
	/* vm: the base the memory is a difference from, in the store once */
	if (j->mb && j->mb->sha[0] &&
	    (j->r = membase_publish(n, j->spec, j->mb->sha, j->mb->sha, j->mb->osha,
				    &j->mb->osize, &j->err)) < 0) {
		if (j->r == -EHOSTUNREACH || j->r == -ETIMEDOUT)
			j->r = store_err(&j->err, "memory base");
		return NULL;
	}
	t0 = now_us();
	j->r = upload(n, j->sb, j->snap, artifacts[j->i].name, j->fd, j->a, &j->err);
	j->up_us = now_us() - t0;
	return NULL;
}

static const char *const upload_names[N_ARTIFACTS] = { "upload_disk", "upload_memory",
							"upload_vmstate" };

/* Start fn on j when it is on, in a thread of its own. */
static void start_job(struct art_job *j, void *(*fn)(void *))
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

/* Wait for the jobs start_job started (or ran); the first failure, in
 * artifact order, into err. Each job's two times into ph as names[i] and
 * names2[i]. */
static int join_jobs(struct art_job *jobs, size_t nj, struct phases *ph,
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


static void close_all(int fds[N_ARTIFACTS])
{
	for (size_t i = 0; i < N_ARTIFACTS; i++)
		if (fds[i] >= 0)
			close(TAKE_FD(fds[i]));
}

static const char *const export_names[N_ARTIFACTS] = { "export_disk", "export_memory",
							"export_vmstate" };
static const char *const download_names[N_ARTIFACTS] = { "download_disk", "download_memory",
							  "download_vmstate" };
static const char *const import_names[N_ARTIFACTS] = { "import_disk", "import_memory",
							"import_vmstate" };

/* Steps 2-5 on a suspending, frozen sandbox. On success *bytes and sha get
 * the total uploaded and the manifest's digest, and staged the staging
 * files' fds (-1: none) for the caller to close once it answered: the last
 * close of an unlinked file of 100 MiB frees its pages, tens of ms. */
static int make_and_upload(struct node *n, struct sandbox *sb, const char *snap, int64_t *bytes,
			   char manifest_sha[OBJSTORE_SHA256_HEX], char **procs,
			   const struct dkey *dk, const uint8_t ref[CRYPT_REF_LEN], struct phases *ph,
			   int staged[N_ARTIFACTS], err_t *err)
{
	struct art arts[N_ARTIFACTS] = { 0 };
	struct mbase mbase = { 0 };
	struct nm_sandbox_spec spec;
	_cleanup_free_ char *man = NULL, *mkey = NULL;
	bool memory = strcmp(sandbox_suspend_kind(sb), "memory") == 0, split;
	char sha[OBJSTORE_SHA256_HEX], tuuid[37] = "", tsha[OBJSTORE_SHA256_HEX] = "";
	int64_t size = -1;
	uint64_t hsize = 0;
	struct exports ex = { .left = 0 };
	struct art_job jobs[N_ARTIFACTS];
	int fds[N_ARTIFACTS];
	int r;

	for (size_t i = 0; i < N_ARTIFACTS; i++)
		fds[i] = -1;

	/* A suspend can come back on any node: its template build goes to
	 * the store first (once per version, unless published when it became
	 * ready; tmplstore.c); a vm's memory base after the export. */
	if ((r = tmplstore_publish(n, sb->template_name, sb->template_version, tuuid, tsha,
				   err)) < 0)
		return r == -EHOSTUNREACH || r == -ETIMEDOUT ? store_err(err, "template") : r;
	sandbox_jail_spec(sb, &spec);
	/* vm: the processes the guest runs carry on after a restore; the node
	 * keeps their records (and where their output stands) to follow them
	 * again, as for a full snapshot. */
	if (memory)
		*procs = procs_image(sb);
	/* vm: diffed against the base its memory was rebuilt on, when here
	 * (a sandbox moved from a node whose template this one never booted
	 * would otherwise diff against zeros) */
	pthread_mutex_lock(&sb->mu);
	snprintf(mbase.sha, sizeof(mbase.sha), "%s", sb->mem_base);
	pthread_mutex_unlock(&sb->mu);
	/* vm: the disk snapshot first, and its export and upload go while
	 * the memory is saved (the vCPUs stay stopped in between: one point) */
	split = memory && sb->be->snapshot_memory;
	r = memory && !split ? sb->be->snapshot_full(&n->bctx, sb->id, snap, "", &size, err)
			     : sb->be->snapshot(&n->bctx, sb->id, snap, "", &size, err);
	if (r < 0)
		return err_wrap(err, "snapshot");
	phases_mark(ph, split ? "snapshot_disk" : "snapshot");
	/* The progress: phase export (total unknown) until every export is
	 * done, then upload with its total; the bytes count as they go. */
	sandbox_progress_set(sb, "suspend", "export", "bytes", 0, 0);
	for (size_t i = 0; i < N_ARTIFACTS; i++) {
		_cleanup_free_ char *path = staging_path(n, sb, snap, artifacts[i].name);

		if (!memory && artifacts[i].kind != NM_ARTIFACT_DISK)
			continue;
		fds[i] = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fds[i] < 0) {
			r = err_sys(err, "open %s", path);
			goto out;
		}
		/* Only the fd was needed; the name goes at once. */
		unlink(path);
		ex.left++;
	}
	for (size_t i = 0; i < N_ARTIFACTS; i++) {
		bool mem = artifacts[i].kind == NM_ARTIFACT_MEM;

		jobs[i] = (struct art_job){ .n = n, .sb = sb, .spec = &spec, .snap = snap, .i = i,
					    .on = fds[i] >= 0, .fd = fds[i], .dk = dk, .ref = ref,
					    .a = &arts[i], .base_sha = mem ? mbase.sha : NULL,
					    .mb = mem ? &mbase : NULL, .ex = &ex };
	}
	pthread_mutex_init(&ex.mu, NULL);
	for (size_t i = 0; i < N_ARTIFACTS; i++)
		if (artifacts[i].kind == NM_ARTIFACT_DISK || !split)
			start_job(&jobs[i], suspend_job);
	if (split) {
		r = sb->be->snapshot_memory(&n->bctx, sb->id, snap, &size, err);
		if (r < 0)
			err_wrap(err, "snapshot");
		phases_mark(ph, "snapshot_memory");
		for (size_t i = 0; i < N_ARTIFACTS; i++)
			if (artifacts[i].kind != NM_ARTIFACT_DISK) {
				jobs[i].on = jobs[i].on && r == 0;
				start_job(&jobs[i], suspend_job);
			}
	}
	{
		err_t je = { 0 };
		int rj = join_jobs(jobs, N_ARTIFACTS, ph, export_names, upload_names, &je);
		if (r == 0 && rj < 0) {
			*err = je;
			r = rj;
		}
	}
	pthread_mutex_destroy(&ex.mu);
	phases_mark(ph, "artifacts");
	if (r < 0)
		goto out;
	*bytes = 0;
	for (size_t i = 0; i < N_ARTIFACTS; i++)
		if (jobs[i].on)
			*bytes += (int64_t)arts[i].size;
	man = manifest_text(n, sb, snap, arts, tuuid, tsha, &mbase);
	mkey = obj_key(sb, snap, "manifest.json");
	{
		/* the manifest sealed too; the row pins the sealed bytes' digest */
		struct crypt_ctx cx = seal_ctx(sb, snap, "manifest.json");
		struct buf mb;
		buf_init(&mb);
		if (dk)
			r = crypt_seal_buf(man, strlen(man), dk->k, ref, &cx, &mb, err);
		else
			buf_add(&mb, man, strlen(man));
		if (r == 0) {
			sha256_of(mb.data, mb.len, manifest_sha);
			if (objstore_put_buf(n->os, mkey, mb.data, mb.len, sha, err) < 0 ||
			    objstore_head(n->os, mkey, &hsize, sha, err) < 0)
				r = store_err(err, "manifest");
			else if (hsize != mb.len || strcmp(sha, manifest_sha) != 0)
				r = err_set(err, EHOSTUNREACH,
					    "object store: the manifest reads back wrong");
		}
		buf_free(&mb);
		if (r < 0)
			goto out;
	}
	*bytes += (int64_t)hsize;
	phases_mark(ph, "manifest");
out:
	for (size_t i = 0; i < N_ARTIFACTS; i++)
		if (r == 0)
			staged[i] = fds[i];
		else if (fds[i] >= 0)
			close(fds[i]);
	return r;
}

/* Only a running guest can answer; a paused one is suspended as it
 * stands. Best effort: a guest that cannot (an older agent: ENOSYS) is
 * suspended as it is. */
void suspend_reclaim(struct node *n, struct sandbox *sb)
{
	struct guestconn *gc = NULL;
	err_t e = { 0 };

	if (!sb->be->reclaim || !n->cfg->suspend_reclaim)
		return;
	/* suspending (not running) already: sandbox_gc_get would refuse;
	 * or running, before an idle pause */
	pthread_mutex_lock(&sb->mu);
	if (sb->gc && !sb->deleting) {
		gc = sb->gc;
		sb->gc_users++;
	}
	pthread_mutex_unlock(&sb->mu);
	if (!gc)
		return;
	if (sb->be->reclaim(&n->bctx, gc, &e) < 0)
		log_warn("sandbox %s: suspend without reclaim: %s", sb->id, e.msg);
	sandbox_gc_put(sb);
}

int sandbox_suspend(struct node *n, struct sandbox *sb, const char *why, struct http_conn *c,
		    err_t *err)
{
	_cleanup_free_ char *snap = random_id("su-", 8);
	_cleanup_free_ char *procs = NULL;
	char manifest_sha[OBJSTORE_SHA256_HEX] = "";
	char key_hex[2 * CRYPT_REF_LEN + 1] = "";
	uint8_t ref[CRYPT_REF_LEN];
	struct dkey *dk = NULL;
	struct suspended_row row;
	enum sb_state prev;
	int64_t bytes = 0;
	uint64_t t0 = now_us();
	err_t e2 = { 0 };
	char reason[200], steps[600];
	struct phases ph;
	int staged[N_ARTIFACTS];
	bool closed;
	int r;

	for (size_t i = 0; i < N_ARTIFACTS; i++)
		staged[i] = -1;
	if (!sandbox_suspend_kind(sb) || !n->os)
		return err_set(err, EOPNOTSUPP, "the %s backend cannot suspend a sandbox%s",
			       sb->backend_name, n->os ? "" : " (no object store)");
	phases_start(&ph);
	pthread_mutex_lock(&sb->mu);
	while (sb->lc_busy)
		pthread_cond_wait(&sb->cv, &sb->mu);
	phases_mark(&ph, "wait");
	prev = sb->state;
	if (sb->deleting || (prev != SB_RUNNING && prev != SB_PAUSED)) {
		pthread_mutex_unlock(&sb->mu);
		return err_set(err, EBUSY, "sandbox %s is %s; only a running or paused sandbox "
			       "can be suspended", sb->id, state_name(prev));
	}
	/* 1: the row first, so a restart from here on finds suspending and
	 * gives the jail back (it thaws a frozen one). */
	snprintf(reason, sizeof(reason), "%s (was %s)", why, state_name(prev));
	r = state_transition(n->db, sb->id, &sb->state, SB_SUSPENDING, reason, 0, err);
	if (r == 0) {
		sb->lc_busy = true;
		sb->prog.op = "suspend";
		sb->prog.phase = "snapshot";
		sb->prog.unit = "bytes";
	}
	pthread_mutex_unlock(&sb->mu);
	if (r < 0)
		return r;
	phases_mark(&ph, "row");
	FAULT_POINT("suspend.after_transition");
	if (prev == SB_RUNNING)
		suspend_reclaim(n, sb);
	phases_mark(&ph, "reclaim");
	if (prev == SB_RUNNING && (r = sb->be->pause(&n->bctx, sb->id, err)) < 0)
		err_wrap(err, "pause");
	phases_mark(&ph, "pause");
	/* BYOK: a fresh data key for this artifact set, wrapped by the
	 * tenant's key (a revoked key stops the suspend here: nothing is
	 * written out, the sandbox carries on until the watch stops it). */
	if (r == 0 && byok_on(n)) {
		r = kms_data_key_new(&n->kms, sb->tenant, sb->id, snap, ref, &dk, err);
		if (r < 0)
			err_wrap(err, "seal key");
		else
			crypt_ref_hex(ref, key_hex);
	}
	if (r == 0)
		r = make_and_upload(n, sb, snap, &bytes, manifest_sha, &procs, dk, ref, &ph, staged,
				    err);
	dkey_free(dk);
	dk = NULL;
	FAULT_POINT("suspend_before_commit");
	if (r == 0) {
		row = (struct suspended_row){ snap, manifest_sha, procs, key_hex[0] ? key_hex : NULL,
					      bytes, prev };
		pthread_mutex_lock(&sb->mu);
		r = sandbox_tx(n, sb, write_suspended, &row, err);
		/* The transaction rolled back after its transition moved memory
		 * to suspended: the row still says suspending, and so must
		 * memory (state.c: an edge memory alone takes). */
		if (r < 0 && sb->state == SB_SUSPENDED)
			state_set(sb->id, &sb->state, SB_SUSPENDING);
		pthread_mutex_unlock(&sb->mu);
		phases_mark(&ph, "commit");
	}
	if (r < 0) {
		/* The sandbox is still whole here: give it back. */
		close_all(staged);
		delete_objects(n, sb, snap);
		if (key_hex[0])
			kms_data_key_forget(&n->kms, ref);
		if (sb->be->snapshot_delete(&n->bctx, sb->id, snap, &e2) < 0)
			log_warn("sandbox %s: drop snapshot %s: %s", sb->id, snap, e2.msg);
		if (prev == SB_RUNNING && sb->be->resume(&n->bctx, sb->id, &e2) < 0)
			log_err("sandbox %s: resume after a failed suspend: %s", sb->id, e2.msg);
		pthread_mutex_lock(&sb->mu);
		snprintf(reason, sizeof(reason), "suspend failed: %.180s", err->msg);
		if (state_transition(n->db, sb->id, &sb->state, prev, reason, 0, &e2) < 0) {
			log_err("sandbox %s: %s", sb->id, e2.msg);
			state_set(sb->id, &sb->state, prev);
		}
		memset(&sb->prog, 0, sizeof(sb->prog));   /* the progress ends with the operation */
		sb->lc_busy = false;
		closed = sb->chan_closed;
		pthread_cond_broadcast(&sb->cv);
		pthread_mutex_unlock(&sb->mu);
		/* The guest died while it was suspending: the channel's close was
		 * not for a suspending sandbox to act on (lifecycle.c). Running
		 * or paused again, it is: recovered or failed, not left running
		 * with no guest. */
		if (closed)
			reaper_add(n, 0, TIMER_CHAN_CLOSED, sb->id, 0);
		return err_wrap(err, "suspend sandbox %s", sb->id);
	}
	/* 7: suspended and restorable; now free what it held here. */
	FAULT_POINT("suspend.after_commit");
	pthread_mutex_lock(&sb->mu);
	free(sb->susp_snap);
	sb->susp_snap = xstrdup(snap);
	sb->susp_bytes = bytes;
	snprintf(sb->susp_sha, sizeof(sb->susp_sha), "%s", manifest_sha);
	snprintf(sb->susp_key, sizeof(sb->susp_key), "%s", key_hex);
	memset(&sb->prog, 0, sizeof(sb->prog));
	pthread_mutex_unlock(&sb->mu);
	/* Restorable: the client has its answer; the lifecycle stays held
	 * (lc_busy) until the node has let go of it. */
	if (c)
		sandbox_respond(c, 200, sb);
	phases_mark(&ph, "answer");
	close_all(staged);
	sandbox_gc_retire(sb, "the sandbox was suspended", NULL);
	if (sb->be->destroy(&n->bctx, sb->id, &e2) < 0)
		log_err("sandbox %s: free after suspend: %s (reconcile retries)", sb->id, e2.msg);
	sandbox_net_forget(n, sb);
	phases_mark(&ph, "free");
	pthread_mutex_lock(&sb->mu);
	sched_on_state_locked(sb, SB_SUSPENDED);
	sb->lc_busy = false;
	pthread_cond_broadcast(&sb->cv);
	pthread_mutex_unlock(&sb->mu);
	phases_text(&ph, steps, sizeof(steps));
	log_info("sandbox %s suspended as %s: %lld bytes in %.1f ms: %s", sb->id, snap,
		 (long long)bytes, (now_us() - t0) / 1000.0, steps);
	return 0;
}

/* ---- restore ----------------------------------------------------------- */

static bool hex64(const char *s)
{
	if (!s || strlen(s) != 64)
		return false;
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
			return false;
	return true;
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
	struct crypt_ctx cx = seal_ctx(sb, snap, "manifest.json");
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

static int read_manifest(struct node *n, struct sandbox *sb, const char *snap,
			 const char *want_sha, const char *want_key, struct art arts[N_ARTIFACTS],
			 char tuuid[37], char tsha[OBJSTORE_SHA256_HEX], struct mbase *mb,
			 struct dkey **dk, err_t *err)
{
	_cleanup_free_ char *key = obj_key(sb, snap, "manifest.json");
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
		if (!uuid_text(json_get_str(t, "uuid")) || !hex64(json_get_str(t, "sha256"))) {
			r = err_set(err, EBADMSG, "artifact manifest.json: bad template uuid or digest");
			goto out;
		}
		snprintf(tuuid, 37, "%s", json_get_str(t, "uuid"));
		snprintf(tsha, OBJSTORE_SHA256_HEX, "%s", json_get_str(t, "sha256"));
	}
	memset(mb, 0, sizeof(*mb));
	if ((b = json_get(m, "memory_base"))) {
		const json *os = json_get(b, "object_size");
		if (b->type != JSON_OBJ || !hex64(json_get_str(b, "sha256")) ||
		    !hex64(json_get_str(b, "object_sha256")) || !os || os->type != JSON_NUM ||
		    !os->is_int || os->i <= 0 || (uint64_t)os->i > ARTIFACT_MAX) {
			r = err_set(err, EBADMSG, "artifact manifest.json: bad memory base");
			goto out;
		}
		snprintf(mb->sha, sizeof(mb->sha), "%s", json_get_str(b, "sha256"));
		snprintf(mb->osha, sizeof(mb->osha), "%s", json_get_str(b, "object_sha256"));
		mb->osize = (uint64_t)os->i;
	}
	for (size_t i = 0; i < N_ARTIFACTS; i++) {
		const json *e = json_get(a, artifacts[i].name), *sz;
		if (!e)
			continue;
		sz = json_get(e, "size");
		if (e->type != JSON_OBJ || !sz || sz->type != JSON_NUM || !sz->is_int || sz->i < 0 ||
		    (uint64_t)sz->i > ARTIFACT_MAX || !hex64(json_get_str(e, "sha256"))) {
			r = err_set(err, EBADMSG, "artifact manifest.json: bad entry for %s",
				    artifacts[i].name);
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

/* Where a download's bytes go, counted into the sandbox's progress: the
 * staging file, or (BYOK) the opener that writes their plaintext there. */
struct counted_sink {
	struct sandbox *sb;
	int fd;
	struct crypt_opener *op;   /* NULL: straight to fd */
};

static int counted_write(void *arg, const void *p, size_t n)
{
	struct counted_sink *c = arg;
	int r = c->op ? crypt_opener_write(c->op, p, n) : write_all(c->fd, p, n);

	if (r == 0)
		sandbox_progress_add(c->sb, n);
	return r;
}

/* Download and check one artifact into fd (a file, or a pipe to nodemgr).
 * BYOK (dk): opened as it arrives, every chunk authenticated before its
 * plaintext is written (no second copy on disk); unsealed, the bytes are
 * only known good at the end, against the manifest. */
static int fetch_into(struct node *n, struct sandbox *sb, const char *snap, size_t i,
		      const struct art *want, const struct dkey *dk, int fd, err_t *err)
{
	_cleanup_free_ char *key = obj_key(sb, snap, artifacts[i].name);
	struct crypt_ctx cx = seal_ctx(sb, snap, artifacts[i].name);
	struct crypt_opener *op = NULL;
	char sha[OBJSTORE_SHA256_HEX];
	uint64_t size = 0;
	int r;
	struct counted_sink sink = { sb, fd, NULL };

	if (dk) {
		op = sink.op = crypt_opener_new(fd, dk->k, &cx);
		r = objstore_get_writer(n->os, key, counted_write, &sink, &size, sha, err);
		if (r < 0 && crypt_opener_failed(op, err) < 0)
			r = -err->code;
		else if (r < 0)
			err_wrap(err, "artifact %s", artifacts[i].name);
	} else {
		r = objstore_get_writer(n->os, key, counted_write, &sink, &size, sha, err);
		if (r < 0)
			err_wrap(err, "artifact %s", artifacts[i].name);
	}
	if (r == 0 && (size != want->size || strcmp(sha, want->sha) != 0))
		r = err_set(err, EBADMSG,
			    "artifact %s: %llu bytes with SHA-256 %.16s…, the manifest says "
			    "%llu bytes %.16s…",
			    artifacts[i].name, (unsigned long long)size, sha,
			    (unsigned long long)want->size, want->sha);
	if (r == 0 && op)
		r = crypt_opener_finish(op, NULL, err);
	crypt_opener_free(op);
	return r;
}

/* fetch_into a staging file: *out, rewound. */
static int fetch_artifact(struct node *n, struct sandbox *sb, const char *snap, size_t i,
			  const struct art *want, const struct dkey *dk, int *out, err_t *err)
{
	_cleanup_free_ char *path = staging_path(n, sb, snap, artifacts[i].name);
	_cleanup_close_ int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
				      0600);
	int r;

	if (fd < 0)
		return err_sys(err, "open %s", path);
	unlink(path);
	if ((r = fetch_into(n, sb, snap, i, want, dk, fd, err)) < 0)
		return r;
	if (lseek(fd, 0, SEEK_SET) < 0)
		return err_sys(err, "rewind %s", path);
	*out = TAKE_FD(fd);
	return 0;
}

/* A restore's memory base, fetched beside its artifacts' downloads; the
 * memory's import waits for it (base_wait). */
struct base_job {
	struct node *n;
	const struct nm_sandbox_spec *spec;
	const struct mbase *mb;
	pthread_t tid;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;
	uint64_t us;
	int r;
	err_t err;
};

static void *base_job(void *arg)
{
	struct base_job *j = arg;
	uint64_t t0 = now_us();
	err_t e = { 0 };
	int r = membase_fetch(j->n, j->spec, j->mb->sha, j->mb->osha, j->mb->osize, &e);

	pthread_mutex_lock(&j->mu);
	j->us = now_us() - t0;
	j->r = r;
	j->err = e;
	j->done = true;
	pthread_cond_broadcast(&j->cv);
	pthread_mutex_unlock(&j->mu);
	return NULL;
}

/* 0 once the base is here; its failure is the restore's (restore_job). */
static int base_wait(struct base_job *b)
{
	int r;

	pthread_mutex_lock(&b->mu);
	while (!b->done)
		pthread_cond_wait(&b->cv, &b->mu);
	r = b->r;
	pthread_mutex_unlock(&b->mu);
	return r;
}

static int import_fd(struct art_job *j, int fd, err_t *err)
{
	return nm_suspend_import(j->n->cfg->nm_sock, j->spec, j->snap, artifacts[j->i].kind, fd,
				 j->base_sha, err);
}

static int stream_fetch(void *arg, int fd, err_t *err)
{
	struct art_job *j = arg;

	return fetch_into(j->n, j->sb, j->snap, j->i, j->a, j->dk, fd, err);
}

static int stream_import(void *arg, int fd, err_t *err)
{
	return import_fd(arg, fd, err);
}

/* A sealed disk stream goes straight into nodemgr's `btrfs receive` as it
 * downloads: the receive (about a tenth of the download) ends with it
 * instead of after it. Safe because each chunk is opened (authenticated:
 * its index, object, snapshot, sandbox and tenant) before its bytes enter
 * the pipe, so receive reads only what this sandbox's suspend wrote; a
 * stream cut short or corrupted fails the download, and so the restore,
 * whatever receive made of the part it saw (the restore's failure deletes
 * it). An unsealed one is checked whole first: its digest is only known at
 * the end. j->us is the download, j->up_us what the receive took after. */
static void restore_stream(struct art_job *j)
{
	j->r = pipe_run(stream_fetch, j, stream_import, j, 1 << CRYPT_CHUNK_LOG2, &j->us,
			&j->up_us, &j->err);
}

/* One artifact of a restore: downloaded and checked, then rebuilt by
 * nodemgr, beside the others (the memory's rebuild waits for its base). */
static void *restore_job(void *arg)
{
	struct art_job *j = arg;
	uint64_t t0 = now_us();

	if (j->dk && artifacts[j->i].kind == NM_ARTIFACT_DISK) {
		restore_stream(j);
		return NULL;
	}
	j->r = fetch_artifact(j->n, j->sb, j->snap, j->i, j->a, j->dk, &j->fd, &j->err);
	j->us = now_us() - t0;
	if (j->r < 0)
		return NULL;
	if (j->base && base_wait(j->base) < 0) {
		j->r = -EAGAIN;   /* the base's own error is the restore's */
		return NULL;
	}
	t0 = now_us();
	j->r = import_fd(j, j->fd, &j->err);
	j->up_us = now_us() - t0;
	return NULL;
}

static char *suspended_procs(struct node *n, struct sandbox *sb)
{
	struct db_rows rows;
	err_t err = { 0 };
	char *procs = NULL;

	if (db_query(n->db, &rows, &err, "SELECT procs FROM suspensions WHERE sandbox_id=?", "s",
		     sb->id) < 0)
		return NULL;
	if (rows.n_rows == 1 && db_cell(&rows, 0, 0))
		procs = xstrdup(db_cell(&rows, 0, 0));
	db_rows_free(&rows);
	return procs;
}

static int write_restored(struct node *n, struct sandbox *sb, const void *arg, err_t *err)
{
	(void)arg;
	return db_exec(n->db, err, "DELETE FROM suspensions WHERE sandbox_id=?", "s", sb->id) < 0
		       ? -err->code
		       : 0;
}

int sandbox_restore(struct node *n, struct sandbox *sb, const char *why, struct http_conn *c,
		    err_t *err)
{
	_cleanup_free_ char *snap = NULL;
	struct art arts[N_ARTIFACTS] = { 0 };
	struct mbase mbase = { 0 };
	struct nm_sandbox_spec spec;
	char sha[OBJSTORE_SHA256_HEX], addr[16] = "", reason[600], tuuid[37] = "";
	char tsha[OBJSTORE_SHA256_HEX] = "", key_hex[2 * CRYPT_REF_LEN + 1] = "";
	char steps[600];
	struct art_job jobs[N_ARTIFACTS];
	int staged[N_ARTIFACTS];
	struct dkey *dk = NULL;
	struct phases ph;
	uint64_t t0 = now_us();
	int r, chan_fd = -1;
	pid_t pid = 0;
	bool turn = false;
	err_t e2 = { 0 };
	size_t live;

	/* A suspended sandbox does not count against max_sandboxes; a
	 * restored one does again (n->mu before sb->mu). */
	pthread_mutex_lock(&n->mu);
	live = sandbox_live_locked(n);
	pthread_mutex_unlock(&n->mu);
	phases_start(&ph);
	pthread_mutex_lock(&sb->mu);
	while (sb->lc_busy)
		pthread_cond_wait(&sb->cv, &sb->mu);
	phases_mark(&ph, "wait");
	if (sb->state == SB_RUNNING && !sb->deleting) {
		pthread_mutex_unlock(&sb->mu);
		return 0;  /* restored meanwhile by another request */
	}
	if (sb->state == SB_SUSPENDED && n->cfg->max_sandboxes && live >= n->cfg->max_sandboxes) {
		pthread_mutex_unlock(&sb->mu);
		return err_set(err, EAGAIN, "the node runs its maximum of %u sandboxes; sandbox %s "
			       "stays suspended", n->cfg->max_sandboxes, sb->id);
	}
	if (sb->deleting || sb->state != SB_SUSPENDED || !sb->susp_snap) {
		r = err_set(err, EBUSY, "sandbox %s is %s; only a suspended sandbox can be restored",
			    sb->id, state_name(sb->state));
		pthread_mutex_unlock(&sb->mu);
		return r;
	}
	if (!sb->be || !sb->be->fork || !n->os) {
		pthread_mutex_unlock(&sb->mu);
		return err_set(err, EOPNOTSUPP, "sandbox %s cannot be restored here", sb->id);
	}
	snap = xstrdup(sb->susp_snap);
	snprintf(sha, sizeof(sha), "%s", sb->susp_sha);
	snprintf(key_hex, sizeof(key_hex), "%s", sb->susp_key);
	r = state_transition(n->db, sb->id, &sb->state, SB_RESTORING, why, 0, err);
	if (r == 0) {
		sb->lc_busy = true;
		sb->prog.op = "restore";
		sb->prog.phase = "manifest";
		sb->prog.unit = "bytes";
	}
	pthread_mutex_unlock(&sb->mu);
	if (r < 0)
		return r;

	phases_mark(&ph, "row");
	FAULT_POINT("restore.after_transition");
	for (size_t i = 0; i < N_ARTIFACTS; i++)
		staged[i] = -1;
	/* Nothing of a suspended sandbox may be here: what its suspend could
	 * not free (the nodemgr restarting just then) would block the import
	 * ("has a subvolume") for good. Freed now; every step is idempotent. */
	if (sb->be->destroy(&n->bctx, sb->id, &e2) < 0) {
		log_warn("sandbox %s: free leftovers before a restore: %s", sb->id, e2.msg);
		e2 = (err_t){ 0 };
	}
	phases_mark(&ph, "destroy");
	r = read_manifest(n, sb, snap, sha, key_hex, arts, tuuid, tsha, &mbase, &dk, err);
	/* The template build its disk stream was made against: here already,
	 * or fetched from the store (a sandbox moved from another node). */
	if (r == 0 && tuuid[0]) {
		uint32_t v = 0;

		if ((r = tmplstore_fetch(n, sb->template_name, tuuid, tsha, &v, err)) < 0)
			err_wrap(err, "template %s", sb->template_name);
		else if (v != sb->template_version &&
			 (r = db_exec(n->db, err, "UPDATE sandboxes SET template_version=? WHERE id=?",
				      "is", (int64_t)v, sb->id)) >= 0) {
			pthread_mutex_lock(&sb->mu);
			sb->template_version = v;
			pthread_mutex_unlock(&sb->mu);
			r = 0;
		}
		r = r < 0 ? r : 0;
	}
	sandbox_jail_spec(sb, &spec);
	phases_mark(&ph, "manifest");
	/* vm: the RAM file its memory is a difference from, by content: the
	 * template's here, or fetched from the store into nodemgr's cache (a
	 * sandbox moved from another node), side by side with the downloads. */
	struct base_job bj = { .n = n, .spec = &spec, .mb = &mbase, .done = true };
	bool want_base = r == 0 && mbase.sha[0] && arts[1].present, base_thread = false;
	pthread_mutex_init(&bj.mu, NULL);
	pthread_cond_init(&bj.cv, NULL);
	if (want_base) {
		bj.done = false;
		base_thread = pthread_create(&bj.tid, NULL, base_job, &bj) == 0;
		if (!base_thread)
			base_job(&bj);
	}
	if (r == 0) {
		uint64_t total = 0;
		for (size_t i = 0; i < N_ARTIFACTS; i++)
			total += arts[i].present ? arts[i].size : 0;
		sandbox_progress_set(sb, "restore", "download", "bytes", 0, total);
	}
	/* Each artifact downloaded, checked and rebuilt by nodemgr (the disk
	 * by `btrfs receive`, the memory by zstd and writes into the base's
	 * reflink), side by side with the others; a failure of any fails the
	 * restore, which deletes what the others rebuilt. */
	for (size_t i = 0; i < N_ARTIFACTS; i++) {
		bool mem = artifacts[i].kind == NM_ARTIFACT_MEM;

		jobs[i] = (struct art_job){ .n = n, .sb = sb, .spec = &spec, .snap = snap, .i = i,
					    .on = r == 0 && arts[i].present, .fd = -1, .dk = dk,
					    .a = &arts[i], .base_sha = mem ? mbase.sha : NULL,
					    .base = mem && want_base ? &bj : NULL };
		start_job(&jobs[i], restore_job);
	}
	{
		err_t je = { 0 };
		int rj = join_jobs(jobs, N_ARTIFACTS, &ph, download_names, import_names, &je);

		if (base_thread)
			pthread_join(bj.tid, NULL);
		if (want_base) {
			phases_add(&ph, "memory_base", bj.us);
			/* the base's failure first: it is why the memory waited */
			if (r == 0 && bj.r < 0) {
				*err = bj.err;
				r = err_wrap(err, "template %s", sb->template_name);
			}
		}
		if (r == 0 && rj < 0) {
			*err = je;
			r = rj;
		}
	}
	pthread_mutex_destroy(&bj.mu);
	pthread_cond_destroy(&bj.cv);
	dkey_free(dk);
	dk = NULL;
	phases_mark(&ph, "artifacts");
	if (r == 0)
		sandbox_progress_set(sb, "restore", "start", "bytes", 0, 0);
	/* closed once answered (make_and_upload) */
	for (size_t i = 0; i < N_ARTIFACTS; i++)
		staged[i] = jobs[i].fd;
	if (r == 0) {
		turn = vmstart_enter(n, sb);
		r = sb->be->fork(&n->bctx, &spec, sb->id, snap, &chan_fd, &pid, addr, err);
		if (r < 0)
			err_wrap(err, "start");
		phases_mark(&ph, "start");
	}
	if (r == 0)
		FAULT_POINT("restore.after_jail");
	if (r == 0 && (r = sandbox_net_push(n, sb, addr, err)) < 0)
		err_wrap(err, "network");
	if (r == 0) {
		_cleanup_free_ char *procs = suspended_procs(n, sb);
		/* vm: the processes of the suspend's moment carry on */
		sandbox_gc_retire(sb, "the sandbox was restored", procs);
		snprintf(reason, sizeof(reason), "restored from %s", snap);
		phases_mark(&ph, "net");
		r = sandbox_guest_up(n, sb, &spec, TAKE_FD(chan_fd), pid, reason,
				     "guest agent after restore", err);
		phases_mark(&ph, "guest");
	}
	vmstart_leave(n, turn);
	if (r < 0) {
		close_all(staged);
		if (chan_fd >= 0)
			close(chan_fd);
		/* Nothing of it may run here: the objects stay for a retry. */
		if (sb->be->destroy(&n->bctx, sb->id, &e2) < 0)
			log_err("sandbox %s: clean up a failed restore: %s", sb->id, e2.msg);
		sandbox_net_forget(n, sb);
		pthread_mutex_lock(&sb->mu);
		snprintf(reason, sizeof(reason), "restore failed: %.500s", err->msg);
		if (state_transition(n->db, sb->id, &sb->state, SB_SUSPENDED, reason, 0, &e2) < 0) {
			log_err("sandbox %s: %s", sb->id, e2.msg);
			state_set(sb->id, &sb->state, SB_SUSPENDED);
		}
		memset(&sb->prog, 0, sizeof(sb->prog));   /* the progress ends with the operation */
		sb->lc_busy = false;
		pthread_cond_broadcast(&sb->cv);
		pthread_mutex_unlock(&sb->mu);
		return err_wrap(err, "restore sandbox %s", sb->id);
	}
	/* Running again: the row goes, and the client has its answer; then
	 * the snapshot it came from and its objects go. */
	FAULT_POINT("restore.before_commit");
	if (sandbox_tx(n, sb, write_restored, NULL, &e2) < 0)
		log_warn("sandbox %s: %s", sb->id, e2.msg);
	phases_mark(&ph, "commit");
	pthread_mutex_lock(&sb->mu);
	free(sb->susp_snap);
	sb->susp_snap = NULL;
	sb->susp_key[0] = '\0';
	sb->susp_bytes = 0;
	snprintf(sb->mem_base, sizeof(sb->mem_base), "%s", arts[1].present ? mbase.sha : "");
	sched_on_state_locked(sb, SB_RUNNING);
	sandbox_schedule_timeout(n, sb);
	memset(&sb->prog, 0, sizeof(sb->prog));
	sb->lc_busy = false;
	pthread_cond_broadcast(&sb->cv);
	pthread_mutex_unlock(&sb->mu);
	if (c)
		sandbox_respond(c, 200, sb);
	phases_mark(&ph, "answer");
	close_all(staged);
	/* A suspend from here on takes a snapshot of another name; these are
	 * this restore's alone. */
	if (sb->be->snapshot_delete(&n->bctx, sb->id, snap, &e2) < 0)
		log_warn("sandbox %s: drop restored snapshot %s: %s", sb->id, snap, e2.msg);
	delete_objects(n, sb, snap);
	if (key_hex[0]) {
		uint8_t ref[CRYPT_REF_LEN];
		if (crypt_ref_parse(key_hex, ref) == 0)
			kms_data_key_forget(&n->kms, ref);
	}
	phases_mark(&ph, "cleanup");
	phases_text(&ph, steps, sizeof(steps));
	log_info("sandbox %s restored from %s in %.1f ms: %s", sb->id, snap,
		 (now_us() - t0) / 1000.0, steps);
	return 0;
}

/* ---- the rest of the node ---------------------------------------------- */

void suspend_render_locked(struct jw *w, struct sandbox *sb)
{
	const char *kind = sandbox_suspend_kind(sb);

	/* What a suspend keeps: "memory" (vm: processes carry on), "disk"
	 * (ns: the files; processes end), null: this backend cannot. */
	jw_key(w, "suspend");
	jw_str(w, kind);
	if (sb->state == SB_SUSPENDED && sb->susp_snap) {
		jw_key(w, "snapshot_id");
		jw_str(w, sb->susp_snap);
		jw_key(w, "suspended_bytes");
		jw_int(w, sb->susp_bytes);
	}
}

void suspend_load(struct node *n, struct sandbox *sb)
{
	struct db_rows rows;
	err_t err = { 0 };

	if (db_query(n->db, &rows, &err,
		     "SELECT snapshot_id, bytes, manifest_sha, data_key FROM suspensions"
		     " WHERE sandbox_id=?",
		     "s", sb->id) < 0) {
		log_warn("sandbox %s: %s", sb->id, err.msg);
		return;
	}
	if (rows.n_rows == 1) {
		sb->susp_snap = xstrdup(db_cell(&rows, 0, 0));
		sb->susp_bytes = db_cell_int(&rows, 0, 1);
		snprintf(sb->susp_sha, sizeof(sb->susp_sha), "%s", db_cell(&rows, 0, 2));
		snprintf(sb->susp_key, sizeof(sb->susp_key), "%s",
			 db_cell(&rows, 0, 3) ? db_cell(&rows, 0, 3) : "");
	}
	db_rows_free(&rows);
}

/* Objects under sandboxes/<id>/ other than keep's (NULL: all of them). */
struct sweep {
	struct node *n;
	const char *keep;   /* "sandboxes/<id>/<snap>/" or NULL */
};

static int sweep_one(void *arg, const char *key, uint64_t size)
{
	struct sweep *sw = arg;
	err_t e = { 0 };

	(void)size;
	if (sw->keep && strncmp(key, sw->keep, strlen(sw->keep)) == 0)
		return 0;
	if (objstore_delete(sw->n->os, key, &e) < 0)
		log_warn("delete %s: %s", key, e.msg);
	return 0;
}

void suspend_forget_objects(struct node *n, struct sandbox *sb, bool keep_current)
{
	_cleanup_free_ char *prefix = xasprintf("sandboxes/%s/", sb->id);
	_cleanup_free_ char *keep = NULL;
	struct sweep sw = { n, NULL };
	err_t e = { 0 };

	if (!n->os)
		return;
	if (keep_current && sb->susp_snap)
		sw.keep = keep = xasprintf("sandboxes/%s/%s/", sb->id, sb->susp_snap);
	if (objstore_list(n->os, prefix, sweep_one, &sw, &e) < 0)
		log_warn("sandbox %s: list its objects: %s", sb->id, e.msg);
	/* and the data keys of what went (a suspend cut off before its row
	 * left one behind) */
	if (db_exec(n->db, &e, "DELETE FROM data_keys WHERE sandbox_id=? AND (? IS NULL OR id<>?)",
		    "sss", sb->id, keep && sb->susp_key[0] ? sb->susp_key : NULL,
		    keep && sb->susp_key[0] ? sb->susp_key : NULL) < 0)
		log_warn("sandbox %s: forget its data keys: %s", sb->id, e.msg);
}

void suspend_reconcile(struct node *n, struct sandbox *sb)
{
	struct db_rows rows;
	err_t err = { 0 };
	enum sb_state prev = SB_PAUSED;

	if (sb->state == SB_RESTORING) {
		/* Cut off mid-restore: nothing of it may run; the objects and the
		 * row are still there. */
		if (sb->be && sb->be->destroy(&n->bctx, sb->id, &err) < 0)
			log_warn("sandbox %s: %s", sb->id, err.msg);
		if (state_transition(n->db, sb->id, &sb->state, SB_SUSPENDED,
				     "restore interrupted by a node restart", 0, &err) < 0)
			log_err("%s", err.msg);
		return;
	}
	if (sb->state != SB_SUSPENDING)
		return;
	/* Cut off mid-suspend: no row is restorable (that is written with
	 * suspended), the jail is still whole (it is freed after), frozen. Give
	 * it back as it was before, and drop a partial upload. */
	if (db_query(n->db, &rows, &err,
		     "SELECT from_state FROM events WHERE sandbox_id=? AND to_state='suspending'"
		     " ORDER BY id DESC LIMIT 1",
		     "s", sb->id) == 0) {
		if (rows.n_rows == 1 && db_cell(&rows, 0, 0) &&
		    strcmp(db_cell(&rows, 0, 0), "running") == 0)
			prev = SB_RUNNING;
		db_rows_free(&rows);
	}
	suspend_forget_objects(n, sb, false);
	/* suspending → paused: the jail is frozen; adopt() thaws it to say
	 * HELLO and pauses it again; a running one is resumed after. */
	if (state_transition(n->db, sb->id, &sb->state, SB_PAUSED,
			     "suspend interrupted by a node restart", 0, &err) < 0) {
		log_err("%s", err.msg);
		state_set(sb->id, &sb->state, SB_PAUSED);
	}
	sb->susp_resume = prev == SB_RUNNING;
}

/* auto_restore=false in the query: a request that needs the guest answers
 * 409 on a suspended sandbox instead of restoring it. Returns false when it
 * answered. */
static void query_auto_restore(void *arg, const char *k, const char *v)
{
	if (strcmp(k, "auto_restore") == 0)
		*(bool *)arg = !(strcmp(v, "false") == 0 || strcmp(v, "0") == 0);
}

bool suspend_gate(struct sandbox *sb, struct http_req *req, struct http_conn *c)
{
	bool auto_restore = true;
	enum sb_state st;

	pthread_mutex_lock(&sb->mu);
	st = sb->state;
	pthread_mutex_unlock(&sb->mu);
	if (st != SB_SUSPENDED && st != SB_SUSPENDING)
		return true;
	node_query_each(req->query, query_auto_restore, &auto_restore);
	if (auto_restore)
		return true;
	node_respond_conflict(c, st, "sandbox %s is %s and auto_restore=false", sb->id,
			      state_name(st));
	return false;
}

void handle_sandbox_suspend(struct node *n, struct sandbox *sb, const char *op,
			    struct http_conn *c)
{
	err_t err = { 0 };
	int r;

	if (strcmp(op, "suspend") == 0) {
		r = sandbox_suspend(n, sb, "suspended by client", c, &err);
	} else {
		enum sb_state st;
		bool busy;
		pthread_mutex_lock(&sb->mu);
		st = sb->state;
		busy = sb->lc_busy;
		pthread_mutex_unlock(&sb->mu);
		/* An explicit restore of a sandbox that is not suspended is a
		 * conflict (one restoring now is waited for). */
		if (!busy && st != SB_SUSPENDED)
			r = err_set(&err, EBUSY, "sandbox %s is %s; only a suspended sandbox can be "
				    "restored", sb->id, state_name(st));
		else
			r = sandbox_restore(n, sb, "restored by client", c, &err);
	}
	if (r < 0)
		sandbox_respond_err(c, sb, &err);
	else if (!http_conn_answered(c))   /* restored meanwhile by another request */
		sandbox_respond(c, 200, sb);
}
