/*
 * A PS shard serving node daemons: the links, one thread each, their
 * admission and their frames (HELLO, PUSH, BARRIER, PULL, ROLLBACK, the
 * nodes' reports); the barrier's release is barrier.c, the rows store.c,
 * the dense table dense.c. See ps.h and docs/runtime.md for the protocol;
 * the invariant kept here is "every push for t is applied before any pull
 * for t is answered".
 */
#include "ps.h"

#include <esd/ckpt.h>
#include <esd/clock.h>
#include <esd/err.h>
#include <esd/log.h>
#include <esd/model.h>
#include <esd/proto.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#define RECV_POLL_NS (200 * ESD_NS_PER_MS)
/* A worker that shard 0 relays the decider's orders to: its link thread
 * looks for orders kept this often while the worker sends nothing (after
 * each of its frames it looks anyway). */
#define RELAY_POLL_NS (5 * ESD_NS_PER_MS)
/* A link must say HELLO this soon after it was accepted, and at most this
 * many links may be waiting to: a client that connects and says nothing
 * takes neither a worker's slot nor a file descriptor for long. Of those,
 * a source address may hold at most MAX_NEW_PER_SOURCE whose peer has not
 * proved the job key; a newer link from it ends its oldest, and a link
 * that finds every place taken ends the oldest unproven one of the source
 * holding the most: a stranger cannot keep a member out. */
#define HELLO_DEADLINE_NS  (5 * ESD_NS_PER_S)
#define MAX_NEW_LINKS      16
#define MAX_NEW_PER_SOURCE 4
/* A pull's answer goes in PULL_RESP frames of about this many bytes at
 * most: on a keyed link each frame is tagged, sent and checked on its
 * own, so the peer checks one while the next is tagged and sent rather
 * than waiting for the whole answer. */
#define PULL_FRAME_BYTES (256u << 10)
/* Most bytes of a pull answer held before they are sent. */
#define PULL_HOLD_BYTES (1u << 20)

static bool is_dense(uint64_t key)
{
	return esd_key_table(key) == ESD_DENSE_TABLE;
}

void ps_fail_locked(struct ps *ps, int code, const char *fmt, ...)
{
	if (!ps->bar.failed) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(ps->bar.fail_msg, sizeof(ps->bar.fail_msg), fmt, ap);
		va_end(ap);
		ps->bar.failed = code ? code : -EIO;
		ESD_ERR("ps", "job failed: %s", ps->bar.fail_msg);
	}
	pthread_cond_broadcast(&ps->cv);
}

void ps_ask_stop_locked(struct ps *ps, const char *why)
{
	if (ps->stop.asked)
		return;
	ps->stop.asked = true;
	if (ps->shard == 0)
		ps->stop.requested = true;
	ESD_INFO("ps", "%s: the job stops gracefully at the next checkpoint boundary%s", why,
		 ps->job.checkpoint_dir[0] ? ""
					   : " (no ps.checkpoint_dir: nothing to resume from)");
}

int ps_init(struct ps *ps, const struct esd_job *job, uint32_t shard, uint32_t tables,
	    uint32_t dense)
{
	memset(ps, 0, sizeof(*ps));
	ps->job = *job;
	ps->shard = shard;
	ps->tables = tables;
	ps->dense = dense;
	ps->job_token = job->derived.token;
	ps->barrier_timeout_ns = job->barrier_timeout_s * ESD_NS_PER_S;
	pthread_mutex_init(&ps->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&ps->cv, &ca);
	pthread_condattr_destroy(&ca);
	ps_relay_init(ps);
	int rc = ps_store_create_job(job, shard, &ps->st);
	if (rc)
		return rc;
	if (shard == 0 && tables > 0)
		rc = ps_dense_init(ps);
	return rc;
}

void ps_fini(struct ps *ps)
{
	ps_store_free(ps->st);
	ps_dense_free(ps);
	for (uint32_t w = 0; w < ESD_MAX_WORKERS; w++)
		free(ps->report[w].reply);
	ps_relay_fini(ps);
	pthread_mutex_destroy(&ps->mu);
	pthread_cond_destroy(&ps->cv);
}

void ps_checkpoint_path(const struct ps *ps, char *buf, size_t len)
{
	snprintf(buf, len, "%s/ps-shard%u.ckpt", ps->job.checkpoint_dir, ps->shard);
}

void ps_checkpoint_prev_path(const struct ps *ps, char *buf, size_t len)
{
	snprintf(buf, len, "%s/ps-shard%u.prev.ckpt", ps->job.checkpoint_dir, ps->shard);
}

/* ---- the link threads ------------------------------------------------- */

