/*
 * The true cost and critical path of a decision on hand examples, the
 * shared-charge matrix on the same example, link-aware batch sizes, and
 * every method meeting unequal capacities exactly through the dispatcher.
 */
#include "testutil.h"

#include <esd/types.h>
#include <esd/dispatch_quality.h>
#include <esd/dispatch_snap.h>
#include <errno.h>
#include <string.h>

/* n = 2, T = {10, 100}; sample 0 = {1, 2}, sample 1 = {2, 3}; key 1 CLEAN
 * on worker 0, key 2 DIRTY on worker 1, key 3 absent. */
static const uint32_t ex_off[] = {0, 2, 4};
static const esd_key_t ex_keys[] = {1, 2, 2, 3};
static const struct esd_batch ex_b = {.k = 2, .off = ex_off, .keys = ex_keys};
static const int64_t ex_T[] = {10, 100};

static struct esd_keytab *example(void)
{
	struct esd_keytab *kt;
	assert_int_equal(esd_keytab_create(&kt), 0);
	assert_int_equal(esd_keytab_build(kt, &ex_b, 2), 0);
	assert_int_equal(esd_keytab_set(kt, (uint32_t)esd_keytab_find(kt, 1), 0, ESD_ROW_CLEAN), 0);
	assert_int_equal(esd_keytab_set(kt, (uint32_t)esd_keytab_find(kt, 2), 1, ESD_ROW_DIRTY), 0);
	return kt;
}

static void test_spread(void **state)
{
	(void)state;
	struct esd_keytab *kt = example();
	struct esd_conseq *cq;
	struct esd_iter_time t;
	assert_int_equal(esd_conseq_create(&cq), 0);
	const uint32_t assign[] = {0, 1};
	assert_int_equal(esd_true_cost(kt, &ex_b, assign, ex_T, ESD_SYNC_ON_DEMAND, 5, cq, &t), 0);
	/* key 1: hit on 0. key 2 on {0, 1}: value push by 1 (100), pull by 0
	 * (10), gradient pushes by both (10 + 100). key 3 on 1: pull (100). */
	assert_int_equal(cq->cost[ESD_CQ_UPDATE_VALUE], 100);
	assert_int_equal(cq->cost[ESD_CQ_MISS_PULL], 110);
	assert_int_equal(cq->cost[ESD_CQ_UPDATE_GRAD], 110);
	assert_int_equal(cq->hits, 2); /* key 1 on 0, key 2 on its DIRTY holder 1 */
	assert_int_equal(t.total_cost, 320);
	assert_int_equal(t.m[0], 1);
	assert_int_equal(t.m[1], 1);
	assert_int_equal(t.xfer_ns[0], 20);
	assert_int_equal(t.xfer_ns[1], 300);
	assert_int_equal(t.worker_ns[0], 25);
	assert_int_equal(t.worker_ns[1], 305);
	assert_int_equal(t.crit_ns, 305);
	assert_int_equal(t.slowest, 1);
	esd_conseq_free(cq);
	esd_keytab_free(kt);
}

static void test_together(void **state)
{
	(void)state;
	struct esd_keytab *kt = example();
	struct esd_conseq *cq;
	struct esd_iter_time t;
	assert_int_equal(esd_conseq_create(&cq), 0);
	const uint32_t assign[] = {0, 0};
	assert_int_equal(esd_true_cost(kt, &ex_b, assign, ex_T, ESD_SYNC_ON_DEMAND, 5, cq, &t), 0);
	/* key 2: value push by 1 (100), pull by 0 (10), no gradient push (one
	 * trainer); key 3: pull by 0 (10) */
	assert_int_equal(t.total_cost, 120);
	assert_int_equal(t.worker_ns[0], 2 * 5 + 20);
	assert_int_equal(t.worker_ns[1], 100);
	assert_int_equal(t.crit_ns, 100);
	assert_int_equal(t.slowest, 1);
	/* full-set sync: every trained row pushed by its trainer (3 rows by 0) */
	assert_int_equal(esd_true_cost(kt, &ex_b, assign, ex_T, ESD_SYNC_FULL_SET, 0, cq, &t), 0);
	assert_int_equal(cq->cost[ESD_CQ_UPDATE_GRAD], 30);
	assert_int_equal(t.total_cost, 150);
	/* bad input */
	const uint32_t bad[] = {0, 2};
	assert_int_equal(esd_iter_time_compute(cq, bad, 2, 0, &t), -EINVAL);
	assert_int_equal(esd_iter_time_compute(cq, assign, 2, -1, &t), -EINVAL);
	assert_int_equal(esd_iter_time_compute(NULL, assign, 2, 0, &t), -EINVAL);
	esd_conseq_free(cq);
	esd_keytab_free(kt);
}

