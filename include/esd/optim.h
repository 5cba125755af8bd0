/*
 * esd/optim.h - the row optimizers (SGD, Adagrad, Adam) and deterministic
 * row initialisation, shared by the PS, the node daemon and the reference
 * trainer.
 *
 * Model
 * -----
 * A row is value[dim] plus esd_optimizer_state_floats(opt) * dim floats of
 * optimizer state (Adagrad: one accumulator per element; Adam: first
 * moments m[dim] then second moments v[dim]) plus a clock: the number of
 * optimizer updates applied to the row so far (0 for a fresh row).
 *
 * One update per iteration: in iteration t, a row that appears in at least
 * one sample of the global batch is updated exactly once, with the sum of
 * all its gradients in that batch, even when that sum is zero (Adam still
 * moves the value then). A row trained by one worker is updated in that
 * worker's node daemon; a row trained by several has its partial sums
 * added at the PS in worker-rank order (esd_optim_grad_add) and is updated
 * there. After the update the caller bumps the row's clock.
 *
 * Gradient sums are doubles. Each per-sample contribution is a float
 * computed the same way wherever it is computed (esd/model.h); it is
 * accumulated in double (per worker, then across workers at the PS) and
 * rounded to float once, by esd_optim_apply_sum. A double sum of float
 * terms is exact to far below a float's precision whatever the order, so
 * the distributed run and the single-process reference round to the same
 * float in practice (bit-identical in the tests; not a theorem: a sum that
 * lands within 2^-29 ulp of a float rounding boundary could still round
 * differently). Summing in float instead leaves differences of about 1e-7
 * absolute after a few dozen Adagrad/Adam iterations (see docs/model.md).
 * The runtime therefore carries partial gradient sums as doubles: the
 * gradient slot of a row and the dense gradient are doubles, and an
 * update push of a gradient carries dim doubles.
 *
 * Update rules (g = summed gradient; all arithmetic in float unless said):
 *   SGD:     value -= lr * g
 *   Adagrad: acc += g * g;  value -= lr * g / (sqrt(acc) + eps)
 *            (acc starts at initial_accumulator; PyTorch's rule)
 *   Adam:    m = beta1 * m + (1 - beta1) * g
 *            v = beta2 * v + (1 - beta2) * g * g
 *            value -= step * m / (sqrt(v) / bc2 + eps)
 *            with step = lr / (1 - beta1^t) and bc2 = sqrt(1 - beta2^t),
 *            both computed once per row in double and rounded to float;
 *            t = clock + 1 (the 1-based count of this row's updates, the
 *            "lazy"/sparse Adam convention: a row that skips iterations
 *            does not age). m and v start at 0.
 *
 * Caveats: determinism
 * --------------------
 * The same inputs give bit-identical outputs on every process of a job:
 * the library is compiled with -ffp-contract=off (no fused multiply-add
 * on one call site and not on another), every loop is element-wise (no
 * reductions whose order a vectoriser could change), and the only libm
 * calls (sqrtf, correctly rounded; pow in double for Adam's bias
 * correction) are the same functions of the same library on one host.
 * Processes on different hosts must run the same libm for bit identity.
 *
 * Row initialisation: esd_row_init fills a row from (seed, key) alone:
 * value[i] = a * u_i, u_i uniform on the 2^24-point grid of [-1, 1),
 * a = 1 / sqrt(dim) (float), drawn from a splitmix64 counter stream
 * keyed by (seed, key, i). Every process computes the same row without
 * talking to anyone.
 *
 * Thread safety: every function is pure over the memory it is given.
 */
#ifndef ESD_OPTIM_H
#define ESD_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include <esd/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Hyper-parameters of one optimizer. Plain data: copy it, send it. */
struct esd_optim_params {
	enum esd_optimizer opt;
	float lr;                  /* learning rate, > 0 */
	float eps;                 /* Adagrad, Adam: added to the denominator, >= 0 */
	float beta1;               /* Adam: first-moment decay, in [0, 1) */
	float beta2;               /* Adam: second-moment decay, in [0, 1) */
	float initial_accumulator; /* Adagrad: starting value of acc, >= 0 */
};

