/* The papers' hand examples, end to end through the key table, the cost
 * and score matrices, the solvers, the communication plan, the consequence
 * and the snapshot advance:
 *  - ESD Fig. 2: a DIRTY row on a slow-link worker (w3 in the paper, worker
 *    2 here, T = 10x) is update-pushed when another worker trains it
 *    (iteration I2), and a DIRTY row evicted later is evict-pushed (I3);
 *    opt avoids the push that heu's greedy choice causes.
 *  - Herald Fig. 5: vanilla (full-set sync) pays 2 pulls and 3 pushes at
 *    iteration t, LAIA with on-demand sync pays nothing, and the next
 *    iteration's plan is empty. */
#include "testutil.h"

#include <esd/dispatch_snap.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define X(id) esd_key_make(0, id)

struct step {
	uint32_t k;
	uint32_t off[8];
	esd_key_t keys[32];
};

static struct esd_batch batch_of(const struct step *s)
{
	return (struct esd_batch){s->k, s->off, s->keys};
}

static int has_key(const struct esd_conseq *cq, enum esd_cq_kind kind, uint32_t w, esd_key_t key)
{
	for (uint32_t q = 0; q < esd_conseq_count(cq, kind, w); q++)
		if (esd_conseq_keys(cq, kind, w)[q] == key)
			return 1;
	return 0;
}

static enum esd_row_state state_of(struct esd_snapset *ss, uint32_t w, esd_key_t key)
{
	return esd_cmeta_state(esd_snapset_cmeta(ss, w), key);
}

