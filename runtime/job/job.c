/*
 * Job settings: one INI file shared by every process of a job. Lists
 * ("5G,5G,0.5G") give per-worker values; a single value applies to all.
 */
#include "job_internal.h"

#include <esd/dispatch_solve.h>
#include <esd/err.h>
#include <esd/log.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *const esd_job_keys[] = {
	"job.seed", "job.iterations", "job.warmup", "job.key", "job.insecure",
	"workers.n", "workers.batch", "workers.rates", "workers.compute_ns_per_sample",
	"model.dim", "model.optimizer", "model.lr", "model.eps", "model.beta1", "model.beta2",
	"model.hidden", "model.dense",
	"cache.ratio", "cache.rows", "cache.policy",
	"dispatch.method", "dispatch.alpha", "dispatch.sync", "dispatch.staleness",
	"dispatch.compare",
	"dispatch.matrix", /* quality: paper or shared (esd/dispatch_quality.h) */
	"dispatch.local_search", /* quality: swaps evaluated per step, 0: off */
	"dispatch.replicate", /* FAE: hot-row file (esd-data hot) */
	"dispatch.gpu", "dispatch.gpu_deadline_us", /* exact part on the GPU (esd/gpu.h) */
	"dispatch.gpu_min_rows", "dispatch.gpu_blocks",
	"workers.split", "workers.size_model", /* quality: link-aware batch sizes */
	"workers.refit_threshold", /* quality: workers.split = fit */
	"workers.link_rates", "workers.estimate_rates", "workers.estimate_tolerance",
	"workers.checkpoint_dir", "workers.trainers",
	"data.stream",
	"ps.shards", "ps.addrs", "ps.backend", "ps.checkpoint_dir", "ps.checkpoint_every",
	"ps.warm_start", /* an export to start from (runtime/ps/warm.c) */
	"ps.barrier_timeout",
	"job.restart_trainers", "job.restart_shards", "job.restart_wait",
	"job.heartbeat_ms", "job.peer_timeout_ms",
	"job.force_plan", /* start where esdctl plan says DOES NOT FIT */
	/* the backend's own keys (backend.c) */
	"ps.dpdk_eal", "ps.dpdk_port", "ps.dpdk_mtu", "ps.dpdk_queue", "ps.dpdk_shard_macs",
	"ps.dpdk_worker_macs", "ps.rdma_device", "ps.rdma_port", "ps.rdma_gid_index",
	"ps.zero_copy",
	NULL,
};

const char *esd_job_sync_name(const struct esd_job *j)
{
	return j->het ? "het" : j->sync == ESD_SYNC_FULL_SET ? "full-set" : "on-demand";
}

/* An item "X*N" of a list stands for N copies of X (N 1..max): its count,
 * 1 for a plain item, or -EINVAL. */
static int repeat_count(char *item, int max)
{
	char *star = strrchr(item, '*'), *end;
	if (!star)
		return 1;
	errno = 0;
	long k = strtol(star + 1, &end, 10);
	if (errno || end == star + 1 || *end || k < 1 || k > max || star == item)
		return -EINVAL;
	*star = '\0';
	while (star > item && (star[-1] == ' ' || star[-1] == '\t'))
		*--star = '\0';
	return (int)k;
}

int job_split(const char *s, char items[][ESD_JOB_ADDR_LEN], int max)
{
	int n = 0;
	const char *p = s;
	while (*p) {
		const char *c = strchr(p, ',');
		size_t len = c ? (size_t)(c - p) : strlen(p);
		while (len && (*p == ' ' || *p == '\t'))
			p++, len--;
		while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		if (n == max || len == 0 || len >= ESD_JOB_ADDR_LEN)
			return -EINVAL;
		memcpy(items[n], p, len);
		items[n][len] = '\0';
		int k = repeat_count(items[n], max - n); /* "5G*48": 48 items */
		if (k < 0)
			return -EINVAL;
		for (int i = 1; i < k; i++)
			memcpy(items[n + i], items[n], ESD_JOB_ADDR_LEN);
		n += k;
		if (!c)
			break;
		p = c + 1;
	}
	return n;
}

static int bad_list(const struct esd_config *cfg, const char *sec, const char *key,
		    const char *why)
{
	const char *v;
	esd_config_get_str(cfg, sec, key, "", &v);
	ESD_ERR("config", "%s.%s = '%s': %s", sec, key, v, why);
	return -EINVAL;
}

