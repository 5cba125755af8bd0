/*
 * esd/dispatch_snap.h - the dispatcher's cache snapshots and the whole
 * dispatch step.
 *
 * Snapshots
 * ---------
 * A struct esd_snapset holds one metadata-only snapshot (struct esd_cmeta,
 * esd/policy.h) of every worker's cache, in private memory. The snapshots
 * are advanced by the same policy code as the real caches: for iteration
 * t, esd_snapset_advance() applies the protocol steps 1-6 of
 * docs/design.md §3 to them in the same order as a node daemon does to
 * its cache (step-1 pushes make the
 * pushed rows CLEAN; esd_cmeta_begin_iter with the sorted keys the worker
 * needs pins, touches, evicts and inserts; pulled rows become CLEAN; rows
 * trained alone become DIRTY on their trainer (on-demand sync); rows
 * trained by several workers, or every trained row under full-set sync,
 * become OUTDATED everywhere). So a snapshot and its cache hold the same
 * keys, states and policy bookkeeping after the same decisions. (Outside
 * HET mode the snapshot leaves out the pulled rows' intermediate CLEAN:
 * step 6 sets every needed row's state and clock again, and a state
 * change of a pinned row has no other effect.) Caveat:
 * snapshots do not track the PS's row clocks (slot.clock stays 0); no
 * policy orders by clock. With the lookahead policy, call
 * esd_cmeta_lookahead() on each snapshot (esd_snapset_cmeta()) exactly
 * when the daemon calls it on its cache.
 *
 * One layout: every policy, sync mode and number of workers keeps its
 * snapshots by worker (one esd_cmeta block each) beside a directory of
 * where each key is cached. (A second layout, kept by key, served LRU
 * with at most 8 workers only; it was dropped for one code path to keep
 * exact: docs/dispatch.md §9.)
 *
 * Whole step
 * ----------
 * struct esd_dispatcher runs one decision: key table of the batch, states
 * from the snapshots, cost (or LAIA score) matrix, the configured method,
 * then the snapshot advance with the full consequence (plan, pulls,
 * pushes, evictions), timing each phase.
 */
#ifndef ESD_DISPATCH_SNAP_H
#define ESD_DISPATCH_SNAP_H

#include <stdint.h>
#include <esd/dispatch.h>
#include <esd/dispatch_quality.h>
#include <esd/policy.h>

