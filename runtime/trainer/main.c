/*
 * esd-trainer: the C reference trainer. Attaches to its node's esdd and
 * trains the reference WDL-style model (esd/model.h) for real, reading
 * embedding rows in place and writing their gradients in place; or, with
 * --emulate, touches the same rows and sleeps for the configured compute
 * time per sample (standing for a GPU) for throughput runs.
 *
 *   esd-trainer [--dir NODE_DIR] [--emulate NS_PER_SAMPLE] [--quiet]
 *
 * Without --dir it attaches to $ESD_NODE_DIR (what esd-launch sets for
 * the trainers torchrun starts).
 */
#include <esd/clock.h>
#include <esd/err.h>
#include <esd/libesd.h>
#include <esd/log.h>
#include <esd/model.h>

#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
	fprintf(f, "usage: esd-trainer [--dir NODE_DIR] [--emulate NS_PER_SAMPLE] [--quiet]\n"
		   "  --dir DIR        node directory of the esdd to attach to (default:\n"
		   "                   $ESD_NODE_DIR; under torchrun, GROUP_RANK and\n"
		   "                   LOCAL_WORLD_SIZE are checked against the daemon)\n"
		   "  --emulate NS     emulated compute: touch rows, sleep NS per sample\n"
		   "  --quiet          no per-iteration loss lines\n"
		   "  --die-at ITER    (tests) SIGKILL itself mid-iteration ITER, half of its\n"
		   "                   gradients written and nothing committed\n"
		   "  --fail-at ITER   (tests) fail at iteration ITER, telling the daemon why\n"
		   "  --abort-at ITER  (tests) abort() at iteration ITER (SIGABRT)\n");
}

/* An error of this trainer: logged, and sent to the daemon, which fails
 * the job with it (esd_trainer_fail). */
