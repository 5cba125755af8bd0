/*
 * The dispatcher thread of esdd: decides iteration t+1 while t trains.
 *
 * Every node runs this on the same stream with the same settings and the
 * same snapshots (all start empty), so every node computes the same
 * decisions; the digest of each travels with the barrier. The thread
 * produces one work order per iteration for this node's worker into a
 * small ring (back-pressure: it runs at most ORDER_RING - 1 ahead).
 * The live settings are applied in disp_live.c, the boundaries' snapshots
 * kept in disp_saves.c (their shared state: disp.h).
 */
#include "disp.h"
#include "node.h"

#include <esd/clock.h>
#include <esd/err.h>
#include <esd/log.h>
#include <esd/pin.h>
#include <esd/policy.h>

#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <unistd.h>

/* The exact part of opt and hybrid on the GPU solver (dispatch.gpu), in
 * two halves so that hybrid runs Heu while the GPU solves; it answers on
 * the CPU itself without a device, below the cross-over or past the
 * deadline. */
static int gpu_submit(void *ctx, const int64_t *cost, uint32_t k, uint32_t n, const uint32_t *cap)
{
	struct disp *ds = ctx;
	return esd_gpu_submit(ds->eng.gpu, cost, k, n, cap, ds->eng.gpu_deadline_ns);
}

static int gpu_collect(void *ctx, uint32_t *assign)
{
	struct disp *ds = ctx;
	return esd_gpu_collect(ds->eng.gpu, assign);
}

/* dispatch.gpu_min_rows: the size from which the GPU answers, measured on
 * this machine (CPU against GPU round trips at n workers, up to the rows
 * the exact part gets) or as configured. */
static void gpu_crossover(struct disp *ds, const struct esd_job *j)
{
	struct esd_gpu_calibration cal;

	if (j->gpu_min_rows != ESD_JOB_GPU_MEASURE) {
		esd_gpu_set_min_rows(ds->eng.gpu, (uint32_t)j->gpu_min_rows);
		ESD_INFO("dispatch", "dispatch.gpu: the GPU from %llu rows (dispatch.gpu_min_rows)",
			 (unsigned long long)j->gpu_min_rows);
		return;
	}
	if (esd_gpu_solver_device(ds->eng.gpu))
		return;
	if (esd_gpu_calibrate(ds->eng.gpu, j->n, (uint32_t)ds->in.k, 3, &cal)) {
		ESD_WARN("dispatch", "dispatch.gpu: the cross-over could not be measured; "
			 "the exact part runs on the CPU");
		return;
	}
	if (cal.min_rows == ESD_GPU_NEVER)
		ESD_INFO("dispatch", "dispatch.gpu: the CPU was faster at every size up to %u rows "
			 "(n = %u): the exact part runs on the CPU", cal.k[cal.sizes - 1], j->n);
	else
		ESD_INFO("dispatch", "dispatch.gpu: measured cross-over %u rows (n = %u): the GPU "
			 "answers from there", cal.min_rows, j->n);
}

int node_disp_grow(void **p, size_t *cap, size_t want, size_t elem)
{
	if (want <= *cap)
		return 0;
	void *n = realloc(*p, want * elem);
	if (!n)
		return -ENOMEM;
	*p = n;
	*cap = want;
	return 0;
}

/* Read global batch into slot b (wrapping around at the end of the
 * stream: epochs): its keys bag by bag with their offsets. */
int node_disp_read_batch(struct disp *ds, int b)
{
	struct disp_input *in = &ds->in;
	const uint32_t T = ds->nd->tables;
	int rc = esd_ds_read_wrap_w(in->rd, in->k, in->labels[b],
				    ds->nd->dense ? in->dense[b] : NULL, in->keys[b],
				    in->k * ds->nd->width, in->bag_off[b], in->wts[b]);
	if (rc) {
		ESD_ERR("dispatch", "reading the stream: %s", esd_ds_last_error());
		return rc;
	}
	for (uint64_t i = 0; i <= in->k; i++)
		in->off[b][i] = in->bag_off[b][i * T];
	return 0;
}

/* Our samples of batch b in global order into o: labels, dense features,
 * keys and their bag offsets. */
