/*
 * main.c - esd-data, the data engineer's tool: gen (synthetic streams with
 * the public dataset shapes), convert (real files into streams), stat
 * (skew, distinct keys, cache cover), dump (samples as text). A thin front
 * end over esd_data; exit 0 ok, 1 error, 2 usage.
 */
#include "convert.h"
#include "stat.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include <esd/dataset.h>
#include <esd/err.h>
#include <esd/log.h>

static const char usage_text[] =
    "usage: esd-data <command> [options]\n"
    "\n"
    "  gen -o OUT [--shape criteo-kaggle|avazu|criteo-search] [-n SAMPLES] [--seed S]\n"
    "      [--zipf S] [--zipf-table T=S]... [--drift D] [--scale F] [--max-rows N]\n"
    "      [--dense-format f32|bf16] [--zstd LEVEL] [--block N] [--bag T=MEAN[:MAX]]...\n"
    "      [--names A,B,...|--no-names] [--weighted]\n"
    "      synthetic stream: Zipf(S) IDs per table (default 1.2); a fraction D of\n"
    "      each table's ranks gets a new ID per 1M samples (default 0.1); seeded;\n"
    "      --bag: table T (or all) multi-hot, Poisson(MEAN) IDs a sample, at most\n"
    "      MAX (default 4 x MEAN); tables named by the shape's columns (C1..C26)\n"
    "      or --names, one a table; --weighted: a weight per ID (k/16, k 1..32)\n"
    "  convert --format criteo-kaggle|avazu|criteo-search|tsv-multi-hot -o OUT [INPUT|-]\n"
    "      [--rows N[,N...]] [--scale F] [--max-rows N] [--skip-bad] [--limit N]\n"
    "      [--allow-empty] [--progress|--no-progress] [--dense-format f32|bf16]\n"
    "      [--zstd LEVEL] [--names A,B,...]\n"
    "      real files into a stream; bad lines fail with file:line unless --skip-bad;\n"
    "      no sample out is an error (nothing written) unless --allow-empty;\n"
    "      --rows: one cardinality for every table, or one a table\n"
    "      tsv-multi-hot: --tables N [--dense D] --rows ... [--max-bag M|T=M]...\n"
    "      [--multi-hot-sep C]: label, D dense, N bags of hex IDs separated by C\n"
    "      (default ','), tab-separated; bags of at most M IDs (default 64);\n"
    "      --header: line 1 names the fields (the tables' names are the stream's)\n"
    "      --weighted: a bag ID may carry a weight, id:weight (default 1)\n"
    "      --names: the tables' feature names (default: the format's columns)\n"
    "  stat FILE [--cache-ratio R] [--limit N] [--json]\n"
    "      samples, distinct keys and skew per table, accesses a cache of R x all rows\n"
    "      covers (default R 0.08); bag lengths of each multi-hot table (min, mean,\n"
    "      p50, p90, p99, max, power-of-two histogram)\n"
    "  dump FILE [--from N] [-n N] [--names]\n"
    "      samples as text: cursor label dense... | table:id ... (--names: name:id;\n"
    "      a weighted stream: table:id:weight,...)\n"
    "  hot FILE -n ROWS -o OUT [--limit N]\n"
    "      FAE's static hot set: the ROWS most frequent keys of the first N samples\n"
    "      (default all) as a hot-row file for dispatch.replicate\n"
    "\n"
    "Numbers take k, M, G suffixes (1M = 1000000). docs/dataset.md has the details.\n";

static int usage(const char *why)
{
	if (why)
		fprintf(stderr, "esd-data: %s\n", why);
	fputs(usage_text, stderr);
	return 2;
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	if (!s || !*s || *s == '-')
		return -EINVAL;
	unsigned long long v = strtoull(s, &end, 10);
	uint64_t mul = 1;
	if (*end == 'k' || *end == 'K')
		mul = 1000, end++;
	else if (*end == 'M')
		mul = 1000000, end++;
	else if (*end == 'G')
		mul = 1000000000, end++;
	if (errno || *end || (v && mul > UINT64_MAX / v))
		return -EINVAL;
	*out = (uint64_t)v * mul;
	return 0;
}

static int parse_double(const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v))
		return -EINVAL;
	*out = v;
	return 0;
}

static int parse_dense_format(const char *s, uint32_t *out)
{
	if (!strcmp(s, "f32"))
		*out = ESD_DS_DENSE_F32;
	else if (!strcmp(s, "bf16"))
		*out = ESD_DS_DENSE_BF16;
	else
		return -EINVAL;
	return 0;
}

static int parse_zstd(const char *s, int *out)
{
	uint64_t v;
	if (parse_u64(s, &v) || v > 19)
		return -EINVAL;
	*out = (int)v;
	return 0;
}

