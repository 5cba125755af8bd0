/*
 * node.h - the node daemon esdd (private to runtime/node).
 *
 * Two threads do the work:
 *   the dispatcher thread (disp_thread.c), pinned with hwloc, reads global batches
 *     from the dataset stream, decides them on the snapshots of every
 *     worker's cache and queues a work order for this node's worker, one
 *     iteration ahead;
 *   the main thread (iter.c) executes the orders: update pushes, barrier,
 *     evict pushes and miss pulls into the real cache, the trainer's
 *     micro-batch, local optimizer steps and gradient pushes.
 * The real cache and this node's snapshot receive the same policy calls
 * in the same order, and every iteration the pulls and evictions of the
 * real cache are checked against the snapshot's prediction.
 */
#ifndef ESD_NODE_H
#define ESD_NODE_H

#include <esd/cache.h>
#include <esd/dataset.h>
#include <esd/dispatch.h>
#include <esd/dispatch_snap.h>
#include <esd/gpu.h>
#include <esd/job.h>
#include <esd/rate_est.h>
#include <esd/transport.h>

#include <esd/ctl.h>

#include "xchg.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* What this node does in one iteration, computed by the dispatcher. */
struct order {
	uint64_t iter;
	uint32_t m;          /* samples of this worker */
	float *labels;       /* [m] */
	float *dense;        /* [m][dense] */
	esd_key_t *keys;     /* [nkeys]: sample by sample, table by table, bag by bag */
	uint32_t *bag_off;   /* [m * tables + 1]: bag (i, t) is keys[bag_off[i*T + t] ..) */
	uint32_t nkeys;      /* bag_off[m * tables]; m * tables without bags */
	float *wts;          /* [nkeys] each key's weight (a weighted stream), else NULL */
	size_t cap_wts;
	esd_key_t *need;     /* sorted unique keys this worker trains */
	uint8_t *alone;      /* [nneed] 1: only this worker trains it */
	uint32_t nneed;
	esd_key_t *others;   /* keys of the batch this worker does not train */
	uint32_t nothers;
	esd_key_t *upd;      /* step 1: DIRTY rows others need (value pushes) */
	uint32_t nupd;
	esd_key_t *pred_pull, *pred_evict; /* the snapshot's prediction */
	uint32_t npred_pull, npred_evict;
	/* rows per transfer kind this worker's links will carry, from the
	 * dispatcher's consequence (esd_conseq_count), apart from the code
	 * that sends them: the links' check compares the counters with it */
	uint64_t pred_rows[ESD_XFER_NKINDS];
	/* and the bytes of those rows (each its table's size, model.dims),
	 * frame headers apart */
	uint64_t pred_bytes[ESD_XFER_NKINDS];
	esd_key_t *ahead;    /* lookahead policy: keys of the next batch */
	uint32_t nahead;
	uint64_t digest;     /* of the whole decision */
	bool final;          /* the last barrier (no iteration follows): flagged FINAL */
	bool flush;          /* the end of training: every DIRTY row pushed, CLEAN */
	bool checkpoint;     /* a checkpoint boundary: every DIRTY row's value
			      * pushed for the checkpoint (it stays DIRTY) */
	int set_policy;      /* esdctl set cache.policy: enum esd_policy from this
			      * iteration on (after the lookahead hints), -1: none */
	bool set_rate;       /* esdctl set workers.rates: this node's links shape at
			      * rate_bps from this iteration on */
	uint64_t rate_bps;
	int64_t decide_ns;
	size_t cap_keys, cap_bags, cap_need, cap_others, cap_upd, cap_pull, cap_evict, cap_ahead;
};

#define ORDER_RING 3

/* ORDER frames a following node holds before its thread takes them: the
 * decider runs at most ORDER_RING - 1 iterations ahead of its own
 * executor, which is within one barrier of every other. */
#define FOLLOW_INBOX 16

/* One ORDER received (a copy of the frame's fields and lists). */
struct follow_msg {
	struct esd_order_msg h; /* its pointers unused */
	uint32_t *assign;       /* [h.k] */
	esd_key_t *lists[ESD_ORDER_NLISTS];
};

/* The dispatcher thread and the order ring it fills for the main thread.
 * Guarded by struct node.qmu (qcv signals a change), except the ring's
 * slots, each owned by one side at a time through produced/consumed. */
