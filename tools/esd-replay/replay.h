/* esd-replay internals: the job environment, a mechanism, one replay and
 * its report. */
#ifndef ESD_REPLAY_H
#define ESD_REPLAY_H

#include <stdint.h>
#include <stdio.h>
#include <esd/dataset.h>
#include <esd/dispatch_quality.h>
#include <esd/dispatch_snap.h>
#include <esd/job.h>

#define REPLAY_MAX_MECH 32

struct replay_env {
	struct esd_job job;
	const char *config;
	char stream[1024];
	uint32_t tables;
	uint32_t width; /* most keys per sample: tables, or more with bags */
	uint64_t total_rows;
	uint64_t iters;
	int64_t T[ESD_MAX_WORKERS];
	/* model.dims: each table's row bytes (the dispatcher's row sizes) */
	uint32_t row_bytes[ESD_JOB_MAX_DIMS], ntables;
	int fast[ESD_MAX_WORKERS]; /* link class: T_j < 2 * min T */
	/* dispatch.replicate's hot rows (the job mechanism only) */
	esd_key_t *rep;
	uint32_t nrep;
};

enum replay_sizes { SIZES_JOB, SIZES_EQUAL, SIZES_AUTO, SIZES_LIST, SIZES_SAME };

struct replay_mech {
	char name[64];
	int is_job;
	enum esd_method method;
	double alpha;
	enum esd_sync sync;
	enum esd_matrix matrix;
	uint64_t ls_evals;
	int padded; /* +padded: every row charged a full row (model.dims ignored) */
	enum replay_sizes sizes;
	uint32_t cap[ESD_MAX_WORKERS]; /* SIZES_LIST */
};

struct replay_result {
	char name[64];
	uint32_t n;
	uint32_t cap[ESD_MAX_WORKERS];
	uint64_t iters;
	uint64_t cache_rows;
	int64_t true_cost; /* ns of link time, all transfers */
	int64_t kind_cost[ESD_CQ_KINDS];
	uint64_t kind_count[ESD_CQ_KINDS];
	int64_t class_cost[2]; /* fast, slow */
	int64_t crit_ns;       /* sum over iterations of the slowest worker */
	int64_t crit_xfer_ns;  /* same, transfers only (no compute) */
	uint64_t hits, needs;
	double decision_ms_mean, decision_ms_p50, decision_ms_max; /* wall clock */
	double decision_cpu_ms_p50; /* thread CPU time of the whole step */
	double size_model[2];       /* auto, fit: fixed rows and rows per sample */
	uint64_t refits;            /* job with workers.split = fit: sizes switched */
	char job[128];              /* the job mechanism: what the job file runs */
	/* per consequence kind: rows that every worker moved in an iteration
	 * (a key in all n workers' lists), summed, and their cost */
	uint64_t alln_rows[ESD_CQ_KINDS];
	int64_t alln_cost[ESD_CQ_KINDS];
	uint64_t wire_bytes;        /* bytes of the rows moved (each its table's) */
	int64_t wire_ns;            /* their time on the workers' links, summed */
	uint64_t ls_swaps;          /* local search: swaps taken, all steps */
	int64_t ls_gain;            /* local search: true cost saved (its estimate) */
};

/* Load the job INI (+ overrides) and the stream's header. Returns 0 or -1
 * (message printed). */
int replay_env_load(struct replay_env *env, const char *config, const char *const *sets, int nsets,
                    uint64_t iters);
void replay_env_free(struct replay_env *env);
/* Parse one mechanism. 0 or -EINVAL. */
int replay_mech_parse(const struct replay_env *env, const char *spec, struct replay_mech *m);
/* Replay the stream under m. 0 or -errno. */
int replay_run(const struct replay_env *env, const struct replay_mech *m, struct replay_result *r);

void replay_print_table(const struct replay_env *env, const struct replay_result *r, int nr,
                        FILE *f);
void replay_print_csv(const struct replay_env *env, const struct replay_result *r, int nr, FILE *f);
/* path "-": stdout. 0 or -1. */
int replay_write_json(const struct replay_env *env, const struct replay_result *r, int nr,
                      const char *path);

#endif
