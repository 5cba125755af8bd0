/*
 * gen.c - the synthetic stream generator. IDs are Zipf-skewed per table
 * (rejection-inversion, zipf.c), mapped from popularity rank to ID through
 * a per-table affine permutation (so hot IDs are scattered over the table,
 * as hashed IDs are). Drift: random transpositions of two uniformly chosen
 * ranks, at drift * rows / 2 per 1M samples, so every rank gets a new ID
 * at the same rate: a hot ID is replaced by a (mostly cold) one and
 * popularity has the same half-life at every rank, head or tail. Labels
 * follow a fixed logistic model of the IDs, so a trainer has something
 * real to learn; dense features look like Criteo's log-transformed counts.
 * Everything comes from one seeded xoshiro256** stream: same parameters,
 * same bytes.
 */
#include "format.h"
#include "zipf.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <esd/err.h>

struct table_gen {
	struct zipf z;
	uint64_t rows;
	uint64_t mul, add; /* rank -> id at sample 0: (mul * rank + add) mod rows */
	uint32_t *perm;    /* rank -> id under drift (NULL without drift) */
	double swap_rate;  /* transpositions per sample */
	uint64_t swaps;    /* transpositions done */
	double wmean;      /* popularity-weighted mean label weight of the head */
};

static uint64_t gcd64(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

static uint64_t mulmod(uint64_t a, uint64_t b, uint64_t m)
{
	if (m <= UINT32_MAX) /* a, b < m: the product fits 64 bits */
		return a * b % m;
	return (uint64_t)(((unsigned __int128)a * b) % m);
}

/* Weight of (table, id) in the label model: uniform in [-0.4, 0.4]. */
static double id_weight(uint64_t seed, uint32_t t, uint64_t id)
{
	uint64_t x = seed ^ ((uint64_t)t << 48) ^ id;
	return ((double)(esd_splitmix64_next(&x) >> 11) * 0x1.0p-53 - 0.5) * 0.8;
}

/* Base log-odds giving roughly each dataset's positive rate. */
static double base_logit(const char *shape)
{
	if (!strcmp(shape, "avazu"))
		return -1.6; /* ~17 % clicks */
	if (!strcmp(shape, "criteo-search"))
		return -1.9; /* ~14 % sales */
	return -1.1;         /* Criteo Kaggle: ~26 % clicks */
}

int esd_ds_gen_defaults(struct esd_ds_gen_params *p, const char *shape)
{
	memset(p, 0, sizeof(*p));
	int rc = esd_ds_shape(shape, &p->info);
	if (rc)
		return rc;
	p->nsamples = 1000000;
	p->info.seed = 1;
	p->info.drift = 0.1;
	p->info.scale = 1.0;
	p->info.origin = ESD_DS_ORIGIN_GEN;
	esd_ds_shape_names(&p->info, shape); /* the shape's columns: C1..C26 */
	for (uint32_t t = 0; t < p->info.ntables; t++)
		p->info.zipf[t] = 1.2;
	snprintf(p->info.source, sizeof(p->info.source), "esd-data gen");
	return 0;
}

#define LOG1P_TAB 4096

/* One ID of table g at sample i: a Zipf rank, the drift's swaps due by
 * then, the rank's ID. */
static uint64_t draw_id(struct table_gen *g, struct rng *r, uint64_t i)
{
	uint64_t rank = esd_zipf_draw(&g->z, r);
	if (!g->perm)
		return (mulmod(g->mul, rank, g->rows) + g->add) % g->rows;
	uint64_t due = (uint64_t)(g->swap_rate * (double)(i + 1));
	for (; g->swaps < due; g->swaps++) {
		uint64_t a = rng_next(r) % g->rows;
		uint64_t b = rng_next(r) % g->rows;
		uint32_t x = g->perm[a];
		g->perm[a] = g->perm[b];
		g->perm[b] = x;
	}
	return g->perm[rank];
}

/* A bag's length: Poisson(mean) (Knuth's product of uniforms; a rounded
 * normal above 30), at most max. */
static uint32_t bag_len(struct rng *r, double mean, uint32_t max)
{
	double k;
	if (mean <= 30.0) {
		double lim = exp(-mean), prod = rng_unit(r);
		for (k = 0; prod > lim; k++)
			prod *= rng_unit(r);
	} else {
		double u = 1.0 - rng_unit(r), v = rng_unit(r);
		k = floor(mean + sqrt(mean) * sqrt(-2.0 * log(u)) * cos(2.0 * 3.14159265358979323846 * v) + 0.5);
		k = k < 0 ? 0 : k;
	}
	return k > max ? max : (uint32_t)k;
}

/* The IDs of table t for sample i into ids (its bag, or its one ID);
 * returns how many, and adds the label weight they carry to *logit. */
static uint32_t draw_table(const struct esd_ds_gen_params *p, struct table_gen *g,
                           struct rng *r, uint32_t t, uint64_t i, uint64_t *ids, double *logit)
{
	const struct esd_ds_info *in = &p->info;
	if (!is_bag(in, t)) {
		ids[0] = draw_id(g, r, i);
		*logit += id_weight(in->seed, t, ids[0]) - g->wmean;
		return 1;
	}
	uint32_t len = bag_len(r, p->bag_mean[t], in->max_bag[t]);
	double w = 0;
	for (uint32_t j = 0; j < len; j++) {
		ids[j] = draw_id(g, r, i);
		w += id_weight(in->seed, t, ids[j]) - g->wmean;
	}
	if (len)
		*logit += w / len; /* a bag weighs what one ID does, on average */
	return len;
}

/* A weighted stream's ID weight: a multiple of 1/16 in [1/16, 2], uniform
 * (exact in f32, so sums of few of them are exact too). Drawn from a
 * stream of their own, so the IDs, labels and dense values are those of
 * the same stream unweighted. */
static float gen_weight(struct rng *r)
{
	return (float)(1 + rng_next(r) % 32) / 16.0f;
}

/* Long: the generator's loop over samples and tables, whose per-table draws and block writes
 * share the loop's state. */
int esd_ds_generate(const struct esd_ds_gen_params *p, const char *path)
{
	const struct esd_ds_info *in = &p->info;
	char why[160];
	int rc = esd_ds_info_check(in, why, sizeof(why));
	if (rc)
		return esd_ds_fail(rc, "gen: %s", why);
	if (!(in->drift >= 0.0) || !isfinite(in->drift))
		return esd_ds_fail(-EINVAL, "gen: drift %g must be >= 0", in->drift);
	for (uint32_t t = 0; t < in->ntables; t++) {
		if (!(in->zipf[t] > 0.0 && in->zipf[t] <= 10.0))
			return esd_ds_fail(-EINVAL,
			                   "gen: table %u: zipf exponent %g not in (0, 10]", t,
			                   in->zipf[t]);
		if (is_bag(in, t) && !(p->bag_mean[t] > 0.0 && p->bag_mean[t] <= in->max_bag[t]))
			return esd_ds_fail(-EINVAL,
			                   "gen: table %u: mean bag length %g not in (0, %u]", t,
			                   p->bag_mean[t], in->max_bag[t]);
	}

	struct table_gen *tg = calloc(in->ntables, sizeof(*tg));
	float *dense = calloc(in->ndense + 1, sizeof(float));
	size_t nids = 0;
	for (uint32_t t = 0; t < in->ntables; t++)
		nids += is_bag(in, t) ? in->max_bag[t] : 1;
	uint64_t *ids = calloc(nids, sizeof(uint64_t));
	float *wts = calloc(nids, sizeof(float));
	uint32_t *lens = calloc(in->ntables, sizeof(uint32_t));
	double *dmean = calloc(in->ndense + 1, sizeof(double));
	float *log1p_tab = malloc(LOG1P_TAB * sizeof(float));
	rc = -ENOMEM;
	if (!tg || !dense || !ids || !wts || !lens || !dmean || !log1p_tab)
		goto out_alloc;

	struct rng r, wr;
	rng_seed(&r, in->seed);
	rng_seed(&wr, in->seed ^ UINT64_C(0x7765696768747321)); /* the weights' stream */
	for (uint32_t t = 0; t < in->ntables; t++) {
		struct table_gen *g = &tg[t];
		g->rows = in->rows[t];
		if (esd_zipf_init(&g->z, g->rows, in->zipf[t]))
			goto out_alloc;
		g->add = g->rows > 1 ? rng_next(&r) % g->rows : 0;
		g->mul = 1;
		if (g->rows > 2) {
			/* a multiplier near rows * 0.618 coprime with rows scatters the ranks */
			uint64_t m = (uint64_t)((double)g->rows * 0.6180339887) | 1;
			m += rng_next(&r) % 64;
			while (gcd64(m % g->rows, g->rows) != 1)
				m++;
			g->mul = m % g->rows;
		}
		/* centre each table's label weight so the positive rate is the
		 * shape's whatever the (scaled) cardinalities */
		double ws = 0, ps = 0;
		for (uint64_t k = 0; k < g->rows && k < 4096; k++) {
			double pk = pow((double)k + 1.0, -in->zipf[t]);
			ws += pk * id_weight(in->seed, t,
			                     (mulmod(g->mul, k, g->rows) + g->add) % g->rows);
			ps += pk;
		}
		g->wmean = ws / ps;
		g->swap_rate = in->drift * (double)g->rows / 2e6;
		if (g->swap_rate > 0.0 && g->rows > 1) {
			if (g->rows > UINT32_MAX) {
				rc = esd_ds_fail(-EINVAL,
				                 "gen: table %u: drift needs tables below 2^32 "
				                 "rows",
				                 t);
				goto out_alloc;
			}
			g->perm = malloc(g->rows * sizeof(uint32_t));
			if (!g->perm)
				goto out_alloc;
			uint64_t v = g->add;
			for (uint64_t k = 0; k < g->rows; k++) {
				g->perm[k] = (uint32_t)v; /* (mul * k + add) mod rows */
				v += g->mul;
				if (v >= g->rows)
					v -= g->rows;
			}
		}
	}
	for (uint32_t j = 0; j < in->ndense; j++)
		dmean[j] = 1.0 + 4.0 * (double)(j % 8) * (double)(j % 8);
	for (uint32_t c = 0; c < LOG1P_TAB; c++)
		log1p_tab[c] = (float)log1p((double)c);

	struct esd_ds_writer *w;
	rc = esd_ds_writer_open(path, in, &w);
	if (rc)
		goto out_alloc;
	double bias = base_logit(in->shape);
	for (uint64_t i = 0; i < p->nsamples; i++) {
		double logit = bias;
		size_t k = 0;
		for (uint32_t t = 0; t < in->ntables; t++) {
			lens[t] = draw_table(p, &tg[t], &r, t, i, ids + k, &logit);
			k += lens[t];
		}
		for (uint32_t j = 0; j < in->ndense; j++) {
			/* a geometric-like count, stored log-transformed like Criteo's */
			double u = 1.0 - rng_unit(&r); /* (0, 1] */
			double cnt = floor(-log(u) * dmean[j]);
			dense[j] = cnt < LOG1P_TAB ? log1p_tab[(uint32_t)cnt] : (float)log1p(cnt);
		}
		if (in->ndense)
			logit += 0.3 * ((double)dense[0] - 0.7);
		double pr = 1.0 / (1.0 + exp(-logit));
		uint8_t label = rng_unit(&r) < pr;
		for (size_t j = 0; in->weighted && j < k; j++)
			wts[j] = gen_weight(&wr);
		rc = esd_ds_writer_append_weighted(w, label, dense, lens, ids,
		                                   in->weighted ? wts : NULL);
		if (rc) {
			esd_ds_writer_discard(w);
			goto out_alloc;
		}
	}
	rc = esd_ds_writer_close(w);
out_alloc:
	for (uint32_t t = 0; tg && t < in->ntables; t++) {
		free(tg[t].perm);
		esd_zipf_free(&tg[t].z);
	}
	free(tg);
	free(dense);
	free(ids);
	free(wts);
	free(lens);
	free(dmean);
	free(log1p_tab);
	return rc;
}
