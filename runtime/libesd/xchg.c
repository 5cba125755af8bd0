/* Layout and validation of the daemon <-> trainer exchange area. */
#include "xchg.h"

#include <esd/err.h>
#include <esd/log.h>
#include <string.h>

static uint64_t align64(uint64_t x)
{
	return (x + 63) & ~UINT64_C(63);
}

void esd_xchg_layout(struct esd_xchg_hdr *h, uint32_t max_batch, uint32_t tables,
		     uint32_t max_keys, uint32_t dense, uint32_t dense_params)
{
	esd_xchg_layout_w(h, max_batch, tables, max_keys, dense, dense_params, 0);
}

void esd_xchg_layout_w(struct esd_xchg_hdr *h, uint32_t max_batch, uint32_t tables,
		       uint32_t max_keys, uint32_t dense, uint32_t dense_params, int weighted)
{
	weighted = weighted && max_keys;
	memset(h, 0, sizeof(*h));
	h->magic = ESD_XCHG_MAGIC;
	h->version = weighted ? ESD_XCHG_VERSION_WEIGHTS
		     : max_keys ? ESD_XCHG_VERSION_BAGS
				: ESD_XCHG_VERSION;
	h->hdr_size = sizeof(*h);
	h->max_batch = max_batch;
	h->tables = tables;
	h->dense = dense;
	h->dense_params = dense_params;
	uint64_t off = sizeof(*h), mt = max_keys ? max_keys : (uint64_t)max_batch * tables;
	h->max_keys = (uint32_t)mt;
	h->off_slots = off;
	off = align64(off + mt * 4);
	h->off_keys = off;
	off = align64(off + mt * 8);
	h->off_labels = off;
	off = align64(off + (uint64_t)max_batch * 4);
	h->off_dense = off;
	off = align64(off + (uint64_t)max_batch * dense * 4);
	h->off_params = off;
	off = align64(off + (uint64_t)dense_params * 4);
	h->off_dgrad = off;
	off = align64(off + (uint64_t)dense_params * 4);
	if (max_keys) {
		h->off_bag_off = off;
		off = align64(off + ((uint64_t)max_batch * tables + 1) * 4);
	}
	if (weighted) {
		h->off_weights = off;
		off = align64(off + mt * 4);
	}
	h->total_size = (off + 4095) & ~UINT64_C(4095);
}

void esd_xchg_add_dims(struct esd_xchg_hdr *h)
{
	h->off_dims = h->total_size;
	h->total_size += ((uint64_t)h->tables * 4 + 4095) & ~UINT64_C(4095);
}

int esd_xchg_check(const struct esd_xchg_hdr *h, size_t maplen)
{
	struct esd_xchg_hdr want;
	if (maplen < sizeof(*h)) {
		ESD_ERR("xchg", "exchange area of %zu bytes is smaller than its header", maplen);
		return -EINVAL;
	}
	if (h->magic != ESD_XCHG_MAGIC) {
		ESD_ERR("xchg", "exchange area: bad magic %#llx", (unsigned long long)h->magic);
		return -ESD_EBADMAGIC;
	}
	if (h->version < ESD_XCHG_VERSION || h->version > ESD_XCHG_VERSION_WEIGHTS) {
		ESD_ERR("xchg", "exchange area: version %u, this library speaks %u to %u",
			h->version, ESD_XCHG_VERSION, ESD_XCHG_VERSION_WEIGHTS);
		return -ESD_EBADVERSION;
	}
	uint32_t max_keys = h->version >= ESD_XCHG_VERSION_BAGS ? h->max_keys : 0;
	esd_xchg_layout_w(&want, h->max_batch, h->tables, max_keys, h->dense, h->dense_params,
			  h->version == ESD_XCHG_VERSION_WEIGHTS);
	if (h->off_dims)
		esd_xchg_add_dims(&want);
	if (h->hdr_size != want.hdr_size || h->total_size != want.total_size ||
	    h->off_dgrad != want.off_dgrad || h->off_bag_off != want.off_bag_off ||
	    h->off_weights != want.off_weights || h->off_dims != want.off_dims ||
	    h->total_size > maplen) {
		ESD_ERR("xchg", "exchange area: sizes inconsistent (total %llu, mapped %zu)",
			(unsigned long long)h->total_size, maplen);
		return -EINVAL;
	}
	return 0;
}
