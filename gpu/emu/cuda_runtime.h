/*
 * A CPU emulation of the part of CUDA that gpu/cuda.cu uses, so that the
 * real kernel source runs (and is tested) on a machine without a GPU.
 * gpu/emu/cuda_emu.cc compiles cuda.cu as C++ with this file standing in
 * for <cuda_runtime.h>; nothing else includes it.
 *
 * Model. A launch starts one OS thread per block (all resident, as a
 * cooperative launch guarantees), and inside it one fiber (ucontext) per
 * GPU thread, run round-robin by the block's scheduler. A fiber runs until
 * it reaches a barrier (__syncthreads, __syncwarp, a shuffle) or a spin
 * (__nanosleep, ESD_SPIN_HINT), so code between two barriers runs thread
 * after thread, never interleaved: a missing barrier shows up as a thread
 * reading what a later thread has not written yet. Shared memory is a
 * thread-local array, so every block has its own. Global and mapped
 * memory are ordinary host memory; atomics and fences are the compiler's
 * __atomic builtins, so blocks (OS threads) and the host synchronise as on
 * a GPU. A barrier that every live thread waits on while none can run is a
 * deadlock: the emulation aborts naming the block.
 *
 * What it does not model: warps in lockstep (code that relies on implicit
 * warp synchrony without __syncwarp would pass here), timing, memory
 * spaces (a device pointer used on the host works), occupancy. The device
 * it reports is "CPU emulation": ESD_EMU_SMS multiprocessors (3 unless the
 * environment sets it), ESD_EMU_SMEM bytes of shared memory a block.
 */
#ifndef ESD_GPU_EMU_CUDA_RUNTIME_H
#define ESD_GPU_EMU_CUDA_RUNTIME_H

#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <setjmp.h>
#include <ucontext.h>

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ thread_local

/* shared memory a block may use (the kernel takes all of it) */
#define ESD_EMU_SMEM (160u * 1024u)
#define ESD_EMU_THREADS_MAX 1024u

