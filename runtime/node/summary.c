/* The end-of-run summary of esdd: what the testbed and the tests read. */
#include "node.h"

#include <esd/clock.h>
#include <esd/err.h>
#include <esd/log.h>
#include <jansson.h>


/* Every link's counters per transfer kind; caller holds qmu. */
static json_t *links_json(const struct node *nd)
{
	json_t *links = json_array();
	for (uint32_t s = 0; s < nd->job.shards; s++) {
		if (!nd->links.link[s])
			continue;
		struct esd_link_stats st;
		esd_link_stats(nd->links.link[s], &st);
		json_t *l = json_pack("{s:i, s:s, s:b, s:I, s:I, s:I, s:I}", "shard", s, "backend",
				      esd_link_backend(nd->links.link[s]), "reliable", st.reliable,
				      "rate_bps", (json_int_t)st.rate_bps, "shaped_wait_ns",
				      (json_int_t)st.shaped_wait_ns, "retx_frames",
				      (json_int_t)st.retx_frames, "in_place_bytes",
				      (json_int_t)st.in_place_bytes);
		json_array_append_new(links, node_link_kinds_json(&st, l));
	}
	return links;
}

static json_t *cache_json(const struct node *nd)
{
	struct esd_cache_counters cc;
	esd_cache_counters_total(nd->cache, &cc);
	return json_pack("{s:I, s:I, s:I, s:I, s:I}", "hits", (json_int_t)cc.hits, "miss_absent",
			 (json_int_t)cc.miss_absent, "miss_outdated", (json_int_t)cc.miss_outdated,
			 "evict_clean", (json_int_t)cc.evict_clean, "evict_dirty",
			 (json_int_t)cc.evict_dirty);
}

static json_t *predicted_json(const struct node *nd)
{
	json_t *pred = json_object();
	for (int k = 0; k < ESD_XFER_NKINDS; k++)
		json_object_set_new(pred, esd_xfer_kind_name(k),
				    json_integer((json_int_t)nd->stats.predicted[k]));
	return pred;
}

/* The bytes of the predicted rows per kind, frame headers apart. */
static json_t *predicted_bytes_json(const struct node *nd)
{
	json_t *pred = json_object();
	for (int k = 0; k < ESD_XFER_NKINDS; k++)
		json_object_set_new(pred, esd_xfer_kind_name(k),
				    json_integer((json_int_t)nd->stats.predicted_bytes[k]));
	return pred;
}

void node_mark_warmup(struct node *nd)
{
	pthread_mutex_lock(&nd->qmu);
	const struct esd_dispatch_counters *dc = &nd->dq.count;
	json_decref(nd->stats.at_warmup);
	nd->stats.at_warmup = json_pack(
	    "{s:I, s:f, s:o, s:o, s:o, s:{s:I, s:f}}", "iterations",
	    (json_int_t)nd->stats.iter_done, "seconds",
	    esd_ns_to_s(esd_now_ns() - nd->stats.t_start_ns), "predicted", predicted_json(nd),
	    "links", links_json(nd), "cache", cache_json(nd), "decision", "steps",
	    (json_int_t)dc->steps, "ms_mean", dc->steps ? esd_ns_to_ms(dc->sum.total) / dc->steps : 0.0);
	json_object_set_new(json_object_get(nd->stats.at_warmup, "decision"), "order_wait_ms",
			    json_real(esd_ns_to_ms(nd->dq.wait_ns)));
	json_object_set_new(nd->stats.at_warmup, "cpu", node_cpu_json(nd));
	pthread_mutex_unlock(&nd->qmu);
}

int node_write_summary(struct node *nd, int status)
{
	if (!nd->summary_path)
		return 0;
	pthread_mutex_lock(&nd->qmu);
	const struct esd_dispatch_counters *dc = &nd->dq.count;
	double el = esd_ns_to_s(esd_now_ns() - nd->stats.t_start_ns);
	json_t *o = json_pack(
		"{s:i, s:s, s:i, s:i, s:I, s:f, s:f, s:f, s:I, s:s, s:f, s:s}", "status", status,
		"error", status ? esd_strerror(status) : "", "rank", nd->rank, "workers", nd->job.n,
		"iterations", (json_int_t)nd->stats.iter_done, "seconds", el,
		"iters_per_s", el > 0 ? nd->stats.iter_done / el : 0.0, "loss", nd->stats.last_loss,
		"trainer_deaths", (json_int_t)nd->stats.trainer_deaths, "method", nd->job.method,
		"alpha", nd->job.alpha, "sync", esd_job_sync_name(&nd->job));
	json_t *pred = predicted_json(nd), *plan = json_object();
	for (int k = 0; k < ESD_CQ_KINDS; k++)
		json_object_set_new(plan, esd_cq_kind_name((enum esd_cq_kind)k),
				    json_integer((json_int_t)dc->xfers[k]));
	/* wall time of the iterations themselves (no start-up, no waiting for
	 * the first trainer): what per-sample throughput is measured on */
	json_object_set_new(o, "iterations_seconds", json_real(esd_ns_to_s(nd->stats.iter_ns_sum)));
	/* the boundary a graceful stop ended the run at (0: none) */
	json_object_set_new(o, "stopped_at", json_integer((json_int_t)nd->stop.at));
	json_object_set_new(o, "predicted", pred);
	json_object_set_new(o, "predicted_bytes", predicted_bytes_json(nd));
	json_object_set_new(o, "plan_all_workers", plan);
	json_object_set_new(o, "plan_hits_all_workers", json_integer((json_int_t)dc->hits));
	json_object_set_new(
		o, "decision",
		json_pack("{s:I, s:f, s:f, s:f, s:I, s:I, s:f, s:s}", "steps", (json_int_t)dc->steps,
			  "ms_mean", dc->steps ? esd_ns_to_ms(dc->sum.total) / dc->steps : 0.0,
			  "solve_ms_mean", dc->steps ? esd_ns_to_ms(dc->sum.solve) / dc->steps : 0.0,
			  "matrix_ms_mean",
			  dc->steps ? esd_ns_to_ms(dc->sum.matrix) / dc->steps : 0.0,
			  "est_cost_sum", (json_int_t)dc->sum_est_cost, "true_cost_sum",
			  (json_int_t)dc->sum_true_cost,
			  /* the main thread's waits for its orders: a decision (or, on a
			   * node that follows, node 0's order) not ready in time */
			  "order_wait_ms", esd_ns_to_ms(nd->dq.wait_ns),
			  "decided_by", nd->dq.follower ? "node 0" : "this node"));
	json_object_set_new(o, "gpu", node_gpu_json(nd));
	node_batch_rates_json(nd, o);
	json_object_set_new(o, "rate_estimate", node_rate_est_json(nd));
	json_object_set_new(o, "size_model", node_fit_json(nd));
	json_object_set_new(o, "links", links_json(nd));
	json_object_set_new(o, "cache", cache_json(nd));
	/* CPU per phase, cumulative (docs/runtime.md) */
	json_object_set_new(o, "cpu", node_cpu_json(nd));
	/* job.warmup: the same counters at the end of that iteration, so the
	 * measured iterations are these minus those (esd-testbed) */
	if (nd->stats.at_warmup)
		json_object_set(o, "at_warmup", nd->stats.at_warmup);
	pthread_mutex_unlock(&nd->qmu);
	int rc = json_dump_file(o, nd->summary_path, JSON_INDENT(1)) ? -EIO : 0;
	if (rc)
		ESD_ERR("node", "cannot write the summary %s", nd->summary_path);
	json_decref(o);
	return rc;
}
