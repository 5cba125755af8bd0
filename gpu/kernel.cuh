/*
 * The persistent kernel behind cuda.cu: the layout the host and the
 * device share (queue, control block, job header) and the device code.
 *
 * One persistent kernel of G
 * blocks (one per SM by default), launched once as a cooperative grid so
 * every block is resident, and fed through a job slot in pinned, mapped
 * host memory. docs/gpu.md has the protocol and the algorithm with the
 * reasoning; this header is the map.
 *
 * Queue. The host stages the costs in pinned memory, writes k, n, cap and
 * bumps the doorbell with a release store. Block 0 polls the doorbell,
 * copies the job header into device memory and publishes the sequence
 * number in a device word the other blocks poll (so only one block reads
 * across the bus while idle). The first g blocks solve; the others go back
 * to waiting. At the end every block writes its rows' assignment and tight
 * sets into mapped memory and fences; after a last grid barrier block 0
 * writes the potentials, the check's verdict and the status, then the done
 * word, which the host reads with an acquire load.
 *
 * Solver: successive shortest paths on the n worker nodes, with worker
 * potentials kept as a dual of the current loads. Rows are split into g
 * contiguous ranges, one per block, their costs in a column-major slab
 * (shared memory as int32 offsets when it fits). Every row starts at its
 * cheapest worker, and a first scan covers every row. Each step:
 *   gather   the global minima of the pairs of the last step's path
 *            nodes into every block's kept table (the others did not
 *            change);
 *   path     Dijkstra on one warp over the reduced weights, the same in
 *            every block, on past the first underloaded worker until as
 *            many are taken as there are overloaded ones; pot +=
 *            min(dist, D), D the last one's distance;
 *            node-disjoint tree paths to the sinks, in the order taken;
 *   flow     per path, f = min(excess, room, tied rows per path edge over
 *            the blocks), and this block's offset;
 *   move     the block's share of the first f tied rows of every path
 *            edge, noting the workers whose rows moved;
 *   scan     per pair (a, b) with a such a worker, over the block's rows
 *            at a, the least c[r][b] - c[r][a] and how many rows reach
 *            it (the other pairs keep theirs);
 *   publish  the (min, count) words of the pairs rescanned at this step
 *            or the one before to the block's slot of the (double-
 *            buffered) partials, the minima of the path nodes' pairs into
 *            the step's global minima (atomicMin);
 *   barrier  one grid barrier (every 32 steps its last block also reads
 *            the host's abort word, so every block stops at the same step).
 * The loop ends when every load equals its capacity; a check pass then
 * confirms every row sits at its least reduced cost and sends each row's
 * tight workers to the host (the canonical pass's input).
 */
#ifndef ESD_GPU_KERNEL_CUH
#define ESD_GPU_KERNEL_CUH

#include <esd/gpu.h>

#include <cuda_runtime.h>
#include <stdint.h>

#define THREADS   256
#define MAXN      64
#define NN        (MAXN * MAXN)
#define U64_INF   0xffffffffffffffffull
/* a difference d (|d| <= ESD_COST_MAX < 2^44) as d + 2^44 (45 bits), so a
 * partial's (min, count) word has 19 bits for the count (k <= 2^18) */
#define DBIAS     (1ull << 44)
#define CNT_BITS  19
#define CNT_MASK  ((1ull << CNT_BITS) - 1)
/* Bellman-Ford keys: (distance + 2^50) << 13 | hops << 6 | predecessor;
 * |distance| < 64 * 2^44 = 2^50 */
#define KDIST0    (1ull << 50)
#define KSHIFT    13
#define KHOPS(k)  (((k) >> 6) & 127u)
#define KPRED(k)  ((uint32_t)((k) & 63u))
/* a block takes about this many rows (4 a thread), or fewer so that its
 * slab fits in shared memory */
#define ROWS_PER_BLOCK 1024u
/* the host's abort word is read (across the bus) every this many steps */
#define ABORT_EVERY 32u
#define GO_STOP   0xffffffffu
#define PIX(a, b, n) ((a) * ((n) + 1) + (b))
/* a spinning thread's pause: nothing on a GPU; the CPU emulation
 * (gpu/emu/) lets the other threads run */
#ifndef ESD_SPIN_HINT
#define ESD_SPIN_HINT() ((void)0)
#endif

enum { ST_OK = 0, ST_ABORTED = 1, ST_NOPATH = 2, ST_BADJOB = 3 };
enum { VF_BAD = 1, VF_LOWER = 2 }; /* verification flags */
/* Block 0's profile of a job: clock64() cycles per phase, and the
 * Dijkstra pops (esd_gpu_stats.kernel_profile, same order). */
enum { P_GATHER, P_PATH, P_FLOW, P_MOVE, P_SCAN, P_PUBLISH, P_SYNC, P_POPS, P_COUNT };

/* The queue word block, in pinned mapped memory. */
struct gpu_queue {
	uint32_t doorbell;  /* host: sequence of the posted job (release) */
	uint32_t done;      /* device: sequence of the finished job */
	uint32_t abort_seq; /* host: abandon the job with this sequence */
	uint32_t stop;      /* host: 1 ends the kernel */
	uint32_t alive;     /* device: 1 once the kernel runs */
	int32_t status;     /* device: ST_* of the finished job */
	uint32_t k, n;
	uint32_t cap[MAXN];
	uint32_t used_blocks;   /* device: blocks that solved the job */
	uint32_t vflags;        /* device: VF_* of the answer */
	unsigned long long steps;
	long long pot[MAXN];    /* device: optimal potentials */
	unsigned long long prof[8]; /* device: block 0's profile (P_*) */
	uint32_t mode;          /* host: ESD_GPU_FULL_SCAN | ESD_GPU_ONE_PATH */
	unsigned long long paths;     /* device: augmenting paths of the job */
	unsigned long long rescanned; /* device: rows rescanned after moves, all blocks */
};

