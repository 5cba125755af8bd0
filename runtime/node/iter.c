/*
 * The iteration executor of esdd (main thread): the protocol steps 1-6 of
 * docs/design.md §3 for this node's worker, on the real cache, over the PS
 * links. Every policy call on the real cache mirrors the one the
 * dispatcher made on this worker's snapshot, and the resulting pulls and
 * evictions are checked against the snapshot's prediction: a divergence
 * stops the job. Step 2, the barrier, is in barrier.c; the saved
 * boundaries and the resumes in recover.c (their shared state: exec.h).
 */
#include "exec.h"
#include "node.h"
#include "rows.h"

#include <esd/clock.h>
#include <esd/err.h>
#include <esd/log.h>
#include <esd/optim.h>
#include <esd/proto.h>

#include <stdlib.h>
#include <string.h>

static uint32_t shard_of(const struct node *nd, esd_key_t key)
{
	return esd_key_table(key) == ESD_DENSE_TABLE ? 0 : esd_shard_of(key, nd->job.shards);
}

static uint32_t state_dim(const struct node *nd)
{
	return (uint32_t)esd_optim_state_len(nd->job.optim.opt, nd->job.dim);
}

/* ---- batched row frames per shard ------------------------------------- */

/* Push frames carry at most about this many bytes of rows. */
#define PUSH_FRAME_BYTES (256u << 10)
/* A row op's body header (docs/protocol.md). */
#define ROWS_HDR_BYTES 40u

static int rows_begin(struct exec *x, uint32_t s, enum esd_op op, enum esd_xfer_kind kind,
		      uint64_t iter)
{
	struct node *nd = x->nd;
	struct esd_rows r = {.iteration = iter, .sequence = ++nd->links.push_seq[s],
			     .worker = nd->rank,
			     .kind = kind, .dim = nd->job.dim,
			     .state_dim = op == ESD_OP_PUSH_VALUE ? state_dim(nd) : 0};
	if (nd->job.ntable_dims) { /* each row with its table's dim */
		r.table_dims = nd->job.table_dims;
		r.ntables = nd->job.ntable_dims;
	}
	x->sb[s].open = true;
	return esd_enc_rows_begin(&x->sb[s].e, &x->sb[s].b, op, &r);
}

/* One row into shard s's open frame: floats that lie in the cache go in
 * place when the job sends zero copy (they stay unchanged until the flush:
 * each step flushes before it writes rows it pushed). */
static int row_put(struct exec *x, uint32_t s, bool in_cache, esd_key_t key, uint64_t clock,
		   const float *v, const float *st)
{
	struct shard_buf *sb = &x->sb[s];
	return in_cache && x->zero_copy ? esd_enc_row_ref(&sb->e, &sb->g, key, clock, v, st)
					: esd_enc_row(&sb->e, key, clock, v, st);
}

/* Append a row to shard s's open frame, starting a new frame when full;
 * in_cache: v and st are the cache's rows. */
static int rows_add(struct exec *x, uint32_t s, enum esd_op op, enum esd_xfer_kind kind,
		    uint64_t iter, esd_key_t key, uint64_t clock, const float *v, const float *st,
		    bool in_cache)
{
	int rc = 0;
	struct esd_rows_enc *e = &x->sb[s].e;
	if (!x->sb[s].open)
		rc = rows_begin(x, s, op, kind, iter);
	/* frames of at most PUSH_FRAME_BYTES (one row at least): the shard's
	 * receive buffer holds two of the largest frames it was sent */
	else if (e->r.count &&
		 esd_enc_rows_body(e) - ROWS_HDR_BYTES + esd_enc_row_size(e, key) > PUSH_FRAME_BYTES)
		rc = -E2BIG;
	if (!rc)
		rc = row_put(x, s, in_cache, key, clock, v, st);
	if (rc == -E2BIG) { /* frame full: close it, open the next */
		esd_enc_rows_end(&x->sb[s].e);
		rc = rows_begin(x, s, op, kind, iter);
		if (!rc)
			rc = row_put(x, s, in_cache, key, clock, v, st);
	}
	return rc;
}

/* Drop what shard s's buffer holds. */
void node_exec_reset_shard(struct shard_buf *sb)
{
	esd_buf_reset(&sb->b);
	esd_gather_reset(&sb->g);
	sb->open = false;
}

