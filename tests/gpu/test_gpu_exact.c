/* The persistent kernel against the CPU solver, bit for bit: random and
 * adversarial matrices (one worker preferred, equal rows, all ties, all
 * zero, costs near 2^40, costs at 0 and ESD_COST_MAX), equal and skewed
 * capacities, n = 3..64, m = 1, k not a power of two; random matrices
 * with and without ties in every kernel mode (incremental scan, several
 * paths a step, each alone, neither); the late path (a
 * deadline too short: the CPU answers, the kernel drops the job and takes
 * the next one); submit/collect; the measured cross-over.
 *
 * Needs a CUDA device. Without one it exits 77 ("no CUDA device"), but
 * where the machine has an NVIDIA device node and the solver still cannot
 * start its kernel, that is a failure, not a skip.
 *
 * Built a second time as test_gpu_emu against the CPU emulation of the
 * kernel (gpu/emu/, ESD_GPU_EMU): the same checks on smaller sizes (an
 * emulated step runs thousands of fiber switches), and a kernel that does
 * not start there is a failure; and a third time as test_gpu_emu_modes
 * (ESD_GPU_MODES_ONLY): the kernel modes alone, in their own process. */
#include "gtest.h"

#include <esd/clock.h>
#include <esd/gpu.h>

#include <sys/stat.h>

#if defined(ESD_GPU_EMU) && defined(ESD_GPU_EMU_QUICK)
/* the sanitizer tree: its fiber switches are swapcontext calls, and
 * every access is checked */
#define KMAX(gpu, emu) ((emu) / 4 < 512 ? 512 : (emu) / 4)
#elif defined(ESD_GPU_EMU)
#define KMAX(gpu, emu) (emu)
#else
#define KMAX(gpu, emu) (gpu)
#endif

static struct esd_gpu_solver *g;

static int setup(void **state)
{
	(void)state;
	struct esd_gpu_params p = {.max_k = 16384, .deadline_ns = KMAX(10, 60) * ESD_NS_PER_S};
	if (esd_gpu_solver_create(&p, &g) < 0)
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	esd_gpu_solver_free(g);
	return 0;
}

/* One instance on the GPU, which must answer. */
static void must_match(struct esd_solver *s, const int64_t *c, uint32_t k, uint32_t n,
                       const uint32_t *cap, const char *what)
{
	int by_gpu = gt_compare(g, s, c, k, n, cap, 0);
	const struct esd_gpu_stats *st = esd_gpu_solver_stats(g);
	if (!by_gpu)
		fail_msg("k %u n %u %s: CPU answered (late %llu rejected %llu busy %llu)", k, n,
		         what, (unsigned long long)st->late, (unsigned long long)st->gpu_rejected,
		         (unsigned long long)st->busy);
	print_message("k %5u n %2u %-16s: gpu %6lld us (device %6lld, canon %5lld), %5llu steps, "
	              "%u blocks\n",
	              k, n, what, (long long)st->last_gpu_us, (long long)(st->last_device_ns / 1000),
	              (long long)(st->last_canon_ns / 1000), (unsigned long long)st->kernel_steps,
	              st->kernel_blocks);
}

/* On the emulation a step at n = 64 is slow and a matrix whose rows all
 * prefer one worker takes about k steps: the edges' large sizes (edges)
 * leave that kind at n = 64 to the sweep (k = 1024, the same blocks). In
 * the sanitizer tree every step is slower again: there that kind runs up
 * to k = 256 (the normal tree's emulation runs the rest). */
static int emu_slow_case(uint32_t k, uint32_t n, enum dt_kind kd, int edges)
{
#if defined(ESD_GPU_EMU) && defined(ESD_GPU_EMU_QUICK)
	(void)n, (void)edges;
	return kd == DT_ONE_WORKER && k > 256;
#elif defined(ESD_GPU_EMU)
	return edges && n == 64 && k > 3 * n + 1 && kd == DT_ONE_WORKER;
#else
	(void)k, (void)n, (void)kd, (void)edges;
	return 0;
#endif
}

