/*
 * The replay itself: per mechanism, fresh snapshots sized as esdd sizes
 * its cache, the stream read in global batches exactly as esdd's
 * dispatcher thread reads it (wrapping at the end: epochs; lookahead hints
 * from the next batch), one esd_dispatcher_step per iteration, and the
 * consequence judged by esd_iter_time_compute. Link-aware sizes ("auto")
 * are picked by probing a few size models on the first iterations.
 */
#include "replay.h"

#include <esd/clock.h>
#include <esd/config.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* workers.split = fit: the sizes to start from, as every process of the
 * runtime takes them once it knows its cache (esd_job_fit_prior). 0 or -1. */
static int fit_prior(struct replay_env *env)
{
	struct esd_job *j = &env->job;
	uint64_t maxb = 0;
	for (uint32_t w = 0; w < j->n; w++)
		maxb = j->batch[w] > maxb ? j->batch[w] : maxb;
	uint64_t rows =
	    j->cache_rows ? j->cache_rows : (uint64_t)(j->cache_ratio * (double)env->total_rows);
	if (rows < maxb * env->width)
		rows = maxb * env->width;
	j->derived.max_batch = esd_job_max_batch(rows, env->nrep, env->width);
	if (esd_job_fit_prior(j, env->width)) {
		fprintf(stderr, "esd-replay: workers.split = fit: no sizes to start from (%u keys "
		        "per sample)\n", env->width);
		return -1;
	}
	return 0;
}

int replay_env_load(struct replay_env *env, const char *config, const char *const *sets, int nsets,
                    uint64_t iters)
{
	struct esd_config *cfg = NULL;
	struct esd_ds_reader *dr = NULL;
	int rc = -1;
	memset(env, 0, sizeof(*env));
	env->config = config;
	if (esd_config_create(&cfg))
		return -1;
	if (esd_config_load(cfg, config))
		goto out; /* the loader names file and line */
	for (int i = 0; i < nsets; i++)
		if (esd_config_set(cfg, sets[i]))
			goto out;
	if (esd_config_check_keys(cfg, esd_job_keys) || esd_job_from_config(cfg, &env->job))
		goto out;
	if (!env->job.stream[0]) {
		fprintf(stderr, "esd-replay: %s sets no data.stream\n", config);
		goto out;
	}
	snprintf(env->stream, sizeof(env->stream), "%s", env->job.stream);
	if (env->job.replicate[0]) {
		uint64_t nrep = 0;
		if (esd_ds_hot_load(env->job.replicate, &env->rep, &nrep)) {
			fprintf(stderr, "esd-replay: dispatch.replicate: %s\n",
			        esd_ds_last_error());
			goto out;
		}
		env->nrep = (uint32_t)nrep;
	}
	if (esd_ds_open(env->stream, &dr)) {
		fprintf(stderr, "esd-replay: cannot open data.stream %s: %s\n", env->stream,
		        esd_ds_last_error());
		goto out;
	}
	const struct esd_ds_info *di = esd_ds_reader_info(dr);
	env->tables = di->ntables;
	env->width = esd_ds_keys_per_sample(di);
	for (uint32_t t = 0; t < di->ntables; t++)
		env->total_rows += di->rows[t];
	env->iters = iters ? iters : env->job.iterations;
	int64_t tmin = INT64_MAX;
	for (uint32_t w = 0; w < env->job.n; w++) {
		env->T[w] =
		    (int64_t)esd_job_row_cost_ns(&env->job, w, esd_job_row_bytes(&env->job));
		tmin = env->T[w] < tmin ? env->T[w] : tmin;
	}
	for (uint32_t w = 0; w < env->job.n; w++)
		env->fast[w] = env->T[w] < 2 * tmin;
	env->ntables = esd_job_dispatch_row_bytes(&env->job, env->row_bytes);
	rc = fit_prior(env);
out:
	esd_ds_close(dr);
	esd_config_free(cfg);
	return rc;
}

void replay_env_free(struct replay_env *env)
{
	free(env->rep);
	env->rep = NULL;
}

