/* The node's links to the PS shards: connect, HELLO, learn the shards'
 * iteration (a restarted shard reports the checkpoint it resumed from);
 * and their rate (esdctl set link.rate | worker.rate). */
#include "node.h"

#include <esd/clock.h>
#include <esd/err.h>
#include <esd/job_link.h>
#include <esd/log.h>
#include <esd/optim.h>

#include <time.h>

/* How long a node tries to reach a shard at the job's start (it may
 * still be starting). */
#define SHARD_START_WAIT_S 60

/* One attempt: connect to shard s and exchange HELLO. *refused is set
 * when the shard answered with an ERROR (retrying cannot help then). */
static int hello_shard(struct node *nd, uint32_t s, struct esd_buf *b, uint64_t *iter,
		       bool *refused)
{
	struct esd_link_opts lo;
	esd_link_opts_init(&lo);
	lo.addr = nd->job.addrs[s];
	lo.uplink = nd->links.uplink; /* the worker's rate, shared by its shard links */
	lo.key = nd->links.keyed ? &nd->links.key : NULL;
	lo.memif_id = nd->rank;
	lo.timeout_ns = 30 * ESD_NS_PER_S;
	esd_job_link_opts(&nd->job, s, &lo);
	struct esd_link *l;
	int rc = esd_link_connect(&lo, &l);
	/* the job key, or this host's device or build: retrying cannot help */
	if (rc == -EACCES || esd_job_link_fatal(rc))
		*refused = true;
	if (rc)
		return rc;
	/* control-thread readers take qmu to use the link pointers */
	pthread_mutex_lock(&nd->qmu);
	nd->links.link[s] = l;
	pthread_mutex_unlock(&nd->qmu);
	/* a new link: its push sequences start again (esd/dedup.h) */
	nd->links.push_seq[s] = nd->links.sent_seq[s] = nd->links.barrier_seq[s] = 0;
	struct esd_hello h = {
		.proto_version = ESD_PROTO_VERSION, .worker = nd->rank, .job_token = nd->job.derived.token,
		.shard = s, .dim = nd->job.dim,
		.state_dim = (uint32_t)esd_optim_state_len(nd->job.optim.opt, nd->job.dim),
		.nworkers = nd->job.n, .stream_digest = nd->job.derived.stream_digest,
	};
	esd_buf_reset(b);
	rc = esd_enc_hello(b, &h, 0);
	if (!rc)
		rc = esd_link_send(nd->links.link[s], b->data, b->len);
	for (int want = 2; !rc && want > 0; want--) { /* HELLO reply, then ACK */
		struct esd_msg m;
		rc = esd_link_recv(nd->links.link[s], &m, 30 * ESD_NS_PER_S);
		if (rc)
			break;
		if (m.hdr.op == ESD_OP_ERROR && (m.u.error.code == -EAGAIN ||
						 m.u.error.code == -EMFILE)) {
			/* the shard is busy (too many links waiting): try again */
			ESD_WARN("node", "shard %u: %.*s; trying again", s, (int)m.u.error.len,
				 m.u.error.text);
			rc = -EAGAIN;
		} else if (m.hdr.op == ESD_OP_ERROR) {
			ESD_ERR("node", "shard %u refused us: %.*s%s", s, (int)m.u.error.len,
				m.u.error.text,
				nd->links.keyed ? "" : " (a keyless job's shard tells why only "
						       "in its own log)");
			if (m.u.error.code == -ESD_ESTREAM)
				ESD_ERR("node", "this node's data.stream %s has digest %016llx",
					nd->job.stream, (unsigned long long)nd->job.derived.stream_digest);
			*refused = true;
			rc = -ECONNREFUSED;
		} else if (m.hdr.op == ESD_OP_ACK && m.u.ack.op == ESD_OP_HELLO) {
			*iter = m.u.ack.iteration; /* and the data cursor there */
			nd->rec.cursor_iter = m.u.ack.iteration;
			nd->rec.cursor = m.u.ack.sequence;
		} else if (m.hdr.op != ESD_OP_HELLO) {
			rc = -EPROTO;
		}
	}
	if (rc) {
		pthread_mutex_lock(&nd->qmu);
		esd_link_close(nd->links.link[s]);
		nd->links.link[s] = NULL;
		pthread_mutex_unlock(&nd->qmu);
	}
	return rc;
}

