/* disp.h - the dispatcher thread's state, shared by its files (private to
 * esdd): disp_thread.c runs the thread, disp_live.c applies the live
 * settings (esdctl set, the fit's sizes), disp_saves.c keeps the snapshots
 * of the checkpoint boundaries. */
#ifndef ESD_NODE_DISP_H
#define ESD_NODE_DISP_H

#include "node.h"

/* Checkpoint boundaries whose state is kept (struct disp_saves): the
 * thread saves boundary c when it decides c, up to ORDER_RING iterations
 * ahead of the main thread, whose iteration t runs while the shards' last
 * complete checkpoint is t - 2 (written at the release of barrier t - 1);
 * so with checkpoints every iteration the boundary a restarted shard
 * resumes from can be ORDER_RING + 2 boundaries back. */
#define SAVED_GENS (ORDER_RING + 2)

/* The dispatcher thread's state: its own (no lock), from
 * node_dispatcher_start until node_dispatcher_stop. */

/* The decision engine and its settings. */
struct disp_engine {
	struct esd_snapset *ss;
	struct esd_dispatcher *d;
	struct esd_conseq *cq;
	struct esd_dispatcher_config dc;
	enum esd_policy policy; /* of the snapshots (esdctl set cache.policy) */
	/* sums of the engines an esdctl set replaced (the counters published
	 * cover the whole run) */
	struct esd_dispatch_counters base;
	struct esd_gpu_solver *gpu; /* dispatch.gpu: the exact part's solver */
	int64_t gpu_deadline_ns;
};

/* The stream and the batches read from it: the current one and the next
 * (lookahead). */
struct disp_input {
	struct esd_ds_reader *rd;
	uint64_t k;
	float *labels[2], *dense[2];
	esd_key_t *keys[2];   /* [k * width]: the batch's keys, bag by bag */
	uint32_t *bag_off[2]; /* [k * tables + 1]: bag (i, t) starts at keys[bag_off[i*T + t]] */
	uint32_t *off[2];     /* [k + 1]: sample i's first key (bag_off[i * T]) */
	float *wts[2];        /* [k * width]: each key's weight (a weighted stream), else NULL */
	uint32_t *assign;
	uint32_t *nworkers; /* per unique key: trainers count */
};

/* The workers' capacities, link costs and batch sizes. */
struct disp_sizes {
	uint32_t cap[ESD_MAX_WORKERS];
	int64_t T[ESD_MAX_WORKERS];
	/* model.dims: each table's row bytes, the dispatcher's row sizes */
	uint32_t row_bytes[ESD_JOB_MAX_DIMS], ntables;
	uint32_t batch[ESD_MAX_WORKERS]; /* the decisions' sizes (workers.rates) */
	uint32_t max_batch;              /* the exchange area's samples */
};

/* Restart support: the iteration the thread starts after, and its state
 * at the last SAVED_GENS checkpoint boundaries (a PS restart rolls back to
 * one; each is also written to disk for a whole-job resume). */
struct disp_saves {
	uint64_t start_iter;
	struct node_state gen[SAVED_GENS];
	bool ok[SAVED_GENS];
	uint64_t restore_iter; /* make_engine(from_saved): the boundary to load */
};

/* One decider (job.derived.one_decider): node 0's ORDER frames for the
 * other nodes; on the other nodes, what a decision received becomes a
 * work order with (follow.c). */
struct disp_hand {
	struct esd_buf out;      /* node 0: the ORDER frames of one iteration */
	struct esd_keytab *kt;   /* elsewhere: the batch's unique keys */
	uint64_t *mask;          /* [unique keys]: S(x), the workers that need it */
	size_t cap_mask;
};

struct disp {
	struct node *nd;
	struct disp_engine eng;
	struct disp_input in;
	struct disp_sizes sz;
	struct disp_saves sv;
	struct disp_hand hand;
	uint64_t diverge_at; /* ESD_TEST_DIVERGE_AT (tests only; 0: never) */
};

/* ---- disp_thread.c: the parts of a work order both kinds of node make ------ */

/* Make *p hold at least want elements of elem bytes (realloc); 0 or -ENOMEM. */
int node_disp_grow(void **p, size_t *cap, size_t want, size_t elem);
/* Read the next global batch of the stream into slot b. */
int node_disp_read_batch(struct disp *ds, int b);
/* Our samples of batch b (ds->in.assign) into o. */
int node_disp_copy_samples(struct disp *ds, struct order *o, int b);
/* o's needed keys (sorted, with their 'alone' flags) and the batch's
 * other keys, from the unique keys of kt and each one's S(x) (wmask). */
int node_disp_need_lists(struct disp *ds, struct order *o, const struct esd_keytab *kt,
			 const uint64_t *wmask);
/* The bytes of worker w's predicted rows per transfer kind: a row of
 * table t its table's size (model.dims), value and optimizer state, or
 * value alone for a gradient. */
void node_disp_predict_bytes(const struct esd_job *j, const struct esd_conseq *cq, uint32_t w,
			     uint64_t bytes[ESD_XFER_NKINDS]);
/* The thread waits for room in the order ring; false: it is told to stop. */
bool node_disp_wait_room(struct node *nd);
/* Publish the order the thread filled (its CPU since *cpu_mark counted). */
void node_disp_publish(struct disp *ds, int64_t *cpu_mark);

/* ---- follow.c ----------------------------------------------------------------- */

/* Node 0 of a one-decider job: the ORDER frames of iteration o->iter for
 * every other worker, from the decision just made, sent to shard 0. */
int node_disp_hand_out(struct disp *ds, const struct order *o, bool ahead);
/* The thread of a node that follows: each ORDER received becomes its work
 * order (the batch read here, the samples and keys from the assignment). */
void *node_follow_main(void *arg);

/* ---- disp_live.c ------------------------------------------------------------ */

/* The counters of the current engine on top of those it replaced. */
struct esd_dispatch_counters node_disp_counters(const struct disp *ds);
/* The live setting announced for iteration iter, applied as the thread
 * starts deciding it; *set_policy (-1: none) and *rate tell the main
 * thread what to switch at the same point. */
int node_disp_apply_setting(struct disp *ds, uint64_t iter, int *set_policy, uint64_t *rate);
/* A node that follows the decider: the job's record of a live setting due
 * at iter (rates, sizes, method), as the decider keeps it; the decision
 * itself comes from the decider. */
void node_follow_setting(struct disp *ds, uint64_t iter);

/* ---- disp_saves.c ----------------------------------------------------------- */

/* Generation saved at boundary iter, or -1. */
int node_disp_saved_gen(const struct disp *ds, uint64_t iter);
/* Keep the state as of checkpoint boundary iter (and write it to disk with
 * ps.checkpoint_dir). */
int node_disp_save(struct disp *ds, uint64_t iter);

#endif
