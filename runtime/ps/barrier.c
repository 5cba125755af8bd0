/*
 * A PS shard's barrier release: what happens at one iteration on every
 * link at once (struct ps_barrier). When the last worker's BARRIER for t
 * is in, complete_barrier_locked applies the staged gradients, writes a
 * due checkpoint, schedules a stop or a live setting, refits the batch
 * sizes, and releases the link threads waiting in ps_wait_released.
 * Everything here runs with ps->mu held.
 */
#include "ps.h"

#include <esd/ckpt.h>
#include <esd/clock.h>
#include <esd/err.h>
#include <esd/log.h>
#include <esd/model.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Wait until the barrier of iteration t was released (or the job failed).
 * Caller holds mu. */
int ps_wait_released(struct ps *ps, uint64_t t)
{
	int64_t deadline = esd_now_ns() + (int64_t)ps->barrier_timeout_ns;
	const uint64_t epoch = ps->bar.epoch;
	while (ps->bar.iter_done < t && !ps->bar.failed && !ps->bar.stopping) {
		if (ps->bar.epoch != epoch)
			return -ESTALE; /* rolled back: the wait is of a state now gone */
		struct timespec ts = esd_ns_to_timespec(deadline);
		if (pthread_cond_timedwait(&ps->cv, &ps->mu, &ts) == ETIMEDOUT) {
			char missing[160] = "";
			size_t off = 0;
			for (uint32_t w = 0; w < ps->job.n; w++)
				if (!(ps->bar.arrived_mask & (UINT64_C(1) << w)) && off < sizeof(missing) - 8)
					off += (size_t)snprintf(missing + off, sizeof(missing) - off,
								"%s%u", off ? "," : "", w);
			ps_fail_locked(ps, -ETIMEDOUT,
				       "barrier %llu: worker(s) %s missing after %llu s",
				       (unsigned long long)t, missing,
				       (unsigned long long)(ps->barrier_timeout_ns / ESD_NS_PER_S));
		}
	}
	return ps->bar.failed ? ps->bar.failed : ps->bar.stopping ? -ESHUTDOWN : 0;
}

/* Shard 0, at the release of barrier t: a requested stop goes to the
 * checkpoint boundary already scheduled, else to t + 3 (no dispatcher has
 * decided it yet), unless the job ends before that anyway. */
static void schedule_stop_locked(struct ps *ps, uint64_t t)
{
	if (!ps->stop.requested || ps->stop.at)
		return;
	if (ps->ckpt.at > t) {
		ps->stop.at = ps->ckpt.at;
	} else if (t + 3 < ps->job.iterations) {
		ps->stop.at = ps->ckpt.at = t + 3;
		ps->ckpt.requested = true;
		ps->ckpt.requested_at = t;
	} else {
		ESD_INFO("ps", "the job ends at iteration %llu anyway; no earlier stop",
			 (unsigned long long)ps->job.iterations);
		ps->stop.requested = false;
		return;
	}
	ESD_INFO("ps", "the job stops after iteration %llu", (unsigned long long)ps->stop.at);
}

/* workers.split = fit: whether every node reported the window that ended
 * at t - 1 (their reports precede barrier t on each link). */
static bool fit_due_locked(const struct ps *ps, uint64_t t)
{
	if (ps->shard != 0 || !ps->job.derived.split_fit || t < 2 || !esd_size_fit_window_end(t - 1))
		return false;
	for (uint32_t w = 0; w < ps->job.n; w++)
		if (ps->fit.end[w] != t - 1)
			return false;
	return true;
}

/* The fitter takes every node's window (released barrier t); a switch is
 * scheduled at t + 3 like an esdctl set. */