/* Device-side control block (device memory). */
struct gpu_ctl {
	uint32_t go;        /* block 0: sequence of the job to take, or GO_STOP */
	uint32_t hseq;      /* the job below is go's when hseq == go (seqlock) */
	uint32_t k, n, g;   /* the job, copied by block 0 */
	uint32_t cap[MAXN];
	uint32_t bar_count; /* grid barrier */
	uint32_t bar_gen;
	uint32_t abort;     /* the last barrier's verdict on the host's abort word */
	uint32_t vflags;    /* VF_* over all blocks */
	uint32_t mode;      /* the job's ESD_GPU_FULL_SCAN | ESD_GPU_ONE_PATH */
	unsigned long long rescanned; /* sum of the blocks' rescanned rows */
	unsigned long long gmin[3][NN]; /* pair minima, by step mod 3 */
};

/* The global pointers every block uses. */
struct kargs {
	struct gpu_queue *q;
	const long long *hcost;
	uint32_t *hassign;
	unsigned long long *htight; /* mapped: each row's tight workers */
	long long *cost;
	uint32_t *assign;
	unsigned long long *part;
	uint32_t *pload;
	struct gpu_ctl *c;
	uint32_t max_k;
	uint32_t smem_extra; /* shared memory after struct blk (smem_fits) */
};

/* A block's copy of the job header; valid = 0 when block 0 was already
 * rewriting it for a later job (a block that slept through a whole job). */
struct job {
	uint32_t k, n, g, mode, valid;
};

/* The shared state of one block (dynamic shared memory). */
struct blk {
	/* pair (a, b) at PIX(a, b, n): rows n + 1 apart, so that lanes on the
	 * same b and different a hit different banks */
	unsigned long long w[MAXN * (MAXN + 1)];   /* global minima (biased), kept across steps */
	unsigned long long own[MAXN * (MAXN + 1)]; /* this block's (min << CNT_BITS | count) */
	uint32_t cnt2[MAXN * (MAXN + 1)];          /* scan: 32-bit minima, then counts */
	long long pot[MAXN];          /* worker potentials (the dual) */
	int pred[MAXN];               /* Dijkstra's tree */
	int load[MAXN], cap[MAXN], next[MAXN], cnt[MAXN], pid[MAXN], sinks[MAXN];
	uint32_t tot[MAXN], before[MAXN], pnode[MAXN], dl[MAXN];
	/* the step's node-disjoint paths: ends, flow; plen out-edges in pnode */
	int psrc[MAXN / 2], pdst[MAXN / 2], pflow[MAXN / 2];
	int npaths, plen, status;
	uint32_t ndl;                 /* workers listed in dl */
	unsigned long long pmask;     /* the workers on the step's paths */
	unsigned long long ldirty;    /* workers this block's moves touched */
	unsigned long long rescanned, paths; /* rows rescanned after moves; paths */
	uint32_t abortv, vflags, db, hk, hn, hmode;
	unsigned long long prof[P_COUNT]; /* block 0: clock64 per phase */
	struct job hdr;
};

/* This block's rows: [r0, r1), costs at slab[b * per + (r - r0)]: in
 * shared memory as int32 offsets from the row's least cost when the slab
 * fits and every row spans less than 2^30 (the solver only ever compares
 * costs within a row), else the int64 costs in device memory. */
struct rows {
	uint32_t r0, r1, per, n;
	long long *slab;   /* device memory, always filled */
	int32_t *slab32;   /* shared memory, or NULL */
	uint8_t *asg;      /* the rows' workers in shared memory (with slab32), or NULL */
	uint32_t *assign;  /* the rows' workers in device memory (without) */
};

/* Whether per rows of n costs fit in the shared memory after struct blk:
 * a byte per row for its worker, then the int32 slab. */
__device__ static int smem_fits(uint32_t per, uint32_t n, uint32_t extra)
{
	return (size_t)((per + 15u) & ~15u) + (size_t)per * n * 4 <= extra;
}

/* Row r's worker, and setting it. */
__device__ static uint32_t AG(const struct rows *R, uint32_t r)
{
	return R->asg ? R->asg[r - R->r0] : R->assign[r];
}

__device__ static void AS(const struct rows *R, uint32_t r, uint32_t a)
{
	if (R->asg)
		R->asg[r - R->r0] = (uint8_t)a;
	else
		R->assign[r] = a;
}

__device__ static uint32_t vload(const uint32_t *p)
{
	return *(const volatile uint32_t *)p;
}

__device__ static void vstore(uint32_t *p, uint32_t v)
{
	*(volatile uint32_t *)p = v;
}

__device__ static long long C(const struct rows *R, uint32_t b, uint32_t r)
{
	const size_t i = (size_t)b * R->per + (r - R->r0);
	return R->slab32 ? (long long)R->slab32[i] : R->slab[i];
}

__device__ static void read_header(struct gpu_ctl *c, uint32_t seq, struct job *h)
{
	uint32_t h1 = vload(&c->hseq);
	__threadfence();
	h->k = vload(&c->k);
	h->n = vload(&c->n);
	h->g = vload(&c->g);
	h->mode = vload(&c->mode);
	__threadfence();
	h->valid = seq != GO_STOP && h1 == seq && vload(&c->hseq) == seq;
}

