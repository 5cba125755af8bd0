/* The CPU path of esd/gpu.h on every machine: the solver object is made
 * with or without a device, and every solve that takes the CPU (no device,
 * or deadline < 0 where a device exists) returns esd_solve_opt's canonical
 * optimum bit for bit, on random and adversarial matrices k = 256..2048,
 * n = 8, equal and skewed capacities; bad input is rejected before
 * anything is submitted; the counters say what happened. */
#include "gtest.h"

#include <esd/gpu.h>

static void test_create_reports(void **state)
{
	(void)state;
	struct esd_gpu_solver *g = NULL;
	assert_int_equal(esd_gpu_solver_create(NULL, &g), 0);
	assert_non_null(g);
	int dev = esd_gpu_solver_device(g);
	assert_true(dev == 0 || dev == -ENODEV);
	const char *d = esd_gpu_solver_describe(g);
	assert_non_null(d);
	if (dev == -ENODEV)
		assert_non_null(strstr(d, "no CUDA device"));
	const struct esd_gpu_stats *st = esd_gpu_solver_stats(g);
	assert_int_equal(st->gpu_solved + st->cpu_fallbacks, 0);
	esd_gpu_solver_free(g);
	esd_gpu_solver_free(NULL);
	assert_int_equal(esd_gpu_solver_device(NULL), -ENODEV);
}

static void test_bad_params(void **state)
{
	(void)state;
	struct esd_gpu_solver *g = NULL;
	struct esd_gpu_params p = {.max_k = ESD_SOLVE_MAX_K + 1};
	assert_int_equal(esd_gpu_solver_create(&p, &g), -EINVAL);
	p.max_k = 0;
	p.deadline_ns = -1;
	assert_int_equal(esd_gpu_solver_create(&p, &g), -EINVAL);
	p.deadline_ns = 0;
	p.device = -1;
	assert_int_equal(esd_gpu_solver_create(&p, &g), -EINVAL);
}

static void test_bad_input(void **state)
{
	(void)state;
	struct esd_gpu_solver *g;
	int64_t c[8 * 2] = {0};
	uint32_t a[8], cap[2] = {4, 4}, badcap[2] = {4, 5};
	assert_int_equal(esd_gpu_solver_create(NULL, &g), 0);
	assert_int_equal(esd_gpu_solve(NULL, c, 8, 2, cap, 0, a), -EINVAL);
	assert_int_equal(esd_gpu_solve(g, NULL, 8, 2, cap, 0, a), -EINVAL);
	assert_int_equal(esd_gpu_solve(g, c, 8, 2, cap, 0, NULL), -EINVAL);
	assert_int_equal(esd_gpu_solve(g, c, 8, 0, cap, 0, a), -EINVAL);
	assert_int_equal(esd_gpu_solve(g, c, 8, 2, badcap, 0, a), -EINVAL);
	assert_int_equal(esd_gpu_solve(g, c, 7, 2, NULL, 0, a), -EINVAL);
	c[3] = -1;
	assert_int_equal(esd_gpu_solve(g, c, 8, 2, cap, 0, a), -EINVAL);
	c[3] = ESD_COST_MAX + 1;
	assert_int_equal(esd_gpu_solve(g, c, 8, 2, cap, 0, a), -EINVAL);
	c[3] = ESD_COST_MAX;
	assert_int_equal(esd_gpu_solve(g, c, 8, 2, cap, 0, a), 0);
	assert_int_equal(esd_assign_check(8, 2, cap, a), 0);
	/* only the good call was counted */
	const struct esd_gpu_stats *st = esd_gpu_solver_stats(g);
	assert_int_equal(st->gpu_solved + st->cpu_fallbacks, 1);
	esd_gpu_solver_free(g);
}

