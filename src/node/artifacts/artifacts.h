/* artifacts.h - a suspended sandbox's artifact set, shared by the suspend
 * (suspend.c) and the restore (restore.c); not a public API.
 *
 * In the object store, under sandboxes/<id>/<snap>/: each artifact by its
 * name (disk; vm: memory, vmstate), sealed under the suspend's data key
 * (BYOK), and LAST manifest.json, which names each artifact's size and
 * SHA-256 and which the suspensions row pins by its own SHA-256. On the
 * node, an artifact passes through an unlinked file of DATA/staging. */
#ifndef AIRLOCK_NODE_ARTIFACTS_H
#define AIRLOCK_NODE_ARTIFACTS_H

#include <pthread.h>

#include "../../byok/envelope.h"
#include "../../lib/phases.h"
#include "../../objstore/objstore.h"
#include "../model/model.h"

#define MANIFEST_MAX (64u * 1024)
#define ARTIFACT_MAX (1ull << 40)
#define N_ARTIFACTS 3

/* The artifacts a manifest may name, and the file nodemgr makes of each. */
struct art_kind {
	const char *name;
	enum nm_artifact kind;
};
extern const struct art_kind art_table[N_ARTIFACTS];

/* One artifact as stored: what the manifest says of it. */
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

/* One artifact's step, run side by side with the others': export
 * (nodemgr writes it into a pipe, staged sealed into fd), upload, download
 * (into fd) and import (nodemgr rebuilds it from fd). A vm's disk (`btrfs
 * send` and receive, I/O) and memory (the page diff and zstd, CPU) take
 * about as long as each other, and the store's handle may be used by many
 * threads (objstore.h). */
struct base_job;
struct exports;

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

/* sandboxes/<id>/<snap>/<name> */
char *art_key(const struct sandbox *sb, const char *snap, const char *name);
/* The staging file of one artifact (the caller unlinks it once open). */
char *art_staging_path(struct node *n, const struct sandbox *sb, const char *snap,
		       const char *name);
/* A store failure during a suspend: the sandbox stays, the client is told
 * the store is unavailable (503). */
int art_store_err(err_t *err, const char *what);
/* Every object of the set, best effort. */
void art_delete_all(struct node *n, struct sandbox *sb, const char *snap);
/* What an artifact's AAD binds (envelope.h). */
struct crypt_ctx art_seal_ctx(const struct sandbox *sb, const char *snap, const char *name);

/* The manifest of the artifacts stored (arts[i].present), as JSON text. */
char *art_manifest_text(struct node *n, struct sandbox *sb, const char *snap,
			const struct art arts[N_ARTIFACTS], const char *tuuid, const char *tsha,
			const struct mbase *mb);
/* The manifest from the store, checked against want_sha (the row's) before
 * a byte is parsed, opened with the data key want_key names (BYOK; *dk),
 * and every field checked: into arts, the template's build (tuuid, tsha)
 * and the memory's base. */
int art_manifest_read(struct node *n, struct sandbox *sb, const char *snap,
		      const char *want_sha, const char *want_key, struct art arts[N_ARTIFACTS],
		      char tuuid[37], char tsha[OBJSTORE_SHA256_HEX], struct mbase *mb,
		      struct dkey **dk, err_t *err);

/* Start fn on j when it is on, in a thread of its own. */
void art_job_start(struct art_job *j, void *(*fn)(void *));
/* Wait for the jobs art_job_start started (or ran); the first failure, in
 * artifact order, into err. Each job's two times into ph as names[i] and
 * names2[i]. */
int art_jobs_join(struct art_job *jobs, size_t nj, struct phases *ph,
		  const char *const names[N_ARTIFACTS], const char *const names2[N_ARTIFACTS],
		  err_t *err);
void art_close_all(int fds[N_ARTIFACTS]);

/* Delete sb's objects in the store (keep_current: but its restorable one).
 * -errno when the store could not list or delete them all. */
int suspend_forget_objects(struct node *n, struct sandbox *sb, bool keep_current);

/* The objects of sandbox id, deleted (its rows are gone): every object
 * under sandboxes/<id>/. When the store cannot (down, 5xx), tried again by
 * the reaper (TIMER_STORE_SWEEP, attempt+1) after a backoff of 1 s doubling
 * to 5 min, for as long as the node runs: a store that was down for the
 * delete must not keep the objects forever. */
void art_sweep_deleted(struct node *n, const char *id, unsigned attempt);

#endif