#ifdef __cplusplus
extern "C" {
#endif

struct esd_snapset;

/* n empty snapshots; capacity[j] slots for worker j, one policy for all.
 * Returns 0, -EINVAL (n == 0 or > ESD_MAX_WORKERS, a capacity esd_cmeta
 * cannot format), -ENOMEM. */
int esd_snapset_create(uint32_t n, const uint32_t *capacity, enum esd_policy policy,
                       struct esd_snapset **out);
void esd_snapset_free(struct esd_snapset *ss);
uint32_t esd_snapset_workers(const struct esd_snapset *ss);
/* Snapshot of worker j (owned by the set) to read or change, NULL when j
 * is out of range. */
struct esd_cmeta *esd_snapset_cmeta(struct esd_snapset *ss, uint32_t j);
/* The same, to read only (a save). Valid until the next change of the set. */
const struct esd_cmeta *esd_snapset_view(struct esd_snapset *ss, uint32_t j);
/* Rows worker j's snapshot holds (esd_cmeta_count). */
uint32_t esd_snapset_count(const struct esd_snapset *ss, uint32_t j);
/* Replace snapshot j by a copy of a cache's metadata (e.g. at start-up or
 * after a restart) and rebuild the key directory (O(total capacity)).
 * src may be the set's own snapshot j, edited in place through
 * esd_snapset_cmeta(): then only the directory is rebuilt.
 * Returns 0, -EINVAL, -ENOMEM, -ESD_EDIVERGED (the snapshots contradict
 * each other: a key DIRTY on two workers, or DIRTY on one and latest on
 * another). */
int esd_snapset_load(struct esd_snapset *ss, uint32_t j, const struct esd_cmeta *src);
/* HET's bounded staleness (on top of full-set sync): snapshots track each
 * key's version (iterations that trained it, i.e. the PS row clock) and the
 * version of every cached copy (slot.clock); a worker needing a key whose
 * OUTDATED copy is at most 'staleness' versions behind uses it as it is: it
 * counts as latest in the cost matrix and is not pulled (it stays OUTDATED).
 * staleness 0 behaves as plain full-set. Call once, before the first
 * advance, on snapshots advanced with ESD_SYNC_FULL_SET. Not BSP-exact for
 * staleness > 0: a baseline. Returns 0 or -EINVAL. */
int esd_snapset_set_staleness(struct esd_snapset *ss, uint32_t staleness);
/* HET mode across a checkpoint: the snapshots (esd_snapset_cmeta) hold the
 * version of every cached copy, not the keys' own versions, which include
 * keys cached nowhere. esd_snapset_versions copies every key with a
 * version above 0 (at most cap of them; returns how many there are: call
 * with cap 0 to size); esd_snapset_set_versions puts them back after the
 * esd_snapset_load calls. set returns 0, -EINVAL or -ENOMEM. */
size_t esd_snapset_versions(const struct esd_snapset *ss, esd_key_t *keys, uint64_t *versions,
                            size_t cap);
int esd_snapset_set_versions(struct esd_snapset *ss, const esd_key_t *keys,
                             const uint64_t *versions, size_t n);

/* Every DIRTY row of every snapshot becomes CLEAN: the checkpoint flush
 * (and the end of training), where each node pushes its DIRTY rows.
 * Returns 0 or -EINVAL. */
int esd_snapset_flush(struct esd_snapset *ss);
/* The last iteration advanced (0 before the first). */
uint64_t esd_snapset_iter(const struct esd_snapset *ss);
/* Full check, O(total capacity), for tests and debugging tools: every
 * snapshot passes esd_cmeta_verify and the key directory matches them.
 * Returns 0, -EINVAL (a snapshot is inconsistent), -ESD_EDIVERGED (the
 * directory is). */
int esd_snapset_verify(struct esd_snapset *ss);

/* States of the key table's keys from the snapshots, through the set's key
 * directory (one probe per unique key, not one per key and worker; the
 * directory is advanced with the snapshots and rebuilt by
 * esd_snapset_load). The table must have been built for the set's n.
 * Keys the directory has not seen get an entry that says "cached nowhere"
 * (what no entry says too), so the advance finds every key's entry
 * without probing again. Returns 0, -EINVAL or -ENOMEM (the directory
 * could not grow). */
int esd_snapset_fill(struct esd_snapset *ss, struct esd_keytab *kt);

/* Advance every snapshot by iteration esd_snapset_iter() + 1 for decision
 * 'assign' of batch b, whose key table kt was filled from this set before
 * any change; T gives the per-worker transfer costs. cq receives the full
 * consequence, evictions included. Returns 0, -EINVAL, -ENOMEM, -ENOSPC (a
 * worker needs more distinct rows than its cache holds; checked before
 * anything changes), -ESD_EDIVERGED (a snapshot's pulls differ from the
 * key table's: kt was not filled from this set; the set must then be
 * reloaded). */
int esd_snapset_advance(struct esd_snapset *ss, struct esd_keytab *kt, const struct esd_batch *b,
                        const uint32_t *assign, const int64_t *T, enum esd_sync sync,
                        struct esd_conseq *cq);

/* Where the last successful esd_snapset_advance spent its time, in
 * nanoseconds of CLOCK_MONOTONIC: the consequence with the per-worker
 * lists (need, key sort, one pass), the snapshots' begin_iters (with the
 * evictions they report), the key directory's update, step 6's OUTDATED
 * pass on the workers that did not train a key. */
struct esd_advance_times {
	int64_t plan, caches, directory, outdated;
};
const struct esd_advance_times *esd_snapset_advance_times(const struct esd_snapset *ss);

/* ---- the whole step --------------------------------------------------- */

struct esd_dispatcher_config {
	uint32_t n;
	const uint32_t *cap; /* n capacities m_j (copied); NULL: equal */
	const int64_t *T;    /* n transfer costs (copied) */
	/* Per-table row sizes (model.dims; esd_keytab_set_row_bytes, copied):
	 * a row of table t costs T_j * row_bytes[t] / row_bytes_full; NULL
	 * (ntables 0): every row T_j. */
	const uint32_t *row_bytes;
	uint32_t ntables, row_bytes_full;
	enum esd_method method;
	struct esd_hybrid_params hybrid; /* for ESD_METHOD_HYBRID */
	uint64_t seed;                   /* laia, vanilla */
	enum esd_sync sync;
	const uint64_t *laia_tables; /* ESD_TABLE_MASK_WORDS (copied); NULL: all */
	/* Adaptive LAIA (Herald §4.3): when > 0, a DoI profiler sees every
	 * batch and laia scores only the laia_top tables of highest DoI,
	 * reselected every laia_refresh steps (0: 16); overrides laia_tables
	 * once the first selection is made. */
	uint32_t laia_top, laia_refresh;
	int compare; /* also solve heu and opt each step: heu-vs-opt gap */
	/* The matrix heu, opt, hungarian and hybrid solve (esd/dispatch_quality.h);
	 * ESD_MATRIX_PAPER (0) is ESD Alg. 1. */
	enum esd_matrix matrix;
	/* Local search on the true cost after the method (esd_local_search):
	 * candidate swaps per step, 0: off. With ls_ref_keys > 0, a batch of
	 * more keys per sample than that gets ls_evals * ls_ref_keys / (its
	 * keys per sample) swaps (at least 1): the same on every node, as the
	 * batch is. */
	uint64_t ls_evals;
	uint32_t ls_ref_keys;
	/* Replicated rows (FAE's static hot set, esd_keytab_replicate): every
	 * worker needs these keys in every step (copied). With vanilla and
	 * full-set sync this is FAE: hot rows all-reduced through the PS each
	 * iteration, cold rows pulled and pushed on use. The matrix methods
	 * charge them as any key (ESD Alg. 1 knows no replication). */
	const esd_key_t *replicated;
	uint32_t nreplicated;
	/* The exact part of opt and hybrid offloaded (esd_solver_set_exact):
	 * NULL, on the CPU. */
	esd_exact_fn exact;
	/* or in two halves (esd_solver_set_exact_split; the runtime passes
	 * esd_gpu_submit/esd_gpu_collect): hybrid runs Heu in between. Used
	 * when both are set, instead of exact. */
	esd_exact_submit_fn exact_submit;
	esd_exact_collect_fn exact_collect;
	void *exact_ctx;
};

/* Counters: the last step's and sums over all steps (ns). */
struct esd_dispatch_phase {
	int64_t keytab, fill, matrix, solve, advance, total;
	int64_t profile; /* adaptive LAIA's table profiler (not in total: it
	                  * can run beside the decision, as in Herald) */
};

struct esd_dispatch_counters {
	uint64_t steps;
	struct esd_dispatch_phase last, sum;
	struct esd_solve_stats solve; /* last solve */
	uint32_t unique_keys;         /* last batch */
	int64_t est_cost;             /* last decision on the ESD matrix */
	int64_t true_cost;            /* last consequence's total cost */
	int64_t sum_est_cost, sum_true_cost;
	/* with compare: matrix costs of heu and opt on the same matrix */
	int64_t heu_cost, opt_cost;
	int64_t sum_heu_cost, sum_opt_cost;
	uint64_t xfers[ESD_CQ_KINDS]; /* transfers summed over steps */
	uint64_t hits;
	struct esd_ls_stats ls; /* last step's local search (ls_evals > 0) */
};

struct esd_dispatcher;

/* The dispatcher borrows ss (it must outlive it). Returns 0, -EINVAL (bad
 * configuration: NULL T, n differs from the set's, a T outside
 * [0, ESD_COST_MAX], unknown method or sync mode, hybrid alpha outside
 * [0, 1]), -ENOMEM. The capacities are checked against each batch. */
int esd_dispatcher_create(const struct esd_dispatcher_config *cfg, struct esd_snapset *ss,
                          struct esd_dispatcher **out);
void esd_dispatcher_free(struct esd_dispatcher *d);

/* Decide batch b (b->k must equal the capacities' sum; with cap NULL a
 * multiple of n, else -EINVAL) into assign[b->k], advance the snapshots
 * and fill cq (may be NULL: an internal one is used, owned by the
 * dispatcher). Returns 0 or the errors of the steps above (key table,
 * matrix, solver, esd_snapset_advance). On error the snapshots are
 * unchanged unless esd_snapset_advance says otherwise. */
int esd_dispatcher_step(struct esd_dispatcher *d, const struct esd_batch *b, uint32_t *assign,
                        struct esd_conseq *cq);
const struct esd_dispatch_counters *esd_dispatcher_counters(const struct esd_dispatcher *d);
/* The key table of the last step (owned by the dispatcher). */
struct esd_keytab *esd_dispatcher_keytab(struct esd_dispatcher *d);
/* The cost matrix of the last step (k x n, owned by the dispatcher; NULL
 * for laia and vanilla). */
const int64_t *esd_dispatcher_costmat(const struct esd_dispatcher *d);

#ifdef __cplusplus
}
#endif
#endif /* ESD_DISPATCH_SNAP_H */
