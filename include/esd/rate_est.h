/*
 * esd/rate_est.h - a link's real rate from transfer phases its owner
 * times (esdd's pull phases, workers.estimate_rates).
 *
 * What a link really carries, from transfer phases the caller times: a
 * phase that moved `bytes` (as counted by esd_link_stats) in `ns` of wall
 * time is one sample. The estimate fits ns = a + bytes * 8e9 / R by least
 * squares over the last ESD_RATE_EST_WINDOW samples, so a fixed cost per
 * phase (round trips, request processing, burst credit of a token bucket
 * that refills between phases) does not bias R. Where the sizes vary too
 * little to fit a slope, or the fit is poor, it falls back to the
 * throughput sum(bytes) / sum(ns), which counts the fixed cost as transfer
 * time. A phase below min_bytes or min_ns is left out: its
 * time is mostly fixed cost, or it fitted in a burst allowance.
 *
 * Limits: a link that never carries more than its burst allowance per phase
 * (a mostly idle link) shows the burst rate or nothing; the estimate says
 * what the phases saw, not what the link could do if pushed harder. Not
 * thread-safe: one owner feeds and reads it. */
#ifndef ESD_RATE_EST_H
#define ESD_RATE_EST_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ESD_RATE_EST_WINDOW 32
#define ESD_RATE_EST_MIN    8 /* samples before an estimate */

struct esd_rate_est {
	uint64_t bytes[ESD_RATE_EST_WINDOW];
	int64_t ns[ESD_RATE_EST_WINDOW];
	uint32_t n, next;   /* samples held, next one to overwrite */
	uint64_t min_bytes; /* smaller phases are left out */
	int64_t min_ns;
	uint64_t taken, skipped; /* samples kept and left out, ever */
};

void esd_rate_est_init(struct esd_rate_est *e, uint64_t min_bytes, int64_t min_ns);
/* Forget the samples (e.g. after the traffic pattern changed). */
void esd_rate_est_reset(struct esd_rate_est *e);
/* One transfer phase. */
void esd_rate_est_add(struct esd_rate_est *e, uint64_t bytes, int64_t ns);
/* Samples held now. */
uint32_t esd_rate_est_samples(const struct esd_rate_est *e);
/* The estimate in bit/s, 0 with fewer than ESD_RATE_EST_MIN samples.
 * *fitted (may be NULL) says whether it is the fitted slope (1) or the
 * throughput fallback (0). */
uint64_t esd_rate_est_bps(const struct esd_rate_est *e, int *fitted);

#ifdef __cplusplus
}
#endif
#endif /* ESD_RATE_EST_H */
