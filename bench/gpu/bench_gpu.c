/*
 * bench_gpu: the exact solver on the GPU against the one-core CPU solver,
 * side by side in one run, for n = 8, 16, 32, 64 workers and k = 1024 ..
 * 65536 rows (uniform random costs in [0, 100000), equal capacities,
 * medians over reps; every GPU answer is checked bit for bit against the
 * CPU's and the program exits 1 on a difference). Per n it then prints
 * the cross-over esd_gpu_calibrate() measures, and one hybrid(alpha) step
 * of the dispatcher three ways: all on the CPU, the opt part on the GPU
 * after Heu (serial), and the opt part on the GPU while Heu runs
 * (overlapped: esd_solver_set_exact_split). Without a device the GPU
 * columns are '-'.
 *
 * Each size also runs the older kernel (ESD_GPU_FULL_SCAN |
 * ESD_GPU_ONE_PATH: every row rescanned after every step, one path a
 * step) on the same matrices: its round trip, steps and rescanned rows
 * beside the current kernel's, so the work saved shows in steps and rows
 * even where the timings mean nothing (bench_gpu_emu, the same program on
 * the CPU emulation of the kernel: no device needed). At the end, the
 * goals: k = 8192, n = 8 round trip and k = 65536, n = 64 against the CPU.
 *
 *   bench_gpu [--n N]... [--min-k K] [--max-k K] [--reps R] [--alpha A]
 *             [--blocks B] [--table-only]
 *
 * --table-only: the table and the goals, without the cross-over and the
 * hybrid step.
 */
#include <esd/types.h>
#include <esd/clock.h>
#include <esd/dispatch_solve.h>
#include <esd/gpu.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REPS 101

struct opts {
	uint32_t ns[8], nn;
	uint32_t min_k, max_k, blocks;
	int reps, hybrid;
	double alpha;
};

/* What the goals need: the round trip at k = 8192, n = 8 and the CPU's
 * ratio at k = 65536, n = 64 (0: not measured); every answer compared. */
static struct {
	double rt_8192_8, ratio_65536_64;
	unsigned long long compared;
} goals;

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

static void fill(int64_t *c, size_t len, uint64_t seed)
{
	for (size_t i = 0; i < len; i++)
		c[i] = (int64_t)(esd_splitmix64_next(&seed) % 100000);
}

static int parse(int argc, char **argv, struct opts *o)
{
	*o = (struct opts){.min_k = 1024, .max_k = 65536, .reps = 7, .alpha = 0.25, .hybrid = 1};
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--table-only")) {
			o->hybrid = 0;
			continue;
		}
		if (v == NULL)
			goto bad;
		if (!strcmp(a, "--n") && o->nn < 8)
			o->ns[o->nn++] = (uint32_t)atoi(v);
		else if (!strcmp(a, "--min-k"))
			o->min_k = (uint32_t)atoi(v);
		else if (!strcmp(a, "--max-k"))
			o->max_k = (uint32_t)atoi(v);
		else if (!strcmp(a, "--reps"))
			o->reps = atoi(v);
		else if (!strcmp(a, "--alpha"))
			o->alpha = atof(v);
		else if (!strcmp(a, "--blocks"))
			o->blocks = (uint32_t)atoi(v);
		else
			goto bad;
		i++;
	}
	if (o->nn == 0) {
		static const uint32_t def[] = {8, 16, 32, 64};
		memcpy(o->ns, def, sizeof(def));
		o->nn = 4;
	}
	for (uint32_t i = 0; i < o->nn; i++)
		if (o->ns[i] < 2 || o->ns[i] > ESD_GPU_MAX_N)
			goto bad;
	if (o->reps < 1 || o->reps > MAX_REPS || !(o->alpha > 0 && o->alpha <= 1) ||
	    o->min_k < 64 || o->max_k < o->min_k || o->max_k > ESD_SOLVE_MAX_K)
		goto bad;
	return 0;
bad:
	fprintf(stderr, "bench_gpu: --n 2..%u (repeatable), --min-k 64.., --max-k ..%u, "
	                "--reps 1..%d, --alpha (0, 1], --blocks B, --table-only\n",
	        ESD_GPU_MAX_N, ESD_SOLVE_MAX_K, MAX_REPS);
	return -1;
}

struct bufs {
	int64_t *c;
	uint32_t *a, *b;
	int64_t tc[MAX_REPS], tg[MAX_REPS], to[MAX_REPS];
};

