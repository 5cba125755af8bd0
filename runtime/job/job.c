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

int esd_job_split(const char *s, char items[][ESD_JOB_ADDR_LEN], int max)
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
	char name[64];
	snprintf(name, sizeof(name), "%s.%s", sec, key);
	return esd_job_setting_bad(cfg, esd_job_setting(name), why);
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
	int cnt = esd_job_split(s, items, ESD_MAX_WORKERS);
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
 * the cold prior each process applies once it knows the stream
 * (esd_job_fit_prior; or the size_model given) and takes the model shard 0 fits
 * to the job's own iterations (live workers.size_model changes). Without
 * a workers.split, a job of the project's default method whose
 * workers.batch is one value fits its sizes. */
static int read_split(const struct esd_config *cfg, struct esd_job *j, bool preset)
{
	const char *batch, *given, *s;
	esd_config_get_str(cfg, "workers", "batch", NULL, &batch);
	const bool one_size = !batch || !strchr(batch, ',');
	const union esd_setting_value def = {.s = preset && one_size ? "fit" : "equal"};
	if (esd_job_setting_read(cfg, JOB_SETTING(workers, split), &def, j))
		return -EINVAL;
	if (j->split == ESD_JOB_SPLIT_EQUAL)
		return 0;
	char items[2][ESD_JOB_ADDR_LEN];
	esd_config_get_str(cfg, "workers", "size_model", NULL, &given);
	/* fit: equal sizes until the process applies the prior
	 * (esd_job_fit_prior), unless a model is given */
	s = given ? given : j->split == ESD_JOB_SPLIT_FIT ? "0,0" : "0,1";
	j->derived.size_prior_due = !given && j->split == ESD_JOB_SPLIT_FIT;
	double *v = j->size_model;
	if (esd_job_split(s, items, 2) != 2 || esd_parse_double(items[0], &v[0]) ||
	    esd_parse_double(items[1], &v[1]) || !(v[0] >= 0) || !(v[1] >= 0)) {
		ESD_ERR("config", "workers.size_model = '%s': expected FIXED_ROWS,ROWS_PER_SAMPLE "
			"(two numbers >= 0)", s);
		return -EINVAL;
	}
	return 0;
}

/* The split's derived values, and the sizes it makes. */
static int derive_split(struct esd_job *j)
{
	struct esd_job_derived *d = &j->derived;
	if (j->split == ESD_JOB_SPLIT_EQUAL)
		return 0;
	const bool fit = j->split == ESD_JOB_SPLIT_FIT;
	if (d->global_batch > UINT32_MAX || d->global_batch < j->n) {
		ESD_ERR("config", "workers.split = %s: global batch %llu below one sample "
			"per worker", fit ? "fit" : "link-aware", (unsigned long long)d->global_batch);
		return -EINVAL;
	}
	d->split_link_aware = true;
	d->split_fit = fit;
	d->size_compute_ns = (double)j->compute_ns_per_sample;
	d->size_fixed_rows = j->size_model[0];
	d->size_rows_per_sample = j->size_model[1];
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
	if (!s || esd_job_split(s, items, 3) != 3)
		return -EINVAL;
	for (int i = 0; i < 3; i++)
		if (esd_parse_double(items[i], &v[i]) || !(v[i] >= 0) || !isfinite(v[i]))
			return -EINVAL;
	return 0;
}

int esd_job_resplit(struct esd_job *j)
{
	if (!j->derived.split_link_aware)
		return 0;
	int64_t T[ESD_MAX_WORKERS];
	for (uint32_t w = 0; w < j->n; w++)
		T[w] = (int64_t)esd_job_row_cost_ns(j, w, esd_job_row_bytes(j));
	struct esd_size_model m = {.compute_ns = j->derived.size_compute_ns,
				   .fixed_rows = j->derived.size_fixed_rows,
				   .rows_per_sample = j->derived.size_rows_per_sample};
	if (j->derived.max_batch)
		return esd_batch_sizes_link_aware_capped(j->n, (uint32_t)j->derived.global_batch, T, &m, 1,
							 j->derived.max_batch, j->batch);
	return esd_batch_sizes_link_aware(j->n, (uint32_t)j->derived.global_batch, T, &m, 1, j->batch);
}

