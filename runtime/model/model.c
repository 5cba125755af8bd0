/*
 * The reference trainer's model: embeddings + dense features -> one ReLU
 * layer -> logit, plus a linear (wide) term over the dense features, with
 * logistic loss. See esd/model.h for the maths and the layout of the
 * dense table.
 *
 * Everything is a plain loop in a fixed order over one sample at a time,
 * samples in batch order, so the same inputs give the same bits and a row
 * shared by several samples accumulates its gradient in sample order.
 */
#include <esd/model.h>
#include <esd/optim.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct esd_model {
	struct esd_model_shape shape;
	size_t in;        /* sum of d_t + D */
	uint32_t *dims;   /* T: each table's d_t */
	size_t *off;      /* T + 1: table t's input at x + off[t] */
	size_t dense_len; /* floats of the dense table */
	/* offsets into the dense table */
	size_t off_b1, off_w2, off_b2, off_wd;
	/* scratch for one sample */
	float *x;    /* in */
	float *hpre; /* H */
	float *dh;   /* H */
	float *dx;   /* sum of d_t */
	uint32_t *bag; /* T + 1: the sample's bag starts, relative to its first */
};

/* Each table's d_t (dims, or dim for all) and input offsets; the shape's
 * dims then point at the model's copy. 0, -EINVAL (a d_t out of 1..dim) or
 * -ENOMEM. */
static int model_tables(struct esd_model *m, const uint32_t *dims)
{
	const unsigned T = m->shape.tables;
	m->dims = calloc(T, sizeof(*m->dims));
	m->off = calloc((size_t)T + 1, sizeof(*m->off));
	if (!m->dims || !m->off)
		return -ENOMEM;
	for (unsigned t = 0; t < T; t++) {
		m->dims[t] = dims ? dims[t] : m->shape.dim;
		if (m->dims[t] < 1 || m->dims[t] > m->shape.dim)
			return -EINVAL;
		m->off[t + 1] = m->off[t] + m->dims[t];
	}
	m->shape.dims = m->dims;
	return 0;
}

int esd_model_create(const struct esd_model_shape *shape, struct esd_model **out)
{
	struct esd_model *m;
	struct esd_model_shape s;
	if (!shape || !out)
		return -EINVAL;
	s = *shape;
	if (!s.hidden)
		s.hidden = ESD_MODEL_DEFAULT_HIDDEN;
	if (s.tables < 1 || s.tables > ESD_MODEL_MAX_TABLES || s.dim < 1 ||
	    s.dim > ESD_MODEL_MAX_DIM || s.dense > ESD_MODEL_MAX_DENSE ||
	    s.hidden > ESD_MODEL_MAX_HIDDEN)
		return -EINVAL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->shape = s;
	int rc = model_tables(m, shape->dims);
	if (rc) {
		esd_model_free(m);
		return rc;
	}
	m->in = m->off[s.tables] + s.dense;
	m->off_b1 = (size_t)s.hidden * m->in;
	m->off_w2 = m->off_b1 + s.hidden;
	m->off_b2 = m->off_w2 + s.hidden;
	m->off_wd = m->off_b2 + 1;
	m->dense_len = m->off_wd + s.dense;
	m->x = calloc(m->in, sizeof(float));
	m->hpre = calloc(s.hidden, sizeof(float));
	m->dh = calloc(s.hidden, sizeof(float));
	m->dx = calloc(m->off[s.tables], sizeof(float));
	m->bag = calloc((size_t)s.tables + 1, sizeof(uint32_t));
	if (!m->x || !m->hpre || !m->dh || !m->dx || !m->bag) {
		esd_model_free(m);
		return -ENOMEM;
	}
	*out = m;
	return 0;
}

void esd_model_free(struct esd_model *m)
{
	if (!m)
		return;
	free(m->x);
	free(m->hpre);
	free(m->dh);
	free(m->dx);
	free(m->bag);
	free(m->dims);
	free(m->off);
	free(m);
}

const struct esd_model_shape *esd_model_shape(const struct esd_model *m)
{
	return &m->shape;
}