static void fit_sizes_locked(struct ps *ps, uint64_t t)
{
	struct esd_job *j = &ps->job;
	const double *nm = ps->fit.model[0];
	if (nm[0] != j->derived.size_fixed_rows || nm[1] != j->derived.size_rows_per_sample ||
	    nm[2] != j->derived.size_compute_ns) { /* a whole-job resume: the nodes' model */
		j->derived.size_fixed_rows = nm[0];
		j->derived.size_rows_per_sample = nm[1];
		j->derived.size_compute_ns = nm[2];
		esd_job_resplit(j);
	}
	struct esd_size_model cur = {.compute_ns = j->derived.size_compute_ns,
				     .fixed_rows = j->derived.size_fixed_rows,
				     .rows_per_sample = j->derived.size_rows_per_sample},
			      m;
	int64_t T[ESD_MAX_WORKERS];
	uint32_t sizes[ESD_MAX_WORKERS];
	for (uint32_t w = 0; w < j->n; w++)
		T[w] = (int64_t)esd_job_row_cost_ns(j, w, esd_job_row_bytes(j));
	struct esd_size_fitter *f = &ps->fit.fitter;
	if (esd_size_fitter_window(f, t - 1, T, j->batch, &cur, ps->fit.obs, &m, sizes) != 1 ||
	    t + 3 > j->iterations)
		return;
	snprintf(ps->live.key, sizeof(ps->live.key), "workers.size_model");
	snprintf(ps->live.value, sizeof(ps->live.value), "%.17g,%.17g,%.17g", m.fixed_rows,
		 m.rows_per_sample, m.compute_ns);
	ps->live.pending = true;
	ps->live.at = t + 3;
	ps->live.requested_at = t;
	char txt[ESD_MAX_WORKERS * 11 + 1];
	esd_job_sizes_text(sizes, j->n, txt, sizeof(txt));
	ESD_INFO("ps", "fit after iteration %llu: %.1f fixed rows, %.3f rows and %.0f ns per "
		 "sample; sizes %s from iteration %llu (iteration %.2f ms observed, %.2f ms "
		 "predicted)", (unsigned long long)t - 1, f->last.fixed_rows,
		 f->last.rows_per_sample, f->last.compute_ns, txt, (unsigned long long)t + 3,
		 f->last_obs_ns / 1e6, esd_size_model_time(j->n, T, &m, sizes) / 1e6);
}

/* Every worker's barrier of t carries the same decision digest; else the
 * job fails (ESD_EDIVERGED). */
static bool digests_agree_locked(struct ps *ps, uint64_t t)
{
	for (uint32_t w = 1; w < ps->job.n; w++) {
		if (ps->bar.digest[w] != ps->bar.digest[0]) {
			ps_fail_locked(ps, -ESD_EDIVERGED,
				       "iteration %llu: dispatch decisions differ (worker 0 digest "
				       "%016llx, worker %u digest %016llx)",
				       (unsigned long long)t, (unsigned long long)ps->bar.digest[0], w,
				       (unsigned long long)ps->bar.digest[w]);
			return false;
		}
	}
	return true;
}

/* The summed gradients of iteration t-1, rows and dense table, applied. */
static int apply_iteration_locked(struct ps *ps, uint64_t t)
{
	long n = ps_store_apply_staged(ps->st);
	if (n < 0) {
		ps_fail_locked(ps, (int)n, "applying gradients of iteration %llu: %s",
			       (unsigned long long)t - 1, esd_strerror((int)n));
		return (int)n;
	}
	int rc = ps_dense_apply_locked(ps);
	if (rc)
		ps_fail_locked(ps, rc, "dense update of iteration %llu: %s",
			       (unsigned long long)t - 1, esd_strerror(rc));
	return rc;
}

/* The state is now "iteration t-1 complete": write checkpoint t-1 if it
 * is due (every checkpoint_every, the last iteration, or flagged by every
 * worker; the daemons flushed their DIRTY rows before this barrier). */