static int per_worker(const struct esd_config *cfg, const char *key, uint32_t n, bool rate,
		      uint64_t def, uint64_t *out)
{
	char items[ESD_MAX_WORKERS][ESD_JOB_ADDR_LEN];
	const char *s;
	esd_config_get_str(cfg, "workers", key, NULL, &s);
	if (!s) {
		for (uint32_t i = 0; i < n; i++)
			out[i] = def;
		return 0;
	}
	int cnt = job_split(s, items, ESD_MAX_WORKERS);
	if (cnt != 1 && cnt != (int)n)
		return bad_list(cfg, "workers", key, "expected one value or one per worker");
	for (uint32_t i = 0; i < n; i++) {
		const char *it = items[cnt == 1 ? 0 : i];
		int rc = rate ? esd_parse_rate(it, &out[i]) : esd_parse_u64(it, &out[i]);
		if (rc)
			return bad_list(cfg, "workers", key,
					rate ? "not a list of bit rates" : "not a list of integers");
	}
	return 0;
}

/* quality (esd/dispatch_quality.h): workers.split = link-aware replaces the
 * sizes of workers.batch, keeping their sum, by the capacities that
 * minimise the predicted iteration time for the links' row costs, the
 * compute time per sample and workers.size_model = FIXED_ROWS,ROWS_PER_SAMPLE
 * (what esd-replay's @auto fits). Deterministic: every process gets the
 * same sizes, and the digest covers them. workers.split = fit starts from
 * equal sizes (or the size_model given) and takes the model shard 0 fits
 * to the job's own iterations (live workers.size_model changes). Without
 * a workers.split, a job of the project's default method whose
 * workers.batch is one value fits its sizes. */
static int link_aware_split(const struct esd_config *cfg, struct esd_job *j, bool preset)
{
	const char *s, *batch;
	esd_config_get_str(cfg, "workers", "batch", NULL, &batch);
	const bool one_size = !batch || !strchr(batch, ',');
	esd_config_get_str(cfg, "workers", "split", preset && one_size ? "fit" : "equal", &s);
	if (!strcasecmp(s, "equal"))
		return 0;
	const bool fit = !strcasecmp(s, "fit");
	if (!fit && strcasecmp(s, "link-aware")) {
		ESD_ERR("config", "workers.split = '%s': expected equal, link-aware or fit", s);
		return -EINVAL;
	}
	char items[2][ESD_JOB_ADDR_LEN];
	double v[2];
	const char *given;
	esd_config_get_str(cfg, "workers", "size_model", NULL, &given);
	/* fit: equal sizes until the first fit, unless a model is given */
	s = given ? given : fit ? "0,0" : "0,1";
	if (job_split(s, items, 2) != 2 || esd_parse_double(items[0], &v[0]) ||
	    esd_parse_double(items[1], &v[1]) || !(v[0] >= 0) || !(v[1] >= 0)) {
		ESD_ERR("config", "workers.size_model = '%s': expected FIXED_ROWS,ROWS_PER_SAMPLE "
			"(two numbers >= 0)", s);
		return -EINVAL;
	}
	if (j->global_batch > UINT32_MAX || j->global_batch < j->n) {
		ESD_ERR("config", "workers.split = %s: global batch %llu below one sample "
			"per worker", fit ? "fit" : "link-aware", (unsigned long long)j->global_batch);
		return -EINVAL;
	}
	j->split_link_aware = true;
	j->split_fit = fit;
	j->size_compute_ns = (double)j->compute_ns_per_sample;
	j->size_fixed_rows = v[0];
	j->size_rows_per_sample = v[1];
	return esd_job_resplit(j);
}

void esd_job_sizes_text(const uint32_t *m, uint32_t n, char *buf, size_t len)
{
	size_t off = 0;
	if (len)
		buf[0] = '\0';
	for (uint32_t w = 0; w < n && off < len; w++)
		off += (size_t)snprintf(buf + off, len - off, "%s%u", w ? "," : "", m[w]);
}

int esd_job_parse_size_model(const char *s, double v[3])
{
	char items[3][ESD_JOB_ADDR_LEN];
	if (!s || job_split(s, items, 3) != 3)
		return -EINVAL;
	for (int i = 0; i < 3; i++)
		if (esd_parse_double(items[i], &v[i]) || !(v[i] >= 0) || !isfinite(v[i]))
			return -EINVAL;
	return 0;
}

