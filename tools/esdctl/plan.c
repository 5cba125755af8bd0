/*
 * esdctl plan: the memory a job will need, per process and in total,
 * computed from the job file and the stream's header before anything
 * starts, and whether it fits this machine.
 *
 * Exact where the runtime's layout functions exist (the cache region via
 * esd_cache_size, snapshots via esd_cmeta_bytes, the exchange area via
 * esd_xchg_layout, the PS row record and index as runtime/ps/store.c lays
 * them out); estimates, marked so, for heap that grows with the batch
 * (dispatcher queues, PS gradient staging, trainer activations). PS rows
 * are planned for every row of the shard: the store creates a row on its
 * first pull, so a long run reaches that bound.
 */
#include "esdctl.h"
#include "xchg.h"

#include <esd/cache.h>
#include <esd/config.h>
#include <esd/dataset.h>
#include <esd/err.h>
#include <esd/job.h>
#include <esd/model.h>
#include <esd/policy.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Order ring of esdd's dispatcher (runtime/node/node.h ORDER_RING). */
#define PLAN_ORDER_RING 3
/* PS store: rows per arena chunk, index entry (u64 key + u32 record). */
#define PLAN_PS_CHUNK_ROWS  4096u
#define PLAN_PS_INDEX_ENTRY 12u
#define PLAN_PS_ROW_HDR     16u

static uint64_t align64(uint64_t x)
{
	return (x + 63) & ~UINT64_C(63);
}

static int meminfo(uint64_t *avail, uint64_t *huge_free)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	uint64_t hp_free = 0, hp_size = 0;
	*avail = 0;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long v;
		if (sscanf(line, "MemAvailable: %llu kB", &v) == 1)
			*avail = v * 1024;
		else if (sscanf(line, "HugePages_Free: %llu", &v) == 1)
			hp_free = v;
		else if (sscanf(line, "Hugepagesize: %llu kB", &v) == 1)
			hp_size = v * 1024;
	}
	fclose(f);
	*huge_free = hp_free * hp_size;
	return 0;
}

static json_t *item(json_t *parent, const char *name, uint64_t bytes, bool exact, const char *what)
{
	json_t *o =
	    json_pack("{s:I, s:b, s:s}", "bytes", (json_int_t)bytes, "exact", exact, "what", what);
	json_object_set_new(parent, name, o);
	return o;
}

static void print_row(const char *name, uint64_t bytes, bool exact, const char *what)
{
	char b[32];
	printf("    %-16s %12s%s  %s\n", name, esdctl_bytes((double)bytes, b, sizeof(b)),
	       exact ? " " : "~", what);
}

/* What the plan is computed from: the job, the stream's shape, and the
 * runtime's layouts for it. */
struct plan_in {
	const char *config;
	struct esd_job job;
	uint32_t T, D, n, S, dim, hidden;
	uint32_t W;  /* most keys per sample (bags at their max_bag) */
	bool bags;
	unsigned sf; /* optimizer state floats per float */
	uint64_t total_rows, k, maxb, cache_rows, dense_len;
	struct esd_cache_sizes cs;
	uint64_t snap, kt, disp, rec;
	struct esd_xchg_hdr xh;
};

/* The plan's totals, filled by the per-process parts. */
struct plan_out {
	json_t *root, *pss, *nodes, *trs;
	uint64_t ps_total, node_total, tr_total, region_total, total, avail, hfree, from_avail;
	bool huge, fits;
};

/* The job (with the command line's overrides) and its stream; 0 or the
 * exit code, with the reason printed. */
static int plan_load_job(struct plan_in *in, const char *const *sets, int nsets,
                         struct esd_config *cfg, struct esd_ds_reader **dr)
{
	if (esd_config_load(cfg, in->config))
		return ESDCTL_EUSAGE; /* the loader named the file and line */
	for (int i = 0; i < nsets; i++)
		if (esd_config_set(cfg, sets[i]))
			return ESDCTL_EUSAGE;
	if (esd_config_check_keys(cfg, esd_job_keys) || esd_job_from_config(cfg, &in->job))
		return ESDCTL_EUSAGE;
	if (!in->job.stream[0]) {
		fprintf(stderr,
		        "esdctl: plan: %s sets no data.stream: the table sizes come from "
		        "the stream's header\n",
		        in->config);
		return ESDCTL_EUSAGE;
	}
	if (esd_ds_open(in->job.stream, dr)) {
		fprintf(stderr, "esdctl: plan: cannot open data.stream %s: %s\n", in->job.stream,
		        esd_ds_last_error());
		return ESDCTL_EUSAGE;
	}
	return 0;
}

