/* objstore.h - where artifacts that outlive a node are kept: suspended
 * sandboxes, templates. One interface, two drivers, chosen by URL:
 *
 *   file:///DIR                                   a directory on this host
 *   s3://BUCKET?endpoint=http://HOST:PORT&region=R&path_style=1
 *                                                 any S3-compatible service,
 *                                                 AWS Signature V4
 *
 * Keys are '/'-separated names of [A-Za-z0-9._-] segments, no empty, "." or
 * ".." segment, at most 1024 bytes (objstore_key_valid). Every object
 * carries the SHA-256 of its bytes, computed by the writer while it sends
 * them and checked by the reader while it receives them; a get whose bytes
 * do not match fails with -EBADMSG and a message naming the key.
 *
 * Calls are blocking, bounded by timeouts, and retried with backoff and
 * jitter where a retry is safe. One handle may be used by many threads.
 * Errors: -ENOENT no such object; -EBADMSG checksum mismatch; -EHOSTUNREACH
 * / -ETIMEDOUT store unreachable; -EACCES refused credentials; -EIO other.
 */
#ifndef AIRLOCK_OBJSTORE_H
#define AIRLOCK_OBJSTORE_H

#include <stdbool.h>
#include <stdint.h>

#include "../lib/err.h"

#define OBJSTORE_SHA256_HEX 65  /* 64 hex digits + NUL */

struct objstore;

struct objstore_opts {
	const char *access_key;  /* NULL: $AWS_ACCESS_KEY_ID */
	const char *secret_key;  /* NULL: $AWS_SECRET_ACCESS_KEY */
	int timeout_ms;          /* per network operation; 0: 30000 */
	int retries;             /* 0: 4 */
	uint64_t part_size;      /* multipart part size; 0: 16 MiB */
	int parallel;            /* parts in flight; 0: 4 */
};

/* url as above; opts may be NULL. The file driver creates DIR (0700) if
 * missing. Returns NULL with err set on a malformed URL. */
struct objstore *objstore_open(const char *url, const struct objstore_opts *opts, err_t *err);
void objstore_close(struct objstore *os);   /* accepts NULL */
/* "file" or "s3". */
const char *objstore_driver(const struct objstore *os);

bool objstore_key_valid(const char *key);

/* Store size bytes read from fd (from its current offset) under key,
 * replacing any object there; the object appears whole or not at all.
 * Large objects go as multipart uploads, parts in parallel (pread, so fd
 * must be a regular file for those). sha256_hex (may be NULL) receives
 * the digest stored with the object. */
int objstore_put_fd(struct objstore *os, const char *key, int fd, uint64_t size,
		    char sha256_hex[OBJSTORE_SHA256_HEX], err_t *err);
int objstore_put_buf(struct objstore *os, const char *key, const void *buf, uint64_t size,
		     char sha256_hex[OBJSTORE_SHA256_HEX], err_t *err);
/* progress (may be NULL): told of the bytes as they are stored, each byte
 * once unless a request is retried; from several threads at once for a
 * multipart upload. */
typedef void (*objstore_progress_fn)(void *arg, uint64_t n);
/* As objstore_put_fd for a regular file fd (from offset 0), with the
 * bytes' digest known: the caller hashed them as it wrote them (a
 * suspend's artifacts, src/node/suspend/suspend.c). Nothing is read before the
 * sending starts: s3 signs a single PUT with it (S3 refuses a body that
 * does not match) and each part of a multipart upload is hashed by the
 * thread that sends it; the file driver checks it as it copies (-EIO and
 * nothing stored when it differs). */
int objstore_put_hashed(struct objstore *os, const char *key, int fd, uint64_t size,
			const char sha256_hex[OBJSTORE_SHA256_HEX], objstore_progress_fn progress,
			void *arg, err_t *err);
/* Write the object's bytes, in order, to write(arg, p, n) (0 or -errno),
 * checking them against the stored digest at the end. */
int objstore_get_writer(struct objstore *os, const char *key,
			int (*write)(void *arg, const void *p, size_t n), void *arg,
			uint64_t *size, char sha256_hex[OBJSTORE_SHA256_HEX], err_t *err);

/* Write the object to fd and check it against its stored digest. *size
 * and sha256_hex (either may be NULL) receive what was read. */
int objstore_get_fd(struct objstore *os, const char *key, int fd, uint64_t *size,
		    char sha256_hex[OBJSTORE_SHA256_HEX], err_t *err);
/* Read a whole object of at most max bytes into *buf (malloc'd, NUL-
 * terminated past *size; caller frees). -EFBIG when larger. */
int objstore_get_buf(struct objstore *os, const char *key, uint64_t max, char **buf,
		     uint64_t *size, err_t *err);

/* Size and stored digest without reading the bytes; -ENOENT when absent. */
int objstore_head(struct objstore *os, const char *key, uint64_t *size,
		  char sha256_hex[OBJSTORE_SHA256_HEX], err_t *err);

/* Deleting an absent key succeeds. */
int objstore_delete(struct objstore *os, const char *key, err_t *err);

/* Call fn for every key that starts with prefix, in key order; a non-zero
 * return from fn stops the walk and is returned. */
typedef int (*objstore_list_fn)(void *arg, const char *key, uint64_t size);
int objstore_list(struct objstore *os, const char *prefix, objstore_list_fn fn, void *arg,
		  err_t *err);

#endif