/* Bags may repeat an ID (docs/multihot.md): the example with key 2 twice
 * in sample 0 and key 3 twice in sample 1 moves every row once, at the
 * same true cost. */
static void test_repeated_key(void **state)
{
	(void)state;
	static const uint32_t off[] = {0, 3, 6};
	static const esd_key_t keys[] = {1, 2, 2, 2, 3, 3};
	const struct esd_batch b = {.k = 2, .off = off, .keys = keys};
	struct esd_keytab *kt;
	struct esd_conseq *cq;
	struct esd_iter_time t;
	assert_int_equal(esd_keytab_create(&kt), 0);
	assert_int_equal(esd_keytab_build(kt, &b, 2), 0);
	assert_int_equal(esd_keytab_count(kt), 3);
	assert_int_equal(esd_keytab_set(kt, (uint32_t)esd_keytab_find(kt, 1), 0, ESD_ROW_CLEAN), 0);
	assert_int_equal(esd_keytab_set(kt, (uint32_t)esd_keytab_find(kt, 2), 1, ESD_ROW_DIRTY), 0);
	assert_int_equal(esd_conseq_create(&cq), 0);
	const uint32_t assign[] = {0, 1};
	assert_int_equal(esd_true_cost(kt, &b, assign, ex_T, ESD_SYNC_ON_DEMAND, 5, cq, &t), 0);
	assert_int_equal(cq->cost[ESD_CQ_MISS_PULL], 110);  /* key 2 to 0, key 3 to 1: once */
	assert_int_equal(cq->cost[ESD_CQ_UPDATE_GRAD], 110); /* key 2 by both: once each */
	assert_int_equal(t.total_cost, 320);
	assert_int_equal(esd_conseq_count(cq, ESD_CQ_MISS_PULL, 1), 1);
	esd_conseq_free(cq);
	esd_keytab_free(kt);
}

static void test_shared_matrix(void **state)
{
	(void)state;
	struct esd_keytab *kt = example();
	int64_t c[4];
	assert_int_equal(esd_costmat_build(kt, &ex_b, ex_T, c), 0);
	assert_int_equal(c[0], 110);
	assert_int_equal(c[1], 100);
	assert_int_equal(c[2], 120);
	assert_int_equal(c[3], 100);
	/* key 1 (1 occurrence): {0, 100}; key 2 (2): {110, 0} / 2; key 3 (1):
	 * {10, 100}; all times ESD_SHARED_SCALE */
	assert_int_equal(esd_costmat_build_shared(kt, &ex_b, ex_T, c), 0);
	assert_int_equal(c[0], 55 * ESD_SHARED_SCALE);
	assert_int_equal(c[1], 100 * ESD_SHARED_SCALE);
	assert_int_equal(c[2], 65 * ESD_SHARED_SCALE);
	assert_int_equal(c[3], 100 * ESD_SHARED_SCALE);
	const int64_t badT[] = {-1, 0};
	assert_int_equal(esd_costmat_build_shared(kt, &ex_b, badT, c), -EINVAL);
	enum esd_matrix m;
	assert_int_equal(esd_matrix_parse("shared", &m), 0);
	assert_int_equal(m, ESD_MATRIX_SHARED);
	assert_int_equal(esd_matrix_parse("paper", &m), 0);
	assert_int_equal(m, ESD_MATRIX_PAPER);
	assert_int_equal(esd_matrix_parse("nope", &m), -EINVAL);
	assert_string_equal(esd_matrix_name(ESD_MATRIX_SHARED), "shared");
	esd_keytab_free(kt);
}

