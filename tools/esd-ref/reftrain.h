/*
 * reftrain.h - the single-process reference trainer (library esd_reftrain,
 * tool esd-ref): the correctness bar of docs/design.md §4 in one process.
 *
 * Model
 * -----
 * It trains the reference model (esd/model.h) for N iterations over
 * global batches of k samples taken from a sample source, exactly as the
 * distributed runtime does, minus the distribution:
 *   - a row is created on first use with esd_row_init(seed, key, dim),
 *     its optimizer state with esd_optim_state_init, clock 0;
 *   - iteration t: forward/backward over the k samples in global order
 *     (loss normalised by k), then every row that appears in the batch is
 *     updated once with the sum of all its gradients in the batch
 *     (esd_optim_apply_sum with t = clock + 1; the clock is bumped), and the
 *     dense table likewise with its own clock; the sparse rows and the
 *     dense table use the same optimizer and hyper-parameters;
 *   - the data cursor advances by k per iteration.
 * At the end it writes the tables in the checkpoint format (esd/ckpt.h:
 * shard 0 of 1, rows in ascending key order, the dense table, iteration
 * N, data cursor start + N*k), so the runtime's test compares the PS's
 * shard files against it with esd_ckpt_compare.
 *
 * Caveat: exactness
 * -----------------
 * The reference sums a row's gradient per sample in global sample order.
 * The distributed run sums per worker (its own samples, in its order),
 * then the PS adds the per-worker partial sums in worker-rank order; a
 * row trained by one worker only is summed in that worker alone. Addition
 * is not associative, so the two agree up to the rounding of the sums.
 * Sums are kept in double and rounded to float once before the update
 * (esd/optim.h), which makes that rounding invisible in practice: the
 * in-process emulation of the distributed iteration in
 * tests/runtime/test_reference.c ends bit-identical to this reference
 * under SGD, Adagrad and Adam, with sorted or shuffled micro-batches. It
 * is not a theorem, so the runtime's test compares with a relative
 * tolerance (1e-5) and reports the largest difference. With float sums
 * the tables differ by ~1e-7 absolute after 50 Adagrad/Adam iterations,
 * over 1e-5 relative on small values. Two runs of the same configuration
 * are bit-identical.
 */
#ifndef ESD_REFTRAIN_H
#define ESD_REFTRAIN_H

#include <stdint.h>

#include <esd/model.h>
#include <esd/optim.h>
#include <esd/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Where samples come from. next fills the k samples starting at sample
 * index cursor: keys[k * tables] (sample-major, esd keys), labels[k],
 * dense[k * dense] (not touched when dense is 0). Returns the number of
 * samples filled (k, or fewer at the end of the data), or a -errno.
 *
 * A source with bags (width > tables: docs/multihot.md) fills keys[k *
 * width] bag by bag and bag_off[k * tables + 1], bag (i, t) being
 * keys[bag_off[i*T + t] .. bag_off[i*T + t + 1]); the model pools each
 * bag by sum. A source without bags (width 0 or tables) leaves bag_off
 * alone.
 *
 * A source of weighted bags (a weighted stream, docs/multihot.md) sets
 * next_w too: next with a weight per key into weights[k * width]; the
 * model then pools sum(w * row) and gives each row w times the feature's
 * gradient. next_w NULL: every weight 1.
 */
struct esd_ref_source {
	uint32_t tables; /* T, categorical features per sample */
	uint32_t dense;  /* D, dense features per sample */
	uint32_t width;  /* most keys per sample; 0: tables (no bags) */
	int64_t (*next)(void *arg, uint64_t cursor, uint32_t k, esd_key_t *keys, uint32_t *bag_off,
	                float *labels, float *dense);
	int64_t (*next_w)(void *arg, uint64_t cursor, uint32_t k, esd_key_t *keys,
	                  uint32_t *bag_off, float *labels, float *dense, float *weights);
	void *arg;
	uint64_t samples; /* a stream's sample count, after which it wraps; 0: endless */
};

