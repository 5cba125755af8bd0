/*
 * esd/dispatch_quality.h - judging and improving dispatch decisions by what
 * they really cost: the true cost and the critical path of a decision, the
 * shared-charge cost matrix and link-aware batch sizes.
 *
 * True cost and critical path
 * ---------------------------
 * The cost matrix of ESD Alg. 1 (esd_costmat_build) is an estimate: a key
 * that several samples on one worker share is charged once per sample
 * although it is pulled once, and the gradient pushes a decision causes by
 * spreading a key over several workers are not charged at all. The true
 * cost of a decision is the sum of T_j over the transfers it really causes
 * (struct esd_conseq, from esd_conseq_compute or esd_snapset_advance:
 * update pushes of DIRTY rows others need, one miss pull per worker that
 * needs a row it lacks, one gradient push per worker of every shared row,
 * eviction pushes). Its predicted iteration time is, per worker j,
 *     time_j = compute_ns_per_sample * m_j + sum of T_j over j's transfers
 * (m_j = samples assigned to j), and the iteration takes the slowest:
 * the critical path of the iteration is max_j time_j. Summed over
 * iterations it predicts the training time on links that are the
 * bottleneck. Caveat: it assumes a worker's transfers are serialised on its
 * own link and that the PS side is never the bottleneck.
 *
 * Shared-charge matrix
 * --------------------
 * esd_costmat_build_shared charges each key's per-worker charge (the
 * Alg. 1 charge: miss pull on j plus update push by the DIRTY holder)
 * split evenly among the c_x occurrences of the key in the batch:
 *     c[i][j] = sum over keys x of sample i of
 *               ESD_SHARED_SCALE * charge_x(j) / c_x   (rounded)
 * so a key carried by the whole batch, which every worker will need
 * anyway, weighs almost nothing in the decision, and a rare key weighs
 * fully. Costs are in units of 1 / ESD_SHARED_SCALE of the T_j. Any solver
 * takes the matrix (heu, opt, hybrid).
 *
 * Local search
 * ------------
 * esd_local_search improves any assignment on the true cost of steps 1, 3
 * and 6 (evictions, which depend on the policy's future, are left out) by
 * swapping samples of different workers, so capacities stay exact. Each
 * candidate swap's change of the true cost is computed exactly from
 * per-key, per-worker occurrence counts; only improving swaps are taken,
 * so the result never costs more than the start. Candidates are drawn by
 * a seeded generator and the budget counts evaluations: deterministic, as
 * every node's dispatcher must be. The true cost is a sum over keys of a
 * function of the set of workers needing the key; a swap touches only the
 * keys of its two samples.
 *
 * Link-aware batch sizes
 * ----------------------
 * With equal m_j the slow-link workers set the critical path.
 * esd_batch_sizes_link_aware picks capacities m_j summing to k that
 * minimise max_j time_j under the linear model
 *     time_j(m) = c * m + T_j * (a + r * m)
 * (c: compute ns per sample, a: rows each worker moves per iteration
 * whatever its share, e.g. the rows of tiny tables every worker trains; r:
 * rows moved per sample beyond those). The continuous optimum equalises
 * the times; it is rounded by largest remainder. Every solver accepts the
 * resulting unequal capacities (the dispatcher's cap array).
 */
#ifndef ESD_DISPATCH_QUALITY_H
#define ESD_DISPATCH_QUALITY_H

#include <stdint.h>
#include <esd/dispatch.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The cost matrix a cost-based method solves. */
enum esd_matrix {
	ESD_MATRIX_PAPER = 0,  /* esd_costmat_build: ESD Alg. 1 (default) */
	ESD_MATRIX_SHARED = 1, /* esd_costmat_build_shared */
};

/* "paper" or "shared". Returns 0 or -EINVAL (NULL or unknown name). */
int esd_matrix_parse(const char *name, enum esd_matrix *out);
/* "paper", "shared" or "?". */
const char *esd_matrix_name(enum esd_matrix m);

