/* Private to dispatch/: large private allocations (snapshots, the key
 * directory) backed by transparent huge pages where the kernel offers
 * them: their lookups are random, and 4 KiB pages would add a TLB miss to
 * nearly every one. */
#ifndef ESD_DISPATCH_BIGMEM_H
#define ESD_DISPATCH_BIGMEM_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define ESD_BIG_ALIGN ((size_t)2 << 20)

/* Zeroed, 64-byte aligned at least; free with free(). NULL on failure. */
static inline void *esd_big_zalloc(size_t bytes)
{
	void *p = NULL;
	size_t align = bytes >= ESD_BIG_ALIGN ? ESD_BIG_ALIGN : 64;
	size_t len = (bytes + align - 1) / align * align;
	if (posix_memalign(&p, align, len))
		return NULL;
#ifdef MADV_HUGEPAGE
	if (align == ESD_BIG_ALIGN)
		(void)madvise(p, len, MADV_HUGEPAGE);
#endif
	memset(p, 0, len);
	return p;
}

#endif