int replay_mech_parse(const struct replay_env *env, const char *spec, struct replay_mech *m)
{
	char buf[64], *at, *plus;
	const struct esd_job *j = &env->job;
	memset(m, 0, sizeof(*m));
	if (strlen(spec) >= sizeof(buf) || !*spec)
		return -EINVAL;
	snprintf(m->name, sizeof(m->name), "%s", spec);
	snprintf(buf, sizeof(buf), "%s", !strcmp(spec, "esd+") ? "opt+shared@auto" : spec);
	m->sync = j->sync;
	m->matrix = ESD_MATRIX_PAPER;
	m->alpha = j->alpha;
	m->sizes = SIZES_JOB;
	if ((at = strchr(buf, '@'))) {
		*at++ = '\0';
		if (!strcmp(at, "job")) {
			m->sizes = SIZES_JOB;
		} else if (!strcmp(at, "equal")) {
			m->sizes = SIZES_EQUAL;
		} else if (!strcmp(at, "auto")) {
			m->sizes = SIZES_AUTO;
		} else if (!strcmp(at, "same")) {
			m->sizes = SIZES_SAME;
		} else {
			m->sizes = SIZES_LIST;
			uint32_t i = 0;
			for (char *s = NULL, *t = strtok_r(at, "/", &s); t;
			     t = strtok_r(NULL, "/", &s)) {
				char *e;
				unsigned long v = strtoul(t, &e, 10);
				if (*e || i == j->n || v == 0 || v > (1u << 20))
					return -EINVAL;
				m->cap[i++] = (uint32_t)v;
			}
			if (i != j->n)
				return -EINVAL;
		}
	}
	int has_matrix = 0, has_ls = 0;
	if ((plus = strchr(buf, '+'))) {
		*plus++ = '\0';
		for (char *sv = NULL, *t = strtok_r(plus, "+", &sv); t;
		     t = strtok_r(NULL, "+", &sv)) {
			if (!strcmp(t, "shared")) {
				m->matrix = ESD_MATRIX_SHARED;
				has_matrix = 1;
			} else if (!strcmp(t, "padded")) {
				m->padded = 1;
			} else if (!strncmp(t, "ls", 2) && (t[2] == '\0' || t[2] == ':')) {
				char *e;
				m->ls_evals = t[2] ? strtoull(t + 3, &e, 10) : 4096;
				if (t[2] && (*e || !m->ls_evals))
					return -EINVAL;
				has_ls = 1;
			} else {
				return -EINVAL;
			}
		}
	}
	if (!strcmp(buf, "job")) {
		m->is_job = 1;
		if (esd_method_parse(j->method, &m->method))
			return -EINVAL;
		if (!has_matrix)
			m->matrix = j->matrix;
		if (!has_ls)
			m->ls_evals = j->local_search;
		return 0;
	}
	if (!strncmp(buf, "hybrid:", 7)) {
		char *e;
		m->alpha = strtod(buf + 7, &e);
		if (*e || !(m->alpha >= 0 && m->alpha <= 1))
			return -EINVAL;
		buf[6] = '\0';
	}
	if (esd_method_parse(buf, &m->method))
		return -EINVAL;
	if (m->method == ESD_METHOD_VANILLA)
		m->sync = ESD_SYNC_FULL_SET; /* vanilla as published */
	return 0;
}

struct stream {
	struct esd_ds_reader *rd;
	uint64_t k;
	uint32_t tables, width; /* width: most keys per sample (bags) */
	esd_key_t *keys[2];     /* [k * width], bag by bag */
	uint32_t *bag_off;      /* [k * tables + 1] */
	uint32_t *off[2];       /* [k + 1]: each sample's first key */
};

static int read_batch(struct stream *s, int b)
{
	int rc = esd_ds_read_wrap(s->rd, s->k, NULL, NULL, s->keys[b], s->k * s->width, s->bag_off);
	if (rc) {
		fprintf(stderr, "esd-replay: reading the stream: %s\n", esd_ds_last_error());
		return rc;
	}
	for (uint64_t i = 0; i <= s->k; i++)
		s->off[b][i] = s->bag_off[i * s->tables];
	return 0;
}

/* CPU time of this thread: the decision's cost on one core, unlike the
 * wall-clock phases, unaffected by other processes taking the core. */