int esd_job_fit_prior(struct esd_job *j, uint32_t keys_per_sample)
{
	if (!j->derived.split_fit || !j->derived.size_prior_due || j->derived.size_prior)
		return 0;
	if (keys_per_sample == 0)
		return -EINVAL;
	int64_t T[ESD_MAX_WORKERS];
	for (uint32_t w = 0; w < j->n; w++)
		T[w] = (int64_t)esd_job_row_cost_ns(j, w, esd_job_row_bytes(j));
	struct esd_size_model m;
	int rc = esd_size_prior(j->n, (uint32_t)j->derived.global_batch, T, j->derived.size_compute_ns,
				keys_per_sample, j->derived.max_batch, j->refit_threshold, &m);
	if (rc)
		return rc;
	j->derived.size_fixed_rows = m.fixed_rows;
	j->derived.size_rows_per_sample = m.rows_per_sample;
	j->derived.size_prior = true;
	return esd_job_resplit(j);
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
	int cnt = esd_job_split(s, items, ESD_MAX_WORKERS);
	if (cnt != 1 && cnt != (int)n)
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++)
		if (esd_parse_rate(items[cnt == 1 ? 0 : i], &out[i]))
			return -EINVAL;
	return 0;
}

/* workers.batch, workers.rates and workers.link_rates: one value or one
 * per worker. */
static int read_worker_lists(const struct esd_config *cfg, struct esd_job *j)
{
	uint64_t list[ESD_MAX_WORKERS], sum = 0;
	if (per_worker(cfg, "batch", j->n, false, 128, list))
		return -EINVAL;
	for (uint32_t i = 0; i < j->n; i++) {
		if (list[i] > (1u << 20))
			return bad_list(cfg, "workers", "batch", "batch above 2^20");
		j->batch[i] = (uint32_t)list[i];
		sum += list[i];
	}
	if (sum == 0)
		return bad_list(cfg, "workers", "batch", "global batch is 0");
	if (per_worker(cfg, "rates", j->n, true, 0, j->rate_bps))
		return -EINVAL;
	/* the links' own rates, when the model's are not theirs */
	if (!esd_config_has(cfg, "workers", "link_rates")) {
		memcpy(j->link_bps, j->rate_bps, sizeof(j->link_bps));
		return 0;
	}
	return per_worker(cfg, "link_rates", j->n, true, 0, j->link_bps) ? -EINVAL : 0;
}

/* model.lr, eps, beta1 and beta2: the optimizer's defaults unless set. */
static int read_optim_params(const struct esd_config *cfg, struct esd_job *j)
{
	static const enum job_setting_id ids[] = {JOB_SET_model_lr, JOB_SET_model_eps,
						  JOB_SET_model_beta1, JOB_SET_model_beta2};
	int rc = 0;
	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		const struct esd_setting *s = &esd_job_settings[ids[i]];
		const union esd_setting_value def = {.d = *(const float *)((char *)j + s->offset)};
		if (esd_job_setting_read(cfg, s, &def, j))
			rc = -EINVAL;
	}
	if (!rc && esd_optim_params_check(&j->optim)) {
		ESD_ERR("config", "model: optimizer hyper-parameters out of range");
		rc = -EINVAL;
	}
	return rc;
}

/* No dispatch.method: the project's default (docs/quality.md), the
 * shared-charge matrix solved exactly with local search and sizes fitted
 * online; a method named is that method as published. */
