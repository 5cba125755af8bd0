/*
 * Link-aware sizes fitted online (esd/dispatch_quality.h): the size model
 * from a window of what every worker trained and moved, and whether its
 * sizes are worth switching to.
 */
#include <esd/dispatch_quality.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Sizes whose spread (max / min) is below this cannot give a slope. */
#define FIT_MIN_SPREAD 1.25
/* Share of the rows taken as fixed while they cannot be told apart. */
#define FIT_PRIOR_FIXED 0.5
/* Rows per sample never fitted below this share of the mean rows per
 * sample: a worker given more samples never moves fewer rows. */
#define FIT_MIN_SLOPE 0.05
/* An iteration lasts as long as its slowest worker in that iteration: a
 * worker's rows spread from iteration to iteration (about sqrt(rows), as
 * counts of keys drawn at random do), and the expected largest of a few
 * such draws is about one spread above their mean. Each worker's time is
 * taken as its mean plus FIT_SPREAD_Z spreads. */
#define FIT_SPREAD_Z 1.0

/* Least squares y = a + r x over the n points, a >= 0 and r >= rmin. */
static void fit_line(uint32_t n, const double *x, const double *y, double rmin, double *a,
                     double *r)
{
	double mx = 0, my = 0;
	for (uint32_t j = 0; j < n; j++) {
		mx += x[j];
		my += y[j];
	}
	mx /= n;
	my /= n;
	double sxx = 0, sxy = 0;
	for (uint32_t j = 0; j < n; j++) {
		sxx += (x[j] - mx) * (x[j] - mx);
		sxy += (x[j] - mx) * (y[j] - my);
	}
	*r = sxx > 0 ? sxy / sxx : rmin;
	if (*r < rmin)
		*r = rmin;
	*a = my - *r * mx;
	if (*a < 0) { /* through the origin */
		double s2 = 0, s1 = 0;
		for (uint32_t j = 0; j < n; j++) {
			s2 += x[j] * x[j];
			s1 += x[j] * y[j];
		}
		*a = 0;
		*r = s2 > 0 && s1 / s2 > rmin ? s1 / s2 : rmin;
	}
}

int esd_size_fit(uint32_t n, const struct esd_size_obs *obs, double compute_prior,
                 struct esd_size_model *out)
{
	if (!obs || !out || n == 0 || n > ESD_MAX_WORKERS || !(compute_prior >= 0) ||
	    !isfinite(compute_prior))
		return -EINVAL;
	double x[ESD_MAX_WORKERS], y[ESD_MAX_WORKERS], xmin = INFINITY, xmax = 0;
	double samples = 0, rows = 0, ns = 0;
	for (uint32_t j = 0; j < n; j++) {
		if (!obs[j].iters)
			return -EINVAL;
		x[j] = (double)obs[j].samples / (double)obs[j].iters;
		y[j] = (double)obs[j].rows / (double)obs[j].iters;
		xmin = x[j] < xmin ? x[j] : xmin;
		xmax = x[j] > xmax ? x[j] : xmax;
		samples += (double)obs[j].samples;
		rows += (double)obs[j].rows;
		ns += (double)obs[j].compute_ns;
	}
	out->compute_ns = ns > 0 && samples > 0 ? ns / samples : compute_prior;
	const double per_sample = samples > 0 ? rows / samples : 0; /* mean rows per sample */
	if (xmax < FIT_MIN_SPREAD * xmin || samples == 0) {
		double X = 0, mbar = 0; /* per worker and iteration */
		for (uint32_t j = 0; j < n; j++) {
			X += y[j] / n;
			mbar += x[j] / n;
		}
		out->fixed_rows = FIT_PRIOR_FIXED * X;
		out->rows_per_sample = mbar > 0 ? (1 - FIT_PRIOR_FIXED) * X / mbar : 0;
		return 0;
	}
	fit_line(n, x, y, FIT_MIN_SLOPE * per_sample, &out->fixed_rows, &out->rows_per_sample);
	return 0;
}

double esd_size_model_time(uint32_t n, const int64_t *T, const struct esd_size_model *m,
                           const uint32_t *cap)
{
	double worst = 0;
	for (uint32_t j = 0; j < n; j++) {
		const double t = m->compute_ns * cap[j] +
		                 (double)T[j] * (m->fixed_rows + m->rows_per_sample * cap[j]);
		worst = t > worst ? t : worst;
	}
	return worst;
}

