/* tar.h - a bounded reader of tar streams (ustar, pax, GNU long names).
 *
 * The bytes are untrusted (an image someone hands us): every header's
 * checksum is checked, numbers are parsed with bounds, names and link
 * targets are limited to TAR_NAME_MAX bytes, a pax extended header to
 * TAR_PAX_MAX, and a stream that ends before the end-of-archive block is an
 * error ("truncated"), never a silent end. Pax and GNU long-name records
 * apply to the next entry only; a global pax header ('g') is skipped.
 *
 *     struct tar_reader tr; tar_init(&tr, read_fn, ctx);
 *     while ((r = tar_next(&tr, &e, err)) > 0) { ... tar_read(&tr, buf, n, err) ... }
 *     tar_free(&tr);
 */
#ifndef AIRLOCK_OCI_TAR_H
#define AIRLOCK_OCI_TAR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../lib/err.h"

#define TAR_NAME_MAX 4096
#define TAR_PAX_MAX (64u * 1024)

/* Read up to n bytes into p; returns the count (0 = end of stream) or
 * -errno (err filled). */
typedef ssize_t (*tar_read_fn)(void *ctx, void *p, size_t n, err_t *err);

struct tar_entry {
	char type;            /* '0' file, '1' hardlink, '2' symlink, '3' char, '4' block,
			       * '5' dir, '6' fifo; '7' is reported as '0' */
	char *name;           /* owned by the reader, valid until the next tar_next */
	char *linkname;       /* '1'/'2': the target, else "" */
	uint64_t size;        /* data bytes ('0' only; 0 for the others) */
	uint32_t mode;        /* permission bits, 07777 */
	uint32_t uid, gid;
	int64_t mtime;
	uint32_t devmajor, devminor;
};

struct tar_reader {
	tar_read_fn read;
	void *ctx;
	uint64_t left;        /* data bytes of the current entry not yet read */
	uint64_t pad;         /* padding after them */
	uint64_t offset;      /* bytes consumed from the stream */
	struct tar_entry e;
	char *name, *link;    /* buffers behind e.name, e.linkname */
	bool done;
};

void tar_init(struct tar_reader *tr, tar_read_fn fn, void *ctx);
void tar_free(struct tar_reader *tr);   /* the reader's buffers; not the source */
/* The next entry (data of the previous one is skipped). Returns 1 with *e
 * filled (borrowed), 0 at the end of the archive, or -errno. */
int tar_next(struct tar_reader *tr, struct tar_entry **e, err_t *err);
/* Read up to n bytes of the current entry's data; 0 when it is all read. */
ssize_t tar_read(struct tar_reader *tr, void *p, size_t n, err_t *err);
/* Offset in the stream of the current entry's next data byte. */
static inline uint64_t tar_data_offset(const struct tar_reader *tr) { return tr->offset; }

/* A source over a memory buffer (tests, fuzzing). */
struct tar_mem {
	const uint8_t *p;
	size_t len, off;
};
ssize_t tar_mem_read(void *ctx, void *p, size_t n, err_t *err);

#endif
