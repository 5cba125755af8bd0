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

/* Sum of T_j over the workers of a mask: a table for small n (8 bits at a
 * time), so the cost of a key is a few lookups. */
struct tsum {
	uint32_t n;
	int64_t lo[256], hi[256]; /* bits 0-7 and 8-15 */
	const int64_t *T;
};

static void tsum_init(struct tsum *ts, const int64_t *T, uint32_t n)
{
	ts->n = n;
	ts->T = T;
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
}

static inline int64_t tsum(const struct tsum *ts, uint64_t m)
{
	if (m < (UINT64_C(1) << 16))
		return ts->lo[m & 255] + ts->hi[m >> 8];
	int64_t c = 0;
	for (; m; m &= m - 1)
		c += ts->T[__builtin_ctzll(m)];
	return c;
}

/* A fresh stamp base (4 * generation; tags 0..3 above it), clearing the
 * stamps when the generations wrap. */
static inline uint32_t next_gen(uint32_t *stamp, uint32_t U, uint32_t *gen)
{
	if (++*gen == (UINT32_C(1) << 30)) {
		memset(stamp, 0, ((size_t)U + 1) * sizeof(uint32_t));
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

/* The same for n <= 8 in 24 bytes, masks in a byte: what the evaluation
 * reads of a key. */
struct lk8 {
	int64_t kc, td;
	uint8_t mask, one, latest, dbit;
	uint16_t pos; /* its position in the samples */
	uint8_t cls;
};

/* Cost of a key needed by the workers of mask N != 0, n <= 8, without
 * branches: lo[] sums T over a mask, g[N] is lo[N] where N's trainers each
 * push a gradient (full-set sync, or N shared) and 0 where not. */
static inline int64_t lk8_cost(const struct lk8 *x, uint32_t N, const int64_t *lo, const int64_t *g)
{
	return lo[N & ~(uint32_t)x->latest] + g[N] + (N != x->dbit ? x->td : 0);
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

/* The search's state: per unique key its occurrences per worker (cnt),
 * its entry (K; K8, a compact copy, for positional batches of n <= 8),
 * stamps and scratch for evaluating a candidate, and the tables the cost
 * functions read. */
struct ls {
	const uint32_t *occ, *off;
	uint32_t n, k, U;
	int full;       /* full-set sync: every trainer pushes */
	int positional; /* every key at one position of its samples (n <= 16) */
	uint32_t *cnt;
	struct lskey *K;
	struct lk8 *K8;
	uint32_t *stamp, gen; /* stamps: 4 * gen + tag */
	int32_t *dd;
	uint32_t *touched;
	struct tsum ts[ESD_ROW_CLASSES]; /* per row class (one without model.dims) */
	int64_t g[ESD_ROW_CLASSES][256];
	uint32_t ncls;
	/* K8: positions where some key is not saturated (needed everywhere,
	 * never alone on a worker), ascending */
	uint8_t live[256];
	uint16_t lpos[256];
	uint32_t nl, all;
};

static void ls_free(struct ls *L)
{
	free(L->cnt);
	free(L->K);
	free(L->K8);
	free(L->stamp);
	free(L->dd);
	free(L->touched);
}

static int ls_alloc(struct ls *L)
{
	L->cnt = calloc((size_t)L->U * L->n + 1, sizeof(uint32_t));
	L->K = calloc((size_t)L->U + 1, sizeof(*L->K));
	L->stamp = calloc((size_t)L->U + 1, sizeof(uint32_t));
	L->dd = malloc(((size_t)L->U + 1) * sizeof(int32_t));
	L->touched = malloc(((size_t)L->off[L->k] + 1) * sizeof(uint32_t));
	return L->cnt && L->K && L->stamp && L->dd && L->touched ? 0 : -ENOMEM;
}

/* Counts and masks of the start assignment, the workers holding exactly
 * one occurrence of each key, and each key's position in its samples
 * (dd). Returns whether some key sits at two positions. */
static int ls_count(struct ls *L, const uint32_t *assign)
{
	int moved = 0;
	for (uint32_t u = 0; u < L->U; u++)
		L->dd[u] = -1;
	for (uint32_t i = 0; i < L->k; i++) {
		const uint64_t bit = UINT64_C(1) << assign[i];
		for (uint32_t q = L->off[i]; q < L->off[i + 1]; q++) {
			const uint32_t u = L->occ[q];
			const int32_t at = (int32_t)(q - L->off[i]);
			const uint32_t c = ++L->cnt[(size_t)u * L->n + assign[i]];
			L->K[u].mask |= bit;
			/* one: the bit goes on at the first occurrence, off at
			 * the second */
			L->K[u].one ^= c <= 2 ? bit : 0;
			moved |= (L->dd[u] >= 0) & (L->dd[u] != at);
			L->dd[u] = at;
		}
	}
	return moved;
}

/* Each key's state and current true cost; returns their sum. */
static int64_t ls_key_costs(struct ls *L, const struct esd_keytab *kt)
{
	int64_t cost = 0;
	for (uint32_t u = 0; u < L->U; u++) {
		const struct esd_keystate *ks = &kt->st[u];
		struct lskey *x = &L->K[u];
		x->latest = ks->latest;
		x->dbit = ks->dirty != ESD_NO_WORKER ? UINT64_C(1) << ks->dirty : 0;
		x->cls = esd_keytab_key_cls(kt, kt->ukeys[u]);
		const int64_t *Tx = L->ts[x->cls].T;
		x->td = ks->dirty != ESD_NO_WORKER ? Tx[ks->dirty] : 0;
		x->kc = lskey_cost(x, x->mask, &L->ts[x->cls], L->full);
		cost += x->kc;
	}
	return cost;
}

/* Positional batches of n <= 8 with samples of at most 256 keys: the
 * compact copy of the keys, their live positions and the gradient-push
 * table. 0 (also when not applicable) or -ENOMEM. */
static int ls_compact(struct ls *L)
{
	uint32_t lmax = 0;
	for (uint32_t i = 0; i < L->k; i++)
		if (L->off[i + 1] - L->off[i] > lmax)
			lmax = L->off[i + 1] - L->off[i];
	L->all = (uint32_t)((UINT64_C(1) << L->n) - 1);
	if (!(L->positional && L->n <= 8 && lmax <= 256))
		return 0;
	L->K8 = malloc(((size_t)L->U + 1) * sizeof(*L->K8));
	if (!L->K8)
		return -ENOMEM;
	for (uint32_t u = 0; u < L->U; u++) {
		const struct lskey *x = &L->K[u];
		L->K8[u] = (struct lk8){x->kc,
		                        x->td,
		                        (uint8_t)x->mask,
		                        (uint8_t)x->one,
		                        (uint8_t)x->latest,
		                        (uint8_t)x->dbit,
		                        (uint16_t)L->dd[u],
		                        (uint8_t)x->cls};
	}
	for (uint32_t u = 0; u < L->U; u++)
		if (L->K8[u].mask != L->all || L->K8[u].one)
			L->live[L->K8[u].pos] = 1;
	for (uint32_t q = 0; q < lmax; q++)
		if (L->live[q])
			L->lpos[L->nl++] = (uint16_t)q;
	for (uint32_t c = 0; c < L->ncls; c++)
		for (uint32_t N = 0; N < 256; N++)
			L->g[c][N] = L->full || (N & (N - 1)) ? L->ts[c].lo[N] : 0;
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
		const int64_t dq = lk8_cost(ku, mx2, L->ts[ku->cls].lo, L->g[ku->cls]) - ku->kc +
		                   lk8_cost(kv, my2, L->ts[kv->cls].lo, L->g[kv->cls]) - kv->kc;
		delta += u != v ? dq : 0;
	}
	for (uint32_t q = lm; q < x->li; q++) {
		const struct lk8 *ku = &L->K8[x->oi[q]];
		const uint32_t mx2 = (ku->mask & ~(ku->one & ba8)) | bc8;
		delta += lk8_cost(ku, mx2, L->ts[ku->cls].lo, L->g[ku->cls]) - ku->kc;
	}
	for (uint32_t q = lm; q < x->li2; q++) {
		const struct lk8 *kv = &L->K8[x->oi2[q]];
		const uint32_t my2 = (kv->mask & ~(kv->one & bc8)) | ba8;
		delta += lk8_cost(kv, my2, L->ts[kv->cls].lo, L->g[kv->cls]) - kv->kc;
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
		const int64_t dq = lskey_cost16(ku, mx2, &L->ts[ku->cls], L->full) - ku->kc +
		                   lskey_cost16(kv, my2, &L->ts[kv->cls], L->full) - kv->kc;
		delta += u != v ? dq : 0;
	}
	for (uint32_t q = lm; q < x->li; q++) {
		const struct lskey *ku = &L->K[x->oi[q]];
		const uint64_t mx2 = (ku->mask & ~(ku->one & ba)) | bc;
		delta += lskey_cost16(ku, mx2, &L->ts[ku->cls], L->full) - ku->kc;
	}
	for (uint32_t q = lm; q < x->li2; q++) {
		const struct lskey *kv = &L->K[x->oi2[q]];
		const uint64_t my2 = (kv->mask & ~(kv->one & bc)) | ba;
		delta += lskey_cost16(kv, my2, &L->ts[kv->cls], L->full) - kv->kc;
	}
	return delta;
}

/* The same for samples without repeated keys, with stamps (tags: 1 = in
 * i2, 2 = in i only, 3 = in both); *slow set when a sample repeats a key
 * (then delta_any answers). */
static int64_t delta_stamped(struct ls *L, const struct cand *x, int *slow)
{
	const uint64_t ba = UINT64_C(1) << x->a, bc = UINT64_C(1) << x->c;
	const uint32_t G = next_gen(L->stamp, L->U, &L->gen);
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
			delta += lskey_cost(k, m2, &L->ts[k->cls], L->full) - k->kc;
	}
	for (uint32_t q = 0; q < x->li2; q++) {
		const uint32_t u = x->oi2[q];
		if (L->stamp[u] == G + 3)
			continue;
		const struct lskey *k = &L->K[u];
		const uint64_t m = k->mask, m2 = (m & ~(k->one & bc)) | ba;
		if (m2 != m)
			delta += lskey_cost(k, m2, &L->ts[k->cls], L->full) - k->kc;
	}
	return delta;
}

/* Any samples: the net occurrences of each key moving a -> c (listed in
 * L->touched, *nt of them), and the change from them. */
static int64_t delta_any(struct ls *L, const struct cand *x, uint32_t *nt)
{
	const uint64_t ba = UINT64_C(1) << x->a, bc = UINT64_C(1) << x->c;
	int64_t delta = 0;
	*nt = net_moves(x->oi, x->li, x->oi2, x->li2, next_gen(L->stamp, L->U, &L->gen), L->stamp,
	                L->dd, L->touched);
	for (uint32_t t = 0; t < *nt; t++) {
		const uint32_t u = L->touched[t];
		const int32_t d = L->dd[u];
		if (!d)
			continue;
		const uint32_t *cu = L->cnt + (size_t)u * L->n;
		const uint64_t m = L->K[u].mask;
		const uint64_t m2 = (m & ~(ba | bc)) | (cu[x->a] != (uint32_t)d ? ba : 0) |
		                    (cu[x->c] + (uint32_t)d ? bc : 0);
		if (m2 != m)
			delta += lskey_cost(&L->K[u], m2, &L->ts[L->K[u].cls], L->full) - L->K[u].kc;
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

/* Take the swap: the nt touched keys' counts, masks and costs. */
static void take_swap(struct ls *L, const struct cand *x, uint32_t nt)
{
	const uint64_t ba = UINT64_C(1) << x->a, bc = UINT64_C(1) << x->c;
	for (uint32_t t = 0; t < nt; t++) {
		const uint32_t u = L->touched[t];
		const int32_t d = L->dd[u];
		if (!d)
			continue;
		uint32_t *cu = L->cnt + (size_t)u * L->n;
		cu[x->a] -= (uint32_t)d;
		cu[x->c] += (uint32_t)d;
		struct lskey *k = &L->K[u];
		const uint64_t m = k->mask;
		const uint64_t m2 = (m & ~(ba | bc)) | (cu[x->a] ? ba : 0) | (cu[x->c] ? bc : 0);
		k->one = (k->one & ~(ba | bc)) | (cu[x->a] == 1 ? ba : 0) | (cu[x->c] == 1 ? bc : 0);
		if (m2 != m) {
			k->mask = m2;
			k->kc = lskey_cost(k, m2, &L->ts[k->cls], L->full);
		}
		if (L->K8) {
			L->K8[u].mask = (uint8_t)k->mask;
			L->K8[u].one = (uint8_t)k->one;
			L->K8[u].kc = k->kc;
			const uint16_t at = L->K8[u].pos;
			if (!L->live[at] && (L->K8[u].mask != L->all || L->K8[u].one))
				ls_position_alive(L, at);
		}
	}
}

/* Evaluate the candidate swap of samples i and i2 and take it when it
 * lowers the true cost. Returns 1 when taken, 0 when not, -1 when the
 * two sit on the same worker (not counted as an evaluation). */
static int try_swap(struct ls *L, uint32_t *assign, uint32_t i, uint32_t i2, int64_t *cost)
{
	const uint32_t a = assign[i], c = assign[i2];
	if (a == c)
		return -1;
	const struct cand x = {L->occ + L->off[i], L->occ + L->off[i2], L->off[i + 1] - L->off[i],
	                       L->off[i2 + 1] - L->off[i2], a, c};
	int slow = 0;
	uint32_t nt = 0;
	/* fast paths for samples without repeated keys: a key of one sample
	 * only moves one occurrence (its mask loses a worker when that was
	 * its only occurrence there, and gains the other); a key of both does
	 * not change */
	int64_t delta = L->K8 ? delta_compact(L, &x)
	                : L->positional ? delta_positional(L, &x)
	                                : delta_stamped(L, &x, &slow);
	if (slow)
		delta = delta_any(L, &x, &nt);
	if (delta >= 0)
		return 0;
	if (!slow)
		nt = net_moves(x.oi, x.li, x.oi2, x.li2, next_gen(L->stamp, L->U, &L->gen), L->stamp,
		               L->dd, L->touched);
	take_swap(L, &x, nt);
	assign[i] = c;
	assign[i2] = a;
	*cost += delta;
	return 1;
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
	*L = (struct ls){.occ = kt->occ, .off = b->off, .n = kt->n, .k = b->k, .U = kt->count,
	                 .full = sync == ESD_SYNC_FULL_SET};
	int rc = ls_alloc(L);
	if (rc)
		goto out;
	/* per row class (model.dims): its rows' costs */
	L->ncls = kt->ncls > 1 ? kt->ncls : 1;
	const int64_t *Tc = L->ncls > 1 ? esd_keytab_class_T((struct esd_keytab *)kt, T) : T;
	if (!Tc) {
		rc = -ENOMEM;
		goto out;
	}
	for (uint32_t c = 0; c < L->ncls; c++)
		tsum_init(&L->ts[c], Tc + (size_t)c * L->n, L->n);
	/* Positional batches (Criteo's: one key per table, tables in the
	 * same order in every sample): every key sits at one position of the
	 * samples that carry it. Then a sample holds no key twice, and two
	 * samples share a key only at the same position, so a candidate is
	 * evaluated position by position with no stamps. */
	const int moved = ls_count(L, assign);
	L->positional = L->n <= 16 && !moved;
	int64_t cost = ls_key_costs(L, kt);
	s0.start_cost = cost;
	if ((rc = ls_compact(L)))
		goto out;
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
		int r = try_swap(L, assign, ring[e % (4 * AHEAD)][0], ring[e % (4 * AHEAD)][1], &cost);
		s0.evals += r >= 0;
		s0.swaps += r > 0;
	}
	s0.end_cost = cost;
	s0.ns = esd_now_ns() - t0;
	if (st)
		*st = s0;
out:
	ls_free(L);
	free(L);
	return rc;
}
