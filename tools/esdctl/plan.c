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

int esdctl_plan(const struct esdctl *ctl, const char *config, const char *const *sets, int nsets)
{
	struct esd_config *cfg = NULL;
	struct esd_job job;
	struct esd_ds_reader *dr = NULL;
	int rc = ESDCTL_EUSAGE;

	if (esd_config_create(&cfg))
		return ESDCTL_EFAIL;
	if (esd_config_load(cfg, config))
		goto out_cfg; /* the loader named the file and line */
	for (int i = 0; i < nsets; i++)
		if (esd_config_set(cfg, sets[i]))
			goto out_cfg;
	if (esd_config_check_keys(cfg, esd_job_keys) || esd_job_from_config(cfg, &job))
		goto out_cfg;
	if (!job.stream[0]) {
		fprintf(stderr,
		        "esdctl: plan: %s sets no data.stream: the table sizes come from "
		        "the stream's header\n",
		        config);
		goto out_cfg;
	}
	if (esd_ds_open(job.stream, &dr)) {
		fprintf(stderr, "esdctl: plan: cannot open data.stream %s: %s\n", job.stream,
		        esd_ds_last_error());
		goto out_cfg;
	}
	const struct esd_ds_info *di = esd_ds_reader_info(dr);
	uint32_t T = di->ntables, D = di->ndense, n = job.n, S = job.shards, dim = job.dim;
	uint64_t total_rows = 0, k = job.global_batch, maxb = 0;
	for (uint32_t t = 0; t < T; t++)
		total_rows += di->rows[t];
	for (uint32_t w = 0; w < n; w++)
		maxb = job.batch[w] > maxb ? job.batch[w] : maxb;
	/* cache rows exactly as esdd resolves them */
	uint64_t cache_rows = job.cache_rows;
	if (!cache_rows)
		cache_rows = (uint64_t)(job.cache_ratio * (double)total_rows);
	if (cache_rows < maxb * T)
		cache_rows = maxb * T;
	struct esd_model_shape sh = {.tables = T, .dim = dim, .dense = D, .hidden = job.hidden};
	struct esd_model *mdl;
	if (esd_model_create(&sh, &mdl)) {
		fprintf(stderr,
		        "esdctl: plan: model shape %u tables x %u floats + %u dense is "
		        "invalid\n",
		        T, dim, D);
		goto out_ds;
	}
	uint64_t dense_len = esd_model_dense_len(mdl);
	uint32_t hidden = esd_model_shape(mdl)->hidden;
	esd_model_free(mdl);
	unsigned sf = esd_optimizer_state_floats(job.optim.opt);

	/* ---- esdd ------------------------------------------------------ */
	struct esd_cache_config cc = {.rows = (uint32_t)cache_rows,
	                              .dim = dim,
	                              .optimizer = job.optim.opt,
	                              .ntables = T,
	                              .policy = job.policy,
	                              .pages = ESD_CACHE_PAGES_AUTO};
	struct esd_cache_sizes cs;
	if (cache_rows > (UINT64_C(1) << 30) || esd_cache_size(&cc, &cs)) {
		fprintf(stderr,
		        "esdctl: plan: a cache of %" PRIu64 " rows x %u floats cannot be "
		        "laid out (at most 2^30 rows)\n",
		        cache_rows, dim);
		goto out_ds;
	}
	uint64_t snap = esd_cmeta_bytes((uint32_t)cache_rows);
	struct esd_xchg_hdr xh;
	esd_xchg_layout(&xh, (uint32_t)maxb, T, D, (uint32_t)dense_len);
	uint64_t kt = k * T;
	/* dispatcher: two global batches, offsets, assignment, cost matrix,
	 * key table and consequence (per key: key, occupancy, per-worker
	 * state) */
	uint64_t disp = 2 * k * (4 + 4ull * D + 8ull * T) + (k + 1) * 4 + k * 4 + k * n * 8 +
	                kt * (24 + 8ull * n);

	/* ---- esd-ps ---------------------------------------------------- */
	uint64_t rec = align64(PLAN_PS_ROW_HDR + (uint64_t)(dim + sf * dim) * 4);

	/* ---- JSON ------------------------------------------------------ */
	json_t *root =
	    json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:I, s:I, s:I, s:s, s:s}", "config", config,
	              "stream", job.stream, "workers", n, "shards", S, "tables", T, "dim", dim,
	              "total_rows", (json_int_t)total_rows, "cache_rows", (json_int_t)cache_rows,
	              "global_batch", (json_int_t)k, "optimizer",
	              sf == 2   ? "adam"
	              : sf == 1 ? "adagrad"
	                        : "sgd",
	              "policy", esd_policy_name(job.policy));
	json_t *pss = json_array(), *nodes = json_array(), *trs = json_array();
	uint64_t ps_total = 0, node_total = 0, tr_total = 0, region_total = 0;
	for (uint32_t s = 0; s < S; s++) {
		uint64_t rows = (total_rows + S - 1) / S;
		uint64_t chunks = (rows + PLAN_PS_CHUNK_ROWS - 1) / PLAN_PS_CHUNK_ROWS;
		uint64_t icap = 1024;
		while ((rows + 1) * 2 > icap)
			icap *= 2;
		uint64_t stage = (kt + S - 1) / S * (16 + 4ull * dim);
		uint64_t dense = s == 0 ? dense_len * 4 * (1 + sf + n) : 0;
		json_t *o = json_pack("{s:i, s:I, s:I}", "shard", s, "row_count", (json_int_t)rows,
		                      "row_bytes", (json_int_t)rec);
		item(o, "rows", chunks * PLAN_PS_CHUNK_ROWS * rec, true,
		     "row records: key, clock, vector and optimizer state, in 4096-row chunks");
		item(o, "index", icap * PLAN_PS_INDEX_ENTRY, true,
		     "open-addressing index at load <= 1/2");
		item(o, "staging", stage, false, "gradients staged for one barrier");
		item(o, "dense", dense, true, "dense table: values, optimizer state, n stages");
		uint64_t tot =
		    chunks * PLAN_PS_CHUNK_ROWS * rec + icap * PLAN_PS_INDEX_ENTRY + stage + dense;
		json_object_set_new(o, "total", json_integer((json_int_t)tot));
		json_array_append_new(pss, o);
		ps_total += tot;
	}
	for (uint32_t w = 0; w < n; w++) {
		uint64_t m = job.batch[w];
		uint64_t order =
		    m * (4 + 4ull * D + 8ull * T) + m * T * (8 + 1 + 8 + 8 + 8) + kt * 8 * 2;
		json_t *o = json_pack("{s:i}", "rank", w);
		json_t *ci = item(o, "cache_region", cs.total, true,
		                  "huge-page shared memory (meta, rows, gradients), mapped by "
		                  "the trainer too");
		json_object_set_new(ci, "meta", json_integer((json_int_t)cs.meta));
		json_object_set_new(ci, "cmeta", json_integer((json_int_t)cs.cmeta));
		json_object_set_new(ci, "rows", json_integer((json_int_t)cs.rows));
		json_object_set_new(ci, "grads", json_integer((json_int_t)cs.grads));
		item(o, "snapshots", snap * n, true, "n cache-metadata snapshots (esd_cmeta)");
		item(o, "exchange", xh.total_size, true,
		     "exchange area with the trainer (shared memory)");
		item(o, "queues", order * PLAN_ORDER_RING, false, "dispatcher work orders");
		item(o, "dispatcher", disp, false, "batches, cost matrix, key table");
		uint64_t tot = cs.total + snap * n + xh.total_size + order * PLAN_ORDER_RING + disp;
		json_object_set_new(o, "total", json_integer((json_int_t)tot));
		json_array_append_new(nodes, o);
		node_total += tot;
		region_total += cs.total;

		uint64_t act = m * ((uint64_t)T * dim + D + hidden) * 4 * 2;
		json_t *t = json_pack("{s:i}", "rank", w);
		item(t, "model", dense_len * 4 * 2, false, "dense parameters and gradients");
		item(t, "activations", act, false, "forward and backward of a micro-batch");
		json_object_set_new(t, "total", json_integer((json_int_t)(dense_len * 8 + act)));
		json_array_append_new(trs, t);
		tr_total += dense_len * 8 + act;
	}
	json_object_set_new(root, "esd_ps",
	                    json_pack("{s:o, s:I}", "shards", pss, "total", (json_int_t)ps_total));
	json_object_set_new(
	    root, "esdd", json_pack("{s:o, s:I}", "nodes", nodes, "total", (json_int_t)node_total));
	json_object_set_new(
	    root, "trainers",
	    json_pack("{s:o, s:I}", "trainers", trs, "total", (json_int_t)tr_total));
	uint64_t total = ps_total + node_total + tr_total, avail = 0, hfree = 0;
	meminfo(&avail, &hfree);
	bool huge = region_total <= hfree;
	uint64_t from_avail = huge ? total - region_total : total;
	bool fits = avail && from_avail <= avail;
	json_object_set_new(root, "total_bytes", json_integer((json_int_t)total));
	json_object_set_new(root, "cache_regions_bytes", json_integer((json_int_t)region_total));
	json_object_set_new(root, "mem_available_bytes", json_integer((json_int_t)avail));
	json_object_set_new(root, "huge_pages_free_bytes", json_integer((json_int_t)hfree));
	json_object_set_new(root, "regions_in_huge_pages", json_boolean(huge));
	json_object_set_new(root, "needed_from_mem_available",
	                    json_integer((json_int_t)from_avail));
	json_object_set_new(root, "fits", json_boolean(fits));

	if (ctl->json) {
		esdctl_print_json(root);
	} else {
		char b1[32], b2[32], b3[32], b4[32];
		printf("plan of %s: %u workers, %u PS shard%s, %u tables of %" PRIu64
		       " rows x %u floats (%s), cache %" PRIu64 " rows per node (%s), global "
		       "batch %" PRIu64 "\n",
		       config, n, S, S == 1 ? "" : "s", T, total_rows, dim,
		       esdctl_str(root, "optimizer"), cache_rows, esd_policy_name(job.policy), k);
		size_t i;
		json_t *o;
		static const char *const ps_items[] = {"rows", "index", "staging", "dense"};
		static const char *const nd_items[] = {"cache_region", "snapshots", "exchange",
		                                       "queues", "dispatcher"};
		static const char *const tr_items[] = {"model", "activations"};
		json_array_foreach(pss, i, o)
		{
			printf("  esd-ps shard %zu (%.0f rows of %.0f bytes): %s\n", i,
			       esdctl_num(o, "row_count"), esdctl_num(o, "row_bytes"),
			       esdctl_bytes(esdctl_num(o, "total"), b1, sizeof(b1)));
			for (int j = 0; j < 4; j++) {
				json_t *it = json_object_get(o, ps_items[j]);
				print_row(ps_items[j], (uint64_t)esdctl_num(it, "bytes"),
				          json_is_true(json_object_get(it, "exact")),
				          esdctl_str(it, "what"));
			}
		}
		json_array_foreach(nodes, i, o)
		{
			if (i > 0) {
				printf("  esdd ranks 1..%u: the same each\n", n - 1);
				break;
			}
			printf("  esdd rank 0: %s\n",
			       esdctl_bytes(esdctl_num(o, "total"), b1, sizeof(b1)));
			for (int j = 0; j < 5; j++) {
				json_t *it = json_object_get(o, nd_items[j]);
				print_row(nd_items[j], (uint64_t)esdctl_num(it, "bytes"),
				          json_is_true(json_object_get(it, "exact")),
				          esdctl_str(it, "what"));
			}
		}
		json_array_foreach(trs, i, o)
		{
			if (i > 0)
				break;
			printf("  esd-trainer (each of %u): %s\n", n,
			       esdctl_bytes(esdctl_num(o, "total"), b1, sizeof(b1)));
			for (int j = 0; j < 2; j++) {
				json_t *it = json_object_get(o, tr_items[j]);
				print_row(tr_items[j], (uint64_t)esdctl_num(it, "bytes"),
				          json_is_true(json_object_get(it, "exact")),
				          esdctl_str(it, "what"));
			}
		}
		printf("  total %s (cache regions %s, %s); MemAvailable %s, huge pages free %s: "
		       "%s\n",
		       esdctl_bytes((double)total, b1, sizeof(b1)),
		       esdctl_bytes((double)region_total, b2, sizeof(b2)),
		       huge ? "in reserved huge pages" : "not enough huge pages: 4 KiB pages",
		       esdctl_bytes((double)avail, b3, sizeof(b3)),
		       esdctl_bytes((double)hfree, b4, sizeof(b4)), fits ? "fits" : "DOES NOT FIT");
		printf("  (~ marks an estimate; the rest is the runtime's exact layout)\n");
	}
	json_decref(root);
	/* a plan that does not fit is still a plan: exit 0, "fits": false
	 * (scripts such as esd-testbed read the JSON only on success) */
	if (!fits)
		fprintf(stderr,
		        "esdctl: plan: %s needs %" PRIu64 " bytes of MemAvailable; %" PRIu64
		        " available\n",
		        config, from_avail, avail);
	rc = ESDCTL_OK;
out_ds:
	esd_ds_close(dr);
out_cfg:
	esd_config_free(cfg);
	return rc;
}
