/*
 * ps.h - one PS shard: its rows, the per-iteration barrier, and the
 * threads that serve the node daemons' links (private to esd-ps).
 *
 * One thread per link, each doing both receive and send on its link (a
 * link is single-threaded); they share the store under one mutex. The
 * barrier of iteration t completes when all n workers have sent
 * BARRIER(t): their pushes came before on each ordered link, so they are
 * applied; the staged gradients of t-1 are then applied (keys ascending,
 * partials in worker-rank order), a checkpoint is written if one is due,
 * and every waiting link is released. A PULL for t waits for that release.
 */
#ifndef ESD_PS_PS_H
#define ESD_PS_PS_H

#include "store.h"

#include <esd/dedup.h>
#include <esd/job.h>
#include <esd/transport.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

struct ps_link {
	struct ps *ps;
	struct esd_link *link; /* closed and NULL once its thread ended */
	pthread_t thread;
	bool used;  /* a thread was started and not joined yet (the slot is taken) */
	int worker; /* -1 until HELLO */
	bool done;  /* the thread ended: join it, the slot is free then */
	int64_t since_ns; /* accepted at */
	bool evicted;     /* unproven, ended to make room for a newer link */
	char source[64];  /* the peer's address without its port */
	/* the shard's rollbacks this worker knows of (under mu): after another
	 * one, its frames of the state that is gone are dropped and its
	 * barriers and pulls answered ESD_EROLLBACK until it asks back too */
	uint64_t epoch;
	bool told_failure; /* the job's failure was sent to this worker */
	uint32_t pushes;   /* push frames applied since its barrier, HELLO or ROLLBACK */
	int64_t send_cpu_ns; /* its thread's CPU in sends (struct ps_cpu's) */
};

/* The barrier and the job's progress and health. Under struct ps.mu (cv
 * signals a release, a failure or a stop). */
struct ps_barrier {
	uint64_t iter_done;    /* last iteration whose barrier was released */
	uint64_t cursor;       /* data cursor at iter_done (samples consumed) */
	/* the data cursor at boundary base_iter (0 at 0, or a checkpoint's):
	 * boundary t's is base_cursor + (t - base_iter) * global_batch, so a
	 * job resumed with another global batch goes on from the sample after
	 * the checkpoint's last (ps_cursor_at) */
	uint64_t base_iter, base_cursor;
	uint32_t arrived;      /* workers at the barrier of iter_done + 1 */
	uint64_t arrived_mask;
	uint64_t digest[ESD_MAX_WORKERS];
	struct esd_dedup dedup; /* the last applied push sequence of each worker */
	uint64_t connected_mask;
	int failed;            /* -errno: the job failed; every barrier answers it */
	char fail_msg[256];
	bool stopping;
	uint32_t finished; /* workers that left after the final barrier */
	uint32_t final;    /* workers at the barrier of iter_done + 1 that flagged it FINAL */
	bool ended;        /* a barrier every worker flagged FINAL was released */
	/* a rollback (another shard restarted): the shard went back to its
	 * checkpoint rolled_to (no barrier released since), and epoch counts
	 * rollbacks so that a wait of the old state gives up */
	uint64_t rolled_to;
	uint64_t epoch;
	uint64_t last_rollback; /* the checkpoint of the last rollback */
};

/* The dense table (shard 0): values, optimizer state, per-worker staged
 * gradients of the iteration being collected. Under mu. */
struct ps_dense_table {
	float *val, *state, *stage;
	double *sum, *in; /* the apply's sums and one worker's gradient (len each) */
	size_t len;
	uint64_t clock;
	bool staged;
};

/* Counters, for esdctl status. Under mu. */
struct ps_stats {
	uint64_t pulled_rows, value_rows, grad_rows, barriers, checkpoints;
	int64_t last_ckpt_ns;
	uint64_t ckpt_bytes, last_ckpt_bytes; /* written by checkpoints: all, the last one */
};