/*
 * The built-in deterministic generator: sample i is a function of (seed,
 * i) alone. Table t's ID is floor(rows * u^skew) for u uniform in [0, 1)
 * (skew 1: uniform; larger: a few hot IDs, as in click logs); dense
 * features are uniform in [-1, 1); the label is 1 when the sum over the
 * sample's keys of a hidden +-1 per key, plus the sum of the dense
 * features, is positive: a problem the model can learn.
 */
struct esd_ref_gen {
	uint64_t seed;
	uint32_t tables;
	uint32_t dense;
	uint64_t rows; /* IDs per table, >= 1 */
	double skew;   /* >= 1 */
};

/* Fill *src to draw from *gen (which must outlive src). Returns 0 or
 * -EINVAL (tables 0, rows 0, skew < 1). */
int esd_ref_gen_source(struct esd_ref_gen *gen, struct esd_ref_source *src);

/*
 * A source over a dataset stream (esd/dataset.h): the batch at cursor c
 * is samples c .. c + k - 1 of the file, each modulo its sample count: it
 * wraps around at its end, as the node daemons read it, and never runs
 * out. Returns 0 and fills *src (close with esd_ref_stream_close),
 * -ENODATA for a stream without samples, or esd_ds_open's error (-ENOENT,
 * -ESD_EBADMAGIC, -ESD_EBADSUM, -EPROTO, ...; the reason is logged by the
 * dataset library). A corrupt block met later is the
 * source's error, returned by esd_ref_train.
 */
int esd_ref_stream_source(const char *path, struct esd_ref_source *src);
void esd_ref_stream_close(struct esd_ref_source *src);

struct esd_ref_config {
	uint64_t seed;       /* job seed: row and dense initialisation */
	uint32_t dim;        /* row length (the largest of dims) */
	/* each table's dim (model.dims: a table-t row is its first dims[t]
	 * floats, the rest zero; docs/design.md §6), ndims of them, one per
	 * table; ndims 0: dim for every table */
	const uint32_t *dims;
	uint32_t ndims;
	uint32_t hidden;     /* hidden units (0: ESD_MODEL_DEFAULT_HIDDEN) */
	uint32_t batch;      /* k, the global batch */
	uint64_t iterations; /* N: train until this iteration (total) */
	uint64_t cursor;     /* first sample index to read (usually 0) */
	const char *resume;  /* continue from this checkpoint (NULL: fresh start): a
	                      * file, or a job's checkpoint directory (all of its
	                      * ps-shard<i>.ckpt, any shard count); its rows, dense
	                      * table, clocks, iteration and data cursor replace the
	                      * fresh state; cursor is then ignored */
	struct esd_optim_params optim;
	int verbose; /* print the loss of every iteration to stdout */
};

struct esd_ref_stats {
	uint64_t rows;     /* distinct rows touched */
	double first_loss; /* mean loss of the first iteration */
	double last_loss;  /* mean loss of the last iteration */
};

/*
 * Train and write the final tables to out_path (a checkpoint; replaced
 * atomically). stats may be NULL. Resuming from a checkpoint written at
 * iteration i and training to N gives the same bits as training to N in
 * one go (the checkpoint holds everything the training state is made of).
 * Returns 0, -EINVAL (bad configuration or source: batch 0, bad optimizer
 * parameters, a shape the model refuses; a resume checkpoint of another
 * seed, dim, optimizer or dense size, or past iteration N), -ENODATA (the
 * source ran out before N iterations), -ENOMEM, a source's -errno, the
 * resume checkpoint's esd_ckpt_open error, or a checkpoint writer's -errno.
 */
int esd_ref_train(const struct esd_ref_config *cfg, const struct esd_ref_source *src,
                  const char *out_path, struct esd_ref_stats *stats);

#ifdef __cplusplus
}
#endif
#endif /* ESD_REFTRAIN_H */
