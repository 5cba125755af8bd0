/*
 * The solver object, the checks every method shares, heu (ESD Alg. 2 lines
 * 9-18), regrets and HybridDis (Alg. 2 lines 1-8). Opt, the canonical
 * pass, the Hungarian method and the baselines live in their own files.
 */
#include "solver_internal.h"

#include <esd/clock.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const method_names[] = {"heu", "opt", "hungarian", "hybrid", "laia", "vanilla"};

int esd_method_parse(const char *name, enum esd_method *out)
{
	if (!name || !out)
		return -EINVAL;
	for (size_t i = 0; i < sizeof(method_names) / sizeof(method_names[0]); i++)
		if (!strcmp(name, method_names[i])) {
			*out = (enum esd_method)i;
			return 0;
		}
	return -EINVAL;
}

const char *esd_method_name(enum esd_method m)
{
	if ((unsigned)m < sizeof(method_names) / sizeof(method_names[0]))
		return method_names[m];
	return "?";
}

int esd_solver_create(struct esd_solver **out)
{
	if (!out)
		return -EINVAL;
	struct esd_solver *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->warm_on = 1;
	*out = s;
	return 0;
}

void esd_solver_free(struct esd_solver *s)
{
	if (!s)
		return;
	for (int i = 0; i < SC_COUNT; i++)
		free(s->sc[i].p);
	if (s->heaps)
		for (uint32_t i = 0; i < s->heaps_n * s->heaps_n; i++)
			free(s->heaps[i].e);
	free(s->heaps);
	free(s);
}

const struct esd_solve_stats *esd_solver_stats(const struct esd_solver *s)
{
	return s ? &s->st : NULL;
}

void esd_solver_reset_warm(struct esd_solver *s)
{
	if (s)
		s->warm_n = 0;
}

void esd_solver_set_warm(struct esd_solver *s, int on)
{
	if (s) {
		s->warm_on = !!on;
		s->warm_n = 0;
	}
}

void *esd_scratch(struct esd_solver *s, int which, size_t bytes)
{
	struct scratch *b = &s->sc[which];
	if (bytes == 0)
		bytes = 1;
	if (b->bytes < bytes) {
		size_t nb = b->bytes ? b->bytes : 256;
		while (nb < bytes)
			nb *= 2;
		void *p = realloc(b->p, nb);
		if (!p)
			return NULL;
		b->p = p;
		b->bytes = nb;
	}
	return b->p;
}

int esd_solve_prepare_heaps(struct esd_solver *s, uint32_t n)
{
	if (s->heaps_n < n) {
		struct pheap *h = calloc((size_t)n * n, sizeof(*h));
		if (!h)
			return -ENOMEM;
		if (s->heaps) {
			for (uint32_t i = 0; i < s->heaps_n * s->heaps_n; i++)
				free(s->heaps[i].e);
			free(s->heaps);
		}
		s->heaps = h;
		s->heaps_n = n;
	}
	return 0;
}

/* Any cost outside [0, ESD_COST_MAX] (2^44 - 1: such a cost has a bit above
 * bit 43, a negative one the sign bit)? One OR over the matrix, which the
 * compiler vectorises when told to (-O2 alone leaves it scalar): it runs
 * over every matrix a solver is given. */
_Static_assert((ESD_COST_MAX & (ESD_COST_MAX + 1)) == 0, "ESD_COST_MAX is 2^m - 1");
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic")))
#endif
static int
costs_out_of_range(const int64_t *cost, size_t kn)
{
	uint64_t any = 0;
	for (size_t i = 0; i < kn; i++)
		any |= (uint64_t)cost[i];
	return (any & ~(uint64_t)ESD_COST_MAX) != 0;
}

/* Common checks; fills capv[n] with the capacities (equal when cap is
 * NULL). cost may be NULL (laia, vanilla check their own input). */
