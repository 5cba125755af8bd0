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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmd_status(void *arg, json_t *req, json_t **resp, const char **err)
{
	struct node *nd = arg;
	(void)req;
	(void)err;
	pthread_mutex_lock(&nd->qmu);
	double el = esd_ns_to_s(esd_now_ns() - nd->stats.t_start_ns);
	*resp = json_pack("{s:s, s:i, s:i, s:I, s:I, s:f, s:f, s:I, s:b, s:s, s:s, s:f}",
			  "role", "esdd", "rank", nd->rank, "workers", nd->job.n,
			  "iteration", (json_int_t)nd->stats.iter_done,
			  "iterations", (json_int_t)nd->job.iterations,
			  "iters_per_s", el > 0 ? nd->stats.iter_done / el : 0.0, "loss", nd->stats.last_loss,
			  "trainer_deaths", (json_int_t)nd->stats.trainer_deaths,
			  "trainer_attached", nd->tr.attached == nd->tr.count, "method", nd->job.method,
			  "sync", esd_job_sync_name(&nd->job), "alpha", nd->job.alpha);
	json_object_set_new(*resp, "policy", json_string(esd_policy_name(nd->job.policy)));
	json_object_set_new(*resp, "shards", json_integer(nd->job.shards));
	json_object_set_new(*resp, "cache_rows", json_integer((json_int_t)nd->job.cache_rows));
	/* a graceful stop: asked (here or relayed), and shard 0's boundary */
	json_object_set_new(*resp, "stop_asked", json_boolean(nd->stop.asked));
	json_object_set_new(*resp, "stop_at", json_integer((json_int_t)nd->stop.at));
	json_object_set_new(*resp, "trainers", node_trainers_json(nd));
	node_batch_rates_json(nd, *resp);
	if (nd->job.estimate_rates)
		json_object_set_new(*resp, "rate_estimate", node_rate_est_json(nd));
	json_object_set_new(*resp, "size_model", node_fit_json(nd));
	json_object_set_new(*resp, "cpu", node_cpu_json(nd));
	pthread_mutex_unlock(&nd->qmu);
	return 0;
}

