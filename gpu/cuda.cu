/*
 * The device backend of esd/gpu.h with CUDA: one persistent kernel (a
 * single block of 1024 threads that loops until told to stop) fed through
 * a job slot in pinned, mapped host memory. The host writes the job and
 * bumps the doorbell with a release store; the kernel polls the doorbell,
 * fences (__threadfence_system), copies the costs into device memory,
 * solves, writes the assignment back into mapped memory, fences, and only
 * then writes the done word, which the host reads with an acquire load.
 *
 * The solver is successive shortest paths on the transportation problem
 * (k rows, n <= 16 worker nodes). Every row starts at its cheapest worker;
 * each step then finds, over the worker graph whose edge a -> b weighs the
 * least cost difference c[r][b] - c[r][a] of the rows r at a, a shortest
 * path from any overloaded worker to an underloaded one (Bellman-Ford on
 * one warp: no negative cycles, the partial assignment stays optimal for
 * its loads), and moves f rows along it: f is the excess at the start, the
 * room at the end and, per edge, the number of rows at a that reach the
 * edge's least difference (moving tied rows along one shortest path keeps
 * it shortest). The loop ends when every load equals its capacity; the
 * result is an optimum, and the host's canonical pass picks the canonical
 * one. The host may abandon a late job by writing its sequence number into
 * the abort word, which the kernel checks every step.
 */
#include "gpu_internal.h"

#include <esd/clock.h>
#include <esd/gpu.h>

#include <cuda_runtime.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS  1024
#define MAXN     ESD_GPU_MAX_N
#define KEY_INF  0xffffffffffffffffull
#define DIST_BIAS (1ll << 48)

enum { ST_OK = 0, ST_ABORTED = 1, ST_NOPATH = 2, ST_BADJOB = 3 };

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
	unsigned long long steps;
};

struct gpu_dev {
	struct gpu_queue *q, *dq; /* host and device views */
	int64_t *hcost, *dhcost;  /* mapped input */
	uint32_t *hassign, *dhassign;
	long long *dcost; /* device copies */
	uint32_t *dassign;
	int32_t *dslot;
	cudaStream_t stream;
	uint32_t max_k, seq;
	int running;
};

__device__ static uint32_t vload(const uint32_t *p)
{
	return *(const volatile uint32_t *)p;
}

__device__ static void vstore(uint32_t *p, uint32_t v)
{
	*(volatile uint32_t *)p = v;
}

