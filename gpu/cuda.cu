/*
 * The device backend of esd/gpu.h with CUDA, host side: open the device,
 * allocate the buffers, launch the persistent kernel (kernel.cuh) once as
 * a cooperative grid, then post jobs to it and wait for their answers
 * through pinned, mapped memory. docs/gpu.md has the protocol.
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

#include "kernel.cuh"

/* One opened device: the buffers, the stream, the kernel's state. */
struct gpu_dev {
	struct gpu_queue *q, *dq; /* host and device views */
	int64_t *hcost, *dhcost;  /* staged input: host and device views */
	uint32_t *hassign, *dhassign;
	uint64_t *htight, *dhtight;
	long long *dcost;         /* device copy of the costs, one slab per block */
	uint32_t *dassign;
	unsigned long long *dpart; /* [2][n * n][blocks] (min, count) words */
	uint32_t *dpload;          /* [blocks][n] initial loads */
	struct gpu_ctl *dctl;
	cudaStream_t stream;
	uint32_t max_k, blocks, seq;
	int running;
};

static void dev_free(struct gpu_dev *d)
{
	if (d->stream)
		cudaStreamDestroy(d->stream);
	cudaFree(d->dcost);
	cudaFree(d->dassign);
	cudaFree(d->dpart);
	cudaFree(d->dpload);
	cudaFree(d->dctl);
	cudaFreeHost(d->q);
	cudaFreeHost(d->hcost);
	cudaFreeHost(d->hassign);
	cudaFreeHost(d->htight);
	free(d);
}

static int alloc_all(struct gpu_dev *d, uint32_t max_k, uint32_t blocks, cudaError_t *e)
{
	const size_t nn = (size_t)MAXN * MAXN;
	/* slabs are ceil(k / g) rows each: up to g - 1 rows more than k */
	const size_t slab_rows = (size_t)max_k + blocks;
	if ((*e = cudaHostAlloc((void **)&d->q, sizeof(*d->q), cudaHostAllocMapped)) ||
	    (*e = cudaHostAlloc((void **)&d->hcost, (size_t)max_k * MAXN * sizeof(int64_t),
	                        cudaHostAllocMapped)) ||
	    (*e = cudaHostAlloc((void **)&d->hassign, (size_t)max_k * sizeof(uint32_t),
	                        cudaHostAllocMapped)) ||
	    (*e = cudaHostGetDevicePointer((void **)&d->dq, d->q, 0)) ||
	    (*e = cudaHostGetDevicePointer((void **)&d->dhcost, d->hcost, 0)) ||
	    (*e = cudaHostGetDevicePointer((void **)&d->dhassign, d->hassign, 0)) ||
	    (*e = cudaHostAlloc((void **)&d->htight, (size_t)max_k * sizeof(uint64_t),
	                        cudaHostAllocMapped)) ||
	    (*e = cudaHostGetDevicePointer((void **)&d->dhtight, d->htight, 0)) ||
	    (*e = cudaMalloc((void **)&d->dcost, slab_rows * MAXN * sizeof(long long))) ||
	    (*e = cudaMalloc((void **)&d->dassign, (size_t)max_k * sizeof(uint32_t))) ||
	    (*e = cudaMalloc((void **)&d->dpart, 2 * blocks * nn * sizeof(unsigned long long))) ||
	    (*e = cudaMalloc((void **)&d->dpload, (size_t)blocks * MAXN * sizeof(uint32_t))) ||
	    (*e = cudaMalloc((void **)&d->dctl, sizeof(struct gpu_ctl))) ||
	    (*e = cudaMemset(d->dctl, 0, sizeof(struct gpu_ctl))) ||
	    (*e = cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking)))
		return -1;
	memset(d->q, 0, sizeof(*d->q));
	return 0;
}

/* The number of blocks: asked (0: one per SM), at most what can be
 * resident at once with the kernel's shared memory (*smem: struct blk and
 * as much int32 slab as the device gives a block). 0 on failure. */
static uint32_t grid_size(int device, const struct cudaDeviceProp *prop, uint32_t asked,
                          size_t *smem, cudaError_t *e)
{
	int per_sm = 0, optin = 0;
	if ((*e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device)))
		return 0;
	*smem = (size_t)optin > sizeof(struct blk) ? (size_t)optin & ~(size_t)15
	                                            : sizeof(struct blk);
	if ((*e = cudaFuncSetAttribute(solver_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
	                               (int)*smem)) ||
	    (*e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, solver_kernel, THREADS,
	                                                        *smem)))
		return 0;
	uint32_t limit = (uint32_t)per_sm * (uint32_t)prop->multiProcessorCount;
	uint32_t b = asked ? asked : (uint32_t)prop->multiProcessorCount;
	return b < limit ? b : limit;
}