/* What one kernel did on the last rep. */
struct kwork {
	unsigned long long steps, paths, rescanned;
};

/* One GPU solve in kernel mode `mode`, checked against the CPU's answer
 * in b->a. Its time into *t and its work into *w; 1 on a mismatch. */
static int gpu_once(struct esd_gpu_solver *g, struct bufs *b, uint32_t k, uint32_t n,
                    uint32_t mode, int64_t *t, struct kwork *w, int *cpu_answered)
{
	const struct esd_gpu_stats *st = esd_gpu_solver_stats(g);
	esd_gpu_set_kernel_mode(g, mode);
	int64_t t0 = esd_now_ns();
	int rc = esd_gpu_solve(g, b->c, k, n, NULL, 0, b->b);
	*t = esd_now_ns() - t0;
	esd_gpu_set_kernel_mode(g, 0);
	if (rc < 0)
		return 1;
	*cpu_answered += !st->last_by_gpu;
	*w = (struct kwork){st->kernel_steps, st->kernel_paths, st->kernel_rescanned};
	goals.compared++;
	if (memcmp(b->a, b->b, k * sizeof(uint32_t)) != 0) {
		fprintf(stderr, "bench_gpu: GPU (kernel mode %u) and CPU differ at k %u n %u\n", mode,
		        k, n);
		return 1;
	}
	return 0;
}

/* One row of the table: k x n, the CPU, the kernel and the older kernel
 * (ESD_GPU_FULL_SCAN | ESD_GPU_ONE_PATH), reps each. 1 on a mismatch. */
static int one_size(struct esd_gpu_solver *g, struct esd_solver *s, struct bufs *b, uint32_t k,
                    uint32_t n, int reps, int have_gpu)
{
	const struct esd_gpu_stats *st = esd_gpu_solver_stats(g);
	const uint32_t old = ESD_GPU_FULL_SCAN | ESD_GPU_ONE_PATH;
	int64_t dev[MAX_REPS], can[MAX_REPS];
	struct kwork w = {0}, wo = {0};
	int cpu_answered = 0;

	for (int r = 0; r < reps; r++) {
		fill(b->c, (size_t)k * n, 1000u * k + 7u * n + (uint64_t)r);
		int64_t t = esd_now_ns();
		if (esd_solve_opt(s, b->c, k, n, NULL, b->a) < 0)
			return 1;
		b->tc[r] = esd_now_ns() - t;
		if (!have_gpu)
			continue;
		if (gpu_once(g, b, k, n, 0, &b->tg[r], &w, &cpu_answered))
			return 1;
		dev[r] = st->last_device_ns;
		can[r] = st->last_canon_ns;
		if (gpu_once(g, b, k, n, old, &b->to[r], &wo, &cpu_answered))
			return 1;
	}
	double mc = median_ms(b->tc, reps);
	if (!have_gpu) {
		printf("%6u %10.3f %10s %8s\n", k, mc, "-", "-");
		return 0;
	}
	double mg = median_ms(b->tg, reps), mo = median_ms(b->to, reps);
	uint64_t steps = st->kernel_steps ? st->kernel_steps : 1;
	const uint64_t *pr = st->kernel_profile;
	if (k == 8192 && n == 8)
		goals.rt_8192_8 = mg;
	if (k == 65536 && n == 64)
		goals.ratio_65536_64 = mc / mg;
	printf("%6u %10.3f %10.3f %8.2f %9.3f %8.3f %6llu %5.2f %7.1f | %10.3f %6llu %7.1f %6.2f "
	       "%6u  %llu/%llu/%llu/%llu/%llu/%llu/%llu %.1f%s\n",
	       k, mc, mg, mc / mg, median_ms(dev, reps), median_ms(can, reps), w.steps,
	       (double)w.paths / (double)(w.steps ? w.steps : 1),
	       (double)w.rescanned / (double)(w.steps ? w.steps : 1), mo, wo.steps,
	       (double)wo.rescanned / (double)(wo.steps ? wo.steps : 1), mo / mg,
	       st->kernel_blocks, (unsigned long long)(pr[0] / steps),
	       (unsigned long long)(pr[1] / steps), (unsigned long long)(pr[2] / steps),
	       (unsigned long long)(pr[3] / steps), (unsigned long long)(pr[4] / steps),
	       (unsigned long long)(pr[5] / steps), (unsigned long long)(pr[6] / steps),
	       (double)pr[7] / (double)steps, cpu_answered ? "  (CPU answered some)" : "");
	return 0;
}

