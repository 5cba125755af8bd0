/*
 * bench_cache - the cache region's hot paths, huge pages against 4 KiB
 * pages side by side in the same run.
 *
 *   lookups   key -> slot on one core, for 1 MB, 100 MB (and with --big
 *             1 GB) of rows (64-float vectors), the cache full, random
 *             keys that are all cached: batched (esd_cmeta_find_batch,
 *             the daemon's path) and one at a time (esd_cmeta_find)
 *   gather    rows copied out by slot (esd_cache_gather) for 64- and
 *             512-float rows, random slots over 256 MB of vectors;
 *             baseline: one memcpy of the same byte count
 *
 * Huge pages are reserved through /proc/sys/vm/nr_hugepages for the run
 * (root) and the old value restored at exit; without them only the 4 KiB
 * column is filled. Medians over --reps repetitions.
 *
 * Both page kinds are mapped at once and the repetitions alternate
 * between them (after one warm-up round), so the ratio column is robust
 * to the machine's background load even where absolute figures are not.
 *
 *   bench_cache [--big] [--reps N] [--core C]
 */
#include <esd/types.h>
#include <esd/cache.h>
#include <esd/clock.h>
#include <esd/log.h>
#include <esd/pin.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NR_PATH "/proc/sys/vm/nr_hugepages"

static long added_nr = 0; /* pages this run added to the pool */

static long read_meminfo(const char *field)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	long v = -1;
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, field, strlen(field)))
			v = strtol(line + strlen(field), NULL, 10);
	if (f)
		fclose(f);
	return v;
}

static void write_nr(long v)
{
	FILE *f = fopen(NR_PATH, "w");
	if (f) {
		fprintf(f, "%ld\n", v);
		fclose(f);
	}
}