void esd_size_fitter_init(struct esd_size_fitter *f, uint32_t n, uint32_t k, uint32_t max_m,
                          double threshold)
{
	memset(f, 0, sizeof(*f));
	f->n = n;
	f->k = k;
	f->max_m = max_m;
	f->threshold = threshold;
}

void esd_size_fitter_changed(struct esd_size_fitter *f, uint64_t at, int forget)
{
	f->valid_from = at;
	if (forget)
		f->ntried = 0;
}

static int same_sizes(uint32_t n, const uint32_t *a, const uint32_t *b)
{
	return !memcmp(a, b, n * sizeof(*a));
}

static struct esd_size_tried *find_tried(struct esd_size_fitter *f, const uint32_t *s)
{
	for (uint32_t i = 0; i < f->ntried; i++)
		if (same_sizes(f->n, f->tried[i].m, s))
			return &f->tried[i];
	return NULL;
}

/* Sizes within FIT_NEAR samples of s on every worker were seen: those
 * are no new sizes to try. */
#define FIT_NEAR 2
static int seen_near(const struct esd_size_fitter *f, const uint32_t *s)
{
	for (uint32_t i = 0; i < f->ntried; i++) {
		uint32_t j = 0;
		while (j < f->n && abs((int)f->tried[i].m[j] - (int)s[j]) <= FIT_NEAR)
			j++;
		if (j == f->n)
			return 1;
	}
	return 0;
}

/* a and r again from every sizes seen (each worker's samples and rows per
 * iteration under each), when they spread enough for a slope: a line
 * over the range the sizes move in rather than around the current
 * sizes alone (rows grow slower than samples). */
static void refit_on_seen(const struct esd_size_fitter *f, const int64_t *T,
                          struct esd_size_model *m)
{
	double x[ESD_SIZE_FIT_TRIED * ESD_MAX_WORKERS], y[ESD_SIZE_FIT_TRIED * ESD_MAX_WORKERS];
	double xmin = INFINITY, xmax = 0, samples = 0, rows = 0;
	uint32_t np = 0;
	for (uint32_t i = 0; i < f->ntried; i++)
		for (uint32_t j = 0; j < f->n; j++) {
			if (T[j] <= 0)
				continue;
			x[np] = f->tried[i].m[j];
			y[np] = f->tried[i].xfer_ns[j] / (double)T[j];
			xmin = x[np] < xmin ? x[np] : xmin;
			xmax = x[np] > xmax ? x[np] : xmax;
			samples += x[np];
			rows += y[np];
			np++;
		}
	if (np < 2 || xmax < FIT_MIN_SPREAD * xmin || samples <= 0)
		return;
	fit_line(np, x, y, FIT_MIN_SLOPE * rows / samples, &m->fixed_rows, &m->rows_per_sample);
}

/* Observed time of sizes seen, with compute c per sample: each worker's
 * mean transfer time plus its spread (T_j sqrt(rows) = sqrt(T_j x its
 * transfer time)). */
static double tried_time(uint32_t n, const struct esd_size_tried *t, double c, const int64_t *T)
{
	double worst = 0;
	for (uint32_t j = 0; j < n; j++) {
		const double x =
		    c * t->m[j] + t->xfer_ns[j] + FIT_SPREAD_Z * sqrt((double)T[j] * t->xfer_ns[j]);
		worst = x > worst ? x : worst;
	}
	return worst;
}

/* The entry of sizes s (made, the oldest going when full). */
static struct esd_size_tried *remember(struct esd_size_fitter *f, const uint32_t *s)
{
	struct esd_size_tried *t = find_tried(f, s);
	if (t)
		return t;
	if (f->ntried == ESD_SIZE_FIT_TRIED) {
		memmove(&f->tried[0], &f->tried[1], sizeof(f->tried[0]) * (ESD_SIZE_FIT_TRIED - 1));
		f->ntried--;
	}
	t = &f->tried[f->ntried++];
	memcpy(t->m, s, f->n * sizeof(*s));
	return t;
}

/*
 * Rows grow slower than samples (keys repeat within a batch and across
 * the iterations a cache keeps them): a worker's rows per iteration are
 * taken as b_j m^p, p fitted over every sizes seen, b_j from its own
 * rows under the current sizes. A line through sizes far apart lies below
 * that curve in between, so sizes are chosen by the curve: the sizer's
 * lines (the fitted line with its spread margins, and the curve's
 * tangents) each give sizes, and the curve judges them.
 */