/* The end of a step on g blocks: a grid barrier (all resident: cooperative
 * launch), or the block's own with g == 1. With check, the host's abort
 * and stop words are read (by the last block to arrive), and the verdict
 * lands in s->abortv of every block. */
__device__ static void step_sync(struct blk *s, struct gpu_ctl *c, struct gpu_queue *q, uint32_t g,
                                 uint32_t seq, int check)
{
	__syncthreads();
	if (threadIdx.x == 0) {
		if (g == 1) {
			if (check)
				s->abortv = vload(&q->abort_seq) == seq || vload(&q->stop);
		} else {
			uint32_t gen = vload(&c->bar_gen);
			__threadfence();
			if (atomicAdd(&c->bar_count, 1u) == g - 1) {
				atomicExch(&c->bar_count, 0u);
				if (check)
					vstore(&c->abort,
					       vload(&q->abort_seq) == seq || vload(&q->stop));
				__threadfence();
				atomicExch(&c->bar_gen, gen + 1);
			} else {
				while (vload(&c->bar_gen) == gen)
					ESD_SPIN_HINT();
			}
			__threadfence();
			s->abortv = vload(&c->abort);
		}
	}
	__syncthreads();
}

/* The workers of mask (below n) as a list: s->dl[0 .. s->ndl - 1]. */
__device__ static void mask_list(struct blk *s, unsigned long long mask, uint32_t n)
{
	const uint32_t tid = threadIdx.x;

	if (tid < n && (mask >> tid & 1))
		s->dl[__popcll(mask & ((1ull << tid) - 1))] = tid;
	if (tid == 0)
		s->ndl = (uint32_t)__popcll(mask);
	__syncthreads();
}

/* scan: over this block's rows r at a worker of mask (the workers whose
 * rows moved), for every pair (a, b) the least c[r][b] - c[r][a] and how
 * many rows reach it, into s->own as (biased min << CNT_BITS | count).
 * The other pairs keep their words: their rows did not change. Two
 * passes: atomicMin (32-bit on the shared slab, cnt2 as scratch), then
 * counting with one atomic per group of lanes that hit the same pair.
 * Long: the two passes (minima, then counts) over the block's rows share the barriers between
 * them and the 32- and 64-bit cases of the first. */
__device__ static void scan(struct blk *s, const struct rows *R, unsigned long long mask)
{
	const uint32_t tid = threadIdx.x, n = R->n;
	uint32_t seen = 0;

	mask_list(s, mask, n);
	const uint32_t ne = s->ndl * n;
	if (ne == 0) { /* the same in every thread: nothing to rescan */
		__syncthreads(); /* s->ndl read by all before the next list */
		return;
	}
	if (R->slab32) {
		/* costs within 2^30 of the row's least: 32-bit minima, biased by
		 * 2^31 (kept in cnt2 until the counting pass) */
		for (uint32_t e = tid; e < ne; e += THREADS)
			s->cnt2[PIX(s->dl[e / n], e % n, n)] = 0xffffffffu;
		__syncthreads();
		for (uint32_t r = R->r0 + tid; r < R->r1; r += THREADS) {
			const uint32_t a = AG(R, r), i = r - R->r0;
			if (!(mask >> a & 1))
				continue;
			seen++;
			const int32_t ca = R->slab32[(size_t)a * R->per + i];
			for (uint32_t b0 = 0; b0 < n; b0 += 8) {
				int32_t v[8];
#pragma unroll
				for (uint32_t u = 0; u < 8; u++)
					v[u] = b0 + u < n ? R->slab32[(size_t)(b0 + u) * R->per + i] : 0;
#pragma unroll
				for (uint32_t u = 0; u < 8; u++) {
					const uint32_t b = b0 + u;
					uint32_t d = (uint32_t)(v[u] - ca) + 0x80000000u;
					uint32_t *slot = &s->cnt2[PIX(a, b < n ? b : 0, n)];
					if (b < n && b != a && d < *(volatile uint32_t *)slot)
						atomicMin(slot, d);
				}
			}
		}
		__syncthreads();
		for (uint32_t e = tid; e < ne; e += THREADS) {
			const uint32_t i = PIX(s->dl[e / n], e % n, n), m = s->cnt2[i];
			s->own[i] = m == 0xffffffffu ? U64_INF
			                             : (unsigned long long)((long long)m - 0x80000000ll +
			                                                    (long long)DBIAS);
			s->cnt2[i] = 0;
		}
		__syncthreads();
	} else {
		for (uint32_t e = tid; e < ne; e += THREADS) {
			const uint32_t i = PIX(s->dl[e / n], e % n, n);
			s->own[i] = U64_INF;
			s->cnt2[i] = 0;
		}
		__syncthreads();
		for (uint32_t r = R->r0 + tid; r < R->r1; r += THREADS) {
			const uint32_t a = AG(R, r);
			if (!(mask >> a & 1))
				continue;
			seen++;
			const long long ca = C(R, a, r);
			for (uint32_t b0 = 0; b0 < n; b0 += 8) {
				long long v[8];
#pragma unroll
				for (uint32_t u = 0; u < 8; u++)
					v[u] = b0 + u < n ? C(R, b0 + u, r) : 0;
#pragma unroll
				for (uint32_t u = 0; u < 8; u++) {
					const uint32_t b = b0 + u;
					unsigned long long d =
					    (unsigned long long)(v[u] - ca + (long long)DBIAS);
					unsigned long long *slot = &s->own[PIX(a, b < n ? b : 0, n)];
					if (b < n && b != a && d < *(volatile unsigned long long *)slot)
						atomicMin(slot, d);
				}
			}
		}
		__syncthreads();
	}
	/* the rows at each minimum */
	for (uint32_t r = R->r0 + tid; r < R->r1; r += THREADS) {
		const uint32_t a = AG(R, r);
		if (!(mask >> a & 1))
			continue;
		const long long ca = C(R, a, r);
		for (uint32_t b0 = 0; b0 < n; b0 += 8) {
			long long v[8];
#pragma unroll
			for (uint32_t u = 0; u < 8; u++)
				v[u] = b0 + u < n ? C(R, b0 + u, r) : 0;
#pragma unroll
			for (uint32_t u = 0; u < 8; u++) {
				const uint32_t b = b0 + u;
				if (b < n && b != a &&
				    (unsigned long long)(v[u] - ca + (long long)DBIAS) == s->own[PIX(a, b, n)])
					atomicAdd(&s->cnt2[PIX(a, b, n)], 1u);
			}
		}
	}
	__syncthreads();
	for (uint32_t e = tid; e < ne; e += THREADS) {
		const uint32_t i = PIX(s->dl[e / n], e % n, n);
		const unsigned long long m = s->own[i];
		s->own[i] = m == U64_INF ? U64_INF : (m << CNT_BITS) | s->cnt2[i];
	}
	if (seen)
		atomicAdd(&s->rescanned, (unsigned long long)seen);
	__syncthreads();
}