int node_disp_copy_samples(struct disp *ds, struct order *o, int b)
{
	const struct disp_input *in = &ds->in;
	const uint32_t w = ds->nd->rank, T = ds->nd->tables, D = ds->nd->dense;
	uint32_t m = 0;
	size_t nk = 0;
	for (uint64_t i = 0; i < in->k; i++)
		if (in->assign[i] == w) {
			m++;
			nk += in->off[b][i + 1] - in->off[b][i];
		}
	o->labels = realloc(o->labels, (m + 1) * sizeof(float));
	o->dense = realloc(o->dense, ((size_t)m * D + 1) * sizeof(float));
	if (!o->labels || !o->dense ||
	    node_disp_grow((void **)&o->keys, &o->cap_keys, nk + 1, sizeof(esd_key_t)) ||
	    node_disp_grow((void **)&o->bag_off, &o->cap_bags, (size_t)m * T + 1,
			   sizeof(uint32_t)) ||
	    (in->wts[b] && node_disp_grow((void **)&o->wts, &o->cap_wts, nk + 1, sizeof(float))))
		return -ENOMEM;
	o->m = o->nkeys = 0;
	for (uint64_t i = 0; i < in->k; i++) {
		if (in->assign[i] != w)
			continue;
		const uint32_t *bo = in->bag_off[b] + i * T;
		o->labels[o->m] = in->labels[b][i];
		memcpy(o->dense + (size_t)o->m * D, in->dense[b] + i * D, D * sizeof(float));
		for (uint32_t t = 0; t < T; t++)
			o->bag_off[(size_t)o->m * T + t] = o->nkeys + (bo[t] - bo[0]);
		memcpy(o->keys + o->nkeys, in->keys[b] + bo[0], (bo[T] - bo[0]) * sizeof(esd_key_t));
		if (in->wts[b])
			memcpy(o->wts + o->nkeys, in->wts[b] + bo[0], (bo[T] - bo[0]) * sizeof(float));
		o->nkeys += bo[T] - bo[0];
		o->m++;
	}
	o->bag_off[(size_t)o->m * T] = o->nkeys;
	return 0;
}

static uint64_t digest_of(const uint32_t *assign, uint64_t k, uint64_t iter)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325) ^ iter;
	for (uint64_t i = 0; i < k; i++)
		h = (h ^ assign[i]) * UINT64_C(0x100000001b3);
	return h;
}

static int cmp_key(const void *a, const void *b)
{
	esd_key_t x = *(const esd_key_t *)a, y = *(const esd_key_t *)b;
	return (x > y) - (x < y);
}

void node_disp_predict_bytes(const struct esd_job *j, const struct esd_conseq *cq, uint32_t w,
			     uint64_t bytes[ESD_XFER_NKINDS])
{
	const uint64_t per = 1 + esd_optimizer_state_floats(j->optim.opt);
	memset(bytes, 0, ESD_XFER_NKINDS * sizeof(uint64_t));
	for (int kd = 0; kd < ESD_CQ_KINDS; kd++) {
		const esd_key_t *k = esd_conseq_keys(cq, (enum esd_cq_kind)kd, w);
		const uint64_t floats = kd == ESD_CQ_UPDATE_GRAD ? 1 : per;
		uint64_t b = 0;
		for (uint32_t i = 0; i < esd_conseq_count(cq, (enum esd_cq_kind)kd, w); i++)
			b += 16 + 4 * floats * esd_job_table_dim(j, esd_key_table(k[i]));
		bytes[esd_cq_xfer_kind((enum esd_cq_kind)kd)] += b;
	}
}

int node_disp_need_lists(struct disp *ds, struct order *o, const struct esd_keytab *kt,
			 const uint64_t *wmask)
{
	struct node *nd = ds->nd;
	uint32_t w = nd->rank;
	uint32_t nu = esd_keytab_count(kt);
	const esd_key_t *ukeys = esd_keytab_keys(kt);

	/* per unique key: how many workers need it (S(x), replicated rows
	 * included), and whether we do */
	ds->in.nworkers = realloc(ds->in.nworkers, (nu + 1) * sizeof(*ds->in.nworkers));
	if (!ds->in.nworkers)
		return -ENOMEM;
	uint32_t nneed = 0, nothers = 0;
	for (uint32_t u = 0; u < nu; u++) {
		ds->in.nworkers[u] = (uint32_t)__builtin_popcountll(wmask[u]);
		if (wmask[u] & (UINT64_C(1) << w))
			nneed++;
		else
			nothers++;
	}
	if (node_disp_grow((void **)&o->need, &o->cap_need, nneed + 1, sizeof(esd_key_t)) ||
	    node_disp_grow((void **)&o->others, &o->cap_others, nothers + 1, sizeof(esd_key_t)))
		return -ENOMEM;
	o->alone = realloc(o->alone, o->cap_need);
	if (!o->alone)
		return -ENOMEM;
	/* sorted unique needed keys with their 'alone' flag */
	o->nneed = o->nothers = 0;
	for (uint32_t u = 0; u < nu; u++) {
		if (wmask[u] & (UINT64_C(1) << w))
			o->need[o->nneed++] = ukeys[u];
		else
			o->others[o->nothers++] = ukeys[u];
	}
	qsort(o->need, o->nneed, sizeof(esd_key_t), cmp_key);
	for (uint32_t i = 0; i < o->nneed; i++) {
		int64_t u = esd_keytab_find(kt, o->need[i]);
		o->alone[i] = nd->job.sync == ESD_SYNC_ON_DEMAND && ds->in.nworkers[u] == 1;
	}
	return 0;
}

