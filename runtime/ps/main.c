/*
 * esd-ps: one parameter-server shard.
 *
 *   esd-ps --config job.ini [--shard S] [--listen ADDR] [--control PATH]
 *          [--restore | --resume] [--set section.key=value ...]
 *
 * Serves the node daemons of the job over the configured transport
 * backend, keeps the shard's rows and (shard 0) the dense table, runs the
 * per-iteration barrier and writes checkpoints. SIGINT/SIGTERM (or esdctl
 * stop) stops the whole job gracefully at a checkpoint boundary; a second
 * signal stops this shard at once. Exits when every worker has said
 * goodbye after its last barrier: 0, or 1 when the job failed.
 */
#include "ps.h"

#include <esd/ckpt.h>
#include <esd/ctl.h>
#include <esd/clock.h>
#include <esd/dataset.h>
#include <esd/dispatch_solve.h>
#include <esd/err.h>
#include <esd/job_link.h>
#include <esd/log.h>
#include <esd/plan.h>
#include <esd/policy.h>
#include <esd/signals.h>

#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Stop this shard at once (a second signal, or one while no worker is
 * attached). */
static volatile sig_atomic_t stop_sig;

/* SIGINT/SIGTERM, on the signal thread (esd/signals.h): the first asks
 * for a graceful stop of the whole job (ps_ask_stop_locked); a second, or
 * one while no job runs, stops this shard at once. */
static void on_signal(int sig, unsigned count, void *arg)
{
	struct ps *ps = arg;
	pthread_mutex_lock(&ps->mu);
	bool graceful = count == 1 && ps->bar.connected_mask && !ps->bar.failed && !ps->bar.ended;
	if (graceful)
		ps_ask_stop_locked(ps, strsignal(sig));
	pthread_mutex_unlock(&ps->mu);
	if (!graceful)
		stop_sig = sig;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: esd-ps --config JOB.ini [--shard S] [--listen ADDR] [--control PATH]\n"
		   "              [--restore | --resume] [--set section.key=value ...]\n"
		   "  --shard S        shard index (default 0)\n"
		   "  --listen ADDR    address to listen on (default: ps.addrs[S] of the job)\n"
		   "  --control PATH   control socket for esdctl (default: none)\n"
		   "  --restore        resume from ps.checkpoint_dir/ps-shardS.ckpt\n"
		   "  --resume         the same when that checkpoint exists, else start from\n"
		   "                   ps.resume_from's checkpoint, or at 0 (starting a\n"
		   "                   stopped job again)\n"
		   "  --set K=V        override a job setting\n");
}

/* When this process started (esdctl top's first frame: averages since). */
static int64_t ps_started_ns;

/* Shard 0: every node's last report (docs/esdctl.md), with its age;
 * caller holds mu. */
static json_t *nodes_json(const struct ps *ps)
{
	json_t *a = json_array();
	int64_t now = esd_now_ns();
	for (uint32_t w = 0; w < ps->job.n && ps->shard == 0; w++) {
		const struct ps_node_report *r = &ps->report[w];
		json_t *st = r->json[0] ? json_loads(r->json, 0, NULL) : NULL;
		json_t *o = json_pack("{s:i, s:b}", "rank", (int)w, "connected",
				      (ps->bar.connected_mask >> w & 1) != 0);
		if (st) {
			json_object_set_new(o, "age_s", json_real(esd_ns_to_s(now - r->at_ns)));
			json_object_update(o, st);
			json_decref(st);
		}
		json_array_append_new(a, o);
	}
	return a;
}

/* The link threads' CPU per phase (struct ps_cpu), cumulative ms, the
 * tags' share taken out of send and receive; caller holds mu. */
