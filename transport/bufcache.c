/*
 * A small cache of frame-sized blocks per link (see link_internal.h): the
 * reliable layer and the dpdk reassembly allocate one block per frame, and
 * blocks above malloc's mmap threshold would otherwise be mapped, faulted
 * in and unmapped for every frame.
 */
#include "link_internal.h"

#include <stdlib.h>

void *esd_bufcache_get(struct bufcache *c, size_t size, size_t *cap)
{
	for (unsigned i = 0; i < c->n; i++) {
		if (c->cap[i] < size)
			continue;
		void *b = c->blk[i];
		*cap = c->cap[i];
		c->n--;
		c->blk[i] = c->blk[c->n];
		c->cap[i] = c->cap[c->n];
		return b;
	}
	/* Round up so frames of slightly different sizes share blocks. */
	size_t want = size < 4096 ? size : (size + 65535) & ~(size_t)65535;
	void *b = malloc(want);
	*cap = want;
	return b;
}

void esd_bufcache_put(struct bufcache *c, void *blk, size_t cap)
{
	if (!blk)
		return;
	if (cap < 4096 || c->n == BUFCACHE_SLOTS) {
		free(blk);
		return;
	}
	c->blk[c->n] = blk;
	c->cap[c->n] = cap;
	c->n++;
}

void esd_bufcache_fini(struct bufcache *c)
{
	for (unsigned i = 0; i < c->n; i++)
		free(c->blk[i]);
	c->n = 0;
}

struct fbuf *esd_fbuf_get(struct bufcache *c, size_t len)
{
	size_t cap;
	struct fbuf *b = esd_bufcache_get(c, sizeof(struct fbuf) + len, &cap);
	if (!b)
		return NULL;
	b->next = NULL;
	b->len = len;
	b->cap = cap;
	return b;
}

void esd_fbuf_put(struct bufcache *c, struct fbuf *b)
{
	if (b)
		esd_bufcache_put(c, b, b->cap);
}
