/*
 * Local search on the true cost (esd/dispatch_quality.h): improves any
 * method's assignment by swapping samples between workers (capacities stay
 * exact), accepting a swap only when the exact change of the true cost of
 * DESIGN §3 steps 1, 3 and 6 is negative. The change is exact because the
 * true cost is a sum over unique keys of a function of the set of workers
 * that need the key: a swap only changes the sets of the two samples' keys.
 * Candidates come from a seeded generator and the budget counts
 * evaluations, so every node makes the same moves; an optional time budget
 * (not reproducible) serves offline tools.
 */
#include "keytab_internal.h"

#include <esd/clock.h>
#include <esd/dispatch_quality.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static uint64_t next(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
	z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

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

int esd_local_search(const struct esd_keytab *kt, const struct esd_batch *b, const int64_t *T,
                     enum esd_sync sync, const struct esd_ls_params *p, uint32_t *assign,
                     struct esd_ls_stats *st)
{
	if (!kt || !b || !T || !p || !assign || b->k != kt->k ||
	    (b->k && b->off[b->k] != kt->nocc) || sync > ESD_SYNC_FULL_SET)
		return -EINVAL;
	const uint32_t n = kt->n, k = b->k, U = kt->count;
	for (uint32_t i = 0; i < k; i++)
		if (assign[i] >= n)
			return -EINVAL;
	struct esd_ls_stats s0 = {0};
	int64_t t0 = esd_now_ns();
	/* per unique key: occurrences per worker, the mask of workers that
	 * need it, its current true cost, and for the candidate being
	 * evaluated a stamp and the net number of its occurrences leaving
	 * worker a for worker c */
	uint32_t *cnt = calloc((size_t)U * n + 1, sizeof(uint32_t));
	struct lskey *K = calloc((size_t)U + 1, sizeof(*K));
	uint32_t *stamp = calloc((size_t)U + 1, sizeof(uint32_t));
	int32_t *dd = malloc(((size_t)U + 1) * sizeof(int32_t));
	uint32_t *touched = malloc(((size_t)b->off[k] + 1) * sizeof(uint32_t));
	struct lk8 *K8 = NULL; /* n <= 8: the evaluation reads a compact copy of K */
	int rc = 0;
	if (!cnt || !K || !stamp || !dd || !touched) {
		rc = -ENOMEM;
		goto out;
	}
	struct tsum ts;
	tsum_init(&ts, T, n);
	const uint32_t *occ = kt->occ;
	/* counts, masks, and each key's position in its samples (dd, -1:
	 * none yet; moved records a key seen at two positions) */
	for (uint32_t u = 0; u < U; u++)
		dd[u] = -1;
	int moved = 0;
	for (uint32_t i = 0; i < k; i++) {
		const uint64_t bit = UINT64_C(1) << assign[i];
		for (uint32_t q = b->off[i]; q < b->off[i + 1]; q++) {
			const uint32_t u = occ[q];
			const int32_t at = (int32_t)(q - b->off[i]);
			cnt[(size_t)u * n + assign[i]]++;
			K[u].mask |= bit;
			moved |= (dd[u] >= 0) & (dd[u] != at);
			dd[u] = at;
		}
	}
	const int full = sync == ESD_SYNC_FULL_SET;
	int64_t cost = 0;
	for (uint32_t u = 0; u < U; u++) {
		const struct esd_keystate *ks = &kt->st[u];
		struct lskey *x = &K[u];
		x->latest = ks->latest;
		x->dbit = ks->dirty != ESD_NO_WORKER ? UINT64_C(1) << ks->dirty : 0;
		x->td = ks->dirty != ESD_NO_WORKER ? T[ks->dirty] : 0;
		for (uint32_t j = 0; j < n; j++)
			x->one |= (uint64_t)(cnt[(size_t)u * n + j] == 1) << j;
		x->kc = lskey_cost(x, x->mask, &ts, full);
		cost += x->kc;
	}
	s0.start_cost = cost;
	/* Positional batches (Criteo's: one key per table, tables in the
	 * same order in every sample): every key sits at one position of the
	 * samples that carry it. Then a sample holds no key twice, and two
	 * samples share a key only at the same position, so a candidate is
	 * evaluated position by position with no stamps. */
	const int positional = n <= 16 && !moved;
	int64_t g[256];
	uint32_t lmax = 0;
	for (uint32_t i = 0; i < k; i++)
		if (b->off[i + 1] - b->off[i] > lmax)
			lmax = b->off[i + 1] - b->off[i];
	/* Positions where some key is not saturated (needed everywhere, never
	 * alone on a worker): a saturated key's mask cannot change, so the
	 * others are skipped. Keys only leave saturation on a taken swap. */
	uint8_t live[256] = {0};
	uint16_t lpos[256];
	uint32_t nl = 0;
	const uint32_t all = (uint32_t)((UINT64_C(1) << n) - 1);
	if (positional && n <= 8 && lmax <= 256) {
		K8 = malloc(((size_t)U + 1) * sizeof(*K8));
		if (!K8) {
			rc = -ENOMEM;
			goto out;
		}
		for (uint32_t u = 0; u < U; u++)
			K8[u] = (struct lk8){K[u].kc,
			                     K[u].td,
			                     (uint8_t)K[u].mask,
			                     (uint8_t)K[u].one,
			                     (uint8_t)K[u].latest,
			                     (uint8_t)K[u].dbit,
			                     (uint16_t)dd[u]};
		for (uint32_t u = 0; u < U; u++) {
			if (K8[u].mask != all || K8[u].one)
				live[K8[u].pos] = 1;
		}
		for (uint32_t q = 0; q < lmax; q++)
			if (live[q])
				lpos[nl++] = (uint16_t)q;
		for (uint32_t N = 0; N < 256; N++)
			g[N] = full || (N & (N - 1)) ? ts.lo[N] : 0;
	}
	uint64_t rng = p->seed;
	uint32_t gen = 0; /* stamps: 4 * gen + tag */
	/* The candidates do not depend on the moves taken: draw them AHEAD
	 * evaluations early and prefetch their key lists. (Prefetching the
	 * keys' entries as well measured slower: they are in L2.) */
	enum { AHEAD = 4 };
	uint32_t ring[4 * AHEAD][2];
	uint64_t drawn = 0;
	for (; k >= 2 && n >= 2 && drawn < p->max_evals && drawn < 2 * AHEAD; drawn++) {
		ring[drawn % (4 * AHEAD)][0] = (uint32_t)(next(&rng) % k);
		ring[drawn % (4 * AHEAD)][1] = (uint32_t)(next(&rng) % k);
	}
	for (uint64_t e = 0; k >= 2 && n >= 2 && e < p->max_evals; e++) {
		if (p->budget_ns && (e & 63) == 0 && esd_now_ns() - t0 > p->budget_ns)
			break;
		if (drawn < p->max_evals) {
			uint32_t *r = ring[drawn % (4 * AHEAD)];
			r[0] = (uint32_t)(next(&rng) % k);
			r[1] = (uint32_t)(next(&rng) % k);
			__builtin_prefetch(occ + b->off[r[0]]);
			__builtin_prefetch(occ + b->off[r[1]]);
			drawn++;
		}
		const uint32_t i = ring[e % (4 * AHEAD)][0], i2 = ring[e % (4 * AHEAD)][1];
		const uint32_t a = assign[i], c = assign[i2];
		if (a == c)
			continue;
		s0.evals++;
		/* candidate swap: i to c, i2 to a; the counts change only if the
		 * swap is taken */
		const uint64_t ba = UINT64_C(1) << a, bc = UINT64_C(1) << c;
		const uint32_t *oi = occ + b->off[i], *oi2 = occ + b->off[i2];
		const uint32_t li = b->off[i + 1] - b->off[i], li2 = b->off[i2 + 1] - b->off[i2];
		int64_t delta = 0;
		/* Fast paths, samples without repeated keys: a key of one sample
		 * only moves one occurrence (its mask loses a worker when that
		 * was its only occurrence there, and gains the other); a key of
		 * both does not change. */
		int slow = 0;
		if (K8) {
			/* as below, on the compact copy */
			const uint32_t ba8 = 1u << a, bc8 = 1u << c;
			const uint32_t lm = li < li2 ? li : li2;
			for (uint32_t t = 0; t < nl && lpos[t] < lm; t++) {
				const uint32_t q = lpos[t];
				const uint32_t u = oi[q], v = oi2[q];
				const struct lk8 *x = &K8[u], *y = &K8[v];
				const uint32_t mx2 = (x->mask & ~(x->one & ba8)) | bc8;
				const uint32_t my2 = (y->mask & ~(y->one & bc8)) | ba8;
				const int64_t dq = lk8_cost(x, mx2, ts.lo, g) - x->kc +
				                   lk8_cost(y, my2, ts.lo, g) - y->kc;
				delta += u != v ? dq : 0;
			}
			for (uint32_t q = lm; q < li; q++) {
				const struct lk8 *x = &K8[oi[q]];
				const uint32_t mx2 = (x->mask & ~(x->one & ba8)) | bc8;
				delta += lk8_cost(x, mx2, ts.lo, g) - x->kc;
			}
			for (uint32_t q = lm; q < li2; q++) {
				const struct lk8 *y = &K8[oi2[q]];
				const uint32_t my2 = (y->mask & ~(y->one & bc8)) | ba8;
				delta += lk8_cost(y, my2, ts.lo, g) - y->kc;
			}
		} else if (positional) {
			/* no branches on the data: a key whose mask does not change
			 * adds its own cost minus itself; a key both samples hold
			 * adds nothing */
			const uint32_t lm = li < li2 ? li : li2;
			for (uint32_t q = 0; q < lm; q++) {
				const uint32_t u = oi[q], v = oi2[q];
				const struct lskey *x = &K[u], *y = &K[v];
				const uint64_t mx2 = (x->mask & ~(x->one & ba)) | bc;
				const uint64_t my2 = (y->mask & ~(y->one & bc)) | ba;
				const int64_t dq = lskey_cost16(x, mx2, &ts, full) - x->kc +
				                   lskey_cost16(y, my2, &ts, full) - y->kc;
				delta += u != v ? dq : 0;
			}
			for (uint32_t q = lm; q < li; q++) {
				const struct lskey *x = &K[oi[q]];
				const uint64_t mx2 = (x->mask & ~(x->one & ba)) | bc;
				delta += lskey_cost16(x, mx2, &ts, full) - x->kc;
			}
			for (uint32_t q = lm; q < li2; q++) {
				const struct lskey *y = &K[oi2[q]];
				const uint64_t my2 = (y->mask & ~(y->one & bc)) | ba;
				delta += lskey_cost16(y, my2, &ts, full) - y->kc;
			}
		} else {
			/* stamps; tags: 1 = in i2, 2 = in i only, 3 = in both */
			const uint32_t G = next_gen(stamp, U, &gen);
			for (uint32_t q = 0; q < li2; q++) {
				const uint32_t u = oi2[q];
				if (stamp[u] == G + 1) {
					slow = 1;
					break;
				}
				stamp[u] = G + 1;
			}
			for (uint32_t q = 0; !slow && q < li; q++) {
				const uint32_t u = oi[q], sv = stamp[u];
				if (sv == G + 1) {
					stamp[u] = G + 3;
					continue;
				}
				if (sv == G + 2 || sv == G + 3) {
					slow = 1;
					break;
				}
				stamp[u] = G + 2;
				const struct lskey *x = &K[u];
				const uint64_t m = x->mask, m2 = (m & ~(x->one & ba)) | bc;
				if (m2 != m)
					delta += lskey_cost(x, m2, &ts, full) - x->kc;
			}
			for (uint32_t q = 0; !slow && q < li2; q++) {
				const uint32_t u = oi2[q];
				if (stamp[u] == G + 3)
					continue;
				const struct lskey *x = &K[u];
				const uint64_t m = x->mask, m2 = (m & ~(x->one & bc)) | ba;
				if (m2 != m)
					delta += lskey_cost(x, m2, &ts, full) - x->kc;
			}
		}
		uint32_t nt = 0;
		if (slow) {
			/* any samples: net occurrences of each key moving a -> c */
			nt = net_moves(oi, li, oi2, li2, next_gen(stamp, U, &gen), stamp, dd,
			               touched);
			delta = 0;
			for (uint32_t t = 0; t < nt; t++) {
				const uint32_t u = touched[t];
				const int32_t d = dd[u];
				if (!d)
					continue;
				const uint32_t *cu = cnt + (size_t)u * n;
				const uint64_t m = K[u].mask;
				const uint64_t m2 = (m & ~(ba | bc)) |
				                    (cu[a] != (uint32_t)d ? ba : 0) |
				                    (cu[c] + (uint32_t)d ? bc : 0);
				if (m2 != m)
					delta += lskey_cost(&K[u], m2, &ts, full) - K[u].kc;
			}
		}
		if (delta < 0) {
			if (!slow)
				nt = net_moves(oi, li, oi2, li2, next_gen(stamp, U, &gen), stamp,
				               dd, touched);
			for (uint32_t t = 0; t < nt; t++) {
				const uint32_t u = touched[t];
				const int32_t d = dd[u];
				if (!d)
					continue;
				uint32_t *cu = cnt + (size_t)u * n;
				cu[a] -= (uint32_t)d;
				cu[c] += (uint32_t)d;
				struct lskey *x = &K[u];
				const uint64_t m = x->mask;
				const uint64_t m2 =
				    (m & ~(ba | bc)) | (cu[a] ? ba : 0) | (cu[c] ? bc : 0);
				x->one = (x->one & ~(ba | bc)) | (cu[a] == 1 ? ba : 0) |
				         (cu[c] == 1 ? bc : 0);
				if (m2 != m) {
					x->mask = m2;
					x->kc = lskey_cost(x, m2, &ts, full);
				}
				if (K8) {
					K8[u].mask = (uint8_t)x->mask;
					K8[u].one = (uint8_t)x->one;
					K8[u].kc = x->kc;
					const uint16_t at = K8[u].pos;
					if (!live[at] && (K8[u].mask != all || K8[u].one)) {
						/* the position comes alive: into the
						 * ascending list */
						live[at] = 1;
						uint32_t z = nl++;
						for (; z > 0 && lpos[z - 1] > at; z--)
							lpos[z] = lpos[z - 1];
						lpos[z] = at;
					}
				}
			}
			assign[i] = c;
			assign[i2] = a;
			cost += delta;
			s0.swaps++;
		}
	}
	s0.end_cost = cost;
	s0.ns = esd_now_ns() - t0;
	if (st)
		*st = s0;
out:
	free(cnt);
	free(K);
	free(K8);
	free(stamp);
	free(dd);
	free(touched);
	return rc;
}