struct power_model {
	double c, p;
	double b[ESD_MAX_WORKERS];
};

/* Lines judged per choice: the curve's tangents at sizes spread
 * geometrically from 1 to the global batch. */
#define FIT_TANGENTS     48
#define FIT_TANGENT_STEP 1.15
/* Of sizes within the tolerance of the fastest, an iteration longer by
 * a share x is worth link time shorter by x / FIT_COST_WEIGHT. */
#define FIT_COST_WEIGHT 0.05
/* The range a fitted exponent is kept in. */
#define FIT_POWER_MIN 0.3
#define FIT_POWER_MAX 1.0

/* x^p; at the prior's exponent 11/16 = 1/2 + 1/8 + 1/16 by correctly
 * rounded operations only (every process computes the prior: every host
 * gets the same sizes). */
static double power_of(double x, double p)
{
	if (p != ESD_SIZE_PRIOR_POWER)
		return pow(x, p);
	const double x2 = sqrt(x), x8 = sqrt(sqrt(x2)), x16 = sqrt(x8);
	return x2 * x8 * x16;
}

static double power_rows(const struct power_model *pw, uint32_t j, uint32_t m)
{
	return pw->b[j] * power_of((double)m, pw->p);
}

/* Predicted iteration time of sizes cap under the curve, each worker's
 * transfer time raised by its spread (as tried_time judges sizes seen). */
static double power_time(uint32_t n, const int64_t *T, const struct power_model *pw,
                         const uint32_t *cap)
{
	double worst = 0;
	for (uint32_t j = 0; j < n; j++) {
		const double rows = power_rows(pw, j, cap[j]);
		const double t = pw->c * cap[j] + (double)T[j] * rows +
		                 FIT_SPREAD_Z * (double)T[j] * sqrt(rows);
		worst = t > worst ? t : worst;
	}
	return worst;
}

/* Predicted link time of sizes cap under the curve, summed over the links. */
static double power_cost(uint32_t n, const int64_t *T, const struct power_model *pw,
                         const uint32_t *cap)
{
	double sum = 0;
	for (uint32_t j = 0; j < n; j++)
		sum += (double)T[j] * power_rows(pw, j, cap[j]);
	return sum;
}

/* The curve's tangents (with the mean b_j) at sizes from 1 to k, each
 * FIT_TANGENT_STEP times the last or one more, at most FIT_TANGENTS, as
 * lines for the sizer, appended to lines[*nl]. */
static void tangent_lines(uint32_t n, uint32_t k, const struct power_model *pw,
                          struct esd_size_model *lines, uint32_t *nl)
{
	double b = 0;
	for (uint32_t j = 0; j < n; j++)
		b += pw->b[j] / n;
	const double step = sqrt(sqrt(2.0)); /* 2^(1/4), correctly rounded */
	double x0 = 1;
	for (uint32_t i = 0; i < FIT_TANGENTS && x0 <= k; i++) {
		const double y0 = b * power_of(x0, pw->p);
		lines[(*nl)++] = (struct esd_size_model){.compute_ns = pw->c,
		                                         .fixed_rows = y0 * (1 - pw->p),
		                                         .rows_per_sample = pw->p * y0 / x0};
		x0 *= step;
	}
}

/* Of the sizes lines[nl] give, those within tol of the fastest the curve
 * predicts, the ones with the least time plus FIT_COST_WEIGHT x link
 * time, each over the least of them (sizes that can hardly be told apart
 * by time, the cheaper: transfer-only, a slow worker's few samples more
 * save little time and cost much link time). Their line in
 * *out, sizes in sizes[n], predicted time in *t_out. 0 or -errno. */