/* Shard s's frames onto its link: in pieces when rows are referenced. */
static int send_shard(struct exec *x, uint32_t s)
{
	struct shard_buf *sb = &x->sb[s];
	struct esd_link *l = x->nd->links.link[s];
	if (!sb->g.ext)
		return esd_link_send(l, sb->b.data, sb->b.len);
	void *iov;
	int n;
	int rc = esd_gather_iov(&sb->g, &sb->b, &iov, &n);
	return rc ? rc : esd_link_sendv(l, iov, n);
}

static void rows_close_all(struct exec *x)
{
	for (uint32_t s = 0; s < x->nd->job.shards; s++)
		if (x->sb[s].open) {
			esd_enc_rows_end(&x->sb[s].e);
			x->sb[s].open = false;
		}
}

int node_exec_flush(struct exec *x)
{
	rows_close_all(x);
	for (uint32_t s = 0; s < x->nd->job.shards; s++) {
		if (!x->sb[s].b.len)
			continue;
		int rc = send_shard(x, s);
		node_exec_reset_shard(&x->sb[s]);
		if (!rc) /* every push frame encoded for s is on the wire */
			x->nd->links.sent_seq[s] = x->nd->links.push_seq[s];
		if (rc) {
			ESD_ERR("node", "sending to shard %u: %s (%s)", s, esd_strerror(rc),
				esd_link_last_error(x->nd->links.link[s]));
			return rc;
		}
	}
	return 0;
}

/* Receive the next frame of shard s, turning ERROR frames into failures. */
int node_exec_recv(struct exec *x, uint32_t s, struct esd_msg *m)
{
	struct node *nd = x->nd;
	/* the shard answers within its barrier timeout, or fails the job */
	int rc;
	/* a node that follows the decider takes its ORDER frames wherever
	 * they come between the answers it waits for */
	do {
		rc = esd_link_recv(nd->links.link[s], m,
				   (int64_t)(nd->job.barrier_timeout_s + 60) * ESD_NS_PER_S);
		if (!rc && m->hdr.op == ESD_OP_ORDER && s == 0)
			rc = node_follow_take(nd, &m->u.order) ?: 1;
	} while (rc == 1);
	if (rc == -EPROTO || rc == -ENOMEM)
		return rc;
	if (rc) {
		ESD_ERR("node", "shard %u (%s): %s %s", s, esd_link_peer(nd->links.link[s]),
			esd_strerror(rc), esd_link_last_error(nd->links.link[s]));
		return rc;
	}
	if (m->hdr.op == ESD_OP_ERROR) {
		ESD_ERR("node", "shard %u reports: %.*s", s, (int)m->u.error.len, m->u.error.text);
		/* the shard failed the job: whatever its cause (a worker that went
		 * away, a timeout), this link is fine and no reconnection helps */
		int code = m->u.error.code;
		return code == -ESD_EDIVERGED || code == -ESD_ESTREAM || code == -ESD_EROLLBACK
			       ? code
			       : -ESD_EJOBFAILED;
	}
	return 0;
}

/* ---- the steps ---------------------------------------------------------- */

/* Pull keys (already grouped per shard in x->pull_keys) into their slots:
 * values and optimizer state, and the slot becomes CLEAN with the shard's
 * clock; values_only leaves the metadata as it is (a restored block). */
