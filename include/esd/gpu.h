/*
 * esd/gpu.h - the exact (opt) solver offloaded to a GPU: a persistent CUDA
 * kernel, launched once per solver object, that solves the transportation
 * problem of the high-regret rows of HybridDis (k rows, n workers with
 * capacities cap[j], integer costs), with a CPU fallback that always
 * answers, a measured cross-over below which the CPU answers, and a
 * submit/collect pair so the caller works while the GPU solves.
 *
 * Model
 * -----
 * esd_gpu_solver_create() looks for a CUDA device. With one, it launches a
 * cooperative grid of persistent blocks (one per SM by default, `blocks`)
 * and allocates a work queue in pinned, mapped host memory. Without one
 * (no CUDA at build time, no device, or the launch failed) the object is
 * still made: it logs once "no CUDA device: the CPU solver is used" and
 * esd_gpu_solver_device() says -ENODEV. Every answer is the canonical
 * optimum of esd/dispatch_solve.h, bit for bit what esd_solve_opt()
 * returns:
 *   - GPU path: the kernel finds an optimum and its worker potentials
 *     (successive shortest paths on the n worker nodes, rows spread over
 *     the blocks); the host passes both to esd_canonicalize_duals(), which
 *     picks the canonical optimum.
 *   - CPU path: esd_solve_opt() on the solver's own struct esd_solver. It
 *     is taken when there is no device, the kernel is not running (stopped
 *     or still busy with an abandoned job), k < min_rows (the cross-over:
 *     below it the CPU is faster), k > max_k, n > ESD_GPU_MAX_N, the
 *     answer is not in by the deadline (the job is then abandoned: the
 *     kernel sees the abort word at its next step), or the GPU answer
 *     fails the host's checks (counted as gpu_rejected; never expected).
 * Both outcomes are counted (struct esd_gpu_stats) for esdctl.
 *
 * Limits: n <= ESD_GPU_MAX_N (64) workers, k <= max_k <= ESD_SOLVE_MAX_K
 * rows, costs in [0, ESD_COST_MAX]. The code is built for sm_80, sm_89
 * and sm_90, with compute_90 PTX that later GPUs compile at load time;
 * older GPUs, or none, get the CPU path.
 *
 * Caveats: one solver object per thread (like struct esd_solver), one job
 * in flight. The kernel's blocks stay resident for the object's lifetime
 * and poll (block 0 polls the host's doorbell, the others a device word,
 * with __nanosleep between polls): `blocks` bounds what it takes from a
 * GPU that also trains. A step moves the rows tied on a shortest path at
 * once, so matrices with all-distinct cost differences and a large
 * imbalance take one step per moved row: the deadline bounds the wait.
 */
#ifndef ESD_GPU_H
#define ESD_GPU_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest n the kernel handles (the n x n pair table in shared memory). */
#define ESD_GPU_MAX_N 64u

/* Kernel modes (esd_gpu_params.kernel_mode, esd_gpu_set_kernel_mode): 0,
 * the default, rescans after each step only the rows of the workers
 * whose rows moved and moves rows along several node-disjoint shortest
 * paths a step; these bits give the older steps back, for comparison
 * (the answer is the same either way). */
#define ESD_GPU_FULL_SCAN 1u /* rescan every row after every step */
#define ESD_GPU_ONE_PATH  2u /* one augmenting path a step */

/* min_rows that sends nothing to the GPU (the CPU always answers). */
#define ESD_GPU_NEVER UINT32_MAX

struct esd_gpu_params {
	uint32_t max_k;      /* largest k submitted (device buffers); 0: 8192 */
	int64_t deadline_ns; /* default wait per solve; 0: 50 ms */
	int device;          /* CUDA device ordinal; default 0 */
	uint32_t blocks;     /* resident blocks; 0: one per SM */
	uint32_t min_rows;   /* cross-over: k below it goes to the CPU; 0: none
	                      * (esd_gpu_calibrate() sets it) */
	uint32_t kernel_mode; /* ESD_GPU_FULL_SCAN | ESD_GPU_ONE_PATH; 0: neither */
};