static int choose_sizes(uint32_t n, uint32_t k, uint32_t max_m, const int64_t *T,
                        const struct power_model *pw, const struct esd_size_model *lines,
                        uint32_t nl, double tol, struct esd_size_model *out, uint32_t *sizes,
                        double *t_out)
{
	uint32_t s[FIT_TANGENTS + 8][ESD_MAX_WORKERS];
	double t[FIT_TANGENTS + 8], cost[FIT_TANGENTS + 8], tbest = INFINITY;
	for (uint32_t i = 0; i < nl; i++) {
		int rc = max_m ? esd_batch_sizes_link_aware_capped(n, k, T, &lines[i], 1, max_m, s[i])
		               : esd_batch_sizes_link_aware(n, k, T, &lines[i], 1, s[i]);
		if (rc)
			return rc;
		t[i] = power_time(n, T, pw, s[i]);
		cost[i] = power_cost(n, T, pw, s[i]);
		tbest = t[i] < tbest ? t[i] : tbest;
	}
	double cmin = INFINITY;
	for (uint32_t i = 0; i < nl; i++)
		if (t[i] <= (1 + tol) * tbest)
			cmin = cost[i] < cmin ? cost[i] : cmin;
	uint32_t pick = nl;
	double best = INFINITY;
	for (uint32_t i = 0; i < nl; i++) {
		if (t[i] > (1 + tol) * tbest)
			continue;
		const double score = (tbest > 0 ? t[i] / tbest : 1) +
		                     FIT_COST_WEIGHT * (cmin > 0 ? cost[i] / cmin : 1);
		if (score < best) {
			best = score;
			pick = i;
		}
	}
	if (pick == nl)
		return -EINVAL;
	*out = lines[pick];
	memcpy(sizes, s[pick], n * sizeof(*sizes));
	*t_out = t[pick];
	return 0;
}

int esd_size_prior(uint32_t n, uint32_t k, const int64_t *T, double compute_ns,
                   uint32_t keys_per_sample, uint32_t max_m, double tol,
                   struct esd_size_model *out)
{
	if (!T || !out || n == 0 || n > ESD_MAX_WORKERS || k < n || keys_per_sample == 0 ||
	    !(compute_ns >= 0) || !isfinite(compute_ns) || !(tol >= 0))
		return -EINVAL;
	struct power_model pw = {.c = compute_ns, .p = ESD_SIZE_PRIOR_POWER};
	for (uint32_t j = 0; j < n; j++) {
		if (T[j] < 0)
			return -EINVAL;
		pw.b[j] = ESD_SIZE_PRIOR_ROWS_PER_KEY * keys_per_sample;
	}
	struct esd_size_model lines[FIT_TANGENTS];
	uint32_t nl = 0, sizes[ESD_MAX_WORKERS];
	double t;
	tangent_lines(n, k, &pw, lines, &nl);
	return choose_sizes(n, k, max_m, T, &pw, lines, nl, tol, out, sizes, &t);
}

/* The curve from the sizes seen: p from the least-squares line of log
 * rows on log samples over every worker of every sizes seen (the prior's
 * while they do not spread), b_j through worker j's rows now. */
static void fit_power(const struct esd_size_fitter *f, const int64_t *T,
                      const struct esd_size_tried *now, double c, struct power_model *pw)
{
	double sx = 0, sy = 0, sxx = 0, sxy = 0, xmin = INFINITY, xmax = 0;
	uint32_t np = 0;
	for (uint32_t i = 0; i < f->ntried; i++)
		for (uint32_t j = 0; j < f->n; j++) {
			const double rows = T[j] > 0 ? f->tried[i].xfer_ns[j] / (double)T[j] : 0;
			if (rows <= 0 || f->tried[i].m[j] == 0)
				continue;
			const double x = log((double)f->tried[i].m[j]), y = log(rows);
			sx += x, sy += y, sxx += x * x, sxy += x * y, np++;
			xmin = f->tried[i].m[j] < xmin ? f->tried[i].m[j] : xmin;
			xmax = f->tried[i].m[j] > xmax ? f->tried[i].m[j] : xmax;
		}
	pw->c = c;
	pw->p = ESD_SIZE_PRIOR_POWER;
	const double vx = np ? sxx - sx * sx / np : 0;
	if (np >= 2 && xmax >= FIT_MIN_SPREAD * xmin && vx > 0) {
		const double p = (sxy - sx * sy / np) / vx;
		pw->p = p < FIT_POWER_MIN ? FIT_POWER_MIN : p > FIT_POWER_MAX ? FIT_POWER_MAX : p;
	}
	double bsum = 0;
	uint32_t nb = 0;
	for (uint32_t j = 0; j < f->n; j++) {
		const double rows = T[j] > 0 ? now->xfer_ns[j] / (double)T[j] : 0;
		pw->b[j] = rows > 0 ? rows / pow((double)now->m[j], pw->p) : 0;
		bsum += pw->b[j];
		nb += pw->b[j] > 0;
	}
	for (uint32_t j = 0; j < f->n; j++) /* a free link, or no rows: the others' mean */
		if (pw->b[j] <= 0)
			pw->b[j] = nb ? bsum / nb : 0;
}

