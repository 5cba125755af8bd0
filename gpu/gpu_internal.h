/*
 * The device backend behind esd/gpu.h: one implementation per file
 * (cuda.cu with nvcc, absent.c without), the same calls. solver.c owns the
 * policy (input checks, deadline, fallback, cross-over, counters,
 * canonical pass).
 */
#ifndef ESD_GPU_INTERNAL_H
#define ESD_GPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gpu_dev;

/* What a finished job returns besides the assignment. */
struct gpu_result {
	uint64_t steps;     /* steps (each moves rows along one or more paths) */
	uint64_t paths;     /* augmenting paths over the steps */
	uint64_t rescanned; /* rows rescanned after the steps' moves, all blocks */
	uint32_t blocks;    /* blocks that solved it */
	int verified;       /* the kernel's check: pot proves the assignment optimal */
	int canonical;      /* verified, and no row is tied with a lower worker */
	const uint64_t *tight; /* tight[r]: row r's tight workers (valid until the next post) */
	uint64_t prof[8];   /* block 0's profile (esd_gpu_stats.kernel_profile) */
	int64_t pot[64];    /* optimal worker potentials */
};

/* Start the persistent kernel on device `device` with buffers for max_k
 * rows; blocks: resident blocks (0: one per SM). 0, or -ENODEV with a
 * reason written to why[whylen]; -ENOMEM. */
int esd_gpu_dev_open(int device, uint32_t max_k, uint32_t blocks, struct gpu_dev **out, char *why,
                 size_t whylen);
/* Stop the kernel and free everything; NULL is fine. */
void esd_gpu_dev_close(struct gpu_dev *d);
/* The staging buffer (pinned host memory, max_k x 64 int64) the next job's
 * costs are written into, row-major k x n. */
int64_t *esd_gpu_dev_stage(struct gpu_dev *d);
/* Post the staged job; mode: ESD_GPU_FULL_SCAN | ESD_GPU_ONE_PATH (0:
 * incremental scan, several paths a step). 0; -EBUSY while the kernel is still on an
 * abandoned job; -ENODEV when the kernel has stopped. */
int esd_gpu_dev_post(struct gpu_dev *d, uint32_t k, uint32_t n, const uint32_t *cap,
                     uint32_t mode);
/* Wait for the job until deadline_abs_ns (CLOCK_MONOTONIC). 0 with
 * assign[k] and *res filled; -ETIMEDOUT (the job is abandoned); -EIO (the
 * kernel reported a failure); -ENODEV (the kernel has stopped). */
int esd_gpu_dev_wait(struct gpu_dev *d, int64_t deadline_abs_ns, uint32_t *assign,
                 struct gpu_result *res);

#ifdef __cplusplus
}
#endif
#endif