/*
 * Fill *p with the defaults of optimizer opt (PyTorch's): SGD lr 0.01;
 * Adagrad lr 0.01, eps 1e-10, initial_accumulator 0; Adam lr 0.001,
 * beta1 0.9, beta2 0.999, eps 1e-8.
 * Returns 0, or -EINVAL for an unknown optimizer (p is then zeroed).
 */
int esd_optim_params_default(struct esd_optim_params *p, enum esd_optimizer opt);

/*
 * Check hyper-parameters before use (a configuration file or a peer may
 * hand us anything). Returns 0, or -EINVAL when p is NULL, the optimizer
 * is unknown, or a field is out of its range above (NaN included).
 */
int esd_optim_params_check(const struct esd_optim_params *p);

/* Parse "sgd", "adagrad", "adam" (case-insensitive). Returns 0 or -EINVAL. */
int esd_optim_parse(const char *name, enum esd_optimizer *out);
/* Name of an optimizer ("sgd", ...), "unknown" for others. Static string. */
const char *esd_optim_name(enum esd_optimizer opt);

/* Floats of optimizer state of a whole row: state_floats(opt) * dim. */
static inline size_t esd_optim_state_len(enum esd_optimizer opt, unsigned dim)
{
	return (size_t)esd_optimizer_state_floats(opt) * dim;
}

/*
 * Initialise the optimizer state of a fresh row: Adagrad's accumulator to
 * initial_accumulator, Adam's moments to 0; nothing for SGD (state may be
 * NULL then). p must have passed esd_optim_params_check.
 */
void esd_optim_state_init(const struct esd_optim_params *p, unsigned dim, float *state);

/*
 * Apply one update to a row: value[dim] and state[] (layout above) are
 * updated in place from grad[dim]. t is the 1-based update count of this
 * row (its clock before the update + 1); only Adam reads it, and t == 0
 * is treated as 1. grad may alias nothing else. p must have passed
 * esd_optim_params_check.
 */
void esd_optim_apply(const struct esd_optim_params *p, unsigned dim, float *value, float *state,
                     const float *grad, uint64_t t);

/*
 * The same from a double gradient sum: each grad_sum[i] is rounded to
 * float, then exactly the arithmetic of esd_optim_apply follows (the two
 * give the same bits for the same rounded gradient). What the PS, the
 * node daemon and the reference call at the end of an iteration.
 */
void esd_optim_apply_sum(const struct esd_optim_params *p, unsigned dim, float *value, float *state,
                         const double *grad_sum, uint64_t t);

/* acc[i] += g[i] for i < dim: the PS's sum of partial gradient sums,
 * called in worker-rank order. */
void esd_optim_grad_add(unsigned dim, double *acc, const double *g);

/*
 * Deterministic initial value of row key under job seed (see the
 * overview): out[dim]. Same (seed, key, dim) => same bits everywhere.
 */
void esd_row_init(uint64_t seed, esd_key_t key, unsigned dim, float *out);

/*
 * A row of a table of d floats stored in dim (model.dims, docs/design.md
 * §6): out[0, d) as esd_row_init(seed, key, d), out[d, dim) zero; d 0 or
 * above dim means dim.
 */
void esd_row_init_table(uint64_t seed, esd_key_t key, unsigned d, unsigned dim, float *out);

/*
 * Uniform draws on [-scale, scale) from the same counter stream as
 * esd_row_init (esd_row_init is this with scale = 1/sqrt(dim)); used for
 * the dense table, whose layers have their own scales. stream picks an
 * independent stream (any 64-bit value), first the index of the first
 * draw.
 */
void esd_uniform_fill(uint64_t seed, uint64_t stream, uint64_t first, float scale, size_t n,
                      float *out);

/* Every draw above goes through esd_splitmix64 (esd/types.h). */

#ifdef __cplusplus
}
#endif
#endif /* ESD_OPTIM_H */
