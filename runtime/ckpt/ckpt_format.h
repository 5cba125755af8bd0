/*
 * Private: the byte layout of a checkpoint file (esd/ckpt.h documents it)
 * and its encoding. Fields are little-endian at fixed offsets (esd/le.h);
 * row values are copied as they are, so the host must be little-endian
 * (checked at compile time).
 */
#ifndef ESD_CKPT_FORMAT_H
#define ESD_CKPT_FORMAT_H

#include <esd/ckpt.h>
#include <esd/le.h>
#include <stdint.h>
#include <string.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "checkpoint I/O assumes little-endian");

#define CKPT_MAGIC         "ESDCKPT\0"
#define CKPT_TRAILER_MAGIC "ESDCKEND"

/* header field offsets */
enum {
	H_MAGIC = 0,
	H_VERSION = 8,
	H_HSIZE = 12,
	H_SEED = 16,
	H_ITER = 24,
	H_CURSOR = 32,
	H_ROWS = 40,
	H_DENSE = 48,
	H_DCLOCK = 56,
	H_DIM = 64,
	H_OPT = 68,
	H_SF = 72,
	H_SHARD = 76,
	H_NSHARDS = 80,
	H_FLAGS = 84,
	H_PARENT_ITER = 88,
	H_PARENT_SUM = 96,
	H_RESERVED = 104, /* version 1: zero to H_SUM */
	H_NTABLES = 104,  /* version 2: the table block's entries */
	H_TABSUM = 112,   /* version 2: XXH64 of the table block */
	H_SUM = 120,
};
/* trailer field offsets */
enum {
	T_MAGIC = 0,
	T_ROWS = 8,
	T_DENSE = 16,
	T_BODYSUM = 24,
	T_HDRSUM = 32,
	T_SUM = 40,
};

/* Bytes of one row record. */
static inline uint64_t ckpt_record_size(uint32_t dim, uint32_t sf)
{
	return 16 + 4 * (uint64_t)dim * (1 + sf);
}

/* Bytes of one entry of the version-2 table block. */
#define CKPT_TABLE_ENTRY 16u

/* Checksums: XXH64 with seed 0 (see ckpt_*.c). */
uint64_t esd_ckpt_hash(const void *p, size_t n);

#endif
