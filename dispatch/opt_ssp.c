/*
 * opt: the exact minimum-cost assignment of k rows to n workers with
 * capacities, solved as the transportation problem it is.
 *
 * Why not the Hungarian method: the k x k expansion repeats each worker's
 * column m times, so the O(k^3) work is almost all redundant. Here every
 * row starts at its cheapest worker under worker potentials p (the reduced
 * cost of row r on worker j is c[r][j] - p[j]); that flow is optimal for
 * the problem without capacities and has no negative cycle. The overload
 * of the overfull workers is then moved to the underfull ones one row at a
 * time along shortest paths of the residual graph, which has only the n
 * worker nodes: moving a row r from a to b costs c[r][b] - c[r][a], so the
 * edge a -> b weighs the minimum of that over the rows at a, kept in a
 * heap per ordered pair (lazy deletion by a per-row stamp). Dijkstra on n
 * nodes with the reduced weights (all >= 0 thanks to p) finds the shortest
 * path from any overfull to the nearest underfull worker; updating p with
 * the distances keeps every reduced weight >= 0 (Johnson), so each step
 * keeps the flow optimal for its loads (successive shortest paths) and the
 * last one is optimal with the exact capacities. The final p are optimal
 * duals, which the canonical pass uses to return the unique
 * lexicographically smallest optimum.
 *
 * Warm start: the p of the previous solve (same n) usually balance the
 * next batch almost by themselves, so few rows need moving.
 */
#include "solver_internal.h"

#include <esd/clock.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Order of a pair heap (a, b): cheapest move first; among equal moves the
 * highest row when b > a and the lowest when b < a, which leaves low rows
 * on low workers, as the canonical optimum wants (less work for the
 * canonical pass; the optimum does not depend on it). */
static inline int ent_less(const struct pheap_ent *x, const struct pheap_ent *y, int desc)
{
	/* without branches (which entry is smaller is data no predictor
	 * learns): a flipped row number orders rows downwards */
	const uint32_t flip = desc ? UINT32_MAX : 0;
	return (x->key < y->key) | ((x->key == y->key) & ((x->row ^ flip) < (y->row ^ flip)));
}

static void sift_down(struct pheap_ent *e, uint32_t len, uint32_t i, int desc)
{
	struct pheap_ent v = e[i];
	for (;;) {
		uint32_t c = 2 * i + 1;
		if (c >= len)
			break;
		if (c + 1 < len)
			c += (uint32_t)ent_less(&e[c + 1], &e[c], desc);
		if (!ent_less(&e[c], &v, desc))
			break;
		e[i] = e[c];
		i = c;
	}
	e[i] = v;
}

static int heap_push(struct pheap *h, struct pheap_ent v)
{
	if (h->len == h->cap) {
		uint32_t nc = h->cap ? h->cap * 2 : 64;
		void *p = realloc(h->e, (size_t)nc * sizeof(*h->e));
		if (!p)
			return -ENOMEM;
		h->e = p;
		h->cap = nc;
	}
	uint32_t i = h->len++;
	while (i) {
		uint32_t par = (i - 1) / 2;
		if (!ent_less(&v, &h->e[par], h->desc))
			break;
		h->e[i] = h->e[par];
		i = par;
	}
	h->e[i] = v;
	return 0;
}

static void heap_pop(struct pheap *h)
{
	h->e[0] = h->e[--h->len];
	if (h->len)
		sift_down(h->e, h->len, 0, h->desc);
}

/* Top entry still valid (its row has not moved since), or NULL. */
static inline const struct pheap_ent *heap_top(struct pheap *h, const uint32_t *stamp)
{
	while (h->len && stamp[h->e[0].row] != h->e[0].stamp)
		heap_pop(h);
	return h->len ? &h->e[0] : NULL;
}

static int heap_reserve(struct pheap *h, uint32_t want)
{
	if (h->cap >= want)
		return 0;
	uint32_t nc = h->cap ? h->cap : 64;
	while (nc < want)
		nc *= 2;
	void *p = realloc(h->e, (size_t)nc * sizeof(*h->e));
	if (!p)
		return -ENOMEM;
	h->e = p;
	h->cap = nc;
	return 0;
}