static int64_t cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* workers.split = fit as the runtime does it (the job mechanism): each
 * worker's window of samples, rows and compute (the job's
 * compute_ns_per_sample: what the trainers emulate) goes to the same
 * fitter shard 0 runs; a switch decided on the window ending at e is in
 * effect from e + ESD_SIZE_FIT_LAG. */
struct online_fit {
	struct esd_size_fitter fitter;
	struct esd_size_obs obs[ESD_MAX_WORKERS];
	uint64_t at; /* iteration the pending sizes take effect (0: none) */
	uint32_t next[ESD_MAX_WORKERS];
	struct esd_size_model model, next_model;
};

static void fit_observe(const struct replay_env *env, struct online_fit *f, uint64_t it,
                        const struct esd_conseq *cq, const struct esd_iter_time *t,
                        const uint32_t *cur)
{
	const struct esd_job *j = &env->job;
	const uint32_t n = j->n;
	if (it <= ESD_SIZE_FIT_SKIP)
		return;
	for (uint32_t w = 0; w < n; w++) {
		uint64_t rows = 0;
		for (int q = 0; q < ESD_CQ_KINDS; q++)
			rows += cq->off[q][w + 1] - cq->off[q][w];
		f->obs[w].iters++;
		f->obs[w].samples += t->m[w];
		f->obs[w].rows += rows;
		f->obs[w].compute_ns += j->compute_ns_per_sample * t->m[w];
	}
	if (!esd_size_fit_window_end(it))
		return;
	/* the runtime's schedule: fitted at barrier it + 1, in effect at it + 4 */
	if (f->obs[0].iters == ESD_SIZE_FIT_WINDOW && !f->at && it + ESD_SIZE_FIT_LAG <= env->iters &&
	    esd_size_fitter_window(&f->fitter, it, env->T, cur, &f->model, f->obs, &f->next_model,
	                           f->next) == 1)
		f->at = it + ESD_SIZE_FIT_LAG;
	memset(f->obs, 0, sizeof(f->obs));
}

/* Rows every worker moved in one iteration, per kind: the keys that are in
 * all n workers' lists of kind q (each ascending, a key at most once),
 * counted in r->alln_rows[q] with their cost (the sum of T_j) in
 * r->alln_cost[q]. Such a key is in the shortest list: each of its keys is
 * looked up in the others. */
static void count_all_workers(const struct esd_conseq *cq, uint32_t n, const int64_t *T,
                              struct replay_result *r)
{
	int64_t all_T = 0;
	for (uint32_t w = 0; w < n; w++)
		all_T += T[w];
	for (int q = 0; q < ESD_CQ_KINDS; q++) {
		const enum esd_cq_kind kind = (enum esd_cq_kind)q;
		uint32_t s = 0;
		for (uint32_t w = 1; w < n; w++)
			if (esd_conseq_count(cq, kind, w) < esd_conseq_count(cq, kind, s))
				s = w;
		const esd_key_t *keys = esd_conseq_keys(cq, kind, s);
		for (uint32_t i = 0; i < esd_conseq_count(cq, kind, s); i++) {
			uint32_t w = 0;
			while (w < n && (w == s || esd_conseq_has(cq, kind, w, keys[i])))
				w++;
			if (w == n) {
				r->alln_rows[q]++;
				r->alln_cost[q] += all_T;
			}
		}
	}
}

/* Bytes of the rows a decision moved (each its table's, model.dims: value
 * and optimizer state, a gradient its value alone) into r's wire_bytes,
 * and their time on each worker's link into its wire_ns. */
static void count_wire(const struct esd_job *j, const struct esd_conseq *cq, uint32_t n,
		       struct replay_result *r)
{
	const uint64_t per = 1 + esd_optimizer_state_floats(j->optim.opt);
	for (uint32_t w = 0; w < n; w++) {
		uint64_t b = 0;
		for (int q = 0; q < ESD_CQ_KINDS; q++) {
			const uint64_t floats = q == ESD_CQ_UPDATE_GRAD ? 1 : per;
			for (uint32_t i = cq->off[q][w]; i < cq->off[q][w + 1]; i++)
				b += 16 + 4 * floats *
					     esd_job_table_dim(j, esd_key_table(cq->keys[q][i]));
		}
		r->wire_bytes += b;
		r->wire_ns += (int64_t)esd_job_row_cost_ns(j, w, b);
	}
}

