/*
 * esd-ref: the single-process reference run of the correctness bar. Trains
 * the reference model over global batches from the built-in generator (or
 * a dataset stream) and writes the final tables as a checkpoint, to be
 * compared with the distributed run's PS checkpoints (esd_ckpt_compare).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <esd/err.h>
#include <esd/log.h>

#include "inspect.h"
#include "reftrain.h"

static void usage(FILE *f)
{
	fprintf(
	    f, "usage: esd-ref --out FILE [options]\n"
	       "       esd-ref info FILE...\n"
	       "       esd-ref compare [--rtol X] [--atol X] [--exact] [--no-state] [--no-clocks]\n"
	       "                       A[,A...] B[,B...]\n"
	       "Train the reference model in one process and write its tables as a checkpoint;\n"
	       "validate and describe checkpoints; compare two models given as shard files\n"
	       "(exit 0 equal, 1 different, 2 usage, 3 a file refused).\n"
	       "\n"
	       "  --out FILE        checkpoint to write (replaced atomically)\n"
	       "  --iters N         iterations (50)\n"
	       "  --batch K         global batch size k (256)\n"
	       "  --cursor C        first sample index (0)\n"
	       "  --resume PATH     continue from a checkpoint of this configuration (its\n"
	       "                    iteration and data cursor): a file, or a job's\n"
	       "                    checkpoint directory (every ps-shard<i>.ckpt, any\n"
	       "                    shard count); --iters is the total\n"
	       "  --seed S          job seed: row and dense-table initialisation (1)\n"
	       "  --dim D           embedding row length (16)\n"
	       "  --dims D,D,...    each table's row length (model.dims; D*N: N copies);\n"
	       "                    the rows are stored at the largest\n"
	       "  --hidden H        hidden units (16)\n"
	       "  --opt NAME        sgd | adagrad | adam (sgd)\n"
	       "  --lr X --eps X --beta1 X --beta2 X --init-acc X\n"
	       "                    optimizer hyper-parameters (defaults per optimizer)\n"
	       "  --verbose         print the loss of every iteration\n"
	       "  --stream FILE     the job's dataset stream (data.stream), read from its start\n"
	       "                    and wrapped around as the runtime does; else:\n"
	       "built-in generator (sample i depends on (gen seed, i) only):\n"
	       "  --tables T        categorical features per sample (8)\n"
	       "  --dense N         dense features per sample (4)\n"
	       "  --rows R          IDs per table (1000)\n"
	       "  --skew X          ID skew, >= 1 (2.0)\n"
	       "  --gen-seed S      generator seed (the job seed)\n");
}

static int parse_u64(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi) {
		fprintf(stderr,
		        "esd-ref: --%s: '%s' is not an integer in [%" PRIu64 ", %" PRIu64 "]\n",
		        opt, s, lo, hi);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

static int parse_f(const char *opt, const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v)) {
		fprintf(stderr, "esd-ref: --%s: '%s' is not a number\n", opt, s);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

#define ESD_REF_MAX_DIMS 1024

/* --dims D,D,... ("D*N": N copies) into dims and cfg (dim: the largest).
 * 0, or 1 with the reason said. */
static int parse_dims(const char *text, uint32_t *dims, struct esd_ref_config *cfg)
{
	uint32_t n = 0, max = 0;
	const char *p = text;
	for (;;) {
		char *end;
		errno = 0;
		unsigned long d = strtoul(p, &end, 10), k = 1;
		if (end != p && *end == '*')
			k = strtoul(end + 1, &end, 10);
		if (errno || end == p || d < 1 || d > ESD_MODEL_MAX_DIM || k < 1 ||
		    k > ESD_REF_MAX_DIMS - n || (*end && *end != ',')) {
			fprintf(stderr, "esd-ref: --dims %s: expected dims 1..%u, one per table "
			        "(D*N: N copies), at most %u tables\n", text, ESD_MODEL_MAX_DIM,
			        ESD_REF_MAX_DIMS);
			return 1;
		}
		for (; k; k--)
			dims[n++] = (uint32_t)d;
		max = d > max ? (uint32_t)d : max;
		if (!*end)
			break;
		p = end + 1;
	}
	cfg->dims = dims;
	cfg->ndims = n;
	cfg->dim = max;
	return 0;
}

/* Long: esd-ref's options, each checked with its own message, then one training run and its
 * output. */
