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
#include "cpu.h"
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

/* The moves of the rows between workers, kept one of two ways. Large k:
 * per ordered pair (a, b) a heap of every row at a (built when Dijkstra
 * first expands a). Small k: per pair only the cheapest move and its row,
 * from one scan of the rows at a; when that row leaves a, the pairs it was
 * cheapest for are rescanned from a's rows (a few dozen), and a row that
 * arrives at b is compared in. No heap to build, push or pop: at k = 256
 * (the hybrid's rows at k = 1024) the heaps' build alone took more than
 * the whole of the scans. Both choose the same row for a move (ties as
 * ent_less orders them), so both take the same path to the optimum. */
struct moves {
	const int64_t *cost;
	uint32_t *assign;
	uint32_t n;
	int scan;
	/* heaps */
	struct pheap *H; /* H[a * n + b]; H[a * n + a]: arrivals */
	uint8_t built[ESD_MAX_WORKERS];
	uint32_t *stamp;
	const uint32_t *rows;
	uint32_t roff[ESD_MAX_WORKERS + 1]; /* rows[roff[a]..roff[a + 1]): a's at the start */
	/* scan */
	int64_t *best;    /* n x n: cheapest move a -> b (POT_INF: a has no row) */
	uint32_t *brow;   /* n x n: its row */
	uint32_t *bucket; /* the rows at a: bucket[a * k ...], blen[a] of them */
	uint32_t *bpos;   /* each row's place in its bucket */
	uint32_t blen[ESD_MAX_WORKERS];
	uint32_t k;
	int v8; /* n = 8 with AVX-512: the vector bodies */
};

/* Is moving row r at cost d better than the move (bd, br)? ent_less's
 * order: cheaper first, then the highest row when b > a, else the lowest.
 * No branches: which move is cheaper is data no predictor learns. */
static inline int better(int64_t d, uint32_t r, int64_t bd, uint32_t br, int desc)
{
	const uint32_t flip = desc ? UINT32_MAX : 0;
	return (d < bd) | ((d == bd) & ((r ^ flip) < (br ^ flip)));
}

/* (bd, br) takes (d, r) if that is better; a pair with no row has
 * bd = POT_INF, which every move beats. */
static inline void consider(int64_t *bd, uint32_t *br, int64_t d, uint32_t r, int desc)
{
	const int take = better(d, r, *bd, *br, desc);
	*bd = take ? d : *bd;
	*br = take ? r : *br;
}

/* Row r joins a's rows / leaves them (the last one takes its place). */
static inline void bucket_add(struct moves *m, uint32_t a, uint32_t r)
{
	m->bpos[r] = m->blen[a];
	m->bucket[(size_t)a * m->k + m->blen[a]++] = r;
}

static inline void bucket_drop(struct moves *m, uint32_t a, uint32_t r)
{
	uint32_t *bk = m->bucket + (size_t)a * m->k;
	const uint32_t last = bk[--m->blen[a]];
	bk[m->bpos[r]] = last;
	m->bpos[last] = m->bpos[r];
}

/* Pair (a, b)'s cheapest move from a's rows. */
static void scan_pair(struct moves *m, uint32_t a, uint32_t b)
{
	const uint32_t n = m->n, *bk = m->bucket + (size_t)a * m->k;
	int64_t bd = POT_INF;
	uint32_t br = UINT32_MAX;
	const int desc = b > a;
	for (uint32_t q = 0; q < m->blen[a]; q++) {
		const uint32_t r = bk[q];
		const int64_t *c = m->cost + (size_t)r * n;
		consider(&bd, &br, c[b] - c[a], r, desc);
	}
	m->best[a * n + b] = bd;
	m->brow[a * n + b] = br;
}

/* Row r joins a's rows: every pair (a, b) compares it in. */
static void scan_arrive(struct moves *m, uint32_t a, uint32_t r)
{
	const uint32_t n = m->n;
	const int64_t *c = m->cost + (size_t)r * n;
	bucket_add(m, a, r);
	int64_t *bd = m->best + a * n;
	uint32_t *br = m->brow + a * n;
	for (uint32_t b = 0; b < n; b++)
		if (b != a)
			consider(&bd[b], &br[b], c[b] - c[a], r, b > a);
}

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define HAVE_SCAN_V8 1
/* Does (d, r) beat (bd, br), lane by lane? better()'s order. */
__attribute__((target("avx512f,avx512vl"), always_inline)) static inline __mmask8
better_v8(__m512i d, __m256i r, __m512i bd, __m256i br, __mmask8 desc)
{
	const __mmask8 later = _mm256_cmpgt_epu32_mask(r, br),
	               earlier = _mm256_cmplt_epu32_mask(r, br);
	return _mm512_cmplt_epi64_mask(d, bd) |
	       (_mm512_cmpeq_epi64_mask(d, bd) & ((desc & later) | (~desc & earlier)));
}

