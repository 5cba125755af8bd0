/*
 * esd/libesd.h - the trainer's side of the runtime: attach to the node
 * daemon, receive micro-batches, read embedding rows in place, write
 * gradients in place, commit. Zero copy: rows live in the node's
 * huge-page cache region, mapped into the trainer.
 *
 * Loop
 * ----
 *     struct esd_trainer *t;
 *     esd_trainer_attach("/run/esd/node0", &t);
 *     struct esd_microbatch mb;
 *     while (esd_trainer_next(t, -1, &mb) == 0) {
 *             for each sample i < mb.m, table j < mb.tables, and each key
 *             r in [mb.bag_off[i * mb.tables + j], mb.bag_off[i * mb.tables + j + 1]):
 *                     const float *row = esd_trainer_row(t, mb.slots[r]);
 *                     float *grad     = esd_trainer_grad(t, mb.slots[r]);
 *                     ... forward / backward, grad[d] += ... (zeroed by the daemon) ...
 *             ... dense gradients into mb.dgrad (zeroed by the daemon) ...
 *             esd_trainer_commit(t, &mb, loss);
 *     }
 *     esd_trainer_detach(t);
 *
 * Gradients count only once committed: a trainer that dies before
 * esd_trainer_commit leaves nothing applied; the daemon replays the
 * micro-batch to the next trainer that attaches.
 *
 * Normalise losses by mb.global_k (the global batch), not mb.m: the
 * runtime then trains exactly what one process would on the global batch,
 * however it is split over workers.
 *
 * Several trainers per node (workers.trainers, e.g. one per GPU): each
 * attaches to the same daemon, gets the lowest free index, and receives
 * an equal contiguous share of the node's micro-batch each iteration (mb.m
 * may be 0). They read the same cached rows; each writes its gradients
 * into its own gradient slots (esd_trainer_grad), which the daemon sums in
 * index order once every share is committed.
 *
 * Bags (multi-hot features, docs/multihot.md): a sample carries a bag of
 * 0..max_bag keys per table; mb.slots holds the micro-batch's keys bag by
 * bag and mb.bag_off where each (sample, table) bag starts. Without bags
 * every bag has one key: bag_off[j] = j, slots[i * tables + j] as before.
 * A row twice in a bag is one slot read twice (one gradient slot: add
 * both contributions).
 *
 * Failing: a trainer that cannot go on says why before it ends,
 * esd_trainer_fail(t, "what went wrong"), and the daemon fails the whole
 * job at once with that text (every process exits non-zero, the text in
 * the daemon's and the shards' failure messages). libesd sends the same
 * by itself on SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT ("killed by
 * signal SIGSEGV (Segmentation fault)"), then lets the signal take its
 * course under the action it had before the attach. A trainer that dies
 * without a word (kill -9) fails the job too, unless the job says that
 * something replaces it (job.restart_trainers).
 *
 * Heartbeats: after the attach a small thread of libesd sends the daemon
 * a heartbeat whenever the trainer sent nothing for job.heartbeat_ms (the
 * WELCOME says the interval), so a trainer busy in a long step is not
 * taken for a dead one; the daemon fails the job when its trainer is
 * silent for job.peer_timeout_ms (a stopped process), and
 * esd_trainer_next returns -EHOSTDOWN when the daemon is.
 *
 * Threads: one thread uses a trainer handle at a time (libesd's heartbeat
 * thread aside).
 */
#ifndef ESD_LIBESD_H
#define ESD_LIBESD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ESD_API marks the functions libesd.so exports: the library is built
 * with hidden visibility and a version script (runtime/libesd/libesd.map,
 * node ESD_0.1) that lists exactly these. */
#if defined(__GNUC__)
#define ESD_API __attribute__((visibility("default")))
#else
#define ESD_API
#endif

struct esd_trainer;

