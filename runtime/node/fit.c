/*
 * workers.split = fit, the node's half: each iteration's samples, rows
 * moved and training time go into the current fit window
 * (esd/dispatch_quality.h); a window that ended goes to shard 0 as a
 * SETTING "node.fit" = "END,ITERS,SAMPLES,ROWS,COMPUTE_NS,A,R,C" ahead of
 * the next barrier (A,R,C: the model its sizes come from, which shard 0
 * takes after a whole-job resume). Shard 0 fits the size model from every node's window and
 * announces it as a live workers.size_model change (settings.c), which
 * the dispatchers apply at one iteration (disp_thread.c). With model.dims
 * the rows are counted at their bytes (the bytes moved over a full row's),
 * so a small-dim row weighs in the size model what it weighs on the link.
 */
#include "node.h"

#include <esd/log.h>

#include <stdio.h>
#include <string.h>

void node_fit_observe(struct node *nd, const struct order *o, int64_t train_ns)
{
	struct node_fit *f = &nd->fit;
	if (!nd->job.derived.split_fit)
		return;
	uint64_t any_dim = 0, bytes = 0;
	for (int k = 0; k < ESD_XFER_NKINDS; k++)
		if (k != ESD_XFER_OTHER) { /* the dense table is the same whatever the split */
			any_dim += o->pred_rows[k];
			bytes += o->pred_bytes[k];
		}
	/* model.dims: rows counted at their bytes, in full rows (the
	 * dispatcher's charge, T_j a full row's time) */
	uint64_t rows = any_dim;
	if (nd->job.ntable_dims) {
		const uint64_t full = esd_job_row_bytes(&nd->job);
		rows = (bytes + full - 1) / full;
	}
	f->seen_iters++;
	f->seen_rows += rows;
	f->seen_rows_any_dim += any_dim;
	f->seen_bytes += bytes;
	if (o->iter <= f->last_iter || o->iter <= ESD_SIZE_FIT_SKIP) { /* rolled back, or cold */
		memset(&f->obs, 0, sizeof(f->obs));
		f->last_iter = o->iter;
		return;
	}
	f->last_iter = o->iter;
	f->obs.iters++;
	f->obs.samples += o->m;
	f->obs.rows += rows;
	f->obs.compute_ns += train_ns > 0 ? (uint64_t)train_ns : 0;
	if (!esd_size_fit_window_end(o->iter))
		return;
	if (f->obs.iters == ESD_SIZE_FIT_WINDOW) { /* a whole window, else it started mid-way */
		f->report = f->obs;
		f->report_end = o->iter;
	}
	memset(&f->obs, 0, sizeof(f->obs));
}

int node_fit_report(struct node *nd, struct esd_buf *b, uint64_t iter)
{
	struct node_fit *f = &nd->fit;
	if (!f->report_end || iter != f->report_end + 1)
		return 0;
	char v[256];
	pthread_mutex_lock(&nd->qmu);
	snprintf(v, sizeof(v), "%llu,%llu,%llu,%llu,%llu,%.17g,%.17g,%.17g",
		 (unsigned long long)f->report_end, (unsigned long long)f->report.iters,
		 (unsigned long long)f->report.samples, (unsigned long long)f->report.rows,
		 (unsigned long long)f->report.compute_ns, nd->job.derived.size_fixed_rows,
		 nd->job.derived.size_rows_per_sample, nd->job.derived.size_compute_ns);
	f->reports++;
	f->last_compute_ns = f->report.samples
				     ? (double)f->report.compute_ns / (double)f->report.samples
				     : 0;
	pthread_mutex_unlock(&nd->qmu);
	f->report_end = 0;
	return esd_enc_setting(b, iter, "node.fit", v);
}

json_t *node_fit_json(const struct node *nd)
{
	if (!nd->job.derived.split_link_aware)
		return json_null();
	const struct node_fit *f = &nd->fit;
	return json_pack("{s:s, s:f, s:f, s:f, s:I, s:f, s:{s:I, s:I, s:I, s:I}}", "split",
			 nd->job.derived.split_fit ? "fit" : "link-aware", "fixed_rows",
			 nd->job.derived.size_fixed_rows, "rows_per_sample",
			 nd->job.derived.size_rows_per_sample, "compute_ns_per_sample",
			 nd->job.derived.size_compute_ns, "reports", (json_int_t)f->reports,
			 "measured_compute_ns_per_sample", f->last_compute_ns, "observed",
			 "iterations", (json_int_t)f->seen_iters, "rows", (json_int_t)f->seen_rows,
			 "rows_any_dim", (json_int_t)f->seen_rows_any_dim, "bytes",
			 (json_int_t)f->seen_bytes);
}