struct node_queue {
	pthread_t thread;
	struct order ring[ORDER_RING];
	uint64_t produced, consumed;          /* orders */
	int rc;                               /* error of the dispatcher thread */
	bool stop;
	int core_obtained;                    /* the core it was pinned to, -1: none */
	struct esd_dispatch_counters count;   /* copy of the engine's counters */
	int64_t cpu_ns;                       /* the thread's CPU when it last queued an order */
	int64_t wait_ns;                      /* the main thread's waits for an order */
	bool has_gpu;                         /* dispatch.gpu */
	struct esd_gpu_stats gcount;          /* copy (dispatch.gpu) */
	struct disp *state;                   /* the thread's own (disp_thread.c) */
	/* one decider (job.derived.one_decider): node 0's thread decides for
	 * every node (decider); every other node's follows the ORDER frames
	 * shard 0 relays, which its main thread receives into the inbox
	 * (oldest first; in_next: the iteration the next must have) */
	bool decider, follower;
	/* node 0: the ORDER frames its thread made, for the main thread (the
	 * one writer of its links) to send; hand_fd (an eventfd, -1: none)
	 * wakes it while it waits for its trainers */
	struct esd_buf outbox, sending;
	int hand_fd;
	struct follow_msg *inbox[FOLLOW_INBOX];
	uint32_t in_head, in_count;
	uint64_t in_next;
};

/* The dispatcher's state at a checkpoint boundary: every worker's
 * snapshot, HET's versions of the keys and the live settings in effect.
 * The dispatcher keeps the last SAVED_GENS in memory (a PS restart rolls
 * back to one) and writes each to disk for a whole-job resume (state.c). */
struct node_state {
	uint64_t iter;
	uint32_t n;
	void *cm[ESD_MAX_WORKERS]; /* esd_cmeta blocks, 64-byte aligned */
	size_t cm_cap[ESD_MAX_WORKERS];
	esd_key_t *vkeys;          /* HET: every key's version */
	uint64_t *vvals;
	size_t nvers, capvers;
	enum esd_method method;
	double alpha;
	enum esd_policy policy;
	uint64_t rates[ESD_MAX_WORKERS];
	uint32_t batch[ESD_MAX_WORKERS];
	/* the link-aware split's model: fixed rows, rows per sample, compute
	 * ns per sample (workers.split = fit changes it live) */
	double size_model[3];
};

/* State files kept on disk per node and kind (state.c): the dispatcher's
 * saved boundaries (ORDER_RING + 2) and one more. */
#define NODE_STATE_KEEP (ORDER_RING + 3)

/* Recovery: this node's cache metadata at the last two checkpoint
 * boundaries (after the flush), to roll back to when a PS shard restarts
 * from one: the PS writes checkpoint c at barrier c + 1, so a shard that
 * dies in between resumes from the boundary before c. The main thread's;
 * ckpt_at under qmu (the dispatcher reads it). */
struct node_recovery {
	void *saved_cm[2];
	size_t saved_cm_len[2];
	uint64_t saved_iter[2];
	bool saved_ok[2];
	/* a checkpoint requested through esdctl, announced by shard 0's
	 * barrier ACK: the boundary (0: none); the dispatcher flushes its
	 * snapshots there too */
	uint64_t ckpt_at;
	bool flag_next_barrier; /* this node flushed: flag the next BARRIER */
	/* the data cursor a shard reported at HELLO and its boundary: the
	 * cursor of boundary t is cursor + (t - cursor_iter) * global batch
	 * (node_cursor_at), also after a resume with another global batch */
	uint64_t cursor_iter, cursor;
	/* the job resumes at this boundary from ps.resume_from's checkpoint
	 * without a state of it of this node: caches cold, the dispatcher's
	 * state new (0: not) */
	uint64_t cold_at;
};

/* A graceful stop of the whole job (SIGTERM to this daemon or its
 * trainer, esdctl stop, or relayed from a shard): asked here, it goes to
 * shard 0 flagged on the next barriers; shard 0 answers with the
 * checkpoint boundary the job stops at. Under qmu. */
struct node_stop {
	bool asked; /* a stop was asked at this node (or relayed) */
	uint64_t at; /* shard 0's boundary: the last iteration (0: none yet) */
};

/* A command relayed by shard 0 (esdctl --worker): its reply, sent to
 * shard 0 before the next barrier. The main thread's. */
struct node_relay {
	char *reply; /* JSON, NULL: none pending */
};

/* Live settings (esdctl set). Under qmu (settings.c; the rate report also
 * links.c and iter.c). */