#define ESD_SHARED_SCALE 64

/* Shared-charge matrix of the batch the table was built from (states
 * filled), cost[k * n]. Returns 0, -EINVAL (as esd_costmat_build),
 * -EOVERFLOW (a sample with so many keys that 2 * keys * max T *
 * ESD_SHARED_SCALE exceeds ESD_COST_MAX), -ENOMEM. */
int esd_costmat_build_shared(const struct esd_keytab *kt, const struct esd_batch *b,
                             const int64_t *T, int64_t *cost);

/* Predicted time of one iteration. */
struct esd_iter_time {
	uint32_t n;
	uint32_t slowest;                   /* worker on the critical path */
	uint32_t m[ESD_MAX_WORKERS];        /* samples per worker */
	int64_t xfer_ns[ESD_MAX_WORKERS];   /* sum of T_j over j's transfers */
	int64_t worker_ns[ESD_MAX_WORKERS]; /* compute + transfers */
	int64_t crit_ns;                    /* max over workers */
	int64_t total_cost;                 /* true cost: all transfers */
};

/* Iteration time of decision assign[k] (entries < cq->n) whose consequence
 * is cq; compute_ns_per_sample >= 0. Returns 0 or -EINVAL (NULL, an entry
 * out of range, a negative compute time). */
int esd_iter_time_compute(const struct esd_conseq *cq, const uint32_t *assign, uint32_t k,
                          int64_t compute_ns_per_sample, struct esd_iter_time *out);

/* The true cost of a decision from the key table's states: its
 * consequence (esd_conseq_compute: no evictions, which need the
 * snapshots; esd_snapset_advance gives them) and the iteration time. Returns
 * 0 or the errors of esd_conseq_compute and esd_iter_time_compute. */
int esd_true_cost(const struct esd_keytab *kt, const struct esd_batch *b, const uint32_t *assign,
                  const int64_t *T, enum esd_sync sync, int64_t compute_ns_per_sample,
                  struct esd_conseq *cq, struct esd_iter_time *out);

/* The local search's arrays, kept from one call to the next (a
 * dispatcher's steps): no allocation, and no fresh pages to fault in,
 * per call. One per thread. */
struct esd_ls_work;
int esd_ls_work_create(struct esd_ls_work **out); /* 0 or -ENOMEM */
void esd_ls_work_free(struct esd_ls_work *w);

struct esd_ls_params {
	uint64_t max_evals; /* candidate swaps evaluated (the budget) */
	int64_t budget_ns;  /* also stop after this long (0: no limit; not
	                     * reproducible: offline use only) */
	uint64_t seed;      /* candidate generator */
	struct esd_ls_work *work; /* NULL: the call allocates its own */
	uint64_t *need; /* NULL, or kt's unique keys' entries: on success, u's
	                 * the workers whose samples carry it under the final
	                 * assignment (0 for a key no sample carries) */
};

struct esd_ls_stats {
	uint64_t evals, swaps;
	int64_t start_cost, end_cost; /* true cost of steps 1, 3, 6 */
	int64_t ns;
};

/* Improve assign[k] (entries < n; capacities are kept: only swaps) on the
 * true cost, from the table's states (filled, built from b). st may be
 * NULL. Returns 0, -EINVAL (NULL, a batch other than the table's, an
 * entry out of range, an unknown sync mode), -ENOMEM. */
int esd_local_search(const struct esd_keytab *kt, const struct esd_batch *b, const int64_t *T,
                     enum esd_sync sync, const struct esd_ls_params *p, uint32_t *assign,
                     struct esd_ls_stats *st);

/* The linear model of esd_batch_sizes_link_aware (see the overview). */
struct esd_size_model {
	double compute_ns;      /* c >= 0 */
	double fixed_rows;      /* a >= 0 */
	double rows_per_sample; /* r >= 0 */
};

