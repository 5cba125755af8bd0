/*
 * One decider (docs/design.md §5, One decider): node 0's dispatcher thread
 * decides every iteration for the whole job and hands each other node its
 * part, an ORDER frame that shard 0 relays; on the other nodes the
 * dispatcher thread turns each ORDER into the work order its own decision
 * would have been: the same samples, needed keys, pushes, pulls and
 * evictions, bit for bit. The main thread receives the ORDER frames
 * (it is the one reader of shard 0's link) and keeps them in an inbox.
 */
#include "disp.h"
#include "node.h"

#include <esd/clock.h>
#include <esd/err.h>
#include <esd/log.h>

#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

_Static_assert(ESD_XFER_NKINDS == 4, "ORDER carries four rows-per-kind counts");

/* The consequence's lists an ORDER carries, in its order. */
static const enum esd_cq_kind order_lists[ESD_ORDER_NLISTS] = {
	ESD_CQ_UPDATE_VALUE, ESD_CQ_MISS_PULL, ESD_CQ_EVICT_PUSH};

/* ---- node 0: each other node's part of a decision ------------------------ */

static uint32_t order_flags(const struct order *o, bool ahead)
{
	return (o->checkpoint ? ESD_ORDER_CHECKPOINT : 0u) | (o->flush ? ESD_ORDER_FLUSH : 0u) |
	       (ahead ? ESD_ORDER_AHEAD : 0u) | (o->set_rate ? ESD_ORDER_RATE : 0u);
}

int node_disp_hand_out(struct disp *ds, const struct order *o, bool ahead)
{
	struct node *nd = ds->nd;
	const struct esd_conseq *cq = ds->eng.cq;
	uint64_t rates[ESD_MAX_WORKERS];
	pthread_mutex_lock(&nd->qmu);
	memcpy(rates, nd->job.rate_bps, sizeof(rates)); /* a live workers.rates, applied */
	pthread_mutex_unlock(&nd->qmu);
	int rc = 0;

	esd_buf_reset(&ds->hand.out);
	for (uint32_t w = 0; w < nd->job.n && !rc; w++) {
		if (w == nd->rank)
			continue;
		struct esd_order_msg m = {
			.iteration = o->iter, .digest = o->digest, .worker = w,
			.flags = order_flags(o, ahead), .policy = o->set_policy,
			.k = (uint32_t)ds->in.k, .rate_bps = o->set_rate ? rates[w] : 0,
		};
		const esd_key_t *lists[ESD_ORDER_NLISTS];
		for (int q = 0; q < ESD_ORDER_NLISTS; q++) {
			m.count[q] = esd_conseq_count(cq, order_lists[q], w);
			lists[q] = esd_conseq_keys(cq, order_lists[q], w);
		}
		for (int kd = 0; kd < ESD_CQ_KINDS; kd++)
			m.pred_rows[esd_cq_xfer_kind((enum esd_cq_kind)kd)] +=
				esd_conseq_count(cq, (enum esd_cq_kind)kd, w);
		node_disp_predict_bytes(&nd->job, cq, w, m.pred_bytes);
		rc = esd_enc_order(&ds->hand.out, &m, ds->in.assign, lists);
	}
	if (rc) {
		ESD_ERR("dispatch", "iteration %llu: the other nodes' orders: %s",
			(unsigned long long)o->iter, esd_strerror(rc));
		return rc;
	}
	/* the main thread sends them: it writes the links */
	pthread_mutex_lock(&nd->qmu);
	rc = esd_buf_reserve(&nd->dq.outbox, ds->hand.out.len);
	if (!rc) {
		memcpy(nd->dq.outbox.data + nd->dq.outbox.len, ds->hand.out.data, ds->hand.out.len);
		nd->dq.outbox.len += ds->hand.out.len;
	}
	pthread_mutex_unlock(&nd->qmu);
	const uint64_t one = 1;
	if (!rc && nd->dq.hand_fd >= 0 && write(nd->dq.hand_fd, &one, sizeof(one)) < 0)
		rc = 0; /* the counter is full: the main thread is due anyway */
	return rc;
}

int node_hand_flush(struct node *nd)
{
	if (!nd->dq.decider)
		return 0;
	pthread_mutex_lock(&nd->qmu);
	struct esd_buf t = nd->dq.outbox; /* swapped, not copied */
	nd->dq.outbox = nd->dq.sending;
	nd->dq.sending = t;
	struct esd_link *l = nd->links.link[0];
	pthread_mutex_unlock(&nd->qmu);
	uint64_t n;
	if (nd->dq.hand_fd >= 0 && read(nd->dq.hand_fd, &n, sizeof(n)) < 0)
		n = 0; /* nothing signalled: fine */
	if (!nd->dq.sending.len)
		return 0;
	int rc = esd_link_send(l, nd->dq.sending.data, nd->dq.sending.len);
	esd_buf_reset(&nd->dq.sending);
	if (rc)
		ESD_ERR("node", "handing the other nodes their orders through shard 0: %s (%s)",
			esd_strerror(rc), esd_link_last_error(l));
	return rc;
}