/* Fill order o for this worker from the decision of the current batch. */
static int build_order(struct disp *ds, struct order *o, uint64_t iter, int b)
{
	struct node *nd = ds->nd;
	uint32_t w = nd->rank;
	struct esd_keytab *kt = esd_dispatcher_keytab(ds->eng.d);
	int rc = node_disp_need_lists(ds, o, kt, esd_keytab_need_masks(kt));
	if (rc)
		return rc;
	rc = node_disp_copy_samples(ds, o, b);
	if (rc)
		return rc;
	/* the consequence for us: step-1 pushes, predicted pulls and evictions */
	struct {
		esd_key_t **dst;
		uint32_t *n;
		size_t *cap;
		enum esd_cq_kind kind;
	} lists[] = {
		{&o->upd, &o->nupd, &o->cap_upd, ESD_CQ_UPDATE_VALUE},
		{&o->pred_pull, &o->npred_pull, &o->cap_pull, ESD_CQ_MISS_PULL},
		{&o->pred_evict, &o->npred_evict, &o->cap_evict, ESD_CQ_EVICT_PUSH},
	};
	for (size_t l = 0; l < 3; l++) {
		uint32_t c = esd_conseq_count(ds->eng.cq, lists[l].kind, w);
		if (node_disp_grow((void **)lists[l].dst, lists[l].cap, c + 1, sizeof(esd_key_t)))
			return -ENOMEM;
		memcpy(*lists[l].dst, esd_conseq_keys(ds->eng.cq, lists[l].kind, w),
		       c * sizeof(esd_key_t));
		*lists[l].n = c;
	}
	memset(o->pred_rows, 0, sizeof(o->pred_rows));
	for (int kd = 0; kd < ESD_CQ_KINDS; kd++)
		o->pred_rows[esd_cq_xfer_kind((enum esd_cq_kind)kd)] +=
			esd_conseq_count(ds->eng.cq, (enum esd_cq_kind)kd, w);
	node_disp_predict_bytes(&nd->job, ds->eng.cq, w, o->pred_bytes);
	o->iter = iter;
	o->digest = digest_of(ds->in.assign, ds->in.k, iter);
	/* the model is complete only with the DIRTY rows: the checkpoint
	 * boundaries push their values (they stay DIRTY: no decision
	 * changes), the end of training flushes them (CLEAN) */
	pthread_mutex_lock(&nd->qmu);
	bool requested = nd->rec.ckpt_at == iter;
	pthread_mutex_unlock(&nd->qmu);
	o->checkpoint = (nd->job.checkpoint_every && iter % nd->job.checkpoint_every == 0) ||
			requested;
	o->flush = iter == nd->job.iterations;
	return 0;
}

bool node_disp_wait_room(struct node *nd)
{
	pthread_mutex_lock(&nd->qmu);
	while (nd->dq.produced - nd->dq.consumed >= ORDER_RING - 1 && !nd->dq.stop)
		pthread_cond_wait(&nd->qcv, &nd->qmu);
	bool stop = nd->dq.stop;
	pthread_mutex_unlock(&nd->qmu);
	return !stop;
}