static void sweep(uint32_t n, uint32_t kmin, uint32_t kmax)
{
	struct esd_solver *s;
	uint32_t cap[ESD_GPU_MAX_N];
	char what[32];
	assert_int_equal(esd_solver_create(&s), 0);
	for (uint32_t k = kmin; k <= kmax; k *= 2) {
		int64_t *c = malloc((size_t)k * n * sizeof(int64_t));
		assert_non_null(c);
		for (int kd = 0; kd < DT_KINDS; kd++)
			for (int skew = 0; skew <= 1; skew++) {
				if (emu_slow_case(k, n, (enum dt_kind)kd, 0))
					continue;
				dt_fill(c, k, n, (enum dt_kind)kd, 1000003u * n + k + kd);
				gt_caps(cap, k, n, skew);
				snprintf(what, sizeof(what), "%s%s", dt_kind_name((enum dt_kind)kd),
				         skew ? " skew" : "");
				must_match(s, c, k, n, cap, what);
			}
		free(c);
	}
	assert_int_equal(esd_gpu_solver_stats(g)->gpu_rejected, 0);
	esd_solver_free(s);
}

static void test_n8(void **state)
{
	(void)state;
	sweep(8, 256, KMAX(8192, 2048));
}

static void test_n16_n32(void **state)
{
	(void)state;
	sweep(16, 512, KMAX(8192, 1024));
	sweep(32, 512, KMAX(8192, 1024));
}

static void test_n64(void **state)
{
	(void)state;
#ifndef ESD_GPU_EMU_QUICK
	sweep(64, 1024, KMAX(16384, 1024));
#endif
}

/* The kernel's steps in each mode (incremental scan and several paths a
 * step, the default; each change alone; the older kernel) on random
 * matrices at n = 8 and 64 up to k = 8192: uniform costs, costs in a
 * small range (many ties: several paths a step, rows tied across
 * blocks), equal and skewed capacities. Every answer is the CPU's bit for
 * bit, and the full scan rescans k rows a step. */
static void modes_one(struct esd_solver *s, uint32_t k, uint32_t n, uint64_t range, int skew,
                      uint64_t seed)
{
	static const uint32_t modes[] = {0, ESD_GPU_ONE_PATH, ESD_GPU_FULL_SCAN,
	                                 ESD_GPU_FULL_SCAN | ESD_GPU_ONE_PATH};
	const struct esd_gpu_stats *st = esd_gpu_solver_stats(g);
	uint64_t steps[4], rows[4];
	uint32_t cap[ESD_GPU_MAX_N];
	char what[48];
	int64_t *c = malloc((size_t)k * n * sizeof(int64_t));
	assert_non_null(c);
	for (size_t i = 0; i < (size_t)k * n; i++)
		c[i] = (int64_t)(esd_test_rand(&seed) % range);
	gt_caps(cap, k, n, skew);
	for (int m = 0; m < 4; m++) {
		assert_int_equal(esd_gpu_set_kernel_mode(g, modes[m]), 0);
		snprintf(what, sizeof(what), "[0,%llu)%s mode %u", (unsigned long long)range,
		         skew ? " skew" : "", modes[m]);
		must_match(s, c, k, n, cap, what);
		steps[m] = st->kernel_steps;
		rows[m] = st->kernel_rescanned;
		print_message("    paths %llu, rows rescanned %llu (%.1f a step)\n",
		              (unsigned long long)st->kernel_paths, (unsigned long long)rows[m],
		              (double)rows[m] / (double)(steps[m] ? steps[m] : 1));
	}
	assert_int_equal(esd_gpu_set_kernel_mode(g, 0), 0);
	/* the full scan covers every row a step; which tied rows a block
	 * moves depends on the order its threads reach them (on the
	 * emulation too), so the modes' steps are compared by eye only */
	assert_int_equal(rows[3], (uint64_t)k * steps[3]);
	assert_int_equal(rows[2], (uint64_t)k * steps[2]);
	free(c);
}

static void test_modes_random(void **state)
{
	(void)state;
	struct esd_solver *s;
	static const uint64_t ranges[] = {100000, 16, 3};
	assert_int_equal(esd_solver_create(&s), 0);
	assert_int_equal(esd_gpu_set_kernel_mode(g, 4), -EINVAL);
#ifdef ESD_GPU_EMU_QUICK
	const uint32_t kmax = 4096; /* 1, 2 and 3 blocks, more than 1024 rows a block */
#else
	const uint32_t kmax = 8192;
#endif
	for (uint32_t k = 1024; k <= kmax; k *= 2)
		for (size_t r = 0; r < 3; r++)
			modes_one(s, k, 8, ranges[r], (int)(k / 1024 % 2), 31u * k + r);
#ifndef ESD_GPU_EMU_QUICK
	/* k = 8192 with equal capacities and without the middle range: an
	 * emulated step at n = 64 is slow */
	for (size_t r = 0; r < 3; r++)
		modes_one(s, 1000, 64, ranges[r], 1, 57u * 1000 + r);
	for (size_t r = 0; r < 3; r += 2)
		modes_one(s, 8192, 64, ranges[r], 0, 57u * 8192 + r);
#endif
	esd_solver_free(s);
}