struct esd_gpu_stats {
	uint64_t gpu_solved;    /* solves answered by the GPU */
	uint64_t cpu_fallbacks; /* solves answered by the CPU (any reason) */
	uint64_t late;          /* of the fallbacks: GPU past the deadline */
	uint64_t busy;          /* of the fallbacks: kernel still on an abandoned job */
	uint64_t gpu_rejected;  /* of the fallbacks: GPU answer failed the checks */
	uint64_t small;         /* of the fallbacks: k below the cross-over */
	int64_t last_gpu_us;    /* wall time of the last GPU solve (submit to answer) */
	int64_t last_device_ns; /* of it: post to the kernel's answer */
	int64_t last_canon_ns;  /* of it: the host's canonical pass */
	uint64_t kernel_steps;  /* steps of the last GPU solve (one grid barrier each) */
	uint64_t kernel_paths;  /* of them: augmenting paths (several a step) */
	uint64_t kernel_rescanned; /* of them: rows rescanned after the moves, all
	                            * blocks (ESD_GPU_FULL_SCAN: k a step) */
	uint32_t kernel_blocks; /* blocks that solved it */
	/* block 0's profile of it: GPU clock cycles in each phase of the steps
	 * (gather the pair minima, shortest path, path flow, move, scan,
	 * publish, grid barrier), then the shortest-path searches' pops */
	uint64_t kernel_profile[8];
	uint32_t min_rows;      /* the cross-over in force */
	int last_by_gpu;        /* 1 when the last solve was answered by the GPU */
};

/* What esd_gpu_calibrate() measured: per size, CPU and GPU medians. */
#define ESD_GPU_CAL_SIZES 12
struct esd_gpu_calibration {
	uint32_t n, sizes;
	uint32_t k[ESD_GPU_CAL_SIZES];
	int64_t cpu_ns[ESD_GPU_CAL_SIZES], gpu_ns[ESD_GPU_CAL_SIZES];
	uint32_t min_rows; /* the cross-over found (ESD_GPU_NEVER: none) */
};

struct esd_gpu_solver;

/* Make a solver (p may be NULL: defaults). Returns 0 with *out set, with or
 * without a device (see esd_gpu_solver_device); -EINVAL for max_k >
 * ESD_SOLVE_MAX_K or a negative deadline; -ENOMEM. Free with
 * esd_gpu_solver_free() (stops the kernel, frees device and pinned memory). */
int esd_gpu_solver_create(const struct esd_gpu_params *p, struct esd_gpu_solver **out);
void esd_gpu_solver_free(struct esd_gpu_solver *s);

/* 0 when the persistent kernel runs; -ENODEV otherwise (no CUDA at build
 * time, no device, launch failure, or the kernel stopped). */
int esd_gpu_solver_device(const struct esd_gpu_solver *s);
/* A line naming the device, or why there is none (owned by the solver). */
const char *esd_gpu_solver_describe(const struct esd_gpu_solver *s);

/* The canonical optimum of (cost, k, n, cap) into assign[k], as
 * esd_solve_opt(). deadline_ns: the longest wait for the GPU (relative;
 * 0: the solver's default; < 0: no GPU, CPU only). Returns 0, or the errors
 * of esd_solve_opt (-EINVAL, -ENOMEM): bad input is rejected before
 * anything is submitted. Same as esd_gpu_submit() then esd_gpu_collect(). */
int esd_gpu_solve(struct esd_gpu_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                  const uint32_t *cap, int64_t deadline_ns, uint32_t *assign);

/* The two halves of esd_gpu_solve, so the caller works while the GPU
 * solves. submit checks the input (-EINVAL: nothing is pending), copies
 * the costs to the device's staging memory and posts the job, or, when
 * the CPU is to answer, only records it; cost and cap must stay valid
 * until collect. -EBUSY: a job is already pending. collect waits (until
 * the deadline), canonicalises, or solves on the CPU: 0 with assign[k]
 * filled, -ENOMEM, or -EINVAL when nothing is pending. */
int esd_gpu_submit(struct esd_gpu_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                   const uint32_t *cap, int64_t deadline_ns);
int esd_gpu_collect(struct esd_gpu_solver *s, uint32_t *assign);

/* Measure the cross-over for n workers: CPU (esd_solve_opt) against GPU
 * round trips on uniform random matrices of k = 256 * 2^i rows (multiples
 * of n, up to max_rows), reps each (medians), and set min_rows to the
 * least measured k from which the GPU was faster at every larger size
 * (ESD_GPU_NEVER when it never was, or without a device). Fills *out when
 * not NULL. Returns 0, -EINVAL (n, max_rows), -ENOMEM. */
int esd_gpu_calibrate(struct esd_gpu_solver *s, uint32_t n, uint32_t max_rows, int reps,
                      struct esd_gpu_calibration *out);
/* Set the cross-over by hand (0: every k to the GPU; ESD_GPU_NEVER: none). */
void esd_gpu_set_min_rows(struct esd_gpu_solver *s, uint32_t min_rows);
/* Set the kernel mode of later jobs (ESD_GPU_FULL_SCAN | ESD_GPU_ONE_PATH,
 * 0 the default); -EINVAL for other bits. */
int esd_gpu_set_kernel_mode(struct esd_gpu_solver *s, uint32_t mode);

/* Counters since create (owned by the solver). */
const struct esd_gpu_stats *esd_gpu_solver_stats(const struct esd_gpu_solver *s);

#ifdef __cplusplus
}
#endif
#endif /* ESD_GPU_H */