void node_disp_publish(struct disp *ds, int64_t *cpu_mark)
{
	struct node *nd = ds->nd;
	const int64_t cpu_now = esd_thread_cpu_ns();
	pthread_mutex_lock(&nd->qmu);
	nd->dq.cpu_ns += cpu_now - *cpu_mark;
	*cpu_mark = cpu_now;
	if (ds->eng.d)
		nd->dq.count = node_disp_counters(ds);
	if (ds->eng.gpu)
		nd->dq.gcount = *esd_gpu_solver_stats(ds->eng.gpu);
	nd->dq.produced++;
	pthread_cond_broadcast(&nd->qcv);
	pthread_mutex_unlock(&nd->qmu);
}

/* Long: the dispatcher thread's loop: wait for room, read the batch, decide, apply live
 * settings, hand the other nodes their parts, publish, with its exits. */
static void *disp_main(void *arg)
{
	prctl(PR_SET_NAME, "esd-dispatch", 0, 0, 0);
	struct disp *ds = arg;
	struct node *nd = ds->nd;
	int rc = 0, cur = 0;
	uint64_t iter;

	if (nd->dispatcher_core >= 0) {
		int got = -1;
		rc = esd_pin_thread(nd->dispatcher_core, &got);
		if (rc)
			ESD_WARN("dispatch", "cannot pin to core %d: %s; running unpinned",
				 nd->dispatcher_core, esd_strerror(rc));
		else
			ESD_INFO("dispatch", "pinned to core %d with %s (running on core %d)",
				 nd->dispatcher_core, esd_pin_mechanism(), got);
		nd->dq.core_obtained = got;
		rc = 0;
	}
	/* this thread's CPU from here on: the decisions' (with the batches
	 * read and the snapshots kept) */
	int64_t cpu_mark = esd_thread_cpu_ns();
	rc = node_disp_read_batch(ds, cur);
	for (iter = ds->sv.start_iter + 1; !rc && iter <= nd->job.iterations; iter++) {
		int64_t t0 = esd_now_ns();
		int set_policy;
		uint64_t rate = UINT64_MAX;
		rc = node_disp_apply_setting(ds, iter, &set_policy, &rate);
		if (rc)
			break;
		bool lookahead = ds->eng.policy == ESD_POLICY_LOOKAHEAD;
		if (lookahead || iter < nd->job.iterations)
			rc = node_disp_read_batch(ds, cur ^ 1);
		if (rc)
			break;
		struct order *o = &nd->dq.ring[iter % ORDER_RING];
		if (!node_disp_wait_room(nd))
			break;
		o->set_policy = set_policy;
		o->set_rate = rate != UINT64_MAX;
		o->rate_bps = rate;
		o->nahead = 0;
		if (lookahead) {
			/* hints from the next batch, on every snapshot and (in the
			 * order) on the real cache at the same point */
			uint32_t na = ds->in.off[cur ^ 1][ds->in.k];
			for (uint32_t j = 0; j < nd->job.n && !rc; j++)
				rc = esd_cmeta_lookahead(esd_snapset_cmeta(ds->eng.ss, j),
							 ds->in.keys[cur ^ 1], na, iter + 1);
			if (!rc && node_disp_grow((void **)&o->ahead, &o->cap_ahead, na,
						   sizeof(esd_key_t)))
				rc = -ENOMEM;
			if (rc)
				break;
			memcpy(o->ahead, ds->in.keys[cur ^ 1], na * sizeof(esd_key_t));
			o->nahead = na;
		}
		struct esd_batch b = {.k = (uint32_t)ds->in.k, .off = ds->in.off[cur], .keys = ds->in.keys[cur]};
		rc = esd_dispatcher_step(ds->eng.d, &b, ds->in.assign, ds->eng.cq);
		if (rc) {
			ESD_ERR("dispatch", "iteration %llu: dispatch step failed: %s",
				(unsigned long long)iter, esd_strerror(rc));
			break;
		}
		rc = build_order(ds, o, iter, cur);
		/* the other nodes' parts go out before this node's order is
		 * published: they precede its BARRIER(iter) on shard 0's link */
		if (!rc && nd->dq.decider)
			rc = node_disp_hand_out(ds, o, lookahead);
		if (rc)
			break;
		if (iter == ds->diverge_at) /* tests: this node's digest disagrees */
			o->digest ^= 1;
		if (o->flush)
			rc = esd_snapset_flush(ds->eng.ss);
		if (!rc && o->checkpoint)
			rc = node_disp_save(ds, iter);
		if (rc)
			break;
		o->decide_ns = esd_now_ns() - t0;
		node_disp_publish(ds, &cpu_mark);
		cur ^= 1;
	}
	pthread_mutex_lock(&nd->qmu);
	nd->dq.rc = rc ? rc : -ESHUTDOWN;
	pthread_cond_broadcast(&nd->qcv);
	pthread_mutex_unlock(&nd->qmu);
	return NULL;
}