/* One job: returns ST_*. All threads call it. */
__device__ static int solve(struct gpu_queue *q, const long long *hcost, uint32_t *hassign,
                            long long *cost, uint32_t *assign, int32_t *slot, uint32_t seq,
                            unsigned long long *steps_out)
{
	__shared__ long long wmin[MAXN * MAXN];
	__shared__ unsigned long long key[MAXN];
	__shared__ int cnt[MAXN], next[MAXN];
	__shared__ int load[MAXN], cap[MAXN];
	__shared__ int cmd, src, dst, flow;
	const uint32_t k = vload(&q->k), n = vload(&q->n), tid = threadIdx.x;
	unsigned long long steps = 0;

	if (tid < MAXN) {
		load[tid] = 0;
		cap[tid] = tid < n ? (int)vload(&q->cap[tid]) : 0;
	}
	__syncthreads();
	/* Costs into device memory (one pass over the bus); every row to its
	 * cheapest worker. */
	for (uint32_t r = tid; r < k; r += THREADS) {
		long long best = 0;
		uint32_t bj = 0;
		for (uint32_t j = 0; j < n; j++) {
			long long c = hcost[(size_t)r * n + j];
			cost[(size_t)r * n + j] = c;
			if (j == 0 || c < best) {
				best = c;
				bj = j;
			}
		}
		assign[r] = bj;
		atomicAdd(&load[bj], 1);
	}
	__syncthreads();
	for (;;) {
		if (tid == 0) {
			cmd = 0; /* 0 done, 1 step, 2 aborted */
			for (uint32_t j = 0; j < n; j++)
				if (load[j] != cap[j])
					cmd = 1;
			if (cmd == 1 && (vload(&q->abort_seq) == seq || vload(&q->stop)))
				cmd = 2;
		}
		if (tid < MAXN * MAXN)
			wmin[tid] = LLONG_MAX;
		__syncthreads();
		if (cmd != 1)
			break;
		/* Pass A: least cost difference per worker pair. */
		for (uint32_t r = tid; r < k; r += THREADS) {
			uint32_t a = assign[r];
			long long ca = cost[(size_t)r * n + a];
			for (uint32_t b = 0; b < n; b++) {
				long long d = cost[(size_t)r * n + b] - ca;
				if (b != a && d < *(volatile long long *)&wmin[a * MAXN + b])
					atomicMin(&wmin[a * MAXN + b], d);
			}
		}
		__syncthreads();
		/* Shortest paths from the overloaded workers: Bellman-Ford on
		 * warp 0 over keys (dist, hops, pred), which keeps the
		 * predecessor graph acyclic under zero-length cycles. */
		if (tid < 32) {
			if (tid < MAXN) {
				key[tid] = KEY_INF;
				if (tid < n && load[tid] > cap[tid])
					key[tid] = ((unsigned long long)DIST_BIAS << 9) | tid;
			}
			__syncwarp();
			for (uint32_t round = 0; round < n; round++) {
				int changed = 0;
				for (uint32_t e = tid; e < n * n; e += 32) {
					uint32_t a = e / n, b = e % n;
					unsigned long long ka = *(volatile unsigned long long *)&key[a];
					long long w = wmin[a * MAXN + b];
					if (a == b || ka == KEY_INF || w == LLONG_MAX)
						continue;
					long long da = (long long)(ka >> 9) + w;
					unsigned long long hops = ((ka >> 4) & 31) + 1;
					unsigned long long kb = ((unsigned long long)da << 9) |
					                        (hops << 4) | a;
					if (kb < *(volatile unsigned long long *)&key[b] &&
					    atomicMin(&key[b], kb) > kb)
						changed = 1;
				}
				__syncwarp();
				if (!__any_sync(0xffffffffu, changed))
					break;
			}
			if (tid == 0) {
				unsigned long long best = KEY_INF;
				dst = -1;
				for (uint32_t j = 0; j < n; j++)
					if (load[j] < cap[j] && key[j] < best) {
						best = key[j];
						dst = (int)j;
					}
				for (uint32_t j = 0; j < MAXN; j++) {
					next[j] = -1;
					cnt[j] = 0;
				}
				src = dst;
				if (dst >= 0) {
					for (uint32_t h = 0; h <= n; h++) {
						unsigned long long kk = key[src];
						if (((kk >> 4) & 31) == 0)
							break;
						int p = (int)(kk & 15);
						next[p] = src;
						src = p;
					}
					if (((key[src] >> 4) & 31) != 0)
						dst = -1;
				}
			}
		}
		__syncthreads();
		if (dst < 0)
			return ST_NOPATH;
		/* Pass B: the rows that can take each path edge, numbered. */
		for (uint32_t r = tid; r < k; r += THREADS) {
			uint32_t a = assign[r];
			int b = next[a];
			slot[r] = -1;
			if (b >= 0 && cost[(size_t)r * n + b] - cost[(size_t)r * n + a] ==
			                      wmin[a * MAXN + b])
				slot[r] = atomicAdd(&cnt[a], 1);
		}
		__syncthreads();
		if (tid == 0) {
			int f = load[src] - cap[src];
			if (cap[dst] - load[dst] < f)
				f = cap[dst] - load[dst];
			for (int a = src; a != dst; a = next[a])
				if (cnt[a] < f)
					f = cnt[a];
			flow = f;
			load[src] -= f;
			load[dst] += f;
		}
		__syncthreads();
		/* Pass C: move f rows along every path edge. */
		for (uint32_t r = tid; r < k; r += THREADS)
			if (slot[r] >= 0 && slot[r] < flow)
				assign[r] = (uint32_t)next[assign[r]];
		steps++;
		__syncthreads();
	}
	if (cmd == 2)
		return ST_ABORTED;
	for (uint32_t r = tid; r < k; r += THREADS)
		hassign[r] = assign[r];
	*steps_out = steps;
	return ST_OK;
}