int node_exec_pull(struct exec *x, uint64_t iter, enum esd_xfer_kind kind, float *dense_out,
		   bool values_only)
{
	struct node *nd = x->nd;
	uint32_t sd = state_dim(nd);
	int rc = 0;
	uint64_t req[ESD_JOB_MAX_SHARDS];

	for (uint32_t s = 0; s < nd->job.shards; s++) {
		if (!x->npull[s])
			continue;
		req[s] = ++nd->links.pull_req;
		rc = esd_enc_pull_kind(&x->sb[s].b, iter, req[s], nd->rank, kind, x->pull_keys[s],
				  x->npull[s]);
		if (rc)
			return rc;
	}
	lap(x, NODE_CPU_ENCODE);
	rc = node_exec_flush(x);
	for (uint32_t s = 0; s < nd->job.shards && !rc; s++) {
		uint32_t got = 0;
		while (got < x->npull[s] && !rc) {
			struct esd_msg m;
			lap(x, NODE_CPU_DECODE);
			rc = node_exec_recv(x, s, &m);
			lap(x, NODE_CPU_NET);
			if (rc)
				break;
			const struct esd_rows *r = &m.u.rows;
			/* the dense table comes without optimizer state */
			uint32_t want_sd = dense_out ? 0 : sd;
			if (m.hdr.op != ESD_OP_PULL_RESP || r->sequence != req[s] ||
			    r->dim != nd->job.dim || r->state_dim != want_sd ||
			    got + r->count > x->npull[s]) {
				ESD_ERR("node", "shard %u: unexpected %s to pull request %llu", s,
					esd_op_name(m.hdr.op), (unsigned long long)req[s]);
				rc = -EPROTO;
				break;
			}
			const uint8_t *at = r->data;
			for (uint32_t i = 0; i < r->count; i++) {
				struct esd_row_view v;
				at = esd_rows_next(r, at, &v);
				if (v.key != x->pull_keys[s][got + i]) {
					ESD_ERR("node", "shard %u answered key %#llx for %#llx", s,
						(unsigned long long)v.key,
						(unsigned long long)x->pull_keys[s][got + i]);
					rc = -EPROTO;
					break;
				}
				if (esd_key_table(v.key) == ESD_DENSE_TABLE) {
					uint64_t off = esd_key_id(v.key) * nd->job.dim;
					uint64_t n = nd->dense_params - off < nd->job.dim
							     ? nd->dense_params - off
							     : nd->job.dim;
					memcpy(dense_out + off, v.value, n * sizeof(float));
					continue;
				}
				uint32_t slot = esd_cmeta_find(nd->cm, v.key);
				if (slot == ESD_SLOT_NONE) {
					rc = -ESD_EDIVERGED;
					break;
				}
				/* a row of a smaller dim fills its slot's head, the
				 * tail zero (the slot may have held a larger one) */
				esd_row_view_unpack(&v, nd->job.dim, sd, node_row_value(nd, slot),
						    sd ? node_row_state(nd, slot) : NULL);
				if (!values_only)
					esd_cmeta_set_state(nd->cm, slot, ESD_ROW_CLEAN, v.clock);
			}
			got += r->count;
		}
	}
	for (uint32_t s = 0; s < nd->job.shards; s++)
		x->npull[s] = 0;
	lap(x, NODE_CPU_DECODE);
	return rc;
}

/* Bytes received on every link so far (PULL_RESP frames during a pull). */
static uint64_t links_rx_bytes(const struct node *nd)
{
	uint64_t b = 0;
	for (uint32_t s = 0; s < nd->job.shards; s++) {
		if (!nd->links.link[s])
			continue;
		struct esd_link_stats st;
		esd_link_stats(nd->links.link[s], &st);
		for (int k = 0; k < ESD_XFER_NKINDS; k++)
			b += st.kind[k].rx_bytes;
	}
	return b;
}

/* A pull phase: its request and every answer to it. */
static int timed_pull(struct exec *x, uint64_t iter, enum esd_xfer_kind kind, float *dense_out)
{
	struct node *nd = x->nd;
	if (!nd->job.estimate_rates)
		return node_exec_pull(x, iter, kind, dense_out, false);
	const uint64_t b0 = links_rx_bytes(nd);
	const int64_t t0 = esd_now_ns();
	int rc = node_exec_pull(x, iter, kind, dense_out, false);
	if (!rc)
		esd_rate_est_add(&nd->rate.est, links_rx_bytes(nd) - b0, esd_now_ns() - t0);
	return rc;
}

int node_exec_add_pull(struct exec *x, esd_key_t key)
{
	uint32_t s = shard_of(x->nd, key);
	if (x->npull[s] == x->cap_pull[s]) {
		size_t cap = x->cap_pull[s] ? x->cap_pull[s] * 2 : 1024;
		esd_key_t *k = realloc(x->pull_keys[s], cap * sizeof(*k));
		if (!k)
			return -ENOMEM;
		x->pull_keys[s] = k;
		x->cap_pull[s] = cap;
	}
	x->pull_keys[s][x->npull[s]++] = key;
	return 0;
}

static bool same_keys(const esd_key_t *a, uint32_t na, const esd_key_t *b, uint32_t nb)
{
	return na == nb && !memcmp(a, b, (size_t)na * sizeof(esd_key_t));
}

static int cmp_key(const void *a, const void *b)
{
	esd_key_t x = *(const esd_key_t *)a, y = *(const esd_key_t *)b;
	return (x > y) - (x < y);
}

