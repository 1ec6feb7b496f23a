/* secmem.h - memory for secrets: never swapped (mlock, where the limit
 * allows), left out of core dumps (MADV_DONTDUMP), wiped when freed. */
#ifndef AIRLOCK_SECMEM_H
#define AIRLOCK_SECMEM_H

#include <stddef.h>

/* Zeroed; whole pages; exits on exhaustion like xmalloc. */
void *secmem_alloc(size_t n);
/* Wipes and unmaps what secmem_alloc(n) gave; NULL is fine. */
void secmem_free(void *p, size_t n);

#endif