static int send_buf(struct ps_link *pl, struct esd_buf *b)
{
	const int64_t c0 = esd_thread_cpu_ns();
	int rc = b->len ? esd_link_send(pl->link, b->data, b->len) : 0;
	esd_buf_reset(b);
	pl->send_cpu_ns += esd_thread_cpu_ns() - c0;
	return rc;
}

/* send_buf for a buffer whose frames were tagged in place. */
static int send_tagged(struct ps_link *pl, struct esd_buf *b)
{
	const int64_t c0 = esd_thread_cpu_ns();
	int rc = esd_link_send_tagged(pl->link, b);
	esd_buf_reset(b);
	pl->send_cpu_ns += esd_thread_cpu_ns() - c0;
	return rc;
}

/* A pull answer's frames: tagged in place where they were encoded so
 * (tag), else sealed or sent as the link does. */
static int send_answer(struct ps_link *pl, struct esd_buf *b, bool tag)
{
	return tag ? send_tagged(pl, b) : send_buf(pl, b);
}

/* Why the HELLO h cannot attach (for this shard's log only), or "". The
 * token comes first: a HELLO without it is told nothing of this job, and
 * its other fields are not looked at (but a wrong token caused by another
 * data.stream is named as such, here). */
static int hello_problem(struct ps *ps, const struct esd_hello *h, char *why, size_t len)
{
	size_t sd = esd_optim_state_len(ps->job.optim.opt, ps->job.dim);
	why[0] = 0;
	if (h->job_token != ps->job_token) {
		if (h->proto_version != ESD_PROTO_VERSION)
			snprintf(why, len, "protocol version %u, shard speaks %u",
				 h->proto_version, ESD_PROTO_VERSION);
		else if (h->stream_digest != ps->job.derived.stream_digest)
			snprintf(why, len, "worker %u's data.stream has digest %016llx, this "
				 "shard's %s has %016llx: every process must train on the same "
				 "file", h->worker, (unsigned long long)h->stream_digest,
				 ps->job.stream, (unsigned long long)ps->job.derived.stream_digest);
		else
			snprintf(why, len, "job token %#llx, this shard's is %#llx: job settings "
				 "differ from this shard's (compare the job files: workers, batch, "
				 "rates, model, cache, dispatch, shards)",
				 (unsigned long long)h->job_token, (unsigned long long)ps->job_token);
		return h->stream_digest != ps->job.derived.stream_digest ? -ESD_ESTREAM : -EPROTO;
	}
	if (h->proto_version != ESD_PROTO_VERSION)
		snprintf(why, len, "protocol version %u, shard speaks %u", h->proto_version,
			 ESD_PROTO_VERSION);
	else if (h->worker >= ps->job.n)
		snprintf(why, len, "worker %u, job has %u workers", h->worker, ps->job.n);
	else if (h->shard != ps->shard)
		snprintf(why, len, "client wants shard %u, this is shard %u", h->shard, ps->shard);
	else if (h->dim != ps->job.dim || h->state_dim != sd)
		snprintf(why, len, "row shape %u+%u, shard has %u+%zu", h->dim, h->state_dim,
			 ps->job.dim, sd);
	return -EPROTO;
}

/* What a refused HELLO is told: a member's link (it proved the job key)
 * the reason, minus the token; a keyless job's peer, who may be anyone,
 * nothing of the job (no path, digest or setting). */
static void refuse_hello(struct ps_link *pl, int code, const char *why)
{
	struct ps *ps = pl->ps;
	ESD_ERR("ps", "refusing %s: %s", esd_link_peer(pl->link), why);
	if (ps->job.key_file[0] && !strstr(why, "job token"))
		esd_link_send_error(pl->link, code, why);
	else if (ps->job.key_file[0])
		esd_link_send_error(pl->link, code, "job settings differ from this shard's "
						    "(compare the job files: workers, batch, rates, "
						    "model, cache, dispatch, shards)");
	else
		esd_link_send_error(pl->link, -EACCES, "refused: not this job");
}

/* Claim worker w's place for pl, unless a link of w is attached already
 * (a second HELLO for a rank: refused, naming both sources). */
static bool claim_worker(struct ps_link *pl, uint32_t w)
{
	struct ps *ps = pl->ps;
	pthread_mutex_lock(&ps->mu);
	bool taken = ps->bar.connected_mask >> w & 1;
	const char *holder = "";
	for (int i = 0; taken && i < ps->nlinks; i++)
		if (&ps->links[i] != pl && ps->links[i].used && ps->links[i].worker == (int)w &&
		    ps->links[i].link)
			holder = esd_link_peer(ps->links[i].link);
	if (taken)
		ESD_ERR("ps", "refusing %s: it says HELLO as worker %u, which is attached already "
			"(from %s)", esd_link_peer(pl->link), w, holder);
	else
		ps->bar.connected_mask |= UINT64_C(1) << w;
	pthread_mutex_unlock(&ps->mu);
	return !taken;
}

