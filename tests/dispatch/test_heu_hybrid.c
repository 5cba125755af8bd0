/* heu meets ESD's Theorem 1 bound row by row; hybrid(0) is heu; every
 * method meets the capacities exactly (equal and unequal); results are
 * identical across runs and solver instances; laia and vanilla are
 * reproducible for a seed. */
#include "dtest.h"

static void test_theorem1(void **state)
{
	(void)state;
	struct esd_solver *s;
	assert_int_equal(esd_solver_create(&s), 0);
	const uint32_t n = 8, m = 16, k = n * m;
	int64_t *c = malloc((size_t)k * n * sizeof(int64_t));
	uint32_t a[128], order[128];
	int64_t regret[128];
	for (int kd = 0; kd < DT_KINDS; kd++)
		for (uint64_t seed = 0; seed < 20; seed++) {
			dt_fill(c, k, n, (enum dt_kind)kd, seed);
			for (int ord = 0; ord < 2; ord++) {
				assert_int_equal(
				    esd_solve_heu(s, c, k, n, NULL, (enum esd_heu_order)ord, a), 0);
				esd_regrets(c, k, n, regret);
				/* position of each row in the visiting order */
				for (uint32_t i = 0; i < k; i++)
					order[i] = i;
				if (ord == ESD_HEU_REGRET_ORDER) {
					/* stable sort by regret desc (insertion sort) */
					for (uint32_t i = 1; i < k; i++) {
						uint32_t x = order[i], q = i;
						while (q > 0 && regret[order[q - 1]] < regret[x]) {
							order[q] = order[q - 1];
							q--;
						}
						order[q] = x;
					}
				}
				for (uint32_t p = 0; p < k; p++) {
					uint32_t i = order[p];
					int64_t row[8];
					memcpy(row, c + (size_t)i * n, sizeof(row));
					/* sort the row ascending */
					for (uint32_t x = 1; x < n; x++)
						for (uint32_t y = x; y > 0 && row[y - 1] > row[y];
						     y--) {
							int64_t t = row[y];
							row[y] = row[y - 1];
							row[y - 1] = t;
						}
					uint32_t rank = p / m; /* (floor(p/m)+1)-th smallest */
					int64_t got = c[(size_t)i * n + a[i]];
					assert_true(got - row[0] <= row[rank] - row[0]);
				}
			}
		}
	free(c);
	esd_solver_free(s);
}

static void check_caps(const uint32_t *a, uint32_t k, uint32_t n, const uint32_t *cap)
{
	assert_int_equal(esd_assign_check(k, n, cap, a), 0);
}