size_t esd_model_dense_len(const struct esd_model *m)
{
	return m->dense_len;
}

void esd_model_dense_init(const struct esd_model *m, uint64_t seed, float *dense)
{
	const struct esd_model_shape *s = &m->shape;
	memset(dense, 0, m->dense_len * sizeof(float));
	esd_uniform_fill(seed, ESD_MODEL_STREAM_W1, 0, 1.0f / sqrtf((float)m->in),
	                 (size_t)s->hidden * m->in, dense);
	esd_uniform_fill(seed, ESD_MODEL_STREAM_W2, 0, 1.0f / sqrtf((float)s->hidden), s->hidden,
	                 dense + m->off_w2);
}

double esd_model_logloss(float z, float y)
{
	double zd = z;
	/* log(1 + e^z) = max(z, 0) + log1p(e^-|z|) */
	return (zd > 0 ? zd : 0.0) + log1p(exp(-fabs(zd))) - (double)y * zd;
}

static float sigmoid(float z)
{
	return 1.0f / (1.0f + expf(-z));
}

/* Feature t's input: its bag's rows summed in bag order (one row: a copy;
 * empty: zeros). */
static void pool_bag(float *x, const float *const *rows, uint32_t n, unsigned dim)
{
	if (n == 1) {
		memcpy(x, rows[0], dim * sizeof(float));
		return;
	}
	memset(x, 0, dim * sizeof(float));
	for (uint32_t r = 0; r < n; r++)
		for (unsigned c = 0; c < dim; c++)
			x[c] = x[c] + rows[r][c];
}

/* The same, weighted: sum(w[r] * rows[r]) in bag order. */
static void pool_bag_w(float *x, const float *const *rows, const float *w, uint32_t n,
                       unsigned dim)
{
	memset(x, 0, dim * sizeof(float));
	for (uint32_t r = 0; r < n; r++)
		for (unsigned c = 0; c < dim; c++)
			x[c] = x[c] + w[r] * rows[r][c];
}

/* Feature input from its bag: weighted (w set) or not. */
static void pool_feature(float *x, const float *const *rows, const float *w, uint32_t n,
                         unsigned dim)
{
	if (w)
		pool_bag_w(x, rows, w, n, dim);
	else
		pool_bag(x, rows, n, dim);
}

/* A bag member's gradient slot += its feature's gradient src (times its
 * weight *w, rounded to float, when w is set). */
static void add_member_grad(double *g, const float *src, const float *w, unsigned dim)
{
	if (w)
		for (unsigned c = 0; c < dim; c++)
			g[c] = g[c] + (double)(*w * src[c]);
	else
		for (unsigned c = 0; c < dim; c++)
			g[c] = g[c] + (double)src[c];
}

/* One sample: forward, loss, backward. rows/row_grads start at its first
 * feature's bag; bag[t] .. bag[t + 1] are feature t's, relative to it. */
