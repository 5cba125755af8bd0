/*
 * The node's state as JSON: the pieces that esdctl's replies (ctl.c), the
 * end-of-run summary (summary.c) and the status report to shard 0 (iter.c)
 * are built from. Calls no other file of the daemon.
 */
#include "node.h"

#include <esd/clock.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

json_t *node_link_kinds_json(const struct esd_link_stats *st, json_t *l)
{
	for (int k = 0; k < ESD_XFER_NKINDS; k++)
		json_object_set_new(l, esd_xfer_kind_name(k),
				    json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "tx_bytes",
					      (json_int_t)st->kind[k].tx_bytes, "tx_rows",
					      (json_int_t)st->kind[k].tx_rows, "tx_frames",
					      (json_int_t)st->kind[k].tx_frames, "rx_bytes",
					      (json_int_t)st->kind[k].rx_bytes, "rx_rows",
					      (json_int_t)st->kind[k].rx_rows, "rx_frames",
					      (json_int_t)st->kind[k].rx_frames));
	return l;
}

/* The running totals esdctl top turns into rates: it divides the change
 * of each between two reports by the change of t_ns (this node's clock)
 * or of iteration. Caller holds qmu. */
static json_t *top_counters_json(const struct node *nd, int64_t now)
{
	struct esd_cache_counters cc = {0};
	struct timespec cpu;
	if (nd->cache)
		esd_cache_counters_total(nd->cache, &cc);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
	const struct esd_dispatch_counters *c = &nd->dq.count;
	return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "t0_ns",
			 (json_int_t)nd->stats.t_start_ns, "t_ns", (json_int_t)now, "cpu_ns",
			 (json_int_t)(cpu.tv_sec * ESD_NS_PER_S + cpu.tv_nsec), "steps", (json_int_t)c->steps,
			 "decision_ns", (json_int_t)c->sum.total, "hits", (json_int_t)cc.hits,
			 "misses", (json_int_t)(cc.miss_absent + cc.miss_outdated));
}

int node_status_report(struct node *nd, char *buf, size_t len)
{
	char host[64] = "";
	gethostname(host, sizeof(host) - 1);
	uint64_t tx = 0, rx = 0;
	pthread_mutex_lock(&nd->qmu);
	for (uint32_t s = 0; s < nd->job.shards; s++) {
		struct esd_link_stats st;
		if (!nd->links.link[s])
			continue;
		esd_link_stats(nd->links.link[s], &st);
		tx += st.wire_tx_bytes;
		for (int k = 0; k < ESD_XFER_NKINDS; k++)
			rx += st.kind[k].rx_bytes;
	}
	int64_t now = esd_now_ns();
	double el = esd_ns_to_s(now - nd->stats.t_start_ns);
	json_t *o = json_pack("{s:s, s:i, s:I, s:f, s:f, s:i, s:i, s:I, s:s, s:I, s:I, s:I}",
			      "host", host, "pid", (int)getpid(),
			      "iteration", (json_int_t)nd->stats.iter_done,
			      "iters_per_s", el > 0 ? nd->stats.iter_done / el : 0.0,
			      "loss", nd->stats.last_loss, "trainers", (int)nd->tr.attached,
			      "trainers_expected", (int)nd->tr.count,
			      "trainer_deaths", (json_int_t)nd->stats.trainer_deaths,
			      "method", nd->job.method,
			      "rate_bps", (json_int_t)nd->job.rate_bps[nd->rank],
			      "tx_bytes", (json_int_t)tx, "rx_bytes", (json_int_t)rx);
	if (o) {
		json_object_update_new(o, top_counters_json(nd, now));
		json_object_set_new(o, "cpu", node_cpu_json(nd));
	}
	pthread_mutex_unlock(&nd->qmu);
	char *txt = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
	json_decref(o);
	int rc = txt && strlen(txt) < len ? 0 : -E2BIG;
	if (!rc)
		memcpy(buf, txt, strlen(txt) + 1);
	free(txt);
	return rc;
}

