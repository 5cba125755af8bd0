/*
 * Local search on the true cost (esd/dispatch_quality.h): improves any
 * method's assignment by swapping samples between workers (capacities stay
 * exact), accepting a swap only when the exact change of the true cost of
 * the protocol steps 1, 3 and 6 (docs/design.md §3) is negative. The
 * change is exact because the true cost is a sum over unique keys of a
 * function of the set of workers that need the key: a swap only changes
 * the sets of the two samples' keys.
 * Candidates come from a seeded generator and the budget counts
 * evaluations, so every node makes the same moves; an optional time budget
 * (not reproducible) serves offline tools.
 */
#include "keytab_internal.h"

#include <esd/types.h>
#include <esd/clock.h>
#include <esd/dispatch_quality.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Sum of T_j over the workers of a mask: a table per 8 bits, so the cost
 * of a key is a few lookups (the tables of bits 16-63 only for n > 16). */
struct tsum {
	uint32_t n;
	int64_t lo[256], hi[256]; /* bits 0-7 and 8-15 */
	int64_t up[6][256];       /* bits 16-23, ..., 56-63 */
};

static void tsum_init(struct tsum *ts, const int64_t *T, uint32_t n)
{
	ts->n = n;
	for (uint32_t m = 0; m < 256; m++) {
		int64_t a = 0, b = 0;
		for (uint32_t j = 0; j < 8; j++)
			if (m >> j & 1) {
				a += j < n ? T[j] : 0;
				b += j + 8 < n ? T[j + 8] : 0;
			}
		ts->lo[m] = a;
		ts->hi[m] = b;
	}
	for (uint32_t q = 0; n > 16 && q < 6; q++) {
		ts->up[q][0] = 0;
		for (uint32_t m = 1; m < 256; m++) {
			const uint32_t j = 16 + 8 * q + (uint32_t)__builtin_ctz(m);
			ts->up[q][m] = ts->up[q][m & (m - 1)] + (j < n ? T[j] : 0);
		}
	}
}

static inline int64_t tsum(const struct tsum *ts, uint64_t m)
{
	int64_t c = ts->lo[m & 255] + ts->hi[(m >> 8) & 255];
	if (m < (UINT64_C(1) << 16))
		return c;
	/* unrolled: up[q][0] is 0 */
	return c + ts->up[0][(m >> 16) & 255] + ts->up[1][(m >> 24) & 255] +
	       ts->up[2][(m >> 32) & 255] + ts->up[3][(m >> 40) & 255] +
	       ts->up[4][(m >> 48) & 255] + ts->up[5][m >> 56];
}

/* A fresh stamp base (4 * generation; tags 0..3 above it), clearing the
 * stamps (all ns of them, those of earlier calls included) when the
 * generations wrap. */
static inline uint32_t next_gen(uint32_t *stamp, size_t ns, uint32_t *gen)
{
	if (++*gen == (UINT32_C(1) << 30)) {
		memset(stamp, 0, ns * sizeof(uint32_t));
		*gen = 1;
	}
	return *gen * 4;
}

/* Keys of samples i (occurrences oi) and i2 (oi2) with dd[u] = their net
 * occurrences moving from i's worker to i2's when the two swap; returns
 * how many keys it listed in touched. */
static uint32_t net_moves(const uint32_t *oi, uint32_t li, const uint32_t *oi2, uint32_t li2,
                          uint32_t G, uint32_t *stamp, int32_t *dd, uint32_t *touched)
{
	uint32_t nt = 0;
	for (uint32_t q = 0; q < li; q++) {
		const uint32_t u = oi[q];
		if (stamp[u] != G) {
			stamp[u] = G;
			dd[u] = 1;
			touched[nt++] = u;
		} else {
			dd[u]++;
		}
	}
	for (uint32_t q = 0; q < li2; q++) {
		const uint32_t u = oi2[q];
		if (stamp[u] != G) {
			stamp[u] = G;
			dd[u] = -1;
			touched[nt++] = u;
		} else {
			dd[u]--;
		}
	}
	return nt;
}

/* What the search keeps per unique key, in one place: the workers that
 * need it, those holding exactly one of its occurrences, its current true
 * cost, and its state (latest holders, the DIRTY holder's bit and T). */
struct lskey {
	uint64_t mask, one;
	int64_t kc;
	uint64_t latest, dbit;
	int64_t td;
	uint32_t cls; /* its row class (esd_keytab_set_row_bytes): its costs */
	uint32_t row; /* n > 8: its counts' row in the pool, 0 for none */
};

static inline int64_t lskey_cost(const struct lskey *x, uint64_t N, const struct tsum *ts, int full)
{
	if (!N)
		return 0;
	int64_t c = tsum(ts, N & ~x->latest);
	if (x->dbit && N != x->dbit)
		c += x->td;
	if (full || (N & (N - 1)))
		c += tsum(ts, N);
	return c;
}

/* The same for n <= 8 in 16 bytes, masks in a byte: what the evaluation
 * reads of a key (the DIRTY holder's T comes from a table by its bit). */