struct dim3 {
	unsigned x, y, z;
	dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

enum cudaError {
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorMemoryAllocation = 2,
	cudaErrorLaunchFailure = 719,
	cudaErrorNotReady = 600,
};
typedef enum cudaError cudaError_t;

enum cudaDeviceAttr {
	cudaDevAttrCooperativeLaunch = 95,
	cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
#define cudaHostAllocMapped   2u
#define cudaDeviceMapHost     8u
#define cudaStreamNonBlocking 1u

struct cudaDeviceProp {
	char name[256];
	int major, minor, multiProcessorCount;
};

namespace esd_emu {

struct fiber {
	ucontext_t ctx; /* the first entry */
	jmp_buf jb;     /* every later switch (no signal-mask system call) */
	dim3 tid;
	bool started, done;
	const unsigned *wait_word; /* blocked until *wait_word != wait_val */
	unsigned wait_val;
	std::unique_ptr<char[]> stack;
};

enum { WARPS = ESD_EMU_THREADS_MAX / 32 };

struct block {
	ucontext_t sched;
	jmp_buf sched_jb;
	std::vector<fiber> f;
	fiber *cur;
	unsigned nthreads;
	unsigned bar_arrived, bar_gen;
	int or_acc[2];
	unsigned warp_arrived[WARPS], warp_gen[WARPS];
	unsigned long long slot[ESD_EMU_THREADS_MAX];
	std::function<void()> body;
};

inline thread_local block *B;

/* Back to the block's scheduler; returns when it runs this fiber again.
 * Under AddressSanitizer through swapcontext, which it knows about;
 * otherwise _setjmp/_longjmp, much cheaper. */
__attribute__((noinline)) inline void yield()
{
#ifdef __SANITIZE_ADDRESS__
	swapcontext(&B->cur->ctx, &B->sched);
#else
	if (!_setjmp(B->cur->jb))
		_longjmp(B->sched_jb, 1);
#endif
}

/* From the scheduler into fiber f until it yields or ends. */
__attribute__((noinline)) inline void enter(fiber &f)
{
#ifdef __SANITIZE_ADDRESS__
	swapcontext(&B->sched, &f.ctx);
#else
	if (!_setjmp(B->sched_jb)) {
		if (f.started)
			_longjmp(f.jb, 1);
		f.started = true;
		setcontext(&f.ctx);
	}
#endif
}

/* Block until *word != val (another fiber of the block changes it). */
inline void wait_change(const unsigned *word, unsigned val)
{
	B->cur->wait_word = word;
	B->cur->wait_val = val;
	yield();
}

/* A barrier of all the block's threads; returns the OR of their v. */
inline int barrier(int v)
{
	const unsigned g = B->bar_gen;
	B->or_acc[g & 1] |= v;
	if (++B->bar_arrived == B->nthreads) {
		B->bar_arrived = 0;
		B->or_acc[(g + 1) & 1] = 0;
		B->bar_gen = g + 1;
	} else {
		wait_change(&B->bar_gen, g);
	}
	return B->or_acc[g & 1];
}

/* A barrier of the 32 lanes of the calling thread's warp. */
inline void warp_barrier()
{
	const unsigned w = B->cur->tid.x / 32, g = B->warp_gen[w];
	if (++B->warp_arrived[w] == 32) {
		B->warp_arrived[w] = 0;
		B->warp_gen[w] = g + 1;
	} else {
		wait_change(&B->warp_gen[w], g);
	}
}

/* A spinning thread lets the others of its block and the OS run. */
inline void spin()
{
	sched_yield();
	yield();
}

template <class T> inline T shfl(T v, unsigned src_lane, bool in_range)
{
	static_assert(sizeof(T) <= 8, "shuffle of more than 8 bytes");
	const unsigned lane = B->cur->tid.x % 32, base = B->cur->tid.x - lane;
	unsigned long long bits = 0;
	memcpy(&bits, &v, sizeof(T));
	B->slot[B->cur->tid.x] = bits;
	warp_barrier();
	T r = v;
	if (in_range)
		memcpy(&r, &B->slot[base + src_lane], sizeof(T));
	warp_barrier();
	return r;
}

inline void fiber_main()
{
	fiber *me = B->cur;
	B->body();
	me->done = true;
#ifndef __SANITIZE_ADDRESS__
	_longjmp(B->sched_jb, 1);
#endif
	/* else uc_link returns to the scheduler */
}

/* Fiber t of block b, ready to enter at fiber_main (getcontext returns
 * twice: kept out of the scheduler's frame). */
__attribute__((noinline)) inline void make_fiber(block &b, unsigned t)
{
	const size_t stack = 128 * 1024;
	fiber &f = b.f[t];
	f.tid = dim3(t, 0, 0);
	f.started = f.done = false;
	f.wait_word = nullptr;
	f.stack.reset(new char[stack]);
	getcontext(&f.ctx);
	f.ctx.uc_stack.ss_sp = f.stack.get();
	f.ctx.uc_stack.ss_size = stack;
	f.ctx.uc_link = &b.sched;
	makecontext(&f.ctx, fiber_main, 0);
}

/* Run one block: nthreads fibers of body until all have returned. */
inline void run_block(unsigned nthreads, std::function<void()> body)
{
	block b;
	b.nthreads = nthreads;
	b.cur = nullptr;
	b.bar_arrived = b.bar_gen = 0;
	b.or_acc[0] = b.or_acc[1] = 0;
	memset(b.warp_arrived, 0, sizeof(b.warp_arrived));
	memset(b.warp_gen, 0, sizeof(b.warp_gen));
	b.body = std::move(body);
	b.f.resize(nthreads);
	B = &b;
	for (unsigned t = 0; t < nthreads; t++)
		make_fiber(b, t);
	for (unsigned live = nthreads; live;) {
		unsigned ran = 0;
		live = 0;
		for (fiber &f : b.f) {
			if (f.done)
				continue;
			live++;
			if (f.wait_word && __atomic_load_n(f.wait_word, __ATOMIC_RELAXED) == f.wait_val)
				continue;
			f.wait_word = nullptr;
			b.cur = &f;
			ran++;
			enter(f);
		}
		if (live && !ran) {
			fprintf(stderr, "cuda emulation: every live thread of a block waits on a barrier "
			                "no other thread will reach (deadlock)\n");
			abort();
		}
	}
	B = nullptr;
}

struct stream {
	std::vector<std::thread> blocks;
	std::atomic<unsigned> running{0};
};

inline int sms()
{
	const char *e = getenv("ESD_EMU_SMS");
	int v = e ? atoi(e) : 3;
	return v > 0 && v <= 256 ? v : 3;
}

template <class... P, size_t... I>
std::tuple<std::decay_t<P>...> unpack(void **args, std::index_sequence<I...>)
{
	return std::tuple<std::decay_t<P>...>(*static_cast<std::decay_t<P> *>(args[I])...);
}

} /* namespace esd_emu */

typedef esd_emu::stream *cudaStream_t;

inline thread_local dim3 blockIdx, gridDim, blockDim;
/* the kernel's `extern __shared__` array: one per block (OS thread) */
alignas(16) inline thread_local unsigned long long smem[ESD_EMU_SMEM / 8];
#define threadIdx (esd_emu::B->cur->tid)

/* --- device functions --- */

inline void __syncthreads()
{
	esd_emu::barrier(0);
}
inline int __syncthreads_or(int v)
{
	return esd_emu::barrier(v != 0);
}
inline void __syncwarp(unsigned mask = 0xffffffffu)
{
	(void)mask;
	esd_emu::warp_barrier();
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int o)
{
	(void)mask;
	return esd_emu::shfl(v, (threadIdx.x % 32) ^ (unsigned)o, true);
}
template <class T> inline T __shfl_down_sync(unsigned mask, T v, unsigned o)
{
	(void)mask;
	const unsigned src = threadIdx.x % 32 + o;
	return esd_emu::shfl(v, src, src < 32);
}
inline void __threadfence()
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}
inline void __threadfence_system()
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}
/* a poll's pause (an idle block, the doorbell): sleep, so that idle blocks
 * leave the cores to the working ones */