/* Step 1: update pushes of the DIRTY rows others need (the plan's). */
static int push_updates(struct exec *x, const struct order *o)
{
	struct node *nd = x->nd;
	uint32_t sd = state_dim(nd);
	int rc = 0;

	esd_cache_meta_write_begin(nd->cache);
	for (uint32_t i = 0; i < o->nupd; i++) {
		uint32_t slot = esd_cmeta_find(nd->cm, o->upd[i]);
		const struct esd_cmeta_slot *sl = slot == ESD_SLOT_NONE ? NULL
									: esd_cmeta_slot(nd->cm, slot);
		if (!sl || sl->state != ESD_ROW_DIRTY) {
			ESD_ERR("node", "iteration %llu: plan pushes key %#llx, not DIRTY here",
				(unsigned long long)o->iter, (unsigned long long)o->upd[i]);
			rc = -ESD_EDIVERGED;
			break;
		}
		rc = rows_add(x, shard_of(nd, o->upd[i]), ESD_OP_PUSH_VALUE, ESD_XFER_UPDATE_PUSH,
			      o->iter, o->upd[i], sl->clock, node_row_value(nd, slot),
			      sd ? node_row_state(nd, slot) : NULL, true);
		if (rc)
			break;
		esd_cmeta_set_state(nd->cm, slot, ESD_ROW_CLEAN, sl->clock);
	}
	esd_cache_meta_write_end(nd->cache);
	if (!rc)
		rows_close_all(x);
	return rc;
}

/* After the barrier: the lookahead hints at the same point as on the
 * snapshot (the order carries them exactly when the dispatcher gave them),
 * and a live cache.policy switch where the snapshot switched. */
static int hints_and_settings(struct exec *x, const struct order *o)
{
	struct node *nd = x->nd;
	int rc;

	if (o->nahead) {
		esd_cache_meta_write_begin(nd->cache);
		rc = esd_cmeta_lookahead(nd->cm, o->ahead, o->nahead, o->iter + 1);
		esd_cache_meta_write_end(nd->cache);
		if (rc)
			return rc;
	}
	return node_setting_apply(nd, o);
}

/* Room for an iteration of nneed rows (grown, never per iteration). */
static int reserve_fill(struct exec *x, uint32_t nneed)
{
	if (nneed <= x->cap_fill)
		return 0;
	x->cap_fill = nneed;
	x->pulls = realloc(x->pulls, x->cap_fill * sizeof(*x->pulls));
	x->evicts = realloc(x->evicts, x->cap_fill * sizeof(*x->evicts));
	x->fill_slots = realloc(x->fill_slots, x->cap_fill * sizeof(*x->fill_slots));
	x->dirty_evicts = realloc(x->dirty_evicts, (x->cap_fill + 1) * sizeof(*x->dirty_evicts));
	if (!x->pulls || !x->evicts || !x->fill_slots || !x->dirty_evicts)
		return -ENOMEM;
	return 0;
}

/* Whether the real cache's fill did what the snapshot predicted: the same
 * DIRTY victims and exactly the predicted pulls (under HET's bounded
 * staleness the cache also lists OUTDATED copies fresh enough to use,
 * which stay as they are). */
static bool fill_as_predicted(struct exec *x, const struct order *o,
			      const struct esd_cmeta_fill *f, uint32_t *nev_out)
{
	esd_key_t *ev = x->dirty_evicts;
	uint32_t nev = 0;
	for (size_t i = 0; i < f->n_evicts; i++)
		if (f->evicts[i].dirty)
			ev[nev++] = f->evicts[i].key;
	qsort(ev, nev, sizeof(*ev), cmp_key);
	*nev_out = nev;
	bool ok = same_keys(ev, nev, o->pred_evict, o->npred_evict);
	size_t np = 0;
	for (size_t i = 0; ok && i < f->n_pulls; i++) {
		if (np < o->npred_pull && f->pulls[i].key == o->pred_pull[np])
			np++;
		else if (!x->nd->job.het || !f->pulls[i].outdated)
			ok = false;
	}
	return ok && np == o->npred_pull;
}

/* Steps 3-4 on the real cache: slots for what this worker trains and the
 * evictions that make room, checked against the snapshot's prediction. */
