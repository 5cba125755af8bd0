/*
 * esd/dispatch.h - the decision engine of ESD: which worker trains which
 * sample of the next global batch, and what that decision makes each
 * worker transfer. No I/O, no threads; one object per dispatcher thread.
 *
 * Overview
 * --------
 * 1. The batch: k samples, sample i carrying the row keys
 *    keys[off[i] .. off[i+1]) (struct esd_batch; 26 per sample for Criteo).
 * 2. The key table (struct esd_keytab) dedupes the batch's keys once and
 *    holds, per unique key, where its latest value lives among the n
 *    workers (struct esd_keystate), looked up once per unique key and
 *    worker from the cache snapshots (esd/dispatch_snap.h) or set by hand.
 * 3. The cost matrix of ESD Alg. 1 (esd_costmat_build):
 *        c[i][j] = sum over keys x of sample i of
 *                  [x not latest on worker j]            * T_j   (miss pull)
 *                + [x DIRTY on a worker j' != j]          * T_j'  (update push)
 *    T_j is the integer cost of one row transfer over worker j's link
 *    (e.g. ns = row bytes * 8 / bit rate). A key repeated within one
 *    sample is charged per occurrence, as Alg. 1 loops over the sample.
 *    Each unique key's n charges are computed once, then summed per
 *    sample. The LAIA score matrix (esd_scoremat_build) counts the keys
 *    of sample i latest on worker j, optionally over chosen tables only
 *    (Herald's adaptive LAIA).
 * 4. A solver (esd/dispatch_solve.h) turns the matrix into an assignment.
 * 5. The consequence of the assignment (esd_conseq_compute, or
 *    esd_snapset_advance which also advances the snapshots and adds the
 *    evictions), by the protocol of docs/design.md §3, for every key x
 *    needed by the set S(x) of workers that got samples containing x:
 *      step 1  x DIRTY on w and S(x) != {w}: w update-pushes the value
 *              (UPDATE_VALUE; this is Herald Alg. 2's communication plan),
 *              x becomes CLEAN on w;
 *      step 3  every worker of S(x) without a latest copy miss-pulls x;
 *      step 4  inserting pulled rows evicts (snapshots only); DIRTY
 *              victims are evict-pushed;
 *      step 6  on-demand sync: x trained by one worker w becomes DIRTY on
 *              w (other copies OUTDATED); x trained by several: each of
 *              them pushes its gradient (UPDATE_GRAD) and every cached
 *              copy becomes OUTDATED. Full-set sync: every trained x is
 *              pushed by each of its trainers and every copy becomes
 *              OUTDATED (no row is ever DIRTY).
 *    The cost of a transfer by worker j is T_j.
 *
 * Invariant of key states (checked when filled from snapshots): a key
 * DIRTY on w is latest on w only.
 *
 * Ownership: every object is created by its esd_*_create() and freed by
 * its esd_*_free() (NULL accepted). Pointers returned by accessors point
 * into the object and stay valid until its next build or free.
 */
#ifndef ESD_DISPATCH_H
#define ESD_DISPATCH_H

#include <stddef.h>
#include <stdint.h>
#include <esd/types.h>
#include <esd/dispatch_solve.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A global batch of k samples (borrowed, never copied). */
struct esd_batch {
	uint32_t k;
	const uint32_t *off;   /* k + 1 entries, off[0] = 0, non-decreasing */
	const esd_key_t *keys; /* off[k] keys */
};

#define ESD_NO_WORKER 0xffu

/* Where the latest value of a key lives. */
struct esd_keystate {
	uint64_t latest; /* bit j: worker j holds it CLEAN or DIRTY */
	uint64_t cached; /* bit j: worker j holds some version */
	uint8_t dirty;   /* worker holding it DIRTY, or ESD_NO_WORKER */
	uint8_t reserved[7];
};

enum esd_sync {
	ESD_SYNC_ON_DEMAND = 0, /* docs/design.md §3 (default) */
	ESD_SYNC_FULL_SET = 1,  /* every trained row pushed every iteration */
};

/* ---- key table -------------------------------------------------------- */

struct esd_keytab;

/* Returns 0 or -EINVAL/-ENOMEM. */
int esd_keytab_create(struct esd_keytab **out);
void esd_keytab_free(struct esd_keytab *kt);

/* Dedupe the keys of batch b for n workers. Every key starts absent on
 * every worker (fill the states afterwards). Unique keys are numbered in
 * order of first occurrence. Returns 0, -EINVAL (NULL, n == 0 or
 * > ESD_MAX_WORKERS, offsets not non-decreasing from 0, more than 2^31 key
 * occurrences), -ENOMEM. */
