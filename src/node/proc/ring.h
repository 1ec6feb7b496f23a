/* ring.h - a bounded byte ring addressed by absolute stream offsets.
 *
 * One ring holds the most recent `cap` bytes of one output stream of one
 * process. Offsets are absolute positions in the stream (0 = first byte the
 * process ever wrote), so a client can resume from any offset and learn
 * exactly which range it missed. Memory grows on demand up to cap: most
 * processes print little, and a sandbox may hold hundreds of them.
 *
 * Not thread-safe: the owner (the process record) serialises access.
 * Depends only on lib/util, so unit tests link it alone.
 */
#ifndef AIRLOCK_NODE_RING_H
#define AIRLOCK_NODE_RING_H

#include <stddef.h>
#include <stdint.h>

struct ring {
	char *buf;          /* alloc bytes; byte at offset o lives at buf[o % alloc] */
	size_t alloc;       /* current allocation, power of two, <= cap rounded up */
	size_t cap;         /* most bytes kept */
	uint64_t start;     /* oldest offset still buffered */
	uint64_t end;       /* next offset to be written (= total bytes seen) */
};

void ring_init(struct ring *r, size_t cap);   /* cap > 0; allocates nothing yet */
void ring_free(struct ring *r);               /* accepts a zeroed ring */

/* Append n bytes at the end; the oldest bytes beyond cap are dropped. */
void ring_write(struct ring *r, const void *p, size_t n);

/* Append bytes that the producer says start at stream offset `off`.
 *   off == end: plain append.
 *   off <  end: the overlapping prefix is a duplicate and is skipped.
 *   off >  end: bytes [end, off) were lost upstream; they count as dropped
 *               (start moves to off, the buffer restarts there).
 * Returns the number of bytes appended. */
size_t ring_write_at(struct ring *r, uint64_t off, const void *p, size_t n);

/* Copy up to max bytes starting at offset *off into dst. When *off is older
 * than start, copying begins at start and *off is updated to start (the
 * caller reports [old *off, start) as dropped). When *off is beyond end it is
 * clamped to end. Returns the number of bytes copied; *off is the offset of
 * dst[0]. */
size_t ring_read(const struct ring *r, uint64_t *off, void *dst, size_t max);

#endif