/* The sizes for the fitted line m and the curve pw: the line with its
 * spread as a margin on the fixed rows at one of a few shares (none, 1
 * sample, 1/4 to 2 mean shares), and the curve's tangents, each give
 * sizes; choose_sizes picks (with the fitter's threshold as the
 * tolerance), m takes its line (the nodes re-split from m).
 * f->last_fit_ns: its predicted time. 0 or -errno. */
static int spread_sizes(struct esd_size_fitter *f, const int64_t *T, const struct power_model *pw,
                        struct esd_size_model *m, uint32_t *sizes)
{
	static const double share[] = {0, 0, 0.25, 0.5, 1, 2};
	const uint32_t n = f->n;
	const double mbar = (double)f->k / n;
	const struct esd_size_model fitted = *m;
	struct esd_size_model lines[FIT_TANGENTS + 8];
	uint32_t nl = 0;
	for (size_t i = 0; i < sizeof(share) / sizeof(share[0]); i++) {
		struct esd_size_model c = fitted;
		const double at = i == 1 ? 1 : share[i] * mbar; /* samples */
		if (i > 0)
			c.fixed_rows += FIT_SPREAD_Z * sqrt(fitted.fixed_rows + fitted.rows_per_sample * at);
		lines[nl++] = c;
	}
	tangent_lines(n, f->k, pw, lines, &nl);
	return choose_sizes(n, f->k, f->max_m, T, pw, lines, nl, f->threshold, m, sizes,
	                    &f->last_fit_ns);
}

int esd_size_fitter_window(struct esd_size_fitter *f, uint64_t e, const int64_t *T,
                           const uint32_t *cur, const struct esd_size_model *cur_model,
                           const struct esd_size_obs *obs, struct esd_size_model *next,
                           uint32_t *sizes)
{
	if (!f || !T || !cur || !cur_model || !obs || !next || !sizes)
		return -EINVAL;
	if (e + 1 < f->valid_from + ESD_SIZE_FIT_WINDOW) /* began before the last change */
		return 0;
	const uint32_t n = f->n;
	struct esd_size_model m;
	int rc = esd_size_fit(n, obs, cur_model->compute_ns, &m);
	if (rc)
		return rc;
	f->windows++;
	for (uint32_t j = 0; j < n; j++) {
		f->samples += (double)obs[j].samples;
		f->compute_ns += (double)obs[j].compute_ns;
	}
	if (f->compute_ns > 0 && f->samples > 0)
		m.compute_ns = f->compute_ns / f->samples; /* the mean of every window */
	struct esd_size_tried *now = remember(f, cur);
	for (uint32_t j = 0; j < n; j++)
		now->xfer_ns[j] = (double)T[j] * (double)obs[j].rows / (double)obs[j].iters;
	now->model = *cur_model;
	const double c = m.compute_ns;
	f->last_obs_ns = tried_time(n, now, c, T);
	const struct esd_size_tried *best = now;
	f->best_ns = f->last_obs_ns;
	for (uint32_t i = 0; i < f->ntried; i++) {
		const double t = tried_time(n, &f->tried[i], c, T);
		if (t < f->best_ns) {
			best = &f->tried[i];
			f->best_ns = t;
		}
	}
	refit_on_seen(f, T, &m);
	f->last = m;
	struct power_model pw;
	fit_power(f, T, now, c, &pw);
	if ((rc = spread_sizes(f, T, &pw, &m, sizes)))
		return rc;
	/* the fitted sizes when predicted to beat the best seen, unless seen
	 * already (then they did not) */
	if (f->last_fit_ns < (1 - f->threshold) * f->best_ns && !seen_near(f, sizes)) {
		*next = m;
		f->refits++;
		return 1;
	}
	/* else back to the best sizes seen, when these are slower */
	if (best != now && f->best_ns < (1 - f->threshold) * f->last_obs_ns) {
		*next = best->model; /* gives these sizes again */
		memcpy(sizes, best->m, n * sizeof(*sizes));
		f->refits++;
		return 1;
	}
	return 0;
}