__global__ static void __launch_bounds__(THREADS, 1)
	solver_kernel(struct gpu_queue *q, const long long *hcost, uint32_t *hassign,
	              long long *cost, uint32_t *assign, int32_t *slot, uint32_t max_k)
{
	__shared__ uint32_t seq, go;
	uint32_t last = 0;

	if (threadIdx.x == 0) {
		vstore(&q->alive, 1);
		__threadfence_system();
	}
	for (;;) {
		if (threadIdx.x == 0) {
			go = 0;
			for (;;) {
				if (vload(&q->stop)) {
					go = 2;
					break;
				}
				seq = vload(&q->doorbell);
				if (seq != last) {
					go = 1;
					break;
				}
				__nanosleep(200);
			}
			__threadfence_system(); /* the job fields after the doorbell */
		}
		__syncthreads();
		if (go == 2)
			break;
		last = seq;
		unsigned long long steps = 0;
		int st;
		if (vload(&q->k) > max_k || vload(&q->n) == 0 || vload(&q->n) > MAXN)
			st = ST_BADJOB;
		else
			st = solve(q, hcost, hassign, cost, assign, slot, seq, &steps);
		__syncthreads();
		if (threadIdx.x == 0) {
			q->steps = steps;
			*(volatile int32_t *)&q->status = st;
			__threadfence_system(); /* assignment and status before done */
			vstore(&q->done, seq);
		}
		__syncthreads();
	}
	if (threadIdx.x == 0) {
		vstore(&q->alive, 0);
		__threadfence_system();
	}
}

static void dev_free(struct gpu_dev *d)
{
	if (d->stream)
		cudaStreamDestroy(d->stream);
	cudaFree(d->dcost);
	cudaFree(d->dassign);
	cudaFree(d->dslot);
	cudaFreeHost(d->q);
	cudaFreeHost(d->hcost);
	cudaFreeHost(d->hassign);
	free(d);
}

extern "C" int gpu_dev_open(int device, uint32_t max_k, struct gpu_dev **out, char *why,
                            size_t whylen)
{
	struct cudaDeviceProp prop;
	struct gpu_dev *d;
	cudaError_t e;
	int count = 0;
	int64_t until;

	*out = NULL;
	e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess || count == 0) {
		snprintf(why, whylen, "cudaGetDeviceCount: %s",
		         e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
		return -ENODEV;
	}
	if (device >= count) {
		snprintf(why, whylen, "device %d asked, %d present", device, count);
		return -ENODEV;
	}
	d = (struct gpu_dev *)calloc(1, sizeof(*d));
	if (d == NULL)
		return -ENOMEM;
	d->max_k = max_k;
	if ((e = cudaSetDevice(device)) != cudaSuccess)
		goto fail;
	cudaSetDeviceFlags(cudaDeviceMapHost); /* fails harmlessly on a live context */
	cudaGetLastError();
	if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess)
		goto fail;
	if ((e = cudaHostAlloc((void **)&d->q, sizeof(*d->q), cudaHostAllocMapped)) ||
	    (e = cudaHostAlloc((void **)&d->hcost, (size_t)max_k * MAXN * sizeof(int64_t),
	                       cudaHostAllocMapped)) ||
	    (e = cudaHostAlloc((void **)&d->hassign, (size_t)max_k * sizeof(uint32_t),
	                       cudaHostAllocMapped)) ||
	    (e = cudaHostGetDevicePointer((void **)&d->dq, d->q, 0)) ||
	    (e = cudaHostGetDevicePointer((void **)&d->dhcost, d->hcost, 0)) ||
	    (e = cudaHostGetDevicePointer((void **)&d->dhassign, d->hassign, 0)) ||
	    (e = cudaMalloc((void **)&d->dcost, (size_t)max_k * MAXN * sizeof(long long))) ||
	    (e = cudaMalloc((void **)&d->dassign, (size_t)max_k * sizeof(uint32_t))) ||
	    (e = cudaMalloc((void **)&d->dslot, (size_t)max_k * sizeof(int32_t))) ||
	    (e = cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking)))
		goto fail;
	memset(d->q, 0, sizeof(*d->q));
	solver_kernel<<<1, THREADS, 0, d->stream>>>(d->dq, (const long long *)d->dhcost,
	                                            d->dhassign, d->dcost, d->dassign,
	                                            d->dslot, max_k);
	if ((e = cudaGetLastError()) != cudaSuccess)
		goto fail;
	until = esd_now_ns() + 5 * ESD_NS_PER_S;
	while (!__atomic_load_n(&d->q->alive, __ATOMIC_ACQUIRE)) {
		if (esd_now_ns() > until || cudaStreamQuery(d->stream) != cudaErrorNotReady) {
			snprintf(why, whylen, "%s: the solver kernel did not start", prop.name);
			__atomic_store_n(&d->q->stop, 1, __ATOMIC_RELEASE);
			cudaStreamSynchronize(d->stream);
			dev_free(d);
			return -ENODEV;
		}
	}
	d->running = 1;
	snprintf(why, whylen, "%s (sm_%d%d, %d SMs), device %d", prop.name, prop.major,
	         prop.minor, prop.multiProcessorCount, device);
	*out = d;
	return 0;