int esd_job_resplit(struct esd_job *j)
{
	if (!j->split_link_aware)
		return 0;
	int64_t T[ESD_MAX_WORKERS];
	for (uint32_t w = 0; w < j->n; w++)
		T[w] = (int64_t)esd_job_row_cost_ns(j, w, esd_job_row_bytes(j));
	struct esd_size_model m = {.compute_ns = j->size_compute_ns,
				   .fixed_rows = j->size_fixed_rows,
				   .rows_per_sample = j->size_rows_per_sample};
	if (j->max_batch)
		return esd_batch_sizes_link_aware_capped(j->n, (uint32_t)j->global_batch, T, &m, 1,
							 j->max_batch, j->batch);
	return esd_batch_sizes_link_aware(j->n, (uint32_t)j->global_batch, T, &m, 1, j->batch);
}

uint32_t esd_job_max_batch(uint64_t cache_rows, uint64_t hot_rows, uint32_t tables)
{
	uint64_t m = cache_rows > hot_rows && tables ? (cache_rows - hot_rows) / tables : 1;
	return m < 1 ? 1 : m > UINT32_MAX ? UINT32_MAX : (uint32_t)m;
}

int esd_job_parse_rates(const char *s, uint32_t n, uint64_t *out)
{
	char items[ESD_MAX_WORKERS][ESD_JOB_ADDR_LEN];
	if (!s || !out || n == 0 || n > ESD_MAX_WORKERS)
		return -EINVAL;
	int cnt = job_split(s, items, ESD_MAX_WORKERS);
	if (cnt != 1 && cnt != (int)n)
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++)
		if (esd_parse_rate(items[cnt == 1 ? 0 : i], &out[i]))
			return -EINVAL;
	return 0;
}

/* Long: one job setting after another, each read with its own bounds and error (the keys are
 * listed in esd_job_keys). */
