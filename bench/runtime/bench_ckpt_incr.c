/*
 * Bytes a PS shard writes per checkpoint: a full checkpoint of every row
 * against an increment of the rows changed since the previous checkpoint
 * (esd/ckpt.h, Increments), side by side on the same store state. --rows
 * rows are created (a full base is written), then each of --ckpts rounds
 * trains --every iterations of --batch keys drawn from a Zipf(--zipf)
 * stream (gradient staged, the barrier's Adagrad apply) and writes both a
 * full checkpoint and an increment. Prints bytes and milliseconds of each,
 * their medians and the ratio increment / full; at the end the chain (base
 * plus every increment) is compared bit for bit with the last full file.
 *
 * Usage: bench_ckpt_incr [--rows N] [--dim D] [--batch B] [--every I]
 *                        [--ckpts C] [--zipf S] [--dir DIR]
 */
#include "../../runtime/ps/store.h"
#include "zipf_keys.h"

#include <esd/ckpt.h>
#include <esd/clock.h>
#include <esd/optim.h>
#include <esd/types.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct args {
	uint64_t rows;
	unsigned dim, batch, every, ckpts;
	double zipf;
	const char *dir;
};

static int parse(int argc, char **argv, struct args *a)
{
	*a = (struct args){.rows = 1000000, .dim = 16, .batch = 4096, .every = 10,
			   .ckpts = 9, .zipf = 1.2, .dir = "/var/tmp"};
	for (int i = 1; i + 1 < argc; i += 2) {
		const char *k = argv[i], *v = argv[i + 1];
		if (!strcmp(k, "--rows"))
			a->rows = strtoull(v, NULL, 10);
		else if (!strcmp(k, "--dim"))
			a->dim = (unsigned)atoi(v);
		else if (!strcmp(k, "--batch"))
			a->batch = (unsigned)atoi(v);
		else if (!strcmp(k, "--every"))
			a->every = (unsigned)atoi(v);
		else if (!strcmp(k, "--ckpts"))
			a->ckpts = (unsigned)atoi(v);
		else if (!strcmp(k, "--zipf"))
			a->zipf = atof(v);
		else if (!strcmp(k, "--dir"))
			a->dir = v;
		else
			return -1;
	}
	return a->rows && a->dim && a->batch && a->every && a->ckpts &&
			       a->ckpts < ESD_CKPT_MAX_CHAIN && a->zipf > 0
		       ? 0
		       : -1;
}

/* A checkpoint of st at iteration it: every row, or the changed ones as
 * an increment of parent. Returns its bytes (0 on error); *ms its time. */
static uint64_t write_ckpt(struct ps_store *st, const char *path, uint64_t it, const char *parent,
			   uint64_t parent_it, double *ms)
{
	unsigned dim = ps_store_dim(st);
	size_t sd = ps_store_state_len(st);
	struct esd_ckpt_meta m = {.seed = 1, .iteration = it, .dim = dim,
				  .optimizer = ESD_OPT_ADAGRAD, .nshards = 1};
	struct esd_ckpt_writer *w;
	int64_t t0 = esd_now_ns();
	if (parent) {
		m.increment = true;
		m.parent_iteration = parent_it;
		if (esd_ckpt_file_sum(parent, &m.parent_sum))
			return 0;
	}
	if (esd_ckpt_writer_open(path, &m, &w))
		return 0;
	int rc = 0;
	for (size_t i = 0; i < ps_store_count(st) && !rc; i++) {
		if (parent && !ps_store_changed(st, i))
			continue;
		struct ps_row *r = ps_store_at(st, i);
		rc = esd_ckpt_write_row(w, r->key, r->clock, r->data, sd ? r->data + dim : NULL);
	}
	if (rc || esd_ckpt_writer_commit(w)) {
		if (rc)
			esd_ckpt_writer_abort(w);
		return 0;
	}
	*ms = (double)(esd_now_ns() - t0) / 1e6;
	struct stat sb;
	return stat(path, &sb) ? 0 : (uint64_t)sb.st_size;
}

