/*
 * stat.c - access statistics of a stream: one counter per row, then each
 * table's counts sorted (radix, descending) for the rank-frequency curve.
 * Skew is reported two ways: the share of accesses of the top 1 % of rows,
 * and a least-squares Zipf exponent over the head of the curve (ranks 1,
 * 2, 4, ... while the count is at least 8, so the flat tail of one-off IDs
 * does not bend the fit). Cache cover is that of a static oracle cache
 * holding the most frequent rows: an upper bound for any policy. A bag
 * table's lengths are counted exactly (one counter per length up to its
 * max_bag) for the min, mean, quantiles and power-of-two histogram.
 */
#include "stat.h"
#include "format.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include <esd/err.h>

#define BATCH 4096

/* Sort descending (LSD radix on the complement, 4 passes of 8 bits). */
static int sort_desc(uint32_t *a, size_t n)
{
	uint32_t *tmp = malloc((n ? n : 1) * sizeof(*tmp));
	if (!tmp)
		return -ENOMEM;
	uint32_t *src = a, *dst = tmp;
	for (int pass = 0; pass < 4; pass++) {
		size_t cnt[257] = {0};
		int sh = pass * 8;
		for (size_t i = 0; i < n; i++)
			cnt[((~src[i]) >> sh & 0xff) + 1]++;
		for (int b = 0; b < 256; b++)
			cnt[b + 1] += cnt[b];
		for (size_t i = 0; i < n; i++)
			dst[cnt[(~src[i]) >> sh & 0xff]++] = src[i];
		uint32_t *t = src;
		src = dst;
		dst = t;
	}
	/* 4 passes: the result is back in a */
	free(tmp);
	return 0;
}

static double fit_zipf(const uint32_t *c, uint64_t d)
{
	double sx = 0, sy = 0, sxx = 0, sxy = 0;
	int n = 0;
	for (uint64_t r = 1; r <= d && c[r - 1] >= 8; r *= 2) {
		double x = log((double)r), y = log((double)c[r - 1]);
		sx += x;
		sy += y;
		sxx += x * x;
		sxy += x * y;
		n++;
	}
	if (n < 3)
		return NAN;
	double den = n * sxx - sx * sx;
	return den > 0 ? -(n * sxy - sx * sy) / den : NAN;
}

static uint64_t sum_top(const uint32_t *c, uint64_t d, uint64_t k)
{
	uint64_t s = 0;
	for (uint64_t i = 0; i < d && i < k; i++)
		s += c[i];
	return s;
}

/* Keys with count >= v over all tables (each sorted descending). */
static uint64_t count_ge(uint32_t *const *c, const uint64_t *d, uint32_t nt, uint32_t v)
{
	uint64_t n = 0;
	for (uint32_t t = 0; t < nt; t++) {
		uint64_t lo = 0, hi = d[t]; /* first index with c < v */
		while (lo < hi) {
			uint64_t mid = (lo + hi) / 2;
			if (c[t][mid] >= v)
				lo = mid + 1;
			else
				hi = mid;
		}
		n += lo;
	}
	return n;
}

/* Accesses covered by the k most frequent keys over all tables. */
static uint64_t global_top(uint32_t *const *c, const uint64_t *d, uint32_t nt, uint64_t k)
{
	uint64_t all = 0;
	uint32_t maxc = 0;
	for (uint32_t t = 0; t < nt; t++) {
		all += d[t];
		if (d[t] && c[t][0] > maxc)
			maxc = c[t][0];
	}
	uint64_t total = 0;
	if (k >= all) {
		for (uint32_t t = 0; t < nt; t++)
			total += sum_top(c[t], d[t], d[t]);
		return total;
	}
	if (k == 0)
		return 0;
	/* v* = largest v with count_ge(v) >= k */
	uint32_t lo = 1, hi = maxc;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo + 1) / 2;
		if (count_ge(c, d, nt, mid) >= k)
			lo = mid;
		else
			hi = mid - 1;
	}
	uint64_t above = 0;
	for (uint32_t t = 0; t < nt; t++)
		for (uint64_t i = 0; i < d[t] && c[t][i] > lo; i++) {
			total += c[t][i];
			above++;
		}
	return total + (k - above) * lo;
}

/* Each bag of got samples into lens[t][its length] (tables with lens[t]). */
static void count_lens(uint64_t *const *lens, const uint32_t *off, int64_t got, uint32_t nt)
{
	for (int64_t s = 0; s < got; s++)
		for (uint32_t t = 0; t < nt; t++)
			if (lens[t])
				lens[t][off[s * nt + t + 1] - off[s * nt + t]]++;
}

