/* Helpers of the GPU solver tests: the dispatch tests' matrices (random
 * and adversarial) plus uneven capacities, and the comparison against
 * esd_solve_opt. */
#ifndef ESD_GTEST_H
#define ESD_GTEST_H

#include "dtest.h"

#include <esd/gpu.h>

/* Capacities summing to k: equal, or skewed (worker j gets about
 * (j + 1) / sum parts). */
static inline void gt_caps(uint32_t *cap, uint32_t k, uint32_t n, int skewed)
{
	uint32_t left = k, parts = n * (n + 1) / 2;
	for (uint32_t j = 0; j < n; j++) {
		cap[j] = skewed ? (uint32_t)((uint64_t)k * (j + 1) / parts) : k / n;
		left -= cap[j];
	}
	cap[n - 1] += left;
}

/* One instance through esd_gpu_solve and esd_solve_opt: same bits.
 * Returns 1 when the GPU answered. */
static inline int gt_compare(struct esd_gpu_solver *g, struct esd_solver *s, const int64_t *c,
                             uint32_t k, uint32_t n, const uint32_t *cap, int64_t deadline_ns)
{
	uint32_t *a = malloc(k * sizeof(uint32_t)), *b = malloc(k * sizeof(uint32_t));
	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(esd_solve_opt(s, c, k, n, cap, a), 0);
	memset(b, 0xff, k * sizeof(uint32_t));
	assert_int_equal(esd_gpu_solve(g, c, k, n, cap, deadline_ns, b), 0);
	assert_int_equal(esd_assign_check(k, n, cap, b), 0);
	assert_int_equal(esd_assign_cost(c, k, n, b), esd_assign_cost(c, k, n, a));
	assert_memory_equal(a, b, k * sizeof(uint32_t));
	free(a);
	free(b);
	return esd_gpu_solver_stats(g)->last_by_gpu;
}

#endif