enum {
	OPT_SEED = 256,
	OPT_ZIPF,
	OPT_ZIPF_TABLE,
	OPT_DRIFT,
	OPT_SCALE,
	OPT_MAX_ROWS,
	OPT_DENSE_FORMAT,
	OPT_ZSTD,
	OPT_BLOCK,
	OPT_SHAPE,
	OPT_FORMAT,
	OPT_ROWS,
	OPT_SKIP_BAD,
	OPT_ALLOW_EMPTY,
	OPT_LIMIT,
	OPT_PROGRESS,
	OPT_NO_PROGRESS,
	OPT_CACHE_RATIO,
	OPT_JSON,
	OPT_FROM,
	OPT_BAG,
	OPT_TABLES,
	OPT_DENSE,
	OPT_MAX_BAG,
	OPT_SEP,
	OPT_NAMES,
	OPT_NO_NAMES,
	OPT_HEADER,
	OPT_WEIGHTED,
};

#define BAD(opt) return usage("bad value for " opt)

/* --bag T=MEAN[:MAX] (T a table or "all"; MAX default 4 x MEAN, at least 2). */
struct bag_opt {
	uint32_t t; /* UINT32_MAX: every table */
	double mean;
	uint32_t max;
};

static int parse_bag(char *arg, struct bag_opt *b)
{
	char *eq = strchr(arg, '='), *colon;
	uint64_t t, max = 0;
	if (!eq)
		return -EINVAL;
	*eq = 0;
	if (!strcmp(arg, "all"))
		b->t = UINT32_MAX;
	else if (parse_u64(arg, &t) || t >= ESD_DS_MAX_TABLES)
		return -EINVAL;
	else
		b->t = (uint32_t)t;
	colon = strchr(eq + 1, ':');
	if (colon) {
		*colon = 0;
		if (parse_u64(colon + 1, &max))
			return -EINVAL;
	}
	if (parse_double(eq + 1, &b->mean) || !(b->mean > 0) || b->mean > ESD_DS_MAX_BAG)
		return -EINVAL;
	if (!colon)
		max = (uint64_t)ceil(4 * b->mean);
	if (max < 2)
		max = 2;
	if (max > ESD_DS_MAX_BAG || (double)max < b->mean)
		return -EINVAL;
	b->max = (uint32_t)max;
	return 0;
}