/* The sizes: the stream's shape, the cache rows as esdd resolves them,
 * the model, and the runtime's layouts. 0 or the exit code. */
static int plan_sizes(struct plan_in *in, const struct esd_ds_info *di)
{
	const struct esd_job *job = &in->job;
	in->T = di->ntables;
	in->W = esd_ds_keys_per_sample(di);
	in->bags = esd_ds_has_bags(di);
	in->D = di->ndense;
	in->n = job->n;
	in->S = job->shards;
	in->dim = job->dim;
	in->k = job->global_batch;
	for (uint32_t t = 0; t < in->T; t++)
		in->total_rows += di->rows[t];
	for (uint32_t w = 0; w < in->n; w++)
		in->maxb = job->batch[w] > in->maxb ? job->batch[w] : in->maxb;
	in->cache_rows = job->cache_rows;
	if (!in->cache_rows)
		in->cache_rows = (uint64_t)(job->cache_ratio * (double)in->total_rows);
	if (in->cache_rows < in->maxb * in->W)
		in->cache_rows = in->maxb * in->W;
	struct esd_model_shape sh = {.tables = in->T, .dim = in->dim, .dense = in->D,
	                             .hidden = job->hidden};
	struct esd_model *mdl;
	if (esd_model_create(&sh, &mdl)) {
		fprintf(stderr,
		        "esdctl: plan: model shape %u tables x %u floats + %u dense is "
		        "invalid\n",
		        in->T, in->dim, in->D);
		return ESDCTL_EUSAGE;
	}
	in->dense_len = esd_model_dense_len(mdl);
	in->hidden = esd_model_shape(mdl)->hidden;
	esd_model_free(mdl);
	in->sf = esd_optimizer_state_floats(job->optim.opt);
	struct esd_cache_config cc = {.rows = (uint32_t)in->cache_rows,
	                              .dim = in->dim,
	                              .optimizer = job->optim.opt,
	                              .ntables = in->T,
	                              .policy = job->policy,
	                              .pages = ESD_CACHE_PAGES_AUTO};
	if (in->cache_rows > (UINT64_C(1) << 30) || esd_cache_size(&cc, &in->cs)) {
		fprintf(stderr,
		        "esdctl: plan: a cache of %" PRIu64 " rows x %u floats cannot be "
		        "laid out (at most 2^30 rows)\n",
		        in->cache_rows, in->dim);
		return ESDCTL_EUSAGE;
	}
	in->snap = esd_cmeta_bytes((uint32_t)in->cache_rows);
	esd_xchg_layout(&in->xh, (uint32_t)in->maxb, in->T,
	                in->bags ? (uint32_t)(in->maxb * in->W) : 0, in->D,
	                (uint32_t)in->dense_len);
	in->kt = in->k * in->W;
	/* dispatcher: two global batches, offsets, assignment, cost matrix,
	 * key table and consequence (per key: key, occupancy, per-worker
	 * state) */
	in->disp = 2 * in->k * (4 + 4ull * in->D + 8ull * in->W + 4ull * in->T) +
	           2 * (in->k + 1) * 4 + in->k * 4 +
	           in->k * in->n * 8 + in->kt * (24 + 8ull * in->n);
	in->rec = align64(PLAN_PS_ROW_HDR + (uint64_t)(in->dim + in->sf * in->dim) * 4);
	return 0;
}

/* Each PS shard: row records, index, staging, dense table. */
static void plan_ps(const struct plan_in *in, struct plan_out *out)
{
	const uint32_t S = in->S;
	for (uint32_t s = 0; s < S; s++) {
		uint64_t rows = (in->total_rows + S - 1) / S;
		uint64_t chunks = (rows + PLAN_PS_CHUNK_ROWS - 1) / PLAN_PS_CHUNK_ROWS;
		uint64_t icap = 1024;
		while ((rows + 1) * 2 > icap)
			icap *= 2;
		uint64_t stage = (in->kt + S - 1) / S * (16 + 4ull * in->dim);
		uint64_t dense = s == 0 ? in->dense_len * 4 * (1 + in->sf + in->n) : 0;
		json_t *o = json_pack("{s:i, s:I, s:I}", "shard", s, "row_count", (json_int_t)rows,
		                      "row_bytes", (json_int_t)in->rec);
		item(o, "rows", chunks * PLAN_PS_CHUNK_ROWS * in->rec, true,
		     "row records: key, clock, vector and optimizer state, in 4096-row chunks");
		item(o, "index", icap * PLAN_PS_INDEX_ENTRY, true,
		     "open-addressing index at load <= 1/2");
		item(o, "staging", stage, false, "gradients staged for one barrier");
		item(o, "dense", dense, true, "dense table: values, optimizer state, n stages");
		uint64_t tot =
		    chunks * PLAN_PS_CHUNK_ROWS * in->rec + icap * PLAN_PS_INDEX_ENTRY + stage + dense;
		json_object_set_new(o, "total", json_integer((json_int_t)tot));
		json_array_append_new(out->pss, o);
		out->ps_total += tot;
	}
}