static void give_up(struct esd_trainer *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void give_up(struct esd_trainer *t, const char *fmt, ...)
{
	char text[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	ESD_ERR("trainer", "%s", text);
	esd_trainer_fail(t, text);
}

/* SIGINT/SIGTERM: the first asks the daemon for a graceful stop of the job
 * (the trainer trains on until the daemon says STOP), a second exits. */
static volatile sig_atomic_t stop_signals;

static void on_stop_signal(int sig)
{
	(void)sig;
	if (stop_signals++)
		_exit(1);
}

/* The next micro-batch, passing a stop request to the daemon once. */
static int next_batch(struct esd_trainer *t, struct esd_microbatch *mb, int *asked)
{
	for (;;) {
		if (stop_signals && !*asked) {
			*asked = 1;
			ESD_INFO("trainer", "stop requested: training on to the job's stop boundary");
			esd_trainer_request_stop(t);
		}
		int rc = esd_trainer_next(t, 200, mb);
		if (rc != -ETIMEDOUT)
			return rc;
	}
}

/* Under torchrun the node's rank (GROUP_RANK) and its trainers
 * (LOCAL_WORLD_SIZE) must be the daemon's worker rank and workers.trainers:
 * a mismatch would leave a node waiting for a trainer that never comes. */
static int check_torchrun(struct esd_trainer *t, const struct esd_trainer_info *in,
			  const char *dir)
{
	const char *g = getenv("GROUP_RANK"), *lws = getenv("LOCAL_WORLD_SIZE");
	if (g && strtoul(g, NULL, 10) != in->rank) {
		give_up(t, "torchrun's node rank (GROUP_RANK) is %s but the daemon of %s "
			"is worker %u: give each node's torchrun --node_rank its worker rank", g,
			dir, in->rank);
		return -1;
	}
	if (lws && strtoul(lws, NULL, 10) != in->trainers) {
		give_up(t, "torchrun starts %s trainers on this node (LOCAL_WORLD_SIZE) but "
			"the job's workers.trainers is %u: make --nproc_per_node match it", lws,
			in->trainers);
		return -1;
	}
	return 0;
}

/* hidden units from the dense table's length: P = H*(d_1 + ... + d_T + D) +
 * 2H + 1 + D */
static unsigned hidden_of(const struct esd_trainer_info *in, const uint32_t *dims)
{
	uint64_t width = in->dense;
	for (uint32_t t = 0; t < in->tables; t++)
		width += dims[t];
	if (in->dense_params < 1 + in->dense)
		return 0;
	uint64_t rest = in->dense_params - 1 - in->dense;
	if (rest % (width + 2))
		return 0;
	return (unsigned)(rest / (width + 2));
}

/* Long: esd-trainer's options, its attach, and its loop over work orders; each part runs
 * once. */
int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"dir", required_argument, NULL, 'd'}, {"emulate", required_argument, NULL, 'e'},
		{"quiet", no_argument, NULL, 'q'},     {"help", no_argument, NULL, 'h'},
		{"die-at", required_argument, NULL, 'D'}, {"fail-at", required_argument, NULL, 'F'},
		{"abort-at", required_argument, NULL, 'A'}, {NULL, 0, NULL, 0},
	};
	const char *dir = NULL;
	long long emulate_ns = -1;
	int quiet = 0, c, rc;
	unsigned long long die_at = 0, fail_at = 0, abort_at = 0;

	while ((c = getopt_long(argc, argv, "d:e:qhD:F:A:", opts, NULL)) != -1) {
		switch (c) {
		case 'D':
			die_at = strtoull(optarg, NULL, 10);
			break;
		case 'F':
			fail_at = strtoull(optarg, NULL, 10);
			break;
		case 'A':
			abort_at = strtoull(optarg, NULL, 10);
			break;
		case 'd':
			dir = optarg;
			break;
		case 'e': {
			char *end;
			emulate_ns = strtoll(optarg, &end, 10);
			if (*end || emulate_ns < 0) {
				fprintf(stderr, "esd-trainer: --emulate '%s': expected ns >= 0\n",
					optarg);
				return 2;
			}
			break;
		}
		case 'q':
			quiet = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!dir)
		dir = getenv("ESD_NODE_DIR");
	if (!dir || optind != argc) {
		usage(stderr);
		return 2;
	}
	esd_log_init("esd-trainer");
	struct esd_trainer *t;
	rc = esd_trainer_attach_wait(dir, 30000, &t);
	if (rc) {
		ESD_ERR("trainer", "cannot attach to the daemon of %s: %s", dir, esd_strerror(rc));
		return 1;
	}
	struct esd_trainer_info in;
	esd_trainer_get_info(t, &in);
	if (check_torchrun(t, &in, dir)) {
		esd_trainer_detach(t);
		return 1;
	}

	struct esd_model *model = NULL;
	const float **rows = NULL;
	double **grads = NULL;
	/* gradients are summed in double (esd/optim.h) in scratch buffers, one
	 * per distinct row of the micro-batch, and rounded into the rows'
	 * gradient slots once */
	int32_t *scratch_of = NULL;
	uint32_t *used = NULL;
	double *scratch = NULL, *dgrad = NULL;
	if (emulate_ns < 0) {
		const uint32_t *dims = esd_trainer_table_dims(t);
		struct esd_model_shape sh = {.tables = in.tables, .dim = in.dim, .dense = in.dense,
					     .hidden = hidden_of(&in, dims), .dims = dims};
		if (!sh.hidden || esd_model_create(&sh, &model) ||
		    esd_model_dense_len(model) != in.dense_params) {
			give_up(t, "dense table of %u floats does not fit the reference "
				"model (%u tables x %u + %u dense)", in.dense_params, in.tables,
				in.dim, in.dense);
			esd_trainer_detach(t);
			return 1;
		}
		size_t mt = in.max_keys;
		rows = calloc(mt, sizeof(*rows));
		grads = calloc(mt, sizeof(*grads));
		scratch_of = malloc((size_t)in.capacity * sizeof(*scratch_of));
		used = calloc(mt, sizeof(*used));
		scratch = calloc(mt * in.dim, sizeof(double));
		dgrad = calloc(in.dense_params, sizeof(double));
		if (!rows || !grads || !scratch_of || !used || !scratch || !dgrad)
			return 1;
		memset(scratch_of, 0xff, (size_t)in.capacity * sizeof(*scratch_of));
	}
	ESD_INFO("trainer", "attached to worker %u of %u (%s, %u tables x %u floats)", in.rank,
		 in.workers, model ? "reference model" : "emulated compute", in.tables, in.dim);

	struct esd_microbatch mb;
	uint64_t iters = 0;
	int asked = 0;
	struct sigaction sa = {.sa_handler = on_stop_signal};
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	while ((rc = next_batch(t, &mb, &asked)) == 0) {
		double loss = 0;
		if (fail_at && mb.iter == fail_at) {
			give_up(t, "--fail-at %llu: failing as asked", fail_at);
			rc = -ECANCELED;
			break;
		}
		if (abort_at && mb.iter == abort_at)
			abort();
		if (model) {
			size_t n = mb.nkeys;
			uint32_t nu = 0;
			for (size_t i = 0; i < n; i++) {
				uint32_t s = mb.slots[i];
				if (scratch_of[s] < 0) {
					scratch_of[s] = (int32_t)nu;
					memset(scratch + (size_t)nu * in.dim, 0, in.dim * sizeof(double));
					used[nu++] = s;
				}
				rows[i] = esd_trainer_row(t, s);
				grads[i] = scratch + (size_t)scratch_of[s] * in.dim;
			}
			memset(dgrad, 0, in.dense_params * sizeof(double));
			struct esd_model_batch b = {.m = mb.m, .rows = rows, .row_grads = grads,
						    .labels = mb.labels, .dense = mb.dense,
						    .bag_off = mb.bag_off,
						    .weights = mb.weights};
			rc = esd_model_step(model, mb.params, &b, mb.global_k, &loss, dgrad, NULL);
			for (uint32_t u = 0; u < nu; u++) {
				if (die_at && mb.iter == die_at && u == nu / 2)
					raise(SIGKILL); /* a crash with half the gradients written */
				float *g = esd_trainer_grad(t, used[u]);
				const double *sg = scratch + (size_t)u * in.dim;
				for (uint32_t d = 0; d < in.dim; d++)
					g[d] = (float)sg[d];
				scratch_of[used[u]] = -1;
			}
			for (uint32_t i = 0; i < in.dense_params; i++)
				mb.dgrad[i] = (float)dgrad[i];
			if (rc) {
				give_up(t, "iteration %llu: model step failed: %s",
					(unsigned long long)mb.iter, esd_strerror(rc));
				break;
			}
		} else {
			int64_t t0 = esd_now_ns();
			float sink = 0;
			size_t n = mb.nkeys;
			for (size_t i = 0; i < n; i++) { /* touch every row like a model would */
				const float *r = esd_trainer_row(t, mb.slots[i]);
				float *g = esd_trainer_grad(t, mb.slots[i]);
				sink += r[0];
				g[0] += 0.0f;
			}
			loss = sink * 0.0;
			esd_sleep_until_ns(t0 + emulate_ns * (int64_t)mb.m);
		}
		rc = esd_trainer_commit(t, &mb, loss);
		if (rc)
			break;
		iters++;
		if (!quiet && model)
			printf("iter %llu loss %.6f\n", (unsigned long long)mb.iter, loss);
	}
	ESD_INFO("trainer", "%llu iterations trained; %s", (unsigned long long)iters,
		 rc == 1 ? "training is over" : esd_strerror(rc));
	if (rc == -EPROTO) /* the daemon is there but spoke nonsense: say so */
		give_up(t, "the daemon of %s broke the attach protocol", dir);
	free(rows);
	free(grads);
	free(scratch_of);
	free(used);
	free(scratch);
	free(dgrad);
	esd_model_free(model);
	esd_trainer_detach(t);
	return rc == 1 ? 0 : 1;
}