int esd_solve_check(const int64_t *cost, uint32_t k, uint32_t n, const uint32_t *cap,
                    const void *assign, uint32_t *capv)
{
	if (n == 0 || n > ESD_MAX_WORKERS || k > ESD_SOLVE_MAX_K || !assign)
		return -EINVAL;
	if (cap) {
		uint64_t sum = 0;
		for (uint32_t j = 0; j < n; j++) {
			capv[j] = cap[j];
			sum += cap[j];
		}
		if (sum != k)
			return -EINVAL;
	} else {
		if (k % n)
			return -EINVAL;
		for (uint32_t j = 0; j < n; j++)
			capv[j] = k / n;
	}
	if (cost && costs_out_of_range(cost, (size_t)k * n))
		return -EINVAL;
	return 0;
}

int64_t esd_assign_cost(const int64_t *cost, uint32_t k, uint32_t n, const uint32_t *assign)
{
	int64_t t = 0;
	for (uint32_t i = 0; i < k; i++)
		t += cost[(size_t)i * n + assign[i]];
	return t;
}

int esd_assign_check(uint32_t k, uint32_t n, const uint32_t *cap, const uint32_t *assign)
{
	uint32_t capv[ESD_MAX_WORKERS], load[ESD_MAX_WORKERS] = {0};
	int rc = esd_solve_check(NULL, k, n, cap, assign, capv);
	if (rc)
		return rc;
	for (uint32_t i = 0; i < k; i++) {
		if (assign[i] >= n)
			return -EINVAL;
		load[assign[i]]++;
	}
	for (uint32_t j = 0; j < n; j++)
		if (load[j] != capv[j])
			return -EINVAL;
	return 0;
}

void esd_regrets(const int64_t *cost, uint32_t k, uint32_t n, int64_t *regret)
{
	for (uint32_t i = 0; i < k; i++) {
		const int64_t *c = cost + (size_t)i * n;
		int64_t a = INT64_MAX, b = INT64_MAX;
		/* smallest a and second smallest b without branches: which
		 * worker is cheapest is data no predictor learns */
		for (uint32_t j = 0; j < n; j++) {
			const int64_t v = c[j];
			const int64_t hi = v > a ? v : a;
			b = hi < b ? hi : b;
			a = v < a ? v : a;
		}
		regret[i] = n > 1 ? b - a : 0;
	}
}

/* Stable LSD radix sort (11-bit digits) of the rows by (regret desc, row
 * asc). Regrets are in [0, ESD_COST_MAX]. */
int esd_regret_order(struct esd_solver *s, const int64_t *regret, uint32_t k, uint32_t *order)
{
	uint32_t *tmp = esd_scratch(s, SC_ORDER2, (size_t)k * sizeof(uint32_t));
	if (!tmp)
		return -ENOMEM;
	int64_t maxr = 0;
	for (uint32_t i = 0; i < k; i++) {
		order[i] = i;
		if (regret[i] > maxr)
			maxr = regret[i];
	}
	/* key = maxr - regret: ascending key is descending regret */
	uint32_t *src = order, *dst = tmp;
	for (int shift = 0; shift < 64 && ((uint64_t)maxr >> shift); shift += 11) {
		uint32_t cnt[2048] = {0};
		for (uint32_t i = 0; i < k; i++)
			cnt[((uint64_t)(maxr - regret[src[i]]) >> shift) & 2047]++;
		uint32_t sum = 0;
		for (int d = 0; d < 2048; d++) {
			uint32_t c = cnt[d];
			cnt[d] = sum;
			sum += c;
		}
		for (uint32_t i = 0; i < k; i++)
			dst[cnt[((uint64_t)(maxr - regret[src[i]]) >> shift) & 2047]++] = src[i];
		uint32_t *t = src;
		src = dst;
		dst = t;
	}
	if (src != order)
		memcpy(order, src, (size_t)k * sizeof(uint32_t));
	return 0;
}