static int fill_cache(struct exec *x, const struct order *o, struct esd_cmeta_fill *f)
{
	struct node *nd = x->nd;
	uint32_t nev;
	int rc = reserve_fill(x, o->nneed);
	if (rc)
		return rc;
	*f = (struct esd_cmeta_fill){.pulls = x->pulls, .evicts = x->evicts, .slots = x->fill_slots};
	rc = esd_cache_begin_iter(nd->cache, o->iter, o->need, o->nneed, f);
	if (rc) {
		ESD_ERR("node", "iteration %llu: cache cannot take %u rows: %s",
			(unsigned long long)o->iter, o->nneed, esd_strerror(rc));
		return rc;
	}
	if (!fill_as_predicted(x, o, f, &nev)) {
		ESD_ERR("node", "iteration %llu: the cache diverged from its snapshot (%zu pulls, "
			"%u predicted; %u dirty evictions, %u predicted)",
			(unsigned long long)o->iter, f->n_pulls, o->npred_pull, nev,
			o->npred_evict);
		return -ESD_EDIVERGED;
	}
	return 0;
}

/* Evict pushes, from the victims' slots before pulls overwrite them. */
static int push_evictions(struct exec *x, const struct order *o, const struct esd_cmeta_fill *f)
{
	struct node *nd = x->nd;
	uint32_t sd = state_dim(nd);

	for (size_t i = 0; i < f->n_evicts; i++) {
		const struct esd_cmeta_evict *e = &f->evicts[i];
		if (!e->dirty)
			continue;
		int rc = rows_add(x, shard_of(nd, e->key), ESD_OP_PUSH_VALUE, ESD_XFER_EVICT_PUSH,
				  o->iter, e->key, e->clock, node_row_value(nd, e->slot),
				  sd ? node_row_state(nd, e->slot) : NULL, true);
		if (rc)
			return rc;
	}
	rows_close_all(x);
	return 0;
}

/* Miss pulls (the predicted ones), then the dense table in full (kind
 * other) into the exchange area. */
static int pull_rows_and_dense(struct exec *x, const struct order *o)
{
	struct node *nd = x->nd;
	int rc = 0;

	for (uint32_t i = 0; i < o->npred_pull && !rc; i++)
		rc = node_exec_add_pull(x, o->pred_pull[i]);
	esd_cache_meta_write_begin(nd->cache);
	if (!rc)
		rc = timed_pull(x, o->iter, ESD_XFER_MISS_PULL, NULL);
	esd_cache_meta_write_end(nd->cache);
	float *params = node_dense_params(nd);
	for (uint32_t i = 0; i < x->dense_rows && !rc; i++)
		rc = node_exec_add_pull(x, esd_key_make(ESD_DENSE_TABLE, i));
	if (!rc)
		rc = timed_pull(x, o->iter, ESD_XFER_OTHER, params);
	return rc;
}

/* Step 5: the trainer's micro-batch, its samples' keys as cache slots. */
static int train(struct exec *x, const struct order *o, double *loss)
{
	struct node *nd = x->nd;
	size_t nslots = o->nkeys;

	if (nslots > x->cap_samples) {
		x->cap_samples = nslots;
		x->sample_slots = realloc(x->sample_slots, nslots * sizeof(uint32_t));
		if (!x->sample_slots)
			return -ENOMEM;
	}
	for (size_t i = 0; i < nslots; i++) {
		esd_key_t *pos = bsearch(&o->keys[i], o->need, o->nneed, sizeof(esd_key_t), cmp_key);
		x->sample_slots[i] = x->fill_slots[pos - o->need];
	}
	esd_cache_grad_zero(nd->cache, x->fill_slots, o->nneed);
	lap(x, NODE_CPU_CACHE);
	int rc = node_trainer_run(nd, o, x->sample_slots, loss);
	lap(x, NODE_CPU_TRAINER);
	return rc;
}

/* Step 6: rows trained alone are updated here and become DIRTY; the
 * gradients of shared rows go to the PS; every other copy is outdated.
 * The transfers the dispatcher predicted are counted for the links'
 * check. */