static int on_hello(struct ps_link *pl, const struct esd_hello *h, struct esd_buf *out)
{
	struct ps *ps = pl->ps;
	char why[1400];
	size_t sd = esd_optim_state_len(ps->job.optim.opt, ps->job.dim);

	int code = hello_problem(ps, h, why, sizeof(why));
	if (why[0]) {
		refuse_hello(pl, code, why);
		return -EPROTO;
	}
	if (pl->worker >= 0 || !claim_worker(pl, h->worker)) {
		esd_link_send_error(pl->link, -EACCES, ps->job.key_file[0]
							   ? "refused: this worker is attached already"
							   : "refused: not this job");
		return -EPROTO;
	}
	/* the worker's link is shaped both ways: its replies (miss pulls above
	 * all) at the worker's rate too (the model's, unless workers.link_rates
	 * or workers.estimate_rates keep the links apart from it), shared
	 * among the shards (ps_reply_rate) */
	esd_link_set_rate(pl->link, ps_reply_rate(ps, ps->job.derived.shape_follows_model
							   ? ps->job.rate_bps[h->worker]
							   : ps->job.link_bps[h->worker]));
	pthread_mutex_lock(&ps->mu);
	pl->worker = (int)h->worker;
	pl->epoch = ps->bar.epoch;
	pl->pushes = 0;
	esd_dedup_forget(&ps->bar.dedup, h->worker); /* a new link numbers from 1 */
	struct esd_ack ack = {.iteration = ps->bar.iter_done, .sequence = ps->bar.cursor,
			      .op = ESD_OP_HELLO, .status = ps->bar.failed};
	pthread_mutex_unlock(&ps->mu);
	struct esd_hello r = {.proto_version = ESD_PROTO_VERSION, .worker = ps->shard,
			      .job_token = ps->job_token, .shard = ps->shard, .dim = ps->job.dim,
			      .state_dim = (uint32_t)sd, .nworkers = ps->job.n,
			      .stream_digest = ps->job.derived.stream_digest};
	int rc = esd_enc_hello(out, &r, ESD_FLAG_REPLY);
	if (!rc)
		rc = esd_enc_ack(out, &ack);
	if (!rc)
		rc = send_buf(pl, out);
	ESD_INFO("ps", "worker %u attached from %s (shard at iteration %llu)", h->worker,
		 esd_link_peer(pl->link), (unsigned long long)ack.iteration);
	return rc;
}

/* The worker still works on a state this shard went back from: tell it
 * to resume from the checkpoint (it then asks back itself). */
static int send_rolled_back(struct ps_link *pl)
{
	char why[96];
	snprintf(why, sizeof(why), "the shard went back to checkpoint %llu: resume there",
		 (unsigned long long)pl->ps->bar.last_rollback);
	int rc = esd_link_send_error(pl->link, -ESD_EROLLBACK, why);
	return rc == -EPIPE || rc == -ECONNRESET ? rc : 0;
}

static int on_barrier(struct ps_link *pl, const struct esd_barrier *b, struct esd_buf *out)
{
	struct ps *ps = pl->ps;
	uint32_t w = (uint32_t)pl->worker;
	int rc;

	pthread_mutex_lock(&ps->mu);
	if (pl->epoch != ps->bar.epoch) {
		rc = -ESTALE;
	} else if (ps->bar.failed) {
		rc = ps->bar.failed;
	} else if (b->npushes != pl->pushes) {
		ps_fail_locked(ps, -EPROTO,
			       "worker %u: barrier %llu counts %u push frame(s) to this shard, it "
			       "received %u", w, (unsigned long long)b->iteration, b->npushes,
			       pl->pushes);
		rc = ps->bar.failed;
	} else if (b->iteration != ps->bar.iter_done + 1 || b->worker != w) {
		ps_fail_locked(ps, -EPROTO,
			       "worker %u sent barrier %llu as worker %u; shard expects %llu", w,
			       (unsigned long long)b->iteration, b->worker,
			       (unsigned long long)ps->bar.iter_done + 1);
		rc = ps->bar.failed;
	} else {
		pl->pushes = 0;
		if (!(ps->bar.arrived_mask & (UINT64_C(1) << w))) {
			ps->bar.arrived_mask |= UINT64_C(1) << w;
			ps->bar.arrived++;
			ps->bar.digest[w] = b->digest;
			ps->ckpt.flagged += b->checkpoint != 0;
			ps->bar.final += b->final != 0;
			if (b->stop && !ps->stop.asked) {
				char why[64];
				snprintf(why, sizeof(why), "worker %u asks for a stop", w);
				ps_ask_stop_locked(ps, why);
			}
		}
		if (ps->bar.arrived == ps->job.n)
			ps_complete_barrier_locked(ps, b->iteration);
		rc = ps_wait_released(ps, b->iteration);
	}
	const char *msg = ps->bar.fail_msg;
	uint64_t ckpt_at = ps->ckpt.at;
	/* shard 0: the stop is at ckpt_at; another shard: relay the request */
	bool stop = ps->shard == 0 ? ps->stop.at && ps->stop.at == ckpt_at : ps->stop.asked;
	/* a setting change scheduled at this release follows the ACK; else a
	 * command relayed to this worker (esdctl --worker) */
	bool setting = !rc && ps->live.pending && ps->live.at == b->iteration + 3;
	char key[sizeof(ps->live.key)], value[sizeof(ps->live.value)];
	uint64_t set_at = ps->live.at;
	if (setting) {
		memcpy(key, ps->live.key, sizeof(key));
		memcpy(value, ps->live.value, sizeof(value));
	} else if (!rc && ps->report[w].relay_pending) {
		setting = true;
		set_at = b->iteration;
		snprintf(key, sizeof(key), "node.request");
		memcpy(value, ps->report[w].request, sizeof(value));
		ps->report[w].relay_pending = false;
	}
	pthread_mutex_unlock(&ps->mu);
	if (rc == -ESTALE) /* rolled back (meanwhile) */
		return send_rolled_back(pl);
	if (rc && rc != -ESHUTDOWN)
		return esd_link_send_error(pl->link, rc, msg) ? rc : rc;
	/* sequence: a checkpoint boundary requested through esdctl (0: none) */
	struct esd_ack ack = {.iteration = b->iteration, .sequence = ckpt_at,
			      .op = ESD_OP_BARRIER, .status = rc, .setting = setting,
			      .stop = stop};
	rc = esd_enc_ack(out, &ack);
	if (!rc && setting)
		rc = esd_enc_setting(out, set_at, key, value);
	return rc ? rc : send_buf(pl, out);
}