json_t *node_trainers_json(const struct node *nd)
{
	/* caller holds qmu: the slots' fd, pid and counters change under it */
	json_t *a = json_array();
	for (uint32_t i = 0; i < nd->tr.count; i++) {
		const struct node_trainer_slot *ts = &nd->tr.t[i];
		json_array_append_new(a, json_pack("{s:i, s:b, s:i, s:I, s:I}", "index", (int)i,
						   "attached", ts->fd >= 0, "pid", ts->fd >= 0 ? ts->pid : 0,
						   "commits", (json_int_t)ts->commits,
						   "deaths", (json_int_t)ts->deaths));
	}
	return a;
}

json_t *node_batch_rates_json(const struct node *nd, json_t *o)
{
	/* the decisions' per-worker sizes and link rates (workers.rates) */
	json_t *b = json_array(), *r = json_array();
	for (uint32_t w = 0; w < nd->job.n; w++) {
		json_array_append_new(b, json_integer(nd->job.batch[w]));
		json_array_append_new(r, json_integer((json_int_t)nd->job.rate_bps[w]));
	}
	json_object_set_new(o, "batch", b);
	json_object_set_new(o, "rates", r);
	return o;
}

json_t *node_cpu_json(const struct node *nd)
{
	static const char *const names[NODE_CPU_NPHASES] = {
		[NODE_CPU_CACHE] = "cache_ms",     [NODE_CPU_ENCODE] = "encode_ms",
		[NODE_CPU_DECODE] = "decode_ms",   [NODE_CPU_NET] = "send_receive_ms",
		[NODE_CPU_OPTIM] = "optimizer_ms", [NODE_CPU_TRAINER] = "trainer_ms",
		[NODE_CPU_OTHER] = "other_ms"};
	/* the tags are checked and made inside the sends and receives, on
	 * this thread: their share is taken out of send_receive */
	uint64_t auth = 0;
	for (uint32_t s = 0; s < nd->job.shards; s++) {
		struct esd_link_stats st;
		if (!nd->links.link[s])
			continue;
		esd_link_stats(nd->links.link[s], &st);
		auth += st.auth_tx_cpu_ns + st.auth_rx_cpu_ns;
	}
	json_t *o = json_pack("{s:f, s:f}", "decision_ms", esd_ns_to_ms(nd->dq.cpu_ns),
			      "auth_ms", esd_ns_to_ms((int64_t)auth));
	for (int p = 0; p < NODE_CPU_NPHASES; p++) {
		int64_t ns = nd->stats.cpu_ns[p];
		if (p == NODE_CPU_NET)
			ns = ns > (int64_t)auth ? ns - (int64_t)auth : 0;
		json_object_set_new(o, names[p], json_real(esd_ns_to_ms(ns)));
	}
	return o;
}

json_t *node_rate_est_json(const struct node *nd)
{
	if (!nd->job.estimate_rates)
		return json_null();
	/* workers.estimate_rates: this node's link as its pull phases saw it */
	return json_pack("{s:I, s:b, s:i, s:I, s:I}", "bps", (json_int_t)nd->rate.bps,
			 "fitted", nd->rate.fitted, "samples",
			 (int)esd_rate_est_samples(&nd->rate.est), "phases_left_out",
			 (json_int_t)nd->rate.est.skipped, "reports",
			 (json_int_t)nd->rate.reports);
}

json_t *node_gpu_json(const struct node *nd)
{
	if (!nd->dq.has_gpu)
		return json_null();
	/* dispatch.gpu: who answered the exact part (esd/gpu.h) */
	const struct esd_gpu_stats *g = &nd->dq.gcount;
	return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b}", "gpu_solved",
			 (json_int_t)g->gpu_solved, "cpu_fallbacks", (json_int_t)g->cpu_fallbacks,
			 "late", (json_int_t)g->late, "busy", (json_int_t)g->busy, "gpu_rejected",
			 (json_int_t)g->gpu_rejected, "small", (json_int_t)g->small, "min_rows",
			 (json_int_t)(g->min_rows == ESD_GPU_NEVER ? -1 : (json_int_t)g->min_rows),
			 "last_gpu_us", (json_int_t)g->last_gpu_us, "last_by_gpu", g->last_by_gpu);
}
