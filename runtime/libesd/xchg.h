/*
 * xchg.h - the exchange area between a node daemon and its trainer
 * (private to runtime/; trainers use it through esd/libesd.h).
 *
 * One memfd per node, created by the daemon, passed to the trainer in
 * WELCOME. It holds the micro-batch descriptor of the current iteration
 * and the dense parameters/gradients; the rows themselves stay in the
 * cache region and are addressed by slot.
 *
 *   header (this struct, 256 bytes)
 *   slots   u32 [max_keys]            cache slot of each key    (daemon)
 *   keys    u64 [max_keys]            the keys                  (daemon)
 *   labels  f32 [max_batch]                                     (daemon)
 *   dense   f32 [max_batch][dense]    dense features            (daemon)
 *   params  f32 [dense_params]        dense table values        (daemon)
 *   dgrad   f32 [dense_params]        dense table gradients     (trainer)
 *   bag_off u32 [max_batch*tables+1]  bag starts in slots       (daemon; version 2)
 *   dims    u32 [tables]              each table's dim          (daemon; model.dims)
 *   weights f32 [max_keys]            each key's weight         (daemon; version 3)
 *
 * Version 1 (a job without bags): max_keys = max_batch * tables, one key
 * per (sample, table), slots[i * tables + t]; no bag_off. Version 2 (a
 * stream with bags, docs/multihot.md): the keys of a micro-batch bag by
 * bag, bag (i, t) is slots[bag_off[i*T + t] .. bag_off[i*T + t + 1]).
 * A version-1 area is laid out exactly as before bags existed, so
 * trainers of attach protocol 2 read it unchanged. Version 3 (a weighted
 * stream, docs/multihot.md) is version 2 with a weight per key after
 * bag_off; a library of before refuses it (naming the version) rather
 * than train the bags unweighted.
 *
 * With model.dims (docs/design.md §6) the area ends in a page of its own
 * holding each table's dim (off_dims, 0 without): a trainer reads the
 * first dims[t] floats of a table-t row and writes only those of its
 * gradient.
 *
 * Ordering: the daemon writes the arrays, then sends BATCH on the control
 * socket; the trainer writes gradients (rows' gradient slots, dgrad), then
 * sends COMMIT. The socket's send/receive pair orders the accesses (a
 * system call is a full barrier), so the arrays need no atomics; the
 * iteration words below are atomics for readers that poll (esdctl).
 */
#ifndef ESD_RUNTIME_XCHG_H
#define ESD_RUNTIME_XCHG_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define ESD_XCHG_MAGIC   UINT64_C(0x4748435844534531) /* "1ESDXCHG" */
#define ESD_XCHG_VERSION      1u /* one key per feature */
#define ESD_XCHG_VERSION_BAGS 2u /* bags: bag_off */
#define ESD_XCHG_VERSION_WEIGHTS 3u /* weighted bags: bag_off and weights */

struct esd_xchg_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t hdr_size;
	uint64_t total_size;
	uint32_t max_batch, tables, dense, dense_params;
	uint64_t off_slots, off_keys, off_labels, off_dense, off_params, off_dgrad;
	uint64_t off_bag_off; /* version 2; 0 in version 1 */
	uint32_t max_keys;    /* entries of slots and keys */
	uint32_t pad1;
	uint64_t off_weights; /* version 3; 0 before */
	uint64_t off_dims;    /* 0: every table has the region's dim */
	uint8_t pad0[8];
	/* cache line 2: written by the daemon */
	_Atomic uint64_t batch_iter; /* iteration of the published micro-batch */
	uint32_t m;                  /* samples in it */
	uint32_t nkeys;              /* their keys (bag_off[m * tables]) */
	uint64_t global_k;
	uint8_t pad2[40];
	/* cache line 3: written by the trainer */
	_Atomic uint64_t commit_iter;
	double loss;
	uint8_t pad3[48];
};
_Static_assert(sizeof(struct esd_xchg_hdr) == 256, "exchange header is 256 bytes");

/* Compute the layout for the given sizes into h (magic, offsets, total):
 * max_keys 0 is a version-1 area (max_batch * tables keys), else a
 * version-2 area of max_keys keys with bag offsets. */
void esd_xchg_layout(struct esd_xchg_hdr *h, uint32_t max_batch, uint32_t tables,
		     uint32_t max_keys, uint32_t dense, uint32_t dense_params);
/* Append the dims array (tables u32) to a laid-out h: off_dims and the
 * total grow by whole pages. */
void esd_xchg_add_dims(struct esd_xchg_hdr *h);
/* The same with weighted 1 (and max_keys > 0): a version-3 area, a weight
 * per key after the bag offsets. */
void esd_xchg_layout_w(struct esd_xchg_hdr *h, uint32_t max_batch, uint32_t tables,
		       uint32_t max_keys, uint32_t dense, uint32_t dense_params, int weighted);
/* Check a mapped header (version 1 or 2) against the mapping length.
 * Returns 0 or -ESD_EBADMAGIC / -ESD_EBADVERSION / -EINVAL (sizes),
 * logged. */
int esd_xchg_check(const struct esd_xchg_hdr *h, size_t maplen);

static inline void *esd_xchg_at(const struct esd_xchg_hdr *h, uint64_t off)
{
	return (char *)h + off;
}

#endif
