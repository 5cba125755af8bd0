/*
 * The canonical optimum: among all minimum-cost assignments that meet the
 * capacities, the lexicographically smallest (assign[0], ..., assign[k-1]).
 * CPU and GPU solvers return the same bits only if the optimum is unique;
 * this pass makes it so without perturbing costs.
 *
 * Given optimal worker potentials p, the optimal assignments are exactly
 * the capacity-feasible ones using only tight pairs (c[r][b] - p[b] equal
 * to the row's minimum reduced cost). Rows are fixed in increasing index.
 * Row i may move from its worker a0 to a lower tight worker j iff the
 * later rows can absorb the unit: a path j -> ... -> a0 in the graph with
 * an edge x -> y when a later row sits at x and is tight at y (any feasible
 * rearrangement decomposes into such a path plus cycles). The first such
 * j is taken and the path's rows move one step each; rows before i never
 * move again, so the result is the greedy lexicographic minimum, which is
 * unique. Edges are kept as per-pair stacks of rows, validated lazily with
 * per-row stamps.
 */
#include "solver_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int stack_push(struct pheap *h, uint32_t row, uint32_t stamp)
{
	if (h->len == h->cap) {
		uint32_t nc = h->cap ? h->cap * 2 : 64;
		void *p = realloc(h->e, (size_t)nc * sizeof(*h->e));
		if (!p)
			return -ENOMEM;
		h->e = p;
		h->cap = nc;
	}
	h->e[h->len++] = (struct pheap_ent){0, row, stamp};
	return 0;
}

/* Valid top of stack (x, y): a row after 'fixed' (every row when fixed is
 * NO_FIXED) that has not moved. */
#define NO_FIXED UINT32_MAX
static inline int stack_top(struct pheap *h, const uint32_t *stamp, uint32_t fixed)
{
	while (h->len) {
		const struct pheap_ent *e = &h->e[h->len - 1];
		if ((fixed == NO_FIXED || e->row > fixed) && stamp[e->row] == e->stamp)
			return (int)e->row;
		h->len--;
	}
	return -1;
}

/* Optimal potentials from an assignment: Bellman-Ford on the worker graph
 * (edge a -> b: cheapest move of a row at a to b). A negative cycle means
 * the assignment is not optimal. */
static int derive_potentials(const int64_t *cost, uint32_t k, uint32_t n, const uint32_t *assign,
                             int64_t *pot)
{
	static const int64_t INF = INT64_MAX / 4;
	int64_t w[ESD_MAX_WORKERS * ESD_MAX_WORKERS];
	for (uint32_t q = 0; q < n * n; q++)
		w[q] = INF;
	for (uint32_t i = 0; i < k; i++) {
		const int64_t *c = cost + (size_t)i * n;
		uint32_t a = assign[i];
		for (uint32_t b = 0; b < n; b++) {
			int64_t d = c[b] - c[a];
			if (b != a && d < w[a * n + b])
				w[a * n + b] = d;
		}
	}
	for (uint32_t j = 0; j < n; j++)
		pot[j] = 0;
	for (uint32_t it = 0; it <= n; it++) {
		int changed = 0;
		for (uint32_t a = 0; a < n; a++)
			for (uint32_t b = 0; b < n; b++)
				if (w[a * n + b] < INF && pot[a] + w[a * n + b] < pot[b]) {
					pot[b] = pot[a] + w[a * n + b];
					changed = 1;
				}
		if (!changed)
			return 0;
	}
	return -EINVAL;
}

static int canon_tight(struct esd_solver *s, uint32_t k, uint32_t n, const uint64_t *tight,
                       uint32_t *assign);