struct lk8 {
	int64_t kc;
	uint8_t mask, one, latest, dbit;
	uint16_t pos; /* its position in the samples */
	uint8_t cls;
};

/* Cost of a key needed by the workers of mask N != 0, n <= 8, without
 * branches: lo[] sums T over a mask, g[N] is lo[N] where N's trainers each
 * push a gradient (full-set sync, or N shared) and 0 where not, and td[]
 * is T of the worker of a one-bit mask (0 for none). */
static inline int64_t lk8_cost(const struct lk8 *x, uint32_t N, const int64_t *lo, const int64_t *g,
                               const int64_t *td)
{
	return lo[N & ~(uint32_t)x->latest] + g[N] + (N != x->dbit ? td[x->dbit] : 0);
}

/* lskey_cost for n <= 16 and N != 0 without branches (the local search's
 * inner loop: which keys change is a coin toss for the predictor). Equal
 * to lskey_cost: with td = 0 when nobody holds the key DIRTY, and the
 * same mask in and out giving the key's current cost. */
static inline int64_t lskey_cost16(const struct lskey *x, uint64_t N, const struct tsum *ts,
                                   int full)
{
	const uint64_t miss = N & ~x->latest;
	int64_t c = ts->lo[miss & 255] + ts->hi[(miss >> 8) & 255];
	c += N != x->dbit ? x->td : 0;
	const int64_t all = ts->lo[N & 255] + ts->hi[(N >> 8) & 255];
	c += (full | ((N & (N - 1)) != 0)) ? all : 0;
	return c;
}

/* A row class's tables: T's sums over masks, its T, and for the compact
 * entries g[] and td[] (lk8_cost). */
struct ls_cls {
	struct tsum ts;
	const int64_t *T;
	int64_t g[256], td[256];
};

/* The counting pass's entry of a key (n > 8): the workers holding it, its
 * counts' row (0: none yet, at most one occurrence per worker) and its
 * position in its samples plus one (0: not seen). */
struct lsent {
	uint64_t mask;
	uint32_t row, pos;
};

/* The search's state: per unique key its occurrences per worker (cnt),
 * its entry (K; K8, a compact copy, for positional batches of n <= 8),
 * stamps and scratch for evaluating a candidate, and the tables the cost
 * functions read. */
struct ls {
	const uint32_t *occ, *off;
	uint32_t n, k, U;
	int full;       /* full-set sync: every trainer pushes */
	int positional; /* every key at one position of its samples (n <= 16) */
	/* n <= 8: key u's occurrences on worker a at cnt[u * n + a]; more
	 * workers: n counts from pool[K[u].row] for a key some worker holds
	 * more than once (rows made when that first happens, from nrow on;
	 * pool[0..n) a sink for the other keys' counts), else its mask's bits */
	uint32_t *cnt, *pool;
	size_t nrow;
	struct lsent *E;
	struct lskey *K;
	struct lk8 *K8;
	uint32_t *stamp; /* stamps: 4 * w->gen + tag */
	struct esd_ls_work *w;
	int32_t *dd;
	uint32_t *touched;
	/* per row class (one without model.dims): its costs' tables */
	struct ls_cls *C;
	uint32_t ncls;
	/* K8: positions where some key is not saturated (needed everywhere,
	 * never alone on a worker), ascending */
	uint8_t live[256];
	uint16_t lpos[256];
	uint32_t nl, all;
};

struct esd_ls_work {
	uint32_t *cnt;
	struct lskey *K;
	struct lk8 *K8;
	uint32_t *stamp, gen; /* stamps of every call below 4 * (gen + 1) */
	int32_t *dd;
	uint32_t *touched, *pool;
	struct lsent *E;
	struct ls_cls *cls;
	size_t cap_cnt, cap_K, cap_K8, cap_stamp, cap_dd, cap_touched, cap_pool, cap_E, cap_cls;
};

