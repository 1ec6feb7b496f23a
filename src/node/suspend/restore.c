/* restore.c - bring a suspended sandbox back from the object store, on
 * any node (suspended → restoring → running); suspend.c made it.
 *
 * The manifest is fetched and checked against the SHA-256 the row kept (a
 * manifest swapped in the store is refused), then each artifact is
 * downloaded into staging and checked against the manifest (size +
 * SHA-256; a mismatch names the artifact) and handed to nodemgr, which
 * rebuilds snapshots/<id>/<snap> from the disk stream (`btrfs receive` on
 * the template). A sealed disk stream goes to receive through a pipe as it
 * arrives instead, each chunk opened before its bytes are written
 * (restore_stream). A vm's memory base is fetched beside the downloads
 * when this node lacks it. Then the sandbox starts from it as a fork of
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
#include <unistd.h>

#include "../../byok/kms.h"
#include "../../lib/fault.h"
#include "../../lib/log.h"
#include "../../lib/pipe.h"
#include "../artifacts/artifacts.h"
#include "../life/lifecycle.h"
#include "../net/network.h"
#include "../tmpl/tmplstore.h"
#include "suspend.h"

static const char *const download_names[N_ARTIFACTS] = { "download_disk", "download_memory",
							  "download_vmstate" };
static const char *const import_names[N_ARTIFACTS] = { "import_disk", "import_memory",
							"import_vmstate" };

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
	_cleanup_free_ char *key = art_key(sb, snap, art_table[i].name);
	struct crypt_ctx cx = art_seal_ctx(sb, snap, art_table[i].name);
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
			err_wrap(err, "artifact %s", art_table[i].name);
	} else {
		r = objstore_get_writer(n->os, key, counted_write, &sink, &size, sha, err);
		if (r < 0)
			err_wrap(err, "artifact %s", art_table[i].name);
	}
	if (r == 0 && (size != want->size || strcmp(sha, want->sha) != 0))
		r = err_set(err, EBADMSG,
			    "artifact %s: %llu bytes with SHA-256 %.16s…, the manifest says "
			    "%llu bytes %.16s…",
			    art_table[i].name, (unsigned long long)size, sha,
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
	_cleanup_free_ char *path = art_staging_path(n, sb, snap, art_table[i].name);
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
	return nm_suspend_import(j->n->cfg->nm_sock, j->spec, j->snap, art_table[j->i].kind, fd,
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

	if (j->dk && art_table[j->i].kind == NM_ARTIFACT_DISK) {
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
	struct state_fence f = state_fence();
	int r = db_exec(n->db, err,
			"DELETE FROM suspensions WHERE sandbox_id=? AND " STATE_FENCE_OF_SQL,
			"s" STATE_FENCE_OF_TYPES, sb->id, STATE_FENCE_OF_ARGS(f, sb->id));

	(void)arg;
	r = state_fenced(n->db, sb->id, r, err);
	return r < 0 ? r : 0;
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
	r = art_manifest_read(n, sb, snap, sha, key_hex, arts, tuuid, tsha, &mbase, &dk, err);
	/* The template build its disk stream was made against: here already,
	 * or fetched from the store (a sandbox moved from another node). */
	if (r == 0 && tuuid[0]) {
		uint32_t v = 0;

		if ((r = tmplstore_fetch(n, sb->template_name, tuuid, tsha, &v, err)) < 0)
			err_wrap(err, "template %s", sb->template_name);
		else if (v != sb->template_version &&
			 (r = db_exec(n->db, err,
				      "UPDATE sandboxes SET template_version=? WHERE id=?"
				      STATE_FENCE_SQL, "is" STATE_FENCE_TYPES, (int64_t)v, sb->id,
				      STATE_FENCE_ARGS(state_fence()))) >= 0) {
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
		bool mem = art_table[i].kind == NM_ARTIFACT_MEM;

		jobs[i] = (struct art_job){ .n = n, .sb = sb, .spec = &spec, .snap = snap, .i = i,
					    .on = r == 0 && arts[i].present, .fd = -1, .dk = dk,
					    .a = &arts[i], .base_sha = mem ? mbase.sha : NULL,
					    .base = mem && want_base ? &bj : NULL };
		art_job_start(&jobs[i], restore_job);
	}
	{
		err_t je = { 0 };
		int rj = art_jobs_join(jobs, N_ARTIFACTS, &ph, download_names, import_names, &je);

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
		art_close_all(staged);
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
	art_close_all(staged);
	/* A suspend from here on takes a snapshot of another name; these are
	 * this restore's alone. */
	if (sb->be->snapshot_delete(&n->bctx, sb->id, snap, &e2) < 0)
		log_warn("sandbox %s: drop restored snapshot %s: %s", sb->id, snap, e2.msg);
	art_delete_all(n, sb, snap);
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