int esd_canon_pass(struct esd_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                   const uint32_t *capv, const int64_t *pot_in, uint32_t *assign)
{
	(void)capv;
	int64_t pot[ESD_MAX_WORKERS];
	int rc;

	if (pot_in)
		memcpy(pot, pot_in, n * sizeof(int64_t));
	else if ((rc = derive_potentials(cost, k, n, assign, pot)))
		return rc;

	uint64_t *tight = esd_scratch(s, SC_TIGHT, (size_t)k * sizeof(uint64_t));
	if (!tight)
		return -ENOMEM;
	for (uint32_t i = 0; i < k; i++) {
		const int64_t *c = cost + (size_t)i * n;
		uint32_t a = assign[i];
		int64_t u = c[a] - pot[a];
		uint64_t m = 0;
		for (uint32_t b = 0; b < n; b++) {
			int64_t v = c[b] - pot[b];
			if (v < u)
				return -EINVAL; /* potentials not optimal for this assignment */
			m |= (uint64_t)(v == u) << b;
		}
		tight[i] = m;
	}
	return canon_tight(s, k, n, tight, assign);
}

/* The canonical pass proper, from each row's tight workers.
 * Long: one greedy pass over the rows whose stacks, adjacency masks and path search share
 * state per row; in pieces they would pass all of it around. */
static int canon_tight(struct esd_solver *s, uint32_t k, uint32_t n, const uint64_t *tight,
                       uint32_t *assign)
{
	uint64_t moves = 0;
	int rc, any_lower = 0;

	for (uint32_t i = 0; i < k; i++)
		any_lower |= (tight[i] & ((UINT64_C(1) << assign[i]) - 1)) != 0;
	s->st.canon_moves = 0;
	if (!any_lower)
		return 0; /* no row can go lower: already the lexicographic minimum */

	uint32_t *stamp = esd_scratch(s, SC_STAMP, (size_t)k * sizeof(uint32_t));
	if (!stamp || esd_solve_prepare_heaps(s, n))
		return -ENOMEM;
	memset(stamp, 0, (size_t)k * sizeof(uint32_t));
	struct pheap *St = s->heaps;
	for (uint32_t q = 0; q < n * n; q++)
		St[q].len = 0;
	/* pushed in decreasing row order: the top is the lowest later row */
	for (uint32_t i = k; i-- > 0;) {
		uint32_t a = assign[i];
		for (uint64_t m = tight[i] & ~(UINT64_C(1) << a); m; m &= m - 1) {
			uint32_t b = (uint32_t)__builtin_ctzll(m);
			if ((rc = stack_push(&St[a * n + b], i, 0)))
				return rc;
		}
	}

	/* adj[x] bit y: some row after the current one sits at x, tight at y.
	 * Kept up to date incrementally: only edges out of the nodes a moved
	 * or newly fixed row leaves can vanish. */
	uint64_t adj[ESD_MAX_WORKERS] = {0};
	for (uint32_t x = 0; x < n; x++)
		for (uint32_t y = 0; y < n; y++)
			if (x != y && stack_top(&St[x * n + y], stamp, NO_FIXED) >= 0)
				adj[x] |= UINT64_C(1) << y;

	for (uint32_t i = 0; i < k; i++) {
		uint32_t a0 = assign[i];
		/* row i is fixed from now on: its edges may vanish */
		for (uint64_t m = tight[i] & ~(UINT64_C(1) << a0); m; m &= m - 1) {
			uint32_t b = (uint32_t)__builtin_ctzll(m);
			if (stack_top(&St[a0 * n + b], stamp, i) < 0)
				adj[a0] &= ~(UINT64_C(1) << b);
		}
		uint64_t cand = tight[i] & ((UINT64_C(1) << a0) - 1);
		for (; cand; cand &= cand - 1) {
			uint32_t j = (uint32_t)__builtin_ctzll(cand);
			/* BFS j -> a0 over the adjacency masks */
			int par[ESD_MAX_WORKERS];
			uint32_t queue[ESD_MAX_WORKERS], qh = 0, qt = 0;
			uint64_t seen = UINT64_C(1) << j;
			par[j] = -1;
			queue[qt++] = j;
			int found = 0;
			while (qh < qt && !found) {
				uint32_t x = queue[qh++];
				for (uint64_t m = adj[x] & ~seen; m; m &= m - 1) {
					uint32_t y = (uint32_t)__builtin_ctzll(m);
					seen |= UINT64_C(1) << y;
					par[y] = (int)x;
					if (y == a0) {
						found = 1;
						break;
					}
					queue[qt++] = y;
				}
			}
			if (!found)
				continue;
			/* rows of the path, picked before anything moves */
			uint32_t prow[ESD_MAX_WORKERS], pfrom[ESD_MAX_WORKERS],
			    pto[ESD_MAX_WORKERS];
			uint32_t L = 0;
			for (uint32_t y = a0; par[y] >= 0; y = (uint32_t)par[y]) {
				uint32_t x = (uint32_t)par[y];
				prow[L] = (uint32_t)stack_top(&St[x * n + y], stamp, i);
				pfrom[L] = x;
				pto[L++] = y;
			}
			assign[i] = j;
			stamp[i]++;
			for (uint32_t q = 0; q < L; q++) {
				uint32_t r = prow[q], y = pto[q];
				assign[r] = y;
				uint32_t st = ++stamp[r];
				for (uint64_t m = tight[r] & ~(UINT64_C(1) << y); m; m &= m - 1) {
					uint32_t b = (uint32_t)__builtin_ctzll(m);
					if ((rc = stack_push(&St[y * n + b], r, st)))
						return rc;
					adj[y] |= UINT64_C(1) << b;
				}
			}
			/* edges out of the nodes rows left (row i's included) */
			for (uint32_t q = 0; q <= L; q++) {
				uint32_t x = q < L ? pfrom[q] : a0;
				for (uint64_t m = adj[x]; m; m &= m - 1) {
					uint32_t b = (uint32_t)__builtin_ctzll(m);
					if (stack_top(&St[x * n + b], stamp, i) < 0)
						adj[x] &= ~(UINT64_C(1) << b);
				}
			}
			moves += L + 1;
			break;
		}
	}
	s->st.canon_moves = moves;
	return 0;
}