static void test_sizes(void **state)
{
	(void)state;
	uint32_t cap[8];
	const int64_t T4[] = {1, 1, 10, 10};
	/* transfers only, proportional: m ~ 1 / T */
	struct esd_size_model lin = {.compute_ns = 0, .fixed_rows = 0, .rows_per_sample = 1};
	assert_int_equal(esd_batch_sizes_link_aware(4, 220, T4, &lin, 1, cap), 0);
	assert_int_equal(cap[0], 100);
	assert_int_equal(cap[1], 100);
	assert_int_equal(cap[2], 10);
	assert_int_equal(cap[3], 10);
	/* equal links: equal sizes, remainder to the lower workers */
	const int64_t Te[] = {5, 5, 5};
	assert_int_equal(esd_batch_sizes_link_aware(3, 10, Te, &lin, 1, cap), 0);
	assert_int_equal(cap[0] + cap[1] + cap[2], 10);
	assert_true(cap[0] >= cap[1] && cap[1] >= cap[2] && cap[0] - cap[2] <= 1);
	/* a large fixed part pins the slow workers at min_m */
	struct esd_size_model fx = {.compute_ns = 0, .fixed_rows = 50, .rows_per_sample = 1};
	assert_int_equal(esd_batch_sizes_link_aware(4, 64, T4, &fx, 4, cap), 0);
	assert_int_equal(cap[2], 4);
	assert_int_equal(cap[3], 4);
	assert_int_equal(cap[0] + cap[1], 56);
	/* compute dominates: nearly equal */
	struct esd_size_model cp = {.compute_ns = 1e6, .fixed_rows = 0, .rows_per_sample = 1};
	assert_int_equal(esd_batch_sizes_link_aware(4, 1024, T4, &cp, 1, cap), 0);
	assert_int_equal(cap[0] + cap[1] + cap[2] + cap[3], 1024);
	assert_true(cap[0] - cap[2] <= 1);
	/* no cost at all: equal */
	struct esd_size_model zero = {0};
	assert_int_equal(esd_batch_sizes_link_aware(4, 10, T4, &zero, 1, cap), 0);
	assert_int_equal(cap[0], 3);
	assert_int_equal(cap[3], 2);
	/* every split sums to k and minimises the model: no single move of a
	 * sample lowers the predicted maximum */
	const int64_t T8[] = {13107, 13107, 13107, 13107, 131072, 131072, 131072, 131072};
	struct esd_size_model pm = {.compute_ns = 20000, .fixed_rows = 40, .rows_per_sample = 3};
	assert_int_equal(esd_batch_sizes_link_aware(8, 1024, T8, &pm, 1, cap), 0);
	uint32_t s = 0;
	double worst = 0;
	for (int j = 0; j < 8; j++) {
		s += cap[j];
		double tj =
		    pm.compute_ns * cap[j] + T8[j] * (pm.fixed_rows + pm.rows_per_sample * cap[j]);
		worst = tj > worst ? tj : worst;
	}
	assert_int_equal(s, 1024);
	assert_true(cap[0] > cap[4]);
	for (int a = 0; a < 8; a++)
		for (int b2 = 0; b2 < 8; b2++) {
			if (a == b2 || cap[a] <= 1)
				continue;
			double mx = 0;
			for (int j = 0; j < 8; j++) {
				double m = cap[j] - (j == a) + (j == b2);
				double tj = pm.compute_ns * m +
				            T8[j] * (pm.fixed_rows + pm.rows_per_sample * m);
				mx = tj > mx ? tj : mx;
			}
			assert_true(mx >= worst);
		}
	/* capped at what a cache holds: the fast workers stop at max_m, the
	 * rest is split among the others by the model */
	assert_int_equal(esd_batch_sizes_link_aware_capped(4, 220, T4, &lin, 1, 80, cap), 0);
	assert_int_equal(cap[0], 80);
	assert_int_equal(cap[1], 80);
	assert_int_equal(cap[2], 30);
	assert_int_equal(cap[3], 30);
	/* a cap the split stays under changes nothing */
	assert_int_equal(esd_batch_sizes_link_aware_capped(4, 220, T4, &lin, 1, 100, cap), 0);
	assert_int_equal(cap[0], 100);
	assert_int_equal(cap[2], 10);
	/* the cap is exactly k / n: equal */
	assert_int_equal(esd_batch_sizes_link_aware_capped(4, 220, T4, &lin, 1, 55, cap), 0);
	for (int j = 0; j < 4; j++)
		assert_int_equal(cap[j], 55);
	/* capped in two rounds: 1 is capped first, then 0 */
	const int64_t T3[] = {2, 1, 8};
	assert_int_equal(esd_batch_sizes_link_aware_capped(3, 70, T3, &lin, 1, 30, cap), 0);
	assert_int_equal(cap[0] + cap[1] + cap[2], 70);
	assert_true(cap[0] <= 30 && cap[1] == 30 && cap[2] >= 10);
	assert_int_equal(esd_batch_sizes_link_aware_capped(4, 221, T4, &lin, 1, 55, cap), -ENOSPC);
	assert_int_equal(esd_batch_sizes_link_aware_capped(4, 20, T4, &lin, 6, 5, cap), -EINVAL);
	/* errors */
	assert_int_equal(esd_batch_sizes_link_aware(4, 3, T4, &lin, 1, cap), -EINVAL);
	assert_int_equal(esd_batch_sizes_link_aware(0, 3, T4, &lin, 0, cap), -EINVAL);
	struct esd_size_model neg = {.compute_ns = -1};
	assert_int_equal(esd_batch_sizes_link_aware(4, 8, T4, &neg, 1, cap), -EINVAL);
	assert_int_equal(esd_batch_sizes_link_aware(4, 8, NULL, &lin, 1, cap), -EINVAL);
}