static int on_pull(struct ps_link *pl, const struct esd_msg *m, struct esd_buf *out)
{
	struct ps *ps = pl->ps;
	const struct esd_pull *p = &m->u.pull;
	uint32_t dim = ps->job.dim, sd = (uint32_t)ps_store_state_len(ps->st);
	/* a pull of dense rows only goes without optimizer state: daemons
	 * never update the dense table, its state stays here */
	bool dense_only = p->count > 0;
	for (uint32_t i = 0; i < p->count && dense_only; i++)
		dense_only = is_dense(esd_msg_key(m, i));
	if (dense_only)
		sd = 0;
	size_t row_bytes = 16 + 4 * ((size_t)dim + sd);
	size_t max_body = ESD_PROTO_DEFAULT_MAX_BODY - 64;
	size_t budget = PULL_FRAME_BYTES > row_bytes ? PULL_FRAME_BYTES : row_bytes;
	uint32_t per_frame = (uint32_t)((budget < max_body ? budget : max_body) / row_bytes);
	/* on a keyed link the frames carry their tags where they are
	 * encoded: no sealed copy (esd_link_tag_in_place) */
	bool tag = esd_link_can_tag_in_place(pl->link);
	int rc;

	pthread_mutex_lock(&ps->mu);
	rc = pl->epoch != ps->bar.epoch ? -ESTALE : ps_wait_released(ps, p->iteration);
	if (rc) {
		pthread_mutex_unlock(&ps->mu);
		if (rc == -ESTALE)
			return send_rolled_back(pl);
		return rc == -ESHUTDOWN ? rc : esd_link_send_error(pl->link, rc, ps->bar.fail_msg);
	}
	for (uint32_t i = 0; i < p->count && !rc;) {
		uint32_t n = p->count - i < per_frame ? p->count - i : per_frame;
		struct esd_rows_enc e;
		struct esd_rows hdr = {.iteration = p->iteration, .sequence = p->request,
				       .worker = (uint32_t)pl->worker, .kind = p->kind,
				       .dim = dim, .state_dim = sd};
		if (ps->job.ntable_dims) { /* each row with its table's dim */
			hdr.table_dims = ps->job.table_dims;
			hdr.ntables = ps->job.ntable_dims;
		}
		rc = esd_enc_rows_begin(&e, out, ESD_OP_PULL_RESP, &hdr);
		for (uint32_t j = 0; j < n && !rc; j++) {
			esd_key_t key = esd_msg_key(m, i + j);
			float *v, *s;
			uint64_t clock;
			if (is_dense(key)) {
				rc = esd_enc_row_reserve(&e, key, ps->dtab.clock, &v, &s);
				if (!rc)
					rc = ps_dense_read_locked(ps, key, v, s);
				continue;
			}
			struct ps_row *r = ps_store_get(ps->st, key);
			if (!r) {
				rc = -ENOMEM;
				break;
			}
			clock = r->clock;
			rc = esd_enc_row(&e, key, clock, r->data, sd ? r->data + dim : NULL);
		}
		if (!rc)
			rc = esd_enc_rows_end(&e);
		if (!rc && tag)
			rc = esd_link_tag_in_place(pl->link, out, e.start);
		ps->stats.pulled_rows += n;
		i += n;
		/* a large answer goes out as it is built, so the shard never
		 * holds one whole (daemons read their shards' answers in shard
		 * order, so a send blocked here waits on nothing this lock
		 * holds back) */
		if (!rc && out->len >= PULL_HOLD_BYTES && i < p->count)
			rc = send_answer(pl, out, tag);
	}
	pthread_mutex_unlock(&ps->mu);
	if (rc) {
		esd_buf_reset(out);
		return esd_link_send_error(pl->link, rc, "pull failed at the shard");
	}
	return send_answer(pl, out, tag);
}

