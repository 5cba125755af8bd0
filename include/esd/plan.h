/*
 * esd/plan.h - the memory a job will need, per process, computed from the
 * job and its stream's header before anything starts; and whether a part
 * of it fits this machine. Also the other checks a process makes at start
 * rather than fail later: a directory it will write, the stream's passes. esdctl plan prints it; esd-ps (its shard) and
 * esdd (its node and trainer) refuse to start where their part does not
 * fit, unless job.force_plan is set.
 *
 * Exact where the runtime's layout functions exist (the cache region via
 * esd_cache_size, snapshots via esd_cmeta_bytes, the exchange area via
 * esd_xchg_layout, the PS row record and index as runtime/ps/store.c lays
 * them out); estimates for heap that grows with the batch (dispatcher
 * queues, PS gradient staging, trainer activations). PS rows are planned
 * for every row of the shard: the store creates a row on its first pull,
 * so a long run reaches that bound.
 */
#ifndef ESD_PLAN_H
#define ESD_PLAN_H

#include <esd/cache.h>
#include <esd/dataset.h>
#include <esd/job.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One PS shard. */
struct esd_plan_ps {
	uint64_t rows;      /* rows of the shard */
	uint64_t records;   /* row records in RAM: in 4096-row chunks, or with
	                     * ps.store_dir at most ps.store_ram (its row cache
	                     * and mapped pages, neither above the row file) */
	uint64_t index;     /* open-addressing index and changed bits (exact) */
	uint64_t staging;   /* gradients staged for one barrier (estimate) */
	uint64_t pull;      /* pull answers of one iteration, each encoded
	                     * whole with optimizer state (estimate) */
	uint64_t dense;     /* shard 0: dense table, state, n stages (exact) */
	uint64_t total;     /* RAM: the parts above */
	uint64_t disk;      /* ps.store_dir: the row file (exact); 0 in RAM */
};

/* One node daemon. */
struct esd_plan_node {
	uint64_t region;     /* the cache region (exact; cache_sizes has its parts) */
	uint64_t snapshots;  /* n cache-metadata snapshots (exact) */
	uint64_t exchange;   /* exchange area with the trainer (exact) */
	uint64_t queues;     /* dispatcher work orders (estimate) */
	uint64_t dispatcher; /* batches, cost matrix, key table (estimate) */
	uint64_t total;
};

/* A node's trainer (estimates). */
struct esd_plan_trainer {
	uint64_t model;       /* dense parameters and gradients */
	uint64_t activations; /* forward and backward of a micro-batch */
	uint64_t total;
};

struct esd_plan {
	/* the job's shape */
	uint32_t workers, shards, tables, dense, dim, hidden;
	uint32_t width; /* most keys per sample (bags at their max_bag) */
	bool bags;
	bool weighted; /* a weight per key (weighted bags) */
	unsigned state_floats; /* optimizer state floats per float */
	uint64_t total_rows, cache_rows, global_batch, dense_len, row_bytes;
	/* the PS store's records: one class per distinct table dim
	 * (model.dims; one of dim without), its rows and record bytes */
	uint32_t store_classes;
	uint32_t class_dim[ESD_JOB_MAX_DIMS];
	uint64_t class_rows[ESD_JOB_MAX_DIMS], class_rec[ESD_JOB_MAX_DIMS];
	/* the model's embedding input: the tables' dims summed (model.dims;
	 * tables x dim without it). Cached rows are stored at dim floats
	 * each, the PS store's at their table's dim. */
	uint64_t emb_floats;
	struct esd_cache_sizes cache_sizes;
	/* per process */
	struct esd_plan_ps ps[ESD_JOB_MAX_SHARDS];
	struct esd_plan_node node[ESD_MAX_WORKERS];
	struct esd_plan_trainer trainer[ESD_MAX_WORKERS];
	uint64_t ps_total, node_total, trainer_total, region_total, total;
};

/* Whether some part of a job fits this machine: the part's bytes, of
 * which region bytes are cache regions (in huge pages where enough are
 * free), against MemAvailable. */
struct esd_plan_fit {
	uint64_t needed, region;
	uint64_t mem_available, huge_free;
	bool regions_in_huge_pages;
	uint64_t from_available; /* what MemAvailable must hold */
	bool fits;               /* false too where MemAvailable is unknown */
};

/* The plan of job (with its settings resolved) over the stream described
 * by di. 0, or -EINVAL with the reason in err (a shape the model or the
 * cache cannot lay out). */
int esd_plan_compute(const struct esd_job *job, const struct esd_ds_info *di,
		     struct esd_plan *p, char *err, size_t errlen);

/* This machine's MemAvailable and free huge-page bytes (0 when unknown). */
void esd_plan_meminfo(uint64_t *mem_available, uint64_t *huge_free);

/* needed bytes, region of them cache regions, against this machine. */
void esd_plan_fit(uint64_t needed, uint64_t region, struct esd_plan_fit *f);

/* The start check of one process: shard >= 0 checks that shard's part,
 * rank >= 0 that node's daemon and trainer. 0 when it fits or the job
 * sets job.force_plan (then a warning says what was forced); -ENOMEM
 * when it does not, with the plan's figures logged under tag. */
int esd_plan_start_check(const struct esd_job *job, const struct esd_ds_info *di, int shard,
			 int rank, const char *tag);

/* "the stream holds N samples; I iterations x K = M samples: P passes,
 * wrapping around" where the job reads past the stream's end, logged
 * under tag at start (nothing otherwise). */
void esd_plan_log_passes(const struct esd_job *job, uint64_t nsamples, const char *tag);

/* A directory a process will write (a checkpoint_dir): it exists, is a
 * directory, and this process can create a file in it (a probe file,
 * created and removed). 0, or -errno with the setting and the path logged
 * under tag. */
int esd_plan_check_dir(const char *dir, const char *setting, const char *tag);

#endif