/* The weights of got samples' keys into each table's min, sum (in wt_mean)
 * and max. */
static void count_weights(struct ds_table_stat *ts, const esd_key_t *keys, const float *wts,
                          uint32_t nkeys)
{
	for (uint32_t j = 0; j < nkeys; j++) {
		struct ds_table_stat *t = &ts[esd_key_table(keys[j])];
		double w = wts[j];
		if (!t->wt_n || w < t->wt_min)
			t->wt_min = w;
		if (!t->wt_n || w > t->wt_max)
			t->wt_max = w;
		t->wt_mean += w;
		t->wt_n++;
	}
}

static int count_all(struct esd_ds_reader *r, uint64_t limit, uint32_t *const *cnt,
                     uint64_t *const *lens, uint64_t *samples, uint64_t *positives,
                     struct ds_table_stat *wst);

int esd_ds_count_accesses(struct esd_ds_reader *r, uint64_t limit, uint32_t *const *cnt,
                          uint64_t *const *lens, uint64_t *samples, uint64_t *positives)
{
	return count_all(r, limit, cnt, lens, samples, positives, NULL);
}

/* esd_ds_count_accesses, and with wst (a weighted stream) each table's
 * weights. */
static int count_all(struct esd_ds_reader *r, uint64_t limit, uint32_t *const *cnt,
                     uint64_t *const *lens, uint64_t *samples, uint64_t *positives,
                     struct ds_table_stat *wst)
{
	const struct esd_ds_info *in = esd_ds_reader_info(r);
	const uint32_t nt = in->ntables;
	uint64_t per = 0; /* the most keys a sample has: bags count every ID */
	for (uint32_t t = 0; t < nt; t++)
		per += in->max_bag[t] > 1 ? in->max_bag[t] : 1;
	uint64_t cap = per * BATCH < (UINT64_C(1) << 20) ? per * BATCH : UINT64_C(1) << 20;
	cap = cap < per ? per : cap;
	esd_key_t *keys = malloc(sizeof(*keys) * cap);
	uint32_t *off = malloc(sizeof(*off) * ((size_t)BATCH * nt + 1));
	float *labels = malloc(sizeof(*labels) * BATCH);
	float *wts = wst ? malloc(sizeof(*wts) * cap) : NULL;
	int rc = -ENOMEM;
	if (!keys || !off || !labels || (wst && !wts))
		goto out;
	*samples = *positives = 0;
	const uint64_t want = limit ? limit : UINT64_MAX;
	while (*samples < want) {
		uint64_t k = want - *samples < BATCH ? want - *samples : BATCH;
		int64_t got = esd_ds_read_bags_w(r, k, labels, NULL, keys, cap, off, wts);
		if (got < 0) {
			rc = (int)got;
			goto out;
		}
		if (got == 0)
			break;
		for (int64_t s = 0; s < got; s++)
			*positives += labels[s] > 0.5f;
		for (uint32_t j = 0; j < off[got * nt]; j++) {
			uint32_t *c = &cnt[esd_key_table(keys[j])][esd_key_id(keys[j])];
			if (*c != UINT32_MAX)
				(*c)++;
		}
		if (lens)
			count_lens(lens, off, got, nt);
		if (wst)
			count_weights(wst, keys, wts, off[got * nt]);
		*samples += (uint64_t)got;
	}
	rc = 0;
out:
	free(keys);
	free(off);
	free(labels);
	free(wts);
	return rc;
}

unsigned esd_ds_bag_bucket(uint32_t len)
{
	unsigned b = 0;
	for (; len; len >>= 1)
		b++;
	return b;
}

/* The nearest-rank pct % quantile of the n (>= 1) lengths counted in h[0..max]. */
static uint32_t quantile(const uint64_t *h, uint32_t max, uint64_t n, unsigned pct)
{
	uint64_t want = (n * pct + 99) / 100, cum = 0;
	for (uint32_t len = 0; len <= max; len++) {
		cum += h[len];
		if (cum >= want)
			return len;
	}
	return max;
}

/* Table ts's bag-length summary from h[0..max] (bags counted by length). */
static void bag_summary(struct ds_table_stat *ts, const uint64_t *h, uint32_t max)
{
	uint64_t n = 0;
	double sum = 0;
	for (uint32_t len = 0; len <= max; len++) {
		if (!h[len])
			continue;
		if (!n)
			ts->bag_min = len;
		ts->bag_max = len;
		n += h[len];
		sum += (double)len * (double)h[len];
		ts->bag_hist[esd_ds_bag_bucket(len)] += h[len];
	}
	if (!n)
		return;
	ts->bag_mean = sum / (double)n;
	ts->bag_p50 = quantile(h, max, n, 50);
	ts->bag_p90 = quantile(h, max, n, 90);
	ts->bag_p99 = quantile(h, max, n, 99);
}