static int append(struct pheap *h, struct pheap_ent v)
{
	if (h->len == h->cap) {
		uint32_t nc = h->cap ? h->cap * 2 : 64;
		void *p = realloc(h->e, (size_t)nc * sizeof(*h->e));
		if (!p)
			return -ENOMEM;
		h->e = p;
		h->cap = nc;
	}
	h->e[h->len++] = v;
	return 0;
}

/* Heaps (u, b) for every b from the rows now at u: its initial rows and the
 * rows that arrived since (H[u * n + u] lists them; a row listed twice
 * gives two entries with the same stamp, and the second goes stale as soon
 * as the first moves it). */
static int build_node(struct pheap *H, uint32_t n, uint32_t u, const int64_t *cost,
                      const uint32_t *assign, const uint32_t *stamp, const uint32_t *rows,
                      uint32_t nrows)
{
	struct pheap *arr = &H[u * n + u];
	uint32_t want = nrows + arr->len + 16;
	for (uint32_t b = 0; b < n; b++) {
		if (b == u)
			continue;
		int rc = heap_reserve(&H[u * n + b], want);
		if (rc)
			return rc;
		H[u * n + b].len = 0;
		H[u * n + b].desc = b > u;
	}
	for (uint32_t q = 0; q < nrows + arr->len; q++) {
		uint32_t r = q < nrows ? rows[q] : arr->e[q - nrows].row;
		if (assign[r] != u)
			continue;
		const int64_t *c = cost + (size_t)r * n;
		for (uint32_t b = 0; b < n; b++) {
			if (b == u)
				continue;
			struct pheap *h = &H[u * n + b];
			h->e[h->len++] = (struct pheap_ent){c[b] - c[u], r, stamp[r]};
		}
	}
	arr->len = 0;
	for (uint32_t b = 0; b < n; b++)
		if (b != u && H[u * n + b].len > 1)
			for (uint32_t i = H[u * n + b].len / 2; i-- > 0;)
				sift_down(H[u * n + b].e, H[u * n + b].len, i, b > u);
	return 0;
}

#define POT_INF (INT64_MAX / 4)

