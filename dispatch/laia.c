/*
 * The cache-affinity baselines: Herald's LAIA (Alg. 1: each sample to the
 * worker holding most of its rows latest, among the workers with room,
 * seeded random tie-break) and vanilla (seeded random, balanced). Both are
 * reproducible: the same seed gives the same assignment.
 */
#include "solver_internal.h"

#include <esd/clock.h>
#include <errno.h>
#include <string.h>

int esd_solve_laia(struct esd_solver *s, const int32_t *score, uint32_t k, uint32_t n,
                   const uint32_t *cap, uint64_t seed, uint32_t *assign)
{
	uint32_t capv[ESD_MAX_WORKERS], load[ESD_MAX_WORKERS] = {0};
	if (!s || !score)
		return -EINVAL;
	int rc = esd_solve_check(NULL, k, n, cap, assign, capv);
	if (rc)
		return rc;
	const size_t kn = (size_t)k * n;
	for (size_t q = 0; q < kn; q++)
		if (score[q] < 0)
			return -EINVAL;
	memset(&s->st, 0, sizeof(s->st));
	s->st.regret_cut = -1;
	int64_t t0 = esd_now_ns();
	uint64_t open = 0, rng = seed;
	for (uint32_t j = 0; j < n; j++)
		if (capv[j])
			open |= UINT64_C(1) << j;
	for (uint32_t i = 0; i < k; i++) {
		const int32_t *sc = score + (size_t)i * n;
		int32_t best = -1;
		uint64_t ties = 0;
		for (uint64_t m = open; m; m &= m - 1) {
			uint32_t j = (uint32_t)__builtin_ctzll(m);
			if (sc[j] > best) {
				best = sc[j];
				ties = UINT64_C(1) << j;
			} else if (sc[j] == best) {
				ties |= UINT64_C(1) << j;
			}
		}
		uint32_t nt = (uint32_t)__builtin_popcountll(ties), bj;
		if (nt == 1) {
			bj = (uint32_t)__builtin_ctzll(ties);
		} else {
			uint32_t pick = esd_rng_below(&rng, nt);
			while (pick--)
				ties &= ties - 1;
			bj = (uint32_t)__builtin_ctzll(ties);
		}
		assign[i] = bj;
		if (++load[bj] == capv[bj])
			open &= ~(UINT64_C(1) << bj);
	}
	s->st.heu_ns = s->st.total_ns = esd_now_ns() - t0;
	s->st.heu_rows = k;
	return 0;
}

int esd_solve_vanilla(uint32_t k, uint32_t n, const uint32_t *cap, uint64_t seed, uint32_t *assign)
{
	uint32_t capv[ESD_MAX_WORKERS];
	int rc = esd_solve_check(NULL, k, n, cap, assign, capv);
	if (rc)
		return rc;
	uint32_t i = 0;
	for (uint32_t j = 0; j < n; j++)
		for (uint32_t q = 0; q < capv[j]; q++)
			assign[i++] = j;
	uint64_t rng = seed;
	for (uint32_t q = k; q > 1; q--) {
		uint32_t r = esd_rng_below(&rng, q);
		uint32_t t = assign[q - 1];
		assign[q - 1] = assign[r];
		assign[r] = t;
	}
	return 0;
}
