/*
 * The synthetic generator: determinism (same parameters, same bytes;
 * another seed, other bytes), the Zipf sampler against the exact
 * distribution, drift moving the popular set, bags (multi-hot tables) and
 * parameter checks.
 */
#include "testutil.h"

#include <esd/dataset.h>
#include <esd/err.h>
#include <math.h>
#include <string.h>

#include "zipf.h"

static char *dir;

static char *path_of(const char *name)
{
	char *p;
	assert_true(asprintf(&p, "%s/%s", dir, name) > 0);
	return p;
}

static uint8_t *slurp(const char *p, size_t *len)
{
	FILE *f = fopen(p, "rb");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	*len = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *b = malloc(*len + 1);
	assert_int_equal(fread(b, 1, *len, f), *len);
	fclose(f);
	return b;
}

static void small_params(struct esd_ds_gen_params *p, const char *shape)
{
	assert_int_equal(esd_ds_gen_defaults(p, shape), 0);
	assert_int_equal(esd_ds_scale_rows(&p->info, 100, 20000), 0);
	p->nsamples = 20000;
}

static void test_deterministic(void **state)
{
	(void)state;
	const char *shapes[] = {"criteo-kaggle", "avazu", "criteo-search"};
	for (int s = 0; s < 3; s++) {
		struct esd_ds_gen_params p;
		char *a = path_of("a.esd"), *b = path_of("b.esd");
		small_params(&p, shapes[s]);
		p.info.zstd_level = s == 1 ? 3 : 0;
		assert_int_equal(esd_ds_generate(&p, a), 0);
		assert_int_equal(esd_ds_generate(&p, b), 0);
		size_t la, lb;
		uint8_t *ba = slurp(a, &la), *bb = slurp(b, &lb);
		assert_int_equal(la, lb);
		assert_memory_equal(ba, bb, la);
		free(bb);
		p.info.seed = 2;
		assert_int_equal(esd_ds_generate(&p, b), 0);
		bb = slurp(b, &lb);
		assert_true(la != lb || memcmp(ba, bb, la) != 0);
		struct esd_ds_reader *r;
		assert_int_equal(esd_ds_open(b, &r), 0);
		assert_int_equal(esd_ds_reader_info(r)->nsamples, 20000);
		assert_int_equal(esd_ds_reader_info(r)->seed, 2);
		assert_string_equal(esd_ds_reader_info(r)->shape, shapes[s]);
		esd_ds_close(r);
		free(ba);
		free(bb);
		free(a);
		free(b);
	}
}

/* Draw counts against the exact Zipf probabilities, for a head-only table
 * and one with a tail (rejection-inversion past ZIPF_HEAD). */
static void check_zipf(uint64_t rows, double s, uint64_t draws)
{
	struct zipf z;
	struct rng r;
	rng_seed(&r, 11);
	assert_int_equal(esd_zipf_init(&z, rows, s), 0);
	uint64_t cnt[8] = {0}, tail = 0, beyond = 0;
	uint64_t cut = rows > 2 * ZIPF_HEAD ? 2 * ZIPF_HEAD : rows / 2;
	for (uint64_t i = 0; i < draws; i++) {
		uint64_t k = esd_zipf_draw(&z, &r);
		assert_true(k < rows);
		if (k < 8)
			cnt[k]++;
		if (k >= cut)
			tail++;
		if (k >= ZIPF_HEAD)
			beyond++;
	}
	double hsum = 0, tsum = 0;
	for (uint64_t k = 1; k <= rows; k++) {
		hsum += pow((double)k, -s);
		if (k > cut)
			tsum += pow((double)k, -s);
	}
	for (int k = 0; k < 8 && (uint64_t)k < rows; k++) {
		double e = (double)draws * pow(k + 1.0, -s) / hsum;
		assert_true(fabs((double)cnt[k] - e) < 5 * sqrt(e) + 1);
	}
	double et = (double)draws * tsum / hsum;
	assert_true(fabs((double)tail - et) < 5 * sqrt(et) + 1);
	if (rows > ZIPF_HEAD)
		assert_true(beyond > 0);
	esd_zipf_free(&z);
}

/* Generate p into a and b: the same bytes. */
static void generate_twice(const struct esd_ds_gen_params *p, const char *a, const char *b)
{
	assert_int_equal(esd_ds_generate(p, a), 0);
	assert_int_equal(esd_ds_generate(p, b), 0);
	size_t la, lb;
	uint8_t *ba = slurp(a, &la), *bb = slurp(b, &lb);
	assert_int_equal(la, lb);
	assert_memory_equal(ba, bb, la);
	free(ba);
	free(bb);
}

/* --bag: bags of Poisson(mean) IDs capped at max, deterministic, the
 * single-ID tables' draws unchanged in kind. */