static long read_nr(void)
{
	long v = -1;
	FILE *f = fopen(NR_PATH, "r");
	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

/* Give back only what this run added, so reservations other processes
 * made meanwhile survive. */
static void restore_nr(void)
{
	long now = read_nr();
	if (added_nr > 0 && now >= added_nr)
		write_nr(now - added_nr);
}

static bool reserve_huge(long pages)
{
	long nr = read_nr();
	if (nr < 0)
		return false;
	long free_now = read_meminfo("HugePages_Free:");
	if (free_now < pages) {
		write_nr(nr + pages - free_now);
		added_nr = read_nr() - nr;
		atexit(restore_nr);
	}
	return read_meminfo("HugePages_Free:") >= pages;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static int64_t median(int64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_i64);
	return v[n / 2];
}

static struct esd_cache *make_full(uint32_t rows, uint32_t dim, bool huge, uint64_t **keys_out)
{
	struct esd_cache_config cfg = {.rows = rows,
	                               .dim = dim,
	                               .optimizer = ESD_OPT_SGD,
	                               .ntables = 26,
	                               .policy = ESD_POLICY_LRU,
	                               .pages =
	                                   huge ? ESD_CACHE_PAGES_HUGE : ESD_CACHE_PAGES_SMALL};
	struct esd_cache *c = NULL;
	if (esd_cache_create(&cfg, &c))
		return NULL;
	/* keys of 26 tables, sorted: table in the high bits, so table-major */
	uint64_t *keys = malloc((size_t)rows * sizeof(*keys));
	uint32_t per = (rows + 25) / 26;
	for (uint32_t i = 0; i < rows; i++)
		keys[i] = esd_key_make(i / per, (uint64_t)(i % per) * 7919u);
	struct esd_cmeta_fill f = {
	    .pulls = malloc((size_t)rows * sizeof(struct esd_cmeta_pull)),
	    .evicts = malloc((size_t)rows * sizeof(struct esd_cmeta_evict)),
	    .slots = malloc((size_t)rows * sizeof(uint32_t)),
	};
	int rc = esd_cache_begin_iter(c, 1, keys, rows, &f);
	free(f.pulls);
	free(f.evicts);
	free(f.slots);
	if (rc) {
		fprintf(stderr, "fill failed: %d\n", rc);
		exit(1);
	}
	/* touch every row once so page faults are not timed */
	for (uint32_t s = 0; s < rows; s++) {
		esd_cache_vec(c, s)[0] = (float)s;
		esd_cache_grad(c, s)[0] = 0;
	}
	*keys_out = keys;
	return c;
}

/* M lookups per second, batched and single, for huge (h = 0) and 4 KiB
 * (h = 1) pages; the two regions exist at once and the repetitions
 * alternate between them, so machine noise hits both columns alike. */
static void bench_lookups(uint32_t rows, bool huge, int reps, double batched[2], double single[2])
{
	struct esd_cache *c[2] = {NULL, NULL};
	uint64_t *keys[2] = {NULL, NULL};
	const size_t n = 1u << 21, batch = 4096;
	uint64_t *q = malloc(n * sizeof(*q));
	uint32_t *out = malloc(batch * sizeof(*out));
	uint64_t rng = 7, sink = 0;
	int64_t *tb[2], *ts[2];

	for (int h = 0; h < 2; h++) {
		batched[h] = single[h] = 0;
		tb[h] = calloc((size_t)reps, sizeof(int64_t));
		ts[h] = calloc((size_t)reps, sizeof(int64_t));
		if (h == 0 && !huge)
			continue;
		c[h] = make_full(rows, 64, h == 0, &keys[h]);
	}
	for (size_t i = 0; i < n; i++)
		q[i] = keys[1][esd_splitmix64_next(&rng) % rows]; /* same keys in both */
	for (int r = -1; r < reps; r++) {              /* r = -1: warm-up, not counted */
		for (int h = 0; h < 2; h++) {
			if (!c[h])
				continue;
			const struct esd_cmeta *cm = esd_cache_meta_ro(c[h]);
			int64_t t0 = esd_now_ns();
			for (size_t i = 0; i < n; i += batch) {
				esd_cmeta_find_batch(cm, q + i, batch, out);
				sink += out[batch - 1];
			}
			int64_t t1 = esd_now_ns();
			for (size_t i = 0; i < n; i++)
				sink += esd_cmeta_find(cm, q[i]);
			int64_t t2 = esd_now_ns();
			if (r >= 0) {
				tb[h][r] = t1 - t0;
				ts[h][r] = t2 - t1;
			}
		}
	}
	if (sink == 42)
		printf(" ");
	for (int h = 0; h < 2; h++) {
		if (c[h]) {
			batched[h] = (double)n / (double)median(tb[h], reps) * 1e3;
			single[h] = (double)n / (double)median(ts[h], reps) * 1e3;
		}
		free(tb[h]);
		free(ts[h]);
		free(keys[h]);
		esd_cache_close(c[h]);
	}
	free(q);
	free(out);
}

/* GB/s of esd_cache_gather (random slots) and of one memcpy of as many
 * bytes, huge (0) and 4 KiB (1) pages alternating. */
static void bench_gather(uint32_t dim, bool huge, int reps, double gather[2], double copy[2])
{
	struct esd_cache *c[2] = {NULL, NULL};
	uint32_t rows = (uint32_t)((256ull << 20) / (dim * 4u));
	const size_t batch = 8192, rounds = 16;
	size_t bytes = batch * dim * sizeof(float);
	uint32_t *slots = malloc(batch * rounds * sizeof(*slots));
	char *dst = aligned_alloc(64, bytes), *src = aligned_alloc(64, bytes);
	uint64_t rng = 11;
	int64_t *tg[2], *tc[2];

	for (int h = 0; h < 2; h++) {
		uint64_t *keys = NULL;
		gather[h] = copy[h] = 0;
		tg[h] = calloc((size_t)reps, sizeof(int64_t));
		tc[h] = calloc((size_t)reps, sizeof(int64_t));
		if (h == 0 && !huge)
			continue;
		c[h] = make_full(rows, dim, h == 0, &keys);
		free(keys);
	}
	for (size_t i = 0; i < batch * rounds; i++)
		slots[i] = (uint32_t)(esd_splitmix64_next(&rng) % rows);
	memset(dst, 1, bytes);
	memset(src, 2, bytes);
	for (int r = -1; r < reps; r++) {
		for (int h = 0; h < 2; h++) {
			if (!c[h])
				continue;
			int64_t t0 = esd_now_ns();
			for (size_t k = 0; k < rounds; k++)
				esd_cache_gather(c[h], slots + k * batch, batch, ESD_CACHE_VEC,
				                 dst);
			int64_t t1 = esd_now_ns();
			for (size_t k = 0; k < rounds; k++) {
				memcpy(dst, src, bytes);
				__asm__ volatile("" ::"r"(dst) : "memory");
			}
			int64_t t2 = esd_now_ns();
			if (r >= 0) {
				tg[h][r] = t1 - t0;
				tc[h][r] = t2 - t1;
			}
		}
	}
	for (int h = 0; h < 2; h++) {
		if (c[h]) {
			gather[h] = (double)(bytes * rounds) / (double)median(tg[h], reps);
			copy[h] = (double)(bytes * rounds) / (double)median(tc[h], reps);
		}
		free(tg[h]);
		free(tc[h]);
		esd_cache_close(c[h]);
	}
	free(slots);
	free(dst);
	free(src);
}

int main(int argc, char **argv)
{
	bool big = false;
	int reps = 5, core = -1;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--big")) {
			big = true;
		} else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
			reps = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--core") && i + 1 < argc) {
			core = atoi(argv[++i]);
		} else {
			fprintf(stderr, "usage: %s [--big] [--reps N] [--core C]\n", argv[0]);
			return 2;
		}
	}
	if (reps < 1)
		reps = 1;
	esd_log_set_level(ESD_LOG_WARN);
	if (core >= 0 && esd_pin_thread(core, NULL))
		fprintf(stderr, "cannot pin to core %d\n", core);

	/* the largest region of the run decides the reservation */
	struct esd_cache_sizes sz;
	struct esd_cache_config cfg = {
	    .rows = big ? (1u << 30) / 256 : 100u * (1u << 20) / 256, .dim = 64, .ntables = 26};
	esd_cache_size(&cfg, &sz);
	uint64_t need = sz.total;
	cfg.rows = (256u << 20) / 256;
	esd_cache_size(&cfg, &sz);
	if (sz.total > need)
		need = sz.total;
	bool huge = reserve_huge((long)(need >> 21)); /* the 4 KiB twin takes none */

	printf("# bench_cache: medians of %d runs; huge pages %s\n", reps,
	       huge ? "reserved" : "UNAVAILABLE (4 KiB column only)");
	printf("\n## lookups per second, one core (64-float rows, all keys cached)\n");
	printf("%8s %9s  %14s %14s  %14s %14s  %7s\n", "rows_MB", "rows", "huge_batch_M/s",
	       "4k_batch_M/s", "huge_single_M/s", "4k_single_M/s", "huge/4k");
	const uint64_t sizes_mb[3] = {1, 100, 1024};
	for (int i = 0; i < (big ? 3 : 2); i++) {
		uint32_t rows = (uint32_t)(sizes_mb[i] * (1u << 20) / 256);
		double b[2], sg[2];
		bench_lookups(rows, huge, reps, b, sg);
		/* 0 in a huge column: the pool ran dry (another process took
		 * or released pages); printed as such, not as a speed */
		printf("%8llu %9u  %14.1f %14.1f  %14.1f %14.1f  %6.2fx%s\n",
		       (unsigned long long)sizes_mb[i], rows, b[0], b[1], sg[0], sg[1],
		       b[0] > 0 ? b[0] / b[1] : 0.0, b[0] > 0 ? "" : "  (no huge pages)");
	}
	printf("\n## row gather, GB/s (random rows out of 256 MB of vectors; memcpy = one "
	       "contiguous copy of as many bytes)\n");
	printf("%6s  %10s %10s  %11s %10s  %7s  %10s\n", "floats", "huge_GB/s", "4k_GB/s",
	       "huge_memcpy", "4k_memcpy", "huge/4k", "huge/memcpy");
	const uint32_t dims[2] = {64, 512};
	for (int i = 0; i < 2; i++) {
		double g[2], m[2];
		bench_gather(dims[i], huge, reps, g, m);
		bool h = g[0] > 0;
		printf("%6u  %10.2f %10.2f  %11.2f %10.2f  %6.2fx  %9.2fx%s\n", dims[i], g[0], g[1],
		       m[0], m[1], h ? g[0] / g[1] : 0.0, h ? g[0] / m[0] : g[1] / m[1],
		       h ? "" : "  (no huge pages)");
	}
	return 0;
}
