/* objstore-internal.h - what the drivers share: the ops table each fills,
 * where the bytes of a put come from, where the bytes of a get go, and the
 * SHA-256 helpers. Not for users of objstore.h. */
#ifndef AIRLOCK_OBJSTORE_INTERNAL_H
#define AIRLOCK_OBJSTORE_INTERNAL_H

#include <openssl/evp.h>
#include <sys/types.h>

#include "../lib/sha256.h"
#include "objstore.h"

/* n bytes at offset pos into p, 0 or -errno; called in any order and,
 * for a multipart upload, from several threads at once, possibly more than
 * once for one range (it must give the same bytes each time). */
typedef int (*objstore_read_at_fn)(void *arg, uint64_t pos, void *p, size_t n);

/* The bytes of a put: a buffer (borrowed), or fd from off (-1: not
 * seekable, read it in order). size bytes in all. */
struct os_src {
	const char *buf;
	int fd;
	off_t off;
	uint64_t size;
	/* or, when set: n bytes at pos from read_at (a part of a multipart
	 * upload: a range of its object's source); any order, possibly from
	 * several threads */
	objstore_read_at_fn read_at;
	objstore_progress_fn progress;   /* may be NULL: bytes stored, with arg */
	void *arg;
	/* the bytes' SHA-256 when the caller knows it (objstore_put_hashed):
	 * a driver then does not read them before sending them */
	const char *sha256;
};
/* Tell s's progress of n bytes stored. */
void os_src_stored(const struct os_src *s, uint64_t n);
/* Read n bytes at pos into p: pread, memcpy, or (not seekable) the next n
 * bytes, in which case pos must follow the previous read. -errno, -EPIPE
 * when the fd ends early. */
int os_src_read(const struct os_src *s, uint64_t pos, void *p, size_t n);

/* Where a get's bytes go. write returns 0 or -errno (-EFBIG: too large). */
struct os_sink {
	int (*write)(void *arg, const void *p, size_t n);
	void *arg;
};

struct objstore_ops {
	const char *name;
	/* sha256_hex is always non-NULL here. */
	int (*put)(struct objstore *os, const char *key, const struct os_src *src,
		   char sha256_hex[OBJSTORE_SHA256_HEX], err_t *err);
	int (*get)(struct objstore *os, const char *key, const struct os_sink *sink,
		   uint64_t *size, char sha256_hex[OBJSTORE_SHA256_HEX], err_t *err);
	int (*head)(struct objstore *os, const char *key, uint64_t *size,
		    char sha256_hex[OBJSTORE_SHA256_HEX], err_t *err);
	int (*del)(struct objstore *os, const char *key, err_t *err);
	int (*list)(struct objstore *os, const char *prefix, objstore_list_fn fn, void *arg,
		    err_t *err);
	void (*close)(struct objstore *os);
};

/* Every handle starts with this; a driver's own struct embeds it first. */
struct objstore {
	const struct objstore_ops *ops;
	struct objstore_opts opts;   /* defaults filled in; key strings owned */
};

/* Fill os->opts from opts (NULL: all defaults), the keys from the
 * environment when not given; free them with os_opts_free. */
void os_opts_init(struct objstore *os, const struct objstore_opts *opts);
void os_opts_free(struct objstore *os);

/* Drivers' constructors: rest is the URL after "file://" or "s3://". */
struct objstore *os_file_open(const char *rest, const struct objstore_opts *opts, err_t *err);
struct objstore *os_s3_open(const char *rest, const struct objstore_opts *opts, err_t *err);

#endif
