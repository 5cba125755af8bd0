/*
 * esd/gpu.h - the exact (opt) solver offloaded to a GPU: a persistent CUDA
 * kernel, launched once per solver object, that solves the transportation
 * problem of the high-regret rows of HybridDis (k rows, n workers with
 * capacities cap[j], integer costs), with a CPU fallback that always
 * answers.
 *
 * Model
 * -----
 * esd_gpu_solver_create() looks for a CUDA device. With one, it launches a
 * single-block persistent kernel on it and allocates a work queue in
 * pinned, mapped host memory (a job slot, a doorbell word the host bumps
 * with a release store, a done word the kernel writes after
 * __threadfence_system()). Without one (no CUDA at build time, no device,
 * or the launch failed) the object is still made: it logs once "no CUDA
 * device: the CPU solver is used" and esd_gpu_solver_device() says
 * -ENODEV. Every esd_gpu_solve() returns the canonical optimum of
 * esd/dispatch_solve.h, bit for bit what esd_solve_opt() returns:
 *   - GPU path: the kernel finds an optimum (successive shortest paths on
 *     the n worker nodes, many rows per augmentation when ties allow); the
 *     host passes it to esd_canonicalize(), which picks the canonical one
 *     among the optima.
 *   - CPU path: esd_solve_opt() on the solver's own struct esd_solver. It
 *     is taken when there is no device, the kernel is not running (stopped
 *     or still busy with an abandoned job), k > max_k, n > ESD_GPU_MAX_N,
 *     the answer is not in by the deadline (the job is then abandoned:
 *     the kernel sees the abort word at its next step), or the GPU answer
 *     fails the host's checks (counted as gpu_rejected; never expected).
 * Both outcomes are counted (struct esd_gpu_stats) for esdctl.
 *
 * Caveats: one solver object per thread (like struct esd_solver); the
 * kernel occupies one SM for the object's lifetime and spins (with
 * __nanosleep) on the doorbell. Augmentations move one row per worker
 * pair unless several rows have the same cost difference, so adversarial
 * matrices with all-distinct differences and a large imbalance take many
 * kernel steps: the deadline bounds the wait.
 */
#ifndef ESD_GPU_H
#define ESD_GPU_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest n the kernel handles (edge tables in shared memory). */
#define ESD_GPU_MAX_N 16u

struct esd_gpu_params {
	uint32_t max_k;      /* largest k submitted (device buffers); 0: 8192 */
	int64_t deadline_ns; /* default wait per solve; 0: 50 ms */
	int device;          /* CUDA device ordinal; default 0 */
};

struct esd_gpu_stats {
	uint64_t gpu_solved;    /* solves answered by the GPU */
	uint64_t cpu_fallbacks; /* solves answered by the CPU (any reason) */
	uint64_t late;          /* of the fallbacks: GPU past the deadline */
	uint64_t busy;          /* of the fallbacks: kernel still on an abandoned job */
	uint64_t gpu_rejected;  /* of the fallbacks: GPU answer failed the checks */
	int64_t last_gpu_us;    /* wall time of the last GPU solve (submit to answer) */
	uint64_t kernel_steps;  /* augmentations of the last GPU solve */
	int last_by_gpu;        /* 1 when the last solve was answered by the GPU */
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
 * anything is submitted. */
int esd_gpu_solve(struct esd_gpu_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                  const uint32_t *cap, int64_t deadline_ns, uint32_t *assign);

/* Counters since create (owned by the solver). */
const struct esd_gpu_stats *esd_gpu_solver_stats(const struct esd_gpu_solver *s);

#ifdef __cplusplus
}
#endif
#endif /* ESD_GPU_H */
