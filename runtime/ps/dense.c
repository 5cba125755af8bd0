/*
 * The dense table (the reference model's MLP) on shard 0: one float vector
 * cut into rows of dim floats on the wire (keys ESD_DENSE_TABLE:i), fully
 * synchronised every iteration: every worker pushes its partial gradient,
 * the shard sums them in worker-rank order and applies one optimizer step.
 */
#include "ps.h"

#include <esd/err.h>
#include <esd/model.h>
#include <stdlib.h>
#include <string.h>

int ps_dense_init(struct ps *ps)
{
	struct esd_model_shape sh = {.tables = ps->tables, .dim = ps->job.dim,
				     .dense = ps->dense, .hidden = ps->job.hidden,
				     .dims = ps->job.ntable_dims ? ps->job.table_dims : NULL};
	struct esd_model *m;
	int rc = esd_model_create(&sh, &m);
	if (rc)
		return rc;
	size_t len = esd_model_dense_len(m), sf = esd_optimizer_state_floats(ps->job.optim.opt);
	ps->dtab.len = len;
	ps->dtab.val = calloc(len, sizeof(float));
	ps->dtab.state = calloc(len * sf + 1, sizeof(float));
	ps->dtab.stage = calloc((size_t)ps->job.n * len, sizeof(float));
	/* kept for the life of the shard: the apply runs every iteration */
	ps->dtab.sum = calloc(len, sizeof(double));
	ps->dtab.in = calloc(len, sizeof(double));
	if (!ps->dtab.val || !ps->dtab.state || !ps->dtab.stage || !ps->dtab.sum || !ps->dtab.in) {
		esd_model_free(m);
		return -ENOMEM;
	}
	esd_model_dense_init(m, ps->job.seed, ps->dtab.val);
	esd_model_free(m);
	/* the state of a vector of len floats: the optimizer's layout per element
	 * block, initialised like a row of dim = len */
	esd_optim_state_init(&ps->job.optim, (unsigned)len, ps->dtab.state);
	return 0;
}

void ps_dense_free(struct ps *ps)
{
	free(ps->dtab.val);
	free(ps->dtab.state);
	free(ps->dtab.stage);
	free(ps->dtab.sum);
	free(ps->dtab.in);
	ps->dtab.val = ps->dtab.state = ps->dtab.stage = NULL;
	ps->dtab.sum = ps->dtab.in = NULL;
}

static int chunk(const struct ps *ps, uint64_t key, size_t *off, size_t *n)
{
	uint64_t i = esd_key_id(key), dim = ps->job.dim;
	if (!ps->dtab.val || i * dim >= ps->dtab.len)
		return -EINVAL;
	*off = i * dim;
	*n = ps->dtab.len - *off < dim ? ps->dtab.len - *off : dim;
	return 0;
}

int ps_dense_read_locked(const struct ps *ps, uint64_t key, float *value, float *state)
{
	size_t off, n, dim = ps->job.dim;
	if (chunk(ps, key, &off, &n))
		return -EINVAL;
	memcpy(value, ps->dtab.val + off, n * sizeof(float));
	memset(value + n, 0, (dim - n) * sizeof(float)); /* the last row's padding */
	if (state) /* daemons never update the dense table: its state stays here */
		memset(state, 0, esd_optim_state_len(ps->job.optim.opt, (unsigned)dim) * 4);
	return 0;
}

int ps_dense_stage_locked(struct ps *ps, uint32_t worker, uint64_t key, const float *grad)
{
	size_t off, n;
	if (chunk(ps, key, &off, &n))
		return -EINVAL;
	memcpy(ps->dtab.stage + (size_t)worker * ps->dtab.len + off, grad, n * sizeof(float));
	ps->dtab.staged = true;
	return 0;
}

int ps_dense_apply_locked(struct ps *ps)
{
	if (!ps->dtab.staged)
		return 0;
	size_t len = ps->dtab.len;
	double *sum = ps->dtab.sum, *in = ps->dtab.in;
	memset(sum, 0, len * sizeof(double));
	for (uint32_t w = 0; w < ps->job.n; w++) {
		const float *g = ps->dtab.stage + (size_t)w * len;
		for (size_t i = 0; i < len; i++)
			in[i] = g[i];
		esd_optim_grad_add((unsigned)len, sum, in);
	}
	esd_optim_apply_sum(&ps->job.optim, (unsigned)len, ps->dtab.val, ps->dtab.state, sum,
			    ps->dtab.clock + 1);
	ps->dtab.clock++;
	memset(ps->dtab.stage, 0, (size_t)ps->job.n * len * sizeof(float));
	ps->dtab.staged = false;
	return 0;
}
