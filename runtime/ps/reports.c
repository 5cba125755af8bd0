/*
 * What the nodes report to a shard in SETTING frames (shard 0 keeps them):
 * each node's status about once a second (esdctl status and top list
 * them), its reply to a relayed esdctl command, its window of the size
 * fit (workers.split = fit), and its link's rate (esdctl set link.rate).
 */
#include "ps.h"

#include <esd/clock.h>
#include <esd/config.h>
#include <esd/err.h>
#include <esd/log.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A chunk of a node's reply to a relayed request (shard 0). */
static int append_reply(struct ps_node_report *r, const struct esd_setting *s)
{
	if (r->reply_len + s->value_len + 1 > r->reply_cap) {
		size_t cap = (r->reply_len + s->value_len + 1) * 2;
		char *p = realloc(r->reply, cap);
		if (!p)
			return -ENOMEM;
		r->reply = p;
		r->reply_cap = cap;
	}
	memcpy(r->reply + r->reply_len, s->value, s->value_len);
	r->reply_len += s->value_len;
	r->reply[r->reply_len] = 0;
	return 0;
}

/* What a node reports to shard 0: its status (kept for esdctl), or a
 * chunk of its reply to a relayed request. */
static int on_node_report(struct ps_link *pl, const struct esd_setting *s)
{
	struct ps *ps = pl->ps;
	int rc = 0;
	pthread_mutex_lock(&ps->mu);
	struct ps_node_report *r = &ps->report[pl->worker];
	if (ps->shard != 0) {
	} else if (s->key_len == 11 && !memcmp(s->key, "node.status", 11)) {
		memcpy(r->json, s->value, s->value_len);
		r->json[s->value_len] = 0;
		r->at_ns = esd_now_ns();
	} else if (r->relay_busy) { /* node.reply, node.reply.end */
		rc = append_reply(r, s);
		if (s->key_len == 14) {
			r->reply_done = true;
			pthread_cond_broadcast(&ps->cv);
		}
	}
	pthread_mutex_unlock(&ps->mu);
	return rc;
}

/* workers.split = fit: a node's window
 * "END,ITERS,SAMPLES,ROWS,COMPUTE_NS,A,R,C" (shard 0 keeps it for the
 * barrier after END; A,R,C is the model the node's sizes come from). */
static int on_fit_report(struct ps_link *pl, const struct esd_setting *s)
{
	struct ps *ps = pl->ps;
	char v[256];
	unsigned long long f[5];
	double mdl[3];
	int used = 0;
	if (s->value_len >= sizeof(v)) {
		esd_link_send_error(pl->link, -EPROTO, "node.fit report: value too long");
		return -EPROTO;
	}
	memcpy(v, s->value, s->value_len);
	v[s->value_len] = 0;
	if (sscanf(v, "%llu,%llu,%llu,%llu,%llu,%n", &f[0], &f[1], &f[2], &f[3], &f[4], &used) !=
		    5 ||
	    !used || f[1] == 0 || esd_job_parse_size_model(v + used, mdl)) {
		esd_link_send_error(pl->link, -EPROTO, "node.fit report: expected "
				    "END,ITERS,SAMPLES,ROWS,COMPUTE_NS,A,R,C");
		return -EPROTO;
	}
	pthread_mutex_lock(&ps->mu);
	if (ps->shard == 0 && ps->job.derived.split_fit) {
		ps->fit.end[pl->worker] = f[0];
		ps->fit.obs[pl->worker] = (struct esd_size_obs){
		    .iters = f[1], .samples = f[2], .rows = f[3], .compute_ns = f[4]};
		memcpy(ps->fit.model[pl->worker], mdl, sizeof(mdl));
	}
	pthread_mutex_unlock(&ps->mu);
	return 0;
}

int ps_on_setting(struct ps_link *pl, const struct esd_setting *s)
{
	struct ps *ps = pl->ps;
	char v[32];
	uint64_t r;
	if ((s->key_len == 11 && !memcmp(s->key, "node.status", 11)) ||
	    (s->key_len == 10 && !memcmp(s->key, "node.reply", 10)) ||
	    (s->key_len == 14 && !memcmp(s->key, "node.reply.end", 14)))
		return on_node_report(pl, s);
	if (s->key_len == 8 && !memcmp(s->key, "node.fit", 8))
		return on_fit_report(pl, s);
	if (s->key_len != 9 || memcmp(s->key, "link.rate", 9) || s->value_len >= sizeof(v)) {
		esd_link_send_error(pl->link, -EPROTO, "a worker may only send link.rate, "
				    "node.fit, node.status and node.reply settings");
		return -EPROTO;
	}
	memcpy(v, s->value, s->value_len);
	v[s->value_len] = 0;
	if (esd_parse_u64(v, &r)) {
		esd_link_send_error(pl->link, -EPROTO, "link.rate report: not a bit rate");
		return -EPROTO;
	}
	pthread_mutex_lock(&ps->mu);
	if (ps->shard == 0) {
		ps->live.rate_req[pl->worker] = r;
		ps->live.rate_req_mask |= UINT64_C(1) << pl->worker;
	}
	pthread_mutex_unlock(&ps->mu);
	ESD_INFO("ps", "worker %d reports its link at %llu bit/s", pl->worker,
		 (unsigned long long)r);
	return 0;
}