/* Every method, on both matrices, gives worker j exactly cap[j] samples,
 * step after step (the snapshots advance in between). */
static void test_unequal_caps_exact(void **state)
{
	(void)state;
	enum { N = 4, K = 16, F = 6, STEPS = 8 };
	const uint32_t cap[N] = {7, 1, 5, 3};
	const uint32_t cache[N] = {256, 256, 256, 256};
	const int64_t T[N] = {100, 1000, 100, 1000};
	uint32_t off[K + 1];
	esd_key_t keys[K * F];
	uint32_t assign[K];
	for (uint32_t i = 0; i <= K; i++)
		off[i] = i * F;
	const enum esd_method methods[] = {ESD_METHOD_HEU,    ESD_METHOD_OPT,  ESD_METHOD_HUNGARIAN,
	                                   ESD_METHOD_HYBRID, ESD_METHOD_LAIA, ESD_METHOD_VANILLA};
	for (size_t mi = 0; mi < sizeof(methods) / sizeof(methods[0]); mi++) {
		for (int mx = 0; mx < 2; mx++) {
			struct esd_snapset *ss;
			struct esd_dispatcher *d;
			assert_int_equal(esd_snapset_create(N, cache, ESD_POLICY_LRU, &ss), 0);
			struct esd_dispatcher_config dc = {.n = N,
			                                   .cap = cap,
			                                   .T = T,
			                                   .method = methods[mi],
			                                   .seed = 3,
			                                   .matrix = mx ? ESD_MATRIX_SHARED
			                                                : ESD_MATRIX_PAPER,
			                                   .hybrid = {.alpha = 0.5}};
			assert_int_equal(esd_dispatcher_create(&dc, ss, &d), 0);
			uint64_t seed = 42 + mi;
			for (int st = 0; st < STEPS; st++) {
				for (uint32_t p = 0; p < K * F; p++)
					keys[p] = esd_key_make(p % F, esd_splitmix64_next(&seed) %
					                                  (5 + 10 * (p % F)));
				struct esd_batch b = {.k = K, .off = off, .keys = keys};
				assert_int_equal(esd_dispatcher_step(d, &b, assign, NULL), 0);
				assert_int_equal(esd_assign_check(K, N, cap, assign), 0);
			}
			assert_int_equal(esd_snapset_verify(ss), 0);
			esd_dispatcher_free(d);
			esd_snapset_free(ss);
		}
	}
	/* an unknown matrix is refused */
	struct esd_snapset *ss;
	struct esd_dispatcher *d;
	assert_int_equal(esd_snapset_create(N, cache, ESD_POLICY_LRU, &ss), 0);
	struct esd_dispatcher_config bad = {.n = N, .T = T, .matrix = (enum esd_matrix)7};
	assert_int_equal(esd_dispatcher_create(&bad, ss, &d), -EINVAL);
	esd_snapset_free(ss);
}