static int on_push(struct ps_link *pl, const struct esd_msg *m)
{
	struct ps *ps = pl->ps;
	const struct esd_rows *r = &m->u.rows;
	uint32_t w = (uint32_t)pl->worker;
	int rc = 0;

	if (r->worker != w || r->dim != ps->job.dim ||
	    (m->hdr.op == ESD_OP_PUSH_VALUE && r->state_dim != ps_store_state_len(ps->st))) {
		esd_link_send_error(pl->link, -EPROTO, "push: worker or row shape mismatch");
		return -EPROTO;
	}
	/* rows of a table of a smaller dim are padded here (model.dims) */
	float *row = NULL;
	if (r->table_dims && r->count) {
		row = malloc(((size_t)r->dim + r->state_dim) * sizeof(float));
		if (!row) {
			esd_link_send_error(pl->link, -ENOMEM, "push: out of memory");
			return -ENOMEM;
		}
	}
	pthread_mutex_lock(&ps->mu);
	/* a push of a state the shard went back from is not applied (its
	 * sequence is used up all the same) */
	if (pl->epoch != ps->bar.epoch) {
		esd_dedup_applied(&ps->bar.dedup, w, r->sequence);
		pthread_mutex_unlock(&ps->mu);
		free(row);
		return 0;
	}
	/* the next sequence or an error: nothing is dropped silently */
	int order = esd_dedup_check(&ps->bar.dedup, w, r->sequence);
	if (order) {
		ps_fail_locked(ps, -EPROTO, "worker %u: push sequence %llu after %llu (%s)", w,
			       (unsigned long long)r->sequence,
			       (unsigned long long)ps->bar.dedup.last[w],
			       order > 0 ? "a push sent twice" : "pushes lost");
		rc = ps->bar.failed;
		goto out;
	}
	if (m->hdr.op == ESD_OP_PUSH_GRAD && r->iteration != ps->bar.iter_done) {
		ps_fail_locked(ps, -EPROTO,
			       "worker %u pushed gradients of iteration %llu during iteration %llu",
			       w, (unsigned long long)r->iteration,
			       (unsigned long long)ps->bar.iter_done);
		rc = ps->bar.failed;
		goto out;
	}
	const uint8_t *at = r->data;
	for (uint32_t i = 0; i < r->count && !rc; i++) {
		struct esd_row_view v;
		at = esd_rows_next(r, at, &v);
		if (v.dim < r->dim && !is_dense(v.key)) { /* back to the store's shape */
			esd_row_view_unpack(&v, r->dim, r->state_dim, row, row + r->dim);
			v.value = row;
			v.state = v.state ? row + r->dim : NULL;
		}
		if (m->hdr.op == ESD_OP_PUSH_VALUE) {
			if (is_dense(v.key))
				rc = -EPROTO;
			else
				rc = ps_store_put_value(ps->st, v.key, v.clock, v.value, v.state);
			ps->stats.value_rows++;
		} else if (is_dense(v.key)) {
			rc = ps_dense_stage_locked(ps, w, v.key, v.value);
		} else {
			rc = ps_store_stage_grad(ps->st, w, v.key, v.value);
			ps->stats.grad_rows++;
		}
	}
	if (rc)
		ps_fail_locked(ps, rc, "worker %u: applying a %s frame failed: %s", w,
			       esd_op_name(m->hdr.op), esd_strerror(rc));
	else {
		esd_dedup_applied(&ps->bar.dedup, w, r->sequence);
		pl->pushes++;
	}
out:
	pthread_mutex_unlock(&ps->mu);
	free(row);
	return rc;
}

/* A worker asks this shard back to checkpoint c because another shard
 * restarted from it. Every worker asks; the first one's request reloads,
 * the others find the shard there already (no barrier released since). */