static void test_esd_fig2(void **state)
{
	(void)state;
	const uint32_t n = 3, capc[3] = {3, 3, 3};
	const int64_t T[3] = {100, 100, 1000}; /* 5, 5 and 0.5 Gbit/s */
	struct esd_snapset *ss;
	struct esd_keytab *kt;
	struct esd_conseq *cq;
	struct esd_solver *s;
	assert_int_equal(esd_snapset_create(n, capc, ESD_POLICY_LRU, &ss), 0);
	assert_int_equal(esd_keytab_create(&kt), 0);
	assert_int_equal(esd_conseq_create(&cq), 0);
	assert_int_equal(esd_solver_create(&s), 0);

	/* I1: each worker trains its own rows alone: they become DIRTY */
	struct step i1 = {3, {0, 2, 4, 6}, {X(1), X(2), X(9), X(4), X(5), X(6)}};
	struct esd_batch b = batch_of(&i1);
	uint32_t a1[3] = {0, 1, 2};
	assert_int_equal(esd_keytab_build(kt, &b, n), 0);
	assert_int_equal(esd_snapset_fill(ss, kt), 0);
	assert_int_equal(esd_snapset_advance(ss, kt, &b, a1, T, ESD_SYNC_ON_DEMAND, cq), 0);
	assert_int_equal(cq->off[ESD_CQ_MISS_PULL][n], 6);
	assert_int_equal(cq->off[ESD_CQ_UPDATE_GRAD][n], 0);
	assert_int_equal(state_of(ss, 2, X(5)), ESD_ROW_DIRTY);
	assert_int_equal(esd_snapset_iter(ss), 1);

	/* I2: the cost matrix by hand (ESD Alg. 1) */
	struct step i2 = {3, {0, 2, 5, 7}, {X(1), X(2), X(5), X(8), X(7), X(9), X(10)}};
	b = batch_of(&i2);
	assert_int_equal(esd_keytab_build(kt, &b, n), 0);
	assert_int_equal(esd_snapset_fill(ss, kt), 0);
	int64_t c[9];
	assert_int_equal(esd_costmat_build(kt, &b, T, c), 0);
	const int64_t want[9] = {0, 400, 2200, /**/ 1300, 1300, 2000, /**/ 300, 100, 2100};
	assert_memory_equal(c, want, sizeof(want));
	uint32_t heu[3], opt[3];
	assert_int_equal(esd_solve_heu(s, c, 3, n, NULL, ESD_HEU_ROW_ORDER, heu), 0);
	assert_int_equal(esd_solve_opt(s, c, 3, n, NULL, opt), 0);
	const uint32_t heu_want[3] = {0, 1, 2}, opt_want[3] = {0, 2, 1};
	assert_memory_equal(heu, heu_want, sizeof(heu_want));
	assert_memory_equal(opt, opt_want, sizeof(opt_want));
	assert_int_equal(esd_assign_cost(c, 3, n, heu), 3400);
	assert_int_equal(esd_assign_cost(c, 3, n, opt), 2100);

	/* the plan of opt's decision is empty; heu's makes the slow worker
	 * push x5 (the figure's update push) and worker 1 push x9 */
	assert_int_equal(esd_comm_plan(kt, &b, opt, T, cq), 0);
	assert_int_equal(cq->off[ESD_CQ_UPDATE_VALUE][n], 0);
	assert_int_equal(esd_comm_plan(kt, &b, heu, T, cq), 0);
	assert_int_equal(cq->off[ESD_CQ_UPDATE_VALUE][n], 2);
	assert_true(has_key(cq, ESD_CQ_UPDATE_VALUE, 2, X(5)));
	assert_true(has_key(cq, ESD_CQ_UPDATE_VALUE, 1, X(9)));
	assert_int_equal(cq->cost[ESD_CQ_UPDATE_VALUE], 1100);

	/* opt's consequence without snapshots: pulls x7, x8 on worker 2 and
	 * x10 on worker 1; the matrix predicted exactly that */
	assert_int_equal(esd_conseq_compute(kt, &b, opt, T, ESD_SYNC_ON_DEMAND, cq), 0);
	assert_int_equal(cq->total_cost, 2100);
	assert_int_equal(esd_conseq_count(cq, ESD_CQ_MISS_PULL, 2), 2);
	assert_int_equal(esd_conseq_count(cq, ESD_CQ_MISS_PULL, 1), 1);
	assert_int_equal(cq->hits, 4);

	/* advance with heu's decision (the figure's): evictions appear */
	assert_int_equal(esd_snapset_advance(ss, kt, &b, heu, T, ESD_SYNC_ON_DEMAND, cq), 0);
	assert_int_equal(cq->cost[ESD_CQ_UPDATE_VALUE], 1100);
	assert_int_equal(cq->cost[ESD_CQ_MISS_PULL], 2300);
	assert_int_equal(esd_conseq_count(cq, ESD_CQ_EVICT_PUSH, 1), 1);
	assert_true(has_key(cq, ESD_CQ_EVICT_PUSH, 1, X(4)));            /* DIRTY victim */
	assert_int_equal(esd_conseq_count(cq, ESD_CQ_EVICT_PUSH, 2), 0); /* x5 was CLEAN */
	assert_int_equal(cq->total_cost, 3500);
	assert_int_equal(state_of(ss, 1, X(5)), ESD_ROW_DIRTY);
	assert_int_equal(state_of(ss, 1, X(7)), ESD_ROW_DIRTY);
	assert_int_equal(state_of(ss, 2, X(5)), ESD_ROW_ABSENT);
	assert_int_equal(state_of(ss, 2, X(9)), ESD_ROW_DIRTY);
	assert_int_equal(state_of(ss, 1, X(9)), ESD_ROW_ABSENT);
	assert_int_equal(state_of(ss, 0, X(1)), ESD_ROW_DIRTY);

	/* I3: worker 1 needs two new rows and evicts its DIRTY x5 and x7 (LRU,
	 * then key order): two evict pushes, as in the figure */
	struct step i3 = {3, {0, 1, 3, 4}, {X(1), X(12), X(13), X(10)}};
	b = batch_of(&i3);
	uint32_t a3[3] = {0, 1, 2};
	assert_int_equal(esd_keytab_build(kt, &b, n), 0);
	assert_int_equal(esd_snapset_fill(ss, kt), 0);
	assert_int_equal(esd_snapset_advance(ss, kt, &b, a3, T, ESD_SYNC_ON_DEMAND, cq), 0);
	assert_int_equal(esd_conseq_count(cq, ESD_CQ_EVICT_PUSH, 1), 2);
	assert_true(has_key(cq, ESD_CQ_EVICT_PUSH, 1, X(5)));
	assert_true(has_key(cq, ESD_CQ_EVICT_PUSH, 1, X(7)));
	assert_int_equal(cq->cost[ESD_CQ_EVICT_PUSH], 200);
	for (uint32_t w = 0; w < n; w++)
		assert_int_equal(esd_snapset_verify(ss), 0);

	esd_solver_free(s);
	esd_conseq_free(cq);
	esd_keytab_free(kt);
	esd_snapset_free(ss);
}