static void disp_free(struct disp *ds)
{
	if (!ds)
		return;
	esd_ds_close(ds->in.rd);
	esd_dispatcher_free(ds->eng.d);
	esd_gpu_solver_free(ds->eng.gpu);
	esd_snapset_free(ds->eng.ss);
	esd_conseq_free(ds->eng.cq);
	for (int b = 0; b < 2; b++) {
		free(ds->in.labels[b]);
		free(ds->in.dense[b]);
		free(ds->in.keys[b]);
		free(ds->in.bag_off[b]);
		free(ds->in.wts[b]);
		free(ds->in.off[b]);
	}
	free(ds->in.assign);
	free(ds->in.nworkers);
	esd_buf_free(&ds->hand.out);
	esd_keytab_free(ds->hand.kt);
	free(ds->hand.mask);
	for (int q = 0; q < SAVED_GENS; q++)
		node_state_free(&ds->sv.gen[q]);
	free(ds);
}

/* (Re)create the snapshots and the decision engine; with 'from' the
 * snapshots are copies of the saved blocks. */
static int make_engine(struct disp *ds, bool from_saved)
{
	const struct esd_job *j = &ds->nd->job;
	esd_dispatcher_free(ds->eng.d);
	esd_snapset_free(ds->eng.ss);
	ds->eng.d = NULL;
	memset(&ds->eng.base, 0, sizeof(ds->eng.base));
	int rc = esd_snapset_create(j->n, ds->sz.cap, ds->eng.policy, &ds->eng.ss);
	if (!rc && j->het) /* before any load: versions start with the snapshots */
		rc = esd_snapset_set_staleness(ds->eng.ss, j->staleness);
	const int g = from_saved ? node_disp_saved_gen(ds, ds->sv.restore_iter) : -1;
	if (!rc && from_saved && g < 0)
		rc = -ESTALE;
	const struct node_state *st = g >= 0 ? &ds->sv.gen[g] : NULL;
	for (uint32_t w = 0; !rc && st && w < j->n; w++) {
		struct esd_cmeta *cm;
		rc = esd_cmeta_attach(st->cm[w], st->cm_cap[w], &cm);
		if (!rc)
			rc = esd_snapset_load(ds->eng.ss, w, cm);
	}
	if (!rc && st && j->het) /* the keys' versions, cached or not */
		rc = esd_snapset_set_versions(ds->eng.ss, st->vkeys, st->vvals, st->nvers);
	if (!rc)
		rc = esd_dispatcher_create(&ds->eng.dc, ds->eng.ss, &ds->eng.d);
	return rc;
}

static int resume_at(struct disp *ds, uint64_t iter);
static int start_at(struct disp *ds, uint64_t iter);
static int start_follower(struct node *nd, struct disp *ds, uint64_t start);

/* Long: the dispatcher's settings made from the job (method, sync, matrix, GPU, snapshots)
 * before its thread starts. */