/* With g > 1: this block's (min, count) words of the workers in pm (pair
 * rows that changed in this step or the one before: the other rows of
 * this buffer are still current) into its slot of the partials, and its
 * minima of the workers in gm (the step's path nodes, whose global minima
 * every block rebuilds) into the step's global minima. */
__device__ static void publish(struct blk *s, uint32_t n, uint32_t gmax, unsigned long long *part,
                               unsigned long long *gmin, unsigned long long pm,
                               unsigned long long gm)
{
	mask_list(s, pm | gm, n);
	for (uint32_t e = threadIdx.x; e < s->ndl * n; e += THREADS) {
		const uint32_t a = s->dl[e / n], b = e % n, x = a * n + b;
		const unsigned long long p = s->own[PIX(a, b, n)];
		if (pm >> a & 1)
			__stcg(&part[(size_t)x * gmax + blockIdx.x], p);
		if ((gm >> a & 1) && p != U64_INF)
			atomicMin(&gmin[x], p >> CNT_BITS); /* result unused: a reduction */
	}
}

/* Lane 0 of find_path: node-disjoint paths of the shortest-path forest,
 * one per sink in the order Dijkstra took them, skipping a sink whose
 * tree path meets a path already taken. s->next[a], s->pid[a] for the
 * nodes with an out-edge (listed in s->pnode), the ends of each path,
 * s->pmask the nodes on them. */
__device__ static void pick_paths(struct blk *s, int found)
{
	unsigned long long used = 0;
	int np = 0, len = 0;

	for (int i = 0; i < found; i++) {
		const int t = s->sinks[i];
		int v = t, ok = 1, hops = 0;
		while (v >= 0 && ok) {
			ok = !(used >> v & 1) && hops++ <= MAXN;
			v = s->pred[v];
		}
		if (!ok)
			continue;
		int src = t;
		for (v = t; v >= 0; v = s->pred[v]) {
			const int p = s->pred[v];
			used |= 1ull << v;
			if (p >= 0) {
				s->next[p] = v;
				s->pid[p] = np;
				s->pnode[len++] = (uint32_t)p;
			}
			src = v;
		}
		s->psrc[np] = src;
		s->pdst[np] = t;
		np++;
	}
	s->npaths = np;
	s->plen = len;
	s->pmask = used;
	s->paths += (unsigned long long)np;
}

/* Dijkstra over s->w (minima, biased) with the reduced weights
 * w(a, b) + pot[a] - pot[b] (>= 0: pot is a dual of the current loads),
 * from the overloaded workers, on past the first underloaded one until
 * as many underloaded workers are taken as there are overloaded ones (or
 * underloaded ones, if fewer; one: stop at the first), D the distance of
 * the last one taken; then pot += min(dist, D) keeps the
 * reduced weights >= 0 for any such cutoff and makes every tree edge
 * between taken nodes tight, and pick_paths takes node-disjoint paths to
 * the sinks. s->npaths == 0: no path. Every block computes the same
 * (same input, fixed tie-breaks).
 * Long: the warp's Dijkstra loop, the potential update and the tree's
 * hand-over to pick_paths share the lanes' registers. */