/* Capacities m_j (cap[n], summing to k, each >= min_m) minimising the
 * predicted iteration time max_j time_j for per-row link costs T[n] >= 0.
 * When every worker's per-sample time c + r * T_j is 0 the split is equal.
 * Deterministic: the same inputs give the same sizes on every node.
 * Returns 0 or -EINVAL (NULL, n == 0 or > ESD_MAX_WORKERS, k < n * min_m, a
 * negative or non-finite model parameter or T). */
int esd_batch_sizes_link_aware(uint32_t n, uint32_t k, const int64_t *T,
                               const struct esd_size_model *model, uint32_t min_m, uint32_t *cap);
/* The same with at most max_m samples per worker (what its cache holds):
 * a worker whose share would exceed max_m gets max_m and the rest is split
 * among the others, again by the model. Returns 0, -EINVAL as above or
 * min_m > max_m, -ENOSPC when k > n * max_m. */
int esd_batch_sizes_link_aware_capped(uint32_t n, uint32_t k, const int64_t *T,
                                      const struct esd_size_model *model, uint32_t min_m,
                                      uint32_t max_m, uint32_t *cap);

/*
 * Sizes fitted online (workers.split = fit)
 * -----------------------------------------
 * The size model is fitted to what the job itself does: over a window of
 * iterations each worker's samples, the rows it moved (its transfers of
 * every kind but dense) and the time its trainers took for its samples.
 * esd_size_fit gives c, the pooled time over the pooled samples, and a
 * and r, the least-squares line of rows per iteration on samples per
 * iteration over the workers; while the sizes are about equal (their
 * spread cannot give a slope) half the rows are taken as fixed.
 *
 * struct esd_size_fitter decides, window after window, whether to switch.
 * Every sizes it sees are kept with their observed transfer time per
 * worker; an iteration's observed time is max_j of c * m_j plus that plus
 * its spread T_j sqrt(rows_j) (an iteration lasts as long as its slowest
 * worker in that iteration, and rows vary from one to the next), with c
 * the mean compute time per sample over every window so far (one
 * window's is noisy). Once several sizes were seen, a and r are fitted on
 * all of them. Rows grow slower than samples (keys repeat), so a line
 * through sizes far apart lies below the rows in between: the fitter
 * judges sizes by a curve, rows_j(m) = b_j m^p (p the least-squares
 * slope of log rows on log samples over every sizes seen, b_j through
 * worker j's rows now), with the same spread. The sizer's lines (the
 * fitted line with its spread as a margin on the fixed rows, and the
 * curve's tangents) each give sizes; of those within the threshold of the
 * curve's fastest, the least time plus 0.05 x link time win.
 * It switches to them when their predicted iteration is shorter than
 * the best observed by more than the threshold and no sizes within 2
 * samples of them were seen, and back to the best sizes seen when the
 * current ones are slower than those by more than it. Windows that
 * started before the last change took effect are left out. The same code runs in PS
 * shard 0 (from the nodes' reports) and in esd-replay (from its own
 * consequences).
 */
/* Iterations per fit window, and the first ones left out (cold caches
 * pull everything). A window ending at iteration e is reported with
 * barrier e + 1 and a change it causes takes effect at e + 4. */
#define ESD_SIZE_FIT_WINDOW 4u
#define ESD_SIZE_FIT_SKIP   2u
#define ESD_SIZE_FIT_LAG    4u
#define ESD_SIZE_FIT_TRIED  8u

/* One worker over one window. */
struct esd_size_obs {
	uint64_t iters;      /* iterations observed */
	uint64_t samples;    /* samples trained, summed */
	uint64_t rows;       /* rows moved (its transfers), summed */
	uint64_t compute_ns; /* its trainers' time for those samples; 0: none measured */
};