struct node_live {
	/* a change announced by shard 0 after a barrier ACK: the dispatcher
	 * applies it when it starts deciding iteration set_at (0: none) */
	uint64_t set_at;
	char set_key[ESD_PROTO_MAX_SETTING + 1], set_value[ESD_PROTO_MAX_SETTING + 1];
	/* esdctl set worker.rate on this node: reported to shard 0 with the
	 * next barrier (a SETTING frame "link.rate"), which makes it the
	 * worker's rate in every node's decisions (workers.rates) */
	bool rate_report;
	uint64_t rate_report_bps;
};

/* workers.estimate_rates: this node's link rate from its timed pull
 * phases. est is the main thread's; the figures are read under qmu. */
struct node_rate {
	struct esd_rate_est est;
	uint64_t bps;      /* last estimate, 0: none yet */
	int fitted;        /* 1: the fitted slope, 0: the throughput */
	uint64_t reports;  /* estimates reported to shard 0 */
	uint64_t last;     /* iteration of the last report */
};

/* workers.split = fit: what this node's worker trained and moved over
 * the current fit window (esd/dispatch_quality.h), reported to shard 0
 * with the barrier after the window's end. The main thread's (fit.c);
 * the last report is read under qmu. */
struct node_fit {
	struct esd_size_obs obs;
	uint64_t last_iter;        /* the last iteration observed */
	uint64_t report_end;       /* a window to report: its end (0: none) */
	struct esd_size_obs report;
	uint64_t reports;
	double last_compute_ns;    /* per sample, in the last window reported */
	/* every iteration observed (cold and rolled-back ones too): the rows
	 * counted as the fitter counts them, the predicted rows whatever
	 * their dim, and their bytes (esdctl status, the summary) */
	uint64_t seen_iters, seen_rows, seen_rows_any_dim, seen_bytes;
};

/* The PS links, one per shard. The main thread's; replaced under qmu
 * (recovery), which esdctl's readers take. */
struct node_links {
	struct esd_link *link[ESD_JOB_MAX_SHARDS];
	/* the node's network link: one token bucket all its links to the
	 * shards draw from, at the worker's rate (setting any link's rate
	 * sets it) */
	struct esd_uplink *uplink;
	/* the job key (job.key); keyed false: links unauthenticated */
	struct esd_key key;
	bool keyed;
	/* per shard: the last push frame's sequence on the link (esd/dedup.h;
	 * 0 on a new link), the last one sent, and the last one a BARRIER
	 * counted */
	uint64_t push_seq[ESD_JOB_MAX_SHARDS];
	uint64_t sent_seq[ESD_JOB_MAX_SHARDS];
	uint64_t barrier_seq[ESD_JOB_MAX_SHARDS];
	uint64_t pull_req;
};

/* One of the node's training processes (workers.trainers): its
 * connection, its exchange area, its own gradient slots (trainer 0 writes
 * the cache region's), and its share of the current micro-batch. The main
 * thread's (trainer_srv.c); it changes fd, pid and the counters under qmu
 * (esdctl reads them). */
struct node_trainer_slot {
	int fd; /* -1: none attached */
	int pid;
	int xchg_fd;
	struct esd_xchg_hdr *xchg;
	size_t xchg_len;
	int grad_fd; /* index > 0: a memfd of capacity x dim floats; else -1 */
	float *grads;
	size_t grads_len;
	uint32_t first, m; /* its samples of the micro-batch */
	uint32_t kfirst, nk; /* and their keys: bag_off[first * T] and how many */
	uint16_t version;    /* the attach protocol version it speaks */
	bool published, committed;
	bool stop_asked;     /* it sent STOP_REQ: its end is a departure, not a death */
	double loss;
	uint64_t commits, deaths;
	int64_t last_rx_ns;  /* its last message read (version 4: heartbeats) */
	_Atomic int64_t last_tx_ns; /* our last message to it */
};

/* The trainers' attachment: the node directory's lock, the listening
 * socket and the trainer slots. The main thread's; esdctl reads the
 * counts under qmu. */
struct node_trainer {
	int lock_fd, listen_fd;
	uint32_t count;      /* workers.trainers */
	uint32_t attached;   /* slots with a trainer (under qmu) */
	bool ever_attached;  /* a trainer attached since the daemon started */
	uint32_t *mark;      /* per cache slot: the share that last touched it */
	uint32_t mark_gen;
	struct node_trainer_slot t[ESD_MAX_TRAINERS];
	/* the heartbeat thread (version-4 trainers), which sends under qmu;
	 * hb_stop_fd: an eventfd that ends it, -1: none runs */
	pthread_t hb_thread;
	int hb_stop_fd;
};

