/*
 * bench_policy - cost of one iteration's metadata work in esd_cmeta.
 *
 * For capacities of 100K and 1M slots, a trace shaped like the paper's
 * default (128 samples x 26 tables per worker and iteration, Zipf-like IDs,
 * cache ~8 % of the rows) runs until the cache is full, then each
 * iteration is timed: esd_cmeta_begin_iter (pins, touches, evictions),
 * the state updates after the pulls, and a lookahead call with the next
 * batch. The baseline measured side by side is a batched index lookup of
 * the same keys (the floor for any begin_iter). Prints medians.
 *
 *   bench_policy [--iters N] [--cap C]
 */
#include <esd/types.h>
#include <esd/clock.h>
#include <esd/policy.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define SAMPLES 128
#define TABLES  26

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* One worker's keys for one iteration, sorted, distinct. */
static size_t draw_batch(uint64_t *rng, uint64_t rows_per_table, uint64_t *keys)
{
	size_t n = 0;
	for (int s = 0; s < SAMPLES; s++) {
		for (uint32_t t = 0; t < TABLES; t++) {
			/* log-uniform IDs (Zipf with s = 1): the top 8 % of a
			 * table's rows draw about 3/4 of its accesses */
			double u = (double)(esd_splitmix64_next(rng) >> 11) / 9007199254740992.0;
			uint64_t id = (uint64_t)exp(u * log((double)rows_per_table + 1)) - 1;
			keys[n++] = esd_key_make(t, id);
		}
	}
	qsort(keys, n, sizeof(*keys), cmp_u64);
	size_t m = 0;
	for (size_t i = 0; i < n; i++)
		if (!m || keys[m - 1] != keys[i])
			keys[m++] = keys[i];
	return m;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static double median_us(int64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_i64);
	return (double)v[n / 2] / 1e3;
}

static void run(uint32_t cap, enum esd_policy policy, int iters, double *lookup_us)
{
	size_t len = esd_cmeta_bytes(cap);
	/* Transparent huge pages when the kernel offers them, as the cache
	 * region has (hugetlbfs) and as the dispatcher's snapshots should. */
	size_t maplen = (len + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
	void *mem = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	madvise(mem, maplen, MADV_HUGEPAGE);
	struct esd_cmeta *cm;
	uint64_t rows = (uint64_t)((double)cap / 0.08 / TABLES);
	uint64_t rng = 42;
	uint64_t *keys = malloc(SAMPLES * TABLES * sizeof(*keys));
	uint64_t *next = malloc(SAMPLES * TABLES * sizeof(*next));
	struct esd_cmeta_pull *pulls = malloc(SAMPLES * TABLES * sizeof(*pulls));
	struct esd_cmeta_evict *evicts = malloc(SAMPLES * TABLES * sizeof(*evicts));
	uint32_t *slots = malloc(SAMPLES * TABLES * sizeof(*slots));
	struct esd_cmeta_fill f = {.pulls = pulls, .evicts = evicts, .slots = slots};
	int64_t *t_begin = calloc((size_t)iters, sizeof(int64_t));
	int64_t *t_state = calloc((size_t)iters, sizeof(int64_t));
	int64_t *t_look = calloc((size_t)iters, sizeof(int64_t));
	int64_t *t_find = calloc((size_t)iters, sizeof(int64_t));
	double evict_sum = 0, n_sum = 0;

	if (esd_cmeta_init(mem, len, cap, policy, &cm)) {
		fprintf(stderr, "init failed\n");
		exit(1);
	}
	size_t n = draw_batch(&rng, rows, keys), nn;
	uint64_t iter = 0;
	/* warm up: fill the cache */
	while (esd_cmeta_count(cm) < cap || iter < 50) {
		esd_cmeta_begin_iter(cm, ++iter, keys, n, &f);
		for (size_t i = 0; i < f.n_pulls; i++)
			esd_cmeta_set_state(cm, pulls[i].slot,
			                    i % 4 ? ESD_ROW_CLEAN : ESD_ROW_DIRTY, iter);
		n = draw_batch(&rng, rows, keys);
	}
	for (int it = 0; it < iters; it++) {
		nn = draw_batch(&rng, rows, next);
		int64_t t0 = esd_now_ns();
		esd_cmeta_find_batch(cm, keys, n, slots);
		int64_t t1 = esd_now_ns();
		esd_cmeta_begin_iter(cm, ++iter, keys, n, &f);
		int64_t t2 = esd_now_ns();
		for (size_t i = 0; i < f.n_pulls; i++)
			esd_cmeta_set_state(cm, pulls[i].slot,
			                    i % 4 ? ESD_ROW_CLEAN : ESD_ROW_DIRTY, iter);
		int64_t t3 = esd_now_ns();
		esd_cmeta_lookahead(cm, next, nn, iter + 1);
		int64_t t4 = esd_now_ns();
		t_find[it] = t1 - t0;
		t_begin[it] = t2 - t1;
		t_state[it] = t3 - t2;
		t_look[it] = t4 - t3;
		evict_sum += (double)f.n_evicts;
		n_sum += (double)n;
		memcpy(keys, next, nn * sizeof(*keys));
		n = nn;
	}
	double lk = median_us(t_find, iters), bi = median_us(t_begin, iters);
	if (policy == ESD_POLICY_LRU)
		*lookup_us = lk;
	printf("%9u  %-9s  %6.0f  %7.0f  %8.1f  %10.1f  %6.2fx  %9.1f  %9.1f\n", cap,
	       esd_policy_name(policy), n_sum / iters, evict_sum / iters, lk, bi, bi / lk,
	       median_us(t_state, iters), median_us(t_look, iters));
	free(t_begin);
	free(t_state);
	free(t_look);
	free(t_find);
	free(keys);
	free(next);
	free(pulls);
	free(evicts);
	free(slots);
	munmap(mem, maplen);
}

int main(int argc, char **argv)
{
	int iters = 200;
	uint32_t caps[2] = {100000, 1000000};
	int ncaps = 2;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
			iters = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--cap") && i + 1 < argc) {
			caps[0] = (uint32_t)strtoul(argv[++i], NULL, 0);
			ncaps = 1;
		} else {
			fprintf(stderr, "usage: %s [--iters N] [--cap C]\n", argv[0]);
			return 2;
		}
	}
	if (iters < 1)
		iters = 1;
	printf("# esd_cmeta per-iteration cost, %d samples x %d keys, medians over %d iterations\n",
	       SAMPLES, TABLES, iters);
	printf(
	    "# lookup = esd_cmeta_find_batch of the same keys (baseline); ratio = begin/lookup\n");
	printf("%9s  %-9s  %6s  %7s  %8s  %10s  %7s  %9s  %9s\n", "capacity", "policy", "keys",
	       "evicts", "lookup_us", "begin_us", "ratio", "state_us", "ahead_us");
	for (int c = 0; c < ncaps; c++) {
		double lookup = 0;
		for (int p = 0; p <= ESD_POLICY_LOOKAHEAD; p++)
			run(caps[c], (enum esd_policy)p, iters, &lookup);
	}
	return 0;
}