/* The dispatcher's hook: the GPU solver's two halves. */
static int hook_submit(void *ctx, const int64_t *cost, uint32_t k, uint32_t n, const uint32_t *cap)
{
	return esd_gpu_submit(ctx, cost, k, n, cap, 0);
}

static int hook_collect(void *ctx, uint32_t *assign)
{
	return esd_gpu_collect(ctx, assign);
}

static int hook_solve(void *ctx, const int64_t *cost, uint32_t k, uint32_t n, const uint32_t *cap,
                      uint32_t *assign)
{
	return esd_gpu_solve(ctx, cost, k, n, cap, 0, assign);
}

/* One hybrid(alpha) step at k x n: CPU only, GPU serial, GPU overlapped. */
static int hybrid_step(struct esd_gpu_solver *g, struct bufs *b, uint32_t k, uint32_t n,
                       int reps, double alpha)
{
	struct esd_solver *cpu, *ser, *ovl;
	struct esd_hybrid_params p = {alpha, ESD_EXACT_SSP, ESD_HEU_ROW_ORDER};
	int64_t tc[MAX_REPS], ts[MAX_REPS], to[MAX_REPS], heu[MAX_REPS], opt[MAX_REPS];
	uint32_t *a3 = malloc(k * sizeof(uint32_t));

	if (!a3 || esd_solver_create(&cpu) || esd_solver_create(&ser) || esd_solver_create(&ovl))
		return 1;
	esd_solver_set_exact(ser, hook_solve, g);
	esd_solver_set_exact_split(ovl, hook_submit, hook_collect, g);
	for (int r = 0; r < reps; r++) {
		fill(b->c, (size_t)k * n, 77u * k + n + (uint64_t)r);
		if (esd_solve_hybrid(cpu, b->c, k, n, NULL, &p, b->a) ||
		    esd_solve_hybrid(ser, b->c, k, n, NULL, &p, b->b) ||
		    esd_solve_hybrid(ovl, b->c, k, n, NULL, &p, a3))
			return 1;
		tc[r] = esd_solver_stats(cpu)->total_ns;
		ts[r] = esd_solver_stats(ser)->total_ns;
		to[r] = esd_solver_stats(ovl)->total_ns;
		heu[r] = esd_solver_stats(cpu)->heu_ns;
		opt[r] = esd_solver_stats(cpu)->opt_ns;
		if (memcmp(b->a, b->b, k * sizeof(uint32_t)) || memcmp(b->a, a3, k * sizeof(uint32_t))) {
			fprintf(stderr, "bench_gpu: hybrid decisions differ at k %u n %u\n", k, n);
			return 1;
		}
	}
	double c = median_ms(tc, reps), s = median_ms(ts, reps), o = median_ms(to, reps);
	printf("hybrid(%.2f) step, k %u (opt rows %u): cpu %.3f ms (opt %.3f, heu %.3f) | gpu serial "
	       "%.3f ms | gpu overlapped %.3f ms | cpu/overlapped %.2f\n",
	       alpha, k, esd_solver_stats(cpu)->opt_rows, c, median_ms(opt, reps),
	       median_ms(heu, reps), s, o, c / o);
	esd_solver_free(cpu);
	esd_solver_free(ser);
	esd_solver_free(ovl);
	free(a3);
	return 0;
}

static int one_n(struct esd_gpu_solver *g, struct esd_solver *s, struct bufs *b,
                 const struct opts *o, uint32_t n, int have_gpu)
{
	printf("\nn = %u\n%6s %10s %10s %8s %9s %8s %6s %5s %7s | %10s %6s %7s %6s %6s  %s\n", n,
	       "k", "cpu (ms)", "gpu (ms)", "cpu/gpu", "device", "canon", "steps", "paths", "rows",
	       "old (ms)", "steps", "rows", "old/gpu", "blocks",
	       "cycles/step: gather/path/flow/move/scan/publish/barrier pops/step");
	esd_gpu_set_min_rows(g, 0);
	for (uint32_t k = o->min_k; k <= o->max_k; k *= 2)
		if (one_size(g, s, b, k - k % n, n, o->reps, have_gpu))
			return 1;
	if (!have_gpu || !o->hybrid)
		return 0;
	struct esd_gpu_calibration cal;
	if (esd_gpu_calibrate(g, n, o->max_k, 3, &cal) < 0)
		return 1;
	if (cal.min_rows == ESD_GPU_NEVER)
		printf("cross-over (esd_gpu_calibrate, 3 reps): none, the CPU answers every size\n");
	else
		printf("cross-over (esd_gpu_calibrate, 3 reps): the GPU from k = %u\n", cal.min_rows);
	esd_gpu_set_min_rows(g, 0);
	return hybrid_step(g, b, o->max_k - o->max_k % n, n, o->reps, o->alpha);
}