void esd_heu_core(const int64_t *cost, uint32_t k, uint32_t n, const uint32_t *capv,
                  const uint32_t *order, uint32_t *load, uint32_t *assign)
{
	/* open: bit j set while worker j has room (n <= 64) */
	uint64_t open = 0;
	for (uint32_t j = 0; j < n; j++)
		if (load[j] < capv[j])
			open |= UINT64_C(1) << j;
	for (uint32_t p = 0; p < k; p++) {
		uint32_t i = order ? order[p] : p;
		const int64_t *c = cost + (size_t)i * n;
		int64_t best = INT64_MAX;
		uint32_t bj = 0;
		for (uint64_t m = open; m; m &= m - 1) {
			uint32_t j = (uint32_t)__builtin_ctzll(m);
			if (c[j] < best) {
				best = c[j];
				bj = j;
			}
		}
		assign[i] = bj;
		if (++load[bj] == capv[bj])
			open &= ~(UINT64_C(1) << bj);
	}
}

static void regret_stats(struct esd_solve_stats *st, const int64_t *regret, const uint32_t *order,
                         uint32_t k)
{
	if (k == 0) {
		st->regret_min = st->regret_max = st->regret_median = 0;
		st->regret_mean = 0;
		st->regret_zero = 0;
		return;
	}
	double sum = 0;
	uint32_t zero = 0;
	for (uint32_t i = 0; i < k; i++) {
		sum += (double)regret[i];
		zero += regret[i] == 0;
	}
	st->regret_max = regret[order[0]];
	st->regret_min = regret[order[k - 1]];
	st->regret_median = regret[order[k / 2]];
	st->regret_mean = sum / k;
	st->regret_zero = zero;
}

int esd_solve_heu(struct esd_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                  const uint32_t *cap, enum esd_heu_order order, uint32_t *assign)
{
	uint32_t capv[ESD_MAX_WORKERS], load[ESD_MAX_WORKERS] = {0};
	if (!s || !cost)
		return -EINVAL;
	int rc = esd_solve_check(cost, k, n, cap, assign, capv);
	if (rc)
		return rc;
	int64_t t0 = esd_now_ns();
	memset(&s->st, 0, sizeof(s->st));
	s->st.regret_cut = -1;
	const uint32_t *ord = NULL;
	if (order == ESD_HEU_REGRET_ORDER) {
		int64_t *regret = esd_scratch(s, SC_REGRET, (size_t)k * sizeof(int64_t));
		uint32_t *o = esd_scratch(s, SC_ORDER, (size_t)k * sizeof(uint32_t));
		if (!regret || !o)
			return -ENOMEM;
		esd_regrets(cost, k, n, regret);
		if ((rc = esd_regret_order(s, regret, k, o)))
			return rc;
		regret_stats(&s->st, regret, o, k);
		ord = o;
	}
	int64_t t1 = esd_now_ns();
	esd_heu_core(cost, k, n, capv, ord, load, assign);
	int64_t t2 = esd_now_ns();
	s->st.regret_ns = t1 - t0;
	s->st.heu_ns = t2 - t1;
	s->st.total_ns = t2 - t0;
	s->st.heu_rows = k;
	s->st.cost = esd_assign_cost(cost, k, n, assign);
	return 0;
}

void esd_solver_set_exact(struct esd_solver *s, esd_exact_fn fn, void *ctx)
{
	if (!s)
		return;
	s->exact = fn;
	s->exact_submit = NULL;
	s->exact_collect = NULL;
	s->exact_ctx = ctx;
}

void esd_solver_set_exact_split(struct esd_solver *s, esd_exact_submit_fn submit,
                                esd_exact_collect_fn collect, void *ctx)
{
	if (!s)
		return;
	s->exact = NULL;
	s->exact_submit = submit && collect ? submit : NULL;
	s->exact_collect = submit && collect ? collect : NULL;
	s->exact_ctx = ctx;
}

static int opt_dispatch(struct esd_solver *s, enum esd_exact_backend b, const int64_t *cost,
                        uint32_t k, uint32_t n, const uint32_t *capv, uint32_t *assign)
{
	if (s->exact_submit) {
		int rc = s->exact_submit(s->exact_ctx, cost, k, n, capv);
		return rc ? rc : s->exact_collect(s->exact_ctx, assign);
	}
	if (s->exact)
		return s->exact(s->exact_ctx, cost, k, n, capv, assign);
	if (b == ESD_EXACT_HUNGARIAN)
		return esd_opt_hungarian(s, cost, k, n, capv, assign);
	return esd_opt_ssp(s, cost, k, n, capv, assign);
}