__device__ static void find_path(struct blk *s, uint32_t n, int one)
{
	if (threadIdx.x < 32) { /* one warp, two workers a lane: no block barriers */
		const uint32_t lane = threadIdx.x, v0 = lane, v1 = lane + 32;
		long long d0 = v0 < n && s->load[v0] > s->cap[v0] ? 0 : LLONG_MAX;
		long long d1 = v1 < n && s->load[v1] > s->cap[v1] ? 0 : LLONG_MAX;
		int p0 = -1, p1 = -1, done0 = v0 >= n, done1 = v1 >= n, found = 0;
		int under = (v0 < n && s->load[v0] < s->cap[v0]) + (v1 < n && s->load[v1] < s->cap[v1]);
		int over = (d0 == 0) + (d1 == 0);
		long long D = 0;
		unsigned long long pops = 0;
		for (int o = 16; o > 0; o >>= 1) {
			under += __shfl_xor_sync(0xffffffffu, under, o);
			over += __shfl_xor_sync(0xffffffffu, over, o);
		}
		/* no more node-disjoint paths than sources or sinks */
		const int want = one ? 1 : min(under, over);
		for (;;) {
			/* the nearest open worker, lowest on ties: keys dist << 6 | worker
			 * (dist >= 0 and below 2^57: reduced weights, n hops) */
			unsigned long long key = U64_INF;
			if (!done0 && d0 != LLONG_MAX)
				key = (unsigned long long)d0 << 6 | v0;
			if (!done1 && d1 != LLONG_MAX)
				key = min(key, (unsigned long long)d1 << 6 | v1);
			for (int o = 16; o > 0; o >>= 1)
				key = min(key, __shfl_xor_sync(0xffffffffu, key, o));
			if (key == U64_INF)
				break; /* nothing more reachable */
			const long long d = (long long)(key >> 6);
			const uint32_t u = (uint32_t)(key & 63);
			done0 |= u == v0;
			done1 |= u == v1;
			pops++;
			if (s->load[u] < s->cap[u]) {
				if (lane == 0)
					s->sinks[found] = (int)u;
				found++;
				D = d;
				if (found == want)
					break;
			}
			const long long base = d + s->pot[u];
			if (!done0 && s->w[PIX(u, v0, n)] != U64_INF) {
				long long nd = base + (long long)(s->w[PIX(u, v0, n)] - DBIAS) - s->pot[v0];
				if (nd < d0) {
					d0 = nd;
					p0 = (int)u;
				}
			}
			if (!done1 && s->w[PIX(u, v1, n)] != U64_INF) {
				long long nd = base + (long long)(s->w[PIX(u, v1, n)] - DBIAS) - s->pot[v1];
				if (nd < d1) {
					d1 = nd;
					p1 = (int)u;
				}
			}
		}
		__syncwarp();
		if (found) { /* pot += min(dist, D): the reduced weights stay >= 0 */
			if (v0 < n)
				s->pot[v0] += d0 < D ? d0 : D;
			if (v1 < n)
				s->pot[v1] += d1 < D ? d1 : D;
		}
		s->pred[v0] = p0;
		s->pred[v1] = p1;
		s->next[v0] = -1;
		s->next[v1] = -1;
		__syncwarp();
		if (lane == 0) {
			pick_paths(s, found);
			s->prof[P_POPS] += pops;
			s->ldirty = 0;
		}
	}
	__syncthreads();
}

/* The tied rows of every path edge over all g blocks (tot) and over the
 * blocks before this one (before); then each path's flow: min(excess at
 * its start, room at its end, tied rows per edge). With g == 1 the
 * block's own counts are the totals. */
__device__ static void path_flow(struct blk *s, const unsigned long long *part, uint32_t g,
                                 uint32_t gmax, uint32_t n)
{
	const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;

	for (uint32_t i = warp; i < (uint32_t)s->plen; i += THREADS / 32) {
		uint32_t a = s->pnode[i], e = a * n + (uint32_t)s->next[a];
		uint32_t tot = 0, bef = 0;
		if (g == 1) {
			tot = lane == 0 ? (uint32_t)(s->own[PIX(a, s->next[a], n)] & CNT_MASK) : 0;
		} else {
			unsigned long long m = s->w[PIX(a, s->next[a], n)];
			for (uint32_t x = lane; x < g; x += 32) {
				unsigned long long p = __ldcg(&part[(size_t)e * gmax + x]);
				uint32_t c = (p >> CNT_BITS) == m ? (uint32_t)(p & CNT_MASK) : 0;
				tot += c;
				bef += x < blockIdx.x ? c : 0;
			}
			for (int o = 16; o > 0; o >>= 1) {
				tot += __shfl_down_sync(0xffffffffu, tot, o);
				bef += __shfl_down_sync(0xffffffffu, bef, o);
			}
		}
		if (lane == 0) {
			s->tot[a] = tot;
			s->before[a] = bef;
			s->cnt[a] = 0;
		}
	}
	__syncthreads();
	if (threadIdx.x < (uint32_t)s->npaths) {
		const int p = (int)threadIdx.x, src = s->psrc[p], dst = s->pdst[p];
		int f = s->load[src] - s->cap[src];
		if (s->cap[dst] - s->load[dst] < f)
			f = s->cap[dst] - s->load[dst];
		for (int i = 0; i < s->plen; i++)
			if (s->pid[s->pnode[i]] == p && (int)s->tot[s->pnode[i]] < f)
				f = (int)s->tot[s->pnode[i]];
		s->pflow[p] = f;
	}
	__syncthreads();
}

/* Move this block's share of the first f tied rows of every path edge
 * (f its path's flow), noting the workers whose rows changed. */
__device__ static void move_rows(struct blk *s, const struct rows *R)
{
	const uint32_t n = R->n;

	for (uint32_t r = R->r0 + threadIdx.x; r < R->r1; r += THREADS) {
		uint32_t a = AG(R, r);
		int b = s->next[a];
		if (b < 0)
			continue;
		unsigned long long d =
		    (unsigned long long)(C(R, (uint32_t)b, r) - C(R, a, r) + (long long)DBIAS);
		if (d != s->w[PIX(a, (uint32_t)b, n)])
			continue;
		uint32_t rank = (uint32_t)atomicAdd(&s->cnt[a], 1);
		if (s->before[a] + rank < (uint32_t)s->pflow[s->pid[a]]) {
			AS(R, r, (uint32_t)b);
			atomicOr(&s->ldirty, (1ull << a) | (1ull << b));
		}
	}
	__syncthreads();
	if (threadIdx.x < (uint32_t)s->npaths) { /* node-disjoint: distinct ends */
		s->load[s->psrc[threadIdx.x]] -= s->pflow[threadIdx.x];
		s->load[s->pdst[threadIdx.x]] += s->pflow[threadIdx.x];
	}
}