/* The checks every entry point makes: shape (and the costs' range when
 * cost is not NULL), capacities into capv, and a feasible assignment. */
static int canon_checks(const int64_t *cost, uint32_t k, uint32_t n, const uint32_t *cap,
                        const uint32_t *assign, uint32_t *capv)
{
	int rc = esd_solve_check(cost, k, n, cap, assign, capv);
	return rc ? rc : esd_assign_check(k, n, cap, assign);
}

int esd_canonicalize(struct esd_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                     const uint32_t *cap, uint32_t *assign)
{
	uint32_t capv[ESD_MAX_WORKERS];
	if (!s || !cost)
		return -EINVAL;
	int rc = canon_checks(cost, k, n, cap, assign, capv);
	return rc ? rc : esd_canon_pass(s, cost, k, n, capv, NULL, assign);
}

int esd_canonicalize_duals(struct esd_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                           const uint32_t *cap, const int64_t *pot, uint32_t *assign)
{
	uint32_t capv[ESD_MAX_WORKERS];
	if (!s || !cost || !pot)
		return -EINVAL;
	int rc = canon_checks(NULL, k, n, cap, assign, capv);
	return rc ? rc : esd_canon_pass(s, cost, k, n, capv, pot, assign);
}

int esd_canonicalize_tight(struct esd_solver *s, uint32_t k, uint32_t n, const uint32_t *cap,
                           const uint64_t *tight, uint32_t *assign)
{
	uint32_t capv[ESD_MAX_WORKERS];
	if (!s || !tight)
		return -EINVAL;
	int rc = canon_checks(NULL, k, n, cap, assign, capv);
	if (rc)
		return rc;
	for (uint32_t i = 0; i < k; i++)
		if (!(tight[i] >> assign[i] & 1))
			return -EINVAL; /* a row off its tight set: not optimal */
	return canon_tight(s, k, n, tight, assign);
}
