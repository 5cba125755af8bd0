/*
 * esd/gpu.h: the offloaded exact solver's policy. Checks the input while
 * staging it for the device, posts it to the backend (cuda.cu or
 * absent.c), waits until the deadline, canonicalises the GPU optimum with
 * its potentials (esd_canonicalize_duals) so the answer is bit for bit
 * esd_solve_opt()'s, and falls back to esd_solve_opt() whenever the GPU
 * cannot answer in time or the job is below the cross-over. Every outcome
 * is counted for esdctl.
 */
#include "gpu_internal.h"

#include <esd/types.h>
#include <esd/clock.h>
#include <esd/dispatch_solve.h>
#include <esd/gpu.h>
#include <esd/log.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MAX_K       8192u
#define DEFAULT_DEADLINE_NS (50 * ESD_NS_PER_MS)

enum pending { P_NONE, P_GPU, P_CPU };

struct esd_gpu_solver {
	struct gpu_dev *dev; /* NULL: no device, CPU only */
	struct esd_solver *cpu;
	uint32_t max_k, min_rows, mode;
	int64_t deadline_ns;
	struct esd_gpu_stats st;
	char desc[192];
	/* the job between submit and collect */
	enum pending pending;
	const int64_t *cost;
	uint32_t k, n, small;
	uint32_t cap[ESD_MAX_WORKERS];
	int64_t t0, deadline_abs;
};