fail:
	snprintf(why, whylen, "device %d: %s", device, cudaGetErrorString(e));
	dev_free(d);
	return e == cudaErrorMemoryAllocation ? -ENOMEM : -ENODEV;
}

extern "C" void gpu_dev_close(struct gpu_dev *d)
{
	if (d == NULL)
		return;
	__atomic_store_n(&d->q->abort_seq, d->seq, __ATOMIC_RELEASE);
	__atomic_store_n(&d->q->stop, 1, __ATOMIC_RELEASE);
	cudaStreamSynchronize(d->stream);
	dev_free(d);
}

static int kernel_alive(struct gpu_dev *d)
{
	if (d->running && cudaStreamQuery(d->stream) != cudaErrorNotReady)
		d->running = 0; /* the kernel ended or faulted */
	return d->running;
}

extern "C" int gpu_dev_submit(struct gpu_dev *d, const int64_t *cost, uint32_t k, uint32_t n,
                              const uint32_t *cap)
{
	if (!kernel_alive(d))
		return -ENODEV;
	if (__atomic_load_n(&d->q->done, __ATOMIC_ACQUIRE) != d->seq)
		return -EBUSY;
	memcpy(d->hcost, cost, (size_t)k * n * sizeof(int64_t));
	d->q->k = k;
	d->q->n = n;
	memcpy(d->q->cap, cap, n * sizeof(uint32_t));
	d->seq++;
	if (d->seq == 0)
		d->seq = 1; /* 0 is the initial doorbell */
	__atomic_store_n(&d->q->doorbell, d->seq, __ATOMIC_RELEASE);
	return 0;
}

extern "C" int gpu_dev_wait(struct gpu_dev *d, int64_t deadline_abs_ns, uint32_t *assign,
                            uint64_t *steps)
{
	uint32_t spins = 0;

	while (__atomic_load_n(&d->q->done, __ATOMIC_ACQUIRE) != d->seq) {
		if ((++spins & 1023) == 0) {
			if (esd_now_ns() > deadline_abs_ns) {
				__atomic_store_n(&d->q->abort_seq, d->seq, __ATOMIC_RELEASE);
				return -ETIMEDOUT;
			}
			if (!kernel_alive(d))
				return -ENODEV;
		}
	}
	if (__atomic_load_n(&d->q->status, __ATOMIC_ACQUIRE) != ST_OK)
		return -EIO;
	memcpy(assign, d->hassign, (size_t)d->q->k * sizeof(uint32_t));
	*steps = d->q->steps;
	return 0;
}