static void set_clean(struct esd_snapset *ss, uint32_t w, const esd_key_t *keys, size_t nk,
                      uint64_t iter)
{
	struct esd_cmeta *cm = esd_snapset_cmeta(ss, w);
	struct esd_cmeta_pull pulls[8];
	struct esd_cmeta_evict ev[8];
	uint32_t slots[8];
	struct esd_cmeta_fill f = {.pulls = pulls, .evicts = ev, .slots = slots};
	assert_int_equal(esd_cmeta_begin_iter(cm, iter, keys, nk, &f), 0);
	for (size_t q = 0; q < nk; q++)
		assert_int_equal(esd_cmeta_set_state(cm, slots[q], ESD_ROW_CLEAN, 0), 0);
}

static void test_herald_fig5(void **state)
{
	(void)state;
	const uint32_t n = 2, capc[2] = {8, 8};
	const int64_t T[2] = {1, 1};
	struct esd_snapset *ss;
	struct esd_keytab *kt;
	struct esd_conseq *cq;
	struct esd_solver *s;
	assert_int_equal(esd_keytab_create(&kt), 0);
	assert_int_equal(esd_conseq_create(&cq), 0);
	assert_int_equal(esd_solver_create(&s), 0);
	const esd_key_t A = X(1), B = X(2), C = X(3);

	for (int run = 0; run < 2; run++) {
		/* caches with room; w0 holds C, w1 holds A, B, C (all latest) */
		assert_int_equal(esd_snapset_create(n, capc, ESD_POLICY_LRU, &ss), 0);
		set_clean(ss, 0, (esd_key_t[]){C}, 1, 1);
		set_clean(ss, 1, (esd_key_t[]){A, B, C}, 3, 1);
		assert_int_equal(esd_snapset_load(ss, 0, esd_snapset_cmeta(ss, 0)), 0);
		assert_int_equal(esd_snapset_iter(ss), 1);

		struct step t = {2, {0, 2, 3}, {A, B, C}};
		struct esd_batch b = batch_of(&t);
		assert_int_equal(esd_keytab_build(kt, &b, n), 0);
		assert_int_equal(esd_snapset_fill(ss, kt), 0);
		uint32_t a[2];
		if (run == 0) {
			/* vanilla's draw in the figure: sample {A, B} on w0 */
			a[0] = 0;
			a[1] = 1;
			assert_int_equal(
			    esd_snapset_advance(ss, kt, &b, a, T, ESD_SYNC_FULL_SET, cq), 0);
			assert_int_equal(cq->off[ESD_CQ_MISS_PULL][n], 2);
			assert_int_equal(
			    cq->off[ESD_CQ_UPDATE_GRAD][n] + cq->off[ESD_CQ_UPDATE_VALUE][n], 3);
			assert_int_equal(cq->total_cost, 5);
			assert_int_equal(state_of(ss, 1, C), ESD_ROW_OUTDATED);
		} else {
			int32_t sc[4];
			assert_int_equal(esd_scoremat_build(kt, &b, NULL, sc), 0);
			const int32_t want[4] = {0, 2, 1, 1};
			assert_memory_equal(sc, want, sizeof(want));
			for (uint64_t seed = 0; seed < 8; seed++) {
				assert_int_equal(esd_solve_laia(s, sc, 2, n, NULL, seed, a), 0);
				assert_int_equal(a[0], 1);
				assert_int_equal(a[1], 0);
			}
			assert_int_equal(
			    esd_snapset_advance(ss, kt, &b, a, T, ESD_SYNC_ON_DEMAND, cq), 0);
			assert_int_equal(cq->total_cost, 0);
			assert_int_equal(cq->hits, 3);
			assert_int_equal(state_of(ss, 1, A), ESD_ROW_DIRTY);
			assert_int_equal(state_of(ss, 0, C), ESD_ROW_DIRTY);
			assert_int_equal(state_of(ss, 1, C), ESD_ROW_OUTDATED);

			/* t+1: LAIA keeps each row where it is DIRTY: empty plan */
			struct step t2 = {2, {0, 1, 2}, {A, C}};
			b = batch_of(&t2);
			assert_int_equal(esd_keytab_build(kt, &b, n), 0);
			assert_int_equal(esd_snapset_fill(ss, kt), 0);
			assert_int_equal(esd_scoremat_build(kt, &b, NULL, sc), 0);
			assert_int_equal(esd_solve_laia(s, sc, 2, n, NULL, 3, a), 0);
			assert_int_equal(a[0], 1);
			assert_int_equal(a[1], 0);
			assert_int_equal(esd_comm_plan(kt, &b, a, T, cq), 0);
			assert_int_equal(cq->off[ESD_CQ_UPDATE_VALUE][n], 0);
			/* the swapped decision would need both rows pushed */
			uint32_t sw[2] = {0, 1};
			assert_int_equal(esd_comm_plan(kt, &b, sw, T, cq), 0);
			assert_true(has_key(cq, ESD_CQ_UPDATE_VALUE, 1, A));
			assert_true(has_key(cq, ESD_CQ_UPDATE_VALUE, 0, C));
			/* LAIA restricted to a table that has no keys here: all ties */
			uint64_t mask[ESD_TABLE_MASK_WORDS] = {0};
			mask[0] = 2; /* table 1 only */
			assert_int_equal(esd_scoremat_build(kt, &b, mask, sc), 0);
			assert_int_equal(sc[0] + sc[1] + sc[2] + sc[3], 0);
		}
		esd_snapset_free(ss);
	}
	esd_solver_free(s);
	esd_conseq_free(cq);
	esd_keytab_free(kt);
}

