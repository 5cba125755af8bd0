/*
 * A PS shard's row store in RAM against the same store on disk
 * (ps.store_dir, ps.store_ram a quarter of the table), side by side in one
 * run: --rows rows are created first (not timed, in a shuffled order, so
 * hot rows are scattered over the file), then each round serves
 * --iters iterations of --batch keys drawn from a Zipf(--zipf) stream over
 * them: a pull (the row read, as the shard encodes it), a gradient staged
 * per key and the barrier's apply. Prints rows/s of each round and the
 * medians, and the ratio disk / RAM.
 *
 * Usage: bench_store [--rows N] [--dim D] [--batch B] [--iters I]
 *                    [--rounds R] [--zipf S] [--dir DIR] [--ram-mb M]
 */
#include "../../runtime/ps/store.h"
#include "zipf_keys.h"

#include <esd/clock.h>
#include <esd/job.h>
#include <esd/optim.h>
#include <esd/types.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct args {
	uint64_t rows, ram_mb;
	unsigned dim, batch, iters, rounds;
	double zipf;
	const char *dir;
};

static int parse(int argc, char **argv, struct args *a)
{
	*a = (struct args){.rows = 2000000, .dim = 16, .batch = 4096, .iters = 100,
			   .rounds = 5, .zipf = 1.2, .dir = "/var/tmp"};
	for (int i = 1; i + 1 < argc; i += 2) {
		const char *k = argv[i], *v = argv[i + 1];
		if (!strcmp(k, "--rows"))
			a->rows = strtoull(v, NULL, 10);
		else if (!strcmp(k, "--dim"))
			a->dim = (unsigned)atoi(v);
		else if (!strcmp(k, "--batch"))
			a->batch = (unsigned)atoi(v);
		else if (!strcmp(k, "--iters"))
			a->iters = (unsigned)atoi(v);
		else if (!strcmp(k, "--rounds"))
			a->rounds = (unsigned)atoi(v);
		else if (!strcmp(k, "--zipf"))
			a->zipf = atof(v);
		else if (!strcmp(k, "--dir"))
			a->dir = v;
		else if (!strcmp(k, "--ram-mb"))
			a->ram_mb = strtoull(v, NULL, 10);
		else
			return -1;
	}
	return a->rows && a->dim && a->batch && a->iters && a->rounds && a->zipf > 0 ? 0 : -1;
}

/* The Zipf stream: rank r (0 hottest) with probability ~ 1 / (r + 1)^s,
 * drawn by binary search in the cumulative table. */
/* Every row, created in a shuffled rank order. */
static int fill(struct ps_store *st, uint64_t n)
{
	uint64_t *perm = malloc(n * sizeof(*perm)), rng = 99;
	if (!perm)
		return -1;
	for (uint64_t i = 0; i < n; i++)
		perm[i] = i;
	for (uint64_t i = n - 1; i > 0; i--) {
		uint64_t j = esd_splitmix64(++rng) % (i + 1), t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	for (uint64_t i = 0; i < n; i++)
		if (!ps_store_get(st, key_of(perm[i]))) {
			free(perm);
			return -1;
		}
	free(perm);
	return 0;
}

/* One round: rows per second of pull + stage + apply. */
static double round_rate(struct ps_store *st, const struct args *a, const double *cdf,
			 uint64_t seed)
{
	float *out = malloc((size_t)a->dim * 4 * sizeof(float)), *g = calloc(a->dim, sizeof(float));
	uint64_t rng = seed, done = 0;
	double sink = 0;
	for (unsigned d = 0; d < a->dim; d++)
		g[d] = 0.01f;
	int64_t t0 = esd_now_ns();
	for (unsigned it = 0; it < a->iters; it++) {
		for (unsigned b = 0; b < a->batch; b++) {
			uint64_t key = key_of(zipf_draw(cdf, a->rows, &rng));
			struct ps_row *r = ps_store_get(st, key);
			memcpy(out, r->data, a->dim * sizeof(float));
			sink += out[0];
			ps_store_stage_grad(st, b, key, g); /* worker b: no duplicate refusal */
			done++;
		}
		ps_store_apply_staged(st);
	}
	double secs = (double)(esd_now_ns() - t0) / 1e9;
	free(out);
	free(g);
	return sink == 12345.678 ? 0 : (double)done / secs;
}

static int cmp_d(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return (a > b) - (a < b);
}

static double median(double *v, unsigned n)
{
	qsort(v, n, sizeof(*v), cmp_d);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
	struct args a;
	if (parse(argc, argv, &a)) {
		fprintf(stderr, "usage: bench_store [--rows N] [--dim D] [--batch B] [--iters I] "
				"[--rounds R] [--zipf S] [--dir DIR] [--ram-mb M]\n");
		return 2;
	}
	struct esd_job job;
	memset(&job, 0, sizeof(job));
	job.dim = a.dim;
	job.seed = 1;
	esd_optim_params_default(&job.optim, ESD_OPT_ADAGRAD);
	struct ps_store *ram, *disk;
	if (ps_store_create_job(&job, 0, &ram))
		return 1;
	snprintf(job.store_dir, sizeof(job.store_dir), "%s", a.dir);
	size_t rec = 16 + (size_t)a.dim * 2 * sizeof(float);
	rec = (rec + 63) & ~(size_t)63;
	double table_mb = (double)a.rows * (double)rec / (1 << 20);
	job.store_ram_mb = a.ram_mb ? a.ram_mb : (uint64_t)(table_mb / 4);
	if (ps_store_create_job(&job, 0, &disk))
		return 1;
	double *cdf = zipf_cdf(a.rows, a.zipf);
	if (!cdf || fill(ram, a.rows) || fill(disk, a.rows))
		return 1;
	printf("bench_store: %llu rows of dim %u (adagrad), %.0f MiB; disk store in %s with "
	       "ps.store_ram = %llu MiB; Zipf %.2f, %u iterations of %u keys a round\n",
	       (unsigned long long)a.rows, a.dim, table_mb, a.dir,
	       (unsigned long long)job.store_ram_mb, a.zipf, a.iters, a.batch);
	double *rr = calloc(a.rounds, sizeof(double)), *rd = calloc(a.rounds, sizeof(double));
	for (unsigned r = 0; r < a.rounds; r++) {
		rr[r] = round_rate(ram, &a, cdf, 1000 + r);
		rd[r] = round_rate(disk, &a, cdf, 1000 + r);
		printf("round %u: ram %.0f rows/s, disk %.0f rows/s, disk resident %.0f MiB\n", r,
		       rr[r], rd[r], (double)ps_store_resident_bytes(disk) / (1 << 20));
	}
	double mr = median(rr, a.rounds), md = median(rd, a.rounds);
	printf("median: ram %.0f rows/s, disk %.0f rows/s, disk/ram %.2f\n", mr, md, md / mr);
	ps_store_free(ram);
	ps_store_free(disk);
	free(cdf);
	free(rr);
	free(rd);
	return 0;
}