static void train(struct ps_store *st, const struct args *a, const double *cdf, uint64_t *rng,
		  float *g)
{
	for (unsigned it = 0; it < a->every; it++) {
		for (unsigned b = 0; b < a->batch; b++)
			ps_store_stage_grad(st, b, key_of(zipf_draw(cdf, a->rows, rng)), g);
		ps_store_apply_staged(st);
	}
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

/* The chain ending at inc reads as the full file, bit for bit. */
static int chain_equals(const char *inc, const char *full)
{
	const char *pa[] = {inc}, *pb[] = {full};
	struct esd_ckpt_cmp_opts o = {.exact = true, .state = true, .clocks = true};
	struct esd_ckpt_cmp_result res;
	struct esd_ckpt_error err;
	if (esd_ckpt_compare(pa, 1, pb, 1, &o, &res, &err)) {
		fprintf(stderr, "compare: %s\n", err.msg);
		return 0;
	}
	return res.equal;
}

int main(int argc, char **argv)
{
	struct args a;
	if (parse(argc, argv, &a)) {
		fprintf(stderr, "usage: bench_ckpt_incr [--rows N] [--dim D] [--batch B] "
				"[--every I] [--ckpts C<%u] [--zipf S] [--dir DIR]\n",
			ESD_CKPT_MAX_CHAIN);
		return 2;
	}
	struct esd_optim_params op = {.opt = ESD_OPT_ADAGRAD, .lr = 0.05f, .eps = 1e-8f};
	struct ps_store *st;
	double *cdf = zipf_cdf(a.rows, a.zipf), *full_b = calloc(a.ckpts, sizeof(double)),
	       *inc_b = calloc(a.ckpts, sizeof(double)), *full_ms = calloc(a.ckpts, sizeof(double)),
	       *inc_ms = calloc(a.ckpts, sizeof(double));
	float *g = malloc(a.dim * sizeof(float));
	for (unsigned d = 0; g && d < a.dim; d++)
		g[d] = 0.01f;
	if (!g || !cdf || !full_b || !inc_b || !full_ms || !inc_ms || ps_store_create(a.dim, &op, 7, &st))
		return 1;
	for (uint64_t r = 0; r < a.rows; r++)
		if (!ps_store_get(st, key_of(r)))
			return 1;
	char parent[1100], cur[1100], full[1100], base[1100];
	double ms;
	snprintf(base, sizeof(base), "%s/ps-shard0.ckpt.base0", a.dir);
	snprintf(parent, sizeof(parent), "%s", base);
	snprintf(full, sizeof(full), "%s/bench-full.ckpt", a.dir);
	if (!write_ckpt(st, parent, 0, NULL, 0, &ms))
		return 1;
	ps_store_clear_changed(st);
	printf("%llu rows, dim %u, Adagrad; a checkpoint every %u iterations of %u keys, Zipf %.2f\n",
	       (unsigned long long)a.rows, a.dim, a.every, a.batch, a.zipf);
	printf("ckpt  full bytes  full ms   incr bytes  incr ms  incr/full\n");
	uint64_t rng = 42, it = 0;
	for (unsigned c = 0; c < a.ckpts; c++) {
		train(st, &a, cdf, &rng, g);
		it += a.every;
		snprintf(cur, sizeof(cur), "%s/ps-shard0.ckpt.inc%llu", a.dir, (unsigned long long)it);
		full_b[c] = (double)write_ckpt(st, full, it, NULL, 0, &full_ms[c]);
		inc_b[c] = (double)write_ckpt(st, cur, it, parent, it - a.every, &inc_ms[c]);
		if (!full_b[c] || !inc_b[c])
			return 1;
		ps_store_clear_changed(st);
		printf("%4u  %10.0f  %7.1f  %11.0f  %7.1f  %8.4f\n", c + 1, full_b[c], full_ms[c],
		       inc_b[c], inc_ms[c], inc_b[c] / full_b[c]);
		snprintf(parent, sizeof(parent), "%s", cur);
	}
	int same = chain_equals(cur, full);
	printf("base + %u increments read as the last full checkpoint, bit for bit: %s\n",
	       a.ckpts, same ? "yes" : "NO");
	unlink(base);
	unlink(full);
	for (unsigned c = 1; c <= a.ckpts; c++) {
		snprintf(cur, sizeof(cur), "%s/ps-shard0.ckpt.inc%llu", a.dir,
			 (unsigned long long)c * a.every);
		unlink(cur);
	}
	double mf = median(full_b, a.ckpts), mi = median(inc_b, a.ckpts);
	double mfm = median(full_ms, a.ckpts), mim = median(inc_ms, a.ckpts);
	printf("median: full %.0f bytes %.1f ms, increment %.0f bytes %.1f ms: "
	       "increment / full = %.4fx bytes, %.3fx time\n",
	       mf, mfm, mi, mim, mi / mf, mim / mfm);
	return same ? 0 : 1;
}