int node_dispatcher_start(struct node *nd, struct node_state *resume, uint64_t start)
{
	struct disp *ds = calloc(1, sizeof(*ds));
	const struct esd_job *j = &nd->job;
	int rc;

	if (!ds)
		return -ENOMEM;
	ds->nd = nd;
	ds->in.k = j->derived.global_batch;
	ds->eng.policy = j->policy;
	const char *dv = getenv("ESD_TEST_DIVERGE_AT");
	if (dv) {
		ds->diverge_at = strtoull(dv, NULL, 10);
		ESD_WARN("dispatch", "ESD_TEST_DIVERGE_AT=%llu: this node will report a wrong "
			 "decision digest (a test of the divergence check)",
			 (unsigned long long)ds->diverge_at);
	}
	rc = esd_ds_open(j->stream, &ds->in.rd);
	if (rc) {
		ESD_ERR("dispatch", "cannot open data.stream %s: %s", j->stream,
			esd_ds_last_error());
		goto err;
	}
	for (int b = 0; b < 2; b++) {
		ds->in.labels[b] = calloc(ds->in.k, sizeof(float));
		ds->in.dense[b] = calloc(ds->in.k * nd->dense + 1, sizeof(float));
		ds->in.keys[b] = calloc(ds->in.k * nd->width, sizeof(esd_key_t));
		ds->in.bag_off[b] = calloc(ds->in.k * nd->tables + 1, sizeof(uint32_t));
		ds->in.off[b] = calloc(ds->in.k + 1, sizeof(uint32_t));
		if (nd->weighted)
			ds->in.wts[b] = calloc(ds->in.k * nd->width, sizeof(float));
		if (!ds->in.labels[b] || !ds->in.dense[b] || !ds->in.keys[b] ||
		    !ds->in.bag_off[b] || !ds->in.off[b] || (nd->weighted && !ds->in.wts[b]))
			goto err_nomem;
	}
	ds->in.assign = calloc(ds->in.k, sizeof(uint32_t));
	if (!ds->in.assign)
		goto err_nomem;
	esd_buf_init(&ds->hand.out);
	nd->dq.decider = j->derived.one_decider && nd->rank == 0;
	nd->dq.follower = j->derived.one_decider && nd->rank != 0;
	nd->dq.hand_fd = -1;
	if (nd->dq.decider) {
		esd_buf_init(&nd->dq.outbox);
		esd_buf_init(&nd->dq.sending);
		nd->dq.hand_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (nd->dq.hand_fd < 0) {
			rc = esd_neg_errno();
			goto err;
		}
	}
	if (nd->dq.follower) /* node 0 decides: this thread follows its orders */
		return start_follower(nd, ds, start);
	for (uint32_t w = 0; w < j->n; w++) {
		ds->sz.cap[w] = (uint32_t)j->cache_rows;
		ds->sz.T[w] = (int64_t)esd_job_row_cost_ns(j, w, esd_job_row_bytes(j));
	}
	rc = esd_conseq_create(&ds->eng.cq);
	if (rc)
		goto err;
	memcpy(ds->sz.batch, j->batch, sizeof(ds->sz.batch));
	ds->sz.max_batch = node_max_batch(nd);
	ds->eng.dc = (struct esd_dispatcher_config){
		.n = j->n, .cap = ds->sz.batch, .T = ds->sz.T, .seed = j->seed, .sync = j->sync,
		.compare = j->compare,
		.matrix = j->matrix, /* quality: dispatch.matrix */
		.ls_evals = j->local_search, /* quality: dispatch.local_search */
		.ls_ref_keys = j->derived.ls_ref_keys,
		.replicated = nd->rep, .nreplicated = nd->nrep, /* dispatch.replicate */
		.hybrid = {.alpha = j->alpha, .backend = ESD_EXACT_SSP,
		           .heu_order = ESD_HEU_ROW_ORDER},
	};
	/* model.dims: a row costs its table's bytes */
	ds->sz.ntables = esd_job_dispatch_row_bytes(j, ds->sz.row_bytes);
	ds->eng.dc.row_bytes = ds->sz.ntables ? ds->sz.row_bytes : NULL;
	ds->eng.dc.ntables = ds->sz.ntables;
	ds->eng.dc.row_bytes_full = (uint32_t)esd_job_row_bytes(j);
	rc = esd_method_parse(j->method, &ds->eng.dc.method);
	if (rc) {
		ESD_ERR("dispatch", "dispatch.method = '%s': unknown method", j->method);
		goto err;
	}
	if (j->gpu) {
		struct esd_gpu_params gp = {.max_k = (uint32_t)ds->in.k,
					    .deadline_ns = (int64_t)j->gpu_deadline_us * 1000,
					    .blocks = (uint32_t)j->gpu_blocks};
		rc = esd_gpu_solver_create(&gp, &ds->eng.gpu);
		if (rc) {
			ESD_ERR("dispatch", "dispatch.gpu: cannot make the GPU solver (k = %llu): %s",
				(unsigned long long)ds->in.k, esd_strerror(rc));
			goto err;
		}
		ds->eng.gpu_deadline_ns = gp.deadline_ns;
		ds->eng.dc.exact_submit = gpu_submit;
		ds->eng.dc.exact_collect = gpu_collect;
		ds->eng.dc.exact_ctx = ds;
		gpu_crossover(ds, j);
		nd->dq.has_gpu = true;
		if (esd_gpu_solver_device(ds->eng.gpu))
			ESD_WARN("dispatch", "dispatch.gpu: %s; the exact part runs on the CPU",
				 esd_gpu_solver_describe(ds->eng.gpu));
		else
			ESD_INFO("dispatch", "dispatch.gpu: exact part on %s (deadline %llu us)",
				 esd_gpu_solver_describe(ds->eng.gpu),
				 (unsigned long long)j->gpu_deadline_us);
	}
	if (resume) { /* a whole-job resume: the state read from disk */
		ds->sv.gen[0] = *resume;
		memset(resume, 0, sizeof(*resume));
		ds->sv.ok[0] = true;
		rc = resume_at(ds, ds->sv.gen[0].iter);
	} else { /* a new job, or one resumed cold (ps.resume_from) */
		rc = make_engine(ds, false);
		if (!rc)
			rc = node_disp_save(ds, nd->rec.cold_at);
		if (!rc && nd->rec.cold_at)
			rc = start_at(ds, nd->rec.cold_at);
	}
	if (rc)
		goto err;
	nd->dq.state = ds;
	rc = -pthread_create(&nd->dq.thread, NULL, disp_main, ds);
	if (rc) {
		nd->dq.state = NULL;
		goto err;
	}
	return 0;
err_nomem:
	rc = -ENOMEM;
err:
	disp_free(ds);
	return rc;
}

