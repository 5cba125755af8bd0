/* Helpers of the dispatch tests: random and adversarial cost matrices,
 * brute force. */
#ifndef ESD_DTEST_H
#define ESD_DTEST_H

#include "testutil.h"

#include <esd/dispatch_solve.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum dt_kind {
	DT_RANDOM,     /* uniform in [0, range) */
	DT_ONE_WORKER, /* every row prefers worker 0 */
	DT_EQUAL_ROWS, /* every row identical */
	DT_TIES,       /* values in {0, 1, 2}: many ties */
	DT_BIG,        /* near 2^40 */
	DT_ZERO,       /* all zero */
	DT_KINDS
};

static inline const char *dt_kind_name(enum dt_kind kd)
{
	static const char *nm[] = {"random", "one-worker", "equal-rows", "ties", "big", "zero"};
	return nm[kd];
}

static inline void dt_fill(int64_t *c, uint32_t k, uint32_t n, enum dt_kind kd, uint64_t seed)
{
	uint64_t st = seed * 0x9E3779B97F4A7C15ull + 1;
	int64_t base_row[64];
	for (uint32_t j = 0; j < n; j++)
		base_row[j] = (int64_t)(esd_test_rand(&st) % 1000);
	for (uint32_t i = 0; i < k; i++)
		for (uint32_t j = 0; j < n; j++) {
			int64_t v;
			uint64_t r = esd_test_rand(&st);
			switch (kd) {
			case DT_RANDOM:
				v = (int64_t)(r % 100000);
				break;
			case DT_ONE_WORKER:
				v = j == 0 ? (int64_t)(r % 50) : 1000 + (int64_t)(r % 5000);
				break;
			case DT_EQUAL_ROWS:
				v = base_row[j];
				break;
			case DT_TIES:
				v = (int64_t)(r % 3);
				break;
			case DT_BIG:
				v = (INT64_C(1) << 40) - (int64_t)(r % 4096);
				break;
			default:
				v = 0;
				break;
			}
			c[(size_t)i * n + j] = v;
		}
}

/* Lexicographically smallest minimum-cost assignment, by enumeration. */
static inline int64_t dt_brute(const int64_t *c, uint32_t k, uint32_t n, const uint32_t *cap,
                               uint32_t *best)
{
	uint32_t a[16] = {0}, load[16];
	int64_t bc = INT64_MAX;
	uint64_t total = 1;
	for (uint32_t i = 0; i < k; i++)
		total *= n;
	for (uint64_t x = 0; x < total; x++) {
		/* a = digits of x, most significant first: lexicographic order */
		uint64_t y = x;
		for (uint32_t i = k; i-- > 0;) {
			a[i] = (uint32_t)(y % n);
			y /= n;
		}
		memset(load, 0, sizeof(load));
		for (uint32_t i = 0; i < k; i++)
			load[a[i]]++;
		int ok = 1;
		for (uint32_t j = 0; j < n; j++)
			ok &= load[j] == cap[j];
		if (!ok)
			continue;
		int64_t t = 0;
		for (uint32_t i = 0; i < k; i++)
			t += c[(size_t)i * n + a[i]];
		if (t < bc) {
			bc = t;
			memcpy(best, a, k * sizeof(uint32_t));
		}
	}
	return bc;
}

#endif
