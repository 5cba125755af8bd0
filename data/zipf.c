/*
 * zipf.c - bounded Zipf sampler (see zipf.h): an alias table (Vose) over the
 * head ranks plus one bucket for the tail, and rejection-inversion over the
 * tail. The hat is h(x) = x^-s with integral H written with log1p/expm1
 * helpers so that s = 1 and s near 1 need no special case. Over a range
 * starting at rank m the first cell [H(m+.5) - h(m), H(m+.5)] has exactly
 * h(m) of area, so rank m is always accepted and the method stays exact.
 */
#include "zipf.h"

#include <errno.h>
#include <stdlib.h>

/* log(1 + x) / x, accurate near 0. */
static double helper1(double x)
{
	if (fabs(x) > 1e-8)
		return log1p(x) / x;
	return 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}

/* (exp(x) - 1) / x, accurate near 0. */
static double helper2(double x)
{
	if (fabs(x) > 1e-8)
		return expm1(x) / x;
	return 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x));
}

static double h(double s, double x)
{
	return exp(-s * log(x));
}

/* H(x) = (x^(1-s) - 1) / (1 - s), log(x) at s = 1. */
static double hint(double s, double x)
{
	double lx = log(x);
	return helper2((1.0 - s) * lx) * lx;
}

static double hint_inv(double s, double x)
{
	double t = x * (1.0 - s);
	if (t < -1.0)
		t = -1.0; /* rounding near the end of the domain */
	return exp(helper1(t) * x);
}

/* Vose's alias method over w[0..n-1]. */
static int build_alias(struct zipf *z, const double *w, uint32_t n)
{
	double sum = 0;
	for (uint32_t i = 0; i < n; i++)
		sum += w[i];
	double *p = malloc(n * sizeof(*p));
	uint32_t *small = malloc(n * sizeof(*small)), *large = malloc(n * sizeof(*large));
	z->thr = malloc(n * sizeof(uint32_t));
	z->alias = malloc(n * sizeof(uint32_t));
	int rc = -ENOMEM;
	if (!p || !small || !large || !z->thr || !z->alias)
		goto out;
	uint32_t ns = 0, nl = 0;
	for (uint32_t i = 0; i < n; i++) {
		p[i] = w[i] * n / sum;
		if (p[i] < 1.0)
			small[ns++] = i;
		else
			large[nl++] = i;
	}
	while (ns && nl) {
		uint32_t a = small[--ns], b = large[--nl];
		z->thr[a] = (uint32_t)fmin(p[a] * 4294967296.0, 4294967295.0);
		z->alias[a] = b;
		p[b] -= 1.0 - p[a];
		if (p[b] < 1.0)
			small[ns++] = b;
		else
			large[nl++] = b;
	}
	while (nl) { /* leftovers are 1 up to rounding */
		uint32_t b = large[--nl];
		z->thr[b] = UINT32_MAX;
		z->alias[b] = b;
	}
	while (ns) {
		uint32_t a = small[--ns];
		z->thr[a] = UINT32_MAX;
		z->alias[a] = a;
	}
	z->nhead = n;
	rc = 0;
out:
	free(p);
	free(small);
	free(large);
	return rc;
}

int esd_zipf_init(struct zipf *z, uint64_t rows, double s)
{
	memset(z, 0, sizeof(*z));
	z->s = s;
	z->rows = rows;
	z->n = (double)rows;
	uint64_t head = rows > ZIPF_HEAD ? ZIPF_HEAD : rows;
	z->m = rows > head ? (double)head + 1.0 : 1.0;
	z->h_x1 = hint(s, z->m + 0.5) - h(s, z->m);
	z->h_n = hint(s, z->n + 0.5);
	z->sv = z->m == 1.0 ? 2.0 - hint_inv(s, hint(s, 2.5) - h(s, 2.0)) : 0.0;
	if (rows <= 1)
		return 0;
	/* weights of ranks 1..head, then the tail's mass */
	uint32_t nb = (uint32_t)head + (rows > head);
	double *w = malloc(nb * sizeof(*w));
	if (!w)
		return -ENOMEM;
	for (uint32_t k = 0; k < head; k++)
		w[k] = h(s, (double)k + 1.0);
	if (rows > head) {
		/* exact tail mass: sum of k^-s for k in head+1..rows, by the integral
		 * of the hat plus the Euler-Maclaurin correction */
		double a = (double)head + 1.0, b = z->n;
		w[head] = hint(s, b) - hint(s, a) + 0.5 * (h(s, a) + h(s, b)) +
		          s / 12.0 * (h(s + 1.0, a) - h(s + 1.0, b));
	}
	int rc = build_alias(z, w, nb);
	free(w);
	if (rc)
		esd_zipf_free(z);
	return rc;
}

void esd_zipf_free(struct zipf *z)
{
	free(z->thr);
	free(z->alias);
	z->thr = z->alias = NULL;
	z->nhead = 0;
}

static uint64_t draw_tail(const struct zipf *z, struct rng *r)
{
	for (;;) {
		double u = z->h_n + rng_unit(r) * (z->h_x1 - z->h_n);
		double x = hint_inv(z->s, u);
		double kd = floor(x + 0.5);
		if (kd < z->m)
			kd = z->m;
		else if (kd > z->n)
			kd = z->n;
		if ((z->sv > 0.0 && kd - x <= z->sv) || u >= hint(z->s, kd + 0.5) - h(z->s, kd))
			return (uint64_t)kd - 1;
	}
}

uint64_t esd_zipf_draw(const struct zipf *z, struct rng *r)
{
	if (z->rows <= 1)
		return 0;
	if (!z->nhead)
		return draw_tail(z, r);
	uint64_t x = rng_next(r);
	uint32_t i = (uint32_t)(((x & 0xffffffffu) * z->nhead) >> 32);
	uint32_t b = (uint32_t)(x >> 32) < z->thr[i] ? i : z->alias[i];
	if (b < z->nhead - (z->rows > ZIPF_HEAD))
		return b;
	return draw_tail(z, r);
}
