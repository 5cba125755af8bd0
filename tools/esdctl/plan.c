/*
 * esdctl plan: the memory a job will need, per process and in total,
 * computed from the job file and the stream's header before anything
 * starts, and whether it fits this machine.
 *
 * The figures are esd_plan_compute's (esd/plan.h): exact where the
 * runtime's layout functions exist, estimates, marked so, for heap that
 * grows with the batch. esd-ps and esdd make the same check at start, each
 * for its own part.
 */
#include "esdctl.h"

#include <esd/config.h>
#include <esd/dataset.h>
#include <esd/err.h>
#include <esd/job.h>
#include <esd/plan.h>
#include <esd/policy.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* The plan and its JSON, filled by the per-process parts. */
struct plan_out {
	const char *config;
	struct esd_job job;
	struct esd_plan p;
	struct esd_plan_fit fit;
	json_t *root, *pss, *nodes, *trs;
};

/* The job (with the command line's overrides) and its stream; 0 or the
 * exit code, with the reason printed. */
static int plan_load_job(struct plan_out *out, const char *const *sets, int nsets,
                         struct esd_config *cfg, struct esd_ds_reader **dr)
{
	if (esd_config_load(cfg, out->config))
		return ESDCTL_EUSAGE; /* the loader named the file and line */
	for (int i = 0; i < nsets; i++)
		if (esd_config_set(cfg, sets[i]))
			return ESDCTL_EUSAGE;
	if (esd_config_check_keys(cfg, esd_job_keys) || esd_job_from_config(cfg, &out->job))
		return ESDCTL_EUSAGE;
	if (!out->job.stream[0]) {
		fprintf(stderr,
		        "esdctl: plan: %s sets no data.stream: the table sizes come from "
		        "the stream's header\n",
		        out->config);
		return ESDCTL_EUSAGE;
	}
	if (esd_ds_open(out->job.stream, dr)) {
		fprintf(stderr, "esdctl: plan: cannot open data.stream %s: %s\n", out->job.stream,
		        esd_ds_last_error());
		return ESDCTL_EUSAGE;
	}
	return 0;
}

/* The bytes a row of each table moves on the wire (key, clock, its
 * table's dim of value and of optimizer state: model.dims rows are not
 * padded on the links, docs/protocol.md) as JSON. */
static void plan_wire(struct plan_out *out)
{
	json_t *a = json_array();
	for (uint32_t t = 0; t < out->p.tables; t++)
		json_array_append_new(a, json_integer((json_int_t)esd_job_table_row_bytes(&out->job, t)));
	json_object_set_new(out->root, "wire_row_bytes", a);
}

/* Each PS shard as JSON. */
static void plan_ps(struct plan_out *out)
{
	const struct esd_plan *p = &out->p;
	for (uint32_t s = 0; s < p->shards; s++) {
		const struct esd_plan_ps *ps = &p->ps[s];
		json_t *o = json_pack("{s:i, s:I, s:I}", "shard", s, "row_count",
		                      (json_int_t)ps->rows, "row_bytes", (json_int_t)p->row_bytes);
		item(o, "rows", ps->records, true,
		     ps->disk ? "rows resident (ps.store_ram: row cache, window, dirty pages)"
		              : "row records: key, clock, vector and optimizer state, in 4096-row "
		                "chunks");
		item(o, "index", ps->index, true,
		     "open-addressing index at load <= 1/2, changed-row bits");
		item(o, "staging", ps->staging, false, "gradients staged for one barrier");
		item(o, "pull", ps->pull, false,
		     "pull answers of one iteration with optimizer state (at most)");
		item(o, "dense", ps->dense, true, "dense table: values, optimizer state, n stages");
		json_object_set_new(o, "total", json_integer((json_int_t)ps->total));
		json_object_set_new(o, "disk", json_integer((json_int_t)ps->disk));
		json_array_append_new(out->pss, o);
	}
}

