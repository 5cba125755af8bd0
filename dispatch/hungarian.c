/*
 * The classic Hungarian method on the expanded k x k matrix, as the ESD
 * paper runs it (column j of the k x n matrix repeated cap[j] times): the
 * O(k^3) shortest-augmenting-path form with row and column potentials
 * (Kuhn-Munkres as in Jonker-Volgenant / e-maxx). It is the reference for
 * opt and reproduces the scale of the paper's Table 2; its optimum goes
 * through the same canonical pass, so it returns opt's exact bits.
 */
#include "solver_internal.h"

#include <esd/clock.h>
#include <errno.h>
#include <string.h>

int esd_opt_hungarian(struct esd_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                      const uint32_t *capv, uint32_t *assign)
{
	static const int64_t INF = INT64_MAX / 4;
	if (k == 0)
		return 0;
	const size_t K = (size_t)k + 1;
	/* u, v, minv: int64; p, way: uint32; used: uint8 */
	char *mem = esd_scratch(s, SC_HUNG, K * (3 * sizeof(int64_t) + 2 * sizeof(uint32_t) + 1));
	uint32_t *slotw = esd_scratch(s, SC_SLOTW, K * sizeof(uint32_t));
	if (!mem || !slotw)
		return -ENOMEM;
	int64_t *u = (int64_t *)mem, *v = u + K, *minv = v + K;
	uint32_t *p = (uint32_t *)(minv + K), *way = p + K;
	uint8_t *used = (uint8_t *)(way + K);
	memset(u, 0, K * sizeof(int64_t));
	memset(v, 0, K * sizeof(int64_t));
	memset(p, 0, K * sizeof(uint32_t));
	memset(way, 0, K * sizeof(uint32_t));
	/* column c (1-based) belongs to worker slotw[c] */
	size_t c = 1;
	for (uint32_t j = 0; j < n; j++)
		for (uint32_t q = 0; q < capv[j]; q++)
			slotw[c++] = j;

	for (uint32_t i = 1; i <= k; i++) {
		p[0] = i;
		uint32_t j0 = 0;
		for (size_t j = 0; j < K; j++) {
			minv[j] = INF;
			used[j] = 0;
		}
		do {
			used[j0] = 1;
			uint32_t i0 = p[j0], j1 = 0;
			int64_t delta = INF;
			const int64_t *row = cost + (size_t)(i0 - 1) * n;
			const int64_t ui0 = u[i0];
			for (uint32_t j = 1; j <= k; j++) {
				if (used[j])
					continue;
				int64_t cur = row[slotw[j]] - ui0 - v[j];
				if (cur < minv[j]) {
					minv[j] = cur;
					way[j] = j0;
				}
				if (minv[j] < delta) {
					delta = minv[j];
					j1 = j;
				}
			}
			for (uint32_t j = 0; j <= k; j++) {
				if (used[j]) {
					u[p[j]] += delta;
					v[j] -= delta;
				} else {
					minv[j] -= delta;
				}
			}
			j0 = j1;
		} while (p[j0] != 0);
		do {
			uint32_t j1 = way[j0];
			p[j0] = p[j1];
			j0 = j1;
		} while (j0);
	}
	for (uint32_t j = 1; j <= k; j++)
		assign[p[j] - 1] = slotw[j];
	s->st.augmentations = k;
	int64_t t0 = esd_now_ns();
	int rc = esd_canon_pass(s, cost, k, n, capv, NULL, assign);
	s->st.canon_ns = esd_now_ns() - t0;
	return rc;
}
