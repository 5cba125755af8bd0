/*
 * The executor's barrier (step 2 of docs/design.md §3): what rides to
 * shard 0 ahead of BARRIER (a link rate, the fit's window, a relayed
 * command's reply, the node's status), the barrier to every shard and
 * their ACKs with what shard 0 announces (a checkpoint boundary, the
 * job's stop, a live setting); and the link rate estimate's report
 * (workers.estimate_rates) that the next barrier carries.
 */
#include "exec.h"
#include "node.h"

#include <esd/err.h>
#include <esd/log.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* esdctl set: the SETTING frame shard 0 sends after an ACK so flagged. */
static int recv_setting(struct exec *x, uint64_t iter)
{
	struct esd_msg m;
	int rc = node_exec_recv(x, 0, &m);
	if (rc)
		return rc;
	if (m.hdr.op != ESD_OP_SETTING) {
		ESD_ERR("node", "shard 0 announced a setting after barrier %llu, then sent %s",
			(unsigned long long)iter, esd_op_name(m.hdr.op));
		return -EPROTO;
	}
	return node_setting_announce(x->nd, iter, &m.u.setting);
}

/* A relayed command's reply to shard 0: SETTING frames "node.reply" of at
 * most ESD_PROTO_MAX_SETTING bytes, the last one "node.reply.end". */
static int send_reply(struct exec *x, uint64_t iter, const char *reply)
{
	char chunk[ESD_PROTO_MAX_SETTING + 1];
	size_t len = strlen(reply), off = 0;
	int rc = 0;
	do {
		size_t n = len - off > ESD_PROTO_MAX_SETTING ? ESD_PROTO_MAX_SETTING : len - off;
		memcpy(chunk, reply + off, n);
		chunk[n] = 0;
		off += n;
		rc = esd_enc_setting(&x->sb[0].b, iter, off == len ? "node.reply.end" : "node.reply",
				     chunk);
	} while (!rc && off < len);
	return rc;
}

static int barrier_ack(struct exec *x, const struct order *o, uint32_t s);

/* Step 2 (the first part of the executor to wait on other nodes). */
int node_barrier(struct exec *x, const struct order *o)
{
	struct node *nd = x->nd;
	struct esd_barrier br = {.iteration = o->iter, .digest = o->digest, .worker = nd->rank,
				 .checkpoint = nd->rec.flag_next_barrier, .final = o->final};
	nd->rec.flag_next_barrier = false;
	/* a link rate set on this node goes to shard 0 ahead of the barrier */
	pthread_mutex_lock(&nd->qmu);
	/* a stop asked here goes to shard 0 until it names the boundary */
	bool ask_stop = nd->stop.asked && !nd->stop.at;
	bool report = nd->live.rate_report;
	uint64_t rate = nd->live.rate_report_bps;
	nd->live.rate_report = false;
	pthread_mutex_unlock(&nd->qmu);
	if (report) {
		char v[32];
		snprintf(v, sizeof(v), "%llu", (unsigned long long)rate);
		int rc = esd_enc_setting(&x->sb[0].b, o->iter, "link.rate", v);
		if (rc)
			return rc;
	}
	/* workers.split = fit: the window that ended, for shard 0's fit */
	int frc = node_fit_report(nd, &x->sb[0].b, o->iter);
	if (frc)
		return frc;
	/* the reply to a command shard 0 relayed, in chunks */
	if (nd->relay.reply) {
		int rc = send_reply(x, o->iter, nd->relay.reply);
		free(nd->relay.reply);
		nd->relay.reply = NULL;
		if (rc)
			return rc;
	}
	/* about once a second, this node's status to shard 0 (esdctl there
	 * lists every node of the job) */
	int64_t now = esd_now_ns();
	if (now - nd->stats.last_report_ns >= ESD_NS_PER_S) {
		char st[ESD_PROTO_MAX_SETTING + 1];
		nd->stats.last_report_ns = now;
		if (!node_status_report(nd, st, sizeof(st))) {
			int rc = esd_enc_setting(&x->sb[0].b, o->iter, "node.status", st);
			if (rc)
				return rc;
		}
	}
	for (uint32_t s = 0; s < nd->job.shards; s++) {
		br.stop = s == 0 && ask_stop;
		/* the shard checks the count of pushes since the last barrier */
		br.npushes = (uint32_t)(nd->links.push_seq[s] - nd->links.barrier_seq[s]);
		nd->links.barrier_seq[s] = nd->links.push_seq[s];
		int rc = esd_enc_barrier(&x->sb[s].b, &br);
		if (rc)
			return rc;
	}
	int rc = node_exec_flush(x);
	for (uint32_t s = 0; s < nd->job.shards && !rc; s++)
		rc = barrier_ack(x, o, s);
	return rc;
}

