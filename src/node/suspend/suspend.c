/* suspend.c - suspend a sandbox into the object store (restore.c brings
 * it back; artifacts.h is the set of objects between them):
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
 *   3. nodemgr writes each artifact into a pipe the node passed by fd (the
 *      disk as `btrfs send -p <template>`); the node seals (BYOK) and
 *      hashes what arrives into an unlinked file of DATA/staging;
 *   4. each artifact is uploaded to sandboxes/<id>/<snap>/<name> with that
 *      digest and checked back with a HEAD (size + SHA-256);
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
 * The rest of the file is what the node does with a suspended sandbox
 * besides restoring it: its fields in the API, its load at start, the
 * sweep of its objects and reconcile (the gate that restores on use is
 * wake/wake.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../byok/kms.h"
#include "../../lib/fault.h"
#include "../../lib/log.h"
#include "../../lib/pipe.h"
#include "../../lib/sha256.h"
#include "../artifacts/artifacts.h"
#include "../net/network.h"
#include "../proc/proc.h"
#include "../quota/quota.h"
#include "../tmpl/tmplstore.h"
#include "suspend.h"

const char *sandbox_suspend_kind(const struct sandbox *sb)
{
	return backend_suspend_kind(sb->be);
}

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
	_cleanup_free_ char *key = art_key(sb, snap, name);
	char sha[OBJSTORE_SHA256_HEX];
	uint64_t size = 0;

	if (objstore_put_hashed(n->os, key, fd, a->size, a->sha, counted_stored, sb, err) < 0)
		return art_store_err(err, name);
	FAULT_POINT("suspend_upload");
	if (objstore_head(n->os, key, &size, sha, err) < 0)
		return art_store_err(err, name);
	if (size != a->size || strcmp(sha, a->sha) != 0)
		return err_set(err, EHOSTUNREACH,
			       "object store: %s reads back as %llu bytes %.12s…, sent %llu %.12s…",
			       name, (unsigned long long)size, sha, (unsigned long long)a->size,
			       a->sha);
	a->present = true;
	return 0;
}

struct suspended_row {
	const char *snap, *manifest_sha, *procs, *data_key;
	int64_t bytes;
	enum sb_state prev;
	bool quota;   /* checked against the tenant's snapshot_mb */
};

/* Step 6: the restorable row and → suspended, together. The sandbox's
 * local snapshots go with its subvolume (step 7), so their rows go now. */
static int write_suspended(struct node *n, struct sandbox *sb, const void *arg, err_t *err)
{
	const struct suspended_row *row = arg;
	/* The local snapshots' rows first: what the quota then counts is
	 * what the tenant will hold once this commits. The uploaded bytes
	 * known, the last check, in the transaction that makes them count:
	 * suspends of the tenant's other sandboxes cannot slip in between.
	 * Over: the caller deletes the objects and gives the sandbox back. */
	struct state_fence f = state_fence();
	int r = db_exec(n->db, err, "DELETE FROM snapshots WHERE sandbox_id=? AND " STATE_FENCE_OF_SQL,
			"s" STATE_FENCE_OF_TYPES, sb->id, STATE_FENCE_OF_ARGS(f, sb->id));

	r = state_fenced(n->db, sb->id, r, err);

	if (r >= 0 && row->quota)
		r = quota_admit_suspend(n, sb, (uint64_t)row->bytes, err);
	if (r >= 0)
		r = db_exec(n->db, err,
			"INSERT INTO suspensions(sandbox_id, snapshot_id, bytes, manifest_sha,"
			" prev_state, created_at, procs, data_key) SELECT ?,?,?,?,?,?,?,? WHERE "
			STATE_FENCE_OF_SQL
			" ON CONFLICT(sandbox_id) DO UPDATE SET snapshot_id=excluded.snapshot_id,"
			" bytes=excluded.bytes, manifest_sha=excluded.manifest_sha,"
			" prev_state=excluded.prev_state, created_at=excluded.created_at,"
			" procs=excluded.procs, data_key=excluded.data_key",
			"ssississ" STATE_FENCE_OF_TYPES, sb->id, row->snap, row->bytes,
			row->manifest_sha, state_name(row->prev), wall_ms(), row->procs,
			row->data_key, STATE_FENCE_OF_ARGS(f, sb->id));
	if (r >= 0)
		r = state_fenced(n->db, sb->id, r, err);
	if (r >= 0)
		r = state_transition(n->db, sb->id, &sb->state, SB_SUSPENDED, "suspended",
				     STATE_IN_TX, err);
	return r < 0 ? r : 0;
}

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

	return nm_suspend_export(j->n->cfg->nm_sock, j->spec, j->snap, art_table[j->i].kind, fd,
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
	struct crypt_ctx cx = art_seal_ctx(j->sb, j->snap, art_table[j->i].name);

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
			j->r = art_store_err(&j->err, "memory base");
		return NULL;
	}
	t0 = now_us();
	j->r = upload(n, j->sb, j->snap, art_table[j->i].name, j->fd, j->a, &j->err);
	j->up_us = now_us() - t0;
	return NULL;
}

static const char *const upload_names[N_ARTIFACTS] = { "upload_disk", "upload_memory",
							"upload_vmstate" };

static const char *const export_names[N_ARTIFACTS] = { "export_disk", "export_memory",
							"export_vmstate" };

/* Steps 2-5 on a suspending, frozen sandbox. On success *bytes and sha get
 * the total uploaded and the manifest's digest, and staged the staging
 * files' fds (-1: none) for the caller to close once it answered: the last
 * close of an unlinked file of 100 MiB frees its pages, tens of ms. */
