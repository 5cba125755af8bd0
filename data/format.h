/*
 * format.h - the on-disk layout of a dataset stream (private to esd_data).
 * docs/dataset.md describes the same layout in prose; keep them in step.
 *
 *   file header   HDR_FIXED bytes, then per table TABLE_ENTRY bytes, then
 *                 the xxh64 of all of it (8 bytes)
 *   blocks        BLOCK_HDR bytes + payload, one per block_samples samples
 *   index         INDEX_HDR bytes, nblocks x u64 block offset, xxh64 (8)
 *
 * All integers little-endian. A block's payload (before optional zstd):
 *   labels  u8[n]
 *   dense   n x ndense x (f32 | bf16), sample-major
 *   ids     per table: n x (u32 | u64), table-major (u64 when rows > 2^32)
 *           (a bag table: n lengths, then its bags' IDs; a weighted
 *           stream: then an f32 weight per ID of the table)
 */
#ifndef ESD_DATA_FORMAT_H
#define ESD_DATA_FORMAT_H

#include <stdint.h>
#include <string.h>

#include <esd/dataset.h>
#include <esd/le.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "esd_data writes little-endian streams and only builds on little-endian hosts"
#endif

#define DS_MAGIC       "ESDDATA\0"
#define DS_VERSION     1u /* every table one ID per sample */
#define DS_VERSION_BAGS 2u /* some table has bags (max_bag > 1) */
#define DS_BLOCK_MAGIC 0x4b4c4245u /* "EBLK" */
#define DS_INDEX_MAGIC 0x58444e49u /* "INDX" */
#define DS_FLAG_ZSTD   1u
#define DS_FLAG_NAMES  2u /* a names section ends the header (docs/dataset.md) */
#define DS_FLAG_WEIGHTS 4u /* every table's IDs are followed by an f32 weight each */

/* Fixed part of the file header; offsets of its fields. */
enum {
	HDR_MAGIC = 0,          /* char[8] */
	HDR_VERSION = 8,        /* u32 */
	HDR_BYTES = 12,         /* u32: whole header incl. tables and checksum */
	HDR_SHAPE = 16,         /* char[32] */
	HDR_NTABLES = 48,       /* u32 */
	HDR_NDENSE = 52,        /* u32 */
	HDR_DENSE_FORMAT = 56,  /* u32 */
	HDR_BLOCK_SAMPLES = 60, /* u32 */
	HDR_FLAGS = 64,         /* u32: DS_FLAG_* */
	HDR_ORIGIN = 68,        /* u32 */
	HDR_NSAMPLES = 72,      /* u64 */
	HDR_NBLOCKS = 80,       /* u64 */
	HDR_INDEX_OFFSET = 88,  /* u64: 0 while the writer is open */
	HDR_SEED = 96,          /* u64 */
	HDR_DRIFT = 104,        /* f64 */
	HDR_SCALE = 112,        /* f64 */
	HDR_MAX_ROWS = 120,     /* u64 */
	HDR_SKIPPED = 128,      /* u64 */
	HDR_ZSTD_LEVEL = 136,   /* i32 */
	HDR_RESERVED = 140,     /* u32, 0 */
	HDR_SOURCE = 144,       /* char[64] */
	HDR_FIXED = 208,
};

/* Per-table entry: u64 rows, f64 zipf. */
#define TABLE_ENTRY 16

/* Block header: magic u32, n u32, first sample u64, stored bytes u32, raw
 * bytes u32, flags u32, reserved u32, xxh64 u64 of (header bytes 0..31 ||
 * stored payload), seeded 0. */
enum {
	BLK_MAGIC = 0,
	BLK_N = 4,
	BLK_FIRST = 8,
	BLK_STORED = 16,
	BLK_RAW = 20,
	BLK_FLAGS = 24,
	BLK_RESERVED = 28,
	BLK_SUM = 32,
	BLOCK_HDR = 40,
};

/* Index header: magic u32, reserved u32, nblocks u64; then offsets, xxh64. */
#define INDEX_HDR 16

/* Bytes of one stored ID of a table of this cardinality. */
static inline unsigned id_width(uint64_t rows)
{
	return rows > UINT64_C(0x100000000) ? 8u : 4u;
}

static inline unsigned dense_width(uint32_t fmt)
{
	return fmt == ESD_DS_DENSE_BF16 ? 2u : 4u;
}

/* Whether table t carries bags (docs/multihot.md). */
static inline int is_bag(const struct esd_ds_info *in, uint32_t t)
{
	return in->max_bag[t] > 1;
}

static inline int has_bags(const struct esd_ds_info *in)
{
	for (uint32_t t = 0; t < in->ntables; t++)
		if (is_bag(in, t))
			return 1;
	return 0;
}

/* Bytes of one stored bag length. */
static inline unsigned len_width(uint32_t max_bag)
{
	return max_bag < 256 ? 1u : 2u;
}

/* Header bytes: version 2 adds a u32 max_bag per table after the entries,
 * the names flag a char[ESD_DS_NAME_LEN] per table after those. */
static inline uint64_t header_bytes(uint32_t ntables, int bags, int names)
{
	return HDR_FIXED +
	       (uint64_t)ntables * (TABLE_ENTRY + (bags ? 4u : 0u) + (names ? ESD_DS_NAME_LEN : 0u)) +
	       8;
}

/* Byte offset of the names section (flag DS_FLAG_NAMES). */
static inline uint64_t names_offset(uint32_t ntables, int bags)
{
	return HDR_FIXED + (uint64_t)ntables * (TABLE_ENTRY + (bags ? 4u : 0u));
}

/* Bytes of one ID's weight: 4 (f32) in a weighted stream, else 0. */
static inline unsigned wt_width(const struct esd_ds_info *in)
{
	return in->weighted ? 4u : 0u;
}

/* Bytes of one sample in a raw (uncompressed) payload; with bags, the
 * most one can take (every bag full). */
static inline uint64_t sample_bytes(const struct esd_ds_info *in)
{
	uint64_t b = 1 + (uint64_t)in->ndense * dense_width(in->dense_format);
	for (uint32_t t = 0; t < in->ntables; t++)
		b += is_bag(in, t) ? len_width(in->max_bag[t]) +
		                         (uint64_t)in->max_bag[t] * (id_width(in->rows[t]) + wt_width(in))
		                   : id_width(in->rows[t]) + wt_width(in);
	return b;
}

static inline uint16_t f32_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN stays NaN */
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1); /* round to nearest even */
	return (uint16_t)(u >> 16);
}

static inline float bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* Record the converter's skipped-line count in the header written at close. */
void esd_ds_writer_set_skipped(struct esd_ds_writer *w, uint64_t skipped);

/* Keep the message for esd_ds_last_error() and log it; returns rc. */
int esd_ds_fail(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Validate the ranges of an info (writer side). Returns 0 or -EINVAL. */
int esd_ds_info_check(const struct esd_ds_info *in, char *why, size_t whylen);

#endif /* ESD_DATA_FORMAT_H */