/* ---- the other nodes: the inbox --------------------------------------------- */

static void msg_free(struct follow_msg *f)
{
	if (!f)
		return;
	free(f->assign);
	for (int q = 0; q < ESD_ORDER_NLISTS; q++)
		free(f->lists[q]);
	free(f);
}

/* A copy of o's fields and lists, or NULL (no memory). */
static struct follow_msg *msg_copy(const struct esd_order_msg *o)
{
	struct follow_msg *f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	f->h = *o;
	f->h.assign = NULL;
	f->assign = malloc(((size_t)o->k + 1) * sizeof(uint32_t));
	bool ok = f->assign != NULL;
	for (uint32_t i = 0; ok && i < o->k; i++)
		f->assign[i] = o->assign[i];
	for (int q = 0; ok && q < ESD_ORDER_NLISTS; q++) {
		f->h.keys[q] = NULL;
		f->lists[q] = malloc(((size_t)o->count[q] + 1) * sizeof(esd_key_t));
		ok = f->lists[q] != NULL;
		for (uint32_t i = 0; ok && i < o->count[q]; i++)
			f->lists[q][i] = esd_order_key(o, q, i);
	}
	if (!ok) {
		msg_free(f);
		return NULL;
	}
	return f;
}

/* Why ORDER o cannot be this node's next one, or NULL. */
static const char *order_problem(const struct node *nd, const struct esd_order_msg *o,
				 uint64_t next, uint32_t held)
{
	if (!nd->dq.follower)
		return "this node decides itself";
	if (o->worker != nd->rank)
		return "it is another worker's";
	if (o->k != nd->job.derived.global_batch)
		return "its batch is not the job's global batch";
	if (o->iteration != next)
		return "it is not the next iteration";
	if (held >= FOLLOW_INBOX)
		return "too many orders are held already";
	for (uint32_t i = 0; i < o->k; i++)
		if (o->assign[i] >= nd->job.n)
			return "a sample goes to a worker the job does not have";
	return NULL;
}

int node_follow_take(struct node *nd, const struct esd_order_msg *o)
{
	pthread_mutex_lock(&nd->qmu);
	const uint64_t next = nd->dq.in_next;
	const uint32_t held = nd->dq.in_count;
	pthread_mutex_unlock(&nd->qmu);
	const char *why = order_problem(nd, o, next, held);
	if (why) {
		ESD_ERR("node", "shard 0 relayed an ORDER for worker %u, iteration %llu (expected "
			"iteration %llu): %s", o->worker, (unsigned long long)o->iteration,
			(unsigned long long)next, why);
		return -EPROTO;
	}
	struct follow_msg *f = msg_copy(o);
	if (!f)
		return -ENOMEM;
	pthread_mutex_lock(&nd->qmu);
	nd->dq.inbox[(nd->dq.in_head + nd->dq.in_count) % FOLLOW_INBOX] = f;
	nd->dq.in_count++;
	nd->dq.in_next++;
	pthread_cond_broadcast(&nd->qcv);
	pthread_mutex_unlock(&nd->qmu);
	return 0;
}

/* The oldest ORDER held, waiting for one; NULL when the thread must stop. */
static struct follow_msg *inbox_pop(struct node *nd)
{
	struct follow_msg *f = NULL;
	pthread_mutex_lock(&nd->qmu);
	while (!nd->dq.in_count && !nd->dq.stop)
		pthread_cond_wait(&nd->qcv, &nd->qmu);
	if (!nd->dq.stop) {
		f = nd->dq.inbox[nd->dq.in_head];
		nd->dq.inbox[nd->dq.in_head] = NULL;
		nd->dq.in_head = (nd->dq.in_head + 1) % FOLLOW_INBOX;
		nd->dq.in_count--;
	}
	pthread_mutex_unlock(&nd->qmu);
	return f;
}

void node_follow_drop(struct node *nd)
{
	pthread_mutex_lock(&nd->qmu);
	for (uint32_t i = 0; i < FOLLOW_INBOX; i++) {
		msg_free(nd->dq.inbox[i]);
		nd->dq.inbox[i] = NULL;
	}
	nd->dq.in_head = nd->dq.in_count = 0;
	pthread_mutex_unlock(&nd->qmu);
}