static void test_cpu_matches_opt(void **state)
{
	(void)state;
	struct esd_gpu_solver *g;
	struct esd_solver *s;
	const uint32_t n = 8;
	uint32_t cap[8];
	uint64_t solves = 0;
	assert_int_equal(esd_gpu_solver_create(NULL, &g), 0);
	assert_int_equal(esd_solver_create(&s), 0);
	/* where a device exists, deadline < 0 forces the CPU path */
	for (uint32_t k = 256; k <= 2048; k *= 2) {
		int64_t *c = malloc((size_t)k * n * sizeof(int64_t));
		assert_non_null(c);
		for (int kd = 0; kd < DT_KINDS; kd++)
			for (int skew = 0; skew <= 1; skew++) {
				dt_fill(c, k, n, (enum dt_kind)kd, k * 31u + (uint32_t)kd);
				gt_caps(cap, k, n, skew);
				assert_int_equal(gt_compare(g, s, c, k, n, cap, -1), 0);
				solves++;
			}
		/* cap == NULL: equal capacities */
		dt_fill(c, k, n, DT_RANDOM, k);
		assert_int_equal(gt_compare(g, s, c, k, n, NULL, -1), 0);
		solves++;
		free(c);
	}
	const struct esd_gpu_stats *st = esd_gpu_solver_stats(g);
	assert_int_equal(st->cpu_fallbacks, solves);
	assert_int_equal(st->gpu_solved, 0);
	assert_int_equal(st->late, 0);
	/* without a device the default deadline takes the CPU path too */
	if (esd_gpu_solver_device(g) == -ENODEV) {
		int64_t c[64 * 8];
		dt_fill(c, 64, n, DT_TIES, 5);
		gt_compare(g, s, c, 64, n, NULL, 0);
		assert_int_equal(st->cpu_fallbacks, solves + 1);
	}
	esd_solver_free(s);
	esd_gpu_solver_free(g);
}

/* submit/collect on the CPU path: the same bits, one job at a time; a
 * rejected submit leaves nothing pending. */
static void test_split_cpu(void **state)
{
	(void)state;
	struct esd_gpu_solver *g;
	struct esd_solver *s;
	const uint32_t k = 512, n = 8;
	int64_t *c = malloc((size_t)k * n * sizeof(int64_t));
	uint32_t *a = malloc(k * sizeof(uint32_t)), *b = malloc(k * sizeof(uint32_t));
	assert_true(c && a && b);
	assert_int_equal(esd_gpu_solver_create(NULL, &g), 0);
	assert_int_equal(esd_solver_create(&s), 0);
	dt_fill(c, k, n, DT_TIES, 11);
	assert_int_equal(esd_solve_opt(s, c, k, n, NULL, a), 0);
	assert_int_equal(esd_gpu_collect(g, b), -EINVAL);
	c[5] = -1;
	assert_int_equal(esd_gpu_submit(g, c, k, n, NULL, -1), -EINVAL);
	assert_int_equal(esd_gpu_collect(g, b), -EINVAL);
	c[5] = 1;
	assert_int_equal(esd_solve_opt(s, c, k, n, NULL, a), 0);
	assert_int_equal(esd_gpu_submit(g, c, k, n, NULL, -1), 0);
	assert_int_equal(esd_gpu_submit(g, c, k, n, NULL, -1), -EBUSY);
	assert_int_equal(esd_gpu_collect(g, b), 0);
	assert_memory_equal(a, b, k * sizeof(uint32_t));
	assert_int_equal(esd_gpu_collect(g, b), -EINVAL);
	free(c);
	free(a);
	free(b);
	esd_solver_free(s);
	esd_gpu_solver_free(g);
}

/* Without a device the cross-over is "never" and nothing is measured. */
static void test_calibrate_cpu(void **state)
{
	(void)state;
	struct esd_gpu_solver *g;
	struct esd_gpu_calibration cal;
	struct esd_gpu_params p = {.max_k = 4096};
	assert_int_equal(esd_gpu_solver_create(&p, &g), 0);
	assert_int_equal(esd_gpu_calibrate(g, 0, 1024, 3, &cal), -EINVAL);
	assert_int_equal(esd_gpu_calibrate(g, 8, 4, 3, &cal), -EINVAL);
	assert_int_equal(esd_gpu_calibrate(g, 8, 1024, 0, &cal), -EINVAL);
	assert_int_equal(esd_gpu_calibrate(g, ESD_GPU_MAX_N + 1, 1024, 3, &cal), -EINVAL);
	if (esd_gpu_solver_device(g) == 0) {
		esd_gpu_solver_free(g);
		skip();
	}
	assert_int_equal(esd_gpu_calibrate(g, 8, 100000, 3, &cal), 0);
	assert_int_equal(cal.min_rows, ESD_GPU_NEVER);
	assert_int_equal(esd_gpu_solver_stats(g)->min_rows, ESD_GPU_NEVER);
	/* the sizes: from 256 up to max_k (the solver's), multiples of n */
	assert_true(cal.sizes >= 2);
	assert_int_equal(cal.k[0], 256);
	assert_int_equal(cal.k[cal.sizes - 1], 4096);
	esd_gpu_solver_free(g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_create_reports),
	    cmocka_unit_test(test_bad_params),
	    cmocka_unit_test(test_bad_input),
	    cmocka_unit_test(test_cpu_matches_opt),
	    cmocka_unit_test(test_split_cpu),
	    cmocka_unit_test(test_calibrate_cpu),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