int esd_keytab_build(struct esd_keytab *kt, const struct esd_batch *b, uint32_t n);

uint32_t esd_keytab_count(const struct esd_keytab *kt);        /* unique keys */
uint32_t esd_keytab_workers(const struct esd_keytab *kt);      /* n */
const esd_key_t *esd_keytab_keys(const struct esd_keytab *kt); /* [count] */
/* Unique-key number of every occurrence, parallel to b->keys. */
const uint32_t *esd_keytab_occ(const struct esd_keytab *kt);
/* States, [count], writable (tests and replays set them by hand). */
struct esd_keystate *esd_keytab_states(struct esd_keytab *kt);
/* Set the state of unique key u on worker j (ABSENT, OUTDATED, CLEAN,
 * DIRTY), keeping 'latest', 'cached' and 'dirty' consistent. Returns 0 or
 * -EINVAL (u or j out of range, a second DIRTY holder, DIRTY while
 * another worker holds it latest). */
int esd_keytab_set(struct esd_keytab *kt, uint32_t u, uint32_t j, enum esd_row_state st);
/* Unique-key number of key, or -1 when not in the batch. */
int64_t esd_keytab_find(const struct esd_keytab *kt, esd_key_t key);

/* Per-table row sizes (model.dims, docs/design.md §6): a row of table t
 * moves bytes[t] bytes where a full row moves full, so each of its
 * transfers by worker j costs ceil(T_j * bytes[t] / full) instead of T_j
 * (in the matrices, the consequence's costs and the local search). Tables
 * from ntables on (the dense table) have full rows; at most
 * ESD_ROW_CLASSES distinct sizes. Kept across builds; ntables 0 clears
 * it (every row T_j, as without). Returns 0, -EINVAL (bytes[t] 0 or
 * above full, too many sizes), -ENOMEM. */
#define ESD_ROW_CLASSES 8
int esd_keytab_set_row_bytes(struct esd_keytab *kt, const uint32_t *bytes, uint32_t ntables,
			     uint32_t full);

/* Replicated rows (FAE's static hot set): keys every worker needs in
 * every iteration, whatever the assignment. Call after esd_keytab_build
 * (which forgets them). Keys not in the batch become unique keys with no
 * occurrence (numbered after the batch's); duplicates in keys are
 * ignored. From then on every consequence treats each of them as needed
 * by all n workers: pinned in every cache (never evicted), pulled where
 * not latest, and, trained by several workers, gradient-pushed by each
 * (a zero gradient where the worker's samples do not contain it): the
 * all-reduce of the replicated rows, carried by the PS. Returns 0,
 * -EINVAL (NULL with count > 0, table not built), -ENOMEM. */
int esd_keytab_replicate(struct esd_keytab *kt, const esd_key_t *keys, uint32_t count);

/* S(x) of every unique key ([count]; bit j: worker j needs it, because its
 * samples contain it or it is replicated) as of the last consequence
 * computed from this table (esd_conseq_compute, esd_snapset_advance,
 * esd_dispatcher_step). */
const uint64_t *esd_keytab_need_masks(const struct esd_keytab *kt);

/* ---- cost and score matrices ----------------------------------------- */

/* c[i * n + j] per ESD Alg. 1 (see the overview), for the batch the table
 * was built from. T has n entries >= 0. Returns 0, -EINVAL (NULL, batch
 * differs in size from the table's, a T outside [0, ESD_COST_MAX]), -EOVERFLOW (a sample with so
 * many keys that 2 * keys * max T exceeds ESD_COST_MAX). */
int esd_costmat_build(const struct esd_keytab *kt, const struct esd_batch *b, const int64_t *T,
                      int64_t *cost);

/* LAIA scores: score[i * n + j] = keys of sample i latest on worker j,
 * counting only keys of the tables whose bit is set in 'tables'
 * (ESD_MAX_TABLES bits, bit t = word t / 64, bit t % 64), all tables when
 * NULL. Returns 0 or -EINVAL. */
int esd_scoremat_build(const struct esd_keytab *kt, const struct esd_batch *b,
                       const uint64_t *tables, int32_t *score);

#define ESD_TABLE_MASK_WORDS (ESD_MAX_TABLES / 64)

/* ---- table profiler (adaptive LAIA, Herald §4.3) ------------------------ */

