/*
 * The control commands of esdd (esd/ctl.h), served on NODE_DIR/control.sock
 * and used by esdctl. Handlers run on the control thread: they read shared
 * state under nd->qmu or through thread-safe accessors only.
 */
#include "node.h"

#include <esd/ctl.h>
#include <esd/clock.h>
#include <esd/err.h>
#include <esd/log.h>
#include <string.h>

static int cmd_status(void *arg, json_t *req, json_t **resp, const char **err)
{
	struct node *nd = arg;
	(void)req;
	(void)err;
	pthread_mutex_lock(&nd->qmu);
	double el = esd_ns_to_s(esd_now_ns() - nd->t_start_ns);
	*resp = json_pack("{s:s, s:i, s:i, s:I, s:I, s:f, s:f, s:I, s:b, s:s, s:s, s:f}",
			  "role", "esdd", "rank", nd->rank, "workers", nd->job.n,
			  "iteration", (json_int_t)nd->iter_done,
			  "iterations", (json_int_t)nd->job.iterations,
			  "iters_per_s", el > 0 ? nd->iter_done / el : 0.0, "loss", nd->last_loss,
			  "trainer_deaths", (json_int_t)nd->trainer_deaths,
			  "trainer_attached", nd->trainer_fd >= 0, "method", nd->job.method,
			  "sync", esd_job_sync_name(&nd->job), "alpha", nd->job.alpha);
	pthread_mutex_unlock(&nd->qmu);
	return 0;
}

static int cmd_dispatch(void *arg, json_t *req, json_t **resp, const char **err)
{
	struct node *nd = arg;
	(void)req;
	(void)err;
	pthread_mutex_lock(&nd->qmu);
	const struct esd_dispatch_counters *c = &nd->dcount;
	double steps = c->steps ? (double)c->steps : 1;
	*resp = json_pack("{s:s, s:f, s:i, s:I, s:f, s:f, s:f, s:f, s:I, s:I, s:I, s:I, s:I, s:I}",
			  "method", nd->job.method, "alpha", nd->job.alpha, "core",
			  nd->disp_core_obtained, "steps", (json_int_t)c->steps,
			  "decision_ms_mean", esd_ns_to_ms(c->sum.total) / steps,
			  "decision_ms_last", esd_ns_to_ms(c->last.total),
			  "solve_ms_mean", esd_ns_to_ms(c->sum.solve) / steps,
			  "matrix_ms_mean", esd_ns_to_ms(c->sum.matrix) / steps,
			  "est_cost_sum", (json_int_t)c->sum_est_cost,
			  "true_cost_sum", (json_int_t)c->sum_true_cost,
			  "miss_pulls", (json_int_t)c->xfers[ESD_CQ_MISS_PULL],
			  "update_values", (json_int_t)c->xfers[ESD_CQ_UPDATE_VALUE],
			  "update_grads", (json_int_t)c->xfers[ESD_CQ_UPDATE_GRAD],
			  "evict_pushes", (json_int_t)c->xfers[ESD_CQ_EVICT_PUSH]);
	json_object_set_new(*resp, "regret_median", json_integer(c->solve.regret_median));
	json_object_set_new(*resp, "regret_max", json_integer(c->solve.regret_max));
	pthread_mutex_unlock(&nd->qmu);
	return 0;
}

static int cmd_links(void *arg, json_t *req, json_t **resp, const char **err)
{
	struct node *nd = arg;
	static const char *const kinds[] = {"miss_pull", "update_push", "evict_push", "other"};
	(void)req;
	(void)err;
	json_t *arr = json_array();
	for (uint32_t s = 0; s < nd->job.shards; s++) {
		if (!nd->link[s])
			continue;
		struct esd_link_stats st;
		esd_link_stats(nd->link[s], &st);
		json_t *l = json_pack("{s:i, s:s, s:s, s:I, s:I, s:I}", "shard", s, "backend",
				      esd_link_backend(nd->link[s]), "peer", esd_link_peer(nd->link[s]),
				      "rate_bps", (json_int_t)st.rate_bps,
				      "wire_tx_bytes", (json_int_t)st.wire_tx_bytes,
				      "shaped_wait_ns", (json_int_t)st.shaped_wait_ns);
		for (int k = 0; k < ESD_XFER_NKINDS; k++)
			json_object_set_new(
				l, kinds[k],
				json_pack("{s:I, s:I, s:I, s:I}", "tx_bytes",
					  (json_int_t)st.kind[k].tx_bytes, "tx_rows",
					  (json_int_t)st.kind[k].tx_rows, "rx_bytes",
					  (json_int_t)st.kind[k].rx_bytes, "rx_rows",
					  (json_int_t)st.kind[k].rx_rows));
		json_array_append_new(arr, l);
	}
	*resp = json_pack("{s:o}", "links", arr);
	return 0;
}

static int cmd_set(void *arg, json_t *req, json_t **resp, const char **err)
{
	struct node *nd = arg;
	const char *key = json_string_value(json_object_get(req, "key"));
	const char *val = json_string_value(json_object_get(req, "value"));
	(void)resp;
	if (!key || !val) {
		*err = "set needs \"key\" and \"value\" strings";
		return -EINVAL;
	}
	if (!strcmp(key, "link.rate")) {
		uint64_t r;
		if (esd_parse_rate(val, &r)) {
			*err = "link.rate: not a bit rate (e.g. 500M, 5G)";
			return -EINVAL;
		}
		for (uint32_t s = 0; s < nd->job.shards; s++)
			if (nd->link[s])
				esd_link_set_rate(nd->link[s], r);
		return 0;
	}
	*err = "settable live: link.rate (method, alpha and policy must agree on every node: "
	       "set them in the job file)";
	return -ENOTSUP;
}

const struct esd_ctl_cmd node_ctl_cmds[] = {
	{"status", cmd_status, "iteration, throughput, trainer, method"},
	{"dispatch", cmd_dispatch, "decision times, costs, transfers, regret"},
	{"links", cmd_links, "per-link rate, bytes and rows per transfer kind"},
	{"set", cmd_set, "set a live setting: {\"key\":\"link.rate\",\"value\":\"5G\"}"},
	{NULL, NULL, NULL},
};