/* Long: esd-data gen's options, each checked with its own message, then one call. */
static int cmd_gen(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"output", required_argument, NULL, 'o'},
	    {"samples", required_argument, NULL, 'n'},
	    {"shape", required_argument, NULL, OPT_SHAPE},
	    {"seed", required_argument, NULL, OPT_SEED},
	    {"zipf", required_argument, NULL, OPT_ZIPF},
	    {"zipf-table", required_argument, NULL, OPT_ZIPF_TABLE},
	    {"drift", required_argument, NULL, OPT_DRIFT},
	    {"scale", required_argument, NULL, OPT_SCALE},
	    {"max-rows", required_argument, NULL, OPT_MAX_ROWS},
	    {"dense-format", required_argument, NULL, OPT_DENSE_FORMAT},
	    {"zstd", required_argument, NULL, OPT_ZSTD},
	    {"block", required_argument, NULL, OPT_BLOCK},
	    {"bag", required_argument, NULL, OPT_BAG},
	    {"names", required_argument, NULL, OPT_NAMES},
	    {"no-names", no_argument, NULL, OPT_NO_NAMES},
	    {"weighted", no_argument, NULL, OPT_WEIGHTED},
	    {0},
	};
	const char *out = NULL, *shape = "criteo-kaggle", *names = NULL;
	struct bag_opt bags[ESD_DS_MAX_TABLES];
	unsigned nbags = 0;
	uint64_t n = 1000000, seed = 1, max_rows = 0, block = 0;
	double zipf = 1.2, drift = 0.1, scale = 1.0;
	uint32_t dfmt = ESD_DS_DENSE_F32;
	int zstd = 0, c, weighted = 0;
	struct {
		uint32_t t;
		double s;
	} per[ESD_DS_MAX_TABLES];
	unsigned nper = 0;

	while ((c = getopt_long(argc, argv, "o:n:", opts, NULL)) != -1) {
		switch (c) {
		case 'o':
			out = optarg;
			break;
		case 'n':
			if (parse_u64(optarg, &n))
				BAD("--samples");
			break;
		case OPT_SHAPE:
			shape = optarg;
			break;
		case OPT_SEED:
			if (parse_u64(optarg, &seed))
				BAD("--seed");
			break;
		case OPT_ZIPF:
			if (parse_double(optarg, &zipf))
				BAD("--zipf");
			break;
		case OPT_ZIPF_TABLE: {
			char *eq = strchr(optarg, '=');
			uint64_t t;
			if (!eq || nper == ESD_DS_MAX_TABLES)
				BAD("--zipf-table (T=S)");
			*eq = 0;
			if (parse_u64(optarg, &t) || t >= ESD_DS_MAX_TABLES ||
			    parse_double(eq + 1, &per[nper].s))
				BAD("--zipf-table (T=S)");
			per[nper++].t = (uint32_t)t;
			break;
		}
		case OPT_DRIFT:
			if (parse_double(optarg, &drift))
				BAD("--drift");
			break;
		case OPT_SCALE:
			if (parse_double(optarg, &scale))
				BAD("--scale");
			break;
		case OPT_MAX_ROWS:
			if (parse_u64(optarg, &max_rows))
				BAD("--max-rows");
			break;
		case OPT_DENSE_FORMAT:
			if (parse_dense_format(optarg, &dfmt))
				BAD("--dense-format (f32 or bf16)");
			break;
		case OPT_ZSTD:
			if (parse_zstd(optarg, &zstd))
				BAD("--zstd (0..19)");
			break;
		case OPT_BLOCK:
			if (parse_u64(optarg, &block) || block < 1 || block > (1u << 20))
				BAD("--block (1..1048576)");
			break;
		case OPT_BAG:
			if (nbags == ESD_DS_MAX_TABLES || parse_bag(optarg, &bags[nbags]))
				BAD("--bag (T=MEAN[:MAX] or all=MEAN[:MAX], MAX 2..65535)");
			nbags++;
			break;
		case OPT_NAMES:
			names = optarg;
			break;
		case OPT_NO_NAMES:
			names = "";
			break;
		case OPT_WEIGHTED:
			weighted = 1;
			break;
		default:
			return usage(NULL);
		}
	}
	if (!out)
		return usage("gen needs -o OUT");
	if (optind != argc)
		return usage("gen takes no positional arguments");

	struct esd_ds_gen_params p;
	if (esd_ds_gen_defaults(&p, shape))
		return 1;
	p.nsamples = n;
	p.info.seed = seed;
	p.info.drift = drift;
	p.info.dense_format = dfmt;
	p.info.zstd_level = zstd;
	p.info.block_samples = (uint32_t)block;
	for (uint32_t t = 0; t < p.info.ntables; t++)
		p.info.zipf[t] = zipf;
	for (unsigned i = 0; i < nper; i++) {
		if (per[i].t >= p.info.ntables) {
			fprintf(stderr, "esd-data: --zipf-table %u: %s has %u tables\n", per[i].t,
			        shape, p.info.ntables);
			return 2;
		}
		p.info.zipf[per[i].t] = per[i].s;
	}
	for (unsigned i = 0; i < nbags; i++) {
		if (bags[i].t != UINT32_MAX && bags[i].t >= p.info.ntables) {
			fprintf(stderr, "esd-data: --bag %u: %s has %u tables\n", bags[i].t, shape,
			        p.info.ntables);
			return 2;
		}
		for (uint32_t t = 0; t < p.info.ntables; t++)
			if (bags[i].t == UINT32_MAX || bags[i].t == t) {
				p.info.max_bag[t] = bags[i].max;
				p.bag_mean[t] = bags[i].mean;
			}
	}
	if (weighted && !esd_ds_has_bags(&p.info))
		return usage("gen --weighted needs a bag table (--bag T=MEAN[:MAX])");
	p.info.weighted = weighted ? 1u : 0u;
	if (esd_ds_scale_rows(&p.info, scale, max_rows))
		return 1;
	char why[160];
	if (names && esd_ds_set_names(&p.info, names, why, sizeof(why))) {
		fprintf(stderr, "esd-data: --names: %s\n", why);
		return 2;
	}
	if (esd_ds_generate(&p, out))
		return 1;
	return 0;
}

/* --rows N[,N...]: one cardinality for every table, or one a table. */
static int parse_rows(char *arg, struct ds_convert_opts *o)
{
	o->nrows = 0;
	for (char *tok = strtok(arg, ","); tok; tok = strtok(NULL, ",")) {
		if (o->nrows == ESD_DS_MAX_TABLES || parse_u64(tok, &o->rows[o->nrows]) ||
		    o->rows[o->nrows] < 1)
			return -EINVAL;
		o->nrows++;
	}
	return o->nrows ? 0 : -EINVAL;
}

/* --max-bag M (every table) or T=M (table T), M in 2..ESD_DS_MAX_BAG;
 * per-table values win whatever the order. */
struct max_bag_opt {
	uint32_t all;                    /* 0: DS_DEFAULT_MAX_BAG */
	uint32_t per[ESD_DS_MAX_TABLES]; /* 0: all */
};

