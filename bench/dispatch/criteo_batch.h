/*
 * criteo_batch.h - the dispatch benches' global batches (bench_dispatch,
 * bench_step): 26 keys per sample, one per table with Criteo Kaggle's
 * cardinalities (divided by 'scale'), power-law ids, from a seeded
 * splitmix64 stream; and the medians they report.
 */
#ifndef ESD_BENCH_CRITEO_BATCH_H
#define ESD_BENCH_CRITEO_BATCH_H

#include <esd/types.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static const uint64_t criteo_rows[26] = {
    1460, 583,   10131227, 2202608, 305,  24,   12517, 633,     3,  93145, 5683,   8351593, 3194,
    27,   14992, 5461306,  10,      5652, 2173, 4,     7046547, 18, 15,    286181, 105,     142572};

/* Power-law rank in [0, N): inverse CDF of the continuous law on [1, N+1). */
static inline uint64_t zipf(uint64_t *rng, double skew, uint64_t N)
{
	double u = (double)(esd_splitmix64_next(rng) >> 11) * 0x1.0p-53;
	double e = 1.0 - skew;
	double x = pow(1.0 + u * (pow((double)N + 1.0, e) - 1.0), 1.0 / e);
	uint64_t r = (uint64_t)x - 1;
	return r < N ? r : N - 1;
}

/* k samples into off[k + 1] and keys[k * 26]; scale >= 1 divides the tables. */
static inline void gen_batch(uint64_t *rng, double skew, uint64_t scale, uint32_t k,
                             uint32_t *off, esd_key_t *keys)
{
	off[0] = 0;
	for (uint32_t i = 0; i < k; i++) {
		for (uint32_t t = 0; t < 26; t++) {
			uint64_t rows = criteo_rows[t] / scale;
			keys[i * 26 + t] = esd_key_make(t, zipf(rng, skew, rows ? rows : 1));
		}
		off[i + 1] = (i + 1) * 26;
	}
}

static inline int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* Median of n ns values (sorted in place), in ms. */
static inline double median_ms(int64_t *ns, int n)
{
	qsort(ns, (size_t)n, sizeof(*ns), cmp_i64);
	return (double)ns[n / 2] / 1e6;
}

#endif
