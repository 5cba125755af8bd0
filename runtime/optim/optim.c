/*
 * Row optimizers (SGD, Adagrad, Adam) and deterministic row initialisation.
 *
 * The PS and every node daemon apply these to the same rows, and the
 * correctness bar compares their results bit for bit across runs, so each
 * function is a plain element-wise loop compiled with -ffp-contract=off:
 * a vectoriser may widen it, but never reorder or fuse its roundings.
 */
#include <esd/optim.h>

#include <errno.h>
#include <math.h>
#include <string.h>
#include <strings.h>

int esd_optim_params_default(struct esd_optim_params *p, enum esd_optimizer opt)
{
	memset(p, 0, sizeof(*p));
	p->opt = opt;
	switch (opt) {
	case ESD_OPT_SGD:
		p->lr = 0.01f;
		return 0;
	case ESD_OPT_ADAGRAD:
		p->lr = 0.01f;
		p->eps = 1e-10f;
		p->initial_accumulator = 0.0f;
		return 0;
	case ESD_OPT_ADAM:
		p->lr = 0.001f;
		p->eps = 1e-8f;
		p->beta1 = 0.9f;
		p->beta2 = 0.999f;
		return 0;
	}
	memset(p, 0, sizeof(*p));
	return -EINVAL;
}

static int in_unit(float x)
{
	return x >= 0.0f && x < 1.0f; /* false for NaN */
}

int esd_optim_params_check(const struct esd_optim_params *p)
{
	if (!p)
		return -EINVAL;
	if (!(p->lr > 0.0f) || !isfinite(p->lr))
		return -EINVAL;
	switch (p->opt) {
	case ESD_OPT_SGD:
		return 0;
	case ESD_OPT_ADAGRAD:
		if (!(p->eps >= 0.0f) || !isfinite(p->eps))
			return -EINVAL;
		if (!(p->initial_accumulator >= 0.0f) || !isfinite(p->initial_accumulator))
			return -EINVAL;
		return 0;
	case ESD_OPT_ADAM:
		if (!(p->eps >= 0.0f) || !isfinite(p->eps))
			return -EINVAL;
		if (!in_unit(p->beta1) || !in_unit(p->beta2))
			return -EINVAL;
		return 0;
	}
	return -EINVAL;
}

int esd_optim_parse(const char *name, enum esd_optimizer *out)
{
	static const struct {
		const char *name;
		enum esd_optimizer opt;
	} names[] = {{"sgd", ESD_OPT_SGD}, {"adagrad", ESD_OPT_ADAGRAD}, {"adam", ESD_OPT_ADAM}};
	if (!name || !out)
		return -EINVAL;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (!strcasecmp(name, names[i].name)) {
			*out = names[i].opt;
			return 0;
		}
	}
	return -EINVAL;
}

const char *esd_optim_name(enum esd_optimizer opt)
{
	switch (opt) {
	case ESD_OPT_SGD:
		return "sgd";
	case ESD_OPT_ADAGRAD:
		return "adagrad";
	case ESD_OPT_ADAM:
		return "adam";
	}
	return "unknown";
}

void esd_optim_state_init(const struct esd_optim_params *p, unsigned dim, float *state)
{
	size_t n = esd_optim_state_len(p->opt, dim);
	float v = p->opt == ESD_OPT_ADAGRAD ? p->initial_accumulator : 0.0f;
	for (size_t i = 0; i < n; i++)
		state[i] = v;
}

static void apply_sgd(float lr, unsigned dim, float *restrict value, const float *restrict grad)
{
	for (unsigned i = 0; i < dim; i++)
		value[i] = value[i] - lr * grad[i];
}

static void apply_adagrad(const struct esd_optim_params *p, unsigned dim, float *restrict value,
                          float *restrict acc, const float *restrict grad)
{
	const float lr = p->lr, eps = p->eps;
	for (unsigned i = 0; i < dim; i++) {
		float g = grad[i];
		float a = acc[i] + g * g;
		acc[i] = a;
		value[i] = value[i] - lr * g / (sqrtf(a) + eps);
	}
}