int esd_job_from_config(const struct esd_config *cfg, struct esd_job *j)
{
	const char *s;
	uint64_t u, list[ESD_MAX_WORKERS];
	int rc = 0;

	memset(j, 0, sizeof(*j));
#define TRY(x)                                                                                     \
	do {                                                                                       \
		if ((x) < 0)                                                                       \
			rc = -EINVAL;                                                              \
	} while (0)
	TRY(esd_config_get_u64(cfg, "job", "seed", 1, 0, UINT64_MAX, &j->seed));
	TRY(esd_config_get_u64(cfg, "job", "iterations", 50, 1, UINT64_MAX / 2, &j->iterations));
	TRY(esd_config_get_u64(cfg, "job", "warmup", 10, 0, UINT64_MAX / 2, &j->warmup));
	TRY(esd_config_get_u64(cfg, "workers", "n", 8, 1, ESD_MAX_WORKERS, &u));
	j->n = (uint32_t)u;
	if (!rc && per_worker(cfg, "batch", j->n, false, 128, list) == 0) {
		for (uint32_t i = 0; i < j->n; i++) {
			if (list[i] > (1u << 20)) {
				rc = bad_list(cfg, "workers", "batch", "batch above 2^20");
				break;
			}
			j->batch[i] = (uint32_t)list[i];
			j->global_batch += list[i];
		}
		if (!rc && j->global_batch == 0)
			rc = bad_list(cfg, "workers", "batch", "global batch is 0");
	} else {
		rc = -EINVAL;
	}
	if (!rc && per_worker(cfg, "rates", j->n, true, 0, j->rate_bps))
		rc = -EINVAL;
	/* the links' own rates, when the model's are not theirs */
	const char *lr;
	esd_config_get_str(cfg, "workers", "link_rates", NULL, &lr);
	if (!rc && lr && per_worker(cfg, "link_rates", j->n, true, 0, j->link_bps))
		rc = -EINVAL;
	if (!lr)
		memcpy(j->link_bps, j->rate_bps, sizeof(j->link_bps));
	TRY(esd_config_get_bool(cfg, "workers", "estimate_rates", false, &j->estimate_rates));
	TRY(esd_config_get_double(cfg, "workers", "estimate_tolerance", 0.25, 0.01, 10,
				  &j->estimate_tolerance));
	j->shape_follows_model = !lr && !j->estimate_rates;
	TRY(esd_config_get_u64(cfg, "workers", "compute_ns_per_sample", 0, 0, UINT64_MAX / 2,
			       &j->compute_ns_per_sample));
	TRY(esd_config_get_u64(cfg, "workers", "trainers", 1, 1, ESD_MAX_TRAINERS, &u));
	j->trainers = (uint32_t)u;
	TRY(esd_config_get_u64(cfg, "model", "dim", 16, 1, 1u << 16, &u));
	j->dim = (uint32_t)u;
	TRY(esd_config_get_u64(cfg, "model", "hidden", 16, 1, 4096, &u));
	j->hidden = (uint32_t)u;
	TRY(esd_config_get_u64(cfg, "model", "dense", 13, 0, 4096, &u));
	j->dense = (uint32_t)u;
	enum esd_optimizer opt = ESD_OPT_ADAGRAD;
	esd_config_get_str(cfg, "model", "optimizer", "adagrad", &s);
	if (esd_optim_parse(s, &opt)) {
		ESD_ERR("config", "model.optimizer = '%s': expected sgd, adagrad or adam", s);
		rc = -EINVAL;
	}
	esd_optim_params_default(&j->optim, opt);
	double d;
	TRY(esd_config_get_double(cfg, "model", "lr", j->optim.lr, 0, 1e6, &d));
	j->optim.lr = (float)d;
	TRY(esd_config_get_double(cfg, "model", "eps", j->optim.eps, 0, 1, &d));
	j->optim.eps = (float)d;
	TRY(esd_config_get_double(cfg, "model", "beta1", j->optim.beta1, 0, 0.999999, &d));
	j->optim.beta1 = (float)d;
	TRY(esd_config_get_double(cfg, "model", "beta2", j->optim.beta2, 0, 0.999999, &d));
	j->optim.beta2 = (float)d;
	if (!rc && esd_optim_params_check(&j->optim)) {
		ESD_ERR("config", "model: optimizer hyper-parameters out of range");
		rc = -EINVAL;
	}
	TRY(esd_config_get_double(cfg, "cache", "ratio", 0.08, 0, 1, &j->cache_ratio));
	TRY(esd_config_get_u64(cfg, "cache", "rows", 0, 0, 1u << 30, &j->cache_rows));
	esd_config_get_str(cfg, "cache", "policy", "emark", &s);
	if (esd_policy_parse(s, &j->policy)) {
		ESD_ERR("config", "cache.policy = '%s': expected lru, lfu, emark or lookahead", s);
		rc = -EINVAL;
	}
	/* no dispatch.method: the project's default (docs/quality.md), the
	 * shared-charge matrix solved exactly with local search and sizes
	 * fitted online; a method named is that method as published */
	const char *named;
	esd_config_get_str(cfg, "dispatch", "method", NULL, &named);
	const bool preset = !named;
	const bool wide = j->n > ESD_JOB_EXACT_MAX_WORKERS;
	snprintf(j->method, sizeof(j->method), "%s",
		 named ? named : wide ? ESD_JOB_WIDE_METHOD : ESD_JOB_DEFAULT_METHOD);
	TRY(esd_config_get_double(cfg, "dispatch", "alpha", 0.25, 0, 1, &j->alpha));
	esd_config_get_str(cfg, "dispatch", "sync", "on-demand", &s);
	if (!strcasecmp(s, "on-demand")) {
		j->sync = ESD_SYNC_ON_DEMAND;
	} else if (!strcasecmp(s, "full-set") || !strcasecmp(s, "het")) {
		j->sync = ESD_SYNC_FULL_SET;
		j->het = !strcasecmp(s, "het");
	} else {
		ESD_ERR("config", "dispatch.sync = '%s': expected on-demand, full-set or het", s);
		rc = -EINVAL;
	}
	TRY(esd_config_get_bool(cfg, "dispatch", "compare", false, &j->compare));
	/* quality: the cost matrix of the cost-based methods */
	esd_config_get_str(cfg, "dispatch", "matrix", preset ? "shared" : "paper", &s);
	if (esd_matrix_parse(s, &j->matrix)) {
		ESD_ERR("config", "dispatch.matrix = '%s': expected paper or shared", s);
		rc = -EINVAL;
	}
	const uint64_t swaps = !preset ? 0 : wide ? ESD_JOB_WIDE_SWAPS / j->n : ESD_JOB_DEFAULT_SWAPS;
	TRY(esd_config_get_u64(cfg, "dispatch", "local_search", swaps, 0, UINT64_C(1) << 32,
			       &j->local_search));
	j->ls_ref_keys = preset && !esd_config_has(cfg, "dispatch", "local_search")
				 ? ESD_JOB_LS_REF_KEYS : 0;
	TRY(esd_config_get_u64(cfg, "dispatch", "staleness", 0, 0, 1u << 20, &u));
	j->staleness = (uint32_t)u;
	TRY(esd_config_get_bool(cfg, "dispatch", "gpu", false, &j->gpu));
	TRY(esd_config_get_u64(cfg, "dispatch", "gpu_deadline_us", 50000, 1, 10000000,
			       &j->gpu_deadline_us));
	TRY(esd_config_get_u64(cfg, "dispatch", "gpu_blocks", 0, 0, 4096, &j->gpu_blocks));
	esd_config_get_str(cfg, "dispatch", "gpu_min_rows", "measure", &s);
	j->gpu_min_rows = ESD_JOB_GPU_MEASURE;
	if (strcmp(s, "measure") != 0) {
		char *end;
		errno = 0;
		unsigned long long v = strtoull(s, &end, 10);
		if (errno || end == s || *end || s[0] == '-' || v > ESD_SOLVE_MAX_K) {
			ESD_ERR("config", "dispatch.gpu_min_rows = '%s': expected measure or a "
				"number of rows 0..%u", s, ESD_SOLVE_MAX_K);
			rc = -EINVAL;
		} else {
			j->gpu_min_rows = v;
		}
	}
	esd_config_get_str(cfg, "dispatch", "replicate", "", &s);
	snprintf(j->replicate, sizeof(j->replicate), "%s", s);
	esd_config_get_str(cfg, "data", "stream", "", &s);
	snprintf(j->stream, sizeof(j->stream), "%s", s);
	esd_config_get_str(cfg, "job", "key", "", &s);
	snprintf(j->key_file, sizeof(j->key_file), "%s", s);
	TRY(esd_config_get_bool(cfg, "job", "insecure", false, &j->insecure));
	TRY(esd_config_get_u64(cfg, "ps", "shards", 1, 1, ESD_JOB_MAX_SHARDS, &u));
	j->shards = (uint32_t)u;
	esd_config_get_str(cfg, "ps", "addrs", NULL, &s);
	if (s) {
		int cnt = job_split(s, j->addrs, ESD_JOB_MAX_SHARDS);
		if (cnt != (int)j->shards)
			rc = bad_list(cfg, "ps", "addrs", "expected one address per shard");
	}
	if (job_backend_from_config(cfg, j))
		rc = -EINVAL;
	esd_config_get_str(cfg, "ps", "checkpoint_dir", "", &s);
	snprintf(j->checkpoint_dir, sizeof(j->checkpoint_dir), "%s", s);
	esd_config_get_str(cfg, "ps", "warm_start", "", &s);
	snprintf(j->warm_start, sizeof(j->warm_start), "%s", s);
	esd_config_get_str(cfg, "workers", "checkpoint_dir", "", &s);
	snprintf(j->node_ckpt_dir, sizeof(j->node_ckpt_dir), "%s", s);
	TRY(esd_config_get_u64(cfg, "ps", "barrier_timeout", 60, 1, 86400, &j->barrier_timeout_s));
	TRY(esd_config_get_bool(cfg, "job", "restart_trainers", false, &j->restart_trainers));
	TRY(esd_config_get_bool(cfg, "job", "force_plan", false, &j->force_plan));
	TRY(esd_config_get_bool(cfg, "job", "restart_shards", false, &j->restart_shards));
	TRY(esd_config_get_u64(cfg, "job", "restart_wait", 60, 1, 86400, &j->restart_wait_s));
	TRY(esd_config_get_u64(cfg, "job", "heartbeat_ms", 500, 10, 60000, &j->heartbeat_ms));
	TRY(esd_config_get_u64(cfg, "job", "peer_timeout_ms", 3000, 100, 600000,
			       &j->peer_timeout_ms));
	if (j->peer_timeout_ms < 2 * j->heartbeat_ms) {
		ESD_ERR("job", "job.peer_timeout_ms (%llu) must be at least twice job.heartbeat_ms "
			       "(%llu): a peer would be declared dead between two heartbeats",
			(unsigned long long)j->peer_timeout_ms, (unsigned long long)j->heartbeat_ms);
		rc = -EINVAL;
	}
	TRY(esd_config_get_u64(cfg, "ps", "checkpoint_every", 0, 0, UINT64_MAX / 2,
			       &j->checkpoint_every));
	TRY(esd_config_get_double(cfg, "workers", "refit_threshold", 0.05, 0, 1,
				  &j->refit_threshold));
	if (!rc)
		rc = link_aware_split(cfg, j, preset); /* quality: workers.split */
#undef TRY
	j->token = esd_job_digest(j);
	return rc;
}

