/*
 * Live setting changes of esdd (esdctl set dispatch.method | dispatch.alpha
 * | cache.policy | workers.rates, and shard 0's workers.size_model fits):
 * the main thread's half.
 *
 * Every node must switch at the same iteration or their decisions differ
 * (the barrier compares digests). PS shard 0 schedules a change at an
 * iteration c no dispatcher has started deciding (c = t + 3 when it
 * releases barrier t; dispatchers run at most two ahead) and sends a
 * SETTING frame after the barrier ACKs until then. The main thread stores
 * it here under qmu; the dispatcher (disp_thread.c, apply_setting) picks it
 * up when it starts deciding c, and for a policy change marks the order of
 * c so that the main thread switches the real cache at the same point of
 * the sequence of policy calls as the snapshot (node_setting_apply); a
 * rates change marks it too, so that this node's links shape at its new
 * rate from that iteration.
 */
#include "node.h"

#include <esd/ctl.h>
#include <esd/dispatch_solve.h>
#include <esd/err.h>
#include <esd/log.h>
#include <esd/policy.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_value(const struct node *nd, const char *key, const char *val)
{
	if (!strcmp(key, "workers.rates")) {
		uint64_t r[ESD_MAX_WORKERS];
		return esd_job_parse_rates(val, nd->job.n, r);
	}
	if (!strcmp(key, "workers.size_model")) {
		double v[3];
		return nd->job.derived.split_link_aware ? esd_job_parse_size_model(val, v) : -EINVAL;
	}
	if (!strcmp(key, "dispatch.method")) {
		enum esd_method m;
		return esd_method_parse(val, &m);
	}
	if (!strcmp(key, "dispatch.alpha")) {
		char *end;
		double a = strtod(val, &end);
		return end != val && !*end && a >= 0 && a <= 1 ? 0 : -EINVAL;
	}
	if (!strcmp(key, "cache.policy")) {
		enum esd_policy p;
		return esd_policy_parse(val, &p);
	}
	return -ENOENT;
}

/* "node.request": an esdctl command relayed by shard 0 (esdctl --worker):
 * run it as the control socket would; its reply goes back with the next
 * barrier (iter.c). */
static int relayed(struct node *nd, const char *text)
{
	json_t *req = json_loads(text, 0, NULL);
	json_t *resp = json_is_object(req) ? esd_ctl_run(node_ctl_cmds, nd, req)
					   : json_pack("{s:b, s:s}", "ok", 0, "error",
						       "relayed request is not a JSON object");
	json_decref(req);
	char *out = resp ? json_dumps(resp, JSON_COMPACT) : NULL;
	json_decref(resp);
	if (!out)
		return -ENOMEM;
	free(nd->relay.reply);
	nd->relay.reply = out;
	return 0;
}

int node_setting_announce(struct node *nd, uint64_t iter, const struct esd_setting *s)
{
	char key[ESD_PROTO_MAX_SETTING + 1], val[ESD_PROTO_MAX_SETTING + 1];
	/* the decoder bounds both lengths by ESD_PROTO_MAX_SETTING */
	memcpy(key, s->key, s->key_len);
	key[s->key_len] = 0;
	memcpy(val, s->value, s->value_len);
	val[s->value_len] = 0;
	if (!strcmp(key, "node.request"))
		return relayed(nd, val);
	int rc = check_value(nd, key, val);
	if (rc) {
		ESD_ERR("node", "barrier %llu: shard 0 announced %s setting %s = %s",
		        (unsigned long long)iter, rc == -ENOENT ? "an unknown" : "a bad", key, val);
		return -EPROTO;
	}
	pthread_mutex_lock(&nd->qmu);
	bool repeat =
	    nd->live.set_at == s->iteration && !strcmp(nd->live.set_key, key) &&
	    !strcmp(nd->live.set_value, val);
	/* the dispatcher may be at the start of iter + 2 already; one change
	 * pending at a time */
	bool ok = repeat || (s->iteration > iter + 2 && s->iteration <= nd->job.iterations &&
	                     nd->live.set_at <= iter);
	if (ok && !repeat) {
		nd->live.set_at = s->iteration;
		memcpy(nd->live.set_key, key, sizeof(key));
		memcpy(nd->live.set_value, val, sizeof(val));
	}
	uint64_t pending = nd->live.set_at;
	pthread_mutex_unlock(&nd->qmu);
	if (!ok) {
		ESD_ERR("node",
		        "barrier %llu: shard 0 announced %s = %s at iteration %llu; it "
		        "must be in %llu..%llu with no change pending (one is at %llu)",
		        (unsigned long long)iter, key, val, (unsigned long long)s->iteration,
		        (unsigned long long)iter + 3, (unsigned long long)nd->job.iterations,
		        (unsigned long long)pending);
		return -EPROTO;
	}
	if (!repeat)
		ESD_INFO("node", "setting %s = %s from iteration %llu", key, val,
		         (unsigned long long)s->iteration);
	return 0;
}

int node_setting_apply(struct node *nd, const struct order *o)
{
	/* workers.rates: this node's links from this iteration, unless they are
	 * not the model's to shape (workers.link_rates, workers.estimate_rates) */
	if (o->set_rate && nd->job.derived.shape_follows_model) {
		pthread_mutex_lock(&nd->qmu);
		for (uint32_t s = 0; s < nd->job.shards; s++)
			if (nd->links.link[s])
				esd_link_set_rate(nd->links.link[s], o->rate_bps);
		pthread_mutex_unlock(&nd->qmu);
		ESD_INFO("node", "iteration %llu: links shaped at %llu bit/s",
		         (unsigned long long)o->iter, (unsigned long long)o->rate_bps);
	}
	if (o->set_policy < 0)
		return 0;
	esd_cache_meta_write_begin(nd->cache);
	int rc = esd_cmeta_set_policy(nd->cm, (enum esd_policy)o->set_policy);
	esd_cache_meta_write_end(nd->cache);
	if (rc) {
		ESD_ERR("node", "iteration %llu: cannot switch the cache to policy %d: %s",
		        (unsigned long long)o->iter, o->set_policy, esd_strerror(rc));
		return rc;
	}
	pthread_mutex_lock(&nd->qmu);
	nd->job.policy = (enum esd_policy)o->set_policy;
	pthread_mutex_unlock(&nd->qmu);
	ESD_INFO("node", "iteration %llu: cache policy is now %s", (unsigned long long)o->iter,
	         esd_policy_name(nd->job.policy));
	return 0;
}