static void test_hybrid0_is_heu_and_caps(void **state)
{
	(void)state;
	struct esd_solver *s, *s2;
	assert_int_equal(esd_solver_create(&s), 0);
	assert_int_equal(esd_solver_create(&s2), 0);
	static const uint32_t ns[] = {1, 2, 3, 5, 8};
	for (size_t q = 0; q < sizeof(ns) / sizeof(ns[0]); q++) {
		const uint32_t n = ns[q], k = 97 * n + 3 * (n > 1);
		int64_t *c = malloc((size_t)k * n * sizeof(int64_t));
		int32_t *sc = malloc((size_t)k * n * sizeof(int32_t));
		uint32_t *a = malloc(k * 4), *b = malloc(k * 4);
		uint32_t cap[8];
		/* unequal capacities summing to k */
		uint32_t left = k;
		for (uint32_t j = 0; j + 1 < n; j++) {
			cap[j] = (k / n) + (j % 2 ? 7 : 0) - (j % 3 == 2 ? 5 : 0);
			left -= cap[j];
		}
		cap[n - 1] = left;
		for (int kd = 0; kd < DT_KINDS; kd++) {
			dt_fill(c, k, n, (enum dt_kind)kd, q * 10 + (uint64_t)kd);
			for (size_t x = 0; x < (size_t)k * n; x++)
				sc[x] = (int32_t)(c[x] % 27);
			for (int ord = 0; ord < 2; ord++) {
				struct esd_hybrid_params hp = {0.0, ESD_EXACT_SSP,
				                               (enum esd_heu_order)ord};
				assert_int_equal(
				    esd_solve_heu(s, c, k, n, cap, (enum esd_heu_order)ord, a), 0);
				assert_int_equal(esd_solve_hybrid(s, c, k, n, cap, &hp, b), 0);
				assert_memory_equal(a, b, k * 4);
				check_caps(a, k, n, cap);
			}
			static const double alphas[] = {0.125, 0.25, 0.5, 0.75, 1.0};
			int64_t prev = INT64_MAX;
			(void)prev;
			for (size_t x = 0; x < 5; x++) {
				struct esd_hybrid_params hp = {alphas[x], ESD_EXACT_SSP,
				                               ESD_HEU_ROW_ORDER};
				assert_int_equal(esd_solve_hybrid(s, c, k, n, cap, &hp, a), 0);
				check_caps(a, k, n, cap);
				/* same answer from a fresh solver (no hidden state) */
				assert_int_equal(esd_solve_hybrid(s2, c, k, n, cap, &hp, b), 0);
				assert_memory_equal(a, b, k * 4);
				const struct esd_solve_stats *st = esd_solver_stats(s);
				uint32_t S = 0;
				for (uint32_t j = 0; j < n; j++)
					S += (uint32_t)(alphas[x] * cap[j]);
				assert_int_equal(st->opt_rows, S);
				assert_int_equal(st->heu_rows, k - S);
			}
			assert_int_equal(esd_solve_opt(s, c, k, n, cap, a), 0);
			check_caps(a, k, n, cap);
			int64_t opt = esd_assign_cost(c, k, n, a);
			if (kd == DT_TIES || kd == DT_ONE_WORKER) { /* O(k^3): two kinds */
				assert_int_equal(esd_solve_hungarian(s, c, k, n, cap, b), 0);
				assert_memory_equal(a, b, k * 4);
			}
			assert_int_equal(esd_solve_heu(s, c, k, n, cap, ESD_HEU_ROW_ORDER, a), 0);
			assert_true(esd_assign_cost(c, k, n, a) >= opt);
			assert_int_equal(esd_solve_laia(s, sc, k, n, cap, 42, a), 0);
			check_caps(a, k, n, cap);
			assert_int_equal(esd_solve_laia(s2, sc, k, n, cap, 42, b), 0);
			assert_memory_equal(a, b, k * 4);
			assert_int_equal(esd_solve_vanilla(k, n, cap, 7, a), 0);
			check_caps(a, k, n, cap);
			assert_int_equal(esd_solve_vanilla(k, n, cap, 7, b), 0);
			assert_memory_equal(a, b, k * 4);
			/* equal capacities */
			if (k % n == 0) {
				assert_int_equal(esd_solve_vanilla(k, n, NULL, 7, a), 0);
				check_caps(a, k, n, NULL);
			}
		}
		free(c);
		free(sc);
		free(a);
		free(b);
	}
	esd_solver_free(s);
	esd_solver_free(s2);
}

static void test_laia_rule(void **state)
{
	(void)state;
	struct esd_solver *s;
	assert_int_equal(esd_solver_create(&s), 0);
	/* argmax with room; row 2 prefers worker 0, which is full */
	int32_t sc[] = {5,      1, 0, /**/ 3, 2, 2, /**/ 9, 8, 1,
	                /**/ 0, 0, 0, /**/ 1, 1, 1, /**/ 2, 0, 0};
	uint32_t cap[] = {2, 2, 2}, a[6];
	assert_int_equal(esd_solve_laia(s, sc, 6, 3, cap, 1, a), 0);
	assert_int_equal(a[0], 0);
	assert_int_equal(a[1], 0);
	assert_int_equal(a[2], 1);
	assert_int_equal(esd_assign_check(6, 3, cap, a), 0);
	/* ties are spread by the seed: over seeds, row 0 of an all-tie matrix
	 * lands on every worker */
	int32_t z[6 * 3] = {0};
	unsigned seen = 0;
	for (uint64_t seed = 0; seed < 64; seed++) {
		assert_int_equal(esd_solve_laia(s, z, 6, 3, cap, seed, a), 0);
		seen |= 1u << a[0];
	}
	assert_int_equal(seen, 7);
	int32_t neg[] = {-1, 0};
	assert_int_equal(esd_solve_laia(s, neg, 1, 2, (uint32_t[]){1, 0}, 1, a), -EINVAL);
	esd_solver_free(s);
}