static int checkpoint_if_due_locked(struct ps *ps, uint64_t t)
{
	uint64_t c = t - 1;
	bool flagged = ps->ckpt.flagged == ps->job.n;
	ps->ckpt.flagged = 0;
	bool due = c > 0 && ((ps->job.checkpoint_every && c % ps->job.checkpoint_every == 0) ||
			     c == ps->job.iterations || flagged);
	if (due && ps->job.checkpoint_dir[0]) {
		ps->bar.iter_done = c; /* checkpoint records the boundary c */
		int rc = ps_checkpoint_locked(ps);
		if (rc) {
			ps_fail_locked(ps, rc, "checkpoint at iteration %llu failed: %s",
				       (unsigned long long)c, esd_strerror(rc));
			return rc;
		}
	}
	if (due && c == ps->ckpt.at) { /* the requested checkpoint is written */
		ps->ckpt.requested = false;
		ps->ckpt.at = 0;
	}
	return 0;
}

/* The boundary moves to t: the data cursor, the end of the job, a stop
 * or a requested checkpoint scheduled (esdctl checkpoint: at a boundary
 * no dispatcher has decided yet, as they run at most two iterations
 * ahead; the barrier ACKs carry it to every node). */
static void advance_boundary_locked(struct ps *ps, uint64_t t)
{
	ps->bar.iter_done = t;
	ps->bar.cursor = ps_cursor_at(ps, t);
	if (ps->bar.final == ps->job.n) {
		ps->bar.ended = true;
		ESD_INFO("ps", "every worker's last barrier: the job ends after iteration %llu",
			 (unsigned long long)t - 1);
	}
	schedule_stop_locked(ps, t);
	if (ps->ckpt.requested && !ps->ckpt.at && t + 3 < ps->job.iterations)
		ps->ckpt.at = t + 3;
}

/* A pending live setting (esdctl set), in effect now everywhere: the
 * shard's copy of the job follows it. */
static void live_setting_done_locked(struct ps *ps)
{
	double v[3];
	if (!strcmp(ps->live.key, "workers.size_model") &&
	    !esd_job_parse_size_model(ps->live.value, v)) {
		ps->job.derived.size_fixed_rows = v[0];
		ps->job.derived.size_rows_per_sample = v[1];
		ps->job.derived.size_compute_ns = v[2];
		esd_job_resplit(&ps->job); /* the sizes every node now has */
		esd_size_fitter_changed(&ps->fit.fitter, ps->live.at, 0);
	}
	if (!strcmp(ps->live.key, "workers.rates") &&
	    !esd_job_parse_rates(ps->live.value, ps->job.n, ps->job.rate_bps)) {
		esd_job_resplit(&ps->job); /* the sizes every node now has */
		/* what the fitter saw is of the old links */
		esd_size_fitter_changed(&ps->fit.fitter, ps->live.at, 1);
		/* the replies of iteration set_at on at the new rates */
		for (int i = 0; i < ps->nlinks && ps->job.derived.shape_follows_model; i++) {
			struct ps_link *pl = &ps->links[i];
			if (pl->worker >= 0 && pl->link) /* under mu, as its closing */
				esd_link_set_rate(pl->link,
						  ps_reply_rate(ps, ps->job.rate_bps[pl->worker]));
		}
	}
	ESD_INFO("ps", "setting %s = %s in effect since iteration %llu", ps->live.key,
		 ps->live.value, (unsigned long long)ps->live.at);
	ps->live.pending = false;
	ps->live.at = 0;
}

/* The daemons' reported link rates become one workers.rates change,
 * scheduled by the next barrier. */
static void rates_reported_locked(struct ps *ps, uint64_t t)
{
	uint64_t rates[ESD_MAX_WORKERS];
	memcpy(rates, ps->job.rate_bps, sizeof(rates));
	for (uint32_t w = 0; w < ps->job.n; w++)
		if (ps->live.rate_req_mask >> w & 1)
			rates[w] = ps->live.rate_req[w];
	ps->live.rate_req_mask = 0;
	char msg[256];
	if (ps_rates_value(ps, rates, ps->live.value, sizeof(ps->live.value), msg, sizeof(msg))) {
		ESD_ERR("ps", "reported link rates not applied: %s", msg);
		return;
	}
	snprintf(ps->live.key, sizeof(ps->live.key), "workers.rates");
	ps->live.pending = true;
	ps->live.at = 0;
	ps->live.requested_at = t;
}