/* One replay of 'iters' iterations with capacities cap (NULL: equal).
 * Long: one replay's loop over iterations (batch, decision, consequence, costs, critical
 * path) sharing its accumulators. */
static int run_caps(const struct replay_env *env, const struct replay_mech *m, const uint32_t *cap,
                    uint64_t iters, struct replay_result *r)
{
	const struct esd_job *j = &env->job;
	const uint32_t n = j->n;
	struct stream s = {.tables = env->tables, .width = env->width};
	struct esd_snapset *ss = NULL;
	struct esd_dispatcher *d = NULL;
	struct esd_conseq *cq = NULL;
	uint32_t *assign = NULL;
	double *dec = NULL, *dcpu = NULL;
	uint32_t ccap[ESD_MAX_WORKERS], caps[ESD_MAX_WORKERS];
	struct online_fit fit = {.model = {.compute_ns = env->job.derived.size_compute_ns,
	                                   .fixed_rows = env->job.derived.size_fixed_rows,
	                                   .rows_per_sample = env->job.derived.size_rows_per_sample}};
	const int fitting = m->is_job && env->job.derived.split_fit;
	int rc;

	memset(r, 0, sizeof(*r));
	snprintf(r->name, sizeof(r->name), "%s", m->name);
	r->n = n;
	uint64_t k = 0, maxb = 0;
	for (uint32_t w = 0; w < n; w++) {
		r->cap[w] = cap[w];
		k += cap[w];
		maxb = cap[w] > maxb ? cap[w] : maxb;
	}
	/* cache rows exactly as esdd resolves them */
	uint64_t rows =
	    j->cache_rows ? j->cache_rows : (uint64_t)(j->cache_ratio * (double)env->total_rows);
	if (rows < maxb * env->width)
		rows = maxb * env->width;
	const uint32_t nrep = m->is_job ? env->nrep : 0;
	if (nrep + maxb * env->width > rows) {
		fprintf(stderr,
		        "esd-replay: %s: dispatch.replicate: %u hot rows plus one micro-batch's "
		        "%llu keys exceed the cache's %llu rows\n",
		        m->name, nrep, (unsigned long long)(maxb * env->width),
		        (unsigned long long)rows);
		return -ENOSPC;
	}
	r->cache_rows = rows;
	memcpy(caps, cap, n * sizeof(uint32_t));
	esd_size_fitter_init(&fit.fitter, n, (uint32_t)k, esd_job_max_batch(rows, nrep, env->width),
	                     j->refit_threshold);
	for (uint32_t w = 0; w < n; w++)
		ccap[w] = (uint32_t)rows;
	s.k = k;
	if ((rc = esd_ds_open(env->stream, &s.rd)))
		goto out;
	rc = -ENOMEM;
	for (int b = 0; b < 2; b++) {
		s.keys[b] = calloc(k * s.width, sizeof(esd_key_t));
		s.off[b] = calloc(k + 1, sizeof(uint32_t));
	}
	s.bag_off = calloc(k * s.tables + 1, sizeof(uint32_t));
	assign = calloc(k, sizeof(uint32_t));
	dec = calloc(iters ? iters : 1, sizeof(double));
	dcpu = calloc(iters ? iters : 1, sizeof(double));
	if (!s.keys[0] || !s.keys[1] || !s.off[0] || !s.off[1] || !s.bag_off || !assign || !dec ||
	    !dcpu)
		goto out;
	if ((rc = esd_snapset_create(n, ccap, j->policy, &ss)) || (rc = esd_conseq_create(&cq)))
		goto out;
	struct esd_dispatcher_config dc = {
	    .n = n,
	    .cap = caps,
	    .T = env->T,
	    .seed = j->seed,
	    .sync = m->sync,
	    .compare = m->is_job ? j->compare : 0,
	    .method = m->method,
	    .matrix = m->matrix,
	    .ls_evals = m->ls_evals,
	    .ls_ref_keys = m->is_job ? j->derived.ls_ref_keys : 0,
	    .replicated = m->is_job ? env->rep : NULL,
	    .nreplicated = nrep,
	    .hybrid = {.alpha = m->alpha, .backend = ESD_EXACT_SSP, .heu_order = ESD_HEU_ROW_ORDER},
	    /* model.dims: a row costs its table's bytes, as on the nodes */
	    .row_bytes = env->ntables && !m->padded ? env->row_bytes : NULL,
	    .ntables = m->padded ? 0 : env->ntables,
	    .row_bytes_full = (uint32_t)esd_job_row_bytes(j),
	};
	if ((rc = esd_dispatcher_create(&dc, ss, &d)))
		goto out;
	int cur = 0;
	const int lookahead = j->policy == ESD_POLICY_LOOKAHEAD;
	if ((rc = read_batch(&s, cur)))
		goto out;
	for (uint64_t it = 1; it <= iters; it++) {
		if ((lookahead || it < iters) && (rc = read_batch(&s, cur ^ 1)))
			goto out;
		if (lookahead)
			for (uint32_t w = 0; w < n; w++)
				if ((rc = esd_cmeta_lookahead(esd_snapset_cmeta(ss, w),
				                              s.keys[cur ^ 1], s.off[cur ^ 1][k],
				                              it + 1)))
					goto out;
		if (fitting && fit.at == it) { /* every node re-splits here */
			memcpy(caps, fit.next, n * sizeof(uint32_t));
			fit.model = fit.next_model;
			esd_size_fitter_changed(&fit.fitter, it, 0);
			fit.at = 0;
			esd_dispatcher_free(d);
			d = NULL;
			if ((rc = esd_dispatcher_create(&dc, ss, &d)))
				goto out;
		}
		struct esd_batch b = {.k = (uint32_t)k, .off = s.off[cur], .keys = s.keys[cur]};
		const int64_t c0 = cpu_ns();
		if ((rc = esd_dispatcher_step(d, &b, assign, cq)))
			goto out;
		dcpu[it - 1] = (double)(cpu_ns() - c0) / 1e6;
		struct esd_iter_time t;
		if ((rc = esd_iter_time_compute(cq, assign, (uint32_t)k,
		                                (int64_t)j->compute_ns_per_sample, &t)))
			goto out;
		r->crit_ns += t.crit_ns;
		int64_t cx = 0;
		for (uint32_t w = 0; w < n; w++) {
			cx = t.xfer_ns[w] > cx ? t.xfer_ns[w] : cx;
			r->class_cost[env->fast[w] ? 0 : 1] += t.xfer_ns[w];
		}
		r->crit_xfer_ns += cx;
		r->true_cost += cq->total_cost;
		for (int q = 0; q < ESD_CQ_KINDS; q++) {
			r->kind_cost[q] += cq->cost[q];
			r->kind_count[q] += cq->off[q][n];
		}
		r->hits += cq->hits;
		count_wire(j, cq, n, r);
		if (m->ls_evals) {
			const struct esd_ls_stats *ls = &esd_dispatcher_counters(d)->ls;
			r->ls_swaps += ls->swaps;
			r->ls_gain += ls->start_cost - ls->end_cost;
		}
		r->needs += cq->hits + cq->off[ESD_CQ_MISS_PULL][n];
		dec[it - 1] = esd_ns_to_ms(esd_dispatcher_counters(d)->last.total);
		if (fitting)
			fit_observe(env, &fit, it, cq, &t, caps);
		count_all_workers(cq, n, env->T, r);
		cur ^= 1;
	}
	r->iters = iters;
	if (fitting) { /* the sizes and model the run ended with */
		memcpy(r->cap, caps, n * sizeof(uint32_t));
		r->size_model[0] = fit.model.fixed_rows;
		r->size_model[1] = fit.model.rows_per_sample;
		r->refits = fit.fitter.refits;
	}
	if (iters) {
		double sum = 0;
		for (uint64_t i = 0; i < iters; i++)
			sum += dec[i];
		qsort(dec, iters, sizeof(double), cmp_double);
		r->decision_ms_mean = sum / (double)iters;
		r->decision_ms_p50 = dec[iters / 2];
		r->decision_ms_max = dec[iters - 1];
		qsort(dcpu, iters, sizeof(double), cmp_double);
		r->decision_cpu_ms_p50 = dcpu[iters / 2];
	}
	rc = 0;
out:
	esd_dispatcher_free(d);
	esd_snapset_free(ss);
	esd_conseq_free(cq);
	esd_ds_close(s.rd);
	for (int b = 0; b < 2; b++) {
		free(s.keys[b]);
		free(s.off[b]);
	}
	free(s.bag_off);
	free(assign);
	free(dec);
	free(dcpu);
	return rc;
}