/* Each node and its trainer as JSON. */
static void plan_nodes(struct plan_out *out)
{
	const struct esd_plan *p = &out->p;
	const struct esd_cache_sizes *cs = &p->cache_sizes;
	for (uint32_t w = 0; w < p->workers; w++) {
		const struct esd_plan_node *nd = &p->node[w];
		json_t *o = json_pack("{s:i}", "rank", w);
		json_t *ci = item(o, "cache_region", nd->region, true,
		                  "huge-page shared memory (meta, rows, gradients), mapped by "
		                  "the trainer too");
		json_object_set_new(ci, "meta", json_integer((json_int_t)cs->meta));
		json_object_set_new(ci, "cmeta", json_integer((json_int_t)cs->cmeta));
		json_object_set_new(ci, "rows", json_integer((json_int_t)cs->rows));
		json_object_set_new(ci, "grads", json_integer((json_int_t)cs->grads));
		item(o, "snapshots", nd->snapshots, true, "n cache-metadata snapshots (esd_cmeta)");
		item(o, "exchange", nd->exchange, true,
		     "exchange area with the trainer (shared memory)");
		item(o, "queues", nd->queues, false, "dispatcher work orders");
		item(o, "dispatcher", nd->dispatcher, false, "batches, cost matrix, key table");
		json_object_set_new(o, "total", json_integer((json_int_t)nd->total));
		json_array_append_new(out->nodes, o);

		const struct esd_plan_trainer *tr = &p->trainer[w];
		json_t *t = json_pack("{s:i}", "rank", w);
		item(t, "model", tr->model, false, "dense parameters and gradients");
		item(t, "activations", tr->activations, false,
		     "forward and backward of a micro-batch");
		json_object_set_new(t, "total", json_integer((json_int_t)tr->total));
		json_array_append_new(out->trs, t);
	}
}

