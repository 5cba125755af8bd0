/* opt, hybrid(1) and hungarian are optimal and return the same canonical
 * optimum: against brute force on tiny instances and against each other
 * on random and adversarial matrices up to k = 2048. */
#include "dtest.h"

#include <esd/dispatch_solve.h>

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

static void check_all_exact(struct esd_solver *s, const int64_t *c, uint32_t k, uint32_t n,
                            const uint32_t *cap, const uint32_t *want, int64_t want_cost,
                            int with_hungarian)
{
	uint32_t *a = malloc(k * sizeof(uint32_t));
	assert_non_null(a);
	assert_int_equal(esd_solve_opt(s, c, k, n, cap, a), 0);
	assert_int_equal(esd_assign_check(k, n, cap, a), 0);
	assert_int_equal(esd_assign_cost(c, k, n, a), want_cost);
	if (want)
		assert_memory_equal(a, want, k * sizeof(uint32_t));
	uint32_t *b = malloc(k * sizeof(uint32_t));
	assert_non_null(b);
	struct esd_hybrid_params hp = {1.0, ESD_EXACT_SSP, ESD_HEU_ROW_ORDER};
	assert_int_equal(esd_solve_hybrid(s, c, k, n, cap, &hp, b), 0);
	assert_memory_equal(a, b, k * sizeof(uint32_t));
	if (with_hungarian) {
		assert_int_equal(esd_solve_hungarian(s, c, k, n, cap, b), 0);
		assert_int_equal(esd_assign_cost(c, k, n, b), want_cost);
		assert_memory_equal(a, b, k * sizeof(uint32_t));
		hp.backend = ESD_EXACT_HUNGARIAN;
		assert_int_equal(esd_solve_hybrid(s, c, k, n, cap, &hp, b), 0);
		assert_memory_equal(a, b, k * sizeof(uint32_t));
	}
	/* cold start gives the same bits */
	esd_solver_set_warm(s, 0);
	assert_int_equal(esd_solve_opt(s, c, k, n, cap, b), 0);
	assert_memory_equal(a, b, k * sizeof(uint32_t));
	esd_solver_set_warm(s, 1);
	free(a);
	free(b);
}

static void test_brute_force(void **state)
{
	(void)state;
	struct esd_solver *s;
	assert_int_equal(esd_solver_create(&s), 0);
	int64_t c[16 * 4];
	uint32_t best[16];
	unsigned cases = 0;
	for (uint32_t n = 1; n <= 4; n++)
		for (uint32_t k = 0; k <= (n <= 2 ? 12u : n == 3 ? 9u : 8u); k++)
			for (int kd = 0; kd < DT_KINDS; kd++)
				for (uint64_t seed = 0; seed < 6; seed++) {
					uint32_t cap[4] = {0};
					/* capacities: equal when possible, else uneven */
					uint64_t st = seed + 77 * k + n;
					uint32_t left = k;
					for (uint32_t j = 0; j + 1 < n; j++) {
						cap[j] = (k % n == 0 && seed % 2 == 0)
						             ? k / n
						             : (uint32_t)(esd_test_rand(&st) %
						                          (left + 1));
						left -= cap[j];
					}
					cap[n - 1] = left;
					dt_fill(c, k, n, (enum dt_kind)kd, seed * 31 + k);
					if (kd == DT_RANDOM)
						for (uint32_t q = 0; q < k * n; q++)
							c[q] %= 7; /* small values: ties */
					int64_t bc = dt_brute(c, k, n, cap, best);
					check_all_exact(s, c, k, n, cap, best, bc, 1);
					cases++;
				}
	print_message("%u brute-force instances\n", cases);
	esd_solver_free(s);
}

