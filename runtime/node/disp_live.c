/*
 * The dispatcher thread's live settings: a change esdctl set (or shard 0's
 * fit of the sizes) announced for an iteration is applied as the thread
 * starts deciding it, the same on every node: a new decision engine on the
 * same snapshots, the snapshots' policy, or new rates and batch sizes.
 */
#include "disp.h"
#include "node.h"

#include <esd/err.h>
#include <esd/log.h>
#include <esd/policy.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The counters of the current engine on top of those it replaced. */
struct esd_dispatch_counters node_disp_counters(const struct disp *ds)
{
	struct esd_dispatch_counters c = *esd_dispatcher_counters(ds->eng.d);
	const struct esd_dispatch_counters *b = &ds->eng.base;
	c.steps += b->steps;
	c.sum.keytab += b->sum.keytab;
	c.sum.fill += b->sum.fill;
	c.sum.matrix += b->sum.matrix;
	c.sum.solve += b->sum.solve;
	c.sum.advance += b->sum.advance;
	c.sum.total += b->sum.total;
	c.sum.profile += b->sum.profile;
	c.sum_est_cost += b->sum_est_cost;
	c.sum_true_cost += b->sum_true_cost;
	c.sum_heu_cost += b->sum_heu_cost;
	c.sum_opt_cost += b->sum_opt_cost;
	for (int q = 0; q < ESD_CQ_KINDS; q++)
		c.xfers[q] += b->xfers[q];
	c.hits += b->hits;
	return c;
}

/* The node's record of job j's rates and sizes. */
static void keep_split(struct node *nd, const struct esd_job *j)
{
	pthread_mutex_lock(&nd->qmu);
	memcpy(nd->job.rate_bps, j->rate_bps, sizeof(j->rate_bps));
	memcpy(nd->job.batch, j->batch, sizeof(j->batch));
	nd->job.derived.size_fixed_rows = j->derived.size_fixed_rows;
	nd->job.derived.size_rows_per_sample = j->derived.size_rows_per_sample;
	nd->job.derived.size_compute_ns = j->derived.size_compute_ns;
	pthread_mutex_unlock(&nd->qmu);
}

/* Job j's rates and sizes from iteration iter on (a live workers.rates or
 * workers.size_model change, after esd_job_resplit: the same on every
 * node): every worker's row cost T_j and capacity; the dispatcher is made
 * again with them. */
static int apply_split(struct disp *ds, uint64_t iter, const struct esd_job *j, const char *what)
{
	struct node *nd = ds->nd;
	uint64_t maxb = 0;
	for (uint32_t w = 0; w < j->n; w++)
		maxb = j->batch[w] > maxb ? j->batch[w] : maxb;
	if (maxb * nd->width + nd->nrep > j->cache_rows || maxb > ds->sz.max_batch) {
		ESD_ERR("dispatch", "iteration %llu: %s gives a worker %llu samples: its %llu keys "
			"and %u hot rows exceed the cache's %llu rows, or the exchange area's %u "
			"samples", (unsigned long long)iter, what, (unsigned long long)maxb,
			(unsigned long long)(maxb * nd->width), nd->nrep,
			(unsigned long long)j->cache_rows, ds->sz.max_batch);
		return -ENOSPC;
	}
	for (uint32_t w = 0; w < j->n; w++)
		ds->sz.T[w] = (int64_t)esd_job_row_cost_ns(j, w, esd_job_row_bytes(j));
	memcpy(ds->sz.batch, j->batch, sizeof(ds->sz.batch));
	struct esd_dispatcher_config dc = ds->eng.dc;
	dc.T = ds->sz.T;
	dc.cap = ds->sz.batch;
	ds->eng.base = node_disp_counters(ds);
	esd_dispatcher_free(ds->eng.d);
	ds->eng.d = NULL;
	int rc = esd_dispatcher_create(&dc, ds->eng.ss, &ds->eng.d);
	if (rc)
		return rc;
	ds->eng.dc = dc;
	keep_split(nd, j);
	char sizes[ESD_MAX_WORKERS * 11 + 1];
	esd_job_sizes_text(j->batch, j->n, sizes, sizeof(sizes));
	ESD_INFO("dispatch", "iteration %llu: %s, batch sizes %s", (unsigned long long)iter, what,
		 sizes);
	return 0;
}

/* workers.rates = val: every worker's row cost T_j and, with a link-aware
 * split, the batch sizes. */
static int apply_rates(struct disp *ds, uint64_t iter, const char *val, uint64_t *rate)
{
	struct node *nd = ds->nd;
	pthread_mutex_lock(&nd->qmu);
	struct esd_job j = nd->job;
	pthread_mutex_unlock(&nd->qmu);
	if (esd_job_parse_rates(val, j.n, j.rate_bps) || esd_job_resplit(&j))
		return -EINVAL;
	char what[ESD_PROTO_MAX_SETTING + 32];
	snprintf(what, sizeof(what), "workers.rates = %s", val);
	int rc = apply_split(ds, iter, &j, what);
	if (!rc)
		*rate = j.rate_bps[nd->rank];
	return rc;
}

/* workers.size_model = FIXED,PER_SAMPLE,COMPUTE_NS (shard 0's fit): the
 * link-aware split's model and the sizes it gives. */
