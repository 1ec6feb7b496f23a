/* envelope.h - chunked AES-256-GCM sealing of the artifacts a node sends
 * to the object store (BYOK, docs/DESIGN.md "Bring your own key").
 *
 * An artifact set (one suspend: disk, memory, vmstate, manifest) is sealed
 * under one fresh random 32-byte data key; the key itself is only ever
 * stored wrapped by the tenant's key (kms.h). A sealed object is
 *
 *   header | chunk 0 | chunk 1 | ... | chunk n-1
 *
 * header (big-endian):
 *   "ALSEAL" (6) | version (1, = 1) | chunk_log2 (1) | key_ref (16) |
 *   nonce_prefix (8) | header length (2) |
 *   tenant, sandbox, kind, snapshot: each length (1) + bytes
 * chunk i: AES-256-GCM of up to 2^chunk_log2 plaintext bytes, then its tag
 *   (16). Every chunk but the last is full; the last may be empty.
 *   nonce = nonce_prefix | i (4 bytes): unique per chunk of an object, and
 *   the nonce_prefix is random per object, so unique under the data key.
 *   AAD = "airlock-seal-v1" | key_ref | nonce_prefix | chunk_log2 |
 *         the EXPECTED tenant, sandbox, kind, snapshot (length-prefixed) |
 *         i (8) | final (1)
 * So a chunk opens only at its own index, in its own object of its own
 * snapshot, sandbox and tenant; and a stream cut after any chunk fails,
 * because that chunk was sealed with final = 0. The context strings in the
 * header are there only to name what went wrong (they are not trusted:
 * the AAD is built from what the caller expects).
 */
#ifndef AIRLOCK_CRYPT_ENVELOPE_H
#define AIRLOCK_CRYPT_ENVELOPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../lib/err.h"
#include "../lib/util.h"

#define CRYPT_KEY_LEN 32
#define CRYPT_REF_LEN 16
#define CRYPT_TAG_LEN 16
#define CRYPT_CHUNK_LOG2 20             /* 1 MiB chunks */
#define CRYPT_HEAD_FIXED 34
#define CRYPT_HEAD_MAX (CRYPT_HEAD_FIXED + 4 * 256)
#define CRYPT_NAME_MAX 255

/* What an object is: the AAD binds all four. */
struct crypt_ctx {
	const char *tenant, *sandbox, *kind, *snapshot;
};

/* A parsed header (strings are NUL-terminated copies). */
struct crypt_head {
	uint8_t version, chunk_log2;
	uint8_t key_ref[CRYPT_REF_LEN];
	uint8_t nonce_prefix[8];
	size_t len;                          /* bytes of the header */
	char tenant[CRYPT_NAME_MAX + 1], sandbox[CRYPT_NAME_MAX + 1];
	char kind[CRYPT_NAME_MAX + 1], snapshot[CRYPT_NAME_MAX + 1];
};

/* Parse a header from the first n bytes of an object. Returns its length
 * (> 0), 0 when more bytes are needed, or -EBADMSG (err names why). */
int crypt_head_parse(const void *p, size_t n, struct crypt_head *h, err_t *err);
/* The key reference of a sealed object's header, as 32 hex digits. */
void crypt_ref_hex(const uint8_t ref[CRYPT_REF_LEN], char out[2 * CRYPT_REF_LEN + 1]);
int crypt_ref_parse(const char *hex, uint8_t ref[CRYPT_REF_LEN]);

/* Streams: fd to fd, neither held in memory (two chunks at a time).
 * crypt_seal_fd reads in (a file or a pipe) to its end; *out_bytes gets
 * what was written and out_sha256 (65 bytes, may be NULL) its SHA-256 in
 * hex, hashed as it is written: what an upload of out needs first. */
int crypt_seal_fd(int in, int out, const uint8_t key[CRYPT_KEY_LEN],
		  const uint8_t ref[CRYPT_REF_LEN], const struct crypt_ctx *ctx,
		  uint64_t *out_bytes, char out_sha256[65], err_t *err);
/* Opens what crypt_seal_fd wrote, checking every chunk before its bytes
 * are written to out (a failure may leave earlier chunks' plaintext in
 * out: the caller discards out on failure). -EBADMSG names the artifact
 * (ctx->kind) and what failed: the header, whose object it is, which chunk,
 * or "truncated". */
int crypt_open_fd(int in, int out, const uint8_t key[CRYPT_KEY_LEN], const struct crypt_ctx *ctx,
		  uint64_t *plain_bytes, err_t *err);
/* In memory, for small objects (the manifest). Appends to out. */
int crypt_seal_buf(const void *p, size_t n, const uint8_t key[CRYPT_KEY_LEN],
		   const uint8_t ref[CRYPT_REF_LEN], const struct crypt_ctx *ctx,
		   struct buf *out, err_t *err);
int crypt_open_buf(const void *p, size_t n, const uint8_t key[CRYPT_KEY_LEN],
		   const struct crypt_ctx *ctx, struct buf *out, err_t *err);

/* Downloads without a second copy: fed the sealed bytes in order
 * (crypt_opener_write, 0 or -errno, a sink for objstore_get_writer), it
 * writes each chunk's plaintext to out once the chunk is authenticated;
 * crypt_opener_finish opens the last chunk and says what failed, as
 * crypt_open_fd does. key is borrowed. */
struct crypt_opener;
struct crypt_opener *crypt_opener_new(int out, const uint8_t key[CRYPT_KEY_LEN],
				      const struct crypt_ctx *ctx);
int crypt_opener_write(void *o, const void *p, size_t n);
int crypt_opener_finish(struct crypt_opener *o, uint64_t *plain, err_t *err);
void crypt_opener_free(struct crypt_opener *o);
/* 0, or the failure a write met (into err). */
int crypt_opener_failed(struct crypt_opener *o, err_t *err);

#endif