/* opt or hungarian on the whole matrix; offload: through s->exact if set */
static int solve_whole(struct esd_solver *s, enum esd_exact_backend b, bool offload,
                       const int64_t *cost, uint32_t k, uint32_t n, const uint32_t *cap,
                       uint32_t *assign)
{
	uint32_t capv[ESD_MAX_WORKERS];
	if (!s || !cost)
		return -EINVAL;
	int rc = esd_solve_check(cost, k, n, cap, assign, capv);
	if (rc)
		return rc;
	memset(&s->st, 0, sizeof(s->st));
	s->st.regret_cut = -1;
	int64_t t0 = esd_now_ns();
	if (offload)
		rc = opt_dispatch(s, b, cost, k, n, capv, assign);
	else if (b == ESD_EXACT_HUNGARIAN)
		rc = esd_opt_hungarian(s, cost, k, n, capv, assign);
	else
		rc = esd_opt_ssp(s, cost, k, n, capv, assign);
	if (rc)
		return rc;
	s->st.opt_ns = s->st.total_ns = esd_now_ns() - t0;
	s->st.opt_rows = k;
	s->st.cost = esd_assign_cost(cost, k, n, assign);
	return 0;
}

int esd_solve_opt(struct esd_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                  const uint32_t *cap, uint32_t *assign)
{
	return solve_whole(s, ESD_EXACT_SSP, true, cost, k, n, cap, assign);
}

/* the reference: never offloaded */
int esd_solve_hungarian(struct esd_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                        const uint32_t *cap, uint32_t *assign)
{
	return solve_whole(s, ESD_EXACT_HUNGARIAN, false, cost, k, n, cap, assign);
}

/* hybrid: sel[i] = 1 for the S rows handed to opt (order's first S). */
static void mark_opt_rows(uint8_t *sel, uint32_t k, const uint32_t *order, uint32_t S)
{
	memset(sel, 0, k);
	for (uint32_t q = 0; q < S; q++)
		sel[order[q]] = 1;
}

/* hybrid: the rows handed to opt (the S highest-regret ones), in
 * increasing row index (the canonical order of the sub-problem), and
 * their costs. *rows has room for 2S entries: the sub-assignment goes in
 * the second half. */
static int hybrid_opt_rows(struct esd_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                           const uint32_t *order, uint32_t S, uint32_t **rows_out,
                           int64_t **sub_out)
{
	uint32_t *rows = esd_scratch(s, SC_SUBASSIGN, (size_t)S * 2 * sizeof(uint32_t));
	int64_t *sub = esd_scratch(s, SC_SUBCOST, (size_t)S * n * sizeof(int64_t));
	uint8_t *sel = esd_scratch(s, SC_MISC, k);
	if (!rows || !sub || !sel)
		return -ENOMEM;
	mark_opt_rows(sel, k, order, S);
	uint32_t r = 0;
	for (uint32_t i = 0; i < k; i++)
		if (sel[i]) {
			memcpy(sub + (size_t)r * n, cost + (size_t)i * n, n * sizeof(int64_t));
			rows[r++] = i;
		}
	*rows_out = rows;
	*sub_out = sub;
	return 0;
}

/* hybrid: Heu on the k - S other rows with the slots opt leaves. */
static int hybrid_heu(struct esd_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                      const uint32_t *capv, const uint32_t *sl, const uint32_t *order, uint32_t S,
                      const struct esd_hybrid_params *p, uint32_t *load, uint32_t *assign)
{
	uint32_t hcap[ESD_MAX_WORKERS];
	for (uint32_t j = 0; j < n; j++)
		hcap[j] = capv[j] - sl[j];
	if (p->heu_order == ESD_HEU_REGRET_ORDER) {
		esd_heu_core(cost, k - S, n, hcap, order + S, load, assign);
		return 0;
	}
	uint32_t *o2 = esd_scratch(s, SC_ORDER2, (size_t)(k - S) * sizeof(uint32_t));
	uint8_t *sel = esd_scratch(s, SC_HEUSEL, k);
	if (!o2 || !sel)
		return -ENOMEM;
	mark_opt_rows(sel, k, order, S);
	uint32_t r = 0;
	for (uint32_t i = 0; i < k; i++)
		if (!sel[i])
			o2[r++] = i;
	esd_heu_core(cost, k - S, n, hcap, o2, load, assign);
	return 0;
}

