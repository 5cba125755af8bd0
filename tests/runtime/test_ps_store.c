/* The PS row store with per-table dims (model.dims): each row a record of
 * its table's dim trains bit for bit as the first d_t floats of the same
 * row padded to the largest dim; a row file on disk with a small row
 * cache holds what RAM holds; a padded put drops the floats past d_t; the
 * records take less memory than padded ones. */
#include "testutil.h"

#include "store.h"

#include <errno.h>
#include <esd/job.h>
#include <esd/optim.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const uint32_t dims[4] = {8, 64, 8, 16};

static void dims_job(struct esd_job *job, enum esd_optimizer opt)
{
	memset(job, 0, sizeof(*job));
	job->seed = 3;
	job->dim = 64;
	job->ntable_dims = 4;
	memcpy(job->table_dims, dims, sizeof(dims));
	esd_optim_params_default(&job->optim, opt);
}

static esd_key_t key_of(uint64_t i)
{
	return esd_key_make((uint32_t)(i % 4), (i * 7919) % 20000);
}

/* Rounds of gradients (zero past each table's dim) staged into every
 * store and applied at the same points. */
static void train(struct ps_store **st, size_t n, uint64_t rows)
{
	float g[64];
	for (int round = 0; round < 3; round++) {
		for (uint64_t i = 0; i < rows; i++) {
			const unsigned d = dims[i % 4];
			for (unsigned c = 0; c < 64; c++)
				g[c] = c < d ? (float)((i + c + round) % 13) * 0.01f - 0.06f : 0.0f;
			for (size_t s = 0; s < n; s++)
				assert_int_equal(ps_store_stage_grad(st[s], 0, key_of(i), g), 0);
			if (i % 5000 == 4999)
				for (size_t s = 0; s < n; s++)
					assert_true(ps_store_apply_staged(st[s]) >= 0);
		}
		for (size_t s = 0; s < n; s++)
			assert_true(ps_store_apply_staged(st[s]) >= 0);
	}
}

/* Row key of a (per-table) equals row key of b (at b's dim d_b, its first
 * d floats of value and of each state block), the rest of b zero. */
static void same_row(struct ps_store *a, struct ps_store *b, esd_key_t key, unsigned sf)
{
	const unsigned d = ps_store_key_dim(a, key), db = ps_store_key_dim(b, key);
	float ra[64 * 3];
	const struct ps_row *r = ps_store_find(a, key);
	assert_non_null(r);
	const uint64_t clock = r->clock;
	memcpy(ra, r->data, d * (1 + sf) * sizeof(float));
	r = ps_store_find(b, key);
	assert_non_null(r);
	assert_int_equal(r->clock, clock);
	for (unsigned blk = 0; blk <= sf; blk++) {
		assert_memory_equal(ra + blk * d, r->data + blk * db, d * sizeof(float));
		if (blk == 0)
			for (unsigned c = d; c < db; c++)
				assert_true(r->data[c] == 0.0f);
	}
}

static void test_per_table_as_padded(void **state)
{
	(void)state;
	static const enum esd_optimizer opts[] = {ESD_OPT_SGD, ESD_OPT_ADAGRAD, ESD_OPT_ADAM};
	for (size_t o = 0; o < 3; o++) {
		struct esd_job job;
		dims_job(&job, opts[o]);
		struct ps_store *st[2];
		assert_int_equal(ps_store_create_job(&job, 0, &st[0]), 0);
		/* the same rows padded to 64 floats */
		assert_int_equal(ps_store_create(64, &job.optim, job.seed, &st[1]), 0);
		/* the padded store's rows made as the per-table store makes
		 * them (esd_row_init_table zeroes past d_t) */
		float v[64], s[128];
		for (uint64_t i = 0; i < 20000; i++) {
			if (ps_store_find(st[1], key_of(i)))
				continue;
			esd_row_init_table(job.seed, key_of(i), dims[i % 4], 64, v);
			esd_optim_state_init(&job.optim, 64, s);
			assert_int_equal(ps_store_put_value(st[1], key_of(i), 0, v, s), 0);
		}
		train(st, 2, 20000);
		const unsigned sf = esd_optimizer_state_floats(opts[o]);
		for (uint64_t i = 0; i < 20000; i += 7)
			same_row(st[0], st[1], key_of(i), sf);
		assert_true(ps_store_resident_bytes(st[0]) < ps_store_resident_bytes(st[1]));
		ps_store_free(st[0]);
		ps_store_free(st[1]);
	}
}

static void test_disk_as_ram(void **state)
{
	(void)state;
	struct esd_job job;
	dims_job(&job, ESD_OPT_ADAM);
	struct ps_store *st[2];
	assert_int_equal(ps_store_create_job(&job, 0, &st[0]), 0);
	char tmpl[] = "/tmp/esd-store.XXXXXX";
	assert_non_null(mkdtemp(tmpl));
	snprintf(job.store_dir, sizeof(job.store_dir), "%s", tmpl);
	job.store_ram_mb = 2; /* a row cache far below the rows: evictions */
	assert_int_equal(ps_store_create_job(&job, 0, &st[1]), 0);
	train(st, 2, 40000);
	assert_int_equal(ps_store_count(st[0]), ps_store_count(st[1]));
	for (uint64_t i = 0; i < 40000; i += 3)
		same_row(st[0], st[1], key_of(i), 2);
	/* every row walked in order, as a checkpoint does */
	size_t n = ps_store_count(st[1]);
	for (size_t i = 0; i < n; i++) {
		const struct ps_row *r = ps_store_at(st[1], i);
		assert_non_null(r);
		assert_non_null(ps_store_find(st[0], r->key));
	}
	assert_null(ps_store_at(st[1], n));
	ps_store_free(st[0]);
	ps_store_free(st[1]);
	rmdir(tmpl);
}

static void test_put_padded(void **state)
{
	(void)state;
	struct esd_job job;
	dims_job(&job, ESD_OPT_ADAM);
	struct ps_store *st;
	assert_int_equal(ps_store_create_job(&job, 0, &st), 0);
	float v[64], s[128];
	for (unsigned c = 0; c < 128; c++) {
		if (c < 64)
			v[c] = c < 8 ? (float)c : 0.0f;
		s[c] = 100.0f + (float)c;
	}
	const esd_key_t key = esd_key_make(0, 5); /* a table of dim 8 */
	assert_int_equal(ps_store_key_dim(st, key), 8);
	assert_int_equal(ps_store_put_padded(st, key, 9, v, s), 0);
	const struct ps_row *r = ps_store_find(st, key);
	assert_non_null(r);
	assert_int_equal(r->clock, 9);
	assert_memory_equal(r->data, v, 8 * sizeof(float));
	assert_memory_equal(r->data + 8, s, 8 * sizeof(float));       /* m's first 8 */
	assert_memory_equal(r->data + 16, s + 64, 8 * sizeof(float)); /* v's first 8 */
	/* a value past the table's dim is not of this job */
	v[12] = 1.0f;
	assert_int_equal(ps_store_check_padding(st, key, v, "test"), -EINVAL);
	ps_store_free(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_per_table_as_padded),
	    cmocka_unit_test(test_disk_as_ram),
	    cmocka_unit_test(test_put_padded),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