static int on_rollback(struct ps_link *pl, const struct esd_rollback *r, struct esd_buf *out)
{
	struct ps *ps = pl->ps;
	uint64_t newest = 0;
	int rc = 0;
	pthread_mutex_lock(&ps->mu);
	if (!ps->job.checkpoint_dir[0])
		rc = -ENOTSUP;
	else if (ps->bar.failed)
		rc = ps->bar.failed;
	else if (!(ps->bar.rolled_to == r->iteration && ps->bar.iter_done == r->iteration))
		rc = ps_rollback_locked(ps, r->iteration, &newest);
	if (!rc) {
		pl->epoch = ps->bar.epoch;
		pl->pushes = 0;
	}
	pthread_cond_broadcast(&ps->cv);
	pthread_mutex_unlock(&ps->mu);
	if (rc && rc != -ESTALE)
		return esd_link_send_error(pl->link, rc, "cannot go back to the checkpoint") ? rc : rc;
	struct esd_ack ack = {.iteration = r->iteration, .sequence = newest,
			      .op = ESD_OP_ROLLBACK, .status = rc};
	rc = esd_enc_ack(out, &ack);
	return rc ? rc : send_buf(pl, out);
}

/* The job failed: tell this link's worker even when it waits for nothing
 * from the shard (a node whose trainer is gone, say), so that every
 * process ends, naming the cause. */
static void tell_failure(struct ps_link *pl)
{
	struct ps *ps = pl->ps;
	char msg[sizeof(ps->bar.fail_msg)];
	pthread_mutex_lock(&ps->mu);
	int code = ps->bar.failed;
	bool tell = code && pl->worker >= 0 && !pl->told_failure;
	if (tell) {
		memcpy(msg, ps->bar.fail_msg, sizeof(msg));
		pl->told_failure = true;
	}
	pthread_mutex_unlock(&ps->mu);
	if (tell)
		esd_link_send_error(pl->link, code, msg);
}

/* A receive error that is the peer's malformed frame (not its going
 * away): it gets an ERROR frame naming what was wrong. */
static bool is_bad_frame(int rc)
{
	return rc != -ECONNRESET && rc != -EPIPE && rc != -ETIMEDOUT && rc != -ECONNABORTED &&
	       rc != -ESHUTDOWN;
}

/* One frame of the link's worker, by op; 0, or why the link ends. */
static int handle_frame(struct ps_link *pl, const struct esd_msg *m, struct esd_buf *out)
{
	if (m->hdr.op != ESD_OP_HELLO && pl->worker < 0) {
		esd_link_send_error(pl->link, -EPROTO, "first frame must be HELLO");
		return -EPROTO;
	}
	switch (m->hdr.op) {
	case ESD_OP_HELLO:
		return on_hello(pl, &m->u.hello, out);
	case ESD_OP_PULL:
		return on_pull(pl, m, out);
	case ESD_OP_PUSH_VALUE:
	case ESD_OP_PUSH_GRAD:
		return on_push(pl, m);
	case ESD_OP_BARRIER:
		return on_barrier(pl, &m->u.barrier, out);
	case ESD_OP_SETTING:
		return ps_on_setting(pl, &m->u.setting);
	case ESD_OP_ROLLBACK:
		return on_rollback(pl, &m->u.rollback, out);
	case ESD_OP_ORDER:
		return ps_on_order(pl, &m->u.order);
	case ESD_OP_ERROR: /* the worker fails the job (its trainer failed, say): its words */
		ESD_ERR("ps", "worker %d reports: %.*s", pl->worker, (int)m->u.error.len,
			m->u.error.text);
		pthread_mutex_lock(&pl->ps->mu);
		ps_fail_locked(pl->ps, -ESD_EJOBFAILED, "worker %d failed the job: %.*s", pl->worker,
			       (int)m->u.error.len, m->u.error.text);
		pthread_mutex_unlock(&pl->ps->mu);
		return -ECONNABORTED;
	default:
		esd_link_send_error(pl->link, -EPROTO, "unexpected op at a PS shard");
		return -EPROTO;
	}
}

/* The link ends with rc, from its receive (received) or from answering a
 * frame: the worker finished, or went away (the job fails), or sent a bad
 * frame (an ERROR first). A worker whose last ACK met its close (its
 * goodbye can reach a dpdk link's send) has finished all the same. */
static void on_link_end(struct ps_link *pl, int rc, bool received)
{
	struct ps *ps = pl->ps;
	/* the protocol: an ERROR, then the close (a silent peer is told why
	 * too, in case only its frames to us are lost) */
	if (received && (is_bad_frame(rc) || rc == -ETIMEDOUT))
		esd_link_send_error(pl->link, rc, esd_link_last_error(pl->link));
	pthread_mutex_lock(&ps->mu);
	if (pl->worker >= 0 && (ps->bar.iter_done > ps->job.iterations || ps->bar.ended)) {
		ESD_INFO("ps", "worker %d finished", pl->worker);
		ps->bar.finished++;
	} else if (!ps->bar.stopping && pl->worker >= 0) {
		ps_fail_locked(ps, -ECONNRESET,
			       "worker %d went away during iteration %llu (its link from %s: %s): "
			       "stop the job and start it again to resume from the last checkpoint",
			       pl->worker, (unsigned long long)ps->bar.iter_done + 1,
			       esd_link_peer(pl->link),
			       rc == -ECONNRESET && !*esd_link_last_error(pl->link)
				       ? "closed"
				       : esd_link_last_error(pl->link));
	}
	pthread_mutex_unlock(&ps->mu);
}