static int parse_max_bag(char *arg, struct max_bag_opt *b)
{
	char *eq = strchr(arg, '=');
	uint64_t t = UINT64_MAX, m;
	if (eq) {
		*eq = 0;
		if (parse_u64(arg, &t) || t >= ESD_DS_MAX_TABLES)
			return -EINVAL;
	}
	if (parse_u64(eq ? eq + 1 : arg, &m) || m < 2 || m > ESD_DS_MAX_BAG)
		return -EINVAL;
	if (!eq) {
		b->all = (uint32_t)m;
		return 0;
	}
	b->per[t] = (uint32_t)m;
	return 0;
}

/* tsv-multi-hot's options into o (2: a usage error, already said). */
static int multi_hot_opts(struct ds_convert_opts *o, const struct max_bag_opt *b, int have_mh)
{
	if (o->fmt != DS_FMT_MULTI_HOT) {
		if (have_mh)
			usage("--tables, --dense, --max-bag, --multi-hot-sep, --header and --weighted "
			      "are for --format tsv-multi-hot");
		return have_mh ? 2 : 0;
	}
	if (!o->ntables || !o->nrows) {
		usage("tsv-multi-hot needs --tables N and --rows");
		return 2;
	}
	for (uint32_t t = o->ntables; t < ESD_DS_MAX_TABLES; t++)
		if (b->per[t]) {
			fprintf(stderr, "esd-data: --max-bag %u=%u: the stream has %u tables\n", t,
			        b->per[t], o->ntables);
			return 2;
		}
	for (uint32_t t = 0; t < o->ntables; t++)
		o->max_bag[t] = b->per[t] ? b->per[t] : b->all;
	if (o->weighted && o->sep == ':') {
		usage("--weighted writes a weight as id:weight; --multi-hot-sep ':' clashes");
		return 2;
	}
	return 0;
}

/* --multi-hot-sep C: one character, neither a tab, a line end nor a hex digit. */
static int parse_sep(const char *arg, char *out)
{
	if (strlen(arg) != 1 || arg[0] == '\t' || arg[0] == '\r' || arg[0] == '\n' ||
	    isxdigit((unsigned char)arg[0]))
		return -EINVAL;
	*out = arg[0];
	return 0;
}

/* Long: esd-data convert's options, each checked with its own message, then one call and its
 * report. */
static int cmd_convert(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"output", required_argument, NULL, 'o'},
	    {"input", required_argument, NULL, 'i'},
	    {"format", required_argument, NULL, OPT_FORMAT},
	    {"rows", required_argument, NULL, OPT_ROWS},
	    {"scale", required_argument, NULL, OPT_SCALE},
	    {"max-rows", required_argument, NULL, OPT_MAX_ROWS},
	    {"skip-bad", no_argument, NULL, OPT_SKIP_BAD},
	    {"limit", required_argument, NULL, OPT_LIMIT},
	    {"progress", no_argument, NULL, OPT_PROGRESS},
	    {"no-progress", no_argument, NULL, OPT_NO_PROGRESS},
	    {"dense-format", required_argument, NULL, OPT_DENSE_FORMAT},
	    {"zstd", required_argument, NULL, OPT_ZSTD},
	    {"allow-empty", no_argument, NULL, OPT_ALLOW_EMPTY},
	    {"tables", required_argument, NULL, OPT_TABLES},
	    {"dense", required_argument, NULL, OPT_DENSE},
	    {"max-bag", required_argument, NULL, OPT_MAX_BAG},
	    {"multi-hot-sep", required_argument, NULL, OPT_SEP},
	    {"names", required_argument, NULL, OPT_NAMES},
	    {"header", no_argument, NULL, OPT_HEADER},
	    {"weighted", no_argument, NULL, OPT_WEIGHTED},
	    {0},
	};
	struct ds_convert_opts o;
	struct max_bag_opt mb;
	const char *fmt = NULL;
	uint64_t v;
	int c, have_mh = 0;
	memset(&mb, 0, sizeof(mb));
	memset(&o, 0, sizeof(o));
	o.scale = 1.0;
	o.progress = isatty(STDERR_FILENO);
	while ((c = getopt_long(argc, argv, "o:i:", opts, NULL)) != -1) {
		switch (c) {
		case 'o':
			o.out_path = optarg;
			break;
		case 'i':
			o.in_path = optarg;
			break;
		case OPT_FORMAT:
			fmt = optarg;
			break;
		case OPT_ROWS:
			if (parse_rows(optarg, &o))
				BAD("--rows (N or N,N,...: 1 or more)");
			break;
		case OPT_TABLES:
			if (parse_u64(optarg, &v) || v < 1 || v > ESD_DS_MAX_TABLES)
				BAD("--tables (1..256)");
			o.ntables = (uint32_t)v;
			have_mh = 1;
			break;
		case OPT_DENSE:
			if (parse_u64(optarg, &v) || v > ESD_DS_MAX_DENSE)
				BAD("--dense (0..256)");
			o.ndense = (uint32_t)v;
			have_mh = 1;
			break;
		case OPT_MAX_BAG:
			if (parse_max_bag(optarg, &mb))
				BAD("--max-bag (M or T=M, M 2..65535)");
			have_mh = 1;
			break;
		case OPT_SEP:
			if (parse_sep(optarg, &o.sep))
				BAD("--multi-hot-sep (one character, not a tab nor a hex digit)");
			have_mh = 1;
			break;
		case OPT_SCALE:
			if (parse_double(optarg, &o.scale) || o.scale < 1.0)
				BAD("--scale (>= 1)");
			break;
		case OPT_MAX_ROWS:
			if (parse_u64(optarg, &o.max_rows))
				BAD("--max-rows");
			break;
		case OPT_SKIP_BAD:
			o.skip_bad = 1;
			break;
		case OPT_ALLOW_EMPTY:
			o.allow_empty = 1;
			break;
		case OPT_LIMIT:
			if (parse_u64(optarg, &o.limit))
				BAD("--limit");
			break;
		case OPT_PROGRESS:
			o.progress = 1;
			break;
		case OPT_NO_PROGRESS:
			o.progress = 0;
			break;
		case OPT_DENSE_FORMAT:
			if (parse_dense_format(optarg, &o.dense_format))
				BAD("--dense-format (f32 or bf16)");
			break;
		case OPT_ZSTD:
			if (parse_zstd(optarg, &o.zstd_level))
				BAD("--zstd (0..19)");
			break;
		case OPT_NAMES:
			o.names = optarg;
			break;
		case OPT_HEADER:
			o.header = 1;
			have_mh = 1;
			break;
		case OPT_WEIGHTED:
			o.weighted = 1;
			have_mh = 1;
			break;
		default:
			return usage(NULL);
		}
	}
	if (!o.in_path && optind < argc)
		o.in_path = argv[optind++];
	if (!fmt || !o.out_path || !o.in_path || optind != argc)
		return usage("convert needs --format, -o OUT and one INPUT");
	if (esd_ds_format_parse(fmt, &o.fmt))
		return usage("--format: criteo-kaggle, avazu, criteo-search or tsv-multi-hot");
	int rc = multi_hot_opts(&o, &mb, have_mh);
	if (rc)
		return rc;
	struct ds_convert_result res;
	rc = esd_ds_convert(&o, &res);
	if (rc)
		return 1;
	printf("%s: %" PRIu64 " samples from %" PRIu64 " lines of %s", o.out_path, res.samples,
	       res.lines, o.in_path);
	if (o.skip_bad)
		printf(", %" PRIu64 " bad lines skipped", res.skipped);
	printf("\n");
	return 0;
}

