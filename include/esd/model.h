/*
 * esd/model.h - the C reference trainer's model: a small WDL-style network
 * trained for real (forward, backward, logistic loss), deterministic.
 *
 * Model
 * -----
 * A sample has T categorical features (one row per table, looked up by
 * key: e_t its first d_t floats, d_t = dim unless the shape gives dims),
 * D dense features and a label y in {0, 1}.
 *
 *   x      = [e_1 | e_2 | ... | e_T | dense]          (In = d_1 + ... + d_T + D)
 *   h      = relu(W1 x + b1)                           (H hidden units)
 *   z      = w2 . h + b2 + wd . dense                  (logit)
 *   loss   = log(1 + exp(z)) - y z                     (logistic loss)
 *
 * The deep part is the MLP; the wide part is the linear term wd . dense
 * over the dense features only. A wide term over the categorical IDs (a
 * scalar per ID) would be a second family of sparse rows; it is left out
 * to keep one row shape per key, and the deep part trains every embedding.
 *
 * Dense parameters are one flat float vector, the "dense table" the PS
 * synchronises in full every iteration, laid out as
 *     W1[H][In] (row-major) | b1[H] | w2[H] | b2 | wd[D]
 * (esd_model_dense_len floats). esd_model_dense_init fills it from a seed.
 *
 * Normalisation by the global batch: forward/backward over a micro-batch
 * of m samples scales every gradient by 1/k, k the GLOBAL batch size, so
 * the gradient of the global batch is the sum of the micro-batches'
 * gradients however the batch is split over workers.
 *
 * Caveats: determinism and summation order
 * ----------------------------------------
 * The same inputs give bit-identical outputs: the library is compiled
 * with -ffp-contract=off, every reduction is a plain loop in a fixed
 * order, and samples are processed in order, so a row that appears in
 * several samples accumulates its gradients in sample order.
 *
 * Gradients are accumulated in double: each sample's contribution is a
 * float computed identically wherever it is computed, added to a double
 * accumulator (the row's gradient slot, the dense gradient buffer).
 *
 * In the distributed run each worker sums the gradients of its own
 * samples for a row (its micro-batch, in sample order), then the PS sums
 * the per-worker partial sums in worker-rank order; the single-process
 * reference (tools/esd-ref) sums per sample in global order. Addition is
 * not associative, so the two are equal only up to rounding; in double,
 * that rounding is far below a float's, and once the sum is rounded to
 * float (esd_optim_apply_sum) the results agree bit for bit in practice
 * (the tests see 0 difference over 50 iterations under SGD, Adagrad and
 * Adam). With float accumulators they drift apart by ~1e-7 absolute, a
 * relative difference above 1e-5 on small values (docs/model.md). Two
 * runs of one configuration are bit-identical either way.
 *
 * Thread safety: a model object holds scratch space for one sample, so
 * one thread at a time per object; create one per thread.
 */
#ifndef ESD_MODEL_H
#define ESD_MODEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ESD_MODEL_DEFAULT_HIDDEN 16u
/* Upper bounds on the shape (the reference model is small; these keep
 * size arithmetic far from overflow). */
#define ESD_MODEL_MAX_TABLES 4096u
#define ESD_MODEL_MAX_DIM    4096u
#define ESD_MODEL_MAX_DENSE  4096u
#define ESD_MODEL_MAX_HIDDEN 4096u

struct esd_model_shape {
	unsigned tables; /* T, >= 1 */
	unsigned dim;    /* embedding row length d, >= 1 */
	unsigned dense;  /* D dense features, may be 0 */
	unsigned hidden; /* H hidden units, >= 1 (0 means the default, 16) */
	/* each table's row length d_t (1..dim; the model copies them), or
	 * NULL: dim for every table. Table t's input e_t is the first d_t
	 * floats of its rows, and only those get gradients. */
	const uint32_t *dims;
};