int esd_solve_hybrid(struct esd_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                     const uint32_t *cap, const struct esd_hybrid_params *p, uint32_t *assign)
{
	uint32_t capv[ESD_MAX_WORKERS], sl[ESD_MAX_WORKERS], load[ESD_MAX_WORKERS] = {0};
	if (!s || !cost || !p || !(p->alpha >= 0.0 && p->alpha <= 1.0))
		return -EINVAL;
	int rc = esd_solve_check(cost, k, n, cap, assign, capv);
	if (rc)
		return rc;
	memset(&s->st, 0, sizeof(s->st));
	s->st.regret_cut = -1;
	int64_t t0 = esd_now_ns();

	uint32_t S = 0;
	for (uint32_t j = 0; j < n; j++) {
		sl[j] = (uint32_t)floor(p->alpha * (double)capv[j]);
		if (sl[j] > capv[j])
			sl[j] = capv[j];
		S += sl[j];
	}
	int64_t *regret = esd_scratch(s, SC_REGRET, (size_t)k * sizeof(int64_t));
	uint32_t *order = esd_scratch(s, SC_ORDER, (size_t)k * sizeof(uint32_t));
	if (!regret || !order)
		return -ENOMEM;
	esd_regrets(cost, k, n, regret);
	if ((rc = esd_regret_order(s, regret, k, order)))
		return rc;
	regret_stats(&s->st, regret, order, k);
	if (S)
		s->st.regret_cut = regret[order[S - 1]];
	int64_t t1 = esd_now_ns(), t2 = t1, heu_done = 0;

	if (S == k) {
		if ((rc = opt_dispatch(s, p->backend, cost, k, n, capv, assign)))
			return rc;
		t2 = esd_now_ns();
	} else if (S) {
		uint32_t *rows, *sa;
		int64_t *sub;
		if ((rc = hybrid_opt_rows(s, cost, k, n, order, S, &rows, &sub)))
			return rc;
		sa = rows + S;
		if (s->exact_submit) {
			/* the exact part elsewhere while Heu runs here: Heu's rows
			 * and slots do not depend on its answer */
			if ((rc = s->exact_submit(s->exact_ctx, sub, S, n, sl)))
				return rc;
			if ((rc = hybrid_heu(s, cost, k, n, capv, sl, order, S, p, load, assign))) {
				s->exact_collect(s->exact_ctx, sa);
				return rc;
			}
			heu_done = esd_now_ns();
			rc = s->exact_collect(s->exact_ctx, sa);
		} else {
			rc = opt_dispatch(s, p->backend, sub, S, n, sl, sa);
		}
		if (rc)
			return rc;
		for (uint32_t q = 0; q < S; q++)
			assign[rows[q]] = sa[q];
		t2 = esd_now_ns();
	}
	if (S < k && !heu_done) {
		if ((rc = hybrid_heu(s, cost, k, n, capv, sl, order, S, p, load, assign)))
			return rc;
	}
	int64_t t3 = esd_now_ns();
	s->st.regret_ns = t1 - t0;
	if (heu_done) { /* overlapped: Heu from the submit, opt until collected */
		s->st.heu_ns = heu_done - t1;
		s->st.opt_ns = t2 - t1;
	} else {
		s->st.opt_ns = t2 - t1;
		s->st.heu_ns = t3 - t2;
	}
	s->st.total_ns = t3 - t0;
	s->st.opt_rows = S;
	s->st.heu_rows = k - S;
	s->st.cost = esd_assign_cost(cost, k, n, assign);
	return 0;
}