static const char *origin_name(uint32_t o)
{
	static const char *const n[] = {"gen", "criteo-kaggle", "avazu", "criteo-search", "other"};
	return o < 5 ? n[o] : "?";
}

/* Lowest and highest length of bag_hist bucket b. */
static void bucket_range(unsigned b, uint32_t *lo, uint32_t *hi)
{
	*lo = b ? UINT32_C(1) << (b - 1) : 0;
	*hi = b ? (UINT32_C(1) << b) - 1 : 0;
}

/* A bag table's lengths: min, mean, quantiles, max and the histogram. */
static json_t *bags_json(const struct ds_table_stat *ts, uint32_t max_bag)
{
	json_t *j = json_object(), *h = json_array();
	json_object_set_new(j, "max_bag", json_integer(max_bag));
	json_object_set_new(j, "min", json_integer(ts->bag_min));
	json_object_set_new(j, "mean", json_real(ts->bag_mean));
	json_object_set_new(j, "p50", json_integer(ts->bag_p50));
	json_object_set_new(j, "p90", json_integer(ts->bag_p90));
	json_object_set_new(j, "p99", json_integer(ts->bag_p99));
	json_object_set_new(j, "max", json_integer(ts->bag_max));
	for (unsigned b = 0; b <= esd_ds_bag_bucket(ts->bag_max); b++) {
		uint32_t lo, hi;
		bucket_range(b, &lo, &hi);
		json_t *e = json_object();
		json_object_set_new(e, "lo", json_integer(lo));
		json_object_set_new(e, "hi", json_integer(hi));
		json_object_set_new(e, "bags", json_integer((json_int_t)ts->bag_hist[b]));
		json_array_append_new(h, e);
	}
	json_object_set_new(j, "hist", h);
	return j;
}

/* A weighted stream's table: its IDs' weights. */
static json_t *weights_json(const struct ds_table_stat *ts)
{
	json_t *j = json_object();
	json_object_set_new(j, "ids", json_integer((json_int_t)ts->wt_n));
	json_object_set_new(j, "min", json_real(ts->wt_min));
	json_object_set_new(j, "mean", json_real(ts->wt_mean));
	json_object_set_new(j, "max", json_real(ts->wt_max));
	return j;
}