/* One step of the live settings at boundary t: a setting in effect
 * everywhere is done; else reported rates or a size fit become one; else
 * a pending one is scheduled at t + 3 (a change past the last iteration
 * waits for nothing and is dropped with a note). */
static void live_settings_locked(struct ps *ps, uint64_t t)
{
	if (ps->live.pending && ps->live.at && t >= ps->live.at) {
		live_setting_done_locked(ps);
	} else if (!ps->live.pending && ps->live.rate_req_mask) {
		rates_reported_locked(ps, t);
	} else if (!ps->live.pending && fit_due_locked(ps, t)) {
		fit_sizes_locked(ps, t);
	} else if (ps->live.pending && !ps->live.at) {
		if (t + 3 <= ps->job.iterations) {
			ps->live.at = t + 3;
		} else {
			ESD_WARN("ps", "setting %s = %s dropped: the job ends before it could apply",
				 ps->live.key, ps->live.value);
			ps->live.pending = false;
		}
	}
}

/* Every worker's barrier of t arrived: release it, in the order the
 * protocol requires (docs/runtime.md): check the decisions agree, apply
 * t-1's gradients, checkpoint t-1 if due, advance to t, step the live
 * settings, open the next barrier. Under ps->mu. */
void ps_complete_barrier_locked(struct ps *ps, uint64_t t)
{
	if (!digests_agree_locked(ps, t) || apply_iteration_locked(ps, t) ||
	    checkpoint_if_due_locked(ps, t))
		return;
	advance_boundary_locked(ps, t);
	live_settings_locked(ps, t);
	ps->bar.arrived = 0;
	ps->bar.arrived_mask = 0;
	ps->bar.final = 0;
	ps->bar.rolled_to = 0;
	ps->stats.barriers++;
	pthread_cond_broadcast(&ps->cv);
}

int ps_rates_value(const struct ps *ps, const uint64_t *rates, char *canon, size_t len,
		   char *msg, size_t mlen)
{
	struct esd_job j = ps->job;
	memcpy(j.rate_bps, rates, j.n * sizeof(rates[0]));
	int rc = esd_job_resplit(&j);
	if (rc == -ENOSPC) {
		snprintf(msg, mlen, "workers.rates: a global batch of %llu samples does not fit "
			 "%u caches of %u samples each (%llu rows, %llu of them hot rows)",
			 (unsigned long long)j.derived.global_batch, j.n, j.derived.max_batch,
			 (unsigned long long)ps->cache_rows, (unsigned long long)ps->hot_rows);
		return -EINVAL;
	}
	uint64_t maxb = 0;
	for (uint32_t w = 0; w < j.n; w++)
		maxb = j.batch[w] > maxb ? j.batch[w] : maxb;
	if (rc || maxb * ps->width + ps->hot_rows > ps->cache_rows) {
		snprintf(msg, mlen, "workers.rates: the link-aware sizes give a worker %llu "
			 "samples, %llu keys (and %llu hot rows), above the caches' %llu rows",
			 (unsigned long long)maxb, (unsigned long long)(maxb * ps->width),
			 (unsigned long long)ps->hot_rows, (unsigned long long)ps->cache_rows);
		return -EINVAL;
	}
	size_t off = 0;
	canon[0] = 0;
	for (uint32_t w = 0; w < j.n && off < len; w++)
		off += (size_t)snprintf(canon + off, len - off, "%s%llu", w ? "," : "",
					(unsigned long long)rates[w]);
	return off < len ? 0 : -E2BIG;
}