static json_t *cpu_json(struct ps *ps)
{
	static const char *const names[PS_CPU_NPHASES] = {
		[PS_CPU_RECV] = "receive_ms", [PS_CPU_SEND] = "send_ms", [PS_CPU_PULL] = "pull_ms",
		[PS_CPU_PUSH] = "push_ms", [PS_CPU_BARRIER] = "barrier_ms", [PS_CPU_OTHER] = "other_ms"};
	int64_t tx = atomic_load(&ps->cpu.auth_tx_closed_ns);
	int64_t rx = atomic_load(&ps->cpu.auth_rx_closed_ns);
	for (int i = 0; i < ps->nlinks; i++) {
		struct esd_link_stats st;
		if (!ps->links[i].link)
			continue;
		esd_link_stats(ps->links[i].link, &st);
		tx += (int64_t)st.auth_tx_cpu_ns;
		rx += (int64_t)st.auth_rx_cpu_ns;
	}
	int64_t ns[PS_CPU_NPHASES];
	for (int p = 0; p < PS_CPU_NPHASES; p++)
		ns[p] = atomic_load(&ps->cpu.ns[p]);
	/* the tags are made in the sends and checked in the receives (the
	 * heartbeat thread's few aside) */
	ns[PS_CPU_SEND] = ns[PS_CPU_SEND] > tx ? ns[PS_CPU_SEND] - tx : 0;
	ns[PS_CPU_RECV] = ns[PS_CPU_RECV] > rx ? ns[PS_CPU_RECV] - rx : 0;
	json_t *o = json_pack("{s:f}", "auth_ms", esd_ns_to_ms(tx + rx));
	for (int p = 0; p < PS_CPU_NPHASES; p++)
		json_object_set_new(o, names[p], json_real(esd_ns_to_ms(ns[p])));
	return o;
}

static int cmd_status(void *arg, json_t *req, json_t **resp, const char **err)
{
	struct ps *ps = arg;
	(void)req;
	(void)err;
	pthread_mutex_lock(&ps->mu);
	*resp = json_pack("{s:s, s:i, s:i, s:I, s:I, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:s?}",
			  "role", "ps", "shard", ps->shard, "workers", ps->job.n,
			  "iteration", (json_int_t)ps->bar.iter_done, "cursor", (json_int_t)ps->bar.cursor,
			  "connected", __builtin_popcountll(ps->bar.connected_mask),
			  "rows", (json_int_t)ps_store_count(ps->st),
			  "barriers", (json_int_t)ps->stats.barriers,
			  "pulled_rows", (json_int_t)ps->stats.pulled_rows,
			  "value_rows", (json_int_t)ps->stats.value_rows,
			  "grad_rows", (json_int_t)ps->stats.grad_rows,
			  "checkpoints", (json_int_t)ps->stats.checkpoints,
			  "checkpoint_bytes", (json_int_t)ps->stats.ckpt_bytes,
			  "failed", ps->bar.failed ? ps->bar.fail_msg : NULL);
	json_object_set_new(*resp, "checkpoint_requested", json_boolean(ps->ckpt.requested));
	json_object_set_new(*resp, "iterations", json_integer((json_int_t)ps->job.iterations));
	json_object_set_new(*resp, "shards", json_integer(ps->job.shards));
	json_object_set_new(*resp, "dense_len", json_integer((json_int_t)ps->dtab.len));
	json_object_set_new(*resp, "nodes", nodes_json(ps));
	struct timespec cpu;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
	json_object_set_new(*resp, "t0_ns", json_integer((json_int_t)ps_started_ns));
	json_object_set_new(*resp, "t_ns", json_integer((json_int_t)esd_now_ns()));
	json_object_set_new(*resp, "cpu_ns",
			    json_integer((json_int_t)(cpu.tv_sec * ESD_NS_PER_S + cpu.tv_nsec)));
	json_object_set_new(*resp, "cpu", cpu_json(ps));
	/* workers.split = fit: shard 0's last fit */
	if (ps->shard == 0 && ps->job.derived.split_fit)
		json_object_set_new(
		    *resp, "size_fit",
		    json_pack("{s:I, s:I, s:f, s:f, s:f, s:f, s:f}", "fits",
			      (json_int_t)ps->fit.fitter.windows, "refits",
			      (json_int_t)ps->fit.fitter.refits, "fixed_rows",
			      ps->fit.fitter.last.fixed_rows, "rows_per_sample",
			      ps->fit.fitter.last.rows_per_sample, "compute_ns_per_sample",
			      ps->fit.fitter.last.compute_ns, "observed_ms",
			      ps->fit.fitter.last_obs_ns / 1e6, "fitted_ms",
			      ps->fit.fitter.last_fit_ns / 1e6));
	/* esdctl set: the pending change (effective_at 0: not scheduled yet) */
	json_object_set_new(*resp, "setting",
			    ps->live.pending ? json_pack("{s:s, s:s, s:I}", "key", ps->live.key,
							"value", ps->live.value, "effective_at",
							(json_int_t)ps->live.at)
					    : json_null());
	pthread_mutex_unlock(&ps->mu);
	return 0;
}