/* Where the link threads' CPU goes (esdctl status "cpu"): receiving
 * frames, sending them, answering pulls (rows read and encoded), taking
 * pushes into the store, barriers (the staged gradients applied: the
 * optimizer; the dense table; checkpoints), and the rest. Sends and
 * receives include the tags of a keyed job, which the links also count
 * on their own (auth). Atomic: every link thread adds its share. */
enum ps_cpu_phase {
	PS_CPU_RECV,
	PS_CPU_SEND,
	PS_CPU_PULL,
	PS_CPU_PUSH,
	PS_CPU_BARRIER,
	PS_CPU_OTHER,
	PS_CPU_NPHASES
};

struct ps_cpu {
	_Atomic int64_t ns[PS_CPU_NPHASES];
	/* the tags' CPU (made, checked) of the links that closed */
	_Atomic int64_t auth_tx_closed_ns, auth_rx_closed_ns;
};

/* esdctl checkpoint: set by the control command, scheduled by the
 * barrier at a boundary every daemon flushes at, cleared when that
 * checkpoint is written (docs/esdctl.md). Under mu. */
struct ps_ckpt_request {
	uint64_t at;          /* boundary a requested checkpoint is scheduled at */
	uint32_t flagged;     /* barriers of this iteration flagged CHECKPOINT */
	bool requested;
	uint64_t requested_at; /* iter_done when it was requested */
};

/* The checkpoint the next increment builds on (ckpt.c): the newest one
 * this shard wrote or restored from its ps.checkpoint_dir. */
struct ps_ckpt_chain {
	bool ok;       /* false: the next checkpoint is a full one */
	uint64_t iter; /* its iteration and header checksum */
	uint64_t sum;
	uint32_t len;      /* increments since the base */
	uint64_t rows;     /* rows those increments hold */
	uint64_t base_rows; /* rows of the base */
};

/* A graceful stop of the whole job (SIGTERM, esdctl stop, or a worker's
 * barrier flagged STOP): shard 0 schedules it at a checkpoint boundary no
 * dispatcher has decided yet, like a requested checkpoint, and its barrier
 * ACKs announce it; every worker flushes there, sends its last barrier
 * and leaves, and each shard writes the checkpoint and exits 0. Another
 * shard flags its ACKs so that the workers relay the request to shard 0.
 * Under mu. */
struct ps_stop {
	bool asked;     /* a stop was asked at this shard */
	bool requested; /* shard 0: a stop to schedule */
	uint64_t at;    /* shard 0: the boundary the job stops at (0: none) */
};

/* esdctl set (shard 0): one live setting change at a time, scheduled by
 * the barrier at an iteration no dispatcher has decided yet and announced
 * in a SETTING frame after each barrier ACK until that iteration's
 * barrier is released (docs/esdctl.md); and the link rates the daemons
 * reported (esdctl set worker.rate on a node), turned into a
 * workers.rates change by the next barrier. Under mu. */
struct ps_live {
	bool pending;
	uint64_t at; /* iteration it takes effect at (0: not scheduled yet) */
	uint64_t requested_at;
	char key[ESD_PROTO_MAX_SETTING + 1], value[ESD_PROTO_MAX_SETTING + 1];
	uint64_t rate_req[ESD_MAX_WORKERS];
	uint64_t rate_req_mask;
};

/* workers.split = fit (shard 0): every node's last fit window (SETTING
 * "node.fit" frames before barrier END + 1); the barrier release that
 * has all n gives them to the fitter (esd/dispatch_quality.h), whose
 * switch becomes a live workers.size_model change. Under mu. */
struct ps_fit {
	uint64_t end[ESD_MAX_WORKERS]; /* the window each node last reported */
	struct esd_size_obs obs[ESD_MAX_WORKERS];
	double model[ESD_MAX_WORKERS][3]; /* the model each node's sizes come from */
	struct esd_size_fitter fitter;
};