/* Whether iteration e ends a fit window. */
static inline int esd_size_fit_window_end(uint64_t e)
{
	return e >= ESD_SIZE_FIT_SKIP + ESD_SIZE_FIT_WINDOW &&
	       (e - ESD_SIZE_FIT_SKIP) % ESD_SIZE_FIT_WINDOW == 0;
}

/* The size model from obs[n]: compute_ns from the measured times (or
 * compute_prior when none was measured), fixed_rows and rows_per_sample
 * from the rows. Returns 0 or -EINVAL (NULL, n out of range, a worker
 * with no iteration, a negative or non-finite prior). */
int esd_size_fit(uint32_t n, const struct esd_size_obs *obs, double compute_prior,
                 struct esd_size_model *out);

/* The predicted iteration time of sizes cap[n] under model m:
 * max_j c * m_j + T_j * (a + r * m_j), in ns. */
double esd_size_model_time(uint32_t n, const int64_t *T, const struct esd_size_model *m,
                           const uint32_t *cap);

/* Sizes the fitter has seen: their transfer time per worker and
 * iteration, and the model they came from (to switch back to). */
struct esd_size_tried {
	uint32_t m[ESD_MAX_WORKERS];
	double xfer_ns[ESD_MAX_WORKERS];
	struct esd_size_model model;
};

struct esd_size_fitter {
	/* set by the caller */
	uint32_t n, k;
	uint32_t max_m;   /* most samples a cache holds (0: no cap) */
	double threshold; /* workers.refit_threshold */
	/* state */
	uint64_t valid_from; /* windows starting earlier are left out */
	double samples, compute_ns; /* every window's, for the mean compute time */
	uint32_t ntried;
	struct esd_size_tried tried[ESD_SIZE_FIT_TRIED];
	/* figures */
	uint64_t windows, refits; /* windows fitted, switches */
	struct esd_size_model last; /* the last model fitted */
	double last_obs_ns, last_fit_ns, best_ns;
};

/* A fitter for n workers and a global batch of k. */
void esd_size_fitter_init(struct esd_size_fitter *f, uint32_t n, uint32_t k, uint32_t max_m,
                          double threshold);
/* The window ending at e: obs[n] under the current sizes cur[n] and model
 * cur_model, link costs T[n]. Returns 1 with the model to switch to in
 * *next and its sizes in sizes[n] (in effect from e + ESD_SIZE_FIT_LAG),
 * 0 to keep the sizes, or -EINVAL. */
int esd_size_fitter_window(struct esd_size_fitter *f, uint64_t e, const int64_t *T,
                           const uint32_t *cur, const struct esd_size_model *cur_model,
                           const struct esd_size_obs *obs, struct esd_size_model *next,
                           uint32_t *sizes);
/* The cold prior, before any window: each worker's rows per iteration
 * taken as ESD_SIZE_PRIOR_ROWS_PER_KEY x keys_per_sample x m^ESD_SIZE_PRIOR_POWER
 * for m samples (a pull and a push per key of one sample; keys repeat as
 * samples grow), compute_ns per sample. The line for
 * esd_batch_sizes_link_aware (capped at max_m; 0: no cap) whose sizes
 * that curve judges best (of those within tol of the fastest, the least
 * time plus 0.05 x link time, each over its least), in *out.
 * Deterministic, by correctly rounded operations only (the same on every
 * host). 0 or -EINVAL. */
#define ESD_SIZE_PRIOR_ROWS_PER_KEY 2.0
#define ESD_SIZE_PRIOR_POWER        0.6875
int esd_size_prior(uint32_t n, uint32_t k, const int64_t *T, double compute_ns,
                   uint32_t keys_per_sample, uint32_t max_m, double tol,
                   struct esd_size_model *out);
/* The sizes changed from iteration 'at' on (a switch, or new link rates:
 * then forget=1 drops what was observed under the old rates). */
void esd_size_fitter_changed(struct esd_size_fitter *f, uint64_t at, int forget);

#ifdef __cplusplus
}
#endif
#endif /* ESD_DISPATCH_QUALITY_H */