static void print_json(const char *path, const struct ds_stat *st)
{
	const struct esd_ds_info *in = &st->info;
	json_t *o = json_object();
	json_object_set_new(o, "file", json_string(path));
	json_object_set_new(o, "shape", json_string(in->shape));
	json_object_set_new(o, "origin", json_string(origin_name(in->origin)));
	json_object_set_new(o, "source", json_string(in->source));
	json_object_set_new(o, "seed", json_integer((json_int_t)in->seed));
	json_object_set_new(o, "drift", json_real(in->drift));
	json_object_set_new(o, "scale", json_real(in->scale));
	json_object_set_new(o, "skipped", json_integer((json_int_t)in->skipped));
	char dg[24];
	snprintf(dg, sizeof(dg), "%016llx", (unsigned long long)st->digest);
	json_object_set_new(o, "digest", json_string(dg));
	json_object_set_new(o, "samples", json_integer((json_int_t)st->samples));
	json_object_set_new(o, "positives", json_integer((json_int_t)st->positives));
	json_object_set_new(o, "ntables", json_integer(in->ntables));
	json_object_set_new(o, "ndense", json_integer(in->ndense));
	json_object_set_new(o, "named", json_boolean(esd_ds_has_names(in)));
	json_object_set_new(o, "weighted", json_boolean(in->weighted));
	json_object_set_new(o, "total_rows", json_integer((json_int_t)st->total_rows));
	json_object_set_new(o, "distinct", json_integer((json_int_t)st->distinct));
	json_object_set_new(o, "cache_ratio", json_real(st->cache_ratio));
	json_object_set_new(o, "cache_rows", json_integer((json_int_t)st->cache_rows));
	json_object_set_new(o, "cache_cover", json_real(st->cache_cover));
	json_t *tabs = json_array();
	for (uint32_t t = 0; t < in->ntables; t++) {
		const struct ds_table_stat *ts = &st->t[t];
		json_t *j = json_object();
		char name[ESD_DS_NAME_LEN];
		json_object_set_new(j, "table", json_integer(t));
		json_object_set_new(j, "name", json_string(esd_ds_table_name(in, t, name)));
		json_object_set_new(j, "rows", json_integer((json_int_t)ts->rows));
		json_object_set_new(j, "distinct", json_integer((json_int_t)ts->distinct));
		json_object_set_new(j, "top_count", json_integer((json_int_t)ts->top_count));
		json_object_set_new(j, "top1_share", json_real(ts->top1_share));
		json_object_set_new(j, "zipf_fit",
		                    isnan(ts->zipf_fit) ? json_null() : json_real(ts->zipf_fit));
		json_object_set_new(j, "zipf_gen", json_real(in->zipf[t]));
		json_object_set_new(j, "cache_cover", json_real(ts->cache_cover));
		json_object_set_new(
		    j, "bags", in->max_bag[t] > 1 ? bags_json(ts, in->max_bag[t]) : json_null());
		json_object_set_new(j, "weights", in->weighted ? weights_json(ts) : json_null());
		json_array_append_new(tabs, j);
	}
	json_object_set_new(o, "tables", tabs);
	json_dumpf(o, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
	fputc('\n', stdout);
	json_decref(o);
}

/* A weighted stream's ID weights, one line a table. */
static void print_weights(const struct ds_stat *st)
{
	const struct esd_ds_info *in = &st->info;
	if (!in->weighted)
		return;
	printf("\nID weights (a weighted stream)\n%5s %10s %10s %10s %10s\n", "table", "ids",
	       "min", "mean", "max");
	for (uint32_t t = 0; t < in->ntables; t++) {
		const struct ds_table_stat *ts = &st->t[t];
		printf("%5u %10" PRIu64 " %10.4g %10.4g %10.4g\n", t, ts->wt_n, ts->wt_min,
		       ts->wt_mean, ts->wt_max);
	}
}

/* The bag lengths of each multi-hot table, one line a table. */
static void print_bags(const struct ds_stat *st)
{
	const struct esd_ds_info *in = &st->info;
	int head = 0;
	for (uint32_t t = 0; t < in->ntables; t++) {
		const struct ds_table_stat *ts = &st->t[t];
		if (in->max_bag[t] <= 1)
			continue;
		if (!head++)
			printf("\nbag lengths (IDs a sample) of the multi-hot tables; histogram "
			       "LENGTHS:BAGS\n%5s %7s %6s %8s %6s %6s %6s %6s  %s\n",
			       "table", "max_bag", "min", "mean", "p50", "p90", "p99", "max",
			       "histogram");
		printf("%5u %7u %6u %8.2f %6u %6u %6u %6u ", t, in->max_bag[t], ts->bag_min,
		       ts->bag_mean, ts->bag_p50, ts->bag_p90, ts->bag_p99, ts->bag_max);
		for (unsigned b = 0; b <= esd_ds_bag_bucket(ts->bag_max); b++) {
			uint32_t lo, hi;
			bucket_range(b, &lo, &hi);
			if (lo == hi)
				printf(" %u:%" PRIu64, lo, ts->bag_hist[b]);
			else
				printf(" %u-%u:%" PRIu64, lo, hi, ts->bag_hist[b]);
		}
		printf("\n");
	}
}

static void print_human(const char *path, const struct ds_stat *st)
{
	const struct esd_ds_info *in = &st->info;
	printf("stream    %s\n", path);
	printf("digest    %016llx (the same on every host's copy: part of the job token)\n",
	       (unsigned long long)st->digest);
	printf("shape     %s (origin %s, source '%s')\n", in->shape, origin_name(in->origin),
	       in->source);
	if (in->origin == ESD_DS_ORIGIN_GEN)
		printf("generator seed %" PRIu64 ", drift %g, scale %g, max-rows %" PRIu64 "\n",
		       in->seed, in->drift, in->scale, in->max_rows);
	else
		printf("converter %" PRIu64 " bad lines skipped, scale %g, max-rows %" PRIu64 "\n",
		       in->skipped, in->scale, in->max_rows);
	printf("samples   %" PRIu64 " (%.2f %% positive), %u dense, %u tables%s%s\n", st->samples,
	       st->samples ? 100.0 * (double)st->positives / (double)st->samples : 0.0, in->ndense,
	       in->ntables, esd_ds_has_names(in) ? " (named in the stream)" : "",
	       in->weighted ? ", weighted IDs" : "");
	printf("rows      %" PRIu64 " in all, %" PRIu64 " distinct keys seen (%.2f %%)\n",
	       st->total_rows, st->distinct,
	       st->total_rows ? 100.0 * (double)st->distinct / (double)st->total_rows : 0.0);
	printf("cache     %.2f %% of rows = %" PRIu64 " rows covers %.2f %% of accesses "
	       "(static most-frequent rows)\n\n",
	       st->cache_ratio * 100.0, st->cache_rows, st->cache_cover * 100.0);
	printf("%5s %-18s %10s %10s %7s %9s %6s %6s %8s\n", "table", "name", "rows", "distinct",
	       "seen%", "top1%rows", "zipf", "fit", "cover");
	for (uint32_t t = 0; t < in->ntables; t++) {
		const struct ds_table_stat *ts = &st->t[t];
		char name[ESD_DS_NAME_LEN], fit[16], gen[16];
		esd_ds_table_name(in, t, name);
		if (isnan(ts->zipf_fit))
			snprintf(fit, sizeof(fit), "-");
		else
			snprintf(fit, sizeof(fit), "%.2f", ts->zipf_fit);
		if (in->zipf[t] > 0)
			snprintf(gen, sizeof(gen), "%.2f", in->zipf[t]);
		else
			snprintf(gen, sizeof(gen), "-");
		printf("%5u %-18s %10" PRIu64 " %10" PRIu64 " %6.2f%% %8.2f%% %6s %6s %7.2f%%\n", t,
		       name, ts->rows, ts->distinct,
		       100.0 * (double)ts->distinct / (double)ts->rows, 100.0 * ts->top1_share, gen,
		       fit, 100.0 * ts->cache_cover);
	}
	print_bags(st);
	print_weights(st);
}

static int cmd_stat(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"cache-ratio", required_argument, NULL, OPT_CACHE_RATIO},
	    {"limit", required_argument, NULL, OPT_LIMIT},
	    {"json", no_argument, NULL, OPT_JSON},
	    {0},
	};
	double ratio = 0.08;
	uint64_t limit = 0;
	int json = 0, c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case OPT_CACHE_RATIO:
			if (parse_double(optarg, &ratio) || ratio < 0 || ratio > 1)
				BAD("--cache-ratio (0..1)");
			break;
		case OPT_LIMIT:
			if (parse_u64(optarg, &limit))
				BAD("--limit");
			break;
		case OPT_JSON:
			json = 1;
			break;
		default:
			return usage(NULL);
		}
	}
	if (optind + 1 != argc)
		return usage("stat needs one FILE");
	struct ds_stat *st = malloc(sizeof(*st));
	if (!st)
		return 1;
	int rc = esd_ds_stat_compute(argv[optind], ratio, limit, st);
	if (!rc) {
		if (json)
			print_json(argv[optind], st);
		else
			print_human(argv[optind], st);
	}
	free(st);
	return rc ? 1 : 0;
}

