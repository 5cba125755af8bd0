/*
 * Sizes fitted online (esd/dispatch_quality.h): the model from a window
 * of per-worker samples, rows and compute time, and a model's predicted
 * iteration; the fitter's switches
 * (to a fitted model's sizes, back to the best sizes seen, never twice to
 * sizes found slower) and the windows it leaves out.
 */
#include "testutil.h"

#include <esd/dispatch_quality.h>
#include <errno.h>
#include <math.h>
#include <string.h>

#define N 4

/* A window of w iterations where worker j trained m[j] samples a
 * iteration and moved a + r * m[j] rows, c ns of compute a sample. */
static void window(struct esd_size_obs *obs, const uint32_t *m, double a, double r, double c,
                   uint64_t w)
{
	for (uint32_t j = 0; j < N; j++)
		obs[j] = (struct esd_size_obs){
		    .iters = w,
		    .samples = m[j] * w,
		    .rows = (uint64_t)llround((a + r * m[j]) * (double)w),
		    .compute_ns = (uint64_t)llround(c * m[j] * (double)w)};
}

/* The same with rows b m[j]^p: concave in the samples, as keys repeat. */
static void window_pow(struct esd_size_obs *obs, const uint32_t *m, double b, double p, double c,
                       uint64_t w)
{
	for (uint32_t j = 0; j < N; j++)
		obs[j] = (struct esd_size_obs){
		    .iters = w,
		    .samples = m[j] * w,
		    .rows = (uint64_t)llround(b * pow(m[j], p) * (double)w),
		    .compute_ns = (uint64_t)llround(c * m[j] * (double)w)};
}

static void test_fit_line_and_prior(void **state)
{
	(void)state;
	struct esd_size_obs obs[N];
	struct esd_size_model m;
	const uint32_t uneq[N] = {100, 100, 20, 20};
	window(obs, uneq, 300, 4, 5000, 4);
	assert_int_equal(esd_size_fit(N, obs, 0, &m), 0);
	assert_true(fabs(m.fixed_rows - 300) < 1e-6);
	assert_true(fabs(m.rows_per_sample - 4) < 1e-6);
	assert_true(fabs(m.compute_ns - 5000) < 1e-6);
	/* equal sizes give no slope: half the rows fixed; no time measured:
	 * the prior compute time */
	const uint32_t eq[N] = {60, 60, 60, 60};
	window(obs, eq, 300, 4, 0, 4);
	assert_int_equal(esd_size_fit(N, obs, 777, &m), 0);
	assert_true(fabs(m.fixed_rows - 0.5 * 540) < 1e-6);
	assert_true(fabs(m.rows_per_sample - 0.5 * 540 / 60) < 1e-6);
	assert_true(m.compute_ns == 777);
	/* a line below the origin goes through it instead */
	window(obs, uneq, 0, 4, 0, 4);
	obs[2].rows = obs[3].rows = 0;
	assert_int_equal(esd_size_fit(N, obs, 0, &m), 0);
	assert_true(m.fixed_rows == 0 && m.rows_per_sample > 0);
	/* bad input */
	obs[1].iters = 0;
	assert_int_equal(esd_size_fit(N, obs, 0, &m), -EINVAL);
	assert_int_equal(esd_size_fit(0, obs, 0, &m), -EINVAL);
	assert_int_equal(esd_size_fit(N, obs, -1, &m), -EINVAL);
}

static void test_model_time(void **state)
{
	(void)state;
	const int64_t T[N] = {10, 10, 100, 100};
	const uint32_t m[N] = {100, 100, 20, 20};
	/* fast: 1000 * 100 + 10 * 250; slow: 1000 * 20 + 100 * 90 */
	const struct esd_size_model sm = {.compute_ns = 1000, .fixed_rows = 50,
	                                  .rows_per_sample = 2};
	assert_true(fabs(esd_size_model_time(N, T, &sm, m) - 102500) < 1e-6);
}

/* Equal sizes on unequal links switch once to the curve's sizes; the
 * same rows seen there keep them; windows that began before the switch
 * are left out. */