/* Whether an idle link is past the HELLO deadline (then closed). */
static bool hello_overdue(struct ps_link *pl)
{
	if (pl->worker >= 0 || esd_now_ns() - pl->since_ns <= HELLO_DEADLINE_NS)
		return false;
	ESD_WARN("ps", "%s said no HELLO within %d s: closed", esd_link_peer(pl->link),
		 (int)(HELLO_DEADLINE_NS / ESD_NS_PER_S));
	esd_link_send_error(pl->link, -ETIMEDOUT, "no HELLO in time");
	return true;
}

/* The CPU counters' phase of a frame's answer. */
static enum ps_cpu_phase cpu_phase_of(uint8_t op)
{
	switch (op) {
	case ESD_OP_PULL:
		return PS_CPU_PULL;
	case ESD_OP_PUSH_VALUE:
	case ESD_OP_PUSH_GRAD:
		return PS_CPU_PUSH;
	case ESD_OP_BARRIER:
		return PS_CPU_BARRIER;
	default:
		return PS_CPU_OTHER;
	}
}

/* The thread's CPU since *mark goes to phase p, less the sends within it
 * (pl->send_cpu_ns, taken to PS_CPU_SEND). */
static void cpu_lap(struct ps_link *pl, int64_t *mark, enum ps_cpu_phase p)
{
	const int64_t now = esd_thread_cpu_ns(), send = pl->send_cpu_ns;
	struct ps_cpu *c = &pl->ps->cpu;
	atomic_fetch_add_explicit(&c->ns[p], now - *mark - send, memory_order_relaxed);
	atomic_fetch_add_explicit(&c->ns[PS_CPU_SEND], send, memory_order_relaxed);
	pl->send_cpu_ns = 0;
	*mark = now;
}

static void *link_main(void *arg)
{
	prctl(PR_SET_NAME, "esd-ps-link", 0, 0, 0);
	struct ps_link *pl = arg;
	struct ps *ps = pl->ps;
	struct esd_buf out, relayed; /* answers; the decider's orders relayed */
	struct esd_msg m;

	esd_buf_init(&out);
	esd_buf_init(&relayed);
	int64_t mark = esd_thread_cpu_ns();
	for (;;) {
		int rc = esd_link_recv(pl->link, &m, ps_relays(pl) ? RELAY_POLL_NS : RECV_POLL_NS);
		cpu_lap(pl, &mark, PS_CPU_RECV);
		/* (a timeout that broke the link: the worker fell silent) */
		if (rc == -ETIMEDOUT && !esd_link_broken(pl->link)) {
			if (__atomic_load_n(&ps->bar.stopping, __ATOMIC_RELAXED) || hello_overdue(pl))
				break;
			tell_failure(pl);
			ps_relay_flush(pl, &relayed); /* a link that broke: its receive says so */
			cpu_lap(pl, &mark, PS_CPU_SEND);
			continue;
		}
		if (rc) {
			on_link_end(pl, rc, true);
			break;
		}
		rc = handle_frame(pl, &m, &out);
		if (!rc)
			ps_relay_flush(pl, &relayed);
		cpu_lap(pl, &mark, cpu_phase_of(m.hdr.op));
		if (rc) {
			on_link_end(pl, rc, false);
			break;
		}
	}
	esd_buf_free(&out);
	esd_buf_free(&relayed);
	struct esd_link_stats lst;
	esd_link_stats(pl->link, &lst);
	atomic_fetch_add(&ps->cpu.auth_tx_closed_ns, (int64_t)lst.auth_tx_cpu_ns);
	atomic_fetch_add(&ps->cpu.auth_rx_closed_ns, (int64_t)lst.auth_rx_cpu_ns);
	pthread_mutex_lock(&ps->mu);
	if (pl->worker >= 0)
		ps->bar.connected_mask &= ~(UINT64_C(1) << pl->worker);
	/* closed at once: the peer sees the end now, not at the next accept */
	esd_link_close(pl->link);
	pl->link = NULL;
	pl->done = true;
	pthread_mutex_unlock(&ps->mu);
	return NULL;
}

/* The source address of a link's peer: its description without the port. */
static void source_of(struct esd_link *l, char *out, size_t len)
{
	const char *peer = esd_link_peer(l);
	const char *colon = strrchr(peer, ':');
	size_t n = colon ? (size_t)(colon - peer) : strlen(peer);
	snprintf(out, len, "%.*s", (int)n, peer);
}