/* Shapes at the edges: n = 3 and 2, m = 1, k not a power of two, uneven
 * capacities with zeros, costs at both ends of the range (differences of
 * +-ESD_COST_MAX, the kernel's packing limits). */
static void test_edges(void **state)
{
	(void)state;
	struct esd_solver *s;
#ifdef ESD_GPU_EMU_QUICK
	static const uint32_t ns[] = {2, 3, 5, 8, 17};
#else
	static const uint32_t ns[] = {2, 3, 5, 8, 17, 64};
#endif
	assert_int_equal(esd_solver_create(&s), 0);
	for (size_t t = 0; t < sizeof(ns) / sizeof(ns[0]); t++) {
		uint32_t n = ns[t], cap[ESD_GPU_MAX_N];
		uint32_t ks[] = {n, 3 * n + 1, KMAX(1000, 1000), KMAX(4099, 1500)};
		for (size_t q = 0; q < 4; q++) {
			uint32_t k = ks[q];
			if (q > 0 && k == ks[q - 1]) /* the sanitizer tree's sizes meet */
				continue;
			int64_t *c = malloc((size_t)k * n * sizeof(int64_t));
			assert_non_null(c);
			/* m = 1 / uneven: worker 0 gets nothing when it can */
			gt_caps(cap, k, n, 1);
			for (int kd = 0; kd < DT_KINDS; kd++) {
				if (emu_slow_case(k, n, (enum dt_kind)kd, 1))
					continue;
				dt_fill(c, k, n, (enum dt_kind)kd, 77u * k + n + kd);
				must_match(s, c, k, n, cap, dt_kind_name((enum dt_kind)kd));
			}
			uint64_t st = 99u + k + n;
			for (size_t i = 0; i < (size_t)k * n; i++)
				c[i] = esd_test_rand(&st) % 2 ? ESD_COST_MAX : 0;
			must_match(s, c, k, n, cap, "0 or COST_MAX");
			for (size_t i = 0; i < (size_t)k * n; i++)
				c[i] = ESD_COST_MAX - (int64_t)(esd_test_rand(&st) % 3);
			must_match(s, c, k, n, cap, "COST_MAX ties");
			free(c);
		}
	}
	esd_solver_free(s);
}

static void test_late_falls_back(void **state)
{
	(void)state;
	struct esd_solver *s;
#ifdef ESD_GPU_EMU_QUICK
	const uint32_t k = 256, n = 8; /* one-worker: emu_slow_case's sizes */
#else
	const uint32_t k = KMAX(16384, 2048), n = 8;
#endif
	int64_t *c = malloc((size_t)k * n * sizeof(int64_t));
	assert_non_null(c);
	assert_int_equal(esd_solver_create(&s), 0);
	dt_fill(c, k, n, DT_ONE_WORKER, 7);
	const struct esd_gpu_stats *st = esd_gpu_solver_stats(g);
	uint64_t late = st->late;
	assert_int_equal(gt_compare(g, s, c, k, n, NULL, 1000), 0); /* 1 us */
	assert_int_equal(st->late, late + 1);
	/* the kernel drops the abandoned job; a later solve is the GPU's */
	int by_gpu = 0;
	for (int i = 0; i < 100 && !by_gpu; i++) {
		by_gpu = gt_compare(g, s, c, k, n, NULL, 0);
		if (!by_gpu)
			esd_sleep_ns(ESD_NS_PER_MS);
	}
	assert_true(by_gpu);
	free(c);
	esd_solver_free(s);
}

/* submit, work meanwhile, collect: the same bits as one call; one job at
 * a time; collect without a job is an error. */
