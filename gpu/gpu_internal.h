/*
 * The device backend behind esd/gpu.h: one implementation per file
 * (cuda.cu with nvcc, absent.c without), the same four calls. solver.c
 * owns the policy (deadline, fallback, counters, canonical pass).
 */
#ifndef ESD_GPU_INTERNAL_H
#define ESD_GPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gpu_dev;

/* Start the persistent kernel on device `device` with buffers for max_k
 * rows. 0, or -ENODEV with a reason written to why[whylen]; -ENOMEM. */
int gpu_dev_open(int device, uint32_t max_k, struct gpu_dev **out, char *why, size_t whylen);
/* Stop the kernel and free everything; NULL is fine. */
void gpu_dev_close(struct gpu_dev *d);
/* Post a job. 0; -EBUSY while the kernel is still on an abandoned job;
 * -ENODEV when the kernel has stopped. */
int gpu_dev_submit(struct gpu_dev *d, const int64_t *cost, uint32_t k, uint32_t n,
                   const uint32_t *cap);
/* Wait for the job until deadline_abs_ns (CLOCK_MONOTONIC). 0 with
 * assign[k] and *steps filled; -ETIMEDOUT (the job is abandoned); -EIO
 * (the kernel reported a failure); -ENODEV (the kernel has stopped). */
int gpu_dev_wait(struct gpu_dev *d, int64_t deadline_abs_ns, uint32_t *assign, uint64_t *steps);

#ifdef __cplusplus
}
#endif
#endif