/* Where the main thread's CPU goes, per phase of an iteration (the
 * summary's and esdctl's "cpu"): the cache's metadata and policy, rows
 * encoded into frames, rows decoded into the cache, sending and receiving
 * frames (with their tags; the links count the tags' own share), the
 * local optimizer steps, serving the trainers, and the rest. */
enum node_cpu_phase {
	NODE_CPU_CACHE,
	NODE_CPU_ENCODE,
	NODE_CPU_DECODE,
	NODE_CPU_NET,
	NODE_CPU_OPTIM,
	NODE_CPU_TRAINER,
	NODE_CPU_OTHER,
	NODE_CPU_NPHASES
};

/* Progress and figures; written by the main thread, read by esdctl and
 * the summary under qmu. */
struct node_stats {
	uint64_t iter_done;
	int64_t t_start_ns;
	double last_loss;
	uint64_t trainer_deaths;
	int64_t iter_ns_sum;
	/* this worker's transfers as the dispatcher predicted them, per kind
	 * (esd_xfer_kind), summed over iterations: the link counters must
	 * equal them */
	uint64_t predicted[ESD_XFER_NKINDS];
	uint64_t predicted_bytes[ESD_XFER_NKINDS]; /* their rows' bytes */
	int64_t last_report_ns; /* the last status report to shard 0 (main thread's) */
	int64_t cpu_ns[NODE_CPU_NPHASES]; /* the main thread's CPU per phase */
	json_t *at_warmup;      /* the summary's counters after iteration job.warmup */
};

/* One esdd: what it was started with (read only after start), the lock
 * that guards what the threads share, and its parts by concern. */
struct node {
	struct esd_job job;
	esd_key_t *rep; /* dispatch.replicate: hot rows every worker holds (FAE) */
	uint32_t nrep;
	uint32_t rank;
	char dir[512];
	int dispatcher_core;
	const char *control_path;
	const char *summary_path;
	uint32_t tables, dense, dense_params; /* from the data stream */
	uint32_t width;                       /* most keys one sample carries (bags) */
	bool bags;                            /* some table has bags (docs/multihot.md) */
	bool weighted;                        /* its IDs carry weights (weighted bags) */
	struct esd_cache *cache;              /* the cache region */
	struct esd_cmeta *cm;

	pthread_mutex_t qmu; /* guards what the sub-structs below say */
	pthread_cond_t qcv;

	struct node_queue dq;
	struct node_recovery rec;
	struct node_stop stop;
	struct node_live live;
	struct node_relay relay;
	struct node_rate rate;
	struct node_fit fit;
	struct node_links links;
	struct node_trainer tr;
	struct node_stats stats;
};

/* stop.c: ask for a graceful stop of the job (struct node_stop); why is
 * logged. Takes qmu. */
void node_ask_stop(struct node *nd, const char *why);
/* The last iteration this node trains: the stop boundary, else the job's
 * last. Takes qmu. */
uint64_t node_last_iter(struct node *nd);
/* A second SIGINT/SIGTERM: the job is abandoned (0 while running; set by
 * main.c's signal handler). */
extern volatile sig_atomic_t esd_node_signal;

/* state.c: the node's part of a checkpoint on disk, two kinds of file per
 * boundary: "state" (the dispatcher's, st->n = workers) and "cache" (the
 * real cache's metadata, st->n = 1). */
void node_state_path(const struct node *nd, uint64_t iter, const char *kind, char *buf,
		     size_t len);
/* Write st (temporary file, fsync, rename); keeps the NODE_STATE_KEEP
 * newest of the kind. 0 or -errno (logged). */
int node_state_write(const struct node *nd, const struct node_state *st, const char *kind);
/* Whether this node's file of boundary iter exists and was written by
 * this job (its token). */
bool node_state_is_ours(const struct node *nd, uint64_t iter, const char *kind);
/* Read boundary iter's file of the kind into st (zeroed first); refuses a
 * file of another job, worker, iteration or size, or a corrupt one,
 * naming it and why. 0 or -errno (logged). */
int node_state_read(const struct node *nd, uint64_t iter, const char *kind, uint32_t nblocks,
		    struct node_state *st);
void node_state_free(struct node_state *st);
/* Remove this node's temporary state files a write that died left. */
void node_state_remove_temps(const struct node *nd);