/* esdctl checkpoint: record a request; the barrier writes the checkpoint
 * at an iteration boundary where every daemon has flushed its DIRTY rows
 * (a checkpoint without that flush would miss them). */
static int cmd_checkpoint(void *arg, json_t *req, json_t **resp, const char **err)
{
	struct ps *ps = arg;
	(void)req;
	pthread_mutex_lock(&ps->mu);
	if (!ps->job.checkpoint_dir[0]) {
		pthread_mutex_unlock(&ps->mu);
		*err = "the job has no ps.checkpoint_dir: set it in the job file to checkpoint";
		return -ENOTSUP;
	}
	if (ps->bar.failed) {
		pthread_mutex_unlock(&ps->mu);
		*err = "the job has failed; nothing consistent to checkpoint";
		return -ESHUTDOWN;
	}
	if (!ps->ckpt.requested) {
		ps->ckpt.requested = true;
		ps->ckpt.requested_at = ps->bar.iter_done;
	}
	char path[1100];
	ps_checkpoint_path(ps, path, sizeof(path));
	*resp = json_pack("{s:b, s:I, s:I, s:I, s:s}", "requested", 1, "requested_at",
			  (json_int_t)ps->ckpt.requested_at, "iteration", (json_int_t)ps->bar.iter_done,
			  "checkpoints", (json_int_t)ps->stats.checkpoints, "path", path);
	pthread_mutex_unlock(&ps->mu);
	return 0;
}

/* esdctl set: a setting that changes what the dispatchers decide
 * (dispatch.method, dispatch.alpha, cache.policy). Every node must switch
 * at the same iteration, so the request is only queued here: the next
 * barrier release t schedules it at t + 3, an iteration no dispatcher has
 * started deciding (they run at most two ahead), and the ACKs of the
 * barriers until then are followed by a SETTING frame (docs/esdctl.md).
 * One change at a time.
 * Long: each settable key validated with its own rule and message before the one queued
 * change. */