static double sample_step(struct esd_model *m, const float *params, const float *const *rows,
                          const float *wts, double *const *row_grads, const uint32_t *bag,
                          float label,
                          const float *dense, float inv_k, double *dense_grad, float *logit)
{
	const struct esd_model_shape *s = &m->shape;
	const size_t in = m->in, emb = m->off[s->tables];
	const unsigned H = s->hidden, D = s->dense;
	const float *W1 = params, *b1 = params + m->off_b1, *w2 = params + m->off_w2;
	const float *wd = params + m->off_wd;
	float *x = m->x, *hpre = m->hpre, *dh = m->dh, *dx = m->dx;

	for (unsigned t = 0; t < s->tables; t++)
		pool_feature(x + m->off[t], rows + bag[t], wts ? wts + bag[t] : NULL,
		             bag[t + 1] - bag[t], m->dims[t]);
	if (D)
		memcpy(x + emb, dense, D * sizeof(float));

	/* forward */
	float z = params[m->off_b2];
	for (unsigned j = 0; j < H; j++) {
		const float *wj = W1 + (size_t)j * in;
		float a = b1[j];
		for (size_t i = 0; i < in; i++)
			a = a + wj[i] * x[i];
		hpre[j] = a;
		if (a > 0.0f)
			z = z + w2[j] * a;
	}
	for (unsigned i = 0; i < D; i++)
		z = z + wd[i] * dense[i];
	if (logit)
		*logit = z;
	double loss = esd_model_logloss(z, label);

	/* backward: dL/dz of this sample, normalised by the global batch */
	float dz = (sigmoid(z) - label) * inv_k;
	for (unsigned j = 0; j < H; j++)
		dh[j] = hpre[j] > 0.0f ? dz * w2[j] : 0.0f;

	if (dense_grad) {
		double *gW1 = dense_grad, *gb1 = dense_grad + m->off_b1;
		double *gw2 = dense_grad + m->off_w2, *gwd = dense_grad + m->off_wd;
		dense_grad[m->off_b2] = dense_grad[m->off_b2] + (double)dz;
		for (unsigned i = 0; i < D; i++)
			gwd[i] = gwd[i] + (double)(dz * dense[i]);
		for (unsigned j = 0; j < H; j++) {
			if (!(hpre[j] > 0.0f))
				continue;
			double *gj = gW1 + (size_t)j * in;
			gw2[j] = gw2[j] + (double)(dz * hpre[j]);
			gb1[j] = gb1[j] + (double)dh[j];
			for (size_t i = 0; i < in; i++)
				gj[i] = gj[i] + (double)(dh[j] * x[i]);
		}
	}

	if (row_grads) {
		/* dx[i] = sum_j dh[j] * W1[j][i], j in order */
		memset(dx, 0, emb * sizeof(float));
		for (unsigned j = 0; j < H; j++) {
			if (!(hpre[j] > 0.0f))
				continue;
			const float *wj = W1 + (size_t)j * in;
			const float d = dh[j];
			for (size_t i = 0; i < emb; i++)
				dx[i] = dx[i] + d * wj[i];
		}
		for (unsigned t = 0; t < s->tables; t++) {
			const float *src = dx + m->off[t];
			const unsigned dt = m->dims[t];
			for (uint32_t r = bag[t]; r < bag[t + 1]; r++) {
				if (row_grads[r])
					add_member_grad(row_grads[r], src, wts ? &wts[r] : NULL, dt);
			}
		}
	}
	return loss;
}

int esd_model_step(struct esd_model *m, const float *params, const struct esd_model_batch *b,
                   uint64_t k, double *loss, double *dense_grad, float *logits)
{
	if (!m || !params || !b || !k || k < b->m)
		return -EINVAL;
	if (b->m && (!b->rows || !b->labels || (m->shape.dense && !b->dense)))
		return -EINVAL;
	const unsigned T = m->shape.tables, D = m->shape.dense;
	const size_t nf = (size_t)b->m * T;
	if (b->bag_off && b->bag_off[0] != 0)
		return -EINVAL;
	for (size_t j = 0; b->bag_off && j < nf; j++)
		if (b->bag_off[j + 1] < b->bag_off[j])
			return -EINVAL;
	const size_t nrows = b->bag_off ? b->bag_off[nf] : nf;
	for (size_t i = 0; i < nrows; i++)
		if (!b->rows[i])
			return -EINVAL;
	const float inv_k = 1.0f / (float)k;
	double sum = 0.0;
	for (unsigned i = 0; i < b->m; i++) {
		size_t first = b->bag_off ? b->bag_off[(size_t)i * T] : (size_t)i * T;
		for (unsigned t = 0; t <= T; t++)
			m->bag[t] = b->bag_off ? (uint32_t)(b->bag_off[(size_t)i * T + t] - first) : t;
		sum += sample_step(m, params, b->rows + first, b->weights ? b->weights + first : NULL,
		                   b->row_grads ? b->row_grads + first : NULL, m->bag, b->labels[i],
		                   D ? b->dense + (size_t)i * D : NULL, inv_k, dense_grad,
		                   logits ? &logits[i] : NULL);
	}
	if (loss)
		*loss = sum / (double)k;
	return 0;
}