static int apply_size_model(struct disp *ds, uint64_t iter, const char *val)
{
	struct node *nd = ds->nd;
	pthread_mutex_lock(&nd->qmu);
	struct esd_job j = nd->job;
	pthread_mutex_unlock(&nd->qmu);
	double v[3];
	if (!j.derived.split_link_aware || esd_job_parse_size_model(val, v))
		return -EINVAL;
	j.derived.size_fixed_rows = v[0];
	j.derived.size_rows_per_sample = v[1];
	j.derived.size_compute_ns = v[2];
	if (esd_job_resplit(&j))
		return -EINVAL;
	char what[ESD_PROTO_MAX_SETTING + 32];
	snprintf(what, sizeof(what), "workers.size_model = %s", val);
	return apply_split(ds, iter, &j, what);
}

/* esdctl set: apply the change announced for iteration iter (settings.c)
 * as this thread starts deciding it, identically on every node. Method and
 * alpha: a new decision engine on the same snapshots (its per-iteration
 * seed comes from the snapshots' iteration, so nothing else carries over
 * but the counters, which restart). Policy: every snapshot switches here,
 * before the lookahead hints and the advance of iter; *set_policy tells
 * the main thread to switch the real cache at the same point. */
int node_disp_apply_setting(struct disp *ds, uint64_t iter, int *set_policy, uint64_t *rate)
{
	struct node *nd = ds->nd;
	char key[sizeof(nd->live.set_key)], val[sizeof(nd->live.set_value)];
	int rc = 0;

	*set_policy = -1;
	pthread_mutex_lock(&nd->qmu);
	bool due = nd->live.set_at == iter;
	if (due) {
		memcpy(key, nd->live.set_key, sizeof(key));
		memcpy(val, nd->live.set_value, sizeof(val));
	}
	pthread_mutex_unlock(&nd->qmu);
	if (!due)
		return 0;
	if (!strcmp(key, "workers.rates"))
		return apply_rates(ds, iter, val, rate);
	if (!strcmp(key, "workers.size_model"))
		return apply_size_model(ds, iter, val);
	if (!strcmp(key, "cache.policy")) {
		enum esd_policy p;
		rc = esd_policy_parse(val, &p);
		for (uint32_t j = 0; j < nd->job.n && !rc; j++)
			rc = esd_cmeta_set_policy(esd_snapset_cmeta(ds->eng.ss, j), p);
		if (rc)
			return rc;
		ds->eng.policy = p;
		*set_policy = (int)p;
		return 0;
	}
	struct esd_dispatcher_config dc = ds->eng.dc;
	if (!strcmp(key, "dispatch.method"))
		rc = esd_method_parse(val, &dc.method);
	else if (!strcmp(key, "dispatch.alpha"))
		dc.hybrid.alpha = strtod(val, NULL);
	else
		rc = -EINVAL;
	if (rc)
		return rc;
	ds->eng.base = node_disp_counters(ds);
	esd_dispatcher_free(ds->eng.d);
	ds->eng.d = NULL;
	rc = esd_dispatcher_create(&dc, ds->eng.ss, &ds->eng.d);
	if (rc) {
		ESD_ERR("dispatch", "iteration %llu: %s = %s: %s", (unsigned long long)iter, key,
			val, esd_strerror(rc));
		return rc;
	}
	ds->eng.dc = dc;
	pthread_mutex_lock(&nd->qmu);
	snprintf(nd->job.method, sizeof(nd->job.method), "%s", esd_method_name(dc.method));
	nd->job.alpha = dc.hybrid.alpha;
	pthread_mutex_unlock(&nd->qmu);
	ESD_INFO("dispatch", "iteration %llu: %s = %s (method %s, alpha %g)",
		 (unsigned long long)iter, key, val, esd_method_name(dc.method), dc.hybrid.alpha);
	return 0;
}

void node_follow_setting(struct disp *ds, uint64_t iter)
{
	struct node *nd = ds->nd;
	char key[sizeof(nd->live.set_key)], val[sizeof(nd->live.set_value)];
	pthread_mutex_lock(&nd->qmu);
	bool due = nd->live.set_at == iter;
	if (due) {
		memcpy(key, nd->live.set_key, sizeof(key));
		memcpy(val, nd->live.set_value, sizeof(val));
	}
	struct esd_job j = nd->job;
	pthread_mutex_unlock(&nd->qmu);
	if (!due)
		return;
	double v[3];
	if (!strcmp(key, "workers.rates") && !esd_job_parse_rates(val, j.n, j.rate_bps) &&
	    !esd_job_resplit(&j)) {
		keep_split(nd, &j);
	} else if (!strcmp(key, "workers.size_model") && !esd_job_parse_size_model(val, v)) {
		j.derived.size_fixed_rows = v[0];
		j.derived.size_rows_per_sample = v[1];
		j.derived.size_compute_ns = v[2];
		if (!esd_job_resplit(&j))
			keep_split(nd, &j);
	} else if (!strcmp(key, "dispatch.method") || !strcmp(key, "dispatch.alpha")) {
		pthread_mutex_lock(&nd->qmu);
		if (key[9] == 'm')
			snprintf(nd->job.method, sizeof(nd->job.method), "%s", val);
		else
			nd->job.alpha = strtod(val, NULL);
		pthread_mutex_unlock(&nd->qmu);
	}
	ESD_INFO("dispatch", "iteration %llu: %s = %s (decided by node 0)",
		 (unsigned long long)iter, key, val);
}