int esd_opt_ssp(struct esd_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                const uint32_t *capv, uint32_t *assign)
{
	int64_t pot[ESD_MAX_WORKERS], excess[ESD_MAX_WORKERS];
	uint32_t load[ESD_MAX_WORKERS] = {0};
	int rc;

	if (s->warm_on && s->warm_n == n)
		memcpy(pot, s->warm_pot, n * sizeof(int64_t));
	else
		memset(pot, 0, n * sizeof(int64_t));

	/* every row to its cheapest worker under the potentials */
	for (uint32_t i = 0; i < k; i++) {
		const int64_t *c = cost + (size_t)i * n;
		int64_t best = c[0] - pot[0];
		uint32_t bj = 0;
		for (uint32_t j = 1; j < n; j++) {
			int64_t v = c[j] - pot[j];
			if (v < best) {
				best = v;
				bj = j;
			}
		}
		assign[i] = bj;
		load[bj]++;
	}
	uint64_t total = 0;
	for (uint32_t j = 0; j < n; j++) {
		excess[j] = (int64_t)load[j] - (int64_t)capv[j];
		if (excess[j] > 0)
			total += (uint64_t)excess[j];
	}
	uint64_t aug = 0, dijkstras = 0;
	if (total) {
		/* heaps are built per worker node on first use (Dijkstra relaxes
		 * out of it): nodes a search never expands cost nothing */
		uint32_t *stamp = esd_scratch(s, SC_STAMP, (size_t)k * sizeof(uint32_t));
		uint32_t *rows = esd_scratch(s, SC_ORDER2, ((size_t)k + 1) * sizeof(uint32_t));
		if (!stamp || !rows || (rc = esd_solve_prepare_heaps(s, n)))
			return -ENOMEM;
		memset(stamp, 0, (size_t)k * sizeof(uint32_t));
		uint32_t roff[ESD_MAX_WORKERS + 1] = {0}, rpos[ESD_MAX_WORKERS];
		for (uint32_t j = 0; j < n; j++)
			roff[j + 1] = roff[j] + load[j];
		memcpy(rpos, roff, n * sizeof(uint32_t));
		for (uint32_t i = 0; i < k; i++)
			rows[rpos[assign[i]]++] = i;
		struct pheap *H = s->heaps; /* H[a * n + b]; H[a * n + a]: arrivals */
		uint8_t built[ESD_MAX_WORKERS] = {0};
		for (uint32_t q = 0; q < n * n; q++)
			H[q].len = 0;
		while (total) {
			int64_t dist[ESD_MAX_WORKERS];
			int prev[ESD_MAX_WORKERS];
			uint8_t done[ESD_MAX_WORKERS];
			for (uint32_t j = 0; j < n; j++) {
				dist[j] = excess[j] > 0 ? 0 : POT_INF;
				prev[j] = -1;
				done[j] = 0;
			}
			int t = -1;
			for (;;) {
				int u = -1;
				for (uint32_t j = 0; j < n; j++)
					if (!done[j] && (u < 0 || dist[j] < dist[u]))
						u = (int)j;
				if (u < 0 || dist[u] >= POT_INF)
					return -EINVAL; /* cannot happen: complete graph */
				done[u] = 1;
				if (excess[u] < 0) {
					t = u;
					break;
				}
				if (!built[u]) {
					if ((rc =
					         build_node(H, n, (uint32_t)u, cost, assign, stamp,
					                    rows + roff[u], roff[u + 1] - roff[u])))
						return rc;
					built[u] = 1;
				}
				for (uint32_t v = 0; v < n; v++) {
					if (done[v])
						continue;
					const struct pheap_ent *e = heap_top(&H[u * n + v], stamp);
					if (!e)
						continue;
					int64_t nd = dist[u] + e->key + pot[u] - pot[v];
					if (nd < dist[v]) {
						dist[v] = nd;
						prev[v] = u;
					}
				}
			}
			const int64_t D = dist[t];
			int64_t pmin = INT64_MAX;
			for (uint32_t j = 0; j < n; j++) {
				pot[j] += done[j] ? dist[j] : D;
				if (pot[j] < pmin)
					pmin = pot[j];
			}
			for (uint32_t j = 0; j < n; j++)
				pot[j] -= pmin;
			/* path nodes, sink first */
			int path[ESD_MAX_WORKERS + 1], L = 0;
			for (int v = t; v >= 0; v = prev[v])
				path[L++] = v;
			const int src = path[L - 1];
			/* push units along the path while it stays tight (reduced
			 * length 0 is shortest, all reduced weights being >= 0) */
			for (;;) {
				/* move one row along each edge, from the sink backwards */
				for (int q = 0; q + 1 < L; q++) {
					const int v = path[q], u = path[q + 1];
					const struct pheap_ent *e = heap_top(&H[u * n + v], stamp);
					uint32_t r = e->row;
					heap_pop(&H[u * n + v]);
					assign[r] = (uint32_t)v;
					uint32_t st = ++stamp[r];
					const int64_t *c = cost + (size_t)r * n;
					if (!built[v]) {
						/* remembered; entered when v is built */
						if ((rc = append(&H[v * n + v],
						                 (struct pheap_ent){0, r, st})))
							return rc;
						continue;
					}
					for (uint32_t x = 0; x < n; x++)
						if (x != (uint32_t)v &&
						    (rc = heap_push(
						         &H[v * n + x],
						         (struct pheap_ent){c[x] - c[v], r, st})))
							return rc;
				}
				excess[src]--;
				excess[t]++;
				total--;
				aug++;
				if (!total || excess[src] <= 0 || excess[t] >= 0)
					break;
				int tight = 1;
				for (int q = 0; q + 1 < L && tight; q++) {
					const int v = path[q], u = path[q + 1];
					const struct pheap_ent *e = heap_top(&H[u * n + v], stamp);
					tight = e && e->key + pot[u] - pot[v] == 0;
				}
				if (!tight)
					break;
			}
			dijkstras++;
		}
	}
	s->st.augmentations = aug;
	s->st.dijkstras = dijkstras;
	if (s->warm_on) {
		memcpy(s->warm_pot, pot, n * sizeof(int64_t));
		s->warm_n = n;
	}
	int64_t t0 = esd_now_ns();
	rc = esd_canon_pass(s, cost, k, n, capv, pot, assign);
	s->st.canon_ns = esd_now_ns() - t0;
	return rc;
}
