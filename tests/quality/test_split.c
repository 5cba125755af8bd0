/*
 * workers.split = link-aware in the job settings: the sizes of
 * workers.batch are re-split, keeping their sum, exactly as
 * esd_batch_sizes_link_aware gives them for the links' row costs; the
 * digest covers the result; bad values are refused.
 */
#include "testutil.h"

#include <esd/config.h>
#include <esd/dispatch_quality.h>
#include <esd/job.h>
#include <errno.h>

static int load(struct esd_job *job, const char *const *sets)
{
	struct esd_config *cfg;
	assert_int_equal(esd_config_create(&cfg), 0);
	for (; *sets; sets++)
		assert_int_equal(esd_config_set(cfg, *sets), 0);
	int rc = esd_job_from_config(cfg, job);
	esd_config_free(cfg);
	return rc;
}

static void test_link_aware(void **state)
{
	(void)state;
	const char *eq[] = {"workers.n=4",
	                    "workers.batch=32",
	                    "workers.rates=5G,5G,0.5G,0.5G",
	                    "workers.compute_ns_per_sample=3000",
	                    "model.dim=8",
	                    NULL};
	const char *la[] = {"workers.n=4",
	                    "workers.batch=32",
	                    "workers.rates=5G,5G,0.5G,0.5G",
	                    "workers.compute_ns_per_sample=3000",
	                    "model.dim=8",
	                    "workers.split=link-aware",
	                    "workers.size_model=128.5,6.02",
	                    NULL};
	struct esd_job a, b;
	assert_int_equal(load(&a, eq), 0);
	assert_int_equal(load(&b, la), 0);
	assert_int_equal(b.derived.global_batch, 128);
	uint32_t want[4], sum = 0;
	int64_t T[4];
	for (uint32_t w = 0; w < 4; w++)
		T[w] = (int64_t)esd_job_row_cost_ns(&b, w, esd_job_row_bytes(&b));
	struct esd_size_model m = {
	    .compute_ns = 3000, .fixed_rows = 128.5, .rows_per_sample = 6.02};
	assert_int_equal(esd_batch_sizes_link_aware(4, 128, T, &m, 1, want), 0);
	for (uint32_t w = 0; w < 4; w++) {
		assert_int_equal(b.batch[w], want[w]);
		assert_int_equal(a.batch[w], 32);
		sum += b.batch[w];
	}
	assert_int_equal(sum, 128);
	assert_true(b.batch[0] > b.batch[2]);
	assert_true(a.derived.token != b.derived.token);
	/* equal links: equal sizes */
	const char *same[] = {"workers.n=4", "workers.batch=32", "workers.rates=5G",
	                      "workers.split=link-aware", NULL};
	assert_int_equal(load(&b, same), 0);
	for (uint32_t w = 0; w < 4; w++)
		assert_int_equal(b.batch[w], 32);
}

static void test_bad(void **state)
{
	(void)state;
	struct esd_job j;
	const char *b1[] = {"workers.split=fast", NULL};
	const char *b2[] = {"workers.split=link-aware", "workers.size_model=1", NULL};
	const char *b3[] = {"workers.split=link-aware", "workers.size_model=-1,2", NULL};
	const char *b4[] = {"workers.split=link-aware", "workers.size_model=a,b", NULL};
	assert_int_equal(load(&j, b1), -EINVAL);
	assert_int_equal(load(&j, b2), -EINVAL);
	assert_int_equal(load(&j, b3), -EINVAL);
	assert_int_equal(load(&j, b4), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_link_aware),
	    cmocka_unit_test(test_bad),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