static void test_submit_collect(void **state)
{
	(void)state;
	struct esd_solver *s;
	const uint32_t k = KMAX(4096, 1024), n = 16;
	int64_t *c = malloc((size_t)k * n * sizeof(int64_t));
	uint32_t *a = malloc(k * sizeof(uint32_t)), *b = malloc(k * sizeof(uint32_t));
	assert_true(c && a && b);
	assert_int_equal(esd_solver_create(&s), 0);
	dt_fill(c, k, n, DT_RANDOM, 5);
	assert_int_equal(esd_solve_opt(s, c, k, n, NULL, a), 0);
	assert_int_equal(esd_gpu_collect(g, b), -EINVAL);
	assert_int_equal(esd_gpu_submit(g, c, k, n, NULL, 0), 0);
	assert_int_equal(esd_gpu_submit(g, c, k, n, NULL, 0), -EBUSY);
	volatile uint64_t spin = 0; /* the caller's own work */
	for (int i = 0; i < 100000; i++)
		spin += (uint64_t)i;
	assert_int_equal(esd_gpu_collect(g, b), 0);
	assert_true(esd_gpu_solver_stats(g)->last_by_gpu);
	assert_memory_equal(a, b, k * sizeof(uint32_t));
	free(c);
	free(a);
	free(b);
	esd_solver_free(s);
}

/* The measured cross-over is one of the measured sizes (or none), and it
 * is obeyed: below it the CPU answers and the solve counts as small. */
static void test_calibrate(void **state)
{
	(void)state;
	struct esd_gpu_calibration cal;
	struct esd_solver *s;
	assert_int_equal(esd_solver_create(&s), 0);
	assert_int_equal(esd_gpu_calibrate(g, 0, 1024, 3, NULL), -EINVAL);
	assert_int_equal(esd_gpu_calibrate(g, 8, KMAX(16384, 2048), 3, &cal), 0);
	int found = cal.min_rows == ESD_GPU_NEVER;
	for (uint32_t i = 0; i < cal.sizes; i++) {
		print_message("n 8 k %5u: cpu %8.3f ms gpu %8.3f ms\n", cal.k[i],
		              esd_ns_to_ms(cal.cpu_ns[i]),
		              cal.gpu_ns[i] == INT64_MAX ? -1.0 : esd_ns_to_ms(cal.gpu_ns[i]));
		found |= cal.k[i] == cal.min_rows;
	}
	assert_true(found);
	assert_int_equal(esd_gpu_solver_stats(g)->min_rows, cal.min_rows);
	print_message("cross-over: %u\n", cal.min_rows);
	/* obeyed, both ways */
	esd_gpu_set_min_rows(g, 1024);
	int64_t *c = malloc((size_t)2048 * 8 * sizeof(int64_t));
	assert_non_null(c);
	dt_fill(c, 2048, 8, DT_RANDOM, 3);
	uint64_t small = esd_gpu_solver_stats(g)->small;
	assert_int_equal(gt_compare(g, s, c, 512, 8, NULL, 0), 0);
	assert_int_equal(esd_gpu_solver_stats(g)->small, small + 1);
	assert_int_equal(gt_compare(g, s, c, 2048, 8, NULL, 0), 1);
	esd_gpu_set_min_rows(g, 0);
	free(c);
	esd_solver_free(s);
}

/* An NVIDIA device node means a GPU the solver must be able to use. */
static int nvidia_node(void)
{
	struct stat st;
	return stat("/dev/nvidia0", &st) == 0 || stat("/dev/nvidiactl", &st) == 0;
}

int main(void)
{
	struct esd_gpu_solver *probe;
	if (esd_gpu_solver_create(NULL, &probe) < 0) {
		fprintf(stderr, "cannot make the solver object\n");
		return 1;
	}
	if (esd_gpu_solver_device(probe) < 0) {
		fprintf(stderr, "%s\n", esd_gpu_solver_describe(probe));
		esd_gpu_solver_free(probe);
#ifdef ESD_GPU_EMU
		fprintf(stderr, "test_gpu_emu: the emulated kernel did not start\n");
		return 1;
#endif
		if (nvidia_node()) {
			fprintf(stderr, "test_gpu_exact: this machine has an NVIDIA device "
			                "(/dev/nvidia*) but the solver kernel did not start\n");
			return 1;
		}
		ESD_TEST_SKIP("no CUDA device");
	}
	esd_gpu_solver_free(probe);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_n8),          cmocka_unit_test(test_n16_n32),
	    cmocka_unit_test(test_n64),         cmocka_unit_test(test_modes_random),
	    cmocka_unit_test(test_edges),       cmocka_unit_test(test_late_falls_back),
	    cmocka_unit_test(test_submit_collect), cmocka_unit_test(test_calibrate),
	};
#if defined(ESD_GPU_MODES_ONLY)
	cmocka_set_test_filter("test_modes_random");
#elif defined(ESD_GPU_EMU) /* test_gpu_emu_modes runs it on the emulation */
	cmocka_set_skip_filter("test_modes_random");
#endif
	return cmocka_run_group_tests(tests, setup, teardown);
}
