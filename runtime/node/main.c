/*
 * esdd: the node daemon of one worker.
 *
 *   esdd --config job.ini --rank W --dir NODE_DIR [--control PATH]
 *        [--dispatcher-core C] [--set section.key=value ...]
 *
 * Hosts the worker's embedding cache in huge-page shared memory, runs the
 * dispatcher thread and the iterations of docs/design.md §3 against the PS
 * shards, and serves the node's trainers through NODE_DIR/esdd.sock.
 * SIGINT/SIGTERM (or esdctl stop) stops the whole job gracefully at a
 * checkpoint boundary; a second signal abandons it.
 */
#include "node.h"
#include "xchg.h"

#include <esd/ctl.h>
#include <esd/clock.h>
#include <esd/err.h>
#include <esd/job_link.h>
#include <esd/log.h>
#include <esd/model.h>
#include <esd/pin.h>
#include <esd/plan.h>
#include <esd/signals.h>

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f)
{
	fprintf(f, "usage: esdd --config JOB.ini --rank W --dir NODE_DIR [--control PATH]\n"
		   "            [--dispatcher-core C] [--set section.key=value ...]\n"
		   "  --rank W             worker rank of this node (0..workers-1)\n"
		   "  --dir DIR            node directory (mode 0700): lock and trainer socket\n"
		   "  --control PATH       control socket for esdctl (default DIR/control.sock)\n"
		   "  --dispatcher-core C  pin the dispatcher thread to core C (default: last core;\n"
		   "                       -1: do not pin)\n"
		   "  --set K=V            override a job setting\n"
		   "  --summary FILE       write a JSON summary of the run at exit\n");
}

/* SIGINT/SIGTERM, on the signal thread (esd/signals.h): the first asks
 * for a graceful stop of the whole job (node_ask_stop); a second abandons
 * it, and the daemon exits within a few seconds whatever it waits for. */
static void on_signal(int sig, unsigned count, void *arg)
{
	struct node *nd = arg;
	if (count == 1) {
		node_ask_stop(nd, strsignal(sig));
		return;
	}
	ESD_WARN("node", "%s again: abandoning the job", strsignal(sig));
	esd_node_signal = sig;
	esd_sleep_ns(5 * ESD_NS_PER_S);
	ESD_ERR("node", "still running 5 s after abandoning: exiting");
	_exit(1);
}

/* The command line. */
struct args {
	struct esd_config *cfg;
	const char *dir, *control;
	uint64_t rank;
	int64_t core; /* -2: the last core */
};

/* Parse the options into a (job settings, the rest); 0, or the exit code
 * (0 after --help is reported as -1). */