/* The totals against this machine's MemAvailable and free huge pages. */
static void plan_fit(struct plan_out *out)
{
	const struct esd_plan *p = &out->p;
	const struct esd_plan_fit *f = &out->fit;
	json_t *root = out->root;
	json_object_set_new(
	    root, "esd_ps",
	    json_pack("{s:o, s:I}", "shards", out->pss, "total", (json_int_t)p->ps_total));
	json_object_set_new(
	    root, "esdd",
	    json_pack("{s:o, s:I}", "nodes", out->nodes, "total", (json_int_t)p->node_total));
	json_object_set_new(
	    root, "trainers",
	    json_pack("{s:o, s:I}", "trainers", out->trs, "total", (json_int_t)p->trainer_total));
	esd_plan_fit(p->total, p->region_total, &out->fit);
	json_object_set_new(root, "total_bytes", json_integer((json_int_t)p->total));
	json_object_set_new(root, "cache_regions_bytes", json_integer((json_int_t)p->region_total));
	json_object_set_new(root, "mem_available_bytes", json_integer((json_int_t)f->mem_available));
	json_object_set_new(root, "huge_pages_free_bytes", json_integer((json_int_t)f->huge_free));
	json_object_set_new(root, "regions_in_huge_pages", json_boolean(f->regions_in_huge_pages));
	json_object_set_new(root, "needed_from_mem_available",
	                    json_integer((json_int_t)f->from_available));
	json_object_set_new(root, "fits", json_boolean(f->fits));
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
static void plan_print(const struct plan_out *out)
{
	static const char *const ps_items[] = {"rows", "index", "staging", "pull", "dense"};
	static const char *const nd_items[] = {"cache_region", "snapshots", "exchange", "queues",
	                                       "dispatcher"};
	static const char *const tr_items[] = {"model", "activations"};
	const struct esd_plan *p = &out->p;
	const struct esd_plan_fit *f = &out->fit;
	char b1[32], b2[32], b3[32], b4[32];
	size_t i;
	json_t *o;
	printf("plan of %s: %u workers, %u PS shard%s, %u tables of %" PRIu64
	       " rows x %u floats%s (%s), cache %" PRIu64 " rows per node (%s), global "
	       "batch %" PRIu64 "\n",
	       out->config, p->workers, p->shards, p->shards == 1 ? "" : "s", p->tables,
	       p->total_rows, p->dim,
	       out->job.ntable_dims ? " (model.dims: each row stored at the largest)" : "",
	       esdctl_str(out->root, "optimizer"), p->cache_rows,
	       esd_policy_name(out->job.policy), p->global_batch);
	if (out->job.ntable_dims) {
		uint64_t lo = UINT64_MAX, hi = 0;
		for (uint32_t t = 0; t < p->tables; t++) {
			uint64_t b = esd_job_table_row_bytes(&out->job, t);
			lo = b < lo ? b : lo;
			hi = b > hi ? b : hi;
		}
		printf("  a row on the links: %" PRIu64 " to %" PRIu64 " bytes by its table's dim "
		       "(key, clock, value, optimizer state; \"wire_row_bytes\" in the JSON)\n",
		       lo, hi);
	}
	json_array_foreach(out->pss, i, o)
	{
		printf("  esd-ps shard %zu (%.0f rows of %.0f bytes): %s", i,
		       esdctl_num(o, "row_count"), esdctl_num(o, "row_bytes"),
		       esdctl_bytes(esdctl_num(o, "total"), b1, sizeof(b1)));
		if (esdctl_num(o, "disk") > 0)
			printf(" of RAM, %s row file in ps.store_dir",
			       esdctl_bytes(esdctl_num(o, "disk"), b2, sizeof(b2)));
		printf("\n");
		print_items(o, ps_items, 5);
	}
	o = json_array_get(out->nodes, 0);
	printf("  esdd rank 0: %s\n", esdctl_bytes(esdctl_num(o, "total"), b1, sizeof(b1)));
	print_items(o, nd_items, 5);
	if (p->workers > 1)
		printf("  esdd ranks 1..%u: the same each\n", p->workers - 1);
	o = json_array_get(out->trs, 0);
	printf("  esd-trainer (each of %u): %s\n", p->workers,
	       esdctl_bytes(esdctl_num(o, "total"), b1, sizeof(b1)));
	print_items(o, tr_items, 2);
	printf("  total %s (cache regions %s, %s); MemAvailable %s, huge pages free %s: "
	       "%s\n",
	       esdctl_bytes((double)p->total, b1, sizeof(b1)),
	       esdctl_bytes((double)p->region_total, b2, sizeof(b2)),
	       f->regions_in_huge_pages ? "in reserved huge pages"
	                                : "not enough huge pages: 4 KiB pages",
	       esdctl_bytes((double)f->mem_available, b3, sizeof(b3)),
	       esdctl_bytes((double)f->huge_free, b4, sizeof(b4)),
	       f->fits ? "fits" : "DOES NOT FIT");
	printf("  (~ marks an estimate; the rest is the runtime's exact layout)\n");
}

int esdctl_plan(const struct esdctl *ctl, const char *config, const char *const *sets, int nsets)
{
	struct esd_config *cfg = NULL;
	struct esd_ds_reader *dr = NULL;
	static struct plan_out out; /* one plan per run */
	char err[256];
	int rc;

	memset(&out, 0, sizeof(out));
	out.config = config;
	if (esd_config_create(&cfg))
		return ESDCTL_EFAIL;
	if ((rc = plan_load_job(&out, sets, nsets, cfg, &dr)))
		goto out;
	if (esd_plan_compute(&out.job, esd_ds_reader_info(dr), &out.p, err, sizeof(err))) {
		fprintf(stderr, "esdctl: plan: %s\n", err);
		rc = ESDCTL_EUSAGE;
		goto out;
	}
	const struct esd_plan *p = &out.p;
	out.root = json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:I, s:I, s:I, s:I, s:s, s:s}",
	                     "config", config, "stream", out.job.stream, "workers", p->workers,
	                     "shards", p->shards, "tables", p->tables, "dim", p->dim,
	                     "emb_floats", (json_int_t)p->emb_floats, "total_rows",
	                     (json_int_t)p->total_rows, "cache_rows", (json_int_t)p->cache_rows,
	                     "global_batch", (json_int_t)p->global_batch, "optimizer",
	                     p->state_floats == 2   ? "adam"
	                     : p->state_floats == 1 ? "adagrad"
	                                            : "sgd",
	                     "policy", esd_policy_name(out.job.policy));
	out.pss = json_array();
	out.nodes = json_array();
	out.trs = json_array();
	plan_wire(&out);
	plan_ps(&out);
	plan_nodes(&out);
	plan_fit(&out);
	if (ctl->json)
		esdctl_print_json(out.root);
	else
		plan_print(&out);
	json_decref(out.root);
	/* a plan that does not fit is still a plan: exit 0, "fits": false
	 * (scripts such as esd-testbed read the JSON only on success) */
	if (!out.fit.fits)
		fprintf(stderr,
		        "esdctl: plan: %s needs %" PRIu64 " bytes of MemAvailable; %" PRIu64
		        " available\n",
		        config, out.fit.from_available, out.fit.mem_available);
	rc = ESDCTL_OK;
out:
	esd_ds_close(dr);
	esd_config_free(cfg);
	return rc;
}
