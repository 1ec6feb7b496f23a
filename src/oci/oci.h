/* oci.h - import an OCI image layout or a `docker save` archive into a
 * directory: layers applied in order, whiteouts and opaque directories, and
 * the image config's defaults (Env, WorkingDir, User, Entrypoint, Cmd).
 *
 * Everything read here is untrusted: an image is whatever the person who
 * built it put in. The applier writes only beneath the root it is given:
 * every parent directory is resolved with openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV) and every
 * final component is made or opened with O_NOFOLLOW/AT_SYMLINK_NOFOLLOW, so
 * a symlink from an earlier layer (or the same one) is never followed. It
 * refuses, naming the layer and the entry: names with a ".." component,
 * hardlinks whose target is not a non-directory already in the tree,
 * character and block devices, entry types it does not know, and paths
 * that go through a symlink. Run as root, it keeps the image's owners and
 * modes (setuid bits too: they are the sandbox's business).
 */
#ifndef AIRLOCK_OCI_H
#define AIRLOCK_OCI_H

#include <stdint.h>
#include <stdio.h>

#include "../lib/err.h"
#include "../lib/json.h"
#include "../lib/util.h"
#include "tar.h"

/* The limits of one import; 0 in a field takes its default. */
struct oci_limits {
	uint64_t max_bytes;     /* file data written, all layers (default 16 GiB) */
	uint64_t max_entries;   /* entries, all layers (default 2,000,000) */
};
#define OCI_JSON_MAX (4u << 20)   /* manifest, index, config: each at most 4 MiB */
#define OCI_MAX_LAYERS 256

/* ---- a layer's bytes: raw, gzip or zstd (detected by magic) ---- */

/* Reads [off, off + len) of fd with pread, decompressing when the bytes
 * start with the gzip or zstd magic. */
struct oci_stream;
struct oci_stream *oci_stream_open(int fd, uint64_t off, uint64_t len, err_t *err);
void oci_stream_close(struct oci_stream *s);        /* accepts NULL */
const char *oci_stream_kind(const struct oci_stream *s); /* "tar", "gzip", "zstd" */
ssize_t oci_stream_read(void *s, void *p, size_t n, err_t *err); /* a tar_read_fn */
/* Check the region's bytes (compressed, as stored) against a digest
 * "sha256:<hex>" (other algorithms: -ENOTSUP): call before the first read;
 * oci_stream_verify then reads what the consumer left of the region and
 * compares (-EBADMSG on a mismatch). */
int oci_stream_expect(struct oci_stream *s, const char *digest, err_t *err);
int oci_stream_verify(struct oci_stream *s, err_t *err);
/* The digest a blob's name in an archive stands for ("blobs/sha256/<hex>"
 * -> "sha256:<hex>"), or NULL (a docker-save name: nothing to check).
 * Caller owns. */
char *oci_blob_digest(const char *name);

/* ---- applying one layer ---- */

/* Applies layers one after another onto one root (oci_apply_layer). */
struct oci_applier {
	int root;                 /* borrowed: O_PATH|O_DIRECTORY fd of the target root */
	struct oci_limits lim;
	uint64_t bytes, entries;  /* running totals, all layers */
	void *created;            /* per layer: the paths it made (private) */
};
void oci_applier_init(struct oci_applier *a, int root, const struct oci_limits *lim);
void oci_applier_free(struct oci_applier *a);
/* Apply one layer's tar from tr; layer names it in errors ("layer 2
 * (sha256:...)"). Returns 0 or -errno with err naming the entry. On an
 * error the root is left half-written: the caller discards it. */
int oci_apply_layer(struct oci_applier *a, struct tar_reader *tr, const char *layer,
		    err_t *err);

/* Normalise a name from a layer: strip leading "/" and "./", drop "." and
 * empty components; refuse "..". out holds TAR_NAME_MAX + 1 bytes. Returns
 * 0 ("" for the root itself) or -EINVAL. */
int oci_clean_path(const char *in, char *out);

/* openat2(dirfd, path, flags | O_CLOEXEC) with RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV: an fd, or
 * -errno (-ELOOP: a symlink on the way; -EXDEV: the path leaves dirfd). */
int oci_openat2_beneath(int dirfd, const char *path, int flags);

/* ---- the finishing touches of every template rootfs ---- */

/* What scripts/template-build.sh did with shell paths, which follow
 * symlinks the tree may hold (an image's /tmp -> /etc would have made the
 * host's /etc mode 1777): the jail's mount points proc, dev, sys, tmp (1777),
 * work and etc as real directories (whatever non-directory was there is
 * replaced), etc/hostname when there is none, and with ca_path (may be NULL)
 * the gateway CA in etc/airlock/gateway-ca.crt,
 * usr/local/share/ca-certificates/airlock-gateway.crt and appended to
 * etc/ssl/certs/ca-certificates.crt. All beneath root, nothing followed; a
 * CA path blocked by a symlink is skipped with a line on log. */
int oci_finish_rootfs(int root, const char *ca_path, FILE *log, err_t *err);

/* ---- the image ---- */

/* The image config's defaults, normalised to the JSON the node reads
 * (docs/DESIGN.md "Templates from OCI images"):
 *   {"env":{"K":"V",...},"workdir":"/x","user":"name"|"uid[:gid]",
 *    "entrypoint":[...],"cmd":[...]}
 * Absent fields are left out. cfg is the image's config blob (its "config"
 * object is read). Returns 0 with out filled, or -EINVAL when a field is of
 * the wrong type or over the limits. */
int oci_config_normalize(const json *cfg, struct buf *out, err_t *err);

/* Import the image in fd (a seekable tar: a docker-save archive or an OCI
 * layout) into root: the manifest's layers in order. config_out gets the
 * normalised config. progress (may be NULL) gets a line per layer. */
int oci_import(int fd, int root, const struct oci_limits *lim, struct buf *config_out,
	       FILE *progress, err_t *err);

#endif
