/*
 * Local search on the true cost: the result keeps every capacity, never
 * costs more than its start (the method's answer), and the cost it
 * reports is exact (equal to esd_conseq_compute's for the final
 * assignment), on random batches under both sync modes, with one row size
 * and with per-table ones (model.dims).
 */
#include "testutil.h"

#include <esd/types.h>
#include <esd/dispatch_quality.h>
#include <esd/dispatch_snap.h>
#include <errno.h>
#include <string.h>

enum { N = 4, K = 32, F = 8 };

static void test_never_worse_and_exact(void **state)
{
	(void)state;
	const uint32_t cap[N] = {12, 4, 10, 6};
	const uint32_t cache[N] = {128, 128, 128, 128};
	const int64_t T[N] = {100, 1000, 100, 1000};
	uint32_t off[K + 1], assign[K], start[K];
	esd_key_t keys[K * F];
	for (uint32_t i = 0; i <= K; i++)
		off[i] = i * F;
	const enum esd_method methods[] = {ESD_METHOD_LAIA, ESD_METHOD_OPT, ESD_METHOD_HEU,
	                                   ESD_METHOD_VANILLA};
	struct esd_conseq *cq;
	assert_int_equal(esd_conseq_create(&cq), 0);
	/* per-table row sizes (model.dims) too: each key its table's cost */
	static const uint32_t rb[F] = {40, 136, 40, 72, 136, 40, 72, 136};
	for (size_t mi = 0; mi < 2 * sizeof(methods) / sizeof(methods[0]); mi++)
		for (int sync = 0; sync < 2; sync++) {
			const uint32_t sized = mi >= 4 ? F : 0;
			struct esd_snapset *ss;
			struct esd_dispatcher *d;
			assert_int_equal(esd_snapset_create(N, cache, ESD_POLICY_LRU, &ss), 0);
			struct esd_dispatcher_config dc = {.n = N,
			                                   .cap = cap,
			                                   .T = T,
			                                   .method = methods[mi % 4],
			                                   .seed = 5,
			                                   .sync = (enum esd_sync)sync,
			                                   .row_bytes = sized ? rb : NULL,
			                                   .ntables = sized,
			                                   .row_bytes_full = 136};
			assert_int_equal(esd_dispatcher_create(&dc, ss, &d), 0);
			uint64_t seed = 99 + mi;
			for (int st = 0; st < 10; st++) {
				for (uint32_t p = 0; p < K * F; p++)
					keys[p] = esd_key_make(p % F, esd_splitmix64_next(&seed) %
					                                  (3 + 20 * (p % F)));
				struct esd_batch b = {.k = K, .off = off, .keys = keys};
				/* the method's answer (this advances the snapshots); then
				 * search from it on the states it saw: refill a table */
				struct esd_keytab *kt;
				assert_int_equal(esd_keytab_create(&kt), 0);
				assert_int_equal(esd_keytab_set_row_bytes(kt, rb, sized, 136), 0);
				assert_int_equal(esd_keytab_build(kt, &b, N), 0);
				assert_int_equal(esd_snapset_fill(ss, kt), 0);
				assert_int_equal(esd_dispatcher_step(d, &b, assign, NULL), 0);
				memcpy(start, assign, sizeof(start));
				assert_int_equal(esd_conseq_compute(kt, &b, start, T, dc.sync, cq),
				                 0);
				const int64_t before = cq->total_cost;
				uint64_t need[K * F];
				struct esd_ls_params lp = {
				    .max_evals = 2000, .seed = (uint64_t)st, .need = need};
				struct esd_ls_stats ls;
				assert_int_equal(
				    esd_local_search(kt, &b, T, dc.sync, &lp, assign, &ls), 0);
				assert_int_equal(ls.start_cost, before);
				assert_true(ls.end_cost <= before);
				assert_int_equal(esd_assign_check(K, N, cap, assign), 0);
				assert_int_equal(esd_conseq_compute(kt, &b, assign, T, dc.sync, cq),
				                 0);
				assert_int_equal(cq->total_cost, ls.end_cost);
				/* the search's masks: those counted for its answer */
				assert_memory_equal(need, esd_keytab_need_masks(kt),
				                    esd_keytab_count(kt) * sizeof(uint64_t));
				/* deterministic */
				memcpy(assign, start, sizeof(start));
				struct esd_ls_stats ls2;
				assert_int_equal(
				    esd_local_search(kt, &b, T, dc.sync, &lp, assign, &ls2), 0);
				assert_int_equal(ls2.end_cost, ls.end_cost);
				assert_int_equal(ls2.swaps, ls.swaps);
				esd_keytab_free(kt);
			}
			esd_dispatcher_free(d);
			esd_snapset_free(ss);
		}
	esd_conseq_free(cq);
}