static int apply_step6(struct exec *x, const struct order *o)
{
	struct node *nd = x->nd;
	uint32_t dim = nd->job.dim;
	int rc = 0;

	esd_cache_meta_write_begin(nd->cache);
	/* the rows trained alone, then the shared ones' pushes (in the need
	 * order, as the frames carry them): separate rows, so the two passes
	 * do what one would, and each is one phase of the CPU counters */
	for (uint32_t i = 0; i < o->nneed; i++) {
		if (!o->alone[i])
			continue;
		uint32_t slot = x->fill_slots[i];
		uint64_t clock = esd_cmeta_slot(nd->cm, slot)->clock;
		esd_optim_apply(&nd->job.optim, dim, node_row_value(nd, slot),
				node_row_state(nd, slot), node_row_grad(nd, slot), clock + 1);
		esd_cmeta_set_state(nd->cm, slot, ESD_ROW_DIRTY, clock + 1);
	}
	lap(x, NODE_CPU_OPTIM);
	for (uint32_t i = 0; i < o->nneed; i++) {
		if (o->alone[i])
			continue;
		uint32_t slot = x->fill_slots[i];
		const struct esd_cmeta_slot *sl = esd_cmeta_slot(nd->cm, slot);
		rc = rows_add(x, shard_of(nd, o->need[i]), ESD_OP_PUSH_GRAD, ESD_XFER_UPDATE_PUSH,
			      o->iter, o->need[i], sl->clock, node_row_grad(nd, slot), NULL, true);
		if (rc)
			break;
		esd_cmeta_set_state(nd->cm, slot, ESD_ROW_OUTDATED, sl->clock);
	}
	rows_close_all(x);
	lap(x, NODE_CPU_ENCODE);
	/* the rows the dispatcher's consequence says these links carry */
	pthread_mutex_lock(&nd->qmu);
	for (int kd = 0; kd < ESD_XFER_NKINDS; kd++) {
		nd->stats.predicted[kd] += o->pred_rows[kd];
		nd->stats.predicted_bytes[kd] += o->pred_bytes[kd];
	}
	pthread_mutex_unlock(&nd->qmu);
	for (uint32_t i = 0; i < o->nothers && !rc; i++)
		esd_cmeta_mark_outdated(nd->cm, o->others[i]);
	esd_cache_meta_write_end(nd->cache);
	lap(x, NODE_CPU_CACHE);
	return rc;
}

/* The dense gradients to shard 0, a row of dim floats at a time (kind
 * other). */
static int push_dense_grads(struct exec *x, const struct order *o)
{
	struct node *nd = x->nd;
	uint32_t dim = nd->job.dim;
	const float *dg = node_dense_grads(nd);
	int rc = 0;

	for (uint32_t i = 0; i < x->dense_rows && !rc; i++) {
		uint64_t off = (uint64_t)i * dim;
		uint64_t n = nd->dense_params - off < dim ? nd->dense_params - off : dim;
		const float *row = dg + off; /* a whole row is encoded from where it is */
		if (n < dim) { /* the last one, padded with zeros */
			memset(x->dense_chunk, 0, dim * sizeof(float));
			memcpy(x->dense_chunk, dg + off, n * sizeof(float));
			row = x->dense_chunk;
		}
		rc = rows_add(x, 0, ESD_OP_PUSH_GRAD, ESD_XFER_OTHER, o->iter,
			      esd_key_make(ESD_DENSE_TABLE, i), 0, row, NULL, false);
	}
	rows_close_all(x);
	return rc;
}


/* At a checkpoint boundary every DIRTY row's value goes to its shard
 * (kind other) for the checkpoint and stays DIRTY here, so a checkpoint
 * changes no decision: a job stopped and resumed, or checkpointed every
 * iteration, trains what an uninterrupted one does. At the end of
 * training (flush) the rows become CLEAN. Then everything is sent, and
 * the node's part of the checkpoint saved. */
static int flush_and_checkpoint(struct exec *x, const struct order *o)
{
	struct node *nd = x->nd;
	uint32_t sd = state_dim(nd);
	int rc = 0;

	if (o->flush || o->checkpoint) {
		esd_cache_meta_write_begin(nd->cache);
		uint32_t cap = esd_cmeta_capacity(nd->cm);
		for (uint32_t s = 0; s < cap && !rc; s++) {
			const struct esd_cmeta_slot *sl = esd_cmeta_slot(nd->cm, s);
			if (sl->state != ESD_ROW_DIRTY)
				continue;
			rc = rows_add(x, shard_of(nd, sl->key), ESD_OP_PUSH_VALUE, ESD_XFER_OTHER,
				      o->iter, sl->key, sl->clock, node_row_value(nd, s),
				      sd ? node_row_state(nd, s) : NULL, true);
			if (o->flush)
				esd_cmeta_set_state(nd->cm, s, ESD_ROW_CLEAN, sl->clock);
		}
		esd_cache_meta_write_end(nd->cache);
		rows_close_all(x);
	}
	if (!rc)
		rc = node_exec_flush(x);
	if (!rc && o->checkpoint) {
		rc = node_save_boundary(nd, o->iter);
		if (!rc && nd->job.checkpoint_dir[0]) /* for a whole-job resume */
			rc = node_write_cache_state(nd, o->iter);
		nd->rec.flag_next_barrier = true;
	}
	return rc;
}