/* The answer checked by a pass apart from the solver: every row's worker
 * has its least reduced cost c - pot (else VF_BAD: not optimal). Each
 * row's tight workers (least reduced cost) go to the host as a bit mask,
 * and VF_LOWER says some row ties with a lower worker than its own (the
 * host's canonical pass has work to do). Flags OR-ed into ctl->vflags. */
__device__ static void verify(struct blk *s, const struct rows *R, const struct kargs *A,
                              struct gpu_ctl *c)
{
	uint32_t f = 0;

	for (uint32_t r = R->r0 + threadIdx.x; r < R->r1; r += THREADS) {
		const uint32_t a = AG(R, r);
		const long long u = C(R, a, r) - s->pot[a];
		unsigned long long m = 0;
		for (uint32_t b = 0; b < R->n; b++) {
			long long v = C(R, b, r) - s->pot[b];
			f |= v < u ? VF_BAD : 0;
			m |= (unsigned long long)(v == u) << b;
		}
		f |= (m & ((1ull << a) - 1)) ? VF_LOWER : 0;
		A->htight[r] = m;
	}
	f = (uint32_t)__syncthreads_or((int)(f & VF_BAD)) * VF_BAD |
	    (uint32_t)__syncthreads_or((int)(f & VF_LOWER)) * VF_LOWER;
	if (threadIdx.x == 0 && f)
		atomicOr(&c->vflags, f);
}

/* Copy this block's rows from mapped host memory into its slab (row-major
 * there, column-major here), put every row on its cheapest worker, and
 * publish the block's loads. */
__device__ static void start_rows(struct blk *s, const struct kargs *A, struct rows *R)
{
	const uint32_t tid = threadIdx.x, n = R->n;
	const size_t lo = (size_t)R->r0 * n, len = (size_t)(R->r1 - R->r0) * n;

	if (tid < MAXN)
		s->cnt[tid] = 0;
	for (size_t i = tid; i < len; i += 4 * THREADS) {
		long long v[4];
#pragma unroll
		for (int u = 0; u < 4; u++)
			if (i + (size_t)u * THREADS < len)
				v[u] = __ldcv(A->hcost + lo + i + (size_t)u * THREADS);
#pragma unroll
		for (int u = 0; u < 4; u++) {
			size_t t = i + (size_t)u * THREADS;
			if (t < len)
				R->slab[(t % n) * R->per + t / n] = v[u];
		}
	}
	__syncthreads();
	if (smem_fits(R->per, n, A->smem_extra)) {
		int wide = 0;
		uint8_t *asg = (uint8_t *)(s + 1);
		int32_t *s32 = (int32_t *)(asg + ((R->per + 15u) & ~15u));
		for (uint32_t r = R->r0 + tid; r < R->r1; r += THREADS) {
			const size_t i = r - R->r0;
			long long lo = R->slab[i], hi = lo;
			for (uint32_t j = 1; j < n; j++) {
				long long v = R->slab[(size_t)j * R->per + i];
				lo = v < lo ? v : lo;
				hi = v > hi ? v : hi;
			}
			wide |= hi - lo >= (1ll << 30);
			for (uint32_t j = 0; j < n; j++)
				s32[(size_t)j * R->per + i] =
				    (int32_t)(R->slab[(size_t)j * R->per + i] - lo);
		}
		wide = __syncthreads_or(wide);
		R->slab32 = wide ? NULL : s32;
		R->asg = wide ? NULL : asg;
	}
	__syncthreads();
	for (uint32_t r = R->r0 + tid; r < R->r1; r += THREADS) {
		long long best = C(R, 0, r);
		uint32_t bj = 0;
		for (uint32_t j = 1; j < n; j++) {
			long long v = C(R, j, r);
			if (v < best) {
				best = v;
				bj = j;
			}
		}
		AS(R, r, bj);
		atomicAdd(&s->cnt[bj], 1);
	}
	__syncthreads();
	if (tid < n)
		__stcg(&A->pload[blockIdx.x * n + tid], (uint32_t)s->cnt[tid]);
}

/* The first step's loads (sum of the blocks') and capacities. */
__device__ static void start_loads(struct blk *s, const struct kargs *A, uint32_t g, uint32_t n)
{
	if (threadIdx.x < n) {
		uint32_t l = 0;
		for (uint32_t y = 0; y < g; y++)
			l += __ldcg(&A->pload[y * n + threadIdx.x]);
		s->load[threadIdx.x] = (int)l;
		s->cap[threadIdx.x] = (int)vload(&A->c->cap[threadIdx.x]);
	}
	if (threadIdx.x < MAXN)
		s->pot[threadIdx.x] = 0; /* every row at its cheapest worker: a dual */
	if (threadIdx.x < P_COUNT)
		s->prof[threadIdx.x] = 0;
	if (threadIdx.x == 0) {
		s->abortv = 0;
		s->paths = 0;
	}
}