static int wait_alive(struct gpu_dev *d, const struct cudaDeviceProp *prop, char *why,
                      size_t whylen)
{
	int64_t until = esd_now_ns() + 5 * ESD_NS_PER_S;
	while (!__atomic_load_n(&d->q->alive, __ATOMIC_ACQUIRE)) {
		if (esd_now_ns() > until || cudaStreamQuery(d->stream) != cudaErrorNotReady) {
			cudaError_t e = cudaStreamQuery(d->stream);
			snprintf(why, whylen, "%s: the solver kernel did not start (%s)", prop->name,
			         cudaGetErrorString(e));
			__atomic_store_n(&d->q->stop, 1, __ATOMIC_RELEASE);
			cudaStreamSynchronize(d->stream);
			return -1;
		}
	}
	return 0;
}

extern "C" int esd_gpu_dev_open(int device, uint32_t max_k, uint32_t blocks, struct gpu_dev **out,
                            char *why, size_t whylen)
{
	struct cudaDeviceProp prop;
	struct gpu_dev *d;
	cudaError_t e;
	int count = 0, coop = 0;
	size_t smem = 0;

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
	if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess ||
	    (e = cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device)) !=
	        cudaSuccess)
		goto fail;
	if (!coop) {
		snprintf(why, whylen, "%s: no cooperative launch", prop.name);
		free(d);
		return -ENODEV;
	}
	d->blocks = grid_size(device, &prop, blocks, &smem, &e);
	if (d->blocks == 0 || alloc_all(d, max_k, d->blocks, &e) < 0)
		goto fail;
	{
		struct kargs A = {d->dq,     (const long long *)d->dhcost,
		                  d->dhassign, (unsigned long long *)d->dhtight,
		                  d->dcost,  d->dassign, d->dpart, d->dpload, d->dctl, max_k,
		                  (uint32_t)(smem - sizeof(struct blk))};
		void *args[] = {&A};
		e = cudaLaunchCooperativeKernel(solver_kernel, dim3(d->blocks), dim3(THREADS),
		                                args, smem, d->stream);
	}
	if (e != cudaSuccess)
		goto fail;
	if (wait_alive(d, &prop, why, whylen) < 0) {
		dev_free(d);
		return -ENODEV;
	}
	d->running = 1;
	snprintf(why, whylen, "%s (sm_%d%d, %d SMs), device %d, %u blocks", prop.name, prop.major,
	         prop.minor, prop.multiProcessorCount, device, d->blocks);
	*out = d;
	return 0;

fail:
	snprintf(why, whylen, "device %d: %s", device, cudaGetErrorString(e));
	dev_free(d);
	return e == cudaErrorMemoryAllocation ? -ENOMEM : -ENODEV;
}

extern "C" void esd_gpu_dev_close(struct gpu_dev *d)
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

extern "C" int64_t *esd_gpu_dev_stage(struct gpu_dev *d)
{
	return d->hcost;
}

extern "C" int esd_gpu_dev_post(struct gpu_dev *d, uint32_t k, uint32_t n, const uint32_t *cap,
                                uint32_t mode)
{
	if (!kernel_alive(d))
		return -ENODEV;
	if (__atomic_load_n(&d->q->done, __ATOMIC_ACQUIRE) != d->seq)
		return -EBUSY;
	d->q->k = k;
	d->q->n = n;
	d->q->mode = mode;
	memcpy(d->q->cap, cap, n * sizeof(uint32_t));
	d->seq++;
	if (d->seq == 0 || d->seq == GO_STOP)
		d->seq = 1; /* 0 is the initial doorbell */
	__atomic_store_n(&d->q->doorbell, d->seq, __ATOMIC_RELEASE);
	return 0;
}

extern "C" int esd_gpu_dev_wait(struct gpu_dev *d, int64_t deadline_abs_ns, uint32_t *assign,
                            struct gpu_result *res)
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
	res->steps = d->q->steps;
	res->paths = d->q->paths;
	res->rescanned = d->q->rescanned;
	res->blocks = d->q->used_blocks;
	res->verified = !(d->q->vflags & VF_BAD);
	res->canonical = !(d->q->vflags & (VF_BAD | VF_LOWER));
	res->tight = d->htight;
	for (int i = 0; i < 8; i++)
		res->prof[i] = d->q->prof[i];
	for (uint32_t j = 0; j < d->q->n; j++)
		res->pot[j] = d->q->pot[j];
	return 0;
}