/* A batch of k samples of 'per' keys (key p of a sample from table p, ids
 * below 'ids') and a balanced, shuffled assignment to n workers. */
static void random_step(uint64_t *rng, uint32_t k, uint32_t per, uint32_t ids, uint32_t n,
                        uint32_t *off, esd_key_t *keys, uint32_t *assign)
{
	for (uint32_t i = 0; i <= k; i++)
		off[i] = i * per;
	for (uint32_t i = 0; i < k * per; i++)
		keys[i] = esd_key_make(i % per, esd_test_rand(rng) % ids);
	for (uint32_t i = 0; i < k; i++)
		assign[i] = i % n;
	for (uint32_t i = k; i > 1; i--) {
		const uint32_t x = (uint32_t)(esd_test_rand(rng) % i), t = assign[i - 1];
		assign[i - 1] = assign[x];
		assign[x] = t;
	}
}

/* The consequence the snapshot advance computes (one pass, with its
 * per-worker lists) equals esd_conseq_compute's (counting pass first) on
 * the same state, list for list, over random batches and assignments with
 * shared, DIRTY, cached and replicated keys, both sync modes, 3, 8 and 64
 * workers. */
static void test_advance_plan_equals_compute(void **state)
{
	(void)state;
	static const uint32_t ns[] = {3, 8, ESD_MAX_WORKERS};
	for (unsigned ni = 0; ni < 3; ni++) {
		const uint32_t n = ns[ni];
		for (int full = 0; full <= 1; full++) {
			const enum esd_sync sync = full ? ESD_SYNC_FULL_SET : ESD_SYNC_ON_DEMAND;
			uint32_t capc[ESD_MAX_WORKERS];
			int64_t T[ESD_MAX_WORKERS];
			for (uint32_t w = 0; w < n; w++) {
				capc[w] = 40;
				T[w] = 100 * (int64_t)(w + 1);
			}
			struct esd_snapset *ss;
			struct esd_keytab *kt;
			struct esd_conseq *a, *b2;
			assert_int_equal(esd_snapset_create(n, capc, ESD_POLICY_LRU, &ss), 0);
			assert_int_equal(esd_keytab_create(&kt), 0);
			assert_int_equal(esd_conseq_create(&a), 0);
			assert_int_equal(esd_conseq_create(&b2), 0);
			uint64_t rng = 1000 + n + (uint64_t)full;
			const uint32_t k = 2 * n, per = 4;
			uint32_t off[2 * ESD_MAX_WORKERS + 1], assign[2 * ESD_MAX_WORKERS],
			    seen[ESD_CQ_KINDS] = {0};
			esd_key_t keys[8 * ESD_MAX_WORKERS];
			for (int it = 0; it < 60; it++) {
				random_step(&rng, k, per, 30, n, off, keys, assign);
				struct esd_batch bt = {k, off, keys};
				assert_int_equal(esd_keytab_build(kt, &bt, n), 0);
				if (it % 3 == 0) {
					/* two replicated rows: every worker needs them */
					const esd_key_t rep[2] = {esd_key_make(0, 1),
					                          esd_key_make(7, 3)};
					assert_int_equal(esd_keytab_replicate(kt, rep, 2), 0);
				}
				assert_int_equal(esd_snapset_fill(ss, kt), 0);
				assert_int_equal(esd_conseq_compute(kt, &bt, assign, T, sync, a),
				                 0);
				assert_int_equal(
				    esd_snapset_advance(ss, kt, &bt, assign, T, sync, b2), 0);
				/* the advance's phase times: set, none negative */
				const struct esd_advance_times *at = esd_snapset_advance_times(ss);
				assert_true(at->plan > 0 && at->caches > 0 && at->directory >= 0 &&
				            at->outdated >= 0);
				assert_int_equal(a->hits, b2->hits);
				for (int q = 0; q < ESD_CQ_KINDS; q++) {
					if (q == ESD_CQ_EVICT_PUSH)
						continue; /* known to the advance only */
					for (uint32_t w = 0; w < n; w++) {
						const enum esd_cq_kind kind = (enum esd_cq_kind)q;
						const uint32_t c = esd_conseq_count(a, kind, w);
						assert_int_equal(c, esd_conseq_count(b2, kind, w));
						seen[q] += c;
						if (c)
							assert_memory_equal(
							    esd_conseq_keys(a, kind, w),
							    esd_conseq_keys(b2, kind, w),
							    c * sizeof(esd_key_t));
					}
				}
				assert_int_equal(esd_snapset_verify(ss), 0);
			}
			/* every list kind came up (update values: on-demand only) */
			assert_true(seen[ESD_CQ_MISS_PULL] && seen[ESD_CQ_UPDATE_GRAD]);
			assert_true(full || seen[ESD_CQ_UPDATE_VALUE]);
			esd_conseq_free(a);
			esd_conseq_free(b2);
			esd_keytab_free(kt);
			esd_snapset_free(ss);
		}
	}
}