/* The answer: assignment, potentials, checks, status; done last. */
__device__ static void finish(struct blk *s, const struct kargs *A, const struct rows *R,
                              uint32_t g, uint32_t seq, unsigned long long steps)
{
	const uint32_t tid = threadIdx.x;
	struct gpu_queue *q = A->q;

	if (s->status == ST_OK) {
		verify(s, R, A, A->c);
		for (uint32_t r = R->r0 + tid; r < R->r1; r += THREADS)
			A->hassign[r] = AG(R, r);
	}
	if (tid == 0 && s->rescanned)
		atomicAdd(&A->c->rescanned, s->rescanned);
	__threadfence_system();
	step_sync(s, A->c, q, g, seq, 0);
	if (blockIdx.x == 0) {
		if (tid < R->n)
			q->pot[tid] = s->pot[tid];
		if (tid == 0) {
			q->steps = steps;
			q->paths = s->paths;
			q->rescanned = *(volatile unsigned long long *)&A->c->rescanned;
			q->used_blocks = g;
			for (int i = 0; i < P_COUNT; i++)
				q->prof[i] = s->prof[i];
			q->vflags = vload(&A->c->vflags);
			*(volatile int32_t *)&q->status = s->status;
		}
		__syncthreads();
		if (tid == 0) {
			__threadfence_system(); /* assignment, potentials, status before done */
			vstore(&q->done, seq);
		}
	}
}

/* Block 0's clock, for the profile: the cycles since *t into phase p. */
__device__ static void tick(struct blk *s, long long *t, int p)
{
	if (blockIdx.x == 0 && threadIdx.x == 0) {
		long long now = clock64();
		s->prof[p] += (unsigned long long)(now - *t);
		*t = now;
	}
}

/* The global minima of the workers in rows (the last step's path nodes:
 * the other pairs' minima did not change) from this step's buffer, or
 * with g == 1 from the block's own words; block 0 resets the rows of the
 * next-but-one buffer (reset: the rows it was written with). Then whether
 * the loads are balanced or the job aborted: s->status ST_OK /
 * ST_ABORTED, or -1 to go on. */
__device__ static void gather(struct blk *s, struct gpu_ctl *c, uint32_t g, uint32_t n,
                              uint32_t t, unsigned long long rows, unsigned long long reset)
{
	const uint32_t tid = threadIdx.x;

	mask_list(s, rows, n);
	const uint32_t ne = s->ndl * n;
	if (g > 1) {
		const unsigned long long *gm = c->gmin[t % 3];
		for (uint32_t e = tid; e < ne; e += 4 * THREADS) {
			unsigned long long v[4];
#pragma unroll
			for (int u = 0; u < 4; u++) {
				const uint32_t x = e + u * THREADS;
				v[u] = x < ne ? __ldcg(&gm[s->dl[x / n] * n + x % n]) : 0;
			}
#pragma unroll
			for (int u = 0; u < 4; u++) {
				const uint32_t x = e + u * THREADS;
				if (x < ne)
					s->w[PIX(s->dl[x / n], x % n, n)] = v[u];
			}
		}
		if (blockIdx.x == 0 && reset) {
			unsigned long long *z = c->gmin[(t + 2) % 3];
			for (uint32_t e = tid; e < n * n; e += THREADS)
				if (reset >> (e / n) & 1)
					z[e] = U64_INF;
		}
	} else {
		for (uint32_t e = tid; e < ne; e += THREADS) {
			const uint32_t i = PIX(s->dl[e / n], e % n, n);
			s->w[i] = s->own[i] == U64_INF ? U64_INF : s->own[i] >> CNT_BITS;
		}
	}
	int off = tid < n && s->load[tid] != s->cap[tid];
	int unbalanced = __syncthreads_or(off);
	if (tid == 0)
		s->status = !unbalanced ? ST_OK : s->abortv ? ST_ABORTED : -1;
	__syncthreads();
}

/* One job on blocks 0..g-1 (this one is blockIdx.x < g). Every thread
 * keeps the same masks: rows[u], the workers whose minima the buffer
 * gmin[u] was written with; dirty and pdirty, the workers whose rows
 * moved in this block at this step and the one before (the partials of
 * the buffer being written lack both).
 * Long: the step loop and its masks. */
__device__ static void solve(struct blk *s, const struct kargs *A, uint32_t seq)
{
	const uint32_t tid = threadIdx.x, x = blockIdx.x, gmax = gridDim.x;
	const uint32_t k = s->hdr.k, n = s->hdr.n, g = s->hdr.g, nn = n * n;
	const uint32_t per = (k + g - 1) / g;
	const int full = (s->hdr.mode & ESD_GPU_FULL_SCAN) != 0;
	const int one = (s->hdr.mode & ESD_GPU_ONE_PATH) != 0;
	const unsigned long long all = n == 64 ? U64_INF : (1ull << n) - 1;
	unsigned long long rows[3] = {all, 0, 0}, pdirty = all;
	struct gpu_ctl *c = A->c;
	struct rows R;
	unsigned long long steps = 0;
	long long t0 = clock64();

	R.n = n;
	R.per = per;
	R.r0 = min(k, x * per);
	R.r1 = min(k, R.r0 + per);
	R.slab = A->cost + (size_t)x * per * n;
	R.slab32 = NULL;
	R.asg = NULL;
	R.assign = A->assign;
	if (x == 0)
		for (uint32_t e = tid; e < 3 * NN; e += THREADS)
			c->gmin[e / NN][e % NN] = U64_INF;
	start_rows(s, A, &R);
	step_sync(s, c, A->q, g, seq, 0);
	start_loads(s, A, g, n);
	scan(s, &R, all);
	if (tid == 0)
		s->rescanned = 0; /* counted: the rescans after moves */
	if (g > 1)
		publish(s, n, gmax, A->part, c->gmin[0], all, all);
	step_sync(s, c, A->q, g, seq, 1);
	for (uint32_t t = 0;; t++) {
		tick(s, &t0, P_SYNC);
		gather(s, c, g, n, t, rows[t % 3], rows[(t + 2) % 3]);
		tick(s, &t0, P_GATHER);
		if (s->status >= 0)
			break;
		find_path(s, n, one);
		tick(s, &t0, P_PATH);
		if (s->npaths == 0) {
			s->status = ST_NOPATH;
			break;
		}
		rows[(t + 1) % 3] = full ? all : s->pmask;
		path_flow(s, A->part + (size_t)(t % 2) * nn * gmax, g, gmax, n);
		tick(s, &t0, P_FLOW);
		move_rows(s, &R);
		steps++;
		tick(s, &t0, P_MOVE);
		const unsigned long long dirty = full ? all : s->ldirty;
		scan(s, &R, dirty);
		tick(s, &t0, P_SCAN);
		if (g > 1)
			publish(s, n, gmax, A->part + (size_t)((t + 1) % 2) * nn * gmax,
			        c->gmin[(t + 1) % 3], dirty | pdirty, rows[(t + 1) % 3]);
		pdirty = dirty;
		tick(s, &t0, P_PUBLISH);
		step_sync(s, c, A->q, g, seq, (steps % ABORT_EVERY) == 0);
	}
	__syncthreads();
	finish(s, A, &R, g, seq, steps);
}