static int read_method(const struct esd_config *cfg, struct esd_job *j, bool preset)
{
	const bool wide = j->n > ESD_JOB_EXACT_MAX_WORKERS;
	union esd_setting_value def = {.s = wide ? ESD_JOB_WIDE_METHOD : ESD_JOB_DEFAULT_METHOD};
	int rc = esd_job_setting_read(cfg, JOB_SETTING(dispatch, method), &def, j);
	enum esd_method m;
	if (!rc && esd_method_parse(j->method, &m))
		rc = esd_job_setting_bad(cfg, JOB_SETTING(dispatch, method),
				     "expected vanilla, laia, heu, opt, hungarian or hybrid");
	def.s = preset ? "shared" : "paper";
	if (esd_job_setting_read(cfg, JOB_SETTING(dispatch, matrix), &def, j))
		rc = -EINVAL;
	def.u = !preset ? 0 : wide ? ESD_JOB_WIDE_SWAPS / j->n : ESD_JOB_DEFAULT_SWAPS;
	if (esd_job_setting_read(cfg, JOB_SETTING(dispatch, local_search), &def, j))
		rc = -EINVAL;
	return rc;
}

static int read_addrs(const struct esd_config *cfg, struct esd_job *j)
{
	const char *s;
	esd_config_get_str(cfg, "ps", "addrs", NULL, &s);
	if (s && esd_job_split(s, j->addrs, ESD_JOB_MAX_SHARDS) != (int)j->shards)
		return bad_list(cfg, "ps", "addrs", "expected one address per shard");
	return 0;
}

static int check_peer_timeout(const struct esd_job *j)
{
	if (j->peer_timeout_ms >= 2 * j->heartbeat_ms)
		return 0;
	ESD_ERR("job", "job.peer_timeout_ms (%llu) must be at least twice job.heartbeat_ms "
		       "(%llu): a peer would be declared dead between two heartbeats",
		(unsigned long long)j->peer_timeout_ms, (unsigned long long)j->heartbeat_ms);
	return -EINVAL;
}

/* model.dims: one dim per table (1..65536; "D*N" repeats), the largest
 * becoming model.dim; model.dim set as well must be that largest. */
static int read_dims(const struct esd_config *cfg, struct esd_job *j)
{
	const char *s;
	esd_config_get_str(cfg, "model", "dims", NULL, &s);
	if (!s)
		return 0;
	char(*items)[ESD_JOB_ADDR_LEN] = malloc(sizeof(*items) * ESD_JOB_MAX_DIMS);
	if (!items)
		return -ENOMEM;
	int n = esd_job_split(s, items, ESD_JOB_MAX_DIMS);
	int rc = n < 1 ? bad_list(cfg, "model", "dims", "expected one dim per table (at most "
							  "1024 tables)")
		       : 0;
	uint32_t max = 0;
	for (int i = 0; !rc && i < n; i++) {
		uint64_t v;
		if (esd_parse_u64(items[i], &v) || v < 1 || v > (1u << 16))
			rc = bad_list(cfg, "model", "dims", "each dim an integer in 1..65536");
		j->table_dims[i] = (uint32_t)v;
		max = v > max ? (uint32_t)v : max;
	}
	free(items);
	if (rc)
		return rc;
	if (esd_config_has(cfg, "model", "dim") && j->dim != max) {
		ESD_ERR("config", "model.dim = %u but the largest of model.dims is %u: set "
				  "model.dims alone (model.dim follows it) or make them agree",
			j->dim, max);
		return -EINVAL;
	}
	j->ntable_dims = (uint32_t)n;
	j->dim = max;
	return 0;
}

int esd_job_check_tables(const struct esd_job *j, uint32_t tables, const char *who)
{
	if (!j->ntable_dims || j->ntable_dims == tables)
		return 0;
	ESD_ERR("config", "%s: model.dims lists %u dims but the stream has %u tables: give one "
			  "dim per table",
		who, j->ntable_dims, tables);
	return -EINVAL;
}