/* ctl.c: the control commands, NULL-terminated. */
extern const struct esd_ctl_cmd node_ctl_cmds[];

/* report.c: the node's state as JSON. Link l's JSON object with st's rows
 * and bytes per transfer kind added; returns l. */
json_t *node_link_kinds_json(const struct esd_link_stats *st, json_t *l);
/* dispatch.gpu counters as JSON (null without dispatch.gpu); caller holds qmu. */
json_t *node_gpu_json(const struct node *nd);
/* This node's status for shard 0 (esdctl on shard 0 lists every node):
 * compact JSON, at most len - 1 bytes; 0 or -E2BIG. Takes qmu. */
int node_status_report(struct node *nd, char *buf, size_t len);
/* The node's trainers: index, attached, pid, commits, deaths. Caller
 * holds qmu. */
json_t *node_trainers_json(const struct node *nd);
/* The CPU per phase (struct node_stats' cpu_ns, the dispatcher's, the
 * links' tags) as JSON, cumulative milliseconds; caller holds qmu. */
json_t *node_cpu_json(const struct node *nd);
/* workers.estimate_rates figures (null without it); caller holds qmu. */
json_t *node_rate_est_json(const struct node *nd);
/* "batch" and "rates" (the decisions' sizes and model rates) into o;
 * returns o. Caller holds qmu. */
json_t *node_batch_rates_json(const struct node *nd, json_t *o);

/* summary.c: keep the summary's counters as they are now (after iteration
 * job.warmup): the summary's "at_warmup". Takes qmu. */
void node_mark_warmup(struct node *nd);
/* Write the end-of-run summary (JSON) to nd->summary_path. */
int node_write_summary(struct node *nd, int status);

/* settings.c: store a SETTING that shard 0 announced after the ACK of
 * barrier 'iter' (-EPROTO: unknown key, bad value, or an iteration the
 * dispatcher may have started deciding); apply the changes order o
 * carries on the main thread: a cache.policy change to the real cache
 * (after the lookahead hints) and a workers.rates change to this node's
 * links. */
int node_setting_announce(struct node *nd, uint64_t iter, const struct esd_setting *s);
int node_setting_apply(struct node *nd, const struct order *o);

/* The data cursor of boundary t (struct node_recovery). */
static inline uint64_t node_cursor_at(const struct node *nd, uint64_t t)
{
	return nd->rec.cursor + (t - nd->rec.cursor_iter) * nd->job.derived.global_batch;
}

/* Most samples one micro-batch can have: the largest batch size, or the
 * global batch with a link-aware split (workers.rates may re-split it). */
static inline uint32_t node_max_batch(const struct node *nd)
{
	uint32_t m = 0;
	for (uint32_t w = 0; w < nd->job.n; w++)
		m = nd->job.batch[w] > m ? nd->job.batch[w] : m;
	return nd->job.derived.split_link_aware ? (uint32_t)nd->job.derived.global_batch : m;
}

struct disp;

/* disp_thread.c: start the dispatcher thread: from iteration 1 with empty snapshots, or
 * (a whole-job resume) from the state read from disk, which it takes over
 * (*resume is zeroed). start: the boundary the job starts after (a node
 * that follows the decider starts its stream there). */
int node_dispatcher_start(struct node *nd, struct node_state *resume, uint64_t start);
void node_dispatcher_stop(struct node *nd);
/* Stop the dispatcher thread and start it again from the snapshots it saved
 * at the checkpoint boundary 'iter' (its decisions are then the ones the
 * first run made). Returns 0, -ESTALE (no snapshots saved at iter). */
int node_dispatcher_restart(struct node *nd, uint64_t iter);
/* Next order (blocks); NULL when the dispatcher stopped (nd->dq.rc says why). */
struct order *node_order_next(struct node *nd);
/* follow.c: an ORDER frame shard 0 relayed (a node that follows one
 * decider): checked and kept for the dispatcher thread. 0 or -EPROTO. */
int node_follow_take(struct node *nd, const struct esd_order_msg *o);
/* Wait up to timeout_ns on shard 0's link for what the decider sends: an
 * ORDER taken, an ERROR the job's failure. 0, -ETIMEDOUT or the failure. */
int node_follow_pump(struct node *nd, int64_t timeout_ns);
/* node_order_next of a node that follows: reads shard 0's link while
 * nothing is held, for at most the barrier timeout. */
