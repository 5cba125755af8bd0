/* Link capacity from timed transfer phases (esd_rate_est): the fitted
 * slope ignores a fixed cost per phase and burst credit, equal sizes fall back to the
 * throughput, small phases are left out, the window slides. */
#include "testutil.h"

#include <esd/rate_est.h>
#include <math.h>
#include <stdlib.h>

/* ns for `bytes` at `bps` plus a fixed cost */
static int64_t phase_ns(uint64_t bytes, double bps, int64_t fixed_ns)
{
	return fixed_ns + (int64_t)llround((double)bytes * 8e9 / bps);
}

/* what sum(bytes) / sum(ns) over the window says, in bit/s */
static double throughput(const struct esd_rate_est *e)
{
	double sb = 0, st = 0;
	for (uint32_t i = 0; i < e->n; i++)
		sb += (double)e->bytes[i], st += (double)e->ns[i];
	return sb * 8e9 / st;
}

static void assert_near(uint64_t got, double want, double rel)
{
	if (fabs((double)got - want) > rel * want)
		fail_msg("estimate %llu bit/s, expected %.0f within %.0f %%",
		         (unsigned long long)got, want, rel * 100);
}

static void test_slope_ignores_fixed_cost(void **state)
{
	(void)state;
	struct esd_rate_est e;
	esd_rate_est_init(&e, 64 << 10, 1000000);
	int fitted = -1;
	for (int i = 0; i < ESD_RATE_EST_MIN - 1; i++) {
		uint64_t b = (uint64_t)(100 + 90 * i) << 10;
		esd_rate_est_add(&e, b, phase_ns(b, 0.5e9, 3000000));
	}
	assert_int_equal(esd_rate_est_bps(&e, &fitted), 0); /* too few yet */
	for (int i = ESD_RATE_EST_MIN - 1; i < 20; i++) {
		uint64_t b = (uint64_t)(100 + 90 * (i % 11)) << 10;
		esd_rate_est_add(&e, b, phase_ns(b, 0.5e9, 3000000));
	}
	uint64_t r = esd_rate_est_bps(&e, &fitted);
	assert_int_equal(fitted, 1);
	assert_near(r, 0.5e9, 0.01);
	/* the throughput alone would have counted the 3 ms as transfer */
	assert_true(throughput(&e) < 0.9 * 0.5e9);
}

/* A token bucket that refills between phases lets each phase's first
 * `credit` bytes go at once: the line crosses below the origin, and the
 * slope still gives the link's rate, not the faster throughput. */
static void test_slope_sees_through_burst_credit(void **state)
{
	(void)state;
	struct esd_rate_est e;
	esd_rate_est_init(&e, 16 << 10, 1000000);
	const uint64_t credit = 16 << 10;
	for (int i = 0; i < 20; i++) {
		uint64_t b = (uint64_t)(40 + 15 * (i % 7)) << 10;
		esd_rate_est_add(&e, b, phase_ns(b - credit, 8e6, 200000));
	}
	int fitted = -1;
	uint64_t r = esd_rate_est_bps(&e, &fitted);
	assert_int_equal(fitted, 1);
	assert_near(r, 8e6, 0.01);
	assert_true(throughput(&e) > 1.15 * 8e6); /* what the throughput says */
}

static void test_equal_sizes_give_throughput(void **state)
{
	(void)state;
	struct esd_rate_est e;
	esd_rate_est_init(&e, 0, 0);
	int fitted = -1;
	for (int i = 0; i < 16; i++)
		esd_rate_est_add(&e, 1 << 20, phase_ns(1 << 20, 5e9, 0));
	assert_near(esd_rate_est_bps(&e, &fitted), 5e9, 0.001);
	assert_int_equal(fitted, 0);
}

static void test_small_phases_left_out(void **state)
{
	(void)state;
	struct esd_rate_est e;
	esd_rate_est_init(&e, 256 << 10, 2000000);
	/* a burst allowance: small phases pass at memory speed */
	for (int i = 0; i < 40; i++)
		esd_rate_est_add(&e, 100 << 10, 50000);
	assert_int_equal(esd_rate_est_samples(&e), 0);
	assert_int_equal(e.skipped, 40);
	assert_int_equal(esd_rate_est_bps(&e, NULL), 0);
	for (int i = 0; i < 12; i++) {
		uint64_t b = (uint64_t)(300 + 200 * (i % 4)) << 10;
		esd_rate_est_add(&e, b, phase_ns(b, 2e8, 500000));
	}
	assert_int_equal(esd_rate_est_samples(&e), 12);
	assert_near(esd_rate_est_bps(&e, NULL), 2e8, 0.01);
}

static void test_noise_and_window(void **state)
{
	(void)state;
	struct esd_rate_est e;
	esd_rate_est_init(&e, 0, 0);
	srand(7);
	/* +-5 % jitter on the times */
	for (int i = 0; i < 64; i++) {
		uint64_t b = (uint64_t)(200 + rand() % 2000) << 10;
		double j = 1.0 + ((rand() % 1001) - 500) / 10000.0;
		esd_rate_est_add(&e, b, (int64_t)((double)phase_ns(b, 1e9, 1000000) * j));
	}
	assert_int_equal(esd_rate_est_samples(&e), ESD_RATE_EST_WINDOW);
	assert_near(esd_rate_est_bps(&e, NULL), 1e9, 0.1);
	/* the link slows down: once the window has turned over, the old rate
	 * is gone */
	for (int i = 0; i < ESD_RATE_EST_WINDOW; i++) {
		uint64_t b = (uint64_t)(200 + rand() % 2000) << 10;
		esd_rate_est_add(&e, b, phase_ns(b, 1e8, 1000000));
	}
	assert_near(esd_rate_est_bps(&e, NULL), 1e8, 0.01);
	esd_rate_est_reset(&e);
	assert_int_equal(esd_rate_est_bps(&e, NULL), 0);
}

static void test_flat_slope_is_capped(void **state)
{
	(void)state;
	struct esd_rate_est e;
	esd_rate_est_init(&e, 0, 0);
	/* times that hardly depend on size: the slope would claim an absurd
	 * rate; at most 4x the throughput is reported */
	for (int i = 0; i < 16; i++) {
		uint64_t b = (uint64_t)(100 + 100 * (i % 8)) << 10;
		esd_rate_est_add(&e, b, 10000000 + (int64_t)(b / 1024));
	}
	int fitted;
	uint64_t r = esd_rate_est_bps(&e, &fitted);
	assert_int_equal(fitted, 1);
	assert_near(r, 4 * throughput(&e), 0.001);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_slope_ignores_fixed_cost),
	    cmocka_unit_test(test_slope_sees_through_burst_credit),
	    cmocka_unit_test(test_equal_sizes_give_throughput),
	    cmocka_unit_test(test_small_phases_left_out),
	    cmocka_unit_test(test_noise_and_window),
	    cmocka_unit_test(test_flat_slope_is_capped),
	};
	return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