static int cmd_dump(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"from", required_argument, NULL, OPT_FROM},
	    {"count", required_argument, NULL, 'n'},
	    {"names", no_argument, NULL, OPT_NAMES},
	    {0},
	};
	uint64_t from = 0, n = 10;
	int c, names = 0;
	while ((c = getopt_long(argc, argv, "n:", opts, NULL)) != -1) {
		switch (c) {
		case OPT_FROM:
			if (parse_u64(optarg, &from))
				BAD("--from");
			break;
		case 'n':
			if (parse_u64(optarg, &n))
				BAD("-n");
			break;
		case OPT_NAMES:
			names = 1;
			break;
		default:
			return usage(NULL);
		}
	}
	if (optind + 1 != argc)
		return usage("dump needs one FILE");
	struct esd_ds_reader *r;
	if (esd_ds_open(argv[optind], &r))
		return 1;
	const struct esd_ds_info *in = esd_ds_reader_info(r);
	uint64_t cap = 0; /* the most keys a sample has */
	for (uint32_t t = 0; t < in->ntables; t++)
		cap += in->max_bag[t] > 1 ? in->max_bag[t] : 1;
	float label, *dense = calloc(in->ndense + 1, sizeof(float));
	esd_key_t *keys = calloc(cap, sizeof(esd_key_t));
	float *wts = calloc(cap, sizeof(float));
	uint32_t *off = calloc(in->ntables + 1, sizeof(uint32_t));
	int rc = 1;
	if (!dense || !keys || !wts || !off || esd_ds_seek(r, from))
		goto out;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t cur = esd_ds_tell(r);
		int64_t got = esd_ds_read_bags_w(r, 1, &label, dense, keys, cap, off, wts);
		if (got < 0)
			goto out;
		if (got == 0)
			break;
		printf("%" PRIu64 " %d", cur, (int)label);
		for (uint32_t j = 0; j < in->ndense; j++)
			printf(" %g", (double)dense[j]);
		printf(" |");
		for (uint32_t t = 0; t < in->ntables; t++) { /* a bag: t:id,id,... */
			char name[ESD_DS_NAME_LEN];
			if (names)
				printf(" %s:", esd_ds_table_name(in, t, name));
			else
				printf(" %u:", t);
			for (uint32_t j = off[t]; j < off[t + 1]; j++) { /* weighted: id:w */
				printf("%s%" PRIu64, j > off[t] ? "," : "", esd_key_id(keys[j]));
				if (in->weighted)
					printf(":%.9g", (double)wts[j]);
			}
		}
		printf("\n");
	}
	rc = 0;
