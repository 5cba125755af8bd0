/* rows.h - row accessors of the node's cache region (private to esdd). */
#ifndef ESD_NODE_ROWS_H
#define ESD_NODE_ROWS_H

#include "node.h"

static inline float *node_row_value(struct node *nd, uint32_t slot)
{
	return esd_cache_vec(nd->cache, slot);
}

static inline float *node_row_state(struct node *nd, uint32_t slot)
{
	return esd_cache_state(nd->cache, slot);
}

static inline float *node_row_grad(struct node *nd, uint32_t slot)
{
	return esd_cache_grad(nd->cache, slot);
}

#endif