/* The derived values, from the settings read (ok: without an error, so
 * that the split can be made). Returns 0 or -EINVAL. */
static int derive(const struct esd_config *cfg, struct esd_job *j, bool preset, bool ok)
{
	struct esd_job_derived *d = &j->derived;
	int rc = 0;
	d->global_batch = 0;
	for (uint32_t i = 0; i < j->n; i++)
		d->global_batch += j->batch[i];
	d->shape_follows_model = !esd_config_has(cfg, "workers", "link_rates") &&
				 !j->estimate_rates;
	d->ls_ref_keys = preset && !esd_config_has(cfg, "dispatch", "local_search")
				 ? ESD_JOB_LS_REF_KEYS : 0;
	d->one_decider = j->n > 1 && !j->every_node && !j->restart_shards;
	if (ok)
		rc = derive_split(j); /* quality: workers.split */
	d->token = esd_job_digest(j);
	return rc;
}

int esd_job_from_config(const struct esd_config *cfg, struct esd_job *j)
{
	const bool preset = !esd_config_has(cfg, "dispatch", "method");
	memset(j, 0, sizeof(*j));
	int rc = esd_job_settings_read(cfg, j);
	if (!rc && read_worker_lists(cfg, j))
		rc = -EINVAL;
	if (read_optim_params(cfg, j))
		rc = -EINVAL;
	if (read_method(cfg, j, preset))
		rc = -EINVAL;
	if (read_addrs(cfg, j))
		rc = -EINVAL;
	if (read_dims(cfg, j))
		rc = -EINVAL;
	if (esd_job_backend_from_config(cfg, j))
		rc = -EINVAL;
	if (check_peer_timeout(j))
		rc = -EINVAL;
	if (!rc && read_split(cfg, j, preset))
		rc = -EINVAL;
	if (derive(cfg, j, preset, !rc))
		rc = -EINVAL;
	return rc;
}

uint64_t esd_job_row_bytes(const struct esd_job *j)
{
	/* key + clock + value + optimizer state */
	return 16 + (uint64_t)j->dim * 4 * (1 + esd_optimizer_state_floats(j->optim.opt));
}

uint64_t esd_job_table_row_bytes(const struct esd_job *j, uint32_t t)
{
	return 16 + (uint64_t)esd_job_table_dim(j, t) * 4 *
			    (1 + esd_optimizer_state_floats(j->optim.opt));
}

uint32_t esd_job_dispatch_row_bytes(const struct esd_job *j, uint32_t *bytes)
{
	for (uint32_t t = 0; t < j->ntable_dims; t++)
		bytes[t] = (uint32_t)esd_job_table_row_bytes(j, t);
	return j->ntable_dims;
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
	if (j->ntable_dims) /* model.dims; without it the digest is as before */
		h = fnv(h, j->table_dims, sizeof(j->table_dims[0]) * j->ntable_dims);
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
	if (j->derived.ls_ref_keys) /* the default's swaps scaled by keys per sample */
		h = fnv(h, &j->derived.ls_ref_keys, sizeof(j->derived.ls_ref_keys));
	if (j->derived.split_fit) /* every node reports what shard 0 fits */
		h = fnv(h, &j->derived.split_fit, sizeof(j->derived.split_fit));
	h = fnv(h, &j->shards, sizeof(j->shards));
	if (j->derived.one_decider) /* every process relays or awaits the orders alike */
		h = fnv(h, &j->derived.one_decider, sizeof(j->derived.one_decider));
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
	j->derived.stream_digest = stream_digest;
	j->derived.token = fnv(j->derived.token, &stream_digest, sizeof(stream_digest));
}

uint32_t esd_shard_of(esd_key_t key, uint32_t nshards)
{
	return nshards <= 1 ? 0 : (uint32_t)(esd_splitmix64(key ^ UINT64_C(0x5eed5a4d)) % nshards);
}
