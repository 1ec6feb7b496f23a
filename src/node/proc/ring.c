/* Bounded output ring with absolute offsets; see ring.h. */
#include "ring.h"

#include <string.h>

#include "../../lib/util.h"

void ring_init(struct ring *r, size_t cap)
{
	memset(r, 0, sizeof(*r));
	r->cap = cap ? cap : 1;
}

void ring_free(struct ring *r)
{
	free(r->buf);
	r->buf = NULL;
	r->alloc = 0;
}

static size_t pow2_at_least(size_t n)
{
	size_t p = 4096;

	while (p < n)
		p <<= 1;
	return p;
}

/* Copy [off, off+n) (all buffered) out of the ring. */
static void copy_out(const struct ring *r, uint64_t off, char *dst, size_t n)
{
	size_t pos = (size_t)(off % r->alloc);
	size_t first = r->alloc - pos < n ? r->alloc - pos : n;

	memcpy(dst, r->buf + pos, first);
	if (n > first)
		memcpy(dst + first, r->buf, n - first);
}

/* Make room for `need` buffered bytes (<= cap). Growing re-lays out the
 * bytes, since the position of offset o depends on alloc. */
static void ensure_alloc(struct ring *r, size_t need)
{
	size_t want;
	char *nb;

	if (need <= r->alloc)
		return;
	want = pow2_at_least(need);
	if (want > pow2_at_least(r->cap))
		want = pow2_at_least(r->cap);
	if (want <= r->alloc)
		return;
	nb = xmalloc(want);
	if (r->buf && r->end > r->start) {
		size_t len = (size_t)(r->end - r->start);
		size_t pos = (size_t)(r->start % want);
		char *tmp = xmalloc(len);
		size_t first;

		copy_out(r, r->start, tmp, len);
		first = want - pos < len ? want - pos : len;
		memcpy(nb + pos, tmp, first);
		if (len > first)
			memcpy(nb, tmp + first, len - first);
		free(tmp);
	}
	free(r->buf);
	r->buf = nb;
	r->alloc = want;
}

void ring_write(struct ring *r, const void *p, size_t n)
{
	const char *s = p;
	size_t buffered, pos, first;

	if (n == 0)
		return;
	/* Only the last cap bytes of this write can survive. */
	if (n > r->cap) {
		s += n - r->cap;
		r->end += n - r->cap;
		r->start = r->end;
		n = r->cap;
	}
	buffered = (size_t)(r->end - r->start);
	ensure_alloc(r, buffered + n < r->cap ? buffered + n : r->cap);
	pos = (size_t)(r->end % r->alloc);
	first = r->alloc - pos < n ? r->alloc - pos : n;
	memcpy(r->buf + pos, s, first);
	if (n > first)
		memcpy(r->buf, s + first, n - first);
	r->end += n;
	if (r->end - r->start > r->cap)
		r->start = r->end - r->cap;
	/* The allocation may be larger than cap (rounded up), but never smaller
	 * than what is buffered: ensure_alloc saw buffered + n capped at cap. */
}

size_t ring_write_at(struct ring *r, uint64_t off, const void *p, size_t n)
{
	const char *s = p;

	if (off < r->end) {
		uint64_t dup = r->end - off;
		if (dup >= n)
			return 0;
		s += dup;
		n -= (size_t)dup;
	} else if (off > r->end) {
		/* A gap: what lay between is gone. Restart the buffer at off. */
		r->start = r->end = off;
	}
	ring_write(r, s, n);
	return n;
}

size_t ring_read(const struct ring *r, uint64_t *off, void *dst, size_t max)
{
	size_t n;

	if (*off < r->start)
		*off = r->start;
	if (*off > r->end)
		*off = r->end;
	n = (size_t)(r->end - *off);
	if (n > max)
		n = max;
	if (n)
		copy_out(r, *off, dst, n);
	return n;
}