static int cmp_key(const void *a, const void *b)
{
	const esd_key_t x = *(const esd_key_t *)a, y = *(const esd_key_t *)b;
	return (x > y) - (x < y);
}

/* The advance against the protocol done by hand on separate blocks, the way
 * a node does it (docs/design.md §3): step 1 (the plan's value pushes,
 * DIRTY -> CLEAN on the holder), begin_iter with the worker's needed keys,
 * the pulled rows CLEAN, step 6 (trainers: DIRTY alone under on-demand
 * sync, else OUTDATED; other holders of a latest copy: OUTDATED). Every
 * slot's key and state agree after every iteration and so do the evict
 * pushes (the DIRTY victims), under every policy and both syncs, with
 * caches small enough that holders evict rows they have just pushed. */
static void test_advance_follows_protocol(void **state)
{
	(void)state;
	enum { N = 4, K = 16, PER = 4, CAP = 20, ITERS = 150 };
	/* the snapshots read through esd_snapset_view and esd_snapset_cmeta
	 * on alternate iterations */
	static const enum esd_policy pols[] = {ESD_POLICY_LRU, ESD_POLICY_LFU, ESD_POLICY_EMARK,
	                                       ESD_POLICY_LOOKAHEAD};
	uint32_t pushed_evicted = 0;
	for (unsigned pi = 0; pi < sizeof(pols) / sizeof(pols[0]); pi++) {
		for (int full = 0; full <= 1; full++) {
			const enum esd_sync sync = full ? ESD_SYNC_FULL_SET : ESD_SYNC_ON_DEMAND;
			const uint32_t capc[N] = {CAP, CAP, CAP, CAP};
			const int64_t T[N] = {1, 2, 3, 4};
			struct esd_snapset *ss;
			struct esd_keytab *kt;
			struct esd_conseq *cq;
			struct esd_cmeta *m[N];
			void *mem[N];
			const size_t len = esd_cmeta_bytes(CAP);
			assert_int_equal(esd_snapset_create(N, capc, pols[pi], &ss), 0);
			assert_int_equal(esd_keytab_create(&kt), 0);
			assert_int_equal(esd_conseq_create(&cq), 0);
			for (uint32_t w = 0; w < N; w++) {
				mem[w] = aligned_alloc(64, (len + 63) / 64 * 64);
				assert_non_null(mem[w]);
				assert_int_equal(esd_cmeta_init(mem[w], len, CAP, pols[pi], &m[w]),
				                 0);
			}
			uint64_t rng = 77 + pi * 2 + (uint64_t)full;
			uint32_t off[K + 1], assign[K], slots[CAP];
			esd_key_t keys[K * PER], need[N][K * PER], ev[N][CAP];
			struct esd_cmeta_pull pulls[CAP];
			struct esd_cmeta_evict evicts[CAP];
			for (uint64_t it = 1; it <= ITERS; it++) {
				random_step(&rng, K, PER, 24, N, off, keys, assign);
				struct esd_batch b = {K, off, keys};
				assert_int_equal(esd_keytab_build(kt, &b, N), 0);
				assert_int_equal(esd_snapset_fill(ss, kt), 0);
				assert_int_equal(
				    esd_snapset_advance(ss, kt, &b, assign, T, sync, cq), 0);

				/* by hand: step 1 */
				for (uint32_t w = 0; w < N; w++)
					for (uint32_t q = 0;
					     q < esd_conseq_count(cq, ESD_CQ_UPDATE_VALUE, w);
					     q++) {
						const esd_key_t x =
						    esd_conseq_keys(cq, ESD_CQ_UPDATE_VALUE, w)[q];
						const uint32_t sl = esd_cmeta_find(m[w], x);
						assert_int_not_equal(sl, ESD_SLOT_NONE);
						assert_int_equal(esd_cmeta_slot(m[w], sl)->state,
						                 ESD_ROW_DIRTY);
						assert_int_equal(
						    esd_cmeta_set_state(m[w], sl, ESD_ROW_CLEAN, 0),
						    0);
					}
				/* each worker's needed keys, sorted, without duplicates */
				uint32_t nn[N] = {0};
				for (uint32_t i = 0; i < K; i++)
					for (uint32_t p = off[i]; p < off[i + 1]; p++)
						need[assign[i]][nn[assign[i]]++] = keys[p];
				for (uint32_t w = 0; w < N; w++) {
					qsort(need[w], nn[w], sizeof(esd_key_t), cmp_key);
					uint32_t u = 0;
					for (uint32_t q = 0; q < nn[w]; q++)
						if (!u || need[w][u - 1] != need[w][q])
							need[w][u++] = need[w][q];
					nn[w] = u;
				}
				/* steps 3-4 */
				for (uint32_t w = 0; w < N; w++) {
					struct esd_cmeta_fill f = {
					    .pulls = pulls, .evicts = evicts, .slots = slots};
					assert_int_equal(
					    esd_cmeta_begin_iter(m[w], it, need[w], nn[w], &f), 0);
					for (size_t q = 0; q < f.n_pulls; q++)
						assert_int_equal(
						    esd_cmeta_set_state(m[w], pulls[q].slot,
						                        ESD_ROW_CLEAN, 0),
						    0);
					uint32_t ne = 0;
					for (size_t q = 0; q < f.n_evicts; q++)
						if (evicts[q].dirty)
							ev[w][ne++] = evicts[q].key;
					qsort(ev[w], ne, sizeof(esd_key_t), cmp_key);
					assert_int_equal(
					    ne, esd_conseq_count(cq, ESD_CQ_EVICT_PUSH, w));
					if (ne)
						assert_memory_equal(
						    ev[w],
						    esd_conseq_keys(cq, ESD_CQ_EVICT_PUSH, w),
						    ne * sizeof(esd_key_t));
					/* evicted after being pushed in step 1: clean */
					for (size_t q = 0; q < f.n_evicts; q++)
						pushed_evicted += has_key(cq, ESD_CQ_UPDATE_VALUE,
						                          w, evicts[q].key);
				}
				/* step 6 */
				for (uint32_t i = 0; i < K * PER; i++) {
					const esd_key_t x = keys[i];
					uint64_t mask = 0;
					for (uint32_t w = 0; w < N; w++)
						for (uint32_t q = 0; q < nn[w]; q++)
							if (need[w][q] == x)
								mask |= UINT64_C(1) << w;
					const bool lone = !full && !(mask & (mask - 1));
					for (uint32_t w = 0; w < N; w++) {
						const uint32_t sl = esd_cmeta_find(m[w], x);
						if (mask >> w & 1)
							assert_int_equal(esd_cmeta_set_state(
							                     m[w], sl,
							                     lone
							                         ? ESD_ROW_DIRTY
							                         : ESD_ROW_OUTDATED,
							                     0),
							                 0);
						else if (esd_cmeta_state(m[w], x) >= ESD_ROW_CLEAN)
							assert_int_equal(
							    esd_cmeta_mark_outdated(m[w], x), 1);
					}
				}
				/* the snapshots are the blocks done by hand: the same
				 * keys in the same states (by worker, in the same slots) */
				for (uint32_t w = 0; w < N; w++) {
					assert_int_equal(esd_snapset_count(ss, w),
					                 esd_cmeta_count(m[w]));
					const struct esd_cmeta *c = it % 2
					                                ? esd_snapset_view(ss, w)
					                                : esd_snapset_cmeta(ss, w);
					assert_int_equal(esd_cmeta_count(c), esd_cmeta_count(m[w]));
					for (uint32_t sl = 0; sl < CAP; sl++) {
						const struct esd_cmeta_slot *h =
						    esd_cmeta_slot(m[w], sl);
						if (h->state == ESD_ROW_ABSENT)
							continue;
						const uint32_t cs =
						    pi ? sl : esd_cmeta_find(c, h->key);
						assert_int_not_equal(cs, ESD_SLOT_NONE);
						const struct esd_cmeta_slot *a =
						    esd_cmeta_slot(c, cs);
						assert_int_equal(a->key, h->key);
						assert_int_equal(a->state, h->state);
						assert_int_equal(a->last_use, h->last_use);
						assert_int_equal(a->freq, h->freq);
						assert_int_equal(a->mark, h->mark);
					}
					assert_int_equal(esd_cmeta_emark_target(c),
					                 esd_cmeta_emark_target(m[w]));
				}
				assert_int_equal(esd_snapset_verify(ss), 0);
			}
			for (uint32_t w = 0; w < N; w++)
				free(mem[w]);
			esd_conseq_free(cq);
			esd_keytab_free(kt);
			esd_snapset_free(ss);
		}
	}
	/* the case that needs care came up */
	assert_true(pushed_evicted > 0);
	assert_null(esd_snapset_advance_times(NULL));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_esd_fig2),
	    cmocka_unit_test(test_herald_fig5),
	    cmocka_unit_test(test_advance_plan_equals_compute),
	    cmocka_unit_test(test_advance_follows_protocol),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