int main(int argc, char **argv)
{
	enum { O_LR = 256, O_EPS, O_B1, O_B2, O_ACC, O_GSEED, O_CURSOR, O_STREAM, O_RESUME, O_DIMS };
	static const struct option longopts[] = {
	    {"out", required_argument, NULL, 'o'},
	    {"iters", required_argument, NULL, 'n'},
	    {"batch", required_argument, NULL, 'k'},
	    {"seed", required_argument, NULL, 's'},
	    {"dim", required_argument, NULL, 'd'},
	    {"dims", required_argument, NULL, O_DIMS},
	    {"hidden", required_argument, NULL, 'H'},
	    {"opt", required_argument, NULL, 'O'},
	    {"tables", required_argument, NULL, 'T'},
	    {"dense", required_argument, NULL, 'D'},
	    {"rows", required_argument, NULL, 'R'},
	    {"skew", required_argument, NULL, 'S'},
	    {"lr", required_argument, NULL, O_LR},
	    {"eps", required_argument, NULL, O_EPS},
	    {"beta1", required_argument, NULL, O_B1},
	    {"beta2", required_argument, NULL, O_B2},
	    {"init-acc", required_argument, NULL, O_ACC},
	    {"gen-seed", required_argument, NULL, O_GSEED},
	    {"cursor", required_argument, NULL, O_CURSOR},
	    {"stream", required_argument, NULL, O_STREAM},
	    {"resume", required_argument, NULL, O_RESUME},
	    {"verbose", no_argument, NULL, 'v'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct esd_ref_config cfg = {
	    .seed = 1, .dim = 16, .hidden = 16, .batch = 256, .iterations = 50};
	struct esd_ref_gen gen = {.tables = 8, .dense = 4, .rows = 1000, .skew = 2.0};
	const char *out = NULL, *opt_name = "sgd", *stream = NULL;
	double lr = NAN, eps = NAN, b1 = NAN, b2 = NAN, acc = NAN;
	uint64_t u, gseed = 0;
	static uint32_t dims[ESD_REF_MAX_DIMS];
	int have_gseed = 0, c, rc = 0;

	esd_log_init("esd-ref");
	if (argc > 1 && !strcmp(argv[1], "info"))
		return esd_ref_cmd_info(argc - 1, argv + 1);
	if (argc > 1 && !strcmp(argv[1], "compare"))
		return esd_ref_cmd_compare(argc - 1, argv + 1);
	while ((c = getopt_long(argc, argv, "o:n:k:s:d:H:O:T:D:R:S:vh", longopts, NULL)) != -1) {
		const char *name = NULL;
		for (const struct option *o = longopts; o->name; o++)
			if (o->val == c)
				name = o->name;
		switch (c) {
		case 'o':
			out = optarg;
			break;
		case 'n':
			rc = parse_u64(name, optarg, 1, UINT64_MAX, &cfg.iterations);
			break;
		case 'k':
			rc = parse_u64(name, optarg, 1, 1u << 24, &u);
			cfg.batch = (uint32_t)u;
			break;
		case 's':
			rc = parse_u64(name, optarg, 0, UINT64_MAX, &cfg.seed);
			break;
		case 'd':
			rc = parse_u64(name, optarg, 1, ESD_MODEL_MAX_DIM, &u);
			cfg.dim = (uint32_t)u;
			break;
		case 'H':
			rc = parse_u64(name, optarg, 1, ESD_MODEL_MAX_HIDDEN, &u);
			cfg.hidden = (uint32_t)u;
			break;
		case 'O':
			opt_name = optarg;
			break;
		case 'T':
			rc = parse_u64(name, optarg, 1, ESD_MODEL_MAX_TABLES, &u);
			gen.tables = (uint32_t)u;
			break;
		case 'D':
			rc = parse_u64(name, optarg, 0, ESD_MODEL_MAX_DENSE, &u);
			gen.dense = (uint32_t)u;
			break;
		case 'R':
			rc = parse_u64(name, optarg, 1, ESD_KEY_ID_MASK, &gen.rows);
			break;
		case 'S':
			rc = parse_f(name, optarg, &gen.skew);
			break;
		case O_LR:
			rc = parse_f(name, optarg, &lr);
			break;
		case O_EPS:
			rc = parse_f(name, optarg, &eps);
			break;
		case O_B1:
			rc = parse_f(name, optarg, &b1);
			break;
		case O_B2:
			rc = parse_f(name, optarg, &b2);
			break;
		case O_ACC:
			rc = parse_f(name, optarg, &acc);
			break;
		case O_GSEED:
			rc = parse_u64(name, optarg, 0, UINT64_MAX, &gseed);
			have_gseed = 1;
			break;
		case O_CURSOR:
			rc = parse_u64(name, optarg, 0, UINT64_MAX, &cfg.cursor);
			break;
		case O_STREAM:
			stream = optarg;
			break;
		case O_RESUME:
			cfg.resume = optarg;
			break;
		case O_DIMS:
			rc = parse_dims(optarg, dims, &cfg);
			break;
		case 'v':
			cfg.verbose = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
		if (rc)
			return 2;
	}
	if (optind < argc || !out) {
		fprintf(stderr, "esd-ref: %s\n", out ? "unexpected argument" : "--out is required");
		usage(stderr);
		return 2;
	}
	uint32_t dmax = 0;
	for (uint32_t i = 0; i < cfg.ndims; i++)
		dmax = cfg.dims[i] > dmax ? cfg.dims[i] : dmax;
	if (cfg.ndims && cfg.dim != dmax) {
		fprintf(stderr, "esd-ref: --dim %u but the largest of --dims is %u: give --dims "
		        "alone\n", cfg.dim, dmax);
		return 2;
	}
	enum esd_optimizer opt;
	if (esd_optim_parse(opt_name, &opt)) {
		fprintf(stderr, "esd-ref: --opt: unknown optimizer '%s' (sgd, adagrad, adam)\n",
		        opt_name);
		return 2;
	}
	esd_optim_params_default(&cfg.optim, opt);
	if (!isnan(lr))
		cfg.optim.lr = (float)lr;
	if (!isnan(eps))
		cfg.optim.eps = (float)eps;
	if (!isnan(b1))
		cfg.optim.beta1 = (float)b1;
	if (!isnan(b2))
		cfg.optim.beta2 = (float)b2;
	if (!isnan(acc))
		cfg.optim.initial_accumulator = (float)acc;
	if (esd_optim_params_check(&cfg.optim)) {
		fprintf(stderr, "esd-ref: optimizer parameters out of range\n");
		return 2;
	}

	struct esd_ref_source src = {0};
	if (stream) {
		rc = esd_ref_stream_source(stream, &src);
		if (rc) {
			fprintf(stderr, "esd-ref: %s: %s\n", stream,
			        rc == -ENODATA ? "the stream has no samples" : esd_strerror(rc));
			return 1;
		}
	} else {
		gen.seed = have_gseed ? gseed : cfg.seed;
		if (esd_ref_gen_source(&gen, &src)) {
			fprintf(stderr, "esd-ref: bad generator settings (--skew must be >= 1)\n");
			return 2;
		}
	}
	uint64_t need = cfg.iterations * cfg.batch;
	if (src.samples && need > src.samples) /* as esd-ps and esdd say it */
		printf("esd-ref: the stream holds %" PRIu64 " samples; %" PRIu64 " iterations x %u "
		       "= %" PRIu64 " samples: %.1f passes, wrapping around\n",
		       src.samples, cfg.iterations, cfg.batch, need,
		       (double)need / (double)src.samples);
	struct esd_ref_stats st;
	rc = esd_ref_train(&cfg, &src, out, &st);
	esd_ref_stream_close(&src);
	if (rc == -ENODATA) {
		fprintf(stderr,
		        "esd-ref: the samples ran out before iteration %" PRIu64 " (%" PRIu64
		        " iterations of %u from cursor %" PRIu64 " need %" PRIu64 " samples)\n",
		        cfg.iterations, cfg.iterations, cfg.batch, cfg.cursor,
		        cfg.cursor + cfg.iterations * cfg.batch);
		return 1;
	}
	if (rc) {
		fprintf(stderr, "esd-ref: training failed: %s\n", esd_strerror(rc));
		return 1;
	}
	printf("esd-ref: trained to iteration %" PRIu64 " in batches of %u samples, %" PRIu64
	       " rows, loss %.6f -> %.6f, wrote %s\n",
	       cfg.iterations, cfg.batch, st.rows, st.first_loss, st.last_loss, out);
	return 0;
}