/* Each node: the cache region, snapshots, exchange area, queues and
 * dispatcher; and its trainer. */
static void plan_nodes(const struct plan_in *in, struct plan_out *out)
{
	const uint32_t T = in->T, D = in->D, W = in->W;
	for (uint32_t w = 0; w < in->n; w++) {
		uint64_t m = in->job.batch[w];
		uint64_t order = m * (4 + 4ull * D + 8ull * W + 4ull * T) +
		                 m * W * (8 + 1 + 8 + 8 + 8) + in->kt * 8 * 2;
		json_t *o = json_pack("{s:i}", "rank", w);
		json_t *ci = item(o, "cache_region", in->cs.total, true,
		                  "huge-page shared memory (meta, rows, gradients), mapped by "
		                  "the trainer too");
		json_object_set_new(ci, "meta", json_integer((json_int_t)in->cs.meta));
		json_object_set_new(ci, "cmeta", json_integer((json_int_t)in->cs.cmeta));
		json_object_set_new(ci, "rows", json_integer((json_int_t)in->cs.rows));
		json_object_set_new(ci, "grads", json_integer((json_int_t)in->cs.grads));
		item(o, "snapshots", in->snap * in->n, true, "n cache-metadata snapshots (esd_cmeta)");
		item(o, "exchange", in->xh.total_size, true,
		     "exchange area with the trainer (shared memory)");
		item(o, "queues", order * PLAN_ORDER_RING, false, "dispatcher work orders");
		item(o, "dispatcher", in->disp, false, "batches, cost matrix, key table");
		uint64_t tot = in->cs.total + in->snap * in->n + in->xh.total_size +
		               order * PLAN_ORDER_RING + in->disp;
		json_object_set_new(o, "total", json_integer((json_int_t)tot));
		json_array_append_new(out->nodes, o);
		out->node_total += tot;
		out->region_total += in->cs.total;

		uint64_t act = m * ((uint64_t)T * in->dim + D + in->hidden) * 4 * 2;
		json_t *t = json_pack("{s:i}", "rank", w);
		item(t, "model", in->dense_len * 4 * 2, false, "dense parameters and gradients");
		item(t, "activations", act, false, "forward and backward of a micro-batch");
		json_object_set_new(t, "total", json_integer((json_int_t)(in->dense_len * 8 + act)));
		json_array_append_new(out->trs, t);
		out->tr_total += in->dense_len * 8 + act;
	}
}

/* The totals against this machine's MemAvailable and free huge pages. */
static void plan_fit(struct plan_out *out)
{
	json_t *root = out->root;
	json_object_set_new(
	    root, "esd_ps",
	    json_pack("{s:o, s:I}", "shards", out->pss, "total", (json_int_t)out->ps_total));
	json_object_set_new(
	    root, "esdd",
	    json_pack("{s:o, s:I}", "nodes", out->nodes, "total", (json_int_t)out->node_total));
	json_object_set_new(
	    root, "trainers",
	    json_pack("{s:o, s:I}", "trainers", out->trs, "total", (json_int_t)out->tr_total));
	out->total = out->ps_total + out->node_total + out->tr_total;
	meminfo(&out->avail, &out->hfree);
	out->huge = out->region_total <= out->hfree;
	out->from_avail = out->huge ? out->total - out->region_total : out->total;
	out->fits = out->avail && out->from_avail <= out->avail;
	json_object_set_new(root, "total_bytes", json_integer((json_int_t)out->total));
	json_object_set_new(root, "cache_regions_bytes", json_integer((json_int_t)out->region_total));
	json_object_set_new(root, "mem_available_bytes", json_integer((json_int_t)out->avail));
	json_object_set_new(root, "huge_pages_free_bytes", json_integer((json_int_t)out->hfree));
	json_object_set_new(root, "regions_in_huge_pages", json_boolean(out->huge));
	json_object_set_new(root, "needed_from_mem_available",
	                    json_integer((json_int_t)out->from_avail));
	json_object_set_new(root, "fits", json_boolean(out->fits));
}

/* The rows of one process's part of the plan. */
static void print_items(json_t *o, const char *const *names, int count)
{
	for (int j = 0; j < count; j++) {
		json_t *it = json_object_get(o, names[j]);
		print_row(names[j], (uint64_t)esdctl_num(it, "bytes"),
		          json_is_true(json_object_get(it, "exact")), esdctl_str(it, "what"));
	}
}