/* The dispatcher's local search: capacities exact, snapshots consistent. */
static void test_in_dispatcher(void **state)
{
	(void)state;
	const uint32_t cap[N] = {5, 11, 9, 7};
	const uint32_t cache[N] = {128, 128, 128, 128};
	const int64_t T[N] = {10, 10, 100, 100};
	uint32_t off[K + 1], assign[K];
	esd_key_t keys[K * F];
	for (uint32_t i = 0; i <= K; i++)
		off[i] = i * F;
	struct esd_snapset *ss;
	struct esd_dispatcher *d;
	assert_int_equal(esd_snapset_create(N, cache, ESD_POLICY_EMARK, &ss), 0);
	struct esd_dispatcher_config dc = {.n = N,
	                                   .cap = cap,
	                                   .T = T,
	                                   .method = ESD_METHOD_OPT,
	                                   .matrix = ESD_MATRIX_SHARED,
	                                   .ls_evals = 500};
	assert_int_equal(esd_dispatcher_create(&dc, ss, &d), 0);
	uint64_t seed = 1;
	for (int st = 0; st < 10; st++) {
		for (uint32_t p = 0; p < K * F; p++)
			keys[p] =
			    esd_key_make(p % F, esd_splitmix64_next(&seed) % (3 + 20 * (p % F)));
		struct esd_batch b = {.k = K, .off = off, .keys = keys};
		assert_int_equal(esd_dispatcher_step(d, &b, assign, NULL), 0);
		assert_int_equal(esd_assign_check(K, N, cap, assign), 0);
		const struct esd_dispatch_counters *ct = esd_dispatcher_counters(d);
		assert_true(ct->ls.end_cost <= ct->ls.start_cost);
	}
	assert_int_equal(esd_snapset_verify(ss), 0);
	esd_dispatcher_free(d);
	esd_snapset_free(ss);
	/* bad input */
	struct esd_ls_params lp = {.max_evals = 1};
	assert_int_equal(esd_local_search(NULL, NULL, T, ESD_SYNC_ON_DEMAND, &lp, assign, NULL),
	                 -EINVAL);
}

/* More than 16 workers: the mask sums leave the lookup tables, and the
 * counts are kept in rows per key (dense for a key with at least W
 * occurrences, sparse below). repeats: keys drawn from one small space at
 * any position (samples repeat keys; a key's row fills and empties), with
 * the search's arrays kept from one call to the next. */
static void many_workers(int repeats)
{
	enum { W = 20, KK = 40, FF = 5 };
	uint32_t cap[W], cache[W], off[KK + 1], assign[KK];
	int64_t T[W];
	esd_key_t keys[KK * FF];
	for (uint32_t j = 0; j < W; j++) {
		cap[j] = 2;
		cache[j] = 64;
		T[j] = 10 + 7 * j;
	}
	for (uint32_t i = 0; i <= KK; i++)
		off[i] = i * FF;
	struct esd_snapset *ss;
	struct esd_dispatcher *d;
	struct esd_conseq *cq;
	assert_int_equal(esd_conseq_create(&cq), 0);
	assert_int_equal(esd_snapset_create(W, cache, ESD_POLICY_LRU, &ss), 0);
	struct esd_dispatcher_config dc = {.n = W, .cap = cap, .T = T, .method = ESD_METHOD_HEU};
	assert_int_equal(esd_dispatcher_create(&dc, ss, &d), 0);
	struct esd_ls_work *work = NULL;
	if (repeats)
		assert_int_equal(esd_ls_work_create(&work), 0);
	uint64_t seed = 7;
	for (int st = 0; st < 6; st++) {
		for (uint32_t p = 0; p < KK * FF; p++)
			keys[p] =
			    repeats
			        ? esd_key_make(p % FF == 0 ? 0 : 1,
			                       esd_splitmix64_next(&seed) % (p % FF == 0 ? 3 : 25))
			        : esd_key_make(p % FF,
			                       esd_splitmix64_next(&seed) % (2 + 15 * (p % FF)));
		struct esd_batch b = {.k = KK, .off = off, .keys = keys};
		struct esd_keytab *kt;
		assert_int_equal(esd_keytab_create(&kt), 0);
		assert_int_equal(esd_keytab_build(kt, &b, W), 0);
		assert_int_equal(esd_snapset_fill(ss, kt), 0);
		assert_int_equal(esd_dispatcher_step(d, &b, assign, NULL), 0);
		assert_int_equal(esd_conseq_compute(kt, &b, assign, T, ESD_SYNC_ON_DEMAND, cq), 0);
		const int64_t before = cq->total_cost;
		uint64_t need[KK * FF];
		struct esd_ls_params lp = {.max_evals = 3000, .seed = 1, .work = work, .need = need};
		struct esd_ls_stats ls;
		assert_int_equal(esd_local_search(kt, &b, T, ESD_SYNC_ON_DEMAND, &lp, assign, &ls),
		                 0);
		assert_int_equal(ls.start_cost, before);
		assert_true(ls.end_cost <= before);
		assert_int_equal(esd_assign_check(KK, W, cap, assign), 0);
		assert_int_equal(esd_conseq_compute(kt, &b, assign, T, ESD_SYNC_ON_DEMAND, cq), 0);
		assert_int_equal(cq->total_cost, ls.end_cost);
		assert_memory_equal(need, esd_keytab_need_masks(kt),
		                    esd_keytab_count(kt) * sizeof(uint64_t));
		esd_keytab_free(kt);
	}
	esd_ls_work_free(work);
	esd_dispatcher_free(d);
	esd_snapset_free(ss);
	esd_conseq_free(cq);
}

static void test_many_workers_exact(void **state)
{
	(void)state;
	many_workers(0);
}

static void test_many_workers_repeats(void **state)
{
	(void)state;
	many_workers(1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_never_worse_and_exact),
	    cmocka_unit_test(test_in_dispatcher),
	    cmocka_unit_test(test_many_workers_exact),
	    cmocka_unit_test(test_many_workers_repeats),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