out:
	free(dense);
	free(keys);
	free(wts);
	free(off);
	esd_ds_close(r);
	return rc;
}

static int cmd_hot(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"count", required_argument, NULL, 'n'},
	    {"limit", required_argument, NULL, OPT_LIMIT},
	    {"out", required_argument, NULL, 'o'},
	    {0},
	};
	uint64_t rows = 0, limit = 0;
	const char *out = NULL;
	int have_rows = 0, c;
	while ((c = getopt_long(argc, argv, "n:o:", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			if (parse_u64(optarg, &rows))
				BAD("-n");
			have_rows = 1;
			break;
		case OPT_LIMIT:
			if (parse_u64(optarg, &limit))
				BAD("--limit");
			break;
		case 'o':
			out = optarg;
			break;
		default:
			return usage(NULL);
		}
	}
	if (optind + 1 != argc || !out || !have_rows)
		return usage("hot needs FILE, -n ROWS and -o OUT");
	esd_key_t *keys;
	uint64_t n, seen;
	if (esd_ds_hot_profile(argv[optind], limit, rows, &keys, &n, &seen)) {
		fprintf(stderr, "esd-data: hot: %s\n", esd_ds_last_error());
		return 1;
	}
	char comment[1200];
	snprintf(comment, sizeof(comment), "%" PRIu64 " most frequent keys of the first %" PRIu64
	         " samples of %s", n, seen, argv[optind]);
	int rc = esd_ds_hot_write(out, keys, n, comment);
	free(keys);
	if (rc) {
		fprintf(stderr, "esd-data: hot: %s\n", esd_ds_last_error());
		return 1;
	}
	printf("%s: %" PRIu64 " hot rows from %" PRIu64 " samples%s\n", out, n, seen,
	       n < rows ? " (fewer distinct keys than asked)" : "");
	return 0;
}

int main(int argc, char **argv)
{
	esd_log_init("esd-data");
	if (argc < 2)
		return usage(NULL);
	const char *cmd = argv[1];
	argv[1] = argv[0];
	argc--;
	argv++;
	if (!strcmp(cmd, "gen"))
		return cmd_gen(argc, argv);
	if (!strcmp(cmd, "convert"))
		return cmd_convert(argc, argv);
	if (!strcmp(cmd, "stat"))
		return cmd_stat(argc, argv);
	if (!strcmp(cmd, "dump"))
		return cmd_dump(argc, argv);
	if (!strcmp(cmd, "hot"))
		return cmd_hot(argc, argv);
	if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
		fputs(usage_text, stdout);
		return 0;
	}
	return usage("unknown command");
}