/* Connect to shard s and exchange HELLO, retrying for wait_s seconds (the
 * shard may still be starting, or restarting); *it: the iteration it
 * reports. */
static int connect_shard(struct node *nd, uint32_t s, struct esd_buf *b, uint64_t *it,
			 uint64_t wait_s)
{
	int64_t deadline = esd_now_ns() + (int64_t)wait_s * ESD_NS_PER_S;
	bool refused = false;
	int rc;
	for (;;) {
		rc = hello_shard(nd, s, b, it, &refused);
		if (!rc || refused || esd_now_ns() > deadline)
			break;
		esd_sleep_ns(100 * ESD_NS_PER_MS);
	}
	if (rc && esd_job_link_fatal(rc)) {
		ESD_ERR("node", "no link to shard %u can open on this host (%s): %s", s,
			nd->job.backend, esd_strerror(rc));
		esd_job_link_explain(&nd->job, rc);
	} else if (rc && refused) {
		ESD_ERR("node", "shard %u at %s refused this node", s, nd->job.addrs[s]);
	} else if (rc) {
		ESD_ERR("node", "cannot reach shard %u at %s (%s) within %llu s: %s", s,
			nd->job.addrs[s], nd->job.backend, (unsigned long long)wait_s,
			esd_strerror(rc));
	}
	return rc;
}

/* The link to shard s broke and something restarts shards: say what this
 * node waits for and until when (wall clock). */
static void log_restart_wait(struct node *nd, uint32_t s, const char *why)
{
	char until[32];
	time_t end = time(NULL) + (time_t)nd->job.restart_wait_s;
	struct tm tm;
	strftime(until, sizeof(until), "%Y-%m-%d %H:%M:%S", localtime_r(&end, &tm));
	ESD_WARN("node", "the link to shard %u at %s broke (%s); waiting until %s "
		 "(job.restart_wait = %llu s) for the shard to restart and answer", s,
		 nd->job.addrs[s], why && *why ? why : "closed", until,
		 (unsigned long long)nd->job.restart_wait_s);
}

int node_links_open(struct node *nd, uint64_t *ps_iter)
{
	struct esd_buf b;
	int rc = 0;

	if (!nd->links.uplink) {
		rc = esd_uplink_create(nd->job.derived.shape_follows_model ? nd->job.rate_bps[nd->rank]
								   : nd->job.link_bps[nd->rank],
				       0, &nd->links.uplink);
		if (rc)
			return rc;
	}
	esd_buf_init(&b);
	uint64_t at[ESD_JOB_MAX_SHARDS] = {0}, low = UINT64_MAX;
	bool differ = false;
	for (uint32_t s = 0; s < nd->job.shards && !rc; s++) {
		rc = connect_shard(nd, s, &b, &at[s], SHARD_START_WAIT_S);
		differ |= s > 0 && at[s] != at[0];
		low = at[s] < low ? at[s] : low;
	}
	esd_buf_free(&b);
	*ps_iter = rc ? 0 : at[0];
	if (rc || !differ)
		return rc;
	/* a job killed while its shards wrote a checkpoint: some have it,
	 * some resumed from the one before; every shard goes back to the
	 * newest one they all have (each keeps its two newest) */
	uint64_t lowest = 0, cut = 0, high = 0;
	for (uint32_t s = 0; s < nd->job.shards; s++) {
		if (at[s] == low)
			lowest |= UINT64_C(1) << s;
		high = at[s] > high ? at[s] : high;
	}
	ESD_WARN("node", "the shards resumed from different checkpoints (iterations %llu to "
		 "%llu): every shard goes back to the newest one all of them have",
		 (unsigned long long)low, (unsigned long long)high);
	rc = node_links_rollback(nd, at, lowest, &cut);
	if (rc) {
		ESD_ERR("node", "the shards hold no common checkpoint (the oldest resumed from "
			"%llu): %s", (unsigned long long)low, esd_strerror(rc));
		return rc;
	}
	*ps_iter = cut;
	return 0;
}

