/* secmem.c - see secmem.h. Each allocation is its own mapping, so that
 * nothing else shares its pages (or their dump and lock state). */
#include "secmem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static size_t round_pages(size_t n)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);

	return (n + pg - 1) / pg * pg;
}

void *secmem_alloc(size_t n)
{
	size_t len = round_pages(n ? n : 1);
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		fprintf(stderr, "out of memory (secmem %zu bytes)\n", n);
		abort();
	}
	/* Best effort: over RLIMIT_MEMLOCK the pages can still be swapped,
	 * but they stay out of core dumps. */
	(void)mlock(p, len);
	(void)madvise(p, len, MADV_DONTDUMP);
	return p;
}

void secmem_free(void *p, size_t n)
{
	size_t len = round_pages(n ? n : 1);

	if (!p)
		return;
	explicit_bzero(p, len);
	munlock(p, len);
	munmap(p, len);
}