static void run_vs_hungarian(uint32_t k, uint32_t n, enum dt_kind kd, uint64_t seed,
                             int with_hungarian)
{
	struct esd_solver *s;
	assert_int_equal(esd_solver_create(&s), 0);
	int64_t *c = malloc((size_t)k * n * sizeof(int64_t));
	uint32_t *a = malloc(k * sizeof(uint32_t));
	assert_non_null(c);
	assert_non_null(a);
	dt_fill(c, k, n, kd, seed);
	int64_t cost;
	if (with_hungarian) {
		assert_int_equal(esd_solve_hungarian(s, c, k, n, NULL, a), 0);
		cost = esd_assign_cost(c, k, n, a);
	} else {
		assert_int_equal(esd_solve_opt(s, c, k, n, NULL, a), 0);
		cost = esd_assign_cost(c, k, n, a);
	}
	check_all_exact(s, c, k, n, NULL, with_hungarian ? a : NULL, cost, 0);
	/* heu is never better */
	assert_int_equal(esd_solve_heu(s, c, k, n, NULL, ESD_HEU_ROW_ORDER, a), 0);
	assert_true(esd_assign_cost(c, k, n, a) >= cost);
	free(c);
	free(a);
	esd_solver_free(s);
}

static void test_vs_hungarian_small(void **state)
{
	(void)state;
	static const uint32_t shapes[][2] = {{3, 1},  {3, 7},  {5, 13}, {8, 32},
	                                     {7, 19}, {8, 64}, {2, 100}};
	for (size_t q = 0; q < sizeof(shapes) / sizeof(shapes[0]); q++)
		for (int kd = 0; kd < DT_KINDS; kd++)
			for (uint64_t seed = 1; seed <= 3; seed++)
				run_vs_hungarian(shapes[q][0] * shapes[q][1], shapes[q][0],
				                 (enum dt_kind)kd, seed, 1);
}

static void test_vs_hungarian_1024(void **state)
{
	(void)state;
	for (int kd = 0; kd < DT_KINDS; kd++)
		if (!SANITIZED || kd == DT_RANDOM || kd == DT_TIES)
			run_vs_hungarian(1024, 8, (enum dt_kind)kd, 5, 1);
	run_vs_hungarian(999, 3, DT_RANDOM, 6, 1); /* k not a power of two */
}

static void test_vs_hungarian_2048(void **state)
{
	(void)state;
	if (SANITIZED) {
		print_message("k = 2048 Hungarian skipped under the sanitizers (too slow)\n");
		run_vs_hungarian(2048, 8, DT_RANDOM, 9, 0);
		return;
	}
	run_vs_hungarian(2048, 8, DT_RANDOM, 9, 1);
	run_vs_hungarian(2048, 8, DT_ONE_WORKER, 9, 1);
}

static void test_large_opt_only(void **state)
{
	(void)state;
	/* no reference at this size: opt must still meet capacities, be
	 * reproducible, cold == warm, and never lose to heu */
	for (int kd = 0; kd < DT_KINDS; kd++)
		run_vs_hungarian(8192, 8, (enum dt_kind)kd, 11, 0);
}

static void test_canonicalize_rejects_non_optimal(void **state)
{
	(void)state;
	struct esd_solver *s;
	assert_int_equal(esd_solver_create(&s), 0);
	int64_t c[] = {0, 10, 10, 0};
	uint32_t a[] = {1, 0};
	assert_int_equal(esd_canonicalize(s, c, 2, 2, NULL, a), -EINVAL);
	uint32_t bad_load[] = {0, 0};
	assert_int_equal(esd_canonicalize(s, c, 2, 2, NULL, bad_load), -EINVAL);
	uint32_t ok[] = {0, 1};
	assert_int_equal(esd_canonicalize(s, c, 2, 2, NULL, ok), 0);
	/* all-equal costs: rows 0..m-1 to worker 0, and so on */
	int64_t z[6 * 3] = {0};
	uint32_t r[6] = {2, 2, 1, 1, 0, 0};
	assert_int_equal(esd_canonicalize(s, z, 6, 3, NULL, r), 0);
	uint32_t want[6] = {0, 0, 1, 1, 2, 2};
	assert_memory_equal(r, want, sizeof(want));
	esd_solver_free(s);
}

/* esd_canonicalize_tight and esd_canonicalize_duals: the same canonical
 * optimum from tight sets or potentials as from the costs alone. */