/* Link-aware sizes: probe the size model on the first iterations. The
 * rows a worker moves per iteration, X (measured with equal sizes), are
 * split into a part fixed per worker (share phi) and a part proportional
 * to its samples; each phi gives sizes (esd_batch_sizes_link_aware), and
 * the one with the shortest critical path over the probe wins. */
static int auto_sizes(const struct replay_env *env, const struct replay_mech *m, uint32_t *cap,
                      double model_out[2])
{
	const struct esd_job *j = &env->job;
	const uint32_t n = j->n;
	uint32_t eq[ESD_MAX_WORKERS];
	uint64_t k = j->derived.global_batch;
	for (uint32_t w = 0; w < n; w++)
		eq[w] = (uint32_t)(k / n + (w < k % n));
	uint64_t probe = env->iters < 24 ? env->iters : 24;
	if (probe == 0)
		probe = 1;
	struct replay_result r;
	int rc = run_caps(env, m, eq, probe, &r);
	if (rc)
		return rc;
	double rows = 0;
	for (int q = 0; q < ESD_CQ_KINDS; q++)
		rows += (double)r.kind_count[q];
	rows /= (double)probe * n; /* per worker and iteration */
	const double mbar = (double)k / n;
	static const double phis[] = {0.0, 0.2, 0.4, 0.6, 0.8};
	int64_t best = INT64_MAX;
	for (size_t p = 0; p < sizeof(phis) / sizeof(phis[0]); p++) {
		struct esd_size_model sm = {.compute_ns = (double)j->compute_ns_per_sample,
		                            .fixed_rows = phis[p] * rows,
		                            .rows_per_sample = (1 - phis[p]) * rows / mbar};
		uint32_t c[ESD_MAX_WORKERS];
		if ((rc = esd_batch_sizes_link_aware(n, (uint32_t)k, env->T, &sm, 1, c)))
			return rc;
		if ((rc = run_caps(env, m, c, probe, &r)))
			return rc;
		if (r.crit_ns < best) {
			best = r.crit_ns;
			memcpy(cap, c, n * sizeof(uint32_t));
			model_out[0] = sm.fixed_rows;
			model_out[1] = sm.rows_per_sample;
		}
	}
	return 0;
}