static void test_regret_stats(void **state)
{
	(void)state;
	struct esd_solver *s;
	assert_int_equal(esd_solver_create(&s), 0);
	int64_t c[] = {0, 10, /**/ 5, 5, /**/ 7, 1, /**/ 3, 4};
	int64_t r[4];
	esd_regrets(c, 4, 2, r);
	assert_int_equal(r[0], 10);
	assert_int_equal(r[1], 0);
	assert_int_equal(r[2], 6);
	assert_int_equal(r[3], 1);
	uint32_t a[4];
	struct esd_hybrid_params hp = {0.5, ESD_EXACT_SSP, ESD_HEU_ROW_ORDER};
	assert_int_equal(esd_solve_hybrid(s, c, 4, 2, NULL, &hp, a), 0);
	const struct esd_solve_stats *st = esd_solver_stats(s);
	assert_int_equal(st->regret_max, 10);
	assert_int_equal(st->regret_min, 0);
	assert_int_equal(st->regret_zero, 1);
	assert_int_equal(st->regret_cut, 6); /* rows 0 and 2 go to opt */
	assert_int_equal(st->opt_rows, 2);
	assert_int_equal(a[0], 0);
	assert_int_equal(a[2], 1);
	esd_solver_free(s);
}

/* esd_solver_set_exact: an offloaded exact part (here a second CPU solver
 * standing for the GPU) gives the same assignments and is called for opt
 * and for hybrid's high-regret rows only. */
struct offload {
	struct esd_solver *cpu;
	uint32_t calls, rows;
};

static int offload_fn(void *ctx, const int64_t *cost, uint32_t k, uint32_t n, const uint32_t *cap,
                      uint32_t *assign)
{
	struct offload *o = ctx;
	o->calls++;
	o->rows += k;
	assert_non_null(cap);
	return esd_solve_opt(o->cpu, cost, k, n, cap, assign);
}

static void test_exact_offload(void **state)
{
	(void)state;
	const uint32_t k = 256, n = 8;
	int64_t *c = malloc(sizeof(int64_t) * k * n);
	uint32_t a[256], b[256];
	struct esd_solver *s, *plain;
	struct offload o = {0};
	assert_int_equal(esd_solver_create(&s), 0);
	assert_int_equal(esd_solver_create(&plain), 0);
	assert_int_equal(esd_solver_create(&o.cpu), 0);
	esd_solver_set_exact(s, offload_fn, &o);
	for (int kd = 0; kd < DT_KINDS; kd++) {
		dt_fill(c, k, n, (enum dt_kind)kd, 40 + kd);
		assert_int_equal(esd_solve_opt(s, c, k, n, NULL, a), 0);
		assert_int_equal(esd_solve_opt(plain, c, k, n, NULL, b), 0);
		assert_memory_equal(a, b, sizeof(a));
		const double alphas[] = {1, 0.5, 0.125, 0};
		for (int q = 0; q < 4; q++) {
			struct esd_hybrid_params p = {alphas[q], ESD_EXACT_SSP, ESD_HEU_ROW_ORDER};
			uint32_t before = o.rows;
			assert_int_equal(esd_solve_hybrid(s, c, k, n, NULL, &p, a), 0);
			assert_int_equal(esd_solve_hybrid(plain, c, k, n, NULL, &p, b), 0);
			assert_memory_equal(a, b, sizeof(a));
			/* s = floor(alpha * m) slots per worker go to the exact part */
			assert_int_equal(o.rows - before, (uint32_t)(alphas[q] * (k / n)) * n);
		}
	}
	assert_true(o.calls > 0);
	esd_solver_set_exact(s, NULL, NULL);
	uint32_t calls = o.calls;
	assert_int_equal(esd_solve_opt(s, c, k, n, NULL, a), 0);
	assert_int_equal(o.calls, calls);
	esd_solver_free(s);
	esd_solver_free(plain);
	esd_solver_free(o.cpu);
	free(c);
}