static void test_fitter_switches_once(void **state)
{
	(void)state;
	const int64_t T[N] = {1000, 1000, 10000, 10000};
	struct esd_size_fitter f;
	esd_size_fitter_init(&f, N, 240, 0, 0.05);
	struct esd_size_obs obs[N];
	struct esd_size_model cur = {.compute_ns = 2000}, next;
	uint32_t sizes[N], eq[N] = {60, 60, 60, 60};
	window_pow(obs, eq, 30, 0.7, 2000, ESD_SIZE_FIT_WINDOW);
	assert_int_equal(esd_size_fitter_window(&f, 6, T, eq, &cur, obs, &next, sizes), 1);
	assert_true(sizes[0] > sizes[2] && sizes[0] + sizes[1] + sizes[2] + sizes[3] == 240);
	assert_int_equal(f.refits, 1);
	uint32_t now[N];
	memcpy(now, sizes, sizeof(now));
	esd_size_fitter_changed(&f, 6 + ESD_SIZE_FIT_LAG, 0);
	/* the window 7..10 began before the change at 10 */
	assert_int_equal(esd_size_fitter_window(&f, 10, T, now, &next, obs, &next, sizes), 0);
	assert_int_equal(f.windows, 1);
	/* the true curve seen at the new sizes: the fit gives them again, and
	 * they are kept */
	struct esd_size_model in = next, again;
	window_pow(obs, now, 30, 0.7, 2000, ESD_SIZE_FIT_WINDOW);
	assert_int_equal(esd_size_fitter_window(&f, 14, T, now, &in, obs, &again, sizes), 0);
	assert_memory_equal(sizes, now, sizeof(now));
	assert_int_equal(f.windows, 2);
}

/* The fitted sizes are judged by the curve b_j m^p through every sizes
 * seen (p from log rows on log samples, b_j through each worker's rows
 * now) with each worker's spread (T_j sqrt(rows)); the model announced
 * gives those sizes. */
static void test_fitter_judges_by_the_curve(void **state)
{
	(void)state;
	const int64_t T[N] = {1000, 1000, 10000, 10000};
	struct esd_size_fitter f;
	esd_size_fitter_init(&f, N, 240, 0, 0.02);
	struct esd_size_obs obs[N];
	struct esd_size_model cur = {.compute_ns = 20000}, next;
	uint32_t sizes[N], again[N];
	const uint32_t uneq[N] = {80, 80, 40, 40};
	window(obs, uneq, 100, 3, 20000, ESD_SIZE_FIT_WINDOW);
	assert_int_equal(esd_size_fitter_window(&f, 6, T, uneq, &cur, obs, &next, sizes), 1);
	assert_true(fabs(f.last.fixed_rows - 100) < 1e-6 && fabs(f.last.rows_per_sample - 3) < 1e-6);
	assert_int_equal(esd_batch_sizes_link_aware(N, 240, T, &next, 1, again), 0);
	assert_memory_equal(again, sizes, sizeof(again));
	/* rows 340 at 80 samples, 220 at 40: p = log(340 / 220) / log 2 */
	const double p = log(340.0 / 220) / log(2.0);
	double worst = 0;
	for (uint32_t j = 0; j < N; j++) {
		const double rows = (j < 2 ? 340 : 220) * pow(sizes[j] / (double)uneq[j], p);
		const double t = 20000.0 * sizes[j] + T[j] * rows + T[j] * sqrt(rows);
		worst = t > worst ? t : worst;
	}
	assert_true(fabs(f.last_fit_ns - worst) < 1e-6 * worst);
	/* within the threshold of the best split the curve allows */
	double best = INFINITY;
	for (uint32_t mf = 1; mf < 120; mf++) {
		const double rf = 340 * pow(mf / 80.0, p), rs = 220 * pow((120 - mf) / 40.0, p);
		const double tf = 20000.0 * mf + 1000 * (rf + sqrt(rf));
		const double ts = 20000.0 * (120 - mf) + 10000 * (rs + sqrt(rs));
		best = fmin(best, fmax(tf, ts));
	}
	assert_true(f.last_fit_ns <= 1.02 * best);
}

/* The cold prior: transfer-only, the slow links (10x the row cost) train
 * one sample each; with compute that outweighs the links, sizes near
 * equal; bad input. */