struct order *node_follow_order_next(struct node *nd);
/* Free the ORDER frames held. */
void node_follow_drop(struct node *nd);
/* Node 0 of a one-decider job, on the main thread: send shard 0 the
 * ORDER frames its dispatcher made. 0 or the send's error. */
int node_hand_flush(struct node *nd);
/* links.c: a node that follows the decider takes the ORDER frames shard 0
 * sent so far, without waiting, so that its dispatcher thread builds the
 * next order while this iteration goes on. 0 or the job's end. */
int node_links_take_orders(struct node *nd);
void node_order_done(struct node *nd);

/* trainer_srv.c: the trainers' socket and slots. */
int node_trainer_init(struct node *nd);
void node_trainer_fini(struct node *nd);
/* Trainer 0's exchange area: the dense parameters are pulled into it and
 * the summed dense gradients read from it. */
static inline float *node_dense_params(struct node *nd)
{
	return esd_xchg_at(nd->tr.t[0].xchg, nd->tr.t[0].xchg->off_params);
}
static inline const float *node_dense_grads(struct node *nd)
{
	return esd_xchg_at(nd->tr.t[0].xchg, nd->tr.t[0].xchg->off_dgrad);
}
/* Give each trainer its share of the micro-batch of o and wait for every
 * commit; then the shares' row and dense gradients are summed into the
 * region's gradient slots and trainer 0's dgrad in trainer order, and the
 * losses added. A trainer that fails (FAILED), dies or falls silent fails
 * the job (-ESD_EJOBFAILED, the shards told why), unless
 * job.restart_trainers: then its share is replayed to the next one that
 * attaches within job.restart_wait. */
int node_trainer_run(struct node *nd, const struct order *o, const uint32_t *slots,
		     double *loss);
void node_trainer_stop(struct node *nd);
/* Nothing to train (the job had ended): let the node's trainers attach
 * for up to timeout_ns and tell them STOP, so they end as after a run. */
void node_trainer_dismiss(struct node *nd, int64_t timeout_ns);

/* links.c: connect to every shard; *ps_iter receives the iteration the shards are at
 * (0 for a new job; a restarted shard reports its checkpoint), which must
 * be the same on every shard. */
int node_links_open(struct node *nd, uint64_t *ps_iter);
void node_links_close(struct node *nd);
/* After a link failure: connect again to every shard whose link broke
 * (the ones that restarted: *restarted has their bits, iter[s] the
 * checkpoint each resumed from); the other links stay. 0 or -errno. */
int node_links_reconnect(struct node *nd, uint64_t *iter, uint64_t *restarted);
/* While the node trains the shards send nothing, unless they failed the
 * job (ERROR) or went away: 0, or what happened (logged). */
int node_links_check(struct node *nd);
/* Log each shard whose link broke (address, the link's error), for a job
 * that nothing restarts shards in (job.restart_shards off). */
void node_links_name_broken(struct node *nd);
/* Every shard back to one checkpoint cut: the restarted shards' oldest,
 * or older if a shard lacks it (ROLLBACK frames, docs/protocol.md). *cut:
 * the boundary the job resumes from. 0, -ESTALE (no common checkpoint),
 * or -errno. */
int node_links_rollback(struct node *nd, const uint64_t *iter, uint64_t restarted,
			uint64_t *cut);
/* link.rate (report false) or worker.rate (true: also reported to shard
 * 0 with the next barrier, into every node's decisions): this node's
 * links at r bit/s from now. Takes qmu. */
void node_set_link_rate(struct node *nd, uint64_t r, bool report);

/* iter.c: the iterations, from boundary start (0, or a whole-job resume:
 * the dispatcher was started from the state of start). 0 or -errno. */
int node_run(struct node *nd, uint64_t start);
/* workers.estimate_rates: the estimator, before the first iteration. */
void node_rate_est_init(struct node *nd);
/* Save the real cache's metadata as of checkpoint boundary iter. */
int node_save_boundary(struct node *nd, uint64_t iter);

/* fit.c (workers.split = fit): after iteration o->iter trained in
 * train_ns, add it to the window; and, before a barrier, the window that
 * ended as a SETTING "node.fit" for shard 0 into b (0 or -errno). */
void node_fit_observe(struct node *nd, const struct order *o, int64_t train_ns);
int node_fit_report(struct node *nd, struct esd_buf *b, uint64_t iter);
/* The split's size model now and this node's fit figures (null without
 * workers.split = fit) as JSON; caller holds qmu. */
json_t *node_fit_json(const struct node *nd);

#endif