/* Shard 0: each node's last status report (a SETTING "node.status" frame
 * before a barrier, about once a second), so that esdctl on shard 0 sees
 * every node of the job wherever it runs. Under mu. */
struct ps_node_report {
	char json[ESD_PROTO_MAX_SETTING + 1]; /* "" until the first */
	int64_t at_ns;
	/* esdctl --worker W COMMAND on shard 0: the request goes to node W
	 * after its next barrier ACK (a SETTING "node.request"), the reply
	 * comes back in SETTING "node.reply" chunks ("node.reply.end" last)
	 * before a later barrier */
	bool relay_busy, relay_pending, reply_done;
	char request[ESD_PROTO_MAX_SETTING + 1];
	char *reply;
	size_t reply_len, reply_cap;
};

/* One PS shard: what it was started with (read only after start), the
 * lock the parts below are under, and its parts by concern. */
/* One decider (job.derived.one_decider): shard 0 relays node 0's ORDER
 * frames to their workers (relay.c). Under mu. */
struct ps_relay {
	pthread_mutex_t mu;
	struct esd_buf held[ESD_MAX_WORKERS]; /* each worker's orders, to be sent */
	uint64_t frames, bytes;               /* kept, sent */
};

struct ps {
	struct esd_job job;
	uint32_t shard;
	uint32_t tables, dense;      /* model shape (from the stream) */
	uint32_t width;              /* most keys one sample carries (bags: esd_ds_keys_per_sample) */
	uint64_t job_token;
	uint64_t barrier_timeout_ns;
	struct ps_store *st;
	uint64_t cache_rows; /* each node's cache, resolved as esdd does (main.c) */
	uint64_t hot_rows;   /* dispatch.replicate's rows, held by every cache */

	pthread_mutex_t mu;
	pthread_cond_t cv;

	struct ps_barrier bar;
	struct ps_dense_table dtab;
	struct ps_stats stats;
	struct ps_cpu cpu;
	struct ps_ckpt_request ckpt;
	struct ps_ckpt_chain chain;
	struct ps_stop stop;
	struct ps_live live;
	struct ps_fit fit;
	struct ps_node_report report[ESD_MAX_WORKERS];
	struct ps_relay relay;

	/* the iteration of ps.resume_from's checkpoint this shard started
	 * from (0: none): a rollback to it before the job's own first
	 * checkpoint loads it again */
	uint64_t resumed_from;

	struct ps_link links[ESD_MAX_WORKERS * 2]; /* one thread each (ps.c) */
	int nlinks;
};

/* A worker's downlink is one network link too, shared by the replies of
 * every shard: each shard shapes its share, the rate over the shards
 * (the key hash spreads rows evenly over them). */
static inline uint64_t ps_reply_rate(const struct ps *ps, uint64_t worker_bps)
{
	return ps->job.shards > 1 ? worker_bps / ps->job.shards : worker_bps;
}

/* reports.c: a SETTING frame from worker pl (node.status, node.reply,
 * node.reply.end, node.fit; or link.rate: a daemon's link rate, kept for
 * the next barrier, which turns the reports into one workers.rates
 * change). 0, or -EPROTO with an ERROR sent for any other key. */
int ps_on_setting(struct ps_link *pl, const struct esd_setting *s);
/* barrier.c: the last BARRIER for t is in: apply, checkpoint, schedule,
 * release (struct ps_barrier). Caller holds mu. */
void ps_complete_barrier_locked(struct ps *ps, uint64_t t);
/* Wait until the barrier of iteration t was released, the job failed or
 * stops, or the shard went back (-ESTALE); bounded by the barrier timeout.
 * Caller holds mu (released while waiting). */
int ps_wait_released(struct ps *ps, uint64_t t);
/* workers.rates = rates as the canonical value (decimal bit/s, one per
 * worker); -EINVAL with the reason in msg when a link-aware split would
 * give a worker more keys than the caches hold. */
int ps_rates_value(const struct ps *ps, const uint64_t *rates, char *canon, size_t len,
		   char *msg, size_t mlen);

