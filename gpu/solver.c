/*
 * esd/gpu.h: the offloaded exact solver's policy. Checks the input, posts
 * it to the device backend (cuda.cu or absent.c), waits until the
 * deadline, canonicalises the GPU optimum with esd_canonicalize() so the
 * answer is bit for bit esd_solve_opt()'s, and falls back to
 * esd_solve_opt() whenever the GPU cannot answer in time. Both outcomes
 * are counted for esdctl.
 */
#include "gpu_internal.h"

#include <esd/clock.h>
#include <esd/dispatch_solve.h>
#include <esd/gpu.h>
#include <esd/log.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#define DEFAULT_MAX_K       8192u
#define DEFAULT_DEADLINE_NS (50 * ESD_NS_PER_MS)

struct esd_gpu_solver {
	struct gpu_dev *dev; /* NULL: no device, CPU only */
	struct esd_solver *cpu;
	uint32_t max_k;
	int64_t deadline_ns;
	struct esd_gpu_stats st;
	char desc[160];
};

int esd_gpu_solver_create(const struct esd_gpu_params *p, struct esd_gpu_solver **out)
{
	struct esd_gpu_params d = {0};
	struct esd_gpu_solver *s;
	char why[128] = "";
	int rc;

	if (p != NULL)
		d = *p;
	if (d.max_k == 0)
		d.max_k = DEFAULT_MAX_K;
	if (d.deadline_ns == 0)
		d.deadline_ns = DEFAULT_DEADLINE_NS;
	if (d.max_k > ESD_SOLVE_MAX_K || d.deadline_ns < 0 || d.device < 0) {
		ESD_ERR("gpu", "bad parameters: max_k %u (at most %u), deadline %lld ns, device %d",
		        d.max_k, ESD_SOLVE_MAX_K, (long long)d.deadline_ns, d.device);
		return -EINVAL;
	}
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		return -ENOMEM;
	s->max_k = d.max_k;
	s->deadline_ns = d.deadline_ns;
	rc = esd_solver_create(&s->cpu);
	if (rc < 0)
		goto free_s;
	rc = gpu_dev_open(d.device, d.max_k, &s->dev, why, sizeof(why));
	if (rc == -ENOMEM)
		goto free_cpu;
	if (rc < 0) {
		s->dev = NULL;
		ESD_WARN("gpu", "no CUDA device: the CPU solver is used (%s)", why);
		snprintf(s->desc, sizeof(s->desc), "no CUDA device: %s", why);
	} else {
		snprintf(s->desc, sizeof(s->desc), "%s", why);
		ESD_INFO("gpu", "persistent solver kernel running on %s (max_k %u)", why, d.max_k);
	}
	*out = s;
	return 0;

free_cpu:
	esd_solver_free(s->cpu);
free_s:
	free(s);
	return rc;
}

void esd_gpu_solver_free(struct esd_gpu_solver *s)
{
	if (s == NULL)
		return;
	gpu_dev_close(s->dev);
	esd_solver_free(s->cpu);
	free(s);
}

int esd_gpu_solver_device(const struct esd_gpu_solver *s)
{
	return s != NULL && s->dev != NULL ? 0 : -ENODEV;
}

const char *esd_gpu_solver_describe(const struct esd_gpu_solver *s)
{
	return s != NULL ? s->desc : "no solver";
}

const struct esd_gpu_stats *esd_gpu_solver_stats(const struct esd_gpu_solver *s)
{
	return &s->st;
}

/* The common checks of esd/dispatch_solve.h, before anything is posted. */
static int check_input(const int64_t *cost, uint32_t k, uint32_t n, const uint32_t *cap,
                       const uint32_t *assign)
{
	uint64_t sum = 0;

	if (cost == NULL || assign == NULL || n == 0 || n > ESD_MAX_WORKERS || k > ESD_SOLVE_MAX_K)
		return -EINVAL;
	if (cap == NULL) {
		if (k % n != 0)
			return -EINVAL;
	} else {
		for (uint32_t j = 0; j < n; j++)
			sum += cap[j];
		if (sum != k)
			return -EINVAL;
	}
	for (size_t i = 0; i < (size_t)k * n; i++)
		if (cost[i] < 0 || cost[i] > ESD_COST_MAX)
			return -EINVAL;
	return 0;
}

static int cpu_answer(struct esd_gpu_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                      const uint32_t *cap, uint32_t *assign)
{
	s->st.cpu_fallbacks++;
	s->st.last_by_gpu = 0;
	return esd_solve_opt(s->cpu, cost, k, n, cap, assign);
}

int esd_gpu_solve(struct esd_gpu_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                  const uint32_t *cap, int64_t deadline_ns, uint32_t *assign)
{
	uint32_t eq[ESD_GPU_MAX_N];
	int64_t t0;
	uint64_t steps = 0;
	int rc;

	if (s == NULL)
		return -EINVAL;
	rc = check_input(cost, k, n, cap, assign);
	if (rc < 0)
		return rc;
	if (s->dev == NULL || deadline_ns < 0 || k > s->max_k || n > ESD_GPU_MAX_N || k == 0)
		return cpu_answer(s, cost, k, n, cap, assign);
	if (deadline_ns == 0)
		deadline_ns = s->deadline_ns;
	if (cap == NULL) {
		for (uint32_t j = 0; j < n; j++)
			eq[j] = k / n;
		cap = eq;
	}
	t0 = esd_now_ns();
	rc = gpu_dev_submit(s->dev, cost, k, n, cap);
	if (rc == -EBUSY)
		s->st.busy++;
	if (rc < 0)
		return cpu_answer(s, cost, k, n, cap, assign);
	rc = gpu_dev_wait(s->dev, t0 + deadline_ns, assign, &steps);
	if (rc == -ETIMEDOUT)
		s->st.late++;
	if (rc < 0)
		return cpu_answer(s, cost, k, n, cap, assign);
	/* The kernel returns an optimum; the canonical pass picks the one the
	 * CPU solver returns. It also rejects a non-optimal or infeasible
	 * answer, which would be a kernel bug: count it and use the CPU. */
	rc = esd_canonicalize(s->cpu, cost, k, n, cap, assign);
	if (rc == -EINVAL) {
		s->st.gpu_rejected++;
		ESD_ERR("gpu", "GPU answer for k %u n %u is not optimal: the CPU solver is used", k,
		        n);
		return cpu_answer(s, cost, k, n, cap, assign);
	}
	if (rc < 0)
		return rc;
	s->st.gpu_solved++;
	s->st.last_by_gpu = 1;
	s->st.kernel_steps = steps;
	s->st.last_gpu_us = (esd_now_ns() - t0) / ESD_NS_PER_US;
	return 0;
}