uint64_t esd_job_row_bytes(const struct esd_job *j)
{
	/* key + clock + value + optimizer state */
	return 16 + (uint64_t)j->dim * 4 * (1 + esd_optimizer_state_floats(j->optim.opt));
}

uint64_t esd_job_row_cost_ns(const struct esd_job *j, uint32_t w, uint64_t bytes)
{
	uint64_t r = j->rate_bps[w];
	if (!r)
		return 1;
	unsigned __int128 bits = (unsigned __int128)bytes * 8 * 1000000000u;
	return (uint64_t)((bits + r - 1) / r);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * UINT64_C(0x100000001b3);
	return h;
}

uint64_t esd_job_digest(const struct esd_job *j)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	h = fnv(h, &j->seed, sizeof(j->seed));
	h = fnv(h, &j->n, sizeof(j->n));
	h = fnv(h, j->batch, sizeof(j->batch[0]) * j->n);
	h = fnv(h, j->rate_bps, sizeof(j->rate_bps[0]) * j->n);
	h = fnv(h, &j->dim, sizeof(j->dim));
	h = fnv(h, &j->hidden, sizeof(j->hidden));
	h = fnv(h, &j->dense, sizeof(j->dense));
	h = fnv(h, &j->optim, sizeof(j->optim));
	h = fnv(h, &j->cache_rows, sizeof(j->cache_rows));
	h = fnv(h, &j->cache_ratio, sizeof(j->cache_ratio));
	h = fnv(h, &j->policy, sizeof(j->policy));
	h = fnv(h, j->method, strlen(j->method));
	h = fnv(h, &j->alpha, sizeof(j->alpha));
	h = fnv(h, &j->sync, sizeof(j->sync));
	h = fnv(h, &j->het, sizeof(j->het));
	h = fnv(h, &j->staleness, sizeof(j->staleness));
	if (j->matrix != ESD_MATRIX_PAPER) /* quality; the default keeps old digests */
		h = fnv(h, &j->matrix, sizeof(j->matrix));
	if (j->local_search) /* quality */
		h = fnv(h, &j->local_search, sizeof(j->local_search));
	if (j->ls_ref_keys) /* the default's swaps scaled by keys per sample */
		h = fnv(h, &j->ls_ref_keys, sizeof(j->ls_ref_keys));
	if (j->split_fit) /* every node reports what shard 0 fits */
		h = fnv(h, &j->split_fit, sizeof(j->split_fit));
	h = fnv(h, &j->shards, sizeof(j->shards));
	return h;
}

int esd_job_key_check(const struct esd_job *j, const char *who)
{
	if (j->key_file[0]) {
		if (j->insecure)
			ESD_WARN("job", "%s: job.insecure = yes is moot: the job has a key (job.key "
				 "= %s) and its links use it", who, j->key_file);
		return 0;
	}
	if (!j->insecure) {
		ESD_ERR("job", "%s: the job has no key: set job.key to a key file (esdctl keygen "
			"FILE, copied to every host), or job.insecure = yes to run it "
			"without one (anyone who reaches its ports can join it)", who);
		return -EPERM;
	}
	ESD_WARN("job", "%s: INSECURE job (job.insecure = yes): no job key; its links are not "
		 "authenticated and anyone who reaches its ports can join it, read and "
		 "overwrite rows", who);
	return 0;
}

void esd_job_bind_stream(struct esd_job *j, uint64_t stream_digest)
{
	j->stream_digest = stream_digest;
	j->token = fnv(j->token, &stream_digest, sizeof(stream_digest));
}

uint32_t esd_shard_of(esd_key_t key, uint32_t nshards)
{
	return nshards <= 1 ? 0 : (uint32_t)(esd_splitmix64(key ^ UINT64_C(0x5eed5a4d)) % nshards);
}