static void apply_adam(const struct esd_optim_params *p, unsigned dim, float *restrict value,
                       float *restrict m, float *restrict v, const float *restrict grad, uint64_t t)
{
	const float b1 = p->beta1, b2 = p->beta2, eps = p->eps;
	const float c1 = 1.0f - b1, c2 = 1.0f - b2;
	double td = (double)(t ? t : 1);
	/* Bias corrections once per row, in double, then rounded: the same
	 * pow() of the same libm on every process. */
	const float step = (float)((double)p->lr / (1.0 - pow((double)b1, td)));
	const float bc2 = (float)sqrt(1.0 - pow((double)b2, td));
	for (unsigned i = 0; i < dim; i++) {
		float g = grad[i];
		float mi = b1 * m[i] + c1 * g;
		float vi = b2 * v[i] + c2 * (g * g);
		m[i] = mi;
		v[i] = vi;
		value[i] = value[i] - step * mi / (sqrtf(vi) / bc2 + eps);
	}
}

void esd_optim_apply(const struct esd_optim_params *p, unsigned dim, float *value, float *state,
                     const float *grad, uint64_t t)
{
	switch (p->opt) {
	case ESD_OPT_SGD:
		apply_sgd(p->lr, dim, value, grad);
		break;
	case ESD_OPT_ADAGRAD:
		apply_adagrad(p, dim, value, state, grad);
		break;
	case ESD_OPT_ADAM:
		apply_adam(p, dim, value, state, state + dim, grad, t);
		break;
	}
}

void esd_optim_apply_sum(const struct esd_optim_params *p, unsigned dim, float *value, float *state,
                         const double *grad_sum, uint64_t t)
{
	enum { CHUNK = 256 };
	float g[CHUNK];
	for (unsigned at = 0; at < dim; at += CHUNK) {
		unsigned n = dim - at < CHUNK ? dim - at : CHUNK;
		for (unsigned i = 0; i < n; i++)
			g[i] = (float)grad_sum[at + i];
		switch (p->opt) {
		case ESD_OPT_SGD:
			apply_sgd(p->lr, n, value + at, g);
			break;
		case ESD_OPT_ADAGRAD:
			apply_adagrad(p, n, value + at, state + at, g);
			break;
		case ESD_OPT_ADAM:
			apply_adam(p, n, value + at, state + at, state + dim + at, g, t);
			break;
		}
	}
}

void esd_optim_grad_add(unsigned dim, double *restrict acc, const double *restrict g)
{
	for (unsigned i = 0; i < dim; i++)
		acc[i] = acc[i] + g[i];
}

/* Draw i of stream (seed, stream): splitmix64 over a counter, so any draw
 * is computed directly, independent of how many were drawn before. */
static inline float draw_unit(uint64_t base, uint64_t i)
{
	uint64_t x = esd_splitmix64(base + i * ESD_SPLITMIX64_GAMMA);
	/* top 24 bits -> integer in [-2^23, 2^23) -> exact float in [-1, 1) */
	int32_t u = (int32_t)(x >> 40) - (1 << 23);
	return (float)u * (1.0f / 8388608.0f);
}

static uint64_t stream_base(uint64_t seed, uint64_t stream)
{
	return esd_splitmix64(esd_splitmix64(seed) ^ stream);
}

void esd_uniform_fill(uint64_t seed, uint64_t stream, uint64_t first, float scale, size_t n,
                      float *out)
{
	uint64_t base = stream_base(seed, stream);
	for (size_t i = 0; i < n; i++)
		out[i] = scale * draw_unit(base, first + i);
}

void esd_row_init(uint64_t seed, esd_key_t key, unsigned dim, float *out)
{
	if (!dim)
		return;
	esd_uniform_fill(seed, key, 0, 1.0f / sqrtf((float)dim), dim, out);
}

void esd_row_init_table(uint64_t seed, esd_key_t key, unsigned d, unsigned dim, float *out)
{
	if (!d || d > dim)
		d = dim;
	esd_row_init(seed, key, d, out);
	for (unsigned i = d; i < dim; i++)
		out[i] = 0.0f;
}
