/* Job settings: defaults, per-worker lists, errors, digest, row cost. */
#include "testutil.h"

#include <esd/job.h>
#include <esd/err.h>
#include <string.h>

static struct esd_config *cfg_of(const char *const *sets)
{
	struct esd_config *c;
	assert_int_equal(esd_config_create(&c), 0);
	for (; *sets; sets++)
		assert_int_equal(esd_config_set(c, *sets), 0);
	return c;
}

static void test_defaults_and_lists(void **state)
{
	(void)state;
	static const char *const sets[] = {"workers.n=4", "workers.batch=192,64,192,64",
					   "workers.rates=5G,0.5G,5G,500M", "model.dim=512",
					   "dispatch.sync=het", "dispatch.staleness=2", NULL};
	struct esd_config *c = cfg_of(sets);
	struct esd_job j;
	assert_int_equal(esd_config_check_keys(c, esd_job_keys), 0);
	assert_int_equal(esd_job_from_config(c, &j), 0);
	assert_int_equal(j.n, 4);
	assert_int_equal(j.batch[0], 192);
	assert_int_equal(j.batch[3], 64);
	assert_int_equal(j.global_batch, 512);
	assert_int_equal(j.rate_bps[1], 500000000ull);
	assert_int_equal(j.rate_bps[3], 500000000ull);
	assert_int_equal(j.sync, ESD_SYNC_FULL_SET);
	assert_true(j.het);
	assert_string_equal(esd_job_sync_name(&j), "het");
	assert_int_equal(j.optim.opt, ESD_OPT_ADAGRAD);
	assert_string_equal(j.method, "hybrid");
	assert_true(j.gpu_min_rows == ESD_JOB_GPU_MEASURE);
	/* 512 floats + Adagrad state + key/clock: 16 + 4096 bytes */
	assert_int_equal(esd_job_row_bytes(&j), 16 + 512 * 4 * 2);
	/* 4112 bytes at 5 Gbit/s = 6579.2 ns -> 6580 */
	assert_int_equal(esd_job_row_cost_ns(&j, 0, esd_job_row_bytes(&j)), 6580);
	assert_int_equal(esd_job_row_cost_ns(&j, 1, esd_job_row_bytes(&j)), 65792);
	esd_config_free(c);
}

static void test_single_value_applies_to_all(void **state)
{
	(void)state;
	static const char *const sets[] = {"workers.n=3", "workers.batch=10", "workers.rates=1G",
					   NULL};
	struct esd_config *c = cfg_of(sets);
	struct esd_job j;
	assert_int_equal(esd_job_from_config(c, &j), 0);
	assert_int_equal(j.global_batch, 30);
	assert_int_equal(j.rate_bps[2], 1000000000ull);
	esd_config_free(c);
	static const char *const g[] = {"dispatch.gpu_min_rows=4096", "dispatch.gpu_blocks=16", NULL};
	c = cfg_of(g);
	assert_int_equal(esd_config_check_keys(c, esd_job_keys), 0);
	assert_int_equal(esd_job_from_config(c, &j), 0);
	assert_int_equal(j.gpu_min_rows, 4096);
	assert_int_equal(j.gpu_blocks, 16);
	esd_config_free(c);
}

static void test_errors(void **state)
{
	(void)state;
	static const char *const bad[][3] = {
		{"workers.n=2", "workers.batch=1,2,3", NULL},
		{"workers.n=2", "workers.rates=fast", NULL},
		{"model.optimizer=lion", NULL, NULL},
		{"dispatch.sync=sometimes", NULL, NULL},
		{"cache.policy=random", NULL, NULL},
		{"workers.n=0", NULL, NULL},
		{"ps.shards=2", "ps.addrs=a:1", NULL},
		{"dispatch.gpu_min_rows=some", NULL, NULL},
		{"dispatch.gpu_min_rows=-5", NULL, NULL},
		{"dispatch.gpu_min_rows=12x", NULL, NULL},
		{"dispatch.gpu_min_rows=999999999", NULL, NULL},
		{"dispatch.gpu_blocks=5000", NULL, NULL},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct esd_config *c = cfg_of(bad[i]);
		struct esd_job j;
		assert_int_equal(esd_job_from_config(c, &j), -EINVAL);
		esd_config_free(c);
	}
	static const char *const typo[] = {"workers.nn=3", NULL};
	struct esd_config *c = cfg_of(typo);
	assert_int_equal(esd_config_check_keys(c, esd_job_keys), -EINVAL);
	esd_config_free(c);
}

/* docs/configuration.md documents exactly the keys the parser accepts:
 * every `section.key` in the first column of its tables is in
 * esd_job_keys, and every key of esd_job_keys is there. */
static void test_keys_documented(void **state)
{
	(void)state;
	char *path = esd_test_src("docs/configuration.md");
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	static char doc[256][64];
	int ndoc = 0;
	char line[4096];
	while (fgets(line, sizeof(line), f)) {
		if (line[0] != '|')
			continue;
		char *end = strchr(line + 1, '|'); /* the first column only */
		if (end)
			*end = '\0';
		for (char *p = line; (p = strchr(p, '`')) != NULL;) {
			char *q = strchr(p + 1, '`');
			if (!q)
				break;
			size_t len = (size_t)(q - p - 1);
			if (len > 0 && len < sizeof(doc[0]) && memchr(p + 1, '.', len) &&
			    !memchr(p + 1, ' ', len) && !memchr(p + 1, '=', len)) {
				assert_true(ndoc < 256);
				memcpy(doc[ndoc], p + 1, len);
				doc[ndoc++][len] = '\0';
			}
			p = q + 1;
		}
	}
	fclose(f);
	free(path);
	int bad = 0;
	for (int i = 0; i < ndoc; i++) {
		int found = 0;
		for (const char *const *k = esd_job_keys; *k && !found; k++)
			found = !strcmp(*k, doc[i]);
		if (!found) {
			print_error("docs/configuration.md documents %s, which the parser rejects\n",
			            doc[i]);
			bad++;
		}
	}
	for (const char *const *k = esd_job_keys; *k; k++) {
		int found = 0;
		for (int i = 0; i < ndoc && !found; i++)
			found = !strcmp(*k, doc[i]);
		if (!found) {
			print_error("%s is accepted but missing from docs/configuration.md\n", *k);
			bad++;
		}
	}
	assert_int_equal(bad, 0);
	assert_true(ndoc > 30);
}

static void test_digest(void **state)
{
	(void)state;
	static const char *const a[] = {"workers.n=2", NULL};
	static const char *const b[] = {"workers.n=2", "dispatch.alpha=0.5", NULL};
	static const char *const c2[] = {"workers.n=2", "job.iterations=999", NULL};
	struct esd_config *ca = cfg_of(a), *cb = cfg_of(b), *cc = cfg_of(c2);
	struct esd_job ja, jb, jc;
	assert_int_equal(esd_job_from_config(ca, &ja), 0);
	assert_int_equal(esd_job_from_config(cb, &jb), 0);
	assert_int_equal(esd_job_from_config(cc, &jc), 0);
	assert_true(esd_job_digest(&ja) != esd_job_digest(&jb));
	/* the run length does not change decisions */
	assert_true(esd_job_digest(&ja) == esd_job_digest(&jc));
	esd_config_free(ca);
	esd_config_free(cb);
	esd_config_free(cc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults_and_lists),
		cmocka_unit_test(test_single_value_applies_to_all),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_digest),
		cmocka_unit_test(test_keys_documented),
	};
	return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