static int cmd_set(void *arg, json_t *req, json_t **resp, const char **err)
{
	struct ps *ps = arg;
	const char *key = json_string_value(json_object_get(req, "key"));
	const char *val = json_string_value(json_object_get(req, "value"));
	static __thread char msg[2 * ESD_PROTO_MAX_SETTING + 256];
	if (!key || !val) {
		*err = "set needs \"key\" and \"value\" strings";
		return -EINVAL;
	}
	if (!strcmp(key, "method"))
		key = "dispatch.method";
	else if (!strcmp(key, "alpha"))
		key = "dispatch.alpha";
	else if (!strcmp(key, "policy"))
		key = "cache.policy";
	char canon[ESD_PROTO_MAX_SETTING + 1];
	if (!strcmp(key, "dispatch.method")) {
		enum esd_method m;
		if (esd_method_parse(val, &m)) {
			*err = "dispatch.method: unknown method (heu, opt, hungarian, hybrid, laia, "
			       "vanilla)";
			return -EINVAL;
		}
		snprintf(canon, sizeof(canon), "%s", esd_method_name(m));
	} else if (!strcmp(key, "dispatch.alpha")) {
		char *end;
		double a = strtod(val, &end);
		if (end == val || *end || !(a >= 0 && a <= 1)) {
			*err = "dispatch.alpha: expected a number in [0, 1]";
			return -EINVAL;
		}
		snprintf(canon, sizeof(canon), "%.17g", a);
	} else if (!strcmp(key, "cache.policy")) {
		enum esd_policy p;
		if (esd_policy_parse(val, &p)) {
			*err = "cache.policy: unknown policy (lru, lfu, emark, lookahead)";
			return -EINVAL;
		}
		uint64_t hints = ps->job.derived.global_batch * (uint64_t)ps->width;
		if (p == ESD_POLICY_LOOKAHEAD && hints > ps->cache_rows) {
			snprintf(msg, sizeof(msg), "cache.policy lookahead: a cache of %llu rows "
				 "cannot hold the hints of a global batch (%llu keys)",
				 (unsigned long long)ps->cache_rows, (unsigned long long)hints);
			*err = msg;
			return -EINVAL;
		}
		snprintf(canon, sizeof(canon), "%s", esd_policy_name(p));
	} else if (!strcmp(key, "workers.rates") || !strcmp(key, "rates")) {
		/* live link rates: every node's row costs (and, with a
		 * link-aware split, batch sizes) and every link's shaping */
		key = "workers.rates";
		uint64_t rates[ESD_MAX_WORKERS];
		if (esd_job_parse_rates(val, ps->job.n, rates)) {
			snprintf(msg, sizeof(msg), "workers.rates: expected %u bit rates (e.g. "
				 "5G,0.5G) or one for all", ps->job.n);
			*err = msg;
			return -EINVAL;
		}
		if (ps_rates_value(ps, rates, canon, sizeof(canon), msg, sizeof(msg))) {
			*err = msg;
			return -EINVAL;
		}
	} else {
		*err = "unknown setting; the PS schedules dispatch.method, dispatch.alpha, "
		       "cache.policy and workers.rates (link.rate is set on each esdd's socket)";
		return -ENOTSUP;
	}
	pthread_mutex_lock(&ps->mu);
	int rc = 0;
	if (ps->shard != 0) {
		*err = "settings are scheduled by PS shard 0: use its control socket";
		rc = -ENOTSUP;
	} else if (ps->bar.failed) {
		*err = "the job has failed";
		rc = -ESHUTDOWN;
	} else if (ps->live.pending) {
		if (ps->live.at)
			snprintf(msg, sizeof(msg), "a change is pending (%s = %s at iteration "
				 "%llu); retry once it is in effect", ps->live.key, ps->live.value,
				 (unsigned long long)ps->live.at);
		else
			snprintf(msg, sizeof(msg), "a change is pending (%s = %s, scheduled by "
				 "the next barrier); retry once it is in effect", ps->live.key,
				 ps->live.value);
		*err = msg;
		rc = -EBUSY;
	} else if (ps->bar.iter_done + 4 > ps->job.iterations) {
		*err = "too late: the job ends before a change could reach every node";
		rc = -ERANGE;
	}
	if (rc) {
		pthread_mutex_unlock(&ps->mu);
		return rc;
	}
	snprintf(ps->live.key, sizeof(ps->live.key), "%s", key);
	snprintf(ps->live.value, sizeof(ps->live.value), "%s", canon);
	ps->live.pending = true;
	ps->live.at = 0;
	ps->live.requested_at = ps->bar.iter_done;
	/* the barrier after iter_done releases at iter_done + 1 at the earliest */
	*resp = json_pack("{s:s, s:s, s:I, s:I, s:b}", "key", ps->live.key, "value", ps->live.value,
			  "requested_at", (json_int_t)ps->bar.iter_done, "effective_at",
			  (json_int_t)(ps->bar.iter_done + 4), "live", 1);
	pthread_mutex_unlock(&ps->mu);
	ESD_INFO("ps", "setting %s = %s requested at iteration %llu", key, canon,
		 (unsigned long long)ps->live.requested_at);
	return 0;
}

/* esdctl stop: a graceful stop of the whole job (struct ps_stop). */
static int cmd_stop(void *arg, json_t *req, json_t **resp, const char **err)
{
	struct ps *ps = arg;
	(void)req;
	pthread_mutex_lock(&ps->mu);
	if (ps->bar.failed) {
		pthread_mutex_unlock(&ps->mu);
		*err = "the job has failed; nothing to stop gracefully";
		return -ESHUTDOWN;
	}
	ps_ask_stop_locked(ps, "esdctl stop");
	*resp = json_pack("{s:b, s:I, s:I, s:b}", "requested", 1, "iteration",
			  (json_int_t)ps->bar.iter_done, "stop_at", (json_int_t)ps->stop.at,
			  "checkpoint", ps->job.checkpoint_dir[0] != 0);
	pthread_mutex_unlock(&ps->mu);
	return 0;
}

/* Wait (mu held) until worker w's reply to a relayed request is in, the
 * job failed, the worker left, or the time is up. */
static int wait_reply_locked(struct ps *ps, uint32_t w, int64_t timeout_ns)
{
	int64_t deadline = esd_now_ns() + timeout_ns;
	while (!ps->report[w].reply_done) {
		if (ps->bar.failed || !(ps->bar.connected_mask >> w & 1))
			return -ECONNRESET;
		struct timespec ts = esd_ns_to_timespec(deadline);
		if (pthread_cond_timedwait(&ps->cv, &ps->mu, &ts) == ETIMEDOUT)
			return -ETIMEDOUT;
	}
	return 0;
}