/* A node that follows the decider: the stream from the boundary the job
 * starts after, the key table its orders' keys come from, and the
 * thread. */
static int start_follower(struct node *nd, struct disp *ds, uint64_t start)
{
	int rc = esd_keytab_create(&ds->hand.kt);
	if (!rc)
		rc = start_at(ds, start);
	if (!rc) {
		pthread_mutex_lock(&nd->qmu);
		nd->dq.in_next = ds->sv.start_iter + 1;
		pthread_mutex_unlock(&nd->qmu);
		nd->dq.state = ds;
		rc = -pthread_create(&nd->dq.thread, NULL, node_follow_main, ds);
	}
	if (rc) {
		nd->dq.state = NULL;
		disp_free(ds);
		return rc;
	}
	ESD_INFO("dispatch", "node 0 decides every iteration; this node follows its orders "
		 "from iteration %llu", (unsigned long long)ds->sv.start_iter + 1);
	return 0;
}

static void stop_thread(struct node *nd)
{
	pthread_mutex_lock(&nd->qmu);
	nd->dq.stop = true;
	pthread_cond_broadcast(&nd->qcv);
	pthread_mutex_unlock(&nd->qmu);
	pthread_join(nd->dq.thread, NULL);
}

/* Go back to the state saved at boundary iter: its snapshots, its live
 * settings (a change esdctl made after it is gone with the PS's memory:
 * the restarted shard knows none) and the stream's cursor; the thread
 * then decides iter + 1 next. */
static int resume_at(struct disp *ds, uint64_t iter)
{
	struct node *nd = ds->nd;
	const int g = node_disp_saved_gen(ds, iter);
	if (g < 0) {
		char have[128] = "";
		size_t off = 0;
		for (int q = 0; q < SAVED_GENS && off < sizeof(have) - 24; q++)
			if (ds->sv.ok[q])
				off += (size_t)snprintf(have + off, sizeof(have) - off, "%s%llu",
							off ? ", " : "",
							(unsigned long long)ds->sv.gen[q].iter);
		ESD_ERR("dispatch", "cannot resume at iteration %llu: the state of iterations %s "
			"only is kept", (unsigned long long)iter, off ? have : "(none)");
		return -ESTALE;
	}
	const struct node_state *st = &ds->sv.gen[g];
	if (ds->eng.dc.method != st->method || ds->eng.dc.hybrid.alpha != st->alpha ||
	    ds->eng.policy != st->policy)
		ESD_WARN("dispatch", "resuming at iteration %llu with its settings: method %s, "
			 "alpha %g, policy %s (a later esdctl set is undone)",
			 (unsigned long long)iter, esd_method_name(st->method), st->alpha,
			 esd_policy_name(st->policy));
	ds->eng.dc.method = st->method;
	ds->eng.dc.hybrid.alpha = st->alpha;
	ds->eng.policy = st->policy;
	memcpy(ds->sz.batch, st->batch, sizeof(ds->sz.batch));
	pthread_mutex_lock(&nd->qmu);
	memcpy(nd->job.rate_bps, st->rates, sizeof(nd->job.rate_bps));
	memcpy(nd->job.batch, ds->sz.batch, sizeof(nd->job.batch));
	nd->job.derived.size_fixed_rows = st->size_model[0];
	nd->job.derived.size_rows_per_sample = st->size_model[1];
	nd->job.derived.size_compute_ns = st->size_model[2];
	for (uint32_t w = 0; w < nd->job.n; w++)
		ds->sz.T[w] = (int64_t)esd_job_row_cost_ns(&nd->job, w, esd_job_row_bytes(&nd->job));
	for (uint32_t s = 0; s < nd->job.shards && nd->job.derived.shape_follows_model; s++)
		if (nd->links.link[s])
			esd_link_set_rate(nd->links.link[s], nd->job.rate_bps[nd->rank]);
	snprintf(nd->job.method, sizeof(nd->job.method), "%s", esd_method_name(ds->eng.dc.method));
	nd->job.alpha = ds->eng.dc.hybrid.alpha;
	nd->job.policy = ds->eng.policy;
	nd->live.set_at = 0; /* a change announced for later is dropped too */
	pthread_mutex_unlock(&nd->qmu);
	ds->sv.restore_iter = iter;
	int rc = make_engine(ds, true);
	return rc ? rc : start_at(ds, iter);
}