int node_follow_pump(struct node *nd, int64_t timeout_ns)
{
	struct esd_link *l = nd->links.link[0];
	struct esd_msg m;
	int rc = esd_link_recv(l, &m, timeout_ns);
	if (rc == -ETIMEDOUT && !esd_link_broken(l))
		return -ETIMEDOUT;
	if (rc) {
		ESD_ERR("node", "shard 0 (%s): %s %s", esd_link_peer(l), esd_strerror(rc),
			esd_link_last_error(l));
		return rc;
	}
	if (m.hdr.op == ESD_OP_ORDER)
		return node_follow_take(nd, &m.u.order);
	if (m.hdr.op == ESD_OP_ERROR) {
		ESD_ERR("node", "shard 0 reports: %.*s", (int)m.u.error.len, m.u.error.text);
		int code = m.u.error.code;
		return code == -ESD_EDIVERGED || code == -ESD_ESTREAM ? code : -ESD_EJOBFAILED;
	}
	ESD_ERR("node", "shard 0 sent %s while this node waited for its order",
		esd_op_name(m.hdr.op));
	return -EPROTO;
}

/* Wait on qcv for up to ns (the thread builds an order held). */
static void wait_cv_ns(struct node *nd, int64_t ns)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += ns % ESD_NS_PER_S;
	ts.tv_sec += ns / ESD_NS_PER_S + ts.tv_nsec / ESD_NS_PER_S;
	ts.tv_nsec %= ESD_NS_PER_S;
	pthread_cond_timedwait(&nd->qcv, &nd->qmu, &ts);
}

/* The main thread's wait for a following node's next order: it reads
 * shard 0's link while nothing is held, bounded by the barrier timeout. */
struct order *node_follow_order_next(struct node *nd)
{
	const int64_t bound = (int64_t)(nd->job.barrier_timeout_s + 10) * ESD_NS_PER_S;
	const int64_t deadline = esd_now_ns() + bound;
	struct order *o = NULL;
	pthread_mutex_lock(&nd->qmu);
	for (;;) {
		if (nd->dq.produced > nd->dq.consumed) {
			o = &nd->dq.ring[(nd->dq.consumed + 1) % ORDER_RING];
			break;
		}
		if (nd->dq.rc)
			break;
		if (esd_now_ns() > deadline) {
			ESD_ERR("node", "no order for iteration %llu from node 0, the decider, within "
				"%lld s: it is stuck, or its link to shard 0 holds its frames back",
				(unsigned long long)nd->dq.consumed + 1,
				(long long)(bound / ESD_NS_PER_S));
			nd->dq.rc = -ETIMEDOUT;
			break;
		}
		if (nd->dq.in_count) { /* the thread is at it */
			wait_cv_ns(nd, 20 * ESD_NS_PER_MS);
			continue;
		}
		pthread_mutex_unlock(&nd->qmu);
		int rc = node_follow_pump(nd, 20 * ESD_NS_PER_MS);
		pthread_mutex_lock(&nd->qmu);
		if (rc && rc != -ETIMEDOUT && !nd->dq.rc)
			nd->dq.rc = rc;
	}
	pthread_mutex_unlock(&nd->qmu);
	return o;
}

/* ---- the other nodes: an ORDER into a work order ----------------------- */

/* S(x) of each unique key of batch b under the received assignment: the
 * workers whose samples hold it, every worker for a replicated row (what
 * the decider's consequence computed). */
static int need_masks(struct disp *ds, int b)
{
	struct node *nd = ds->nd;
	struct disp_hand *h = &ds->hand;
	const uint32_t *off = ds->in.off[b];
	struct esd_batch bt = {.k = (uint32_t)ds->in.k, .off = off, .keys = ds->in.keys[b]};
	int rc = esd_keytab_build(h->kt, &bt, nd->job.n);
	if (!rc && nd->nrep)
		rc = esd_keytab_replicate(h->kt, nd->rep, nd->nrep);
	if (rc)
		return rc;
	const uint32_t nu = esd_keytab_count(h->kt);
	if (nu + 1 > h->cap_mask) {
		uint64_t *m = realloc(h->mask, (nu + 1) * sizeof(uint64_t));
		if (!m)
			return -ENOMEM;
		h->mask = m;
		h->cap_mask = nu + 1;
	}
	memset(h->mask, 0, (size_t)nu * sizeof(uint64_t));
	const uint32_t *occ = esd_keytab_occ(h->kt);
	for (uint64_t i = 0; i < ds->in.k; i++) {
		const uint64_t bit = UINT64_C(1) << ds->in.assign[i];
		for (uint32_t p = off[i]; p < off[i + 1]; p++)
			h->mask[occ[p]] |= bit;
	}
	const uint64_t all = nd->job.n == 64 ? ~UINT64_C(0) : (UINT64_C(1) << nd->job.n) - 1;
	for (uint32_t r = 0; r < nd->nrep; r++) {
		int64_t u = esd_keytab_find(h->kt, nd->rep[r]);
		if (u >= 0)
			h->mask[u] = all;
	}
	return 0;
}