static int parse_args(int argc, char **argv, struct node *nd, struct args *a)
{
	static const struct option opts[] = {
		{"config", required_argument, NULL, 'c'}, {"rank", required_argument, NULL, 'r'},
		{"dir", required_argument, NULL, 'd'},    {"control", required_argument, NULL, 'C'},
		{"dispatcher-core", required_argument, NULL, 'p'},
		{"set", required_argument, NULL, 'S'},    {"help", no_argument, NULL, 'h'},
		{"summary", required_argument, NULL, 'o'}, {NULL, 0, NULL, 0},
	};
	bool have_cfg = false;
	int c;

	while ((c = getopt_long(argc, argv, "c:r:d:C:p:S:ho:", opts, NULL)) != -1) {
		switch (c) {
		case 'o':
			nd->summary_path = optarg;
			break;
		case 'c':
			if (esd_config_load(a->cfg, optarg))
				return 2;
			have_cfg = true;
			break;
		case 'r':
			if (esd_parse_u64(optarg, &a->rank) || a->rank >= ESD_MAX_WORKERS) {
				fprintf(stderr, "esdd: --rank '%s': expected 0..%d\n", optarg,
					ESD_MAX_WORKERS - 1);
				return 2;
			}
			break;
		case 'd':
			a->dir = optarg;
			break;
		case 'C':
			a->control = optarg;
			break;
		case 'p':
			if (esd_parse_i64(optarg, &a->core) || a->core < -1) {
				fprintf(stderr, "esdd: --dispatcher-core '%s': expected a core or -1\n",
					optarg);
				return 2;
			}
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
	if (!have_cfg || a->rank == UINT64_MAX || !a->dir || optind != argc) {
		usage(stderr);
		return 2;
	}
	return 0;
}

/* The job and this node's identity; 0 or the exit code. */
static int setup_node(struct node *nd, const struct args *a, char *tag, size_t taglen)
{
	snprintf(tag, taglen, "esdd%u", (unsigned)a->rank);
	esd_log_init(tag);
	if (esd_config_check_keys(a->cfg, esd_job_keys) || esd_job_from_config(a->cfg, &nd->job) ||
	    esd_job_link_check(&nd->job))
		return 2;
	if (a->rank >= nd->job.n) {
		ESD_ERR("node", "--rank %llu but the job has %u workers",
			(unsigned long long)a->rank, nd->job.n);
		return 2;
	}
	nd->rank = (uint32_t)a->rank;
	node_rate_est_init(nd);
	nd->tr.lock_fd = nd->tr.listen_fd = -1;
	for (uint32_t i = 0; i < ESD_MAX_TRAINERS; i++)
		nd->tr.t[i].fd = nd->tr.t[i].xchg_fd = nd->tr.t[i].grad_fd = -1;
	snprintf(nd->dir, sizeof(nd->dir), "%s", a->dir);
	nd->dispatcher_core = a->core == -2 ? esd_pin_ncores() - 1 : (int)a->core;
	pthread_mutex_init(&nd->qmu, NULL);
	pthread_cond_init(&nd->qcv, NULL);
	return 0;
}

/* The largest micro-batch of the job. */
static uint64_t max_micro_batch(const struct node *nd)
{
	uint64_t maxb = 0;
	for (uint32_t w = 0; w < nd->job.n; w++)
		maxb = nd->job.batch[w] > maxb ? nd->job.batch[w] : maxb;
	return maxb;
}

/* workers.checkpoint_dir, where the job checkpoints and names one: it
 * exists and this process can write it (the node directory, the default,
 * is made and locked by node_trainer_init). 0 or the exit code. */
static int check_checkpoint_dir(const struct node *nd)
{
	if (!nd->job.checkpoint_dir[0] || !nd->job.node_ckpt_dir[0])
		return 0;
	return esd_plan_check_dir(nd->job.node_ckpt_dir, "workers.checkpoint_dir", "node") ? 1
											      : 0;
}

/* The job key (job.key) for the links to the shards, or job.insecure;
 * 0 or the exit code. */
static int load_key(struct node *nd)
{
	char who[32];
	snprintf(who, sizeof(who), "esdd rank %u", nd->rank);
	if (esd_job_key_check(&nd->job, who))
		return 2;
	if (!nd->job.key_file[0])
		return 0;
	if (esd_key_load(nd->job.key_file, &nd->links.key))
		return 2;
	nd->links.keyed = true;
	return 0;
}

/* The data stream gives the model's shape and the table sizes (and its
 * digest, part of the job token); the cache is sized from them (raised to one micro-batch, checked against the
 * lookahead hints). 0 or the exit code. */
static int size_from_stream(struct node *nd)
{
	struct esd_ds_reader *dr;
	if (!nd->job.stream[0] || esd_ds_open(nd->job.stream, &dr)) {
		ESD_ERR("node", "cannot open data.stream '%s': %s", nd->job.stream,
			nd->job.stream[0] ? esd_ds_last_error() : "not set");
		return 1;
	}
	const struct esd_ds_info *di = esd_ds_reader_info(dr);
	if (!di->nsamples) {
		ESD_ERR("node", "data.stream %s has no samples: nothing to train on",
			nd->job.stream);
		esd_ds_close(dr);
		return 1;
	}
	/* this node's memory (daemon and trainer) against the machine, and
	 * the passes over the stream, said before anything is allocated */
	if (esd_job_check_tables(&nd->job, di->ntables, "node") ||
	    esd_plan_start_check(&nd->job, di, -1, (int)nd->rank, "node")) {
		esd_ds_close(dr);
		return 1;
	}
	esd_plan_log_passes(&nd->job, di->nsamples, "node");
	nd->tables = di->ntables;
	nd->width = esd_ds_keys_per_sample(di);
	nd->bags = esd_ds_has_bags(di);
	nd->weighted = di->weighted != 0;
	nd->dense = di->ndense;
	uint64_t total_rows = 0;
	for (uint32_t t = 0; t < di->ntables; t++)
		total_rows += di->rows[t];
	uint64_t digest;
	if (esd_ds_digest(dr, &digest)) {
		ESD_ERR("node", "data.stream %s: %s", nd->job.stream, esd_ds_last_error());
		esd_ds_close(dr);
		return 1;
	}
	esd_job_bind_stream(&nd->job, digest);
	esd_ds_close(dr);
	if (!nd->job.cache_rows)
		nd->job.cache_rows = (uint64_t)(nd->job.cache_ratio * (double)total_rows);
	uint64_t maxb = max_micro_batch(nd);
	if (nd->job.cache_rows < maxb * nd->width) {
		ESD_WARN("node", "cache of %llu rows is below one micro-batch's %llu keys%s; "
			 "raised to that", (unsigned long long)nd->job.cache_rows,
			 (unsigned long long)(maxb * nd->width),
			 nd->bags ? " (every bag at its max_bag)" : "");
		nd->job.cache_rows = maxb * nd->width;
	}
	if (nd->job.policy == ESD_POLICY_LOOKAHEAD &&
	    nd->job.derived.global_batch * nd->width > nd->job.cache_rows) {
		ESD_ERR("node", "cache.policy = lookahead: a cache of %llu rows cannot hold the "
			"hints of a global batch (%llu keys); use a larger cache.rows/cache.ratio "
			"or another policy", (unsigned long long)nd->job.cache_rows,
			(unsigned long long)(nd->job.derived.global_batch * nd->width));
		return 1;
	}
	return 0;
}

/* dispatch.replicate: the hot rows every worker holds (FAE). 0 or the
 * exit code. */
static int load_replicated(struct node *nd)
{
	if (!nd->job.replicate[0])
		return 0;
	uint64_t nrep = 0, maxb = max_micro_batch(nd);
	if (esd_ds_hot_load(nd->job.replicate, &nd->rep, &nrep)) {
		ESD_ERR("node", "dispatch.replicate: %s", esd_ds_last_error());
		return 1;
	}
	nd->nrep = (uint32_t)nrep;
	if (nrep + maxb * nd->width > nd->job.cache_rows) {
		ESD_ERR("node", "dispatch.replicate: %llu hot rows plus one micro-batch's "
			"%llu keys exceed the cache's %llu rows (fewer hot rows, or a "
			"larger cache.rows/cache.ratio)", (unsigned long long)nrep,
			(unsigned long long)(maxb * nd->width),
			(unsigned long long)nd->job.cache_rows);
		return 1;
	}
	ESD_INFO("node", "%u hot rows replicated on every worker (%s)", nd->nrep,
		 nd->job.replicate);
	return 0;
}

/* This machine's MemAvailable in bytes, 0 when unknown. */
static uint64_t mem_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	unsigned long long kb = 0;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return (uint64_t)kb * 1024;
}

/* Refuse at start a cache this machine cannot hold (rather than be killed
 * by the kernel once the rows fill it): the region, and the dispatcher's
 * metadata of every worker's cache (the snapshots and the saved copies of
 * checkpoint boundaries, which a checkpointed job fills). 0 or -ENOMEM. */
static int check_memory(struct node *nd, const struct esd_cache_config *co)
{
	struct esd_cache_sizes sz;
	uint64_t avail = mem_available();
	if (!avail || esd_cache_size(co, &sz))
		return 0;
	uint64_t meta = esd_cmeta_bytes(co->rows);
	uint64_t copies = nd->job.checkpoint_dir[0] ? 1 + ORDER_RING + 2 : 1;
	uint64_t snaps = (uint64_t)nd->job.n * meta * copies;
	if (sz.total + snaps <= avail)
		return 0;
	ESD_ERR("node", "a cache of %llu rows does not fit this machine: its region needs %.2f "
		"GiB and the dispatcher's %u x %llu copies of the workers' cache metadata %.2f GiB, "
		"MemAvailable is %.2f GiB; lower cache.rows / cache.ratio (esdctl plan JOB.ini "
		"gives the whole job's figures)", (unsigned long long)co->rows,
		(double)sz.total / (1u << 30), nd->job.n, (unsigned long long)copies,
		(double)snaps / (1u << 30), (double)avail / (1u << 30));
	return -ENOMEM;
}

/* The dense parameters' count (the reference model's shape) and the
 * cache region. 0 or the exit code. */
static int make_cache(struct node *nd, const char *tag)
{
	/* live re-splits stay within the cache (esd_job_resplit) */
	nd->job.derived.max_batch = esd_job_max_batch(nd->job.cache_rows, nd->nrep, nd->width);
	int prc = esd_job_fit_prior(&nd->job, nd->width); /* fit: the sizes to start from */
	if (prc) {
		ESD_ERR("node", "workers.split = fit: no sizes to start from (%u keys per sample, "
			"at most %u samples per cache): %s", nd->width, nd->job.derived.max_batch,
			esd_strerror(prc));
		return 1;
	}
	struct esd_model_shape sh = {.tables = nd->tables, .dim = nd->job.dim, .dense = nd->dense,
				     .hidden = nd->job.hidden,
				     .dims = nd->job.ntable_dims ? nd->job.table_dims : NULL};
	struct esd_model *mdl;
	int rc = esd_model_create(&sh, &mdl);
	if (rc) {
		ESD_ERR("node", "model shape %u tables x %u floats + %u dense: %s", nd->tables,
			nd->job.dim, nd->dense, esd_strerror(rc));
		return 1;
	}
	nd->dense_params = (uint32_t)esd_model_dense_len(mdl);
	esd_model_free(mdl);
	struct esd_cache_config co = {
		.rows = (uint32_t)nd->job.cache_rows, .dim = nd->job.dim,
		.optimizer = nd->job.optim.opt, .ntables = nd->tables, .policy = nd->job.policy,
		.pages = ESD_CACHE_PAGES_AUTO, .name = tag,
	};
	if (check_memory(nd, &co))
		return 1;
	rc = esd_cache_create(&co, &nd->cache);
	if (rc) {
		ESD_ERR("node", "cannot create the cache region: %s", esd_strerror(rc));
		return 1;
	}
	nd->cm = esd_cache_meta(nd->cache);
	return 0;
}

/* Links, the starting boundary, the dispatcher thread and the
 * iterations; then the summary. Returns the run's errno (0: done). */
static int run_node(struct node *nd)
{
	uint64_t ps_iter = 0;
	struct node_state resume = {0};
	node_state_remove_temps(nd);
	int rc = node_links_open(nd, &ps_iter);
	/* shards restored from a checkpoint: the whole job resumes there,
	 * from this node's part of it (a finished job only ends again) */
	bool finished = ps_iter >= nd->job.iterations;
	/* a node that follows the decider keeps no dispatcher state */
	const bool follows = nd->job.derived.one_decider && nd->rank != 0;
	if (!rc && ps_iter != 0 && !finished && nd->job.resume_from[0] &&
	    !node_state_is_ours(nd, ps_iter, follows ? "cache" : "state")) {
		nd->rec.cold_at = ps_iter; /* a resize: nothing of this node to resume */
		ESD_INFO("node", "the job resumes after iteration %llu from ps.resume_from's "
			 "checkpoint (data cursor %llu): this node starts with a cold cache and a "
			 "new dispatcher state", (unsigned long long)ps_iter,
			 (unsigned long long)node_cursor_at(nd, ps_iter));
	} else if (!rc && ps_iter != 0 && !finished && !follows) {
		rc = node_state_read(nd, ps_iter, "state", nd->job.n, &resume);
	}
	if (!rc && ps_iter == 0)
		rc = node_save_boundary(nd, 0);
	struct node_state *from = ps_iter && !nd->rec.cold_at && !follows ? &resume : NULL;
	if (!rc && !finished)
		rc = node_dispatcher_start(nd, from, ps_iter);
	node_state_free(&resume);
	if (!rc) {
		ESD_INFO("node", "worker %u of %u: %s (alpha %.3g), %s sync, cache %llu rows (%s), "
			 "%llu iterations of %llu samples", nd->rank, nd->job.n, nd->job.method,
			 nd->job.alpha, esd_job_sync_name(&nd->job),
			 (unsigned long long)nd->job.cache_rows, esd_policy_name(nd->job.policy),
			 (unsigned long long)nd->job.iterations,
			 (unsigned long long)nd->job.derived.global_batch);
		rc = node_run(nd, ps_iter);
		node_dispatcher_stop(nd);
	}
	/* STOP only after a good end: after a failure the trainers see their
	 * daemon go away and fail too, as a supervisor must see */
	if (!rc)
		node_trainer_stop(nd);
	double el = esd_ns_to_s(esd_now_ns() - nd->stats.t_start_ns);
	if (!rc)
		ESD_INFO("node", "done: %llu iterations in %.2f s (%.2f it/s), last loss %.6f",
			 (unsigned long long)nd->stats.iter_done, el, el > 0 ? nd->stats.iter_done / el : 0,
			 nd->stats.last_loss);
	if (!rc && nd->stats.iter_done < nd->job.iterations)
		ESD_INFO("node", "stopped on request after iteration %llu of %llu%s",
			 (unsigned long long)nd->stats.iter_done,
			 (unsigned long long)nd->job.iterations,
			 nd->job.checkpoint_dir[0] ? "; start the job again to resume from it"
						   : " (no ps.checkpoint_dir: it cannot resume)");
	node_write_summary(nd, rc);
	return rc;
}

/* Everything after the command line: set the node up, serve the job, tear
 * it down. Returns the exit code. */
static int serve_job(struct node *nd, struct args *a)
{
	struct esd_ctl_server *ctl = NULL;
	char tag[32], ctlpath[600];
	int rc;

	if ((rc = setup_node(nd, a, tag, sizeof(tag))) || (rc = check_checkpoint_dir(nd)) ||
	    (rc = load_key(nd)) ||
	    (rc = size_from_stream(nd)) ||
	    (rc = load_replicated(nd)) || (rc = make_cache(nd, tag)))
		return rc;
	signal(SIGPIPE, SIG_IGN);
	if (esd_signal_thread_start(on_signal, nd) || node_trainer_init(nd))
		return 1;
	/* the node directory holds this node's part of each checkpoint unless
	 * workers.checkpoint_dir names another (checked at setup) */
	if (nd->job.checkpoint_dir[0] && !nd->job.node_ckpt_dir[0] &&
	    esd_plan_check_dir(nd->dir, "the node directory (--dir, where workers.checkpoint_dir "
			       "is unset)", "node"))
		return 1;
	snprintf(ctlpath, sizeof(ctlpath), "%s/control.sock", a->dir);
	if (esd_ctl_server_start(a->control ? a->control : ctlpath, node_ctl_cmds, nd, &ctl))
		return 1;
	/* a launcher reads this line to know the node is up */
	printf("esdd worker %u ready: %u trainer(s) attach on %s/esdd.sock\n", nd->rank,
	       nd->tr.count, nd->dir);
	fflush(stdout);
	rc = run_node(nd);
	esd_ctl_server_stop(ctl);
	node_links_close(nd);
	esd_uplink_free(nd->links.uplink);
	node_trainer_fini(nd);
	free(nd->rec.saved_cm[0]);
	free(nd->rec.saved_cm[1]);
	free(nd->rep);
	free(nd->relay.reply);
	json_decref(nd->stats.at_warmup);
	esd_cache_close(nd->cache);
	return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
	static struct node nd;
	struct args a = {.rank = UINT64_MAX, .core = -2};
	int rc;

	if (esd_config_create(&a.cfg))
		return 1;
	rc = parse_args(argc, argv, &nd, &a);
	if (rc == 0)
		rc = serve_job(&nd, &a);
	else if (rc < 0) /* --help, --version */
		rc = 0;
	esd_config_free(a.cfg);
	return rc;
}