int esd_ls_work_create(struct esd_ls_work **out)
{
	if (!out)
		return -EINVAL;
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

static void ls_work_release(struct esd_ls_work *w)
{
	free(w->cnt);
	free(w->K);
	free(w->K8);
	free(w->stamp);
	free(w->dd);
	free(w->touched);
	free(w->pool);
	free(w->E);
	free(w->cls);
}

void esd_ls_work_free(struct esd_ls_work *w)
{
	if (!w)
		return;
	ls_work_release(w);
	free(w);
}

/* The work's arrays for this call: the n <= 8 counts zeroed (the rows of
 * more workers are ls_count_rows'), stamps grown with zeros (older stamps
 * stay below the next generation); every key entry is written before use. */
static int ls_alloc(struct ls *L)
{
	struct esd_ls_work *w = L->w;
	const size_t U1 = (size_t)L->U + 1, ncnt = L->n <= 8 ? (size_t)L->U * L->n + 1 : 1;
	const size_t old_stamps = w->stamp ? w->cap_stamp : 0;
	if (esd_grow((void **)&w->cnt, &w->cap_cnt, ncnt, sizeof(uint32_t)) ||
	    esd_grow((void **)&w->K, &w->cap_K, U1, sizeof(*w->K)) ||
	    esd_grow((void **)&w->stamp, &w->cap_stamp, U1, sizeof(uint32_t)) ||
	    esd_grow((void **)&w->dd, &w->cap_dd, U1, sizeof(int32_t)) ||
	    esd_grow((void **)&w->touched, &w->cap_touched, (size_t)L->off[L->k] + 1,
	             sizeof(uint32_t)) ||
	    esd_grow((void **)&w->cls, &w->cap_cls, L->ncls, sizeof(*w->cls)))
		return -ENOMEM;
	if (w->cap_stamp > old_stamps)
		memset(w->stamp + old_stamps, 0, (w->cap_stamp - old_stamps) * sizeof(uint32_t));
	memset(w->cnt, 0, ncnt * sizeof(uint32_t));
	L->cnt = w->cnt;
	L->pool = NULL;
	L->K = w->K;
	L->stamp = w->stamp;
	L->dd = w->dd;
	L->touched = w->touched;
	L->C = w->cls;
	return 0;
}

/* A row for the key of entry *row: n counts from its mask (at most one
 * occurrence per worker so far). 0 or -ENOMEM. */
static int ls_new_row(struct ls *L, uint32_t *row, uint64_t mask)
{
	struct esd_ls_work *w = L->w;
	if (L->nrow + L->n > UINT32_MAX ||
	    esd_grow((void **)&w->pool, &w->cap_pool, L->nrow + L->n, sizeof(uint32_t)))
		return -ENOMEM;
	L->pool = w->pool;
	uint32_t *r = L->pool + L->nrow;
	memset(r, 0, L->n * sizeof(uint32_t));
	for (; mask; mask &= mask - 1)
		r[__builtin_ctzll(mask)] = 1;
	*row = (uint32_t)L->nrow;
	L->nrow += L->n;
	return 0;
}

/* Key u's occurrences on worker a (n <= 8: the counts; more workers: its
 * row, or its mask's bit). */
static inline uint32_t cnt_get(const struct ls *L, uint32_t u, uint32_t a)
{
	if (L->n <= 8)
		return L->cnt[(size_t)u * L->n + a];
	const struct lskey *x = &L->K[u];
	return x->row ? L->pool[x->row + a] : (uint32_t)(x->mask >> a & 1);
}

/* Move d of key u's occurrences from worker a to c (d < 0: the other
 * way); *na, *nc: its counts there after. A key gets its row when one of
 * them reaches 2. 0 or -ENOMEM. */
static int cnt_move(struct ls *L, uint32_t u, uint32_t a, uint32_t c, int32_t d, uint32_t *na,
                    uint32_t *nc)
{
	uint32_t *r;
	if (L->n <= 8) {
		r = L->cnt + (size_t)u * L->n;
	} else {
		struct lskey *x = &L->K[u];
		if (!x->row) {
			const int64_t xa = (int64_t)(x->mask >> a & 1) - d,
				      xc = (int64_t)(x->mask >> c & 1) + d;
			if (xa <= 1 && xc <= 1) {
				*na = (uint32_t)xa;
				*nc = (uint32_t)xc;
				return 0;
			}
			int rc = ls_new_row(L, &x->row, x->mask);
			if (rc)
				return rc;
		}
		r = L->pool + x->row;
	}
	r[a] -= (uint32_t)d;
	r[c] += (uint32_t)d;
	*na = r[a];
	*nc = r[c];
	return 0;
}

/* ls_count_rows' pass; with 'positions', whether some key sits at two
 * positions of its samples (only n <= 16 asks). 1 if so, 0 if not, or
 * -ENOMEM. */
static inline __attribute__((always_inline)) int count_rows_pass(struct ls *L,
                                                                 const uint32_t *assign,
                                                                 const int positions)
{
	struct lsent *E = L->E;
	uint32_t moved = 0;
	for (uint32_t i = 0; i < L->k; i++) {
		const uint32_t a = assign[i];
		const uint64_t bit = UINT64_C(1) << a;
		for (uint32_t q = L->off[i]; q < L->off[i + 1]; q++) {
			struct lsent *e = &E[L->occ[q]];
			if (__builtin_expect(!e->row && (e->mask & bit), 0)) {
				int rc = ls_new_row(L, &e->row, e->mask);
				if (rc)
					return rc;
			}
			L->pool[e->row + a]++;
			e->mask |= bit;
			if (positions) {
				const uint32_t at = q - L->off[i] + 1;
				moved |= (e->pos != 0) & (e->pos != at);
				e->pos = at;
			}
		}
	}
	return (int)moved;
}

/* Counts of the start assignment for n > 8, in one pass: each key's mask
 * in its entry, and its counts in a row from its first second occurrence
 * on a worker (the other keys count into the sink, without a branch);
 * *out_moved: whether some key sits at two positions (n <= 16; else 0).
 * 0 or -ENOMEM. */
static int ls_count_rows(struct ls *L, const uint32_t *assign, int *out_moved)
{
	struct esd_ls_work *w = L->w;
	if (esd_grow((void **)&w->E, &w->cap_E, (size_t)L->U + 1, sizeof(*w->E)) ||
	    esd_grow((void **)&w->pool, &w->cap_pool, L->n, sizeof(uint32_t)))
		return -ENOMEM;
	L->E = w->E;
	memset(L->E, 0, (size_t)L->U * sizeof(*L->E));
	L->pool = w->pool;
	memset(L->pool, 0, L->n * sizeof(uint32_t));
	L->nrow = L->n;
	const int r = L->n <= 16 ? count_rows_pass(L, assign, 1) : count_rows_pass(L, assign, 0);
	if (r < 0)
		return r;
	*out_moved = r;
	return 0;
}

/* Counts of the start assignment and each key's position in its samples
 * (dd; n > 8: ls_count_rows); the masks come from the counts
 * (ls_key_costs). *out_moved: whether some key sits at two positions.
 * 0 or -ENOMEM. */
static int ls_count(struct ls *L, const uint32_t *assign, int *out_moved)
{
	if (L->n > 8)
		return ls_count_rows(L, assign, out_moved);
	int moved = 0;
	for (uint32_t u = 0; u < L->U; u++)
		L->dd[u] = -1;
	for (uint32_t i = 0; i < L->k; i++) {
		const uint32_t a = assign[i];
		for (uint32_t q = L->off[i]; q < L->off[i + 1]; q++) {
			const uint32_t u = L->occ[q];
			const int32_t at = (int32_t)(q - L->off[i]);
			++L->cnt[(size_t)u * L->n + a];
			moved |= (L->dd[u] >= 0) & (L->dd[u] != at);
			L->dd[u] = at;
		}
	}
	*out_moved = moved;
	return 0;
}

/* The workers holding exactly one of the occurrences counted in a row. */
static uint64_t ls_one_row(const struct ls *L, uint32_t row)
{
	const uint32_t *r = L->pool + row;
	uint64_t on = 0;
	uint32_t j = 0;
#if defined(__SSE2__)
	const __m128i one = _mm_set1_epi32(1);
	for (; j + 4 <= L->n; j += 4) {
		const __m128i e = _mm_cmpeq_epi32(_mm_loadu_si128((const __m128i *)(r + j)), one);
		on |= (uint64_t)_mm_movemask_ps(_mm_castsi128_ps(e)) << j;
	}
#endif
	for (; j < L->n; j++)
		on |= (uint64_t)(r[j] == 1) << j;
	return on;
}

/* Key u's mask and one-occurrence mask from its counts, n <= 8. */
static inline void ls_masks8(const uint32_t *cu, uint32_t n, uint8_t *mask, uint8_t *one)
{
#if defined(__SSE2__)
	if (n == 8) {
		/* counts saturate to 16 bits: still nonzero, still not 1 */
		const __m128i c = _mm_packs_epi32(_mm_loadu_si128((const __m128i *)cu),
		                                  _mm_loadu_si128((const __m128i *)(cu + 4)));
		const __m128i z = _mm_cmpeq_epi16(c, _mm_setzero_si128()),
		              o = _mm_cmpeq_epi16(c, _mm_set1_epi16(1));
		const uint32_t m = (uint32_t)_mm_movemask_epi8(_mm_packs_epi16(z, o));
		*mask = (uint8_t)~m;
		*one = (uint8_t)(m >> 8);
		return;
	}
#endif
	uint32_t mk = 0, on = 0;
	for (uint32_t j = 0; j < n; j++) {
		mk |= (uint32_t)(cu[j] != 0) << j;
		on |= (uint32_t)(cu[j] == 1) << j;
	}
	*mask = (uint8_t)mk;
	*one = (uint8_t)on;
}

/* Each key's masks (from its counts), state and current true cost;
 * returns their sum. */
static int64_t ls_key_costs(struct ls *L, const struct esd_keytab *kt)
{
	int64_t cost = 0;
	for (uint32_t u = 0; u < L->U; u++) {
		const struct esd_keystate *ks = &kt->st[u];
		struct lskey *x = &L->K[u];
		if (L->n <= 8) {
			uint8_t mk, on;
			ls_masks8(L->cnt + (size_t)u * L->n, L->n, &mk, &on);
			x->mask = mk;
			x->one = on;
		} else {
			const struct lsent *e = &L->E[u];
			x->mask = e->mask;
			x->row = e->row;
			x->one = e->row ? ls_one_row(L, e->row) : e->mask;
		}
		x->latest = ks->latest;
		x->dbit = ks->dirty != ESD_NO_WORKER ? UINT64_C(1) << ks->dirty : 0;
		x->cls = esd_keytab_key_cls(kt, kt->ukeys[u]);
		x->td = ks->dirty != ESD_NO_WORKER ? L->C[x->cls].T[ks->dirty] : 0;
		x->kc = lskey_cost(x, x->mask, &L->C[x->cls].ts, L->full);
		cost += x->kc;
	}
	return cost;
}

/* The same straight into the compact entries (positional, n <= 8), with
 * the live positions. */
static int64_t ls_key_costs8(struct ls *L, const struct esd_keytab *kt)
{
	int64_t cost = 0;
	for (uint32_t u = 0; u < L->U; u++) {
		const struct esd_keystate *ks = &kt->st[u];
		struct lk8 *x = &L->K8[u];
		ls_masks8(L->cnt + (size_t)u * L->n, L->n, &x->mask, &x->one);
		x->latest = (uint8_t)ks->latest;
		x->dbit = ks->dirty != ESD_NO_WORKER ? (uint8_t)(1u << ks->dirty) : 0;
		x->pos = (uint16_t)L->dd[u];
		x->cls = (uint8_t)esd_keytab_key_cls(kt, kt->ukeys[u]);
		const struct ls_cls *C = &L->C[x->cls];
		/* a replicated key no sample carries: needed by none, cost 0 */
		x->kc = x->mask ? lk8_cost(x, x->mask, C->ts.lo, C->g, C->td) : 0;
		cost += x->kc;
		if (x->mask && (x->mask != L->all || x->one))
			L->live[x->pos] = 1;
	}
	return cost;
}

/* The longest sample's keys. */
static uint32_t ls_lmax(const struct ls *L)
{
	uint32_t lmax = 0;
	for (uint32_t i = 0; i < L->k; i++)
		if (L->off[i + 1] - L->off[i] > lmax)
			lmax = L->off[i + 1] - L->off[i];
	return lmax;
}

/* The start's keys: compact entries for positional batches of n <= 8
 * with samples of at most 256 keys (then the gradient-push and DIRTY
 * tables and the live positions too), the full entries otherwise.
 * Returns 0 or -ENOMEM; *cost: the start's true cost. */
static int ls_keys(struct ls *L, const struct esd_keytab *kt, int64_t *cost)
{
	const uint32_t lmax = ls_lmax(L);
	L->all = (uint32_t)((UINT64_C(1) << L->n) - 1);
	if (!(L->positional && L->n <= 8 && lmax <= 256)) {
		*cost = ls_key_costs(L, kt);
		return 0;
	}
	if (esd_grow((void **)&L->w->K8, &L->w->cap_K8, (size_t)L->U + 1, sizeof(*L->K8)))
		return -ENOMEM;
	L->K8 = L->w->K8;
	for (uint32_t c = 0; c < L->ncls; c++) {
		struct ls_cls *C = &L->C[c];
		for (uint32_t N = 0; N < 256; N++) {
			C->g[N] = L->full || (N & (N - 1)) ? C->ts.lo[N] : 0;
			/* one-bit masks of a worker in the job; the others never occur */
			const uint32_t j = N ? (uint32_t)__builtin_ctz(N) : 0;
			C->td[N] = N && !(N & (N - 1)) && j < L->n ? C->T[j] : 0;
		}
	}
	*cost = ls_key_costs8(L, kt);
	for (uint32_t q = 0; q < lmax; q++)
		if (L->live[q])
			L->lpos[L->nl++] = (uint16_t)q;
	return 0;
}

/* A candidate: samples i (at worker a, keys oi[li]) and i2 (at c). */
struct cand {
	const uint32_t *oi, *oi2;
	uint32_t li, li2, a, c;
};

/* The change of the true cost if the candidate swaps, on the compact copy
 * (positional, n <= 8): position by position, live positions only. */
static int64_t delta_compact(const struct ls *L, const struct cand *x)
{
	const uint32_t ba8 = 1u << x->a, bc8 = 1u << x->c;
	const uint32_t lm = x->li < x->li2 ? x->li : x->li2;
	int64_t delta = 0;
	for (uint32_t t = 0; t < L->nl && L->lpos[t] < lm; t++) {
		const uint32_t q = L->lpos[t];
		const uint32_t u = x->oi[q], v = x->oi2[q];
		const struct lk8 *ku = &L->K8[u], *kv = &L->K8[v];
		const uint32_t mx2 = (ku->mask & ~(ku->one & ba8)) | bc8;
		const uint32_t my2 = (kv->mask & ~(kv->one & bc8)) | ba8;
		const struct ls_cls *Cu = &L->C[ku->cls], *Cv = &L->C[kv->cls];
		const int64_t dq = lk8_cost(ku, mx2, Cu->ts.lo, Cu->g, Cu->td) - ku->kc +
		                   lk8_cost(kv, my2, Cv->ts.lo, Cv->g, Cv->td) - kv->kc;
		delta += u != v ? dq : 0;
	}
	for (uint32_t q = lm; q < x->li; q++) {
		const struct lk8 *ku = &L->K8[x->oi[q]];
		const uint32_t mx2 = (ku->mask & ~(ku->one & ba8)) | bc8;
		const struct ls_cls *Cu = &L->C[ku->cls];
		delta += lk8_cost(ku, mx2, Cu->ts.lo, Cu->g, Cu->td) - ku->kc;
	}
	for (uint32_t q = lm; q < x->li2; q++) {
		const struct lk8 *kv = &L->K8[x->oi2[q]];
		const uint32_t my2 = (kv->mask & ~(kv->one & bc8)) | ba8;
		const struct ls_cls *Cv = &L->C[kv->cls];
		delta += lk8_cost(kv, my2, Cv->ts.lo, Cv->g, Cv->td) - kv->kc;
	}
	return delta;
}

/* The same for positional batches of n <= 16, without branches on the
 * data: a key whose mask does not change adds its own cost minus itself;
 * a key both samples hold adds nothing. */
static int64_t delta_positional(const struct ls *L, const struct cand *x)
{
	const uint64_t ba = UINT64_C(1) << x->a, bc = UINT64_C(1) << x->c;
	const uint32_t lm = x->li < x->li2 ? x->li : x->li2;
	int64_t delta = 0;
	for (uint32_t q = 0; q < lm; q++) {
		const uint32_t u = x->oi[q], v = x->oi2[q];
		const struct lskey *ku = &L->K[u], *kv = &L->K[v];
		const uint64_t mx2 = (ku->mask & ~(ku->one & ba)) | bc;
		const uint64_t my2 = (kv->mask & ~(kv->one & bc)) | ba;
		const int64_t dq = lskey_cost16(ku, mx2, &L->C[ku->cls].ts, L->full) - ku->kc +
		                   lskey_cost16(kv, my2, &L->C[kv->cls].ts, L->full) - kv->kc;
		delta += u != v ? dq : 0;
	}
	for (uint32_t q = lm; q < x->li; q++) {
		const struct lskey *ku = &L->K[x->oi[q]];
		const uint64_t mx2 = (ku->mask & ~(ku->one & ba)) | bc;
		delta += lskey_cost16(ku, mx2, &L->C[ku->cls].ts, L->full) - ku->kc;
	}
	for (uint32_t q = lm; q < x->li2; q++) {
		const struct lskey *kv = &L->K[x->oi2[q]];
		const uint64_t my2 = (kv->mask & ~(kv->one & bc)) | ba;
		delta += lskey_cost16(kv, my2, &L->C[kv->cls].ts, L->full) - kv->kc;
	}
	return delta;
}

/* The same for samples without repeated keys, with stamps (tags: 1 = in
 * i2, 2 = in i only, 3 = in both); *slow set when a sample repeats a key
 * (then delta_any answers). */
static int64_t delta_stamped(struct ls *L, const struct cand *x, int *slow)
{
	const uint64_t ba = UINT64_C(1) << x->a, bc = UINT64_C(1) << x->c;
	const uint32_t G = next_gen(L->stamp, L->w->cap_stamp, &L->w->gen);
	int64_t delta = 0;
	*slow = 0;
	for (uint32_t q = 0; q < x->li2; q++) {
		const uint32_t u = x->oi2[q];
		if (L->stamp[u] == G + 1) {
			*slow = 1;
			return 0;
		}
		L->stamp[u] = G + 1;
	}
	for (uint32_t q = 0; q < x->li; q++) {
		const uint32_t u = x->oi[q], sv = L->stamp[u];
		if (sv == G + 1) {
			L->stamp[u] = G + 3;
			continue;
		}
		if (sv == G + 2 || sv == G + 3) {
			*slow = 1;
			return 0;
		}
		L->stamp[u] = G + 2;
		const struct lskey *k = &L->K[u];
		const uint64_t m = k->mask, m2 = (m & ~(k->one & ba)) | bc;
		if (m2 != m)
			delta += lskey_cost(k, m2, &L->C[k->cls].ts, L->full) - k->kc;
	}
	for (uint32_t q = 0; q < x->li2; q++) {
		const uint32_t u = x->oi2[q];
		if (L->stamp[u] == G + 3)
			continue;
		const struct lskey *k = &L->K[u];
		const uint64_t m = k->mask, m2 = (m & ~(k->one & bc)) | ba;
		if (m2 != m)
			delta += lskey_cost(k, m2, &L->C[k->cls].ts, L->full) - k->kc;
	}
	return delta;
}

/* Any samples: the net occurrences of each key moving a -> c (listed in
 * L->touched, *nt of them), and the change from them. */
static int64_t delta_any(struct ls *L, const struct cand *x, uint32_t *nt)
{
	const uint64_t ba = UINT64_C(1) << x->a, bc = UINT64_C(1) << x->c;
	int64_t delta = 0;
	*nt =
	    net_moves(x->oi, x->li, x->oi2, x->li2, next_gen(L->stamp, L->w->cap_stamp, &L->w->gen),
	              L->stamp, L->dd, L->touched);
	for (uint32_t t = 0; t < *nt; t++) {
		const uint32_t u = L->touched[t];
		const int32_t d = L->dd[u];
		if (!d)
			continue;
		const uint32_t ca = cnt_get(L, u, x->a), cc = cnt_get(L, u, x->c);
		const uint64_t m = L->K[u].mask;
		const uint64_t m2 =
		    (m & ~(ba | bc)) | (ca != (uint32_t)d ? ba : 0) | (cc + (uint32_t)d ? bc : 0);
		if (m2 != m)
			delta += lskey_cost(&L->K[u], m2, &L->C[L->K[u].cls].ts, L->full) - L->K[u].kc;
	}
	return delta;
}

/* K8: a position comes alive (some key there no longer saturated): into
 * the ascending list. */
static void ls_position_alive(struct ls *L, uint16_t at)
{
	L->live[at] = 1;
	uint32_t z = L->nl++;
	for (; z > 0 && L->lpos[z - 1] > at; z--)
		L->lpos[z] = L->lpos[z - 1];
	L->lpos[z] = at;
}

/* Take the swap: the nt touched keys' counts, masks and costs. 0 or
 * -ENOMEM (a key's new row). */
static int take_swap(struct ls *L, const struct cand *x, uint32_t nt)
{
	const uint64_t ba = UINT64_C(1) << x->a, bc = UINT64_C(1) << x->c;
	for (uint32_t t = 0; t < nt; t++) {
		const uint32_t u = L->touched[t];
		const int32_t d = L->dd[u];
		if (!d)
			continue;
		uint32_t na, nc;
		int rc = cnt_move(L, u, x->a, x->c, d, &na, &nc);
		if (rc)
			return rc;
		struct lskey *k = &L->K[u];
		const uint64_t m = k->mask;
		const uint64_t m2 = (m & ~(ba | bc)) | (na ? ba : 0) | (nc ? bc : 0);
		k->one = (k->one & ~(ba | bc)) | (na == 1 ? ba : 0) | (nc == 1 ? bc : 0);
		if (m2 != m) {
			k->mask = m2;
			k->kc = lskey_cost(k, m2, &L->C[k->cls].ts, L->full);
		}
	}
	return 0;
}

/* Compact entries: key u's occurrence moves from worker a to c. */
static void move8(struct ls *L, uint32_t u, uint32_t a, uint32_t c)
{
	uint32_t *cu = L->cnt + (size_t)u * L->n;
	const uint32_t na = --cu[a], nc = ++cu[c], ba = 1u << a, bc = 1u << c;
	struct lk8 *x = &L->K8[u];
	x->mask = (uint8_t)((x->mask & ~ba) | (na ? ba : 0) | bc);
	x->one = (uint8_t)((x->one & ~(ba | bc)) | (na == 1 ? ba : 0) | (nc == 1 ? bc : 0));
	const struct ls_cls *C = &L->C[x->cls];
	x->kc = lk8_cost(x, x->mask, C->ts.lo, C->g, C->td);
	if (!L->live[x->pos] && (x->mask != L->all || x->one))
		ls_position_alive(L, x->pos);
}

/* Take the swap on the compact entries: position by position, a key of
 * one sample moves one occurrence, a key of both stays. */
static void take_swap8(struct ls *L, const struct cand *x)
{
	const uint32_t lm = x->li < x->li2 ? x->li : x->li2;
	for (uint32_t q = 0; q < lm; q++) {
		const uint32_t u = x->oi[q], v = x->oi2[q];
		if (u != v) {
			move8(L, u, x->a, x->c);
			move8(L, v, x->c, x->a);
		}
	}
	for (uint32_t q = lm; q < x->li; q++)
		move8(L, x->oi[q], x->a, x->c);
	for (uint32_t q = lm; q < x->li2; q++)
		move8(L, x->oi2[q], x->c, x->a);
}

/* Evaluate the candidate swap of samples i and i2 and take it when it
 * lowers the true cost. Returns 1 when taken, 0 when not, 2 when the two
 * sit on the same worker (not counted as an evaluation), -ENOMEM. */
static int try_swap(struct ls *L, uint32_t *assign, uint32_t i, uint32_t i2, int64_t *cost)
{
	const uint32_t a = assign[i], c = assign[i2];
	if (a == c)
		return 2;
	const struct cand x = {L->occ + L->off[i],
	                       L->occ + L->off[i2],
	                       L->off[i + 1] - L->off[i],
	                       L->off[i2 + 1] - L->off[i2],
	                       a,
	                       c};
	int slow = 0;
	uint32_t nt = 0;
	/* fast paths for samples without repeated keys: a key of one sample
	 * only moves one occurrence (its mask loses a worker when that was
	 * its only occurrence there, and gains the other); a key of both does
	 * not change */
	int64_t delta = L->K8           ? delta_compact(L, &x)
	                : L->positional ? delta_positional(L, &x)
	                                : delta_stamped(L, &x, &slow);
	if (slow)
		delta = delta_any(L, &x, &nt);
	if (delta >= 0)
		return 0;
	if (L->K8) {
		take_swap8(L, &x);
	} else {
		if (!slow)
			nt = net_moves(x.oi, x.li, x.oi2, x.li2,
			               next_gen(L->stamp, L->w->cap_stamp, &L->w->gen), L->stamp,
			               L->dd, L->touched);
		int rc = take_swap(L, &x, nt);
		if (rc)
			return rc;
	}
	assign[i] = c;
	assign[i2] = a;
	*cost += delta;
	return 1;
}

/* Each key's workers under the final assignment, into need. */
static void ls_need(const struct ls *L, uint64_t *need)
{
	if (L->K8)
		for (uint32_t u = 0; u < L->U; u++)
			need[u] = L->K8[u].mask;
	else
		for (uint32_t u = 0; u < L->U; u++)
			need[u] = L->K[u].mask;
}

/* The search's swaps: up to p->max_evals random pairs of samples, each
 * taken when it lowers the cost, within p->budget_ns of t0. */
static int ls_swaps(struct ls *L, const struct esd_ls_params *p, uint32_t *assign, int64_t t0,
                    int64_t *cost, struct esd_ls_stats *s0)
{
	/* The candidates do not depend on the moves taken: draw them AHEAD
	 * evaluations early and prefetch their key lists. (Prefetching the
	 * keys' entries as well measured slower: they are in L2.) */
	const uint32_t k = L->k, n = L->n;
	enum { AHEAD = 4 };
	uint32_t ring[4 * AHEAD][2];
	uint64_t rng = p->seed, drawn = 0;
	for (; k >= 2 && n >= 2 && drawn < p->max_evals && drawn < 2 * AHEAD; drawn++) {
		ring[drawn % (4 * AHEAD)][0] = (uint32_t)(esd_splitmix64_next(&rng) % k);
		ring[drawn % (4 * AHEAD)][1] = (uint32_t)(esd_splitmix64_next(&rng) % k);
	}
	for (uint64_t e = 0; k >= 2 && n >= 2 && e < p->max_evals; e++) {
		if (p->budget_ns && (e & 63) == 0 && esd_now_ns() - t0 > p->budget_ns)
			break;
		if (drawn < p->max_evals) {
			uint32_t *r = ring[drawn % (4 * AHEAD)];
			r[0] = (uint32_t)(esd_splitmix64_next(&rng) % k);
			r[1] = (uint32_t)(esd_splitmix64_next(&rng) % k);
			__builtin_prefetch(L->occ + L->off[r[0]]);
			__builtin_prefetch(L->occ + L->off[r[1]]);
			drawn++;
		}
		const uint32_t *c = ring[e % (4 * AHEAD)];
		int r = try_swap(L, assign, c[0], c[1], cost);
		if (r < 0)
			return r;
		s0->evals += r <= 1;
		s0->swaps += r == 1;
	}
	return 0;
}

int esd_local_search(const struct esd_keytab *kt, const struct esd_batch *b, const int64_t *T,
                     enum esd_sync sync, const struct esd_ls_params *p, uint32_t *assign,
                     struct esd_ls_stats *st)
{
	if (!kt || !b || !T || !p || !assign || b->k != kt->k ||
	    (b->k && b->off[b->k] != kt->nocc) || sync > ESD_SYNC_FULL_SET)
		return -EINVAL;
	for (uint32_t i = 0; i < b->k; i++)
		if (assign[i] >= kt->n)
			return -EINVAL;
	struct esd_ls_stats s0 = {0};
	int64_t t0 = esd_now_ns();
	struct ls *L = calloc(1, sizeof(*L));
	if (!L)
		return -ENOMEM;
	struct esd_ls_work own = {0};
	*L = (struct ls){.occ = kt->occ,
	                 .off = b->off,
	                 .n = kt->n,
	                 .k = b->k,
	                 .U = kt->count,
	                 .full = sync == ESD_SYNC_FULL_SET,
	                 .w = p->work ? p->work : &own,
	                 /* per row class (model.dims): its rows' costs */
	                 .ncls = kt->ncls > 1 ? kt->ncls : 1};
	const int64_t *Tc = L->ncls > 1 ? esd_keytab_class_T((struct esd_keytab *)kt, T) : T;
	int rc = Tc ? ls_alloc(L) : -ENOMEM;
	if (rc)
		goto out;
	for (uint32_t c = 0; c < L->ncls; c++) {
		L->C[c].T = Tc + (size_t)c * L->n;
		tsum_init(&L->C[c].ts, L->C[c].T, L->n);
	}
	/* Positional batches (Criteo's: one key per table, tables in the
	 * same order in every sample): every key sits at one position of the
	 * samples that carry it. Then a sample holds no key twice, and two
	 * samples share a key only at the same position, so a candidate is
	 * evaluated position by position with no stamps. */
	int moved = 0;
	if ((rc = ls_count(L, assign, &moved)))
		goto out;
	L->positional = L->n <= 16 && !moved;
	int64_t cost = 0;
	if ((rc = ls_keys(L, kt, &cost)))
		goto out;
	s0.start_cost = cost;
	if ((rc = ls_swaps(L, p, assign, t0, &cost, &s0)))
		goto out;
	s0.end_cost = cost;
	if (p->need)
		ls_need(L, p->need);
	s0.ns = esd_now_ns() - t0;
	if (st)
		*st = s0;
out:
	ls_work_release(&own);
	free(L);
	return rc;
}