/* esdctl --worker W COMMAND (shard 0): the request goes to node W after
 * its next barrier and its reply comes back before a later one, wherever
 * the node runs; this handler waits for it (an iteration or two). */
static int cmd_relay(void *arg, json_t *req, json_t **resp, const char **err)
{
	struct ps *ps = arg;
	json_int_t w = json_integer_value(json_object_get(req, "worker"));
	json_t *inner = json_object_get(req, "request");
	if (ps->shard != 0) {
		*err = "relay: ask PS shard 0";
		return -EINVAL;
	}
	char *text = json_is_object(inner) ? json_dumps(inner, JSON_COMPACT) : NULL;
	if (!text || w < 0 || w >= (json_int_t)ps->job.n || strlen(text) > ESD_PROTO_MAX_SETTING) {
		free(text);
		*err = "relay needs \"worker\" (a rank of the job) and a \"request\" object of at "
		       "most 1024 bytes";
		return -EINVAL;
	}
	pthread_mutex_lock(&ps->mu);
	struct ps_node_report *r = &ps->report[w];
	if (r->relay_busy) {
		pthread_mutex_unlock(&ps->mu);
		free(text);
		*err = "relay: a request to that worker is in flight";
		return -EBUSY;
	}
	snprintf(r->request, sizeof(r->request), "%s", text);
	free(text);
	r->relay_busy = r->relay_pending = true;
	r->reply_done = false;
	r->reply_len = 0;
	int rc = wait_reply_locked(ps, (uint32_t)w, 30 * ESD_NS_PER_S);
	json_t *reply = !rc && r->reply ? json_loads(r->reply, 0, NULL) : NULL;
	r->relay_busy = r->relay_pending = false;
	pthread_mutex_unlock(&ps->mu);
	if (!reply) {
		*err = rc == -ETIMEDOUT ? "relay: no reply from the node in 30 s (is the job "
					  "iterating?)"
		       : rc ? "relay: the node left or the job failed"
			    : "relay: the node's reply is not JSON";
		return rc ? rc : -EPROTO;
	}
	*resp = json_pack("{s:i, s:o}", "worker", (int)w, "reply", reply);
	return 0;
}

static const struct esd_ctl_cmd ps_cmds[] = {
	{"status", cmd_status, "shard status: iteration, workers, rows, counters"},
	{"checkpoint", cmd_checkpoint, "request a checkpoint at the next flushed boundary"},
	{"set", cmd_set, "change dispatch.method, dispatch.alpha or cache.policy at an "
			 "iteration every node switches at"},
	{"stop", cmd_stop, "stop the whole job gracefully at the next checkpoint boundary"},
	{"relay", cmd_relay, "run a command on one node of the job, through shard 0"},
	{NULL, NULL, NULL},
};

/* The command line. */
struct args {
	struct esd_config *cfg;
	const char *listen_addr, *control;
	uint64_t shard;
	bool restore, resume;
};