/* The goals: k = 8192, n = 8 round trip <= 0.5 ms; k = 65536, n = 64 at
 * least 3x the one-core CPU; every GPU answer the CPU's bit for bit. */
static void print_goals(struct esd_gpu_solver *g, int have_gpu)
{
	printf("\ngoals on this device:\n");
	if (!have_gpu) {
		printf("  none measured: no device\n");
		return;
	}
	if (strstr(esd_gpu_solver_describe(g), "CPU emulation")) {
		printf("  not judged: the CPU emulation's times are not a GPU's (steps and rows are); "
		       "%llu answers compared, all equal\n", goals.compared);
		return;
	}
	if (goals.rt_8192_8 > 0)
		printf("  k = 8192, n = 8 round trip: %.3f ms (goal <= 0.5 ms): %s\n", goals.rt_8192_8,
		       goals.rt_8192_8 <= 0.5 ? "met" : "not met");
	else
		printf("  k = 8192, n = 8: not measured (--n 8, k range)\n");
	if (goals.ratio_65536_64 > 0)
		printf("  k = 65536, n = 64 cpu/gpu: %.2f (goal >= 3): %s\n", goals.ratio_65536_64,
		       goals.ratio_65536_64 >= 3 ? "met" : "not met");
	else
		printf("  k = 65536, n = 64: not measured (--n 64, k range)\n");
	printf("  GPU == CPU bit for bit: %llu answers compared, all equal\n", goals.compared);
}

int main(int argc, char **argv)
{
	struct opts o;
	struct esd_gpu_solver *g;
	struct esd_solver *s;
	struct bufs b;
	int rc;

	if (parse(argc, argv, &o) < 0)
		return 2;
	struct esd_gpu_params gp = {
	    .max_k = o.max_k, .deadline_ns = 10 * ESD_NS_PER_S, .blocks = o.blocks};
	rc = esd_gpu_solver_create(&gp, &g);
	if (rc < 0) {
		fprintf(stderr, "bench_gpu: esd_gpu_solver_create: %s\n", strerror(-rc));
		return 1;
	}
	if (esd_solver_create(&s) < 0)
		return 1;
	int have_gpu = esd_gpu_solver_device(g) == 0;
	printf("bench_gpu: uniform costs [0, 100000), equal capacities, %d reps, medians; "
	       "device: %s\n",
	       o.reps, esd_gpu_solver_describe(g));
	printf("cpu = esd_solve_opt (one core); gpu = esd_gpu_solve round trip (stage, kernel, "
	       "canonical pass); device, canon: its parts (ms); steps, paths (a step), rows "
	       "(rescanned a step, all blocks); old: the older kernel (every row rescanned, one "
	       "path a step) on the same matrices\n");
	b.c = malloc((size_t)o.max_k * ESD_GPU_MAX_N * sizeof(int64_t));
	b.a = malloc(o.max_k * sizeof(uint32_t));
	b.b = malloc(o.max_k * sizeof(uint32_t));
	if (!b.c || !b.a || !b.b)
		return 1;
	for (uint32_t i = 0; i < o.nn; i++)
		if (one_n(g, s, &b, &o, o.ns[i], have_gpu))
			return 1;
	const struct esd_gpu_stats *st = esd_gpu_solver_stats(g);
	print_goals(g, have_gpu);
	printf("\ncounters: gpu_solved %llu cpu_fallbacks %llu late %llu busy %llu rejected %llu\n",
	       (unsigned long long)st->gpu_solved, (unsigned long long)st->cpu_fallbacks,
	       (unsigned long long)st->late, (unsigned long long)st->busy,
	       (unsigned long long)st->gpu_rejected);
	free(b.c);
	free(b.a);
	free(b.b);
	esd_solver_free(s);
	esd_gpu_solver_free(g);
	return st->gpu_rejected ? 1 : 0;
}