static int cmd_dispatch(void *arg, json_t *req, json_t **resp, const char **err)
{
	struct node *nd = arg;
	(void)req;
	(void)err;
	pthread_mutex_lock(&nd->qmu);
	const struct esd_dispatch_counters *c = &nd->dq.count;
	double steps = c->steps ? (double)c->steps : 1;
	*resp = json_pack("{s:s, s:f, s:i, s:I, s:f, s:f, s:f, s:f, s:I, s:I, s:I, s:I, s:I, s:I}",
			  "method", nd->job.method, "alpha", nd->job.alpha, "core",
			  nd->dq.core_obtained, "steps", (json_int_t)c->steps,
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
	json_object_set_new(*resp, "regret_mean", json_real(c->solve.regret_mean));
	json_object_set_new(*resp, "opt_rows", json_integer(c->solve.opt_rows));
	json_object_set_new(*resp, "heu_rows", json_integer(c->solve.heu_rows));
	json_object_set_new(*resp, "unique_keys", json_integer(c->unique_keys));
	json_object_set_new(*resp, "hits", json_integer((json_int_t)c->hits));
	json_object_set_new(*resp, "gpu", node_gpu_json(nd));
	/* one decider: node 0's counters are the job's; here, none */
	json_object_set_new(*resp, "decided_by",
			    json_string(nd->dq.follower ? "node 0" : "this node"));
	json_object_set_new(*resp, "order_wait_ms", json_real(esd_ns_to_ms(nd->dq.wait_ns)));
	/* heu-vs-opt gap: only when the dispatcher solves both each step
	 * (esd_dispatcher_config.compare); null otherwise */
	if (c->sum_opt_cost > 0 || c->sum_heu_cost > 0) {
		json_object_set_new(*resp, "heu_cost_sum", json_integer(c->sum_heu_cost));
		json_object_set_new(*resp, "opt_cost_sum", json_integer(c->sum_opt_cost));
		json_object_set_new(*resp, "heu_opt_gap",
				    json_real(c->sum_opt_cost > 0 ? (double)c->sum_heu_cost /
									    (double)c->sum_opt_cost -
									    1.0
								  : 0.0));
	} else {
		json_object_set_new(*resp, "heu_opt_gap", json_null());
	}
	pthread_mutex_unlock(&nd->qmu);
	return 0;
}

static int cmd_links(void *arg, json_t *req, json_t **resp, const char **err)
{
	struct node *nd = arg;
	(void)req;
	(void)err;
	json_t *arr = json_array();
	pthread_mutex_lock(&nd->qmu); /* links are replaced under qmu (recovery) */
	for (uint32_t s = 0; s < nd->job.shards; s++) {
		if (!nd->links.link[s])
			continue;
		struct esd_link_stats st;
		esd_link_stats(nd->links.link[s], &st);
		json_t *l = json_pack("{s:i, s:s, s:s, s:I, s:I, s:I}", "shard", s, "backend",
				      esd_link_backend(nd->links.link[s]), "peer", esd_link_peer(nd->links.link[s]),
				      "rate_bps", (json_int_t)st.rate_bps,
				      "wire_tx_bytes", (json_int_t)st.wire_tx_bytes,
				      "shaped_wait_ns", (json_int_t)st.shaped_wait_ns);
		json_array_append_new(arr, node_link_kinds_json(&st, l));
	}
	pthread_mutex_unlock(&nd->qmu);
	*resp = json_pack("{s:o}", "links", arr);
	return 0;
}

/* Size, occupancy, policy and the per-table counters of the cache region.
 * The metadata fields are read inside the metadata seqlock (retried while
 * the main thread mutates it); the counters are atomics the main thread
 * bumps right after its metadata section, so they may lag the metadata by
 * the iteration in progress. Totals are summed from the same per-table
 * copies, so a reply agrees with itself. */
static int cmd_cache(void *arg, json_t *req, json_t **resp, const char **err)
{
	struct node *nd = arg;
	struct esd_cache_info info;
	uint32_t nt = nd->tables, count, cap;
	enum esd_policy pol;
	uint64_t last_iter, seq;
	(void)req;
	if (!nd->cache) {
		*err = "no cache region yet";
		return -EAGAIN;
	}
	struct esd_cache_counters *ct = calloc((size_t)nt + 1, sizeof(*ct));
	if (!ct)
		return -ENOMEM;
	esd_cache_get_info(nd->cache, &info);
	const struct esd_cmeta *cm = esd_cache_meta_ro(nd->cache);
	int tries = 0;
	do {
		seq = esd_cache_meta_read_begin(nd->cache);
		for (uint32_t t = 0; t <= nt; t++)
			esd_cache_counters(nd->cache, t, &ct[t]);
		count = esd_cmeta_count(cm);
		cap = esd_cmeta_capacity(cm);
		pol = esd_cmeta_policy(cm);
		last_iter = esd_cmeta_last_iter(cm);
	} while (esd_cache_meta_read_retry(nd->cache, seq) && ++tries < 1000);
	if (tries >= 1000) {
		free(ct);
		*err = "cache metadata kept changing while being read; try again";
		return -EAGAIN;
	}
	struct esd_cache_counters tot = {0};
	json_t *tabs = json_array();
	for (uint32_t t = 0; t <= nt; t++) {
		uint64_t need = ct[t].hits + ct[t].miss_absent + ct[t].miss_outdated;
		tot.hits += ct[t].hits;
		tot.miss_absent += ct[t].miss_absent;
		tot.miss_outdated += ct[t].miss_outdated;
		tot.evict_clean += ct[t].evict_clean;
		tot.evict_dirty += ct[t].evict_dirty;
		if (t == nt && !need && !ct[t].evict_clean && !ct[t].evict_dirty)
			break; /* the "other" row, unused */
		json_t *o = json_pack("{s:I, s:I, s:I, s:I, s:I, s:f}", "hits",
				      (json_int_t)ct[t].hits, "miss_absent",
				      (json_int_t)ct[t].miss_absent, "miss_outdated",
				      (json_int_t)ct[t].miss_outdated, "evict_clean",
				      (json_int_t)ct[t].evict_clean, "evict_dirty",
				      (json_int_t)ct[t].evict_dirty, "hit_ratio",
				      need ? (double)ct[t].hits / (double)need : 0.0);
		if (t == nt)
			json_object_set_new(o, "table", json_string("other"));
		else
			json_object_set_new(o, "table", json_integer(t));
		json_array_append_new(tabs, o);
	}
	free(ct);
	uint64_t need = tot.hits + tot.miss_absent + tot.miss_outdated;
	*resp = json_pack("{s:i, s:I, s:I, s:I, s:i, s:i, s:s, s:b, s:I, s:I, s:I, s:I, s:I, s:I, "
			  "s:f, s:I, s:o}",
			  "rank", nd->rank, "capacity_rows", (json_int_t)cap, "rows_used",
			  (json_int_t)count, "bytes", (json_int_t)info.bytes, "dim", info.dim,
			  "tables", info.ntables, "policy", esd_policy_name(pol), "huge_pages",
			  info.page_size > 4096, "page_size", (json_int_t)info.page_size,
			  "hits", (json_int_t)tot.hits, "miss_absent",
			  (json_int_t)tot.miss_absent, "miss_outdated",
			  (json_int_t)tot.miss_outdated, "evict_clean",
			  (json_int_t)tot.evict_clean, "evict_dirty",
			  (json_int_t)tot.evict_dirty, "hit_ratio",
			  need ? (double)tot.hits / (double)need : 0.0, "last_iteration",
			  (json_int_t)last_iter, "per_table", tabs);
	return 0;
}

/* Settings that change what the dispatcher decides must change on every
 * node at the same iteration, or the nodes' decisions differ and the
 * barrier fails the job with ESD_EDIVERGED: PS shard 0 schedules them
 * (esd-ps control command set, settings.c), a node refuses them with
 * where to send them (the control server keeps replies under 256 bytes). */
#define WHY_NOT_LIVE                                                                        \
	"%s is set on PS shard 0 so every node switches at the same iteration: esdctl "     \
	"--socket PS0_CONTROL set %s VALUE (or set %s in the job file and restart)"

static int cmd_set(void *arg, json_t *req, json_t **resp, const char **err)
{
	struct node *nd = arg;
	const char *key = json_string_value(json_object_get(req, "key"));
	const char *val = json_string_value(json_object_get(req, "value"));
	if (!key || !val) {
		*err = "set needs \"key\" and \"value\" strings";
		return -EINVAL;
	}
	/* link.rate: this node's shaping only (timing; the testbed's --netns
	 * turns the buckets off with 0); worker.rate: the same, and reported
	 * to shard 0 so that every node's decisions take it (workers.rates) */
	const bool report = !strcmp(key, "worker.rate");
	if (!strcmp(key, "link.rate") || report) {
		uint64_t r;
		if (esd_parse_rate(val, &r)) {
			*err = report ? "worker.rate: not a bit rate (e.g. 500M, 5G)"
				      : "link.rate: not a bit rate (e.g. 500M, 5G)";
			return -EINVAL;
		}
		node_set_link_rate(nd, r, report);
		*resp = json_pack("{s:s, s:I, s:b}", "key", key, "rate_bps", (json_int_t)r, "live",
				  1);
		return 0;
	}
	static const char *const fixed[][3] = {
		{"cache.policy", "[cache] policy", "cache.policy"},
		{"policy", "[cache] policy", "cache.policy"},
		{"dispatch.method", "[dispatch] method", "dispatch.method"},
		{"method", "[dispatch] method", "dispatch.method"},
		{"dispatch.alpha", "[dispatch] alpha", "dispatch.alpha"},
		{"alpha", "[dispatch] alpha", "dispatch.alpha"},
		{"workers.rates", "[workers] rates", "workers.rates"},
		{"rates", "[workers] rates", "workers.rates"},
	};
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
		if (strcmp(key, fixed[i][0]))
			continue;
		static __thread char msg[1024];
		snprintf(msg, sizeof(msg), WHY_NOT_LIVE, key, fixed[i][2], fixed[i][1]);
		*err = msg;
		return -ENOTSUP;
	}
	if (!strcmp(key, "dispatch.sync") || !strcmp(key, "sync")) {
		*err = "dispatch.sync is not live: set [dispatch] sync in the job file and restart "
		       "the job";
		return -ENOTSUP;
	}
	*err = "unknown setting; live here: link.rate, worker.rate (cache.policy, "
	       "dispatch.method, dispatch.alpha, workers.rates: on PS shard 0's control socket)";
	return -ENOTSUP;
}

/* esdctl stop: a graceful stop of the whole job (struct node_stop). */
static int cmd_stop(void *arg, json_t *req, json_t **resp, const char **err)
{
	struct node *nd = arg;
	(void)req;
	(void)err;
	node_ask_stop(nd, "esdctl stop");
	pthread_mutex_lock(&nd->qmu);
	*resp = json_pack("{s:b, s:I, s:I}", "requested", 1, "iteration",
			  (json_int_t)nd->stats.iter_done, "stop_at", (json_int_t)nd->stop.at);
	pthread_mutex_unlock(&nd->qmu);
	return 0;
}

const struct esd_ctl_cmd node_ctl_cmds[] = {
	{"status", cmd_status, "iteration, throughput, trainer, method"},
	{"dispatch", cmd_dispatch, "decision times, costs, transfers, regret"},
	{"links", cmd_links, "per-link rate, bytes and rows per transfer kind"},
	{"cache", cmd_cache, "cache size, occupancy, policy, hit ratio, per-table counters"},
	{"set", cmd_set, "set a live setting: {\"key\":\"link.rate\",\"value\":\"5G\"}"},
	{"stop", cmd_stop, "stop the whole job gracefully at the next checkpoint boundary"},
	{NULL, NULL, NULL},
};