/* One iteration t of this node's worker, step by step: the protocol of
 * docs/design.md §3, whose code walk (docs/design.md §10) follows these
 * functions. */
static int run_iteration(struct exec *x, const struct order *o)
{
	struct esd_cmeta_fill f;
	double loss = 0;
	int rc;

	lap(x, NODE_CPU_OTHER); /* between iterations: the order, the figures */
	/* one decider: the other nodes' orders of this iteration precede its
	 * barrier on shard 0's link (and later ones go as soon as made) */
	if ((rc = node_hand_flush(x->nd)))
		return rc;
	if ((rc = push_updates(x, o)))            /* step 1 */
		return rc;
	lap(x, NODE_CPU_ENCODE);
	if ((rc = node_barrier(x, o)) ||               /* step 2: pushes precede it on each link */
	    (rc = node_hand_flush(x->nd)))            /* (orders made meanwhile: before the pulls) */
		return rc;
	lap(x, NODE_CPU_NET);
	if ((rc = hints_and_settings(x, o)) ||
	    (rc = fill_cache(x, o, &f)))          /* steps 3-4 */
		return rc;
	lap(x, NODE_CPU_CACHE);
	if ((rc = push_evictions(x, o, &f)))
		return rc;
	lap(x, NODE_CPU_ENCODE);
	/* one decider: the next orders out (node 0) or in (the others) */
	if ((rc = pull_rows_and_dense(x, o)) || (rc = node_hand_flush(x->nd)) ||
	    (rc = node_links_take_orders(x->nd)))
		return rc;
	const int64_t t0 = esd_now_ns();
	if ((rc = train(x, o, &loss)))            /* step 5 */
		return rc;
	const int64_t train_ns = esd_now_ns() - t0;
	if ((rc = node_hand_flush(x->nd)) || (rc = node_links_take_orders(x->nd)))
		return rc;
	if ((rc = apply_step6(x, o)))             /* step 6 */
		return rc;
	x->nd->stats.last_loss = loss;
	if ((rc = push_dense_grads(x, o)))
		return rc;
	lap(x, NODE_CPU_ENCODE);
	if ((rc = flush_and_checkpoint(x, o)))
		return rc;
	lap(x, NODE_CPU_NET);
	node_rate_est_check(x->nd, o->iter);
	node_fit_observe(x->nd, o, train_ns);
	return 0;
}

/* Whether every shard link tags its frames in place: a keyed link's
 * frames given in pieces are then copied once, the tag's hash on the way
 * (esd_link_sendv). */
static bool links_tag_in_place(const struct node *nd)
{
	for (uint32_t s = 0; s < nd->job.shards; s++)
		if (!esd_link_can_tag_in_place(nd->links.link[s]))
			return false;
	return nd->job.shards > 0;
}

/* ps.zero_copy: whether rows go from the cache in place (auto: over rdma,
 * and over keyed links that tag in place, where the tag's pass is the one
 * copy), and the cache's pages registered for the links that send from
 * them (once per process: the cache outlives the links). */
static int zero_copy_setup(struct exec *x)
{
	struct node *nd = x->nd;
	enum esd_job_zero_copy z = nd->job.zero_copy;
	x->zero_copy = z == ESD_JOB_ZC_ON ||
		       (z == ESD_JOB_ZC_AUTO &&
			(!strcmp(nd->job.backend, "rdma") || links_tag_in_place(nd)));
	if (!x->zero_copy)
		return 0;
	size_t len;
	void *base = esd_cache_map(nd->cache, &len);
	int rc = esd_transport_register_memory(base, len);
	if (rc && rc != -EEXIST) {
		ESD_ERR("node", "ps.zero_copy: the cache's %zu bytes cannot be registered: %s",
			len, esd_strerror(rc));
		return rc;
	}
	const struct esd_link *l0 = nd->links.link[0];
	ESD_INFO("node", "ps.zero_copy: rows go from the cache's pages in place (%s links%s)",
		 nd->job.backend,
		 !l0 || esd_link_zero_copy(l0) ? ""
		 : esd_link_can_tag_in_place(l0)
			 ? ": copied once, as their frames' tags are hashed"
			 : ": this link copies them (job key, reliable layer or faults)");
	return 0;
}

