/*
 * Replicated rows (FAE's static hot set, esd_keytab_replicate and the
 * dispatcher's 'replicated' setting): every worker needs them in every
 * step, so each worker pulls each of them every iteration (its copy is
 * outdated by the previous iteration's all-reduce), pushes a gradient for
 * each, and never evicts them, whatever the assignment.
 */
#include "testutil.h"

#include <esd/dispatch.h>
#include <esd/dispatch_snap.h>
#include <esd/policy.h>

#include <errno.h>
#include <string.h>

/* keys: a batch of k samples of len keys from a universe of 'universe'
 * ids per table (table = position % 4). */
static void batch(uint32_t k, uint32_t len, uint64_t seed, uint64_t universe, uint32_t *off,
                  esd_key_t *keys)
{
	uint64_t st = seed;
	off[0] = 0;
	for (uint32_t i = 0; i < k; i++) {
		for (uint32_t p = 0; p < len; p++)
			keys[i * len + p] = esd_key_make(p % 4, esd_test_rand(&st) % universe);
		off[i + 1] = (i + 1) * len;
	}
}

static void test_keytab_replicate(void **state)
{
	(void)state;
	struct esd_keytab *kt;
	assert_int_equal(esd_keytab_create(&kt), 0);
	uint32_t off[3] = {0, 2, 4};
	esd_key_t keys[4] = {10, 11, 10, 12};
	struct esd_batch b = {2, off, keys};
	assert_int_equal(esd_keytab_replicate(kt, keys, 1), -EINVAL); /* not built */
	assert_int_equal(esd_keytab_build(kt, &b, 3), 0);
	assert_int_equal(esd_keytab_count(kt), 3);
	/* 11 is in the batch, 20 and 21 are not; 20 twice */
	esd_key_t hot[4] = {11, 20, 21, 20};
	assert_int_equal(esd_keytab_replicate(kt, NULL, 1), -EINVAL);
	assert_int_equal(esd_keytab_replicate(kt, hot, 4), 0);
	assert_int_equal(esd_keytab_count(kt), 5);
	assert_int_equal(esd_keytab_find(kt, 11), 1);
	assert_int_equal(esd_keytab_find(kt, 20), 3);
	assert_int_equal(esd_keytab_find(kt, 21), 4);
	assert_int_equal(esd_keytab_find(kt, 12), 2);
	/* a rebuild forgets them */
	assert_int_equal(esd_keytab_build(kt, &b, 3), 0);
	assert_int_equal(esd_keytab_count(kt), 3);
	assert_int_equal(esd_keytab_find(kt, 20), -1);
	/* many keys: the hash table and the per-key arrays grow */
	esd_key_t many[5000];
	for (uint32_t i = 0; i < 5000; i++)
		many[i] = esd_key_make(7, i);
	assert_int_equal(esd_keytab_replicate(kt, many, 5000), 0);
	assert_int_equal(esd_keytab_count(kt), 5003);
	for (uint32_t i = 0; i < 5000; i += 97)
		assert_int_equal(esd_keytab_find(kt, many[i]), 3 + i);
	assert_int_equal(esd_keytab_find(kt, 10), 0);
	/* the next build starts from an empty table: none of them is left */
	assert_int_equal(esd_keytab_build(kt, &b, 3), 0);
	assert_int_equal(esd_keytab_count(kt), 3);
	for (uint32_t i = 0; i < 5000; i += 7)
		assert_int_equal(esd_keytab_find(kt, many[i]), -1);
	assert_int_equal(esd_keytab_find(kt, 12), 2);
	esd_keytab_free(kt);
}

/* FAE: vanilla dispatch, full-set sync, hot rows replicated. */
static void test_fae_consequence(void **state)
{
	(void)state;
	enum { N = 4, K = 64, LEN = 8, H = 30 };
	const uint32_t capc[N] = {H + K / N * LEN, H + K / N * LEN, H + K / N * LEN,
	                          H + K / N * LEN};
	int64_t T[N] = {10, 10, 100, 100};
	esd_key_t hot[H];
	for (uint32_t h = 0; h < H; h++) /* half in the batches, half never seen */
		hot[h] = esd_key_make(h % 4, h < H / 2 ? h : 100000 + h);
	for (int pol = ESD_POLICY_LRU; pol <= ESD_POLICY_EMARK; pol++) {
		struct esd_snapset *ss;
		assert_int_equal(esd_snapset_create(N, capc, (enum esd_policy)pol, &ss), 0);
		struct esd_dispatcher_config cfg = {.n = N,
		                                    .T = T,
		                                    .method = ESD_METHOD_VANILLA,
		                                    .seed = 3,
		                                    .sync = ESD_SYNC_FULL_SET,
		                                    .replicated = hot,
		                                    .nreplicated = H};
		struct esd_dispatcher *d;
		assert_int_equal(esd_dispatcher_create(&cfg, ss, &d), 0);
		struct esd_conseq *cq;
		assert_int_equal(esd_conseq_create(&cq), 0);
		uint32_t off[K + 1], a[K];
		esd_key_t keys[K * LEN];
		for (uint64_t it = 0; it < 10; it++) {
			batch(K, LEN, 77 + it, 500, off, keys);
			struct esd_batch b = {K, off, keys};
			assert_int_equal(esd_dispatcher_step(d, &b, a, cq), 0);
			assert_int_equal(esd_snapset_verify(ss), 0);
			for (uint32_t w = 0; w < N; w++) {
				const esd_key_t *pull = esd_conseq_keys(cq, ESD_CQ_MISS_PULL, w);
				const esd_key_t *grad = esd_conseq_keys(cq, ESD_CQ_UPDATE_GRAD, w);
				uint32_t np = esd_conseq_count(cq, ESD_CQ_MISS_PULL, w);
				uint32_t ng = esd_conseq_count(cq, ESD_CQ_UPDATE_GRAD, w);
				struct esd_cmeta *cm = esd_snapset_cmeta(ss, w);
				for (uint32_t h = 0; h < H; h++) {
					int in_pull = 0, in_grad = 0;
					for (uint32_t q = 0; q < np; q++)
						in_pull |= pull[q] == hot[h];
					for (uint32_t q = 0; q < ng; q++)
						in_grad |= grad[q] == hot[h];
					/* every iteration: pulled (the last all-reduce
					 * outdated it), gradient pushed, still cached */
					assert_true(in_pull);
					assert_true(in_grad);
					assert_int_equal(esd_cmeta_state(cm, hot[h]),
					                 ESD_ROW_OUTDATED);
				}
			}
			assert_int_equal(esd_conseq_count(cq, ESD_CQ_UPDATE_VALUE, 0), 0);
		}
		esd_conseq_free(cq);
		esd_dispatcher_free(d);
		esd_snapset_free(ss);
	}
}

static void test_dispatcher_rejects_null_keys(void **state)
{
	(void)state;
	const uint32_t capc[2] = {64, 64};
	int64_t T[2] = {1, 1};
	struct esd_snapset *ss;
	assert_int_equal(esd_snapset_create(2, capc, ESD_POLICY_LRU, &ss), 0);
	struct esd_dispatcher_config cfg = {
	    .n = 2, .T = T, .method = ESD_METHOD_VANILLA, .nreplicated = 3};
	struct esd_dispatcher *d;
	assert_int_equal(esd_dispatcher_create(&cfg, ss, &d), -EINVAL);
	esd_snapset_free(ss);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_keytab_replicate),
	    cmocka_unit_test(test_fae_consequence),
	    cmocka_unit_test(test_dispatcher_rejects_null_keys),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