/* The thread decides iter + 1 next, from the data cursor of boundary
 * iter. */
static int start_at(struct disp *ds, uint64_t iter)
{
	struct node *nd = ds->nd;
	uint64_t ns = esd_ds_reader_info(ds->in.rd)->nsamples;
	int rc = esd_ds_seek(ds->in.rd, ns ? node_cursor_at(nd, iter) % ns : 0);
	if (rc)
		return rc;
	ds->sv.start_iter = iter;
	pthread_mutex_lock(&nd->qmu);
	nd->dq.produced = nd->dq.consumed = iter;
	nd->dq.stop = false;
	nd->dq.rc = 0;
	pthread_mutex_unlock(&nd->qmu);
	return 0;
}

int node_dispatcher_restart(struct node *nd, uint64_t iter)
{
	struct disp *ds = nd->dq.state;
	if (nd->dq.follower || nd->dq.decider) /* one decider: no shard restarts */
		return -ENOTSUP;
	stop_thread(nd);
	int rc = resume_at(ds, iter);
	if (!rc)
		rc = -pthread_create(&nd->dq.thread, NULL, disp_main, ds);
	if (!rc)
		ESD_INFO("dispatch", "restarted from the snapshots of iteration %llu",
			 (unsigned long long)iter);
	return rc;
}

void node_dispatcher_stop(struct node *nd)
{
	if (!nd->dq.state)
		return;
	stop_thread(nd);
	disp_free(nd->dq.state);
	nd->dq.state = NULL;
	for (int i = 0; i < ORDER_RING; i++) {
		struct order *o = &nd->dq.ring[i];
		free(o->labels);
		free(o->dense);
		free(o->keys);
		free(o->bag_off);
		free(o->wts);
		free(o->need);
		free(o->alone);
		free(o->others);
		free(o->upd);
		free(o->pred_pull);
		free(o->pred_evict);
		free(o->ahead);
		memset(o, 0, sizeof(*o));
	}
	node_follow_drop(nd);
	if (nd->dq.decider) {
		esd_buf_free(&nd->dq.outbox);
		esd_buf_free(&nd->dq.sending);
		if (nd->dq.hand_fd >= 0)
			close(nd->dq.hand_fd);
		nd->dq.hand_fd = -1;
	}
}

struct order *node_order_next(struct node *nd)
{
	const int64_t t0 = esd_now_ns();
	struct order *o = NULL;
	if (nd->dq.follower) {
		o = node_follow_order_next(nd);
	} else {
		pthread_mutex_lock(&nd->qmu);
		while (nd->dq.produced == nd->dq.consumed && !nd->dq.rc)
			pthread_cond_wait(&nd->qcv, &nd->qmu);
		if (nd->dq.produced > nd->dq.consumed)
			o = &nd->dq.ring[(nd->dq.consumed + 1) % ORDER_RING];
		pthread_mutex_unlock(&nd->qmu);
	}
	const int64_t waited = esd_now_ns() - t0;
	pthread_mutex_lock(&nd->qmu);
	nd->dq.wait_ns += waited;
	pthread_mutex_unlock(&nd->qmu);
	return o;
}

void node_order_done(struct node *nd)
{
	pthread_mutex_lock(&nd->qmu);
	nd->dq.consumed++;
	pthread_cond_broadcast(&nd->qcv);
	pthread_mutex_unlock(&nd->qmu);
}