/* The plan as text: each shard, the first node and trainer (the others
 * are the same), the totals and the verdict. */
static void plan_print(const struct plan_in *in, const struct plan_out *out)
{
	static const char *const ps_items[] = {"rows", "index", "staging", "dense"};
	static const char *const nd_items[] = {"cache_region", "snapshots", "exchange", "queues",
	                                       "dispatcher"};
	static const char *const tr_items[] = {"model", "activations"};
	char b1[32], b2[32], b3[32], b4[32];
	size_t i;
	json_t *o;
	printf("plan of %s: %u workers, %u PS shard%s, %u tables of %" PRIu64
	       " rows x %u floats (%s), cache %" PRIu64 " rows per node (%s), global "
	       "batch %" PRIu64 "\n",
	       in->config, in->n, in->S, in->S == 1 ? "" : "s", in->T, in->total_rows, in->dim,
	       esdctl_str(out->root, "optimizer"), in->cache_rows, esd_policy_name(in->job.policy),
	       in->k);
	json_array_foreach(out->pss, i, o)
	{
		printf("  esd-ps shard %zu (%.0f rows of %.0f bytes): %s\n", i,
		       esdctl_num(o, "row_count"), esdctl_num(o, "row_bytes"),
		       esdctl_bytes(esdctl_num(o, "total"), b1, sizeof(b1)));
		print_items(o, ps_items, 4);
	}
	o = json_array_get(out->nodes, 0);
	printf("  esdd rank 0: %s\n", esdctl_bytes(esdctl_num(o, "total"), b1, sizeof(b1)));
	print_items(o, nd_items, 5);
	if (in->n > 1)
		printf("  esdd ranks 1..%u: the same each\n", in->n - 1);
	o = json_array_get(out->trs, 0);
	printf("  esd-trainer (each of %u): %s\n", in->n,
	       esdctl_bytes(esdctl_num(o, "total"), b1, sizeof(b1)));
	print_items(o, tr_items, 2);
	printf("  total %s (cache regions %s, %s); MemAvailable %s, huge pages free %s: "
	       "%s\n",
	       esdctl_bytes((double)out->total, b1, sizeof(b1)),
	       esdctl_bytes((double)out->region_total, b2, sizeof(b2)),
	       out->huge ? "in reserved huge pages" : "not enough huge pages: 4 KiB pages",
	       esdctl_bytes((double)out->avail, b3, sizeof(b3)),
	       esdctl_bytes((double)out->hfree, b4, sizeof(b4)), out->fits ? "fits" : "DOES NOT FIT");
	printf("  (~ marks an estimate; the rest is the runtime's exact layout)\n");
}

int esdctl_plan(const struct esdctl *ctl, const char *config, const char *const *sets, int nsets)
{
	struct esd_config *cfg = NULL;
	struct esd_ds_reader *dr = NULL;
	struct plan_in in = {.config = config};
	struct plan_out out = {0};
	int rc;

	if (esd_config_create(&cfg))
		return ESDCTL_EFAIL;
	if ((rc = plan_load_job(&in, sets, nsets, cfg, &dr)) ||
	    (rc = plan_sizes(&in, esd_ds_reader_info(dr))))
		goto out;
	out.root = json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:I, s:I, s:I, s:s, s:s}", "config",
	                     config, "stream", in.job.stream, "workers", in.n, "shards", in.S,
	                     "tables", in.T, "dim", in.dim, "total_rows", (json_int_t)in.total_rows,
	                     "cache_rows", (json_int_t)in.cache_rows, "global_batch",
	                     (json_int_t)in.k, "optimizer",
	                     in.sf == 2   ? "adam"
	                     : in.sf == 1 ? "adagrad"
	                                  : "sgd",
	                     "policy", esd_policy_name(in.job.policy));
	out.pss = json_array();
	out.nodes = json_array();
	out.trs = json_array();
	plan_ps(&in, &out);
	plan_nodes(&in, &out);
	plan_fit(&out);
	if (ctl->json)
		esdctl_print_json(out.root);
	else
		plan_print(&in, &out);
	json_decref(out.root);
	/* a plan that does not fit is still a plan: exit 0, "fits": false
	 * (scripts such as esd-testbed read the JSON only on success) */
	if (!out.fits)
		fprintf(stderr,
		        "esdctl: plan: %s needs %" PRIu64 " bytes of MemAvailable; %" PRIu64
		        " available\n",
		        config, out.from_avail, out.avail);
	rc = ESDCTL_OK;
out:
	esd_ds_close(dr);
	esd_config_free(cfg);
	return rc;
}