static void test_canonicalize_tight_duals(void **state)
{
	(void)state;
	struct esd_solver *s;
	assert_int_equal(esd_solver_create(&s), 0);
	/* all-equal costs: every worker tight for every row, pot = 0 */
	int64_t z[6 * 3] = {0};
	uint64_t tight[6];
	int64_t pot[3] = {0, 0, 0};
	uint32_t want[6] = {0, 0, 1, 1, 2, 2};
	for (int i = 0; i < 6; i++)
		tight[i] = 7;
	uint32_t r[6] = {2, 2, 1, 1, 0, 0};
	assert_int_equal(esd_canonicalize_tight(s, 6, 3, NULL, tight, r), 0);
	assert_memory_equal(r, want, sizeof(want));
	uint32_t r2[6] = {1, 2, 0, 1, 2, 0};
	assert_int_equal(esd_canonicalize_duals(s, z, 6, 3, NULL, pot, r2), 0);
	assert_memory_equal(r2, want, sizeof(want));
	/* a row off its tight set, infeasible loads, potentials that are not
	 * optimal: refused */
	uint32_t r3[6] = {2, 2, 1, 1, 0, 0};
	tight[0] = 1;
	assert_int_equal(esd_canonicalize_tight(s, 6, 3, NULL, tight, r3), -EINVAL);
	uint32_t r4[6] = {0, 0, 0, 1, 1, 2};
	tight[0] = 7;
	assert_int_equal(esd_canonicalize_tight(s, 6, 3, NULL, tight, r4), -EINVAL);
	int64_t c[] = {0, 10, 10, 0};
	int64_t p0[2] = {0, 0};
	uint32_t a[] = {1, 0};
	assert_int_equal(esd_canonicalize_duals(s, c, 2, 2, NULL, p0, a), -EINVAL);
	assert_int_equal(esd_canonicalize_tight(s, 2, 2, NULL, NULL, a), -EINVAL);
	esd_solver_free(s);
}

static void test_bad_input(void **state)
{
	(void)state;
	struct esd_solver *s;
	assert_int_equal(esd_solver_create(&s), 0);
	int64_t c[4] = {1, 2, 3, 4};
	uint32_t a[2], cap[2] = {2, 1};
	assert_int_equal(esd_solve_opt(s, c, 2, 2, cap, a), -EINVAL);
	assert_int_equal(esd_solve_opt(s, c, 3, 2, NULL, a), -EINVAL);
	assert_int_equal(esd_solve_opt(s, c, 2, 0, NULL, a), -EINVAL);
	assert_int_equal(esd_solve_opt(s, NULL, 2, 2, NULL, a), -EINVAL);
	c[1] = -1;
	assert_int_equal(esd_solve_opt(s, c, 2, 2, NULL, a), -EINVAL);
	assert_int_equal(esd_solve_heu(s, c, 2, 2, NULL, ESD_HEU_ROW_ORDER, a), -EINVAL);
	c[1] = ESD_COST_MAX + 1;
	assert_int_equal(esd_solve_hungarian(s, c, 2, 2, NULL, a), -EINVAL);
	c[1] = 2;
	struct esd_hybrid_params hp = {1.5, ESD_EXACT_SSP, ESD_HEU_ROW_ORDER};
	assert_int_equal(esd_solve_hybrid(s, c, 2, 2, NULL, &hp, a), -EINVAL);
	esd_solver_free(s);
}

int main(void)
{
#ifdef ESD_TEST_LARGE
	/* the large comparisons: k = 1024 and 2048 against the Hungarian
	 * method (O(k^3): seconds each), k = 8192 opt alone */
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_vs_hungarian_1024),
	    cmocka_unit_test(test_vs_hungarian_2048),
	    cmocka_unit_test(test_large_opt_only),
	};
	(void)test_brute_force;
	(void)test_vs_hungarian_small;
	(void)test_canonicalize_rejects_non_optimal;
	(void)test_canonicalize_tight_duals;
	(void)test_bad_input;
#else
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_brute_force),
	    cmocka_unit_test(test_vs_hungarian_small),
	    cmocka_unit_test(test_canonicalize_rejects_non_optimal),
	    cmocka_unit_test(test_canonicalize_tight_duals),
	    cmocka_unit_test(test_bad_input),
	};
	(void)test_vs_hungarian_1024;
	(void)test_vs_hungarian_2048;
	(void)test_large_opt_only;
#endif
	return cmocka_run_group_tests(tests, NULL, NULL);
}