/* One micro-batch, sample-major. Pointers into shared memory are fine:
 * rows are only read, gradient slots only accumulated into.
 *
 * Bags (multi-hot features, docs/multihot.md): with bag_off set, feature
 * (i, t) is the bag rows[bag_off[i*T + t] .. bag_off[i*T + t + 1]), pooled
 * by sum in bag order (an empty bag is zeros) into the model's input e_t;
 * backward adds e_t's gradient to every member's slot (a row twice in a
 * bag gets it twice, as the sum's derivative says). bag_off NULL: one row
 * per feature, bag_off[j] = j.
 *
 * Weighted bags: with weights set (parallel to rows), the input is
 * sum(w[r] * row r) in bag order, each product rounded to float before
 * it is added, and row r's gradient slot gets (double)(w[r] * g) for the
 * feature's gradient g. weights NULL: every weight 1 (the arithmetic of
 * before, bit for bit). */
struct esd_model_batch {
	unsigned m;               /* samples in this micro-batch */
	const float *const *rows; /* m*T pointers: rows[i*T + t] = row of sample i, table t
	                           * (with bag_off: bag_off[m*T] pointers, bag by bag) */
	double *const *row_grads; /* like rows, gradient slots (dim doubles each), accumulated
	                           * with +=; the same pointer for a row in several samples.
	                           * NULL: no row gradients; a NULL entry skips that one */
	const float *labels;      /* m labels, 0 or 1 (any value in [0, 1] works) */
	const float *dense;       /* m*D dense features, sample-major; NULL if D == 0 */
	const uint32_t *bag_off;  /* m*T + 1 bag starts into rows, or NULL (one row each) */
	const float *weights;     /* a weight per entry of rows, or NULL (all 1) */
};

struct esd_model;

/*
 * Create a model of the given shape (it holds the shape and scratch space
 * for one sample; no parameters: those are the caller's dense table).
 * Returns 0 and *out (free with esd_model_free), -EINVAL for a shape out
 * of the bounds above, -ENOMEM.
 */
int esd_model_create(const struct esd_model_shape *shape, struct esd_model **out);
void esd_model_free(struct esd_model *m);

/* The shape as created (hidden resolved to its default). */
const struct esd_model_shape *esd_model_shape(const struct esd_model *m);
/* Floats of the dense table (and of its gradient). */
size_t esd_model_dense_len(const struct esd_model *m);

/*
 * Deterministic initial dense table from seed: W1 uniform in
 * [-1/sqrt(In), 1/sqrt(In)), w2 uniform in [-1/sqrt(H), 1/sqrt(H)), b1, b2
 * and wd zero; drawn with esd_uniform_fill on streams ESD_MODEL_STREAM_W1
 * and ESD_MODEL_STREAM_W2 (reserved: no row key of the dense table
 * ESD_DENSE_TABLE, esd/proto.h, has those IDs in practice). dense: esd_model_dense_len floats.
 */
#define ESD_MODEL_STREAM_W1 UINT64_C(0xffffffffffffff01)
#define ESD_MODEL_STREAM_W2 UINT64_C(0xffffffffffffff02)
void esd_model_dense_init(const struct esd_model *m, uint64_t seed, float *dense);

/*
 * Forward and backward over a micro-batch.
 *   params      the dense table (esd_model_dense_len floats), read only
 *   b           the micro-batch (see struct esd_model_batch)
 *   k           the global batch size the loss is normalised by (>= b->m)
 *   loss        out (may be NULL): sum over the micro-batch of each
 *               sample's loss, divided by k (summing the workers' values
 *               gives the global batch's mean loss)
 *   dense_grad  accumulated (+=), esd_model_dense_len doubles; may be
 *               NULL to skip dense gradients
 *   logits      out (may be NULL): the m logits z
 * Row gradients go to b->row_grads (+=). Returns 0, or -EINVAL for a NULL
 * model/params/batch, k == 0 or k < m, or missing rows/labels/dense
 * arrays; nothing is written then.
 */
int esd_model_step(struct esd_model *m, const float *params, const struct esd_model_batch *b,
                   uint64_t k, double *loss, double *dense_grad, float *logits);

/* Logistic loss of one logit (numerically stable): log(1+exp(z)) - y z. */
double esd_model_logloss(float z, float y);

#ifdef __cplusplus
}
#endif
#endif /* ESD_MODEL_H */