/* Table t's figures from its counts c[rows] (compacted to its d nonzero
 * ones, sorted descending, in place); returns its accesses, -1 on ENOMEM. */
static int64_t table_stat(struct ds_stat *st, uint32_t t, uint32_t *c, uint64_t *d_out)
{
	uint64_t d = 0;
	for (uint64_t i = 0; i < st->info.rows[t]; i++)
		if (c[i])
			c[d++] = c[i];
	if (sort_desc(c, d))
		return -1;
	*d_out = d;
	struct ds_table_stat *ts = &st->t[t];
	ts->rows = st->info.rows[t];
	ts->distinct = d;
	ts->top_count = d ? c[0] : 0;
	uint64_t k1 = (uint64_t)ceil(0.01 * (double)ts->rows);
	uint64_t kc = (uint64_t)floor(st->cache_ratio * (double)ts->rows);
	double acc = (double)st->samples; /* a bag table: every ID of its bags */
	if (st->info.max_bag[t] > 1) {
		acc = 0;
		for (uint64_t i = 0; i < d; i++)
			acc += c[i];
	}
	ts->top1_share = acc > 0 ? (double)sum_top(c, d, k1 ? k1 : 1) / acc : 0;
	ts->cache_cover = acc > 0 ? (double)sum_top(c, d, kc) / acc : 0;
	ts->zipf_fit = fit_zipf(c, d);
	st->distinct += d;
	return (int64_t)acc;
}

int esd_ds_stat_compute(const char *path, double cache_ratio, uint64_t limit, struct ds_stat *st)
{
	if (!(cache_ratio >= 0.0 && cache_ratio <= 1.0))
		return esd_ds_fail(-EINVAL, "cache ratio %g not in [0, 1]", cache_ratio);
	struct esd_ds_reader *r;
	int rc = esd_ds_open(path, &r);
	if (rc)
		return rc;
	memset(st, 0, sizeof(*st));
	st->info = *esd_ds_reader_info(r);
	const uint32_t nt = st->info.ntables;
	rc = esd_ds_digest(r, &st->digest);
	if (rc) {
		esd_ds_close(r);
		return rc;
	}
	for (uint32_t t = 0; t < nt; t++)
		st->total_rows += st->info.rows[t];
	uint32_t *cnt[ESD_DS_MAX_TABLES] = {0};
	uint64_t *lens[ESD_DS_MAX_TABLES] = {0};
	uint64_t dist[ESD_DS_MAX_TABLES] = {0};
	if (st->total_rows > DS_STAT_MAX_ROWS) {
		rc = esd_ds_fail(-ENOMEM,
		                 "%s: %llu rows in all, stat counts at most %llu: convert or "
		                 "generate with --scale/--max-rows",
		                 path, (unsigned long long)st->total_rows,
		                 (unsigned long long)DS_STAT_MAX_ROWS);
		goto out;
	}
	rc = -ENOMEM;
	for (uint32_t t = 0; t < nt; t++) {
		if (!(cnt[t] = calloc(st->info.rows[t], sizeof(uint32_t))))
			goto out;
		if (st->info.max_bag[t] > 1 &&
		    !(lens[t] = calloc((size_t)st->info.max_bag[t] + 1, sizeof(uint64_t))))
			goto out;
	}
	if ((rc = count_all(r, limit, cnt, lens, &st->samples, &st->positives,
	                    st->info.weighted ? st->t : NULL)))
		goto out;
	for (uint32_t t = 0; t < nt; t++)
		if (st->t[t].wt_n)
			st->t[t].wt_mean /= (double)st->t[t].wt_n;
	st->cache_ratio = cache_ratio;
	uint64_t accesses = 0;
	for (uint32_t t = 0; t < nt; t++) {
		int64_t acc = table_stat(st, t, cnt[t], &dist[t]);
		if (acc < 0) {
			rc = -ENOMEM;
			goto out;
		}
		accesses += (uint64_t)acc;
		if (lens[t])
			bag_summary(&st->t[t], lens[t], st->info.max_bag[t]);
	}
	st->cache_rows = (uint64_t)floor(cache_ratio * (double)st->total_rows);
	st->cache_cover =
	    accesses ? (double)global_top(cnt, dist, nt, st->cache_rows) / (double)accesses : 0;
	rc = 0;
out:
	for (uint32_t t = 0; t < nt; t++) {
		free(cnt[t]);
		free(lens[t]);
	}
	esd_ds_close(r);
	return rc;
}