/* A link still waiting for HELLO whose peer has not proved the job key
 * (under mu). */
static bool unproven(const struct ps_link *pl)
{
	return pl->used && !pl->done && !pl->evicted && pl->worker < 0 && pl->link &&
	       !esd_link_proven(pl->link);
}

/* Unproven links of source (under mu). */
static int source_count(const struct ps *ps, const char *source)
{
	int n = 0;
	for (int i = 0; i < ps->nlinks; i++)
		n += unproven(&ps->links[i]) && !strcmp(ps->links[i].source, source);
	return n;
}

/* The oldest unproven link of source, or of the source holding the most
 * of them (source NULL); NULL when there is none. Under mu. */
static struct ps_link *eviction_victim(struct ps *ps, const char *source)
{
	struct ps_link *v = NULL;
	int most = 0;
	for (int i = 0; i < ps->nlinks; i++) {
		struct ps_link *pl = &ps->links[i];
		if (!unproven(pl) || (source && strcmp(pl->source, source)))
			continue;
		int n = source ? 1 : source_count(ps, pl->source);
		if (n > most || (n == most && v && pl->since_ns < v->since_ns)) {
			v = pl;
			most = n;
		}
	}
	return v;
}

/* End an unproven link to make room (under mu): its thread sees the end
 * at once and frees the slot. */
static void evict(struct ps *ps, struct ps_link *v, const char *why)
{
	static int64_t last_log;
	static unsigned quiet;
	int64_t now = esd_now_ns();
	v->evicted = true;
	esd_link_abort(v->link);
	if (now - last_log < ESD_NS_PER_S) {
		quiet++;
		return;
	}
	ESD_WARN("ps", "shard %u: ended a link from %s that had not proved the job key (%s; "
		 "%u more since the last such line)", (unsigned)ps->shard, v->source, why, quiet);
	last_log = now;
	quiet = 0;
}

/* Join the threads that ended; the links waiting for HELLO (under mu). */
static int reap_links(struct ps *ps)
{
	int waiting = 0;
	for (int i = 0; i < ps->nlinks; i++) {
		struct ps_link *pl = &ps->links[i];
		if (pl->used && pl->done) { /* its thread closed its link and ended */
			pthread_join(pl->thread, NULL);
			pl->used = false;
		}
		waiting += pl->used && !pl->done && !pl->evicted && pl->worker < 0;
	}
	return waiting;
}

/* Room for a new link from source among those waiting for HELLO (under
 * mu): the per-source and the total limit, each making room by ending the
 * oldest unproven link where it must. Whether there is room. */
static bool make_room(struct ps *ps, const char *source, int waiting)
{
	struct ps_link *v;
	if (source_count(ps, source) >= MAX_NEW_PER_SOURCE) {
		if (!(v = eviction_victim(ps, source)))
			return false;
		evict(ps, v, "too many from one address");
		waiting--;
	}
	if (waiting < MAX_NEW_LINKS)
		return true;
	if (!(v = eviction_victim(ps, NULL)))
		return false;
	evict(ps, v, "every place for a new link taken");
	return true;
}

int ps_serve_link(struct ps *ps, struct esd_link *l)
{
	char source[64];
	source_of(l, source, sizeof(source));
	pthread_mutex_lock(&ps->mu);
	int slot = -1;
	bool room = make_room(ps, source, reap_links(ps));
	for (int i = 0; i < ps->nlinks && slot < 0; i++)
		if (!ps->links[i].used)
			slot = i;
	if (slot < 0 && ps->nlinks < (int)(sizeof(ps->links) / sizeof(ps->links[0])))
		slot = ps->nlinks++;
	if (slot >= 0 && room) {
		struct ps_link *pl = &ps->links[slot];
		memset(pl, 0, sizeof(*pl));
		pl->ps = ps;
		pl->link = l;
		pl->worker = -1;
		pl->since_ns = esd_now_ns();
		memcpy(pl->source, source, sizeof(pl->source));
		pl->used = true;
	}
	pthread_mutex_unlock(&ps->mu);
	if (slot < 0 || !room) {
		esd_link_send_error(l, -EAGAIN, slot < 0 ? "too many links at this shard"
							 : "too many links waiting to say HELLO");
		esd_link_close(l);
		return -EMFILE;
	}
	struct ps_link *pl = &ps->links[slot];
	int rc = -pthread_create(&pl->thread, NULL, link_main, pl);
	if (rc) {
		pthread_mutex_lock(&ps->mu);
		esd_link_close(l);
		pl->link = NULL;
		pl->used = false;
		pthread_mutex_unlock(&ps->mu);
	}
	return rc;
}