/* Read what a link holds now without waiting (what a shard still sent of
 * the iteration that failed), so that a peer that went away shows: the
 * link is then broken. */
static void drain(struct esd_link *l)
{
	struct esd_msg m;
	while (l && !esd_link_broken(l) && esd_link_recv(l, &m, 0) == 0)
		;
}

int node_links_reconnect(struct node *nd, uint64_t *iter, uint64_t *restarted)
{
	struct esd_buf b;
	int rc = 0;
	*restarted = 0;
	esd_buf_init(&b);
	for (uint32_t s = 0; s < nd->job.shards && !rc; s++) {
		drain(nd->links.link[s]);
		if (nd->links.link[s] && !esd_link_broken(nd->links.link[s]))
			continue;
		log_restart_wait(nd, s, nd->links.link[s] ? esd_link_last_error(nd->links.link[s])
							  : NULL);
		pthread_mutex_lock(&nd->qmu);
		esd_link_close(nd->links.link[s]);
		nd->links.link[s] = NULL;
		pthread_mutex_unlock(&nd->qmu);
		rc = connect_shard(nd, s, &b, &iter[s], nd->job.restart_wait_s);
		*restarted |= UINT64_C(1) << s;
	}
	esd_buf_free(&b);
	return rc;
}

/* Ask shard s back to checkpoint c and read its answer, dropping what it
 * still sent of the iteration that failed (ACKs, rows, SETTING frames).
 * 0, -ESTALE with *newest (it has no checkpoint c), or -errno. */
static int rollback_shard(struct node *nd, uint32_t s, struct esd_buf *b, uint64_t c,
			  uint64_t *newest)
{
	struct esd_link *l = nd->links.link[s];
	esd_buf_reset(b);
	int rc = esd_enc_rollback(b, c, nd->rank);
	if (!rc)
		rc = esd_link_send(l, b->data, b->len);
	while (!rc) {
		struct esd_msg m;
		rc = esd_link_recv(l, &m, 60 * ESD_NS_PER_S);
		if (rc)
			break;
		if (m.hdr.op == ESD_OP_ERROR && m.u.error.code == -ESD_EROLLBACK)
			continue; /* an answer to a frame of the state that is gone */
		if (m.hdr.op == ESD_OP_ERROR) {
			ESD_ERR("node", "shard %u cannot go back to checkpoint %llu: %.*s", s,
				(unsigned long long)c, (int)m.u.error.len, m.u.error.text);
			return -ESD_EJOBFAILED;
		}
		if (m.hdr.op == ESD_OP_ACK && m.u.ack.op == ESD_OP_ROLLBACK &&
		    m.u.ack.iteration == c) {
			*newest = m.u.ack.sequence;
			return m.u.ack.status;
		}
	}
	ESD_ERR("node", "shard %u (%s): %s %s", s, esd_link_peer(l), esd_strerror(rc),
		esd_link_last_error(l));
	return rc;
}