static int make_and_upload(struct node *n, struct sandbox *sb, const char *snap, int64_t *bytes,
			   char manifest_sha[OBJSTORE_SHA256_HEX], char **procs,
			   const struct dkey *dk, const uint8_t ref[CRYPT_REF_LEN], struct phases *ph,
			   int staged[N_ARTIFACTS], bool quota, err_t *err)
{
	struct art arts[N_ARTIFACTS] = { 0 };
	struct mbase mbase = { 0 };
	struct nm_sandbox_spec spec;
	_cleanup_free_ char *man = NULL, *mkey = NULL;
	bool memory = backend_can(sb->be, BACKEND_CAP_SUSPEND_MEMORY), split;
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
		return r == -EHOSTUNREACH || r == -ETIMEDOUT ? art_store_err(err, "template") : r;
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
	/* Before any of the sandbox's bytes go up: what they will take, from
	 * the snapshot (the data written since its subvolume was made, about
	 * what `btrfs send -p <template>` carries, and a full one's memory),
	 * at the bounds when not known (its disk; split: the memory not saved
	 * yet, at most its memory_mb). Compression makes the upload smaller,
	 * sealing a little larger; the commit checks the real bytes again. */
	if (quota) {
		uint64_t est = size >= 0 ? (uint64_t)size : (uint64_t)sb->limits.disk_mb << 20;

		if (split)
			est += (uint64_t)sb->limits.memory_mb << 20;
		if ((r = quota_admit_suspend(n, sb, est, err)) < 0)
			return r;
	}
	/* The progress: phase export (total unknown) until every export is
	 * done, then upload with its total; the bytes count as they go. */
	sandbox_progress_set(sb, "suspend", "export", "bytes", 0, 0);
	for (size_t i = 0; i < N_ARTIFACTS; i++) {
		_cleanup_free_ char *path = art_staging_path(n, sb, snap, art_table[i].name);

		if (!memory && art_table[i].kind != NM_ARTIFACT_DISK)
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
		bool mem = art_table[i].kind == NM_ARTIFACT_MEM;

		jobs[i] = (struct art_job){ .n = n, .sb = sb, .spec = &spec, .snap = snap, .i = i,
					    .on = fds[i] >= 0, .fd = fds[i], .dk = dk, .ref = ref,
					    .a = &arts[i], .base_sha = mem ? mbase.sha : NULL,
					    .mb = mem ? &mbase : NULL, .ex = &ex };
	}
	pthread_mutex_init(&ex.mu, NULL);
	for (size_t i = 0; i < N_ARTIFACTS; i++)
		if (art_table[i].kind == NM_ARTIFACT_DISK || !split)
			art_job_start(&jobs[i], suspend_job);
	if (split) {
		r = sb->be->snapshot_memory(&n->bctx, sb->id, snap, &size, err);
		if (r < 0)
			err_wrap(err, "snapshot");
		phases_mark(ph, "snapshot_memory");
		for (size_t i = 0; i < N_ARTIFACTS; i++)
			if (art_table[i].kind != NM_ARTIFACT_DISK) {
				jobs[i].on = jobs[i].on && r == 0;
				art_job_start(&jobs[i], suspend_job);
			}
	}
	{
		err_t je = { 0 };
		int rj = art_jobs_join(jobs, N_ARTIFACTS, ph, export_names, upload_names, &je);
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
	man = art_manifest_text(n, sb, snap, arts, tuuid, tsha, &mbase);
	mkey = art_key(sb, snap, "manifest.json");
	{
		/* the manifest sealed too; the row pins the sealed bytes' digest */
		struct crypt_ctx cx = art_seal_ctx(sb, snap, "manifest.json");
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
				r = art_store_err(err, "manifest");
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
	/* A seal on a revocation (node/byok.c) is not refused by the quota:
	 * refused, the sandbox's state would stay on this node unsealed. */
	bool quota = strncmp(why, SUSPEND_WHY_REVOKED, strlen(SUSPEND_WHY_REVOKED)) != 0;
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
	/* A tenant whose snapshot_mb is used up: refused before anything is
	 * done (checked again with the size once the snapshot is taken, and
	 * with the bytes at the commit). */
	if (quota && (r = quota_admit_suspend(n, sb, 0, err)) < 0) {
		pthread_mutex_unlock(&sb->mu);
		return r;
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
				    quota, err);
	dkey_free(dk);
	dk = NULL;
	FAULT_POINT("suspend_before_commit");
	if (r == 0) {
		row = (struct suspended_row){ snap, manifest_sha, procs, key_hex[0] ? key_hex : NULL,
					      bytes, prev, quota };
		pthread_mutex_lock(&sb->mu);
		r = sandbox_tx(n, sb, write_suspended, &row, err);
		/* The transaction rolled back after its transition moved memory
		 * to suspended: the row still says suspending, and so must
		 * memory (model/state.c: an edge memory alone takes). */
		if (r < 0 && sb->state == SB_SUSPENDED)
			state_set(sb->id, &sb->state, SB_SUSPENDING);
		pthread_mutex_unlock(&sb->mu);
		phases_mark(&ph, "commit");
	}
	if (r < 0) {
		/* The sandbox is still whole here: give it back. */
		art_close_all(staged);
		art_delete_all(n, sb, snap);
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
		 * not for a suspending sandbox to act on (life/lifecycle.c). Running
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
	art_close_all(staged);
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

/* ---- a suspended sandbox on the node ----------------------------------- */

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

const struct sandbox_feature suspend_feature = {
	.name = "suspend",
	.render_locked = suspend_render_locked,
};