/* n = 8: the pairs out of worker a from its rows, as one 8-lane vector. */
__attribute__((target("avx512f,avx512vl"))) static void scan_worker_v8(struct moves *m, uint32_t a)
{
	const uint32_t *bk = m->bucket + (size_t)a * m->k;
	const __mmask8 desc = (__mmask8)(0xfeu << a);
	__m512i bd = _mm512_set1_epi64(POT_INF);
	__m256i br = _mm256_set1_epi32(-1);
	for (uint32_t q = 0; q < m->blen[a]; q++) {
		const uint32_t x = bk[q];
		const int64_t *c = m->cost + (size_t)x * 8;
		const __m512i d = _mm512_sub_epi64(_mm512_loadu_si512(c), _mm512_set1_epi64(c[a]));
		const __m256i vx = _mm256_set1_epi32((int)x);
		const __mmask8 take = better_v8(d, vx, bd, br, desc);
		bd = _mm512_mask_mov_epi64(bd, take, d);
		br = _mm256_mask_mov_epi32(br, take, vx);
	}
	_mm512_storeu_si512(m->best + a * 8, bd);
	_mm256_storeu_si256((__m256i *)(m->brow + a * 8), br);
	m->best[a * 8 + a] = POT_INF;
}

/* moves_move's upkeep for n = 8: row r has left worker u for v. */
__attribute__((target("avx512f,avx512vl"))) static void scan_moved_v8(struct moves *m, uint32_t u,
                                                                      uint32_t v, uint32_t r)
{
	const __m256i vr = _mm256_set1_epi32((int)r);
	/* the pairs out of u whose move was r's: all of u's rescanned */
	if (_mm256_cmpeq_epi32_mask(_mm256_loadu_si256((const __m256i *)(m->brow + u * 8)), vr) &
	    (__mmask8) ~(1u << u))
		scan_worker_v8(m, u);
	/* r's moves out of v compared in */
	const int64_t *c = m->cost + (size_t)r * 8;
	const __m512i d = _mm512_sub_epi64(_mm512_loadu_si512(c), _mm512_set1_epi64(c[v]));
	const __m512i bd = _mm512_loadu_si512(m->best + v * 8);
	const __m256i br = _mm256_loadu_si256((const __m256i *)(m->brow + v * 8));
	const __mmask8 take =
	    better_v8(d, vr, bd, br, (__mmask8)(0xfeu << v)) & (__mmask8) ~(1u << v);
	_mm512_mask_storeu_epi64(m->best + v * 8, take, d);
	_mm256_mask_storeu_epi32(m->brow + v * 8, take, vr);
}
#endif

static int moves_init(struct esd_solver *s, struct moves *m, const uint32_t *load)
{
	const uint32_t n = m->n, k = m->k;
	if (m->scan) {
		m->best = esd_scratch(s, SC_SCAN,
		                      (size_t)n * n * (sizeof(int64_t) + sizeof(uint32_t)) +
		                          ((size_t)n * k + k) * sizeof(uint32_t));
		if (!m->best)
			return -ENOMEM;
		m->brow = (uint32_t *)(m->best + (size_t)n * n);
		m->bucket = m->brow + (size_t)n * n;
		m->bpos = m->bucket + (size_t)n * k;
		memset(m->blen, 0, sizeof(m->blen));
#ifdef HAVE_SCAN_V8
		m->v8 = n == 8 && esd_have_avx512();
		if (m->v8) {
			for (uint32_t r = 0; r < k; r++)
				bucket_add(m, m->assign[r], r);
			for (uint32_t a = 0; a < 8; a++)
				scan_worker_v8(m, a);
			return 0;
		}
#endif
		for (uint32_t q = 0; q < n * n; q++)
			m->best[q] = POT_INF;
		for (uint32_t r = 0; r < k; r++)
			scan_arrive(m, m->assign[r], r);
		return 0;
	}
	/* heaps are built per worker node on first use (Dijkstra relaxes out
	 * of it): nodes a search never expands cost nothing */
	uint32_t *stamp = esd_scratch(s, SC_STAMP, (size_t)k * sizeof(uint32_t));
	uint32_t *rows = esd_scratch(s, SC_ORDER2, ((size_t)k + 1) * sizeof(uint32_t));
	if (!stamp || !rows || esd_solve_prepare_heaps(s, n))
		return -ENOMEM;
	memset(stamp, 0, (size_t)k * sizeof(uint32_t));
	uint32_t rpos[ESD_MAX_WORKERS];
	m->roff[0] = 0;
	for (uint32_t j = 0; j < n; j++)
		m->roff[j + 1] = m->roff[j] + load[j];
	memcpy(rpos, m->roff, n * sizeof(uint32_t));
	for (uint32_t i = 0; i < k; i++)
		rows[rpos[m->assign[i]]++] = i;
	m->H = s->heaps;
	m->stamp = stamp;
	m->rows = rows;
	memset(m->built, 0, sizeof(m->built));
	for (uint32_t q = 0; q < n * n; q++)
		m->H[q].len = 0;
	return 0;
}

/* w[v] = the cheapest move u -> v (POT_INF: none) for every v not done,
 * for Dijkstra's expansion of u. */