/* Iteration iter (started at t0) is done: its time and CPU go to the
 * figures esdctl and the summary show. */
static void count_iteration(struct exec *x, uint64_t iter, int64_t t0)
{
	struct node *nd = x->nd;
	lap(x, NODE_CPU_OTHER);
	pthread_mutex_lock(&nd->qmu);
	nd->stats.iter_done = iter;
	nd->stats.iter_ns_sum += esd_now_ns() - t0;
	for (int p = 0; p < NODE_CPU_NPHASES; p++) {
		nd->stats.cpu_ns[p] += x->cpu[p];
		x->cpu[p] = 0;
	}
	pthread_mutex_unlock(&nd->qmu);
}

int node_run(struct node *nd, uint64_t start)
{
	struct exec x = {.nd = nd};
	int rc = 0;
	struct order *o;

	for (uint32_t s = 0; s < ESD_JOB_MAX_SHARDS; s++) {
		esd_buf_init(&x.sb[s].b);
		esd_gather_init(&x.sb[s].g);
	}
	if ((rc = zero_copy_setup(&x)))
		return rc;
	x.dense_rows = (uint32_t)((nd->dense_params + nd->job.dim - 1) / nd->job.dim);
	x.dense_chunk = calloc(nd->job.dim, sizeof(float));
	if (!x.dense_chunk)
		return -ENOMEM;
	nd->stats.t_start_ns = esd_now_ns();
	x.cpu_mark = esd_thread_cpu_ns();
	if (start >= nd->job.iterations) {
		ESD_INFO("node", "the shards' checkpoint is the job's last iteration %llu: "
			 "nothing left to train", (unsigned long long)start);
		nd->stats.iter_done = start;
		node_trainer_dismiss(nd, 30 * ESD_NS_PER_S);
	} else if (start && (rc = node_resume_job(&x, start))) {
		ESD_ERR("node", "cannot resume the job after iteration %llu: %s",
			(unsigned long long)start, esd_strerror(rc));
	}
	while (!rc && !esd_node_signal && nd->stats.iter_done < node_last_iter(nd) &&
	       (o = node_order_next(nd))) {
		int64_t t0 = esd_now_ns();
		rc = run_iteration(&x, o);
		node_order_done(nd);
		if (node_is_link_failure(rc) && !node_shards_restart(nd))
			node_links_name_broken(nd);
		else if (node_is_link_failure(rc)) {
			uint64_t resume = 0;
			rc = node_recover(&x, &resume);
			if (!rc) {
				pthread_mutex_lock(&nd->qmu);
				nd->stats.iter_done = resume;
				pthread_mutex_unlock(&nd->qmu);
				continue;
			}
		}
		if (rc) {
			ESD_ERR("node", "iteration %llu failed: %s", (unsigned long long)o->iter,
				esd_strerror(rc));
			break;
		}
		count_iteration(&x, o->iter, t0);
		if (o->iter == nd->job.warmup && nd->summary_path)
			node_mark_warmup(nd);
		if (o->iter >= node_last_iter(nd))
			break;
	}
	const uint64_t last = node_last_iter(nd);
	if (!rc && nd->stats.iter_done < last)
		rc = esd_node_signal ? -EINTR
		     : nd->dq.rc && nd->dq.rc != -ESHUTDOWN ? nd->dq.rc : -ECANCELED;
	if (!rc) {
		/* a last barrier makes the shards apply the last gradients (and
		 * write the final checkpoint, or the stop's) */
		struct order fin = {.iter = last + 1, .final = true};
		rc = node_barrier(&x, &fin);
		if (rc)
			ESD_ERR("node", "final barrier failed: %s", esd_strerror(rc));
	}
	for (uint32_t s = 0; s < ESD_JOB_MAX_SHARDS; s++) {
		esd_buf_free(&x.sb[s].b);
		esd_gather_free(&x.sb[s].g);
		free(x.pull_keys[s]);
	}
	free(x.pulls);
	free(x.evicts);
	free(x.fill_slots);
	free(x.dirty_evicts);
	free(x.sample_slots);
	free(x.dense_chunk);
	return rc;
}