struct esd_trainer_info {
	uint32_t rank;         /* worker rank of this node */
	uint32_t workers;      /* workers in the job */
	uint32_t index;        /* this trainer among the node's (0 .. trainers-1) */
	uint32_t trainers;     /* the node's trainers (workers.trainers) */
	uint32_t dim;          /* floats per embedding row */
	uint32_t tables;       /* keys per sample */
	uint32_t dense;        /* dense features per sample */
	uint32_t dense_params; /* floats of the dense table */
	uint32_t max_batch;    /* most samples in one micro-batch */
	uint32_t capacity;     /* rows (slots) of the cache region */
	/* Row layout, for zero-copy views (numpy, torch.from_numpy): the
	 * value of slot s is dim floats at values_base + s * value_stride
	 * bytes (read-only mapping), its gradient slot dim floats at
	 * grads_base + s * grad_stride (writable; this trainer's own: the
	 * daemon adds the node's trainers' gradients in index order). */
	const void *values_base;
	void *grads_base;
	size_t value_stride, grad_stride;
	uint32_t max_keys;     /* most keys in one micro-batch (max_batch * tables without bags) */
	uint32_t bags;         /* 1: the job's stream has bags */
	uint32_t weighted;     /* 1: its IDs carry weights (mb.weights) */
};

/* One micro-batch. Arrays live in the exchange area shared with the
 * daemon; valid until the next esd_trainer_next or detach. */
struct esd_microbatch {
	uint64_t iter;       /* iteration number */
	uint32_t m;          /* samples */
	uint32_t tables;     /* keys per sample */
	uint64_t global_k;   /* global batch size: normalise the loss by it */
	const uint32_t *slots; /* [nkeys] cache slot of each key, bag by bag */
	const uint64_t *keys;  /* [nkeys] the keys (for debugging) */
	const float *labels;   /* [m] */
	const float *dense;    /* [m][dense] dense features */
	const float *params;   /* [dense_params] dense table values */
	float *dgrad;          /* [dense_params] dense gradients, zeroed */
	uint32_t nkeys;        /* keys of the micro-batch: bag_off[m * tables] */
	const uint32_t *bag_off; /* [m * tables + 1] bag (i, j) starts at slots[bag_off[i*tables + j]] */
	uint32_t flags;        /* ESD_MB_CHECKPOINT */
	const float *weights;  /* [nkeys] each key's weight (a weighted stream,
	                        * docs/multihot.md), parallel to slots; NULL: all 1 */
};

/* mb.flags: the iteration is a checkpoint boundary (ps.checkpoint_every, or
 * esdctl checkpoint): the job's checkpoint holds the rows as they are after
 * it, and a job resumed from that checkpoint starts at the next iteration.
 * A trainer with state of its own (a dense model) saves it after this
 * batch's step to resume with the rows (esd.torch does). */
#define ESD_MB_CHECKPOINT 1u

/* Attach to the daemon of node directory 'dir' (it answers within 30 s).
 * Returns 0 and *out (free with esd_trainer_detach), -ENOENT/-ECONNREFUSED
 * (no daemon: logged with the socket path), -EPERM (refused: another uid,
 * or another trainer is attached; logged with the daemon's reason),
 * -EPROTO (version mismatch or a corrupt region header), -ETIMEDOUT (no
 * answer to the HELLO: logged), -ENOMEM, or -errno. */
ESD_API int esd_trainer_attach(const char *dir, struct esd_trainer **out);
/* The same, waiting up to timeout_ms for a daemon that is not listening
 * yet (starting, or started again after a crash left its socket): what a
 * trainer started beside its daemon (torchrun, a launcher) calls. */
ESD_API int esd_trainer_attach_wait(const char *dir, int timeout_ms, struct esd_trainer **out);
ESD_API void esd_trainer_get_info(const struct esd_trainer *t, struct esd_trainer_info *info);
/* Each table's dim (info.tables of them, each 1..info.dim; model.dims,
 * docs/design.md §6): a table-t row is the first dims[t] floats of its
 * slot, and a trainer writes only those of its gradient (the rest stay
 * zero). Without model.dims every entry is info.dim. Valid until detach. */