/* esd_solver_set_exact_split: the exact part in two halves. hybrid posts
 * it, runs Heu on the other rows, then collects: at collect time every Heu
 * row is already assigned (the overlap), the sub-problem's costs are still
 * valid, and the result is the same bits as the CPU's. */
struct split {
	struct esd_solver *cpu;
	const int64_t *cost;
	const uint32_t *cap;
	uint32_t k, n, submits, collects, heu_done;
	const uint32_t *main_assign; /* the caller's assign[] */
	uint32_t main_k;
};

static int split_submit(void *ctx, const int64_t *cost, uint32_t k, uint32_t n,
                        const uint32_t *cap)
{
	struct split *o = ctx;
	o->submits++;
	o->cost = cost;
	o->cap = cap;
	o->k = k;
	o->n = n;
	return 0;
}

static int split_collect(void *ctx, uint32_t *assign)
{
	struct split *o = ctx;
	uint32_t unassigned = 0;
	o->collects++;
	for (uint32_t i = 0; i < o->main_k; i++)
		unassigned += o->main_assign[i] == UINT32_MAX;
	/* exactly the opt rows are still unassigned: Heu ran before collect */
	o->heu_done += unassigned == o->k;
	return esd_solve_opt(o->cpu, o->cost, o->k, o->n, o->cap, assign);
}

static void test_exact_split(void **state)
{
	(void)state;
	const uint32_t k = 256, n = 8;
	int64_t *c = malloc(sizeof(int64_t) * k * n);
	uint32_t a[256], b[256];
	struct esd_solver *s, *plain;
	struct split o = {.main_assign = a, .main_k = k};
	assert_int_equal(esd_solver_create(&s), 0);
	assert_int_equal(esd_solver_create(&plain), 0);
	assert_int_equal(esd_solver_create(&o.cpu), 0);
	esd_solver_set_exact_split(s, split_submit, split_collect, &o);
	for (int kd = 0; kd < DT_KINDS; kd++) {
		dt_fill(c, k, n, (enum dt_kind)kd, 70 + kd);
		assert_int_equal(esd_solve_opt(s, c, k, n, NULL, a), 0);
		assert_int_equal(esd_solve_opt(plain, c, k, n, NULL, b), 0);
		assert_memory_equal(a, b, sizeof(a));
		const double alphas[] = {1, 0.5, 0.125};
		for (int q = 0; q < 3; q++) {
			struct esd_hybrid_params p = {alphas[q], ESD_EXACT_SSP, ESD_HEU_ROW_ORDER};
			uint32_t before = o.heu_done;
			memset(a, 0xff, sizeof(a));
			assert_int_equal(esd_solve_hybrid(s, c, k, n, NULL, &p, a), 0);
			assert_int_equal(esd_solve_hybrid(plain, c, k, n, NULL, &p, b), 0);
			assert_memory_equal(a, b, sizeof(a));
			if (alphas[q] < 1) /* overlapped */
				assert_int_equal(o.heu_done, before + 1);
		}
	}
	assert_int_equal(o.submits, o.collects);
	/* a split hook and the one-call hook replace each other */
	esd_solver_set_exact(s, NULL, NULL);
	uint32_t calls = o.submits;
	assert_int_equal(esd_solve_opt(s, c, k, n, NULL, a), 0);
	assert_int_equal(o.submits, calls);
	esd_solver_free(s);
	esd_solver_free(plain);
	esd_solver_free(o.cpu);
	free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_theorem1),      cmocka_unit_test(test_hybrid0_is_heu_and_caps),
	    cmocka_unit_test(test_laia_rule),     cmocka_unit_test(test_regret_stats),
	    cmocka_unit_test(test_exact_offload),
	    cmocka_unit_test(test_exact_split),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
