/*
 * bench_gpu: the exact solver at n = 8 workers, m = 32..1024 samples per
 * worker (k = 8m rows), side by side in one run: the GPU solver
 * (esd_gpu_solve, canonical pass included; "-" without a device), the CPU
 * opt solver (esd_solve_opt, the baseline of the ratios) and the dense
 * Hungarian (esd_solve_hungarian, O(k^3): only up to --hungarian-max-k),
 * plus the GPU time the dispatcher spends per iteration with
 * hybrid(alpha): the alpha * k highest-regret rows handed to
 * esd_gpu_solve. Uniform random costs in [0, 100000); medians over reps.
 *
 *   bench_gpu [--reps N] [--alpha A] [--hungarian-max-k K] [--max-m M]
 */
#include <esd/clock.h>
#include <esd/dispatch_solve.h>
#include <esd/gpu.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t N = 8; /* workers (--n) */
#define NMAX 64u

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static double median_ms(int64_t *ns, int n)
{
	qsort(ns, (size_t)n, sizeof(*ns), cmp_i64);
	return esd_ns_to_ms(n % 2 ? ns[n / 2] : (ns[n / 2 - 1] + ns[n / 2]) / 2);
}

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static void fill(int64_t *c, uint32_t k, uint64_t seed)
{
	for (size_t i = 0; i < (size_t)k * N; i++)
		c[i] = (int64_t)(rnd(&seed) % 100000);
}

struct rr {
	int64_t regret;
	uint32_t row;
};

static int cmp_rr(const void *a, const void *b)
{
	const struct rr *x = a, *y = b;
	if (x->regret != y->regret)
		return x->regret < y->regret ? 1 : -1;
	return (x->row > y->row) - (x->row < y->row);
}

/* The opt part of hybrid(alpha) as the dispatcher would hand it to the
 * GPU: rows of largest regret, s_j = floor(alpha * cap_j) slots. Fills
 * sub[rows * N] and cap; returns the number of rows. */
static uint32_t opt_part(const int64_t *c, uint32_t k, double alpha, int64_t *sub, uint32_t *cap,
                         struct rr *rr, int64_t *regret)
{
	uint32_t rows = 0;
	esd_regrets(c, k, N, regret);
	for (uint32_t i = 0; i < k; i++)
		rr[i] = (struct rr){regret[i], i};
	qsort(rr, k, sizeof(*rr), cmp_rr);
	for (uint32_t j = 0; j < N; j++) {
		cap[j] = (uint32_t)(alpha * (k / N));
		rows += cap[j];
	}
	for (uint32_t i = 0; i < rows; i++)
		memcpy(sub + (size_t)i * N, c + (size_t)rr[i].row * N, N * sizeof(int64_t));
	return rows;
}