static int copy_keys(esd_key_t **dst, size_t *cap, uint32_t *n, const esd_key_t *src,
		     uint32_t count)
{
	if (node_disp_grow((void **)dst, cap, (size_t)count + 1, sizeof(esd_key_t)))
		return -ENOMEM;
	memcpy(*dst, src, (size_t)count * sizeof(esd_key_t));
	*n = count;
	return 0;
}

/* Work order o from ORDER f on batch b (the next batch in b ^ 1). */
static int follow_order(struct disp *ds, struct order *o, const struct follow_msg *f, int b)
{
	memcpy(ds->in.assign, f->assign, ds->in.k * sizeof(uint32_t));
	int rc = need_masks(ds, b);
	if (!rc)
		rc = node_disp_need_lists(ds, o, ds->hand.kt, ds->hand.mask);
	if (!rc)
		rc = node_disp_copy_samples(ds, o, b);
	esd_key_t **dst[ESD_ORDER_NLISTS] = {&o->upd, &o->pred_pull, &o->pred_evict};
	size_t *cap[ESD_ORDER_NLISTS] = {&o->cap_upd, &o->cap_pull, &o->cap_evict};
	uint32_t *cnt[ESD_ORDER_NLISTS] = {&o->nupd, &o->npred_pull, &o->npred_evict};
	for (int q = 0; q < ESD_ORDER_NLISTS && !rc; q++)
		rc = copy_keys(dst[q], cap[q], cnt[q], f->lists[q], f->h.count[q]);
	o->nahead = 0;
	if (!rc && (f->h.flags & ESD_ORDER_AHEAD)) {
		const uint32_t na = ds->in.off[b ^ 1][ds->in.k];
		rc = copy_keys(&o->ahead, &o->cap_ahead, &o->nahead, ds->in.keys[b ^ 1], na);
	}
	if (rc)
		return rc;
	memcpy(o->pred_rows, f->h.pred_rows, sizeof(o->pred_rows));
	memcpy(o->pred_bytes, f->h.pred_bytes, sizeof(o->pred_bytes));
	o->iter = f->h.iteration;
	o->digest = f->h.digest;
	o->checkpoint = f->h.flags & ESD_ORDER_CHECKPOINT;
	o->flush = f->h.flags & ESD_ORDER_FLUSH;
	o->set_policy = f->h.policy;
	o->set_rate = f->h.flags & ESD_ORDER_RATE;
	o->rate_bps = f->h.rate_bps;
	return 0;
}

/* The following node's dispatcher thread: per iteration the ORDER, the
 * batch read in step with the decider's, the work order built and
 * published, with its exits. */
void *node_follow_main(void *arg)
{
	prctl(PR_SET_NAME, "esd-follow", 0, 0, 0);
	struct disp *ds = arg;
	struct node *nd = ds->nd;
	int rc = 0, cur = 0;
	int64_t cpu_mark = esd_thread_cpu_ns();

	rc = node_disp_read_batch(ds, cur);
	for (uint64_t iter = ds->sv.start_iter + 1; !rc && iter <= nd->job.iterations; iter++) {
		struct follow_msg *f = inbox_pop(nd);
		if (!f)
			break;
		const int64_t t0 = esd_now_ns();
		node_follow_setting(ds, iter);
		/* the stream read as the decider reads it */
		if ((f->h.flags & ESD_ORDER_AHEAD) || iter < nd->job.iterations)
			rc = node_disp_read_batch(ds, cur ^ 1);
		if (!rc && !node_disp_wait_room(nd)) {
			msg_free(f);
			break;
		}
		struct order *o = &nd->dq.ring[iter % ORDER_RING];
		if (!rc)
			rc = follow_order(ds, o, f, cur);
		msg_free(f);
		if (rc) {
			ESD_ERR("dispatch", "iteration %llu: the decider's order: %s",
				(unsigned long long)iter, esd_strerror(rc));
			break;
		}
		if (iter == ds->diverge_at) /* tests: this node's digest disagrees */
			o->digest ^= 1;
		o->decide_ns = esd_now_ns() - t0;
		node_disp_publish(ds, &cpu_mark);
		cur ^= 1;
	}
	pthread_mutex_lock(&nd->qmu);
	if (!nd->dq.rc)
		nd->dq.rc = rc ? rc : -ESHUTDOWN;
	pthread_cond_broadcast(&nd->qcv);
	pthread_mutex_unlock(&nd->qmu);
	return NULL;
}
