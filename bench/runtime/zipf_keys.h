/*
 * zipf_keys.h - the store benchmarks' keys: ranks drawn from Zipf(s) over
 * n rows by inversion of a precomputed CDF (n doubles; fine for a
 * benchmark's few million rows), each rank a fixed pseudo-random key.
 */
#ifndef ESD_BENCH_ZIPF_KEYS_H
#define ESD_BENCH_ZIPF_KEYS_H

#include <esd/types.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static inline double *zipf_cdf(uint64_t n, double s)
{
	double *c = malloc(n * sizeof(*c)), sum = 0;
	if (!c)
		return NULL;
	for (uint64_t r = 0; r < n; r++)
		c[r] = sum += pow((double)r + 1, -s);
	for (uint64_t r = 0; r < n; r++)
		c[r] /= sum;
	return c;
}

static inline uint64_t zipf_draw(const double *c, uint64_t n, uint64_t *rng)
{
	double u = (double)(esd_splitmix64(++*rng) >> 11) * 0x1.0p-53;
	uint64_t lo = 0, hi = n - 1;
	while (lo < hi) {
		uint64_t mid = (lo + hi) / 2;
		if (c[mid] < u)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static inline uint64_t key_of(uint64_t rank)
{
	return esd_splitmix64(rank ^ 0x5eedull) >> 1;
}

#endif