int main(int argc, char **argv)
{
	int reps = 7;
	double alpha = 0.25;
	uint32_t hmax = 1024, max_m = 1024;
	struct esd_gpu_solver *g;
	struct esd_solver *s;
	int rc;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--reps"))
			reps = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--alpha"))
			alpha = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--hungarian-max-k"))
			hmax = (uint32_t)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--n"))
			N = (uint32_t)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--max-m"))
			max_m = (uint32_t)atoi(argv[i + 1]);
		else {
			fprintf(stderr, "bench_gpu: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	if (reps < 1 || reps > 1000 || !(alpha >= 0 && alpha <= 1) || max_m < 32 || max_m > 8192 ||
	    N < 2 || N > NMAX || (uint64_t)max_m * N > ESD_SOLVE_MAX_K) {
		fprintf(stderr, "bench_gpu: --reps 1..1000, --alpha 0..1, --max-m 32..8192, --n 2..64, "
		                "m * n <= %u\n", ESD_SOLVE_MAX_K);
		return 2;
	}
	struct esd_gpu_params gp = {.max_k = max_m * N, .deadline_ns = 10 * ESD_NS_PER_S};
	rc = esd_gpu_solver_create(&gp, &g);
	if (rc < 0) {
		fprintf(stderr, "bench_gpu: esd_gpu_solver_create: %s\n", strerror(-rc));
		return 1;
	}
	if (esd_solver_create(&s) < 0)
		return 1;
	int have_gpu = esd_gpu_solver_device(g) == 0;
	printf("bench_gpu: n = %u, uniform costs [0, 100000), %d reps, medians (ms); "
	       "device: %s\n",
	       N, reps, esd_gpu_solver_describe(g));
	if (!have_gpu)
		printf("no GPU present: GPU columns are '-'\n");
	printf("%6s %6s %10s %10s %12s %9s %9s %14s %8s %8s\n", "m", "k", "gpu", "cpu_opt",
	       "hungarian", "cpu/gpu", "hung/cpu", "disp_gpu/iter", "opt_rows", "steps");

	int64_t *ns_g = calloc((size_t)reps, sizeof(int64_t));
	int64_t *ns_c = calloc((size_t)reps, sizeof(int64_t));
	int64_t *ns_h = calloc((size_t)reps, sizeof(int64_t));
	int64_t *ns_d = calloc((size_t)reps, sizeof(int64_t));
	for (uint32_t m = 32; m <= max_m; m *= 2) {
		uint32_t k = m * N, cap[NMAX], rows = 0;
		int64_t *c = malloc((size_t)k * N * sizeof(int64_t));
		int64_t *sub = malloc((size_t)k * N * sizeof(int64_t));
		int64_t *regret = malloc(k * sizeof(int64_t));
		struct rr *rr = malloc(k * sizeof(struct rr));
		uint32_t *a = malloc(k * sizeof(uint32_t)), *b = malloc(k * sizeof(uint32_t));
		int do_h = k <= hmax, cpu_answered = 0;
		uint64_t steps = 0;
		if (!c || !sub || !regret || !rr || !a || !b)
			return 1;
		for (int r = 0; r < reps; r++) {
			fill(c, k, 1000u * m + (uint64_t)r);
			int64_t t = esd_now_ns();
			if (esd_solve_opt(s, c, k, N, NULL, a) < 0)
				return 1;
			ns_c[r] = esd_now_ns() - t;
			if (have_gpu) {
				t = esd_now_ns();
				if (esd_gpu_solve(g, c, k, N, NULL, 0, b) < 0)
					return 1;
				ns_g[r] = esd_now_ns() - t;
				cpu_answered += !esd_gpu_solver_stats(g)->last_by_gpu;
				steps = esd_gpu_solver_stats(g)->kernel_steps;
				if (memcmp(a, b, k * sizeof(uint32_t)) != 0) {
					fprintf(stderr, "bench_gpu: GPU and CPU differ at k %u\n",
					        k);
					return 1;
				}
			}
			if (do_h) {
				t = esd_now_ns();
				if (esd_solve_hungarian(s, c, k, N, NULL, b) < 0)
					return 1;
				ns_h[r] = esd_now_ns() - t;
			}
			/* dispatcher iteration: the opt part of hybrid(alpha) */
			rows = opt_part(c, k, alpha, sub, cap, rr, regret);
			t = esd_now_ns();
			if (rows > 0 &&
			    esd_gpu_solve(g, sub, rows, N, cap, have_gpu ? 0 : -1, b) < 0)
				return 1;
			ns_d[r] = esd_now_ns() - t;
		}
		double mc = median_ms(ns_c, reps), mh = do_h ? median_ms(ns_h, reps) : 0;
		double mg = have_gpu ? median_ms(ns_g, reps) : 0, md = median_ms(ns_d, reps);
		char sg[32] = "-", sh[32] = "skipped", rcg[32] = "-", rhc[32] = "-", sd[32];
		if (have_gpu) {
			snprintf(sg, sizeof(sg), cpu_answered ? "(cpu) %.3f" : "%.3f", mg);
			snprintf(rcg, sizeof(rcg), "%.2f", mc / mg);
		}
		if (do_h) {
			snprintf(sh, sizeof(sh), "%.3f", mh);
			snprintf(rhc, sizeof(rhc), "%.1f", mh / mc);
		}
		snprintf(sd, sizeof(sd), have_gpu ? "%.3f" : "(cpu) %.3f", md);
		printf("%6u %6u %10s %10.3f %12s %9s %9s %14s %8u %8llu\n", m, k, sg, mc, sh, rcg,
		       rhc, sd, rows, (unsigned long long)steps);
		free(c);
		free(sub);
		free(regret);
		free(rr);
		free(a);
		free(b);
	}
	const struct esd_gpu_stats *st = esd_gpu_solver_stats(g);
	printf("\ncounters: gpu_solved %llu cpu_fallbacks %llu late %llu busy %llu rejected %llu\n",
	       (unsigned long long)st->gpu_solved, (unsigned long long)st->cpu_fallbacks,
	       (unsigned long long)st->late, (unsigned long long)st->busy,
	       (unsigned long long)st->gpu_rejected);
	free(ns_g);
	free(ns_c);
	free(ns_h);
	free(ns_d);
	esd_solver_free(s);
	esd_gpu_solver_free(g);
	return 0;
}