int node_links_rollback(struct node *nd, const uint64_t *iter, uint64_t restarted,
			uint64_t *cut)
{
	struct esd_buf b;
	int rc = 0;
	uint64_t c = UINT64_MAX;
	for (uint32_t s = 0; s < nd->job.shards; s++)
		if (restarted >> s & 1 && iter[s] < c)
			c = iter[s];
	esd_buf_init(&b);
	/* every shard to the restarted ones' checkpoint; one without it
	 * names its newest, and the cut goes back to the older (each shard
	 * keeps its two newest) */
	for (int round = 0; round < 3; round++) {
		uint64_t lower = c;
		for (uint32_t s = 0; s < nd->job.shards && !rc; s++) {
			if (restarted >> s & 1 && iter[s] == c)
				continue;
			uint64_t newest = 0;
			rc = rollback_shard(nd, s, &b, c, &newest);
			nd->links.barrier_seq[s] = nd->links.push_seq[s];
			if (rc == -ESTALE && newest < c) {
				lower = newest < lower ? newest : lower;
				rc = 0;
			}
		}
		if (rc || lower == c)
			break;
		c = lower;
		restarted = 0; /* every shard goes back to the lower cut */
	}
	esd_buf_free(&b);
	if (!rc)
		*cut = c;
	return rc == -ESTALE ? -ESTALE : rc;
}

void node_links_close(struct node *nd)
{
	pthread_mutex_lock(&nd->qmu);
	for (uint32_t s = 0; s < ESD_JOB_MAX_SHARDS; s++) {
		esd_link_close(nd->links.link[s]);
		nd->links.link[s] = NULL;
	}
	pthread_mutex_unlock(&nd->qmu);
}

void node_links_name_broken(struct node *nd)
{
	for (uint32_t s = 0; s < nd->job.shards; s++) {
		struct esd_link *l = nd->links.link[s];
		drain(l);
		if (!l || !esd_link_broken(l))
			continue;
		ESD_ERR("node", "shard %u at %s (%s): its link broke: %s; nothing restarts shards "
			"(job.restart_shards is off): the job fails", s, nd->job.addrs[s],
			esd_link_peer(l), *esd_link_last_error(l) ? esd_link_last_error(l) : "closed");
	}
}

/* What shard s sent while this node waited for nothing from it: nothing
 * (0), the decider's ORDER frames (taken), or the job's end. */
static int check_link(struct node *nd, uint32_t s)
{
	struct esd_link *l = nd->links.link[s];
	struct esd_msg m;
	for (;;) {
		int rc = esd_link_recv(l, &m, 0);
		if (rc == -ETIMEDOUT)
			return 0;
		if (rc) {
			ESD_ERR("node", "shard %u (%s): %s %s", s, esd_link_peer(l), esd_strerror(rc),
				esd_link_last_error(l));
			return rc;
		}
		if (m.hdr.op == ESD_OP_ERROR) {
			ESD_ERR("node", "shard %u reports: %.*s", s, (int)m.u.error.len,
				m.u.error.text);
			return m.u.error.code == -ESD_EROLLBACK ? -ESD_EROLLBACK : -ESD_EJOBFAILED;
		}
		if (m.hdr.op != ESD_OP_ORDER || s != 0) {
			ESD_ERR("node", "shard %u sent %s while this node waited for nothing from it",
				s, esd_op_name(m.hdr.op));
			return -EPROTO;
		}
		rc = node_follow_take(nd, &m.u.order); /* the decider's, relayed */
		if (rc)
			return rc;
	}
}

int node_links_take_orders(struct node *nd)
{
	return nd->dq.follower && nd->links.link[0] ? check_link(nd, 0) : 0;
}

int node_links_check(struct node *nd)
{
	for (uint32_t s = 0; s < nd->job.shards; s++) {
		if (!nd->links.link[s])
			continue;
		int rc = check_link(nd, s);
		if (rc)
			return rc;
	}
	return 0;
}

void node_set_link_rate(struct node *nd, uint64_t r, bool report)
{
	pthread_mutex_lock(&nd->qmu);
	for (uint32_t s = 0; s < nd->job.shards; s++)
		if (nd->links.link[s])
			esd_link_set_rate(nd->links.link[s], r);
	if (report) { /* sent with the next barrier (iter.c) */
		nd->live.rate_report = true;
		nd->live.rate_report_bps = r;
	}
	pthread_mutex_unlock(&nd->qmu);
}