int esd_gpu_solver_create(const struct esd_gpu_params *p, struct esd_gpu_solver **out)
{
	struct esd_gpu_params d = {0};
	struct esd_gpu_solver *s;
	char why[160] = "";
	int rc;

	if (p != NULL)
		d = *p;
	if (d.max_k == 0)
		d.max_k = DEFAULT_MAX_K;
	if (d.deadline_ns == 0)
		d.deadline_ns = DEFAULT_DEADLINE_NS;
	if (d.max_k > ESD_SOLVE_MAX_K || d.deadline_ns < 0 || d.device < 0 || d.blocks > 4096 ||
	    (d.kernel_mode & ~(ESD_GPU_FULL_SCAN | ESD_GPU_ONE_PATH))) {
		ESD_ERR("gpu", "bad parameters: max_k %u (at most %u), deadline %lld ns, device %d, "
		        "blocks %u (at most 4096), kernel_mode %#x (bits 0x1 and 0x2 only)",
		        d.max_k, ESD_SOLVE_MAX_K, (long long)d.deadline_ns, d.device, d.blocks,
		        d.kernel_mode);
		return -EINVAL;
	}
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		return -ENOMEM;
	s->max_k = d.max_k;
	s->deadline_ns = d.deadline_ns;
	s->mode = d.kernel_mode;
	s->min_rows = s->st.min_rows = d.min_rows;
	rc = esd_solver_create(&s->cpu);
	if (rc < 0)
		goto free_s;
	rc = esd_gpu_dev_open(d.device, d.max_k, d.blocks, &s->dev, why, sizeof(why));
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
	esd_gpu_dev_close(s->dev);
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

void esd_gpu_set_min_rows(struct esd_gpu_solver *s, uint32_t min_rows)
{
	if (s != NULL)
		s->min_rows = s->st.min_rows = min_rows;
}

int esd_gpu_set_kernel_mode(struct esd_gpu_solver *s, uint32_t mode)
{
	if (s == NULL || (mode & ~(ESD_GPU_FULL_SCAN | ESD_GPU_ONE_PATH)))
		return -EINVAL;
	s->mode = mode;
	return 0;
}

/* The shape checks of esd/dispatch_solve.h, and the capacities made
 * explicit into capv. */
static int check_shape(const int64_t *cost, uint32_t k, uint32_t n, const uint32_t *cap,
                       uint32_t *capv)
{
	uint64_t sum = 0;

	if (cost == NULL || n == 0 || n > ESD_MAX_WORKERS || k > ESD_SOLVE_MAX_K)
		return -EINVAL;
	for (uint32_t j = 0; j < n; j++) {
		capv[j] = cap != NULL ? cap[j] : k / n;
		sum += capv[j];
	}
	return sum == k ? 0 : -EINVAL;
}

/* The range check of every cost, copying them to dst when not NULL (one
 * pass over the matrix on the way to the device). 0 or -EINVAL. */
static int check_costs(const int64_t *cost, size_t len, int64_t *dst)
{
	uint64_t bad = 0;

	if (dst != NULL)
		for (size_t i = 0; i < len; i++) {
			bad |= (uint64_t)cost[i] > (uint64_t)ESD_COST_MAX;
			dst[i] = cost[i];
		}
	else
		for (size_t i = 0; i < len; i++)
			bad |= (uint64_t)cost[i] > (uint64_t)ESD_COST_MAX;
	return bad ? -EINVAL : 0;
}

int esd_gpu_submit(struct esd_gpu_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                   const uint32_t *cap, int64_t deadline_ns)
{
	int rc;

	if (s == NULL)
		return -EINVAL;
	if (s->pending != P_NONE)
		return -EBUSY;
	if ((rc = check_shape(cost, k, n, cap, s->cap)) < 0)
		return rc;
	s->cost = cost;
	s->k = k;
	s->n = n;
	s->small = s->dev != NULL && k < s->min_rows;
	if (s->dev == NULL || deadline_ns < 0 || k > s->max_k || n > ESD_GPU_MAX_N || k == 0 ||
	    s->small) {
		if ((rc = check_costs(cost, (size_t)k * n, NULL)) < 0)
			return rc;
		s->pending = P_CPU;
		return 0;
	}
	if ((rc = check_costs(cost, (size_t)k * n, esd_gpu_dev_stage(s->dev))) < 0)
		return rc;
	s->t0 = esd_now_ns();
	s->deadline_abs = s->t0 + (deadline_ns ? deadline_ns : s->deadline_ns);
	rc = esd_gpu_dev_post(s->dev, k, n, s->cap, s->mode);
	if (rc == -EBUSY)
		s->st.busy++;
	s->pending = rc < 0 ? P_CPU : P_GPU;
	return 0;
}

static int cpu_answer(struct esd_gpu_solver *s, uint32_t *assign)
{
	s->st.cpu_fallbacks++;
	s->st.small += s->small;
	s->st.last_by_gpu = 0;
	return esd_solve_opt(s->cpu, s->cost, s->k, s->n, s->cap, assign);
}

int esd_gpu_collect(struct esd_gpu_solver *s, uint32_t *assign)
{
	struct gpu_result res;
	int64_t t1, t2;
	int rc;

	if (s == NULL || assign == NULL || s->pending == P_NONE)
		return -EINVAL;
	enum pending p = s->pending;
	s->pending = P_NONE;
	if (p == P_CPU)
		return cpu_answer(s, assign);
	rc = esd_gpu_dev_wait(s->dev, s->deadline_abs, assign, &res);
	if (rc == -ETIMEDOUT)
		s->st.late++;
	if (rc < 0)
		return cpu_answer(s, assign);
	/* The kernel returns an optimum, its potentials and the verdict of
	 * its own check (a pass apart from the solver: every row sits at its
	 * least reduced cost, and whether some row ties with a lower worker).
	 * Verified and without such ties, the answer is the canonical optimum
	 * already (no optimum is lexicographically smaller: complementary
	 * slackness holds for every optimal pair); with ties, the canonical
	 * pass picks the canonical one. Unverified would be a kernel bug:
	 * counted, and the CPU answers. */
	t1 = esd_now_ns();
	rc = !res.verified ? -EINVAL
	     : res.canonical ? esd_assign_check(s->k, s->n, s->cap, assign)
	                     : esd_canonicalize_tight(s->cpu, s->k, s->n, s->cap, res.tight, assign);
	if (rc == -EINVAL) {
		s->st.gpu_rejected++;
		ESD_ERR("gpu", "GPU answer for k %u n %u is not optimal: the CPU solver is used", s->k,
		        s->n);
		return cpu_answer(s, assign);
	}
	if (rc < 0)
		return rc;
	t2 = esd_now_ns();
	s->st.gpu_solved++;
	s->st.last_by_gpu = 1;
	s->st.kernel_steps = res.steps;
	s->st.kernel_paths = res.paths;
	s->st.kernel_rescanned = res.rescanned;
	s->st.kernel_blocks = res.blocks;
	memcpy(s->st.kernel_profile, res.prof, sizeof(s->st.kernel_profile));
	s->st.last_device_ns = t1 - s->t0;
	s->st.last_canon_ns = t2 - t1;
	s->st.last_gpu_us = (t2 - s->t0) / ESD_NS_PER_US;
	return 0;
}

int esd_gpu_solve(struct esd_gpu_solver *s, const int64_t *cost, uint32_t k, uint32_t n,
                  const uint32_t *cap, int64_t deadline_ns, uint32_t *assign)
{
	if (assign == NULL)
		return -EINVAL;
	int rc = esd_gpu_submit(s, cost, k, n, cap, deadline_ns);
	return rc < 0 ? rc : esd_gpu_collect(s, assign);
}

/* --- cross-over ------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* The sizes to measure: 256, 512, ... up to max_rows, and max_rows itself,
 * each a multiple of n. */
static uint32_t cal_sizes(uint32_t n, uint32_t max_rows, uint32_t *k)
{
	uint32_t c = 0;
	for (uint32_t v = 256; v < max_rows && c < ESD_GPU_CAL_SIZES - 1; v *= 2)
		if (v >= n)
			k[c++] = v - v % n;
	k[c++] = max_rows - max_rows % n;
	return c;
}

/* Median CPU and GPU times of one size; gpu = INT64_MAX when the GPU did
 * not answer every rep itself. */
static int cal_measure(struct esd_gpu_solver *s, uint32_t k, uint32_t n, int reps, int64_t *cost,
                       uint32_t *assign, int64_t *cpu_ns, int64_t *gpu_ns)
{
	int64_t tc[15], tg[15];
	uint64_t seed = 0xE5D0000ull + k * 131u + n;
	int all_gpu = 1;

	for (int r = 0; r < reps; r++) {
		for (size_t i = 0; i < (size_t)k * n; i++)
			cost[i] = (int64_t)(esd_splitmix64_next(&seed) % 100000);
		int64_t t = esd_now_ns();
		int rc = esd_solve_opt(s->cpu, cost, k, n, NULL, assign);
		tc[r] = esd_now_ns() - t;
		if (rc < 0)
			return rc;
		t = esd_now_ns();
		rc = esd_gpu_solve(s, cost, k, n, NULL, 0, assign);
		tg[r] = esd_now_ns() - t;
		if (rc < 0)
			return rc;
		all_gpu &= s->st.last_by_gpu;
	}
	qsort(tc, (size_t)reps, sizeof(*tc), cmp_i64);
	qsort(tg, (size_t)reps, sizeof(*tg), cmp_i64);
	*cpu_ns = tc[reps / 2];
	*gpu_ns = all_gpu ? tg[reps / 2] : INT64_MAX;
	return 0;
}

int esd_gpu_calibrate(struct esd_gpu_solver *s, uint32_t n, uint32_t max_rows, int reps,
                      struct esd_gpu_calibration *out)
{
	struct esd_gpu_calibration c = {.n = n, .min_rows = ESD_GPU_NEVER};
	int rc = 0;

	if (s == NULL || n == 0 || n > ESD_GPU_MAX_N || max_rows < n || reps < 1 || reps > 15)
		return -EINVAL;
	if (max_rows > s->max_k)
		max_rows = s->max_k;
	c.sizes = cal_sizes(n, max_rows, c.k);
	if (s->dev != NULL) {
		struct esd_gpu_stats keep = s->st;
		int64_t *cost = malloc((size_t)max_rows * n * sizeof(int64_t));
		uint32_t *assign = malloc((size_t)max_rows * sizeof(uint32_t));
		s->min_rows = 0;
		for (uint32_t i = 0; i < c.sizes && cost && assign && rc == 0; i++)
			rc = cal_measure(s, c.k[i], n, reps, cost, assign, &c.cpu_ns[i], &c.gpu_ns[i]);
		if (!cost || !assign)
			rc = -ENOMEM;
		free(cost);
		free(assign);
		s->st = keep;
		esd_solver_reset_warm(s->cpu);
		/* the least size from which the GPU is faster at every larger one */
		for (uint32_t i = c.sizes; i-- > 0 && c.gpu_ns[i] < c.cpu_ns[i];)
			c.min_rows = c.k[i];
	}
	if (rc == 0)
		esd_gpu_set_min_rows(s, c.min_rows);
	else
		esd_gpu_set_min_rows(s, ESD_GPU_NEVER);
	if (out != NULL)
		*out = c;
	return rc;
}
