/*
 * Dispatch quality (esd/dispatch_quality.h): the true cost and critical
 * path of a decision from its consequence, the shared-charge cost matrix
 * and link-aware batch sizes. The consequence itself is conseq.c's (and
 * snapshot.c's, with evictions): nothing here recounts transfers.
 */
#include "keytab_internal.h"

#include <esd/dispatch_quality.h>
#include <esd/dispatch_solve.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int esd_matrix_parse(const char *name, enum esd_matrix *out)
{
	if (!name || !out)
		return -EINVAL;
	if (!strcmp(name, "paper"))
		*out = ESD_MATRIX_PAPER;
	else if (!strcmp(name, "shared"))
		*out = ESD_MATRIX_SHARED;
	else
		return -EINVAL;
	return 0;
}

const char *esd_matrix_name(enum esd_matrix m)
{
	switch (m) {
	case ESD_MATRIX_PAPER:
		return "paper";
	case ESD_MATRIX_SHARED:
		return "shared";
	}
	return "?";
}

int esd_costmat_build_shared(const struct esd_keytab *kt, const struct esd_batch *b,
                             const int64_t *T, int64_t *cost)
{
	int rc = esd_costmat_check(kt, b, T, cost, ESD_SHARED_SCALE);
	if (rc)
		return rc;
	const uint32_t n = kt->n;
	uint32_t *cnt = calloc(kt->count ? kt->count : 1, sizeof(uint32_t));
	if (!cnt)
		return -ENOMEM;
	const uint32_t *occ = kt->occ;
	for (uint32_t p = 0; p < kt->nocc; p++)
		cnt[occ[p]]++;
	int64_t *vec = kt->vec;
	/* the key table's charge table is scratch */
	if ((rc = esd_keytab_charges((struct esd_keytab *)kt, T, vec))) {
		free(cnt);
		return rc;
	}
	for (uint32_t u = 0; u < kt->count; u++) {
		int64_t *v = vec + (size_t)u * n;
		const int64_t c = cnt[u];
		if (c == 1) { /* most keys: no division */
			for (uint32_t j = 0; j < n; j++)
				v[j] *= ESD_SHARED_SCALE;
			continue;
		}
		/* a key's charges take few values (the link classes' T, 0):
		 * divide once per value */
		int64_t c0 = 0, v0 = 0, c1 = -1, v1 = 0;
		for (uint32_t j = 0; j < n; j++) {
			const int64_t ch = v[j];
			if (ch == c0) {
				v[j] = v0;
			} else if (ch == c1) {
				v[j] = v1;
			} else {
				c1 = c0;
				v1 = v0;
				c0 = ch;
				v0 = v[j] = (ch * ESD_SHARED_SCALE + c / 2) / c;
			}
		}
	}
	esd_costmat_sum(b, occ, vec, n, cost);
	free(cnt);
	return 0;
}

int esd_iter_time_compute(const struct esd_conseq *cq, const uint32_t *assign, uint32_t k,
                          int64_t compute_ns_per_sample, struct esd_iter_time *out)
{
	if (!cq || !out || (k && !assign) || compute_ns_per_sample < 0 || cq->n == 0 ||
	    cq->n > ESD_MAX_WORKERS)
		return -EINVAL;
	const uint32_t n = cq->n;
	memset(out, 0, sizeof(*out));
	out->n = n;
	for (uint32_t i = 0; i < k; i++) {
		if (assign[i] >= n)
			return -EINVAL;
		out->m[assign[i]]++;
	}
	for (uint32_t j = 0; j < n; j++) {
		out->xfer_ns[j] = cq->worker_cost[j];
		out->worker_ns[j] = compute_ns_per_sample * out->m[j] + cq->worker_cost[j];
		if (out->worker_ns[j] > out->crit_ns || j == 0) {
			out->crit_ns = out->worker_ns[j];
			out->slowest = j;
		}
	}
	out->total_cost = cq->total_cost;
	return 0;
}

int esd_true_cost(const struct esd_keytab *kt, const struct esd_batch *b, const uint32_t *assign,
                  const int64_t *T, enum esd_sync sync, int64_t compute_ns_per_sample,
                  struct esd_conseq *cq, struct esd_iter_time *out)
{
	int rc = esd_conseq_compute(kt, b, assign, T, sync, cq);
	if (rc)
		return rc;
	return esd_iter_time_compute(cq, assign, b->k, compute_ns_per_sample, out);
}

/* Long: the equalising of times, the pinning at min_m and the largest-remainder rounding:
 * one model's three stages on the same arrays. */