static void test_bags(void **state)
{
	(void)state;
	struct esd_ds_gen_params p;
	char *a = path_of("bags-a.esd"), *b = path_of("bags-b.esd");
	small_params(&p, "criteo-kaggle");
	p.nsamples = 5000;
	p.info.max_bag[2] = 12;
	p.bag_mean[2] = 3.0;
	p.info.max_bag[5] = 4;
	p.bag_mean[5] = 3.5; /* often capped */
	generate_twice(&p, a, b);
	struct esd_ds_reader *r;
	assert_int_equal(esd_ds_open(a, &r), 0);
	uint32_t nt = esd_ds_reader_info(r)->ntables;
	esd_key_t keys[64];
	uint32_t off[27];
	double sum2 = 0, sum5 = 0;
	uint32_t max2 = 0, max5 = 0, empty2 = 0;
	for (uint64_t i = 0; i < p.nsamples; i++) {
		assert_int_equal(esd_ds_read_bags(r, 1, NULL, NULL, keys, 64, off), 1);
		uint32_t l2 = off[3] - off[2], l5 = off[6] - off[5];
		sum2 += l2;
		sum5 += l5;
		max2 = l2 > max2 ? l2 : max2;
		max5 = l5 > max5 ? l5 : max5;
		empty2 += l2 == 0;
		assert_int_equal(off[nt] - off[0], nt - 2 + l2 + l5);
	}
	esd_ds_close(r);
	double m2 = sum2 / (double)p.nsamples, m5 = sum5 / (double)p.nsamples;
	assert_true(fabs(m2 - 3.0) < 0.1);          /* Poisson(3): mean 3 */
	assert_true(m5 < 3.5 && m5 > 2.9);          /* capped at 4 */
	assert_true(max2 <= 12 && max2 >= 8 && max5 == 4);
	assert_true(empty2 > 150 && empty2 < 350);  /* P(0) = e^-3: ~249 of 5000 */
	p.bag_mean[5] = 5.0;                        /* above its max */
	assert_int_equal(esd_ds_generate(&p, b), -EINVAL);
	free(a);
	free(b);
}

static void test_zipf_sampler(void **state)
{
	(void)state;
	check_zipf(3, 1.2, 200000);
	check_zipf(1000, 0.8, 200000);
	check_zipf(100000, 1.2, 400000);
	check_zipf(100000, 1.0, 400000); /* s = 1: the log branch of H */
	check_zipf(1000000, 2.0, 200000);
}

/* With drift, the most popular IDs of the first and the last part of a
 * stream differ; without, they agree. */
static void top_ids(const char *path, uint64_t from, uint64_t n, uint32_t table, uint64_t rows,
                    uint64_t *top)
{
	struct esd_ds_reader *r;
	assert_int_equal(esd_ds_open(path, &r), 0);
	uint32_t nt = esd_ds_reader_info(r)->ntables;
	uint32_t *cnt = calloc(rows, sizeof(uint32_t));
	esd_key_t *keys = malloc(sizeof(esd_key_t) * nt * 1000);
	assert_int_equal(esd_ds_seek(r, from), 0);
	for (uint64_t done = 0; done < n; done += 1000) {
		assert_int_equal(esd_ds_read(r, 1000, NULL, NULL, keys), 1000);
		for (int s = 0; s < 1000; s++)
			cnt[esd_key_id(keys[s * nt + table])]++;
	}
	*top = 0;
	for (uint64_t i = 1; i < rows; i++)
		if (cnt[i] > cnt[*top])
			*top = i;
	free(cnt);
	free(keys);
	esd_ds_close(r);
}

static void test_drift(void **state)
{
	(void)state;
	struct esd_ds_gen_params p;
	char *a = path_of("drift.esd");
	assert_int_equal(esd_ds_gen_defaults(&p, "avazu"), 0);
	p.nsamples = 40000;
	/* table 8 (device_ip) with 1000 rows; a huge drift: all ranks redrawn
	 * many times over the stream */
	esd_ds_scale_rows(&p.info, 6729.486, 0);
	assert_int_equal(p.info.rows[8], 1000);
	p.info.drift = 5000;
	assert_int_equal(esd_ds_generate(&p, a), 0);
	uint64_t t0, t1;
	top_ids(a, 0, 5000, 8, 1000, &t0);
	top_ids(a, 35000, 5000, 8, 1000, &t1);
	assert_true(t0 != t1);
	p.info.drift = 0;
	assert_int_equal(esd_ds_generate(&p, a), 0);
	top_ids(a, 0, 5000, 8, 1000, &t0);
	top_ids(a, 35000, 5000, 8, 1000, &t1);
	assert_int_equal(t0, t1);
	free(a);
}

static void test_bad_params(void **state)
{
	(void)state;
	struct esd_ds_gen_params p;
	char *a = path_of("bad.esd");
	assert_int_equal(esd_ds_gen_defaults(&p, "nope"), -ENOENT);
	small_params(&p, "criteo-kaggle");
	p.info.zipf[3] = 0;
	assert_int_equal(esd_ds_generate(&p, a), -EINVAL);
	assert_non_null(strstr(esd_ds_last_error(), "table 3"));
	small_params(&p, "criteo-kaggle");
	p.info.drift = -1;
	assert_int_equal(esd_ds_generate(&p, a), -EINVAL);
	free(a);
}

int main(void)
{
	dir = esd_test_mkdtemp("esd-dsgen");
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_deterministic),
	    cmocka_unit_test(test_bags),
	    cmocka_unit_test(test_zipf_sampler),
	    cmocka_unit_test(test_drift),
	    cmocka_unit_test(test_bad_params),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	esd_test_rmtree(dir);
	free(dir);
	return rc;
}