int replay_run(const struct replay_env *env, const struct replay_mech *m, struct replay_result *r)
{
	const struct esd_job *j = &env->job;
	uint32_t cap[ESD_MAX_WORKERS];
	double model[2] = {0, 0};
	int rc;
	switch (m->sizes) {
	case SIZES_JOB:
		memcpy(cap, j->batch, j->n * sizeof(uint32_t));
		break;
	case SIZES_EQUAL:
		for (uint32_t w = 0; w < j->n; w++)
			cap[w] = (uint32_t)(j->derived.global_batch / j->n + (w < j->derived.global_batch % j->n));
		break;
	case SIZES_LIST:
	case SIZES_SAME: /* resolved to a list by the caller */
		memcpy(cap, m->cap, j->n * sizeof(uint32_t));
		break;
	case SIZES_AUTO:
		if ((rc = auto_sizes(env, m, cap, model)))
			return rc;
		break;
	}
	rc = run_caps(env, m, cap, env->iters, r);
	if (!(m->is_job && j->derived.split_fit)) {
		r->size_model[0] = model[0];
		r->size_model[1] = model[1];
	}
	if (m->is_job) {
		char ls[32] = "";
		if (m->ls_evals)
			snprintf(ls, sizeof(ls), "+ls:%llu", (unsigned long long)m->ls_evals);
		snprintf(r->job, sizeof(r->job), "%s%s%s, %s sizes%s", esd_method_name(m->method),
		         m->matrix == ESD_MATRIX_SHARED ? "+shared" : "", ls,
		         j->derived.split_fit ? "fitted online" : j->derived.split_link_aware ? "link-aware" : "the job's",
		         j->derived.split_fit ? (r->refits ? "" : " (no refit)") : "");
	}
	return rc;
}