/* Counts the appearances of every key over the batches it is shown. A key
 * is infrequent while it appeared in fewer samples than one worker has
 * trained so far (samples seen / n); a table's degree of infrequency (DoI)
 * is the share of its distinct keys that are infrequent. The adaptive
 * LAIA scores only the top tables by DoI. */
struct esd_doi;

int esd_doi_create(uint32_t n, struct esd_doi **out);
void esd_doi_free(struct esd_doi *d);
/* Count the keys of a batch. Returns 0, -EINVAL, -ENOMEM. */
int esd_doi_add_batch(struct esd_doi *d, const struct esd_batch *b);
/* DoI of a table in [0, 1] (0 for a table never seen). */
double esd_doi_table(const struct esd_doi *d, uint32_t table);
/* Mask of the 'top' tables with the highest DoI (ties: lower table id),
 * among the tables seen; mask has ESD_TABLE_MASK_WORDS words. Returns the
 * number of tables set, -EINVAL or -ENOMEM. */
int esd_doi_top_tables(const struct esd_doi *d, uint32_t top, uint64_t *mask);

/* ---- communication plan and consequence -------------------------------- */

enum esd_cq_kind {
	ESD_CQ_UPDATE_VALUE = 0, /* step 1: DIRTY rows others need (the plan) */
	ESD_CQ_MISS_PULL = 1,    /* step 3 */
	ESD_CQ_EVICT_PUSH = 2,   /* step 4 (esd_snapset_advance only) */
	ESD_CQ_UPDATE_GRAD = 3,  /* step 6: gradients of shared rows */
	ESD_CQ_KINDS = 4,
};

const char *esd_cq_kind_name(enum esd_cq_kind kind);
/* Transfer kind as accounted by the transport (esd/types.h). */
enum esd_xfer_kind esd_cq_xfer_kind(enum esd_cq_kind kind);

/* Transfers caused by one decision, per kind and worker: the keys
 * keys[kind][off[kind][j] .. off[kind][j+1]), ascending per worker. */
struct esd_conseq {
	uint32_t n;
	uint32_t *off[ESD_CQ_KINDS]; /* n + 1 each */
	esd_key_t *keys[ESD_CQ_KINDS];
	int64_t cost[ESD_CQ_KINDS];           /* sum of T_j over the transfers */
	int64_t worker_cost[ESD_MAX_WORKERS]; /* all kinds, per worker */
	int64_t total_cost;
	uint32_t hits; /* (key, worker) needs already latest */
	/* private */
	size_t cap_keys[ESD_CQ_KINDS];
	uint32_t cap_n;
};

int esd_conseq_create(struct esd_conseq **out);
void esd_conseq_free(struct esd_conseq *cq);
/* Transfers of kind on worker j. */
static inline uint32_t esd_conseq_count(const struct esd_conseq *cq, enum esd_cq_kind kind,
                                        uint32_t j)
{
	return cq->off[kind][j + 1] - cq->off[kind][j];
}
static inline const esd_key_t *esd_conseq_keys(const struct esd_conseq *cq, enum esd_cq_kind kind,
                                               uint32_t j)
{
	return cq->keys[kind] + cq->off[kind][j];
}

/* Is key in worker w's list of kind q (ascending)? */
static inline int esd_conseq_has(const struct esd_conseq *cq, enum esd_cq_kind q, uint32_t w,
                                 esd_key_t key)
{
	const esd_key_t *k = esd_conseq_keys(cq, q, w);
	const uint32_t c = esd_conseq_count(cq, q, w);
	uint32_t lo = 0, hi = c;
	while (lo < hi) {
		const uint32_t mid = lo + (hi - lo) / 2;
		if (k[mid] < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < c && k[lo] == key;
}

/* Steps 1, 3 and 6 of the decision 'assign' (k entries < n) from the
 * states in the key table (no evictions: they need the snapshots). The
 * key table is not changed. Returns 0, -EINVAL, -ENOMEM. */
int esd_conseq_compute(const struct esd_keytab *kt, const struct esd_batch *b,
                       const uint32_t *assign, const int64_t *T, enum esd_sync sync,
                       struct esd_conseq *cq);

/* Herald Alg. 2 alone: per worker, its DIRTY rows that other workers need
 * (cq's UPDATE_VALUE lists; the other kinds are left empty). Returns 0,
 * -EINVAL, -ENOMEM. */
int esd_comm_plan(const struct esd_keytab *kt, const struct esd_batch *b, const uint32_t *assign,
                  const int64_t *T, struct esd_conseq *cq);

#ifdef __cplusplus
}
#endif
#endif /* ESD_DISPATCH_H */