int esd_batch_sizes_link_aware(uint32_t n, uint32_t k, const int64_t *T,
                               const struct esd_size_model *model, uint32_t min_m, uint32_t *cap)
{
	if (!T || !model || !cap || n == 0 || n > ESD_MAX_WORKERS || (uint64_t)n * min_m > k)
		return -EINVAL;
	const double c = model->compute_ns, a = model->fixed_rows, r = model->rows_per_sample;
	if (!(c >= 0 && a >= 0 && r >= 0) || !isfinite(c) || !isfinite(a) || !isfinite(r))
		return -EINVAL;
	double slope[ESD_MAX_WORKERS], base[ESD_MAX_WORKERS], want[ESD_MAX_WORKERS];
	int fixed[ESD_MAX_WORKERS] = {0};
	int flat = 1;
	for (uint32_t j = 0; j < n; j++) {
		if (T[j] < 0)
			return -EINVAL;
		slope[j] = c + r * (double)T[j];
		base[j] = a * (double)T[j];
		if (slope[j] > 0)
			flat = 0;
	}
	if (flat) {
		for (uint32_t j = 0; j < n; j++)
			cap[j] = k / n + (j < k % n);
		return 0;
	}
	/* equalise time_j = base_j + slope_j * m_j = tau over the free workers;
	 * a worker whose share falls below min_m is pinned there (at most n
	 * rounds). A worker with slope 0 takes whatever is left. */
	for (uint32_t round = 0; round <= n; round++) {
		double left = k, inv = 0, off = 0;
		uint32_t zero = 0;
		for (uint32_t j = 0; j < n; j++) {
			if (fixed[j]) {
				left -= min_m;
				continue;
			}
			if (slope[j] == 0) {
				zero++;
				continue;
			}
			inv += 1.0 / slope[j];
			off += base[j] / slope[j];
		}
		int changed = 0;
		if (zero) {
			/* slope-0 workers are free: the others take min_m */
			for (uint32_t j = 0; j < n; j++)
				want[j] = fixed[j] || slope[j] > 0 ? min_m : 0;
			double rest = left;
			for (uint32_t j = 0; j < n; j++)
				if (!fixed[j] && slope[j] > 0)
					rest -= min_m;
			for (uint32_t j = 0; j < n; j++)
				if (!fixed[j] && slope[j] == 0)
					want[j] = rest / zero;
			break;
		}
		const double tau = (left + off) / inv;
		for (uint32_t j = 0; j < n; j++) {
			if (fixed[j]) {
				want[j] = min_m;
				continue;
			}
			want[j] = (tau - base[j]) / slope[j];
			if (want[j] < (double)min_m) {
				fixed[j] = 1;
				changed = 1;
			}
		}
		if (!changed)
			break;
	}
	/* largest remainder; ties to the lower worker */
	uint32_t sum = 0;
	double frac[ESD_MAX_WORKERS];
	for (uint32_t j = 0; j < n; j++) {
		double w = want[j] < min_m ? min_m : want[j];
		cap[j] = (uint32_t)floor(w);
		frac[j] = w - floor(w);
		sum += cap[j];
	}
	while (sum > k) { /* rounding noise only */
		uint32_t best = n;
		for (uint32_t j = 0; j < n; j++)
			if (cap[j] > min_m && (best == n || frac[j] < frac[best]))
				best = j;
		if (best == n)
			return -EINVAL;
		cap[best]--;
		frac[best] = 1.0;
		sum--;
	}
	while (sum < k) {
		uint32_t best = 0;
		for (uint32_t j = 1; j < n; j++)
			if (frac[j] > frac[best])
				best = j;
		cap[best]++;
		frac[best] = -1.0;
		sum++;
	}
	return 0;
}

int esd_batch_sizes_link_aware_capped(uint32_t n, uint32_t k, const int64_t *T,
                                      const struct esd_size_model *model, uint32_t min_m,
                                      uint32_t max_m, uint32_t *cap)
{
	if (!T || !cap || n == 0 || n > ESD_MAX_WORKERS || min_m > max_m)
		return -EINVAL;
	if ((uint64_t)n * max_m < k)
		return -ENOSPC;
	/* split among the workers not yet at max_m; pin the ones the split
	 * puts above it and split again (at most n rounds) */
	int full[ESD_MAX_WORKERS] = {0};
	for (uint32_t round = 0; round <= n; round++) {
		int64_t Tf[ESD_MAX_WORKERS];
		uint32_t idx[ESD_MAX_WORKERS], nf = 0, kf = k, part[ESD_MAX_WORKERS];
		for (uint32_t j = 0; j < n; j++) {
			if (full[j]) {
				kf -= max_m;
				continue;
			}
			idx[nf] = j;
			Tf[nf++] = T[j];
		}
		if (!nf) { /* every worker at max_m, which is then exactly k / n */
			for (uint32_t j = 0; j < n; j++)
				cap[j] = max_m;
			return kf == 0 ? 0 : -EINVAL;
		}
		int rc = esd_batch_sizes_link_aware(nf, kf, Tf, model, min_m, part);
		if (rc)
			return rc;
		int over = 0;
		for (uint32_t f = 0; f < nf; f++)
			if (part[f] > max_m) {
				full[idx[f]] = 1;
				over = 1;
			}
		if (!over) {
			for (uint32_t j = 0; j < n; j++)
				cap[j] = max_m;
			for (uint32_t f = 0; f < nf; f++)
				cap[idx[f]] = part[f];
			return 0;
		}
	}
	return -EINVAL; /* not reached: each round pins at least one worker */
}