ESD_API const uint32_t *esd_trainer_table_dims(const struct esd_trainer *t);

/* Wait up to timeout_ms (-1: no bound but the daemon's heartbeats) for
 * the next micro-batch. Returns 0 with *mb filled, 1 when training is over
 * (the daemon said STOP), -ETIMEDOUT, -ECONNRESET (the daemon went away),
 * -EHOSTDOWN (the daemon sent nothing, not even a heartbeat, for
 * job.peer_timeout_ms: logged naming its socket), -EPROTO. */
ESD_API int esd_trainer_next(struct esd_trainer *t, int timeout_ms, struct esd_microbatch *mb);

/* Row value and gradient slot of a cache slot (no bounds check beyond
 * an assert-free mask: slots come from the micro-batch). */
ESD_API const float *esd_trainer_row(const struct esd_trainer *t, uint32_t slot);
ESD_API float *esd_trainer_grad(const struct esd_trainer *t, uint32_t slot);

/* Add the gradients of pooled bags into the rows' gradient slots (what
 * esd.torch's backward does), key by key in order: key k of bag b (keys
 * offsets[b] .. offsets[b + 1] - 1; the last bag's end at nkeys) adds
 * row b of g, divided by div[b] when div is not NULL (a mean's bag
 * length), to the gradient slot of slots[k]. offsets NULL: every key is
 * a bag of its own (nbags == nkeys). Element d of g's row b is
 * g[b * row_stride + d * col_stride] (floats; either stride may be 0, a
 * broadcast gradient). Each slot's element gets one rounding per key, as
 * a sequential scatter-add. Returns 0, -ERANGE (a slot outside 0 ..
 * capacity - 1) or -EINVAL (offsets not starting at 0, decreasing or
 * past nkeys; no handle); nothing is added on error. */
ESD_API int esd_trainer_add_grads(const struct esd_trainer *t, const int64_t *slots, size_t nkeys,
                                  const int64_t *offsets, size_t nbags, const float *g,
                                  ptrdiff_t row_stride, ptrdiff_t col_stride, const float *div);
/* The same for weighted bags (docs/multihot.md): key k adds weights[k]
 * times its bag's gradient row (divided first by div[b] when div is not
 * NULL: w * (g / div), a weighted mean's derivative), one product and one
 * add per element; weights NULL is esd_trainer_add_grads. */
ESD_API int esd_trainer_add_grads_w(const struct esd_trainer *t, const int64_t *slots,
                                    size_t nkeys, const int64_t *offsets, size_t nbags,
                                    const float *g, ptrdiff_t row_stride, ptrdiff_t col_stride,
                                    const float *div, const float *weights);

/* Publish the gradients of mb (rows' gradient slots and mb->dgrad) and
 * the summed loss. Returns 0, -EINVAL (mb is not the current batch),
 * -ECONNRESET. */
ESD_API int esd_trainer_commit(struct esd_trainer *t, const struct esd_microbatch *mb, double loss);

/* Ask the daemon to stop the whole job gracefully (what a trainer does on
 * SIGTERM): training goes on to a checkpoint boundary a few iterations
 * later, then esd_trainer_next returns 1. Async-signal-safe (one
 * sendmsg). Returns 0 or -errno. */
ESD_API int esd_trainer_request_stop(struct esd_trainer *t);

/* Tell the daemon that this trainer fails, and why (text, up to 511
 * bytes, e.g. an exception's type, message and place): the daemon logs it
 * and fails the job at once, whatever job.restart_trainers says. Call it
 * before the process ends; the handle stays usable for
 * esd_trainer_detach. Returns 0, -EINVAL (no handle) or -errno. */
ESD_API int esd_trainer_fail(struct esd_trainer *t, const char *text);

/* Unmap and close. Accepts NULL. */
ESD_API void esd_trainer_detach(struct esd_trainer *t);

#ifdef __cplusplus
}
#endif
#endif /* ESD_LIBESD_H */