/* The shared matrix's 8-worker vector path equals the definition, on
 * states left by real steps (CLEAN, DIRTY, OUTDATED, absent keys). */
static void test_shared_matrix_n8(void **state)
{
	(void)state;
	enum { N = 8, K = 64, F = 6 };
	const uint32_t cache[N] = {96, 96, 96, 96, 96, 96, 96, 96};
	const int64_t T[N] = {3, 3, 3, 3, 31, 31, 31, 31};
	uint32_t off[K + 1], assign[K];
	esd_key_t keys[K * F];
	static int64_t got[K * N];
	for (uint32_t i = 0; i <= K; i++)
		off[i] = i * F;
	struct esd_snapset *ss;
	struct esd_dispatcher *d;
	assert_int_equal(esd_snapset_create(N, cache, ESD_POLICY_LRU, &ss), 0);
	struct esd_dispatcher_config dc = {.n = N, .T = T, .method = ESD_METHOD_OPT};
	assert_int_equal(esd_dispatcher_create(&dc, ss, &d), 0);
	uint64_t seed = 17;
	for (int st = 0; st < 6; st++) {
		for (uint32_t p = 0; p < K * F; p++)
			keys[p] = esd_key_make(p % F,
			                       esd_splitmix64_next(&seed) % (2 + 12 * (p % F)));
		struct esd_batch b = {.k = K, .off = off, .keys = keys};
		struct esd_keytab *kt;
		assert_int_equal(esd_keytab_create(&kt), 0);
		assert_int_equal(esd_keytab_build(kt, &b, N), 0);
		assert_int_equal(esd_snapset_fill(ss, kt), 0);
		assert_int_equal(esd_costmat_build_shared(kt, &b, T, got), 0);
		const struct esd_keystate *ks = esd_keytab_states(kt);
		const uint32_t *occ = esd_keytab_occ(kt);
		uint32_t cnt[K * F] = {0};
		for (uint32_t p = 0; p < K * F; p++)
			cnt[occ[p]]++;
		for (uint32_t i = 0; i < K; i++)
			for (uint32_t j = 0; j < N; j++) {
				int64_t want = 0;
				for (uint32_t p = off[i]; p < off[i + 1]; p++) {
					const struct esd_keystate *x = &ks[occ[p]];
					int64_t ch = ((x->latest >> j) & 1 ? 0 : T[j]) +
					             (x->dirty != ESD_NO_WORKER && x->dirty != j
					                  ? T[x->dirty]
					                  : 0);
					int64_t c = cnt[occ[p]];
					want += (ch * ESD_SHARED_SCALE + c / 2) / c;
				}
				assert_int_equal(got[i * N + j], want);
			}
		assert_int_equal(esd_dispatcher_step(d, &b, assign, NULL), 0);
		esd_keytab_free(kt);
	}
	esd_dispatcher_free(d);
	esd_snapset_free(ss);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_spread),
	    cmocka_unit_test(test_together),
	    cmocka_unit_test(test_repeated_key),
	    cmocka_unit_test(test_shared_matrix),
	    cmocka_unit_test(test_sizes),
	    cmocka_unit_test(test_unequal_caps_exact),
	    cmocka_unit_test(test_shared_matrix_n8),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
