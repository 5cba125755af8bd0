/* The persistent kernel against the CPU solver, bit for bit, on random and
 * adversarial matrices k = 256..8192, n = 8 (equal and skewed capacities),
 * plus the late path (a deadline too short: the CPU answers, the kernel
 * drops the job and takes the next one). Needs a CUDA device: exits 77
 * with "no CUDA device" without one. */
#include "gtest.h"

#include <esd/clock.h>
#include <esd/gpu.h>

static struct esd_gpu_solver *g;

static int setup(void **state)
{
	(void)state;
	struct esd_gpu_params p = {.max_k = 8192, .deadline_ns = 10 * ESD_NS_PER_S};
	if (esd_gpu_solver_create(&p, &g) < 0)
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	esd_gpu_solver_free(g);
	return 0;
}

static void test_gpu_matches_cpu(void **state)
{
	(void)state;
	struct esd_solver *s;
	const uint32_t n = 8;
	uint32_t cap[8];
	assert_int_equal(esd_solver_create(&s), 0);
	for (uint32_t k = 256; k <= 8192; k *= 2) {
		int64_t *c = malloc((size_t)k * n * sizeof(int64_t));
		assert_non_null(c);
		for (int kd = 0; kd < DT_KINDS; kd++)
			for (int skew = 0; skew <= 1; skew++)
				for (uint64_t seed = 0; seed < 2; seed++) {
					dt_fill(c, k, n, (enum dt_kind)kd,
					        seed * 1000003u + k + kd);
					gt_caps(cap, k, n, skew);
					int by_gpu = gt_compare(g, s, c, k, n, cap, 0);
					const struct esd_gpu_stats *st = esd_gpu_solver_stats(g);
					if (!by_gpu)
						fail_msg("k %u %s skew %d: CPU answered (late %llu "
						         "rejected %llu busy %llu)",
						         k, dt_kind_name((enum dt_kind)kd), skew,
						         (unsigned long long)st->late,
						         (unsigned long long)st->gpu_rejected,
						         (unsigned long long)st->busy);
					print_message(
					    "k %5u %-10s skew %d: gpu %lld us, %llu steps\n", k,
					    dt_kind_name((enum dt_kind)kd), skew,
					    (long long)st->last_gpu_us,
					    (unsigned long long)st->kernel_steps);
				}
		free(c);
	}
	assert_int_equal(esd_gpu_solver_stats(g)->gpu_rejected, 0);
	esd_solver_free(s);
}

static void test_late_falls_back(void **state)
{
	(void)state;
	struct esd_solver *s;
	const uint32_t k = 8192, n = 8;
	int64_t *c = malloc((size_t)k * n * sizeof(int64_t));
	assert_non_null(c);
	assert_int_equal(esd_solver_create(&s), 0);
	dt_fill(c, k, n, DT_ONE_WORKER, 7);
	const struct esd_gpu_stats *st = esd_gpu_solver_stats(g);
	uint64_t late = st->late;
	assert_int_equal(gt_compare(g, s, c, k, n, NULL, 1000), 0); /* 1 us */
	assert_int_equal(st->late, late + 1);
	/* the kernel drops the abandoned job; a later solve is the GPU's */
	int by_gpu = 0;
	for (int i = 0; i < 100 && !by_gpu; i++) {
		by_gpu = gt_compare(g, s, c, k, n, NULL, 0);
		if (!by_gpu)
			esd_sleep_ns(ESD_NS_PER_MS);
	}
	assert_true(by_gpu);
	free(c);
	esd_solver_free(s);
}

int main(void)
{
	struct esd_gpu_solver *probe;
	if (esd_gpu_solver_create(NULL, &probe) < 0)
		ESD_TEST_SKIP("cannot make the solver");
	if (esd_gpu_solver_device(probe) < 0) {
		fprintf(stderr, "%s\n", esd_gpu_solver_describe(probe));
		esd_gpu_solver_free(probe);
		ESD_TEST_SKIP("no CUDA device");
	}
	esd_gpu_solver_free(probe);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_gpu_matches_cpu),
	    cmocka_unit_test(test_late_falls_back),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