inline void __nanosleep(unsigned ns)
{
	struct timespec t = {0, (long)(ns < 20000 ? 20000 : ns)};
	nanosleep(&t, NULL);
	esd_emu::yield();
}
#define ESD_SPIN_HINT() esd_emu::spin()
inline long long clock64()
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000000000ll + t.tv_nsec;
}
template <class T, class U> inline T atomicAdd(T *p, U v)
{
	return __atomic_fetch_add(p, (T)v, __ATOMIC_SEQ_CST);
}
template <class T, class U> inline T atomicOr(T *p, U v)
{
	return __atomic_fetch_or(p, (T)v, __ATOMIC_SEQ_CST);
}
template <class T, class U> inline T atomicExch(T *p, U v)
{
	return __atomic_exchange_n(p, (T)v, __ATOMIC_SEQ_CST);
}
template <class T, class U> inline T atomicMin(T *p, U u)
{
	T v = (T)u, old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
	while (v < old &&
	       !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		;
	return old;
}
template <class T> inline T __ldcg(const T *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}
template <class T> inline T __ldcv(const T *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}
template <class T> inline void __stcg(T *p, T v)
{
	__atomic_store_n(p, v, __ATOMIC_RELAXED);
}
inline int __popcll(unsigned long long v)
{
	return __builtin_popcountll(v);
}
template <class T> inline T min(T a, T b)
{
	return b < a ? b : a;
}
template <class T> inline T max(T a, T b)
{
	return a < b ? b : a;
}

/* --- runtime --- */

inline const char *cudaGetErrorString(cudaError_t e)
{
	switch (e) {
	case cudaSuccess: return "no error";
	case cudaErrorInvalidValue: return "invalid argument (emulation)";
	case cudaErrorMemoryAllocation: return "out of memory (emulation)";
	case cudaErrorNotReady: return "device not ready (emulation)";
	default: return "launch failure (emulation)";
	}
}
inline cudaError_t cudaGetLastError()
{
	return cudaSuccess;
}
inline cudaError_t cudaGetDeviceCount(int *n)
{
	*n = 1;
	return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int d)
{
	return d == 0 ? cudaSuccess : cudaErrorInvalidValue;
}
inline cudaError_t cudaSetDeviceFlags(unsigned f)
{
	(void)f;
	return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d)
{
	(void)d;
	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "CPU emulation");
	p->major = 9;
	p->minor = 0;
	p->multiProcessorCount = esd_emu::sms();
	return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d)
{
	(void)d;
	*v = a == cudaDevAttrCooperativeLaunch ? 1 : (int)ESD_EMU_SMEM;
	return cudaSuccess;
}
template <class T> inline cudaError_t cudaFuncSetAttribute(T *f, enum cudaFuncAttribute a, int v)
{
	(void)f;
	(void)a;
	return v >= 0 && (unsigned)v <= ESD_EMU_SMEM ? cudaSuccess : cudaErrorInvalidValue;
}
template <class T>
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, T *f, int threads,
                                                                 size_t smem)
{
	(void)f;
	*n = threads > 0 && (unsigned)threads <= ESD_EMU_THREADS_MAX && smem <= ESD_EMU_SMEM;
	return cudaSuccess;
}
inline cudaError_t cudaMalloc(void **p, size_t len)
{
	*p = calloc(1, len ? len : 1);
	return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
inline cudaError_t cudaHostAlloc(void **p, size_t len, unsigned flags)
{
	(void)flags;
	return cudaMalloc(p, len);
}
inline cudaError_t cudaHostGetDevicePointer(void **d, void *h, unsigned flags)
{
	(void)flags;
	*d = h;
	return cudaSuccess;
}
inline cudaError_t cudaMemset(void *p, int v, size_t len)
{
	memset(p, v, len);
	return cudaSuccess;
}
inline cudaError_t cudaFree(void *p)
{
	free(p);
	return cudaSuccess;
}
inline cudaError_t cudaFreeHost(void *p)
{
	free(p);
	return cudaSuccess;
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
	(void)flags;
	*s = new esd_emu::stream;
	return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	for (std::thread &t : s->blocks)
		if (t.joinable())
			t.join();
	s->blocks.clear();
	return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	cudaStreamSynchronize(s);
	delete s;
	return cudaSuccess;
}
inline cudaError_t cudaStreamQuery(cudaStream_t s)
{
	return s->running.load() ? cudaErrorNotReady : cudaSuccess;
}

/* Every block resident at once, each on its own OS thread. */
template <class... P>
cudaError_t cudaLaunchCooperativeKernel(void (*f)(P...), dim3 grid, dim3 block, void **args,
                                        size_t smem, cudaStream_t s)
{
	if (block.x == 0 || block.x > ESD_EMU_THREADS_MAX || block.x % 32 || smem > ESD_EMU_SMEM ||
	    grid.x == 0 || grid.x > (unsigned)esd_emu::sms())
		return cudaErrorInvalidValue;
	auto params = std::make_shared<std::tuple<std::decay_t<P>...>>(
	    esd_emu::unpack<P...>(args, std::index_sequence_for<P...>{}));
	s->running += grid.x;
	for (unsigned x = 0; x < grid.x; x++)
		s->blocks.emplace_back([=]() {
			blockIdx = dim3(x, 0, 0);
			gridDim = grid;
			blockDim = block;
			esd_emu::run_block(block.x, [=]() { std::apply(f, *params); });
			s->running--;
		});
	return cudaSuccess;
}

#endif
