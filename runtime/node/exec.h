/* exec.h - the iteration executor's state, shared by its files (private
 * to esdd): iter.c runs the steps, barrier.c the barrier and the reports
 * that ride ahead of it, recover.c the saved boundaries and the resume
 * after a lost shard. */
#ifndef ESD_NODE_EXEC_H
#define ESD_NODE_EXEC_H

#include "node.h"

#include <esd/clock.h>
#include <esd/proto.h>

struct shard_buf {
	struct esd_buf b;
	struct esd_gather g; /* rows sent from the cache in place (x->zero_copy) */
	struct esd_rows_enc e;
	bool open;
};

struct exec {
	struct node *nd;
	struct shard_buf sb[ESD_JOB_MAX_SHARDS];
	esd_key_t *pull_keys[ESD_JOB_MAX_SHARDS];
	uint32_t npull[ESD_JOB_MAX_SHARDS];
	size_t cap_pull[ESD_JOB_MAX_SHARDS];
	struct esd_cmeta_pull *pulls;
	struct esd_cmeta_evict *evicts;
	uint32_t *fill_slots;
	esd_key_t *dirty_evicts; /* the fill's DIRTY victims, sorted (cap_fill + 1) */
	uint32_t *sample_slots;
	size_t cap_fill, cap_samples;
	uint32_t dense_rows;
	float *dense_chunk; /* one dense row's gradient (dim floats) */
	bool zero_copy;     /* ps.zero_copy: cache rows go in place */
	int64_t cpu_mark;   /* this thread's CPU at the last lap */
	int64_t cpu[NODE_CPU_NPHASES]; /* per phase, since the last iteration's end */
};

/* The thread's CPU since the last lap goes to phase p. */
static inline void lap(struct exec *x, enum node_cpu_phase p)
{
	const int64_t now = esd_thread_cpu_ns();
	x->cpu[p] += now - x->cpu_mark;
	x->cpu_mark = now;
}

/* ---- iter.c: frames and pulls -------------------------------------------- */

/* Drop what shard s's buffer holds. */
void node_exec_reset_shard(struct shard_buf *sb);
/* Everything encoded onto the links. */
int node_exec_flush(struct exec *x);
/* Receive the next frame of shard s, turning ERROR frames into failures. */
int node_exec_recv(struct exec *x, uint32_t s, struct esd_msg *m);
/* Queue key for the next node_exec_pull, in its shard's list. */
int node_exec_add_pull(struct exec *x, esd_key_t key);
/* Pull the queued keys into their slots (values_only: a restored block,
 * its metadata left as it is). */
int node_exec_pull(struct exec *x, uint64_t iter, enum esd_xfer_kind kind, float *dense_out,
		   bool values_only);

/* ---- barrier.c ------------------------------------------------------------ */

/* Step 2: the reports for shard 0, BARRIER(o->iter) to every shard, and
 * every shard's ACK with what shard 0 announces with it. */
int node_barrier(struct exec *x, const struct order *o);
/* After an iteration: a link rate estimate off the model's goes to shard
 * 0 with the next barrier (workers.estimate_rates). */
void node_rate_est_check(struct node *nd, uint64_t iter);

/* ---- recover.c ------------------------------------------------------------ */

/* The real cache's metadata at boundary iter (just saved) to disk. */
int node_write_cache_state(struct node *nd, uint64_t iter);
/* Whether rc says a shard went away (or was sent back to a checkpoint). */
bool node_is_link_failure(int rc);
/* Whether a shard whose link broke will come back (job.restart_shards). */
bool node_shards_restart(const struct node *nd);
/* A shard went away: reconnect, roll back to its checkpoint's boundary;
 * *resume: the iteration to go on after. */
int node_recover(struct exec *x, uint64_t *resume);
/* A whole-job resume at boundary start. */
int node_resume_job(struct exec *x, uint64_t start);

#endif