int ps_init(struct ps *ps, const struct esd_job *job, uint32_t shard, uint32_t tables,
	    uint32_t dense);
void ps_fini(struct ps *ps);
/* Start a thread serving one accepted link (ownership passes to ps). */
int ps_serve_link(struct ps *ps, struct esd_link *l);
/* Ask for a graceful stop of the job (see struct ps_stop); why is logged.
 * Caller holds mu. */
void ps_ask_stop_locked(struct ps *ps, const char *why);
/* Fail the job (first reason wins) and wake every waiter. Caller holds mu. */
void ps_fail_locked(struct ps *ps, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Dense table (dense.c); the _locked ones need mu. */
int ps_dense_init(struct ps *ps);
void ps_dense_free(struct ps *ps);
int ps_dense_read_locked(const struct ps *ps, uint64_t key, float *value, float *state);
int ps_dense_stage_locked(struct ps *ps, uint32_t worker, uint64_t key, const float *grad);
int ps_dense_apply_locked(struct ps *ps);

/* Write a checkpoint of this shard now (caller holds mu); the one it
 * replaces is kept as the previous one. */
int ps_checkpoint_locked(struct ps *ps);
/* Restore from the checkpoint file. */
int ps_restore(struct ps *ps, const char *path);
/* Go back to this shard's checkpoint of iteration c (its newest or the one
 * before): a fresh store from the file, the barrier and every request
 * reset. -ESTALE with *newest set when the shard has no checkpoint c.
 * Caller holds mu. */
int ps_rollback_locked(struct ps *ps, uint64_t c, uint64_t *newest);
/* Path of this shard's checkpoint file in job.checkpoint_dir (prev: the
 * one before it). */
void ps_checkpoint_path(const struct ps *ps, char *buf, size_t len);
void ps_checkpoint_prev_path(const struct ps *ps, char *buf, size_t len);
/* The data cursor at boundary t, and the point the line goes through
 * (a checkpoint's iteration and cursor). */
static inline uint64_t ps_cursor_at(const struct ps *ps, uint64_t t)
{
	return ps->bar.base_cursor + (t - ps->bar.base_iter) * ps->job.derived.global_batch;
}

static inline void ps_set_cursor_base(struct ps *ps, uint64_t iter, uint64_t cursor)
{
	ps->bar.base_iter = iter;
	ps->bar.base_cursor = cursor;
	ps->bar.cursor = cursor;
}

/* Load a fresh shard from the checkpoint in dir written with any shard
 * and worker count (ps.resume_from; runtime/ps/reshard.c): the rows whose
 * keys are this shard's now, their state and clocks, shard 0 the dense
 * table, the iteration and data cursor. 0, or -errno after logging what
 * is wrong, naming the file (a missing or mismatched one too). */
int ps_resume_from(struct ps *ps, const char *dir);
/* Load a fresh shard's rows (and shard 0's dense table) from the export
 * in dir (ps.warm_start; runtime/ps/warm.c). 0, or -EINVAL / -errno after
 * logging what does not match, naming the file. */
int ps_warm_start(struct ps *ps, const char *dir);

/* relay.c: one decider's orders, relayed by shard 0. */
void ps_relay_init(struct ps *ps);
void ps_relay_fini(struct ps *ps);
/* Whether pl's worker gets orders relayed (shard 0 of a one-decider job,
 * a worker other than 0). */
bool ps_relays(const struct ps_link *pl);
/* On pl's own thread: send the orders kept for its worker (out: the
 * thread's buffer). 0 or the send's error. */
int ps_relay_flush(struct ps_link *pl, struct esd_buf *out);
/* An ORDER from pl: kept for its worker, whose link thread sends it;
 * refused (ERROR, -EPROTO) from anyone but worker 0 at shard 0 of a
 * one-decider job. */
int ps_on_order(struct ps_link *pl, const struct esd_order_msg *o);

#endif