/* Block 0: wait for the host's doorbell (or stop), copy the job header
 * into device memory (the fields read in parallel: one trip across the
 * bus) and publish it. s->db: the sequence, or GO_STOP. */
__device__ static void take_job(struct blk *s, struct gpu_queue *q, struct gpu_ctl *c,
                                uint32_t last, uint32_t smem_extra)
{
	const uint32_t tid = threadIdx.x;

	if (tid == 0) {
		uint32_t db = GO_STOP;
		while (!vload(&q->stop)) {
			uint32_t v = vload(&q->doorbell);
			if (v != last) {
				db = v;
				break;
			}
			__nanosleep(100);
		}
		__threadfence_system(); /* the job fields after the doorbell */
		s->db = db;
		if (db != GO_STOP) {
			vstore(&c->hseq, 0);
			__threadfence();
		}
	}
	__syncthreads();
	if (s->db == GO_STOP) {
		if (tid == 0) {
			vstore(&c->go, GO_STOP);
			__threadfence();
		}
		return;
	}
	uint32_t v = tid < MAXN ? vload(&q->cap[tid]) : tid == MAXN ? vload(&q->k)
	                                          : tid == MAXN + 1 ? vload(&q->n)
	                                          : tid == MAXN + 2 ? vload(&q->mode) : 0;
	if (tid < MAXN)
		vstore(&c->cap[tid], v);
	else if (tid == MAXN)
		s->hk = v; /* k and n, through shared memory to thread 0 */
	else if (tid == MAXN + 1)
		s->hn = v;
	else if (tid == MAXN + 2)
		s->hmode = v;
	__syncthreads();
	if (tid == 0) {
		uint32_t k = s->hk, n = s->hn;
		if (n > MAXN) /* answered at once: ST_BADJOB */
			n = 0;
		uint32_t g = (k + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
		uint32_t fit = n && smem_extra > 16 ? (smem_extra - 16) / (4 * n + 1) : 0;
		if (fit && (k + fit - 1) / fit > g)
			g = (k + fit - 1) / fit;
		vstore(&c->k, k);
		vstore(&c->n, n);
		vstore(&c->g, g < 1 ? 1 : g > gridDim.x ? gridDim.x : g);
		vstore(&c->abort, 0);
		vstore(&c->vflags, 0);
		vstore(&c->mode, s->hmode);
		*(volatile unsigned long long *)&c->rescanned = 0;
		__threadfence();
		vstore(&c->hseq, s->db);
		__threadfence();
		vstore(&c->go, s->db);
	}
	__syncthreads();
}

__global__ static void __launch_bounds__(THREADS)
	solver_kernel(struct kargs A)
{
	extern __shared__ unsigned long long smem[];
	struct blk *s = (struct blk *)smem;
	uint32_t last = 0;

	if (blockIdx.x == 0 && threadIdx.x == 0) {
		vstore(&A.q->alive, 1);
		__threadfence_system();
	}
	for (;;) {
		if (blockIdx.x == 0) {
			take_job(s, A.q, A.c, last, A.smem_extra);
		} else if (threadIdx.x == 0) {
			uint32_t v;
			while ((v = vload(&A.c->go)) == last)
				__nanosleep(200);
			__threadfence();
			s->db = v;
		}
		__syncthreads();
		const uint32_t go = s->db;
		if (go == GO_STOP)
			break;
		if (threadIdx.x == 0)
			read_header(A.c, go, &s->hdr);
		__syncthreads();
		last = go;
		if (s->hdr.valid && (s->hdr.n == 0 || s->hdr.k == 0 || s->hdr.k > A.max_k)) {
			if (blockIdx.x == 0 && threadIdx.x == 0) {
				*(volatile int32_t *)&A.q->status = ST_BADJOB;
				__threadfence_system();
				vstore(&A.q->done, go);
			}
		} else if (s->hdr.valid && blockIdx.x < s->hdr.g) {
			solve(s, &A, go);
		}
		__syncthreads();
	}
	if (blockIdx.x == 0 && threadIdx.x == 0) {
		vstore(&A.q->alive, 0);
		__threadfence_system();
	}
}

#endif /* ESD_GPU_KERNEL_CUH */
