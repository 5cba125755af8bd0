/*
 * A link's real rate from timed transfer phases (esd/rate_est.h): a
 * least-squares line through (bytes, ns) of the last transfer phases.
 */
#include <esd/rate_est.h>

#include <math.h>
#include <string.h>

void esd_rate_est_init(struct esd_rate_est *e, uint64_t min_bytes, int64_t min_ns)
{
	memset(e, 0, sizeof(*e));
	e->min_bytes = min_bytes;
	e->min_ns = min_ns;
}

void esd_rate_est_reset(struct esd_rate_est *e)
{
	e->n = e->next = 0;
}

void esd_rate_est_add(struct esd_rate_est *e, uint64_t bytes, int64_t ns)
{
	if (bytes < e->min_bytes || ns < e->min_ns || ns <= 0 || !bytes) {
		e->skipped++;
		return;
	}
	e->bytes[e->next] = bytes;
	e->ns[e->next] = ns;
	e->next = (e->next + 1) % ESD_RATE_EST_WINDOW;
	if (e->n < ESD_RATE_EST_WINDOW)
		e->n++;
	e->taken++;
}

uint32_t esd_rate_est_samples(const struct esd_rate_est *e)
{
	return e->n;
}

/* Below this coefficient of determination the line explains too little of
 * the times to trust its slope. */
#define MIN_R2 0.8
/* Sizes that vary less than this (max / min) cannot give a slope. */
#define MIN_SPREAD 1.25

uint64_t esd_rate_est_bps(const struct esd_rate_est *e, int *fitted)
{
	if (fitted)
		*fitted = 0;
	if (e->n < ESD_RATE_EST_MIN)
		return 0;
	double sb = 0, st = 0, bmin = INFINITY, bmax = 0;
	for (uint32_t i = 0; i < e->n; i++) {
		const double b = (double)e->bytes[i];
		sb += b;
		st += (double)e->ns[i];
		bmin = b < bmin ? b : bmin;
		bmax = b > bmax ? b : bmax;
	}
	/* throughput: the fixed cost counted as transfer time */
	const double thr = sb * 8e9 / st;
	if (bmax < MIN_SPREAD * bmin)
		return (uint64_t)llround(thr);
	const double mb = sb / e->n, mt = st / e->n;
	double sxx = 0, sxy = 0, syy = 0;
	for (uint32_t i = 0; i < e->n; i++) {
		const double dx = (double)e->bytes[i] - mb, dy = (double)e->ns[i] - mt;
		sxx += dx * dx;
		sxy += dx * dy;
		syy += dy * dy;
	}
	if (sxy <= 0 || syy <= 0 || sxy * sxy < MIN_R2 * sxx * syy)
		return (uint64_t)llround(thr);
	/* slope in ns per byte. A fixed cost (round trips) puts the line above
	 * the origin and the rate above the throughput; burst credit (the first
	 * bytes after an idle spell go at once) puts it below the origin and
	 * the rate below the throughput. A slope so flat or so steep that it
	 * claims more than 4x, or less than a quarter of, the throughput is
	 * noise in disguise. */
	double rate = 8e9 * sxx / sxy;
	if (rate < thr / 4)
		rate = thr / 4;
	if (rate > 4 * thr)
		rate = 4 * thr;
	if (fitted)
		*fitted = 1;
	return (uint64_t)llround(rate);
}