static void test_prior(void **state)
{
	(void)state;
	const int64_t T[N] = {3303, 3303, 33024, 33024};
	struct esd_size_model m;
	uint32_t s[N];
	assert_int_equal(esd_size_prior(N, 512, T, 0, 26, 0, 0.02, &m), 0);
	assert_int_equal(esd_batch_sizes_link_aware(N, 512, T, &m, 1, s), 0);
	assert_int_equal(s[2], 1);
	assert_int_equal(s[0], 255);
	assert_int_equal(esd_size_prior(N, 512, T, 1e8, 26, 0, 0.02, &m), 0);
	assert_int_equal(esd_batch_sizes_link_aware(N, 512, T, &m, 1, s), 0);
	assert_true(s[0] >= s[2] && s[0] - s[2] <= 4);
	/* free links and no compute: nothing to tell sizes apart, equal */
	const int64_t free_links[N] = {0, 0, 0, 0};
	assert_int_equal(esd_size_prior(N, 512, free_links, 0, 26, 0, 0.02, &m), 0);
	assert_int_equal(esd_batch_sizes_link_aware(N, 512, free_links, &m, 1, s), 0);
	assert_true(s[0] == 128 && s[3] == 128);
	assert_int_equal(esd_size_prior(N, 512, T, 0, 0, 0, 0.02, &m), -EINVAL);
	assert_int_equal(esd_size_prior(N, 512, T, -1, 26, 0, 0.02, &m), -EINVAL);
	assert_int_equal(esd_size_prior(0, 512, T, 0, 26, 0, 0.02, &m), -EINVAL);
}

/* Sizes that turned out slower than the best seen are left for the best,
 * and are not tried again. */
static void test_fitter_reverts_to_best(void **state)
{
	(void)state;
	const int64_t T[N] = {1000, 1000, 10000, 10000};
	struct esd_size_fitter f;
	esd_size_fitter_init(&f, N, 240, 0, 0.05);
	struct esd_size_obs obs[N];
	struct esd_size_model cur = {.compute_ns = 2000}, next, bad;
	uint32_t sizes[N], eq[N] = {60, 60, 60, 60};
	/* at equal sizes the slow links take 10000 * 280 + 120000 = 2.92 ms */
	window(obs, eq, 100, 3, 2000, ESD_SIZE_FIT_WINDOW);
	assert_int_equal(esd_size_fitter_window(&f, 6, T, eq, &cur, obs, &bad, sizes), 1);
	uint32_t tried[N];
	memcpy(tried, sizes, sizeof(tried));
	esd_size_fitter_changed(&f, 10, 0);
	/* there the fast workers move far more rows than the model said */
	window(obs, tried, 100, 3, 2000, ESD_SIZE_FIT_WINDOW);
	obs[0].rows = obs[1].rows = 10000 * ESD_SIZE_FIT_WINDOW;
	assert_int_equal(esd_size_fitter_window(&f, 14, T, tried, &bad, obs, &next, sizes), 1);
	assert_memory_equal(sizes, eq, sizeof(eq));
	assert_true(next.compute_ns == cur.compute_ns && next.fixed_rows == cur.fixed_rows);
	esd_size_fitter_changed(&f, 18, 0);
	/* back at equal sizes the same rows again: the sizes tried stay out */
	window(obs, eq, 100, 3, 2000, ESD_SIZE_FIT_WINDOW);
	int rc = esd_size_fitter_window(&f, 22, T, eq, &cur, obs, &next, sizes);
	assert_true(rc == 0 || memcmp(sizes, tried, sizeof(tried)) != 0);
	/* new link rates: what was seen is forgotten */
	esd_size_fitter_changed(&f, 30, 1);
	assert_int_equal(f.ntried, 0);
	assert_int_equal(esd_size_fitter_window(NULL, 34, T, eq, &cur, obs, &next, sizes), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_fit_line_and_prior),
	    cmocka_unit_test(test_model_time),
	    cmocka_unit_test(test_fitter_switches_once),
	    cmocka_unit_test(test_fitter_judges_by_the_curve),
	    cmocka_unit_test(test_prior),
	    cmocka_unit_test(test_fitter_reverts_to_best),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
