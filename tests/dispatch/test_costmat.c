/* The key table (its build against a sort) and the ESD Alg. 1 cost
 * matrix against a direct per-occurrence evaluation, with one row size
 * and with per-table ones (model.dims); the overflow bound
 * (k = 8192, 64 keys, T = 2^24); the whole dispatch step is reproducible
 * and its snapshots stay consistent over many iterations for every
 * method. */
#include "testutil.h"

#include <esd/dispatch_snap.h>
#include <errno.h>
#include <string.h>

static void random_batch(uint32_t k, uint32_t len, uint64_t seed, uint64_t universe, uint32_t *off,
                         esd_key_t *keys)
{
	uint64_t st = seed;
	off[0] = 0;
	for (uint32_t i = 0; i < k; i++) {
		for (uint32_t p = 0; p < len; p++) {
			uint64_t r = esd_test_rand(&st);
			/* skewed: small ids far more often */
			uint64_t id = (r % universe) & (esd_test_rand(&st) % universe);
			keys[i * len + p] = esd_key_make(p % 4, id);
		}
		off[i + 1] = (i + 1) * len;
	}
}

static int cmp_u64(const void *a, const void *b)
{
	const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* The key table's build against a sort: the unique keys are the distinct
 * keys, in first-seen order, every occurrence maps to its key, and every
 * key (and no other) is found; over one table through batches whose unique
 * counts grow and shrink 60-fold (the hash table regrown mid-build from a
 * small size hint, then reused at other sizes) and with replicated keys
 * added in between (a rehash to a larger table, then a smaller build). */
static void test_keytab_dedup(void **state)
{
	(void)state;
	static const uint32_t ks[] = {3, 700, 40, 4096, 1, 2500, 16, 4096, 90};
	static const uint64_t universes[] = {5, 100000, 50, 3000, 1, 1u << 30, 7, 40000, 256};
	struct esd_keytab *kt;
	assert_int_equal(esd_keytab_create(&kt), 0);
	const uint32_t len = 26;
	uint32_t *off = malloc((4096 + 1) * sizeof(uint32_t));
	esd_key_t *keys = malloc((size_t)4096 * len * sizeof(esd_key_t));
	esd_key_t *sorted = malloc((size_t)4096 * len * sizeof(esd_key_t));
	assert_non_null(off);
	assert_non_null(keys);
	assert_non_null(sorted);
	for (unsigned it = 0; it < sizeof(ks) / sizeof(ks[0]); it++) {
		const uint32_t k = ks[it], nocc = k * len;
		random_batch(k, len, 77 + it, universes[it], off, keys);
		struct esd_batch b = {k, off, keys};
		assert_int_equal(esd_keytab_build(kt, &b, 8), 0);
		memcpy(sorted, keys, nocc * sizeof(esd_key_t));
		qsort(sorted, nocc, sizeof(esd_key_t), cmp_u64);
		uint32_t distinct = 0;
		for (uint32_t p = 0; p < nocc; p++)
			distinct += !p || sorted[p] != sorted[p - 1];
		const uint32_t U = esd_keytab_count(kt);
		assert_int_equal(U, distinct);
		const esd_key_t *uk = esd_keytab_keys(kt);
		const uint32_t *occ = esd_keytab_occ(kt);
		uint32_t next = 0; /* first-seen order: a new key takes the next number */
		for (uint32_t p = 0; p < nocc; p++) {
			assert_true(occ[p] < U);
			assert_true(uk[occ[p]] == keys[p]);
			assert_true(occ[p] <= next);
			next += occ[p] == next;
			assert_int_equal(esd_keytab_find(kt, keys[p]), occ[p]);
		}
		assert_int_equal(next, U);
		assert_int_equal(esd_keytab_find(kt, esd_key_make(60000, 1)), -1);
		if (it % 3 == 1) {
			/* replicated keys: the table grows past this build's */
			esd_key_t rep[3000];
			for (uint32_t r = 0; r < 3000; r++)
				rep[r] = esd_key_make(9, r);
			assert_int_equal(esd_keytab_replicate(kt, rep, 3000), 0);
			for (uint32_t r = 0; r < 3000; r++)
				assert_true(esd_keytab_keys(kt)[esd_keytab_find(kt, rep[r])] ==
				            rep[r]);
		}
	}
	free(sorted);
	free(keys);
	free(off);
	esd_keytab_free(kt);
}

static void test_costmat_vs_direct(void **state)
{
	(void)state;
	const uint32_t k = 64, len = 6;
	uint32_t off[65];
	esd_key_t keys[64 * 6];
	struct esd_keytab *kt;
	assert_int_equal(esd_keytab_create(&kt), 0);
	/* n = 8 takes the vector paths (charges8, costmat_sum8: AVX-512 where
	 * the CPU has it unless ESD_NO_AVX512 is set, see test_costmat_v4) */
	static const uint32_t ns[] = {1, 5, 8, 9};
	/* then with per-table row sizes (model.dims): a key of table t costs
	 * ceil(T_j * rb[t] / 144), and the consequence's costs sum them */
	static const uint32_t rb[4] = {48, 144, 48, 96};
	for (unsigned ni = 0; ni < 2 * sizeof(ns) / sizeof(ns[0]); ni++) {
		const uint32_t n = ns[ni % 4];
		const int sized = ni >= 4;
		assert_int_equal(esd_keytab_set_row_bytes(kt, rb, sized ? 4 : 0, 144), 0);
		random_batch(k, len, n, 40, off, keys);
		struct esd_batch b = {k, off, keys};
		assert_int_equal(esd_keytab_build(kt, &b, n), 0);
		uint32_t U = esd_keytab_count(kt);
		assert_true(U > 1 && U < k * len);
		/* the unique keys are exactly the distinct keys, first-seen order */
		for (uint32_t p = 0; p < k * len; p++)
			assert_true(esd_keytab_keys(kt)[esd_keytab_occ(kt)[p]] == keys[p]);
		/* random consistent states */
		uint64_t st = 99 + n;
		enum esd_row_state truth[200][9];
		for (uint32_t u = 0; u < U; u++) {
			int dirty = (int)(esd_test_rand(&st) % (n + 2)) - 2; /* <0: none */
			for (uint32_t j = 0; j < n; j++) {
				enum esd_row_state s = (enum esd_row_state)(esd_test_rand(&st) % 3);
				if (dirty >= 0)
					s = (int)j == dirty
					        ? ESD_ROW_DIRTY
					        : (s == ESD_ROW_CLEAN ? ESD_ROW_OUTDATED : s);
				truth[u][j] = s;
				assert_int_equal(esd_keytab_set(kt, u, j, s), 0);
			}
		}
		int64_t T[9];
		for (uint32_t j = 0; j < n; j++)
			T[j] = 1 + (int64_t)(esd_test_rand(&st) % 1000);
		/* a key's cost on worker j */
#define TK(j, key) (sized ? (T[j] * rb[esd_key_table(key)] + 143) / 144 : T[j])
		int64_t *c = malloc((size_t)k * n * sizeof(int64_t));
		int32_t *sc = malloc((size_t)k * n * sizeof(int32_t));
		assert_int_equal(esd_costmat_build(kt, &b, T, c), 0);
		assert_int_equal(esd_scoremat_build(kt, &b, NULL, sc), 0);
		for (uint32_t i = 0; i < k; i++)
			for (uint32_t j = 0; j < n; j++) {
				int64_t want = 0;
				int32_t score = 0;
				for (uint32_t p = off[i]; p < off[i + 1]; p++) {
					uint32_t u = (uint32_t)esd_keytab_find(kt, keys[p]);
					int latest = truth[u][j] >= ESD_ROW_CLEAN;
					want += latest ? 0 : TK(j, keys[p]);
					score += latest;
					for (uint32_t q = 0; q < n; q++)
						if (q != j && truth[u][q] == ESD_ROW_DIRTY)
							want += TK(q, keys[p]);
				}
				assert_int_equal(c[i * n + j], want);
				assert_int_equal(sc[i * n + j], score);
			}
		/* the consequence of an assignment: each transfer its key's cost */
		uint32_t assign[64];
		for (uint32_t i = 0; i < k; i++)
			assign[i] = i % n;
		struct esd_conseq *cq;
		assert_int_equal(esd_conseq_create(&cq), 0);
		assert_int_equal(esd_conseq_compute(kt, &b, assign, T, ESD_SYNC_ON_DEMAND, cq), 0);
		int64_t total = 0;
		for (int q = 0; q < ESD_CQ_KINDS; q++)
			for (uint32_t j = 0; j < n; j++)
				for (uint32_t x = 0; x < esd_conseq_count(cq, (enum esd_cq_kind)q, j); x++)
					total += TK(j, esd_conseq_keys(cq, (enum esd_cq_kind)q, j)[x]);
		assert_true(total > 0);
		assert_int_equal(cq->total_cost, total);
		esd_conseq_free(cq);
#undef TK
		free(c);
		free(sc);
	}
	/* invariants of esd_keytab_set */
	random_batch(4, 2, 5, 3, off, keys);
	struct esd_batch b = {4, off, keys};
	assert_int_equal(esd_keytab_build(kt, &b, 3), 0);
	assert_int_equal(esd_keytab_set(kt, 0, 0, ESD_ROW_CLEAN), 0);
	assert_int_equal(esd_keytab_set(kt, 0, 1, ESD_ROW_DIRTY), -EINVAL);
	assert_int_equal(esd_keytab_set(kt, 0, 0, ESD_ROW_DIRTY), 0);
	assert_int_equal(esd_keytab_set(kt, 0, 2, ESD_ROW_CLEAN), -EINVAL);
	assert_int_equal(esd_keytab_set(kt, 0, 3, ESD_ROW_CLEAN), -EINVAL);
	assert_int_equal(esd_keytab_find(kt, esd_key_make(9, 9)), -1);
	esd_keytab_free(kt);
}

static void test_overflow_bound(void **state)
{
	(void)state;
	/* k = 8192 samples of 64 keys, every key DIRTY elsewhere, T = 2^24:
	 * the worst row is 64 * 2 * 2^24 = 2^31 and the total 2^44 */
	const uint32_t k = 8192, len = 64, n = 8;
	uint32_t *off = malloc((k + 1) * sizeof(uint32_t));
	esd_key_t *keys = malloc((size_t)k * len * sizeof(esd_key_t));
	for (uint32_t i = 0; i <= k; i++)
		off[i] = i * len;
	for (uint32_t p = 0; p < k * len; p++)
		keys[p] = esd_key_make(p % 26, p);
	struct esd_batch b = {k, off, keys};
	struct esd_keytab *kt;
	assert_int_equal(esd_keytab_create(&kt), 0);
	assert_int_equal(esd_keytab_build(kt, &b, n), 0);
	for (uint32_t u = 0; u < esd_keytab_count(kt); u++)
		assert_int_equal(esd_keytab_set(kt, u, 7, ESD_ROW_DIRTY), 0);
	int64_t T[8];
	for (int j = 0; j < 8; j++)
		T[j] = INT64_C(1) << 24;
	int64_t *c = malloc((size_t)k * n * sizeof(int64_t));
	assert_int_equal(esd_costmat_build(kt, &b, T, c), 0);
	assert_int_equal(c[0], INT64_C(64) * 2 * (1 << 24));
	assert_int_equal(c[7], 0);
	uint32_t *a = malloc(k * sizeof(uint32_t));
	struct esd_solver *s;
	assert_int_equal(esd_solver_create(&s), 0);
	assert_int_equal(esd_solve_opt(s, c, k, n, NULL, a), 0);
	assert_int_equal(esd_assign_cost(c, k, n, a), (int64_t)(k - k / 8) * 64 * 2 * (1 << 24));
	/* a T so large that a row could exceed ESD_COST_MAX is refused */
	T[3] = ESD_COST_MAX / 64;
	assert_int_equal(esd_costmat_build(kt, &b, T, c), -EOVERFLOW);
	T[3] = -1;
	assert_int_equal(esd_costmat_build(kt, &b, T, c), -EINVAL);
	esd_solver_free(s);
	esd_keytab_free(kt);
	free(a);
	free(c);
	free(off);
	free(keys);
}

/* Runs 12 iterations of a method; returns a digest of all decisions. */
static uint64_t run_steps(enum esd_method m, enum esd_sync sync, int unequal)
{
	const uint32_t n = 4, k = 64, len = 8;
	uint32_t capc[4] = {200, 200, 200, 200}, cap[4] = {24, 8, 16, 16};
	int64_t T[4] = {10, 10, 100, 100};
	struct esd_snapset *ss;
	assert_int_equal(esd_snapset_create(n, capc, ESD_POLICY_EMARK, &ss), 0);
	struct esd_dispatcher_config cfg = {.n = n,
	                                    .cap = unequal ? cap : NULL,
	                                    .T = T,
	                                    .method = m,
	                                    .hybrid = {0.25, ESD_EXACT_SSP, ESD_HEU_ROW_ORDER},
	                                    .seed = 5,
	                                    .sync = sync,
	                                    .compare = 1,
	                                    .laia_top = m == ESD_METHOD_LAIA && unequal ? 2 : 0,
	                                    .laia_refresh = 4};
	struct esd_dispatcher *d;
	assert_int_equal(esd_dispatcher_create(&cfg, ss, &d), 0);
	uint32_t off[65], a[64];
	esd_key_t keys[64 * 8];
	uint64_t digest = 1469598103934665603ull;
	for (uint64_t it = 0; it < 12; it++) {
		random_batch(k, len, 1000 + it, 60, off, keys);
		struct esd_batch b = {k, off, keys};
		assert_int_equal(esd_dispatcher_step(d, &b, a, NULL), 0);
		assert_int_equal(esd_assign_check(k, n, unequal ? cap : NULL, a), 0);
		for (uint32_t i = 0; i < k; i++)
			digest = (digest ^ a[i]) * 1099511628211ull;
		for (uint32_t w = 0; w < n; w++)
			assert_int_equal(esd_snapset_verify(ss), 0);
		const struct esd_dispatch_counters *ct = esd_dispatcher_counters(d);
		assert_true(ct->heu_cost >= ct->opt_cost);
		if (m == ESD_METHOD_OPT)
			assert_int_equal(ct->est_cost, ct->opt_cost);
	}
	const struct esd_dispatch_counters *ct = esd_dispatcher_counters(d);
	assert_int_equal(ct->steps, 12);
	assert_true(ct->sum.total > 0);
	if (sync == ESD_SYNC_FULL_SET)
		assert_int_equal(ct->xfers[ESD_CQ_UPDATE_VALUE], 0);
	esd_dispatcher_free(d);
	esd_snapset_free(ss);
	return digest;
}

static void test_dispatch_steps_reproducible(void **state)
{
	(void)state;
	for (int m = ESD_METHOD_HEU; m <= ESD_METHOD_VANILLA; m++)
		for (int sync = 0; sync < 2; sync++)
			for (int uneq = 0; uneq < 2; uneq++) {
				uint64_t d1 =
				    run_steps((enum esd_method)m, (enum esd_sync)sync, uneq);
				uint64_t d2 =
				    run_steps((enum esd_method)m, (enum esd_sync)sync, uneq);
				assert_true(d1 == d2);
			}
}

static void test_advance_enospc_changes_nothing(void **state)
{
	(void)state;
	const uint32_t capc[2] = {4, 64};
	int64_t T[2] = {1, 1};
	struct esd_snapset *ss;
	struct esd_keytab *kt;
	struct esd_conseq *cq;
	assert_int_equal(esd_snapset_create(2, capc, ESD_POLICY_LRU, &ss), 0);
	assert_int_equal(esd_keytab_create(&kt), 0);
	assert_int_equal(esd_conseq_create(&cq), 0);
	uint32_t off[3] = {0, 3, 6};
	esd_key_t keys[6] = {1, 2, 3, 4, 5, 6};
	struct esd_batch b = {2, off, keys};
	uint32_t a[2] = {0, 1};
	assert_int_equal(esd_keytab_build(kt, &b, 2), 0);
	assert_int_equal(esd_snapset_fill(ss, kt), 0);
	assert_int_equal(esd_snapset_advance(ss, kt, &b, a, T, ESD_SYNC_ON_DEMAND, cq), 0);
	/* worker 0 (4 slots) now gets 6 distinct rows */
	uint32_t off2[3] = {0, 6, 7};
	esd_key_t keys2[7] = {1, 2, 3, 7, 8, 9, 4};
	struct esd_batch b2 = {2, off2, keys2};
	assert_int_equal(esd_keytab_build(kt, &b2, 2), 0);
	assert_int_equal(esd_snapset_fill(ss, kt), 0);
	assert_int_equal(esd_snapset_advance(ss, kt, &b2, a, T, ESD_SYNC_ON_DEMAND, cq), -ENOSPC);
	assert_int_equal(esd_snapset_iter(ss), 1);
	assert_int_equal(esd_snapset_verify(ss), 0);
	assert_int_equal(esd_cmeta_state(esd_snapset_cmeta(ss, 1), 4), ESD_ROW_DIRTY);
	esd_conseq_free(cq);
	esd_keytab_free(kt);
	esd_snapset_free(ss);
}

static void test_doi_profiler(void **state)
{
	(void)state;
	/* table 0: one hot key in every sample (frequent); table 1: a new key
	 * per sample (infrequent); table 2: 4 keys cycling (in between) */
	struct esd_doi *d;
	assert_int_equal(esd_doi_create(4, &d), 0);
	uint32_t off[17];
	esd_key_t keys[48];
	for (int it = 0; it < 10; it++) {
		for (uint32_t i = 0; i < 16; i++) {
			keys[i * 3] = esd_key_make(0, 7);
			keys[i * 3 + 1] = esd_key_make(1, (uint64_t)it * 16 + i);
			keys[i * 3 + 2] = esd_key_make(2, i % 4);
			off[i] = i * 3;
		}
		off[16] = 48;
		struct esd_batch b = {16, off, keys};
		assert_int_equal(esd_doi_add_batch(d, &b), 0);
	}
	/* 160 samples, threshold 40: table 2's keys appear 40 times each */
	assert_true(esd_doi_table(d, 0) == 0.0);
	assert_true(esd_doi_table(d, 1) == 1.0);
	assert_true(esd_doi_table(d, 2) == 0.0);
	assert_true(esd_doi_table(d, 9) == 0.0);
	uint64_t mask[ESD_TABLE_MASK_WORDS];
	assert_int_equal(esd_doi_top_tables(d, 1, mask), 1);
	assert_int_equal(mask[0], 2);
	assert_int_equal(esd_doi_top_tables(d, 5, mask), 3);
	assert_int_equal(mask[0], 7);
	esd_doi_free(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_keytab_dedup),
	    cmocka_unit_test(test_costmat_vs_direct),
	    cmocka_unit_test(test_overflow_bound),
	    cmocka_unit_test(test_dispatch_steps_reproducible),
	    cmocka_unit_test(test_doi_profiler),
	    cmocka_unit_test(test_advance_enospc_changes_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
