/*
 * Fuzz target: the dataset stream reader (reader.c) on arbitrary bytes:
 * open, read everything in odd-sized batches, seek back and read again.
 * Each input runs twice: as given, and with every checksum it can locate
 * recomputed, so that mutations get past the xxh64 checks and reach the
 * range, layout and zstd checks behind them.
 */
#define XXH_STATIC_LINKING_ONLY
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include "format.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void read_all(const uint8_t *data, size_t size)
{
	int fd = memfd_create("fuzz-stream", MFD_CLOEXEC);
	if (fd < 0)
		return;
	if (write(fd, data, size) != (ssize_t)size) {
		close(fd);
		return;
	}
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	struct esd_ds_reader *r;
	if (esd_ds_open(path, &r) == 0) {
		const struct esd_ds_info *in = esd_ds_reader_info(r);
		enum { K = 37 };
		float *labels = malloc(K * sizeof(float));
		float *dense = malloc((size_t)K * (in->ndense + 1) * sizeof(float));
		esd_key_t *keys = malloc((size_t)K * in->ntables * sizeof(esd_key_t));
		if (labels && dense && keys) {
			for (int pass = 0; pass < 2; pass++) {
				int64_t got;
				while ((got = esd_ds_read(r, K, labels, dense, keys)) > 0)
					for (int64_t i = 0; i < got * in->ntables; i++)
						if (esd_key_id(keys[i]) >=
						    in->rows[esd_key_table(keys[i])])
							abort();
				if (got < 0) { /* go on after the bad block */
					uint64_t next = (esd_ds_tell(r) / in->block_samples + 1) *
					                in->block_samples;
					esd_ds_seek(r, next < in->nsamples ? next : in->nsamples);
					while (esd_ds_read(r, K, labels, dense, keys) > 0)
						;
				}
				esd_ds_seek(r, in->nsamples / 2);
			}
		}
		free(labels);
		free(dense);
		free(keys);
		esd_ds_close(r);
	}
	close(fd);
}

/* Recompute the header, index and block checksums where they can be found. */
static void repair(uint8_t *d, size_t size)
{
	if (size < HDR_FIXED || memcmp(d, DS_MAGIC, 8))
		return;
	uint64_t nt = esd_get_le32(d + HDR_NTABLES);
	uint64_t hb = HDR_FIXED + nt * TABLE_ENTRY + 8;
	if (nt > ESD_DS_MAX_TABLES || hb > size)
		return;
	esd_put_le64(d + hb - 8, XXH64(d, hb - 8, 0));
	uint64_t io = esd_get_le64(d + HDR_INDEX_OFFSET), nb = esd_get_le64(d + HDR_NBLOCKS);
	if (io < hb || io > size || nb > (size - io) / 8 || io + INDEX_HDR + nb * 8 + 8 > size)
		return;
	uint8_t *ix = d + io;
	size_t ib = INDEX_HDR + nb * 8 + 8;
	for (uint64_t b = 0; b < nb; b++) {
		uint64_t o = esd_get_le64(ix + INDEX_HDR + b * 8);
		uint64_t end = b + 1 < nb ? esd_get_le64(ix + INDEX_HDR + (b + 1) * 8) : io;
		if (o < hb || end > io || end < o || end - o < BLOCK_HDR)
			continue;
		XXH64_state_t st;
		XXH64_reset(&st, 0);
		XXH64_update(&st, d + o, BLK_SUM);
		XXH64_update(&st, d + o + BLOCK_HDR, end - o - BLOCK_HDR);
		esd_put_le64(d + o + BLK_SUM, XXH64_digest(&st));
	}
	esd_put_le64(ix + ib - 8, XXH64(ix, ib - 8, 0));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	read_all(data, size);
	uint8_t *copy = malloc(size ? size : 1);
	if (!copy)
		return 0;
	memcpy(copy, data, size);
	repair(copy, size);
	if (memcmp(copy, data, size))
		read_all(copy, size);
	free(copy);
	return 0;
}
