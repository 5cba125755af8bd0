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

/* True cost of one key needed by the workers of mask N (conseq.c's rules). */
static inline int64_t key_cost(const struct esd_keystate *s, uint64_t N, const struct tsum *ts,
                               enum esd_sync sync)
{
	if (!N)
		return 0;
	int64_t c = tsum(ts, N & ~s->latest);
	if (s->dirty != ESD_NO_WORKER && N != (UINT64_C(1) << s->dirty))
		c += ts->T[s->dirty];
	if (sync == ESD_SYNC_FULL_SET || (N & (N - 1)))
		c += tsum(ts, N);
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
	uint32_t *cnt = calloc((size_t)U * n + 1, sizeof(uint32_t));
	uint64_t *mask = calloc((size_t)U + 1, sizeof(uint64_t));
	uint32_t *stamp = calloc((size_t)U + 1, sizeof(uint32_t));
	uint32_t *touched = malloc(((size_t)b->off[k] + 1) * sizeof(uint32_t));
	if (!cnt || !mask || !stamp || !touched) {
		free(cnt);
		free(mask);
		free(stamp);
		free(touched);
		return -ENOMEM;
	}
	struct tsum ts;
	tsum_init(&ts, T, n);
	const uint32_t *occ = kt->occ;
	for (uint32_t i = 0; i < k; i++)
		for (uint32_t q = b->off[i]; q < b->off[i + 1]; q++) {
			cnt[(size_t)occ[q] * n + assign[i]]++;
			mask[occ[q]] |= UINT64_C(1) << assign[i];
		}
	int64_t cost = 0;
	for (uint32_t u = 0; u < U; u++)
		cost += key_cost(&kt->st[u], mask[u], &ts, sync);
	s0.start_cost = cost;
	uint64_t rng = p->seed;
	uint32_t gen = 0;
	for (uint64_t e = 0; k >= 2 && n >= 2 && e < p->max_evals; e++) {
		if (p->budget_ns && (e & 63) == 0 && esd_now_ns() - t0 > p->budget_ns)
			break;
		const uint32_t i = (uint32_t)(next(&rng) % k), i2 = (uint32_t)(next(&rng) % k);
		const uint32_t a = assign[i], c = assign[i2];
		if (a == c)
			continue;
		s0.evals++;
		/* tentative swap: i to c, i2 to a */
		gen++;
		uint32_t nt = 0;
		for (uint32_t q = b->off[i]; q < b->off[i + 1]; q++) {
			const uint32_t u = occ[q];
			cnt[(size_t)u * n + a]--;
			cnt[(size_t)u * n + c]++;
			if (stamp[u] != gen)
				stamp[u] = gen, touched[nt++] = u;
		}
		for (uint32_t q = b->off[i2]; q < b->off[i2 + 1]; q++) {
			const uint32_t u = occ[q];
			cnt[(size_t)u * n + c]--;
			cnt[(size_t)u * n + a]++;
			if (stamp[u] != gen)
				stamp[u] = gen, touched[nt++] = u;
		}
		int64_t delta = 0;
		for (uint32_t t = 0; t < nt; t++) {
			const uint32_t u = touched[t];
			uint64_t m = mask[u];
			m = cnt[(size_t)u * n + a] ? m | (UINT64_C(1) << a)
			                           : m & ~(UINT64_C(1) << a);
			m = cnt[(size_t)u * n + c] ? m | (UINT64_C(1) << c)
			                           : m & ~(UINT64_C(1) << c);
			if (m != mask[u])
				delta += key_cost(&kt->st[u], m, &ts, sync) -
				         key_cost(&kt->st[u], mask[u], &ts, sync);
		}
		if (delta < 0) {
			for (uint32_t t = 0; t < nt; t++) {
				const uint32_t u = touched[t];
				uint64_t m = mask[u];
				m = cnt[(size_t)u * n + a] ? m | (UINT64_C(1) << a)
				                           : m & ~(UINT64_C(1) << a);
				m = cnt[(size_t)u * n + c] ? m | (UINT64_C(1) << c)
				                           : m & ~(UINT64_C(1) << c);
				mask[u] = m;
			}
			assign[i] = c;
			assign[i2] = a;
			cost += delta;
			s0.swaps++;
		} else {
			for (uint32_t q = b->off[i]; q < b->off[i + 1]; q++) {
				cnt[(size_t)occ[q] * n + a]++;
				cnt[(size_t)occ[q] * n + c]--;
			}
			for (uint32_t q = b->off[i2]; q < b->off[i2 + 1]; q++) {
				cnt[(size_t)occ[q] * n + c]++;
				cnt[(size_t)occ[q] * n + a]--;
			}
		}
	}
	s0.end_cost = cost;
	s0.ns = esd_now_ns() - t0;
	if (st)
		*st = s0;
	free(cnt);
	free(mask);
	free(stamp);
	free(touched);
	return 0;
}
