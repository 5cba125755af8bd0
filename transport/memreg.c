/*
 * Memory the application lets links send from in place
 * (esd_transport_register_memory): a small process-wide table, read by
 * the rdma backend, which registers each region with its device. A
 * generation counter tells a link that the table changed since it looked.
 */
#include "link_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>

static pthread_mutex_t memreg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct memreg_region memreg_tab[ESD_TRANSPORT_MAX_REGIONS];
static unsigned memreg_n;
static _Atomic uint64_t memreg_gen = 1;

int esd_transport_register_memory(const void *base, size_t len)
{
	if (!base || !len || (uintptr_t)base + len < (uintptr_t)base)
		return -EINVAL;
	int rc = 0;
	pthread_mutex_lock(&memreg_mu);
	for (unsigned i = 0; i < memreg_n; i++) {
		uintptr_t b = (uintptr_t)memreg_tab[i].base, e = b + memreg_tab[i].len;
		if ((uintptr_t)base < e && (uintptr_t)base + len > b)
			rc = -EEXIST; /* overlaps a region already there */
	}
	if (!rc && memreg_n == ESD_TRANSPORT_MAX_REGIONS)
		rc = -ENOSPC;
	if (!rc) {
		memreg_tab[memreg_n++] = (struct memreg_region){.base = base, .len = len};
		atomic_fetch_add(&memreg_gen, 1);
	}
	pthread_mutex_unlock(&memreg_mu);
	return rc;
}

int esd_transport_unregister_memory(const void *base)
{
	int rc = -ENOENT;
	pthread_mutex_lock(&memreg_mu);
	for (unsigned i = 0; i < memreg_n; i++)
		if (memreg_tab[i].base == base) {
			memreg_tab[i] = memreg_tab[--memreg_n];
			atomic_fetch_add(&memreg_gen, 1);
			rc = 0;
			break;
		}
	pthread_mutex_unlock(&memreg_mu);
	return rc;
}

uint64_t esd_memreg_generation(void)
{
	return atomic_load(&memreg_gen);
}

unsigned esd_memreg_snapshot(struct memreg_region *out, uint64_t *gen)
{
	pthread_mutex_lock(&memreg_mu);
	unsigned n = memreg_n;
	for (unsigned i = 0; i < n; i++)
		out[i] = memreg_tab[i];
	*gen = atomic_load(&memreg_gen);
	pthread_mutex_unlock(&memreg_mu);
	return n;
}