static int moves_expand(struct moves *m, uint32_t u, const uint8_t *done, int64_t *w)
{
	const uint32_t n = m->n;
	if (m->scan) {
		memcpy(w, m->best + u * n, n * sizeof(int64_t));
		return 0;
	}
	if (!m->built[u]) {
		int rc = build_node(m->H, n, u, m->cost, m->assign, m->stamp, m->rows + m->roff[u],
		                    m->roff[u + 1] - m->roff[u]);
		if (rc)
			return rc;
		m->built[u] = 1;
	}
	for (uint32_t v = 0; v < n; v++) {
		const struct pheap_ent *e = done[v] ? NULL : heap_top(&m->H[u * n + v], m->stamp);
		w[v] = e ? e->key : POT_INF;
	}
	return 0;
}

/* The cheapest move u -> v now (POT_INF: none); u has been expanded. */
static int64_t moves_edge(struct moves *m, uint32_t u, uint32_t v)
{
	if (m->scan)
		return m->best[u * m->n + v];
	const struct pheap_ent *e = heap_top(&m->H[u * m->n + v], m->stamp);
	return e ? e->key : POT_INF;
}

/* Move the row of the cheapest move u -> v (there is one) to v. */
static int moves_move(struct moves *m, uint32_t u, uint32_t v)
{
	const uint32_t n = m->n;
	if (m->scan) {
		const uint32_t r = m->brow[u * n + v];
		bucket_drop(m, u, r);
		m->assign[r] = v;
#ifdef HAVE_SCAN_V8
		if (m->v8) {
			bucket_add(m, v, r);
			scan_moved_v8(m, u, v, r);
			return 0;
		}
#endif
		for (uint32_t b = 0; b < n; b++)
			if (b != u && m->brow[u * n + b] == r)
				scan_pair(m, u, b);
		scan_arrive(m, v, r);
		return 0;
	}
	const struct pheap_ent *e = heap_top(&m->H[u * n + v], m->stamp);
	const uint32_t r = e->row;
	heap_pop(&m->H[u * n + v]);
	m->assign[r] = v;
	const uint32_t st = ++m->stamp[r];
	if (!m->built[v]) /* remembered; entered when v is built */
		return append(&m->H[v * n + v], (struct pheap_ent){0, r, st});
	const int64_t *c = m->cost + (size_t)r * n;
	for (uint32_t x = 0; x < n; x++) {
		int rc;
		if (x != v &&
		    (rc = heap_push(&m->H[v * n + x], (struct pheap_ent){c[x] - c[v], r, st})))
			return rc;
	}
	return 0;
}

/* Rows up to this many take the scans (ESD_OPT_SCAN_MAX in the
 * environment sets another bound, for the tests: 0 makes every solve use
 * the heaps). bench_dispatch at n = 8, warm / cold start, ms: k = 256
 * 0.058 / 0.093 against the heaps' 0.096-0.106 / 0.143; k = 512 0.143-0.155
 * / 0.272-0.294 against 0.189-0.204 / 0.260-0.298; k = 1024 0.392-0.400 /
 * 0.87-0.88 against 0.353-0.358 / 0.51-0.54 (a rescan reads a whole
 * worker's rows, and a cold start moves many). */
#define SCAN_MAX_ROWS 512
static uint32_t scan_max_rows(void)
{
	static int64_t v = -1; /* any thread may ask first: they all find the same */
	int64_t x = __atomic_load_n(&v, __ATOMIC_RELAXED);
	if (x < 0) {
		const char *e = getenv("ESD_OPT_SCAN_MAX");
		x = e ? strtoll(e, NULL, 10) : SCAN_MAX_ROWS;
		if (x < 0 || x > UINT32_MAX)
			x = SCAN_MAX_ROWS;
		__atomic_store_n(&v, x, __ATOMIC_RELAXED);
	}
	return (uint32_t)x;
}

/* Long: the successive shortest paths loop (Dijkstra over the worker nodes, potentials,
 * moves) shares its heaps and arrays within one solve. */
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
		struct moves mv = {.cost = cost, .assign = assign, .n = n, .k = k};
		mv.scan = k <= scan_max_rows();
		if ((rc = moves_init(s, &mv, load)))
			return rc;
		while (total) {
			int64_t dist[ESD_MAX_WORKERS], w[ESD_MAX_WORKERS];
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
				if ((rc = moves_expand(&mv, (uint32_t)u, done, w)))
					return rc;
				for (uint32_t v = 0; v < n; v++) {
					if (done[v] || w[v] >= POT_INF)
						continue;
					int64_t nd = dist[u] + w[v] + pot[u] - pot[v];
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
				for (int q = 0; q + 1 < L; q++)
					if ((rc = moves_move(&mv, (uint32_t)path[q + 1],
					                     (uint32_t)path[q])))
						return rc;
				excess[src]--;
				excess[t]++;
				total--;
				aug++;
				if (!total || excess[src] <= 0 || excess[t] >= 0)
					break;
				int tight = 1;
				for (int q = 0; q + 1 < L && tight; q++) {
					const int v = path[q], u = path[q + 1];
					const int64_t e = moves_edge(&mv, (uint32_t)u, (uint32_t)v);
					tight = e < POT_INF && e + pot[u] - pot[v] == 0;
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