/* Parse the options; 0, -1 after --help, or the exit code. */
static int parse_args(int argc, char **argv, struct args *a)
{
	static const struct option opts[] = {
		{"config", required_argument, NULL, 'c'}, {"shard", required_argument, NULL, 's'},
		{"listen", required_argument, NULL, 'l'}, {"control", required_argument, NULL, 'C'},
		{"restore", no_argument, NULL, 'r'},      {"resume", no_argument, NULL, 'R'},
		{"set", required_argument, NULL, 'S'},    {"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	bool have_cfg = false;
	int c;

	while ((c = getopt_long(argc, argv, "c:s:l:C:rRS:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			if (esd_config_load(a->cfg, optarg))
				return 2;
			have_cfg = true;
			break;
		case 's':
			if (esd_parse_u64(optarg, &a->shard) || a->shard >= ESD_JOB_MAX_SHARDS) {
				fprintf(stderr, "esd-ps: --shard '%s': expected 0..%d\n", optarg,
					ESD_JOB_MAX_SHARDS - 1);
				return 2;
			}
			break;
		case 'l':
			a->listen_addr = optarg;
			break;
		case 'C':
			a->control = optarg;
			break;
		case 'r':
			a->restore = true;
			break;
		case 'R':
			a->resume = true;
			break;
		case 'S':
			if (esd_config_set(a->cfg, optarg))
				return 2;
			break;
		case 'h':
			usage(stdout);
			return -1;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!have_cfg || optind != argc) {
		usage(stderr);
		return 2;
	}
	return 0;
}

/* The model shape from the dataset stream (none without one), and its
 * digest bound into the job token; shard's part of the memory plan
 * checked against this machine. 0 or 1. */
static int stream_shape(struct esd_job *job, uint32_t shard, uint32_t *tables, uint32_t *width,
			uint32_t *dense, uint64_t *total_rows)
{
	*tables = *width = *dense = 0;
	*total_rows = 0;
	if (!job->stream[0])
		return 0;
	struct esd_ds_reader *dr;
	if (esd_ds_open(job->stream, &dr)) {
		ESD_ERR("ps", "cannot open data.stream %s: %s", job->stream, esd_ds_last_error());
		return 1;
	}
	if (!esd_ds_reader_info(dr)->nsamples) {
		ESD_ERR("ps", "data.stream %s has no samples: nothing to train on", job->stream);
		esd_ds_close(dr);
		return 1;
	}
	/* this shard's memory against the machine, and the passes over the
	 * stream, said before anything is allocated */
	if (esd_job_check_tables(job, esd_ds_reader_info(dr)->ntables, "ps") ||
	    esd_plan_start_check(job, esd_ds_reader_info(dr), (int)shard, -1, "ps")) {
		esd_ds_close(dr);
		return 1;
	}
	esd_plan_log_passes(job, esd_ds_reader_info(dr)->nsamples, "ps");
	*tables = esd_ds_reader_info(dr)->ntables;
	*width = esd_ds_keys_per_sample(esd_ds_reader_info(dr));
	*dense = esd_ds_reader_info(dr)->ndense;
	for (uint32_t t = 0; t < *tables; t++)
		*total_rows += esd_ds_reader_info(dr)->rows[t];
	uint64_t digest;
	int rc = esd_ds_digest(dr, &digest);
	if (rc)
		ESD_ERR("ps", "data.stream %s: %s", job->stream, esd_ds_last_error());
	else
		esd_job_bind_stream(job, digest);
	esd_ds_close(dr);
	return rc ? 1 : 0;
}

/* The nodes' cache size and hot rows, resolved as esdd does: a live
 * workers.rates change must keep a micro-batch and the hot rows within
 * every cache (ps_rates_value), and lookahead needs the size. 0 or 1. */
static int node_cache_limits(struct ps *ps, uint64_t total_rows)
{
	const struct esd_job *job = &ps->job;
	ps->cache_rows = job->cache_rows ? job->cache_rows
					 : (uint64_t)(job->cache_ratio * (double)total_rows);
	uint64_t maxb = 0;
	for (uint32_t w = 0; w < job->n; w++)
		maxb = job->batch[w] > maxb ? job->batch[w] : maxb;
	if (ps->cache_rows < maxb * ps->width)
		ps->cache_rows = maxb * ps->width;
	if (job->replicate[0]) {
		esd_key_t *hot = NULL;
		uint64_t nhot = 0;
		if (esd_ds_hot_load(job->replicate, &hot, &nhot)) {
			ESD_ERR("ps", "dispatch.replicate: %s", esd_ds_last_error());
			return 1;
		}
		free(hot);
		ps->hot_rows = nhot;
	}
	ps->job.derived.max_batch = esd_job_max_batch(ps->cache_rows, ps->hot_rows, ps->width);
	int rc = esd_job_fit_prior(&ps->job, ps->width); /* fit: the nodes' sizes to start from */
	if (rc) {
		ESD_ERR("ps", "workers.split = fit: no sizes to start from (%u keys per sample, "
			"at most %u samples per cache): %s", ps->width, ps->job.derived.max_batch,
			esd_strerror(rc));
		return 1;
	}
	esd_size_fitter_init(&ps->fit.fitter, ps->job.n, (uint32_t)ps->job.derived.global_batch,
			     ps->job.derived.max_batch, ps->job.refit_threshold);
	return 0;
}

/* The job key, when the job names one; without, the shard starts only
 * when the job says job.insecure = yes (warned: anyone who reaches the
 * port may join). */
static int load_job_key(const struct esd_job *job, uint32_t shard, struct esd_key *key)
{
	char who[32];
	snprintf(who, sizeof(who), "esd-ps shard %u", shard);
	if (esd_job_key_check(job, who))
		return 1;
	if (job->key_file[0])
		return esd_key_load(job->key_file, key) ? 1 : 0;
	return 0;
}

/* Listen for the nodes' links; prints the address (the testbed reads the
 * line to learn a port the kernel picked). */
static int listen_for_nodes(const struct esd_job *job, uint32_t shard, const char *addr,
			    const struct esd_key *key, struct esd_listener **lis)
{
	struct esd_link_opts lo;
	esd_link_opts_init(&lo);
	lo.key = key;
	lo.addr = addr;
	lo.max_links = job->n;
	esd_job_link_opts(job, ESD_JOB_LINK_LISTEN, &lo);
	lo.dpdk_channel = shard;
	int rc = esd_listener_open(&lo, lis);
	if (rc) {
		ESD_ERR("ps", "cannot listen on %s (%s): %s", lo.addr, job->backend,
			esd_strerror(rc));
		esd_job_link_explain(job, rc);
		return 1;
	}
	char where[256];
	esd_listener_addr(*lis, where, sizeof(where));
	printf("esd-ps shard %u listening on %s %s\n", (unsigned)shard, job->backend, where);
	fflush(stdout);
	return 0;
}

/* Accept and serve links until every worker finished or a signal. */
static void serve(struct ps *ps, struct esd_listener *lis)
{
	int64_t last_accept_err = 0;
	while (!stop_sig) {
		pthread_mutex_lock(&ps->mu);
		bool all_done = ps->bar.finished >= ps->job.n;
		bool failed_and_left = ps->bar.failed && !ps->bar.connected_mask;
		pthread_mutex_unlock(&ps->mu);
		if (all_done) {
			ESD_INFO("ps", "every worker left after iteration %llu",
				 (unsigned long long)ps->bar.iter_done - 1);
			break;
		}
		if (failed_and_left) {
			ESD_ERR("ps", "the job failed (%s) and every worker left: exiting",
				ps->bar.fail_msg);
			break;
		}
		struct esd_link *l;
		int rc = esd_listener_accept(lis, 200 * ESD_NS_PER_MS, &l);
		if (rc == -ETIMEDOUT)
			continue;
		if (rc) { /* out of descriptors, a connection gone before accept: survived */
			int64_t now = esd_now_ns();
			if (now - last_accept_err > ESD_NS_PER_S) {
				ESD_WARN("ps", "accept: %s (the shard goes on)", esd_strerror(rc));
				last_accept_err = now;
			}
			esd_sleep_ns(50 * ESD_NS_PER_MS);
			continue;
		}
		ps_serve_link(ps, l);
	}
	if (stop_sig)
		ESD_INFO("ps", "stopping at once (%s) at iteration %llu", strsignal(stop_sig),
			 (unsigned long long)ps->bar.iter_done);
}

/* Stop the link threads (each closes its link) and join them. */
static void stop_links(struct ps *ps)
{
	pthread_mutex_lock(&ps->mu);
	ps->bar.stopping = true;
	pthread_cond_broadcast(&ps->cv);
	pthread_mutex_unlock(&ps->mu);
	for (int i = 0; i < ps->nlinks; i++) {
		if (!ps->links[i].used)
			continue;
		pthread_join(ps->links[i].thread, NULL);
		ps->links[i].used = false;
	}
}

/* A start without this job's own checkpoint: ps.resume_from's checkpoint
 * when the job names one (in another directory than ps.checkpoint_dir,
 * which this job's checkpoints overwrite), else the rows of
 * ps.warm_start's export when the job names one. 0 or 1. */
static int fresh_start(struct ps *ps, const struct esd_job *job)
{
	if (job->resume_from[0]) {
		char a[PATH_MAX], b[PATH_MAX];
		if (job->checkpoint_dir[0] && realpath(job->resume_from, a) &&
		    realpath(job->checkpoint_dir, b) && !strcmp(a, b)) {
			ESD_ERR("ps", "ps.resume_from = %s is ps.checkpoint_dir too: this job's "
				"checkpoints would overwrite the files it resumes from; give it "
				"another ps.checkpoint_dir", job->resume_from);
			return 1;
		}
		return ps_resume_from(ps, job->resume_from) ? 1 : 0;
	}
	return job->warm_start[0] && ps_warm_start(ps, job->warm_start) ? 1 : 0;
}

/* Clear what a checkpoint write that died left, then restore the shard
 * from its checkpoint when asked (--restore, or --resume where one exists);
 * a job without one starts from ps.resume_from or ps.warm_start. */
static int prepare_restore(struct ps *ps, const struct esd_job *job, const struct args *a)
{
	char path[1100];

	ps_checkpoint_path(ps, path, sizeof(path));
	if (job->checkpoint_dir[0]) {
		int n = esd_ckpt_remove_temps(path);
		if (n > 0)
			ESD_INFO("ps", "removed %d unfinished checkpoint file(s) next to %s", n, path);
	}
	if (!a->restore && !a->resume)
		return fresh_start(ps, job);
	if (a->resume && (!job->checkpoint_dir[0] || access(path, F_OK))) {
		ESD_INFO("ps", "no checkpoint %s: the job starts %s",
			 job->checkpoint_dir[0] ? path : "(no ps.checkpoint_dir)",
			 job->resume_from[0] ? "from ps.resume_from" : "at iteration 0");
		return fresh_start(ps, job);
	}
	return ps_restore(ps, path) ? 1 : 0;
}

/* Everything after the command line: the job, the shard's state, its
 * listener; serve until the job ends. Returns the exit code. */
static int serve_job(struct ps *ps, struct args *a)
{
	struct esd_job job;
	struct esd_listener *lis;
	struct esd_key key;
	struct esd_ctl_server *ctl = NULL;
	uint32_t tables, width, dense;
	uint64_t total_rows;
	char tag[32];
	int rc;

	snprintf(tag, sizeof(tag), "esd-ps%u", (unsigned)a->shard);
	esd_log_init(tag);
	if (esd_config_check_keys(a->cfg, esd_job_keys) || esd_job_from_config(a->cfg, &job) ||
	    esd_job_link_check(&job))
		return 2;
	if (a->shard >= job.shards) {
		ESD_ERR("ps", "--shard %llu but the job has %u shards", (unsigned long long)a->shard,
			job.shards);
		return 2;
	}
	if (load_job_key(&job, (uint32_t)a->shard, &key))
		return 2;
	if (!a->listen_addr)
		a->listen_addr = job.addrs[a->shard][0] ? job.addrs[a->shard] : "127.0.0.1:0";
	if (job.checkpoint_dir[0] &&
	    esd_plan_check_dir(job.checkpoint_dir, "ps.checkpoint_dir", "ps"))
		return 1;
	if (stream_shape(&job, (uint32_t)a->shard, &tables, &width, &dense, &total_rows))
		return 1;
	rc = ps_init(ps, &job, (uint32_t)a->shard, tables, dense);
	if (rc) {
		ESD_ERR("ps", "cannot initialise the shard: %s", esd_strerror(rc));
		return 1;
	}
	ps->width = width;
	rc = 1;
	if (node_cache_limits(ps, total_rows) || prepare_restore(ps, &job, a))
		goto fini;
	signal(SIGPIPE, SIG_IGN);
	if (esd_signal_thread_start(on_signal, ps))
		goto fini;
	if (listen_for_nodes(&job, (uint32_t)a->shard, a->listen_addr, job.key_file[0] ? &key : NULL,
			     &lis))
		goto fini;
	if (a->control && esd_ctl_server_start(a->control, ps_cmds, ps, &ctl)) {
		esd_listener_close(lis);
		goto fini;
	}
	serve(ps, lis);
	stop_links(ps);
	esd_listener_close(lis);
	esd_ctl_server_stop(ctl);
	rc = ps->bar.failed ? 1 : 0;
fini:
	ps_fini(ps);
	return rc;
}

int main(int argc, char **argv)
{
	static struct ps ps;
	struct args a = {0};
	int rc;

	ps_started_ns = esd_now_ns();
	if (esd_config_create(&a.cfg))
		return 1;
	rc = parse_args(argc, argv, &a);
	if (rc == 0)
		rc = serve_job(&ps, &a);
	else if (rc < 0) /* --help, --version */
		rc = 0;
	esd_config_free(a.cfg);
	return rc;
}