/* Shard s's answer to barrier o->iter: its ACK, what shard 0 announces
 * with it (a checkpoint boundary, the job's stop, a setting) and a stop
 * another shard asks for. */
static int barrier_ack(struct exec *x, const struct order *o, uint32_t s)
{
	struct node *nd = x->nd;
	struct esd_msg m;
	int rc = node_exec_recv(x, s, &m);
	if (rc)
		return rc;
	if (m.hdr.op != ESD_OP_ACK || m.u.ack.op != ESD_OP_BARRIER || m.u.ack.iteration != o->iter) {
		ESD_ERR("node", "shard %u answered barrier %llu with %s", s,
			(unsigned long long)o->iter, esd_op_name(m.hdr.op));
		return -EPROTO;
	}
	if (m.u.ack.status)
		return m.u.ack.status;
	if (s == 0 && m.u.ack.sequence > o->iter) {
		/* shard 0 schedules a requested checkpoint at that boundary (and
		 * the job's stop, when so flagged) */
		pthread_mutex_lock(&nd->qmu);
		if (nd->rec.ckpt_at <= o->iter)
			nd->rec.ckpt_at = m.u.ack.sequence;
		bool first = m.u.ack.stop && !nd->stop.at;
		if (m.u.ack.stop)
			nd->stop.at = m.u.ack.sequence;
		pthread_mutex_unlock(&nd->qmu);
		if (first)
			ESD_INFO("node", "the job stops after iteration %llu (shard 0)",
				 (unsigned long long)m.u.ack.sequence);
	} else if (s > 0 && m.u.ack.stop) {
		char why[64];
		snprintf(why, sizeof(why), "shard %u asks for a stop", s);
		node_ask_stop(nd, why);
	}
	return s == 0 && m.u.ack.setting ? recv_setting(x, o->iter) : 0;
}

/* ---- workers.estimate_rates ---------------------------------------------- */

/* Phases smaller than this are mostly round trip or burst credit. */
#define EST_MIN_BYTES (16u << 10)
#define EST_MIN_NS    ESD_NS_PER_MS
/* Phases behind a report: half a window, so that the first phases (a link
 * still spending its burst credit) weigh little. */
#define EST_REPORT_SAMPLES (ESD_RATE_EST_WINDOW / 2)


void node_rate_est_init(struct node *nd)
{
	esd_rate_est_init(&nd->rate.est, EST_MIN_BYTES, EST_MIN_NS);
}

/* Two significant digits: the rate every node's model will carry. */
static uint64_t round2(uint64_t r)
{
	uint64_t p = 1;
	while (r / p >= 100)
		p *= 10;
	return (r + p / 2) / p * p;
}

/* After an iteration: an estimate off the model's rate by more than the
 * tolerance goes to shard 0 with the next barrier (as esdctl set
 * worker.rate would, without reshaping the links), at most once per
 * window of phases, and the estimate starts afresh. */
void node_rate_est_check(struct node *nd, uint64_t iter)
{
	if (!nd->job.estimate_rates)
		return;
	int fitted;
	const uint64_t est = esd_rate_est_bps(&nd->rate.est, &fitted);
	pthread_mutex_lock(&nd->qmu);
	nd->rate.bps = est;
	nd->rate.fitted = fitted;
	const uint64_t cur = nd->job.rate_bps[nd->rank];
	const double gap = cur ? fabs((double)est - (double)cur) / (double)cur : 1.0;
	if (est && !nd->live.rate_report && gap > nd->job.estimate_tolerance &&
	    esd_rate_est_samples(&nd->rate.est) >= EST_REPORT_SAMPLES &&
	    (!nd->rate.reports || iter >= nd->rate.last + ESD_RATE_EST_WINDOW)) {
		nd->live.rate_report = true;
		nd->live.rate_report_bps = round2(est);
		nd->rate.reports++;
		nd->rate.last = iter;
		ESD_INFO("node", "iteration %llu: link measured at %llu bit/s (%s over %u phases), "
			 "model %llu: reporting %llu",
			 (unsigned long long)iter, (unsigned long long)est,
			 fitted ? "fitted" : "throughput", esd_rate_est_samples(&nd->rate.est),
			 (unsigned long long)cur, (unsigned long long)nd->live.rate_report_bps);
		esd_rate_est_reset(&nd->rate.est);
	}
	pthread_mutex_unlock(&nd->qmu);
}
