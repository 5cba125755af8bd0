/*
 * The device backend when the build had no nvcc (ESD_HAVE_CUDA off, or the
 * sanitizer build): there is never a device, so esd/gpu.h always answers
 * with the CPU solver. Same calls as cuda.cu, one backend per file.
 */
#include "gpu_internal.h"

#include <errno.h>
#include <stdio.h>

int esd_gpu_dev_open(int device, uint32_t max_k, uint32_t blocks, struct gpu_dev **out, char *why,
                 size_t whylen)
{
	(void)device;
	(void)max_k;
	(void)blocks;
	*out = NULL;
	snprintf(why, whylen,
	         "built without CUDA (no nvcc at configure time, or a sanitizer build)");
	return -ENODEV;
}

void esd_gpu_dev_close(struct gpu_dev *d)
{
	(void)d;
}

int64_t *esd_gpu_dev_stage(struct gpu_dev *d)
{
	(void)d;
	return NULL;
}

int esd_gpu_dev_post(struct gpu_dev *d, uint32_t k, uint32_t n, const uint32_t *cap,
                     uint32_t mode)
{
	(void)mode;
	(void)d;
	(void)k;
	(void)n;
	(void)cap;
	return -ENODEV;
}

int esd_gpu_dev_wait(struct gpu_dev *d, int64_t deadline_abs_ns, uint32_t *assign,
                 struct gpu_result *res)
{
	(void)d;
	(void)deadline_abs_ns;
	(void)assign;
	(void)res;
	return -ENODEV;
}
