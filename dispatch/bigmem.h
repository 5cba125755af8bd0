/* Private to dispatch/: large private allocations (snapshots, the key
 * directory) from anonymous mappings: zero pages on first touch only (a
 * directory sized for millions of keys costs nothing until used) and
 * transparent huge pages where the kernel offers them (their lookups are
 * random; 4 KiB pages would add a TLB miss to nearly every one). */
#ifndef ESD_DISPATCH_BIGMEM_H
#define ESD_DISPATCH_BIGMEM_H

#include <stddef.h>
#include <sys/mman.h>

/* Zeroed, page aligned; NULL on failure. Free with esd_big_free(p, bytes). */
static inline void *esd_big_zalloc(size_t bytes)
{
	if (!bytes)
		bytes = 1;
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
#ifdef MADV_HUGEPAGE
	if (bytes >= ((size_t)2 << 20))
		(void)madvise(p, bytes, MADV_HUGEPAGE);
#endif
	return p;
}

static inline void esd_big_free(void *p, size_t bytes)
{
	if (p)
		munmap(p, bytes ? bytes : 1);
}

#endif
